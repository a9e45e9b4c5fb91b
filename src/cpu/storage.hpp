// src/cpu/storage.hpp: scalar loads and stores of tensor elements by storage dtype (internal to
// rotary_cpu). The one place the scalar paths (apply.cpp's gathered tensors, apply_cos_sin.cpp,
// reference.cpp) turn f32 / bf16 / f16 / f64 storage into arithmetic values and back; the
// Highway kernels keep their own vector loads and stores (dtype_io-inl.h).
//
// The rules are tensor.hpp's: widening is exact (every f32, bf16 and f16 value is a double, and
// every bf16 and f16 value a float); narrowing rounds once, to nearest even, from the value
// given: a double goes to bf16 / f16 in one step (double_to_bf16 / double_to_f16), since
// double -> float -> bf16 would round twice.
#pragma once

#include <bit>
#include <cstdint>

#include "rotary/tensor.hpp"

namespace rotary::cpu {

// ---- any dtype, chosen at run time --------------------------------------------------------------

// Element `offset_elems` of `data` (storage dtype `dtype`), exactly, as a double.
inline double load_element(const void* data, DType dtype, int64_t offset_elems) {
  switch (dtype) {
    case DType::F32: return static_cast<const float*>(data)[offset_elems];
    case DType::BF16: return bf16_to_float(static_cast<const uint16_t*>(data)[offset_elems]);
    case DType::F16: return f16_to_float(static_cast<const uint16_t*>(data)[offset_elems]);
    case DType::F64: return static_cast<const double*>(data)[offset_elems];
  }
  return 0.0;  // unreachable: dtypes are checked at the entry points
}

// Stores `value` at element `offset_elems` of `data`, rounded once to `dtype` (f64: exact).
inline void store_element(void* data, DType dtype, int64_t offset_elems, double value) {
  switch (dtype) {
    case DType::F32: static_cast<float*>(data)[offset_elems] = static_cast<float>(value); return;
    case DType::BF16: static_cast<uint16_t*>(data)[offset_elems] = double_to_bf16(value); return;
    case DType::F16: static_cast<uint16_t*>(data)[offset_elems] = double_to_f16(value); return;
    case DType::F64: static_cast<double*>(data)[offset_elems] = value; return;
  }
}

// ---- one dtype, chosen at compile time ----------------------------------------------------------
//
// For loops instantiated per storage dtype (apply_cos_sin.cpp), so that their inner loops have no
// per-element switch and vectorize. ElementStorage<D>:
//   Bits                 the stored type (float, uint16_t, double);
//   load(bits)           exact widening to float (double for F64);
//   store(double)        one rounding to the stored type, as store_element;
//   round(float)         a float rounded to the nearest value of the dtype (nearest even), still
//                        as a float: float32 arithmetic that rounds each operation to bf16 / f16,
//                        as torch does (Rounding::LikeTorch);
//   store_rounded(float) the stored bits of a value round() returned (exact).
// The bf16 and f16 ones are written without branches so that the loops vectorize (tensor.hpp's
// conversions are out of line). They were checked bit-identical to bf16_to_float /
// float_to_bf16 / f16_to_float / float_to_f16 (src/core/tensor.cpp) over all 2^16 / 2^32
// inputs when written; tests/cpu/storage_test.cpp keeps checking every 16-bit pattern and a
// dense sample of float32 ones, and the Python tests compare LikeTorch results with torch bit
// for bit.
template <DType D> struct ElementStorage;

template <> struct ElementStorage<DType::F32> {
  using Bits = float;
  static float load(float v) { return v; }
  static float store(double v) { return static_cast<float>(v); }
  static float round(float v) { return v; }
  static float store_rounded(float v) { return v; }
};

namespace bits16 {  // the branch-free bf16 / f16 conversions of ElementStorage

// cond ? a : b with masks: a ternary over floating-point values can stay a branch (the compiler
// may not speculate an operation that could raise an FP exception), which stops a loop from
// vectorizing.
inline uint32_t select_bits(bool cond, uint32_t a, uint32_t b) {
  const uint32_t mask = 0u - static_cast<uint32_t>(cond);
  return (a & mask) | (b & ~mask);
}

// bf16: round to nearest even on the bits; a NaN stays a quiet NaN with its sign and high
// payload (c10::BFloat16's rule).
inline uint32_t bf16_round_bits(float value) {
  const auto bits = std::bit_cast<uint32_t>(value);
  const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) & 0xffff0000u;
  const uint32_t quiet_nan = (bits | 0x00400000u) & 0xffff0000u;
  return select_bits((bits & 0x7fffffffu) > 0x7f800000u, quiet_nan, rounded);
}

// binary16: decoding, the rounding onto the binary16 grid and the encoding of a value already on
// it.
inline float f16_round(float value) {
  const auto bits = std::bit_cast<uint32_t>(value);
  const uint32_t sign = bits & 0x80000000u;
  const uint32_t magnitude = bits & 0x7fffffffu;
  // Normal results (>= 2^-14): round away 13 mantissa bits to nearest even, as for bf16.
  const uint32_t normal = (magnitude + 0xfffu + ((magnitude >> 13) & 1u)) & 0xffffe000u;
  // Subnormal results are multiples of 2^-24: adding 0.5 (whose ulp is 2^-24) rounds to one,
  // to nearest even, and subtracting it again is exact.
  const uint32_t subnormal = std::bit_cast<uint32_t>((std::bit_cast<float>(magnitude) + 0.5f) - 0.5f);
  const uint32_t quiet_nan = (magnitude | 0x00400000u) & 0x7fffe000u;
  // 65520 and up (infinity included) round to infinity.
  const uint32_t result = select_bits(magnitude > 0x7f800000u, quiet_nan,
                                      select_bits(magnitude >= 0x477ff000u, 0x7f800000u,
                                                  select_bits(magnitude >= 0x38800000u, normal, subnormal)));
  return std::bit_cast<float>(sign | result);
}

inline float f16_decode(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1fu;
  const uint32_t mantissa = bits & 0x3ffu;
  const uint32_t normal = ((exponent + (127u - 15u)) << 23) | (mantissa << 13);
  const uint32_t special = 0x7f800000u | (mantissa << 13);  // infinity, NaN payload kept
  const auto subnormal = std::bit_cast<uint32_t>(static_cast<float>(mantissa) * 0x1p-24f);  // exact
  const uint32_t result = select_bits(exponent == 0x1fu, special, select_bits(exponent == 0, subnormal, normal));
  return std::bit_cast<float>(sign | result);
}

inline uint16_t f16_encode(float value) {  // value on the binary16 grid (f16_round's result)
  const auto bits = std::bit_cast<uint32_t>(value);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t magnitude = bits & 0x7fffffffu;
  const uint32_t special = 0x7c00u | ((magnitude >> 13) & 0x3ffu);  // infinity, NaN payload kept
  const uint32_t normal = (magnitude >> 13) - ((127u - 15u) << 10);
  const auto subnormal = static_cast<uint32_t>(static_cast<int32_t>(std::bit_cast<float>(magnitude) * 0x1p24f));
  const uint32_t result =
      select_bits(magnitude >= 0x7f800000u, special, select_bits(magnitude >= 0x38800000u, normal, subnormal));
  return static_cast<uint16_t>(sign | result);
}

}  // namespace bits16

template <> struct ElementStorage<DType::BF16> {
  using Bits = uint16_t;
  static float load(uint16_t v) { return std::bit_cast<float>(static_cast<uint32_t>(v) << 16); }
  static uint16_t store(double v) { return double_to_bf16(v); }
  static float round(float v) { return std::bit_cast<float>(bits16::bf16_round_bits(v)); }
  static uint16_t store_rounded(float v) { return static_cast<uint16_t>(std::bit_cast<uint32_t>(v) >> 16); }
};

template <> struct ElementStorage<DType::F16> {
  using Bits = uint16_t;
  static float load(uint16_t v) { return bits16::f16_decode(v); }
  static uint16_t store(double v) { return double_to_f16(v); }
  static float round(float v) { return bits16::f16_round(v); }
  static uint16_t store_rounded(float v) { return bits16::f16_encode(v); }
};

template <> struct ElementStorage<DType::F64> {
  using Bits = double;
  static double load(double v) { return v; }
  static double store(double v) { return v; }
  static double round(double v) { return v; }
  static double store_rounded(double v) { return v; }
};

}  // namespace rotary::cpu
