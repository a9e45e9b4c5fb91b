// tests/reliability/bad_input_matrix_test.cpp: the bad-input matrix (docs/reliability.md).
//
// One row per bad input, across the C++ API (apply and reference::apply, tables, tensors, the
// config reader, JSON, .npy) and the command (run_cli in-process, as main() runs it). Each row
// gives the input, the fragment the error must contain (the argument's name and the value
// received), and a runner that makes the call and reports:
//   - the error message ("" when nothing was thrown / the command exited 0);
//   - whether the caller's buffers are untouched: every tensor and position array of an apply
//     call, compared byte for byte before and after; the command's output files (created with
//     sentinel bytes before the run); a config or .npy text.
// `ROTARY_MATRIX_MARKDOWN=1 rotary_reliability_tests --gtest_filter='*Markdown*'` prints the
// table for docs/reliability.md.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "rotary/apply.hpp"
#include "rotary/error.hpp"
#include "rotary/hf_config.hpp"
#include "core/json.hpp"
#include "cli/npy.hpp"
#include "rotary/presets.hpp"
#include "rotary/table.hpp"
#include "rotary/tensor.hpp"
#include "cli/run_cli.hpp"
#include "tests/support/spec_builder.hpp"

namespace rotary {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

struct Outcome {
  std::string error;      // "" when the call returned (or the command exited 0)
  bool untouched = true;  // the caller's buffers / files are as they were
};

struct MatrixCase {
  std::string name;      // the test name: letters, digits and '_'
  std::string surface;   // "apply", "table", "config", "json", "npy", "cli"
  std::string input;     // what is wrong, in words (the docs table)
  std::string expected;  // a fragment of the error: the argument and the value
  std::function<Outcome()> run;
};

// ---- apply ------------------------------------------------------------------------------------

RopeSpec small_spec() { return test::rope_spec({.name = "matrix", .head_dim = 16}); }

// A valid call that each row breaks in one way: q (2, 5, 4, 16) and k (2, 5, 2, 16) float32
// BSHD, separate outputs, per-token positions, a table of exactly 4096 positions. Buffers are
// larger than the views so that rows can move views around inside them.
struct ApplyCall {
  static constexpr size_t kBufferFloats = 4096;

