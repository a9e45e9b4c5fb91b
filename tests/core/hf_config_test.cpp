// tests/core/hf_config_test.cpp: reading Hugging Face config.json files (hf_config.hpp).
#include "rotary/hf_config.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "rotary/error.hpp"

namespace rotary {
namespace {

using ::testing::AllOf;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

// A minimal Llama-like config with `extra` members spliced in.
std::string llama(const std::string& extra = "") {
  return R"({"hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
             "max_position_embeddings": 131072, "rope_theta": 500000.0)" +
         (extra.empty() ? std::string() : ", " + extra) + "}";
}

bool any_contains(const std::vector<std::string>& messages, const std::string& needle) {
  for (const std::string& m : messages) {
    if (m.find(needle) != std::string::npos) return true;
  }
  return false;
}

// ---- valid configs --------------------------------------------------------------------------

TEST(HfConfig, ReadsOldRopeScalingWithLlama3) {
  const HfRopeConfig c = parse_hf_config(llama(R"("rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0,
      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"})"));
  EXPECT_EQ(c.spec.scaling.type, ScalingType::Llama3);
  EXPECT_EQ(c.spec.head_dim, 128);
  EXPECT_EQ(c.spec.rotary_dim, 128);
  EXPECT_EQ(c.spec.theta_base, 500000.0);
  EXPECT_EQ(*c.spec.scaling.factor, 8.0);
  EXPECT_EQ(c.spec.scaling.original_max_position_embeddings, 8192);
  EXPECT_EQ(c.spec.num_key_value_heads, 8);
  EXPECT_TRUE(c.warnings.empty());
}

TEST(HfConfig, ReadsNewRopeParametersWithThetaInside) {
  const HfRopeConfig c = parse_hf_config(R"({"hidden_size": 2048, "num_attention_heads": 16, "head_dim": 128,
      "max_position_embeddings": 32768,
      "rope_parameters": {"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 4.0,
                          "original_max_position_embeddings": 8192, "beta_fast": 16.0}})");
  EXPECT_EQ(c.spec.scaling.type, ScalingType::Yarn);
  EXPECT_EQ(c.spec.theta_base, 1e6);
  EXPECT_EQ(c.spec.head_dim, 128);  // explicit head_dim wins over 2048 / 16
  EXPECT_EQ(c.spec.scaling.beta_fast, 16.0);
  EXPECT_EQ(c.spec.scaling.beta_slow, 1.0);
  EXPECT_TRUE(c.spec.scaling.truncate);
}

// sliding_window: read when a positive integer and use_sliding_window is not false (Qwen2 writes
// both, with the window off); anything else is left out with a warning, never an error.
TEST(HfConfig, ReadsSlidingWindowUnlessItIsOffOrNotAPositiveInteger) {
  EXPECT_EQ(parse_hf_config(llama()).sliding_window, std::nullopt);
  EXPECT_EQ(parse_hf_config(llama(R"("sliding_window": 4096)")).sliding_window, 4096);
  EXPECT_EQ(parse_hf_config(llama(R"("sliding_window": null)")).sliding_window, std::nullopt);
  EXPECT_EQ(parse_hf_config(llama(R"("sliding_window": 4096, "use_sliding_window": true)")).sliding_window, 4096);
  const HfRopeConfig off = parse_hf_config(llama(R"("sliding_window": 131072, "use_sliding_window": false)"));
  EXPECT_EQ(off.sliding_window, std::nullopt);
  EXPECT_FALSE(any_contains(off.warnings, "sliding_window"));
  const HfRopeConfig odd = parse_hf_config(llama(R"("sliding_window": 0)"));
  EXPECT_EQ(odd.sliding_window, std::nullopt);
  EXPECT_TRUE(any_contains(odd.warnings, "config.json: sliding_window is not a positive integer (got number 0); no sliding window is read from it")) << ::testing::PrintToString(odd.warnings);
  EXPECT_EQ(parse_hf_config(R"({"num_attention_heads": 8, "hidden_size": 512, "text_config": {"sliding_window": 512}})").sliding_window, 512);
}

TEST(HfConfig, TypeIsAnAliasOfRopeType) {
  const HfRopeConfig c = parse_hf_config(llama(R"("rope_scaling": {"type": "linear", "factor": 2.0})"));
  EXPECT_EQ(c.spec.scaling.type, ScalingType::Linear);
}

