// tests/support/ulp.hpp: distance in units in the last place, the one ULP helper of the tests.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace rotary::test {
namespace detail {

// Adjacent values of one sign have adjacent bit patterns, so the distance is the difference of
// the patterns read as signed integers of the same width (Bits).
template <typename Bits, typename Float>
int64_t ulp_steps(Float a, Float b) {
  if (a == b) return 0;
  if (std::isnan(a) || std::isnan(b) || std::signbit(a) != std::signbit(b)) {
    return std::numeric_limits<int64_t>::max();
  }
  const auto ia = static_cast<int64_t>(std::bit_cast<Bits>(a));
  const auto ib = static_cast<int64_t>(std::bit_cast<Bits>(b));
  return ia > ib ? ia - ib : ib - ia;
}

}  // namespace detail

// Steps between two doubles, or two floats, of the same sign (0 when equal, +0 == -0); NaN, or
// signs that differ, give INT64_MAX. Two overloads rather than a template, so a float compared
// with a double is compared as doubles.
inline int64_t ulp_distance(double a, double b) { return detail::ulp_steps<int64_t>(a, b); }
inline int64_t ulp_distance(float a, float b) { return detail::ulp_steps<int32_t>(a, b); }

}  // namespace rotary::test
