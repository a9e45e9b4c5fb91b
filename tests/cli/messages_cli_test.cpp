// tests/cli/messages_cli_test.cpp: the messages that help a person find their way: "did you
// mean" for presets, flags and commands, `rotary help CMD`, -V, `-o -`, --json on every command
// that prints a result, model folders wherever a config.json goes, and report --compare with
// config files. Each as a user runs the command: exit code, stdout, stderr.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli_runner.hpp"
#include "core/json.hpp"

namespace rotary {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

using Result = test::CliResult;
using test::ScratchDir;

Result run(const std::string& arguments) { return test::run_cli(arguments); }

// Qwen3-8B's config.json with the YaRN block Qwen's docs give for 131072 tokens.
constexpr const char* kQwen3Yarn = R"({"head_dim": 128, "hidden_size": 4096, "max_position_embeddings": 40960,
  "model_type": "qwen3", "num_attention_heads": 32, "num_key_value_heads": 8, "rope_theta": 1000000,
  "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}})";

void write_file(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// ---- presets by any name ----------------------------------------------------------------------

TEST(CliMessages, PresetNamesAreCaseInsensitiveAndAcceptTheRepositoryId) {
  for (const char* name : {"llama-3.1-8b", "Llama-3.1-8B", "meta-llama/Llama-3.1-8B", "META-LLAMA/llama-3.1-8b"}) {
    SCOPED_TRACE(name);
    const Result r = run(std::string("freqs --preset ") + name + " --json");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(json::parse(r.out, "freqs").find("name")->as_string(), "llama-3.1-8b");
  }
  // A repository id gives the config.json it ships, never a preset that adds to it.
  const Result qwen = run("freqs --preset Qwen/Qwen2.5-7B-Instruct --json");
  ASSERT_EQ(qwen.exit_code, 0) << qwen.err;
  EXPECT_EQ(json::parse(qwen.out, "freqs").find("name")->as_string(), "qwen2.5-7b-instruct");
}

TEST(CliMessages, AnUnknownPresetSuggestsTheNearestName) {
  const Result r = run("explain --preset llama-3.1-7b");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err,
            "rotary: error: explain: --preset must be a built-in preset, see rotary presets (got \"llama-3.1-7b\"); "
            "did you mean llama-3.1-8b?\n");
  const Result repo = run("check --preset meta-llama/Llama-3.1-7B");
  EXPECT_EQ(repo.exit_code, 2);
  EXPECT_EQ(repo.err,
            "rotary: error: check: --preset must be a built-in preset, see rotary presets (got "
            "\"meta-llama/Llama-3.1-7B\"); did you mean llama-3.1-8b?\n");
  const Result far = run("freqs --preset gpt-5");
  EXPECT_EQ(far.exit_code, 2);
  EXPECT_EQ(far.err, "rotary: error: freqs: --preset must be a built-in preset, see rotary presets (got \"gpt-5\")\n");
}

// ---- flags and commands -----------------------------------------------------------------------

TEST(CliMessages, AnUnknownFlagSuggestsTheNearestFlagOfThatCommand) {
  const Result r = run("explain --contxt 4096");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err,
            "rotary: error: explain: unexpected argument \"--contxt\"; did you mean --context? (see rotary explain "
            "--help)\n");
  // --seq-len is a flag of freqs, not of check: check suggests its own.
  const Result eq = run("freqs --seqlen=5");
  EXPECT_THAT(eq.err, HasSubstr("freqs: unexpected argument \"--seqlen=5\"; did you mean --seq-len?"));
  const Result bench = run("bench --repetitons 3");
  EXPECT_THAT(bench.err, HasSubstr("bench: unexpected argument \"--repetitons\"; did you mean --repetitions?"));
  const Result far = run("presets --verbose");
  EXPECT_EQ(far.exit_code, 2);
  EXPECT_EQ(far.err, "rotary: error: presets: unexpected argument \"--verbose\" (see rotary presets --help)\n");
}

