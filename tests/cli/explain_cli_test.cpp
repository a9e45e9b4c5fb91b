// tests/cli/explain_cli_test.cpp: `rotary explain`'s verdict and `rotary check` on correct
// configs: no false alarm on any preset or on correctly extended long-context configs, the
// default target is the context a config extends the model to, the verdict comes first (and in
// --json), and a per-layer-type model shows every layer type.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "cli_runner.hpp"
#include "core/json.hpp"

namespace rotary {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

using Result = test::CliResult;
using test::ScratchDir;

Result run(const std::string& arguments) { return test::run_cli(arguments); }

std::vector<std::string> preset_names() {
  const Result r = run("presets --json");
  const json::Value list = json::parse(r.out, "presets");
  std::vector<std::string> names;
  for (const json::Value& p : list.as_array()) names.push_back(p.find("name")->as_string());
  return names;
}

// No warning anywhere: not on stderr, not in explain's verdict, and check passes.
void expect_no_warning(const std::string& source, int64_t context = 0) {
  const std::string context_flag = context > 0 ? " --context " + std::to_string(context) : "";
  const Result explain = run("explain " + source + context_flag + " --json");
  ASSERT_EQ(explain.exit_code, 0) << explain.err;
  EXPECT_EQ(explain.err, "");
  const json::Value doc = json::parse(explain.out, "explain --json");
  EXPECT_TRUE(doc.find("ok")->as_bool()) << explain.out;
  EXPECT_TRUE(doc.find("warnings")->as_array().empty()) << explain.out;
  const Result text = run("explain " + source + context_flag);
  EXPECT_THAT(text.out, HasSubstr("Verdict: OK: no warnings"));
  const Result check = run("check " + source + context_flag);
  EXPECT_EQ(check.exit_code, 0) << check.out;
  EXPECT_EQ(check.err, "");
}

TEST(ExplainCli, NoPresetWarns) {
  const std::vector<std::string> names = preset_names();
  ASSERT_GE(names.size(), 16u);
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    expect_no_warning("--preset " + name);
  }
}

TEST(ExplainCli, CorrectLongContextConfigsDoNotWarn) {
  ScratchDir dir("rotary_long_context_configs");
  // Qwen3-8B with the YaRN block of Qwen's docs (max_position_embeddings left at 40960), asked
  // about 131072 tokens, and the same with max_position_embeddings raised to 131072.
  std::ofstream(dir / "qwen3-yarn.json") << R"({"head_dim": 128, "hidden_size": 4096,
      "max_position_embeddings": 40960, "model_type": "qwen3", "num_attention_heads": 32, "num_key_value_heads": 8,
      "rope_theta": 1000000, "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
      "original_max_position_embeddings": 32768}})";
  std::ofstream(dir / "qwen3-yarn-131072.json") << R"({"head_dim": 128, "hidden_size": 4096,
      "max_position_embeddings": 131072, "model_type": "qwen3", "num_attention_heads": 32, "num_key_value_heads": 8,
      "rope_theta": 1000000, "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
      "original_max_position_embeddings": 32768}})";
  for (const char* file : {"qwen3-yarn.json", "qwen3-yarn-131072.json"}) {
    SCOPED_TRACE(file);
    expect_no_warning("--config " + (dir / file), 131072);
    expect_no_warning("--config " + (dir / file));
  }
  expect_no_warning("--preset phi-3-mini-128k", 131072);
  expect_no_warning("--preset qwen2.5-7b-yarn", 131072);
}

TEST(ExplainCli, DefaultTargetIsTheContextTheConfigExtendsTo) {
  // qwen2.5-7b-yarn: max_position_embeddings 32768, YaRN x4 over 32768 -> 131072.
  const json::Value doc = json::parse(run("explain --preset qwen2.5-7b-yarn --json").out, "explain");
  const json::Value& spec = doc.find("layer_types")->as_array().at(0);
  EXPECT_EQ(spec.find("trained_context")->as_int64(), 32768);
  EXPECT_EQ(spec.find("configured_context")->as_int64(), 131072);
  EXPECT_EQ(spec.find("target_context")->as_int64(), 131072);
  const json::Value check = json::parse(run("check --preset qwen2.5-7b-yarn --json").out, "check");
  EXPECT_EQ(check.find("context")->as_int64(), 131072);
  // Past it, explain warns and says by how much.
  const json::Value past = json::parse(run("explain --preset qwen2.5-7b-yarn --context 262144 --json").out, "explain");
  EXPECT_FALSE(past.find("ok")->as_bool());
  EXPECT_THAT(past.find("warnings")->as_array().at(0).as_string(),
              HasSubstr("the target context 262144 exceeds the 131072 tokens the scaling extends the model to"));
}

