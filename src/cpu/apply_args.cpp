// src/cpu/apply_args.cpp: the apply() contract made executable: argument checks, and which
// position stream each pair reads.
//
// check_apply_arguments() is the one place where apply()'s arguments are validated (once, at
// the entry point, before any memory is written). Every message has the form
//   "apply: <argument> <what was expected> (got <value>)"
// and names the argument as the caller spells it (q, k, q_out, k_out, positions.values,
// positions.cu_seqlens, options.rotary_offset, ...). Nothing is
// written by a call that throws: the checks run before any kernel touches memory.
//
// What the checks guarantee a kernel (which may then assume them):
//   - every view has a known dtype and layout, all four share q's layout, outputs have their
//     input's shape, q and k agree on batch and seq (head counts and head dims may differ), and
//     each head holds options.rotary_offset + rotary_dim elements;
//   - shapes are >= 0, element counts and byte spans fit in int64, non-empty views have data,
//     aligned to their element size;
//   - strides are >= 0; no two elements of an output share an address (see check_output_strides
//     for the exact, slightly conservative, rule);
//   - an output and an input either are the same view (in place: same data, dtype and strides;
//     q_out with q, k_out with k only) or touch no common byte (see may_overlap: exact for views
//     with equal strides such as q and k of one packed qkv buffer, conservative otherwise);
//     q_out and k_out touch no common byte;
//   - k is absent (data == nullptr and shape all 0) exactly when k_out is: then q alone is rotated;
//   - every position a token will read is in [0, table.max_position()], and THD cu_seqlens
//     describe the token axis;
//   - every present view is on q's device, a known one; no tensor data is read (docs/backends.md).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "rotary/apply.hpp"
#include "rotary/apply_cos_sin.hpp"
#include "rotary/error.hpp"
#include "cpu/backends.hpp"
#include "core/shape_text.hpp"

