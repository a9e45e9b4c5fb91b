// src/core/json_parse.cpp: the JSON reader declared in json.hpp (parse, parse_file); the
// Value type is in json.cpp, the writer in json_write.cpp.
//
// The parser is a plain recursive-descent parser over the RFC 8259 grammar, plus Python's NaN,
// Infinity and -Infinity literals. Recursion happens only when an array or object opens, and the
// depth is checked before recursing, so the stack depth is bounded by ParseOptions::max_depth.
//
// Where an error points (1-based line, column in bytes):
//   - structural errors (a missing ',' ':' or bracket, a trailing comma, text after the document,
//     an empty document, nesting too deep): the byte at which the parser stopped;
//   - number and literal errors: the offending byte (the leading '0', the '+', the byte after a
//     '.' with no digit) or, for an unknown word, its first letter;
//   - string errors: the control character itself, the backslash that starts a bad escape or a
//     lone surrogate, and the opening quote for an unterminated string (the end of the text
//     would point nowhere useful).
// Only '\n' starts a new line ("\r\n" works; a lone '\r' is just whitespace). A UTF-8 byte
// order mark is skipped and not counted in the columns of line 1, as editors show it.
#include "core/json.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <system_error>
#include <unordered_set>

#include "core/json_hex.hpp"
#include "rotary/error.hpp"

