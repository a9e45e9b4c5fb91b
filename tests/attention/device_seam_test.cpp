// tests/attention/device_seam_test.cpp: attention()'s device checks and backends
// (src/attention/backends.hpp, docs/backends.md).
//
// attention() and reference::attention run the device-neutral checks (mixed devices refused by
// name), then attention() hands the call to the backend of q's device: this build has the CPU's
// alone, so a CUDA call is refused by name before a kernel could read it. The "CUDA" views point
// at host buffers: out keeps its sentinel when nothing ran.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "rotary/attention.hpp"
#include "rotary/error.hpp"
#include "rotary/kv_cache.hpp"
#include "rotary/table.hpp"
#include "rotary/tensor.hpp"
#include "attention/backends.hpp"
#include "tests/attention/attention_tensors.hpp"
#include "tests/support/spec_builder.hpp"

namespace rotary {
namespace {

using ::testing::StrEq;
using ::testing::ThrowsMessage;
using test::make;
using test::Tensor;

constexpr Device kCuda0{DeviceKind::CUDA, 0};
constexpr Device kCuda1{DeviceKind::CUDA, 1};

// q (1, 3, 2, 8), k and v (1, 4, 1, 8), out (1, 3, 2, 8) float32 BSHD; out holds a sentinel.
struct Call {
  Tensor q = make(DType::F32, Layout::BSHD, 1, 3, 2, 8), k = make(DType::F32, Layout::BSHD, 1, 4, 1, 8);
  Tensor v = make(DType::F32, Layout::BSHD, 1, 4, 1, 8), out = make(DType::F32, Layout::BSHD, 1, 3, 2, 8);
  Call() {
    for (int64_t s = 0; s < 3; ++s)
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t e = 0; e < 8; ++e) out.set(0, s, h, e, 7.0);
  }
  void on(Device device) {
    for (Tensor* tensor : {&q, &k, &v, &out}) tensor->view.device = device;
  }
  void run() { attention(q.view, k.view, v.view, out.view); }
  bool out_untouched() const {
    for (int64_t s = 0; s < 3; ++s)
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t e = 0; e < 8; ++e)
          if (out.at(0, s, h, e) != 7.0) return false;
    return true;
  }
};

TEST(AttentionDeviceSeam, TheRegistryHoldsTheCpuBackendAlone) {
  const auto& table = backends::attention_backends();
  ASSERT_EQ(table.size(), 1u);
  EXPECT_STREQ(table[0].name, "cpu");
  EXPECT_EQ(table[0].kind, DeviceKind::CPU);
  EXPECT_NE(table[0].attention, nullptr);
  // A CPU call runs through it: out no longer holds the sentinel (v is 0, so out is 0).
  Call call;
  call.run();
  EXPECT_EQ(call.out.at(0, 2, 1, 7), 0.0);
}

TEST(AttentionDeviceSeam, RefusesMixedDevicesNamingBoth) {
  Call call;
  call.v.view.device = kCuda0;
  EXPECT_THAT([&] { call.run(); }, ThrowsMessage<Error>(StrEq("attention: v is on cuda:0 but q is on cpu")));
  EXPECT_THAT([&] { check_attention_arguments(call.q.view, call.k.view, call.v.view, call.out.view, {}); },
              ThrowsMessage<Error>(StrEq("attention: v is on cuda:0 but q is on cpu")));
  EXPECT_THAT([&] { reference::attention(call.q.view, call.k.view, call.v.view, call.out.view); },
              ThrowsMessage<Error>(StrEq("attention: v is on cuda:0 but q is on cpu")));
  call.on(kCuda0);
  call.out.view.device = kCuda1;
  EXPECT_THAT([&] { call.run(); }, ThrowsMessage<Error>(StrEq("attention: out is on cuda:1 but q is on cuda:0")));
  call.on(kCuda0);
  call.k.view.device = Device{};
  EXPECT_THAT([&] { call.run(); }, ThrowsMessage<Error>(StrEq("attention: k is on cpu but q is on cuda:0")));
  EXPECT_TRUE(call.out_untouched());
}