TEST(HfConfig, RopeTypeWinsOverTypeWithAWarning) {
  const HfRopeConfig c =
      parse_hf_config(llama(R"("rope_scaling": {"rope_type": "linear", "type": "dynamic", "factor": 2.0})"));
  EXPECT_EQ(c.spec.scaling.type, ScalingType::Linear);
  EXPECT_TRUE(any_contains(c.warnings, "rope_type is used"));
}

TEST(HfConfig, RopeScalingWinsOverRopeParametersWithAWarning) {
  const HfRopeConfig c = parse_hf_config(llama(R"("rope_scaling": {"rope_type": "linear", "factor": 2.0},
      "rope_parameters": {"rope_type": "dynamic", "factor": 3.0})"));
  EXPECT_EQ(c.spec.scaling.type, ScalingType::Linear);
  EXPECT_TRUE(any_contains(c.warnings, "both rope_scaling and rope_parameters"));
}

TEST(HfConfig, NullRopeScalingMeansDefault) {
  const HfRopeConfig c = parse_hf_config(llama(R"("rope_scaling": null)"));
  EXPECT_EQ(c.spec.scaling.type, ScalingType::Default);
}

TEST(HfConfig, MissingThetaDefaultsTo10000WithAWarning) {
  const HfRopeConfig c = parse_hf_config(R"({"hidden_size": 512, "num_attention_heads": 8})");
  EXPECT_EQ(c.spec.theta_base, 10000.0);
  EXPECT_EQ(c.spec.head_dim, 64);
  EXPECT_TRUE(any_contains(c.warnings, "rope_theta is not set"));
}

TEST(HfConfig, GptNeoxRotaryPctAndRotaryEmbBase) {
  const HfRopeConfig c = parse_hf_config(R"({"hidden_size": 6144, "num_attention_heads": 64,
      "max_position_embeddings": 2048, "rotary_emb_base": 10000, "rotary_pct": 0.25})");
  EXPECT_EQ(c.spec.head_dim, 96);
  EXPECT_EQ(c.spec.rotary_dim, 24);
  EXPECT_EQ(c.spec.partial_rotary_factor, 0.25);
}

TEST(HfConfig, GptjNamesAndAbsoluteRotaryDim) {
  const HfRopeConfig c = parse_hf_config(R"({"model_type": "gptj", "n_embd": 4096, "n_head": 16,
      "n_positions": 2048, "rotary_dim": 64})");
  EXPECT_EQ(c.spec.head_dim, 256);
  EXPECT_EQ(c.spec.rotary_dim, 64);
  EXPECT_EQ(c.spec.max_position_embeddings, 2048);
  EXPECT_EQ(c.spec.style, Style::GPTJ);
}

TEST(HfConfig, PartialRotaryFactorTruncatesLikeHuggingFace) {
  // int(80 * 0.4) = 32 (Phi-2).
  const HfRopeConfig c = parse_hf_config(R"({"hidden_size": 2560, "num_attention_heads": 32,
      "partial_rotary_factor": 0.4, "rope_theta": 10000.0})");
  EXPECT_EQ(c.spec.head_dim, 80);
  EXPECT_EQ(c.spec.rotary_dim, 32);
}

TEST(HfConfig, TopLevelPartialRotaryFactorOverridesTheDict) {
  const HfRopeConfig c = parse_hf_config(R"({"hidden_size": 2048, "num_attention_heads": 16,
      "partial_rotary_factor": 0.5, "rope_parameters": {"rope_type": "default", "partial_rotary_factor": 0.25}})");
  EXPECT_EQ(c.spec.rotary_dim, 64);
}

