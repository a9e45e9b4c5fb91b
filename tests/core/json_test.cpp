// tests/core/json_test.cpp: the JSON reader and writer (src/core/json.hpp).
#include "core/json.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "rotary/error.hpp"

namespace {

using rotary::ConfigError;
using rotary::json::Kind;
using rotary::json::Location;
using rotary::json::ParseOptions;
using rotary::json::Value;
using rotary::json::Writer;
using rotary::json::parse;
using rotary::json::parse_file;
using rotary::json::quote;
using testing::ElementsAre;
using testing::Eq;
using testing::HasSubstr;
using testing::IsEmpty;
using testing::ThrowsMessage;

constexpr double kInf = std::numeric_limits<double>::infinity();

Value parse_text(std::string_view text) { return parse(text, "test.json"); }

// A callable for ThrowsMessage: parses `text` and discards the result.
auto parsing(std::string text, ParseOptions options = {}) {
  return [text = std::move(text), options] { (void)parse(text, "test.json", nullptr, options); };
}

// The full message the parser gives for an error at (line, column) in "test.json".
std::string malformed(int line, int column, std::string_view what) {
  return rotary::detail::concat("test.json: malformed JSON at line ", line, ", column ", column,
                                ": ", what);
}

uint64_t bits(double value) { return std::bit_cast<uint64_t>(value); }

testing::AssertionResult at(const Value& value, int64_t line, int64_t column) {
  Location where = value.location();
  if (where.line == line && where.column == column) return testing::AssertionSuccess();
  return testing::AssertionFailure() << value.describe() << " is at line " << where.line
                                     << ", column " << where.column << ", expected line " << line
                                     << ", column " << column;
}

// ---- literals and structure -------------------------------------------------------------------

TEST(Json, ParsesTrueFalseAndNull) {
  EXPECT_TRUE(parse_text("true").as_bool());
  EXPECT_FALSE(parse_text("false").as_bool());
  EXPECT_TRUE(parse_text("null").is_null());
  EXPECT_EQ(parse_text(" \t\r\n true \n").kind(), Kind::Bool);
}

TEST(Json, ParsesEmptyContainers) {
  Value array = parse_text("[ ]");
  ASSERT_TRUE(array.is_array());
  EXPECT_THAT(array.as_array(), IsEmpty());
  Value object = parse_text("{\n}");
  ASSERT_TRUE(object.is_object());
  EXPECT_THAT(object.as_object(), IsEmpty());
}

TEST(Json, ParsesNestedStructures) {
  Value root = parse_text(R"({"a": [1, {"b": [true, null, "x"]}], "c": {}})");
  const Value* a = root.find("a");
  ASSERT_NE(a, nullptr);
  ASSERT_EQ(a->as_array().size(), 2u);
  EXPECT_EQ(a->as_array()[0].as_int64(), 1);
  const Value* b = a->as_array()[1].find("b");
  ASSERT_NE(b, nullptr);
  ASSERT_EQ(b->as_array().size(), 3u);
  EXPECT_TRUE(b->as_array()[0].as_bool());
  EXPECT_TRUE(b->as_array()[1].is_null());
  EXPECT_EQ(b->as_array()[2].as_string(), "x");
  EXPECT_TRUE(root.find("c")->is_object());
  ASSERT_EQ(root.as_object().size(), 2u);
  EXPECT_EQ(root.as_object()[0].first, "a");
  EXPECT_EQ(root.as_object()[1].first, "c");
}

TEST(Json, RecordsLineAndColumnOfEveryValue) {
  Value root = parse_text(
      "{\n"
      "  \"rope_scaling\": {\n"
      "    \"type\": \"yarn\",\n"
      "    \"factor\": [1, 2, {\"deep\": -40.5}]\n"
      "  }\n"
      "}\n");
  EXPECT_TRUE(at(root, 1, 1));
  const Value& scaling = *root.find("rope_scaling");
  EXPECT_TRUE(at(scaling, 2, 19));
  EXPECT_TRUE(at(*scaling.find("type"), 3, 13));
  const Value& factor = *scaling.find("factor");
  EXPECT_TRUE(at(factor, 4, 15));
  EXPECT_TRUE(at(factor.as_array()[0], 4, 16));
  EXPECT_TRUE(at(factor.as_array()[1], 4, 19));
  EXPECT_TRUE(at(factor.as_array()[2], 4, 22));
  const Value& deep = *factor.as_array()[2].find("deep");
  EXPECT_TRUE(at(deep, 4, 31));  // the minus sign
  EXPECT_EQ(deep.as_double(), -40.5);
}

TEST(Json, CountsColumnsInBytes) {
  // "é" is two bytes in UTF-8, so the 1 is in byte column 8.
  Value root = parse_text("[\"\xC3\xA9\", 1]");
  EXPECT_TRUE(at(root.as_array()[1], 1, 8));
}

TEST(Json, TreatsCrLfAsOneLineBreak) {
  Value root = parse_text("[\r\n1,\r\n  2]");
  EXPECT_TRUE(at(root.as_array()[0], 2, 1));
  EXPECT_TRUE(at(root.as_array()[1], 3, 3));
}

// ---- numbers ----------------------------------------------------------------------------------

TEST(Json, StoresWholeNumbersAsIntegers) {
  for (auto [text, expected] : {std::pair{"0", 0}, {"42", 42}, {"-7", -7}, {"131072", 131072}}) {
    Value value = parse_text(text);
    EXPECT_TRUE(value.is_integer()) << text;
    EXPECT_EQ(value.as_int64(), expected) << text;
    EXPECT_EQ(value.as_double(), expected) << text;
  }
}

TEST(Json, KeepsInt64LimitsExact) {
  Value max = parse_text("9223372036854775807");
  ASSERT_TRUE(max.is_integer());
  EXPECT_EQ(max.as_int64(), std::numeric_limits<int64_t>::max());
  Value min = parse_text("-9223372036854775808");
  ASSERT_TRUE(min.is_integer());
  EXPECT_EQ(min.as_int64(), std::numeric_limits<int64_t>::min());
}

TEST(Json, StoresIntegersBeyondInt64AsDoubles) {
  Value above = parse_text("9223372036854775808");  // 2^63
  EXPECT_TRUE(above.is_number());
  EXPECT_FALSE(above.is_integer());
  EXPECT_EQ(above.as_double(), 9223372036854775808.0);
  EXPECT_THAT([&] { (void)above.as_int64(); },
              ThrowsMessage<rotary::Error>(HasSubstr("not an integer")));
  Value below = parse_text("-9223372036854775809");
  EXPECT_FALSE(below.is_integer());
  EXPECT_EQ(below.as_double(), -9223372036854775808.0);
  Value huge = parse_text("123456789012345678901234567890");
  EXPECT_FALSE(huge.is_integer());
  EXPECT_EQ(huge.as_double(), 1.2345678901234568e29);
}

TEST(Json, ReadsMinusZeroAsIntegerZeroAndMinusZeroPointZeroAsNegativeDouble) {
  // Python: json.loads("-0") is the int 0, json.loads("-0.0") is the float -0.0.
  Value integer = parse_text("-0");
  ASSERT_TRUE(integer.is_integer());
  EXPECT_EQ(integer.as_int64(), 0);
  EXPECT_EQ(integer.as_double(), 0.0);
  Value real = parse_text("-0.0");
  EXPECT_FALSE(real.is_integer());
  EXPECT_EQ(bits(real.as_double()), bits(-0.0));
}

TEST(Json, StoresNumbersWithFractionOrExponentAsDoubles) {
  for (auto [text, expected] :
       {std::pair{"1.0", 1.0}, {"1e2", 100.0}, {"1E+2", 100.0}, {"2.5e-3", 0.0025},
        {"0.1", 0.1}, {"-1.5", -1.5}, {"5e5", 500000.0}, {"0e0", 0.0}}) {
    Value value = parse_text(text);
    EXPECT_FALSE(value.is_integer()) << text;
    EXPECT_EQ(bits(value.as_double()), bits(expected)) << text;
  }
}

TEST(Json, ParsesLongMantissasToTheNearestDouble) {
  EXPECT_EQ(parse_text("0.1000000000000000055511151231257827021181583404541015625").as_double(),
            0.1);
  EXPECT_EQ(parse_text("1.7976931348623157e308").as_double(),
            std::numeric_limits<double>::max());
}

TEST(Json, OverflowBecomesInfinity) {
  EXPECT_EQ(parse_text("1e999").as_double(), kInf);
  EXPECT_EQ(parse_text("-1e999").as_double(), -kInf);
  EXPECT_EQ(parse_text("1.8e308").as_double(), kInf);
  EXPECT_EQ(parse_text("123456789e99999999999999999999").as_double(), kInf);
  EXPECT_EQ(parse_text("0.0000001e400").as_double(), kInf);
}

TEST(Json, UnderflowBecomesZeroOrTheSubnormal) {
  Value tiny = parse_text("1e-400");
  EXPECT_EQ(bits(tiny.as_double()), bits(0.0));
  EXPECT_EQ(bits(parse_text("-1e-400").as_double()), bits(-0.0));
  EXPECT_EQ(bits(parse_text("100000e-99999999999999999999").as_double()), bits(0.0));
  EXPECT_EQ(parse_text("5e-324").as_double(), std::numeric_limits<double>::denorm_min());
  EXPECT_EQ(parse_text("1e-310").as_double(), 1e-310);
  EXPECT_EQ(bits(parse_text("2e-324").as_double()), bits(0.0));
}

TEST(Json, AcceptsPythonNaNAndInfinityLiterals) {
  Value nan = parse_text("NaN");
  ASSERT_TRUE(nan.is_number());
  EXPECT_TRUE(std::isnan(nan.as_double()));
  EXPECT_FALSE(nan.is_integer());
  Value inf = parse_text("Infinity");
  EXPECT_EQ(inf.as_double(), kInf);
  EXPECT_FALSE(inf.is_integer());
  Value root = parse_text(R"({"theta": -Infinity})");
  EXPECT_EQ(root.find("theta")->as_double(), -kInf);
  EXPECT_TRUE(at(*root.find("theta"), 1, 11));
}

TEST(Json, RejectsOtherSpellingsOfLiterals) {
  EXPECT_THAT(parsing("nan"), ThrowsMessage<ConfigError>(Eq(malformed(
                                  1, 1,
                                  "invalid literal \"nan\" (expected true, false, null, NaN or "
                                  "Infinity)"))));
  EXPECT_THAT(parsing("[True]"),
              ThrowsMessage<ConfigError>(HasSubstr("line 1, column 2: invalid literal \"True\"")));
  EXPECT_THAT(parsing("tru"), ThrowsMessage<ConfigError>(HasSubstr("invalid literal \"tru\"")));
  EXPECT_THAT(parsing("nullx"), ThrowsMessage<ConfigError>(HasSubstr("invalid literal \"nullx\"")));
  EXPECT_THAT(parsing("-inf"),
              ThrowsMessage<ConfigError>(Eq(malformed(1, 2, "invalid number"))));
  EXPECT_THAT(parsing("-NaN"),
              ThrowsMessage<ConfigError>(Eq(malformed(1, 2, "invalid number"))));
}

// ---- strings ----------------------------------------------------------------------------------

TEST(Json, DecodesEveryShortEscape) {
  EXPECT_EQ(parse_text(R"("\" \\ \/ \b \f \n \r \t")").as_string(), "\" \\ / \b \f \n \r \t");
}

TEST(Json, DecodesUnicodeEscapesToUtf8) {
  EXPECT_EQ(parse_text(R"("\u0041")").as_string(), "A");
  EXPECT_EQ(parse_text(R"("\u00e9")").as_string(), "\xC3\xA9");
  EXPECT_EQ(parse_text(R"("\u20AC")").as_string(), "\xE2\x82\xAC");
  EXPECT_EQ(parse_text(R"("\uFFFF")").as_string(), "\xEF\xBF\xBF");
  EXPECT_EQ(parse_text(R"("a\u0000b")").as_string(), std::string("a\0b", 3));
}

TEST(Json, CombinesSurrogatePairs) {
  EXPECT_EQ(parse_text(R"("\ud83d\ude00")").as_string(), "\xF0\x9F\x98\x80");
  EXPECT_EQ(parse_text(R"("\uD834\uDD1E")").as_string(), "\xF0\x9D\x84\x9E");
  EXPECT_EQ(parse_text(R"("\udbff\udfff")").as_string(), "\xF4\x8F\xBF\xBF");
}

TEST(Json, CopiesRawBytesAboveAsciiUnchanged) {
  std::string text = "\"\xC3\xA9\xF0\x9F\x98\x80\xFF\"";
  EXPECT_EQ(parse_text(text).as_string(), "\xC3\xA9\xF0\x9F\x98\x80\xFF");
}

// ---- errors -----------------------------------------------------------------------------------

TEST(Json, RejectsAMissingCommaBetweenObjectMembers) {
  EXPECT_THAT(parsing("{\"model\": {\n"
                      "  \"layers\": 32,\n"
                      "  \"theta\": 10000 \"dim\": 128\n"
                      "}}"),
              ThrowsMessage<ConfigError>(
                  Eq(malformed(3, 18, "expected ',' or '}' after an object member"))));
}

TEST(Json, RejectsAMissingCommaBetweenArrayElements) {
  EXPECT_THAT(parsing("[1, 2\n 3]"),
              ThrowsMessage<ConfigError>(
                  Eq(malformed(2, 2, "expected ',' or ']' after an array element"))));
}

TEST(Json, RejectsAMissingColon) {
  EXPECT_THAT(parsing("{\"a\" 1}"),
              ThrowsMessage<ConfigError>(Eq(malformed(1, 6, "expected ':' after an object key"))));
}

TEST(Json, RejectsKeysThatAreNotDoubleQuotedStrings) {
  EXPECT_THAT(parsing("{a: 1}"),
              ThrowsMessage<ConfigError>(Eq(malformed(1, 2, "expected a string key or '}'"))));
  EXPECT_THAT(parsing("{\"a\": 1, 'b': 2}"),
              ThrowsMessage<ConfigError>(Eq(malformed(1, 10, "expected a string key"))));
}

TEST(Json, RejectsAMissingValue) {
  EXPECT_THAT(parsing("[1,,2]"), ThrowsMessage<ConfigError>(Eq(malformed(1, 4, "expected a value"))));
  EXPECT_THAT(parsing("{\"a\":}"), ThrowsMessage<ConfigError>(Eq(malformed(1, 6, "expected a value"))));
  EXPECT_THAT(parsing("[}"),
              ThrowsMessage<ConfigError>(Eq(malformed(1, 2, "expected a value or ']'"))));
  EXPECT_THAT(parsing(":"), ThrowsMessage<ConfigError>(Eq(malformed(1, 1, "expected a value"))));
}

TEST(Json, SaysSoWhenTheTextEndsEarly) {
  EXPECT_THAT(parsing("["), ThrowsMessage<ConfigError>(
                                Eq(malformed(1, 2, "expected a value or ']', but the text ends"))));
  EXPECT_THAT(parsing("[1"),
              ThrowsMessage<ConfigError>(Eq(malformed(
                  1, 3, "expected ',' or ']' after an array element, but the text ends"))));
  EXPECT_THAT(parsing("{"), ThrowsMessage<ConfigError>(Eq(malformed(
                                1, 2, "expected a string key or '}', but the text ends"))));
  EXPECT_THAT(parsing("{\"a\""), ThrowsMessage<ConfigError>(Eq(malformed(
                                     1, 5, "expected ':' after an object key, but the text ends"))));
  EXPECT_THAT(parsing("{\"a\":"), ThrowsMessage<ConfigError>(
                                      Eq(malformed(1, 6, "expected a value, but the text ends"))));
  EXPECT_THAT(parsing("{\"a\":1\n"),
              ThrowsMessage<ConfigError>(Eq(malformed(
                  2, 1, "expected ',' or '}' after an object member, but the text ends"))));
}

TEST(Json, RejectsAnUnterminatedStringAtItsOpeningQuote) {
  EXPECT_THAT(parsing("{\n  \"name\": \"llama"),
              ThrowsMessage<ConfigError>(Eq(malformed(2, 11, "unterminated string"))));
  EXPECT_THAT(parsing("\"abc\\"),
              ThrowsMessage<ConfigError>(Eq(malformed(1, 1, "unterminated string"))));
}

TEST(Json, RejectsInvalidEscapesAtTheBackslash) {
  EXPECT_THAT(parsing(R"(["ok", "bad \q"])"),
              ThrowsMessage<ConfigError>(Eq(malformed(1, 13, "invalid escape \\q"))));
  EXPECT_THAT(parsing(R"("\x41")"),
              ThrowsMessage<ConfigError>(Eq(malformed(1, 2, "invalid escape \\x"))));
  EXPECT_THAT(parsing(R"("\u12G4")"),
              ThrowsMessage<ConfigError>(
                  Eq(malformed(1, 2, "invalid escape \\u12G4 (\\u needs 4 hex digits)"))));
  EXPECT_THAT(parsing(R"("\u12")"),
              ThrowsMessage<ConfigError>(
                  Eq(malformed(1, 2, "invalid escape \\u12 (\\u needs 4 hex digits)"))));
  EXPECT_THAT(parsing("\"\\\x01\""),
              ThrowsMessage<ConfigError>(
                  Eq(malformed(1, 2, "invalid escape: '\\' followed by byte 0x01"))));
}

TEST(Json, RejectsRawControlCharactersInStrings) {
  EXPECT_THAT(parsing("{\n  \"a\": \"tab\there\"\n}"),
              ThrowsMessage<ConfigError>(Eq(malformed(
                  2, 12, "control character in string (U+0009; write it as \\t)"))));
  EXPECT_THAT(parsing("\"line1\nline2\""),
              ThrowsMessage<ConfigError>(Eq(malformed(
                  1, 7, "control character in string (U+000A; write it as \\n)"))));
  EXPECT_THAT(parsing(std::string("\"a\0b\"", 5)),
              ThrowsMessage<ConfigError>(Eq(malformed(
                  1, 3, "control character in string (U+0000; write it as \\u0000)"))));
}

TEST(Json, RejectsLoneSurrogates) {
  EXPECT_THAT(parsing(R"("\ud800")"),
              ThrowsMessage<ConfigError>(Eq(malformed(1, 2, "lone surrogate \\ud800"))));
  EXPECT_THAT(parsing(R"("x\udc00")"),
              ThrowsMessage<ConfigError>(Eq(malformed(1, 3, "lone surrogate \\udc00"))));
  EXPECT_THAT(parsing(R"("\uD800\u0041")"),
              ThrowsMessage<ConfigError>(Eq(malformed(1, 2, "lone surrogate \\uD800"))));
  EXPECT_THAT(parsing(R"("\ud800\ud800")"),
              ThrowsMessage<ConfigError>(Eq(malformed(1, 2, "lone surrogate \\ud800"))));
  EXPECT_THAT(parsing(R"("\ude00\ud83d")"),
              ThrowsMessage<ConfigError>(Eq(malformed(1, 2, "lone surrogate \\ude00"))));
}

TEST(Json, RejectsLeadingZerosAtTheZero) {
  EXPECT_THAT(parsing("{\"n\": 012}"),
              ThrowsMessage<ConfigError>(Eq(malformed(1, 7, "leading zeros are not allowed"))));
  EXPECT_THAT(parsing("[-01]"),
              ThrowsMessage<ConfigError>(Eq(malformed(1, 3, "leading zeros are not allowed"))));
  EXPECT_THAT(parsing("00"),
              ThrowsMessage<ConfigError>(Eq(malformed(1, 1, "leading zeros are not allowed"))));
}

TEST(Json, RejectsNumbersOutsideTheGrammar) {
  struct Case {
    const char* text;
    int column;
    const char* what;
  };
  const Case cases[] = {
      {"+1", 1, "invalid number (JSON does not allow a leading '+')"},
      {".5", 1, "invalid number (a digit must come before '.')"},
      {"5.", 3, "invalid number (expected a digit after '.')"},
      {"[5.]", 4, "invalid number (expected a digit after '.')"},
      {"1e", 3, "invalid number (expected a digit in the exponent)"},
      {"1e+", 4, "invalid number (expected a digit in the exponent)"},
      {"-", 2, "invalid number (expected a digit after '-')"},
      {"- 1", 2, "invalid number (expected a digit after '-')"},
      {"-x", 2, "invalid number"},
      {"1.5.3", 4, "unexpected text after the document"},
      {"0x1F", 2, "unexpected text after the document"},
  };
  for (const Case& c : cases) {
    EXPECT_THAT(parsing(c.text), ThrowsMessage<ConfigError>(Eq(malformed(1, c.column, c.what))))
        << c.text;
  }
}

TEST(Json, RejectsTrailingCommas) {
  EXPECT_THAT(parsing("[1, 2,]"),
              ThrowsMessage<ConfigError>(Eq(malformed(1, 7, "trailing comma before ']'"))));
  EXPECT_THAT(parsing("{\n  \"a\": 1,\n  \"b\": 2,\n}"),
              ThrowsMessage<ConfigError>(Eq(malformed(4, 1, "trailing comma before '}'"))));
}

TEST(Json, RejectsTextAfterTheDocument) {
  EXPECT_THAT(parsing("{} {}"),
              ThrowsMessage<ConfigError>(Eq(malformed(1, 4, "unexpected text after the document"))));
  EXPECT_THAT(parsing("1 2"),
              ThrowsMessage<ConfigError>(Eq(malformed(1, 3, "unexpected text after the document"))));
  EXPECT_THAT(parsing("[1]\n]"),
              ThrowsMessage<ConfigError>(Eq(malformed(2, 1, "unexpected text after the document"))));
}

TEST(Json, RejectsAnEmptyDocument) {
  EXPECT_THAT(parsing(""), ThrowsMessage<ConfigError>(Eq(malformed(1, 1, "empty document"))));
  EXPECT_THAT(parsing("  \n  "), ThrowsMessage<ConfigError>(Eq(malformed(2, 3, "empty document"))));
}

TEST(Json, RejectsComments) {
  EXPECT_THAT(parsing("{\n  // note\n  \"a\": 1\n}"),
              ThrowsMessage<ConfigError>(Eq(malformed(2, 3, "comments are not allowed in JSON"))));
  EXPECT_THAT(parsing("[1 /* x */]"),
              ThrowsMessage<ConfigError>(Eq(malformed(1, 4, "comments are not allowed in JSON"))));
  EXPECT_THAT(parsing("1 // x"),
              ThrowsMessage<ConfigError>(Eq(malformed(1, 3, "comments are not allowed in JSON"))));
}

TEST(Json, AcceptsOnlyTheFourJsonWhitespaceCharacters) {
  EXPECT_THAT(parsing("\f1"), ThrowsMessage<ConfigError>(Eq(malformed(1, 1, "expected a value"))));
  EXPECT_THAT(parsing("1\v"),
              ThrowsMessage<ConfigError>(Eq(malformed(1, 2, "unexpected text after the document"))));
  EXPECT_THAT(parsing("\xC2\xA0" "1"),  // U+00A0 no-break space
              ThrowsMessage<ConfigError>(Eq(malformed(1, 1, "expected a value"))));
}

TEST(Json, StartsEveryErrorWithTheSourceName) {
  EXPECT_THAT([] { (void)parse("[", "preset llama-3.1-8b"); },
              ThrowsMessage<ConfigError>(HasSubstr("preset llama-3.1-8b: malformed JSON at line 1")));
}

// ---- nesting depth ----------------------------------------------------------------------------

TEST(Json, StopsTenThousandNestedArraysWithAnError) {
  std::string deep = std::string(10000, '[') + std::string(10000, ']');
  EXPECT_THAT(parsing(deep),
              ThrowsMessage<ConfigError>(Eq(malformed(1, 513, "nesting deeper than 512 levels"))));
  // Unclosed: still the depth error, found before the missing brackets.
  EXPECT_THAT(parsing(std::string(10000, '[')),
              ThrowsMessage<ConfigError>(HasSubstr("nesting deeper than 512 levels")));
}

TEST(Json, StopsTenThousandNestedObjectsWithAnError) {
  std::string deep;
  for (int i = 0; i < 10000; ++i) deep += "{\"a\":";
  deep += "1";
  deep += std::string(10000, '}');
  // Each level is 5 bytes, so the 513th '{' is at column 512 * 5 + 1.
  EXPECT_THAT(parsing(deep),
              ThrowsMessage<ConfigError>(Eq(malformed(1, 2561, "nesting deeper than 512 levels"))));
}

TEST(Json, Parses512LevelsButNot513ByDefault) {
  Value root = parse_text(std::string(512, '[') + std::string(512, ']'));
  const Value* level = &root;
  int depth = 1;
  while (!level->as_array().empty()) {
    level = &level->as_array()[0];
    ++depth;
  }
  EXPECT_EQ(depth, 512);
  EXPECT_THAT(parsing(std::string(513, '[') + std::string(513, ']')),
              ThrowsMessage<ConfigError>(Eq(malformed(1, 513, "nesting deeper than 512 levels"))));
}

TEST(Json, HonoursMaxDepthOption) {
  ParseOptions two;
  two.max_depth = 2;
  EXPECT_NO_THROW((void)parse("[[1]]", "test.json", nullptr, two));
  EXPECT_THAT(parsing("[[[1]]]", two),
              ThrowsMessage<ConfigError>(Eq(malformed(1, 3, "nesting deeper than 2 levels"))));
  EXPECT_THAT(parsing("{\"a\":[[]]}", two),
              ThrowsMessage<ConfigError>(Eq(malformed(1, 7, "nesting deeper than 2 levels"))));
  ParseOptions zero;
  zero.max_depth = 0;
  EXPECT_EQ(parse("7", "test.json", nullptr, zero).as_int64(), 7);
  EXPECT_THAT(parsing("[]", zero),
              ThrowsMessage<ConfigError>(Eq(malformed(1, 1, "nesting deeper than 0 levels"))));
}

// ---- duplicate keys ---------------------------------------------------------------------------

TEST(Json, WarnsAboutDuplicateKeysAndUsesTheLastValue) {
  std::vector<std::string> warnings;
  Value root = parse(
      "{\n"
      "  \"theta\": 1,\n"
      "  \"dim\": 2,\n"
      "  \"theta\": 3\n"
      "}",
      "config.json", &warnings);
  EXPECT_THAT(warnings, ElementsAre("config.json: key \"theta\" appears more than once in an "
                                    "object (line 4); the last value is used, as Python does"));
  EXPECT_EQ(root.find("theta")->as_int64(), 3);
  ASSERT_EQ(root.as_object().size(), 3u);  // every member kept, in file order
  EXPECT_EQ(root.as_object()[0].first, "theta");
  EXPECT_EQ(root.as_object()[0].second.as_int64(), 1);
  EXPECT_EQ(root.as_object()[1].first, "dim");
  EXPECT_EQ(root.as_object()[2].first, "theta");
}

TEST(Json, WarnsOncePerRepeatAndOnlyWithinOneObject) {
  std::vector<std::string> warnings;
  Value root = parse(R"([{"a": 1}, {"a": 2}, {"b": 1, "b": 2, "b": 3}])", "x.json", &warnings);
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_THAT(warnings[0], HasSubstr("key \"b\" appears more than once"));
  EXPECT_EQ(root.as_array()[2].find("b")->as_int64(), 3);
  // Without a warnings vector the document parses the same way.
  EXPECT_EQ(parse(R"({"b": 1, "b": 2})", "x.json").find("b")->as_int64(), 2);
}

// ---- byte order mark --------------------------------------------------------------------------

TEST(Json, SkipsAByteOrderMarkAtTheStart) {
  Value root = parse_text("\xEF\xBB\xBF{\"a\": 1}");
  EXPECT_TRUE(at(root, 1, 1));  // columns count from after the mark
  EXPECT_TRUE(at(*root.find("a"), 1, 7));
  EXPECT_THAT(parsing("\xEF\xBB\xBF"),
              ThrowsMessage<ConfigError>(Eq(malformed(1, 1, "empty document"))));
  // Only one mark, and only at the very start.
  EXPECT_THAT(parsing("\xEF\xBB\xBF\xEF\xBB\xBF" "1"),
              ThrowsMessage<ConfigError>(Eq(malformed(1, 1, "expected a value"))));
  EXPECT_THAT(parsing(" \xEF\xBB\xBF" "1"),
              ThrowsMessage<ConfigError>(Eq(malformed(1, 2, "expected a value"))));
}

// ---- files ------------------------------------------------------------------------------------

std::string temp_path(std::string_view name) {
  return testing::TempDir() + "rotary_json_test_" + std::to_string(::getpid()) + "_" +
         std::string(name);
}

void write_file(const std::string& path, std::string_view content) {
  std::ofstream out(path, std::ios::binary);
  out << content;
}

TEST(Json, ParseFileReadsTheWholeFile) {
  std::string path = temp_path("good.json");
  write_file(path, "\xEF\xBB\xBF{\"a\": [1, 2],\r\n \"a\": \"\xC3\xA9\"}");
  std::vector<std::string> warnings;
  Value root = parse_file(path, &warnings);
  std::remove(path.c_str());
  EXPECT_EQ(root.find("a")->as_string(), "\xC3\xA9");
  EXPECT_TRUE(at(*root.find("a"), 2, 7));
  EXPECT_THAT(warnings, ElementsAre(HasSubstr(path + ": key \"a\" appears more than once")));
}

TEST(Json, ParseFileNamesThePathInSyntaxErrors) {
  std::string path = temp_path("bad.json");
  write_file(path, "{\"a\": 1,}");
  EXPECT_THAT([&] { (void)parse_file(path); },
              ThrowsMessage<ConfigError>(
                  Eq(path + ": malformed JSON at line 1, column 9: trailing comma before '}'")));
  std::remove(path.c_str());
}

TEST(Json, ParseFileReportsAMissingFile) {
  std::string path = temp_path("missing.json");
  EXPECT_THAT([&] { (void)parse_file(path); },
              ThrowsMessage<ConfigError>(
                  Eq(path + ": cannot read file: No such file or directory")));
}

TEST(Json, ParseFileReportsADirectory) {
  std::string path = testing::TempDir();
  EXPECT_THAT([&] { (void)parse_file(path); },
              ThrowsMessage<ConfigError>(Eq(path + ": cannot read file: Is a directory")));
}

// ---- accessors and describe() -----------------------------------------------------------------

TEST(Json, AccessorsNameTheValueAndItsPlaceWhenTheKindIsWrong) {
  Value root = parse_text("{\n  \"rope_theta\": \"10000\",\n  \"list\": [1, 2]\n}");
  const Value& theta = *root.find("rope_theta");
  EXPECT_THAT([&] { (void)theta.as_double(); },
              ThrowsMessage<rotary::Error>(Eq(
                  "json: value at line 2, column 17 is string \"10000\", not a number")));
  EXPECT_THAT([&] { (void)theta.as_int64(); },
              ThrowsMessage<rotary::Error>(HasSubstr("is string \"10000\", not an integer")));
  EXPECT_THAT([&] { (void)theta.as_bool(); },
              ThrowsMessage<rotary::Error>(HasSubstr("not true or false")));
  const Value& list = *root.find("list");
  EXPECT_THAT([&] { (void)list.as_object(); },
              ThrowsMessage<rotary::Error>(
                  Eq("json: value at line 3, column 11 is array of 2 elements, not an object")));
  EXPECT_THAT([&] { (void)root.as_array(); },
              ThrowsMessage<rotary::Error>(HasSubstr("line 1, column 1 is object, not an array")));
  EXPECT_THAT([&] { (void)list.as_array()[0].as_string(); },
              ThrowsMessage<rotary::Error>(HasSubstr("is number 1, not a string")));
}

TEST(Json, AsInt64RejectsNumbersThatAreNotIntegers) {
  EXPECT_THAT([] { (void)parse_text("0.5").as_int64(); },
              ThrowsMessage<rotary::Error>(
                  Eq("json: value at line 1, column 1 is number 0.5, not an integer")));
  EXPECT_THAT([] { (void)parse_text("1.0").as_int64(); },
              ThrowsMessage<rotary::Error>(HasSubstr("is number 1, not an integer")));
  // A value built in code has no place to name.
  EXPECT_THAT([] { (void)Value::make_integer(3).as_string(); },
              ThrowsMessage<rotary::Error>(Eq("json: value is number 3, not a string")));
}

TEST(Json, FindReturnsNullForAMissingKeyOrANonObject) {
  Value root = parse_text(R"({"a": 1})");
  EXPECT_EQ(root.find("b"), nullptr);
  EXPECT_EQ(root.find("A"), nullptr);
  EXPECT_EQ(parse_text("[1]").find("a"), nullptr);
  EXPECT_EQ(Value().find("a"), nullptr);
}

TEST(Json, DescribesEveryKind) {
  EXPECT_EQ(parse_text("null").describe(), "null");
  EXPECT_EQ(parse_text("true").describe(), "true");
  EXPECT_EQ(parse_text("false").describe(), "false");
  EXPECT_EQ(parse_text("0.5").describe(), "number 0.5");
  EXPECT_EQ(parse_text("42").describe(), "number 42");
  EXPECT_EQ(parse_text("-9223372036854775808").describe(), "number -9223372036854775808");
  EXPECT_EQ(parse_text("1e300").describe(), "number 1e+300");
  EXPECT_EQ(parse_text("NaN").describe(), "number nan");
  EXPECT_EQ(parse_text("Infinity").describe(), "number inf");
  EXPECT_EQ(parse_text("-Infinity").describe(), "number -inf");
  EXPECT_EQ(Value::make_number(-std::numeric_limits<double>::quiet_NaN()).describe(),
            "number nan");
  EXPECT_EQ(parse_text("\"8\"").describe(), "string \"8\"");
  EXPECT_EQ(parse_text("\"a\\nb\"").describe(), "string \"a\\nb\"");
  EXPECT_EQ(parse_text("[]").describe(), "array of 0 elements");
  EXPECT_EQ(parse_text("[1]").describe(), "array of 1 element");
  EXPECT_EQ(parse_text("[1, 2, [3]]").describe(), "array of 3 elements");
  EXPECT_EQ(parse_text("{\"a\": 1}").describe(), "object");
  EXPECT_EQ(Value().describe(), "null");
}

TEST(Json, DescribeCutsLongStringsAtACharacterBoundary) {
  std::string forty(40, 'a');
  EXPECT_EQ(Value::make_string(forty).describe(), "string \"" + forty + "\"");
  EXPECT_EQ(Value::make_string(forty + "b").describe(), "string \"" + forty + "...\"");
  // "é" would straddle the cut at byte 40, so it is left out whole.
  std::string text = std::string(39, 'a') + "\xC3\xA9" + "zzz";
  EXPECT_EQ(Value::make_string(text).describe(), "string \"" + std::string(39, 'a') + "...\"");
}

TEST(Json, BuildersRecordKindValueAndLocation) {
  Location where{7, 3};
  EXPECT_TRUE(at(Value::make_null(where), 7, 3));
  EXPECT_TRUE(Value::make_bool(true, where).as_bool());
  Value number = Value::make_number(2.0, where);
  EXPECT_FALSE(number.is_integer());
  EXPECT_EQ(number.as_double(), 2.0);
  Value integer = Value::make_integer(-5, where);
  EXPECT_TRUE(integer.is_integer());
  EXPECT_EQ(integer.as_double(), -5.0);
  EXPECT_EQ(Value::make_string("s").as_string(), "s");
  Value array = Value::make_array({Value::make_integer(1), Value::make_null()});
  EXPECT_EQ(array.as_array().size(), 2u);
  Value object = Value::make_object({{"k", Value::make_integer(1)}, {"k", Value::make_integer(2)}});
  EXPECT_EQ(object.find("k")->as_int64(), 2);
  Value copy = object;  // copies share the immutable members
  EXPECT_EQ(&copy.as_object(), &object.as_object());
}

// ---- writer -----------------------------------------------------------------------------------

void write_sample(Writer& writer) {
  writer.begin_object()
      .key("name").value("llama")
      .key("theta").value(500000.0)
      .key("dims").begin_array().value(1).value(2).end_array()
      .key("empty").begin_object().end_object()
      .key("none").begin_array().end_array()
      .key("nested").begin_object().key("ok").value(true).key("nothing").null().end_object()
      .end_object();
}

TEST(Json, WriterPrettyPrintsWithTwoSpaces) {
  Writer writer;
  write_sample(writer);
  EXPECT_EQ(writer.str(),
            "{\n"
            "  \"name\": \"llama\",\n"
            "  \"theta\": 500000.0,\n"
            "  \"dims\": [\n"
            "    1,\n"
            "    2\n"
            "  ],\n"
            "  \"empty\": {},\n"
            "  \"none\": [],\n"
            "  \"nested\": {\n"
            "    \"ok\": true,\n"
            "    \"nothing\": null\n"
            "  }\n"
            "}");
}

TEST(Json, WriterCompactHasNoWhitespace) {
  Writer writer(rotary::json::TextLayout::Compact);
  write_sample(writer);
  EXPECT_EQ(writer.str(),
            R"({"name":"llama","theta":500000.0,"dims":[1,2],"empty":{},"none":[],)"
            R"("nested":{"ok":true,"nothing":null}})");
}

TEST(Json, WriterWritesTheShortestDoubleThatReadsBackExactly) {
  struct Case {
    double value;
    const char* text;
  };
  const Case cases[] = {
      {0.1, "0.1"},
      {1e-300, "1e-300"},
      {5e-324, "5e-324"},
      {1.7976931348623157e308, "1.7976931348623157e+308"},
      {3.0, "3.0"},      // stays a double when read back
      {-0.0, "-0.0"},    // keeps its sign
      {1e16, "1e+16"},
      {9007199254740992.0, "9007199254740992.0"},
      {-2.5e-8, "-2.5e-08"},
      {1.0 / 3.0, "0.3333333333333333"},
      // Fixed notation for decimal exponents -4 to 15, as Python's repr(): readable configs.
      {500000.0, "500000.0"},
      {1e15, "1000000000000000.0"},
      {123456789012345.67, "123456789012345.67"},
      {0.0001, "0.0001"},
      {1e-5, "1e-05"},
      {-1.5e17, "-1.5e+17"},
  };
  for (const Case& c : cases) {
    Writer writer(rotary::json::TextLayout::Compact);
    writer.value(c.value);
    EXPECT_EQ(writer.str(), c.text);
    Value back = parse_text(writer.str());
    EXPECT_FALSE(back.is_integer()) << c.text;
    EXPECT_EQ(bits(back.as_double()), bits(c.value)) << c.text;
  }
}

TEST(Json, WriterWritesNaNAndInfinitiesAsNull) {
  Writer writer(rotary::json::TextLayout::Compact);
  writer.begin_array()
      .value(std::numeric_limits<double>::quiet_NaN())
      .value(kInf)
      .value(-kInf)
      .end_array();
  EXPECT_EQ(writer.str(), "[null,null,null]");
  EXPECT_TRUE(parse_text(writer.str()).as_array()[0].is_null());
}

TEST(Json, WriterKeepsInt64Exact) {
  Writer writer(rotary::json::TextLayout::Compact);
  writer.begin_array()
      .value(std::numeric_limits<int64_t>::min())
      .value(std::numeric_limits<int64_t>::max())
      .value(0)
      .end_array();
  EXPECT_EQ(writer.str(), "[-9223372036854775808,9223372036854775807,0]");
  Value back = parse_text(writer.str());
  EXPECT_EQ(back.as_array()[0].as_int64(), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(back.as_array()[1].as_int64(), std::numeric_limits<int64_t>::max());
}

TEST(Json, WriterRejectsMisuseWithoutBreakingItsOutput) {
  EXPECT_THAT([] { Writer().end_object(); },
              ThrowsMessage<rotary::Error>(
                  Eq("json::Writer: end_object() without a matching begin_object()")));
  EXPECT_THAT([] { Writer().end_array(); },
              ThrowsMessage<rotary::Error>(HasSubstr("end_array() without a matching")));
  EXPECT_THAT([] { Writer().begin_array().end_object(); },
              ThrowsMessage<rotary::Error>(HasSubstr("end_object() without a matching")));
  EXPECT_THAT([] { Writer().begin_object().end_array(); },
              ThrowsMessage<rotary::Error>(HasSubstr("end_array() without a matching")));
  EXPECT_THAT([] { Writer().key("a"); },
              ThrowsMessage<rotary::Error>(Eq("json::Writer: key(\"a\") outside an object")));
  EXPECT_THAT([] { Writer().begin_array().key("a"); },
              ThrowsMessage<rotary::Error>(HasSubstr("outside an object")));
  EXPECT_THAT([] { Writer().begin_object().value(1); },
              ThrowsMessage<rotary::Error>(HasSubstr("a value inside an object needs a key()")));
  EXPECT_THAT([] { Writer().begin_object().key("a").key("b"); },
              ThrowsMessage<rotary::Error>(HasSubstr("key(\"b\") right after another key()")));
  EXPECT_THAT([] { Writer().begin_object().key("a").end_object(); },
              ThrowsMessage<rotary::Error>(HasSubstr("the key has no value")));
  EXPECT_THAT([] { Writer().value(1).value(2); },
              ThrowsMessage<rotary::Error>(HasSubstr("a second top-level value")));

  // Two values after one key: the second is refused and the writer carries on intact.
  Writer writer(rotary::json::TextLayout::Compact);
  writer.begin_object().key("a").value(1);
  EXPECT_THAT([&] { writer.value(2); },
              ThrowsMessage<rotary::Error>(HasSubstr("a value inside an object needs a key()")));
  writer.end_object();
  EXPECT_EQ(writer.str(), R"({"a":1})");
}

TEST(Json, QuoteEscapesQuotesBackslashesAndControlCharacters) {
  EXPECT_EQ(quote("a\"b\\c/d"), R"("a\"b\\c/d")");
  EXPECT_EQ(quote("\n\t\r\b\f"), R"("\n\t\r\b\f")");
  EXPECT_EQ(quote(std::string("\x01\x1f\0", 3)), R"("\u0001\u001f\u0000")");
  EXPECT_EQ(quote("\x7f"), "\"\x7f\"");
  EXPECT_EQ(quote(""), "\"\"");
}

TEST(Json, QuoteCopiesUnicodeAndHighBytes) {
  EXPECT_EQ(quote("\xC3\xA9\xF0\x9F\x98\x80"), "\"\xC3\xA9\xF0\x9F\x98\x80\"");
  EXPECT_EQ(quote("\xFF"), "\"\xFF\"");
}

TEST(Json, QuoteReadsBackAsEveryByte) {
  std::string all;
  for (int byte = 0; byte < 256; ++byte) all += static_cast<char>(byte);
  EXPECT_EQ(parse_text(quote(all)).as_string(), all);
}

// ---- round trips ------------------------------------------------------------------------------

void write_value(Writer& writer, const Value& value) {
  switch (value.kind()) {
    case Kind::Null: writer.null(); break;
    case Kind::Bool: writer.value(value.as_bool()); break;
    case Kind::Number:
      if (value.is_integer()) {
        writer.value(value.as_int64());
      } else {
        writer.value(value.as_double());
      }
      break;
    case Kind::String: writer.value(std::string_view(value.as_string())); break;
    case Kind::Array:
      writer.begin_array();
      for (const Value& item : value.as_array()) write_value(writer, item);
      writer.end_array();
      break;
    case Kind::Object:
      writer.begin_object();
      for (const auto& [name, member] : value.as_object()) {
        writer.key(name);
        write_value(writer, member);
      }
      writer.end_object();
      break;
  }
}

// Exact equality: same kinds, same integer flags, doubles bit for bit, members in order.
testing::AssertionResult same(const Value& a, const Value& b, const std::string& path = "$") {
  if (a.kind() != b.kind()) {
    return testing::AssertionFailure() << path << ": " << a.describe() << " vs " << b.describe();
  }
  switch (a.kind()) {
    case Kind::Null: break;
    case Kind::Bool:
      if (a.as_bool() != b.as_bool()) return testing::AssertionFailure() << path << ": bool";
      break;
    case Kind::Number:
      if (a.is_integer() != b.is_integer() ||
          (a.is_integer() ? a.as_int64() != b.as_int64()
                          : bits(a.as_double()) != bits(b.as_double()))) {
        return testing::AssertionFailure()
               << path << ": " << a.describe() << " vs " << b.describe();
      }
      break;
    case Kind::String:
      if (a.as_string() != b.as_string()) {
        return testing::AssertionFailure() << path << ": " << quote(a.as_string()) << " vs "
                                           << quote(b.as_string());
      }
      break;
    case Kind::Array: {
      const auto& x = a.as_array();
      const auto& y = b.as_array();
      if (x.size() != y.size()) return testing::AssertionFailure() << path << ": array size";
      for (size_t i = 0; i < x.size(); ++i) {
        auto result = same(x[i], y[i], path + "[" + std::to_string(i) + "]");
        if (!result) return result;
      }
      break;
    }
    case Kind::Object: {
      const auto& x = a.as_object();
      const auto& y = b.as_object();
      if (x.size() != y.size()) return testing::AssertionFailure() << path << ": object size";
      for (size_t i = 0; i < x.size(); ++i) {
        if (x[i].first != y[i].first) {
          return testing::AssertionFailure() << path << ": key " << quote(x[i].first) << " vs "
                                             << quote(y[i].first);
        }
        auto result = same(x[i].second, y[i].second, path + "." + x[i].first);
        if (!result) return result;
      }
      break;
    }
  }
  return testing::AssertionSuccess();
}

TEST(Json, WriterOutputParsesBackToTheSameStructure) {
  Value original = Value::make_object({
      {"doubles", Value::make_array({Value::make_number(0.1), Value::make_number(1e-300),
                                     Value::make_number(5e-324),
                                     Value::make_number(1.7976931348623157e308),
                                     Value::make_number(-0.0), Value::make_number(2.0)})},
      {"integers", Value::make_array({Value::make_integer(std::numeric_limits<int64_t>::min()),
                                      Value::make_integer(-1), Value::make_integer(0)})},
      {"text", Value::make_string("tab\there \"quoted\" \\ \x01 \xC3\xA9 \xF0\x9F\x98\x80")},
      {"flags", Value::make_array({Value::make_bool(true), Value::make_bool(false),
                                   Value::make_null()})},
      {"empty", Value::make_object({})},
  });
  for (rotary::json::TextLayout layout : {rotary::json::TextLayout::Pretty, rotary::json::TextLayout::Compact}) {
    Writer writer(layout);
    write_value(writer, original);
    EXPECT_TRUE(same(original, parse_text(writer.str()))) << writer.str();
  }
  // NaN has no JSON spelling: it comes back as null.
  Writer writer;
  write_value(writer, Value::make_array({Value::make_number(std::nan(""))}));
  EXPECT_TRUE(parse_text(writer.str()).as_array()[0].is_null());
}

class RandomDocuments {
 public:
  explicit RandomDocuments(uint64_t seed) : rng_(seed) {}

  Value document() { return value(0); }

 private:
  uint64_t below(uint64_t n) { return rng_() % n; }

  Value value(int depth) {
    // Containers only while below depth 6, so documents nest at most 6 levels.
    uint64_t choice = below(depth < 6 ? 9 : 6);
    switch (choice) {
      case 0: return Value::make_null();
      case 1: return Value::make_bool(below(2) == 1);
      case 2: return Value::make_number(random_double());
      case 3: return Value::make_integer(random_integer());
      case 4:
      case 5: return Value::make_string(random_string());
      case 6:
      case 7: {
        std::vector<Value> items;
        for (uint64_t n = below(6); n > 0; --n) items.push_back(value(depth + 1));
        return Value::make_array(std::move(items));
      }
      default: {
        std::vector<Value::Member> members;
        for (uint64_t n = below(6); n > 0; --n) {
          members.emplace_back(random_string(), value(depth + 1));
        }
        return Value::make_object(std::move(members));
      }
    }
  }

  double random_double() {
    switch (below(4)) {
      case 0: return static_cast<double>(static_cast<int64_t>(rng_() >> 40) - (1 << 23));
      case 1: return std::ldexp(static_cast<double>(below(1000)), -static_cast<int>(below(1100)));
      default:
        for (;;) {
          double d = std::bit_cast<double>(rng_());
          if (std::isfinite(d)) return d;
        }
    }
  }

  int64_t random_integer() {
    switch (below(3)) {
      case 0: return static_cast<int64_t>(below(2000)) - 1000;
      case 1: return below(2) == 0 ? std::numeric_limits<int64_t>::min()
                                   : std::numeric_limits<int64_t>::max();
      default: return static_cast<int64_t>(rng_());
    }
  }

  std::string random_string() {
    static constexpr const char* kPieces[] = {
        "a", "Z", " ", "\"", "\\", "/", "\n", "\t", "\r", "\b", "\f", "\x01", "\x1f", "\x7f",
        "\xC3\xA9",          // é
        "\xE2\x82\xAC",      // €
        "\xF0\x9F\x98\x80",  // 😀
        "\xFF",              // not UTF-8: copied through
        "rope_theta",
    };
    std::string text;
    for (uint64_t n = below(12); n > 0; --n) text += kPieces[below(std::size(kPieces))];
    if (below(8) == 0) text += '\0';
    return text;
  }

  std::mt19937_64 rng_;
};

TEST(Json, RandomDocumentsSurviveAWriteAndParseRoundTrip) {
  RandomDocuments generator(20240611);
  for (int i = 0; i < 500; ++i) {
    Value original = generator.document();
    Writer writer(i % 2 == 0 ? rotary::json::TextLayout::Pretty : rotary::json::TextLayout::Compact);
    write_value(writer, original);
    Value back;
    ASSERT_NO_THROW(back = parse(writer.str(), "random.json")) << writer.str();
    ASSERT_TRUE(same(original, back)) << "document " << i << ":\n" << writer.str();
  }
}

TEST(Json, MutatedDocumentsEitherParseOrFailWithAConfigError) {
  // Corrupt a valid config byte by byte: every outcome must be a value or a ConfigError, never a
  // crash, a hang or another exception (the sanitizer build checks the memory side).
  const std::string valid =
      "\xEF\xBB\xBF{\"rope_theta\": 500000.0, \"rope_scaling\": {\"type\": \"llama3\", "
      "\"factor\": 8, \"low\": -1e-3, \"s\": \"\\ud83d\\ude00\\n\", \"x\": [true, null, NaN]}}";
  ASSERT_NO_THROW((void)parse_text(valid));
  const char replacements[] = {'{', '}', '[', ']', '"', '\\', ',', ':', '-', '0', '1', 'e',
                               '.', ' ', '\n', 'u', 'd', '\x01', '\x80', '/'};
  std::mt19937_64 rng(7);
  int parsed = 0;
  int rejected = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string text = valid;
    for (uint64_t edits = 1 + rng() % 3; edits > 0; --edits) {
      size_t at_byte = rng() % text.size();
      switch (rng() % 3) {
        case 0: text[at_byte] = replacements[rng() % std::size(replacements)]; break;
        case 1: text.erase(at_byte, 1); break;
        default: text.insert(at_byte, 1, replacements[rng() % std::size(replacements)]); break;
      }
    }
    try {
      (void)parse(text, "mutated.json");
      ++parsed;
    } catch (const ConfigError& error) {
      EXPECT_THAT(error.what(), testing::StartsWith("mutated.json: malformed JSON at line "))
          << text;
      ++rejected;
    }
  }
  EXPECT_GT(parsed, 0);
  EXPECT_GT(rejected, 0);
}

}  // namespace
