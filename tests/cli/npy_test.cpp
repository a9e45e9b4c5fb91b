// tests/cli/npy_test.cpp: npy.hpp — round trips, byte-for-byte agreement with files NumPy wrote,
// the header dialects NumPy and ml_dtypes produce, every way a file can be malformed or lie, and
// random corruption (which must give rotary::Error, never a crash: run under ASan); reading only
// what the header declares (/dev/zero, pipes, the size cap); atomic writes (src/core/atomic_file).
#include "cli/npy.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

// The atomic writer is internal to rotary_core (not installed); tested here, beside npy::write,
// its first user.
#include "../../src/core/atomic_file.hpp"
#include "rotary/error.hpp"

namespace rotary::npy {
namespace {

using ::testing::HasSubstr;
using ::testing::ThrowsMessage;
using namespace std::string_literals;
using namespace std::string_view_literals;

// ---------------------------------------------------------------------------------------------
// Files written by NumPy 2.4.6 (np.save, or np.lib.format.write_array with version=), pasted
// byte for byte. Octal escapes, as they never swallow a following character.

// np.arange(6, dtype=np.float32).reshape(2, 3) * 1.5 - 2
constexpr char kNumpyFloat32_2x3[] =
    "\223NUMPY\001\000v\000{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }         "
    "                                                 \012"
    "\000\000\000\300\000\000\000\277\000\000\200?\000\000 @\000\000\200@\000\000\260@";
// np.array([1, -2, 0.5, 65504, -0.0], dtype=np.float16)
constexpr char kNumpyFloat16_5[] =
    "\223NUMPY\001\000v\000{'descr': '<f2', 'fortran_order': False, 'shape': (5,), }           "
    "                                                 \012"
    "\000<\000\300\0008\377{\000\200";
// np.array(3.25, dtype=np.float64)
constexpr char kNumpyFloat64Scalar[] =
    "\223NUMPY\001\000v\000{'descr': '<f8', 'fortran_order': False, 'shape': (), }             "
    "                                                 \012"
    "\000\000\000\000\000\000\012@";
// np.zeros((0, 3), dtype=np.int64)
constexpr char kNumpyInt64_0x3[] =
    "\223NUMPY\001\000v\000{'descr': '<i8', 'fortran_order': False, 'shape': (0, 3), }         "
    "                                                 \012";
// np.array([[[0x3F80, 0xC000]], [[0x7F80, 0x0001]]], dtype=np.uint16): bfloat16 bit patterns
constexpr char kNumpyUint16_2x1x2[] =
    "\223NUMPY\001\000v\000{'descr': '<u2', 'fortran_order': False, 'shape': (2, 1, 2), }      "
    "                                                 \012"
    "\200?\000\300\200\177\001\000";
// np.array([1.0, 2.0], dtype=np.float32), format versions 2.0 and 3.0
constexpr char kNumpyFloat32Version2[] =
    "\223NUMPY\002\000t\000\000\000{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }   "
    "                                                       \012"
    "\000\000\200?\000\000\000@";
constexpr char kNumpyFloat32Version3[] =
    "\223NUMPY\003\000t\000\000\000{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }   "
    "                                                       \012"
    "\000\000\200?\000\000\000@";

template <size_t N>
std::vector<unsigned char> bytes_of(const char (&literal)[N]) {
  return std::vector<unsigned char>(literal, literal + N - 1);  // without the terminating NUL
}

template <typename T>
std::vector<T> values_of(const Array& array) {
  std::vector<T> values(array.bytes.size() / sizeof(T));
  std::memcpy(values.data(), array.bytes.data(), values.size() * sizeof(T));
  return values;
}

// A .npy file around a hand-written header: magic, version, length field, header, data. No
// padding, which readers must not require.
std::vector<unsigned char> npy_file(std::string_view header, std::string_view data, int major = 1, int minor = 0) {
  std::vector<unsigned char> file = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<unsigned char>(major),
                                     static_cast<unsigned char>(minor)};
  const int length_bytes = major == 1 ? 2 : 4;
  for (int i = 0; i < length_bytes; ++i) file.push_back(static_cast<unsigned char>(header.size() >> (8 * i)));
  file.insert(file.end(), header.begin(), header.end());
  file.insert(file.end(), data.begin(), data.end());
  return file;
}

const std::string kData24(24, '\x01');  // 2 x 3 float32
constexpr std::string_view kHeader2x3 = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";

Array parse_header(std::string_view header, std::string_view data = kData24) {
  return parse(npy_file(header, data), "t.npy");
}

Array random_array(ElementType type, std::vector<int64_t> shape, std::mt19937& rng) {
  Array array;
  array.type = type;
  array.shape = std::move(shape);
  array.bytes.resize(static_cast<size_t>(array.size() * element_size(type)));
  for (unsigned char& byte : array.bytes) byte = static_cast<unsigned char>(rng());
  return array;
}

// ---------------------------------------------------------------------------------------------
// Names, sizes.

TEST(Npy, ElementTypeNamesAndSizes) {
  EXPECT_EQ(to_string(ElementType::Float32), "float32");
  EXPECT_EQ(to_string(ElementType::Float16), "float16");
  EXPECT_EQ(to_string(ElementType::BFloat16), "bfloat16");
  EXPECT_EQ(to_string(ElementType::Float64), "float64");
  EXPECT_EQ(to_string(ElementType::Int64), "int64");
  EXPECT_EQ(element_size(ElementType::Float32), 4);
  EXPECT_EQ(element_size(ElementType::Float16), 2);
  EXPECT_EQ(element_size(ElementType::BFloat16), 2);
  EXPECT_EQ(element_size(ElementType::Float64), 8);
  EXPECT_EQ(element_size(ElementType::Int64), 8);
}

TEST(Npy, SizeIsProductOfShapeAndOneForZeroDimensional) {
  Array array;
  EXPECT_EQ(array.size(), 1);
  array.shape = {2, 3, 4};
  EXPECT_EQ(array.size(), 24);
  array.shape = {0, 3};
  EXPECT_EQ(array.size(), 0);
  array.shape = {2, -3};
  EXPECT_THAT([&] { (void)array.size(); }, ThrowsMessage<rotary::Error>(HasSubstr("shape[1] must be >= 0 (got -3)")));
  array.shape = {int64_t{1} << 62, 4};
  EXPECT_THAT([&] { (void)array.size(); }, ThrowsMessage<rotary::Error>(HasSubstr("element count must fit in int64")));
}

// ---------------------------------------------------------------------------------------------
// Round trips and NumPy's own bytes.

TEST(Npy, RoundTripsEveryElementTypeAndShape) {
  std::mt19937 rng(20240611);
  SCOPED_TRACE("seed 20240611");
  const std::vector<std::vector<int64_t>> shapes = {{}, {5}, {2, 3}, {0, 3}, {3, 0}, {2, 1, 4}, {1, 1, 1, 7}, {70}};
  for (ElementType type : {ElementType::Float32, ElementType::Float16, ElementType::BFloat16, ElementType::Float64,
                           ElementType::Int64}) {
    for (const std::vector<int64_t>& shape : shapes) {
      const Array original = random_array(type, shape, rng);
      const std::vector<unsigned char> file = serialize(original);
      const Array back = parse(file, "roundtrip.npy");
      SCOPED_TRACE(std::string(to_string(type)) + " rank " + std::to_string(shape.size()));
      EXPECT_EQ(back.type, type);
      EXPECT_EQ(back.shape, shape);
      EXPECT_EQ(back.bytes, original.bytes);
      // NumPy's layout: version 1.0 and the data aligned to 64 bytes after a '\n'.
      const size_t data_offset = file.size() - original.bytes.size();
      EXPECT_EQ(file[6], 1);
      EXPECT_EQ(data_offset % 64, 0u);
      EXPECT_EQ(file[data_offset - 1], '\n');
      EXPECT_EQ(data_offset, 10u + (file[8] | (file[9] << 8)));
    }
  }
}

TEST(Npy, ParsesFilesNumpyWrote) {
  const Array f32 = parse(bytes_of(kNumpyFloat32_2x3), "f32.npy");
  EXPECT_EQ(f32.type, ElementType::Float32);
  EXPECT_EQ(f32.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(values_of<float>(f32), (std::vector<float>{-2.0f, -0.5f, 1.0f, 2.5f, 4.0f, 5.5f}));

  const Array f16 = parse(bytes_of(kNumpyFloat16_5), "f16.npy");
  EXPECT_EQ(f16.type, ElementType::Float16);
  EXPECT_EQ(f16.shape, (std::vector<int64_t>{5}));
  EXPECT_EQ(values_of<uint16_t>(f16), (std::vector<uint16_t>{0x3C00, 0xC000, 0x3800, 0x7BFF, 0x8000}));

  const Array f64 = parse(bytes_of(kNumpyFloat64Scalar), "f64.npy");
  EXPECT_EQ(f64.type, ElementType::Float64);
  EXPECT_TRUE(f64.shape.empty());
  EXPECT_EQ(f64.size(), 1);
  EXPECT_EQ(values_of<double>(f64), (std::vector<double>{3.25}));

  const Array i64 = parse(bytes_of(kNumpyInt64_0x3), "i64.npy");
  EXPECT_EQ(i64.type, ElementType::Int64);
  EXPECT_EQ(i64.shape, (std::vector<int64_t>{0, 3}));
  EXPECT_TRUE(i64.bytes.empty());

  const Array bf16 = parse(bytes_of(kNumpyUint16_2x1x2), "bf16.npy");
  EXPECT_EQ(bf16.type, ElementType::BFloat16);
  EXPECT_EQ(bf16.shape, (std::vector<int64_t>{2, 1, 2}));
  EXPECT_EQ(values_of<uint16_t>(bf16), (std::vector<uint16_t>{0x3F80, 0xC000, 0x7F80, 0x0001}));
}

TEST(Npy, SerializeReproducesNumpyBytesExactly) {
  for (const std::vector<unsigned char>& numpy_file :
       {bytes_of(kNumpyFloat32_2x3), bytes_of(kNumpyFloat16_5), bytes_of(kNumpyFloat64Scalar),
        bytes_of(kNumpyInt64_0x3), bytes_of(kNumpyUint16_2x1x2)}) {
    EXPECT_EQ(serialize(parse(numpy_file, "numpy.npy")), numpy_file);
  }
}

TEST(Npy, SerializeMatchesNumpyPaddingForLongFirstAxes) {
  // NumPy leaves room for the first axis to grow to 21 digits, which moves the padding for long
  // shapes into a second 64-byte block. Headers from np.save(np.zeros(shape, '<f8')).
  Array array;
  array.type = ElementType::Float64;
  array.shape = {123456789012, 0, 7, 7, 7, 7, 7, 7};
  const std::vector<unsigned char> file = serialize(array);
  const std::string header(file.begin() + 10, file.end());
  EXPECT_EQ(file.size(), 128u);
  EXPECT_EQ(header,
            "{'descr': '<f8', 'fortran_order': False, 'shape': (123456789012, 0, 7, 7, 7, 7, 7, 7), }" +
                std::string(9 + 20, ' ') + "\n");
}

TEST(Npy, WritesBFloat16AsU2) {
  std::mt19937 rng(7);
  const std::vector<unsigned char> file = serialize(random_array(ElementType::BFloat16, {3}, rng));
  EXPECT_THAT(std::string(file.begin(), file.end()), HasSubstr("'descr': '<u2'"));
}

TEST(Npy, ParsesVersion2And3Files) {
  for (const std::vector<unsigned char>& numpy_file : {bytes_of(kNumpyFloat32Version2), bytes_of(kNumpyFloat32Version3)}) {
    const Array array = parse(numpy_file, "v.npy");
    EXPECT_EQ(array.type, ElementType::Float32);
    EXPECT_EQ(array.shape, (std::vector<int64_t>{2}));
    EXPECT_EQ(values_of<float>(array), (std::vector<float>{1.0f, 2.0f}));
  }
}

TEST(Npy, UsesVersion2WhenHeaderExceeds65535Bytes) {
  Array array;
  array.type = ElementType::Float32;
  array.shape.assign(30000, 1);  // "(1, 1, ...)": 90000 header bytes
  array.bytes = {1, 2, 3, 4};
  const std::vector<unsigned char> file = serialize(array);
  EXPECT_EQ(file[6], 2);
  EXPECT_EQ(file[7], 0);
  const size_t header_length = file[8] | (file[9] << 8) | (file[10] << 16) | (static_cast<size_t>(file[11]) << 24);
  EXPECT_EQ(12 + header_length + 4, file.size());
  EXPECT_EQ((12 + header_length) % 64, 0u);
  const Array back = parse(file, "wide.npy");
  EXPECT_EQ(back.shape, array.shape);
  EXPECT_EQ(back.bytes, array.bytes);
}

TEST(Npy, KeepsVersion1UpToTheLastHeaderThatFits) {
  // Shape entries of 1 add 3 header bytes each: find the largest rank still written as 1.0 and
  // check that one more dimension switches to 2.0.
  Array array;
  array.type = ElementType::Int64;
  array.bytes.assign(8, 0);
  int64_t rank = 21000;
  while (true) {
    array.shape.assign(static_cast<size_t>(rank), 1);
    const std::vector<unsigned char> file = serialize(array);
    if (file[6] == 2) break;
    EXPECT_LE(file.size() - 8 - 10, 65535u);
    ++rank;
  }
  array.shape.assign(static_cast<size_t>(rank - 1), 1);
  const std::vector<unsigned char> last_v1 = serialize(array);
  EXPECT_EQ(last_v1[6], 1);
  EXPECT_GT(last_v1[8] | (last_v1[9] << 8), 65535 - 64 - 3);
  EXPECT_EQ(parse(last_v1, "last.npy").shape.size(), static_cast<size_t>(rank - 1));
}

TEST(Npy, WriteThenReadRoundTripsThroughAFile) {
  std::mt19937 rng(11);
  const Array original = random_array(ElementType::Float16, {4, 5}, rng);
  const std::string path = ::testing::TempDir() + "rotary_npy_test_" + std::to_string(::getpid()) + ".npy";
  write(path, original);
  const Array back = read(path);
  std::remove(path.c_str());
  EXPECT_EQ(back.type, original.type);
  EXPECT_EQ(back.shape, original.shape);
  EXPECT_EQ(back.bytes, original.bytes);
}

// ---------------------------------------------------------------------------------------------
// Header dialects that are valid Python and that NumPy / ml_dtypes write.

TEST(Npy, AcceptsAnyKeyOrderSpacingQuotesAndTrailingComma) {
  for (std::string_view header : {
           "{'shape': (2, 3), 'fortran_order': False, 'descr': '<f4'}",
           "{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (2,3)}",
           "  {'descr':'<f4','fortran_order':False,'shape':( 2 , 3 , ),}\n",
           "{\n\t'fortran_order' : False ,\n\t'shape' : (2, 3),\n\t'descr' : '<f4',\n}   \n",
       }) {
    SCOPED_TRACE(std::string(header));
    const Array array = parse_header(header);
    EXPECT_EQ(array.type, ElementType::Float32);
    EXPECT_EQ(array.shape, (std::vector<int64_t>{2, 3}));
  }
}

TEST(Npy, AcceptsNativeOrderAndMlDtypesBFloat16Descrs) {
  EXPECT_EQ(parse_header("{'descr': '=f4', 'fortran_order': False, 'shape': (2, 3), }").type, ElementType::Float32);
  EXPECT_EQ(parse_header("{'descr': '=i8', 'fortran_order': False, 'shape': (3,), }").type, ElementType::Int64);
  for (std::string_view descr : {"<V2", "=V2", "bfloat16", "<u2"}) {
    const std::string header = "{'descr': '" + std::string(descr) + "', 'fortran_order': False, 'shape': (4, 3), }";
    EXPECT_EQ(parse_header(header).type, ElementType::BFloat16) << descr;
  }
}

TEST(Npy, AcceptsPython2LongSuffixInVersion1And2Only) {
  // NumPy filters 'L' out of 1.0 / 2.0 headers written by Python 2 (format.py _filter_header).
  const std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 3L), }";
  EXPECT_EQ(parse(npy_file(header, kData24, 1), "py2.npy").shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(parse(npy_file(header, kData24, 2), "py2.npy").shape, (std::vector<int64_t>{2, 3}));
  EXPECT_THAT([&] { parse(npy_file(header, kData24, 3), "py3.npy"); },
              ThrowsMessage<rotary::Error>(HasSubstr("npy py3.npy: shape must be a tuple of non-negative integers")));
}

TEST(Npy, AcceptsZeroSizeShapeWithHugeExtentsWithoutOverflow) {
  const Array array = parse_header("{'descr': '<f8', 'fortran_order': False, 'shape': (4611686018427387904, 0, 4), }", "");
  EXPECT_EQ(array.size(), 0);
  EXPECT_TRUE(array.bytes.empty());
}

// ---------------------------------------------------------------------------------------------
// Malformed and lying files. Each message names the file, the problem and the value found.

void expect_parse_error(const std::vector<unsigned char>& file, const std::string& message) {
  EXPECT_THAT([&] { parse(file, "t.npy"); }, ThrowsMessage<rotary::Error>(HasSubstr(message)));
}

void expect_header_error(std::string_view header, const std::string& message, std::string_view data = kData24) {
  expect_parse_error(npy_file(header, data), message);
}

TEST(Npy, RejectsBadMagic) {
  expect_parse_error({'P', 'K', 3, 4, 20, 0, 0, 0, 0, 0, 0, 0},
                     "npy t.npy: file must start with the magic string '\\x93NUMPY' (got 'PK\\x03\\x04\\x14\\x00')");
  expect_parse_error({0x93, 'N', 'U', 'M', 'P', 'y', 1, 0, 0, 0}, "magic string '\\x93NUMPY' (got '\\x93NUMPy')");
}

TEST(Npy, RejectsEmptyFile) { expect_parse_error({}, "npy t.npy: file must start with the magic string '\\x93NUMPY' (got '')"); }

TEST(Npy, RejectsFileEndingAfterMagic) {
  expect_parse_error({0x93, 'N', 'U', 'M', 'P', 'Y', 1},
                     "npy t.npy: file must hold the 2 version bytes after the magic string (got 7 bytes)");
}

TEST(Npy, RejectsVersion4) {
  expect_parse_error(npy_file(kHeader2x3, kData24, 4, 0), "npy t.npy: version must be 1.0, 2.0 or 3.0 (got 4.0)");
}

TEST(Npy, RejectsMinorVersionAndVersion0) {
  expect_parse_error(npy_file(kHeader2x3, kData24, 1, 1), "version must be 1.0, 2.0 or 3.0 (got 1.1)");
  expect_parse_error(npy_file(kHeader2x3, kData24, 0, 0), "version must be 1.0, 2.0 or 3.0 (got 0.0)");
}

TEST(Npy, RejectsFileTruncatedBeforeHeaderLength) {
  expect_parse_error({0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 70},
                     "npy t.npy: file must hold the 2-byte header length of version 1.0 (got 9 bytes)");
  expect_parse_error({0x93, 'N', 'U', 'M', 'P', 'Y', 2, 0, 70, 0, 0},
                     "npy t.npy: file must hold the 4-byte header length of version 2.0 (got 11 bytes)");
}

TEST(Npy, RejectsHeaderLengthPastEndOfFile) {
  std::vector<unsigned char> file = npy_file(kHeader2x3, "");
  file[8] = 0xFF;  // 59-byte header claimed as 255
  expect_parse_error(file, "npy t.npy: header length must be at most 59, the bytes left in the file (got 255)");
}

TEST(Npy, RejectsHugeVersion2HeaderLengthWithoutAllocating) {
  std::vector<unsigned char> file = npy_file(kHeader2x3, kData24, 2);
  for (int i = 8; i < 12; ++i) file[static_cast<size_t>(i)] = 0xFF;
  expect_parse_error(file, "header length must be at most 83, the bytes left in the file (got 4294967295)");
}

TEST(Npy, RejectsHeaderThatIsNotADict) {
  expect_header_error("[('descr', '<f4')]",
                      "npy t.npy: header at offset 0 must be '{' opening the dict NumPy writes");
  expect_header_error("", "header at offset 0 must be '{' opening the dict NumPy writes, {'descr': ..., "
                          "'fortran_order': ..., 'shape': ..., } (got end of header)");
}

TEST(Npy, RejectsMissingDescr) {
  expect_header_error("{'fortran_order': False, 'shape': (2, 3), }",
                      "npy t.npy: header must have the key 'descr' (got keys 'fortran_order', 'shape')");
}

TEST(Npy, RejectsMissingFortranOrder) {
  expect_header_error("{'descr': '<f4', 'shape': (2, 3), }",
                      "npy t.npy: header must have the key 'fortran_order' (got keys 'descr', 'shape')");
}

TEST(Npy, RejectsMissingShape) {
  expect_header_error("{'descr': '<f4', 'fortran_order': False}",
                      "npy t.npy: header must have the key 'shape' (got keys 'descr', 'fortran_order')");
  expect_header_error("{}", "header must have the key 'descr' (got no keys)");
}

TEST(Npy, RejectsUnknownKey) {
  expect_header_error("{'descr': '<f4', 'fortran_order': False, 'order': 'C', 'shape': (2, 3), }",
                      "npy t.npy: header key must be one of 'descr', 'fortran_order', 'shape' (got 'order')");
}

TEST(Npy, RejectsDuplicateKey) {
  expect_header_error("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'shape': (6,)}",
                      "npy t.npy: header key 'shape' must appear once (got it again at offset 58)");
}

TEST(Npy, RejectsUnknownDescr) {
  expect_header_error("{'descr': '<c8', 'fortran_order': False, 'shape': (2, 3), }",
                      "npy t.npy: descr must be one of '<f4', '<f2', '<u2' (bfloat16 bits), '<f8', or integers '|i1', "
                      "'<i2', '<i4', '<i8', '|u1', '<u4', '<u8' (got '<c8')");
  expect_header_error("{'descr': '|b1', 'fortran_order': False, 'shape': (2, 3), }", "(got '|b1')");
  expect_header_error("{'descr': '', 'fortran_order': False, 'shape': (2, 3), }", "(got '')");
}

// np.save(f, np.array([0, 1, -2, 2**31 - 1, -2**31], dtype=np.int32)), NumPy 2, byte for byte:
// positions as torch.int32 / np.int32 save them.
constexpr char kNumpyInt32_5[] =
    "\223NUMPY\001\000v\000{'descr': '<i4', 'fortran_order': False, 'shape': (5,), }           "
    "                                                 \012"
    "\000\000\000\000\001\000\000\000\376\377\377\377\377\377\377\177\000\000\000\200";

TEST(Npy, ReadsIntegersOfEveryWidthAsInt64) {
  const Array int32 = parse(bytes_of(kNumpyInt32_5), "int32.npy");
  EXPECT_EQ(int32.type, ElementType::Int64);
  EXPECT_EQ(int32.shape, (std::vector<int64_t>{5}));
  EXPECT_EQ(values_of<int64_t>(int32), (std::vector<int64_t>{0, 1, -2, 2147483647, -2147483648LL}));
  struct Case {
    std::string descr;
    std::string data;  // little-endian, 2 elements
    std::vector<int64_t> values;
  };
  const Case cases[] = {
      {"|i1", "\x80\x7f"s, {-128, 127}},
      {"|u1", "\xff\x07"s, {255, 7}},
      {"<i2", "\x00\x80\xff\x7f"s, {-32768, 32767}},
      {"=i4", "\xff\xff\xff\xff\x05\x00\x00\x00"s, {-1, 5}},
      {"<u4", "\xff\xff\xff\xff\x05\x00\x00\x00"s, {4294967295LL, 5}},
      {"<u8", "\xff\xff\xff\xff\xff\xff\xff\x7f\x00\x00\x00\x00\x00\x00\x00\x00"s, {INT64_MAX, 0}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.descr);
    const Array array = parse_header("{'descr': '" + c.descr + "', 'fortran_order': False, 'shape': (2,), }", c.data);
    EXPECT_EQ(array.type, ElementType::Int64);
    EXPECT_EQ(values_of<int64_t>(array), c.values);
  }
  // The data size is checked in the file's own width.
  expect_header_error("{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }",
                      "npy t.npy: data must hold 8 bytes for shape (2,) int32 (got 7)", "\x01\x00\x00\x00\x02\x00\x00"sv);
  expect_header_error("{'descr': '>i4', 'fortran_order': False, 'shape': (2,), }",
                      "npy t.npy: descr must be little-endian ('<' or '='): rotary does not byte-swap");
}

TEST(Npy, RefusesAUint64AboveTheInt64RangeNamingIt) {
  // As a position, 2^64 - 1 wrapped to int64 would be -1: refused, not wrapped.
  expect_header_error("{'descr': '<u8', 'fortran_order': False, 'shape': (2,), }",
                      "npy t.npy: uint64 element [1] must be at most 9223372036854775807 to be read as int64 (got "
                      "18446744073709551615)",
                      "\x05\x00\x00\x00\x00\x00\x00\x00\xff\xff\xff\xff\xff\xff\xff\xff"sv);
  expect_header_error("{'descr': '<u8', 'fortran_order': False, 'shape': (1,), }",
                      "uint64 element [0] must be at most 9223372036854775807 to be read as int64 (got 9223372036854775808)",
                      "\x00\x00\x00\x00\x00\x00\x00\x80"sv);
}

TEST(Npy, CapsTheMemoryOfWidenedIntegersAtMaxBytes) {
  // 100 int8 values: a 200-byte file, 800 bytes once read as int64.
  const std::vector<unsigned char> file =
      npy_file("{'descr': '|i1', 'fortran_order': False, 'shape': (100,), }", std::string(100, '\x01'));
  EXPECT_EQ(parse(file, "t.npy", {.max_bytes = 800}).size(), 100);
  EXPECT_THAT([&] { parse(file, "t.npy", {.max_bytes = 799}); },
              ThrowsMessage<rotary::Error>("npy t.npy: data must take at most 799 bytes in memory "
                                           "(npy::ReadOptions::max_bytes) (got shape (100,) int8, which is read as int64)"));
}

TEST(Npy, RejectsBigEndianWithAHint) {
  expect_header_error("{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }",
                      "npy t.npy: descr must be little-endian ('<' or '='): rotary does not byte-swap; save with "
                      "a.astype(a.dtype.newbyteorder('<')) (got '>f4')");
  expect_header_error("{'descr': '>i8', 'fortran_order': False, 'shape': (3,), }", "(got '>i8')");
}

TEST(Npy, RejectsStructuredDescr) {
  expect_header_error("{'descr': [('x', '<f4')], 'fortran_order': False, 'shape': (2, 3), }",
                      "npy t.npy: descr must be a string such as '<f4' (got '[('x', '<f4')], 'fortran_order': False, ...')");
}

TEST(Npy, RejectsFortranOrderTrue) {
  expect_header_error("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }",
                      "npy t.npy: fortran_order must be False: rotary reads C-order arrays; save with "
                      "np.ascontiguousarray (got True)");
}

TEST(Npy, RejectsFortranOrderThatIsNotABool) {
  expect_header_error("{'descr': '<f4', 'fortran_order': 0, 'shape': (2, 3), }",
                      "npy t.npy: fortran_order must be True or False (got '0, 'shape': (2, 3), }')");
  expect_header_error("{'descr': '<f4', 'fortran_order': Falsey, 'shape': (2, 3), }",
                      "fortran_order must be True or False (got 'Falsey,");
}

TEST(Npy, RejectsNegativeShapeEntry) {
  expect_header_error("{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3), }",
                      "npy t.npy: shape[1] must be >= 0 (got -3)");
}

TEST(Npy, RejectsShapeWhoseElementCountOverflows) {
  expect_header_error("{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 4), }",
                      "npy t.npy: shape must describe fewer than 2^63 bytes of float32 data (got "
                      "(4611686018427387904, 4))");
}

TEST(Npy, RejectsShapeWhoseByteCountOverflows) {
  // 2^61 * 2 elements fit in int64; times 4 bytes they do not.
  expect_header_error("{'descr': '<f4', 'fortran_order': False, 'shape': (2305843009213693952, 2), }",
                      "shape must describe fewer than 2^63 bytes of float32 data");
}

TEST(Npy, RejectsHugeShapeThatFitsInt64ButNotTheFile) {
  expect_header_error("{'descr': '<f8', 'fortran_order': False, 'shape': (1000000000, 1000000000), }",
                      "npy t.npy: data must hold 8000000000000000000 bytes for shape (1000000000, 1000000000) "
                      "float64 (got 24)");
}

TEST(Npy, RejectsShapeEntryBeyondInt64) {
  expect_header_error("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999, 0), }",
                      "npy t.npy: shape[0] must fit in int64 (got 99999999999999999999)");
  expect_header_error("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 9223372036854775808), }",
                      "shape[1] must fit in int64 (got 9223372036854775808)");
}

TEST(Npy, RejectsDataTooShort) {
  expect_header_error(kHeader2x3, "npy t.npy: data must hold 24 bytes for shape (2, 3) float32 (got 20)",
                      std::string(20, '\0'));
}

TEST(Npy, RejectsDataTooLong) {
  expect_header_error(kHeader2x3, "npy t.npy: data must hold 24 bytes for shape (2, 3) float32 (got 28)",
                      std::string(28, '\0'));
  expect_header_error("{'descr': '<f8', 'fortran_order': False, 'shape': (), }",
                      "data must hold 8 bytes for shape () float64 (got 0)", "");
}

TEST(Npy, RejectsNonIntegerShape) {
  expect_header_error("{'descr': '<f4', 'fortran_order': False, 'shape': (2.5, 3), }",
                      "npy t.npy: shape must be a tuple of non-negative integers such as (2, 3) (got '(2.5, 3), }')");
  expect_header_error("{'descr': '<f4', 'fortran_order': False, 'shape': ('2', 3), }",
                      "shape must be a tuple of non-negative integers such as (2, 3) (got '('2', 3), }')");
}

TEST(Npy, RejectsShapeThatIsNotATuple) {
  expect_header_error("{'descr': '<f4', 'fortran_order': False, 'shape': [2, 3], }",
                      "shape must be a tuple of non-negative integers such as (2, 3) (got '[2, 3], }')");
  // (6) is the integer 6 in Python.
  expect_header_error("{'descr': '<f4', 'fortran_order': False, 'shape': (6), }", "(got '(6), }')");
  expect_header_error("{'descr': '<f4', 'fortran_order': False, 'shape': 6, }", "(got '6, }')");
  expect_header_error("{'descr': '<f4', 'fortran_order': False, 'shape': (2 3), }", "(got '(2 3), }')");
  expect_header_error("{'descr': '<f4', 'fortran_order': False, 'shape': (2,,), }", "(got '(2,,), }')");
}

TEST(Npy, RejectsUnterminatedString) {
  // The string ends at the next quote, which leaves the following key unquoted.
  expect_header_error("{'descr': '<f4, 'fortran_order': False, 'shape': (2, 3), }",
                      "npy t.npy: header at offset 17 must be ',' or '}' after a value (got 'fortran_order': False");
  expect_header_error("{'descr': '<f4', 'fortran_order': False, 'shape",
                      "npy t.npy: header string at offset 41 must end with a closing ' (got ''shape')");
  expect_header_error("{'descr\n': '<f4'}", "header string at offset 1 must be plain characters closed by its opening "
                                            "quote on the same line (got ''descr\\n': '<f4'}')");
}

TEST(Npy, RejectsMissingColonAndMissingComma) {
  expect_header_error("{'descr' '<f4', 'fortran_order': False, 'shape': (2, 3), }",
                      "npy t.npy: header at offset 9 must be ':' after the key (got ''<f4', 'fortran_order': False, 'shape': ...')");
  expect_header_error("{'descr': '<f4' 'fortran_order': False, 'shape': (2, 3), }",
                      "header at offset 16 must be ',' or '}' after a value");
}

TEST(Npy, RejectsUnclosedDictAndTextAfterIt) {
  expect_header_error("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), ",
                      "header at offset 58 must be a quoted key or '}' (got end of header)");
  expect_header_error("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } x",
                      "header at offset 60 must be the end of the header after the dict (got 'x')");
  expect_header_error("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }\0"sv, "(got '\\x00')");
}

TEST(Npy, ReadOfMissingFileNamesPathAndReason) {
  const std::string path = ::testing::TempDir() + "rotary_npy_test_no_such_file.npy";
  EXPECT_THAT([&] { read(path); },
              ThrowsMessage<rotary::Error>(HasSubstr(path + ": cannot read file: No such file or directory")));
}

TEST(Npy, ReadOfDirectoryNamesPathAndReason) {
  const std::string path = ::testing::TempDir();
  EXPECT_THAT([&] { read(path); }, ThrowsMessage<rotary::Error>(HasSubstr(path + ": cannot read file: Is a directory")));
}

TEST(Npy, ReadOfMalformedFileNamesThePath) {
  const std::string path = ::testing::TempDir() + "rotary_npy_test_bad_" + std::to_string(::getpid()) + ".npy";
  std::FILE* stream = std::fopen(path.c_str(), "wb");
  ASSERT_NE(stream, nullptr);
  std::fputs("not numpy", stream);
  std::fclose(stream);
  EXPECT_THAT([&] { read(path); },
              ThrowsMessage<rotary::Error>(HasSubstr("npy " + path + ": file must start with the magic string")));
  std::remove(path.c_str());
}

TEST(Npy, WriteToMissingDirectoryNamesPathAndReason) {
  std::mt19937 rng(3);
  const std::string path = ::testing::TempDir() + "rotary_npy_test_no_such_dir/a.npy";
  EXPECT_THAT([&] { write(path, random_array(ElementType::Float32, {2}, rng)); },
              ThrowsMessage<rotary::Error>(HasSubstr("npy: cannot write " + path + ": No such file or directory")));
}

// ---------------------------------------------------------------------------------------------
// Reading front to back: the magic string first, the data only as far as the header says, a cap
// on the size, and writes that never leave a truncated file.

// A fresh directory, removed with its contents at the end of the scope.
struct ScratchDir {
  std::filesystem::path path;
  explicit ScratchDir(const std::string& name)
      : path(std::filesystem::path(::testing::TempDir()) / (name + "_" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
  std::vector<std::string> names() const {
    std::vector<std::string> found;
    for (const auto& entry : std::filesystem::directory_iterator(path)) found.push_back(entry.path().filename().string());
    std::sort(found.begin(), found.end());
    return found;
  }
};

void write_bytes(const std::string& path, const std::vector<unsigned char>& bytes) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                              static_cast<std::streamsize>(bytes.size()));
}

std::string text_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Bytes this process has read through read() syscalls so far (/proc/self/io "rchar").
uint64_t bytes_read_so_far() {
  std::ifstream io("/proc/self/io");
  std::string key;
  uint64_t value = 0;
  while (io >> key >> value) {
    if (key == "rchar:") return value;
  }
  return 0;
}

// Bug: read() took the whole file before looking at it, so /dev/zero never ended.
TEST(NpyRead, RefusesDevZeroAtTheMagicString) {
  EXPECT_THAT([] { read("/dev/zero"); },
              ThrowsMessage<rotary::Error>(HasSubstr("npy /dev/zero: file must start with the magic string '\\x93NUMPY' "
                                                     "(got '\\x00\\x00\\x00\\x00\\x00\\x00'): not a .npy file (bad magic)")));
}

// Bug: a large file that is not a .npy (a weights file given as --q) was read whole first. Now
// 8 bytes decide; and a .npy whose size disagrees with its header is refused unread. The files
// are sparse: 256 MiB each, no disk used.
TEST(NpyRead, ReadsOnlyTheStartOfALargeFileThatIsNotWhatItsHeaderSays) {
  if (bytes_read_so_far() == 0) GTEST_SKIP() << "no /proc/self/io";
  const ScratchDir dir("rotary_npy_large");
  const std::string not_npy = dir / "weights.bin";
  std::ofstream(not_npy).close();
  std::filesystem::resize_file(not_npy, std::uintmax_t{256} << 20);
  uint64_t before = bytes_read_so_far();
  EXPECT_THAT([&] { read(not_npy); }, ThrowsMessage<rotary::Error>(HasSubstr("not a .npy file (bad magic)")));
  EXPECT_LT(bytes_read_so_far() - before, uint64_t{1} << 20);

  const std::string lying = dir / "lying.npy";
  write_bytes(lying, npy_file(kHeader2x3, kData24));
  std::filesystem::resize_file(lying, std::uintmax_t{256} << 20);
  before = bytes_read_so_far();
  EXPECT_THAT([&] { read(lying); },
              ThrowsMessage<rotary::Error>(HasSubstr("npy " + lying + ": data must hold 24 bytes for shape (2, 3) float32 (got " +
                                                     std::to_string((uint64_t{256} << 20) - 10 - kHeader2x3.size()) + ")")));
  EXPECT_LT(bytes_read_so_far() - before, uint64_t{1} << 20);
}

TEST(NpyRead, RefusesAFileShorterOrLongerThanItsHeaderNamingBothSizes) {
  const ScratchDir dir("rotary_npy_sizes");
  write_bytes(dir / "short.npy", npy_file(kHeader2x3, std::string(20, '\x01')));
  write_bytes(dir / "long.npy", npy_file(kHeader2x3, std::string(32, '\x01')));
  EXPECT_THAT([&] { read(dir / "short.npy"); },
              ThrowsMessage<rotary::Error>(HasSubstr("npy " + (dir / "short.npy") +
                                                     ": data must hold 24 bytes for shape (2, 3) float32 (got 20)")));
  EXPECT_THAT([&] { read(dir / "long.npy"); },
              ThrowsMessage<rotary::Error>(HasSubstr("npy " + (dir / "long.npy") +
                                                     ": data must hold 24 bytes for shape (2, 3) float32 (got 32)")));
}

TEST(NpyRead, CapsTheFileSizeAtReadOptionsMaxBytes) {
  const ScratchDir dir("rotary_npy_cap");
  std::mt19937 rng(5);
  const Array array = random_array(ElementType::Float32, {1000}, rng);
  write(dir / "a.npy", array);
  EXPECT_EQ(read(dir / "a.npy").bytes, array.bytes);  // the default cap, 64 GiB
  EXPECT_EQ(ReadOptions{}.max_bytes, int64_t{64} << 30);
  EXPECT_THAT([&] { read(dir / "a.npy", {.max_bytes = 1024}); },
              ThrowsMessage<rotary::Error>(HasSubstr("npy " + (dir / "a.npy") +
                                                     ": file must be at most 1024 bytes (npy::ReadOptions::max_bytes) "
                                                     "(got 128 bytes of header and 4000 bytes of data for shape (1000,) float32)")));
  EXPECT_EQ(read(dir / "a.npy", {.max_bytes = 4128}).bytes, array.bytes);
  EXPECT_THAT([&] { read(dir / "a.npy", {.max_bytes = 4127}); }, ThrowsMessage<rotary::Error>(HasSubstr("at most 4127 bytes")));
  EXPECT_THAT([&] { parse(serialize(array), "a.npy", {.max_bytes = 100}); },
              ThrowsMessage<rotary::Error>(HasSubstr("npy a.npy: file must be at most 100 bytes")));
}

// A pipe has no size: it is read as far as the header says, plus one byte.
class PipeWriter {
 public:
  // Writes `bytes`, then, when `endless`, the byte 'x' until the reader closes its end.
  PipeWriter(std::vector<unsigned char> bytes, bool endless) {
    EXPECT_EQ(::pipe(fds_), 0);
    std::signal(SIGPIPE, SIG_IGN);  // the writer sees EPIPE when the reader is done
    thread_ = std::thread([this, bytes = std::move(bytes), endless] {
      size_t done = 0;
      while (done < bytes.size()) {
        const ssize_t n = ::write(fds_[1], bytes.data() + done, bytes.size() - done);
        if (n <= 0) break;
        done += static_cast<size_t>(n);
      }
      const std::vector<char> more(1 << 16, 'x');
      while (endless && ::write(fds_[1], more.data(), more.size()) > 0) {
      }
      ::close(fds_[1]);
    });
  }
  ~PipeWriter() {
    ::close(fds_[0]);  // ends an endless writer
    thread_.join();
  }
  std::string path() const { return "/dev/fd/" + std::to_string(fds_[0]); }

