// src/cpu/rotate_kernels-inl.h: the Highway SIMD kernels that rotate one token's heads, as
// templates over the storage type. Each of rotate_kernels_f32.cpp, _bf16.cpp and _f16.cpp
// includes this file once per Highway target (foreach_target, the usual -inl.h guard below) and
// instantiates its own type, so that the three compile in parallel (one file took 5-9 minutes
// under the sanitizers). Dispatched at run time. The loads and stores of each storage type (the
// 16-bit formats widened exactly and narrowed with round-to-nearest-even, the same bits on every
// target) are dtype_io-inl.h's.
//
// Per pair (a, c) and table values C, S (float32):  a' = a*C - c*S,  c' = c*C + a*S
// computed in float32 as MulSub / MulAdd (one fused rounding where the target has FMA, two
// otherwise; docs/numerics.md derives the tolerance from this). The inverse rotation (backward)
// is the same with S negated by the caller.
//
// NeoX, rotary block of d = 8 at offset o:  [.. a0 a1 a2 a3 c0 c1 c2 c3 ..]  contiguous halves
// GPT-J:                                    [.. a0 c0 a1 c1 a2 c2 a3 c3 ..]  interleaved pairs
#if defined(ROTARY_SRC_CPU_ROTATE_KERNELS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ROTARY_SRC_CPU_ROTATE_KERNELS_INL_H_
#undef ROTARY_SRC_CPU_ROTATE_KERNELS_INL_H_
#else
#define ROTARY_SRC_CPU_ROTATE_KERNELS_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstring>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "cpu/kernels.hpp"

// rotate_kernels_bf16_hw.cpp includes this file in its AVX3 pass only, having set this file's
// guard so that the inclusion is live: set dtype_io-inl.h's the same way, or its guard, never
// toggled in the earlier passes, could skip it.
#if defined(ROTARY_BF16_HARDWARE) && ROTARY_BF16_HARDWARE
#ifdef HWY_TARGET_TOGGLE
#define ROTARY_SRC_CPU_DTYPE_IO_INL_H_
#else
#undef ROTARY_SRC_CPU_DTYPE_IO_INL_H_
#endif
#endif
// The loads and stores of each storage type as float32 vectors; ROTARY_KERNELS_NAMESPACE.
#include "cpu/dtype_io-inl.h"

HWY_BEFORE_NAMESPACE();
namespace rotary::cpu::ROTARY_KERNELS_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// ---- one step of the rotation ------------------------------------------------------------------

// Per pair (a, c) and table values C, S: a' = a*C - c*S, c' = c*C + a*S, each one FMA over one
// rounded product. The inverse rotation (backward) is the same with S negated, which the caller
// does once per row (kernels.hpp, HeadsArgs::sin): fma(a, C, -(c*(-S))) is fma(a, C, c*S) bit
// for bit, since a product's rounding is symmetric, so one code path serves both directions.
HWY_INLINE void Rotate(VF a, VF c, VF cos, VF sin, VF& a_out, VF& c_out) {
  a_out = hn::MulSub(a, cos, hn::Mul(c, sin));
  c_out = hn::MulAdd(c, cos, hn::Mul(a, sin));
}

// The same for one pair in scalar code (the tails), with the same roundings.
template <DType kType>
HWY_INLINE void RotateOne(const void* in, void* out, int64_t first, int64_t second, float cos, float sin) {
  const float a = LoadOne<kType>(in, first);
  const float c = LoadOne<kType>(in, second);
  StoreOne<kType>(std::fma(a, cos, -(c * sin)), out, first);
  StoreOne<kType>(std::fma(c, cos, a * sin), out, second);
}

template <DType kType, bool kStream>
HWY_INLINE void StoreRotated(VF v, void* base, int64_t index) {
  if constexpr (kStream) {
    StreamF32<kType>(v, base, index);
  } else {
    StoreF32<kType>(v, base, index);
  }
}

// ---- heads --------------------------------------------------------------------------------------

// The split cos/sin rows of bf16 NeoX (RotateHeads): cos at [0, num_pairs), sin at
// [kMaxSplitPairs, kMaxSplitPairs + num_pairs), both vector-aligned. Longer rows (head_dim above
// 1024) take the ordinary path.
constexpr int64_t kMaxSplitPairs = 512;