TEST(HfConfig, DeepseekRopeSliceAndInterleave) {
  const HfRopeConfig c = parse_hf_config(R"({"model_type": "deepseek_v3", "hidden_size": 7168,
      "num_attention_heads": 128, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
      "max_position_embeddings": 163840, "rope_theta": 10000,
      "rope_scaling": {"type": "yarn", "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                       "original_max_position_embeddings": 4096, "beta_fast": 32, "beta_slow": 1}})");
  EXPECT_EQ(c.spec.head_dim, 64);
  EXPECT_EQ(c.spec.rotary_dim, 64);
  EXPECT_EQ(c.spec.style, Style::GPTJ);  // deepseek_v3 defaults to rope_interleave = true
  EXPECT_EQ(*c.spec.scaling.mscale, 1.0);
}

TEST(HfConfig, RopeInterleaveFalseKeepsNeox) {
  const HfRopeConfig c = parse_hf_config(llama(R"("model_type": "deepseek_v3", "rope_interleave": false)"));
  EXPECT_EQ(c.spec.style, Style::NeoX);
}

// Phi-3's published layout (top-level original_max_position_embeddings, no factor) is correct:
// what transformers says about it is a note, not a warning.
TEST(HfConfig, PhiTopLevelOriginalMaxOverridesWithANoteNotAWarning) {
  std::string shorts = "[";
  for (int i = 0; i < 48; ++i) shorts += (i ? ", " : "") + std::string("1.5");
  shorts += "]";
  const HfRopeConfig c = parse_hf_config(R"({"hidden_size": 3072, "num_attention_heads": 32,
      "max_position_embeddings": 131072, "original_max_position_embeddings": 4096, "rope_theta": 10000.0,
      "rope_scaling": {"type": "longrope", "short_factor": )" + shorts + R"(, "long_factor": )" + shorts + "}}");
  EXPECT_EQ(c.spec.scaling.type, ScalingType::LongRope);
  EXPECT_EQ(c.spec.scaling.original_max_position_embeddings, 4096);
  EXPECT_FALSE(c.spec.scaling.factor.has_value());
  EXPECT_TRUE(c.warnings.empty()) << c.warnings.front();
  EXPECT_TRUE(any_contains(c.notes, "has no factor"));
  // The same lists with original_max_position_embeddings inside rope_scaling and no factor: a
  // layout transformers recommends completing, so rotary says so.
  const HfRopeConfig in_dict = parse_hf_config(R"({"hidden_size": 3072, "num_attention_heads": 32,
      "max_position_embeddings": 131072, "rope_theta": 10000.0, "rope_scaling": {"type": "longrope",
      "original_max_position_embeddings": 4096, "short_factor": )" + shorts + R"(, "long_factor": )" + shorts + "}}");
  EXPECT_TRUE(any_contains(in_dict.warnings, "has no factor"));
}

TEST(HfConfig, SuIsLongRope) {
  std::string list = "[";
  for (int i = 0; i < 64; ++i) list += (i ? ", " : "") + std::string("1.0");
  list += "]";
  const HfRopeConfig c = parse_hf_config(
      llama(R"("rope_scaling": {"type": "su", "factor": 2.0, "short_factor": )" + list + R"(, "long_factor": )" +
            list + "}"));
  EXPECT_EQ(c.spec.scaling.type, ScalingType::LongRope);
}

TEST(HfConfig, YarnOriginalDefaultsToMaxWithAWarning) {
  const HfRopeConfig c = parse_hf_config(llama(R"("rope_scaling": {"type": "yarn", "factor": 4.0})"));
  EXPECT_EQ(c.spec.scaling.original_max_position_embeddings, 131072);
  EXPECT_TRUE(any_contains(c.warnings, "original_max_position_embeddings is not set"));
}

TEST(HfConfig, YarnFactorMismatchWarnsLikeHuggingFace) {
  const HfRopeConfig c = parse_hf_config(
      llama(R"("rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8192})"));
  EXPECT_TRUE(any_contains(c.warnings, "does not match"));
}

// Qwen3's documented YaRN recipe: factor 4 over 32768, max_position_embeddings left at 40960.
// The scaling reaches 131072 > 40960: nothing is wrong, so transformers' warning is a note.
TEST(HfConfig, YarnFactorPastMaxPositionsIsANoteNotAWarning) {
  const HfRopeConfig c = parse_hf_config(R"({"head_dim": 128, "hidden_size": 4096, "max_position_embeddings": 40960,
      "model_type": "qwen3", "num_attention_heads": 32, "num_key_value_heads": 8, "rope_theta": 1000000,
      "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}})");
  EXPECT_TRUE(c.warnings.empty()) << c.warnings.front();
  EXPECT_TRUE(any_contains(c.notes, "does not match"));
}

TEST(HfConfig, YarnBetaZeroMeansDefault) {
  const HfRopeConfig c = parse_hf_config(llama(
      R"("rope_scaling": {"type": "yarn", "factor": 16.0, "original_max_position_embeddings": 8192, "beta_fast": 0})"));
  EXPECT_EQ(c.spec.scaling.beta_fast, 32.0);
  EXPECT_TRUE(any_contains(c.warnings, "beta_fast = 0"));
}

