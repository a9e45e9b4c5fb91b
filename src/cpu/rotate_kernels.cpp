// src/cpu/rotate_kernels.cpp: the Highway SIMD kernels that rotate one token's heads.
//
// Compiled once per Highway target (foreach_target) and dispatched at run time. Highway 1.0.3
// (Debian's libhwy-dev), so only ops that version has on every target, HWY_SCALAR/EMU128
// included (STYLE.md section 8): no LoadN/StoreN, no Highway bf16/f16 demotion (it truncates
// bf16, and f16 below AVX2). The 16-bit formats are converted here in 32-bit integer lanes,
// exactly and with round-to-nearest-even on store, so every target gives the same bits for the
// same float32 result.
//
// Per pair (a, c) and table values C, S (float32):
//   forward:   a' = a*C - c*S,  c' = c*C + a*S
//   backward:  a' = a*C + c*S,  c' = c*C - a*S
// computed in float32 as MulSub / MulAdd (one fused rounding where the target has FMA, two
// otherwise; docs/numerics.md derives the tolerance from this).
//
// NeoX, rotary block of d = 8 at offset o:  [.. a0 a1 a2 a3 c0 c1 c2 c3 ..]  contiguous halves
// GPT-J:                                    [.. a0 c0 a1 c1 a2 c2 a3 c3 ..]  interleaved pairs
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/cpu/rotate_kernels.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/cache_control.h"
#include "hwy/highway.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "src/cpu/kernels.hpp"

HWY_BEFORE_NAMESPACE();
namespace rotary::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using DU32 = hn::RebindToUnsigned<DF>;
using DI32 = hn::RebindToSigned<DF>;
using DU16 = hn::Rebind<uint16_t, DF>;  // as many 16-bit lanes as float lanes
using VF = hn::Vec<DF>;
using VU32 = hn::Vec<DU32>;

// ---- 16-bit formats in 32-bit lanes ------------------------------------------------------------

// bfloat16 bits (low 16 bits of each lane) -> float32: the bf16 value is the top half of a float.
HWY_INLINE VF Bf16BitsToF32(VU32 bits) { return hn::BitCast(DF(), hn::ShiftLeft<16>(bits)); }

// float32 -> bfloat16 rounded to nearest even, left in the high 16 bits of each lane (the low
// bits are garbage): bits + 0x7FFF + (the lowest kept bit), 4 operations. No NaN test and blend
// (3 more): exact for every non-NaN value, as the carry of a rounding up reaches at most the
// exponent (the largest finite float rounds to infinity, infinity stays infinity), and for every
// NaN whose low 16 bits are zero, as they are for every NaN these kernels round: IEEE 754
// arithmetic returns either the default NaN (x86: 0xFFC00000, Arm: 0x7FC00000) or one of its
// NaN operands, quieted, and the operands are bf16 inputs (low bits zero) or table values, which
// are never NaN. Only a float32 NaN with a payload in its low bits could carry into the sign
// bit; this is not a general float32 -> bf16 conversion (float_to_bf16 is).
HWY_INLINE VU32 F32ToBf16High(VF v) {
  const DU32 du;
  const VU32 bits = hn::BitCast(du, v);
  const VU32 lsb = hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 1u));
  return hn::Add(bits, hn::Add(hn::Set(du, 0x7FFFu), lsb));
}

// Two vectors of rounded bf16 in the high halves of their lanes (F32ToBf16High) -> one vector
// with `even`'s in the low halves and `odd`'s in the high halves: the even ones moved down, then
// one 16-bit blend (OddEven). HWY_SCALAR has no 16-bit view of a 32-bit lane: shift, mask, OR.
HWY_INLINE VU32 JoinBf16Halves(VU32 even, VU32 odd) {
  const DU32 du;
#if HWY_TARGET == HWY_SCALAR
  return hn::Or(hn::ShiftRight<16>(even), hn::And(odd, hn::Set(du, 0xFFFF0000u)));
#else
  const hn::Repartition<uint16_t, DU32> du16;
  return hn::BitCast(du, hn::OddEven(hn::BitCast(du16, odd), hn::BitCast(du16, hn::ShiftRight<16>(even))));
#endif
}

