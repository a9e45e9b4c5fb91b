// tests/cli/cli_test.cpp: the `rotary` command as a user runs it: exit codes, stdout, stderr.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "rotary/frequencies.hpp"
#include "rotary/json.hpp"
#include "rotary/presets.hpp"

namespace rotary {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

struct Result {
  int exit_code = -1;
  std::string out;
  std::string err;
};

std::string read_all(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Runs build/rotary with `arguments` (already shell-quoted where needed).
Result run(const std::string& arguments) {
  static int counter = 0;
  const std::filesystem::path dir = std::filesystem::temp_directory_path();
  const std::string stem = "rotary_cli_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++);
  const std::filesystem::path out = dir / (stem + ".out");
  const std::filesystem::path err = dir / (stem + ".err");
  const std::string command = std::string(ROTARY_CLI_PATH) + " " + arguments + " >" + out.string() + " 2>" +
                              err.string() + " </dev/null";
  const int status = std::system(command.c_str());
  Result result;
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result.out = read_all(out);
  result.err = read_all(err);
  std::filesystem::remove(out);
  std::filesystem::remove(err);
  return result;
}

std::filesystem::path write_temp(const std::string& name, const std::string& text) {
  const std::filesystem::path path = std::filesystem::temp_directory_path() / (std::to_string(::getpid()) + name);
  std::ofstream(path) << text;
  return path;
}

TEST(Cli, PresetsListsAtLeastSixteenAndMarksTheDefault) {
  const Result r = run("presets");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("llama-3.1-8b"));
  EXPECT_THAT(r.out, HasSubstr("[default]"));
  const Result j = run("presets --json");
  ASSERT_EQ(j.exit_code, 0) << j.err;
  const json::Value list = json::parse(j.out, "presets --json");
  ASSERT_TRUE(list.is_array());
  EXPECT_GE(list.as_array().size(), 16u);
  for (const json::Value& p : list.as_array()) {
    EXPECT_FALSE(p.find("source")->as_string().empty());
    EXPECT_FALSE(p.find("summary")->as_string().empty());
  }
}

TEST(Cli, FreqsJsonMatchesTheLibraryBitForBit) {
  const Result r = run("freqs --preset qwen2.5-7b-yarn --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json::Value doc = json::parse(r.out, "freqs --json");
  const Frequencies expected = frequencies(preset("qwen2.5-7b-yarn").spec);
  EXPECT_EQ(doc.find("rotary_dim")->as_int64(), 128);
  EXPECT_EQ(doc.find("rope_type")->as_string(), "yarn");
  EXPECT_EQ(doc.find("attention_scaling")->as_double(), expected.attention_scaling);
  const auto& inv_freq = doc.find("inv_freq")->as_array();
  ASSERT_EQ(inv_freq.size(), expected.inv_freq.size());
  for (size_t i = 0; i < inv_freq.size(); ++i) EXPECT_EQ(inv_freq[i].as_double(), expected.inv_freq[i]) << i;
  EXPECT_EQ(doc.find("pairs")->as_array().size(), 64u);
}

TEST(Cli, FreqsDefaultsToLlama31AndPrintsATable) {
  const Result r = run("freqs");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("llama-3.1-8b: llama3"));
  EXPECT_THAT(r.out, HasSubstr("extrapolated"));
  EXPECT_THAT(r.out, HasSubstr("interpolated"));
  EXPECT_THAT(r.out, HasSubstr("blended"));
}

TEST(Cli, FreqsSeqLenDrivesLongRopeSwitch) {
  const Result short_set = run("freqs --preset phi-3-mini-128k --seq-len 4096 --json");
  const Result long_set = run("freqs --preset phi-3-mini-128k --seq-len 4097 --json");
  ASSERT_EQ(short_set.exit_code, 0) << short_set.err;
  ASSERT_EQ(long_set.exit_code, 0) << long_set.err;
  EXPECT_EQ(json::parse(short_set.out, "a").find("longrope_factor_set")->as_string(), "short");
  EXPECT_EQ(json::parse(long_set.out, "b").find("longrope_factor_set")->as_string(), "long");
  // Phi-3 configs omit factor: HF warns, and so does rotary, on stderr.
  EXPECT_THAT(long_set.err, HasSubstr("rotary: warning:"));
}

TEST(Cli, FreqsFromAConfigFile) {
  const auto path = write_temp("_cfg.json", R"({"hidden_size": 2048, "num_attention_heads": 16,
      "rope_theta": 10000.0, "rope_scaling": {"type": "linear", "factor": 2.0}})");
  const Result r = run("freqs --config " + path.string() + " --json");
  std::filesystem::remove(path);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json::Value doc = json::parse(r.out, "freqs");
  EXPECT_EQ(doc.find("inv_freq")->as_array()[0].as_double(), 0.5);
}