  ApplyCall() {
    table = std::make_unique<CosSinTable>(small_spec(), TableOptions{.fixed_positions = 4096});
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
  ApplyCall(const ApplyCall&) = delete;
  ApplyCall& operator=(const ApplyCall&) = delete;

  void set_per_token(std::vector<int64_t> values) {
    per_token = std::move(values);
    positions = Positions::per_token(per_token);
  }
  void set_offsets(std::vector<int64_t> values) {
    offsets = std::move(values);
    positions = Positions::sequence_offsets(offsets);
  }
  // THD: q (10, 4, 16), k (10, 2, 16), cu_seqlens as given, no positions.
  void make_thd(std::vector<int64_t> cu) {
    q = contiguous_view(q_buf.data(), DType::F32, Layout::THD, {10, 4, 16});
    k = contiguous_view(k_buf.data(), DType::F32, Layout::THD, {10, 2, 16});
    q_out = contiguous_view(q_out_buf.data(), DType::F32, Layout::THD, {10, 4, 16});
    k_out = contiguous_view(k_out_buf.data(), DType::F32, Layout::THD, {10, 2, 16});
    cu_seqlens = std::move(cu);
    positions = Positions::arange(cu_seqlens);
  }

  std::vector<std::vector<unsigned char>> snapshot() const {
    std::vector<std::vector<unsigned char>> bytes;
    auto add = [&](const void* data, size_t size) {
      const auto* begin = static_cast<const unsigned char*>(data);
      bytes.emplace_back(begin, begin + size);
    };
    for (const std::vector<float>* buffer : {&q_buf, &k_buf, &q_out_buf, &k_out_buf}) {
      add(buffer->data(), buffer->size() * sizeof(float));
    }
    for (const std::vector<int64_t>* array : {&per_token, &offsets, &cu_seqlens}) {
      add(array->data(), array->size() * sizeof(int64_t));
    }
    return bytes;
  }

  std::vector<float> q_buf, k_buf, q_out_buf, k_out_buf;
  TensorView q, k, q_out, k_out;
  std::vector<int64_t> per_token, offsets, cu_seqlens;
  Positions positions;
  ApplyOptions options;
  std::unique_ptr<CosSinTable> table;
};

// Runs the broken call through rotary::apply and reference::apply. Both must throw the same
// message, and neither may change a byte.
std::function<Outcome()> apply_case(std::function<void(ApplyCall&)> breaks) {
  return [breaks] {
    ApplyCall call;
    breaks(call);
    const auto before = call.snapshot();
    Outcome outcome;
    std::string messages[2];
    for (int implementation = 0; implementation < 2; ++implementation) {
      try {
        if (implementation == 0) {
          apply(call.q, call.k, call.q_out, call.k_out, call.positions, *call.table, call.options);
        } else {
          reference::apply(call.q, call.k, call.q_out, call.k_out, call.positions, *call.table, call.options);
        }
      } catch (const Error& error) {
        messages[implementation] = error.what();
      }
      outcome.untouched = outcome.untouched && call.snapshot() == before;
    }
    outcome.error = messages[0] == messages[1]
                        ? messages[0]
                        : "rotary::apply and reference::apply disagree: \"" + messages[0] + "\" vs \"" + messages[1] + "\"";
    return outcome;
  };
}

// Any other call that must throw rotary::Error; `untouched` is for calls that write nothing.
std::function<Outcome()> throws_case(std::function<void()> call) {
  return [call] {
    Outcome outcome;
    try {
      call();
    } catch (const Error& error) {
      outcome.error = error.what();
    }
    return outcome;
  };
}

// ---- config, JSON, .npy -----------------------------------------------------------------------

// parse_hf_config on a text; the text must not change (it is the caller's).
std::function<Outcome()> config_case(std::string text) {
  return [text] {
    const std::string before = text;
    Outcome outcome;
    try {
      parse_hf_config(text, "config.json");
    } catch (const Error& error) {
      outcome.error = error.what();
    }
    outcome.untouched = text == before;
    return outcome;
  };
}

std::function<Outcome()> npy_case(std::string bytes) {
  return [bytes] {
    const std::vector<unsigned char> file(bytes.begin(), bytes.end());
    const std::vector<unsigned char> before = file;
    Outcome outcome;
    try {
      npy::parse(file, "q.npy");
    } catch (const Error& error) {
      outcome.error = error.what();
    }
    outcome.untouched = file == before;
    return outcome;
  };
}

std::string npy_file(const std::string& header, const std::string& data, int major = 1) {
  std::string file = "\x93NUMPY";
  file += static_cast<char>(major);
  file += '\0';
  for (int i = 0; i < (major == 1 ? 2 : 4); ++i) file += static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  return file + header + data;
}

std::string npy_array(npy::ElementType type, std::vector<int64_t> shape) {
  npy::Array array;
  array.type = type;
  array.shape = std::move(shape);
  array.bytes.resize(static_cast<size_t>(array.size() * npy::element_size(type)));
  for (size_t i = 0; i < array.bytes.size(); ++i) array.bytes[i] = static_cast<unsigned char>(0x3C + i % 2);
  const std::vector<unsigned char> file = npy::serialize(array);
  return std::string(file.begin(), file.end());
}

std::string int64_npy(const std::vector<int64_t>& values) {
  npy::Array array;
  array.type = npy::ElementType::Int64;
  array.shape = {static_cast<int64_t>(values.size())};
  array.bytes.resize(values.size() * sizeof(int64_t));
  std::memcpy(array.bytes.data(), values.data(), array.bytes.size());
  const std::vector<unsigned char> file = npy::serialize(array);
  return std::string(file.begin(), file.end());
}

// ---- the command ------------------------------------------------------------------------------

// A scratch directory per test process, holding the inputs the command rows name.
const fs::path& scratch() {
  static const fs::path dir = [] {
    const fs::path path = fs::temp_directory_path() / ("rotary-matrix-" + std::to_string(::getpid()));
    fs::create_directories(path);
    auto write = [&](const std::string& name, const std::string& bytes) {
      std::ofstream(path / name, std::ios::binary) << bytes;
    };
    write("q.npy", npy_array(npy::ElementType::Float32, {1, 3, 2, 128}));
    write("q3.npy", npy_array(npy::ElementType::Float32, {3, 2, 128}));
    write("q_int.npy", npy_array(npy::ElementType::Int64, {1, 3, 2, 128}));
    write("q_truncated.npy", npy_array(npy::ElementType::Float32, {1, 3, 2, 128}).substr(0, 200));
    write("positions_negative.npy", int64_npy({0, -1, 2}));
    write("positions_float.npy", npy_array(npy::ElementType::Float32, {3}));
    write("deep.json", "{\"rope_scaling\": " + std::string(10000, '[') + std::string(10000, ']') + "}");
    write("nan.json", "{\"head_dim\": 128, \"rope_theta\": NaN}");
    std::ofstream(path / "huge.json").close();
    fs::resize_file(path / "huge.json", std::uintmax_t{100} << 20);  // sparse: 100 MB, no disk
    return path;
  }();
  return dir;
}

// Runs the command in-process (Effects::Run, as main() does) in the scratch directory. Output
// files the row names are created first with sentinel bytes; they must survive the failure.
std::function<Outcome()> cli_case(std::vector<std::string> arguments, std::vector<std::string> outputs = {}) {
  return [arguments, outputs] {
    const fs::path previous = fs::current_path();
    fs::current_path(scratch());
    for (const std::string& output : outputs) std::ofstream(output) << "sentinel";
    std::ostringstream out, err;
    const int code = cli::run_cli(arguments, out, err);
    Outcome outcome;
    outcome.error = code == 2 ? err.str() : "";
    if (code != 2 && code != 0) outcome.error = "exit code " + std::to_string(code);
    for (const std::string& output : outputs) {
      std::ifstream in(output);
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      outcome.untouched = outcome.untouched && text == "sentinel";
    }
    fs::current_path(previous);
    return outcome;
  };
}

std::vector<MatrixCase> matrix() {
  std::vector<MatrixCase> cases;
  auto add = [&](std::string name, std::string surface, std::string input, std::string expected,
                 std::function<Outcome()> run) {
    cases.push_back({std::move(name), std::move(surface), std::move(input), std::move(expected), std::move(run)});
  };

  // ---- apply: shapes and dims
  add("ApplyOddHeadDim", "apply", "q head_dim 15 < rotary_dim 16", "q head_dim must be >= options.rotary_offset + rotary_dim = 0 + 16 (got 15)",
      apply_case([](ApplyCall& c) {
        c.q = contiguous_view(c.q_buf.data(), DType::F32, Layout::BSHD, {2, 5, 4, 15});
        c.q_out = contiguous_view(c.q_out_buf.data(), DType::F32, Layout::BSHD, {2, 5, 4, 15});
      }));
  add("ApplyZeroHeadDim", "apply", "k head_dim 0", "k head_dim must be >= options.rotary_offset + rotary_dim = 0 + 16 (got 0)",
      apply_case([](ApplyCall& c) { c.k.shape[3] = c.k_out.shape[3] = 0; }));
  add("ApplyNegativeBatch", "apply", "q batch -2", "q shape[0] (batch) must be >= 0 (got -2",
      apply_case([](ApplyCall& c) { c.q.shape[0] = -2; }));
  add("ApplyNegativeSeqInK", "apply", "k seq -1", "k shape[1] (seq) must be >= 0 (got -1",
      apply_case([](ApplyCall& c) { c.k.shape[1] = -1; }));
  add("ApplyElementCountOverflows", "apply", "q shape (2^40, 2^40, 4, 16): the product overflows int64",
      "q: element count must fit in int64 (got shape bshd (1099511627776, 1099511627776, 4, 16))",
      apply_case([](ApplyCall& c) { c.q.shape = {int64_t{1} << 40, int64_t{1} << 40, 4, 16}; }));
  add("ApplyTokenCountOverflowsWithNoHeads", "apply", "q (2^40, 2^40, 0, 16): no elements, but batch x seq overflows",
      "q token count batch x seq must fit in int64 (got shape bshd (1099511627776, 1099511627776, 0, 16))",
      apply_case([](ApplyCall& c) { c.q.shape = {int64_t{1} << 40, int64_t{1} << 40, 0, 16}; }));
  add("ApplyStrideTimesExtentOverflows", "apply", "q stride_elems[0] = 2^62 with batch 2",
      "q shape and strides must address fewer than 2^63 bytes (got shape bshd (2, 5, 4, 16), stride_elems [4611686018427387904",
      apply_case([](ApplyCall& c) { c.q.stride_elems[0] = int64_t{1} << 62; }));
  add("ApplyByteSpanOverflows", "apply", "float64 q whose last element offset fits but offset x 8 bytes does not",
      "q shape and strides must address fewer than 2^63 bytes (got shape bshd (2, 5, 4, 16), stride_elems [2305843009213693952",
      apply_case([](ApplyCall& c) {
        c.q.dtype = c.q_out.dtype = DType::F64;
        c.q.stride_elems[0] = int64_t{1} << 61;
      }));
  add("ApplyStrideSumOverflows", "apply", "q strides each below 2^62 whose sum over the axes overflows",
      "q shape and strides must address fewer than 2^63 bytes",
      apply_case([](ApplyCall& c) {
        c.q.stride_elems[0] = kInt64Max / 2;
        c.q.stride_elems[1] = kInt64Max / 8;
      }));
  add("ApplyQOutShapeDiffers", "apply", "q_out shape (2, 5, 4, 8) for q (2, 5, 4, 16)",
      "q_out shape must equal q's shape bshd (2, 5, 4, 16) (got bshd (2, 5, 4, 8))",
      apply_case([](ApplyCall& c) { c.q_out.shape[3] = 8; }));
  add("ApplyBatchMismatch", "apply", "k batch 1, q batch 2", "k batch must equal q's batch 2 (got 1",
      apply_case([](ApplyCall& c) { c.k.shape[0] = c.k_out.shape[0] = 1; }));
  add("ApplyKLayoutDiffers", "apply", "k bhsd, q bshd", "k layout must equal q's layout bshd (got bhsd)",
      apply_case([](ApplyCall& c) { c.k.layout = Layout::BHSD; }));
  add("ApplyNullData", "apply", "q data null, shape non-empty", "q data must not be null for a non-empty tensor (got null data",
      apply_case([](ApplyCall& c) { c.q.data = nullptr; }));
  add("ApplyKWithoutKOut", "apply", "k given, k_out empty", "k_out must be given when k is",
      apply_case([](ApplyCall& c) { c.k_out = TensorView{}; }));

  // ---- apply: dtypes, layouts, options
  add("ApplyUnknownDtype", "apply", "q dtype enum value 9", "q dtype must be float32, bfloat16, float16 or float64 (got enum value 9)",
      apply_case([](ApplyCall& c) { c.q.dtype = static_cast<DType>(9); }));
  add("ApplyUnknownLayout", "apply", "k layout enum value 7", "k layout must be bshd, bhsd, sbhd or thd (got enum value 7)",
      apply_case([](ApplyCall& c) { c.k.layout = static_cast<Layout>(7); }));
  add("ApplyUnknownDirection", "apply", "options.direction enum value 5", "options.direction must be forward or backward (got enum value 5)",
      apply_case([](ApplyCall& c) { c.options.direction = static_cast<Direction>(5); }));
  add("ApplyNegativeRotaryOffset", "apply", "options.rotary_offset -2", "options.rotary_offset must be >= 0 (got -2)",
      apply_case([](ApplyCall& c) { c.options.rotary_offset = -2; }));
  add("ApplyHugeRotaryOffset", "apply", "options.rotary_offset INT64_MAX (offset + rotary_dim overflows)",
      "q head_dim must be >= options.rotary_offset + rotary_dim = 9223372036854775807 + 16 (got 16)",
      apply_case([](ApplyCall& c) { c.options.rotary_offset = kInt64Max; }));
  add("ApplyNegativeXposLength", "apply", "options.xpos_length -1", "options.xpos_length must be >= 0 (got -1)",
      apply_case([](ApplyCall& c) { c.options.xpos_length = -1; }));
  add("ApplyMisalignedData", "apply", "float32 q starting 2 bytes into its buffer",
      "q data must be aligned to 4 bytes for float32 (got address",
      apply_case([](ApplyCall& c) { c.q.data = reinterpret_cast<unsigned char*>(c.q_buf.data()) + 2; }));

  // ---- apply: strides and memory
  add("ApplyZeroOutputStride", "apply", "q_out stride_elems[2] = 0 on heads of extent 4",
      "q_out stride_elems[2] (heads) must be > 0 on an output axis of extent 4, or its elements would share an address (got 0)",
      apply_case([](ApplyCall& c) { c.q_out.stride_elems[2] = 0; }));
  add("ApplyNegativeOutputStride", "apply", "q_out stride_elems[1] = -64", "q_out stride_elems[1] (seq) must be >= 0 (got -64)",
      apply_case([](ApplyCall& c) { c.q_out.stride_elems[1] = -64; }));
  add("ApplyNegativeInputStride", "apply", "k stride_elems[3] = -1", "k stride_elems[3] (dim) must be >= 0 (got -1)",
      apply_case([](ApplyCall& c) { c.k.stride_elems[3] = -1; }));
  add("ApplyOutputElementsShareAddresses", "apply", "k_out heads 8 apart with head_dim 16",
      "k_out strides must give every output element its own address (got stride_elems [160, 32, 8, 1]",
      apply_case([](ApplyCall& c) { c.k_out.stride_elems = {160, 32, 8, 1}; }));
  add("ApplyPartialOverlapInOut", "apply", "q_out = q shifted by one element",
      "q_out partially overlaps q (got q_out.data = q.data + 4 bytes",
      apply_case([](ApplyCall& c) {
        c.q_out = c.q;
        c.q_out.data = c.q_buf.data() + 1;
      }));
  add("ApplyInPlaceWithOtherDtype", "apply", "q_out on q's memory as bfloat16",
      "q_out partially overlaps q (got q_out.data = q.data + 0 bytes, q float32",
      apply_case([](ApplyCall& c) {
        c.q_out = c.q;
        c.q_out.dtype = DType::BF16;
      }));
  add("ApplyKOutOnQ", "apply", "k_out writes into q", "k_out overlaps q (got k_out.data = q.data + 0 bytes",
      apply_case([](ApplyCall& c) { c.k_out.data = c.q_buf.data(); }));
  add("ApplyOutputsOverlap", "apply", "k_out inside q_out", "k_out overlaps q_out (got k_out.data = q_out.data + 64 bytes",
      apply_case([](ApplyCall& c) { c.k_out.data = c.q_out_buf.data() + 16; }));

  // ---- apply: positions
  add("ApplyNegativePosition", "apply", "per_token[3] = -5", "positions.values[3] must be in [0, 4095] (got -5)",
      apply_case([](ApplyCall& c) { c.per_token[3] = -5; }));
  add("ApplyPositionPastFixedTable", "apply", "per_token[7] = 4096 with a 4096-row fixed table",
      "positions.values[7] must be in [0, 4095] (got 4096)", apply_case([](ApplyCall& c) { c.per_token[7] = 4096; }));
  add("ApplyPositionInt64Max", "apply", "per_token[0] = INT64_MAX", "positions.values[0] must be in [0, 4095] (got 9223372036854775807)",
      apply_case([](ApplyCall& c) { c.per_token[0] = kInt64Max; }));
  add("ApplyPositionPastMaxPosition", "apply", "per_token[1] = 2^31 on a growable table",
      "positions.values[1] must be in [0, 2147483647] (got 2147483648)", apply_case([](ApplyCall& c) {
        c.table = std::make_unique<CosSinTable>(small_spec(), TableOptions{.storage = Storage::OnTheFly});
        c.per_token[1] = int64_t{1} << 31;
      }));
  add("ApplyTableGrowthPastMaxBytes", "apply", "positions 0-104 and 10^6 on a stored table limited to 64 KiB",
      "CosSinTable: storing 2 more pages (256 rows x 8 pairs each, up to position 1000191) needs 81920 bytes in all, "
      "more than max_bytes 65536", apply_case([](ApplyCall& c) {
        c.table = std::make_unique<CosSinTable>(small_spec(), TableOptions{.max_bytes = int64_t{1} << 16});
        c.per_token[9] = 1000000;
      }));
  add("ApplyDynamicTableForAnotherSeqLen", "apply",
      "dynamic NTK (max_position_embeddings 64) table built for seq_len 0, positions up to 104",
      "the call's seq_len (largest position + 1) 105 needs dynamic frequencies other than the table's (got a table "
      "built for seq_len 0)",
      apply_case([](ApplyCall& c) {
        RopeSpec spec = small_spec();
        spec.max_position_embeddings = 64;
        spec.scaling.type = ScalingType::Dynamic;
        spec.scaling.factor = 2.0;
        c.table = std::make_unique<CosSinTable>(spec, TableOptions{.fixed_positions = 4096});
      }));
  add("ApplyLongRopeNamedSeqLenOfTheOtherFactors", "apply",
      "LongRoPE table of the short factors (seq_len 0), options.seq_len 5000 > original 4096",
      "options.seq_len 5000 needs longrope frequencies other than the table's (got a table built for seq_len 0)",
      apply_case([](ApplyCall& c) {
        RopeSpec spec = small_spec();
        spec.max_position_embeddings = 131072;
        spec.scaling.type = ScalingType::LongRope;
        spec.scaling.original_max_position_embeddings = 4096;
        spec.scaling.short_factor = std::vector<double>(8, 1.0);
        spec.scaling.long_factor = std::vector<double>(8, 4.0);
        c.table = std::make_unique<CosSinTable>(spec, TableOptions{.fixed_positions = 4096});
        c.options.seq_len = 5000;
      }));
  add("ApplySeqLenBelowMinusOne", "apply", "options.seq_len -5",
      "options.seq_len must be >= 0, or kSeqLenFromPositions (-1) for the largest position + 1 (got -5)",
      apply_case([](ApplyCall& c) { c.options.seq_len = -5; }));
  add("ApplyPerTokenCountWrong", "apply", "per-token span of 9 for 10 tokens",
      "positions.values.size() must equal tokens x streams = 10 x 1 = 10 for per_token single positions (got 9)",
      apply_case([](ApplyCall& c) { c.positions.values = c.positions.values.first(9); }));
  // A span's size is unsigned: a negative count (once a row here) cannot be written; a size past
  // INT64_MAX can, and must not wrap to a small count.
  add("ApplyPerTokenSizePastInt64Max", "apply", "per-token span of size 2^63, null data",
      "positions.values.size() must equal tokens x streams = 10 x 1 = 10 for per_token single positions (got "
      "9223372036854775808)",
      apply_case([](ApplyCall& c) { c.positions.values = {static_cast<const int64_t*>(nullptr), size_t{1} << 63}; }));
  add("ApplyPerTokenNull", "apply", "per-token span null with size 10", "positions.values must not be null with size 10 (got null)",
      apply_case([](ApplyCall& c) { c.positions.values = {static_cast<const int64_t*>(nullptr), 10}; }));
  // Two sources at once (once a row here) cannot be written: Positions has one source.
  add("ApplyValuesWithArange", "apply", "source arange with 10 values",
      "positions.values must be empty for source arange, which computes 0 .. length - 1 per sequence (got size 10)",
      apply_case([](ApplyCall& c) { c.positions.source = Positions::Source::Arange; }));
  add("ApplySourceEnumValue", "apply", "positions.source enum value 5",
      "positions.source must be arange, per_token or sequence_offsets (got enum value 5)",
      apply_case([](ApplyCall& c) { c.positions.source = static_cast<Positions::Source>(5); }));
  add("ApplyOffsetsCountWrong", "apply", "3 offsets for batch 2",
      "positions.values.size() must equal the number of sequences 2 (q batch) for sequence_offsets (got 3)",
      apply_case([](ApplyCall& c) { c.set_offsets({0, 1, 2}); }));
  add("ApplyNegativeOffset", "apply", "offset 1 = -3",
      "positions.values[1] (sequence offset) + s must be in [0, 4095] for every s < 5 (got -3 + 0 = -3)",
      apply_case([](ApplyCall& c) { c.set_offsets({0, -3}); }));
  add("ApplyOffsetRunsPastTable", "apply", "offset 0 = 4093 with seq 5",
      "positions.values[0] (sequence offset) + s must be in [0, 4095] for every s < 5 (got 4093 + 3 = 4096)",
      apply_case([](ApplyCall& c) { c.set_offsets({4093, 0}); }));
  add("ApplyOffsetNearInt64Max", "apply", "offset 0 = INT64_MAX - 2 (offset + s overflows)",
      "positions.values[0] (sequence offset) + s must be in [0, 4095] for every s < 5 (got 9223372036854775805 + 0",
      apply_case([](ApplyCall& c) { c.set_offsets({kInt64Max - 2, 0}); }));
  add("ApplyArangePastFixedTable", "apply", "no positions, seq 5, a 4-row fixed table",
      "positions (arange: 0 .. length - 1 per sequence) must be in [0, 3]: sequence 0 needs position 4",
      apply_case([](ApplyCall& c) {
        c.table = std::make_unique<CosSinTable>(small_spec(), TableOptions{.fixed_positions = 4});
        c.positions = Positions::arange();
      }));
  add("ApplyMropeOneStream", "apply", "M-RoPE spec with one position per token",
      "positions.values.size() must equal tokens x streams = 10 x 3 = 30 for per_token mrope positions (got 10)",
      apply_case([](ApplyCall& c) {
        RopeSpec spec = small_spec();
        spec.axes = PositionAxes::MRope;
        spec.mrope.pairs = {2, 3, 3};
        c.table = std::make_unique<CosSinTable>(spec, TableOptions{});
      }));

  // ---- apply: THD and cu_seqlens
  add("ApplyCuSeqlensNotFromZero", "apply", "cu_seqlens {1, 4, 10}", "positions.cu_seqlens[0] must be 0 (got 1)",
      apply_case([](ApplyCall& c) { c.make_thd({1, 4, 10}); }));
  add("ApplyCuSeqlensDecreasing", "apply", "cu_seqlens {0, 6, 4, 10}",
      "positions.cu_seqlens[2] must be >= positions.cu_seqlens[1] = 6 (non-decreasing) (got 4)",
      apply_case([](ApplyCall& c) { c.make_thd({0, 6, 4, 10}); }));
  add("ApplyCuSeqlensWrongEnd", "apply", "cu_seqlens ending at 9 for 10 tokens",
      "positions.cu_seqlens[2] (the last) must equal the token count 10 of q (got 9)", apply_case([](ApplyCall& c) { c.make_thd({0, 4, 9}); }));
  add("ApplyThdWithoutCuSeqlens", "apply", "THD tensors, no cu_seqlens", "positions.cu_seqlens is required for the thd layout (got an empty span)",
      apply_case([](ApplyCall& c) {
        c.make_thd({0, 10});
        c.positions = Positions::arange();
      }));
  // A negative num_sequences (once a row here) cannot be written: the count is the span's size.
  add("ApplyThdNoSequences", "apply", "THD cu_seqlens {0}: no sequences",
      "positions.cu_seqlens.size() must be num_sequences + 1 >= 2 for the thd layout (got 1)",
      apply_case([](ApplyCall& c) { c.make_thd({0}); }));
  add("ApplyCuSeqlensWithBshd", "apply", "cu_seqlens given for BSHD",
      "positions.cu_seqlens is only for the thd layout (got 2 cu_seqlens with layout bshd)", apply_case([](ApplyCall& c) {
        c.cu_seqlens = {0, 10};
        c.positions = Positions::arange(c.cu_seqlens);
      }));

  // ---- tables, specs, threads
  add("TableOddRotaryDim", "table", "RopeSpec rotary_dim 15", "rotary_dim must be even (got 15)", throws_case([] {
        RopeSpec spec = small_spec();
        spec.rotary_dim = 15;
        CosSinTable table(spec);
      }));
  add("TableZeroHeadDim", "table", "RopeSpec head_dim 0", "head_dim must be in [2, 65536] (got 0)", throws_case([] {
        RopeSpec spec = small_spec();
        spec.head_dim = 0;
        CosSinTable table(spec);
      }));
  add("TableNanTheta", "table", "RopeSpec theta_base NaN", "RopeSpec matrix: rope_theta must be a finite number > 1 (got nan)", throws_case([] {
        RopeSpec spec = small_spec();
        spec.theta_base = std::numeric_limits<double>::quiet_NaN();
        CosSinTable table(spec);
      }));
  add("TableNegativeFixedPositions", "table", "TableOptions fixed_positions -1",
      "CosSinTable: fixed_positions must be in [0, 2147483648] (got -1)",
      throws_case([] { CosSinTable table(small_spec(), {.fixed_positions = -1}); }));
  add("TableRowNegativePosition", "table", "row(-1)", "CosSinTable::row: position must be >= 0 (got -1)", throws_case([] {
        const CosSinTable table(small_spec(), {.storage = Storage::OnTheFly});
        std::vector<float> c(8), s(8);
        table.row(-1, c.data(), s.data());
      }));
  add("TableReserveHugePositions", "table", "reserve_positions(INT64_MAX)",
      "CosSinTable::reserve_positions: position must be <= 2147483647 (got 9223372036854775806)",
      throws_case([] { CosSinTable(small_spec()).reserve_positions(kInt64Max); }));
  add("RopeCacheNegativeMaxPosition", "table", "RopeCache::table_for(-1)",
      "RopeCache::table_for: max_position must be >= 0 (got -1)", throws_case([] { RopeCache(small_spec()).table_for(-1); }));
  add("ThreadsZero", "apply", "set_num_threads(0)", "set_num_threads: n must be in [1, 256] (got 0)",
      throws_case([] { set_num_threads(0); }));
  add("TensorNegativeExtent", "tensor", "element_count of shape (3, -1, 2, 2)", "tensor x: shape[1] must be >= 0 (got -1)",
      throws_case([] { element_count(contiguous_view(nullptr, DType::F32, Layout::BSHD, {3, -1, 2, 2}), "x"); }));

  // ---- config.json
  add("ConfigNanTheta", "config", "rope_theta NaN", "config.json:1: rope_theta must be a finite number > 1 (got nan)",
      config_case(R"({"head_dim": 128, "rope_theta": NaN})"));
  add("ConfigInfinityFactor", "config", "rope_scaling.factor Infinity", "rope_scaling.factor must be a finite number >= 1 (got inf)",
      config_case(R"({"head_dim": 128, "rope_theta": 10000, "rope_scaling": {"rope_type": "linear", "factor": Infinity}})"));
  add("ConfigNegativeInfinityAttentionFactor", "config", "yarn attention_factor -Infinity",
      "config.json:2: rope_scaling.attention_factor must be a finite number > 0 (got -inf)",
      config_case(R"({"head_dim": 128, "rope_theta": 10000, "max_position_embeddings": 4096, "rope_scaling":
{"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 1024, "attention_factor": -Infinity}})"));
  // The attention scaling multiplies the float32 cos/sin: it must be a normal float32 (the
  // first case is the one-hour hf_config fuzz run's finding, a table of inf).
  add("ConfigYarnMscaleOverflowsFloat32", "config", "yarn mscale 1e306, mscale_all_dim 2",
      "mscale 1e+306 and mscale_all_dim 2 must give an attention scaling in float32's normal range "
      "[1.1754943508222875e-38, 3.4028234663852886e+38] (it multiplies the float32 cos/sin) (got 2.1227590241037106e+305)",
      config_case(R"({"head_dim": 64, "rope_theta": 10000, "max_position_embeddings": 163840, "rope_scaling":
{"rope_type": "yarn", "factor": 40, "original_max_position_embeddings": 4096, "mscale": 1e306, "mscale_all_dim": 2}})"));
  add("ConfigYarnNegativeMscale", "config", "yarn mscale -100 (temperature factor < 0)",
      "mscale must make 0.1*mscale*ln(factor)+1 > 0 (factor 40) (got mscale -100: -35.88879454113936)",
      config_case(R"({"head_dim": 64, "rope_theta": 10000, "max_position_embeddings": 163840, "rope_scaling":
{"rope_type": "yarn", "factor": 40, "original_max_position_embeddings": 4096, "mscale": -100, "mscale_all_dim": 1}})"));
  add("ConfigAttentionFactorUnderflowsFloat32", "config", "yarn attention_factor 1e-40",
      "attention_factor must give an attention scaling in float32's normal range",
      config_case(R"({"head_dim": 64, "rope_theta": 10000, "max_position_embeddings": 8192, "rope_scaling":
{"rope_type": "yarn", "factor": 2, "original_max_position_embeddings": 4096, "attention_factor": 1e-40}})"));
  add("ConfigLongRopeOriginalContextOne", "config", "longrope original_max_position_embeddings 1 (ln 1 = 0)",
      "original_max_position_embeddings must be > 1 for LongRoPE's attention scaling "
      "sqrt(1 + ln(factor)/ln(original_max_position_embeddings)) (got 1)",
      config_case(R"({"head_dim": 4, "rope_theta": 10000, "max_position_embeddings": 4096, "rope_scaling":
{"rope_type": "longrope", "original_max_position_embeddings": 1, "short_factor": [1, 1], "long_factor": [2, 2]}})"));
  add("ConfigOddHeadDim", "config", "head_dim 7", "config.json: rotary_dim (from head_dim) must be even and > 0 (got 7; head_dim 7",
      config_case(R"({"head_dim": 7, "rope_theta": 10000})"));
  add("ConfigZeroHeadDim", "config", "head_dim 0", "head_dim must be a positive integer (got 0)",
      config_case(R"({"head_dim": 0, "rope_theta": 10000})"));
  add("ConfigNegativeMaxPositions", "config", "max_position_embeddings -4096",
      "max_position_embeddings must be a positive integer (got -4096)",
      config_case(R"({"head_dim": 128, "rope_theta": 10000, "max_position_embeddings": -4096})"));
  add("ConfigHugeInteger", "config", "max_position_embeddings 99999999999999999999 (past int64)",
      "max_position_embeddings must be a positive integer (got number 1e+20)",
      config_case(R"({"head_dim": 128, "rope_theta": 10000, "max_position_embeddings": 99999999999999999999})"));
  add("ConfigZeroHeads", "config", "hidden_size 4096, num_attention_heads 0", "num_attention_heads must be a positive integer (got 0)",
      config_case(R"({"hidden_size": 4096, "num_attention_heads": 0, "rope_theta": 10000})"));
  add("ConfigThetaAsString", "config", "rope_theta \"10000\"", "rope_theta must be a finite number > 1 (got string \"10000\")",
      config_case(R"({"head_dim": 128, "rope_theta": "10000"})"));
  add("ConfigUnknownRopeType", "config", "rope_type \"fancy\"", "rope_scaling.rope_type must be one of default, linear, dynamic",
      config_case(R"({"head_dim": 128, "rope_theta": 10000, "rope_scaling": {"rope_type": "fancy", "factor": 2}})"));
  add("ConfigNanPartialRotaryFactor", "config", "partial_rotary_factor NaN", "partial_rotary_factor must be a number in (0, 1] (got nan)",
      config_case(R"({"head_dim": 128, "rope_theta": 10000, "partial_rotary_factor": NaN})"));
  add("ConfigNotAnObject", "config", "the text [1, 2]", "the config must be a JSON object (got array of 2 elements)",
      config_case("[1, 2]"));
  add("ConfigUnknownPreset", "config", "preset(\"llama-9\")", "name or repository id (got \"llama-9\")", throws_case([] { preset("llama-9"); }));

  // ---- JSON
  add("JsonNested10000Deep", "json", "rope_scaling nested 10,000 arrays deep", "nesting deeper than 512 levels",
      [] { return config_case("{\"rope_scaling\": " + std::string(10000, '[') + std::string(10000, ']') + "}")(); });
  add("Json100MegabyteText", "json", "a 100 MB config text", "config.json: JSON text must be at most 67108864 bytes",
      [] { return config_case(std::string(100 << 20, ' '))(); });  // built when run, not when listed
  add("Json100MegabyteFile", "json", "a 100 MB config.json file", "huge.json: JSON text must be at most 67108864 bytes (ParseOptions::max_bytes; a config.json is a few kilobytes) (got 104857600 bytes)",
      throws_case([] { load_hf_config((scratch() / "huge.json").string()); }));
  add("JsonTruncated", "json", "{\"rope_theta\": 1", "config.json: malformed JSON at line 1, column 17: expected ',' or '}' after an object member, but the text ends",
      config_case(R"({"rope_theta": 1)"));
  add("JsonDirectoryAsFile", "json", "a directory given as config.json", "cannot read file: Is a directory",
      throws_case([] { load_hf_config(scratch().string()); }));
  add("JsonLoneSurrogate", "json", "\"\\ud800\" in a key", "config.json: malformed JSON at line 1, column 3: lone surrogate \\ud800",
      config_case(R"({"\ud800": 1})"));

  // ---- .npy
  add("NpyBadMagic", "npy", "a file starting with \"PK\" (a zip)", "npy q.npy: file must start with the magic string '\\x93NUMPY' (got 'PK\\x03\\x04",
      npy_case(std::string("PK\x03\x04\x14\x00\x00\x00", 8)));
  add("NpyTruncatedHeader", "npy", "header length 118, file ends after 7 bytes of header",
      "npy q.npy: header length must be at most 7, the bytes left in the file (got 118)",
      npy_case(std::string("\x93NUMPY\x01\x00\x76\x00{'descr", 17)));
  add("NpyLyingShape", "npy", "shape (1000,) float32 with 4 bytes of data",
      "npy q.npy: data must hold 4000 bytes for shape (1000,) float32 (got 4)",
      npy_case(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (1000,), }\n", "abcd")));
  add("NpyShapeProductOverflows", "npy", "shape (2^32, 2^32) float32",
      "npy q.npy: shape must describe fewer than 2^63 bytes of float32 data (got (4294967296, 4294967296))",
      npy_case(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }\n", "")));
  add("NpyShapeEntryPastInt64", "npy", "shape (99999999999999999999,)", "npy q.npy: shape[0] must fit in int64 (got 99999999999999999999)",
      npy_case(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }\n", "")));
  add("NpyNegativeShape", "npy", "shape (-3,)", "npy q.npy: shape[0] must be >= 0 (got -3)",
      npy_case(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (-3,), }\n", "")));
  add("NpyBigEndian", "npy", "descr '>f4'", "npy q.npy: descr must be little-endian ('<' or '='): rotary does not byte-swap",
      npy_case(npy_file("{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }\n", "abcd")));
  add("NpyWrongDtype", "npy", "descr '<c8'", "npy q.npy: descr must be one of '<f4', '<f2', '<u2' (bfloat16 bits), '<f8', or integers",
      npy_case(npy_file("{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }\n", "abcdefgh")));
  add("NpyFortranOrder", "npy", "fortran_order True", "npy q.npy: fortran_order must be False",
      npy_case(npy_file("{'descr': '<f4', 'fortran_order': True, 'shape': (1,), }\n", "abcd")));
  add("NpyVersion4", "npy", "format version 4.0", "npy q.npy: version must be 1.0, 2.0 or 3.0 (got 4.0)",
      npy_case(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }\n", "abcd", 4)));
  add("NpyTrailingData", "npy", "8 data bytes for shape (1,) float32", "npy q.npy: data must hold 4 bytes for shape (1,) float32 (got 8)",
      npy_case(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }\n", "abcdefgh")));

  // ---- the command
  add("CliUnknownCommand", "cli", "rotary rotate", "command must be one of presets, freqs", cli_case({"rotate"}));
  add("CliUnexpectedArgument", "cli", "rotary freqs --seqlen 5", "freqs: unexpected argument \"--seqlen\"",
      cli_case({"freqs", "--seqlen", "5"}));
  add("CliFlagWithoutValue", "cli", "rotary freqs --seq-len", "freqs: --seq-len needs a value", cli_case({"freqs", "--seq-len"}));
  add("CliNegativeSeqLen", "cli", "rotary freqs --seq-len -1", "freqs: --seq-len must be an integer in [0, 1099511627776] (got -1)",
      cli_case({"freqs", "--seq-len", "-1"}));
  add("CliSeqLenPastInt64", "cli", "rotary freqs --seq-len 99999999999999999999",
      "freqs: --seq-len must be an integer in [0, 1099511627776] (got \"99999999999999999999\")",
      cli_case({"freqs", "--seq-len", "99999999999999999999"}));
  add("CliPresetAndConfig", "cli", "rotary freqs --preset X --config Y", "freqs: give --preset or --config, not both",
      cli_case({"freqs", "--preset", "llama-2-7b", "--config", "nan.json"}));
  add("CliConfigNanTheta", "cli", "rotary freqs --config nan.json (rope_theta NaN)", "nan.json:1: rope_theta must be a finite number > 1 (got nan)",
      cli_case({"freqs", "--config", "nan.json"}));
  add("CliConfigNested10000Deep", "cli", "rotary explain --config deep.json (10,000 levels)", "deep.json: malformed JSON at line 1, column 529: nesting deeper than 512 levels",
      cli_case({"explain", "--config", "deep.json"}));
  add("CliConfig100Megabytes", "cli", "rotary check --config huge.json (100 MB)", "huge.json: JSON text must be at most 67108864 bytes",
      cli_case({"check", "--config", "huge.json"}));
  add("CliApplyWithoutLayout", "cli", "rotary apply without --layout", "apply: --layout is required",
      cli_case({"apply", "--q", "q.npy", "--out-q", "out.npy"}, {"out.npy"}));
  add("CliApplyBadLayout", "cli", "rotary apply --layout bsdh", "apply: --layout must be bshd, bhsd, sbhd or thd (got \"bsdh\")",
      cli_case({"apply", "--q", "q.npy", "--out-q", "out.npy", "--layout", "bsdh"}, {"out.npy"}));
  add("CliApplyWrongRank", "cli", "rotary apply: a 3-d q with --layout bshd", "apply: --q must have 4 dimensions for layout bshd (got shape (3, 2, 128))",
      cli_case({"apply", "--q", "q3.npy", "--out-q", "out.npy", "--layout", "bshd"}, {"out.npy"}));
  add("CliApplyIntegerQ", "cli", "rotary apply: q.npy holds int64", "apply: --q must hold float32, float16, bfloat16 (as uint16) or float64 (got int64)",
      cli_case({"apply", "--q", "q_int.npy", "--out-q", "out.npy", "--layout", "bshd"}, {"out.npy"}));
  add("CliApplyTruncatedNpy", "cli", "rotary apply: q.npy cut at 200 bytes", "npy q_truncated.npy: data must hold 3072 bytes for shape (1, 3, 2, 128) float32 (got 72)",
      cli_case({"apply", "--q", "q_truncated.npy", "--out-q", "out.npy", "--layout", "bshd"}, {"out.npy"}));
  add("CliApplyNegativePosition", "cli", "rotary apply --positions with -1", "apply: positions.values[1] must be in [0, 2147483647] (got -1)",
      cli_case({"apply", "--q", "q.npy", "--out-q", "out.npy", "--layout", "bshd", "--positions", "positions_negative.npy"}, {"out.npy"}));
  add("CliApplyFloatPositions", "cli", "rotary apply --positions of float32", "apply: --positions must hold int64 (got float32)",
      cli_case({"apply", "--q", "q.npy", "--out-q", "out.npy", "--layout", "bshd", "--positions", "positions_float.npy"}, {"out.npy"}));
  add("CliApplyMissingFile", "cli", "rotary apply --q missing.npy", "missing.npy: cannot read file: No such file or directory",
      cli_case({"apply", "--q", "missing.npy", "--out-q", "out.npy", "--layout", "bshd"}, {"out.npy"}));
  add("CliThreadsZero", "cli", "rotary apply --threads 0", "apply: --threads must be an integer in [1, 256] (got 0)",
      cli_case({"apply", "--q", "q.npy", "--out-q", "out.npy", "--layout", "bshd", "--threads", "0"}, {"out.npy"}));
  add("CliTableBackwardRange", "cli", "rotary table --positions 5:3", "table: --positions FIRST:LAST must have FIRST < LAST and at most 1000000 rows (got \"5:3\")",
      cli_case({"table", "--positions", "5:3"}));
  add("CliTablePositionPastMax", "cli", "rotary table --positions 2147483648", "table: --positions entries must be in [0, 2147483647] (got 2147483648)",
      cli_case({"table", "--positions", "2147483648"}));
  add("CliUnknownLayerType", "cli", "rotary explain --layer-type nope", "--layer-type must be one of the config's layer types (it has none) (got \"nope\")",
      cli_case({"explain", "--layer-type", "nope"}));
  add("CliReportWithoutOutput", "cli", "rotary report without -o", "report: -o FILE is required", cli_case({"report"}));
  add("CliBenchFloat64", "cli", "rotary bench --dtypes f64", "bench: --dtypes must list distinct types from float32, bfloat16, float16 (got \"f64\")",
      cli_case({"bench", "--dtypes", "f64"}));
  add("CliSidewaysDirection", "cli", "rotary apply --direction sideways", "apply: --direction must be forward or backward (got \"sideways\")",
      cli_case({"apply", "--q", "q.npy", "--out-q", "out.npy", "--layout", "bshd", "--direction", "sideways"}, {"out.npy"}));
  add("CliVerifyGoldenWithoutDir", "cli", "rotary verify-golden", "verify-golden: DIR is required", cli_case({"verify-golden"}));
  // Sizes a kernel loops over or divides by: zero and negative values are refused by name (a
  // head dim of 0 reaches the kernels only through the library and Python, where it is the empty
  // dot product: tests/attention/special_values_test.cpp).
  add("CliAttentionZeroHeads", "cli", "rotary attention --heads 0", "attention: --heads must be an integer in [1, 65536] (got 0)",
      cli_case({"attention", "--tokens", "8", "--heads", "0"}));
  add("CliAttentionNegativeKvHeads", "cli", "rotary attention --kv-heads -2", "attention: --kv-heads must be an integer in [1, 65536] (got -2)",
      cli_case({"attention", "--tokens", "8", "--kv-heads", "-2"}));
  add("CliAttentionNegativeWindow", "cli", "rotary attention --window -1", "attention: --window must be an integer in [0, ",
      cli_case({"attention", "--tokens", "8", "--window", "-1"}));
  add("CliAttentionPastMemory", "cli", "rotary attention --tokens 32768 --heads 65536 --kv-heads 65536",
      "attention: --tokens + --decode 32768 with 65536 q heads, 65536 kv heads and head_dim 128 need about 6597069766656 bytes",
      cli_case({"attention", "--tokens", "32768", "--heads", "65536", "--kv-heads", "65536"}));
  return cases;
}

// gtest prints a parameter on failure: its name, not its bytes.
void PrintTo(const MatrixCase& row, std::ostream* out) { *out << row.name; }

class BadInputMatrix : public ::testing::TestWithParam<MatrixCase> {};

TEST_P(BadInputMatrix, ErrorNamesTheArgumentAndValueAndLeavesBuffersUntouched) {
  const MatrixCase& row = GetParam();
  SCOPED_TRACE(row.surface + ": " + row.input);
  const Outcome outcome = row.run();
  EXPECT_THAT(outcome.error, HasSubstr(row.expected));
  EXPECT_TRUE(outcome.untouched) << "the failed call changed the caller's buffers or files";
}

INSTANTIATE_TEST_SUITE_P(Reliability, BadInputMatrix, ::testing::ValuesIn(matrix()),
                         [](const ::testing::TestParamInfo<MatrixCase>& row) { return row.param.name; });

// At least 60 rows, and the docs table on request.
TEST(BadInputMatrixTable, HasAtLeastSixtyRowsAndPrintsMarkdown) {
  const std::vector<MatrixCase> cases = matrix();
  EXPECT_GE(cases.size(), 60u);
  if (const char* env = std::getenv("ROTARY_MATRIX_MARKDOWN"); env != nullptr && *env == '1') {
    std::cout << "| # | surface | input | expected error (fragment) |\n|---|---|---|---|\n";
    int index = 1;
    for (const MatrixCase& row : cases) {
      std::string expected = row.expected;
      for (size_t at = 0; (at = expected.find('|', at)) != std::string::npos; at += 2) expected.replace(at, 1, "\\|");
      std::cout << "| " << index++ << " | " << row.surface << " | " << row.input << " | `" << expected << "` |\n";
    }
  }
}

}  // namespace
}  // namespace rotary
