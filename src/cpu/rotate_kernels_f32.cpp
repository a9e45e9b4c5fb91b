// src/cpu/rotate_kernels_f32.cpp: the F32 kernels of rotate_kernels-inl.h, compiled once
// per Highway target and dispatched at run time (rotate_kernels.cpp calls rotate_token_f32).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/rotate_kernels_f32.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "cpu/rotate_kernels-inl.h"

HWY_BEFORE_NAMESPACE();
namespace rotary::cpu::HWY_NAMESPACE {

// One concrete function per storage type, as HWY_EXPORT needs.
void RotateTokenF32(const HeadsArgs& q, const HeadsArgs* k) { RotateTokenTyped<DType::F32>(q, k); }

}  // namespace rotary::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace rotary::cpu {

HWY_EXPORT(RotateTokenF32);

void rotate_token_f32(const HeadsArgs& q, const HeadsArgs* k) { HWY_DYNAMIC_DISPATCH(RotateTokenF32)(q, k); }

}  // namespace rotary::cpu
#endif  // HWY_ONCE