TEST(HfConfig, YarnTruncateFalse) {
  const HfRopeConfig c = parse_hf_config(llama(
      R"("rope_scaling": {"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 8192, "truncate": false})"));
  EXPECT_FALSE(c.spec.scaling.truncate);
}

TEST(HfConfig, Llama3OriginalNotBelowMaxWarns) {
  const HfRopeConfig c = parse_hf_config(R"({"hidden_size": 4096, "num_attention_heads": 32,
      "max_position_embeddings": 8192, "rope_scaling": {"rope_type": "llama3", "factor": 8.0,
      "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}})");
  EXPECT_TRUE(any_contains(c.warnings, "should be less than max_position_embeddings"));
}

TEST(HfConfig, UnknownKeysWarn) {
  const HfRopeConfig c = parse_hf_config(llama(R"("rope_scaling": {"type": "linear", "factor": 2.0, "fudge": 1})"));
  EXPECT_TRUE(any_contains(c.warnings, "fudge"));
}

TEST(HfConfig, DuplicateKeysWarnAndLastWins) {
  const HfRopeConfig c = parse_hf_config(R"({"hidden_size": 512, "num_attention_heads": 8, "rope_theta": 5.0,
      "rope_theta": 1000.0})");
  EXPECT_EQ(c.spec.theta_base, 1000.0);
  EXPECT_TRUE(any_contains(c.warnings, "rope_theta"));
}

TEST(HfConfig, DynamicWithAlphaIsStaticNtkAlpha) {
  const HfRopeConfig c = parse_hf_config(llama(R"("rope_scaling": {"type": "dynamic", "alpha": 1000.0, "factor": 1.0})"));
  EXPECT_EQ(c.spec.scaling.type, ScalingType::NtkAlpha);
  EXPECT_EQ(c.spec.scaling.ntk_alpha, 1000.0);
}

TEST(HfConfig, DynamicWithAlphaNeedsNoFactor) {
  const HfRopeConfig c = parse_hf_config(llama(R"("rope_scaling": {"type": "dynamic", "alpha": 8.0})"));
  EXPECT_EQ(c.spec.scaling.type, ScalingType::NtkAlpha);
  EXPECT_EQ(c.spec.scaling.ntk_alpha, 8.0);
}

TEST(HfConfig, Gemma4FullAttentionLayersUseGlobalHeadDim) {
  const HfRopeConfig c = parse_hf_config(R"({"hidden_size": 2560, "num_attention_heads": 8, "head_dim": 256,
      "global_head_dim": 512, "layer_types": ["sliding_attention", "full_attention"],
      "rope_parameters": {
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        "full_attention": {"rope_type": "proportional", "rope_theta": 1000000.0, "partial_rotary_factor": 0.25}}})");
  ASSERT_EQ(c.layer_type_specs.size(), 2u);
  EXPECT_EQ(c.layer_type_specs[0].second.head_dim, 256);
  EXPECT_EQ(c.spec.head_dim, 512);
  EXPECT_EQ(c.spec.rotary_dim, 512);
}

TEST(HfConfig, TopLevelOriginalMaxAppliesOnlyToASingleRopeDict) {
  const HfRopeConfig c = parse_hf_config(R"({"hidden_size": 4096, "num_attention_heads": 32,
      "max_position_embeddings": 32768, "original_max_position_embeddings": 4096,
      "layer_types": ["full_attention"],
      "rope_parameters": {"full_attention": {"rope_type": "yarn", "factor": 4.0}}})");
  EXPECT_EQ(c.spec.scaling.original_max_position_embeddings, 32768);  // HF: setdefault(max)
}

TEST(HfConfig, Qwen2VlMropeSectionsWithLegacyMropeType) {
  const HfRopeConfig c = parse_hf_config(R"({"hidden_size": 3584, "num_attention_heads": 28,
      "num_key_value_heads": 4, "max_position_embeddings": 32768, "rope_theta": 1000000.0,
      "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}})");
  EXPECT_EQ(c.spec.scaling.type, ScalingType::Default);
  EXPECT_EQ(c.spec.axes, PositionAxes::MRope);
  EXPECT_EQ(c.spec.mrope.pairs, (std::array<int64_t, 3>{16, 24, 24}));
  EXPECT_EQ(c.spec.mrope.assignment, MRopeAssignment::Chunked);
}