// IEEE binary16 bits (low 16 bits) -> float32, exact for every pattern (normals, subnormals,
// zeros, infinities, NaN). Method of Maratyszcza's FP16 library (fp16_ieee_to_fp32_value): a
// normal is rebuilt by moving exponent and mantissa into place and rescaling by 2^-112 (which
// also maps the f16 infinity/NaN exponent onto float's); a subnormal m * 2^-24 is produced
// exactly as (2^-1 + m * 2^-24) - 2^-1 via the "magic" 0.5.
HWY_INLINE VF F16BitsToF32(VU32 bits) {
  const DU32 du;
  const DI32 di;
  const DF df;
  const VU32 w = hn::ShiftLeft<16>(bits);
  const VU32 sign = hn::And(w, hn::Set(du, 0x80000000u));
  const VU32 two_w = hn::Add(w, w);
  const VF normalized = hn::Mul(hn::BitCast(df, hn::Add(hn::ShiftRight<4>(two_w), hn::Set(du, 0xE0u << 23))),
                                hn::Set(df, 0x1.0p-112f));
  const VF denormalized =
      hn::Sub(hn::BitCast(df, hn::Or(hn::ShiftRight<17>(two_w), hn::Set(du, 126u << 23))), hn::Set(df, 0.5f));
  // two_w < 2^27 <=> exponent field 0 (zero or subnormal); compared on w without its sign bit,
  // which is non-negative as int32.
  const auto is_denormal =
      hn::RebindMask(du, hn::Lt(hn::BitCast(di, hn::And(w, hn::Set(du, 0x7FFFFFFFu))), hn::Set(di, 1 << 26)));
  const VU32 magnitude = hn::IfThenElse(is_denormal, hn::BitCast(du, denormalized), hn::BitCast(du, normalized));
  return hn::BitCast(df, hn::Or(sign, magnitude));
}

// float32 -> binary16 bits (low 16 bits), round to nearest even, overflow to infinity, NaN to
// the quiet NaN 0x7E00 (sign kept). Method of the FP16 library (fp16_ieee_from_fp32_value):
// scaling |v| by 2^112 then 2^-110 lets the float multiplier do the rounding at the f16
// precision for every exponent, subnormals included, and the bias trick extracts the bits.
HWY_INLINE VU32 F32ToF16Bits(VF v) {
  const DU32 du;
  const DI32 di;
  const DF df;
  const VU32 w = hn::BitCast(du, v);
  const VU32 shl1_w = hn::Add(w, w);
  const VU32 sign = hn::And(w, hn::Set(du, 0x80000000u));
  VU32 bias = hn::And(shl1_w, hn::Set(du, 0xFF000000u));
  // bias = max(bias, 0x71000000) as unsigned: compare in int32 after flipping the top bit.
  const VU32 min_bias = hn::Set(du, 0x71000000u);
  const VU32 flip = hn::Set(du, 0x80000000u);
  const auto bias_small = hn::RebindMask(du, hn::Lt(hn::BitCast(di, hn::Xor(bias, flip)), hn::BitCast(di, hn::Xor(min_bias, flip))));
  bias = hn::IfThenElse(bias_small, min_bias, bias);
  VF base = hn::Mul(hn::Mul(hn::Abs(v), hn::Set(df, 0x1.0p+112f)), hn::Set(df, 0x1.0p-110f));
  base = hn::Add(hn::BitCast(df, hn::Add(hn::ShiftRight<1>(bias), hn::Set(du, 0x07800000u))), base);
  const VU32 base_bits = hn::BitCast(du, base);
  const VU32 exponent_bits = hn::And(hn::ShiftRight<13>(base_bits), hn::Set(du, 0x00007C00u));
  const VU32 mantissa_bits = hn::And(base_bits, hn::Set(du, 0x00000FFFu));
  const VU32 nonsign = hn::Add(exponent_bits, mantissa_bits);
  // NaN <=> shl1_w > 0xFF000000 (unsigned), again compared in int32 with the top bit flipped.
  const auto is_nan = hn::RebindMask(du, hn::Gt(hn::BitCast(di, hn::Xor(shl1_w, flip)), hn::Set(di, 0x7F000000)));
  return hn::Or(hn::ShiftRight<16>(sign), hn::IfThenElse(is_nan, hn::Set(du, 0x7E00u), nonsign));
}