TEST(Cli, ExplainDefaultPresetCoversEverySection) {
  const Result r = run("explain");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* part : {"RoPE of llama-3.1-8b", "scheme      llama3", "attention   scaling 1",
                           "contexts    trained 8192 tokens", "Per pair", "Summary", "Warnings"}) {
    EXPECT_THAT(r.out, HasSubstr(part));
  }
  EXPECT_THAT(r.out, HasSubstr("pairs extrapolated"));
  EXPECT_THAT(r.out, HasSubstr("pairs interpolated"));
}

TEST(Cli, ExplainFlagsOutOfDistributionPairsPastTheTrainedContext) {
  const Result r = run("explain --preset llama-2-7b --context 16384");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("pairs reach angles at 16384 tokens that pretraining on 4096 tokens never produced"));
  EXPECT_THAT(r.out, HasSubstr("exceeds max_position_embeddings 4096"));
}

TEST(Cli, ExplainDeepseekWarnsAboutSoftmaxScale) {
  const Result r = run("explain --preset deepseek-v3");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("softmax scale"));
  EXPECT_THAT(r.out, HasSubstr("GPT-J pairing"));
}

struct ErrorCase {
  const char* name;
  std::string arguments;
  std::string message;
};

class CliErrors : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(CliErrors, ExitTwoWithAMessageNamingTheProblem) {
  const Result r = run(GetParam().arguments);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("rotary: error: "));
  EXPECT_THAT(r.err, HasSubstr(GetParam().message));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, CliErrors,
    ::testing::Values(
        ErrorCase{"UnknownCommand", "frobnicate", "command must be one of presets, freqs, explain (got \"frobnicate\")"},
        ErrorCase{"UnknownPreset", "freqs --preset llama-9", "preset: name must be one of"},
        ErrorCase{"BothSources", "freqs --preset llama-2-7b --config x.json", "give --preset or --config, not both"},
        ErrorCase{"MissingFile", "explain --config /nonexistent/config.json", "/nonexistent/config.json: cannot read file"},
        ErrorCase{"BadSeqLen", "freqs --seq-len ten", "--seq-len must be an integer in [0, "},
        ErrorCase{"NegativeSeqLen", "freqs --seq-len -5", "(got -5)"},
        ErrorCase{"ZeroContext", "explain --context 0", "--context must be an integer in [1, "},
        ErrorCase{"FlagWithoutValue", "freqs --preset", "--preset needs a value"},
        ErrorCase{"UnexpectedArgument", "presets --verbose", "unexpected argument \"--verbose\""},
        ErrorCase{"UnknownLayerType", "freqs --layer-type sliding_attention", "--layer-type must be one of"}),
    [](const auto& param_info) { return std::string(param_info.param.name); });

TEST(Cli, MalformedConfigReportsLineAndColumn) {
  const auto path = write_temp("_bad.json", "{\n  \"hidden_size\": 4096,\n  \"rope_theta\": 1e4,,\n}\n");
  const Result r = run("freqs --config " + path.string());
  std::filesystem::remove(path);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("malformed JSON at line 3, column"));
}

TEST(Cli, InvalidConfigNamesFieldAndValue) {
  const auto path = write_temp("_neg.json", R"({"hidden_size": 4096, "num_attention_heads": 32,
      "rope_scaling": {"rope_type": "yarn", "factor": 0.5}})");
  const Result r = run("explain --config " + path.string());
  std::filesystem::remove(path);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("rope_scaling.factor must be a finite number >= 1 (got 0.5)"));
  EXPECT_THAT(r.out, Not(HasSubstr("Per pair")));
}

TEST(Cli, HelpForEveryCommand) {
  for (const char* command : {"presets", "freqs", "explain"}) {
    const Result r = run(std::string(command) + " --help");
    EXPECT_EQ(r.exit_code, 0);
    EXPECT_THAT(r.out, HasSubstr(std::string("usage: rotary ") + command));
  }
  EXPECT_EQ(run("--help").exit_code, 0);
  EXPECT_EQ(run("").exit_code, 2);
}

}  // namespace
}  // namespace rotary
