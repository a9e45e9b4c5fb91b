// src/cpu/rotate_kernels_bf16_hw.cpp: the BF16 kernels of rotate_kernels-inl.h once more, for
// Highway's AVX3 target with the AVX512_BF16 conversions (VCVTNEPS2BF16 / VCVTNE2PS2BF16) in
// place of the integer rounding: the target "AVX3_BF16" of cpu_targets() (targets.cpp), chosen at
// run time on CPUs that have AVX512_BF16 (AMD Zen 4 and later, Intel Cooper Lake and Sapphire
// Rapids and later). Every other CPU runs rotate_kernels_bf16.cpp's kernels, unchanged.
//
// Highway 1.0.3 has no target with AVX512_BF16 (its AVX3_DL is Ice Lake's set, and its bf16
// DemoteTo truncates), so this file goes through foreach_target like the others but compiles the
// kernels only in the AVX3 pass, with "avx512bf16" added to the target attribute of every
// function (HWY_TARGET_STR, which HWY_BEFORE_NAMESPACE and HWY_ATTR expand), in a namespace of
// its own (rotary::cpu::N_AVX3_BF16: the same templates with other stores must not share
// rotate_kernels_bf16.cpp's names). No HWY_EXPORT: rotate_token_bf16 calls in here only after
// bf16_hardware_in_use() (targets.cpp: CPUID and the OS's AVX-512 state), never on other CPUs.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/rotate_kernels_bf16_hw.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "cpu/kernels.hpp"

// GCC 10 and Clang 9 brought the intrinsics.
#undef ROTARY_COMPILE_BF16_HARDWARE
#if HWY_ARCH_X86_64 && HWY_TARGET == HWY_AVX3 && \
    ((HWY_COMPILER_GCC_ACTUAL >= 1000) || (HWY_COMPILER_CLANG >= 900))
#define ROTARY_COMPILE_BF16_HARDWARE 1
#else
#define ROTARY_COMPILE_BF16_HARDWARE 0
#endif

#if ROTARY_COMPILE_BF16_HARDWARE
#undef HWY_TARGET_STR
#define HWY_TARGET_STR HWY_TARGET_STR_AVX3 ",avx512bf16"
#undef ROTARY_BF16_HARDWARE
#define ROTARY_BF16_HARDWARE 1
#undef ROTARY_KERNELS_NAMESPACE
#define ROTARY_KERNELS_NAMESPACE N_AVX3_BF16
// The -inl.h's guard flips with foreach_target's toggle, and is included here in one pass only:
// set it so that this inclusion is the live one whatever the toggle is in the AVX3 pass.
#ifdef HWY_TARGET_TOGGLE
#define ROTARY_SRC_CPU_ROTATE_KERNELS_INL_H_
#else
#undef ROTARY_SRC_CPU_ROTATE_KERNELS_INL_H_
#endif
#include "cpu/rotate_kernels-inl.h"

HWY_BEFORE_NAMESPACE();
namespace rotary::cpu::N_AVX3_BF16 {

void RotateTokenBF16(const HeadsArgs& q, const HeadsArgs* k) { RotateTokenTyped<DType::BF16>(q, k); }

// The test hooks of kernels.hpp (round_join_bf16, narrow_16bit) with these conversions.
void RoundJoinBf16Arrays(const float* even, const float* odd, uint32_t* out, int64_t count) {
  RoundJoinBf16Over(even, odd, out, count);
}

void NarrowBf16Arrays(const float* in, uint16_t* out, int64_t count) {
  const DF df;
  const auto N = static_cast<int64_t>(hn::Lanes(df));
  int64_t i = 0;
  for (; i + N <= count; i += N) StoreF32<DType::BF16>(hn::LoadU(df, in + i), out, i);
  for (; i < count; ++i) StoreOne<DType::BF16>(in[i], out, i);
}

// VCVTNEPS2BF16 alone, without the denormal fix-up: what the instruction does on this CPU, for
// the test that shows the fix-up is needed (kernels.hpp).
void ConvertBf16UnfixedArrays(const float* in, uint16_t* out, int64_t count) {
  int64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const auto converted = _mm512_cvtneps_pbh(_mm512_loadu_ps(in + i));
    std::memcpy(out + i, &converted, sizeof(converted));
  }
  for (; i < count; ++i) out[i] = float_to_bf16(in[i]);
}

}  // namespace rotary::cpu::N_AVX3_BF16
HWY_AFTER_NAMESPACE();
#endif  // ROTARY_COMPILE_BF16_HARDWARE

#if HWY_ONCE
namespace rotary::cpu {

// HWY_ONCE is the static target's pass, after the AVX3 one: the functions above exist iff
// ROTARY_BF16_HARDWARE_BUILT.
#if HWY_ARCH_X86_64 && (HWY_TARGETS & HWY_AVX3) && ((HWY_COMPILER_GCC_ACTUAL >= 1000) || (HWY_COMPILER_CLANG >= 900))
#define ROTARY_BF16_HARDWARE_BUILT 1
#else
#define ROTARY_BF16_HARDWARE_BUILT 0
#endif

bool bf16_hardware_compiled() { return ROTARY_BF16_HARDWARE_BUILT != 0; }

#if ROTARY_BF16_HARDWARE_BUILT
void rotate_token_bf16_hardware(const HeadsArgs& q, const HeadsArgs* k) { N_AVX3_BF16::RotateTokenBF16(q, k); }
void round_join_bf16_hardware(const float* even, const float* odd, uint32_t* out, int64_t count) {
  N_AVX3_BF16::RoundJoinBf16Arrays(even, odd, out, count);
}
void narrow_bf16_hardware(const float* in, uint16_t* out, int64_t count) {
  N_AVX3_BF16::NarrowBf16Arrays(in, out, count);
}
void convert_bf16_hardware_unfixed(const float* in, uint16_t* out, int64_t count) {
  N_AVX3_BF16::ConvertBf16UnfixedArrays(in, out, count);
}
#else
// Never called: bf16_hardware_in_use() is false where bf16_hardware_compiled() is.
void rotate_token_bf16_hardware(const HeadsArgs&, const HeadsArgs*) {}
void round_join_bf16_hardware(const float*, const float*, uint32_t*, int64_t) {}
void narrow_bf16_hardware(const float*, uint16_t*, int64_t) {}
void convert_bf16_hardware_unfixed(const float*, uint16_t*, int64_t) {}
#endif

}  // namespace rotary::cpu
#endif  // HWY_ONCE