namespace rotary {

std::string_view to_string(Positions::Source source) {
  switch (source) {
    case Positions::Source::Arange: return "arange";
    case Positions::Source::PerToken: return "per_token";
    case Positions::Source::SequenceOffsets: return "sequence_offsets";
  }
  return "unknown";
}

std::string_view to_string(Direction direction) {
  switch (direction) {
    case Direction::Forward: return "forward";
    case Direction::Backward: return "backward";
  }
  return "unknown";
}

int position_streams(const RopeSpec& spec) {
  switch (spec.axes) {
    case PositionAxes::Single: return 1;
    case PositionAxes::MRope: return 3;     // t, h, w
    case PositionAxes::Vision2D: return 2;  // row, column
  }
  return 1;
}

// Which stream pair i reads (docs/formulas.md section 12):
//   M-RoPE chunked (HF apply_multimodal_rotary_pos_emb, mrope_section*2 over cat(freqs, freqs)):
//     t for i < s_t, h for i < s_t + s_h, w otherwise;
//   M-RoPE interleaved (HF Qwen3VLTextRotaryEmbedding.apply_interleaved_mrope, slice(offset,
//     3*s, 3) for offsets 1 (h) and 2 (w)): h if i % 3 == 1 and i < 3 s_h, w if i % 3 == 2 and
//     i < 3 s_w, t otherwise;
//   2-D vision (HF Qwen2-VL VisionRotaryEmbedding / apply_rotary_pos_emb_vision: cat(row freqs,
//     column freqs)): row for i < d/4, column otherwise. The table already restarts the
//     frequency index for the column half (frequencies.cpp, default_theta_all).
std::vector<int> pair_streams(const RopeSpec& spec) {
  const int64_t num_pairs = spec.rotary_dim / 2;
  std::vector<int> streams(static_cast<size_t>(std::max<int64_t>(num_pairs, 0)), 0);
  switch (spec.axes) {
    case PositionAxes::Single:
      break;
    case PositionAxes::MRope: {
      const auto [s_t, s_h, s_w] = spec.mrope.pairs;
      for (int64_t i = 0; i < num_pairs; ++i) {
        int stream = 0;
        if (spec.mrope.assignment == MRopeAssignment::Chunked) {
          stream = i < s_t ? 0 : (i < s_t + s_h ? 1 : 2);
        } else if (i % 3 == 1 && i < 3 * s_h) {
          stream = 1;
        } else if (i % 3 == 2 && i < 3 * s_w) {
          stream = 2;
        }
        streams[static_cast<size_t>(i)] = stream;
      }
      break;
    }
    case PositionAxes::Vision2D:
      for (int64_t i = 0; i < num_pairs; ++i) streams[static_cast<size_t>(i)] = i < spec.rotary_dim / 4 ? 0 : 1;
      break;
  }
  return streams;
}

namespace {

// Signed 128-bit arithmetic for the overlap search: offsets there are sums of products that
// each fit in int64 but whose differences may not.
__extension__ typedef __int128 Int128;

template <typename... Parts>
[[noreturn]] void fail(Parts&&... parts) {
  throw Error(detail::concat("apply: ", std::forward<Parts>(parts)...));
}

bool valid_dtype(DType dtype) {
  return dtype == DType::F32 || dtype == DType::BF16 || dtype == DType::F16 || dtype == DType::F64;
}

bool valid_layout(Layout layout) {
  return layout == Layout::BSHD || layout == Layout::BHSD || layout == Layout::SBHD || layout == Layout::THD;
}

std::string strides_text(const TensorView& view) {
  std::ostringstream out;
  out << "[";
  for (int axis = 0; axis < layout_rank(view.layout); ++axis) out << (axis ? ", " : "") << view.stride_elems[axis];
  out << "]";
  return out.str();
}

// The axis names of a layout, for messages ("stride_elems[1] (seq)").
const char* axis_name(Layout layout, int axis) {
  static const char* const kNames[4][4] = {
      {"batch", "seq", "heads", "dim"},    // BSHD
      {"batch", "heads", "seq", "dim"},    // BHSD
      {"seq", "batch", "heads", "dim"},    // SBHD
      {"tokens", "heads", "dim", "unused"},  // THD
  };
  return kNames[static_cast<int>(layout)][axis];
}

// One checked view: its name in messages and what the later checks need.
struct CheckedView {
  const char* name = "";
  const TensorView* view = nullptr;
  bool present = false;  // false: k / k_out not given
  int64_t elements = 0;
  NamedAxes axes;
  int64_t span_bytes = 0;  // bytes from data to one past the last byte an element occupies (0 if empty)
};

// A view is absent (k / k_out only) when it has no data and no shape at all: TensorView{}.
bool is_absent(const TensorView& view) {
  if (view.data != nullptr) return false;
  const int rank = valid_layout(view.layout) ? layout_rank(view.layout) : 4;
  for (int axis = 0; axis < rank; ++axis) {
    if (view.shape[axis] != 0) return false;
  }
  return true;
}

// dtype, layout, shape, element count, null data, strides and the byte span of one view.
CheckedView check_view(const char* name, const TensorView& view, bool may_be_absent) {
  CheckedView checked;
  checked.name = name;
  checked.view = &view;
  if (may_be_absent && is_absent(view)) return checked;
  checked.present = true;
  if (const std::string bad = backends::device_problem(view.device); !bad.empty()) fail(name, " device ", bad);

  if (!valid_dtype(view.dtype)) {
    fail(name, " dtype must be float32, bfloat16, float16 or float64 (got enum value ", static_cast<int>(view.dtype),
         ")");
  }
  if (!valid_layout(view.layout)) {
    fail(name, " layout must be bshd, bhsd, sbhd or thd (got enum value ", static_cast<int>(view.layout), ")");
  }
  const int rank = layout_rank(view.layout);
  for (int axis = 0; axis < rank; ++axis) {
    if (view.shape[axis] < 0) {
      fail(name, " shape[", axis, "] (", axis_name(view.layout, axis), ") must be >= 0 (got ", view.shape[axis],
           ", shape ", shape_text(view), ")");
    }
  }
  try {
    checked.elements = element_count(view, name);
  } catch (const Error& error) {
    throw Error(detail::concat("apply: ", error.what()));
  }
  // batch * seq is the token count, needed even when heads or dim is 0 (element_count is then 0
  // without multiplying the rest).
  checked.axes = named_axes(view);
  int64_t tokens = 0;
  if (__builtin_mul_overflow(checked.axes.batch, checked.axes.seq, &tokens)) {
    fail(name, " token count batch x seq must fit in int64 (got shape ", shape_text(view), ")");
  }
  if (checked.elements > 0 && view.data == nullptr) {
    fail(name, " data must not be null for a non-empty tensor (got null data with shape ", shape_text(view), ")");
  }
  // Elements are read and written as their type (float*, uint16_t*, double*), which C++ and
  // the kernels' scalar paths require aligned. NumPy can make unaligned arrays; torch does not.
  const auto alignment = static_cast<uintptr_t>(dtype_size(view.dtype));
  if (checked.elements > 0 && reinterpret_cast<uintptr_t>(view.data) % alignment != 0) {
    fail(name, " data must be aligned to ", dtype_size(view.dtype), " bytes for ", to_string(view.dtype),
         " (got address ", view.data, ")");
  }
  for (int axis = 0; axis < rank; ++axis) {
    if (view.stride_elems[axis] < 0) {
      fail(name, " stride_elems[", axis, "] (", axis_name(view.layout, axis), ") must be >= 0 (got ",
           view.stride_elems[axis], ")");
    }
  }
  if (checked.elements > 0) {
    // The largest element offset, sum (n - 1) * stride, and the bytes through the last element.
    int64_t last = 0;
    bool overflow = false;
    for (int axis = 0; axis < rank; ++axis) {
      int64_t term = 0;
      overflow |= __builtin_mul_overflow(view.shape[axis] - 1, view.stride_elems[axis], &term);
      overflow |= __builtin_add_overflow(last, term, &last);
    }
    int64_t bytes = 0;
    overflow |= __builtin_add_overflow(last, int64_t{1}, &bytes);
    overflow |= __builtin_mul_overflow(bytes, dtype_size(view.dtype), &bytes);
    if (overflow) {
      fail(name, " shape and strides must address fewer than 2^63 bytes (got shape ", shape_text(view),
           ", stride_elems ", strides_text(view), ")");
    }
    checked.span_bytes = bytes;
  }
  return checked;
}

// One device per call, q's (x's for apply_cos_sin): "k is on cuda:0 but q is on cpu". Absent k has none.
void check_same_device(const CheckedView& q, const CheckedView& view) {
  if (!view.present || view.view->device == q.view->device) return;
  fail(view.name, " is on ", to_string(view.view->device), " but ", q.name, " is on ", to_string(q.view->device));
}

// Output views: no two elements at one address, so that every element is written once.
// The rule checked: sorted by stride, each axis of extent > 1 has a stride greater than the
// offset span of all smaller-stride axes together (a "nested" layout: contiguous, permuted,
// sliced and padded views all are). That is sufficient for distinct addresses; it rejects a
// few exotic injective layouts (strides that interleave without nesting), which is the price
// of a check that costs O(rank log rank). A stride of 0 on an axis of extent > 1 always fails.
void check_output_strides(const CheckedView& out) {
  if (!out.present || out.elements == 0) return;
  const TensorView& view = *out.view;
  const int rank = layout_rank(view.layout);
  std::vector<int> axes;
  for (int axis = 0; axis < rank; ++axis) {
    if (view.shape[axis] <= 1) continue;
    if (view.stride_elems[axis] == 0) {
      fail(out.name, " stride_elems[", axis, "] (", axis_name(view.layout, axis),
           ") must be > 0 on an output axis of extent ", view.shape[axis],
           ", or its elements would share an address (got 0)");
    }
    axes.push_back(axis);
  }
  std::sort(axes.begin(), axes.end(),
            [&](int a, int b) { return view.stride_elems[a] < view.stride_elems[b]; });
  int64_t span = 0;  // largest offset reachable through the axes before this one; fits (checked)
  for (int axis : axes) {
    if (view.stride_elems[axis] <= span) {
      fail(out.name, " strides must give every output element its own address (got stride_elems ",
           strides_text(view), " for shape ", shape_text(view), ": stride_elems[", axis, "] = ",
           view.stride_elems[axis], " is not above the span ", span, " of the axes with smaller strides)");
    }
    span += (view.shape[axis] - 1) * view.stride_elems[axis];
  }
}

bool same_strides(const TensorView& a, const TensorView& b) {
  for (int axis = 0; axis < layout_rank(a.layout); ++axis) {
    if ((a.shape[axis] > 1 || b.shape[axis] > 1) && a.stride_elems[axis] != b.stride_elems[axis]) return false;
  }
  return true;
}

// In place: the output is the input view itself.
bool exact_alias(const CheckedView& in, const CheckedView& out) {
  return in.view->data == out.view->data && in.view->dtype == out.view->dtype && same_strides(*in.view, *out.view);
}

// Is there k with k_a in [lo_a, hi_a] and sum k_a * stride_a == target? Depth-first over the axes
// by decreasing stride; the bounds of what the remaining axes can still add prune each level to
// a few candidates when strides nest. `budget` caps the work: when it runs out the answer is
// "maybe", reported as true (overlap), which is the conservative side.
struct LatticeAxis {
  int64_t stride = 0;
  int64_t lo = 0;  // -(extent of b - 1)
  int64_t hi = 0;  // extent of a - 1
};

Int128 floor_div(Int128 a, Int128 b) {  // b > 0
  Int128 q = a / b;
  if ((a % b != 0) && (a < 0)) --q;
  return q;
}

bool lattice_hit(const std::vector<LatticeAxis>& axes, const std::vector<Int128>& rest_min,
                 const std::vector<Int128>& rest_max, size_t index, Int128 target, int64_t& budget) {
  if (index == axes.size()) return target == 0;
  if (--budget < 0) return true;
  const LatticeAxis& axis = axes[index];
  // target - k * stride must be reachable by the remaining axes: in [rest_min, rest_max].
  Int128 k_lo = -floor_div(-(target - rest_max[index + 1]), axis.stride);  // ceil
  Int128 k_hi = floor_div(target - rest_min[index + 1], axis.stride);
  k_lo = std::max<Int128>(k_lo, axis.lo);
  k_hi = std::min<Int128>(k_hi, axis.hi);
  for (Int128 k = k_lo; k <= k_hi; ++k) {
    if (lattice_hit(axes, rest_min, rest_max, index + 1, target - k * axis.stride, budget)) return true;
  }
  return false;
}

// May an element of `a` share a byte with an element of `b`? Exact when the two views have the
// same dtype and strides and their base addresses differ by whole elements (q and k cut from one
// packed qkv buffer, or a view and a shifted copy of itself): then the question is whether
// base_b - base_a = sum k_axis * stride_axis for some k_axis in [-(n_b - 1), n_a - 1], answered by
// lattice_hit. Otherwise conservative: the byte spans [data, data + span) intersect.
bool may_overlap(const CheckedView& a, const CheckedView& b) {
  if (!a.present || !b.present || a.elements == 0 || b.elements == 0) return false;
  const auto a_begin = reinterpret_cast<uintptr_t>(a.view->data);
  const auto b_begin = reinterpret_cast<uintptr_t>(b.view->data);
  const uintptr_t a_end = a_begin + static_cast<uintptr_t>(a.span_bytes);
  const uintptr_t b_end = b_begin + static_cast<uintptr_t>(b.span_bytes);
  if (a_end <= b_begin || b_end <= a_begin) return false;
  if (a.view->dtype != b.view->dtype || !same_strides(*a.view, *b.view)) return true;
  const int64_t element_bytes = dtype_size(a.view->dtype);
  const Int128 delta_bytes = static_cast<Int128>(b_begin) - static_cast<Int128>(a_begin);
  if (delta_bytes % element_bytes != 0) return true;

  // Addresses: a_begin + sum i * s (0 <= i < n_a) == b_begin + sum j * s (0 <= j < n_b)
  //   <=>  sum (i - j) * s == delta, with k = i - j in [-(n_b - 1), n_a - 1].
  std::vector<LatticeAxis> axes;
  for (int axis = 0; axis < layout_rank(a.view->layout); ++axis) {
    const int64_t stride = a.view->stride_elems[axis];
    const int64_t n_a = a.view->shape[axis];
    const int64_t n_b = b.view->shape[axis];
    if (stride == 0 || (n_a <= 1 && n_b <= 1)) continue;  // adds nothing to any address
    axes.push_back({stride, -(n_b - 1), n_a - 1});
  }
  std::sort(axes.begin(), axes.end(), [](const LatticeAxis& x, const LatticeAxis& y) { return x.stride > y.stride; });
  std::vector<Int128> rest_min(axes.size() + 1, 0);
  std::vector<Int128> rest_max(axes.size() + 1, 0);
  for (size_t i = axes.size(); i-- > 0;) {
    rest_min[i] = rest_min[i + 1] + static_cast<Int128>(axes[i].lo) * axes[i].stride;
    rest_max[i] = rest_max[i + 1] + static_cast<Int128>(axes[i].hi) * axes[i].stride;
  }
  int64_t budget = 100000;
  return lattice_hit(axes, rest_min, rest_max, 0, delta_bytes / element_bytes, budget);
}

std::string byte_offset_text(const CheckedView& from, const CheckedView& to) {
  const auto delta = static_cast<long long>(reinterpret_cast<uintptr_t>(to.view->data) -
                                            reinterpret_cast<uintptr_t>(from.view->data));
  std::ostringstream out;
  out << to.name << ".data = " << from.name << ".data " << (delta < 0 ? "- " : "+ ")
      << (delta < 0 ? -static_cast<unsigned long long>(delta) : static_cast<unsigned long long>(delta)) << " bytes, "
      << from.name << " " << to_string(from.view->dtype) << " strides " << strides_text(*from.view) << " spanning "
      << from.span_bytes << " bytes, " << to.name << " " << to_string(to.view->dtype) << " strides "
      << strides_text(*to.view) << " spanning " << to.span_bytes << " bytes";
  return out.str();
}

// An output against the input it may replace in place (q_out / q, k_out / k).
void check_in_out(const CheckedView& in, const CheckedView& out) {
  if (!may_overlap(in, out) || exact_alias(in, out)) return;
  fail(out.name, " partially overlaps ", in.name, " (got ", byte_offset_text(in, out), "); in place needs ", out.name,
       " == ", in.name, ": same data, dtype and strides");
}

// Views that must not share any byte (an output with another view's input, or two outputs).
void check_disjoint(const CheckedView& first, const CheckedView& second) {
  if (!may_overlap(first, second)) return;
  fail(second.name, " overlaps ", first.name, " (got ", byte_offset_text(first, second), "); ", second.name,
       " must not share memory with ", first.name);
}

void check_same_layout_and_shape(const CheckedView& reference, const CheckedView& other, bool shape_too) {
  if (!other.present) return;
  if (other.view->layout != reference.view->layout) {
    fail(other.name, " layout must equal ", reference.name, "'s layout ", to_string(reference.view->layout), " (got ",
         to_string(other.view->layout), ")");
  }
  if (!shape_too) return;
  for (int axis = 0; axis < layout_rank(reference.view->layout); ++axis) {
    if (other.view->shape[axis] != reference.view->shape[axis]) {
      fail(other.name, " shape must equal ", reference.name, "'s shape ", shape_text(*reference.view), " (got ",
           shape_text(*other.view), ")");
    }
  }
}

// The sequences of a checked call: their token ranges in per-token order.
struct Sequence {
  int64_t first_token = 0;
  int64_t length = 0;
};

void check_position_value(int64_t position, int64_t max_position, const char* what, int64_t index) {
  if (position < 0 || position > max_position) {
    fail(what, "[", index, "] must be in [0, ", max_position, "] (got ", position, ")");
  }
}

void check_positions(const CheckedView& q, const Positions& positions, const CosSinTable& table) {
  using Source = Positions::Source;
  const RopeSpec& spec = table.spec();
  const bool thd = q.view->layout == Layout::THD;
  const int64_t batch = q.axes.batch;
  const int64_t seq = q.axes.seq;
  const int64_t tokens = batch * seq;  // fits: checked in check_view
  const int streams = position_streams(spec);
  const int64_t max_position = table.max_position();
  const std::span<const int64_t> values = positions.values;
  const std::span<const int64_t> cu = positions.cu_seqlens;

  if (positions.source != Source::Arange && positions.source != Source::PerToken &&
      positions.source != Source::SequenceOffsets) {
    fail("positions.source must be arange, per_token or sequence_offsets (got enum value ",
         static_cast<int>(positions.source), ")");
  }

  // cu_seqlens: THD only, and required there. Sizes are compared as size_t: a span's size may be
  // anything a caller wrote, past INT64_MAX too.
  if (thd) {
    if (cu.empty()) fail("positions.cu_seqlens is required for the thd layout (got an empty span)");
    if (cu.size() < 2) {
      fail("positions.cu_seqlens.size() must be num_sequences + 1 >= 2 for the thd layout (got ", cu.size(), ")");
    }
    if (cu.data() == nullptr) fail("positions.cu_seqlens must not be null with size ", cu.size(), " (got null)");
    if (cu[0] != 0) fail("positions.cu_seqlens[0] must be 0 (got ", cu[0], ")");
    for (size_t n = 1; n < cu.size(); ++n) {
      if (cu[n] < cu[n - 1]) {
        fail("positions.cu_seqlens[", n, "] must be >= positions.cu_seqlens[", n - 1, "] = ", cu[n - 1],
             " (non-decreasing) (got ", cu[n], ")");
      }
    }
    if (cu.back() != tokens) {
      fail("positions.cu_seqlens[", cu.size() - 1, "] (the last) must equal the token count ", tokens,
           " of q (got ", cu.back(), ")");
    }
  } else if (!cu.empty()) {
    fail("positions.cu_seqlens is only for the thd layout (got ", cu.size(), " cu_seqlens with layout ",
         to_string(q.view->layout), ")");
  }
  // Sequence n: THD segment [cu[n], cu[n+1]), else batch row n of length seq. The THD count fits
  // int64: cu is non-null, so its size is an array's.
  const int64_t num_sequences = thd ? static_cast<int64_t>(cu.size()) - 1 : batch;
  auto sequence_at = [&](int64_t n) -> Sequence {
    if (thd) return {cu[static_cast<size_t>(n)], cu[static_cast<size_t>(n) + 1] - cu[static_cast<size_t>(n)]};
    return {n * seq, seq};
  };

  if (positions.source == Source::PerToken) {
    int64_t expected = 0;
    if (__builtin_mul_overflow(tokens, static_cast<int64_t>(streams), &expected)) {
      fail("positions.values.size() must equal tokens x streams for per_token positions, which overflows int64 (got "
           "tokens ", tokens, ")");
    }
    if (values.size() != static_cast<size_t>(expected)) {
      fail("positions.values.size() must equal tokens x streams = ", tokens, " x ", streams, " = ", expected,
           " for per_token ", to_string(spec.axes), " positions (got ", values.size(), ")");
    }
    if (values.data() == nullptr && expected > 0) {
      fail("positions.values must not be null with size ", values.size(), " (got null)");
    }
    for (int64_t i = 0; i < expected; ++i) {
      check_position_value(values[static_cast<size_t>(i)], max_position, "positions.values", i);
    }
    return;
  }

  if (positions.source == Source::SequenceOffsets) {
    if (streams != 1) {
      fail("positions.source sequence_offsets is for single-stream specs only; ", to_string(spec.axes),
           " positions need per_token (got sequence_offsets with ", streams, " streams)");
    }
    if (values.size() != static_cast<size_t>(num_sequences)) {
      fail("positions.values.size() must equal the number of sequences ", num_sequences,
           thd ? " (positions.cu_seqlens.size() - 1)" : " (q batch)", " for sequence_offsets (got ", values.size(),
           ")");
    }
    if (values.data() == nullptr && num_sequences > 0) {
      fail("positions.values must not be null with size ", values.size(), " (got null)");
    }
    for (int64_t n = 0; n < num_sequences; ++n) {
      const Sequence sequence = sequence_at(n);
      if (sequence.length == 0) continue;
      const int64_t offset = values[static_cast<size_t>(n)];
      // Positions offset + s for s in [0, length); the first outside [0, max] is named.
      if (offset < 0 || offset > max_position) {
        fail("positions.values[", n, "] (sequence offset) + s must be in [0, ", max_position, "] for every s < ",
             sequence.length, " (got ", offset, " + 0 = ", offset, ")");
      }
      if (sequence.length - 1 > max_position - offset) {
        const int64_t s = max_position - offset + 1;
        fail("positions.values[", n, "] (sequence offset) + s must be in [0, ", max_position, "] for every s < ",
             sequence.length, " (got ", offset, " + ", s, " = ", offset + s, ")");
      }
    }
    return;
  }

  // Arange: position = s, 0 .. length - 1 in each sequence.
  if (!values.empty()) {
    fail("positions.values must be empty for source arange, which computes 0 .. length - 1 per sequence (got size ",
         values.size(), ")");
  }
  for (int64_t n = 0; n < num_sequences; ++n) {
    const Sequence sequence = sequence_at(n);
    if (sequence.length - 1 > max_position) {
      fail("positions (arange: 0 .. length - 1 per sequence) must be in [0, ", max_position,
           "]: sequence ", n, " needs position ", sequence.length - 1, " (got sequence length ", sequence.length, ")");
    }
    if (!thd) break;  // every batch row has the same length
  }
}

// The largest position any token of the call reads (-1 for a call without tokens). Runs after
// check_positions: every source is known to be consistent.
int64_t call_max_position(const CheckedView& q, const Positions& positions) {
  const bool thd = q.view->layout == Layout::THD;
  int64_t largest = -1;
  if (positions.source == Positions::Source::PerToken) {
    for (int64_t p : positions.values) largest = std::max(largest, p);
    return largest;
  }
  const int64_t num_sequences = thd ? static_cast<int64_t>(positions.cu_seqlens.size()) - 1 : q.axes.batch;
  for (int64_t n = 0; n < num_sequences; ++n) {
    const auto i = static_cast<size_t>(n);
    const int64_t length = thd ? positions.cu_seqlens[i + 1] - positions.cu_seqlens[i] : q.axes.seq;
    if (length == 0) continue;
    const int64_t first = positions.source == Positions::Source::SequenceOffsets ? positions.values[i] : 0;
    largest = std::max(largest, first + length - 1);
  }
  return largest;
}

// Hugging Face's seq_len rule (ApplyOptions::seq_len): a sequence-dependent table serves only the
// seq_lens whose frequencies are its own.
void check_table_serves_seq_len(const CheckedView& q, const Positions& positions, const CosSinTable& table,
                                const ApplyOptions& options) {
  const RopeSpec& spec = table.spec();
  if (options.seq_len < kSeqLenFromPositions) {
    fail("options.seq_len must be >= 0, or kSeqLenFromPositions (-1) for the largest position + 1 (got ",
         options.seq_len, ")");
  }
  if (!sequence_dependent(spec)) return;
  const bool named = options.seq_len != kSeqLenFromPositions;
  const int64_t seq_len = named ? options.seq_len : call_max_position(q, positions) + 1;
  if (table.serves_seq_len(seq_len)) return;
  fail(named ? "options.seq_len " : "the call's seq_len (largest position + 1) ", seq_len, " needs ",
       to_string(spec.scaling.type), " frequencies other than the table's (got a table built for seq_len ",
       table.seq_len(), "): build the table with seq_len ", seq_len,
       named ? "" : ", or name options.seq_len to use this table's frequencies on purpose");
}

}  // namespace

void check_apply_arguments(const TensorView& q, const TensorView& k, const TensorView& q_out,
                           const TensorView& k_out, const Positions& positions, const CosSinTable& table,
                           const ApplyOptions& options) {
  const RopeSpec& spec = table.spec();

  // Options and spec-level rules first: they do not depend on the tensors.
  if (options.direction != Direction::Forward && options.direction != Direction::Backward) {
    fail("options.direction must be forward or backward (got enum value ", static_cast<int>(options.direction), ")");
  }
  if (options.rotary_offset < 0) fail("options.rotary_offset must be >= 0 (got ", options.rotary_offset, ")");
  if (options.xpos_length < 0) fail("options.xpos_length must be >= 0 (got ", options.xpos_length, ")");
  if (spec.xpos.has_value() && spec.axes != PositionAxes::Single) {
    // flash-attn's xPos scales by one position per token; with several streams there is no
    // single e(p), and no model defines one.
    fail("table.spec().xpos is defined for single-stream positions only (got xpos with ", to_string(spec.axes),
         " positions)");
  }

  // Each view on its own.
  const CheckedView cq = check_view("q", q, false);
  const CheckedView ck = check_view("k", k, true);
  const CheckedView cq_out = check_view("q_out", q_out, false);
  const CheckedView ck_out = check_view("k_out", k_out, true);
  if (ck.present != ck_out.present) {
    fail(ck.present ? "k_out" : "k", " must be given when ", ck.present ? "k" : "k_out",
         " is: pass both, or neither (data == nullptr, shape all 0) to rotate q only (got ",
         ck.present ? "k_out" : "k", " empty)");
  }
  for (const CheckedView* view : {&ck, &cq_out, &ck_out}) check_same_device(cq, *view);

  // The views together.
  check_same_layout_and_shape(cq, ck, false);
  check_same_layout_and_shape(cq, cq_out, true);
  check_same_layout_and_shape(ck, ck_out, true);
  if (ck.present) {
    const bool thd = q.layout == Layout::THD;
    if (!thd && ck.axes.batch != cq.axes.batch) {
      fail("k batch must equal q's batch ", cq.axes.batch, " (got ", ck.axes.batch, ", k shape ", shape_text(k),
           ", q shape ", shape_text(q), ")");
    }
    if (ck.axes.seq != cq.axes.seq) {
      fail("k ", thd ? "tokens" : "seq", " must equal q's ", thd ? "tokens " : "seq ", cq.axes.seq, " (got ",
           ck.axes.seq, ", k shape ", shape_text(k), ", q shape ", shape_text(q), ")");
    }
  }
  for (const CheckedView* view : {&cq, &ck}) {
    if (!view->present) continue;
    // head_dim >= rotary_offset + rotary_dim, written without the sum (rotary_offset may be huge).
    if (view->axes.dim < spec.rotary_dim || view->axes.dim - spec.rotary_dim < options.rotary_offset) {
      fail(view->name, " head_dim must be >= options.rotary_offset + rotary_dim = ", options.rotary_offset, " + ",
           spec.rotary_dim, " (got ", view->axes.dim, ")");
    }
  }
  // The heads axis against the model's head counts, when the spec knows them: a tensor in
  // another layout than the one named (bshd data called bhsd) reads seq as heads, and is caught
  // here whenever the misread count neither equals nor divides the model's. A divisor is
  // legitimate: a tensor-parallel shard holds heads / TP of them (and MQA / MLA one shared key).
  const int64_t kv_heads = spec.num_key_value_heads > 0 ? spec.num_key_value_heads : spec.num_attention_heads;
  for (const auto& [view, model_heads, field] :
       {std::tuple{&cq, spec.num_attention_heads, "num_attention_heads"},
        std::tuple{&ck, kv_heads, spec.num_key_value_heads > 0 ? "num_key_value_heads" : "num_attention_heads"}}) {
    const int64_t heads = view->axes.heads;
    if (!view->present || model_heads <= 0 || heads <= 0) continue;
    if (heads > model_heads || model_heads % heads != 0) {
      fail(view->name, " heads axis (", heads, " in layout ", to_string(view->view->layout), ", shape ",
           shape_text(*view->view), ") must equal the model's ", field, " = ", model_heads,
           " or divide it (a tensor-parallel shard); is the tensor in another layout?");
    }
  }
  check_output_strides(cq_out);
  check_output_strides(ck_out);

  // Memory: in place, or apart.
  check_in_out(cq, cq_out);
  check_in_out(ck, ck_out);
  check_disjoint(ck, cq_out);
  check_disjoint(cq, ck_out);
  check_disjoint(cq_out, ck_out);

  check_positions(cq, positions, table);
  check_table_serves_seq_len(cq, positions, table, options);
}

// apply_cos_sin (apply_cos_sin.hpp): one tensor and explicit cos/sin, checked with the same
// view rules as apply().
void check_cos_sin_arguments(const TensorView& x, const TensorView& out, const TensorView& cos,
                             const TensorView& sin, const char* name) {
  const std::string out_name = std::string(name) + "_out";
  const CheckedView cx = check_view(name, x, false);
  const CheckedView cout = check_view(out_name.c_str(), out, false);
  const CheckedView ccos = check_view("cos", cos, false);
  const CheckedView csin = check_view("sin", sin, false);
  for (const CheckedView* view : {&cout, &ccos, &csin}) check_same_device(cx, *view);
  check_same_layout_and_shape(cx, cout, true);
  for (const CheckedView* table : {&ccos, &csin}) {
    const TensorView& view = *table->view;
    if (view.layout != Layout::BSHD) {
      fail(table->name, " layout must be bshd, shape (batch or 1, seq, 1, rotary_dim) (got ", to_string(view.layout),
           ")");
    }
    const int64_t rotary_dim = view.shape[3];
    if (view.shape[0] != cx.axes.batch && view.shape[0] != 1) {
      fail(table->name, " shape[0] must be ", name, "'s batch ", cx.axes.batch, " or 1 (got shape ", shape_text(view),
           ")");
    }
    if (view.shape[1] != cx.axes.seq) {
      fail(table->name, " shape[1] must be ", name, "'s ", x.layout == Layout::THD ? "tokens " : "seq ", cx.axes.seq,
           " (got shape ", shape_text(view), ")");
    }
    if (view.shape[2] != 1) fail(table->name, " shape[2] must be 1 (got shape ", shape_text(view), ")");
    if (rotary_dim < 2 || rotary_dim % 2 != 0) {
      fail(table->name, " shape[3] (rotary_dim) must be even and >= 2 (got ", rotary_dim, ")");
    }
    if (rotary_dim > cx.axes.dim) {
      fail(table->name, " shape[3] (rotary_dim) must be <= ", name, "'s head_dim ", cx.axes.dim, " (got ", rotary_dim,
           ")");
    }
  }
  if (sin.shape != cos.shape) {
    fail("sin shape must equal cos shape ", shape_text(cos), " (got ", shape_text(sin), ")");
  }
  check_output_strides(cout);
  check_in_out(cx, cout);
  check_disjoint(ccos, cout);
  check_disjoint(csin, cout);
}

}  // namespace rotary
