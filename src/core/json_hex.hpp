// src/core/json_hex.hpp: the one helper the JSON parser (json_parse.cpp) and the writer
// (json_write.cpp) share: a byte as two hex digits, which the parser's messages use to show a
// bad byte and the writer's quote() uses for its \u00XX escapes. Internal to rotary_core.
#pragma once

#include <string>

namespace rotary::json::detail {

// `byte` as two hex digits, upper or lower case.
std::string hex_byte(unsigned char byte, bool upper);

}  // namespace rotary::json::detail