TEST(HfConfig, Qwen3VlTextConfigInterleavedMrope) {
  const HfRopeConfig c = parse_hf_config(R"({"model_type": "qwen3_vl", "text_config": {"hidden_size": 4096,
      "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 262144,
      "rope_theta": 5000000, "rope_scaling": {"rope_type": "default", "mrope_interleaved": true,
      "mrope_section": [24, 20, 20]}}})");
  EXPECT_EQ(c.spec.head_dim, 128);
  EXPECT_EQ(c.spec.theta_base, 5e6);
  EXPECT_EQ(c.spec.axes, PositionAxes::MRope);
  EXPECT_EQ(c.spec.mrope.assignment, MRopeAssignment::Interleaved);
}

TEST(HfConfig, PerLayerTypeRopeParameters) {
  const HfRopeConfig c = parse_hf_config(R"({"hidden_size": 2560, "num_attention_heads": 8, "head_dim": 256,
      "max_position_embeddings": 131072,
      "layer_types": ["sliding_attention", "sliding_attention", "full_attention"],
      "rope_parameters": {
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0}}})");
  ASSERT_EQ(c.layer_type_specs.size(), 2u);
  EXPECT_EQ(c.layer_types.size(), 3u);
  EXPECT_EQ(c.spec.scaling.type, ScalingType::Linear);  // the full-attention spec
  EXPECT_EQ(c.spec.theta_base, 1e6);
  EXPECT_EQ(c.layer_type_specs[0].first, "sliding_attention");
  EXPECT_EQ(c.layer_type_specs[0].second.theta_base, 1e4);
}

TEST(HfConfig, Gemma3LocalBaseFreqBecomesSlidingLayerSpec) {
  const HfRopeConfig c = parse_hf_config(R"({"hidden_size": 2560, "num_attention_heads": 8, "head_dim": 256,
      "max_position_embeddings": 131072, "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
      "rope_scaling": {"rope_type": "linear", "factor": 8.0},
      "layer_types": ["sliding_attention", "full_attention"]})");
  ASSERT_EQ(c.layer_type_specs.size(), 2u);
  EXPECT_EQ(c.layer_type_specs[1].first, "sliding_attention");
  EXPECT_EQ(c.layer_type_specs[1].second.theta_base, 10000.0);
  EXPECT_EQ(c.layer_type_specs[1].second.scaling.type, ScalingType::Default);
  EXPECT_EQ(c.spec.scaling.type, ScalingType::Linear);
}

TEST(HfConfig, KnownFamilyDefaultsFillOmittedKeysSilently) {
  // LlamaConfig's rope_theta default is 10000: Llama 2's file omits the key.
  const HfRopeConfig llama2 = parse_hf_config(R"({"model_type": "llama", "hidden_size": 4096,
      "num_attention_heads": 32, "max_position_embeddings": 4096})");
  EXPECT_EQ(llama2.spec.theta_base, 1e4);
  EXPECT_TRUE(llama2.warnings.empty());
  // Gemma3TextConfig: 1e6 global, 1e4 sliding, 131072 positions, none stated in Google's file.
  const HfRopeConfig gemma3 = parse_hf_config(R"({"model_type": "gemma3", "text_config": {
      "model_type": "gemma3_text", "head_dim": 128, "hidden_size": 5376, "num_attention_heads": 32,
      "num_key_value_heads": 16, "rope_scaling": {"factor": 8.0, "rope_type": "linear"}}})");
  EXPECT_EQ(gemma3.spec.theta_base, 1e6);
  EXPECT_EQ(gemma3.spec.max_position_embeddings, 131072);
  ASSERT_EQ(gemma3.layer_type_specs.size(), 2u);
  EXPECT_EQ(gemma3.layer_type_specs[1].first, "sliding_attention");
  EXPECT_EQ(gemma3.layer_type_specs[1].second.theta_base, 1e4);
  EXPECT_EQ(gemma3.layer_type_specs[1].second.scaling.type, ScalingType::Default);
  EXPECT_TRUE(gemma3.warnings.empty());
}

