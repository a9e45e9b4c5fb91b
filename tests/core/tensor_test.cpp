// tests/core/tensor_test.cpp: tensor.hpp — dtype and layout names, axis naming, element counts,
// and the bf16 / f16 conversions checked against a textbook reference written here.
//
// The reference rounds in double arithmetic from the definition: scale |x| by the target
// format's quantum at x's exponent (clamped to the subnormal exponent), pick the nearer of the
// two neighbouring integers (the even one on a tie), and call anything that rounds to
// 2^(emax+1) an overflow. It shares no code or constants with src/core/tensor.cpp's integer
// tricks. Decoding for the widening checks uses ldexp on the fields.
//
// Coverage of narrowing: a full sweep of the 2^32 float patterns takes 5.9 s (bf16) and 7.7 s
// (f16) for the library calls alone at -O2 on one core, and 82 s / 51 s with this reference on
// two, so the suite checks a dense sample: every 257th pattern (16.7M, all residues of the low
// bits), every rounding boundary of both formats (each representable value, the tie halfway to
// the next, and the float patterns next to both), and the special values. The full sweeps are
// the DISABLED_ tests (they pass); run them after changing a conversion with
// --gtest_also_run_disabled_tests --gtest_filter='Tensor.*AllFloats'.
#include "rotary/tensor.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "rotary/error.hpp"

