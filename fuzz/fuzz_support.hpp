// fuzz/fuzz_support.hpp: what every fuzz target shares.
//
// Each target is a function `int rotary::fuzz::<name>_one_input(const uint8_t*, size_t)` that
// returns 0 and aborts (with a line on stderr saying what broke) when a property fails: libFuzzer
// reports the abort as a crash and keeps the input. ROTARY_FUZZ_ENTRY(fn) defines libFuzzer's
// entry point unless ROTARY_FUZZ_NO_MAIN is set, which is how tests/reliability/ links the same
// functions to replay the corpus and the saved crashes under GoogleTest.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace rotary::fuzz {

// Stops the process when a property fails: the input that got here is a bug.
inline void require(bool holds, std::string_view property, const std::string& detail = {}) {
  if (holds) return;
  std::fprintf(stderr, "fuzz property failed: %.*s\n%s\n", static_cast<int>(property.size()), property.data(),
               detail.c_str());
  std::abort();
}

inline bool starts_with(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

}  // namespace rotary::fuzz

#ifdef ROTARY_FUZZ_NO_MAIN
#define ROTARY_FUZZ_ENTRY(function)
#else
#define ROTARY_FUZZ_ENTRY(function)                                                   \
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {           \
    return function(data, size);                                                      \
  }
#endif