// x86 targets from AVX2 up have F16C (Highway's AVX2 target requires it): vcvtph2ps and
// vcvtps2ph (rounding to nearest even, quiet NaN with the payload's top bits kept, as
// float_to_f16) convert binary16 in one instruction each, where the integer code above takes a
// dozen. Both give the same bits for every non-NaN value (tests/cpu: every target against the
// reference, and the exhaustive conversion tests).
#undef ROTARY_HAVE_F16C  // this file is compiled once per target (foreach_target)
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2 && !defined(HWY_DISABLE_F16C)
#define ROTARY_HAVE_F16C 1
#else
#define ROTARY_HAVE_F16C 0
#endif
using DF16 = hn::Rebind<hwy::float16_t, DF>;

// ---- loads and stores of N values as float32 -------------------------------------------------

template <DType kType>
HWY_INLINE VF LoadF32(const void* base, int64_t index) {
  const DF df;
  if constexpr (kType == DType::F32) {
    return hn::LoadU(df, static_cast<const float*>(base) + index);
#if ROTARY_HAVE_F16C
  } else if constexpr (kType == DType::F16) {
    return hn::PromoteTo(df, hn::LoadU(DF16(), static_cast<const hwy::float16_t*>(base) + index));
#endif
  } else {
    const VU32 bits = hn::PromoteTo(DU32(), hn::LoadU(DU16(), static_cast<const uint16_t*>(base) + index));
    if constexpr (kType == DType::BF16) {
      return Bf16BitsToF32(bits);
    } else {
      return F16BitsToF32(bits);
    }
  }
}

template <DType kType>
HWY_INLINE void StoreF32(VF v, void* base, int64_t index) {
  if constexpr (kType == DType::F32) {
    hn::StoreU(v, DF(), static_cast<float*>(base) + index);
#if ROTARY_HAVE_F16C
  } else if constexpr (kType == DType::F16) {
    hn::StoreU(hn::DemoteTo(DF16(), v), DF16(), static_cast<hwy::float16_t*>(base) + index);
#endif
  } else {
    const VU32 bits = kType == DType::BF16 ? hn::ShiftRight<16>(F32ToBf16High(v)) : F32ToF16Bits(v);
    hn::StoreU(hn::TruncateTo(DU16(), bits), DU16(), static_cast<uint16_t*>(base) + index);
  }
}

// The same store with a non-temporal hint (bypassing the cache: no read-for-ownership of the
// destination line), for large out-of-place calls. `base + index` must be aligned to the
// vector. Only full vectors may be streamed (Highway 1.0.3 widens partial ones to 16 bytes),
// so 16-bit outputs stream only where their half-width vector is at least 16 bytes.
template <DType kType>
constexpr bool CanStream() {
  return kType == DType::F32 || hn::MaxLanes(DU16()) * sizeof(uint16_t) >= 16;
}

template <DType kType>
HWY_INLINE void StreamF32(VF v, void* base, int64_t index) {
  if constexpr (kType == DType::F32) {
    hn::Stream(v, DF(), static_cast<float*>(base) + index);
#if ROTARY_HAVE_F16C
  } else if constexpr (kType == DType::F16 && CanStream<kType>()) {
    hn::Stream(hn::DemoteTo(DF16(), v), DF16(), static_cast<hwy::float16_t*>(base) + index);
#endif
  } else if constexpr (CanStream<kType>()) {
    const VU32 bits = kType == DType::BF16 ? hn::ShiftRight<16>(F32ToBf16High(v)) : F32ToF16Bits(v);
    hn::Stream(hn::TruncateTo(DU16(), bits), DU16(), static_cast<uint16_t*>(base) + index);
  } else {
    StoreF32<kType>(v, base, index);
  }
}

