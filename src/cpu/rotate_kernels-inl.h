// src/cpu/rotate_kernels-inl.h: the Highway SIMD kernels that rotate one token's heads, as
// templates over the storage type. Each of rotate_kernels_f32.cpp, _bf16.cpp and _f16.cpp
// includes this file once per Highway target (foreach_target, the usual -inl.h guard below) and
// instantiates its own type, so that the three compile in parallel (one file took 5-9 minutes
// under the sanitizers). Dispatched at run time. Highway 1.0.3
// (Debian's libhwy-dev), so only ops that version has on every target, HWY_SCALAR/EMU128
// included: no LoadN/StoreN, no Highway bf16/f16 demotion (it truncates
// bf16, and f16 below AVX2). The 16-bit formats are converted here in 32-bit integer lanes,
// exactly and with round-to-nearest-even on store, so every target gives the same bits for the
// same float32 result.
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
#include "src/cpu/kernels.hpp"

// The namespace of the kernels: Highway's per-target one, except in rotate_kernels_bf16_hw.cpp,
// which compiles them a second time for AVX3 with the AVX512_BF16 conversions
// (ROTARY_BF16_HARDWARE) and must not define the same names as rotate_kernels_bf16.cpp's AVX3
// pass. Highway's own ops stay in hwy::HWY_NAMESPACE.
#ifndef ROTARY_KERNELS_NAMESPACE
#define ROTARY_KERNELS_NAMESPACE HWY_NAMESPACE
#endif
#ifndef ROTARY_BF16_HARDWARE
#define ROTARY_BF16_HARDWARE 0
#endif
#if ROTARY_BF16_HARDWARE && HWY_TARGET != HWY_AVX3
#error "ROTARY_BF16_HARDWARE is written for Highway's AVX3 target (16 float lanes)"
#endif