// Rotates the rotated block of one head (in0 -> out0) or, with kTwo, of two heads at once (in1 ->
// out1 as well): each cos/sin vector is loaded once for both, so a step of two heads takes 6 loads
// and 4 stores where two steps of one take 8 and 4. kWide (one head only): 2N pairs per step, the
// two vectors of each half stored one after the other, so that a step writes whole 64-byte lines
// (f32 from AVX2 up; RotateHeadsInOrder says which form is used where). in and out are element 0
// of a head.
// kStream: the caller checked that the NeoX halves of every out are vector-aligned.
//
// bf16 NeoX takes 2N pairs per step first. `split` holds the caller's cos and sin rows with each
// block of 2N values reordered as its N even then N odd entries (layout at kMaxSplitPairs). A
// vector of 2N bf16 loaded as N 32-bit lanes holds the even elements in the low halves and the odd
// ones in the high halves, so one shift or one AND widens each set to float32 in place, and one
// shift and one 16-bit blend put the two rounded sets back together. That replaces the widening and
// narrowing permutes (vpmovzxwd, vpmovdw), which compete with the arithmetic for the same two
// vector ports on AVX-512.
template <DType kType, bool kNeox, bool kStream, bool kTwo, bool kWide = false>
HWY_INLINE void RotateHeads(const void* in0, void* out0, const void* in1, void* out1, int64_t offset,
                            int64_t num_pairs, const float* cos_row, const float* sin_row, const float* split) {
  const DF df;
  const auto N = static_cast<int64_t>(hn::Lanes(df));
  int64_t i = 0;
  if constexpr (kNeox) {
    const int64_t first = offset;              // a_i at first + i
    const int64_t second = offset + num_pairs;  // c_i at second + i
    if constexpr (kType == DType::BF16) {
      if (split != nullptr) {
        const DU32 du;
        const VU32 high_half = hn::Set(du, 0xFFFF0000u);
        // One head's 2N pairs: widen, rotate by the split rows, round, join, store.
        const auto step = [&](const void* in, void* out, VF c_even, VF c_odd, VF s_even, VF s_odd) HWY_ATTR {
          const auto* in16 = static_cast<const uint16_t*>(in);
          auto* out16 = static_cast<uint16_t*>(out);
          // In registers: each feeds a shift and an AND, which GCC would give a load each.
          const VU32 a_bits = InRegister(hn::LoadU(du, reinterpret_cast<const uint32_t*>(in16 + first + i)));
          const VU32 b_bits = InRegister(hn::LoadU(du, reinterpret_cast<const uint32_t*>(in16 + second + i)));
          const VF a_even = hn::BitCast(df, hn::ShiftLeft<16>(a_bits));
          const VF a_odd = hn::BitCast(df, hn::And(a_bits, high_half));
          const VF b_even = hn::BitCast(df, hn::ShiftLeft<16>(b_bits));
          const VF b_odd = hn::BitCast(df, hn::And(b_bits, high_half));
          VF a_even_f, b_even_f, a_odd_f, b_odd_f;
          Rotate(a_even, b_even, c_even, s_even, a_even_f, b_even_f);
          Rotate(a_odd, b_odd, c_odd, s_odd, a_odd_f, b_odd_f);
          // No NaN test before rounding (see F32ToBf16High): every NaN here has zero low
          // 16 bits, so adding at most 0x8000 cannot carry out of them.
          const VU32 a_out = RoundJoinBf16(a_even_f, a_odd_f);
          const VU32 b_out = RoundJoinBf16(b_even_f, b_odd_f);
          auto* a_dst = reinterpret_cast<uint32_t*>(out16 + first + i);
          auto* b_dst = reinterpret_cast<uint32_t*>(out16 + second + i);
          if constexpr (kStream) {
            hn::Stream(a_out, du, a_dst);
            hn::Stream(b_out, du, b_dst);
          } else {
            hn::StoreU(a_out, du, a_dst);
            hn::StoreU(b_out, du, b_dst);
          }
        };
        for (; i + 2 * N <= num_pairs; i += 2 * N) {
          const VF c_even = hn::Load(df, split + i);
          const VF c_odd = hn::Load(df, split + i + N);
          const VF s_even = hn::Load(df, split + kMaxSplitPairs + i);
          const VF s_odd = hn::Load(df, split + kMaxSplitPairs + i + N);
          step(in0, out0, c_even, c_odd, s_even, s_odd);
          if constexpr (kTwo) step(in1, out1, c_even, c_odd, s_even, s_odd);
        }
      }
    }
    if constexpr (kWide && !kTwo) {
      for (; i + 2 * N <= num_pairs; i += 2 * N) {
        const VF c0 = InRegister(hn::LoadU(df, cos_row + i));
        const VF c1 = InRegister(hn::LoadU(df, cos_row + i + N));
        const VF s0 = InRegister(hn::LoadU(df, sin_row + i));
        const VF s1 = InRegister(hn::LoadU(df, sin_row + i + N));
        // Loaded in memory order, each named: as call arguments GCC evaluates them right to left,
        // which touched each head's second half before its first.
        const VF a0 = InRegister(LoadF32<kType>(in0, first + i));
        const VF a1 = InRegister(LoadF32<kType>(in0, first + i + N));
        const VF b0 = InRegister(LoadF32<kType>(in0, second + i));
        const VF b1 = InRegister(LoadF32<kType>(in0, second + i + N));
        VF a0_out, b0_out, a1_out, b1_out;
        Rotate(a0, b0, c0, s0, a0_out, b0_out);
        Rotate(a1, b1, c1, s1, a1_out, b1_out);
        StoreRotated<kType, kStream>(a0_out, out0, first + i);
        StoreRotated<kType, kStream>(a1_out, out0, first + i + N);
        StoreRotated<kType, kStream>(b0_out, out0, second + i);
        StoreRotated<kType, kStream>(b1_out, out0, second + i + N);
      }
    }
    for (; i + N <= num_pairs; i += N) {
      const VF c = hn::LoadU(df, cos_row + i);
      const VF s = hn::LoadU(df, sin_row + i);
      VF a_out, b_out;
      const VF a = InRegister(LoadF32<kType>(in0, first + i));
      const VF b = InRegister(LoadF32<kType>(in0, second + i));
      Rotate(a, b, c, s, a_out, b_out);
      StoreRotated<kType, kStream>(a_out, out0, first + i);
      StoreRotated<kType, kStream>(b_out, out0, second + i);
      if constexpr (kTwo) {
        const VF a1 = InRegister(LoadF32<kType>(in1, first + i));
        const VF b1 = InRegister(LoadF32<kType>(in1, second + i));
        Rotate(a1, b1, c, s, a_out, b_out);
        StoreRotated<kType, kStream>(a_out, out1, first + i);
        StoreRotated<kType, kStream>(b_out, out1, second + i);
      }
    }
    for (; i < num_pairs; ++i) {
      RotateOne<kType>(in0, out0, first + i, second + i, cos_row[i], sin_row[i]);
      if constexpr (kTwo) RotateOne<kType>(in1, out1, first + i, second + i, cos_row[i], sin_row[i]);
    }
  } else {
    for (; i + N <= num_pairs; i += N) {
      const VF c = hn::LoadU(df, cos_row + i);
      const VF s = hn::LoadU(df, sin_row + i);
      VF a, b, a_out, b_out;
      LoadPairsF32<kType>(in0, offset + 2 * i, a, b);
      Rotate(a, b, c, s, a_out, b_out);
      StorePairsF32<kType, kStream>(a_out, b_out, out0, offset + 2 * i);
      if constexpr (kTwo) {
        LoadPairsF32<kType>(in1, offset + 2 * i, a, b);
        Rotate(a, b, c, s, a_out, b_out);
        StorePairsF32<kType, kStream>(a_out, b_out, out1, offset + 2 * i);
      }
    }
    for (; i < num_pairs; ++i) {
      const int64_t first = offset + 2 * i;
      RotateOne<kType>(in0, out0, first, first + 1, cos_row[i], sin_row[i]);
      if constexpr (kTwo) RotateOne<kType>(in1, out1, first, first + 1, cos_row[i], sin_row[i]);
    }
  }
}

