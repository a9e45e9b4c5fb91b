// src/cpu/cos_sin_kernels-inl.h: the Highway kernel of apply_cos_sin's Rounding::LikeTorch
// (cos_sin_kernels.hpp says what it computes). Included once per Highway target by
// cos_sin_kernels.cpp (foreach_target, the usual -inl.h guard below); the loads, stores and
// 16-bit conversions are dtype_io-inl.h's, as the rotation's (rotate_kernels-inl.h), so both
// kernels give the same bits for the same float32 values on every target.
//
// Exactness against eager torch (the Python tests compare bit for bit; tests/cpu against an
// op-by-op emulation on every target):
//   float32: x*c and x[p]*t are two rounded products and their sum a third rounding. A fused
//     multiply-add would round once: cos_sin_kernels.cpp is compiled with -ffp-contract=off
//     (src/cpu/CMakeLists.txt), as GCC's intrinsics are plain vector operators it may contract.
//   bf16 / f16: torch computes each binary op in float32 on the widened values and rounds the
//     result to the storage type (mul, round; mul, round; add, round). A product of two bf16
//     (8-bit) or f16 (11-bit) significands is exact in float32, so each product's one rounding
//     is RoundTo's; the sum of two rounded products is rounded to float32 by the Add and then to
//     the storage type on store, as torch does.
#if defined(ROTARY_SRC_CPU_COS_SIN_KERNELS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ROTARY_SRC_CPU_COS_SIN_KERNELS_INL_H_
#undef ROTARY_SRC_CPU_COS_SIN_KERNELS_INL_H_
#else
#define ROTARY_SRC_CPU_COS_SIN_KERNELS_INL_H_
#endif

#include <cstring>

#include "hwy/highway.h"
#include "cpu/cos_sin_kernels.hpp"
#include "cpu/dtype_io-inl.h"
#include "cpu/storage.hpp"

HWY_BEFORE_NAMESPACE();
namespace rotary::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// v rounded to the nearest value of the storage type (nearest even), as float32. bf16: the
// kernels' own rounding (F32ToBf16High: exact for every value these products and sums take,
// NaNs included, see there); f16: F16C's conversion there and back, or the integer code.
// float32 products stay as they are, but kept in a register (InRegister: an empty asm the
// compiler cannot see through), so that nothing fuses them with the add that follows; see
// RoundOne.
template <DType kType>
HWY_INLINE VF RoundTo(VF v) {
  if constexpr (kType == DType::F32) {
    return InRegister(v);
  } else if constexpr (kType == DType::BF16) {
    return hn::BitCast(DF(), hn::And(F32ToBf16High(v), hn::Set(DU32(), 0xFFFF0000u)));
  } else {
#if ROTARY_HAVE_F16C
    return hn::PromoteTo(DF(), hn::DemoteTo(DF16(), v));
#else
    return F16BitsToF32(F32ToF16Bits(v));
#endif
  }
}

// The same for one value. float32: -ffp-contract=off is not enough on its own: GCC 12's SLP
// vectorizer turned the scalar GPT-J tail (a*c1 - b*s1, b*c2 + a*s2) into vfmaddsub, one
// rounding instead of two, with the flag set (caught by tests/cpu/apply_cos_sin_test.cpp). An
// empty asm on each product stops every such fusion.
template <DType kType>
HWY_INLINE float RoundOne(float v) {
  if constexpr (kType == DType::F32) {
#if HWY_ARCH_X86 && (defined(__GNUC__) || defined(__clang__))
    asm("" : "+x"(v));
#endif
    return v;
  } else {
    return ElementStorage<kType>::round(v);
  }
}

// One rotated pair of vectors: (a', b') from (a, b) and their cos / sin values (cos_sin_kernels.hpp).
template <DType kType, bool kBackward>
HWY_INLINE void LikeTorch(VF a, VF b, VF c1, VF c2, VF s1, VF s2, VF& a_out, VF& b_out) {
  if constexpr (kBackward) {
    a_out = hn::Add(RoundTo<kType>(hn::Mul(a, c1)), RoundTo<kType>(hn::Mul(b, s2)));
    b_out = hn::Sub(RoundTo<kType>(hn::Mul(b, c2)), RoundTo<kType>(hn::Mul(a, s1)));
  } else {
    a_out = hn::Sub(RoundTo<kType>(hn::Mul(a, c1)), RoundTo<kType>(hn::Mul(b, s1)));
    b_out = hn::Add(RoundTo<kType>(hn::Mul(b, c2)), RoundTo<kType>(hn::Mul(a, s2)));
  }
}

