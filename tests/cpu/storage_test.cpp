// tests/cpu/storage_test.cpp: the scalar element loads and stores of src/cpu/storage.hpp against
// tensor.hpp's conversions, which define the rules (exact widening, one rounding to nearest
// even). The branch-free bf16 / f16 forms that apply_cos_sin.cpp vectorizes must give the same
// bits: every 16-bit pattern for the loads, and a dense sample of float32 patterns (every
// 4099th, plus the boundaries) for the rounding.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

#include "rotary/tensor.hpp"
#include "cpu/storage.hpp"

namespace rotary {
namespace {

using cpu::ElementStorage;

// Float32 bit patterns: a stride through all 2^32, and the patterns around each rounding
// boundary that matters (ties, the largest finite f16, subnormals, infinities, NaNs).
std::vector<uint32_t> sample_float_bits() {
  std::vector<uint32_t> bits;
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 4099) bits.push_back(static_cast<uint32_t>(b));
  for (const uint32_t base : {0x3f808000u, 0x3f818000u, 0x477fe000u, 0x477ff000u, 0x38800000u, 0x33800000u,
                              0x7f800000u, 0x7fc00000u, 0x7f800001u, 0x00000001u, 0x0000ffffu}) {
    for (uint32_t delta = 0; delta < 3; ++delta) {
      for (const uint32_t sign : {0u, 0x80000000u}) {
        bits.push_back((base + delta) | sign);
        bits.push_back((base - delta) | sign);
      }
    }
  }
  return bits;
}

TEST(CpuStorage, LoadsWidenEvery16BitPatternAsTensorHpp) {
  for (uint32_t b = 0; b < 0x10000u; ++b) {
    const auto v = static_cast<uint16_t>(b);
    const float bf16 = bf16_to_float(v);
    const float f16 = f16_to_float(v);
    ASSERT_EQ(std::bit_cast<uint32_t>(ElementStorage<DType::BF16>::load(v)), std::bit_cast<uint32_t>(bf16)) << b;
    ASSERT_EQ(std::bit_cast<uint32_t>(ElementStorage<DType::F16>::load(v)), std::bit_cast<uint32_t>(f16)) << b;
    // The run-time form widens to double: exactly the float's value (NaNs stay NaNs).
    const double bf16_double = cpu::load_element(&v, DType::BF16, 0);
    const double f16_double = cpu::load_element(&v, DType::F16, 0);
    if (std::isnan(bf16)) {
      ASSERT_TRUE(std::isnan(bf16_double)) << b;
    } else {
      ASSERT_EQ(bf16_double, static_cast<double>(bf16)) << b;
    }
    if (std::isnan(f16)) {
      ASSERT_TRUE(std::isnan(f16_double)) << b;
    } else {
      ASSERT_EQ(f16_double, static_cast<double>(f16)) << b;
    }
  }
}

TEST(CpuStorage, BranchFreeRoundingMatchesTensorHpp) {
  for (const uint32_t b : sample_float_bits()) {
    const float value = std::bit_cast<float>(b);
    using Bf16 = ElementStorage<DType::BF16>;
    using F16 = ElementStorage<DType::F16>;
    ASSERT_EQ(Bf16::store_rounded(Bf16::round(value)), float_to_bf16(value)) << std::hex << b;
    ASSERT_EQ(F16::store_rounded(F16::round(value)), float_to_f16(value)) << std::hex << b;
  }
}

TEST(CpuStorage, StoresRoundOnceFromDouble) {
  // 1 + 2^-8 + 2^-30: as a float it is 1 + 2^-8, a bf16 tie that rounds to even (1); rounded
  // once from the double it is above the tie and rounds up to 1 + 2^-7.
  const double above_tie = 1.0 + 0x1p-8 + 0x1p-30;
  uint16_t stored = 0;
  cpu::store_element(&stored, DType::BF16, 0, above_tie);
  EXPECT_EQ(stored, 0x3f81u);
  EXPECT_EQ(ElementStorage<DType::BF16>::store(above_tie), 0x3f81u);
  EXPECT_EQ(float_to_bf16(static_cast<float>(above_tie)), 0x3f80u);  // the double rounding avoided
  // f16 the same way: 1 + 2^-11 is a tie between 1 and 1 + 2^-10.
  const double f16_above_tie = 1.0 + 0x1p-11 + 0x1p-40;
  cpu::store_element(&stored, DType::F16, 0, f16_above_tie);
  EXPECT_EQ(stored, 0x3c01u);
  EXPECT_EQ(ElementStorage<DType::F16>::store(f16_above_tie), 0x3c01u);
  // float32 and float64: the IEEE conversion, and exact.
  float stored_f32 = 0;
  cpu::store_element(&stored_f32, DType::F32, 0, above_tie);
  EXPECT_EQ(stored_f32, static_cast<float>(above_tie));
  double stored_f64 = 0;
  cpu::store_element(&stored_f64, DType::F64, 0, above_tie);
  EXPECT_EQ(stored_f64, above_tie);
  EXPECT_EQ(cpu::load_element(&stored_f64, DType::F64, 0), above_tie);
}

}  // namespace
}  // namespace rotary