// What RotateHeadsInOrder needs of one tensor's heads in one token, decided once per call.
struct HeadsPlan {
  const unsigned char* in = nullptr;
  unsigned char* out = nullptr;
  int64_t in_head_bytes = 0;
  int64_t out_head_bytes = 0;
  int64_t num_heads = 0;
  int64_t groups = 1;           // head_groups()
  int64_t heads_per_group = 0;  // num_heads / groups
  int64_t offset = 0;
  int64_t num_pairs = 0;
  const float* cos = nullptr;
  const float* sin = nullptr;
  const float* split = nullptr;  // bf16 NeoX: the split rows, or null
  bool stream = false;
  bool two_heads = false;  // RotateHeadsInOrder: two heads per step (in place, in cache; never streamed)
};

// Rotates all heads of one tensor in a token, in the order of head_groups() (kernels.hpp):
// 0, H/g, ..., (g-1)H/g, 1, H/g + 1, ... (with g = 1: 0, 1, 2, ...).
// The next head comes by addition, not division: the head index feeds the load addresses, and a
// division per head (j % groups, j / groups) cost the in-place f32 prefill 15%.
// Streaming, the pairing and the heads per step are template arguments, so that the loop over
// heads holds nothing but the pointers' arithmetic.
//
// How many heads a step takes depends on where the time goes (AMD EPYC, alternating runs;
// docs/performance.md):
//   bound by memory (out of place, or a call larger than the caches): one head, 2N pairs per
//     step, so that a step writes whole 64-byte lines and only two lines of each output are open
//     at a time. Streamed, two heads per step (four lines open) ran at 0.82-0.86 of the copy
//     stream on 2 threads where one head ran at 0.90-0.93; through the cache, decode out of place
//     took 110 us against 92; a model of the in-place prefill ran at 27.9 GB/s against 29.4.
//   in place in cache: two heads per step share each cos/sin load (RotateHeads, kTwo): the loads,
//     not the stores, limit that case, and decode in place went from 78 to 64 us.
template <DType kType, bool kNeox, bool kStream, bool kTwoHeads>
HWY_NOINLINE void RotateHeadsInOrder(const HeadsPlan& p) {
  const unsigned char* in = p.in;
  unsigned char* out = p.out;
  const int64_t num_heads = p.num_heads;
  const int64_t in_head_bytes = p.in_head_bytes;
  const int64_t out_head_bytes = p.out_head_bytes;
  const int64_t offset = p.offset;
  const int64_t num_pairs = p.num_pairs;
  const float* cos_row = p.cos;
  const float* sin_row = p.sin;
  const float* split = p.split;
  if (p.groups == 1 && !kTwoHeads) {
    // Head order (every machine but Intel): the next head by a pointer increment, with as few
    // live values as possible, since a memory-bound loop waits less the more loads the core can
    // have in flight per instruction.
    const unsigned char* head_in = in;
    unsigned char* head_out = out;
    for (int64_t j = 0; j < num_heads; ++j, head_in += in_head_bytes, head_out += out_head_bytes) {
      RotateHeads<kType, kNeox, kStream, false, true>(head_in, head_out, nullptr, nullptr, offset, num_pairs, cos_row,
                                                      sin_row, split);
    }
    return;
  }
  const int64_t step = p.heads_per_group;
  const int64_t wrap = num_heads - 1;
  const auto next = [&](int64_t h) { return h + step < num_heads ? h + step : h + step - wrap; };
  int64_t h = 0;
  int64_t j = 0;
  if constexpr (kTwoHeads) {
    for (; j + 2 <= num_heads; j += 2) {
      const int64_t h1 = next(h);
      RotateHeads<kType, kNeox, kStream, true>(in + h * in_head_bytes, out + h * out_head_bytes,
                                               in + h1 * in_head_bytes, out + h1 * out_head_bytes, offset, num_pairs,
                                               cos_row, sin_row, split);
      h = next(h1);
    }
  }
  for (; j < num_heads; ++j) {
    RotateHeads<kType, kNeox, kStream, false, !kTwoHeads>(in + h * in_head_bytes, out + h * out_head_bytes, nullptr,
                                                          nullptr, offset, num_pairs, cos_row, sin_row, split);
    h = next(h);
  }
}

