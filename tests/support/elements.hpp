// tests/support/elements.hpp: one tensor element by storage dtype, as a double and back, through
// the public conversions of tensor.hpp only (tests check the library's own loads against these).
#pragma once

#include <cstdint>

#include "rotary/tensor.hpp"

namespace rotary::test {

// Element `index` of `data`, exactly, as a double.
inline double load_element(const void* data, DType dtype, int64_t index) {
  switch (dtype) {
    case DType::F32: return static_cast<const float*>(data)[index];
    case DType::BF16: return bf16_to_float(static_cast<const uint16_t*>(data)[index]);
    case DType::F16: return f16_to_float(static_cast<const uint16_t*>(data)[index]);
    case DType::F64: return static_cast<const double*>(data)[index];
  }
  return 0;
}

// Stores `value` at element `index`, rounded once to `dtype` (f64: exact).
inline void store_element(void* data, DType dtype, int64_t index, double value) {
  switch (dtype) {
    case DType::F32: static_cast<float*>(data)[index] = static_cast<float>(value); return;
    case DType::BF16: static_cast<uint16_t*>(data)[index] = double_to_bf16(value); return;
    case DType::F16: static_cast<uint16_t*>(data)[index] = double_to_f16(value); return;
    case DType::F64: static_cast<double*>(data)[index] = value; return;
  }
}

}  // namespace rotary::test
