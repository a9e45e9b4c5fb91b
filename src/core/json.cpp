// src/core/json.cpp: json::Value (json.hpp), the document tree the parser builds and the
// writer reads: its typed accessors, whose errors name the value's place in the text, and its
// constructors. The parser is in json_parse.cpp, the writer in json_write.cpp.
#include "core/json.hpp"

#include <cmath>
#include <memory>
#include <string>
#include <utility>

#include "rotary/error.hpp"

namespace rotary::json {
namespace {

using detail::concat;

// A number as describe() and messages show it: integers as integers, "nan", "inf", "-inf".
std::string number_text(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value < 0 ? "-inf" : "inf";
  return detail::shortest(value);
}

[[noreturn]] void wrong_kind(const Value& value, std::string_view wanted) {
  Location at = value.location();
  if (at.line > 0) {
    throw Error(concat("json: value at line ", at.line, ", column ", at.column, " is ",
                       value.describe(), ", not ", wanted));
  }
  // Built in code rather than parsed: there is no place to name.
  throw Error(concat("json: value is ", value.describe(), ", not ", wanted));
}

}  // namespace

// ---- Value ------------------------------------------------------------------------------------

bool Value::as_bool() const {
  if (kind_ != Kind::Bool) wrong_kind(*this, "true or false");
  return bool_value_;
}

double Value::as_double() const {
  if (kind_ != Kind::Number) wrong_kind(*this, "a number");
  return number_;
}

bool Value::is_integer() const { return kind_ == Kind::Number && integer_; }

int64_t Value::as_int64() const {
  if (!is_integer()) wrong_kind(*this, "an integer");
  return int_value_;
}

const std::string& Value::as_string() const {
  if (kind_ != Kind::String) wrong_kind(*this, "a string");
  return string_;
}

const std::vector<Value>& Value::as_array() const {
  if (kind_ != Kind::Array) wrong_kind(*this, "an array");
  return *array_;
}

const std::vector<Value::Member>& Value::as_object() const {
  if (kind_ != Kind::Object) wrong_kind(*this, "an object");
  return *object_;
}

const Value* Value::find(std::string_view key) const {
  if (kind_ != Kind::Object) return nullptr;
  // The last member wins, as in Python's json (later keys overwrite earlier ones in the dict).
  for (auto it = object_->rbegin(); it != object_->rend(); ++it) {
    if (it->first == key) return &it->second;
  }
  return nullptr;
}

std::string Value::describe() const {
  switch (kind_) {
    case Kind::Null: return "null";
    case Kind::Bool: return bool_value_ ? "true" : "false";
    case Kind::Number:
      return "number " + (integer_ ? std::to_string(int_value_) : number_text(number_));
    case Kind::String: {
      constexpr size_t kLimit = 40;
      if (string_.size() <= kLimit) return "string " + quote(string_);
      // Cut at a character boundary: back off over UTF-8 continuation bytes (10xxxxxx).
      size_t cut = kLimit;
      while (cut > 0 && (static_cast<unsigned char>(string_[cut]) & 0xC0) == 0x80) --cut;
      std::string shown = quote(std::string_view(string_).substr(0, cut));
      shown.insert(shown.size() - 1, "...");
      return "string " + shown;
    }
    case Kind::Array: {
      size_t size = array_->size();
      return concat("array of ", size, size == 1 ? " element" : " elements");
    }
    case Kind::Object: return "object";
  }
  return "value";
}

Value Value::make_null(Location where) {
  Value value;
  value.location_ = where;
  return value;
}

Value Value::make_bool(bool flag, Location where) {
  Value value;
  value.kind_ = Kind::Bool;
  value.location_ = where;
  value.bool_value_ = flag;
  return value;
}

Value Value::make_number(double number, Location where) {
  Value value;
  value.kind_ = Kind::Number;
  value.location_ = where;
  value.number_ = number;
  return value;
}

Value Value::make_integer(int64_t integer, Location where) {
  Value value;
  value.kind_ = Kind::Number;
  value.location_ = where;
  value.integer_ = true;
  value.int_value_ = integer;
  value.number_ = static_cast<double>(integer);
  return value;
}

Value Value::make_string(std::string text, Location where) {
  Value value;
  value.kind_ = Kind::String;
  value.location_ = where;
  value.string_ = std::move(text);
  return value;
}

Value Value::make_array(std::vector<Value> items, Location where) {
  Value value;
  value.kind_ = Kind::Array;
  value.location_ = where;
  value.array_ = std::make_shared<const std::vector<Value>>(std::move(items));
  return value;
}

Value Value::make_object(std::vector<Member> members, Location where) {
  Value value;
  value.kind_ = Kind::Object;
  value.location_ = where;
  value.object_ = std::make_shared<const std::vector<Member>>(std::move(members));
  return value;
}

}  // namespace rotary::json
