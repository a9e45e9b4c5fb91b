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
       {"llama-2-7b", "llama-3.1-8b", "llama-3.2-1b", "mistral-7b-v0.1", "qwen2.5-7b", "qwen2.5-7b-yarn", "qwen3-8b",
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

TEST(Presets, UnknownNameListsTheNames) {
  EXPECT_THAT([] { preset("llama-9"); },
              ThrowsMessage<ConfigError>(HasSubstr("preset: name must be one of llama-2-7b")));
  EXPECT_THAT([] { preset_config_json("nope"); }, ThrowsMessage<ConfigError>(HasSubstr("(got \"nope\")")));
}

}  // namespace
}  // namespace rotary
