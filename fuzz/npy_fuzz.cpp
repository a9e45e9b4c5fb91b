// fuzz/npy_fuzz.cpp: the .npy reader (src/cli/npy.hpp) on arbitrary bytes.
//
// Properties:
//   - npy::parse returns an array or throws rotary::Error naming the source ("npy fuzz.npy: ...");
//   - an accepted array holds exactly size() * element_size bytes, and serializing it and parsing
//     the result gives the same type, shape and bytes (the reader and the writer agree).
// The reader copies at most the file's bytes, so a lying header cannot make it allocate more:
// libFuzzer's -rss_limit_mb turns any such allocation into a crash.
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_support.hpp"
#include "rotary/error.hpp"
#include "cli/npy.hpp"

namespace rotary::fuzz {

int npy_one_input(const uint8_t* data, size_t size) {
  const std::vector<unsigned char> file(data, data + size);
  npy::Array array;
  try {
    array = npy::parse(file, "fuzz.npy");
  } catch (const Error& error) {
    require(starts_with(error.what(), "npy fuzz.npy: "), "npy errors name the source", error.what());
    return 0;
  }
  require(static_cast<uint64_t>(array.size() * npy::element_size(array.type)) == array.bytes.size(),
          "an accepted array holds size() * element_size bytes");
  const npy::Array again = npy::parse(npy::serialize(array), "round trip");
  require(again.type == array.type && again.shape == array.shape && again.bytes == array.bytes,
          "parse(serialize(a)) == a");
  return 0;
}

}  // namespace rotary::fuzz

ROTARY_FUZZ_ENTRY(rotary::fuzz::npy_one_input)
