// tests/interop/safetensors_test.cpp: the safetensors reader and writer (src/interop/safetensors.hpp):
// a written file reads back; every malformed file is a rotary::Error naming the tensor and the
// value; no prefix or byte flip of a valid file makes the reader do anything but parse or throw.
#include "interop/safetensors.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "rotary/error.hpp"

namespace rotary::safetensors {
namespace {

using ::testing::HasSubstr;

std::string bytes_of(std::vector<float> values) {
  std::string bytes(values.size() * 4, '\0');
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

// A file with this header text (not padded) and this data buffer.
std::string file_with(const std::string& header, const std::string& data) {
  std::string file(8, '\0');
  const uint64_t length = header.size();
  for (int i = 0; i < 8; ++i) file[static_cast<size_t>(i)] = static_cast<char>((length >> (8 * i)) & 0xFF);
  return file + header + data;
}

std::vector<TensorData> sample_tensors() {
  return {{"a.weight", "F32", {2, 3}, bytes_of({1, 2, 3, 4, 5, 6})},
          {"b", "BF16", {4}, std::string(8, '\x11')},
          {"empty", "F64", {0, 5}, ""},
          {"scalar", "I64", {}, std::string(8, '\x07')}};
}

TEST(Safetensors, WrittenFileReadsBack) {
  const std::string file = serialize(sample_tensors(), {{"format", "pt"}});
  const Header header = parse(file, "t.safetensors");
  EXPECT_EQ(header.header_length % 8, 0);  // padded as the reference writer pads
  ASSERT_EQ(header.tensors.size(), 4u);
  EXPECT_EQ(header.tensors[0].name, "a.weight");
  EXPECT_EQ(header.tensors[0].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(header.tensors[0].element_size, 4);
  EXPECT_EQ(file.substr(static_cast<size_t>(header.data_start + header.tensors[0].begin), 24),
            bytes_of({1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(header.tensors[1].dtype, "BF16");
  EXPECT_EQ(header.tensors[2].begin, header.tensors[2].end);
  EXPECT_TRUE(header.tensors[3].shape.empty());
  ASSERT_EQ(header.metadata.size(), 1u);
  EXPECT_EQ(header.metadata[0], (std::pair<std::string, std::string>{"format", "pt"}));
}

// The reference writer's bytes for one F32 tensor (safetensors tensor.rs, test_serialization):
// the format is read as the reference writes it.
TEST(Safetensors, ReadsTheReferenceWritersExample) {
  const std::string header = R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})";
  const std::string file = file_with(header, bytes_of({0, 1, 2, 3, 4, 5}));
  const Header parsed = parse(file, "ref");
  ASSERT_EQ(parsed.tensors.size(), 1u);
  EXPECT_EQ(parsed.tensors[0].shape, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(serialize({{"attn.0", "F32", {1, 2, 3}, bytes_of({0, 1, 2, 3, 4, 5})}}).substr(8, header.size()), header);
}

struct Malformed {
  const char* what;
  std::string file;
  std::vector<std::string> message_parts;
};

TEST(Safetensors, EveryMalformedFileIsRefusedByName) {
  const std::string t = R"("t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  const std::string eight(8, '\x01');
  std::string too_long(8, '\0');
  too_long[0] = '\x00';
  too_long[4] = '\x01';  // 2^32
  std::string past_end(8, '\0');
  past_end[0] = 100;
  const std::vector<Malformed> cases = {
      {"shorter than the length", "abc", {"3 bytes, fewer than the 8-byte header length"}},
      {"header length over the limit", too_long + "{}", {"header length 4294967296", "limit"}},
      {"header past the end", past_end + "{}", {"header length 100 runs past the end of the file (10 bytes"}},
      {"not UTF-8", file_with("{\"\xff\":1}", ""), {"not UTF-8", "0xff"}},
      {"not an object", file_with("[1]", ""), {"must be a JSON object starting with '{'"}},
      {"bad JSON", file_with("{\"t\":", ""), {"header: malformed JSON"}},
      {"duplicate name", file_with("{" + t + "," + t + "}", eight), {"tensor \"t\" appears twice"}},
      {"unknown dtype", file_with(R"({"t":{"dtype":"F31","shape":[2],"data_offsets":[0,8]}})", eight),
       {"tensor \"t\"", "unknown dtype \"F31\""}},
      {"sub-byte dtype", file_with(R"({"t":{"dtype":"F4","shape":[2],"data_offsets":[0,1]}})", "x"),
       {"tensor \"t\"", "dtype F4 packs"}},
      {"missing shape", file_with(R"({"t":{"dtype":"F32","data_offsets":[0,8]}})", eight), {"tensor \"t\" has no shape"}},
      {"negative extent", file_with(R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", eight),
       {"tensor \"t\"", "shape[0] must be an integer >= 0 (got number -2)"}},
      {"fractional extent", file_with(R"({"t":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", eight),
       {"shape[0] must be an integer >= 0 (got number 2.5)"}},
      {"three offsets", file_with(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8,9]}})", eight),
       {"tensor \"t\"", "data_offsets must be an array [begin, end] (got array of 3 elements)"}},
      {"end before begin", file_with(R"({"t":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", eight),
       {"tensor \"t\"", "data_offsets [8, 0] end before they begin"}},
      {"span does not fit the shape", file_with(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight),
       {"tensor \"t\": shape [3] of F32 needs 12 bytes, but data_offsets [0, 8] span 8"}},
      {"shape overflows", file_with(R"({"t":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8]}})", eight),
       {"tensor \"t\"", "needs more than 2^63 bytes"}},
      {"gap", file_with(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", eight),
       {"tensor \"t\"", "leave bytes [0, 4) of the buffer unused"}},
      {"overlap",
       file_with(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"u":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                 eight),
       {"tensor \"u\": data_offsets [4, 8] overlap tensor \"t\" [0, 8]"}},
      {"past the buffer", file_with(R"({"t":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", eight),
       {"tensor \"t\": data_offsets [0, 16] run past the data buffer (8 bytes"}},
      {"trailing bytes", file_with("{" + t + "}", eight + "xyz"), {"holds 11 bytes", "3 trailing bytes belong to no tensor"}},
      {"metadata not strings", file_with(R"({"__metadata__":{"format":1}})", ""),
       {"__metadata__[\"format\"] must be a string (got number 1)"}},
      {"unknown field", file_with(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"stride":[1]}})", eight),
       {"tensor \"t\": unknown field \"stride\""}},
      {"entry not an object", file_with(R"({"t":[1,2]})", ""), {"tensor \"t\" must be an object"}},
  };
  for (const Malformed& c : cases) {
    SCOPED_TRACE(c.what);
    try {
      parse(c.file, "bad.safetensors");
      ADD_FAILURE() << "accepted";
    } catch (const Error& error) {
      EXPECT_THAT(error.what(), HasSubstr("bad.safetensors"));
      for (const std::string& part : c.message_parts) EXPECT_THAT(error.what(), HasSubstr(part));
    }
  }
}

// Every prefix of a valid file, and every byte of it flipped, either parses or throws
// rotary::Error: no other exception, no read past the bytes (ASan in `make sanitize`).
TEST(Safetensors, PrefixesAndByteFlipsParseOrThrowError) {
  const std::string file = serialize(sample_tensors(), {{"format", "pt"}});
  int refused = 0;
  for (size_t size = 0; size < file.size(); ++size) {
    const std::string prefix = file.substr(0, size);
    try {
      parse(prefix, "prefix");
      ADD_FAILURE() << "a prefix of " << size << " bytes parsed";
    } catch (const Error&) {
      ++refused;
    }
  }
  EXPECT_EQ(refused, static_cast<int>(file.size()));
  for (size_t i = 0; i < file.size(); ++i) {
    for (const int mask : {0x01, 0x80, 0xFF}) {
      std::string flipped = file;
      flipped[i] = static_cast<char>(static_cast<unsigned char>(flipped[i]) ^ mask);
      try {
        parse(flipped, "flip");
      } catch (const Error&) {
      }
    }
  }
}

TEST(Safetensors, NullMetadataIsNoMetadata) {
  const Header header = parse(file_with(R"({"__metadata__":null})", ""), "t");
  EXPECT_TRUE(header.metadata.empty());
  EXPECT_TRUE(header.tensors.empty());
}

TEST(Safetensors, WriterRefusesWhatItCannotWrite) {
  EXPECT_THROW(serialize({{"t", "F32", {3}, std::string(8, '\0')}}), Error);
  EXPECT_THROW(serialize({{"t", "F31", {2}, std::string(8, '\0')}}), Error);
  EXPECT_THROW(serialize({{"t", "F32", {2}, std::string(8, '\0')}, {"t", "F32", {2}, std::string(8, '\0')}}), Error);
  EXPECT_EQ(dtype_size("BF16"), 2);
  EXPECT_EQ(dtype_size("F8_E4M3"), 1);
  EXPECT_EQ(dtype_size("nope"), 0);
}

}  // namespace
}  // namespace rotary::safetensors