// 2N interleaved values (a0 c0 a1 c1 ...) as two float32 vectors a, c.
template <DType kType>
HWY_INLINE void LoadPairsF32(const void* base, int64_t index, VF& a, VF& c) {
  const DF df;
  if constexpr (kType == DType::F32) {
    hn::LoadInterleaved2(df, static_cast<const float*>(base) + index, a, c);
#if ROTARY_HAVE_F16C
  } else if constexpr (kType == DType::F16) {
    const auto* p = static_cast<const hwy::float16_t*>(base) + index;
    const auto N = static_cast<int64_t>(hn::Lanes(df));
    const VF lo = hn::PromoteTo(df, hn::LoadU(DF16(), p));      // a0 c0 a1 c1 ...
    const VF hi = hn::PromoteTo(df, hn::LoadU(DF16(), p + N));  // the next N/2 pairs
    a = hn::ConcatEven(df, hi, lo);
    c = hn::ConcatOdd(df, hi, lo);
#endif
  } else {
    // N 32-bit lanes each hold one pair: a in the low 16 bits, c in the high (little endian).
    const DU32 du;
    const VU32 lanes = hn::LoadU(du, reinterpret_cast<const uint32_t*>(static_cast<const uint16_t*>(base) + index));
    const VU32 low = hn::And(lanes, hn::Set(du, 0xFFFFu));
    const VU32 high = hn::ShiftRight<16>(lanes);
    if constexpr (kType == DType::BF16) {
      a = Bf16BitsToF32(low);
      c = Bf16BitsToF32(high);
    } else {
      a = F16BitsToF32(low);
      c = F16BitsToF32(high);
    }
  }
}

template <DType kType>
HWY_INLINE void StorePairsF32(VF a, VF c, void* base, int64_t index) {
  const DF df;
  const DU32 du;
  auto* lanes = reinterpret_cast<uint32_t*>(static_cast<uint16_t*>(base) + index);
  if constexpr (kType == DType::F32) {
    hn::StoreInterleaved2(a, c, df, static_cast<float*>(base) + index);
  } else if constexpr (kType == DType::BF16) {
    hn::StoreU(JoinBf16Halves(F32ToBf16High(a), F32ToBf16High(c)), du, lanes);
  } else {
#if ROTARY_HAVE_F16C
    const VU32 low = hn::PromoteTo(du, hn::BitCast(DU16(), hn::DemoteTo(DF16(), a)));
    const VU32 high = hn::PromoteTo(du, hn::BitCast(DU16(), hn::DemoteTo(DF16(), c)));
#else
    const VU32 low = F32ToF16Bits(a);
    const VU32 high = F32ToF16Bits(c);
#endif
    hn::StoreU(hn::Or(low, hn::ShiftLeft<16>(high)), du, lanes);
  }
}

// ---- scalar element access for the tails ----------------------------------------------------

template <DType kType>
HWY_INLINE float LoadOne(const void* base, int64_t index) {
  if constexpr (kType == DType::F32) {
    return static_cast<const float*>(base)[index];
  } else if constexpr (kType == DType::BF16) {
    return bf16_to_float(static_cast<const uint16_t*>(base)[index]);
  } else {
    return f16_to_float(static_cast<const uint16_t*>(base)[index]);
  }
}

template <DType kType>
HWY_INLINE void StoreOne(float value, void* base, int64_t index) {
  if constexpr (kType == DType::F32) {
    static_cast<float*>(base)[index] = value;
  } else if constexpr (kType == DType::BF16) {
    static_cast<uint16_t*>(base)[index] = float_to_bf16(value);
  } else {
    static_cast<uint16_t*>(base)[index] = float_to_f16(value);
  }
}

// ---- one head ---------------------------------------------------------------------------------

// The split cos/sin rows of bf16 NeoX (RotateHead): cos at [0, num_pairs), sin at
// [kMaxSplitPairs, kMaxSplitPairs + num_pairs), both vector-aligned. Longer rows (head_dim above
// 1024) take the ordinary path.
constexpr int64_t kMaxSplitPairs = 512;