// The GQA interleave of a memory-bound token (RotateTokenImpl) in one function: for each k head
// g, q heads [g r, (g + 1) r) then k head g, one head and 2N pairs per step, in head order. One
// call per token instead of two per group, with the two tensors' pointers in registers.
template <DType kType, bool kNeox, bool kStream>
HWY_NOINLINE void RotateGqaInterleaved(const HeadsPlan& q, const HeadsPlan& k) {
  const int64_t ratio = q.num_heads / k.num_heads;
  const unsigned char* q_in = q.in;
  unsigned char* q_out = q.out;
  const unsigned char* k_in = k.in;
  unsigned char* k_out = k.out;
  for (int64_t g = 0; g < k.num_heads; ++g) {
    for (int64_t j = 0; j < ratio; ++j, q_in += q.in_head_bytes, q_out += q.out_head_bytes) {
      RotateHeads<kType, kNeox, kStream, false, true>(q_in, q_out, nullptr, nullptr, q.offset, q.num_pairs, q.cos,
                                                      q.sin, q.split);
    }
    RotateHeads<kType, kNeox, kStream, false, true>(k_in, k_out, nullptr, nullptr, k.offset, k.num_pairs, k.cos, k.sin,
                                                    k.split);
    k_in += k.in_head_bytes;
    k_out += k.out_head_bytes;
  }
}

