// src/core/json_write.cpp: the JSON writer declared in json.hpp (Writer, quote, serialize);
// the Value type is in json.cpp, the parser in json_parse.cpp.
#include "core/json.hpp"

#include <charconv>
#include <cmath>
#include <string>

#include "core/json_hex.hpp"
#include "rotary/error.hpp"

namespace rotary::json {

namespace detail {

std::string hex_byte(unsigned char byte, bool upper) {
  const char* digits = upper ? "0123456789ABCDEF" : "0123456789abcdef";
  return {digits[byte >> 4], digits[byte & 0xF]};
}

}  // namespace detail

// ---- writing ----------------------------------------------------------------------------------
//
// counts_ holds one entry per open container. The header describes it as the number of elements
// written so far; the low bit additionally records whether the container is an object, so that
// misuse (a key in an array, end_array() closing an object) is caught. Entry = 2 * count + bit.

namespace {

using rotary::detail::concat;
using detail::hex_byte;

constexpr int64_t kObjectBit = 1;

bool entry_is_object(int64_t entry) { return (entry & kObjectBit) != 0; }
int64_t entry_count(int64_t entry) { return entry >> 1; }

// A finite double as Python's repr() writes it: the shortest digits that read back exactly
// (std::to_chars), in fixed notation when the decimal exponent is in [-4, 16) and in scientific
// notation otherwise. Plain shortest to_chars would write 500000.0 as "5e+05" (one byte shorter),
// which is exact but hard to read in --json output. Fixed output without a '.' gets ".0": "3"
// and "-0" would read back as integers (and lose the sign of zero).
std::string double_text(double value) {
  char buffer[64];
  auto scientific = std::to_chars(buffer, buffer + sizeof buffer, value,
                                  std::chars_format::scientific);
  std::string_view text(buffer, static_cast<size_t>(scientific.ptr - buffer));
  const char* exponent_text = buffer + text.find('e') + 1;
  if (*exponent_text == '+') ++exponent_text;  // from_chars takes no '+'
  int exponent = 0;
  std::from_chars(exponent_text, scientific.ptr, exponent);
  if (exponent < -4 || exponent >= 16) return std::string(text);
  auto fixed = std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::fixed);
  std::string out(buffer, fixed.ptr);
  if (out.find('.') == std::string::npos) out += ".0";
  return out;
}

[[noreturn]] void misuse(std::string_view what) {
  throw Error(concat("json::Writer: ", what));
}

}  // namespace

Writer::Writer(TextLayout layout) : pretty_(layout == TextLayout::Pretty) {}

void Writer::newline() {
  if (!pretty_) return;
  out_ += '\n';
  out_.append(2 * counts_.size(), ' ');
}

// Checks that a value may come now and writes what separates it from the previous one.
void Writer::before_value() {
  if (counts_.empty()) {
    if (!out_.empty()) misuse("a second top-level value (a JSON document holds one value)");
    return;
  }
  int64_t& entry = counts_.back();
  if (entry_is_object(entry)) {
    // key() already wrote the separator and counted the member.
    if (!after_key_) misuse("a value inside an object needs a key() first");
    after_key_ = false;
    return;
  }
  if (entry_count(entry) > 0) out_ += ',';
  entry += 2;
  newline();
}

Writer& Writer::begin_object() {
  before_value();
  out_ += '{';
  counts_.push_back(kObjectBit);
  return *this;
}

Writer& Writer::end_object() {
  if (counts_.empty() || !entry_is_object(counts_.back())) {
    misuse("end_object() without a matching begin_object()");
  }
  if (after_key_) misuse("end_object() right after key(): the key has no value");
  bool empty = entry_count(counts_.back()) == 0;
  counts_.pop_back();
  if (!empty) newline();
  out_ += '}';
  return *this;
}

Writer& Writer::begin_array() {
  before_value();
  out_ += '[';
  counts_.push_back(0);
  return *this;
}

Writer& Writer::end_array() {
  if (counts_.empty() || entry_is_object(counts_.back())) {
    misuse("end_array() without a matching begin_array()");
  }
  bool empty = entry_count(counts_.back()) == 0;
  counts_.pop_back();
  if (!empty) newline();
  out_ += ']';
  return *this;
}

Writer& Writer::key(std::string_view name) {
  if (counts_.empty() || !entry_is_object(counts_.back())) {
    misuse(concat("key(", quote(name), ") outside an object"));
  }
  if (after_key_) misuse(concat("key(", quote(name), ") right after another key()"));
  int64_t& entry = counts_.back();
  if (entry_count(entry) > 0) out_ += ',';
  entry += 2;
  newline();
  out_ += quote(name);
  out_ += pretty_ ? ": " : ":";
  after_key_ = true;
  return *this;
}

Writer& Writer::value(double number) {
  before_value();
  if (!std::isfinite(number)) {
    // Strict JSON has no NaN or infinity (RFC 8259 section 6); null is what JavaScript writes.
    out_ += "null";
    return *this;
  }
  out_ += double_text(number);
  return *this;
}

Writer& Writer::value(int64_t number) {
  before_value();
  out_ += std::to_string(number);
  return *this;
}

Writer& Writer::value(bool flag) {
  before_value();
  out_ += flag ? "true" : "false";
  return *this;
}

Writer& Writer::value(std::string_view text) {
  before_value();
  out_ += quote(text);
  return *this;
}

Writer& Writer::null() {
  before_value();
  out_ += "null";
  return *this;
}

std::string quote(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 2);
  out += '"';
  for (char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += "\\u00";
          out += hex_byte(static_cast<unsigned char>(c), false);
        } else {
          out += c;  // including bytes >= 0x80: UTF-8 passes through unchanged
        }
    }
  }
  out += '"';
  return out;
}

namespace {

void write_value(Writer& w, const Value& v) {
  switch (v.kind()) {
    case Kind::Null: w.null(); break;
    case Kind::Bool: w.value(v.as_bool()); break;
    case Kind::Number:
      if (v.is_integer()) {
        w.value(v.as_int64());
      } else {
        w.value(v.as_double());
      }
      break;
    case Kind::String: w.value(v.as_string()); break;
    case Kind::Array:
      w.begin_array();
      for (const Value& item : v.as_array()) write_value(w, item);
      w.end_array();
      break;
    case Kind::Object:
      w.begin_object();
      for (const auto& [key, item] : v.as_object()) {
        w.key(key);
        write_value(w, item);
      }
      w.end_object();
      break;
  }
}

}  // namespace

std::string serialize(const Value& value, TextLayout layout) {
  Writer writer(layout);
  write_value(writer, value);
  return writer.str();
}

}  // namespace rotary::json