TEST(HfConfig, ProportionalRotatesTheWholeHead) {
  const HfRopeConfig c = parse_hf_config(R"({"hidden_size": 2048, "num_attention_heads": 8, "head_dim": 512,
      "rope_parameters": {"rope_type": "proportional", "rope_theta": 1000000.0, "partial_rotary_factor": 0.25}})");
  EXPECT_EQ(c.spec.scaling.type, ScalingType::Proportional);
  EXPECT_EQ(c.spec.rotary_dim, 512);
  EXPECT_EQ(c.spec.partial_rotary_factor, 0.25);
}

TEST(HfConfig, AcceptsIntegralFloatsForIntegers) {
  const HfRopeConfig c = parse_hf_config(R"({"hidden_size": 4096.0, "num_attention_heads": 32})");
  EXPECT_EQ(c.spec.head_dim, 128);
}

TEST(HfConfig, WarnsWhenHiddenSizeIsNotAMultipleOfHeads) {
  const HfRopeConfig c = parse_hf_config(R"({"hidden_size": 130, "num_attention_heads": 4})");
  EXPECT_EQ(c.spec.head_dim, 32);  // 130 // 4, as transformers computes it
  EXPECT_TRUE(any_contains(c.warnings, "not a multiple"));
}

TEST(HfConfig, LoadsAFileAndNamesItInErrors) {
  const std::filesystem::path path = std::filesystem::temp_directory_path() / "rotary_hf_config_test.json";
  {
    std::ofstream out(path);
    out << "{\n  \"hidden_size\": 4096,\n  \"num_attention_heads\": 32,\n  \"rope_theta\": -1\n}\n";
  }
  EXPECT_THAT([&] { load_hf_config(path.string()); },
              ThrowsMessage<ConfigError>(AllOf(HasSubstr(path.string() + ":4:"), HasSubstr("rope_theta"),
                                               HasSubstr("got -1"))));
  std::filesystem::remove(path);
}

// ---- invalid configs: every message names the field and the value ---------------------------

struct InvalidCase {
  const char* name;
  std::string json;
  std::vector<std::string> expected;  // substrings: the field, the value, what is accepted
};

std::string number_list(int n, const char* value = "1.0") {
  std::string list = "[";
  for (int i = 0; i < n; ++i) list += (i ? ", " : "") + std::string(value);
  return list + "]";
}

