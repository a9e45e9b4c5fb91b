// tests/core/test_support.hpp: helpers shared by the core tests.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>

namespace rotary::test {

// tests/golden, or $ROTARY_GOLDEN_DIR when set. The golden tests fail (never skip) when it
// is missing: CI always has shared/ beside the checkout.
inline std::filesystem::path golden_dir() {
  if (const char* env = std::getenv("ROTARY_GOLDEN_DIR"); env != nullptr && *env != '\0') return env;
  return ROTARY_GOLDEN_DIR;
}

// Distance in units in the last place between two doubles of the same sign (0 when equal).
inline int64_t ulp_distance(double a, double b) {
  if (a == b) return 0;
  if (std::isnan(a) || std::isnan(b) || std::signbit(a) != std::signbit(b)) {
    return std::numeric_limits<int64_t>::max();
  }
  int64_t ia = 0;
  int64_t ib = 0;
  std::memcpy(&ia, &a, sizeof a);
  std::memcpy(&ib, &b, sizeof b);
  return ia > ib ? ia - ib : ib - ia;
}

inline int64_t ulp_distance(float a, float b) {
  if (a == b) return 0;
  if (std::isnan(a) || std::isnan(b) || std::signbit(a) != std::signbit(b)) {
    return std::numeric_limits<int64_t>::max();
  }
  int32_t ia = 0;
  int32_t ib = 0;
  std::memcpy(&ia, &a, sizeof a);
  std::memcpy(&ib, &b, sizeof b);
  return ia > ib ? int64_t{ia} - ib : int64_t{ib} - ia;
}

}  // namespace rotary::test
