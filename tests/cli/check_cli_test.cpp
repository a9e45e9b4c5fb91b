// tests/cli/check_cli_test.cpp: `rotary check` as a user runs it: exit codes, the table,
// --json, and a config.json whose RoPE violates a property (exit 1, not 2).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "cli_runner.hpp"
#include "core/json.hpp"

namespace rotary {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

using Result = test::CliResult;
using test::read_all;
using test::write_temp;

Result run(const std::string& arguments) { return test::run_cli(arguments); }

const char* const kCheckNames[] = {"norm_preserved_f64", "norm_preserved_f32_kernel", "relative_position_invariance",
                                   "long_term_decay_bound", "pairing_convention"};

TEST(CheckCli, DefaultPresetPassesEveryCheckAndShowsTheTable) {
  const Result r = run("check");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("Property checks of llama-3.1-8b (preset llama-3.1-8b)"));
  EXPECT_THAT(r.out, HasSubstr("measured"));
  EXPECT_THAT(r.out, HasSubstr("threshold"));
  EXPECT_THAT(r.out, HasSubstr("margin"));
  for (const char* name : kCheckNames) {
    // One table row per check, passed, with its margin.
    const size_t row = r.out.find(std::string("  ") + name + " ");
    ASSERT_NE(row, std::string::npos) << name;
    const std::string line = r.out.substr(row, r.out.find('\n', row) - row);
    EXPECT_THAT(line, HasSubstr("pass")) << line;
    EXPECT_THAT(line, HasSubstr(" x")) << line;
  }
  EXPECT_THAT(r.out, HasSubstr("All 5 checks passed."));
  EXPECT_THAT(r.out, HasSubstr("Extrapolation (information, not a check)"));
  EXPECT_THAT(r.out, Not(HasSubstr("FAIL")));
  EXPECT_EQ(r.err, "");
}

TEST(CheckCli, JsonListsEveryCheckWithMeasuredThresholdAndMargin) {
  const Result r = run("check --preset gpt-j-6b --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json::Value doc = json::parse(r.out, "check --json");
  EXPECT_EQ(doc.find("name")->as_string(), "gpt-j-6b");
  EXPECT_EQ(doc.find("context")->as_int64(), 2048);
  EXPECT_EQ(doc.find("decay_distance")->as_int64(), 2048);
  EXPECT_TRUE(doc.find("passed")->as_bool());
  const auto& checks = doc.find("checks")->as_array();
  ASSERT_EQ(checks.size(), 5u);
  for (size_t c = 0; c < checks.size(); ++c) {
    const json::Value& check = checks[c];
    EXPECT_EQ(check.find("name")->as_string(), kCheckNames[c]);
    EXPECT_TRUE(check.find("passed")->as_bool());
    const double measured = check.find("measured")->as_double();
    const double threshold = check.find("threshold")->as_double();
    const std::string bound = check.find("bound")->as_string();
    if (bound == "at_most") {
      EXPECT_LE(measured, threshold);
    } else {
      EXPECT_EQ(bound, "at_least");
      EXPECT_GE(measured, threshold);
    }
    EXPECT_GT(check.find("margin")->as_double(), 1.0);
    EXPECT_FALSE(check.find("explanation")->as_string().empty());
  }
  const json::Value* ext = doc.find("extrapolation");
  ASSERT_NE(ext, nullptr);
  EXPECT_EQ(ext->find("num_pairs")->as_int64(), 32);
  EXPECT_EQ(ext->find("num_out_of_distribution")->as_int64(), 0);
}

TEST(CheckCli, ConfigWhoseRopeHasNoLongTermDecayExitsOne) {
  // A valid config (every field in range) whose base is so large that the pairs never drift out
  // of phase within the context: RoFormer's decay property does not hold. A violation is a
  // result, reported with the table and exit status 1; errors are 2.
  const auto path = write_temp("_no_decay.json", R"({"hidden_size": 1024, "num_attention_heads": 8,
      "rope_theta": 1e30, "max_position_embeddings": 4096})");
  const Result r = run("check --config " + path.string());
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("1 of 5 checks FAILED: long_term_decay_bound"));
  const size_t row = r.out.find("  long_term_decay_bound ");
  ASSERT_NE(row, std::string::npos);
  EXPECT_THAT(r.out.substr(row, r.out.find('\n', row) - row), HasSubstr("FAIL"));
  EXPECT_THAT(r.err, Not(HasSubstr("rotary: error:")));

  const Result j = run("check --config " + path.string() + " --json");
  EXPECT_EQ(j.exit_code, 1) << j.err;
  const json::Value doc = json::parse(j.out, "check --json");
  EXPECT_FALSE(doc.find("passed")->as_bool());
  for (const json::Value& check : doc.find("checks")->as_array()) {
    const bool decay = check.find("name")->as_string() == "long_term_decay_bound";
    EXPECT_EQ(check.find("passed")->as_bool(), !decay) << check.find("name")->as_string();
    if (decay) {
      EXPECT_LT(check.find("margin")->as_double(), 1.0);
    }
  }
  std::filesystem::remove(path);
}

TEST(CheckCli, ContextSetsTheExtrapolationTarget) {
  const Result r = run("check --preset llama-2-7b --context 16384");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("context 16384 tokens (--context), trained 4096"));
  EXPECT_THAT(r.out,
              HasSubstr("18 of 64 pairs reach angles at 16384 tokens that training on 4096 tokens never produced"));
}

TEST(CheckCli, LayerTypeSelectsThePerLayerSpec) {
  const Result r = run("check --preset gemma-3-1b --layer-type sliding_attention --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(json::parse(r.out, "check --json").find("passed")->as_bool());
}

TEST(CheckCli, ErrorsExitTwoWithAMessage) {
  const struct {
    const char* arguments;
    const char* message;
  } cases[] = {
      {"check --context 0", "check: --context must be an integer in [1, 2147483647] (got 0)"},
      {"check --context many", "--context must be an integer"},
      {"check --preset no-such-model", "no-such-model"},
      {"check --config /nonexistent/config.json", "/nonexistent/config.json"},
      {"check --preset llama-2-7b --config x.json", "give --preset or --config, not both"},
      {"check --frobnicate", "check: unexpected argument \"--frobnicate\""},
      {"check --preset llama-2-7b --layer-type sliding_attention", "--layer-type must be one of"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.arguments);
    const Result r = run(c.arguments);
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_THAT(r.err, HasSubstr("rotary: error:"));
    EXPECT_THAT(r.err, HasSubstr(c.message));
  }
}

TEST(CheckCli, HelpListsTheChecksAndTheExitStatus) {
  const Result r = run("check --help");
  ASSERT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, HasSubstr("usage: rotary check"));
  for (const char* name : kCheckNames) EXPECT_THAT(r.out, HasSubstr(name));
  EXPECT_THAT(r.out, HasSubstr("Exit status: 0 every check passed, 1 a check failed, 2 an error."));
  EXPECT_THAT(run("--help").out, HasSubstr("\n  check "));  // listed in rotary --help
}

}  // namespace
}  // namespace rotary
