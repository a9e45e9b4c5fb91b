// tests/core/engine_numerics_test.cpp: Precision::Ggml and Precision::Vllm (table.hpp).
//
// Ggml is checked bit for bit against llama.cpp's own CPU rope: tests/data/engines/
// ggml_rope_reference.json holds the cos / sin ggml_rope_ext applied (llama-cpp-python 0.3.36's
// sdist, ggml 0.25.3), made by scripts/engines/ggml_rope_reference.py, which derives the
// parameters from each model's config.json the way llama.cpp's converter and llama_context do.
// Both run glibc's cosf / sinf / powf / logf, so equality is expected on this platform.
//
// Vllm is checked against its definition (the HFCompat chain, positions divided for linear
// scaling, the cast to the cache dtype, the cache length); tests/python/test_engines.py reproduces
// vLLM's _compute_cos_sin_cache in torch.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <filesystem>

#include "core/json.hpp"
#include "rotary/error.hpp"
#include "rotary/presets.hpp"
#include "rotary/table.hpp"
#include "tests/support/spec_builder.hpp"

namespace rotary {
namespace {

using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

TEST(EngineNumerics, GgmlMatchesLlamaCppsOwnRopeBitForBit) {
  const std::string path = std::string(ROTARY_TEST_DATA_DIR) + "/engines/ggml_rope_reference.json";
  const json::Value document = json::parse_file(path);
  const json::Value* cases = document.find("cases");
  ASSERT_NE(cases, nullptr);
  ASSERT_GE(cases->as_array().size(), 6u);
  int64_t compared = 0;
  for (const json::Value& c : cases->as_array()) {
    const std::string name = c.find("name")->as_string();
    SCOPED_TRACE(name);
    const RopeSpec spec = preset(c.find("preset")->as_string()).spec;
    // The GGUF's factor tensor, as llama.cpp's converter wrote it (torch's float32 pow). The one
    // rotary derives from the config is within 1 float32 ulp of it.
    std::vector<float> factors;
    for (const json::Value& v : c.find("factors")->as_array()) factors.push_back(static_cast<float>(v.as_double()));
    const TableOptions options{.precision = Precision::Ggml, .storage = Storage::OnTheFly,
                               .seq_len = c.find("seq_len")->as_int64(), .ggml_freq_factors = factors};
    const CosSinTable table(spec, options);
    if (!factors.empty()) {
      const CosSinTable derived(spec, {.precision = Precision::Ggml, .storage = Storage::OnTheFly,
                                       .seq_len = c.find("seq_len")->as_int64()});
      for (int64_t i = 0; i < table.num_pairs(); ++i) {  // the angle at position 1 is 1 / factor_i scaled
        EXPECT_LE(std::abs(std::bit_cast<int32_t>(derived.inv_freq_f32()[i]) - std::bit_cast<int32_t>(table.inv_freq_f32()[i])),
                  1) << i;
      }
    }
    const auto& positions = c.find("positions")->as_array();
    const auto& rows = c.find("cos_sin_bits")->as_array();
    ASSERT_EQ(positions.size(), rows.size());
    std::vector<float> cos_row(table.num_pairs()), sin_row(table.num_pairs());
    for (size_t r = 0; r < positions.size(); ++r) {
      const int64_t p = positions[r].as_int64();
      table.row(p, cos_row.data(), sin_row.data());
      const auto& pairs = rows[r].as_array();
      ASSERT_EQ(static_cast<int64_t>(pairs.size()), table.num_pairs());
      for (size_t i = 0; i < pairs.size(); ++i) {
        const auto bits_cos = static_cast<uint32_t>(pairs[i].as_array()[0].as_int64());
        const auto bits_sin = static_cast<uint32_t>(pairs[i].as_array()[1].as_int64());
        ASSERT_EQ(std::bit_cast<uint32_t>(cos_row[i]), bits_cos)
            << "position " << p << " pair " << i << ": " << cos_row[i] << " vs ggml " << std::bit_cast<float>(bits_cos);
        ASSERT_EQ(std::bit_cast<uint32_t>(sin_row[i]), bits_sin)
            << "position " << p << " pair " << i << ": " << sin_row[i] << " vs ggml " << std::bit_cast<float>(bits_sin);
        ++compared;
      }
    }
  }
  EXPECT_GT(compared, 5000);
}

// The check above fails on a broken mode: the repeated multiplication replaced by a power per
// pair moves some values at far positions (ggml's theta accumulates one rounding per pair).
TEST(EngineNumerics, GgmlRepeatedMultiplicationDiffersFromAPowerPerPair) {
  const RopeSpec spec = preset("llama-2-7b").spec;
  const CosSinTable table(spec, {.precision = Precision::Ggml, .storage = Storage::OnTheFly});
  std::vector<float> c(64), s(64);
  const int64_t p = 100000;
  table.row(p, c.data(), s.data());
  const float theta_scale = std::pow(10000.0f, -2.0f / 128.0f);
  int differ = 0;
  for (int i = 0; i < 64; ++i) {
    const float by_power = static_cast<float>(p) * std::pow(theta_scale, static_cast<float>(i));
    differ += std::cos(by_power) != c[i];
  }
  EXPECT_GT(differ, 0);
  // And its error against the exact table grows with the position, like any float32 angle.
  const CosSinTable exact(spec, {.storage = Storage::OnTheFly});
  std::vector<float> ec(64), es(64);
  exact.row(p, ec.data(), es.data());
  double worst = 0;
  for (int i = 0; i < 64; ++i) worst = std::max(worst, std::abs(static_cast<double>(c[i]) - ec[i]));
  EXPECT_GT(worst, 1e-4);
  EXPECT_LT(worst, 0.1);
}

TEST(EngineNumerics, GgmlRefusesSchemesLlamaCppHasNoFormFor) {
  RopeSpec dynamic = test::rope_spec({.name = "dyn"});
  dynamic.scaling.type = ScalingType::Dynamic;
  dynamic.scaling.factor = 2.0;
  EXPECT_THAT([&] { CosSinTable(dynamic, {.precision = Precision::Ggml}); },
              ThrowsMessage<Error>(HasSubstr("precision ggml cannot reproduce spec dyn: llama.cpp has no dynamic NTK")));
  EXPECT_THAT([&] { CosSinTable(preset("deepseek-v3").spec, {.precision = Precision::Ggml}); },
              ThrowsMessage<Error>(HasSubstr("mscale_all_dim")));
  EXPECT_THAT([&] { CosSinTable(preset("qwen2-vl-7b").spec, {.precision = Precision::Ggml}); },
              ThrowsMessage<Error>(HasSubstr("axes mrope")));
  EXPECT_THAT([&] { CosSinTable(test::rope_spec(), {.precision = Precision::Ggml, .hf_inv_freq = {1.0f}}); },
              ThrowsMessage<Error>(HasSubstr("hf_inv_freq is for Precision::HFCompat and Vllm only")));
  EXPECT_THAT([&] { CosSinTable(test::rope_spec(), {.precision = Precision::Ggml, .ggml_freq_factors = {1.0f}}); },
              ThrowsMessage<Error>(HasSubstr("ggml_freq_factors is for rope_type llama3 or longrope")));
  EXPECT_THAT([&] { CosSinTable(preset("llama-3.1-8b").spec, {.precision = Precision::Ggml, .ggml_freq_factors = {1.0f}}); },
              ThrowsMessage<Error>(HasSubstr("ggml_freq_factors must have rotary_dim/2 = 64 values (got 1)")));
  std::vector<float> bad(64, 1.0f);
  bad[5] = 0.0f;
  EXPECT_THAT([&] { CosSinTable(preset("llama-3.1-8b").spec, {.precision = Precision::Ggml, .ggml_freq_factors = bad}); },
              ThrowsMessage<Error>(HasSubstr("ggml_freq_factors[5] must be finite and > 0 (got 0)")));
  EXPECT_THAT([&] { CosSinTable(test::rope_spec(), {.precision = Precision::Exact, .ggml_freq_factors = bad}); },
              ThrowsMessage<Error>(HasSubstr("ggml_freq_factors is for Precision::Ggml only")));
}

// Vllm = HFCompat's float32 rows, cast once to the cache dtype, for positions [0, length).
TEST(EngineNumerics, VllmIsTheFloat32CacheCastToTheModelDtype) {
  const RopeSpec spec = preset("qwen2.5-7b-yarn").spec;  // mscale in the values
  const CosSinTable hf(spec, {.precision = Precision::HFCompat, .storage = Storage::OnTheFly});
  for (const DType dtype : {DType::F32, DType::BF16, DType::F16}) {
    SCOPED_TRACE(to_string(dtype));
    const CosSinTable vllm(spec, {.precision = Precision::Vllm, .storage = Storage::OnTheFly, .cache_dtype = dtype});
    EXPECT_EQ(vllm.max_position(), 32768 * 4 - 1);  // YaRN: original context x factor, as vLLM
    EXPECT_EQ(vllm.attention_scaling(), hf.attention_scaling());
    std::vector<float> hc(64), hs(64), vc(64), vs(64);
    for (const int64_t p : {int64_t{0}, int64_t{1}, int64_t{77}, int64_t{4096}, int64_t{131071}}) {
      hf.row(p, hc.data(), hs.data());
      vllm.row(p, vc.data(), vs.data());
      for (int i = 0; i < 64; ++i) {
        const float expected_c = dtype == DType::F32   ? hc[i]
                                 : dtype == DType::BF16 ? bf16_to_float(float_to_bf16(hc[i]))
                                                        : f16_to_float(float_to_f16(hc[i]));
        const float expected_s = dtype == DType::F32   ? hs[i]
                                 : dtype == DType::BF16 ? bf16_to_float(float_to_bf16(hs[i]))
                                                        : f16_to_float(float_to_f16(hs[i]));
        ASSERT_EQ(vc[i], expected_c) << p << " " << i;
        ASSERT_EQ(vs[i], expected_s) << p << " " << i;
      }
    }
    std::vector<float> far_cos(64), far_sin(64);
    EXPECT_THAT([&] { vllm.row(131072, far_cos.data(), far_sin.data()); },
                ThrowsMessage<Error>(HasSubstr("position must be < the fixed table length 131072 (got 131072)")));
  }
}

TEST(EngineNumerics, VllmLinearScalingDividesThePositions) {
  RopeSpec spec = test::rope_spec({.name = "linear", .head_dim = 16, .max_position_embeddings = 64});
  spec.scaling.type = ScalingType::Linear;
  spec.scaling.factor = 3.0;
  const CosSinTable vllm(spec, {.precision = Precision::Vllm, .storage = Storage::OnTheFly});
  RopeSpec unscaled = spec;
  unscaled.scaling = Scaling{};
  const std::vector<float> inv = detail::hf_inv_freq_f32(unscaled, 0);
  std::vector<float> c(8), s(8);
  int differs_from_hf = 0;
  const CosSinTable hf(spec, {.precision = Precision::HFCompat, .storage = Storage::OnTheFly});
  std::vector<float> hc(8), hs(8);
  for (int64_t p = 0; p < 64; ++p) {
    vllm.row(p, c.data(), s.data());
    hf.row(p, hc.data(), hs.data());
    const float t = static_cast<float>(p) / 3.0f;
    for (int i = 0; i < 8; ++i) {
      ASSERT_EQ(c[i], static_cast<float>(std::cos(static_cast<double>(t * inv[i])))) << p << " " << i;
      differs_from_hf += c[i] != hc[i];
    }
  }
  EXPECT_GT(differs_from_hf, 0);  // HF divides inv_freq instead: other roundings
}

// The rows vLLM builds (vllm_cache_rows): linear scaling's cache runs to L x factor, M-RoPE's to
// 4 L, and a position past them is refused naming the length.
TEST(EngineNumerics, VllmServesTheRowsVllmBuilds) {
  RopeSpec linear = test::rope_spec({.name = "linear", .head_dim = 16, .max_position_embeddings = 64});
  linear.scaling.type = ScalingType::Linear;
  linear.scaling.factor = 3.0;
  const CosSinTable vllm(linear, {.precision = Precision::Vllm, .storage = Storage::OnTheFly});
  EXPECT_EQ(vllm.max_position(), 191);  // LinearScalingRotaryEmbedding: arange(64 * 3)
  RopeSpec unscaled = linear;
  unscaled.scaling = Scaling{};
  const std::vector<float> inv = detail::hf_inv_freq_f32(unscaled, 0);
  std::vector<float> c(8), s(8);
  for (const int64_t p : {int64_t{64}, int64_t{100}, int64_t{191}}) {
    vllm.row(p, c.data(), s.data());
    const float t = static_cast<float>(p) / 3.0f;
    for (int i = 0; i < 8; ++i) {
      ASSERT_EQ(c[i], static_cast<float>(std::cos(static_cast<double>(t * inv[i])))) << p << " " << i;
      ASSERT_EQ(s[i], static_cast<float>(std::sin(static_cast<double>(t * inv[i])))) << p << " " << i;
    }
  }
  EXPECT_THAT([&] { vllm.row(192, c.data(), s.data()); },
              ThrowsMessage<Error>(HasSubstr("position must be < the fixed table length 192 (got 192): vLLM's cache "
                                             "has no row for it")));
  const CosSinTable mrope(preset("qwen2-vl-7b").spec, {.precision = Precision::Vllm, .storage = Storage::OnTheFly});
  EXPECT_EQ(mrope.max_position(), 4 * 32768 - 1);  // mrope.py: max_position_embeddings * 4
}

// Phi3LongRoPEScaledRotaryEmbedding: the long cache (positions [0, L)) when max_model_len (seq_len
// here) exceeds the original context, else the short one ([0, L0)); one mscale for both.
TEST(EngineNumerics, VllmLongRopeServesTheLongOrShortCache) {
  const RopeSpec spec = preset("phi-3-mini-128k").spec;
  const double mscale = std::sqrt(1 + std::log(131072.0 / 4096.0) / std::log(4096.0));
  for (const int64_t seq_len : {int64_t{0}, int64_t{4096}, int64_t{4097}, int64_t{131072}}) {
    SCOPED_TRACE(seq_len);
    const bool use_long = seq_len > 4096;
    const CosSinTable vllm(spec, {.precision = Precision::Vllm, .storage = Storage::OnTheFly, .seq_len = seq_len});
    EXPECT_EQ(vllm.max_position(), use_long ? 131071 : 4095);
    EXPECT_EQ(vllm.attention_scaling(), mscale);
    EXPECT_EQ(vllm.inv_freq_f32(), detail::hf_inv_freq_f32(spec, use_long ? 4097 : 0));
    const CosSinTable hf(spec, {.precision = Precision::HFCompat, .storage = Storage::OnTheFly, .seq_len = seq_len});
    std::vector<float> c(48), s(48), hc(48), hs(48);
    for (const int64_t p : {int64_t{0}, int64_t{1}, int64_t{4095}}) {
      vllm.row(p, c.data(), s.data());
      hf.row(p, hc.data(), hs.data());
      ASSERT_EQ(c, hc) << p;
      ASSERT_EQ(s, hs) << p;
    }
    const int64_t past = use_long ? 131072 : 4096;
    EXPECT_THAT([&] { vllm.row(past, c.data(), s.data()); },
                ThrowsMessage<Error>(HasSubstr(detail::concat("fixed table length ", past, " (got ", past, ")"))));
  }
}

TEST(EngineNumerics, VllmRefusesSequenceDependentSchemesAndOtherDtypes) {
  RopeSpec dynamic = test::rope_spec({.name = "dyn"});
  dynamic.scaling.type = ScalingType::Dynamic;
  dynamic.scaling.factor = 2.0;
  EXPECT_THAT([&] { CosSinTable(dynamic, {.precision = Precision::Vllm}); },
              ThrowsMessage<Error>(HasSubstr("precision vllm cannot reproduce spec dyn: rope_type dynamic changes with "
                                             "the sequence length")));
  RopeSpec no_context = test::rope_spec({.max_position_embeddings = 0});
  EXPECT_THAT([&] { CosSinTable(no_context, {.precision = Precision::Vllm}); },
              ThrowsMessage<Error>(HasSubstr("fixed_positions must be given for Precision::Vllm")));
  EXPECT_THAT([&] { CosSinTable(test::rope_spec(), {.precision = Precision::Exact, .cache_dtype = DType::BF16}); },
              ThrowsMessage<Error>(HasSubstr("cache_dtype is for Precision::Vllm only (got bfloat16 with precision exact)")));
  EXPECT_THAT([&] { CosSinTable(test::rope_spec(), {.precision = Precision::Vllm, .cache_dtype = DType::F64}); },
              ThrowsMessage<Error>(HasSubstr("cache_dtype must be float32, bfloat16 or float16")));
}

TEST(EngineNumerics, PrecisionNamesRoundTrip) {
  for (const Precision p : {Precision::Exact, Precision::HFCompat, Precision::Ggml, Precision::Vllm}) {
    EXPECT_EQ(parse_precision(to_string(p)), p);
  }
  EXPECT_EQ(parse_precision("llama.cpp"), Precision::Ggml);
  EXPECT_FALSE(parse_precision("ggml2").has_value());
}

}  // namespace
}  // namespace rotary