// Rotates the rotated block of one head. in and out are element 0 of the head. kStream: the
// caller checked that the NeoX halves of `out` are vector-aligned.
//
// bf16 NeoX takes 2N pairs per step first. `split` holds the caller's cos and sin rows with
// each block of 2N values reordered as its N even then N odd entries (sin negated for backward;
// layout at kMaxSplitPairs). A vector of 2N bf16 loaded as N 32-bit lanes holds the even
// elements in the low halves and the odd ones in the high halves, so one shift or one AND
// widens each set to float32 in place, and one shift and one 16-bit blend put the two rounded
// sets back together. That replaces the widening and narrowing permutes (vpmovzxwd, vpmovdw),
// which compete with the arithmetic for the same two vector ports on AVX-512.
template <DType kType, bool kNeox, bool kBackward, bool kStream = false>
HWY_INLINE void RotateHead(const void* in, void* out, int64_t offset, int64_t num_pairs, const float* cos_row,
                           const float* sin_row, const float* split = nullptr) {
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
        const auto* in16 = static_cast<const uint16_t*>(in);
        auto* out16 = static_cast<uint16_t*>(out);
        for (; i + 2 * N <= num_pairs; i += 2 * N) {
          const VF c_even = hn::Load(df, split + i);
          const VF c_odd = hn::Load(df, split + i + N);
          const VF s_even = hn::Load(df, split + kMaxSplitPairs + i);
          const VF s_odd = hn::Load(df, split + kMaxSplitPairs + i + N);
          const VU32 a_bits = hn::LoadU(du, reinterpret_cast<const uint32_t*>(in16 + first + i));
          const VU32 b_bits = hn::LoadU(du, reinterpret_cast<const uint32_t*>(in16 + second + i));
          const VF a_even = hn::BitCast(df, hn::ShiftLeft<16>(a_bits));
          const VF a_odd = hn::BitCast(df, hn::And(a_bits, high_half));
          const VF b_even = hn::BitCast(df, hn::ShiftLeft<16>(b_bits));
          const VF b_odd = hn::BitCast(df, hn::And(b_bits, high_half));
          const VF a_even_f = hn::MulSub(a_even, c_even, hn::Mul(b_even, s_even));
          const VF a_odd_f = hn::MulSub(a_odd, c_odd, hn::Mul(b_odd, s_odd));
          const VF b_even_f = hn::MulAdd(b_even, c_even, hn::Mul(a_even, s_even));
          const VF b_odd_f = hn::MulAdd(b_odd, c_odd, hn::Mul(a_odd, s_odd));
          // No NaN test before rounding (see F32ToBf16High): every NaN here has zero low
          // 16 bits, so adding at most 0x8000 cannot carry out of them.
          const VU32 a_even_out = F32ToBf16High(a_even_f);
          const VU32 a_odd_out = F32ToBf16High(a_odd_f);
          const VU32 b_even_out = F32ToBf16High(b_even_f);
          const VU32 b_odd_out = F32ToBf16High(b_odd_f);
          const VU32 a_out = JoinBf16Halves(a_even_out, a_odd_out);
          const VU32 b_out = JoinBf16Halves(b_even_out, b_odd_out);
          if constexpr (kStream) {
            hn::Stream(a_out, du, reinterpret_cast<uint32_t*>(out16 + first + i));
            hn::Stream(b_out, du, reinterpret_cast<uint32_t*>(out16 + second + i));
          } else {
            hn::StoreU(a_out, du, reinterpret_cast<uint32_t*>(out16 + first + i));
            hn::StoreU(b_out, du, reinterpret_cast<uint32_t*>(out16 + second + i));
          }
        }
      }
    }
    for (; i + N <= num_pairs; i += N) {
      const VF c = hn::LoadU(df, cos_row + i);
      const VF s = kBackward ? hn::Neg(hn::LoadU(df, sin_row + i)) : hn::LoadU(df, sin_row + i);
      const VF a = LoadF32<kType>(in, first + i);
      const VF b = LoadF32<kType>(in, second + i);
      const VF a_out = hn::MulSub(a, c, hn::Mul(b, s));
      const VF b_out = hn::MulAdd(b, c, hn::Mul(a, s));
      if constexpr (kStream) {
        StreamF32<kType>(a_out, out, first + i);
        StreamF32<kType>(b_out, out, second + i);
      } else {
        StoreF32<kType>(a_out, out, first + i);
        StoreF32<kType>(b_out, out, second + i);
      }
    }
    for (; i < num_pairs; ++i) {
      const float c = cos_row[i];
      const float s = kBackward ? -sin_row[i] : sin_row[i];
      const float a = LoadOne<kType>(in, first + i);
      const float b = LoadOne<kType>(in, second + i);
      StoreOne<kType>(std::fma(a, c, -(b * s)), out, first + i);
      StoreOne<kType>(std::fma(b, c, a * s), out, second + i);
    }
  } else {
    for (; i + N <= num_pairs; i += N) {
      const VF c = hn::LoadU(df, cos_row + i);
      const VF s = kBackward ? hn::Neg(hn::LoadU(df, sin_row + i)) : hn::LoadU(df, sin_row + i);
      VF a, b;
      LoadPairsF32<kType>(in, offset + 2 * i, a, b);
      StorePairsF32<kType>(hn::MulSub(a, c, hn::Mul(b, s)), hn::MulAdd(b, c, hn::Mul(a, s)), out, offset + 2 * i);
    }
    for (; i < num_pairs; ++i) {
      const float c = cos_row[i];
      const float s = kBackward ? -sin_row[i] : sin_row[i];
      const float a = LoadOne<kType>(in, offset + 2 * i);
      const float b = LoadOne<kType>(in, offset + 2 * i + 1);
      StoreOne<kType>(std::fma(a, c, -(b * s)), out, offset + 2 * i);
      StoreOne<kType>(std::fma(b, c, a * s), out, offset + 2 * i + 1);
    }
  }
}