TEST(ExplainCli, VerdictFirstInPlainWordsThenTheTable) {
  const Result r = run("explain --preset qwen2.5-7b-yarn");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const size_t verdict = r.out.find("Verdict: OK: no warnings; configured for 131072 tokens (trained on 32768)");
  ASSERT_NE(verdict, std::string::npos) << r.out;
  const size_t kept = r.out.find("24 of 64 pairs are kept unchanged (\"extrapolated\" in the YaRN paper's words");
  const size_t interpolated = r.out.find("24 of 64 pairs are interpolated");
  const size_t table = r.out.find("Per pair");
  EXPECT_LT(verdict, kept);
  EXPECT_LT(kept, interpolated);
  EXPECT_LT(interpolated, table);
  EXPECT_THAT(r.out, HasSubstr("their frequency is divided by 4"));
  EXPECT_THAT(r.out, Not(HasSubstr("scaling 1 = 1")));
  EXPECT_THAT(run("explain --preset llama-2-7b").out, HasSubstr("attention   not scaled (default does not scale attention)"));
}

TEST(ExplainCli, JsonHoldsTheVerdictFields) {
  const Result r = run("explain --preset llama-2-7b --context 16384 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json::Value doc = json::parse(r.out, "explain --json");
  EXPECT_EQ(doc.find("name")->as_string(), "llama-2-7b");
  EXPECT_FALSE(doc.find("ok")->as_bool());
  EXPECT_EQ(doc.find("verdict")->as_string(), "2 warnings");
  ASSERT_EQ(doc.find("warnings")->as_array().size(), 2u);
  EXPECT_THAT(doc.find("warnings")->as_array()[0].as_string(), HasSubstr("exceeds max_position_embeddings 4096"));
  const json::Value& spec = doc.find("layer_types")->as_array().at(0);
  EXPECT_TRUE(spec.find("layer_type")->is_null());
  EXPECT_EQ(spec.find("num_pairs")->as_int64(), 64);
  EXPECT_EQ(spec.find("num_unscaled")->as_int64(), 64);
  EXPECT_GT(spec.find("num_out_of_distribution")->as_int64(), 0);
  EXPECT_EQ(spec.find("pairs")->as_array().size(), 64u);
  EXPECT_FALSE(spec.find("in_words")->as_array().empty());
}

TEST(ExplainCli, PerLayerModelsShowEveryLayerType) {
  const Result r = run("explain --preset gemma-3-27b");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("  full_attention layers (linear, theta 1000000)"));
  EXPECT_THAT(r.out, HasSubstr("  sliding_attention layers (default, theta 10000)"));
  EXPECT_THAT(r.out, HasSubstr("Layer type full_attention (gemma-3-27b/full_attention)"));
  EXPECT_THAT(r.out, HasSubstr("Layer type sliding_attention (gemma-3-27b/sliding_attention)"));
  const json::Value doc = json::parse(run("explain --preset gemma-3-27b --json").out, "explain");
  const auto& layers = doc.find("layer_types")->as_array();
  ASSERT_EQ(layers.size(), 2u);
  EXPECT_EQ(layers[0].find("layer_type")->as_string(), "full_attention");
  EXPECT_EQ(layers[1].find("layer_type")->as_string(), "sliding_attention");
  // --layer-type still picks one.
  const Result one = run("explain --preset gemma-3-27b --layer-type sliding_attention");
  EXPECT_THAT(one.out, Not(HasSubstr("full_attention")));
}

}  // namespace
}  // namespace rotary