 private:
  int fds_[2] = {-1, -1};
  std::thread thread_;
};

TEST(NpyRead, ReadsAPipeOnlyAsFarAsItsHeaderSays) {
  std::mt19937 rng(6);
  const Array array = random_array(ElementType::Float32, {2, 3}, rng);
  {
    const PipeWriter exact(serialize(array), false);
    EXPECT_EQ(read(exact.path()).bytes, array.bytes);
  }
  {
    const PipeWriter endless(serialize(array), true);
    EXPECT_THAT([&] { read(endless.path()); },
                ThrowsMessage<rotary::Error>(HasSubstr(": data must hold 24 bytes for shape (2, 3) float32 (got more than 24)")));
  }
  {
    std::vector<unsigned char> file = serialize(array);
    file.resize(file.size() - 4);
    const PipeWriter cut(file, false);
    EXPECT_THAT([&] { read(cut.path()); },
                ThrowsMessage<rotary::Error>(HasSubstr(": data must hold 24 bytes for shape (2, 3) float32 (got 20)")));
  }
  {
    // A header declaring 2^40 floats: refused by the cap before any data is read.
    const PipeWriter huge(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776,), }", ""), true);
    EXPECT_THAT([&] { read(huge.path()); },
                ThrowsMessage<rotary::Error>(HasSubstr("file must be at most 68719476736 bytes (npy::ReadOptions::max_bytes)")));
  }
}

