// src/cpu/kernels.hpp: the SIMD row kernels behind rotary::apply (internal to rotary_cpu).
//
// Declares only plain wrappers: no Highway type leaks out of src/cpu/, so no other folder needs
// Highway's headers or its per-target namespaces.
// The kernels (rotate_kernels-inl.h) are compiled once per Highway target and storage type in
// rotate_kernels_f32.cpp, _bf16.cpp and _f16.cpp and picked at run time
// (HWY_DYNAMIC_DISPATCH); force_cpu_target() narrows the choice for tests and benchmarks.
#pragma once

#include <cstdint>
#include <functional>

#include "rotary/spec.hpp"
#include "rotary/tensor.hpp"

namespace rotary::cpu {

// All heads of one token of one tensor (q or k). The caller has checked the call
// (check_apply_arguments) and guarantees:
//   in / out point at element 0 of head 0 of this token; element e of head h is at
//   in + h * in_head_stride + e (unit stride along the head dim); same for out;
//   in and out have the same dtype (F32, BF16 or F16); out == in (in place) or the two do
//   not overlap at all;
//   cos / sin hold num_pairs float32 values (attention scaling, xPos already applied), sin
//   negated for the inverse rotation (Direction::Backward): the kernels have one direction;
//   rotary_offset + 2 * num_pairs <= head_dim.
struct HeadsArgs {
  const void* in = nullptr;
  void* out = nullptr;
  int64_t in_head_stride = 0;   // elements
  int64_t out_head_stride = 0;  // elements
  int64_t num_heads = 0;
  int64_t head_dim = 0;
  int64_t rotary_offset = 0;
  int64_t num_pairs = 0;
  const float* cos = nullptr;
  const float* sin = nullptr;
  Style style = Style::NeoX;   // NeoX: pairs (i, i + d/2); GPT-J: interleaved pairs (2i, 2i + 1)
  bool copy_passthrough = false;  // out-of-place: copy the elements outside the rotated block
  // Large out-of-place calls: non-temporal stores where the output is vector-aligned (the
  // result is not read back soon, and streaming saves the read-for-ownership of each line).
  // The caller must call flush_streamed_stores() before it reports its work done.
  bool stream_stores = false;
  int64_t max_head_groups = 1;  // head_groups()
  // The call's tensors are much larger than the caches: rotate_token orders heads for memory
  // (q and k interleaved), not for the load ports (see RotateTokenImpl).
  bool memory_bound = false;
};

// Rotates one token's q heads and, if k is not null, its k heads (the same dtype, pairing and
// direction) with the current target's kernels for `dtype`.
void rotate_token(DType dtype, const HeadsArgs& q, const HeadsArgs* k);
// The same for one storage type each (rotate_kernels_f32.cpp, _bf16.cpp, _f16.cpp).
void rotate_token_f32(const HeadsArgs& q, const HeadsArgs* k);
void rotate_token_bf16(const HeadsArgs& q, const HeadsArgs* k);
void rotate_token_f16(const HeadsArgs& q, const HeadsArgs* k);

// bf16 with the CPU's own conversions (rotate_kernels_bf16_hw.cpp): the target "AVX3_BF16" of
// cpu_targets(), Highway's AVX3 kernels with VCVTNE2PS2BF16 / VCVTNEPS2BF16 rounding in place of
// the integer code, bit-identical to it. bf16_hardware_compiled(): this build has them (x86-64,
// GCC >= 10 or Clang >= 9). bf16_hardware_available(): and this CPU and OS run them (CPUID
// AVX512F/BW/DQ/VL and AVX512_BF16, XCR0 with the AVX-512 state). bf16_hardware_in_use(): the
// current target is AVX3_BF16 (the automatic choice where available; force_cpu_target("AVX3")
// and every other name turn it off). rotate_token_bf16 and the test hooks below follow it; the
// *_hardware functions may be called only where it is true.
bool bf16_hardware_compiled();
bool bf16_hardware_available();
bool bf16_hardware_in_use();
void rotate_token_bf16_hardware(const HeadsArgs& q, const HeadsArgs* k);
void round_join_bf16_hardware(const float* even, const float* odd, uint32_t* out, int64_t count);
void narrow_bf16_hardware(const float* in, uint16_t* out, int64_t count);
// For tests: VCVTNEPS2BF16 alone, without the fix-up of denormal inputs (which it reads as zero).
void convert_bf16_hardware_unfixed(const float* in, uint16_t* out, int64_t count);

// The order in which the kernels visit a token's heads: the heads split into `groups` contiguous
// groups, visited as heads 0, H/g, 2H/g, ..., 1, H/g + 1, ... Heads are independent, so the order
// changes no result, only which memory pages are in flight together. On the Intel machine without
// BF16, groups a 4 KiB page apart let memory serve 4 streams at once and were up to 20%
// faster (a copy in that order ran at 29 GB/s against 21-26 in head order); on the AMD EPYC
// AVX2 machine, the same order was 40% slower than head order (a 4-page copy ran at
// 40-46 GB/s against 64-68 sequentially). docs/performance.md. `max_groups` comes from
// max_head_groups(); `last_head_bytes` is the byte offset of the last head from the first (the
// checks bounded it below 2^63).
constexpr int64_t kPageBytes = 4096;
inline int64_t head_groups(int64_t num_heads, int64_t last_head_bytes, int64_t max_groups) {
  if (max_groups <= 1 || last_head_bytes < kPageBytes) return 1;  // no division on the common path
  int64_t groups = last_head_bytes / kPageBytes + 1;
  groups = groups < 1 ? 1 : (groups > max_groups ? max_groups : groups);
  while (num_heads % groups != 0) --groups;
  return groups;
}

// The most groups head_groups() may use: $ROTARY_HEAD_GROUPS (an integer in [1, 8]) if set, else
// 4 on Intel CPUs and 1 (head order) elsewhere. set_max_head_groups(n) overrides it for the
// process (tests), 0 restores the default. apply() reads it once per call.
int64_t max_head_groups();
void set_max_head_groups(int64_t n);

// For tests: the kernels' float32 -> bf16 rounding of two vectors at once (dtype_io-inl.h,
// RoundJoinBf16) over arrays with the current target: out[i] holds bf16(even[i]) in its low 16
// bits and bf16(odd[i]) in its high 16 bits. Exact (nearest even) for every input but NaNs with
// non-zero low 16 bits, which the kernels never produce; with AVX3_BF16, float_to_bf16's bits for
// every input.
void round_join_bf16(const float* even, const float* odd, uint32_t* out, int64_t count);

// For tests: the kernels' own loads and stores of bf16 / f16 (dtype BF16 or F16) over arrays with
// the current target: widening, exact; narrowing, to nearest even (F16C on AVX2 / AVX3, integer
// code elsewhere). Not a general converter: the bf16 narrowing assumes what F32ToBf16High does
// (except with AVX3_BF16, which is float_to_bf16 for every input).
void widen_16bit(DType dtype, const uint16_t* in, float* out, int64_t count);
void narrow_16bit(DType dtype, const float* in, uint16_t* out, int64_t count);

// Orders this thread's non-temporal stores before its later stores (x86: sfence), so that
// whoever learns of the work through a later store (the pool's completion flag) sees the data.
// Once per thread and call, not per token: an sfence waits for the write-combining buffers to
// drain.
void flush_streamed_stores();

// Runs range(begin, end) over [0, rows) split into contiguous chunks on the shared pool
// (set_num_threads), one chunk per useful thread; `elements` (the call's total element count)
// decides how many threads are worth waking, with the same threshold as apply(). Calls from
// several threads take turns on the pool. Exceptions from range propagate to the caller.
void parallel_rows(int64_t rows, int64_t elements, const std::function<void(int64_t, int64_t)>& range);

}  // namespace rotary::cpu
