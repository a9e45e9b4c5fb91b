// tests/reliability/fuzz_replay_test.cpp: every fuzz target's checks on its seed corpus
// (fuzz/corpus/<target>/) and on the inputs that once crashed it (tests/reliability/
// fuzz_crashes/<target>/), in the ordinary build and under `make sanitize`.
//
// The targets' functions are linked in from fuzz/*_fuzz.cpp (ROTARY_FUZZ_NO_MAIN): a property
// that fails aborts this process, which fails the test and names the input on stderr. Each
// crash file is also a regression test of its own below, stating the bug it found.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "rotary/apply.hpp"
#include "rotary/error.hpp"
#include "rotary/frequencies.hpp"
#include "rotary/hf_config.hpp"
#include "rotary/table.hpp"
#include "rotary/tensor.hpp"

namespace rotary::fuzz {
int hf_config_one_input(const uint8_t* data, size_t size);
int npy_one_input(const uint8_t* data, size_t size);
int cli_one_input(const uint8_t* data, size_t size);
int apply_args_one_input(const uint8_t* data, size_t size);
int cos_sin_one_input(const uint8_t* data, size_t size);
int safetensors_one_input(const uint8_t* data, size_t size);
int attention_args_one_input(const uint8_t* data, size_t size);
int kv_cache_ops_one_input(const uint8_t* data, size_t size);
}  // namespace rotary::fuzz

#include "cli_sandbox.hpp"  // the CLI target's working directory
#include "tests/support/spec_builder.hpp"