namespace rotary::json {
namespace {

using rotary::detail::concat;
using detail::hex_byte;

bool is_digit(int c) { return c >= '0' && c <= '9'; }
bool is_letter(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool is_word_char(int c) { return is_letter(c) || is_digit(c) || c == '_'; }

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// For a number that matches the JSON grammar but that std::from_chars reports as out of range:
// true when its magnitude is at least 1 (so it overflowed to infinity), false when it is below 1
// (so it underflowed to zero). Out-of-range values are beyond 1e308 or below 1e-323, so the
// decimal exponent of the first significant digit decides unambiguously.
bool magnitude_at_least_one(std::string_view token) {
  size_t i = 0;
  if (i < token.size() && token[i] == '-') ++i;
  int64_t lead = 0;  // decimal exponent of the first nonzero digit, ignoring the 'e' part
  bool found = false;
  int64_t integer_digits = 0;
  for (; i < token.size() && is_digit(token[i]); ++i) {
    if (!found && token[i] != '0') {
      found = true;
      integer_digits = 0;
    }
    if (found) ++integer_digits;
  }
  if (found) lead = integer_digits - 1;
  if (i < token.size() && token[i] == '.') {
    ++i;
    for (int64_t place = -1; i < token.size() && is_digit(token[i]); ++i, --place) {
      if (!found && token[i] != '0') {
        found = true;
        lead = place;
      }
    }
  }
  if (!found) return false;  // all zeros: cannot be out of range, but 0 is the answer anyway
  int64_t exponent = 0;
  if (i < token.size() && (token[i] == 'e' || token[i] == 'E')) {
    ++i;
    bool negative = false;
    if (token[i] == '+' || token[i] == '-') negative = token[i++] == '-';
    for (; i < token.size(); ++i) {
      // Saturate: any exponent beyond a billion is as good as infinite here.
      if (exponent < 1'000'000'000) exponent = exponent * 10 + (token[i] - '0');
    }
    if (negative) exponent = -exponent;
  }
  return lead + exponent >= 0;
}

// The text shown for an unknown word or an escape in a message: printable ASCII kept, anything
// else stops the excerpt (it could be a newline or half of a UTF-8 sequence).
std::string excerpt(std::string_view text, size_t limit) {
  std::string out;
  for (char c : text) {
    if (c < 0x20 || c > 0x7E) break;
    if (out.size() == limit) return out + "...";
    out += c;
  }
  return out;
}

// Stack use: only parse_value, parse_array and parse_object recurse. The scalar parsers and the
// error paths are kept out of line (gnu::noinline) so that their locals do not widen those
// frames: about 290 bytes per nesting level at -O2 and 1.6 KB under AddressSanitizer, so the
// default max_depth of 512 needs under 1 MB of stack even then. A caller who raises max_depth
// into the thousands must make sure the stack is large enough.
class Parser {
 public:
  Parser(std::string_view text, std::string_view source, std::vector<std::string>* warnings,
         int max_depth)
      : text_(text), source_(source), warnings_(warnings), max_depth_(max_depth) {}

  Value parse_document() {
    // A UTF-8 byte order mark (written by some Windows editors) is not part of the JSON text.
    if (text_.substr(0, 3) == "\xEF\xBB\xBF") {
      pos_ = 3;
      line_start_ = 3;
    }
    skip_whitespace();
    if (at_end()) fail(here(), "empty document");
    Value document = parse_value(0, "expected a value");
    skip_whitespace();
    // RFC 8259 section 2: a JSON text is exactly one value surrounded by optional whitespace.
    if (!at_end()) expected("unexpected text after the document");
    return document;
  }

 private:
  bool at_end() const { return pos_ >= text_.size(); }
  // The current byte as 0..255, or -1 at the end of the text (a NUL byte is not the end).
  int peek() const { return at_end() ? -1 : static_cast<unsigned char>(text_[pos_]); }
  int peek_at(size_t offset) const {
    return offset >= text_.size() ? -1 : static_cast<unsigned char>(text_[offset]);
  }
  // Location of a byte on the current line (no newline can sit between line_start_ and it:
  // newlines occur only in whitespace, and a raw newline in a string is an error at once).
  Location location_of(size_t offset) const {
    return {line_, static_cast<int64_t>(offset - line_start_) + 1};
  }
  Location here() const { return location_of(pos_); }

  [[noreturn, gnu::noinline, gnu::cold]] void fail(Location at, std::string_view what) const {
    throw ConfigError(concat(source_, ": malformed JSON at line ", at.line, ", column ", at.column,
                             ": ", what));
  }

  // Fails at the current byte with `what`, saying so when the text has ended there, and naming
  // comments (not part of JSON, RFC 8259 has none) instead of a generic complaint.
  [[noreturn, gnu::noinline, gnu::cold]] void expected(std::string_view what) const {
    if (peek() == '/' && (peek_at(pos_ + 1) == '/' || peek_at(pos_ + 1) == '*')) {
      fail(here(), "comments are not allowed in JSON");
    }
    if (at_end()) fail(here(), concat(what, ", but the text ends"));
    fail(here(), what);
  }

  // RFC 8259 section 2: insignificant whitespace is space, tab, line feed and carriage return.
  void skip_whitespace() {
    while (!at_end()) {
      char c = text_[pos_];
      if (c == '\n') {
        ++pos_;
        ++line_;
        line_start_ = pos_;
      } else if (c == ' ' || c == '\t' || c == '\r') {
        ++pos_;
      } else {
        break;
      }
    }
  }

  // `depth` is the number of arrays and objects open around this value. `what` is the complaint
  // when no value starts here ("expected a value", "expected a value or ']'").
  Value parse_value(int depth, std::string_view what) {
    int c = peek();
    if (c == '{') return parse_object(depth);
    if (c == '[') return parse_array(depth);
    if (c == '"') {
      Location at = here();
      return Value::make_string(parse_string(), at);
    }
    if (c == '-' || is_digit(c) || c == '+' || c == '.') return parse_number();
    if (is_letter(c)) return parse_word();
    expected(what);
  }

  [[gnu::noinline]] void check_depth(int depth) const {
    if (depth >= max_depth_) fail(here(), concat("nesting deeper than ", max_depth_, " levels"));
  }

  // RFC 8259 section 5: begin-array [ value *( value-separator value ) ] end-array.
  Value parse_array(int depth) {
    check_depth(depth);
    Location at = here();
    ++pos_;  // '['
    std::vector<Value> items;
    skip_whitespace();
    if (peek() == ']') {
      ++pos_;
      return Value::make_array(std::move(items), at);
    }
    for (;;) {
      items.push_back(parse_value(depth + 1, items.empty() ? "expected a value or ']'"
                                                           : "expected a value"));
      skip_whitespace();
      if (peek() == ',') {
        ++pos_;
        skip_whitespace();
        if (peek() == ']') fail(here(), "trailing comma before ']'");
        continue;
      }
      if (peek() == ']') {
        ++pos_;
        return Value::make_array(std::move(items), at);
      }
      expected("expected ',' or ']' after an array element");
    }
  }

  // RFC 8259 section 4: begin-object [ member *( value-separator member ) ] end-object, where
  // member = string name-separator value. Names "SHOULD be unique"; like Python we keep every
  // member, let the last one win (Value::find) and warn.
  Value parse_object(int depth) {
    check_depth(depth);
    Location at = here();
    ++pos_;  // '{'
    std::vector<Value::Member> members;
    std::unordered_set<std::string> seen;  // only filled when someone wants the warnings
    skip_whitespace();
    if (peek() == '}') {
      ++pos_;
      return Value::make_object(std::move(members), at);
    }
    for (;;) {
      if (peek() != '"') {
        expected(members.empty() ? "expected a string key or '}'" : "expected a string key");
      }
      int64_t key_line = line_;
      std::string key = parse_string();
      skip_whitespace();
      if (peek() != ':') expected("expected ':' after an object key");
      ++pos_;
      skip_whitespace();
      Value member = parse_value(depth + 1, "expected a value");
      if (warnings_ != nullptr && !seen.insert(key).second) {
        warnings_->push_back(concat(source_, ": key ", quote(key),
                                    " appears more than once in an object (line ", key_line,
                                    "); the last value is used, as Python does"));
      }
      members.emplace_back(std::move(key), std::move(member));
      skip_whitespace();
      if (peek() == ',') {
        ++pos_;
        skip_whitespace();
        if (peek() == '}') fail(here(), "trailing comma before '}'");
        continue;
      }
      if (peek() == '}') {
        ++pos_;
        return Value::make_object(std::move(members), at);
      }
      expected("expected ',' or '}' after an object member");
    }
  }

  void skip_digits() {
    while (is_digit(peek())) ++pos_;
  }

  // RFC 8259 section 6: number = [ minus ] int [ frac ] [ exp ], int = zero / ( digit1-9 *DIGIT ).
  // The grammar is checked here; std::from_chars (locale independent, and it accepts every
  // string of this grammar) does the conversion.
  [[gnu::noinline]] Value parse_number() {
    size_t start = pos_;
    Location at = here();
    if (peek() == '+') fail(here(), "invalid number (JSON does not allow a leading '+')");
    if (peek() == '.') fail(here(), "invalid number (a digit must come before '.')");
    if (peek() == '-') {
      ++pos_;
      if (is_letter(peek())) {
        // Python writes -Infinity for negative infinity.
        size_t word = pos_;
        while (is_word_char(peek())) ++pos_;
        if (text_.substr(word, pos_ - word) == "Infinity") {
          return Value::make_number(-std::numeric_limits<double>::infinity(), at);
        }
        fail(location_of(word), "invalid number");
      }
    }
    if (peek() == '0') {
      if (is_digit(peek_at(pos_ + 1))) fail(here(), "leading zeros are not allowed");
      ++pos_;
    } else if (is_digit(peek())) {
      skip_digits();
    } else {
      fail(here(), "invalid number (expected a digit after '-')");
    }
    bool integral = true;
    if (peek() == '.') {
      integral = false;
      ++pos_;
      if (!is_digit(peek())) fail(here(), "invalid number (expected a digit after '.')");
      skip_digits();
    }
    if (peek() == 'e' || peek() == 'E') {
      integral = false;
      ++pos_;
      if (peek() == '+' || peek() == '-') ++pos_;
      if (!is_digit(peek())) fail(here(), "invalid number (expected a digit in the exponent)");
      skip_digits();
    }
    std::string_view token = text_.substr(start, pos_ - start);
    const char* first = token.data();
    const char* last = token.data() + token.size();

    if (integral) {
      int64_t integer = 0;
      auto [end, error] = std::from_chars(first, last, integer);
      // "-0" becomes the integer 0 (Python: json.loads("-0") == 0, an int). Integers beyond
      // int64 fall through and are stored as the nearest double only.
      if (error == std::errc{} && end == last) return Value::make_integer(integer, at);
    }
    double number = 0.0;
    auto [end, error] = std::from_chars(first, last, number);
    if (error == std::errc::result_out_of_range) {
      // from_chars leaves `number` untouched here. Python gives ±inf for 1e999 and ±0.0 for
      // 1e-400; do the same so that validation, not the parser, reports the value.
      number = magnitude_at_least_one(token) ? std::numeric_limits<double>::infinity() : 0.0;
      if (token.front() == '-') number = -number;
    } else if (error != std::errc{} || end != last) {
      fail(at, "invalid number");  // unreachable for text that passed the grammar check
    }
    return Value::make_number(number, at);
  }

  // true, false, null (RFC 8259 section 3) and Python's NaN and Infinity.
  [[gnu::noinline]] Value parse_word() {
    Location at = here();
    size_t start = pos_;
    while (is_word_char(peek())) ++pos_;
    std::string_view word = text_.substr(start, pos_ - start);
    if (word == "true") return Value::make_bool(true, at);
    if (word == "false") return Value::make_bool(false, at);
    if (word == "null") return Value::make_null(at);
    if (word == "NaN") return Value::make_number(std::numeric_limits<double>::quiet_NaN(), at);
    if (word == "Infinity") return Value::make_number(std::numeric_limits<double>::infinity(), at);
    fail(at, concat("invalid literal \"", excerpt(word, 20),
                    "\" (expected true, false, null, NaN or Infinity)"));
  }

  // RFC 8259 section 7. Bytes >= 0x80 are copied as they are (no UTF-8 validation: configs are
  // read for their numbers, and a stray Latin-1 byte in a comment field should not be fatal).
  [[gnu::noinline]] std::string parse_string() {
    Location open = here();
    ++pos_;  // '"'
    std::string out;
    for (;;) {
      size_t run = pos_;
      while (run < text_.size()) {
        auto c = static_cast<unsigned char>(text_[run]);
        if (c == '"' || c == '\\' || c < 0x20) break;
        ++run;
      }
      out.append(text_.data() + pos_, run - pos_);
      pos_ = run;
      if (at_end()) fail(open, "unterminated string");
      auto c = static_cast<unsigned char>(text_[pos_]);
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (c == '\\') {
        parse_escape(out, open);
        continue;
      }
      // "All Unicode characters may be placed within the quotation marks, except for the
      // characters that MUST be escaped: quotation mark, reverse solidus, and the control
      // characters (U+0000 through U+001F)."
      std::string spelled = quote(std::string_view(text_.data() + pos_, 1));
      fail(here(), concat("control character in string (U+00", hex_byte(c, true),
                          "; write it as ", spelled.substr(1, spelled.size() - 2), ")"));
    }
  }

  // Reads 4 hex digits at `offset`; false when there are not 4 of them.
  bool read_hex4(size_t offset, uint32_t& value) const {
    if (offset + 4 > text_.size()) return false;
    value = 0;
    for (size_t i = 0; i < 4; ++i) {
      int digit = hex_value(text_[offset + i]);
      if (digit < 0) return false;
      value = value * 16 + static_cast<uint32_t>(digit);
    }
    return true;
  }

  // One escape sequence starting at the backslash under pos_.
  void parse_escape(std::string& out, Location open) {
    size_t backslash = pos_;
    Location at = here();
    int letter = peek_at(backslash + 1);
    if (letter < 0) fail(open, "unterminated string");
    pos_ = backslash + 2;
    switch (letter) {
      case '"': out += '"'; return;
      case '\\': out += '\\'; return;
      case '/': out += '/'; return;
      case 'b': out += '\b'; return;
      case 'f': out += '\f'; return;
      case 'n': out += '\n'; return;
      case 'r': out += '\r'; return;
      case 't': out += '\t'; return;
      case 'u': break;
      default:
        if (letter >= 0x20 && letter <= 0x7E) {
          fail(at, concat("invalid escape \\", static_cast<char>(letter)));
        }
        fail(at, concat("invalid escape: '\\' followed by byte 0x",
                        hex_byte(static_cast<unsigned char>(letter), true)));
    }
    uint32_t cp = 0;
    if (!read_hex4(backslash + 2, cp)) {
      std::string_view rest = text_.substr(backslash + 2, 4);
      rest = rest.substr(0, rest.find('"'));
      fail(at, concat("invalid escape \\u", excerpt(rest, 4), " (\\u needs 4 hex digits)"));
    }
    pos_ = backslash + 6;
    std::string_view spelled = text_.substr(backslash, 6);
    // UTF-16 surrogates (section 7): a high one must be followed at once by an escaped low one,
    // and together they encode one code point above U+FFFF. Anything else is not Unicode text.
    if (cp >= 0xDC00 && cp <= 0xDFFF) fail(at, concat("lone surrogate ", spelled));
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      uint32_t low = 0;
      if (peek_at(pos_) != '\\' || peek_at(pos_ + 1) != 'u' || !read_hex4(pos_ + 2, low) ||
          low < 0xDC00 || low > 0xDFFF) {
        fail(at, concat("lone surrogate ", spelled));
      }
      pos_ += 6;
      cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
    }
    append_utf8(out, cp);
  }

  std::string_view text_;
  std::string_view source_;
  std::vector<std::string>* warnings_;
  int max_depth_;
  size_t pos_ = 0;
  int64_t line_ = 1;
  size_t line_start_ = 0;  // offset of the first byte of the current line
};

}  // namespace

// ---- parsing ----------------------------------------------------------------------------------

namespace {

[[noreturn]] void fail_too_long(std::string_view source_name, const ParseOptions& options, std::string_view size) {
  throw ConfigError(concat(source_name, ": JSON text must be at most ", options.max_bytes,
                           " bytes (ParseOptions::max_bytes; a config.json is a few kilobytes) (got ", size, ")"));
}

}  // namespace

Value parse(std::string_view text, std::string_view source_name, std::vector<std::string>* warnings,
            const ParseOptions& options) {
  if (static_cast<uint64_t>(text.size()) > static_cast<uint64_t>(std::max<int64_t>(options.max_bytes, 0))) {
    fail_too_long(source_name, options, concat(text.size(), " bytes"));
  }
  return Parser(text, source_name, warnings, options.max_depth).parse_document();
}

Value parse_file(const std::string& path, std::vector<std::string>* warnings,
                 const ParseOptions& options) {
  auto cannot_read = [&path](int error) {
    // generic_category().message() is strerror()'s text without strerror's shared buffer.
    return ConfigError(
        concat(path, ": cannot read file: ", std::generic_category().message(error)));
  };
  errno = 0;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"),
                                                        &std::fclose);
  if (!file) throw cannot_read(errno);
  // A regular file too long is rejected by its size, unread; anything else (a pipe, /dev/zero)
  // is read at most one byte past the limit.
  const auto limit = static_cast<size_t>(std::max<int64_t>(options.max_bytes, 0));
  struct stat status {};
  if (::fstat(::fileno(file.get()), &status) == 0 && S_ISREG(status.st_mode) &&
      static_cast<uint64_t>(status.st_size) > limit) {
    fail_too_long(path, options, concat(status.st_size, " bytes"));
  }
  std::string text;
  char buffer[1 << 14];
  size_t got = 0;
  while (text.size() <= limit && (got = std::fread(buffer, 1, sizeof buffer, file.get())) > 0) {
    text.append(buffer, got);
  }
  // A directory opens fine on Linux; the first read fails with EISDIR.
  if (std::ferror(file.get())) throw cannot_read(errno != 0 ? errno : EIO);
  if (text.size() > limit) fail_too_long(path, options, concat("more than ", limit, " bytes"));
  file.reset();
  return parse(text, path, warnings, options);
}

}  // namespace rotary::json
