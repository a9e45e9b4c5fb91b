// src/cpu/dtype_io-inl.h: the storage loads and stores of the Highway kernels, as templates over
// the storage type: N values of float32, bfloat16 or float16 widened to a vector of float32
// (LoadF32, LoadPairsF32), a float32 vector narrowed back with round-to-nearest-even (StoreF32,
// StreamF32, StorePairsF32), one value at a time for the tails (LoadOne, StoreOne), and the
// 16-bit conversions under them. Shared by apply()'s rotation (rotate_kernels-inl.h), its
// LikeTorch kernel (cos_sin_kernels-inl.h) and attention (src/attention/attention_kernels-inl.h),
// so that all give the same bits for the same float32 values on every target. Included once per
// Highway target through those files (foreach_target, the usual -inl.h guard below).
//
// Highway 1.0.3 (Debian's libhwy-dev), so only ops that version has on every target,
// HWY_SCALAR/EMU128 included: no LoadN/StoreN, no Highway bf16/f16 demotion (it truncates bf16,
// and f16 below AVX2). The 16-bit formats are converted here in 32-bit integer lanes, exactly
// and with round-to-nearest-even on store, so every target gives the same bits for the same
// float32 result. rotate_kernels_bf16_hw.cpp compiles them once more with the AVX512_BF16
// conversions (ROTARY_BF16_HARDWARE), exact for every input as well.
#if defined(ROTARY_SRC_CPU_DTYPE_IO_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ROTARY_SRC_CPU_DTYPE_IO_INL_H_
#undef ROTARY_SRC_CPU_DTYPE_IO_INL_H_
#else
#define ROTARY_SRC_CPU_DTYPE_IO_INL_H_
#endif

#include <cstdint>

#include "hwy/highway.h"
#include "rotary/tensor.hpp"  // DType; the scalar conversions of the tails (float_to_bf16, ...)

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

// ---- a loaded vector kept in a register ---------------------------------------------------------

// Keeps a loaded vector in a register. Each input vector feeds two operations (a feeds a*C and
// a*S), and GCC 12 folds the load into both as a memory operand, loading it twice: 10 loads per
// step of two heads instead of 6, which made the loads, not the stores, the busiest port (AVX2
// on AMD EPYC, perf annotate). An empty asm that claims to change the register
// leaves the value alone and forces one load.
template <class V>
HWY_INLINE V InRegister(V v) {
#if HWY_ARCH_X86 && HWY_TARGET != HWY_SCALAR && HWY_TARGET != HWY_EMU128 && (defined(__GNUC__) || defined(__clang__))
  asm("" : "+v"(v.raw));
#endif
  return v;
}

}  // namespace rotary::cpu::ROTARY_KERNELS_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ROTARY_SRC_CPU_DTYPE_IO_INL_H_ per target