namespace rotary {
namespace {

namespace fs = std::filesystem;

std::vector<char> read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Runs `one_input` on every file of the target's corpus and crash directories; returns how many.
int replay(const std::string& target, int (*one_input)(const uint8_t*, size_t)) {
  int count = 0;
  for (const fs::path& dir : {fs::path(ROTARY_FUZZ_CORPUS_DIR) / target, fs::path(ROTARY_FUZZ_CRASH_DIR) / target}) {
    if (!fs::is_directory(dir)) continue;
    for (const auto& entry : fs::directory_iterator(dir)) {
      const std::vector<char> bytes = read_bytes(entry.path());
      SCOPED_TRACE(entry.path().string());
      one_input(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
      ++count;
    }
  }
  return count;
}

TEST(FuzzReplay, HfConfigCorpus) { EXPECT_GT(replay("hf_config", fuzz::hf_config_one_input), 40); }
TEST(FuzzReplay, NpyCorpus) { EXPECT_GT(replay("npy", fuzz::npy_one_input), 10); }
TEST(FuzzReplay, ApplyArgsCorpus) { EXPECT_GT(replay("apply_args", fuzz::apply_args_one_input), 100); }
TEST(FuzzReplay, CosSinCorpus) { EXPECT_GT(replay("cos_sin", fuzz::cos_sin_one_input), 30); }
TEST(FuzzReplay, SafetensorsCorpus) { EXPECT_GT(replay("safetensors", fuzz::safetensors_one_input), 20); }
TEST(FuzzReplay, AttentionArgsCorpus) { EXPECT_GT(replay("attention_args", fuzz::attention_args_one_input), 20); }
TEST(FuzzReplay, KvCacheOpsCorpus) { EXPECT_GT(replay("kv_cache_ops", fuzz::kv_cache_ops_one_input), 20); }
TEST(FuzzReplay, CliCorpus) {
  const fuzz::Sandbox sandbox;  // the files the corpus names, as the fuzz target has them
  EXPECT_GT(replay("cli", fuzz::cli_one_input), 10);
}

// ---- the bugs the fuzzers found (their inputs are in fuzz_crashes/) --------------------------
//
// attention_args and kv_cache_ops (their regression tests are in tests/attention/, beside the
// code's other tests; the replays above run the inputs):
//   fuzz_crashes/attention_args/scale_1e39_past_float32: options.scale 1e39, finite in double,
//     was accepted; the fast path's fl32(scale) was inf and every output NaN while the reference
//     was finite (AttentionArgs.RejectsAScalePastFloat32NamingIt).
//   fuzz_crashes/attention_args/q_seq_int64_max: a shape whose element count overflows int64
//     was refused with "tensor q: ..." instead of "attention: ..."
//     (AttentionArgs.AbsurdShapesAreRefusedWithTheAttentionPrefix).
//   fuzz_crashes/attention_args/empty_batch_times_seq_overflows (a random-seed run):
//     q with no heads, batch 3 and 2^62 tokens a sequence passed the checks (no elements) and the
//     plan's b x seq overflowed int64 (UBSan; AttentionArgs.EmptyViewsWhoseTokensOrOffsetsOverflow
//     AreRefused).
//   fuzz_crashes/attention_args/head_dim_0_null_k (the first run with head dims of 0 drawn): q
//     and k with head dim 0 hold no element, so null data passes the checks; the bf16 scores'
//     vdpbf16ps path and the float32 in-place K / V rows stepped that null pointer to each key's
//     row (UBSan). Zero head dims now take neither path (AttentionSpecialValues.
//     ZeroHeadDimsWithNullDataOnEveryPath).
//   fuzz_crashes/attention_args/thd_empty_last_sequence_out_stride (the same run): THD with an
//     empty last sequence starts it at token cu_seqlens_q[-1] = seq, and an out of head dim 0 (no
//     elements) had its strides checked only up to (seq - 1) x stride_seq: seq x stride_seq
//     overflowed int64 in the plan (UBSan). Empty views are now checked to their full extents
//     (AttentionArgs.EmptyViewsWhoseTokensOrOffsetsOverflowAreRefused).
//   fuzz_crashes/kv_cache_ops/empty_out_batch_stride_overflows (the same day, kv_cache_ops): the
//     same overflow through KvCache::attend, an empty out whose batch stride times the sequence
//     index left int64 (b x stride_batch); the same check refuses it.
//   fuzz_crashes/kv_cache_ops/attend_scale_1e39: the same scale through KvCache::attend
//     (KvCache.AttendRefusesAScalePastFloat32).
//   fuzz_crashes/kv_cache_ops/huge_batch_of_capacity_0: KvCache(batch 2^62, capacity 0)
//     passed the int64 byte check (no K or V bytes) and threw std::length_error sizing its
//     per-sequence lengths (KvCache.RefusesAHugeBatchOfCapacityZeroNamingIt).
//   fuzz_crashes/kv_cache_ops/out_element_count_overflows: attend's out (and append's k, v, q)
//     with an element count past int64 was refused with "tensor out: ..." without the
//     operation's prefix (KvCache.OverflowingShapesAreRefusedWithTheOperationsPrefix).

RopeSpec spec16() { return test::rope_spec({.name = "regression", .head_dim = 16, .max_position_embeddings = 0}); }

RopeSpec spec16_with_dim(int64_t dim) {
  RopeSpec spec = spec16();
  spec.head_dim = spec.rotary_dim = dim;
  return spec;
}

// fuzz_crashes/apply_args/null_data_offset_with_zero_heads: a tensor with no heads may have null
// data; rotary::apply still stepped that null pointer to each token's row (undefined behaviour,
// reported by UBSan). It now skips a tensor with no heads.
TEST(FuzzRegression, ApplyDoesNotStepTheNullDataOfAHeadlessTensor) {
  const CosSinTable table(spec16());
  std::vector<float> k(3 * 2 * 16, 0.5f), k_out(k.size(), 0.0f);
  const TensorView q = contiguous_view(nullptr, DType::F32, Layout::BSHD, {1, 3, 0, 16});
  const TensorView kv = contiguous_view(k.data(), DType::F32, Layout::BSHD, {1, 3, 2, 16});
  const TensorView ko = contiguous_view(k_out.data(), DType::F32, Layout::BSHD, {1, 3, 2, 16});
  apply(q, kv, q, ko, Positions::arange(), table);
  EXPECT_EQ(k_out[0], 0.5f);       // token 0: the identity rotation
  EXPECT_NE(k_out[16 * 2], 0.0f);  // token 1 was rotated too
}

// fuzz_crashes/apply_args/reference_allocates_per_empty_sequence: an empty call with batch 2^40
// (seq 0) is valid, and reference::apply built a list of 2^40 empty sequences before finding
// nothing to do (out of memory). It now returns at once when there are no tokens.
TEST(FuzzRegression, ReferenceReturnsAtOnceForAHugeBatchOfEmptySequences) {
  const CosSinTable table(spec16());
  const TensorView q = contiguous_view(nullptr, DType::F32, Layout::BSHD, {int64_t{1} << 40, 0, 4, 16});
  EXPECT_NO_THROW(reference::apply(q, TensorView{}, q, TensorView{}, Positions::arange(), table));
  EXPECT_NO_THROW(apply(q, TensorView{}, q, TensorView{}, Positions::arange(), table));
}

// fuzz_crashes/apply_args/huge_batch_of_zero_head_tokens (found by the brief fuzz run of a fresh
// clone's `make test`, a 43 s timeout): q of shape (2^59, 0 heads, 1, 16), BHSD, and no k is a
// valid empty call, but rotary::apply walked its 2^59 tokens to find the largest position before
// noticing that no token has an element. Both apply paths now return first when no token has
// any element.
TEST(FuzzRegression, ApplyReturnsAtOnceForHugelyManyTokensWithoutElements) {
  const CosSinTable table(spec16());
  std::vector<float> q_data(16, 0.5f);
  TensorView q = contiguous_view(q_data.data(), DType::F32, Layout::BHSD, {int64_t{1} << 59, 0, 1, 16});
  q.stride_elems = {0, 16, 16, 1};
  EXPECT_NO_THROW(apply(q, TensorView{}, q, TensorView{}, Positions::arange(), table));
  EXPECT_NO_THROW(reference::apply(q, TensorView{}, q, TensorView{}, Positions::arange(), table));
  EXPECT_EQ(q_data[0], 0.5f);
}

// fuzz_crashes/apply_args/zero_tokens_heads_times_dim_overflows (the first one-hour
// apply_args run): the fix just above first computed heads x dim per token for every call, and a
// call with no tokens may state heads and dim whose product overflows int64 (the checks allow
// it: there is nothing to index). UBSan reported the signed overflow. The test for "no element
// in any token" now compares with zero instead of multiplying.
TEST(FuzzRegression, EmptyCallsDoNotMultiplyHeadsByDim) {
  const CosSinTable table(spec16());
  const TensorView q = contiguous_view(nullptr, DType::F32, Layout::BSHD, {0, 1, int64_t{1} << 62, 16});
  EXPECT_NO_THROW(apply(q, TensorView{}, q, TensorView{}, Positions::arange(), table));
  EXPECT_NO_THROW(reference::apply(q, TensorView{}, q, TensorView{}, Positions::arange(), table));
}

// Found reading reference.cpp after the case above: a tensor without heads may state a head_dim of
// 2^40, and reference::apply sized its one-head scratch by it (out of memory). It now sizes the
// scratch by the tensors that have heads.
TEST(FuzzRegression, ReferenceIgnoresTheHeadDimOfAHeadlessTensor) {
  const CosSinTable table(spec16());
  std::vector<float> k(3 * 2 * 16, 0.5f), k_out(k.size(), 0.0f);
  const TensorView q = contiguous_view(nullptr, DType::F32, Layout::BSHD, {1, 3, 0, int64_t{1} << 40});
  const TensorView kv = contiguous_view(k.data(), DType::F32, Layout::BSHD, {1, 3, 2, 16});
  const TensorView ko = contiguous_view(k_out.data(), DType::F32, Layout::BSHD, {1, 3, 2, 16});
  EXPECT_NO_THROW(reference::apply(q, kv, q, ko, Positions::arange(), table));
  EXPECT_NE(k_out[16 * 2], 0.0f);
}

// fuzz_crashes/apply_args/misaligned_float32_data: a float32 view at an odd address passed the
// checks and was read as float* (misaligned loads: undefined behaviour, reported by UBSan). The
// checks now name the address; the bad-input matrix has the case (ApplyMisalignedData).
TEST(FuzzRegression, MisalignedDataIsAnErrorNamingTheAddress) {
  const CosSinTable table(spec16());
  std::vector<float> q(64, 0.5f);
  const TensorView view =
      contiguous_view(reinterpret_cast<unsigned char*>(q.data()) + 1, DType::F32, Layout::BSHD, {1, 1, 2, 16});
  EXPECT_THROW(apply(view, TensorView{}, view, TensorView{}, Positions::arange(), table), Error);
}

// fuzz_crashes/hf_config/yarn_mscale_1e306_makes_an_infinite_table (the one-hour hf_config
// run, after 5 minutes): a DeepSeek-style YaRN config with mscale 1e306 passed validation (every
// field finite), and its attention scaling, 2.1e305, is finite in double but not in float32: the
// table's rows were inf. validate() now requires the scaling to be a normal float32 and each
// YaRN temperature term 0.1 k ln s + 1 to be positive.
TEST(FuzzRegression, AttentionScalingMustBeANormalFloat32) {
  RopeSpec spec = spec16();
  spec.max_position_embeddings = 163840;
  spec.scaling.type = ScalingType::Yarn;
  spec.scaling.factor = 40.0;
  spec.scaling.original_max_position_embeddings = 4096;
  spec.scaling.mscale_all_dim = 2.0;
  spec.scaling.mscale = 1e306;
  EXPECT_THROW(CosSinTable{spec}, ConfigError);
  spec.scaling.mscale = 1e30;  // 2.1e29: large, but a float32
  const CosSinTable table(spec);
  EXPECT_TRUE(std::isfinite(table.attention_scaling()));
}

// fuzz_crashes/hf_config/dynamic_factor_2e44_cancels_to_base_zero (the second one-hour hf_config
// run, after about 50 minutes): dynamic NTK's bracket s L / Lmax - (s - 1) is exactly 1 at L = Lmax,
// but with s = 2.8e44 it cancelled to 0 even in binary128, so the new base was 0 and every
// inv_freq but the first was inf. It is now evaluated as 1 + s (L - Lmax) / Lmax.
TEST(FuzzRegression, DynamicNtkWithAHugeFactorKeepsFiniteFrequencies) {
  RopeSpec spec = spec16_with_dim(28);
  spec.max_position_embeddings = 9638400;
  spec.scaling.type = ScalingType::Dynamic;
  spec.scaling.factor = 2.7777777777777778e44;
  const Frequencies at_max = frequencies(spec, 0);
  const Frequencies unscaled = frequencies(spec16_with_dim(28), 0);
  ASSERT_EQ(at_max.inv_freq.size(), 14u);
  EXPECT_EQ(at_max.inv_freq, unscaled.inv_freq);  // the bracket is exactly 1 at L = Lmax
  const Frequencies longer = frequencies(spec, 2 * spec.max_position_embeddings);
  for (const double f : longer.inv_freq) EXPECT_TRUE(std::isfinite(f) && f >= 0.0) << f;
  EXPECT_LT(longer.inv_freq[1], unscaled.inv_freq[1]);
}

// fuzz_crashes/hf_config/head_dim_int64_max_converts_to_2_pow_63 (the third one-hour hf_config
// run, after about 54 minutes): head_dim 9223372036854775807 times partial_rotary_factor 1 is
// 2^63 as a double, and converting that back to int64 is undefined (UBSan). The reader now keeps
// such a head_dim as is, and the error names it.
TEST(FuzzRegression, HugeHeadDimIsAnErrorWithoutOverflow) {
  try {
    parse_hf_config(R"({"model_type": "gemma3", "text_config": {"head_dim": 9223372036854775807}})");
    ADD_FAILURE() << "accepted";
  } catch (const ConfigError& error) {
    EXPECT_THAT(error.what(), testing::HasSubstr("head_dim 9223372036854775807"));
  }
}

// fuzz_crashes/apply_args/one_head_with_stride_2_pow_62 (CI's brief apply_args run):
// a tensor with one head may have any head stride (it is never stepped, so the checks do not
// bound it), and the kernels multiplied that stride by the element size to get a byte stride:
// 2^62 x 2 overflows int64 (UBSan). They now take a byte stride only with more than one head.
// With one head the stride cannot matter: the call gives the same bytes as with a plain stride.
TEST(FuzzRegression, OneHeadWithAHugeHeadStrideIsRotatedAsAnyOther) {
  const CosSinTable table(spec16());
  for (const DType dtype : {DType::F32, DType::BF16, DType::F16}) {
    SCOPED_TRACE(to_string(dtype));
    const size_t bytes = 3 * 16 * static_cast<size_t>(dtype_size(dtype));
    std::vector<unsigned char> original(bytes);
    for (size_t i = 0; i < bytes; ++i) original[i] = static_cast<unsigned char>(0x3C + (i * 7) % 5);
    std::vector<unsigned char> plain = original, huge = original;
    TensorView q_plain = contiguous_view(plain.data(), dtype, Layout::BSHD, {1, 3, 1, 16});
    TensorView q_huge = contiguous_view(huge.data(), dtype, Layout::BSHD, {1, 3, 1, 16});
    q_huge.stride_elems[2] = int64_t{1} << 62;
    const std::vector<int64_t> per_token = {0, 7, 3000};
    const Positions positions = Positions::per_token(per_token);
    apply(q_plain, TensorView{}, q_plain, TensorView{}, positions, table);
    apply(q_huge, TensorView{}, q_huge, TensorView{}, positions, table);
    EXPECT_EQ(plain, huge);
    EXPECT_NE(plain, original);  // rotated (positions 7 and 3000)
  }
}

}  // namespace
}  // namespace rotary
