// src/cpu/apply.cpp: rotary::apply, the fast path: plan a checked call, split its tokens over
// the thread pool, and rotate each token's heads with the SIMD kernels (rotate_kernels-inl.h).
//
// Per token: resolve its position(s) (per-token positions, sequence offsets or arange; THD
// sequences from cu_seqlens), fetch the cos/sin row (a pointer into a stored table, or a row
// computed into a per-thread buffer for on-the-fly tables, M-RoPE / vision gathers and xPos),
// then one kernel call per tensor rotates all of that token's heads. Every element is computed
// the same way whichever thread handles its token, so results are bitwise identical for any
// thread count.
//
// Tensors the kernels cannot read directly (a head dim with a stride other than 1, float64
// storage, an output dtype different from its input's) are gathered head by head into a
// float32 buffer, rotated there by the same float32 kernel, and scattered back converted: the
// rotated values are those of the direct path, so in-place, out-of-place and strided calls
// agree bit for bit. Pass-through elements are converted directly from input to output.
#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "rotary/apply.hpp"
#include "rotary/error.hpp"
#include "src/cpu/kernels.hpp"
#include "src/cpu/storage.hpp"
#include "src/cpu/targets.hpp"

namespace rotary {

namespace {

// Calls whose outputs are at least this large are bound by memory, not by the core: several
// times a core's L2 (2 MiB on the Intel machine of this class, 512 KiB on the AMD one), so the
// output would be evicted before use anyway. Out of place they use non-temporal stores, and the
// kernels order the heads for memory (HeadsArgs::memory_bound).
constexpr int64_t kStreamOutputBytes = int64_t{16} << 20;

// ---- one call ---------------------------------------------------------------------------------

struct TensorPlan {
  const unsigned char* in = nullptr;
  unsigned char* out = nullptr;
  DType dtype = DType::F32;
  int64_t element_bytes = 4;      // of the input
  int64_t out_element_bytes = 4;  // of the output (differs when the call converts)
  NamedAxes in_axes, out_axes;
  bool in_place = false;
};

TensorPlan plan_tensor(const TensorView& in, const TensorView& out) {
  TensorPlan p;
  p.in = static_cast<const unsigned char*>(in.data);
  p.out = static_cast<unsigned char*>(out.data);
  p.dtype = in.dtype;
  p.element_bytes = dtype_size(in.dtype);
  p.out_element_bytes = dtype_size(out.dtype);
  p.in_axes = named_axes(in);
  p.out_axes = named_axes(out);
  p.in_place = in.data == out.data;
  return p;
}

bool kernel_can_take(const TensorView& in, const TensorView& out) {
  if (in.data == nullptr) return true;  // absent k
  if (in.dtype != out.dtype || in.dtype == DType::F64) return false;
  return named_axes(in).stride_dim == 1 && named_axes(out).stride_dim == 1;
}

// One token's heads of a tensor the kernels cannot read directly (see the file comment).
// `args` carries the row, pairing and direction; `buffer` holds 2 * num_pairs floats.
void rotate_gathered(const unsigned char* in, unsigned char* out, const NamedAxes& in_axes,
                     const NamedAxes& out_axes, DType in_type, DType out_type, bool in_place,
                     cpu::HeadsArgs args, float* buffer) {
  const int64_t width = 2 * args.num_pairs;
  const int64_t offset = args.rotary_offset;
  for (int64_t h = 0; h < in_axes.heads; ++h) {
    const int64_t in_head = h * in_axes.stride_heads;
    const int64_t out_head = h * out_axes.stride_heads;
    for (int64_t e = 0; e < width; ++e) {
      // float64 inputs round to float32 here: the kernels' math is float32.
      buffer[e] = static_cast<float>(cpu::load_element(in, in_type, in_head + (offset + e) * in_axes.stride_dim));
    }
    args.in = buffer;
    args.out = buffer;
    args.in_head_stride = args.out_head_stride = width;
    args.num_heads = 1;
    args.head_dim = width;
    args.rotary_offset = 0;
    args.copy_passthrough = false;
    args.stream_stores = false;
    cpu::rotate_token(DType::F32, args, nullptr);
    for (int64_t e = 0; e < width; ++e) {
      cpu::store_element(out, out_type, out_head + (offset + e) * out_axes.stride_dim, buffer[e]);
    }
    if (in_place) continue;
    for (int64_t e = 0; e < in_axes.dim; ++e) {
      if (e >= offset && e < offset + width) continue;
      cpu::store_element(out, out_type, out_head + e * out_axes.stride_dim,
                         cpu::load_element(in, in_type, in_head + e * in_axes.stride_dim));
    }
  }
}

}  // namespace

void apply(const TensorView& q, const TensorView& k, const TensorView& q_out, const TensorView& k_out,
           const Positions& positions, const CosSinTable& table, const ApplyOptions& options) {
  check_apply_arguments(q, k, q_out, k_out, positions, table, options);
  cpu::apply_target_from_environment();
  const int64_t max_head_groups = cpu::max_head_groups();
  const bool direct[2] = {kernel_can_take(q, q_out), kernel_can_take(k, k_out)};

  const RopeSpec& spec = table.spec();
  const bool has_k = k.data != nullptr;
  const TensorPlan qp = plan_tensor(q, q_out);
  const TensorPlan kp = has_k ? plan_tensor(k, k_out) : TensorPlan{};
  const NamedAxes& axes = qp.in_axes;
  const bool thd = q.layout == Layout::THD;
  const int64_t tokens = axes.batch * axes.seq;
  // Nothing to rotate: no tokens, or no elements in any token (q with 0 heads and no k, say).
  // Return before the per-token loops below: 2^59 tokens of 0 heads are a valid, empty call.
  // (Tested without multiplying: with 0 tokens, heads x dim may overflow, and the checks allow it.)
  const bool q_has_elements = axes.heads > 0 && axes.dim > 0;
  const bool k_has_elements = has_k && kp.in_axes.heads > 0 && kp.in_axes.dim > 0;
  if (tokens == 0 || !(q_has_elements || k_has_elements)) return;
  const int64_t num_pairs = table.num_pairs();
  const int streams = position_streams(spec);
  const std::vector<int> pair_stream = pair_streams(spec);
  const bool xpos = spec.xpos.has_value();
  const bool backward = options.direction == Direction::Backward;
  const bool stored = table.storage() == Storage::Stored;

  // THD: the sequence of each token, and its index in it.
  std::vector<int64_t> sequence_of;
  if (thd) {
    sequence_of.resize(static_cast<size_t>(tokens));
    for (int64_t b = 0; b < positions.num_sequences; ++b) {
      for (int64_t t = positions.cu_seqlens[b]; t < positions.cu_seqlens[b + 1]; ++t) sequence_of[t] = b;
    }
  }
  // position of token t in stream `stream` (arguments are checked: every value is in range).
  auto position_of = [&](int64_t t, int stream) -> int64_t {
    if (positions.per_token != nullptr) return positions.per_token[stream * tokens + t];
    const int64_t b = thd ? sequence_of[t] : t / axes.seq;
    const int64_t s = thd ? t - positions.cu_seqlens[b] : t % axes.seq;
    return positions.sequence_offsets != nullptr ? positions.sequence_offsets[b] + s : s;
  };

  // Stored tables store the rows this call reads here, once, so workers only read: the pages of
  // its positions that are not stored yet, not a table up to its largest position (a decode step
  // at position 10^6 stores one page). Growth past max_bytes throws here, before any output is
  // written.
  if (stored) {
    const int64_t stored_prefix = table.size();  // rows below it are stored: no lookup
    std::vector<int64_t> missing;
    for (int64_t t = 0; t < tokens; ++t) {
      for (int s = 0; s < streams; ++s) {
        const int64_t position = position_of(t, s);
        if (position >= stored_prefix && !table.is_stored(position)) missing.push_back(position);
      }
    }
    table.reserve_rows(missing);
  }

  // xPos: zeta_i = (2i + 0.4 d) / (1.4 d), e(p) = (p - L // 2) / scale_base (flash-attn).
  std::vector<double> zeta;
  int64_t xpos_length = 0;
  if (xpos) {
    const double d = static_cast<double>(spec.rotary_dim);
    for (int64_t i = 0; i < num_pairs; ++i) zeta.push_back((2.0 * static_cast<double>(i) + 0.4 * d) / (1.4 * d));
    xpos_length = options.xpos_length > 0 ? options.xpos_length : spec.max_position_embeddings;
  }

  const bool direct_rows = stored && streams == 1 && !xpos;
  // Outputs much larger than the caches are streamed past them (see HeadsArgs::stream_stores).
  const int64_t output_bytes = tokens * (qp.out_axes.heads * qp.out_axes.dim * qp.out_element_bytes +
                                         (has_k ? kp.out_axes.heads * kp.out_axes.dim * kp.out_element_bytes : 0));
  // Out of place such calls stream their outputs; the kernels also order heads for memory
  // (HeadsArgs::memory_bound).
  const bool memory_bound = output_bytes >= kStreamOutputBytes;
  auto rotate_range = [&](int64_t first, int64_t last) {
    // Per-thread row buffers: cos and sin for q, and for k when xPos scales them apart.
    std::vector<float> buffer(static_cast<size_t>(direct_rows ? 0 : 6 * num_pairs));
    std::vector<float> stream_rows(static_cast<size_t>(streams > 1 ? 2 * num_pairs * streams : 0));
    std::vector<float> gather(static_cast<size_t>(direct[0] && direct[1] ? 0 : 2 * num_pairs));
    // Backward: the kernels rotate one way, so the inverse takes -sin (q's, and k's when xPos
    // gives k its own), negated here once per token (cpu::HeadsArgs::sin).
    std::vector<float> negated_sin(static_cast<size_t>(backward ? 2 * num_pairs : 0));
    for (int64_t t = first; t < last; ++t) {
      const float* q_cos = nullptr;
      const float* q_sin = nullptr;
      const float* k_cos = nullptr;
      const float* k_sin = nullptr;
      if (direct_rows) {
        const float* row = table.stored_row(position_of(t, 0));
        q_cos = k_cos = row;
        q_sin = k_sin = row + num_pairs;
      } else {
        float* cos_row = buffer.data();
        float* sin_row = cos_row + num_pairs;
        if (streams == 1) {
          table.row(position_of(t, 0), cos_row, sin_row);
        } else {
          // M-RoPE / vision: pair i takes its values from the row of its stream's position.
          for (int s = 0; s < streams; ++s) {
            table.row(position_of(t, s), stream_rows.data() + 2 * s * num_pairs,
                      stream_rows.data() + (2 * s + 1) * num_pairs);
          }
          for (int64_t i = 0; i < num_pairs; ++i) {
            const int s = pair_stream[i];
            cos_row[i] = stream_rows[(2 * s) * num_pairs + i];
            sin_row[i] = stream_rows[(2 * s + 1) * num_pairs + i];
          }
        }
        q_cos = k_cos = cos_row;
        q_sin = k_sin = sin_row;
        if (xpos) {
          float* qc = sin_row + num_pairs;
          float* qs = qc + num_pairs;
          float* kc = qs + num_pairs;
          float* ks = kc + num_pairs;
          const double e = static_cast<double>(position_of(t, 0) - xpos_length / 2) / spec.xpos->scale_base;
          for (int64_t i = 0; i < num_pairs; ++i) {
            const double scale = std::pow(zeta[i], e);
            qc[i] = static_cast<float>(cos_row[i] * scale);
            qs[i] = static_cast<float>(sin_row[i] * scale);
            kc[i] = static_cast<float>(cos_row[i] / scale);
            ks[i] = static_cast<float>(sin_row[i] / scale);
          }
          q_cos = qc;
          q_sin = qs;
          k_cos = kc;
          k_sin = ks;
        }
      }
      if (backward) {
        float* q_negated = negated_sin.data();
        for (int64_t i = 0; i < num_pairs; ++i) q_negated[i] = -q_sin[i];
        if (k_sin == q_sin) {
          k_sin = q_negated;
        } else {
          float* k_negated = q_negated + num_pairs;
          for (int64_t i = 0; i < num_pairs; ++i) k_negated[i] = -k_sin[i];
          k_sin = k_negated;
        }
        q_sin = q_negated;
      }
      const int64_t b = thd ? 0 : t / axes.seq;
      const int64_t s = thd ? t : t % axes.seq;
      // The kernels take q and k of a token in one call (they may interleave their heads); a
      // tensor they cannot read directly goes through rotate_gathered on its own.
      cpu::HeadsArgs args[2];
      bool take[2] = {false, false};
      for (int which = 0; which < (has_k ? 2 : 1); ++which) {
        const TensorPlan& p = which == 0 ? qp : kp;
        // No heads: nothing to rotate, and the data may be null (no arithmetic on it then).
        if (p.in_axes.heads == 0) continue;
        cpu::HeadsArgs& a = args[which];
        a.in = p.in + (b * p.in_axes.stride_batch + s * p.in_axes.stride_seq) * p.element_bytes;
        a.out = p.out + (b * p.out_axes.stride_batch + s * p.out_axes.stride_seq) * p.out_element_bytes;
        a.in_head_stride = p.in_axes.stride_heads;
        a.out_head_stride = p.out_axes.stride_heads;
        a.num_heads = p.in_axes.heads;
        a.head_dim = p.in_axes.dim;
        a.rotary_offset = options.rotary_offset;
        a.num_pairs = num_pairs;
        a.cos = which == 0 ? q_cos : k_cos;
        a.sin = which == 0 ? q_sin : k_sin;
        a.style = spec.style;
        a.copy_passthrough = !p.in_place;
        a.stream_stores = !p.in_place && memory_bound;
        a.max_head_groups = max_head_groups;
        a.memory_bound = memory_bound;
        if (direct[which]) {
          take[which] = true;
        } else {
          const TensorView& in_view = which == 0 ? q : k;
          const TensorView& out_view = which == 0 ? q_out : k_out;
          rotate_gathered(static_cast<const unsigned char*>(a.in), static_cast<unsigned char*>(a.out), p.in_axes,
                          p.out_axes, in_view.dtype, out_view.dtype, p.in_place, a, gather.data());
        }
      }
      if (take[0] && take[1] && qp.dtype == kp.dtype) {
        cpu::rotate_token(qp.dtype, args[0], &args[1]);
      } else {
        if (take[0]) cpu::rotate_token(qp.dtype, args[0], nullptr);
        if (take[1]) cpu::rotate_token(kp.dtype, args[1], nullptr);
      }
    }
    // Non-temporal stores are weakly ordered: fence them before this thread reports its rows
    // done (parallel_rows' completion), once for all of them.
    if (memory_bound) cpu::flush_streamed_stores();
  };

  const int64_t elements = tokens * (axes.heads * axes.dim + (has_k ? kp.in_axes.heads * kp.in_axes.dim : 0));
  cpu::parallel_rows(tokens, elements, rotate_range);
}

}  // namespace rotary
