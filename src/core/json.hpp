// src/core/json.hpp: a small JSON reader and writer for config.json files and --json output.
// Internal, not installed: a file format is not part of the RoPE API. rotary_core parses configs
// with it (hf_config.cpp); the golden checks, the CLI, the tests and the fuzzers include it as
// "core/json.hpp" with src/ on their private include path.
//
// Why our own: config errors must name the field, the value and the line it is on, and configs
// written by Python's json module may hold NaN / Infinity literals (json.dump allows them by
// default). Those must reach validation ("rope_theta must be finite (got nan)") instead of
// failing as a syntax error. Every value remembers where it starts in the text.
//
// Accepted: RFC 8259 JSON, plus the literals NaN, Infinity and -Infinity as Python writes them.
// Rejected with rotary::ConfigError "<source>: malformed JSON at line L, column C: <what>":
// anything else, including trailing commas, comments, leading zeros, unescaped control
// characters, invalid escapes, lone surrogates, nesting deeper than ParseOptions::max_depth,
// and trailing non-space text. Duplicate object keys are accepted (the last one wins, as in
// Python) and reported as a warning.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rotary::json {

enum class Kind { Null, Bool, Number, String, Array, Object };

// 1-based line and column (in bytes) of the first character of a value.
struct Location {
  int64_t line = 0;
  int64_t column = 0;
};

class Value {
 public:
  using Member = std::pair<std::string, Value>;

  Value() = default;

  Kind kind() const { return kind_; }
  Location location() const { return location_; }

  bool is_null() const { return kind_ == Kind::Null; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_number() const { return kind_ == Kind::Number; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_array() const { return kind_ == Kind::Array; }
  bool is_object() const { return kind_ == Kind::Object; }

  // Accessors throw rotary::Error when the kind differs; callers check the kind first and
  // report the field by name.
  bool as_bool() const;
  double as_double() const;                 // Number: the nearest double (±inf on overflow)
  bool is_integer() const;                  // Number written without fraction or exponent that fits int64
  int64_t as_int64() const;                 // requires is_integer()
  const std::string& as_string() const;
  const std::vector<Value>& as_array() const;
  const std::vector<Member>& as_object() const;  // in file order, duplicates kept

  // Object lookup: the last member with this key, or nullptr (also when this is not an object).
  const Value* find(std::string_view key) const;

  // A short description for error messages: `null`, `true`, `number 0.5`, `string "8"`,
  // `array of 47 elements`, `object`. Long strings are cut with "...".
  std::string describe() const;

  // Builders, used by the parser and by tests.
  static Value make_null(Location where = {});
  static Value make_bool(bool value, Location where = {});
  static Value make_number(double value, Location where = {});
  static Value make_integer(int64_t value, Location where = {});
  static Value make_string(std::string value, Location where = {});
  static Value make_array(std::vector<Value> items, Location where = {});
  static Value make_object(std::vector<Member> members, Location where = {});

 private:
  Kind kind_ = Kind::Null;
  Location location_{};
  bool bool_value_ = false;
  bool integer_ = false;
  int64_t int_value_ = 0;
  double number_ = 0.0;
  std::string string_;
  // shared_ptr keeps Value cheap to copy; parsed trees are immutable.
  std::shared_ptr<const std::vector<Value>> array_;
  std::shared_ptr<const std::vector<Member>> object_;
};

struct ParseOptions {
  int max_depth = 512;  // arrays + objects open at once; deeper input is an error, never a stack overflow
  // Longest text accepted. A config.json is a few kilobytes (the golden case files, the largest
  // JSON rotary reads, are 1.4 MB); the cap keeps a wrong path (a weights file, /dev/zero) from
  // exhausting memory before the first syntax error.
  int64_t max_bytes = int64_t{64} << 20;
};

// Parses one JSON document. `source_name` starts every error message (a file name, "preset
// llama-3.1-8b", ...). Warnings (duplicate keys) are appended to *warnings when it is not null.
// Text longer than options.max_bytes is a rotary::ConfigError naming its size.
Value parse(std::string_view text, std::string_view source_name,
            std::vector<std::string>* warnings = nullptr, const ParseOptions& options = {});

// Reads and parses a file. An unreadable file is a rotary::ConfigError naming the path and the
// system's reason; a file longer than options.max_bytes one naming its size (read no further).
Value parse_file(const std::string& path, std::vector<std::string>* warnings = nullptr,
                 const ParseOptions& options = {});

// How Writer and serialize() lay text out: Pretty indents by 2 spaces, one member per line;
// Compact writes no whitespace.
enum class TextLayout { Pretty, Compact };

// Streaming writer for the CLI's --json output. Doubles are written in the shortest form that
// reads back exactly (17 significant digits at most); NaN and infinities are written as null,
// so the output is always strict JSON.
class Writer {
 public:
  explicit Writer(TextLayout layout = TextLayout::Pretty);

  Writer& begin_object();
  Writer& end_object();
  Writer& begin_array();
  Writer& end_array();
  Writer& key(std::string_view name);  // inside an object, before each value
  Writer& value(double number);
  Writer& value(int64_t number);
  Writer& value(int number) { return value(static_cast<int64_t>(number)); }
  Writer& value(bool flag);
  Writer& value(std::string_view text);
  Writer& value(const char* text) { return value(std::string_view(text)); }
  Writer& null();

  const std::string& str() const { return out_; }

 private:
  void before_value();
  void newline();

  std::string out_;
  bool pretty_;
  // One entry per open container: number of elements written so far.
  std::vector<int64_t> counts_;
  bool after_key_ = false;
};

// A parsed (or built) value written back as JSON text: integers as integers, doubles in the
// shortest round-trip form, NaN / infinities as null, object members in order (duplicates
// kept). Parsing the result gives the same values.
std::string serialize(const Value& value, TextLayout layout = TextLayout::Compact);

// Escapes a string as a JSON string literal, quotes included.
std::string quote(std::string_view text);

}  // namespace rotary::json