// Bug: a write that failed half way (a full disk) left a truncated .npy in place of the old file.
// A file size limit (RLIMIT_FSIZE, SIGXFSZ ignored so that write() fails with EFBIG) makes it
// fail: the old file must survive, and no temporary file stay behind.
TEST(NpyWrite, LeavesTheOldFileWhenTheWriteFailsHalfWay) {
  const ScratchDir dir("rotary_npy_write_limit");
  const std::string path = dir / "a.npy";
  std::ofstream(path) << "old contents";
  std::mt19937 rng(7);
  const Array array = random_array(ElementType::Float32, {64, 128}, rng);  // 32 KiB
  rlimit previous{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &previous), 0);
  const auto previous_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit limited = previous;
  limited.rlim_cur = 4096;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &limited), 0);
  std::string message;
  try {
    write(path, array);
  } catch (const rotary::Error& error) {
    message = error.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &previous);
  std::signal(SIGXFSZ, previous_handler);
  EXPECT_EQ(message, "npy: cannot write " + path + ": File too large");
  EXPECT_EQ(text_of(path), "old contents");
  EXPECT_EQ(dir.names(), std::vector<std::string>{"a.npy"});
  // Without the limit it replaces the file.
  write(path, array);
  EXPECT_EQ(read(path).bytes, array.bytes);
  EXPECT_EQ(dir.names(), std::vector<std::string>{"a.npy"});
}

