// tests/cpu/device_seam_test.cpp: the device in TensorView and the rotation backends
// (include/rotary/tensor.hpp, src/cpu/backends.hpp, docs/backends.md).
//
// A view can say it is on a GPU, but this build has no GPU backend: apply() and apply_cos_sin()
// must run the device-neutral checks (mixed devices refused by name), then refuse a GPU call by
// name before any kernel could read device memory. The "GPU" views here point at host buffers
// holding sentinels, so a kernel that ran anyway would show as a changed buffer.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "rotary/apply.hpp"
#include "rotary/apply_cos_sin.hpp"
#include "rotary/error.hpp"
#include "rotary/table.hpp"
#include "rotary/tensor.hpp"
#include "cpu/backends.hpp"
#include "tests/support/spec_builder.hpp"

namespace rotary {
namespace {

using ::testing::ThrowsMessage;
using ::testing::StrEq;

constexpr Device kCuda0{DeviceKind::CUDA, 0};
constexpr Device kCuda1{DeviceKind::CUDA, 1};
constexpr const char* kNoCudaBackend =
    "apply: q is on cuda:0; this build has no backend for cuda (the GPU path is in the Python package: rotary.torch)";

// q (1, 3, 2, 8) and k (1, 3, 1, 8) float32 BSHD with separate outputs holding sentinels.
struct Call {
  Call() : table(test::rope_spec({.name = "seam", .head_dim = 8}), TableOptions{.fixed_positions = 16}) {
    q_buf.assign(48, 0.5f);
    k_buf.assign(24, -0.25f);
    q_out_buf.assign(48, 7.0f);
    k_out_buf.assign(24, -7.0f);
    q = contiguous_view(q_buf.data(), DType::F32, Layout::BSHD, {1, 3, 2, 8});
    k = contiguous_view(k_buf.data(), DType::F32, Layout::BSHD, {1, 3, 1, 8});
    q_out = contiguous_view(q_out_buf.data(), DType::F32, Layout::BSHD, {1, 3, 2, 8});
    k_out = contiguous_view(k_out_buf.data(), DType::F32, Layout::BSHD, {1, 3, 1, 8});
  }
  void on(Device device) {
    for (TensorView* view : {&q, &k, &q_out, &k_out}) view->device = device;
  }
  void check() const { check_apply_arguments(q, k, q_out, k_out, Positions::arange(), table, {}); }
  void run() const { apply(q, k, q_out, k_out, Positions::arange(), table); }
  void run_reference() const { reference::apply(q, k, q_out, k_out, Positions::arange(), table); }
  bool outputs_untouched() const {
    for (float value : q_out_buf) if (value != 7.0f) return false;
    for (float value : k_out_buf) if (value != -7.0f) return false;
    return true;
  }

