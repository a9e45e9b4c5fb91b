// include/rotary/apply.hpp: rotating q and k, the contract every implementation follows.
//
// apply() rotates q and k (their head counts may differ: GQA / MQA) by the angles of a
// CosSinTable at each token's position, forward or backward (the transpose of the scaled
// rotation, sin -> -sin: the gradient; also the inverse when attention_scaling is 1 and there
// is no xPos), in place (output view == input view) or out of place.
// This header is the contract; reference::apply (src/cpu/reference.cpp) is its float64
// definition, and every fast path is tested against it.
//
// Per pair i with partner elements (a, c) (Style: NeoX a = x[o+i], c = x[o+i+d/2]; GPT-J
// a = x[o+2i], c = x[o+2i+1]; o = rotary_offset, d = rotary_dim) and table values
// C = scaling*cos(p*theta_i), S = scaling*sin(p*theta_i):
//   forward:   a' = a*C - c*S,  c' = c*C + a*S
//   backward:  a' = a*C + c*S,  c' = c*C - a*S
// Elements outside [o, o + d) are copied unchanged. Proportional RoPE (Gemma 4) is NeoX over the
// whole head with zero frequencies for the unrotated pairs: no special case.
//
// Positions come from one source (Positions below). M-RoPE tokens carry 3 streams
// (t, h, w) and 2-D vision tokens 2 (row, column); pair i reads the stream the spec assigns
// (spec.hpp: MRopeSections, PositionAxes::Vision2D). xPos multiplies C and S by zeta_i^e(p) for
// q and by zeta_i^-e(p) for k, e(p) = (p - L // 2) / scale_base with L = options.xpos_length,
// else spec.max_position_embeddings (if both are 0, e(p) = p / scale_base).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "rotary/table.hpp"
#include "rotary/tensor.hpp"

namespace rotary {

enum class Direction { Forward, Backward };

inline constexpr int64_t kSeqLenFromPositions = -1;
std::string_view to_string(Direction direction);  // "forward", "backward"

// Where each token's position comes from: one Source, built by a named constructor.
//   Positions::arange():           position = s (s = index within the sequence; THD: within its
//                                  cu_seqlens segment).
//   Positions::per_token(values):  int64 positions, one per token in (batch, seq) order — THD:
//                                  token order — and, for M-RoPE / vision, stream-major:
//                                  [streams][tokens] (Hugging Face's position_ids [3, batch, seq]
//                                  for M-RoPE). values.size() = tokens x streams.
//   Positions::sequence_offsets(values): one int64 per sequence: position = values[n] + s.
//                                  Single-stream only.
// THD tensors also need cu_seqlens, given to any constructor: num_sequences + 1 int64 token
// offsets, starting at 0, non-decreasing, ending at the token count. Other layouts take none.
// An empty span means "not given".
// Unrepresentable now: two sources at once, a negative count, and a num_sequences apart from
// the cu_seqlens array it counts. What the type still allows is checked by
// check_apply_arguments: a size that disagrees with the tensors, values outside the table,
// values given with Source::Arange, null data() with a non-zero size (a broken std::span
// precondition, rejected for one compare), and a Source that is not one of the three.
struct Positions {
  enum class Source { Arange, PerToken, SequenceOffsets };
  Source source = Source::Arange;
  std::span<const int64_t> values;      // PerToken: tokens x streams; SequenceOffsets: one per sequence
  std::span<const int64_t> cu_seqlens;  // THD only: num_sequences + 1 token offsets

