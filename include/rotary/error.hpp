// include/rotary/error.hpp: the one way rotary reports failure.
//
// Every error is a rotary::Error (a std::runtime_error) whose message names the place, the
// argument, what was expected and the value received:
//   "<where>: <argument> <what was expected> (got <value>)"
// ConfigError is thrown for invalid model configurations (config.json, presets, RopeSpec fields)
// so that a caller who loads user-supplied configs can catch exactly those.
#pragma once

#include <charconv>
#include <cstdint>
#include <string_view>
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

// Appends one part's text. Numbers go through std::to_chars, not an ostream: the text cannot
// depend on the process's global locale (a host application's std::locale::global with digit
// grouping would turn 1024 into "1,024"), and formatting needs no iostream or locale state at all.
// The latter matters in practice: built on the lent GPU machines (Ubuntu 24.04, GCC 13), the Python
// extension defined libstdc++'s iostream symbols itself beside the shared libstdc++ it loads, and
// crashed in an ostream's number formatting, whose locale facets were not initialized there
// (docs/gpu.md, "C++ errors").
// Lower-case hexadecimal digits of an unsigned value, without a prefix: hex_text(255) is "ff".
inline std::string hex_text(std::uint64_t value) {
  char buffer[17];
  auto result = std::to_chars(buffer, buffer + sizeof buffer, value, 16);
  return std::string(buffer, result.ptr);
}

template <typename Part>
void append_part(std::string& out, const Part& part) {
  using Type = std::decay_t<Part>;
  if constexpr (std::is_same_v<Type, bool>) {
    out += part ? '1' : '0';  // as an ostream without boolalpha writes it
  } else if constexpr (std::is_same_v<Type, char> || std::is_same_v<Type, signed char> ||
                       std::is_same_v<Type, unsigned char>) {
    out += static_cast<char>(part);  // a character, as an ostream writes one
  } else if constexpr (std::is_integral_v<Type>) {
    char buffer[24];
    auto result = std::to_chars(buffer, buffer + sizeof buffer, part);
    out.append(buffer, result.ptr);
  } else if constexpr (std::is_floating_point_v<Type>) {
    out += shortest(static_cast<double>(part));
  } else if constexpr (std::is_enum_v<Type>) {
    append_part(out, static_cast<std::underlying_type_t<Type>>(part));
  } else if constexpr (std::is_function_v<std::remove_pointer_t<Type>>) {
    static_assert(!std::is_function_v<std::remove_pointer_t<Type>>,
                  "concat: stream manipulators (std::hex, ...) do nothing here; format the number first (hex_text)");
  } else if constexpr (std::is_pointer_v<Type> && !std::is_convertible_v<Type, const char*>) {
    char buffer[24] = {'0', 'x'};  // an address, as an ostream writes one
    auto result = std::to_chars(buffer + 2, buffer + sizeof buffer, reinterpret_cast<std::uintptr_t>(part), 16);
    out.append(buffer, result.ptr);
  } else {
    static_assert(std::is_convertible_v<const Part&, std::string_view>,
                  "concat: parts are strings, characters, numbers or enums");
    if constexpr (std::is_convertible_v<Type, const char*>) {
      const char* text = part;
      out += text == nullptr ? "(null)" : text;
    } else {
      out += std::string_view(part);
    }
  }
}

// Builds a message from its parts: strings, characters, integers, floating-point numbers (the
// shortest text that reads back, as above), enums (their values) and addresses (hex). bookworm's libstdc++ 12 has
// no <format>.
template <typename... Parts>
std::string concat(Parts&&... parts) {
  std::string out;
  (append_part(out, parts), ...);
  return out;
}

}  // namespace detail
}  // namespace rotary