template <DType kType, bool kNeox, bool kBackward>
void RotateHeadsImpl(const HeadsArgs& args) {
  constexpr int64_t kElementBytes = kType == DType::F32 ? 4 : 2;
  const auto* in = static_cast<const unsigned char*>(args.in);
  auto* out = static_cast<unsigned char*>(args.out);
  const int64_t block_end = args.rotary_offset + 2 * args.num_pairs;
  // Streaming (NeoX only: GPT-J f32 stores through StoreInterleaved2) needs both halves of the
  // block vector-aligned in every head.
  // bf16 NeoX: cos and sin reordered once per call for the split path of RotateHead (below),
  // whose streamed vectors are twice as wide.
  constexpr bool kSplit = kType == DType::BF16 && kNeox;
  const DF df;
  const auto N = static_cast<int64_t>(hn::Lanes(df));
  HWY_ALIGN float split_rows[kSplit ? 2 * kMaxSplitPairs : 1];
  const float* split = nullptr;
  if (kSplit && args.num_pairs <= kMaxSplitPairs && args.num_pairs >= 2 * N) {
    for (int64_t i = 0; i + 2 * N <= args.num_pairs; i += 2 * N) {
      VF c_even, c_odd, s_even, s_odd;
      hn::LoadInterleaved2(df, args.cos + i, c_even, c_odd);
      hn::LoadInterleaved2(df, args.sin + i, s_even, s_odd);
      if (kBackward) {
        s_even = hn::Neg(s_even);
        s_odd = hn::Neg(s_odd);
      }
      hn::Store(c_even, df, split_rows + i);
      hn::Store(c_odd, df, split_rows + i + N);
      hn::Store(s_even, df, split_rows + kMaxSplitPairs + i);
      hn::Store(s_odd, df, split_rows + kMaxSplitPairs + i + N);
    }
    split = split_rows;
  }
  const auto vector_bytes = static_cast<uintptr_t>(N * kElementBytes * (kSplit ? 2 : 1));
  const bool stream = kNeox && CanStream<kType>() && args.stream_stores;
  // Heads are visited in interleaved groups a page apart where that is faster (head_groups,
  // kernels.hpp): 0, H/g, ..., (g-1)H/g, 1, H/g + 1, ... The last head's offset is one the checks bounded (strides >= 0, every offset < 2^63 bytes),
  // so this cannot overflow; a single head may have any stride and is not multiplied.
  const int64_t last_head_bytes = args.num_heads > 1 ? (args.num_heads - 1) * args.in_head_stride * kElementBytes : 0;
  const int64_t groups = head_groups(args.num_heads, last_head_bytes, args.max_head_groups);
  const int64_t heads_per_group = groups == 1 ? args.num_heads : args.num_heads / groups;
  // The next head by addition, not division: the head index feeds the load addresses, and a
  // division per head (j % groups, j / groups) cost the in-place f32 prefill 15% (2026-11-24).
  const int64_t wrap = args.num_heads - 1;
  // Whether every head's block is stream-aligned, decided once: the first head's is and the head
  // stride keeps it so (the usual contiguous case). Otherwise each head is checked.
  const auto block_address = [&](int64_t h) {
    return reinterpret_cast<uintptr_t>(out + (h * args.out_head_stride + args.rotary_offset) * kElementBytes);
  };
  const auto half_bytes = static_cast<uintptr_t>(args.num_pairs * kElementBytes);
  const bool all_aligned = stream && block_address(0) % vector_bytes == 0 && half_bytes % vector_bytes == 0 &&
                           static_cast<uintptr_t>(args.out_head_stride * kElementBytes) % vector_bytes == 0;
  const bool copy_before = args.copy_passthrough && args.rotary_offset > 0;
  const bool copy_after = args.copy_passthrough && block_end < args.head_dim;
  for (int64_t j = 0, h = 0; j < args.num_heads;
       ++j, h = h + heads_per_group < args.num_heads ? h + heads_per_group : h + heads_per_group - wrap) {
    const unsigned char* head_in = in + h * args.in_head_stride * kElementBytes;
    unsigned char* head_out = out + h * args.out_head_stride * kElementBytes;
    if (all_aligned ||
        (stream && block_address(h) % vector_bytes == 0 && (block_address(h) + half_bytes) % vector_bytes == 0)) {
      RotateHead<kType, kNeox, kBackward, true>(head_in, head_out, args.rotary_offset, args.num_pairs, args.cos,
                                                 args.sin, split);
    } else {
      RotateHead<kType, kNeox, kBackward>(head_in, head_out, args.rotary_offset, args.num_pairs, args.cos, args.sin,
                                          split);
    }
    // Out of place: the elements outside the rotated block are copied (usually none).
    if (copy_before) std::memcpy(head_out, head_in, static_cast<size_t>(args.rotary_offset * kElementBytes));
    if (copy_after) {
      std::memcpy(head_out + block_end * kElementBytes, head_in + block_end * kElementBytes,
                  static_cast<size_t>((args.head_dim - block_end) * kElementBytes));
    }
  }
  // Non-temporal stores are weakly ordered: the caller fences them once for all its tokens
  // (flush_streamed_stores).
}