  static Positions arange(std::span<const int64_t> cu_seqlens = {}) { return {Source::Arange, {}, cu_seqlens}; }
  static Positions per_token(std::span<const int64_t> positions, std::span<const int64_t> cu_seqlens = {}) {
    return {Source::PerToken, positions, cu_seqlens};
  }
  static Positions sequence_offsets(std::span<const int64_t> offsets, std::span<const int64_t> cu_seqlens = {}) {
    return {Source::SequenceOffsets, offsets, cu_seqlens};
  }
};
std::string_view to_string(Positions::Source source);  // "arange", "per_token", "sequence_offsets"

struct ApplyOptions {
  Direction direction = Direction::Forward;
  // First rotated element of each head (vLLM rope_dim_offset; DeepSeek's q = [nope | rope] has
  // the rotated block at qk_nope_head_dim). The head must hold rotary_offset + rotary_dim.
  int64_t rotary_offset = 0;
  // xPos: the cached length L in e(p) = (p - L // 2) / scale_base. 0 = the spec's
  // max_position_embeddings.
  int64_t xpos_length = 0;
  // The seq_len this call's frequencies are for (dynamic NTK, LongRoPE: frequency_seq_len() in
  // frequencies.hpp). kSeqLenFromPositions: Hugging Face's rule, the call's largest position + 1.
  // The table must serve it: a table built for another seq_len whose frequencies differ is an
  // error, never a silent answer. Name a seq_len to use a table on purpose at other positions
  // (RopeCache's grown tables: transformers keeps the grown frequencies for shorter calls).
  int64_t seq_len = kSeqLenFromPositions;
};

// The values a row lookup needs, for implementations: which position stream pair i reads
// (0 for single-stream specs).
std::vector<int> pair_streams(const RopeSpec& spec);
int position_streams(const RopeSpec& spec);  // 1, 3 (M-RoPE) or 2 (vision)

// Checks every argument once, at the entry point, and throws rotary::Error naming the argument
// and its value: dtypes, ranks and layouts, batch/seq agreement between q and k (and their
// outputs), head_dim >= rotary_offset + rotary_dim, negative or overflowing shapes, negative
// strides, partially overlapping input/output, position counts, negative positions and positions
// past the table's max_position(), cu_seqlens shape and monotonicity, and that the table serves
// the call's seq_len (ApplyOptions::seq_len). q and k may differ in head
// count and head_dim; all four views share q's layout; an output may alias only its own input,
// exactly (q_out == q, k_out == k); spec.xpos requires PositionAxes::Single; every view given is
// on q's device ("k is on cuda:0 but q is on cpu"). Tensor data is never read, so the checks hold
// for views of any device (docs/backends.md). Nothing is written when it throws. Kernels may
// assume a checked call.
void check_apply_arguments(const TensorView& q, const TensorView& k, const TensorView& q_out,
                           const TensorView& k_out, const Positions& positions, const CosSinTable& table,
                           const ApplyOptions& options);

// Checks, then runs on the backend of q's device: this build has the CPU's alone, and a view on
// another device is a rotary::Error naming it (docs/backends.md).
// The fast CPU implementation: Highway SIMD (runtime dispatch to the best compiled target)
// and a small thread pool, f32 math with one correctly rounded store. Same contract and checks
// as reference::apply; within the tolerances of docs/numerics.md of it, and bitwise identical
// for any thread count. Stored tables are grown to the call's largest position first;
// on-the-fly tables compute each token's row.
void apply(const TensorView& q, const TensorView& k, const TensorView& q_out, const TensorView& k_out,
           const Positions& positions, const CosSinTable& table, const ApplyOptions& options = {});

// Worker threads for apply(): the calling thread plus num_threads - 1 pool threads. Default:
// $ROTARY_NUM_THREADS if set, else the hardware's thread count. Small calls (a decode step)
// run on the calling thread alone. Throws rotary::Error for n < 1 or n > 256.
void set_num_threads(int n);
int num_threads();

// The SIMD targets compiled into this build that this CPU supports, best first ("AVX3_BF16",
// "AVX3", "AVX2", "SSE4", "SSSE3", "EMU128" / "SCALAR"; the whole list whatever is forced), and
// forcing one of them (for tests and benchmarks). AVX3_BF16 is AVX3 with the CPU's AVX512_BF16
// conversions for bf16 stores (same bits; on CPUs that have them, e.g. AMD Zen 4, Intel Sapphire
// Rapids), so "AVX3" there runs the integer rounding. $ROTARY_CPU_TARGET forces one at the
// first call of any of these functions or of apply(); an explicit force_cpu_target() after it
// wins.
// force_cpu_target("") restores the automatic choice. An unknown or unsupported name is a
// rotary::Error listing the available ones. current_cpu_target() is the one in use.
std::vector<std::string> cpu_targets();
void force_cpu_target(std::string_view name);
std::string current_cpu_target();

namespace reference {

// Which cos/sin values the reference uses.
//   TableFloat32: the table's float32 values, widened — what every kernel computes with, so a
//                 kernel's difference from the reference is its arithmetic alone.
//   Exact64:      the table's float64 values before rounding (CosSinTable::row_f64) — for
//                 comparisons with exact float64 results such as tests/golden exact_f64.
enum class TableValues { TableFloat32, Exact64 };

// The float64 definition of apply(): loads any storage dtype as double, computes in double,
// rounds once on store (float32, bf16, f16 round to nearest even; f64 exact). q_out / k_out may
// equal q / k (in place). k and k_out may both be empty (TensorView{}: data == nullptr, shape
// all 0) to rotate q only; giving one without the other is an error.
void apply(const TensorView& q, const TensorView& k, const TensorView& q_out, const TensorView& k_out,
           const Positions& positions, const CosSinTable& table, const ApplyOptions& options = {},
           TableValues values = TableValues::TableFloat32);

}  // namespace reference
}  // namespace rotary