namespace rotary {
namespace {

using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

// ---------------------------------------------------------------------------------------------
// Names, sizes, views.

TEST(Tensor, DtypeSizesAreStorageBytes) {
  EXPECT_EQ(dtype_size(DType::F32), 4);
  EXPECT_EQ(dtype_size(DType::BF16), 2);
  EXPECT_EQ(dtype_size(DType::F16), 2);
  EXPECT_EQ(dtype_size(DType::F64), 8);
}

TEST(Tensor, DtypeNamesRoundTrip) {
  for (DType dtype : {DType::F32, DType::BF16, DType::F16, DType::F64}) {
    EXPECT_EQ(parse_dtype(to_string(dtype)), dtype) << to_string(dtype);
  }
  EXPECT_EQ(to_string(DType::F32), "float32");
  EXPECT_EQ(to_string(DType::BF16), "bfloat16");
  EXPECT_EQ(to_string(DType::F16), "float16");
  EXPECT_EQ(to_string(DType::F64), "float64");
}

TEST(Tensor, ParseDtypeAcceptsShortAndFrameworkSpellings) {
  EXPECT_EQ(parse_dtype("f32"), DType::F32);
  EXPECT_EQ(parse_dtype("fp32"), DType::F32);
  EXPECT_EQ(parse_dtype("bf16"), DType::BF16);
  EXPECT_EQ(parse_dtype("f16"), DType::F16);
  EXPECT_EQ(parse_dtype("fp16"), DType::F16);
  EXPECT_EQ(parse_dtype("half"), DType::F16);
  EXPECT_EQ(parse_dtype("f64"), DType::F64);
}

TEST(Tensor, ParseDtypeRejectsUnknownNames) {
  for (const char* name : {"", "float", "int64", "Float32", "bfloat", "fp8", "float32 ", "double"}) {
    EXPECT_EQ(parse_dtype(name), std::nullopt) << '"' << name << '"';
  }
}

TEST(Tensor, LayoutNamesRoundTripInLowerCase) {
  EXPECT_EQ(to_string(Layout::BSHD), "bshd");
  EXPECT_EQ(to_string(Layout::BHSD), "bhsd");
  EXPECT_EQ(to_string(Layout::SBHD), "sbhd");
  EXPECT_EQ(to_string(Layout::THD), "thd");
  for (Layout layout : {Layout::BSHD, Layout::BHSD, Layout::SBHD, Layout::THD}) {
    EXPECT_EQ(parse_layout(to_string(layout)), layout) << to_string(layout);
  }
  for (const char* name : {"", "BSHD", "bsh", "hsd", "thd ", "tbhd"}) {
    EXPECT_EQ(parse_layout(name), std::nullopt) << '"' << name << '"';
  }
}

TEST(Tensor, LayoutRankIsThreeOnlyForThd) {
  EXPECT_EQ(layout_rank(Layout::BSHD), 4);
  EXPECT_EQ(layout_rank(Layout::BHSD), 4);
  EXPECT_EQ(layout_rank(Layout::SBHD), 4);
  EXPECT_EQ(layout_rank(Layout::THD), 3);
}

TEST(Tensor, ContiguousViewHasCOrderStrides) {
  float storage[1];
  const TensorView view = contiguous_view(storage, DType::BF16, Layout::BHSD, {2, 3, 5, 7});
  EXPECT_EQ(view.data, storage);
  EXPECT_EQ(view.dtype, DType::BF16);
  EXPECT_EQ(view.layout, Layout::BHSD);
  EXPECT_EQ(view.shape, (std::array<int64_t, 4>{2, 3, 5, 7}));
  EXPECT_EQ(view.stride_elems, (std::array<int64_t, 4>{105, 35, 7, 1}));
}

TEST(Tensor, ContiguousThdViewHasUnitFourthAxis) {
  const TensorView view = contiguous_view(nullptr, DType::F32, Layout::THD, {11, 4, 64, 99});
  EXPECT_EQ(view.shape, (std::array<int64_t, 4>{11, 4, 64, 1}));
  EXPECT_EQ(view.stride_elems, (std::array<int64_t, 4>{256, 64, 1, 1}));
}

TEST(Tensor, ContiguousViewOfEmptyTensorKeepsInnerStrides) {
  const TensorView view = contiguous_view(nullptr, DType::F32, Layout::SBHD, {0, 2, 3, 4});
  EXPECT_EQ(view.stride_elems, (std::array<int64_t, 4>{24, 12, 4, 1}));
  EXPECT_EQ(element_count(view, "q"), 0);
}

// Strides chosen distinct and non-contiguous (padded heads, a gap between sequences) so that a
// swapped axis shows up as a wrong number.
TensorView strided(Layout layout, std::array<int64_t, 4> shape, std::array<int64_t, 4> strides) {
  TensorView view;
  view.layout = layout;
  view.shape = shape;
  view.stride_elems = strides;
  return view;
}

void expect_axes(const NamedAxes& axes, std::array<int64_t, 4> extents, std::array<int64_t, 4> strides) {
  EXPECT_EQ(axes.batch, extents[0]);
  EXPECT_EQ(axes.seq, extents[1]);
  EXPECT_EQ(axes.heads, extents[2]);
  EXPECT_EQ(axes.dim, extents[3]);
  EXPECT_EQ(axes.stride_batch, strides[0]);
  EXPECT_EQ(axes.stride_seq, strides[1]);
  EXPECT_EQ(axes.stride_heads, strides[2]);
  EXPECT_EQ(axes.stride_dim, strides[3]);
}

TEST(Tensor, NamedAxesOfStridedBshd) {
  const TensorView view = strided(Layout::BSHD, {2, 3, 5, 7}, {1000, 300, 10, 2});
  expect_axes(named_axes(view), {2, 3, 5, 7}, {1000, 300, 10, 2});
}

TEST(Tensor, NamedAxesOfStridedBhsdSwapsSeqAndHeads) {
  const TensorView view = strided(Layout::BHSD, {2, 5, 3, 7}, {1000, 150, 40, 1});
  expect_axes(named_axes(view), {2, 3, 5, 7}, {1000, 40, 150, 1});
}

TEST(Tensor, NamedAxesOfStridedSbhdSwapsBatchAndSeq) {
  const TensorView view = strided(Layout::SBHD, {3, 2, 5, 7}, {900, 400, 72, 1});
  expect_axes(named_axes(view), {2, 3, 5, 7}, {400, 900, 72, 1});
}

TEST(Tensor, NamedAxesOfStridedThdIsOneBatchOfAllTokens) {
  const TensorView view = strided(Layout::THD, {13, 5, 7, 1}, {96, 16, 2, 1});
  expect_axes(named_axes(view), {1, 13, 5, 7}, {0, 96, 16, 2});
}

TEST(Tensor, NamedAxesOfContiguousViewsAgreeAcrossLayouts) {
  // The same logical tensor (batch 2, seq 3, heads 5, dim 7) in each layout: dim is always the
  // unit stride and each named stride is the product of the extents stored after it.
  expect_axes(named_axes(contiguous_view(nullptr, DType::F32, Layout::BSHD, {2, 3, 5, 7})), {2, 3, 5, 7},
              {105, 35, 7, 1});
  expect_axes(named_axes(contiguous_view(nullptr, DType::F32, Layout::BHSD, {2, 5, 3, 7})), {2, 3, 5, 7},
              {105, 7, 21, 1});
  expect_axes(named_axes(contiguous_view(nullptr, DType::F32, Layout::SBHD, {3, 2, 5, 7})), {2, 3, 5, 7},
              {35, 70, 7, 1});
  expect_axes(named_axes(contiguous_view(nullptr, DType::F32, Layout::THD, {6, 5, 7, 0})), {1, 6, 5, 7},
              {0, 35, 7, 1});
}

TEST(Tensor, ElementCountIsProductOverLayoutRank) {
  EXPECT_EQ(element_count(contiguous_view(nullptr, DType::F32, Layout::BSHD, {2, 3, 5, 7}), "q"), 210);
  // THD ignores the fourth entry, whatever it holds.
  EXPECT_EQ(element_count(strided(Layout::THD, {13, 5, 7, -4}, {}), "q"), 455);
  EXPECT_EQ(element_count(strided(Layout::THD, {13, 5, 7, 0}, {}), "q"), 455);
}

TEST(Tensor, ElementCountRejectsNegativeDimensionNamingIt) {
  const TensorView view = strided(Layout::BSHD, {2, 3, -3, 7}, {});
  EXPECT_THAT([&] { element_count(view, "q"); },
              ThrowsMessage<rotary::Error>(HasSubstr("tensor q: shape[2] must be >= 0 (got -3)")));
  const TensorView thd = strided(Layout::THD, {-1, 3, 4, 1}, {});
  EXPECT_THAT([&] { element_count(thd, "k_out"); },
              ThrowsMessage<rotary::Error>(HasSubstr("tensor k_out: shape[0] must be >= 0 (got -1)")));
}

TEST(Tensor, ElementCountRejectsNegativeDimensionEvenWhenAnotherIsZero) {
  const TensorView view = strided(Layout::BHSD, {0, 3, 4, -8}, {});
  EXPECT_THAT([&] { element_count(view, "q"); }, ThrowsMessage<rotary::Error>(HasSubstr("shape[3] must be >= 0 (got -8)")));
}

TEST(Tensor, ElementCountRejectsInt64Overflow) {
  const TensorView view = strided(Layout::BSHD, {int64_t{1} << 32, int64_t{1} << 16, int64_t{1} << 15, 1}, {});
  EXPECT_THAT([&] { element_count(view, "k"); },
              ThrowsMessage<rotary::Error>(HasSubstr(
                  "tensor k: element count must fit in int64 (got shape bshd (4294967296, 65536, 32768, 1))")));
  const int64_t max = std::numeric_limits<int64_t>::max();
  EXPECT_THAT([&] { element_count(strided(Layout::THD, {max, 2, 1, 1}, {}), "q"); },
              ThrowsMessage<rotary::Error>(HasSubstr("element count must fit in int64")));
}

TEST(Tensor, ElementCountAcceptsLargestRepresentableProducts) {
  const int64_t max = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(element_count(strided(Layout::BSHD, {max, 1, 1, 1}, {}), "q"), max);
  // 3037000499^2 is the largest square below 2^63; one more in any factor overflows.
  EXPECT_EQ(element_count(strided(Layout::BHSD, {3037000499, 1, 3037000499, 1}, {}), "q"), 9223372030926249001);
  EXPECT_THAT([&] { element_count(strided(Layout::BHSD, {3037000500, 1, 3037000500, 1}, {}), "q"); },
              ThrowsMessage<rotary::Error>(HasSubstr("element count must fit in int64")));
}

TEST(Tensor, ElementCountOfZeroSizedTensorIsZeroEvenWithHugeExtents) {
  // The product of the other extents would overflow, but the tensor holds nothing.
  const int64_t big = int64_t{1} << 62;
  EXPECT_EQ(element_count(strided(Layout::BSHD, {big, big, 0, big}, {}), "q"), 0);
}

// ---------------------------------------------------------------------------------------------
// Conversions: the reference.

// A binary floating-point format with `precision` significand bits (implicit bit included),
// normal exponents [min_exponent, max_exponent] and subnormals below.
struct Format {
  const char* name;
  int precision;
  int min_exponent;
  int max_exponent;
  uint16_t (*narrow)(float);  // the library's conversions under test
  float (*widen)(uint16_t);
};
const Format kBf16{"bfloat16", 8, -126, 127, float_to_bf16, bf16_to_float};
const Format kF16{"float16", 11, -14, 15, float_to_f16, f16_to_float};

// The value of x rounded to `format`, to nearest, ties to even; +-inf on overflow; zero keeps
// its sign. x must not be NaN.
double reference_round(float x, const Format& format) {
  const double magnitude = std::fabs(static_cast<double>(x));
  if (magnitude == 0.0 || std::isinf(magnitude)) return static_cast<double>(x);
  int exponent_plus_one = 0;
  std::frexp(magnitude, &exponent_plus_one);  // magnitude in [2^(e-1), 2^e)
  const int exponent = std::max(exponent_plus_one - 1, format.min_exponent);
  const double quantum = std::ldexp(1.0, exponent - (format.precision - 1));
  const double units = magnitude / quantum;  // exact: a power-of-two scaling
  double rounded = std::floor(units);
  const double fraction = units - rounded;
  if (fraction > 0.5 || (fraction == 0.5 && static_cast<int64_t>(rounded) % 2 == 1)) rounded += 1.0;
  double result = rounded * quantum;
  // With an unbounded exponent the rounded value is at most 2^(emax+1); reaching it overflows.
  if (result >= std::ldexp(1.0, format.max_exponent + 1)) result = std::numeric_limits<double>::infinity();
  return std::copysign(result, static_cast<double>(x));
}

// Decodes a 16-bit pattern of `format` from its fields (1 sign, 15 - (precision - 1) exponent,
// precision - 1 mantissa bits). NaN for the all-ones exponent with a nonzero mantissa.
double reference_decode(uint16_t bits, const Format& format) {
  const int mantissa_bits = format.precision - 1;
  const int exponent_field = (bits & 0x7FFF) >> mantissa_bits;
  const int mantissa = bits & ((1 << mantissa_bits) - 1);
  const int all_ones = (1 << (15 - mantissa_bits)) - 1;
  const double sign = (bits & 0x8000) ? -1.0 : 1.0;
  if (exponent_field == all_ones) {
    return mantissa == 0 ? sign * std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  }
  if (exponent_field == 0) return sign * std::ldexp(mantissa, format.min_exponent - mantissa_bits);
  const int bias = format.max_exponent;
  return sign * std::ldexp((1 << mantissa_bits) + mantissa, exponent_field - bias - mantissa_bits);
}

uint16_t quiet_bit(const Format& format) { return static_cast<uint16_t>(1u << (format.precision - 2)); }

// Whether the library narrows x as the reference does. NaN must give a quiet NaN of the same
// sign (the payload may change).
bool narrows_correctly(uint32_t pattern, const Format& format) {
  const float x = std::bit_cast<float>(pattern);
  const uint16_t bits = format.narrow(x);
  const bool same_sign = ((bits & 0x8000) != 0) == ((pattern & 0x80000000u) != 0);
  if (std::isnan(x)) return same_sign && std::isnan(reference_decode(bits, format)) && (bits & quiet_bit(format));
  const double expected = reference_round(x, format);
  return same_sign && reference_decode(bits, format) == expected;
}

// Checks a batch of patterns, reporting the first few failures with their bits.
void check_narrowing(const std::vector<uint32_t>& patterns, const Format& format) {
  int failures = 0;
  for (uint32_t pattern : patterns) {
    if (narrows_correctly(pattern, format)) continue;
    if (++failures <= 10) {
      ADD_FAILURE() << format.name << ": float bits 0x" << std::hex << pattern << " (" << std::bit_cast<float>(pattern)
                    << ") narrowed to 0x" << format.narrow(std::bit_cast<float>(pattern));
    }
  }
  EXPECT_EQ(failures, 0) << format.name;
}

// Float patterns next to every rounding boundary of `format`: each representable value v, the
// tie halfway to the next larger magnitude, one and two float ulps either side of both, for
// both signs. The midpoint of two neighbours needs precision + 1 bits, so it is a float.
std::vector<uint32_t> boundary_patterns(const Format& format) {
  std::vector<uint32_t> patterns;
  const double largest_finite = std::ldexp(2.0 - std::ldexp(1.0, 1 - format.precision), format.max_exponent);
  for (uint32_t bits = 0; bits < 0x8000; ++bits) {
    const double value = reference_decode(static_cast<uint16_t>(bits), format);
    if (std::isnan(value) || std::isinf(value)) continue;
    // The next magnitude past the largest finite value is 2^(emax+1) for rounding purposes.
    const double next = value == largest_finite ? std::ldexp(1.0, format.max_exponent + 1)
                                                : reference_decode(static_cast<uint16_t>(bits + 1), format);
    for (double anchor : {value, (value + next) / 2}) {
      const auto center = std::bit_cast<uint32_t>(static_cast<float>(anchor));
      for (int offset = -2; offset <= 2; ++offset) {
        const uint32_t pattern = center + static_cast<uint32_t>(offset);
        if (offset < 0 && center < static_cast<uint32_t>(-offset)) continue;  // below +0
        patterns.push_back(pattern);
        patterns.push_back(pattern | 0x80000000u);
      }
    }
  }
  return patterns;
}

std::vector<uint32_t> special_patterns() {
  std::vector<uint32_t> patterns = {
      0x00000000u, 0x80000000u,                              // signed zeros
      0x7F800000u, 0xFF800000u,                              // infinities
      0x7F7FFFFFu, 0xFF7FFFFFu,                              // largest finite float
      0x7F7F7FFFu, 0x7F7F8000u, 0x7F7F8001u,                 // around bf16's overflow threshold
      0x477FEFFFu, 0x477FF000u, 0x477FF001u, 0x477FE000u,    // around 65520, f16's threshold
      0x00000001u, 0x807FFFFFu, 0x00400000u, 0x00008000u,    // float subnormals
      0x33000000u, 0x33000001u, 0x32FFFFFFu, 0xB3000000u,    // around 2^-25, half the least f16
      0x38800000u, 0x387FFFFFu, 0x387FE000u, 0x387FF000u,    // around 2^-14, f16's least normal
  };
  // NaNs: signalling with payloads in the low bits only (which truncation would turn into
  // infinity), in the high bits only, quiet, both signs.
  for (uint32_t payload : {0x1u, 0x2u, 0xFFFFu, 0x1000u, 0x1FFFu, 0x2000u, 0x10000u, 0x200000u, 0x3FFFFFu, 0x400000u,
                           0x400001u, 0x7FFFFFu}) {
    patterns.push_back(0x7F800000u | payload);
    patterns.push_back(0xFF800000u | payload);
  }
  return patterns;
}

std::vector<uint32_t> every_257th_pattern() {
  std::vector<uint32_t> patterns;
  patterns.reserve((uint64_t{1} << 32) / 257 + 1);
  for (uint64_t pattern = 0; pattern < (uint64_t{1} << 32); pattern += 257) patterns.push_back(static_cast<uint32_t>(pattern));
  return patterns;
}

TEST(Tensor, ReferenceRoundingAgreesWithKnownValues) {
  // Guards the reference itself with values worked out by hand.
  EXPECT_EQ(reference_round(1.0f + 0x1p-8f, kBf16), 1.0);                 // tie, 1.0 is even
  EXPECT_EQ(reference_round(1.0f + 3 * 0x1p-8f, kBf16), 1.0 + 0x1p-6);    // tie, rounds up to even
  EXPECT_EQ(reference_round(65519.0f, kF16), 65504.0);
  EXPECT_EQ(reference_round(65520.0f, kF16), std::numeric_limits<double>::infinity());
  EXPECT_EQ(reference_round(0x1p-25f, kF16), 0.0);                        // tie with 0
  EXPECT_EQ(reference_round(0x1.8p-25f, kF16), 0x1p-24);
  EXPECT_EQ(reference_round(3 * 0x1p-25f, kF16), 2 * 0x1p-24);             // tie, to even
  EXPECT_EQ(reference_decode(0x7BFF, kF16), 65504.0);
  EXPECT_EQ(reference_decode(0x0001, kF16), 0x1p-24);
  EXPECT_EQ(reference_decode(0x3F80, kBf16), 1.0);
  EXPECT_EQ(reference_decode(0x0001, kBf16), 0x1p-133);
}

// ---------------------------------------------------------------------------------------------
// Conversions: the tests.

TEST(Tensor, Bf16NarrowingKnownValues) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(float_to_bf16(-2.0f), 0xC000);
  EXPECT_EQ(float_to_bf16(1.0f + 0x1p-8f), 0x3F80);      // tie to even (down)
  EXPECT_EQ(float_to_bf16(1.0f + 3 * 0x1p-8f), 0x3F82);  // tie to even (up)
  EXPECT_EQ(float_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x7F7FFFFFu)), 0x7F80);  // max float overflows
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0x7F800001u)), 0x7FC0);  // not truncated to inf
  EXPECT_EQ(float_to_bf16(std::bit_cast<float>(0xFFFFFFFFu)), 0xFFFF);
}