std::vector<InvalidCase> invalid_cases() {
  return {
      {"RootNotObject", "[1, 2]", {"must be a JSON object", "array of 2 elements"}},
      {"MalformedJsonHasLineAndColumn", "{\n  \"hidden_size\": 4096,\n  \"rope_theta\": 1e4,,\n}",
       {"line 3, column"}},
      {"NoHeadDim", R"({"rope_theta": 10000.0})", {"head_dim is missing", "neither"}},
      {"HiddenSizeString", R"({"hidden_size": "4096", "num_attention_heads": 32})",
       {"hidden_size must be a positive integer", "string \"4096\""}},
      {"HeadsZero", R"({"hidden_size": 4096, "num_attention_heads": 0})", {"num_attention_heads", "got 0"}},
      {"HeadDimNegative", R"({"head_dim": -64, "hidden_size": 4096, "num_attention_heads": 32})",
       {"head_dim must be a positive integer", "got -64"}},
      {"HeadDimFraction", R"({"head_dim": 64.5, "hidden_size": 4096, "num_attention_heads": 32})",
       {"head_dim must be a positive integer", "number 64.5"}},
      {"KvHeadsDoNotDivide", llama(R"("num_key_value_heads": 5)"), {"num_key_value_heads", "got 5"}},
      {"ThetaZero", llama(R"("rope_theta": 0)"), {"rope_theta must be a finite number > 1", "got 0"}},
      {"ThetaNegative", R"({"head_dim": 64, "rope_theta": -10000})", {"rope_theta", "got -10000"}},
      {"ThetaNaN", R"({"head_dim": 64, "rope_theta": NaN})", {"rope_theta", "got nan"}},
      {"ThetaInfinity", R"({"head_dim": 64, "rope_theta": Infinity})", {"rope_theta", "got inf"}},
      {"ThetaOverflow", R"({"head_dim": 64, "rope_theta": 1e999})", {"rope_theta", "got inf"}},
      {"ThetaBool", R"({"head_dim": 64, "rope_theta": true})", {"rope_theta", "got true"}},
      {"ThetaInDictNaN", R"({"head_dim": 64, "rope_parameters": {"rope_type": "default", "rope_theta": NaN}})",
       {"rope_parameters.rope_theta", "got nan"}},
      {"OddHeadDim", R"({"head_dim": 63, "rope_theta": 10000})", {"rotary_dim", "must be even", "got 63"}},
      {"OddRotaryDimFromFactor", R"({"head_dim": 100, "partial_rotary_factor": 0.25})",
       {"rotary_dim (from partial_rotary_factor) must be even", "got 25"}},
      {"OddGptjRotaryDim", R"({"n_embd": 4096, "n_head": 16, "rotary_dim": 63})",
       {"rotary_dim", "must be even", "got 63"}},
      {"RotaryDimTooLarge", R"({"n_embd": 4096, "n_head": 16, "rotary_dim": 512})",
       {"rotary_dim", "head_dim 256", "got 512"}},
      {"PartialFactorAboveOne", R"({"head_dim": 64, "partial_rotary_factor": 1.5})",
       {"partial_rotary_factor must be a number in (0, 1]", "got 1.5"}},
      {"PartialFactorZero", R"({"head_dim": 64, "partial_rotary_factor": 0})",
       {"partial_rotary_factor", "got 0"}},
      {"RopeScalingNotObject", llama(R"("rope_scaling": [8])"), {"rope_scaling must be an object", "array of 1 element"}},
      {"UnknownRopeType", llama(R"("rope_scaling": {"rope_type": "magic", "factor": 2.0})"),
       {"rope_scaling.rope_type must be one of", "yarn", "got \"magic\""}},
      {"RopeTypeNotString", llama(R"("rope_scaling": {"rope_type": 3})"),
       {"rope_scaling.rope_type must be a string", "number 3"}},
      {"LinearMissingFactor", llama(R"("rope_scaling": {"rope_type": "linear"})"),
       {"rope_scaling.factor is missing", "linear"}},
      {"LinearFactorBelowOne", llama(R"("rope_scaling": {"rope_type": "linear", "factor": 0.5})"),
       {"rope_scaling.factor must be a finite number >= 1", "got 0.5"}},
      {"LinearFactorString", llama(R"("rope_scaling": {"rope_type": "linear", "factor": "8"})"),
       {"rope_scaling.factor", "string \"8\""}},
      {"LinearFactorNull", llama(R"("rope_scaling": {"rope_type": "linear", "factor": null})"),
       {"rope_scaling.factor", "got null"}},
      {"DynamicFactorNaN", llama(R"("rope_scaling": {"rope_type": "dynamic", "factor": NaN})"),
       {"rope_scaling.factor", "got nan"}},
      {"DynamicWithoutMaxPositions",
       R"({"head_dim": 64, "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}})",
       {"max_position_embeddings is missing", "dynamic"}},
      {"YarnMissingFactor", llama(R"("rope_scaling": {"rope_type": "yarn", "original_max_position_embeddings": 8192})"),
       {"rope_scaling.factor is missing", "yarn"}},
      {"YarnBetaFastBelowBetaSlow",
       llama(R"("rope_scaling": {"rope_type": "yarn", "factor": 4.0, "beta_fast": 2, "beta_slow": 8})"),
       {"rope_scaling.beta_fast must be >= beta_slow 8", "got 2"}},
      {"YarnBetaNegative", llama(R"("rope_scaling": {"rope_type": "yarn", "factor": 4.0, "beta_slow": -1})"),
       {"rope_scaling.beta_slow", "got -1"}},
      {"YarnAttentionFactorNegative",
       llama(R"("rope_scaling": {"rope_type": "yarn", "factor": 4.0, "attention_factor": -0.5})"),
       {"rope_scaling.attention_factor must be a finite number > 0", "got -0.5"}},
      {"YarnTruncateNotBool", llama(R"("rope_scaling": {"rope_type": "yarn", "factor": 4.0, "truncate": "no"})"),
       {"rope_scaling.truncate must be true or false", "string \"no\""}},
      {"YarnMscaleInfinite", llama(R"("rope_scaling": {"rope_type": "yarn", "factor": 4.0, "mscale": Infinity})"),
       {"rope_scaling.mscale", "got inf"}},
      {"YarnOriginalNegative",
       llama(R"("rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": -4096})"),
       {"rope_scaling.original_max_position_embeddings must be a positive integer", "got -4096"}},
      {"LongropeMissingLongFactor",
       llama(R"("rope_scaling": {"rope_type": "longrope", "short_factor": )" + number_list(64) + "}"),
       {"rope_scaling.long_factor is missing", "longrope"}},
      {"LongropeWrongLength",
       llama(R"("rope_scaling": {"rope_type": "longrope", "short_factor": )" + number_list(63) +
             R"(, "long_factor": )" + number_list(64) + "}"),
       {"rope_scaling.short_factor must have rotary_dim/2 = 64 elements", "got 63"}},
      {"LongropeNotAList",
       llama(R"("rope_scaling": {"rope_type": "longrope", "short_factor": 1.0, "long_factor": )" + number_list(64) + "}"),
       {"rope_scaling.short_factor must be a list of numbers", "number 1"}},
      {"LongropeNegativeEntry",
       llama(R"("rope_scaling": {"rope_type": "longrope", "short_factor": )" + number_list(64) +
             R"(, "long_factor": )" + number_list(64, "-2.0") + "}"),
       {"rope_scaling.long_factor[0] must be a finite number > 0", "got -2"}},
      {"Llama3MissingHighFreqFactor",
       llama(R"("rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0})"),
       {"rope_scaling.high_freq_factor is missing", "llama3"}},
      {"Llama3LowNotBelowHigh",
       llama(R"("rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0, "high_freq_factor": 4.0})"),
       {"rope_scaling.high_freq_factor must be > low_freq_factor 4", "got 4"}},
      {"Llama3LowFreqZero",
       llama(R"("rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 0, "high_freq_factor": 4.0})"),
       {"rope_scaling.low_freq_factor must be a finite number > 0", "got 0"}},
      {"MropeSectionWrongSum", llama(R"("rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 16]})"),
       {"rope_scaling.mrope_section must sum to rotary_dim/2 = 64", "sum 56"}},
      {"MropeSectionNotThree", llama(R"("rope_scaling": {"type": "mrope", "mrope_section": [32, 32]})"),
       {"rope_scaling.mrope_section must be a list of 3 integers", "array of 2 elements"}},
      {"MropeSectionNegative", llama(R"("rope_scaling": {"type": "mrope", "mrope_section": [80, -8, -8]})"),
       {"rope_scaling.mrope_section[1] must be an integer >= 0", "number -8"}},
      {"LayerTypesNotList", llama(R"("layer_types": "full_attention")"),
       {"layer_types must be a list of strings", "string \"full_attention\""}},
      {"LayerTypeEntryNotObject",
       llama(R"("layer_types": ["full_attention"], "rope_parameters": {"full_attention": 3})"),
       {"rope_parameters.full_attention must be an object", "number 3"}},
      {"NestedLayerTypeInvalidFactor",
       llama(R"("layer_types": ["full_attention", "sliding_attention"], "rope_parameters": {
              "full_attention": {"rope_type": "linear", "factor": 0.25},
              "sliding_attention": {"rope_type": "default"}})"),
       {"rope_parameters.full_attention.factor", "got 0.25"}},
      {"TextConfigNotObject", R"({"text_config": 7})", {"text_config must be an object", "number 7"}},
      {"InterleaveNotBool", llama(R"("rope_interleave": 1)"), {"rope_interleave must be true or false", "number 1"}},
  };
}

class HfConfigInvalid : public ::testing::TestWithParam<InvalidCase> {};

TEST_P(HfConfigInvalid, RejectsNamingFieldAndValue) {
  const InvalidCase& c = GetParam();
  try {
    parse_hf_config(c.json, "config.json");
    FAIL() << "accepted an invalid config: " << c.json;
  } catch (const ConfigError& e) {
    const std::string message = e.what();
    EXPECT_THAT(message, HasSubstr("config.json"));
    for (const std::string& part : c.expected) EXPECT_THAT(message, HasSubstr(part));
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, HfConfigInvalid, ::testing::ValuesIn(invalid_cases()),
                         [](const auto& param_info) { return std::string(param_info.param.name); });

TEST(HfConfig, UnreadableFileNamesPathAndReason) {
  EXPECT_THAT([] { load_hf_config("/nonexistent/rotary/config.json"); },
              ThrowsMessage<ConfigError>(
                  AllOf(HasSubstr("/nonexistent/rotary/config.json"), HasSubstr("No such file"))));
}

}  // namespace
}  // namespace rotary
