// src/core/extended.hpp: the extended-precision real type of rotary_core (internal).
//
// Frequencies and the exact table's angles are evaluated in `Extended` and rounded once:
//   GCC on x86-64: __float128 (IEEE binary128, 113-bit significand) through libquadmath;
//   elsewhere: long double (binary128 on aarch64 Linux, 64-bit x87 on other x86 compilers,
//   plain double on MSVC; docs/numerics.md says what each gives).
// The ext_* functions are the only math on Extended values, so the type can change in one place.
#pragma once

#include <cmath>
#include <numbers>
#include <vector>

#if defined(ROTARY_HAVE_QUADMATH)
#include <quadmath.h>
#endif

namespace rotary::detail {

#if defined(ROTARY_HAVE_QUADMATH)
using Extended = __float128;
inline constexpr int kExtendedMantissaBits = 113;
inline Extended ext_pow(Extended a, Extended b) { return powq(a, b); }
inline Extended ext_log(Extended a) { return logq(a); }
inline Extended ext_sqrt(Extended a) { return sqrtq(a); }
inline Extended ext_floor(Extended a) { return floorq(a); }
inline Extended ext_ceil(Extended a) { return ceilq(a); }
inline Extended ext_nearbyint(Extended a) { return nearbyintq(a); }
// 8 atan(1): M_PIq needs the Q literal suffix, which strict -std=c++20 rejects.
inline Extended ext_two_pi() { return 8 * atanq(Extended(1)); }
#else
using Extended = long double;
inline constexpr int kExtendedMantissaBits = __LDBL_MANT_DIG__;
inline Extended ext_pow(Extended a, Extended b) { return std::pow(a, b); }
inline Extended ext_log(Extended a) { return std::log(a); }
inline Extended ext_sqrt(Extended a) { return std::sqrt(a); }
inline Extended ext_floor(Extended a) { return std::floor(a); }
inline Extended ext_ceil(Extended a) { return std::ceil(a); }
inline Extended ext_nearbyint(Extended a) { return std::nearbyint(a); }
inline Extended ext_two_pi() { return 2 * std::numbers::pi_v<long double>; }
#endif

}  // namespace rotary::detail

namespace rotary {
struct RopeSpec;
namespace detail {
// inv_freq of the spec at seq_len in Extended precision (frequencies() rounds these to double).
std::vector<Extended> inv_freq_extended(const RopeSpec& spec, int64_t seq_len);
}  // namespace detail
}  // namespace rotary
