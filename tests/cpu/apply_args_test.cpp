// tests/cpu/apply_args_test.cpp: check_apply_arguments, pair_streams, position_streams and
// to_string(Direction) (include/rotary/apply.hpp).
//
// Every rejected call is checked three ways: check_apply_arguments throws rotary::Error whose
// message names the argument and quotes its value; reference::apply throws the same; and no
// buffer changed (nothing is written on error).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <utility>
#include <string>
#include <vector>

#include "rotary/apply.hpp"
#include "rotary/error.hpp"
#include "rotary/spec.hpp"
#include "rotary/table.hpp"
#include "rotary/tensor.hpp"
#include "tests/support/spec_builder.hpp"

namespace rotary {
namespace {

using ::testing::HasSubstr;

RopeSpec small_spec(int64_t rotary_dim = 16) { return test::rope_spec({.name = "args", .head_dim = rotary_dim}); }

RopeSpec mrope_spec() {
  RopeSpec spec = small_spec(16);
  spec.axes = PositionAxes::MRope;
  spec.mrope.pairs = {2, 3, 3};
  return spec;
}

// One valid call, which each test breaks in one way: q (2, 5, 4, 16) and k (2, 5, 2, 16)
// float32 BSHD, separate outputs, per-token positions, a table of exactly 4096 positions
// (max_position 4095). Buffers are larger than the views so that tests can move views around.
struct Call {
  static constexpr size_t kBufferFloats = 4096;

  explicit Call(const RopeSpec& spec = small_spec(), int64_t fixed_positions = 4096) {
    TableOptions table_options;
    table_options.fixed_positions = fixed_positions;
    table = std::make_unique<CosSinTable>(spec, table_options);
    for (std::vector<float>* buffer : {&q_buf, &k_buf, &q_out_buf, &k_out_buf}) buffer->assign(kBufferFloats, 0.0f);
    for (size_t i = 0; i < kBufferFloats; ++i) {
      q_buf[i] = 0.5f + static_cast<float>(i % 7) * 0.25f;
      k_buf[i] = -0.75f - static_cast<float>(i % 5) * 0.125f;
      q_out_buf[i] = 7.0f;  // sentinels: must survive a rejected call
      k_out_buf[i] = -7.0f;
    }
    q = contiguous_view(q_buf.data(), DType::F32, Layout::BSHD, {2, 5, 4, 16});
    k = contiguous_view(k_buf.data(), DType::F32, Layout::BSHD, {2, 5, 2, 16});
    q_out = contiguous_view(q_out_buf.data(), DType::F32, Layout::BSHD, {2, 5, 4, 16});
    k_out = contiguous_view(k_out_buf.data(), DType::F32, Layout::BSHD, {2, 5, 2, 16});
    set_per_token({0, 1, 2, 3, 4, 100, 101, 102, 103, 104});
  }
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

  void set_per_token(std::vector<int64_t> values) {
    per_token = std::move(values);
    positions = Positions::per_token(per_token, positions.cu_seqlens);
  }
  void set_offsets(std::vector<int64_t> values) {
    offsets = std::move(values);
    positions = Positions::sequence_offsets(offsets, positions.cu_seqlens);
  }
  // THD: q (10, 4, 16), k (10, 2, 16), cu_seqlens {0, 4, 10}, no positions.
  void make_thd() {
    q = contiguous_view(q_buf.data(), DType::F32, Layout::THD, {10, 4, 16});
    k = contiguous_view(k_buf.data(), DType::F32, Layout::THD, {10, 2, 16});
    q_out = contiguous_view(q_out_buf.data(), DType::F32, Layout::THD, {10, 4, 16});
    k_out = contiguous_view(k_out_buf.data(), DType::F32, Layout::THD, {10, 2, 16});
    cu_seqlens = {0, 4, 10};
    positions = Positions::arange(cu_seqlens);
  }

  // Keeps the source and its values.
  void set_cu_seqlens(std::vector<int64_t> values) {
    cu_seqlens = std::move(values);
    positions.cu_seqlens = cu_seqlens;
  }

  void check() const { check_apply_arguments(q, k, q_out, k_out, positions, *table, options); }
  void run() const { reference::apply(q, k, q_out, k_out, positions, *table, options); }
  std::vector<std::vector<float>> buffers() const { return {q_buf, k_buf, q_out_buf, k_out_buf}; }