TEST(CliMessages, AnUnknownCommandSuggestsTheNearestCommand) {
  const Result r = run("explian");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err,
            "rotary: error: command must be one of presets, freqs, explain, table, apply, verify-golden, check, bench, "
            "report, diagnose, attention, convert-weights, export, diverge (got \"explian\"); did you mean explain? (see rotary --help)\n");
}

TEST(CliMessages, HelpCommandPrintsThatCommandsUsage) {
  for (const char* command : {"presets", "freqs", "explain", "table", "apply", "verify-golden", "check", "bench",
                              "report", "diagnose", "export", "diverge"}) {
    SCOPED_TRACE(command);
    const Result r = run(std::string("help ") + command);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.out, StartsWith(std::string("usage: rotary ") + command));
    EXPECT_EQ(r.out, run(std::string(command) + " --help").out);
  }
  const Result unknown = run("help explian");
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_THAT(unknown.err, HasSubstr("help: COMMAND must be one of presets,"));
  EXPECT_THAT(unknown.err, HasSubstr("(got \"explian\"); did you mean explain?"));
  EXPECT_THAT(run("help").out, StartsWith("usage: rotary <command>"));
}

TEST(CliMessages, VersionFlagsPrintTheVersionAndExitZero) {
  for (const char* flag : {"-V", "--version"}) {
    SCOPED_TRACE(flag);
    const Result r = run(flag);
    EXPECT_EQ(r.exit_code, 0);
    EXPECT_EQ(r.out, std::string("rotary ") + ROTARY_VERSION + "\n");
    EXPECT_EQ(r.err, "");
  }
}

// ---- -o - -------------------------------------------------------------------------------------

TEST(CliMessages, ReportDashOWritesThePageToStdoutAndNoFile) {
  ScratchDir dir("rotary_report_stdout");
  const Result r = test::run_cli("report --preset qwen3-8b -o -", "cd " + dir.path.string() + " && ");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, StartsWith("<!DOCTYPE html>"));
  EXPECT_THAT(r.out, Not(HasSubstr("report written to")));
  EXPECT_TRUE(dir.names().empty());  // no file called "-", no temporary file
}

TEST(CliMessages, ApplyOutQDashWritesTheNpyToStdoutAndNoFile) {
  ScratchDir dir("rotary_apply_stdout");
  // A (1, 2, 1, 128) float32 q in bshd: two tokens of one head of llama-3.1-8b.
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2, 1, 128), }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string npy = std::string("\x93NUMPY\x01\x00", 8);
  npy += static_cast<char>(header.size() & 0xff);
  npy += static_cast<char>(header.size() >> 8);
  npy += header;
  float values[256];
  for (int i = 0; i < 256; ++i) values[i] = 0.25f * static_cast<float>((i * 37) % 17) - 2.0f;
  npy.append(reinterpret_cast<const char*>(values), sizeof values);
  write_file(dir / "q.npy", npy);
  const Result r = run("apply --q " + (dir / "q.npy") + " --layout bshd --out-q -");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, StartsWith(std::string("\x93NUMPY", 6)));
  EXPECT_EQ(r.out.size(), npy.size());
  EXPECT_THAT(r.err, HasSubstr("rotary: wrote q to stdout"));
  EXPECT_EQ(dir.names(), (std::vector<std::string>{"q.npy"}));
  const Result both = run("apply --q " + (dir / "q.npy") + " --k " + (dir / "q.npy") + " --layout bshd --out-q - --out-k -");
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_THAT(both.err, HasSubstr("apply: --out-q and --out-k cannot both be - (stdout holds one .npy) (got - for both)"));
  const Result json_out = run("apply --q " + (dir / "q.npy") + " --layout bshd --out-q " + (dir / "out.npy") + " --json");
  ASSERT_EQ(json_out.exit_code, 0) << json_out.err;
  const json::Value doc = json::parse(json_out.out, "apply --json");
  EXPECT_EQ(doc.find("outputs")->as_array()[0].as_string(), dir / "out.npy");
  EXPECT_EQ(doc.find("model")->as_string(), "llama-3.1-8b");
}

