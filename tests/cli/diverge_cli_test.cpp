// tests/cli/diverge_cli_test.cpp: `rotary diverge` run as a user runs it: the table's structure,
// --json against the library's engine_divergence(), and bad input named.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "cli_runner.hpp"
#include "core/json.hpp"
#include "rotary/analysis.hpp"
#include "rotary/presets.hpp"

namespace rotary {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

TEST(DivergeCli, PrintsBucketsAndPairsPerEngine) {
  const test::CliResult r = test::run_cli("diverge --preset llama-3.1-8b --max-position 4096 --samples 4");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, StartsWith("llama-3.1-8b: each engine's cos/sin against the exact values, "));
  EXPECT_THAT(r.out, HasSubstr("hf: abs, ulps"));
  EXPECT_THAT(r.out, HasSubstr("ggml: abs, ulps"));
  EXPECT_THAT(r.out, HasSubstr("vllm (float32 cache): abs, ulps"));
  EXPECT_THAT(r.out, HasSubstr("\n[2048, 4095] "));
  EXPECT_THAT(r.out, HasSubstr("by pair (worst over these positions):"));
  EXPECT_THAT(r.out, HasSubstr("\n63 "));  // every pair listed
}

TEST(DivergeCli, JsonHoldsTheLibrarysNumbers) {
  const test::CliResult r = test::run_cli("diverge --preset qwen2.5-7b-yarn --positions 0,7,5000,100000 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json::Value doc = json::parse(r.out, "diverge");
  const analysis::Divergence d =
      analysis::engine_divergence(preset("qwen2.5-7b-yarn").spec, {.positions = {0, 7, 5000, 100000}});
  EXPECT_EQ(doc.find("seq_len")->as_int64(), 100001);
  const auto& engines = doc.find("engines")->as_array();
  ASSERT_EQ(engines.size(), d.engines.size());
  for (size_t e = 0; e < engines.size(); ++e) {
    SCOPED_TRACE(d.engines[e].label);
    EXPECT_EQ(engines[e].find("engine")->as_string(), d.engines[e].label);
    EXPECT_TRUE(engines[e].find("available")->as_bool());
    EXPECT_EQ(engines[e].find("max_abs_error")->as_double(), d.engines[e].max_abs_error);
    const auto& buckets = engines[e].find("buckets")->as_array();
    ASSERT_EQ(buckets.size(), 4u);  // 0, [4,7], [4096,8191], [65536,131071]
    EXPECT_EQ(buckets[3].find("first")->as_int64(), 65536);
    EXPECT_EQ(buckets[3].find("worst_position")->as_int64(), 100000);
    EXPECT_EQ(engines[e].find("pairs")->as_array().size(), 64u);
  }
}

TEST(DivergeCli, NamesEnginesThatCannotReproduceTheModel) {
  const test::CliResult r = test::run_cli("diverge --preset deepseek-v3 --positions 1,9000");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("ggml: not applicable: CosSinTable: precision ggml cannot reproduce spec deepseek-v3: "
                               "YaRN with mscale and mscale_all_dim"));
}

// vLLM's engine serves the rows vLLM builds (vllm_cache_rows): LongRoPE's long cache past the
// original context; a position past the cache is named, not measured.
TEST(DivergeCli, VllmCoversTheRowsVllmBuildsAndNamesPositionsPastThem) {
  const test::CliResult phi = test::run_cli("diverge --preset phi-3-mini-128k --positions 1,9000");
  ASSERT_EQ(phi.exit_code, 0) << phi.err;
  EXPECT_THAT(phi.out, HasSubstr("vllm (float32 cache): abs, ulps"));
  EXPECT_THAT(phi.out, Not(HasSubstr("not applicable")));
  const test::CliResult llama = test::run_cli("diverge --preset llama-2-7b --positions 1,5000");
  ASSERT_EQ(llama.exit_code, 0) << llama.err;
  EXPECT_THAT(llama.out, HasSubstr("vllm (float32 cache): not applicable: positions reach 5000, past the 4096 rows of "
                                   "vLLM's cache for spec llama-2-7b"));
}

// Gemma 3's layer types have different RoPE: diverge reports each (as check and freqs do), or the
// one --layer-type names, and says which.
TEST(DivergeCli, ReportsEveryLayerTypeOrTheOneNamed) {
  const test::CliResult both = test::run_cli("diverge --preset gemma-3-27b --positions 0,7,200000 --json");
  ASSERT_EQ(both.exit_code, 0) << both.err;
  const json::Value doc = json::parse(both.out, "diverge --json");
  EXPECT_EQ(doc.find("source")->as_string(), "preset gemma-3-27b");
  const auto& types = doc.find("layer_types")->as_array();
  ASSERT_EQ(types.size(), 2u);
  EXPECT_EQ(types[0].find("layer_type")->as_string(), "full_attention");
  EXPECT_EQ(types[1].find("layer_type")->as_string(), "sliding_attention");
  // vLLM's caches: linear x8 builds 8 x 131072 rows for the global layers, the local layers 131072.
  EXPECT_TRUE(types[0].find("engines")->as_array()[2].find("available")->as_bool());
  EXPECT_EQ(types[1].find("engines")->as_array()[2].find("reason")->as_string(),
            "positions reach 200000, past the 131072 rows of vLLM's cache for spec gemma-3-27b/sliding_attention");
  // Each layer type's numbers are the library's for that layer type's spec.
  const HfRopeConfig gemma = preset("gemma-3-27b");
  for (size_t t = 0; t < 2; ++t) {
    SCOPED_TRACE(gemma.layer_type_specs[t].first);
    const analysis::Divergence d =
        analysis::engine_divergence(gemma.layer_type_specs[t].second, {.positions = {0, 7, 200000}});
    EXPECT_EQ(types[t].find("engines")->as_array()[0].find("max_abs_error")->as_double(), d.engines[0].max_abs_error);
  }
  const test::CliResult text = test::run_cli("diverge --preset gemma-3-27b --positions 0,7");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr("(layer type full_attention): each engine's cos/sin"));
  EXPECT_THAT(text.out, HasSubstr("(layer type sliding_attention): each engine's cos/sin"));
  const test::CliResult one = test::run_cli("diverge --preset gemma-3-27b --layer-type sliding_attention --positions 0,7 --json");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  const json::Value one_doc = json::parse(one.out, "diverge --json");
  EXPECT_EQ(one_doc.find("layer_type")->as_string(), "sliding_attention");
  EXPECT_EQ(one_doc.find("name")->as_string(), "gemma-3-27b/sliding_attention");
  EXPECT_TRUE(json::parse(test::run_cli("diverge --preset llama-2-7b --positions 1 --json").out, "d")
                  .find("layer_type")
                  ->is_null());
}

TEST(DivergeCli, RefusesBadInput) {
  struct Case {
    std::string args;
    std::string message;
  };
  for (const Case& c : {Case{"--positions 1,x", "diverge: --positions must be integers"},
                        Case{"--positions 1 --max-position 9", "give --positions or --max-position, not both"},
                        Case{"--samples 1", "--samples"},
                        Case{"--vllm-dtype float64", "--vllm-dtype must be float32, bfloat16 or float16"},
                        Case{"--max-position 0", "--max-position"}}) {
    SCOPED_TRACE(c.args);
    const test::CliResult r = test::run_cli("diverge " + c.args);
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_THAT(r.err, HasSubstr(c.message));
  }
}

}  // namespace
}  // namespace rotary
