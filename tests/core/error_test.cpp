// Error messages (include/rotary/error.hpp): detail::concat's text for each kind of part, and its
// independence from the process's global locale.
#include <gtest/gtest.h>

#include <climits>
#include <cstdint>
#include <locale>
#include <string>
#include <string_view>

#include "rotary/error.hpp"

namespace {

using rotary::detail::concat;

TEST(ErrorText, EachKindOfPart) {
  const std::string text = "s";
  const std::string_view view = "v";
  const char* c_string = "c";
  const char* null_string = nullptr;
  EXPECT_EQ(concat("a", text, view, c_string, null_string), "asvc(null)");
  EXPECT_EQ(concat('x', static_cast<signed char>('y'), static_cast<unsigned char>('z')), "xyz");
  EXPECT_EQ(concat(true, false), "10");
  EXPECT_EQ(concat(0, -7, 1024L, LLONG_MIN, UINT64_MAX),
            "0-71024-922337203685477580818446744073709551615");
  EXPECT_EQ(concat(0.1, ", ", 500000.0, ", ", 1e20, ", ", -2.5f), "0.1, 500000, 1e+20, -2.5");
  enum Plain { kThree = 3 };
  EXPECT_EQ(concat(kThree), "3");
  EXPECT_EQ(concat(reinterpret_cast<const void*>(std::uintptr_t{0xbeef})), "0xbeef");
  EXPECT_EQ(rotary::detail::hex_text(255), "ff");
  EXPECT_EQ(rotary::detail::hex_text(0), "0");
}

// A locale that groups digits in threes with '\'' and writes '/' for the decimal point: an ostream
// imbued with it writes 1234567 as "1'234'567".
struct GroupingPunct : std::numpunct<char> {
  char do_thousands_sep() const override { return '\''; }
  char do_decimal_point() const override { return '/'; }
  std::string do_grouping() const override { return "\3"; }
};

TEST(ErrorText, IgnoresTheGlobalLocale) {
  const std::locale previous = std::locale::global(std::locale(std::locale::classic(), new GroupingPunct));
  const std::string text = concat("got ", 1234567, " and ", 0.5, " at ", static_cast<const void*>(nullptr));
  std::locale::global(previous);
  EXPECT_EQ(text, "got 1234567 and 0.5 at 0x0");
}

}  // namespace
