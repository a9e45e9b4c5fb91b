// tests/support/attention_bound.hpp: the error bound of rotary::attention's fast path against the
// float64 reference (docs/attention.md, "Error analysis"), for tests/attention/attention_test.cpp
// and the attention fuzz targets (fuzz/attention_args_fuzz.cpp, fuzz/kv_cache_ops_fuzz.cpp).
//
// For one output element of a query with n visible keys, u = 2^-24:
//   E   = (d + 6 [+1 with ALiBi]) u max_j A_j + 3u max_j |b_j|   score error (A_j = scale
//         sum_e |q~_e||k~_je|, b_j the ALiBi bias; for bfloat16 + (8d + 1) 2^-126: vdpbf16ps and
//         AMX flush subnormal inputs and products, bf16_dot.hpp, amx_bf16.hpp, for |q'|, |k'|
//         up to 2; and + (2d + 774) u max_j A_j: AMX's scores of split values, three products
//         per element with each factor carried to 257u, docs/attention.md "Error analysis" 7)
//   eta = E + (110 + 106) u      per-weight error, the split over keys' merge counted always
//   acc = (n + 4 tiles + 4) u,   tiles = n / 64 + 2
//   |fast - ref64| <= Vbar (2 eta (1 + 2 eta) + 2 acc) + amx + storage
//   amx = (257 + n) u Vbar + n (2 Vbar + 3) 2^-126   bfloat16 only: the prefill's p.v on AMX
//         tiles (amx_bf16.hpp) carries each weight as bf16 hi + lo (257u relative), adds two
//         products per key (n u more in o's sum) and flushes subnormal weights, values and
//         products (2^-126 each); counted for every bf16 call
// where Vbar = max over the visible keys of |v_je| and storage is the output's rounding
// (storage_ulp below for bfloat16 / float16, u |ref| for float32). Every term grows with A,
// |b|, n and Vbar, so call-wide maxima in their place give a looser bound that still holds.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "rotary/tensor.hpp"

namespace rotary::test {

inline constexpr double kUnitRoundoff32 = 0x1p-24;

// One unit in the last place of `value` in bfloat16 / float16 (p = 7 / 10 stored bits), at
// least the format's smallest subnormal. A non-finite value has no last place: NaN for it (a
// comparison against NaN fails, so a caller cannot pass a non-finite element by accident; std::ilogb
// of NaN or infinity is INT_MIN or INT_MAX, which the subtraction below would overflow).
inline double storage_ulp(DType dtype, double value) {
  const int p = dtype == DType::BF16 ? 7 : 10;
  const double min_ulp = dtype == DType::BF16 ? 0x1p-133 : 0x1p-24;
  if (!std::isfinite(value)) return std::numeric_limits<double>::quiet_NaN();
  if (value == 0) return min_ulp;
  return std::max(std::ldexp(1.0, std::ilogb(value) - p), min_ulp);
}

// The bound above without its storage term: what the float32 arithmetic may contribute.
inline double attention_arithmetic_bound(DType dtype, int64_t qk_dim, bool alibi, double max_a, double max_bias,
                                         int64_t n, double vbar) {
  constexpr double u = kUnitRoundoff32;
  const double E = static_cast<double>(qk_dim + 6 + (alibi ? 1 : 0)) * u * max_a + 3 * u * max_bias +
                   (dtype == DType::BF16 ? static_cast<double>(8 * qk_dim + 1) * 0x1p-126 +
                                               static_cast<double>(2 * qk_dim + 774) * u * max_a
                                         : 0.0);
  const double eta = E + (110 + 106) * u;
  const int64_t tiles = n / 64 + 2;
  const double acc = static_cast<double>(n + 2 * tiles + 2 * tiles + 4) * u;
  const double amx = dtype == DType::BF16 ? static_cast<double>(257 + n) * u * vbar +
                                                static_cast<double>(n) * (2 * vbar + 3) * 0x1p-126
                                          : 0.0;
  return vbar * (2 * eta * (1 + 2 * eta) + 2 * acc) + amx;
}

}  // namespace rotary::test
