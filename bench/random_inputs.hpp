// bench/random_inputs.hpp: the benchmarks' inputs, one definition for every bench program.
#pragma once
#include <cstddef>
#include <cstdint>
#include <random>

#include "rotary/tensor.hpp"

namespace rotary::bench_inputs {

// Random non-zero values (a zero input would hide a kernel that skips work): sign random,
// magnitude in [lo, hi), rounded to the dtype (F32, BF16 or F16; F64 is widened exactly).
inline void fill_random(std::byte* data, DType dtype, int64_t count, uint32_t seed, float lo, float hi) {
  std::mt19937 generator(seed);
  std::uniform_real_distribution<float> magnitude(lo, hi);
  for (int64_t i = 0; i < count; ++i) {
    const float value = (generator() & 1) ? -magnitude(generator) : magnitude(generator);
    switch (dtype) {
      case DType::BF16: reinterpret_cast<uint16_t*>(data)[i] = float_to_bf16(value); break;
      case DType::F16: reinterpret_cast<uint16_t*>(data)[i] = float_to_f16(value); break;
      case DType::F32: reinterpret_cast<float*>(data)[i] = value; break;
      case DType::F64: reinterpret_cast<double*>(data)[i] = value; break;
    }
  }
}

}  // namespace rotary::bench_inputs