template <DType kType, bool kNeox>
HWY_INLINE void RotateAllHeads(const HeadsPlan& p) {
  if constexpr (kNeox ? CanStream<kType>() : CanStreamPairs<kType>()) {
    if (p.stream) return RotateHeadsInOrder<kType, kNeox, true, false>(p);
  }
  if (p.two_heads) return RotateHeadsInOrder<kType, kNeox, false, true>(p);
  RotateHeadsInOrder<kType, kNeox, false, false>(p);
}

// bf16 NeoX: cos and sin reordered once per call for the split path of RotateHeads, whose
// streamed vectors are twice as wide. `split_rows` holds 2 * kMaxSplitPairs floats. Returns
// split_rows, or null where the split path does not apply.
template <DType kType, bool kNeox>
HWY_INLINE const float* SplitRows(const HeadsArgs& args, float* HWY_RESTRICT split_rows) {
  constexpr bool kSplit = kType == DType::BF16 && kNeox;
  const DF df;
  const auto N = static_cast<int64_t>(hn::Lanes(df));
  if (!kSplit || args.num_pairs > kMaxSplitPairs || args.num_pairs < 2 * N) return nullptr;
  for (int64_t i = 0; i + 2 * N <= args.num_pairs; i += 2 * N) {
    VF c_even, c_odd, s_even, s_odd;
    hn::LoadInterleaved2(df, args.cos + i, c_even, c_odd);
    hn::LoadInterleaved2(df, args.sin + i, s_even, s_odd);
    hn::Store(c_even, df, split_rows + i);
    hn::Store(c_odd, df, split_rows + i + N);
    hn::Store(s_even, df, split_rows + kMaxSplitPairs + i);
    hn::Store(s_odd, df, split_rows + kMaxSplitPairs + i + N);
  }
  return split_rows;
}

template <DType kType, bool kNeox>
HeadsPlan PlanHeads(const HeadsArgs& args, const float* split) {
  constexpr int64_t kElementBytes = kType == DType::F32 ? 4 : 2;
  constexpr bool kSplit = kType == DType::BF16 && kNeox;
  const auto N = static_cast<int64_t>(hn::Lanes(DF()));
  HeadsPlan p;
  p.in = static_cast<const unsigned char*>(args.in);
  p.out = static_cast<unsigned char*>(args.out);
  // A single head's stride is never stepped and the checks do not bound it (any value is
  // valid, e.g. 2^62): it is not multiplied, which would overflow.
  if (args.num_heads > 1) {
    p.in_head_bytes = args.in_head_stride * kElementBytes;
    p.out_head_bytes = args.out_head_stride * kElementBytes;
  }
  p.num_heads = args.num_heads;
  p.offset = args.rotary_offset;
  p.num_pairs = args.num_pairs;
  p.cos = args.cos;
  p.sin = args.sin;
  p.split = split;
  // Streaming needs every streamed vector aligned in every head (NeoX: both halves of the block;
  // GPT-J: the block): the first head's are, and the head stride keeps them so (the usual
  // contiguous case). Otherwise this token is stored through the cache.
  // GPT-J streams 2N elements per step, whole vectors of N 32-bit lanes (CanStreamPairs), from
  // the block's start.
  const auto vector_bytes = static_cast<uintptr_t>(kNeox ? N * kElementBytes * (kSplit ? 2 : 1) : N * 4);
  const auto block = reinterpret_cast<uintptr_t>(p.out + args.rotary_offset * kElementBytes);
  const auto half_bytes = static_cast<uintptr_t>(args.num_pairs * kElementBytes);
  const bool can_stream = kNeox ? CanStream<kType>() : CanStreamPairs<kType>();
  p.stream = can_stream && args.stream_stores && block % vector_bytes == 0 &&
             (!kNeox || half_bytes % vector_bytes == 0) &&
             (args.num_heads == 1 || static_cast<uintptr_t>(p.out_head_bytes) % vector_bytes == 0);
  // The last head's offset is one the checks bounded (strides >= 0, every offset < 2^63 bytes),
  // so this cannot overflow; a single head may have any stride and is not multiplied.
  const int64_t last_head_bytes = args.num_heads > 1 ? (args.num_heads - 1) * p.in_head_bytes : 0;
  const int64_t groups = head_groups(args.num_heads, last_head_bytes, args.max_head_groups);
  p.groups = groups;
  p.heads_per_group = groups == 1 ? args.num_heads : args.num_heads / groups;
  p.two_heads = p.in == p.out && !args.memory_bound;
  return p;
}

