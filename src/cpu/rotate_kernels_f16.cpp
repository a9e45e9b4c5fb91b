// src/cpu/rotate_kernels_f16.cpp: the F16 kernels of rotate_kernels-inl.h, compiled once
// per Highway target and dispatched at run time (rotate_kernels.cpp calls rotate_token_f16).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/rotate_kernels_f16.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "cpu/rotate_kernels-inl.h"

HWY_BEFORE_NAMESPACE();
namespace rotary::cpu::HWY_NAMESPACE {

// One concrete function per storage type, as HWY_EXPORT needs.
void RotateTokenF16(const HeadsArgs& q, const HeadsArgs* k) { RotateTokenTyped<DType::F16>(q, k); }

// The kernels' loads and stores of 16-bit types (LoadF32 / StoreF32) over arrays, for the dense
// tests of their conversions (kernels.hpp). `f16` chooses binary16, else bfloat16.
void WidenArrays(bool f16, const uint16_t* in, float* out, int64_t count) {
  const DF df;
  const auto N = static_cast<int64_t>(hn::Lanes(df));
  int64_t i = 0;
  for (; i + N <= count; i += N) {
    hn::StoreU(f16 ? LoadF32<DType::F16>(in, i) : LoadF32<DType::BF16>(in, i), df, out + i);
  }
  for (; i < count; ++i) out[i] = f16 ? LoadOne<DType::F16>(in, i) : LoadOne<DType::BF16>(in, i);
}

void NarrowArrays(bool f16, const float* in, uint16_t* out, int64_t count) {
  const DF df;
  const auto N = static_cast<int64_t>(hn::Lanes(df));
  int64_t i = 0;
  for (; i + N <= count; i += N) {
    const VF v = hn::LoadU(df, in + i);
    f16 ? StoreF32<DType::F16>(v, out, i) : StoreF32<DType::BF16>(v, out, i);
  }
  for (; i < count; ++i) f16 ? StoreOne<DType::F16>(in[i], out, i) : StoreOne<DType::BF16>(in[i], out, i);
}

}  // namespace rotary::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace rotary::cpu {

HWY_EXPORT(RotateTokenF16);
HWY_EXPORT(WidenArrays);
HWY_EXPORT(NarrowArrays);

void rotate_token_f16(const HeadsArgs& q, const HeadsArgs* k) { HWY_DYNAMIC_DISPATCH(RotateTokenF16)(q, k); }

void widen_16bit(DType dtype, const uint16_t* in, float* out, int64_t count) {
  HWY_DYNAMIC_DISPATCH(WidenArrays)(dtype == DType::F16, in, out, count);
}

void narrow_16bit(DType dtype, const float* in, uint16_t* out, int64_t count) {
  if (dtype == DType::BF16 && bf16_hardware_in_use()) return narrow_bf16_hardware(in, out, count);
  HWY_DYNAMIC_DISPATCH(NarrowArrays)(dtype == DType::F16, in, out, count);
}

}  // namespace rotary::cpu
#endif  // HWY_ONCE