// ---------------------------------------------------------------------------------------------
// The file writer behind npy::write and the command (src/core/atomic_file.hpp).

TEST(AtomicFileSet, DestroyedWithoutCommitLeavesEveryTargetAsItWas) {
  const ScratchDir dir("rotary_atomic_uncommitted");
  std::ofstream(dir / "a") << "old a";
  {
    detail::AtomicFileSet files("test");
    files.add(dir / "a", "new a");
    files.add(dir / "b", "new b");
    EXPECT_EQ(dir.names().size(), 3u);  // a and the two temporary files
  }
  EXPECT_EQ(text_of(dir / "a"), "old a");
  EXPECT_EQ(dir.names(), std::vector<std::string>{"a"});
}

TEST(AtomicFileSet, CommitsEveryFileOrNone) {
  const ScratchDir dir("rotary_atomic_commit");
  std::ofstream(dir / "a") << "old a";
  {
    detail::AtomicFileSet files("test");
    files.add(dir / "a", "new a");
    files.add(dir / "b", "new b");
    files.commit();
  }
  EXPECT_EQ(text_of(dir / "a"), "new a");
  EXPECT_EQ(text_of(dir / "b"), "new b");
  EXPECT_EQ(dir.names(), (std::vector<std::string>{"a", "b"}));

  // The second rename fails (its target became a directory after it was staged): the first,
  // already renamed, is swapped back.
  std::ofstream(dir / "c") << "old c";
  {
    detail::AtomicFileSet files("test");
    files.add(dir / "a", "newer a");
    files.add(dir / "b", "newer b");
    files.add(dir / "c", "newer c");
    std::filesystem::remove(dir / "c");
    std::filesystem::create_directory(dir / "c");
    EXPECT_THAT([&] { files.commit(); },
                ThrowsMessage<rotary::Error>(HasSubstr("test: cannot write " + (dir / "c") + ": Is a directory")));
  }
  EXPECT_EQ(text_of(dir / "a"), "new a");
  EXPECT_EQ(text_of(dir / "b"), "new b");
  EXPECT_EQ(dir.names(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_TRUE(std::filesystem::is_directory(dir / "c"));
}

// add_streamed (a converted checkpoint): the producer's pieces make the file; a producer that
// throws leaves the old target and no temporary file; a write the system refuses (/dev/full) is
// the set's "cannot write" error; a device receives the bytes at commit().
TEST(AtomicFileSet, StreamedOutputsAreWholeOrAbsent) {
  const ScratchDir dir("rotary_atomic_streamed");
  std::ofstream(dir / "a") << "old a";
  detail::write_file_atomically(
      dir / "a", [](detail::AtomicFileSet::Sink& sink) {
        for (int i = 0; i < 3; ++i) sink.write("piece " + std::to_string(i) + ";");
      },
      "test");
  EXPECT_EQ(text_of(dir / "a"), "piece 0;piece 1;piece 2;");
  EXPECT_THAT(
      [&] {
        detail::write_file_atomically(
            dir / "a", [](detail::AtomicFileSet::Sink& sink) {
              sink.write("half of it");
              throw rotary::Error("test: the input changed while it was read");
            },
            "test");
      },
      ThrowsMessage<rotary::Error>(HasSubstr("the input changed while it was read")));
  EXPECT_EQ(text_of(dir / "a"), "piece 0;piece 1;piece 2;");
  EXPECT_EQ(dir.names(), std::vector<std::string>{"a"});
  if (std::filesystem::exists("/dev/full")) {
    EXPECT_THAT([&] { detail::write_file_atomically("/dev/full", [](detail::AtomicFileSet::Sink& sink) { sink.write("x"); }, "test"); },
                ThrowsMessage<rotary::Error>(HasSubstr("test: cannot write /dev/full: No space left on device")));
  }
  int calls = 0;
  {
    detail::AtomicFileSet files("test");
    files.add_streamed("/dev/null", [&](detail::AtomicFileSet::Sink& sink) {
      ++calls;
      sink.write("discarded");
    });
    EXPECT_EQ(calls, 0);  // a device is written at commit()
    files.commit();
  }
  EXPECT_EQ(calls, 1);
}

TEST(AtomicFileSet, SameFileComparesInodesOrResolvedPaths) {
  const ScratchDir dir("rotary_atomic_same");
  std::ofstream(dir / "a") << "a";
  std::filesystem::create_hard_link(dir / "a", dir / "hard");
  std::filesystem::create_symlink(dir / "a", dir / "link");
  std::filesystem::create_directory(dir / "sub");
  EXPECT_TRUE(detail::same_file(dir / "a", dir / "a"));
  EXPECT_TRUE(detail::same_file(dir / "a", dir / "hard"));
  EXPECT_TRUE(detail::same_file(dir / "link", dir / "a"));
  EXPECT_TRUE(detail::same_file(dir / "new", dir / "sub/../new"));
  EXPECT_FALSE(detail::same_file(dir / "a", dir / "new"));
  EXPECT_FALSE(detail::same_file(dir / "new", dir / "other"));
  EXPECT_FALSE(detail::same_file("/dev/null", "/dev/null"));  // a device: writing it twice loses nothing
}

TEST(Npy, SerializeRejectsBytesThatDoNotMatchShape) {
  Array array;
  array.type = ElementType::Float32;
  array.shape = {2, 3};
  array.bytes.assign(20, 0);
  EXPECT_THAT([&] { serialize(array); },
              ThrowsMessage<rotary::Error>(HasSubstr("npy serialize: bytes must hold 24 bytes for shape (2, 3) float32 (got 20)")));
  array.shape = {int64_t{1} << 61, 2};
  EXPECT_THAT([&] { serialize(array); },
              ThrowsMessage<rotary::Error>(HasSubstr("bytes must hold more than 2^63 bytes for shape (2305843009213693952, 2)")));
  array.shape = {-1};
  EXPECT_THAT([&] { serialize(array); }, ThrowsMessage<rotary::Error>(HasSubstr("shape[0] must be >= 0 (got -1)")));
}

// ---------------------------------------------------------------------------------------------
// Corruption: parse either succeeds (with a consistent array) or throws rotary::Error.

// Parses `file`; false (and a failure) if anything but rotary::Error escaped or the array is
// inconsistent. Counts the files that parsed in *num_parsed.
bool parses_or_throws_error(const std::vector<unsigned char>& file, int* num_parsed = nullptr) {
  try {
    const Array array = parse(file, "fuzz.npy");
    const bool consistent = static_cast<int64_t>(array.bytes.size()) == array.size() * element_size(array.type) &&
                            array.bytes.size() <= file.size();
    EXPECT_TRUE(consistent);
    if (num_parsed) ++*num_parsed;
    return consistent;
  } catch (const rotary::Error&) {
    return true;
  } catch (const std::exception& error) {
    ADD_FAILURE() << "non-rotary exception: " << error.what();
    return false;
  }
}

TEST(Npy, RandomCorruptionParsesOrThrowsErrorNeverCrashes) {
  const uint32_t seed = 90210;
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const std::vector<std::vector<unsigned char>> originals = {bytes_of(kNumpyFloat32_2x3), bytes_of(kNumpyUint16_2x1x2),
                                                             bytes_of(kNumpyFloat32Version2)};
  int parsed = 0;
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<unsigned char> file = originals[static_cast<size_t>(trial) % originals.size()];
    const auto pick = [&](size_t bound) { return static_cast<size_t>(rng() % bound); };
    switch (trial % 4) {
      case 0:  // flip 1-4 random bits
        for (size_t flips = 1 + pick(4); flips > 0; --flips) file[pick(file.size())] ^= static_cast<unsigned char>(1u << pick(8));
        break;
      case 1:  // overwrite 1-4 random bytes, biased towards the preamble and header
        for (size_t writes = 1 + pick(4); writes > 0; --writes) file[pick(std::min<size_t>(file.size(), 128))] = static_cast<unsigned char>(rng());
        break;
      case 2:  // truncate
        file.resize(pick(file.size() + 1));
        break;
      case 3:  // insert or delete a few bytes somewhere
        if (rng() % 2) {
          file.insert(file.begin() + static_cast<std::ptrdiff_t>(pick(file.size())), 1 + pick(8), static_cast<unsigned char>(rng()));
        } else {
          const size_t at = pick(file.size());
          file.erase(file.begin() + static_cast<std::ptrdiff_t>(at),
                     file.begin() + static_cast<std::ptrdiff_t>(std::min(file.size(), at + 1 + pick(8))));
        }
        break;
    }
    ASSERT_TRUE(parses_or_throws_error(file, &parsed)) << "trial " << trial;
  }
  // Flips inside the padding or the data leave a valid file: both outcomes must have occurred.
  EXPECT_GT(parsed, 0);
  EXPECT_LT(parsed, 300);
}

TEST(Npy, EveryHeaderByteReplacedParsesOrThrowsError) {
  // Systematic: each of the first 128 bytes of a NumPy file set to each character the grammar
  // cares about.
  const std::vector<unsigned char> original = bytes_of(kNumpyFloat32_2x3);
  for (size_t at = 0; at < 128; ++at) {
    for (char replacement : "\0{}(),:'\"-9L \n\\\xff\x80"sv) {
      std::vector<unsigned char> file = original;
      file[at] = static_cast<unsigned char>(replacement);
      ASSERT_TRUE(parses_or_throws_error(file)) << "byte " << at << " set to " << int{static_cast<unsigned char>(replacement)};
    }
  }
}

}  // namespace
}  // namespace rotary::npy
