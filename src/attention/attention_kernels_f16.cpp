// src/attention/attention_kernels_f16.cpp: the F16 kernels of attention_kernels-inl.h, compiled once
// per Highway target and dispatched at run time (attention.cpp calls attend_f16).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "attention/attention_kernels_f16.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "attention/attention_kernels-inl.h"

HWY_BEFORE_NAMESPACE();
namespace rotary::attention_internal::HWY_NAMESPACE {

// One concrete function per storage type, as HWY_EXPORT needs.
void AttendF16(const Call& call, int64_t begin, int64_t end) { AttendTyped<DType::F16>(call, begin, end); }

}  // namespace rotary::attention_internal::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace rotary::attention_internal {

HWY_EXPORT(AttendF16);

void attend_f16(const Call& call, int64_t begin, int64_t end) { HWY_DYNAMIC_DISPATCH(AttendF16)(call, begin, end); }

}  // namespace rotary::attention_internal
#endif  // HWY_ONCE