TEST(Tensor, F16NarrowingKnownValues) {
  EXPECT_EQ(float_to_f16(1.0f), 0x3C00);
  EXPECT_EQ(float_to_f16(-2.0f), 0xC000);
  EXPECT_EQ(float_to_f16(65504.0f), 0x7BFF);
  EXPECT_EQ(float_to_f16(65519.99f), 0x7BFF);
  EXPECT_EQ(float_to_f16(65520.0f), 0x7C00);
  EXPECT_EQ(float_to_f16(-1e10f), 0xFC00);
  EXPECT_EQ(float_to_f16(0x1p-24f), 0x0001);
  EXPECT_EQ(float_to_f16(0x1p-25f), 0x0000);
  EXPECT_EQ(float_to_f16(-0x1p-26f), 0x8000);
  EXPECT_EQ(float_to_f16(0x1.ff8p-15f), 0x03FF);  // largest subnormal
  EXPECT_EQ(float_to_f16(0x1.ffcp-15f), 0x0400);  // ... plus half an ulp: a tie, to the even least normal
  EXPECT_EQ(float_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(float_to_f16(std::bit_cast<float>(0x7F800001u)), 0x7E00);
  EXPECT_EQ(float_to_f16(std::numeric_limits<float>::infinity()), 0x7C00);
}

TEST(Tensor, Bf16NarrowingMatchesReferenceOnDenseSample) {
  check_narrowing(special_patterns(), kBf16);
  check_narrowing(boundary_patterns(kBf16), kBf16);
  check_narrowing(boundary_patterns(kF16), kBf16);
  check_narrowing(every_257th_pattern(), kBf16);
}

TEST(Tensor, F16NarrowingMatchesReferenceOnDenseSample) {
  check_narrowing(special_patterns(), kF16);
  check_narrowing(boundary_patterns(kF16), kF16);
  check_narrowing(boundary_patterns(kBf16), kF16);
  check_narrowing(every_257th_pattern(), kF16);
}

// All 2^32 patterns, split over the hardware threads. Minutes under the sanitizers.
void check_all_floats(const Format& format) {
  const unsigned num_threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<uint64_t> failures(num_threads, 0);
  std::vector<uint32_t> first_failure(num_threads, 0);
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < num_threads; ++t) {
    threads.emplace_back([&, t] {
      for (uint64_t pattern = t; pattern < (uint64_t{1} << 32); pattern += num_threads) {
        if (!narrows_correctly(static_cast<uint32_t>(pattern), format) && failures[t]++ == 0) {
          first_failure[t] = static_cast<uint32_t>(pattern);
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (unsigned t = 0; t < num_threads; ++t) {
    EXPECT_EQ(failures[t], 0u) << format.name << ": first failure at float bits 0x" << std::hex << first_failure[t];
  }
}

TEST(Tensor, DISABLED_Bf16NarrowingMatchesReferenceOnAllFloats) { check_all_floats(kBf16); }
TEST(Tensor, DISABLED_F16NarrowingMatchesReferenceOnAllFloats) { check_all_floats(kF16); }

// Widening is exact (checked against the field decoding) and narrowing undoes it, for every
// 16-bit pattern. NaN stays NaN of the same sign; a quiet NaN keeps its exact bits, a
// signalling one gains the quiet bit.
void check_widening(const Format& format) {
  int failures = 0;
  for (uint32_t bits = 0; bits <= 0xFFFF; ++bits) {
    const auto pattern = static_cast<uint16_t>(bits);
    const float wide = format.widen(pattern);
    const double expected = reference_decode(pattern, format);
    const uint16_t back = format.narrow(wide);
    bool ok = false;
    if (std::isnan(expected)) {
      ok = std::isnan(wide) && std::signbit(wide) == ((bits & 0x8000) != 0) &&
           back == static_cast<uint16_t>(pattern | quiet_bit(format));
    } else {
      ok = static_cast<double>(wide) == expected && std::signbit(wide) == ((bits & 0x8000) != 0) && back == pattern;
    }
    if (!ok && ++failures <= 10) {
      ADD_FAILURE() << format.name << ": 0x" << std::hex << bits << " widened to " << wide << ", narrowed back to 0x"
                    << back;
    }
  }
  EXPECT_EQ(failures, 0) << format.name;
}

TEST(Tensor, Bf16WideningIsExactAndRoundTripsAllPatterns) { check_widening(kBf16); }
TEST(Tensor, F16WideningIsExactAndRoundTripsAllPatterns) { check_widening(kF16); }

}  // namespace
}  // namespace rotary