// ---- --json on every command that prints a result ---------------------------------------------

TEST(CliMessages, EveryCommandThatPrintsAResultTakesJson) {
  ScratchDir dir("rotary_json_everywhere");
  const std::vector<std::string> commands = {
      "presets --json", "freqs --json", "explain --json", "table --positions 0,1 --json", "check --json",
      "attention --tokens 8 --decode 2 --json",
      "verify-golden " + std::string(ROTARY_GOLDEN_DIR) + " --json", "report --preset phi-2 -o " + (dir / "r.html") + " --json"};
  for (const std::string& command : commands) {
    SCOPED_TRACE(command);
    const Result r = run(command);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NO_THROW(json::parse(r.out, command));
  }
  const json::Value golden = json::parse(run("verify-golden " + std::string(ROTARY_GOLDEN_DIR) + " --json").out, "golden");
  EXPECT_TRUE(golden.find("passed")->as_bool());
  EXPECT_GT(golden.find("cases")->as_array().size(), 0u);
  const json::Value report = json::parse(run("report --preset phi-2 -o " + (dir / "r.html") + " --json").out, "report");
  EXPECT_EQ(report.find("path")->as_string(), dir / "r.html");
  EXPECT_GT(report.find("plots")->as_int64(), 0);
}

// ---- model folders ----------------------------------------------------------------------------

TEST(CliMessages, AModelFolderIsReadAsItsConfigJson) {
  ScratchDir dir("rotary_model_folder");
  write_file(dir / "config.json", kQwen3Yarn);
  const Result r = run("freqs --config " + dir.path.string() + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out, "freqs").find("rope_type")->as_string(), "yarn");
  EXPECT_EQ(json::parse(r.out, "freqs").find("source")->as_string(), dir / "config.json");
}

TEST(CliMessages, AFolderWithoutConfigJsonIsAnErrorNamingThePath) {
  ScratchDir dir("rotary_empty_folder");
  const Result r = run("explain --config " + dir.path.string());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "rotary: error: explain: --config must be a config.json or a model folder holding one (got the folder " +
                       dir.path.string() + ", which has no " + (dir / "config.json") + ")\n");
}

// ---- report --compare -------------------------------------------------------------------------

TEST(CliMessages, ReportCompareTakesConfigFilesAndFoldersBesidePresets) {
  ScratchDir dir("rotary_compare_configs");
  std::filesystem::create_directories(dir / "qwen3-yarn");
  write_file(dir / "qwen3-yarn/config.json", kQwen3Yarn);
  write_file(dir / "linear.json", R"({"hidden_size": 2048, "num_attention_heads": 16, "rope_theta": 10000.0,
      "max_position_embeddings": 8192, "rope_scaling": {"type": "linear", "factor": 2.0}})");
  const Result r = run("report --compare Llama-3.1-8B," + (dir / "linear.json") + "," + (dir / "qwen3-yarn") + " -o " +
                       (dir / "page.html") + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  const json::Value doc = json::parse(r.out, "report");
  const auto& models = doc.find("models")->as_array();
  ASSERT_EQ(models.size(), 3u);
  EXPECT_EQ(models[0].find("source")->as_string(), "preset llama-3.1-8b");
  EXPECT_EQ(models[1].find("source")->as_string(), dir / "linear.json");
  EXPECT_EQ(models[2].find("source")->as_string(), dir / "qwen3-yarn/config.json");
  EXPECT_THAT(test::read_all(dir / "page.html"), HasSubstr(dir / "linear.json"));

  const Result bad = run("report --compare llama-3.1-8b,qwen3-8bb -o " + (dir / "x.html"));
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_EQ(bad.err, "rotary: error: report: --compare entries must be presets (see rotary presets), config.json files or "
                     "model folders (got \"qwen3-8bb\", neither a preset nor a path); did you mean qwen3-8b?\n");
}

}  // namespace
}  // namespace rotary
