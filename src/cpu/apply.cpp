// src/cpu/apply.cpp: rotary::apply, the fast path: plan a checked call, split its tokens over
// the thread pool, and rotate each token's heads with the SIMD kernels (rotate_kernels-inl.h).
//
// The call: check it, store the table rows it reads (Stored tables), then per chunk of tokens,
// per token: its position(s) and its place in the tensors (token_addressing.hpp), its cos/sin
// rows for q and k (row_source.hpp: a pointer into a stored table, or rows computed for
// on-the-fly tables, M-RoPE / vision, xPos, backward), then one kernel call rotates all of that
// token's q and k heads. Every element is computed the same way whichever thread handles its
// token, so results are bitwise identical for any thread count.
//
// Tensors the kernels cannot read directly (a head dim with a stride other than 1, float64
// storage, an output dtype different from its input's) are gathered head by head into a
// float32 buffer, rotated there by the same float32 kernel, and scattered back converted: the
// rotated values are those of the direct path, so in-place, out-of-place and strided calls
// agree bit for bit. Pass-through elements are converted directly from input to output.
#include <cstdint>
#include <span>
#include <vector>

#include "rotary/apply.hpp"
#include "rotary/error.hpp"
#include "cpu/backends.hpp"
#include "cpu/kernels.hpp"
#include "cpu/row_source.hpp"
#include "cpu/storage.hpp"
#include "cpu/targets.hpp"
#include "cpu/token_addressing.hpp"

