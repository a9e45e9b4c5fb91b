// src/attention/args.cpp: the attention() contract made executable: argument checks and the plan
// (plan.hpp) the implementations walk.
//
// Every message has the form "attention: <argument> <what was expected> (got <value>)" and names
// the argument as the caller spells it (q, k, v, out, options.window, options.kv_lengths[3],
// rope.q_positions[7], ...). The checks run before any memory is written (a refused call leaves out as it was).
// What they guarantee the kernels:
//   - q, k, v, out share one dtype and one layout; out has q's batch / seq / heads and v's head
//     dim; k and v agree on batch, seq and heads; q and k on the head dim; kv heads divide q heads;
//   - every element offset sum((extent - 1) * stride) and its byte offset fit in int64; non-empty
//     views have data aligned to their element; the head dim has unit stride;
//   - out's elements have distinct addresses, and out touches no byte of q, k or v (by address
//     range: conservative for interleaved views, never wrong);
//   - every sequence's query positions offset + i fit below 2^62, its visible keys lie in k;
//   - the scale is finite and > 0 in float32 too (the fast path's q' = fl32(scale) q);
//   - with rope: every position is in the table, which serves the call's seq_len;
//   - with ALiBi: one finite slope per q head, |slope| * distance <= 2^100; no other encoding;
//   - with an absolute table: rows * dim values, dim = head dim, every position in [0, rows);
//   - q, k, v, out are on one device (a known kind, index >= 0, 0 for the cpu), which picks the
//     backend (src/attention/backends.hpp). Nothing here reads tensor data, so the checks hold
//     for views of any device; positions, lengths, offsets, slopes and tables are host arrays.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include "rotary/error.hpp"
#include "attention/plan.hpp"
#include "cpu/backends.hpp"
#include "core/shape_text.hpp"

