// include/rotary/error.hpp: the one way rotary reports failure.
//
// Every error is a rotary::Error (a std::runtime_error) whose message names the place, the
// argument, what was expected and the value received:
//   "<where>: <argument> <what was expected> (got <value>)"
// ConfigError is thrown for invalid model configurations (config.json, presets, RopeSpec fields)
// so that a caller who loads user-supplied configs can catch exactly those.
#pragma once

#include <charconv>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

namespace rotary {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class ConfigError : public Error {
 public:
  using Error::Error;
};

namespace detail {

// The shortest decimal text that reads back as the same double (0.1 -> "0.1", not
// "0.10000000000000001"), so messages quote a config's numbers as the file spelled them.
// Like Python's repr: fixed notation for 1e-4 <= |value| < 1e16 (500000, not 5e+05),
// scientific outside it; "nan", "inf", "-inf".
inline std::string shortest(double value) {
  char buffer[400];  // fixed notation of doubles below 1e16 needs at most ~330 characters
  const double magnitude = value < 0 ? -value : value;
  const bool fixed = magnitude == 0.0 || (magnitude >= 1e-4 && magnitude < 1e16);
  auto result = std::to_chars(buffer, buffer + sizeof buffer, value,
                              fixed ? std::chars_format::fixed : std::chars_format::scientific);
  return std::string(buffer, result.ptr);
}

template <typename Part>
void append_part(std::ostringstream& out, Part&& part) {
  if constexpr (std::is_floating_point_v<std::decay_t<Part>>) {
    out << shortest(static_cast<double>(part));
  } else {
    out << std::forward<Part>(part);
  }
}

// Builds a message from any streamable parts. bookworm's libstdc++ 12 has no <format>.
template <typename... Parts>
std::string concat(Parts&&... parts) {
  std::ostringstream out;
  (append_part(out, std::forward<Parts>(parts)), ...);
  return out.str();
}

}  // namespace detail
}  // namespace rotary