  CosSinTable table;
  std::vector<float> q_buf, k_buf, q_out_buf, k_out_buf;
  TensorView q, k, q_out, k_out;
};

TEST(DeviceSeam, DevicesAreNamedAsPyTorchSpellsThem) {
  EXPECT_EQ(to_string(Device{}), "cpu");
  EXPECT_EQ(to_string(kCuda0), "cuda:0");
  EXPECT_EQ(to_string(Device{DeviceKind::CUDA, 3}), "cuda:3");
  EXPECT_EQ(to_string(DeviceKind::CUDA), "cuda");
  EXPECT_EQ(to_string(static_cast<DeviceKind>(9)), "unknown");
  // Every existing caller builds CPU views without naming a device.
  const TensorView view = contiguous_view(nullptr, DType::F32, Layout::BSHD, {1, 1, 1, 2});
  EXPECT_EQ(view.device, Device{});
  EXPECT_EQ(TensorView{}.device.kind, DeviceKind::CPU);
  EXPECT_EQ(TensorView{}.device.index, 0);
}

TEST(DeviceSeam, TheRegistryHoldsTheCpuBackendAlone) {
  const auto& table = backends::rotate_backends();
  ASSERT_EQ(table.size(), 1u);
  EXPECT_STREQ(table[0].name, "cpu");
  EXPECT_EQ(table[0].kind, DeviceKind::CPU);
  EXPECT_EQ(table[0].apply, &cpu::apply_checked);
  EXPECT_EQ(table[0].apply_cos_sin, &cpu::apply_cos_sin_checked);
  EXPECT_EQ(&backends::backend_for(table, Device{}, "apply", "q"), &table[0]);
  EXPECT_THAT([&] { backends::backend_for(table, kCuda1, "apply", "k"); },
              ThrowsMessage<Error>(StrEq("apply: k is on cuda:1; this build has no backend for cuda (the GPU path is "
                                         "in the Python package: rotary.torch)")));
}

TEST(DeviceSeam, ApplyRefusesMixedDevicesNamingBoth) {
  Call call;
  call.k.device = kCuda0;
  for (const auto& attempt : {+[](const Call& c) { c.check(); }, +[](const Call& c) { c.run(); },
                              +[](const Call& c) { c.run_reference(); }}) {
    EXPECT_THAT([&] { attempt(call); }, ThrowsMessage<Error>(StrEq("apply: k is on cuda:0 but q is on cpu")));
  }
  call.on(kCuda0);
  call.q_out.device = kCuda1;
  EXPECT_THAT([&] { call.run(); }, ThrowsMessage<Error>(StrEq("apply: q_out is on cuda:1 but q is on cuda:0")));
  call.q_out.device = kCuda0;
  call.k_out.device = Device{};
  EXPECT_THAT([&] { call.run(); }, ThrowsMessage<Error>(StrEq("apply: k_out is on cpu but q is on cuda:0")));
  EXPECT_TRUE(call.outputs_untouched());
}

TEST(DeviceSeam, ApplyChecksACudaCallThenRefusesItForWantOfABackend) {
  Call call;
  call.on(kCuda0);
  // The checks read no data: a well-formed CUDA call passes them (what a GPU backend relies on).
  EXPECT_NO_THROW(call.check());
  EXPECT_THAT([&] { call.run(); }, ThrowsMessage<Error>(StrEq(kNoCudaBackend)));
  EXPECT_THAT([&] { call.run_reference(); },
              ThrowsMessage<Error>(StrEq("apply (reference): q is on cuda:0; the float64 reference reads host memory "
                                         "and runs on the cpu only")));
  // A malformed CUDA call is refused by the same checks as a CPU one, before the backend.
  call.q_out.shape[3] = 6;
  EXPECT_THAT([&] { call.run(); }, ThrowsMessage<Error>(::testing::HasSubstr("apply: q_out shape must equal q's")));
  EXPECT_TRUE(call.outputs_untouched());
}

TEST(DeviceSeam, AnAbsentKHasNoDevice) {
  Call call;
  call.on(kCuda0);
  call.k = TensorView{};  // device cpu by default: not compared, k is not given
  call.k_out = TensorView{};
  EXPECT_THAT([&] { call.run(); }, ThrowsMessage<Error>(StrEq(kNoCudaBackend)));
}

TEST(DeviceSeam, ApplyRefusesDevicesThatAreNotDevices) {
  Call call;
  call.q.device.kind = static_cast<DeviceKind>(7);
  EXPECT_THAT([&] { call.run(); },
              ThrowsMessage<Error>(StrEq("apply: q device kind must be cpu or cuda (got enum value 7)")));
  call.q.device = Device{DeviceKind::CPU, 2};
  EXPECT_THAT([&] { call.run(); },
              ThrowsMessage<Error>(StrEq("apply: q device index must be 0 for the cpu (got 2)")));
  call.on(kCuda0);
  call.k.device.index = -1;
  EXPECT_THAT([&] { call.run(); }, ThrowsMessage<Error>(StrEq("apply: k device index must be >= 0 (got -1)")));
  EXPECT_TRUE(call.outputs_untouched());
}

TEST(DeviceSeam, ApplyCosSinRefusesMixedDevicesAndCudaByName) {
  std::vector<float> x_buf(16, 0.5f), out_buf(16, 7.0f), cos_buf(8, 1.0f), sin_buf(8, 0.0f);
  TensorView x = contiguous_view(x_buf.data(), DType::F32, Layout::BSHD, {1, 2, 1, 8});
  TensorView out = contiguous_view(out_buf.data(), DType::F32, Layout::BSHD, {1, 2, 1, 8});
  TensorView cos = contiguous_view(cos_buf.data(), DType::F32, Layout::BSHD, {1, 2, 1, 4});
  TensorView sin = contiguous_view(sin_buf.data(), DType::F32, Layout::BSHD, {1, 2, 1, 4});
  const CosSinOptions options{.name = "q"};
  sin.device = kCuda0;
  EXPECT_THAT([&] { apply_cos_sin(x, out, cos, sin, options); },
              ThrowsMessage<Error>(StrEq("apply: sin is on cuda:0 but q is on cpu")));
  for (TensorView* view : {&x, &out, &cos, &sin}) view->device = kCuda0;
  EXPECT_NO_THROW(check_cos_sin_arguments(x, out, cos, sin, "q"));
  EXPECT_THAT([&] { apply_cos_sin(x, out, cos, sin, options); }, ThrowsMessage<Error>(StrEq(kNoCudaBackend)));
  for (float value : out_buf) EXPECT_EQ(value, 7.0f);
  // The CPU call still runs through the registry: cos 1, sin 0 copies x.
  for (TensorView* view : {&x, &out, &cos, &sin}) view->device = Device{};
  apply_cos_sin(x, out, cos, sin, options);
  for (float value : out_buf) EXPECT_EQ(value, 0.5f);
}

}  // namespace
}  // namespace rotary
