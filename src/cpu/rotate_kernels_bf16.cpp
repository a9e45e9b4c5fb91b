// src/cpu/rotate_kernels_bf16.cpp: the BF16 kernels of rotate_kernels-inl.h, compiled once
// per Highway target and dispatched at run time (rotate_kernels.cpp calls rotate_token_bf16).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/rotate_kernels_bf16.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "cpu/rotate_kernels-inl.h"

HWY_BEFORE_NAMESPACE();
namespace rotary::cpu::HWY_NAMESPACE {

// One concrete function per storage type, as HWY_EXPORT needs.
void RotateTokenBF16(const HeadsArgs& q, const HeadsArgs* k) { RotateTokenTyped<DType::BF16>(q, k); }

// RoundJoinBf16 over arrays, for the exhaustive test of its rounding (kernels.hpp).
void RoundJoinBf16Arrays(const float* even, const float* odd, uint32_t* out, int64_t count) {
  RoundJoinBf16Over(even, odd, out, count);
}

}  // namespace rotary::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace rotary::cpu {

HWY_EXPORT(RotateTokenBF16);
HWY_EXPORT(RoundJoinBf16Arrays);

// AVX3_BF16 (rotate_kernels_bf16_hw.cpp) where it is the current target, else Highway's choice.
void rotate_token_bf16(const HeadsArgs& q, const HeadsArgs* k) {
  if (bf16_hardware_in_use()) return rotate_token_bf16_hardware(q, k);
  HWY_DYNAMIC_DISPATCH(RotateTokenBF16)(q, k);
}

void round_join_bf16(const float* even, const float* odd, uint32_t* out, int64_t count) {
  if (bf16_hardware_in_use()) return round_join_bf16_hardware(even, odd, out, count);
  HWY_DYNAMIC_DISPATCH(RoundJoinBf16Arrays)(even, odd, out, count);
}

}  // namespace rotary::cpu
#endif  // HWY_ONCE