template <DType kType>
void RotateHeadsTyped(const HeadsArgs& args) {
  if (args.neox) {
    args.backward ? RotateHeadsImpl<kType, true, true>(args) : RotateHeadsImpl<kType, true, false>(args);
  } else {
    args.backward ? RotateHeadsImpl<kType, false, true>(args) : RotateHeadsImpl<kType, false, false>(args);
  }
}

// One concrete function per storage type, as HWY_EXPORT needs.
void RotateHeadsF32(const HeadsArgs& args) { RotateHeadsTyped<DType::F32>(args); }
void RotateHeadsBF16(const HeadsArgs& args) { RotateHeadsTyped<DType::BF16>(args); }
void RotateHeadsF16(const HeadsArgs& args) { RotateHeadsTyped<DType::F16>(args); }

}  // namespace rotary::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace rotary::cpu {

HWY_EXPORT(RotateHeadsF32);
HWY_EXPORT(RotateHeadsBF16);
HWY_EXPORT(RotateHeadsF16);

void flush_streamed_stores() { hwy::FlushStream(); }

void rotate_heads(DType dtype, const HeadsArgs& args) {
  switch (dtype) {
    case DType::F32: HWY_DYNAMIC_DISPATCH(RotateHeadsF32)(args); return;
    case DType::BF16: HWY_DYNAMIC_DISPATCH(RotateHeadsBF16)(args); return;
    case DType::F16: HWY_DYNAMIC_DISPATCH(RotateHeadsF16)(args); return;
    case DType::F64: break;
  }
}

}  // namespace rotary::cpu
#endif  // HWY_ONCE
