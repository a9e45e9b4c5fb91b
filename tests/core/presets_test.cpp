// tests/core/presets_test.cpp: the built-in presets (presets.hpp).
#include "rotary/presets.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <set>

#include "rotary/error.hpp"
#include "rotary/frequencies.hpp"
#include "core/json.hpp"

namespace rotary {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::ThrowsMessage;

TEST(Presets, AtLeastSixteenWithUniqueLowerCaseNamesAndSources) {
  const std::vector<PresetInfo> presets = list_presets();
  EXPECT_GE(presets.size(), 16u);
  std::set<std::string> names;
  for (const PresetInfo& p : presets) {
    EXPECT_TRUE(names.insert(p.name).second) << "duplicate " << p.name;
    for (char c : p.name) EXPECT_FALSE(std::isupper(static_cast<unsigned char>(c))) << p.name;
    EXPECT_FALSE(p.summary.empty()) << p.name;
    EXPECT_THAT(p.source, HasSubstr("/")) << p.name << ": source must name the Hugging Face repository";
  }
  EXPECT_EQ(names.count(std::string(kDefaultPreset)), 1u);
}

TEST(Presets, RequiredModelsArePresent) {
  std::set<std::string> names;
  for (const PresetInfo& p : list_presets()) names.insert(p.name);
  for (const char* required :
       {"llama-2-7b", "llama-3.1-8b", "llama-3.2-1b", "mistral-7b-v0.1", "qwen2.5-7b", "qwen2.5-7b-instruct", "qwen2.5-7b-yarn", "qwen3-8b",
        "qwen2-vl-7b", "deepseek-v3", "phi-3-mini-128k", "phi-2", "gpt-neox-20b", "gpt-j-6b", "gemma-2-9b",
        "gpt-oss-20b"}) {
    EXPECT_EQ(names.count(required), 1u) << required;
  }
}

TEST(Presets, EveryPresetParsesValidatesAndHasFrequencies) {
  for (const PresetInfo& p : list_presets()) {
    SCOPED_TRACE(p.name);
    const HfRopeConfig config = preset(p.name);
    EXPECT_EQ(config.spec.name, p.name);
    EXPECT_NO_THROW(validate(config.spec));
    const Frequencies f = frequencies(config.spec, config.spec.max_position_embeddings);
    for (double v : f.inv_freq) EXPECT_TRUE(std::isfinite(v) && v >= 0.0);
    EXPECT_TRUE(std::isfinite(f.attention_scaling) && f.attention_scaling > 0.0);
    for (const auto& [type, spec] : config.layer_type_specs) EXPECT_NO_THROW(frequencies(spec));
    // The stored text is valid JSON on its own (a user can save it as config.json).
    EXPECT_NO_THROW(json::parse(preset_config_json(p.name), p.name));
  }
}

TEST(Presets, KeyValuesOfWellKnownModels) {
  const RopeSpec llama = preset("llama-3.1-8b").spec;
  EXPECT_EQ(llama.scaling.type, ScalingType::Llama3);
  EXPECT_EQ(*llama.scaling.factor, 8.0);
  EXPECT_EQ(llama.theta_base, 500000.0);
  EXPECT_EQ(llama.original_context(), 8192);
  EXPECT_EQ(llama.num_key_value_heads, 8);

  const RopeSpec gptj = preset("gpt-j-6b").spec;
  EXPECT_EQ(gptj.style, Style::GPTJ);
  EXPECT_EQ(gptj.head_dim, 256);
  EXPECT_EQ(gptj.rotary_dim, 64);

  EXPECT_EQ(preset("phi-2").spec.rotary_dim, 32);
  EXPECT_EQ(preset("gpt-neox-20b").spec.rotary_dim, 24);
  EXPECT_EQ(preset("gemma-2-9b").spec.head_dim, 256);

  const RopeSpec deepseek = preset("deepseek-v3").spec;
  EXPECT_EQ(deepseek.scaling.type, ScalingType::Yarn);
  EXPECT_EQ(deepseek.rotary_dim, 64);
  EXPECT_EQ(frequencies(deepseek).attention_scaling, 1.0);  // mscale == mscale_all_dim

  const RopeSpec phi3 = preset("phi-3-mini-128k").spec;
  EXPECT_EQ(phi3.scaling.type, ScalingType::LongRope);
  EXPECT_NEAR(frequencies(phi3).attention_scaling, 1.1902380714238083, 1e-15);

  const RopeSpec oss = preset("gpt-oss-20b").spec;
  EXPECT_FALSE(oss.scaling.truncate);
  EXPECT_EQ(*oss.scaling.factor, 32.0);

  const RopeSpec vl = preset("qwen2-vl-7b").spec;
  EXPECT_EQ(vl.axes, PositionAxes::MRope);
  EXPECT_EQ(vl.mrope.pairs, (std::array<int64_t, 3>{16, 24, 24}));

  EXPECT_EQ(preset("qwen2.5-7b-yarn").spec.scaling.type, ScalingType::Yarn);
}

// A repository id gives the configuration that repository ships, never one that changes it.
TEST(Presets, ARepositoryIdNamesTheConfigItShipsAndAChangedPresetHasNone) {
  std::set<std::string> repos;
  for (const PresetInfo& p : list_presets()) {
    SCOPED_TRACE(p.name);
    if (p.repo.empty()) {
      // Changed: the source says what was added to which file.
      EXPECT_THAT(p.source, HasSubstr(" config.json + "));
      continue;
    }
    EXPECT_EQ(p.source, p.repo + " config.json");
    EXPECT_TRUE(repos.insert(p.repo).second) << "two presets claim " << p.repo;
    EXPECT_EQ(find_preset(p.repo), p.name);
  }
  EXPECT_EQ(find_preset("Qwen/Qwen2.5-7B-Instruct"), "qwen2.5-7b-instruct");
  const RopeSpec instruct = preset("Qwen/Qwen2.5-7B-Instruct").spec;
  EXPECT_EQ(instruct.name, "qwen2.5-7b-instruct");
  EXPECT_EQ(instruct.scaling.type, ScalingType::Default);
  EXPECT_EQ(instruct.max_position_embeddings, 32768);
  EXPECT_EQ(frequencies(instruct).attention_scaling, 1.0);
  EXPECT_THAT(std::string(preset_config_json("qwen2.5-7b-instruct")), Not(HasSubstr("rope_scaling")));
  // The model card's YaRN is its own preset, reached by name only.
  const RopeSpec yarn = preset("qwen2.5-7b-yarn").spec;
  EXPECT_EQ(yarn.scaling.type, ScalingType::Yarn);
  EXPECT_NEAR(frequencies(yarn).attention_scaling, 0.1 * std::log(4.0) + 1.0, 1e-15);
  for (const PresetInfo& p : list_presets()) {
    if (p.name == "qwen2.5-7b-yarn") EXPECT_EQ(p.repo, "");
  }
}

TEST(Presets, FindPresetIgnoresCaseInNamesAndRepositoryIds) {
  EXPECT_EQ(find_preset("llama-3.1-8b"), "llama-3.1-8b");
  EXPECT_EQ(find_preset("LLAMA-3.1-8B"), "llama-3.1-8b");
  EXPECT_EQ(find_preset("META-LLAMA/llama-3.1-8b"), "llama-3.1-8b");
  EXPECT_EQ(find_preset("llama-3-8b"), std::nullopt);
  EXPECT_EQ(find_preset(""), std::nullopt);
  EXPECT_EQ(preset("Gemma-3-1B").spec.name, "gemma-3-1b");
  EXPECT_EQ(preset_config_json("EleutherAI/GPT-J-6B"), preset_config_json("gpt-j-6b"));
}

using Names = std::vector<std::string>;

TEST(Presets, SuggestionsKeepToTheFamilyAndVersionAskedFor) {
  // Llama 3 has no preset: the 3.x ones, the same size first; never llama-2-7b (another RoPE).
  EXPECT_EQ(suggest_presets("llama-3-8b"), (Names{"llama-3.1-8b", "llama-3.2-1b", "llama-3.2-3b"}));
  EXPECT_EQ(suggest_presets("meta-llama/Meta-Llama-3-8B"), (Names{"llama-3.1-8b", "llama-3.2-1b", "llama-3.2-3b"}));
  // The version asked for exists: the one preset of it.
  EXPECT_EQ(suggest_presets("llama-3.1-7b"), (Names{"llama-3.1-8b"}));
  EXPECT_EQ(suggest_presets("meta-llama/Llama-3.1-70B-Instruct"), (Names{"llama-3.1-8b"}));
  EXPECT_EQ(suggest_presets("llama-2-13b"), (Names{"llama-2-7b"}));
  EXPECT_EQ(suggest_presets("qwen3-8bb"), (Names{"qwen3-8b"}));  // a slip: the nearer of the two Qwen3
  EXPECT_EQ(suggest_presets("llama-3.2-8b"), (Names{"llama-3.2-1b", "llama-3.2-3b"}));
  // Family prefixes, whatever the punctuation and case.
  EXPECT_EQ(suggest_presets("mistral-7b"), (Names{"mistral-7b-v0.1"}));
  EXPECT_EQ(suggest_presets("gemma3"), (Names{"gemma-3-1b", "gemma-3-27b"}));
  EXPECT_EQ(suggest_presets("Qwen3"), (Names{"qwen3-8b", "qwen3-vl-8b"}));
  EXPECT_EQ(suggest_presets("qwen2.5-7b-instruct-1m"), (Names{"qwen2.5-7b-instruct"}));
  EXPECT_EQ(suggest_presets("gpt-oss"), (Names{"gpt-oss-20b"}));
  EXPECT_EQ(suggest_presets("Llama3.1_8B"), (Names{"llama-3.1-8b"}));
  EXPECT_EQ(suggest_presets("lama-2-7b"), (Names{"llama-2-7b"}));     // the family one edit off
  EXPECT_EQ(suggest_presets("code-llama-7b"), (Names{"codellama-7b"}));  // no family: the nearest name
  // A version of the family that no preset has, or nothing like a preset: no suggestion.
  EXPECT_EQ(suggest_presets("llama-4-scout"), Names{});
  EXPECT_EQ(suggest_presets("gpt-5"), Names{});
  EXPECT_EQ(suggest_presets("nope"), Names{});
  EXPECT_EQ(suggest_presets(""), Names{});
}

TEST(Presets, AnUnknownNameGetsAShortDidYouMeanNotTheWholeList) {
  EXPECT_EQ(did_you_mean({}), "");
  EXPECT_EQ(did_you_mean({"a"}), "; did you mean a?");
  EXPECT_EQ(did_you_mean({"a", "b"}), "; did you mean one of a, b?");
  EXPECT_THAT([] { preset("llama-3-8b"); },
              ThrowsMessage<ConfigError>(
                  "preset: name must be a built-in preset's name or repository id (got \"llama-3-8b\"); did you mean "
                  "one of llama-3.1-8b, llama-3.2-1b, llama-3.2-3b?"));
  EXPECT_THAT([] { preset_config_json("gpt-5"); },
              ThrowsMessage<ConfigError>("preset: name must be a built-in preset's name or repository id (got \"gpt-5\")"));
}

}  // namespace
}  // namespace rotary