namespace rotary {

namespace {

// Calls whose outputs are at least this large are bound by memory, not by the core: several
// times a core's L2 (2 MiB on the Intel machine of this class, 512 KiB on the AMD one), so the
// output would be evicted before use anyway. Out of place they use non-temporal stores, and the
// kernels order the heads for memory (HeadsArgs::memory_bound).
constexpr int64_t kStreamOutputBytes = int64_t{16} << 20;

// ---- one call ---------------------------------------------------------------------------------

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

// One tensor (q or k) of a call: where it is, and the kernel arguments that are the same for all
// of its tokens (HeadsArgs' in, out, cos and sin are per token).
struct TensorCall {
  const unsigned char* in = nullptr;
  unsigned char* out = nullptr;
  DType dtype = DType::F32;
  DType out_dtype = DType::F32;   // differs from dtype when the call converts
  int64_t element_bytes = 4;      // of the input
  int64_t out_element_bytes = 4;  // of the output
  NamedAxes in_axes, out_axes;
  bool in_place = false;
  bool direct = false;  // the kernels read it in place; otherwise rotate_gathered
  cpu::HeadsArgs args;
};

TensorCall plan_tensor(const TensorView& in, const TensorView& out, const ApplyOptions& options, int64_t num_pairs,
                       Style style, bool memory_bound, int64_t max_head_groups) {
  TensorCall call;
  call.in = static_cast<const unsigned char*>(in.data);
  call.out = static_cast<unsigned char*>(out.data);
  call.dtype = in.dtype;
  call.out_dtype = out.dtype;
  call.element_bytes = dtype_size(in.dtype);
  call.out_element_bytes = dtype_size(out.dtype);
  call.in_axes = named_axes(in);
  call.out_axes = named_axes(out);
  call.in_place = in.data == out.data;
  call.direct = kernel_can_take(in, out);
  cpu::HeadsArgs& a = call.args;
  a.in_head_stride = call.in_axes.stride_heads;
  a.out_head_stride = call.out_axes.stride_heads;
  a.num_heads = call.in_axes.heads;
  a.head_dim = call.in_axes.dim;
  a.rotary_offset = options.rotary_offset;
  a.num_pairs = num_pairs;
  a.style = style;
  a.copy_passthrough = !call.in_place;
  a.stream_stores = !call.in_place && memory_bound;
  a.max_head_groups = max_head_groups;
  a.memory_bound = memory_bound;
  return call;
}

// One token: its q heads and, if there is a k (calls.size() == 2), its k heads, with its rows.
// The kernels take q and k of a token in one call (they may interleave their heads); a tensor
// they cannot read directly goes through rotate_gathered on its own. `gather`: 2 * num_pairs
// floats when a tensor is gathered.
void rotate_token_heads(std::span<const TensorCall> calls, cpu::TokenCoordinates at, const cpu::TokenRows& rows,
                        float* gather) {
  cpu::HeadsArgs args[2];
  bool take[2] = {false, false};
  for (size_t which = 0; which < calls.size(); ++which) {
    const TensorCall& call = calls[which];
    // No heads: nothing to rotate, and the data may be null (no arithmetic on it then).
    if (call.in_axes.heads == 0) continue;
    cpu::HeadsArgs& a = args[which];
    a = call.args;
    a.in = call.in + token_offset_elems(at, call.in_axes) * call.element_bytes;
    a.out = call.out + token_offset_elems(at, call.out_axes) * call.out_element_bytes;
    a.cos = which == 0 ? rows.q_cos : rows.k_cos;
    a.sin = which == 0 ? rows.q_sin : rows.k_sin;
    if (call.direct) {
      take[which] = true;
    } else {
      rotate_gathered(static_cast<const unsigned char*>(a.in), static_cast<unsigned char*>(a.out), call.in_axes,
                      call.out_axes, call.dtype, call.out_dtype, call.in_place, a, gather);
    }
  }
  if (take[0] && take[1] && calls[0].dtype == calls[1].dtype) {
    cpu::rotate_token(calls[0].dtype, args[0], &args[1]);
  } else {
    if (take[0]) cpu::rotate_token(calls[0].dtype, args[0], nullptr);
    if (take[1]) cpu::rotate_token(calls[1].dtype, args[1], nullptr);
  }
}

}  // namespace

namespace backends {

// The rotation backends this build has (src/cpu/backends.hpp). A GPU backend compiled into the
// library would be one more entry here, with its kind.
const std::array<RotateBackend, 1>& rotate_backends() {
  static constexpr std::array<RotateBackend, 1> kBackends{{
      {"cpu", DeviceKind::CPU, &cpu::apply_checked, &cpu::apply_cos_sin_checked},
  }};
  return kBackends;
}

}  // namespace backends

// The checks (device-neutral) then the backend of q's device, which the checks made every view's.
void apply(const TensorView& q, const TensorView& k, const TensorView& q_out, const TensorView& k_out,
           const Positions& positions, const CosSinTable& table, const ApplyOptions& options) {
  check_apply_arguments(q, k, q_out, k_out, positions, table, options);
  backends::backend_for(backends::rotate_backends(), q.device, "apply", "q")
      .apply(q, k, q_out, k_out, positions, table, options);
}

namespace cpu {

void apply_checked(const TensorView& q, const TensorView& k, const TensorView& q_out, const TensorView& k_out,
                   const Positions& positions, const CosSinTable& table, const ApplyOptions& options) {
  cpu::apply_target_from_environment();

  const bool has_k = k.data != nullptr;
  const NamedAxes axes = named_axes(q);
  const NamedAxes k_axes = has_k ? named_axes(k) : NamedAxes{};
  const int64_t tokens = axes.batch * axes.seq;
  // Nothing to rotate: no tokens, or no elements in any token (q with 0 heads and no k, say).
  // Return before the per-token loops below: 2^59 tokens of 0 heads are a valid, empty call.
  // (Tested without multiplying: with 0 tokens, heads x dim may overflow, and the checks allow it.)
  const bool q_has_elements = axes.heads > 0 && axes.dim > 0;
  const bool k_has_elements = has_k && k_axes.heads > 0 && k_axes.dim > 0;
  if (tokens == 0 || !(q_has_elements || k_has_elements)) return;

  const cpu::TokenAddressing addressing(axes, q.layout == Layout::THD, positions);
  const cpu::RowSource row_source(table, options.direction, options.xpos_length);
  const int streams = row_source.streams();
  // Stored tables store the rows this call reads here, once, so workers only read: the pages of
  // its positions that are not stored yet, not a table up to its largest position (a decode step
  // at position 10^6 stores one page). Growth past max_bytes throws here, before any output is
  // written.
  row_source.store_rows(tokens, [&](int64_t t, int stream) { return addressing.position(t, stream); });

  // Outputs much larger than the caches are streamed past them (see HeadsArgs::stream_stores),
  // and the kernels order heads for memory (HeadsArgs::memory_bound).
  const NamedAxes q_out_axes = named_axes(q_out);
  const NamedAxes k_out_axes = has_k ? named_axes(k_out) : NamedAxes{};
  const int64_t output_bytes =
      tokens * (q_out_axes.heads * q_out_axes.dim * dtype_size(q_out.dtype) +
                (has_k ? k_out_axes.heads * k_out_axes.dim * dtype_size(k_out.dtype) : 0));
  const bool memory_bound = output_bytes >= kStreamOutputBytes;
  const int64_t max_head_groups = cpu::max_head_groups();
  const int64_t num_pairs = table.num_pairs();
  const Style style = table.spec().style;
  const TensorCall calls[2] = {
      plan_tensor(q, q_out, options, num_pairs, style, memory_bound, max_head_groups),
      has_k ? plan_tensor(k, k_out, options, num_pairs, style, memory_bound, max_head_groups) : TensorCall{}};
  const std::span<const TensorCall> tensors(calls, has_k ? 2 : 1);
  const bool any_gathered = !calls[0].direct || (has_k && !calls[1].direct);

  auto rotate_range = [&](int64_t first, int64_t last) {
    cpu::RowScratch scratch(row_source);
    std::vector<float> gather(static_cast<size_t>(any_gathered ? 2 * num_pairs : 0));
    int64_t token_positions[cpu::kMaxPositionStreams];
    for (int64_t t = first; t < last; ++t) {
      for (int s = 0; s < streams; ++s) token_positions[s] = addressing.position(t, s);
      const cpu::TokenRows rows = row_source.rows({token_positions, static_cast<size_t>(streams)}, scratch);
      rotate_token_heads(tensors, addressing.coordinates(t), rows, gather.data());
    }
    // Non-temporal stores are weakly ordered: fence them before this thread reports its rows
    // done (parallel_rows' completion), once for all of them.
    if (memory_bound) cpu::flush_streamed_stores();
  };

  const int64_t elements = tokens * (axes.heads * axes.dim + (has_k ? k_axes.heads * k_axes.dim : 0));
  cpu::parallel_rows(tokens, elements, rotate_range);
}

}  // namespace cpu
}  // namespace rotary