TEST(AttentionDeviceSeam, ChecksACudaCallThenRefusesItForWantOfABackend) {
  Call call;
  call.on(kCuda0);
  const char* no_backend =
      "attention: q is on cuda:0; this build has no backend for cuda (the GPU path is in the Python package: "
      "rotary.torch)";
  EXPECT_NO_THROW(check_attention_arguments(call.q.view, call.k.view, call.v.view, call.out.view, {}));
  EXPECT_THAT([&] { call.run(); }, ThrowsMessage<Error>(StrEq(no_backend)));
  // The fused-RoPE overload dispatches the same way.
  const CosSinTable table(test::rope_spec({.name = "seam", .head_dim = 8}), {.fixed_positions = 8});
  const std::vector<int64_t> q_positions{1, 2, 3}, k_positions{0, 1, 2, 3};
  const AttentionRope rope{.table = &table, .q_positions = q_positions, .k_positions = k_positions};
  EXPECT_THAT([&] { attention(call.q.view, call.k.view, call.v.view, call.out.view, rope); },
              ThrowsMessage<Error>(StrEq(no_backend)));
  EXPECT_THAT([&] { reference::attention(call.q.view, call.k.view, call.v.view, call.out.view); },
              ThrowsMessage<Error>(StrEq("attention (reference): q is on cuda:0; the float64 reference reads host "
                                         "memory and runs on the cpu only")));
  EXPECT_TRUE(call.out_untouched());
}

TEST(AttentionDeviceSeam, RefusesDevicesThatAreNotDevices) {
  Call call;
  call.out.view.device.kind = static_cast<DeviceKind>(5);
  EXPECT_THAT([&] { call.run(); },
              ThrowsMessage<Error>(StrEq("attention: out.device kind must be cpu or cuda (got enum value 5)")));
  call.on(Device{DeviceKind::CPU, 1});
  EXPECT_THAT([&] { call.run(); },
              ThrowsMessage<Error>(StrEq("attention: q.device index must be 0 for the cpu (got 1)")));
  call.on(Device{DeviceKind::CUDA, -2});
  EXPECT_THAT([&] { call.run(); }, ThrowsMessage<Error>(StrEq("attention: q.device index must be >= 0 (got -2)")));
  EXPECT_TRUE(call.out_untouched());
}

// The cache copies k and v into host memory itself: a view on another device is refused before a
// byte is read, even with k on the CPU (v alone would have been copied from a device address).
TEST(AttentionDeviceSeam, TheKvCacheTakesCpuViewsOnly) {
  const CosSinTable table(test::rope_spec({.name = "seam", .head_dim = 8}), {.fixed_positions = 16});
  KvCache cache(table, {.batch = 1, .kv_heads = 1, .head_dim = 8, .capacity = 4});
  Tensor k = make(DType::F32, Layout::BSHD, 1, 2, 1, 8), v = make(DType::F32, Layout::BSHD, 1, 2, 1, 8);
  v.view.device = kCuda0;
  EXPECT_THAT([&] { cache.append(k.view, v.view); },
              ThrowsMessage<Error>(StrEq("KvCache::append: v is on cuda:0; the cache holds host memory (cpu only)")));
  EXPECT_EQ(cache.length(0), 0);
  v.view.device = Device{};
  cache.append(k.view, v.view);
  Tensor q = make(DType::F32, Layout::BSHD, 1, 1, 1, 8), out = make(DType::F32, Layout::BSHD, 1, 1, 1, 8);
  out.view.device = kCuda1;
  EXPECT_THAT([&] { cache.attend(q.view, out.view); },
              ThrowsMessage<Error>(StrEq("KvCache::attend: out is on cuda:1; the cache holds host memory (cpu only)")));
}

}  // namespace
}  // namespace rotary
