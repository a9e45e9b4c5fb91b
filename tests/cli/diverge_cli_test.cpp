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
  const test::CliResult r = test::run_cli("diverge --preset phi-3-mini-128k --positions 1,9000");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("vllm (float32 cache): not applicable: CosSinTable: precision vllm cannot reproduce "
                               "spec phi-3-mini-128k: rope_type longrope"));
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