HWY_BEFORE_NAMESPACE();
namespace rotary::cpu::ROTARY_KERNELS_NAMESPACE {
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

#if ROTARY_BF16_HARDWARE
// ---- bf16 rounding with AVX512_BF16 (rotate_kernels_bf16_hw.cpp) ------------------------------
//
// VCVTNEPS2BF16 / VCVTNE2PS2BF16 round float32 to bf16 to nearest even in one instruction, with
// float_to_bf16's results for every input but one class (Intel SDM, "convert_fp32_to_bfloat16";
// checked over all 2^32 patterns on the CPU at hand by tests/cpu/apply_test.cpp):
//   NaN: sign and the top 7 payload bits kept, quiet bit set, as float_to_bf16. (The software
//     F32ToBf16High keeps a signalling NaN signalling; the kernels only round results of
//     arithmetic, whose NaNs are quiet, so the two never differ there.)
//   denormal input: treated as zero (DAZ, whatever MXCSR says), so a float32 denormal would
//     become +-0 where float_to_bf16 gives the bf16 denormal (or 2^-126) it rounds to.
// The denormal lanes are fixed exactly: a denormal d = m * 2^-149 (m < 2^23) plus 2^-126 is the
// normal number with bits bits(d) + 0x00800000 (the sum is exact: both have the spacing 2^-149
// there), whose bf16 rounding looks at the same low 16 bits and the same kept bit 16 as the
// rounding of d would, and lands at bf16(d) + 0x0080 (the bf16 bits of 2^-126). So: add
// 0x00800000 to the bits of the lanes whose exponent field is 0, convert, subtract 0x0080 from
// those lanes' results. A zero takes the same path and stays the zero of its sign (0x0080 - 0x0080);
// the sign bit is untouched by both steps.
// Only lanes whose result is +-0 can need it: the instruction's result is +-0 exactly for the
// inputs +-0 and the denormals (no normal float32 rounds to a bf16 zero: the two formats share
// their smallest normal, 2^-126). So the fast path tests the result (one VPTESTNMW for 32 lanes)
// and branches to the fix-up when any lane is zero: rare in the kernels' data (a zero input
// rotates to a zero output and takes it, at about the integer rounding's cost). Applied to every
// vector instead, without the branch, the fix-up made the hardware path 10% slower than the
// integer rounding on a bf16 decode in cache; with it, 4-7% faster (docs/performance.md).
#ifndef ROTARY_BF16_FIXUP  // 2: test the result and branch (the default); 1: always; 0: never (inexact: measurement only)
#define ROTARY_BF16_FIXUP 2
#endif

HWY_INLINE __m512 LiftDenormals(__m512 v, __mmask16 exponent_zero) {
  const __m512i bits = _mm512_castps_si512(v);
  return _mm512_castsi512_ps(_mm512_mask_add_epi32(bits, exponent_zero, bits, _mm512_set1_epi32(0x00800000)));
}

HWY_INLINE __mmask16 ExponentZero(__m512 v) {
  return _mm512_testn_epi32_mask(_mm512_castps_si512(v), _mm512_set1_epi32(0x7F800000));
}

template <typename Out, typename In>
HWY_INLINE Out SameBits(const In& in) {
  static_assert(sizeof(In) == sizeof(Out));
  Out out;
  std::memcpy(&out, &in, sizeof(out));  // the bf16 vector type as integers (a register move)
  return out;
}

// 16 float32 -> 16 bf16 (in memory order), with every lane fixed up.
HWY_INLINE __m256i Bf16HardwareExact(__m512 v) {
  const __mmask16 exponent_zero = ExponentZero(v);
  const __m256i bits = SameBits<__m256i>(_mm512_cvtneps_pbh(LiftDenormals(v, exponent_zero)));
  return _mm256_mask_sub_epi16(bits, exponent_zero, bits, _mm256_set1_epi16(0x0080));
}

// 16 float32 -> 16 bf16 (in memory order).
HWY_INLINE __m256i Bf16Hardware(__m512 v) {
#if ROTARY_BF16_FIXUP == 2
  const __m256i bits = SameBits<__m256i>(_mm512_cvtneps_pbh(v));
  if (HWY_UNLIKELY(_mm256_testn_epi16_mask(bits, _mm256_set1_epi16(0x7FFF)) != 0)) return Bf16HardwareExact(v);
  return bits;
#elif ROTARY_BF16_FIXUP == 1
  return Bf16HardwareExact(v);
#else
  return SameBits<__m256i>(_mm512_cvtneps_pbh(v));
#endif
}

// 2 x 16 float32 -> 32 bf16: `low`'s in lanes 0-15, `high`'s in lanes 16-31, every lane fixed up.
HWY_INLINE __m512i Bf16HardwareTwoExact(__m512 low, __m512 high) {
  const __mmask16 low_zero = ExponentZero(low);
  const __mmask16 high_zero = ExponentZero(high);
  const __m512i bits =
      SameBits<__m512i>(_mm512_cvtne2ps_pbh(LiftDenormals(high, high_zero), LiftDenormals(low, low_zero)));
  const __mmask32 lifted = _mm512_kunpackw(high_zero, low_zero);  // high's in bits 16-31
  return _mm512_mask_sub_epi16(bits, lifted, bits, _mm512_set1_epi16(0x0080));
}

// 2 x 16 float32 -> 32 bf16: `low`'s in lanes 0-15, `high`'s in lanes 16-31.
HWY_INLINE __m512i Bf16HardwareTwo(__m512 low, __m512 high) {
#if ROTARY_BF16_FIXUP == 2
  const __m512i bits = SameBits<__m512i>(_mm512_cvtne2ps_pbh(high, low));
  if (HWY_UNLIKELY(_mm512_testn_epi16_mask(bits, _mm512_set1_epi16(0x7FFF)) != 0)) {
    return Bf16HardwareTwoExact(low, high);
  }
  return bits;
#elif ROTARY_BF16_FIXUP == 1
  return Bf16HardwareTwoExact(low, high);
#else
  return SameBits<__m512i>(_mm512_cvtne2ps_pbh(high, low));
#endif
}

// Lanes 0-15 (even's) and 16-31 (odd's) interleaved: even_i to lane 2i, odd_i to lane 2i + 1.
alignas(64) inline constexpr uint16_t kInterleaveHalves[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                                               8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
#endif  // ROTARY_BF16_HARDWARE

// Two float32 vectors -> one vector of bf16 rounded to nearest even: `even`'s in the low halves of
// the 32-bit lanes, `odd`'s in the high halves. The same bits as rounding each with F32ToBf16High,
// moving `even`'s down and blending by 16-bit lanes, in 9 operations instead of 10: the truncated
// halves and the dropped low halves are each gathered into one vector of 16-bit lanes first, so
// that the rounding decision is made for 2N values at once. RNE rounds up iff low > 0x8000, or
// low == 0x8000 and the kept part is odd, that is iff low + lsb >= 0x8001; AverageRound(low, lsb |
// 0x7FFE) computes (low + lsb + 0x7FFF) >> 1 in 17 bits, whose bit 15 is exactly that. As with
// F32ToBf16High, a NaN must have zero low 16 bits (every NaN these kernels produce does): its carry
// is then 0.
HWY_INLINE VU32 RoundJoinBf16(VF even, VF odd) {
#if ROTARY_BF16_HARDWARE
  // One conversion of both, then one permutation (VPERMW) into the pairs' order, in place of the
  // integer rounding's 9 operations; exact for every input (above).
  const __m512i joined = Bf16HardwareTwo(even.raw, odd.raw);
  return VU32{_mm512_permutexvar_epi16(_mm512_load_si512(kInterleaveHalves), joined)};
#elif HWY_TARGET == HWY_SCALAR
  // No 16-bit view of a 32-bit lane here: round each, then shift, mask and OR.
  const DU32 du;
  return hn::Or(hn::ShiftRight<16>(F32ToBf16High(even)), hn::And(F32ToBf16High(odd), hn::Set(du, 0xFFFF0000u)));
#else
  const DU32 du;
  const hn::Repartition<uint16_t, DU32> du16;
  const VU32 e = hn::BitCast(du, even);
  const VU32 o = hn::BitCast(du, odd);
  const auto kept = hn::OddEven(hn::BitCast(du16, o), hn::BitCast(du16, hn::ShiftRight<16>(e)));
  const auto low = hn::OddEven(hn::BitCast(du16, hn::ShiftLeft<16>(o)), hn::BitCast(du16, e));
  const auto lsb_bias = hn::Or(hn::And(kept, hn::Set(du16, 1)), hn::Set(du16, 0x7FFE));
  const auto carry = hn::ShiftRight<15>(hn::AverageRound(low, lsb_bias));
  return hn::BitCast(du, hn::Add(kept, carry));
#endif
}

// RoundJoinBf16 over arrays (the scalar rest with float_to_bf16): the body of the test hooks
// RoundJoinBf16Arrays of rotate_kernels_bf16.cpp and rotate_kernels_bf16_hw.cpp (kernels.hpp).
HWY_INLINE void RoundJoinBf16Over(const float* even, const float* odd, uint32_t* out, int64_t count) {
  const DF df;
  const DU32 du;
  const auto N = static_cast<int64_t>(hn::Lanes(df));
  int64_t i = 0;
  for (; i + N <= count; i += N) {
    hn::StoreU(RoundJoinBf16(hn::LoadU(df, even + i), hn::LoadU(df, odd + i)), du, out + i);
  }
  for (; i < count; ++i) {
    out[i] = static_cast<uint32_t>(float_to_bf16(even[i])) | (static_cast<uint32_t>(float_to_bf16(odd[i])) << 16);
  }
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
// Without F16C the integer conversions below take a dozen operations each, and they are called
// rather than inlined on those targets (SSSE3, SSE4, scalar: fallbacks for CPUs without AVX2):
// inlined into every kernel they took the f16 file 4 minutes to compile under the sanitizers.
#undef ROTARY_F16_CONVERSION
#if ROTARY_HAVE_F16C
#define ROTARY_F16_CONVERSION HWY_INLINE
#else
#define ROTARY_F16_CONVERSION inline HWY_NOINLINE  // inline: one definition in every file
#endif

// IEEE binary16 bits (low 16 bits) -> float32, exact for every pattern (normals, subnormals,
// zeros, infinities, NaN). Method of Maratyszcza's FP16 library (fp16_ieee_to_fp32_value): a
// normal is rebuilt by moving exponent and mantissa into place and rescaling by 2^-112 (which
// also maps the f16 infinity/NaN exponent onto float's); a subnormal m * 2^-24 is produced
// exactly as (2^-1 + m * 2^-24) - 2^-1 via the "magic" 0.5.
ROTARY_F16_CONVERSION VF F16BitsToF32(VU32 bits) {
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
ROTARY_F16_CONVERSION VU32 F32ToF16Bits(VF v) {
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
#if ROTARY_BF16_HARDWARE
  } else if constexpr (kType == DType::BF16) {
    hn::StoreU(hn::Vec<DU16>{Bf16Hardware(v.raw)}, DU16(), static_cast<uint16_t*>(base) + index);
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
#if ROTARY_BF16_HARDWARE
  } else if constexpr (kType == DType::BF16) {
    hn::Stream(hn::Vec<DU16>{Bf16Hardware(v.raw)}, DU16(), static_cast<uint16_t*>(base) + index);
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

// GPT-J pairs can be streamed where the interleaving is done in registers: 16-bit types always
// (the two halves join into one vector of 32-bit lanes), float32 on targets of one or two
// 128-bit blocks (SSSE3, SSE4, AVX2: InterleaveLower/Upper, then the blocks put in order). AVX3
// would need a permutation across four blocks; its float32 GPT-J stores go through the cache.
template <DType kType>
constexpr bool CanStreamPairs() {
#if HWY_TARGET == HWY_SCALAR || HWY_TARGET == HWY_EMU128
  return false;
#else
  return kType != DType::F32 || (HWY_ARCH_X86 && hn::MaxLanes(DF()) * sizeof(float) <= 32);
#endif
}

template <DType kType, bool kStream = false>
HWY_INLINE void StorePairsF32(VF a, VF c, void* base, int64_t index) {
  const DF df;
  const DU32 du;
  auto* lanes = reinterpret_cast<uint32_t*>(static_cast<uint16_t*>(base) + index);
  const auto store_lanes = [&](VU32 v) HWY_ATTR {
    if constexpr (kStream && CanStreamPairs<kType>()) {
      hn::Stream(v, du, lanes);
    } else {
      hn::StoreU(v, du, lanes);
    }
  };
  if constexpr (kType == DType::F32) {
    float* out = static_cast<float*>(base) + index;
    if constexpr (kStream && CanStreamPairs<kType>()) {
#if HWY_TARGET != HWY_SCALAR && HWY_TARGET != HWY_EMU128
      const auto N = static_cast<int64_t>(hn::Lanes(df));
      const VF lower = hn::InterleaveLower(df, a, c);  // a0 c0 a1 c1 | a4 c4 a5 c5 (per block)
      const VF upper = hn::InterleaveUpper(df, a, c);  // a2 c2 a3 c3 | a6 c6 a7 c7
      if constexpr (hn::MaxLanes(DF()) * sizeof(float) == 16) {
        hn::Stream(lower, df, out);
        hn::Stream(upper, df, out + N);
      } else {
        hn::Stream(hn::ConcatLowerLower(df, upper, lower), df, out);
        hn::Stream(hn::ConcatUpperUpper(df, upper, lower), df, out + N);
      }
#endif
    } else {
      hn::StoreInterleaved2(a, c, df, out);
    }
  } else if constexpr (kType == DType::BF16) {
    store_lanes(RoundJoinBf16(a, c));
  } else {
#if ROTARY_HAVE_F16C
    const VU32 low = hn::PromoteTo(du, hn::BitCast(DU16(), hn::DemoteTo(DF16(), a)));
    const VU32 high = hn::PromoteTo(du, hn::BitCast(DU16(), hn::DemoteTo(DF16(), c)));
#else
    const VU32 low = F32ToF16Bits(a);
    const VU32 high = F32ToF16Bits(c);
#endif
    store_lanes(hn::Or(low, hn::ShiftLeft<16>(high)));
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

// ---- one step of the rotation ------------------------------------------------------------------

// Keeps a loaded vector in a register. Each input vector feeds two operations (a feeds a*C and
// a*S), and GCC 12 folds the load into both as a memory operand, loading it twice: 10 loads per
// step of two heads instead of 6, which made the loads, not the stores, the busiest port (AVX2
// on AMD EPYC, perf annotate, 2026-11-25). An empty asm that claims to change the register
// leaves the value alone and forces one load.
template <class V>
HWY_INLINE V InRegister(V v) {
#if HWY_ARCH_X86 && HWY_TARGET != HWY_SCALAR && HWY_TARGET != HWY_EMU128 && (defined(__GNUC__) || defined(__clang__))
  asm("" : "+v"(v.raw));
#endif
  return v;
}

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
// division per head (j % groups, j / groups) cost the in-place f32 prefill 15% (2026-11-24).
// Streaming, the pairing and the heads per step are template arguments, so that the loop over
// heads holds nothing but the pointers' arithmetic.
//
// How many heads a step takes depends on where the time goes (AMD EPYC, 2026-11-25, alternating
// runs; docs/performance.md):
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
// 16 KiB row and then k's 4 KiB one. On AMD EPYC (2026-11-25) that took prefill f32 from 0.79-0.84
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