// Out of place: the elements outside the rotated block are copied (usually none).
template <DType kType>
void CopyPassthrough(const HeadsArgs& args) {
  constexpr int64_t kElementBytes = kType == DType::F32 ? 4 : 2;
  const int64_t block_end = args.rotary_offset + 2 * args.num_pairs;
  if (!args.copy_passthrough || (args.rotary_offset == 0 && block_end == args.head_dim)) return;
  const auto* in = static_cast<const unsigned char*>(args.in);
  auto* out = static_cast<unsigned char*>(args.out);
  for (int64_t h = 0; h < args.num_heads; ++h) {
    const unsigned char* head_in = in + h * args.in_head_stride * kElementBytes;
    unsigned char* head_out = out + h * args.out_head_stride * kElementBytes;
    std::memcpy(head_out, head_in, static_cast<size_t>(args.rotary_offset * kElementBytes));
    std::memcpy(head_out + block_end * kElementBytes, head_in + block_end * kElementBytes,
                static_cast<size_t>((args.head_dim - block_end) * kElementBytes));
  }
}

// One token: q's heads and, when k is given, k's heads.
//
// Calls much larger than the caches (HeadsArgs::memory_bound) interleave the two tensors' heads
// as grouped-query attention pairs them: q heads [g r, (g + 1) r), then k head g (r = q heads /
// k heads), so that the four streams (q and k, in and out) advance together instead of q's
// 16 KiB row and then k's 4 KiB one. On AMD EPYC that took prefill f32 from 0.79-0.84
// to 0.88-0.89 of the copy stream out of place on 1 thread, and in place from 0.90-0.92 to
// 0.99-1.02; a plain copy in the same order was as fast as a sequential one, a copy of q's row
// then k's 3% slower (docs/performance.md). In cache it is slower (decode 45 -> 57 us): more
// single heads, fewer shared cos/sin loads. It applies where both tensors are visited in head
// order, stream alike and share their cos/sin rows (not xPos); otherwise q, then k.
template <DType kType, bool kNeox>
void RotateTokenImpl(const HeadsArgs& q, const HeadsArgs* k) {
  HWY_ALIGN float split_rows[kType == DType::BF16 && kNeox ? 2 * kMaxSplitPairs : 1];
  const float* q_split = SplitRows<kType, kNeox>(q, split_rows);
  const HeadsPlan qp = PlanHeads<kType, kNeox>(q, q_split);
  const bool same_rows = k != nullptr && k->cos == q.cos && k->sin == q.sin;
  if (same_rows && q.memory_bound && k->num_heads > 0 && q.num_heads % k->num_heads == 0) {
    const HeadsPlan kp = PlanHeads<kType, kNeox>(*k, q_split);
    if (kp.stream == qp.stream && qp.heads_per_group == qp.num_heads && kp.heads_per_group == kp.num_heads) {
      bool streamed = false;
      if constexpr (kNeox ? CanStream<kType>() : CanStreamPairs<kType>()) {
        if (qp.stream) {
          RotateGqaInterleaved<kType, kNeox, true>(qp, kp);
          streamed = true;
        }
      }
      if (!streamed) RotateGqaInterleaved<kType, kNeox, false>(qp, kp);
      CopyPassthrough<kType>(q);
      CopyPassthrough<kType>(*k);
      return;
    }
  }
  RotateAllHeads<kType, kNeox>(qp);
  CopyPassthrough<kType>(q);
  if (k == nullptr) return;
  // q is done: its split rows may be overwritten by k's.
  const float* k_split = same_rows ? q_split : SplitRows<kType, kNeox>(*k, split_rows);
  RotateAllHeads<kType, kNeox>(PlanHeads<kType, kNeox>(*k, k_split));
  CopyPassthrough<kType>(*k);
  // Non-temporal stores are weakly ordered: the caller fences them once for all its tokens
  // (flush_streamed_stores).
}

template <DType kType>
void RotateTokenTyped(const HeadsArgs& q, const HeadsArgs* k) {
  if (q.style == Style::NeoX) {
    RotateTokenImpl<kType, true>(q, k);
  } else {
    RotateTokenImpl<kType, false>(q, k);
  }
}

}  // namespace rotary::cpu::ROTARY_KERNELS_NAMESPACE
HWY_AFTER_NAMESPACE();


#endif  // ROTARY_SRC_CPU_ROTATE_KERNELS_INL_H_ per target