  std::vector<float> q_buf, k_buf, q_out_buf, k_out_buf;
  TensorView q, k, q_out, k_out;
  std::vector<int64_t> per_token;
  std::vector<int64_t> cu_seqlens;
  std::vector<int64_t> offsets;
  Positions positions;
  ApplyOptions options;
  std::unique_ptr<CosSinTable> table;
};

// The call is rejected with a message starting "apply: " and containing every part; reference::apply
// rejects it the same way; no buffer changed.
void expect_rejected(const Call& call, const std::vector<std::string>& parts) {
  std::vector<::testing::Matcher<std::string>> matchers = {::testing::StartsWith("apply: ")};
  for (const std::string& part : parts) matchers.push_back(HasSubstr(part));
  const auto before = call.buffers();
  EXPECT_THAT([&] { call.check(); }, ::testing::ThrowsMessage<Error>(::testing::AllOfArray(matchers)));
  EXPECT_THAT([&] { call.run(); }, ::testing::ThrowsMessage<Error>(::testing::AllOfArray(matchers)));
  EXPECT_TRUE(call.buffers() == before) << "a rejected call wrote to memory";
}

// ---- accepted calls ---------------------------------------------------------------------------

TEST(ApplyArgs, AcceptsTheBaseCall) {
  Call call;
  EXPECT_NO_THROW(call.check());
  EXPECT_NO_THROW(call.run());
  EXPECT_NE(call.q_out_buf[20], 7.0f);
}

TEST(ApplyArgs, AcceptsExactInPlace) {
  Call call;
  call.q_out = call.q;
  call.k_out = call.k;
  EXPECT_NO_THROW(call.check());
}

TEST(ApplyArgs, AcceptsAbsentKAndKOut) {
  Call call;
  call.k = TensorView{};
  call.k_out = TensorView{};
  EXPECT_NO_THROW(call.run());
  EXPECT_EQ(call.k_out_buf[0], -7.0f);
}

// q and k cut from one packed qkv buffer [batch, seq, 4 + 2 + 2 heads, dim] share strides and
// interleave in memory: their byte spans overlap but no element is shared, so rotating both
// in place is accepted, and gives what rotating copies does.
TEST(ApplyArgs, AcceptsInPlaceOnPackedQkv) {
  Call call;
  std::vector<float> packed(2 * 5 * 8 * 16);
  for (size_t i = 0; i < packed.size(); ++i) packed[i] = 0.25f + static_cast<float>(i % 11) * 0.125f;
  TensorView qkv = contiguous_view(packed.data(), DType::F32, Layout::BSHD, {2, 5, 8, 16});
  TensorView q = qkv, k = qkv;
  q.shape[2] = 4;
  k.shape[2] = 2;
  k.data = packed.data() + 4 * 16;
  const std::vector<float> original = packed;
  // Out of place on copies first.
  std::vector<float> q_copy(2 * 5 * 4 * 16), k_copy(2 * 5 * 2 * 16);
  const TensorView q_copy_view = contiguous_view(q_copy.data(), DType::F32, Layout::BSHD, {2, 5, 4, 16});
  const TensorView k_copy_view = contiguous_view(k_copy.data(), DType::F32, Layout::BSHD, {2, 5, 2, 16});
  reference::apply(q, k, q_copy_view, k_copy_view, call.positions, *call.table);
  EXPECT_NO_THROW(check_apply_arguments(q, k, q, k, call.positions, *call.table, {}));
  reference::apply(q, k, q, k, call.positions, *call.table);
  for (int64_t t = 0; t < 10; ++t) {
    for (int64_t i = 0; i < 4 * 16; ++i) EXPECT_EQ(packed[t * 128 + i], q_copy[t * 64 + i]);
    for (int64_t i = 0; i < 2 * 16; ++i) EXPECT_EQ(packed[t * 128 + 64 + i], k_copy[t * 32 + i]);
    for (int64_t i = 6 * 16; i < 128; ++i) EXPECT_EQ(packed[t * 128 + i], original[t * 128 + i]);  // v untouched
  }
}

// An output interleaved with its input (q on even heads, q_out on odd heads of one buffer):
// spans overlap, elements do not. Accepted.
TEST(ApplyArgs, AcceptsOutputInterleavedWithInput) {
  Call call;
  call.q.stride_elems = {5 * 8 * 16, 8 * 16, 2 * 16, 1};
  call.q_out = call.q;
  call.q_out.data = call.q_buf.data() + 16;
  EXPECT_NO_THROW(call.check());
}

TEST(ApplyArgs, AcceptsBroadcastInputStrideAndEmptyTensors) {
  Call call;
  call.q.stride_elems[2] = 0;  // every head reads the same 16 values
  EXPECT_NO_THROW(call.run());
  EXPECT_EQ(call.q_out_buf[0], call.q_out_buf[16]);

  Call empty;
  empty.q = contiguous_view(nullptr, DType::F32, Layout::BSHD, {0, 5, 4, 16});
  empty.q_out = empty.q;
  empty.k = contiguous_view(nullptr, DType::F32, Layout::BSHD, {0, 5, 2, 16});
  empty.k_out = empty.k;
  empty.set_per_token({});
  EXPECT_NO_THROW(empty.run());
}

TEST(ApplyArgs, AcceptsDifferentHeadDimsAndOutputDtypes) {
  Call call;
  call.options.rotary_offset = 8;
  call.q = contiguous_view(call.q_buf.data(), DType::F32, Layout::BSHD, {2, 5, 4, 24});
  call.q_out = contiguous_view(call.q_out_buf.data(), DType::BF16, Layout::BSHD, {2, 5, 4, 24});
  call.k = contiguous_view(call.k_buf.data(), DType::F32, Layout::BSHD, {2, 5, 2, 32});
  call.k_out = contiguous_view(call.k_out_buf.data(), DType::F64, Layout::BSHD, {2, 5, 2, 32});
  EXPECT_NO_THROW(call.run());
}

// ---- dtypes, layouts, shapes, strides and memory -------------------------------------------------

// One row per rejected call: what the row does to the base call (or to the THD call of
// make_thd() when `thd` is set; with another spec or table length when given), and the parts the
// message must contain.
struct RejectedCase {
  const char* name;
  std::function<void(Call&)> breaks;
  std::vector<std::string> parts;
  RopeSpec spec = small_spec();
  int64_t fixed_positions = 4096;
  bool thd = false;
};

const RejectedCase kViewCases[] = {
    {"UnknownDtypeNamingIt", [](Call& c) { c.q.dtype = static_cast<DType>(9); },
     {"q dtype must be float32, bfloat16, float16 or float64", "got enum value 9"}},
    {"UnknownLayoutNamingIt", [](Call& c) { c.k_out.layout = static_cast<Layout>(7); },
     {"k_out layout", "got enum value 7"}},
    {"KLayoutDifferentFromQ",
     [](Call& c) {
       c.k = contiguous_view(c.k_buf.data(), DType::F32, Layout::BHSD, {2, 2, 5, 16});
       c.k_out = contiguous_view(c.k_out_buf.data(), DType::F32, Layout::BHSD, {2, 2, 5, 16});
     },
     {"k layout must equal q's layout bshd", "got bhsd"}},
    {"OutputShapeDifferentFromInput",
     [](Call& c) {
       c.q_out = contiguous_view(c.q_out_buf.data(), DType::F32, Layout::BSHD, {2, 5, 4, 18});
     },
     {"q_out shape must equal q's shape bshd (2, 5, 4, 16)", "got bshd (2, 5, 4, 18)"}},
    {"BatchMismatchBetweenQAndK",
     [](Call& c) {
       c.k = contiguous_view(c.k_buf.data(), DType::F32, Layout::BSHD, {1, 5, 2, 16});
       c.k_out = contiguous_view(c.k_out_buf.data(), DType::F32, Layout::BSHD, {1, 5, 2, 16});
     },
     {"k batch must equal q's batch 2", "got 1"}},
    {"SeqMismatchBetweenQAndK",
     [](Call& c) {
       c.k = contiguous_view(c.k_buf.data(), DType::F32, Layout::BSHD, {2, 4, 2, 16});
       c.k_out = contiguous_view(c.k_out_buf.data(), DType::F32, Layout::BSHD, {2, 4, 2, 16});
     },
     {"k seq must equal q's seq 5", "got 4"}},
    {"TokenMismatchBetweenQAndKInThd",
     [](Call& c) {
       c.make_thd();
       c.k = contiguous_view(c.k_buf.data(), DType::F32, Layout::THD, {9, 2, 16});
       c.k_out = contiguous_view(c.k_out_buf.data(), DType::F32, Layout::THD, {9, 2, 16});
     },
     {"k tokens must equal q's tokens 10", "got 9"}},
    {"OddHeadDimSmallerThanRotaryDim",
     [](Call& c) {
       c.q = contiguous_view(c.q_buf.data(), DType::F32, Layout::BSHD, {2, 5, 4, 15});
       c.q_out = contiguous_view(c.q_out_buf.data(), DType::F32, Layout::BSHD, {2, 5, 4, 15});
     },
     {"q head_dim must be >= options.rotary_offset + rotary_dim = 0 + 16", "got 15"}},
    {"KHeadDimTooSmallForRotaryOffset",
     [](Call& c) {
       c.options.rotary_offset = 4;
       c.q = contiguous_view(c.q_buf.data(), DType::F32, Layout::BSHD, {2, 5, 4, 24});
       c.q_out = contiguous_view(c.q_out_buf.data(), DType::F32, Layout::BSHD, {2, 5, 4, 24});
     },
     {"k head_dim must be >= options.rotary_offset + rotary_dim = 4 + 16", "got 16"}},
    {"NegativeShape", [](Call& c) { c.q.shape[1] = -5; },
     {"q shape[1] (seq) must be >= 0", "got -5"}},
    {"ShapeWhoseElementCountOverflows", [](Call& c) { c.q.shape = {int64_t{1} << 40, int64_t{1} << 40, 4, 16}; },
     {"q", "element count must fit in int64", "1099511627776"}},
    {"TokenCountOverflowEvenWithNoHeads", [](Call& c) { c.q.shape = {int64_t{1} << 40, int64_t{1} << 40, 0, 16}; },
     {"q token count batch x seq must fit in int64", "1099511627776"}},
    {"NullDataForNonEmptyTensor", [](Call& c) { c.q.data = nullptr; },
     {"q data must not be null", "got null data with shape bshd (2, 5, 4, 16)"}},
    {"KWithoutKOut", [](Call& c) { c.k_out = TensorView{}; },
     {"k_out must be given when k is", "got k_out empty"}},
    {"KOutWithoutK", [](Call& c) { c.k = TensorView{}; },
     {"k must be given when k_out is", "got k empty"}},
    {"NegativeStride", [](Call& c) { c.q.stride_elems[2] = -16; },
     {"q stride_elems[2] (heads) must be >= 0", "got -16"}},
    {"ZeroOutputStrideOnAxisLongerThanOne", [](Call& c) { c.q_out.stride_elems[2] = 0; },
     {"q_out stride_elems[2] (heads) must be > 0 on an output axis of extent 4", "got 0"}},
    {"OutputStridesMappingTwoElementsToOneAddress",
     [](Call& c) {
       c.k_out.stride_elems = {160, 32, 8, 1};  // heads 8 apart, but a head is 16 long
     },
     {"k_out strides must give every output element its own address", "got stride_elems [160, 32, 8, 1] for shape bshd (2, 5, 2, 16)"}},
    {"StridesAddressingPastTheAddressSpace", [](Call& c) { c.q.stride_elems[0] = int64_t{1} << 62; },
     {"q shape and strides must address fewer than 2^63 bytes", "4611686018427387904"}},
    {"OutputShiftedOneElementIntoItsInput",
     [](Call& c) {
       c.q_out = c.q;
       c.q_out.data = c.q_buf.data() + 1;
     },
     {"q_out partially overlaps q", "got q_out.data = q.data + 4 bytes"}},
    {"InPlaceWithDifferentOutputDtype",
     [](Call& c) {
       c.q_out = c.q;
       c.q_out.dtype = DType::BF16;
       // Contiguous bfloat16 over the first half of q's bytes.
       c.q_out.stride_elems = contiguous_view(nullptr, DType::BF16, Layout::BSHD, {2, 5, 4, 16}).stride_elems;
     },
     {"q_out partially overlaps q", "q_out.data = q.data + 0 bytes", "q_out bfloat16"}},
    {"InPlaceWithDifferentOutputStrides",
     [](Call& c) {
       c.q_out = contiguous_view(c.q_buf.data(), DType::F32, Layout::BHSD, {2, 4, 5, 16});
       // The same bytes seen in BHSD order, relabelled as BSHD: a transposing in-place call.
       std::swap(c.q_out.shape[1], c.q_out.shape[2]);
       std::swap(c.q_out.stride_elems[1], c.q_out.stride_elems[2]);
       c.q_out.layout = Layout::BSHD;
     },
     {"q_out partially overlaps q", "strides [320, 16, 80, 1]"}},
    {"OutputOfKOnTopOfQ",
     [](Call& c) {
       c.k_out = contiguous_view(c.q_buf.data() + 64, DType::F32, Layout::BSHD, {2, 5, 2, 16});
     },
     {"k_out overlaps q", "k_out.data = q.data + 256 bytes"}},
    {"QOutOnTopOfK",
     [](Call& c) {
       c.k = contiguous_view(c.k_buf.data(), DType::F32, Layout::BSHD, {2, 5, 2, 16});
       c.q_out = contiguous_view(c.k_buf.data(), DType::F32, Layout::BSHD, {2, 5, 4, 16});
     },
     {"q_out overlaps k", "q_out.data = k.data + 0 bytes"}},
    {"OverlappingOutputs",
     [](Call& c) {
       c.k_out = contiguous_view(c.q_out_buf.data() + 600, DType::F32, Layout::BSHD, {2, 5, 2, 16});
     },
     {"k_out overlaps q_out", "k_out.data = q_out.data + 2400 bytes"}},
};

// ---- positions --------------------------------------------------------------------------------

// One row per broken positions argument (per-token positions for BSHD q (2, 5, 4, 16) and a
// 4096-position table in the base call; `thd` rows start from make_thd()).
std::vector<int64_t> mrope_positions_with(int64_t index, int64_t value) {
  std::vector<int64_t> streams(30, 5);
  streams[static_cast<size_t>(index)] = value;
  return streams;
}

const RejectedCase kPositionsCases[] = {
    {"WrongPerTokenCount", [](Call& c) { c.set_per_token({0, 1, 2, 3, 4, 5, 6, 7, 8}); },
     {"positions.values.size() must equal tokens x streams = 10 x 1 = 10 for per_token", "got 9"}},
    {"MropePositionsWithoutAllStreams", [](Call&) {},
     {"positions.values.size() must equal tokens x streams = 10 x 3 = 30", "mrope", "got 10"}, mrope_spec()},
    {"NegativePositionNamingItsIndex", [](Call& c) { c.per_token[3] = -1; },
     {"positions.values[3] must be in [0, 4095]", "got -1"}},
    {"PositionPastFixedTable", [](Call& c) { c.per_token[7] = 4096; },
     {"positions.values[7] must be in [0, 4095]", "got 4096"}},
    // w stream, token 4: the index is stream-major.
    {"MropeStreamPositionPastTableNamingStreamMajorIndex",
     [](Call& c) { c.set_per_token(mrope_positions_with(2 * 10 + 4, 1000)); },
     {"positions.values[24] must be in [0, 999]", "got 1000"}, mrope_spec(), 1000},
    {"PerTokenNullWithSize", [](Call& c) { c.positions.values = {static_cast<const int64_t*>(nullptr), 10}; },
     {"positions.values must not be null with size 10", "got null"}},
    {"ValuesWithArange", [](Call& c) { c.positions.source = Positions::Source::Arange; },
     {"positions.values must be empty for source arange", "got size 10"}},
    {"SourceOutsideTheEnum", [](Call& c) { c.positions.source = static_cast<Positions::Source>(3); },
     {"positions.source must be arange, per_token or sequence_offsets", "got enum value 3"}},
    {"WrongNumberOfOffsets", [](Call& c) { c.set_offsets({0, 0, 0}); },
     {"positions.values.size() must equal the number of sequences 2 (q batch) for sequence_offsets", "got 3"}},
    {"NegativeOffset", [](Call& c) { c.set_offsets({0, -2}); },
     {"positions.values[1] (sequence offset) + s must be in [0, 4095]", "got -2 + 0 = -2"}},
    {"OffsetRunningPastTable", [](Call& c) { c.set_offsets({4093, 0}); },
     {"positions.values[0] (sequence offset) + s must be in [0, 4095] for every s < 5", "got 4093 + 3 = 4096"}},
    {"OffsetsWithMrope", [](Call& c) { c.set_offsets({0, 0}); },
     {"positions.source sequence_offsets is for single-stream specs only", "mrope", "got sequence_offsets with 3 streams"},
     mrope_spec()},
    {"ThdOffsetsCountOtherThanSequences", [](Call& c) { c.set_offsets({0, 0, 0}); },
     {"positions.values.size() must equal the number of sequences 2 (positions.cu_seqlens.size() - 1)", "got 3"},
     small_spec(), 4096, true},
    {"ArangePastFixedTable", [](Call& c) { c.positions = Positions::arange(); },
     {"positions (arange: 0 .. length - 1 per sequence) must be in [0, 3]", "got sequence length 5"}, small_spec(), 4},
    {"CuSeqlensNotStartingAtZero", [](Call& c) { c.set_cu_seqlens({1, 4, 10}); },
     {"positions.cu_seqlens[0] must be 0", "got 1"}, small_spec(), 4096, true},
    {"DecreasingCuSeqlens", [](Call& c) { c.set_cu_seqlens({0, 6, 3, 10}); },
     {"positions.cu_seqlens[2] must be >= positions.cu_seqlens[1] = 6", "got 3"}, small_spec(), 4096, true},
    {"CuSeqlensNotEndingAtTokenCount", [](Call& c) { c.set_cu_seqlens({0, 4, 9}); },
     {"positions.cu_seqlens[2] (the last) must equal the token count 10", "got 9"}, small_spec(), 4096, true},
    {"ThdWithoutCuSeqlens", [](Call& c) { c.positions = Positions::arange(); },
     {"positions.cu_seqlens is required for the thd layout", "got an empty span"}, small_spec(), 4096, true},
    // One offset and no sequence: the span's size is the count, so zero sequences is size 1.
    {"ThdWithZeroSequences", [](Call& c) { c.set_cu_seqlens({0}); },
     {"positions.cu_seqlens.size() must be num_sequences + 1 >= 2", "got 1"}, small_spec(), 4096, true},
    {"CuSeqlensNullWithSize", [](Call& c) { c.positions.cu_seqlens = {static_cast<const int64_t*>(nullptr), 3}; },
     {"positions.cu_seqlens must not be null with size 3", "got null"}, small_spec(), 4096, true},
    {"CuSeqlensForBshd", [](Call& c) { c.set_cu_seqlens({0, 5, 10}); },
     {"positions.cu_seqlens is only for the thd layout", "got 3 cu_seqlens with layout bshd"}},
};

// ---- options and spec ---------------------------------------------------------------------------

RopeSpec xpos_spec(PositionAxes axes) {
  RopeSpec spec = axes == PositionAxes::MRope ? mrope_spec() : small_spec();
  spec.axes = axes;
  spec.xpos = XPos{512.0};
  return spec;
}

const RejectedCase kOptionCases[] = {
    {"NegativeRotaryOffset", [](Call& c) { c.options.rotary_offset = -1; },
     {"options.rotary_offset must be >= 0", "got -1"}},
    {"HugeRotaryOffsetWithoutOverflow", [](Call& c) { c.options.rotary_offset = INT64_MAX; },
     {"q head_dim must be >= options.rotary_offset + rotary_dim = 9223372036854775807 + 16", "got 16"}},
    {"NegativeXposLength", [](Call& c) { c.options.xpos_length = -5; },
     {"options.xpos_length must be >= 0", "got -5"}},
    {"UnknownDirection", [](Call& c) { c.options.direction = static_cast<Direction>(5); },
     {"options.direction must be forward or backward", "got enum value 5"}},
    {"XposWithMrope", [](Call& c) { c.set_per_token(std::vector<int64_t>(30, 1)); },
     {"table.spec().xpos is defined for single-stream positions only", "got xpos with mrope"},
     xpos_spec(PositionAxes::MRope)},
    {"XposWithVision2D", [](Call& c) { c.set_per_token(std::vector<int64_t>(20, 1)); },
     {"table.spec().xpos", "got xpos with vision2d"}, xpos_spec(PositionAxes::Vision2D)},
};

// gtest prints a parameter on failure: its name, not its bytes.
void PrintTo(const RejectedCase& row, std::ostream* os) { *os << row.name; }

class ApplyArgsRejects : public ::testing::TestWithParam<RejectedCase> {};

TEST_P(ApplyArgsRejects, NamingTheArgumentAndValue) {
  const RejectedCase& row = GetParam();
  Call call(row.spec, row.fixed_positions);
  if (row.thd) call.make_thd();
  row.breaks(call);
  expect_rejected(call, row.parts);
}

std::string row_name(const ::testing::TestParamInfo<RejectedCase>& row) { return row.param.name; }

INSTANTIATE_TEST_SUITE_P(Views, ApplyArgsRejects, ::testing::ValuesIn(kViewCases), row_name);
INSTANTIATE_TEST_SUITE_P(Positions, ApplyArgsRejects, ::testing::ValuesIn(kPositionsCases), row_name);
INSTANTIATE_TEST_SUITE_P(Options, ApplyArgsRejects, ::testing::ValuesIn(kOptionCases), row_name);

// ---- pair_streams, position_streams, to_string ------------------------------------------------

std::string stream_letters(const RopeSpec& spec, const char* letters) {
  std::string out;
  for (const int stream : pair_streams(spec)) out += letters[stream];
  return out;
}

std::string repeat(const std::string& text, int times) {
  std::string out;
  for (int i = 0; i < times; ++i) out += text;
  return out;
}

// The assignments docs/formulas.md section 12 prints for the Qwen presets.
TEST(ApplyArgs, PairStreamsFollowTheMropeSections) {
  RopeSpec spec = small_spec(128);
  spec.axes = PositionAxes::MRope;
  spec.mrope = {{16, 24, 24}, MRopeAssignment::Chunked};  // Qwen2-VL-7B
  EXPECT_EQ(stream_letters(spec, "thw"), std::string(16, 't') + std::string(24, 'h') + std::string(24, 'w'));
  spec.mrope = {{24, 20, 20}, MRopeAssignment::Interleaved};  // Qwen3-VL-8B
  EXPECT_EQ(stream_letters(spec, "thw"), repeat("thw", 20) + "tttt");
  spec.rotary_dim = 64;
  spec.mrope = {{11, 11, 10}, MRopeAssignment::Interleaved};  // Qwen3.5-9B
  EXPECT_EQ(stream_letters(spec, "thw"), repeat("thw", 10) + "th");
  EXPECT_EQ(position_streams(spec), 3);
}

TEST(ApplyArgs, PairStreamsSplitVisionIntoRowAndColumnHalves) {
  RopeSpec spec = small_spec(80);
  spec.axes = PositionAxes::Vision2D;
  EXPECT_EQ(stream_letters(spec, "rc"), std::string(20, 'r') + std::string(20, 'c'));
  EXPECT_EQ(position_streams(spec), 2);
}

TEST(ApplyArgs, PairStreamsAreZeroForSingleStream) {
  const RopeSpec spec = small_spec(64);
  EXPECT_EQ(pair_streams(spec), std::vector<int>(32, 0));
  EXPECT_EQ(position_streams(spec), 1);
}

// ---- seq_len: Hugging Face's rule, the call's largest position + 1 -------------------------------

// Dynamic NTK with max_position_embeddings 64: calls whose largest position + 1 exceeds 64 need
// grown frequencies; the base call's positions reach 104.
RopeSpec dynamic_spec() {
  RopeSpec spec = small_spec();
  spec.max_position_embeddings = 64;
  spec.scaling.type = ScalingType::Dynamic;
  spec.scaling.factor = 2.0;
  return spec;
}

RopeSpec longrope_spec() {
  RopeSpec spec = small_spec();
  spec.max_position_embeddings = 256;
  spec.scaling.type = ScalingType::LongRope;
  spec.scaling.original_max_position_embeddings = 64;
  spec.scaling.short_factor = std::vector<double>(8, 1.0);
  spec.scaling.long_factor = {1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0};
  return spec;
}

void use_table(Call& call, const RopeSpec& spec, int64_t seq_len) {
  call.table = std::make_unique<CosSinTable>(spec, TableOptions{.seq_len = seq_len, .fixed_positions = 4096});
}

TEST(ApplyArgs, RejectsDynamicTableThatDoesNotServeTheCallsSeqLen) {
  Call call(dynamic_spec());  // a table for seq_len 0; the call's largest position is 104
  expect_rejected(call, {"the call's seq_len (largest position + 1) 105 needs dynamic frequencies",
                         "got a table built for seq_len 0", "build the table with seq_len 105",
                         "name options.seq_len"});
}

TEST(ApplyArgs, RejectsTableForAnotherGrownSeqLen) {
  Call call(dynamic_spec());
  use_table(call, dynamic_spec(), 200);  // grown for 200; the call is for 105
  expect_rejected(call, {"seq_len (largest position + 1) 105", "got a table built for seq_len 200"});
}

TEST(ApplyArgs, RejectsNamedSeqLenTheTableDoesNotServe) {
  Call call(dynamic_spec());
  use_table(call, dynamic_spec(), 105);
  call.options.seq_len = 300;
  expect_rejected(call, {"options.seq_len 300 needs dynamic frequencies", "got a table built for seq_len 105"});
  call.options.seq_len = -2;
  expect_rejected(call, {"options.seq_len must be >= 0, or kSeqLenFromPositions (-1)", "got -2"});
}

TEST(ApplyArgs, AcceptsDynamicTablesThatServeTheCall) {
  {
    Call call(dynamic_spec());
    use_table(call, dynamic_spec(), 105);  // exactly the call's seq_len
    EXPECT_NO_THROW(call.run());
  }
  {
    Call call(dynamic_spec());
    call.set_per_token({0, 1, 2, 3, 4, 59, 60, 61, 62, 63});  // seq_len 64 <= max: original frequencies
    EXPECT_NO_THROW(call.run());
    use_table(call, dynamic_spec(), 64);
    EXPECT_NO_THROW(call.run());
  }
  {
    Call call(dynamic_spec());
    use_table(call, dynamic_spec(), 200);  // a grown table used on purpose (RopeCache's history)
    call.options.seq_len = 200;
    EXPECT_NO_THROW(call.run());
  }
  {
    Call call(small_spec());  // a scheme without seq_len dependence ignores it
    call.options.seq_len = 123456;
    EXPECT_NO_THROW(call.run());
  }
}

TEST(ApplyArgs, LongRopeTablesServeEverySeqLenOfTheirFactorSet) {
  Call call(longrope_spec());  // short factors; the call needs the long ones (105 > 64)
  expect_rejected(call, {"seq_len (largest position + 1) 105 needs longrope frequencies",
                         "got a table built for seq_len 0"});
  use_table(call, longrope_spec(), 65);  // the long set, built for another long seq_len
  EXPECT_NO_THROW(call.run());
  call.set_per_token({0, 1, 2, 3, 4, 5, 6, 7, 8, 63});  // seq_len 64: short factors again
  expect_rejected(call, {"seq_len (largest position + 1) 64 needs longrope frequencies",
                         "got a table built for seq_len 65"});
}

TEST(ApplyArgs, SeqLenOfOffsetsAndArangeCalls) {
  Call call(dynamic_spec());
  call.set_offsets({0, 60});  // positions 60..64: seq_len 65 > 64
  expect_rejected(call, {"seq_len (largest position + 1) 65"});
  call.offsets[1] = 59;  // 59..63: seq_len 64
  EXPECT_NO_THROW(call.run());
  call.positions = Positions::arange();  // arange 0..4: seq_len 5
  EXPECT_NO_THROW(call.run());
}

TEST(ApplyArgs, DirectionNames) {
  EXPECT_EQ(to_string(Direction::Forward), "forward");
  EXPECT_EQ(to_string(Direction::Backward), "backward");
}

// The heads axis against the model's head counts (spec.num_attention_heads / num_key_value_heads,
// set from configs and presets): a bshd tensor named bhsd reads seq as heads and is refused
// whenever that count neither equals nor divides the model's; tensor-parallel shards (a divisor),
// MQA / MLA (one shared key head) and specs without head counts pass.
TEST(ApplyArgs, HeadsAxisMustEqualOrDivideTheModels) {
  RopeSpec spec = test::rope_spec();
  spec.num_attention_heads = 32;
  spec.num_key_value_heads = 8;
  const CosSinTable table(spec);
  std::vector<float> qd(1 * 64 * 32 * 128), kd(qd.size()), qo(qd.size()), ko(kd.size());
  const auto views = [&](Layout layout, std::array<int64_t, 4> q_shape, std::array<int64_t, 4> k_shape) {
    return std::array<TensorView, 4>{contiguous_view(qd.data(), DType::F32, layout, q_shape),
                                     contiguous_view(kd.data(), DType::F32, layout, k_shape),
                                     contiguous_view(qo.data(), DType::F32, layout, q_shape),
                                     contiguous_view(ko.data(), DType::F32, layout, k_shape)};
  };
  const auto check = [&](const std::array<TensorView, 4>& v) {
    check_apply_arguments(v[0], v[1], v[2], v[3], Positions::arange(), table, {});
  };
  // bshd data [1, 64, 32, 128] named bhsd: 64 "heads" (k misread alike, so that seq agrees).
  EXPECT_THAT([&] { check(views(Layout::BHSD, {1, 64, 32, 128}, {1, 64, 32, 128})); },
              ::testing::ThrowsMessage<Error>(HasSubstr("q heads axis (64 in layout bhsd, shape bhsd (1, 64, 32, 128)) must equal "
                                             "the model's num_attention_heads = 32 or divide it (a tensor-parallel "
                                             "shard); is the tensor in another layout?")));
  EXPECT_THAT([&] { check(views(Layout::BSHD, {1, 64, 32, 128}, {1, 64, 12, 128})); },
              ::testing::ThrowsMessage<Error>(HasSubstr("k heads axis (12 in layout bshd")));
  EXPECT_NO_THROW(check(views(Layout::BSHD, {1, 64, 32, 128}, {1, 64, 8, 128})));   // the model
  EXPECT_NO_THROW(check(views(Layout::BHSD, {1, 8, 64, 128}, {1, 2, 64, 128})));    // TP = 4 shard
  EXPECT_NO_THROW(check(views(Layout::BSHD, {1, 64, 32, 128}, {1, 64, 1, 128})));   // one shared key head
  spec.num_attention_heads = spec.num_key_value_heads = 0;
  const CosSinTable unknown(spec);
  const auto v = views(Layout::BHSD, {1, 64, 32, 128}, {1, 64, 32, 128});
  EXPECT_NO_THROW(check_apply_arguments(v[0], v[1], v[2], v[3], Positions::arange(), unknown, {}));
}

}  // namespace
}  // namespace rotary