// One head of one token, with the token's float32 rows c and s (NeoX: as stored; GPT-J: the even
// entries, then the odd ones). NeoX: every vector of both halves is loaded before its outputs are
// stored, so in place is safe; GPT-J's pairs are loaded and stored together.
template <DType kType, bool kNeox, bool kBackward>
HWY_INLINE void RotateHead(const void* in, void* out, const float* HWY_RESTRICT c, const float* HWY_RESTRICT s,
                           int64_t half) {
  const DF df;
  const auto N = static_cast<int64_t>(hn::Lanes(df));
  int64_t i = 0;
  VF a, b, a_out, b_out;
  for (; i + N <= half; i += N) {
    if constexpr (kNeox) {
      a = LoadF32<kType>(in, i);
      b = LoadF32<kType>(in, half + i);
    } else {
      LoadPairsF32<kType>(in, 2 * i, a, b);
    }
    LikeTorch<kType, kBackward>(a, b, hn::LoadU(df, c + i), hn::LoadU(df, c + half + i), hn::LoadU(df, s + i),
                                hn::LoadU(df, s + half + i), a_out, b_out);
    if constexpr (kNeox) {
      StoreF32<kType>(a_out, out, i);
      StoreF32<kType>(b_out, out, half + i);
    } else {
      StorePairsF32<kType>(a_out, b_out, out, 2 * i);
    }
  }
  const auto R = [](float v) HWY_ATTR { return RoundOne<kType>(v); };
  for (; i < half; ++i) {
    const int64_t first = kNeox ? i : 2 * i;
    const int64_t second = kNeox ? half + i : 2 * i + 1;
    const float x1 = LoadOne<kType>(in, first);
    const float x2 = LoadOne<kType>(in, second);  // both read before either is written (in place)
    const float c1 = c[i], c2 = c[half + i], s1 = s[i], s2 = s[half + i];
    if constexpr (kBackward) {
      StoreOne<kType>(R(x1 * c1) + R(x2 * s2), out, first);
      StoreOne<kType>(R(x2 * c2) - R(x1 * s1), out, second);
    } else {
      StoreOne<kType>(R(x1 * c1) - R(x2 * s1), out, first);
      StoreOne<kType>(R(x2 * c2) + R(x1 * s2), out, second);
    }
  }
}

// A row of r values of the storage type widened to float32 (exact), GPT-J's split into its even
// entries, then its odd ones.
template <DType kType, bool kNeox>
HWY_INLINE void WidenRow(const void* src, float* HWY_RESTRICT dst, int64_t r) {
  const DF df;
  const auto N = static_cast<int64_t>(hn::Lanes(df));
  const int64_t half = r / 2;
  int64_t i = 0;
  if constexpr (kNeox) {
    for (; i + N <= r; i += N) hn::StoreU(LoadF32<kType>(src, i), df, dst + i);
    for (; i < r; ++i) dst[i] = LoadOne<kType>(src, i);
  } else {
    for (; i + N <= half; i += N) {
      VF even, odd;
      LoadPairsF32<kType>(src, 2 * i, even, odd);
      hn::StoreU(even, df, dst + i);
      hn::StoreU(odd, df, dst + half + i);
    }
    for (; i < half; ++i) {
      dst[i] = LoadOne<kType>(src, 2 * i);
      dst[half + i] = LoadOne<kType>(src, 2 * i + 1);
    }
  }
}

template <DType kType, bool kNeox, bool kBackward>
HWY_NOINLINE void RotateBlock(const CosSinBlockArgs& args) {
  constexpr int64_t kBytes = kType == DType::F32 ? 4 : 2;
  const auto* in = static_cast<const unsigned char*>(args.in);
  auto* out = static_cast<unsigned char*>(args.out);
  const auto* cos = static_cast<const unsigned char*>(args.cos);
  const auto* sin = static_cast<const unsigned char*>(args.sin);
  const int64_t r = args.rotary_dim;
  // Offsets by multiplication with in-range indices only: a stride that is never stepped (one
  // token, one head) may be any value, and index 0 never multiplies it into an overflow.
  for (int64_t n = 0; n < args.tokens; ++n) {
    WidenRow<kType, kNeox>(cos + n * args.cos_token_stride * kBytes, args.rows + 2 * n * r, r);
    WidenRow<kType, kNeox>(sin + n * args.sin_token_stride * kBytes, args.rows + (2 * n + 1) * r, r);
  }
  const auto tail_bytes = static_cast<size_t>((args.head_dim - r) * kBytes);
  const auto one = [&](int64_t n, int64_t h) HWY_ATTR {
    const unsigned char* head_in = in + (n * args.in_token_stride + h * args.in_head_stride) * kBytes;
    unsigned char* head_out = out + (n * args.out_token_stride + h * args.out_head_stride) * kBytes;
    const float* c = args.rows + 2 * n * r;
    RotateHead<kType, kNeox, kBackward>(head_in, head_out, c, c + r, r / 2);
    if (tail_bytes != 0 && head_in != head_out) {
      std::memcpy(head_out + r * kBytes, head_in + r * kBytes, tail_bytes);
    }
  };
  if (args.heads_outer) {
    for (int64_t h = 0; h < args.heads; ++h) {
      for (int64_t n = 0; n < args.tokens; ++n) one(n, h);
    }
  } else {
    for (int64_t n = 0; n < args.tokens; ++n) {
      for (int64_t h = 0; h < args.heads; ++h) one(n, h);
    }
  }
}

template <DType kType>
void RotateBlockTyped(const CosSinBlockArgs& args) {
  const bool neox = args.style == Style::NeoX;
  if (neox && !args.backward) return RotateBlock<kType, true, false>(args);
  if (neox) return RotateBlock<kType, true, true>(args);
  if (!args.backward) return RotateBlock<kType, false, false>(args);
  RotateBlock<kType, false, true>(args);
}

}  // namespace rotary::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ROTARY_SRC_CPU_COS_SIN_KERNELS_INL_H_ per target