namespace rotary {
namespace {

using attention_internal::Plan;
using attention_internal::Sequence;

[[noreturn]] void fail(const std::string& message) { throw Error("attention: " + message); }

struct Checked {
  NamedAxes axes;
  int64_t elements = 0;
  int64_t span_bytes = 0;  // one past the last byte touched, from data (0 when empty)
};

// Shapes, strides, spans, data and alignment of one view.
Checked check_view(const TensorView& view, std::string_view name) {
  Checked checked;
  const int rank = layout_rank(view.layout);
  for (int axis = 0; axis < rank; ++axis) {
    if (view.stride_elems[axis] < 0) {
      fail(detail::concat(name, ".stride_elems[", axis, "] must be >= 0 (got ", view.stride_elems[axis], ")"));
    }
  }
  // element_count's own messages ("tensor q: ...") carry this function's prefix like every other.
  for (int axis = 0; axis < rank; ++axis) {
    if (view.shape[axis] < 0) fail(detail::concat(name, ".shape[", axis, "] must be >= 0 (got ", view.shape[axis], ")"));
  }
  try {
    checked.elements = element_count(view, name);
  } catch (const Error& error) {
    fail(error.what());
  }
  checked.axes = named_axes(view);
  if (checked.elements == 0) {
    // Even a view without elements: the plan computes each sequence's first token (b x seq) and
    // base offset (b x stride_batch, token x stride_seq) from its extents and strides, so its
    // token count and the offsets its extents reach must fit in int64 too (three empty sequences
    // of 2^62 tokens overflowed b x seq: UBSan, found by the attention_args fuzz target). Each
    // axis up to its full extent, not extent - 1: with THD, an empty last sequence starts at token
    // cu_seqlens[-1] = seq, whose base offset is seq x stride_seq (a v / out of head dim 0 with a
    // huge seq stride overflowed there, found when the target began drawing zero head dims).
    int64_t tokens = 0, reach = 0;
    if (__builtin_mul_overflow(std::max<int64_t>(checked.axes.batch, 1), checked.axes.seq, &tokens)) {
      fail(detail::concat(name, ": the token count (batch x seq) must fit in int64 (got shape ", shape_text(view), ")"));
    }
    for (int axis = 0; axis < rank; ++axis) {
      int64_t term = 0;
      if (__builtin_mul_overflow(std::max<int64_t>(view.shape[axis], 0), view.stride_elems[axis], &term) ||
          __builtin_add_overflow(reach, term, &reach)) {
        fail(detail::concat(name, ": element offsets must fit in int64 (got shape ", shape_text(view), ")"));
      }
    }
    return checked;
  }
  if (view.data == nullptr) fail(detail::concat(name, ".data must not be null for shape ", shape_text(view), " (got null)"));
  if (checked.axes.dim > 1 && checked.axes.stride_dim != 1) {
    fail(detail::concat(name, ": the head dim must have unit stride (got stride ", checked.axes.stride_dim, ")"));
  }
  int64_t last = 0;
  for (int axis = 0; axis < rank; ++axis) {
    int64_t term = 0;
    if (__builtin_mul_overflow(view.shape[axis] - 1, view.stride_elems[axis], &term) ||
        __builtin_add_overflow(last, term, &last)) {
      fail(detail::concat(name, ": element offsets must fit in int64 (got shape ", shape_text(view), ")"));
    }
  }
  const int64_t size = dtype_size(view.dtype);
  if (__builtin_add_overflow(last, 1, &last) || __builtin_mul_overflow(last, size, &checked.span_bytes) ||
      reinterpret_cast<uintptr_t>(view.data) > std::numeric_limits<uintptr_t>::max() - static_cast<uintptr_t>(checked.span_bytes)) {
    fail(detail::concat(name, ": byte offsets must fit in the address space (got shape ", shape_text(view), ")"));
  }
  if (reinterpret_cast<uintptr_t>(view.data) % static_cast<uintptr_t>(size) != 0) {
    fail(detail::concat(name, ".data must be aligned to ", size, " bytes (got address ", view.data, ")"));
  }
  return checked;
}

// No two elements of `view` share an address: sorted by stride, each axis's stride exceeds the
// furthest offset the smaller axes reach (sufficient, and true of every ordinary layout).
void check_distinct_elements(const TensorView& view, std::string_view name) {
  const int rank = layout_rank(view.layout);
  // A view without elements has no two elements to share an address (NumPy gives empty arrays
  // all-zero strides).
  for (int axis = 0; axis < rank; ++axis) {
    if (view.shape[axis] == 0) return;
  }
  std::array<std::pair<int64_t, int64_t>, 4> axes{};  // (stride, extent)
  int used = 0;
  for (int axis = 0; axis < rank; ++axis) {
    if (view.shape[axis] > 1) axes[used++] = {view.stride_elems[axis], view.shape[axis]};
  }
  // Insertion sort of at most 4 (std::sort over a prefix trips GCC 12's -Warray-bounds).
  for (int i = 1; i < used; ++i) {
    for (int j = i; j > 0 && axes[j].first < axes[j - 1].first; --j) std::swap(axes[j], axes[j - 1]);
  }
  int64_t reach = 0;  // the largest offset the axes so far reach (fits: check_view bounded the sum)
  for (int i = 0; i < used; ++i) {
    if (axes[i].first <= reach) {
      fail(detail::concat(name, ": elements must not share addresses (got strides overlapping for shape ",
                          shape_text(view), ")"));
    }
    reach += (axes[i].second - 1) * axes[i].first;
  }
}

bool overlaps(const TensorView& a, const Checked& ca, const TensorView& b, const Checked& cb) {
  if (ca.elements == 0 || cb.elements == 0) return false;
  const auto a0 = reinterpret_cast<uintptr_t>(a.data), b0 = reinterpret_cast<uintptr_t>(b.data);
  return a0 < b0 + static_cast<uintptr_t>(cb.span_bytes) && b0 < a0 + static_cast<uintptr_t>(ca.span_bytes);
}

void check_cu_seqlens(std::span<const int64_t> cu, std::string_view name, int64_t tokens, size_t expected_size) {
  if (cu.size() < 2) fail(detail::concat(name, " must hold num_sequences + 1 >= 2 values (got ", cu.size(), ")"));
  if (expected_size != 0 && cu.size() != expected_size) {
    fail(detail::concat(name, " must have the length of options.cu_seqlens_q, ", expected_size, " (got ", cu.size(), ")"));
  }
  if (cu[0] != 0) fail(detail::concat(name, "[0] must be 0 (got ", cu[0], ")"));
  for (size_t i = 1; i < cu.size(); ++i) {
    if (cu[i] < cu[i - 1]) fail(detail::concat(name, " must be non-decreasing (got ", name, "[", i, "] = ", cu[i], " < ", cu[i - 1], ")"));
  }
  if (cu.back() != tokens) {
    fail(detail::concat(name, " must end at the token count ", tokens, " (got ", cu.back(), ")"));
  }
}

// Query positions reach offset + num_queries; below 2^62 nothing in the mask arithmetic overflows.
constexpr int64_t kMaxQueryPosition = int64_t{1} << 62;

// ALiBi (attention.hpp): one finite slope per q head, and no other encoding. The largest
// |p_i - j| of the call is at most max(p_max, num_keys - 1) per sequence; |slope| times it must
// stay below 2^100, so that every bias, and a score plus it, is a finite float32 with room to
// spare (the fast path would otherwise see -inf scores where the reference has finite ones).
void check_alibi(Plan& plan, const AttentionOptions& options, const AttentionRope* rope) {
  const std::span<const float> slopes = options.alibi_slopes;
  if (slopes.empty()) return;
  if (rope != nullptr) {
    fail(detail::concat("options.alibi_slopes must be empty with fused RoPE: one position encoding per call (got ",
                        slopes.size(), " slopes)"));
  }
  if (options.absolute != nullptr) {
    fail(detail::concat("options.alibi_slopes must be empty with an absolute table: one position encoding per call (got ",
                        slopes.size(), " slopes)"));
  }
  if (static_cast<int64_t>(slopes.size()) != plan.num_q_heads) {
    fail(detail::concat("options.alibi_slopes must hold one slope per q head, ", plan.num_q_heads, " (got ", slopes.size(), ")"));
  }
  int64_t distance = 0;
  for (const Sequence& s : plan.sequences) {
    distance = std::max({distance, s.query_offset + std::max<int64_t>(s.num_queries - 1, 0), s.num_keys - 1});
  }
  const double limit = std::ldexp(1.0, 100);
  for (size_t h = 0; h < slopes.size(); ++h) {
    if (!std::isfinite(slopes[h])) fail(detail::concat("options.alibi_slopes[", h, "] must be finite (got ", slopes[h], ")"));
    if (std::abs(static_cast<double>(slopes[h])) * static_cast<double>(distance) > limit) {
      fail(detail::concat("options.alibi_slopes[", h, "] times the call's largest query-key distance ", distance,
                          " must be at most 2^100 in magnitude (got ", slopes[h], ")"));
    }
  }
  plan.alibi_slopes = slopes;
}

// An absolute table: rows x dim values, dim = the q / k head dim, one position per token in
// [0, rows).
void check_absolute(Plan& plan, const AttentionAbsolute& absolute, int64_t q_tokens, int64_t k_tokens) {
  if (absolute.rows < 0) fail(detail::concat("absolute.rows must be >= 0 (got ", absolute.rows, ")"));
  if (absolute.dim != plan.qk_dim) fail(detail::concat("absolute.dim must equal q's head dim, ", plan.qk_dim, " (got ", absolute.dim, ")"));
  int64_t values = 0;
  if (__builtin_mul_overflow(absolute.rows, absolute.dim, &values) || static_cast<int64_t>(absolute.table.size()) != values) {
    fail(detail::concat("absolute.table must hold rows * dim = ", absolute.rows, " * ", absolute.dim, " values (got ",
                        absolute.table.size(), ")"));
  }
  if (static_cast<int64_t>(absolute.q_positions.size()) != q_tokens) {
    fail(detail::concat("absolute.q_positions must hold one position per q token, ", q_tokens, " (got ", absolute.q_positions.size(), ")"));
  }
  if (static_cast<int64_t>(absolute.k_positions.size()) != k_tokens) {
    fail(detail::concat("absolute.k_positions must hold one position per k token, ", k_tokens, " (got ", absolute.k_positions.size(), ")"));
  }
  for (const auto& [positions, name] : {std::pair{absolute.q_positions, "absolute.q_positions"}, std::pair{absolute.k_positions, "absolute.k_positions"}}) {
    for (size_t i = 0; i < positions.size(); ++i) {
      if (positions[i] < 0 || positions[i] >= absolute.rows) {
        fail(detail::concat(name, "[", i, "] must be in [0, ", absolute.rows - 1, "] (the table's rows) (got ", positions[i], ")"));
      }
    }
  }
  plan.absolute = &absolute;
}


// The steps of make_plan, in its order. Each fails with the argument's name and value.

// dtype, layout and device of the four views, and k / v / out's agreement with q's.
void check_view_kinds(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                      bool allow_f64) {
  const auto known_dtype = [&](const TensorView& view, std::string_view name) {
    const bool ok = view.dtype == DType::F32 || view.dtype == DType::BF16 || view.dtype == DType::F16 ||
                    (allow_f64 && view.dtype == DType::F64);
    if (!ok) {
      fail(detail::concat(name, ".dtype must be ", allow_f64 ? "float32, bfloat16, float16 or float64" : "float32, bfloat16 or float16",
                          " (got ", static_cast<int>(view.dtype) <= 3 ? std::string(to_string(view.dtype)) : std::to_string(static_cast<int>(view.dtype)), ")"));
    }
  };
  known_dtype(q, "q");
  const auto known_layout = [&](const TensorView& view, std::string_view name) {
    const int value = static_cast<int>(view.layout);
    if (value < 0 || value > 3) fail(detail::concat(name, ".layout must be bshd, bhsd, sbhd or thd (got ", value, ")"));
  };
  known_layout(q, "q");
  const auto known_device = [&](const TensorView& view, std::string_view name) {
    const std::string problem = backends::device_problem(view.device);
    if (!problem.empty()) fail(detail::concat(name, ".device ", problem));
  };
  known_device(q, "q");
  const std::array<std::pair<const TensorView*, std::string_view>, 3> others{{{&k, "k"}, {&v, "v"}, {&out, "out"}}};
  for (const auto& [view, name] : others) {
    known_dtype(*view, name);
    known_layout(*view, name);
    known_device(*view, name);
    if (view->device != q.device) {
      fail(detail::concat(name, " is on ", to_string(view->device), " but q is on ", to_string(q.device)));
    }
    if (view->dtype != q.dtype) fail(detail::concat(name, ".dtype must equal q's, ", to_string(q.dtype), " (got ", to_string(view->dtype), ")"));
    if (view->layout != q.layout) fail(detail::concat(name, ".layout must equal q's, ", to_string(q.layout), " (got ", to_string(view->layout), ")"));
  }
}

// The views' extents against each other (batch, tokens, heads, head dims, GQA), into the plan,
// and out distinct from itself and from q, k and v.
void plan_extents(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                  const Checked& cq, const Checked& ck, const Checked& cv, const Checked& co, Plan& plan) {
  plan.q = cq.axes;
  plan.k = ck.axes;
  plan.v = cv.axes;
  plan.out = co.axes;
  plan.dtype = q.dtype;
  if (q.layout != Layout::THD) {
    for (const auto& [axes, name] : {std::pair{&ck.axes, "k"}, std::pair{&cv.axes, "v"}, std::pair{&co.axes, "out"}}) {
      if (axes->batch != cq.axes.batch) fail(detail::concat(name, " batch must equal q's, ", cq.axes.batch, " (got ", axes->batch, ")"));
    }
  }
  if (cv.axes.seq != ck.axes.seq) fail(detail::concat("v tokens must equal k's, ", ck.axes.seq, " (got ", cv.axes.seq, ")"));
  if (cv.axes.heads != ck.axes.heads) fail(detail::concat("v heads must equal k's, ", ck.axes.heads, " (got ", cv.axes.heads, ")"));
  if (co.axes.seq != cq.axes.seq) fail(detail::concat("out tokens must equal q's, ", cq.axes.seq, " (got ", co.axes.seq, ")"));
  if (co.axes.heads != cq.axes.heads) fail(detail::concat("out heads must equal q's, ", cq.axes.heads, " (got ", co.axes.heads, ")"));
  if (ck.axes.dim != cq.axes.dim) fail(detail::concat("k head_dim must equal q's, ", cq.axes.dim, " (got ", ck.axes.dim, ")"));
  if (co.axes.dim != cv.axes.dim) fail(detail::concat("out head_dim must equal v's, ", cv.axes.dim, " (got ", co.axes.dim, ")"));
  plan.num_q_heads = cq.axes.heads;
  plan.num_kv_heads = ck.axes.heads;
  plan.qk_dim = cq.axes.dim;
  plan.v_dim = cv.axes.dim;
  if (plan.num_q_heads > 0) {
    if (plan.num_kv_heads == 0 || plan.num_q_heads % plan.num_kv_heads != 0) {
      fail(detail::concat("k heads must divide q heads, ", plan.num_q_heads, " (got ", plan.num_kv_heads, ")"));
    }
    plan.group = plan.num_q_heads / plan.num_kv_heads;
  }

  check_distinct_elements(out, "out");
  for (const auto& [view, checked, name] : {std::tuple{&q, &cq, "q"}, std::tuple{&k, &ck, "k"}, std::tuple{&v, &cv, "v"}}) {
    if (overlaps(out, co, *view, *checked)) fail(detail::concat("out must not overlap ", name, " (got out at ", out.data, ", ", name, " at ", view->data, ")"));
  }
}

// scale, mask, window and the single query offset.
void plan_scalar_options(const AttentionOptions& options, Plan& plan) {
  if (options.scale.has_value()) {
    if (!std::isfinite(*options.scale) || *options.scale <= 0) fail(detail::concat("options.scale must be finite and > 0 (got ", *options.scale, ")"));
    // The fast path multiplies q by the scale rounded to float32: a scale past float32's range
    // would be infinite there and every output NaN, where the float64 reference is finite.
    if (*options.scale > static_cast<double>(std::numeric_limits<float>::max())) {
      fail(detail::concat("options.scale must be finite in float32, at most 3.4028235e+38",
                          " (attention computes in float32) (got ", *options.scale, ")"));
    }
    plan.scale = *options.scale;
  } else {
    plan.scale = plan.qk_dim > 0 ? 1.0 / std::sqrt(static_cast<double>(plan.qk_dim)) : 1.0;
  }
  if (options.mask != Mask::None && options.mask != Mask::Causal) fail(detail::concat("options.mask must be None or Causal (got ", static_cast<int>(options.mask), ")"));
  plan.mask = options.mask;
  if (options.window < 0) fail(detail::concat("options.window must be >= 0 (0 = no window) (got ", options.window, ")"));
  plan.window = options.window;
  if (options.query_offset < 0 || options.query_offset >= kMaxQueryPosition) {
    fail(detail::concat("options.query_offset must be in [0, 2^62) (got ", options.query_offset, ")"));
  }
  if (options.query_offset != 0 && !options.query_offsets.empty()) {
    fail(detail::concat("options.query_offset must be 0 when options.query_offsets is given (got ", options.query_offset, ")"));
  }
}

// How many sequences the call holds (batch, or cu_seqlens_q's count for thd), with the per-
// sequence options' lengths checked against it.
int64_t count_sequences(const AttentionOptions& options, const Checked& cq, const Checked& ck, Layout layout) {
  int64_t num_sequences = cq.axes.batch;
  if (layout == Layout::THD) {
    if (options.cu_seqlens_q.empty()) fail("options.cu_seqlens_q is required for layout thd (got none)");
    check_cu_seqlens(options.cu_seqlens_q, "options.cu_seqlens_q", cq.axes.seq, 0);
    check_cu_seqlens(options.cu_seqlens_k, "options.cu_seqlens_k", ck.axes.seq, options.cu_seqlens_q.size());
    if (!options.kv_lengths.empty()) fail(detail::concat("options.kv_lengths must be empty for layout thd (cu_seqlens_k gives them) (got ", options.kv_lengths.size(), " values)"));
    if (!options.kv_starts.empty()) fail(detail::concat("options.kv_starts must be empty for layout thd (cu_seqlens_k gives where a sequence starts) (got ", options.kv_starts.size(), " values)"));
    num_sequences = static_cast<int64_t>(options.cu_seqlens_q.size()) - 1;
  } else {
    if (!options.cu_seqlens_q.empty() || !options.cu_seqlens_k.empty()) {
      fail(detail::concat("options.cu_seqlens_q / cu_seqlens_k are for layout thd only (got layout ", to_string(layout), ")"));
    }
    if (!options.kv_lengths.empty() && static_cast<int64_t>(options.kv_lengths.size()) != num_sequences) {
      fail(detail::concat("options.kv_lengths must hold one value per sequence, ", num_sequences, " (got ", options.kv_lengths.size(), ")"));
    }
    if (!options.kv_starts.empty() && static_cast<int64_t>(options.kv_starts.size()) != num_sequences) {
      fail(detail::concat("options.kv_starts must hold one value per sequence, ", num_sequences, " (got ", options.kv_starts.size(), ")"));
    }
  }
  if (!options.query_offsets.empty() && static_cast<int64_t>(options.query_offsets.size()) != num_sequences) {
    fail(detail::concat("options.query_offsets must hold one value per sequence, ", num_sequences, " (got ", options.query_offsets.size(), ")"));
  }
  return num_sequences;
}

// One Sequence per sequence: its tokens, keys, bases and query offset.
void plan_sequences(const AttentionOptions& options, const Checked& cq, const Checked& ck, const Checked& cv,
                    const Checked& co, bool thd, int64_t num_sequences, Plan& plan) {
  plan.sequences.resize(static_cast<size_t>(num_sequences));
  for (int64_t b = 0; b < num_sequences; ++b) {
    Sequence& s = plan.sequences[static_cast<size_t>(b)];
    const auto ub = static_cast<size_t>(b);
    if (thd) {
      const int64_t q0 = options.cu_seqlens_q[ub], k0 = options.cu_seqlens_k[ub];
      s.q_token0 = q0;
      s.k_token0 = k0;
      s.num_queries = options.cu_seqlens_q[ub + 1] - q0;
      s.num_keys = options.cu_seqlens_k[ub + 1] - k0;
      // Offsets below the checked spans: token < seq extent.
      s.q_base = q0 * cq.axes.stride_seq;
      s.out_base = q0 * co.axes.stride_seq;
      s.k_base = k0 * ck.axes.stride_seq;
      s.v_base = k0 * cv.axes.stride_seq;
      s.kv_rows = std::min(ck.axes.seq, cv.axes.seq) - k0;
    } else {
      s.q_token0 = b * cq.axes.seq;
      s.k_token0 = b * ck.axes.seq;
      s.num_queries = cq.axes.seq;
      s.num_keys = ck.axes.seq;
      s.q_base = b * cq.axes.stride_batch;
      s.out_base = b * co.axes.stride_batch;
      s.k_base = b * ck.axes.stride_batch;
      s.v_base = b * cv.axes.stride_batch;
      s.kv_rows = std::min(ck.axes.seq, cv.axes.seq);
      if (!options.kv_lengths.empty()) {
        const int64_t length = options.kv_lengths[ub];
        if (length < 0 || length > ck.axes.seq) {
          fail(detail::concat("options.kv_lengths[", b, "] must be in [0, ", ck.axes.seq, "] (k's seq) (got ", length, ")"));
        }
        s.num_keys = length;
      }
      if (!options.kv_starts.empty()) {
        const int64_t start = options.kv_starts[ub];
        if (start < 0 || start > s.num_keys) {
          fail(detail::concat("options.kv_starts[", b, "] must be in [0, ", s.num_keys, "] (",
                              options.kv_lengths.empty() ? "k's seq" : "its kv_lengths", ") (got ", start, ")"));
        }
        s.first_key = start;
      }
    }
    s.query_offset = options.query_offsets.empty() ? options.query_offset : options.query_offsets[ub];
    if (s.query_offset < 0 || s.query_offset >= kMaxQueryPosition - s.num_queries) {
      fail(detail::concat("options.query_offsets[", b, "] must be in [0, 2^62 - queries) (got ", s.query_offset, ")"));
    }
  }
}

// Fused RoPE's table, offset, positions and seq_len.
void check_rope(const AttentionRope& rope, const Plan& plan, int64_t q_tokens, int64_t k_tokens) {
  if (rope.table == nullptr) fail("rope.table must not be null (got null)");
  const CosSinTable& table = *rope.table;
  const RopeSpec& spec = table.spec();
  if (spec.axes != PositionAxes::Single) fail(detail::concat("rope.table spec axes must be single for fused attention (got ", to_string(spec.axes), ")"));
  if (spec.xpos.has_value()) fail("rope.table spec xpos must be unset for fused attention (got xpos)");
  const int64_t rotary_dim = 2 * table.num_pairs();
  // The table's rotary_dim first: with a table wider than the head, no rotary_offset fits, and
  // the offset's range [0, head_dim - rotary_dim] would be empty (blaming an argument the
  // caller may never have set).
  if (rotary_dim > plan.qk_dim) {
    fail(detail::concat("q and k head_dim must be >= rope.table's rotary_dim ", rotary_dim, " (got ", plan.qk_dim, ")"));
  }
  if (rope.rotary_offset < 0 || rope.rotary_offset > plan.qk_dim - rotary_dim) {
    fail(detail::concat("rope.rotary_offset must be in [0, head_dim - rotary_dim] = [0, ", plan.qk_dim - rotary_dim, "] (got ", rope.rotary_offset, ")"));
  }
  if (static_cast<int64_t>(rope.q_positions.size()) != q_tokens) fail(detail::concat("rope.q_positions must hold one position per q token, ", q_tokens, " (got ", rope.q_positions.size(), ")"));
  if (static_cast<int64_t>(rope.k_positions.size()) != k_tokens) fail(detail::concat("rope.k_positions must hold one position per k token, ", k_tokens, " (got ", rope.k_positions.size(), ")"));
  int64_t largest = -1;
  for (const auto& [positions, name] : {std::pair{rope.q_positions, "rope.q_positions"}, std::pair{rope.k_positions, "rope.k_positions"}}) {
    for (size_t i = 0; i < positions.size(); ++i) {
      if (positions[i] < 0 || positions[i] > table.max_position()) {
        fail(detail::concat(name, "[", i, "] must be in [0, ", table.max_position(), "] (got ", positions[i], ")"));
      }
      largest = std::max(largest, positions[i]);
    }
  }
  if (rope.seq_len < kSeqLenFromPositions) fail(detail::concat("rope.seq_len must be >= 0 or kSeqLenFromPositions (got ", rope.seq_len, ")"));
  const int64_t seq_len = rope.seq_len == kSeqLenFromPositions ? largest + 1 : rope.seq_len;
  if (!table.serves_seq_len(seq_len)) {
    fail(detail::concat("rope.table must serve seq_len ", seq_len, " (got a table for seq_len ", table.seq_len(), ")"));
  }
}

}  // namespace

namespace attention_internal {

Plan make_plan(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
               const AttentionOptions& options, const AttentionRope* rope, bool allow_f64) {
  Plan plan;
  check_view_kinds(q, k, v, out, allow_f64);
  const Checked cq = check_view(q, "q"), ck = check_view(k, "k"), cv = check_view(v, "v"), co = check_view(out, "out");
  plan_extents(q, k, v, out, cq, ck, cv, co, plan);
  plan_scalar_options(options, plan);
  const bool thd = q.layout == Layout::THD;
  const int64_t num_sequences = count_sequences(options, cq, ck, q.layout);
  plan_sequences(options, cq, ck, cv, co, thd, num_sequences, plan);
  const int64_t q_tokens = thd ? cq.axes.seq : cq.axes.batch * cq.axes.seq;  // fits: check_view
  const int64_t k_tokens = thd ? ck.axes.seq : ck.axes.batch * ck.axes.seq;
  check_alibi(plan, options, rope);
  if (options.absolute != nullptr) {
    if (rope != nullptr) fail("options.absolute must be null with fused RoPE: one position encoding per call (got a table)");
    check_absolute(plan, *options.absolute, q_tokens, k_tokens);
  }
  if (rope != nullptr) check_rope(*rope, plan, q_tokens, k_tokens);
  return plan;
}

}  // namespace attention_internal

void check_attention_arguments(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                               const AttentionOptions& options, const AttentionRope* rope) {
  (void)attention_internal::make_plan(q, k, v, out, options, rope, /*allow_f64=*/false);
}

// The DeepSeek rule; see the header for the sources.
double attention_scale(const RopeSpec& spec, int64_t qk_head_dim) {
  if (qk_head_dim < 1) throw Error(detail::concat("attention_scale: qk_head_dim must be >= 1 (got ", qk_head_dim, ")"));
  double scale = 1.0 / std::sqrt(static_cast<double>(qk_head_dim));
  const auto& mscale_all_dim = spec.scaling.mscale_all_dim;
  if (spec.scaling.type != ScalingType::Default && mscale_all_dim.has_value() && *mscale_all_dim != 0.0) {
    const double factor = spec.resolved_factor();
    // yarn_get_mscale(scale, mscale): 1 if scale <= 1 else 0.1 * mscale * ln(scale) + 1.
    const double mscale = factor <= 1.0 ? 1.0 : 0.1 * *mscale_all_dim * std::log(factor) + 1.0;
    scale *= mscale * mscale;
  }
  return scale;
}

}  // namespace rotary
