// src/cpu/cos_sin_kernels.cpp: the kernels of cos_sin_kernels-inl.h, compiled once per Highway
// target (with -ffp-contract=off: src/cpu/CMakeLists.txt) and dispatched at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/cos_sin_kernels.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "cpu/cos_sin_kernels-inl.h"

HWY_BEFORE_NAMESPACE();
namespace rotary::cpu::HWY_NAMESPACE {

// One concrete function per storage type, as HWY_EXPORT needs.
void CosSinBlockF32(const CosSinBlockArgs& args) { RotateBlockTyped<DType::F32>(args); }
void CosSinBlockBF16(const CosSinBlockArgs& args) { RotateBlockTyped<DType::BF16>(args); }
void CosSinBlockF16(const CosSinBlockArgs& args) { RotateBlockTyped<DType::F16>(args); }

}  // namespace rotary::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace rotary::cpu {

HWY_EXPORT(CosSinBlockF32);
HWY_EXPORT(CosSinBlockBF16);
HWY_EXPORT(CosSinBlockF16);

void rotate_cos_sin_like_torch(DType dtype, const CosSinBlockArgs& args) {
  switch (dtype) {
    case DType::F32: HWY_DYNAMIC_DISPATCH(CosSinBlockF32)(args); return;
    case DType::BF16: HWY_DYNAMIC_DISPATCH(CosSinBlockBF16)(args); return;
    case DType::F16: HWY_DYNAMIC_DISPATCH(CosSinBlockF16)(args); return;
    case DType::F64: break;  // never called: apply_cos_sin.cpp keeps float64 on its own loop
  }
}

}  // namespace rotary::cpu
#endif  // HWY_ONCE
