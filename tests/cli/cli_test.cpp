// tests/cli/cli_test.cpp: the `rotary` command as a user runs it: exit codes, stdout, stderr.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <random>
#include <string>
#include <vector>

#include "rotary/apply.hpp"
#include "rotary/frequencies.hpp"
#include "cli_runner.hpp"
#include "cli/bench_output.hpp"
#include "core/json.hpp"
#include "cli/npy.hpp"
#include "cli/run_cli.hpp"
#include "rotary/presets.hpp"
#include "rotary/table.hpp"

namespace rotary {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

using Result = test::CliResult;
using test::read_all;
using test::write_temp;
using test::ScratchDir;

Result run(const std::string& arguments, const std::string& shell_prefix = "") {
  return test::run_cli(arguments, shell_prefix);
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
  // Phi-3's config omits factor and derives it from its top-level original length: correct, so
  // no warning.
  EXPECT_EQ(long_set.err, "");
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
  for (const char* part : {"RoPE of llama-3.1-8b", "Verdict: OK: no warnings", "scheme      llama3",
                           "attention   not scaled (llama3 does not scale attention)",
                           "contexts    trained 8192 tokens, configured 131072, target 131072", "Per pair"}) {
    EXPECT_THAT(r.out, HasSubstr(part));
  }
  EXPECT_THAT(r.out, HasSubstr("pairs are kept unchanged (\"extrapolated\" in the YaRN paper's words"));
  EXPECT_THAT(r.out, HasSubstr("pairs are interpolated"));
  EXPECT_THAT(r.out, Not(HasSubstr("scaling 1 = 1")));
  EXPECT_LT(r.out.find("Verdict"), r.out.find("Per pair"));  // the verdict first, the table after
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
        ErrorCase{"UnknownCommand", "frobnicate", "command must be one of presets, freqs, explain, table, apply, verify-golden, check, bench, report, diagnose, attention, convert-weights, export, diverge (got \"frobnicate\")"},
        ErrorCase{"UnknownPreset", "freqs --preset llama-9", "freqs: --preset must be a built-in preset, see rotary presets (got \"llama-9\")"},
        ErrorCase{"BothSources", "freqs --preset llama-2-7b --config x.json", "give --preset or --config, not both"},
        ErrorCase{"MissingFile", "explain --config /nonexistent/config.json", "/nonexistent/config.json: cannot read file"},
        ErrorCase{"BadSeqLen", "freqs --seq-len ten", "--seq-len must be an integer in [0, "},
        ErrorCase{"NegativeSeqLen", "freqs --seq-len -5", "(got -5)"},
        ErrorCase{"ZeroContext", "explain --context 0", "--context must be an integer in [1, "},
        ErrorCase{"FlagWithoutValue", "freqs --preset", "--preset needs a preset name"},
        ErrorCase{"IntegerFlagWithoutValue", "freqs --seq-len", "freqs: --seq-len needs a value"},
        ErrorCase{"UnexpectedArgument", "presets --verbose", "unexpected argument \"--verbose\""},
        ErrorCase{"UnknownLayerType", "freqs --layer-type sliding_attention", "--layer-type must be one of"},
        ErrorCase{"TableWithoutPositions", "table", "--positions is required"},
        ErrorCase{"TableBadPositions", "table --positions 1,x", "--positions must be integers"},
        ErrorCase{"TableNegativePosition", "table --positions -4", "entries must be in [0, 2147483647] (got -4)"},
        ErrorCase{"TableHugePosition", "table --positions 2147483648", "entries must be in [0, 2147483647] (got 2147483648)"},
        ErrorCase{"TableEmptyRange", "table --positions 5:5", "FIRST < LAST"},
        ErrorCase{"TableBadPrecision", "table --positions 1 --precision fp16", "--precision must be exact, hf, ggml or vllm (got \"fp16\")"},
        ErrorCase{"VerifyGoldenNoDir", "verify-golden", "DIR is required"},
        ErrorCase{"BenchBadDtypes", "bench --dtypes float64", "--dtypes must list distinct types from float32, bfloat16, float16 (got \"float64\")"},
        ErrorCase{"VerifyGoldenMissingDir", "verify-golden /nonexistent/golden", "/nonexistent/golden must be a directory"}),
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

TEST(Cli, TableJsonRowsMatchTheLibraryBitForBit) {
  const Result r = run("table --preset qwen2.5-7b-yarn --positions 0,5,100000,2147483647 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json::Value doc = json::parse(r.out, "table --json");
  const RopeSpec spec = preset("qwen2.5-7b-yarn").spec;
  const CosSinTable table(spec, {.storage = Storage::OnTheFly, .seq_len = 2147483648});
  EXPECT_EQ(doc.find("precision")->as_string(), "exact");
  EXPECT_EQ(doc.find("attention_scaling")->as_double(), table.attention_scaling());
  const auto& cos_rows = doc.find("cos")->as_array();
  const auto& sin_rows = doc.find("sin")->as_array();
  ASSERT_EQ(cos_rows.size(), 4u);
  const int64_t positions[] = {0, 5, 100000, 2147483647};
  std::vector<float> c(64), s(64);
  for (size_t r_index = 0; r_index < 4; ++r_index) {
    table.row(positions[r_index], c.data(), s.data());
    const std::vector<float> expanded_cos = expand_row(c.data(), 64, Style::NeoX);
    const std::vector<float> expanded_sin = expand_row(s.data(), 64, Style::NeoX);
    ASSERT_EQ(cos_rows[r_index].as_array().size(), 128u);
    for (size_t i = 0; i < 128; ++i) {
      EXPECT_EQ(static_cast<float>(cos_rows[r_index].as_array()[i].as_double()), expanded_cos[i]);
      EXPECT_EQ(static_cast<float>(sin_rows[r_index].as_array()[i].as_double()), expanded_sin[i]);
    }
  }
}

TEST(Cli, TableRangeAndHfPrecision) {
  const Result r = run("table --preset gpt-j-6b --positions 16777216:16777218 --precision hf --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json::Value doc = json::parse(r.out, "table");
  const auto& rows = doc.find("cos")->as_array();
  ASSERT_EQ(rows.size(), 2u);
  ASSERT_EQ(rows[0].as_array().size(), 64u);  // GPT-J: rotary_dim 64, each pair twice
  EXPECT_EQ(rows[0].as_array()[2].as_double(), rows[0].as_array()[3].as_double());
  // Hugging Face's float32 positions: 16777217 rounds to 16777216, so the rows are equal.
  for (size_t i = 0; i < 64; ++i) EXPECT_EQ(rows[0].as_array()[i].as_double(), rows[1].as_array()[i].as_double());
}

TEST(Cli, VerifyGoldenPassesOnTheSharedGoldenVectors) {
  const Result r = run(std::string("verify-golden ") + ROTARY_GOLDEN_DIR);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("PASS default_llama2_7b.json"));
  EXPECT_THAT(r.out, HasSubstr("PASS neg_yarn_missing_factor.json"));
  EXPECT_THAT(r.out, ::testing::ContainsRegex("[0-9]+ passed, 0 failed"));
  EXPECT_THAT(r.out, ::testing::EndsWith(" passed, 0 failed\n"));
}

TEST(Cli, VerifyGoldenFailsOnACorruptedCase) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("rotary_golden_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::string text = read_all(std::filesystem::path(ROTARY_GOLDEN_DIR) / "corner_head_dim_6.json");
  // Change the exact inv_freq of pair 1 (1e4^(-1/3) = 0.046415888...) to 0.056...: rotary
  // must notice.
  const size_t exact = text.find("\"exact_f64\": {");
  ASSERT_NE(exact, std::string::npos);
  const size_t at = text.find("0.0464158883", exact);
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 4, "0.05");
  std::ofstream(dir / "corner_head_dim_6.json") << text;
  const Result r = run("verify-golden " + dir.string());
  std::filesystem::remove_all(dir);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.out, HasSubstr("FAIL corner_head_dim_6.json"));
  EXPECT_THAT(r.out, HasSubstr("0 passed, 1 failed"));
}

// Writes a random float32 .npy of the given shape (values in [-2, 2], never zero).
npy::Array random_array(std::vector<int64_t> shape, uint64_t seed) {
  npy::Array a;
  a.type = npy::ElementType::Float32;
  a.shape = std::move(shape);
  std::vector<float> values(static_cast<size_t>(a.size()));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(0.25f, 2.0f);
  for (float& v : values) v = (rng() & 1 ? 1.0f : -1.0f) * dist(rng);
  a.bytes.resize(values.size() * sizeof(float));
  std::memcpy(a.bytes.data(), values.data(), a.bytes.size());
  return a;
}

std::vector<float> floats(const npy::Array& a) {
  std::vector<float> v(a.bytes.size() / sizeof(float));
  std::memcpy(v.data(), a.bytes.data(), a.bytes.size());
  return v;
}

TEST(Cli, ApplyForwardMatchesTheReferenceAndBackwardUndoesIt) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("rotary_apply_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  npy::Array q = random_array({2, 5, 4, 128}, 1);
  npy::Array k = random_array({2, 5, 2, 128}, 2);
  npy::Array offsets{npy::ElementType::Int64, {2}, {}};
  const int64_t offset_values[2] = {7, 131000};
  offsets.bytes.resize(sizeof offset_values);
  std::memcpy(offsets.bytes.data(), offset_values, sizeof offset_values);
  npy::write((dir / "q.npy").string(), q);
  npy::write((dir / "k.npy").string(), k);
  npy::write((dir / "off.npy").string(), offsets);
  const std::string base = "apply --preset llama-3.1-8b --layout bshd --offsets " + (dir / "off.npy").string();
  const Result forward = run(base + " --q " + (dir / "q.npy").string() + " --k " + (dir / "k.npy").string() +
                             " --out-q " + (dir / "q1.npy").string() + " --out-k " + (dir / "k1.npy").string());
  ASSERT_EQ(forward.exit_code, 0) << forward.err;
  const Result backward = run(base + " --direction backward --q " + (dir / "q1.npy").string() + " --k " +
                              (dir / "k1.npy").string() + " --out-q " + (dir / "q2.npy").string() + " --out-k " +
                              (dir / "k2.npy").string());
  ASSERT_EQ(backward.exit_code, 0) << backward.err;

  // Forward: the same call in process gives the same bits (the SIMD kernel; thread count and
  // target do not change results).
  const CosSinTable table(preset("llama-3.1-8b").spec, {.storage = Storage::OnTheFly});
  std::vector<float> q_in = floats(q), k_in = floats(k), q_ref(q_in.size()), k_ref(k_in.size());
  const Positions positions = Positions::sequence_offsets(offset_values);
  rotary::apply(contiguous_view(q_in.data(), DType::F32, Layout::BSHD, {2, 5, 4, 128}),
                   contiguous_view(k_in.data(), DType::F32, Layout::BSHD, {2, 5, 2, 128}),
                   contiguous_view(q_ref.data(), DType::F32, Layout::BSHD, {2, 5, 4, 128}),
                   contiguous_view(k_ref.data(), DType::F32, Layout::BSHD, {2, 5, 2, 128}), positions, table);
  EXPECT_EQ(floats(npy::read((dir / "q1.npy").string())), q_ref);
  EXPECT_EQ(floats(npy::read((dir / "k1.npy").string())), k_ref);
  // Backward after forward: the identity up to two float32 roundings of values <= 2 (|error| <=
  // 2 * 2^-24 * 2 * (|a| + |c|) <= 1e-6) and the table's own rounding (cos^2 + sin^2 = 1 +- 2^-23).
  const std::vector<float> q_back = floats(npy::read((dir / "q2.npy").string()));
  for (size_t i = 0; i < q_in.size(); ++i) EXPECT_NEAR(q_back[i], q_in[i], 2e-6) << i;
  std::filesystem::remove_all(dir);
}

TEST(Cli, ApplyRejectsBadInputNamingIt) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("rotary_apply_bad_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  npy::write((dir / "q3.npy").string(), random_array({5, 4, 128}, 3));
  npy::write((dir / "q4.npy").string(), random_array({1, 5, 4, 128}, 4));
  const std::string q3 = (dir / "q3.npy").string();
  const std::string q4 = (dir / "q4.npy").string();
  const std::string out = (dir / "out.npy").string();
  struct Case {
    std::string arguments;
    std::string message;
  };
  const Case cases[] = {
      {"apply --layout bshd --out-q " + out, "--q is required"},
      {"apply --q " + q4 + " --layout bshd", "--out-q is required"},
      {"apply --q " + q4 + " --out-q " + out + " --layout bsdh", "--layout must be bshd, bhsd, sbhd or thd (got \"bsdh\")"},
      {"apply --q " + q3 + " --out-q " + out + " --layout bshd", "--q must have 4 dimensions for layout bshd (got shape (5, 4, 128))"},
      {"apply --q " + q4 + " --out-q " + out + " --layout bshd --k " + q4, "--k and --out-k go together"},
      {"apply --q /nonexistent/q.npy --out-q " + out + " --layout bshd", "/nonexistent/q.npy: cannot read file"},
      {"apply --q " + q4 + " --out-q " + out + " --layout bshd --positions " + q4, "--positions must hold int64 (got float32)"},
      {"apply --q " + q4 + " --out-q " + out + " --layout bshd --direction sideways", "--direction must be forward or backward"},
      {"apply --q " + q4 + " --out-q " + out + " --layout thd", "--q must have 3 dimensions for layout thd"},
      {"apply --preset gpt-neox-20b --q " + q4 + " --out-q " + out + " --layout bshd --rotary-offset 120",
       "rotary_offset"},
  };
  for (const Case& c : cases) {
    const Result r = run(c.arguments);
    EXPECT_EQ(r.exit_code, 2) << c.arguments;
    EXPECT_THAT(r.err, HasSubstr(c.message)) << c.arguments;
  }
  EXPECT_FALSE(std::filesystem::exists(out));
  std::filesystem::remove_all(dir);
}

TEST(Cli, HelpForEveryCommand) {
  const Result usage = run("--help");
  EXPECT_EQ(usage.exit_code, 0);
  const std::vector<std::string> commands = cli::command_names();
  EXPECT_EQ(commands.size(), 14u);  // presets freqs explain table apply verify-golden check bench report diagnose attention
                                    // convert-weights export diverge
  for (const std::string& command : commands) {
    SCOPED_TRACE(command);
    const Result r = run(command + " --help");
    EXPECT_EQ(r.exit_code, 0);
    EXPECT_THAT(r.out, HasSubstr("usage: rotary " + command));
    EXPECT_THAT(usage.out, HasSubstr("  " + command + " "));  // `rotary --help` lists it
  }
  EXPECT_EQ(run("").exit_code, 2);
}

// The structure of `rotary bench --json` on the smallest run, not its figures (timing belongs in
// bench/): every row names its case and baseline, a cached call (decode) is compared with a stream
// of its own bytes, and ratio_to_copy is gb_per_s / baseline_gb_per_s.
TEST(Cli, BenchJsonRowsNameTheirCaseAndBaseline) {
  const Result r = run("bench --json --quick --cases decode --dtypes float32 --threads 1 --repetitions 1 --torch none");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json::Value rows = json::parse(r.out, "bench --json");
  ASSERT_TRUE(rows.is_array());
  std::map<std::string, int> cases;
  for (const json::Value& row : rows.as_array()) {
    const std::string name = row.find("case")->as_string();
    ++cases[name];
    EXPECT_EQ(row.find("dtype")->as_string(), "float32");
    EXPECT_EQ(row.find("threads")->as_int64(), 1);
    EXPECT_GT(row.find("median_ms")->as_double(), 0.0) << name;
    EXPECT_GT(row.find("gb_per_s")->as_double(), 0.0) << name;
    const double ratio = row.find("ratio_to_copy")->as_double();
    const double baseline = row.find("baseline_gb_per_s")->as_double();
    EXPECT_NEAR(ratio, row.find("gb_per_s")->as_double() / baseline, 1e-9 * ratio) << name;
#if defined(__x86_64__) || defined(__aarch64__)
    EXPECT_GT(row.find("core_ghz")->as_double(), 0.05) << name;  // the clock just before the row
#endif
    if (name == "decode") {
      const bool in_place = row.find("in_place")->as_bool();
      EXPECT_EQ(row.find("baseline")->as_string(), in_place ? "cached_copy_inplace" : "cached_copy");
      EXPECT_EQ(row.find("bytes")->as_int64(), 64 * (40 + 8) * 128 * 4 * 2);
    }
  }
  EXPECT_EQ(cases["decode"], 2);  // out of place and in place
  EXPECT_EQ(cases["copy"], 1);
  EXPECT_EQ(cases["copy_inplace"], 1);
  EXPECT_EQ(cases["memcpy"], 1);
  EXPECT_EQ(cases["copy_sequential"], 1);
  EXPECT_EQ(cases["copy_4pages"], 1);
}

// `rotary bench --quick` (what `make run` runs) is for people: a short table of at most 8 rows
// (each case out of place at the largest thread count), then one line of takeaway.
TEST(Cli, BenchQuickPrintsAShortTableAndATakeaway) {
  const Result r = run("bench --quick --torch none --dtypes float32,bfloat16 --threads 1 --repetitions 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::istringstream lines(r.out);
  std::string line;
  std::vector<std::string> rows;
  bool in_table = false;
  while (std::getline(lines, line)) {
    if (line.rfind("case ", 0) == 0) {
      in_table = true;
    } else if (in_table && line.empty()) {
      break;
    } else if (in_table) {
      rows.push_back(line);
    }
  }
  ASSERT_FALSE(rows.empty()) << r.out;
  EXPECT_LE(rows.size(), 8u) << r.out;
  for (const std::string& row : rows) EXPECT_THAT(row, Not(HasSubstr("copy_"))) << r.out;  // no stream rows
  EXPECT_THAT(r.out, HasSubstr("\ntakeaway: prefill at "));
  EXPECT_THAT(r.out, HasSubstr("x this machine's copy bandwidth (float32, 1 thread)\n"));
  EXPECT_THAT(r.out, Not(HasSubstr("PyTorch code")));  // the torch comparison only when torch ran
  EXPECT_THAT(r.err, Not(HasSubstr("rows, ")));        // no progress lines for the short form
  EXPECT_THAT(r.out, Not(HasSubstr("attn_")));         // attention: the full bench or --cases only
}

// The full bench shows its progress on stderr and has a "!" column for rows the machine's noise
// made unreliable (JSON: the unreliable field, null or the reason).
TEST(Cli, BenchFullShowsProgressAndMarksUnreliableRows) {
  const Result r = run("bench --cases decode --dtypes float32 --threads 1 --repetitions 1 --torch none");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // 7 stream rows and 2 decode rows.
  EXPECT_THAT(r.err, HasSubstr("rotary bench: 1 of 9 rows, "));
  EXPECT_THAT(r.err, HasSubstr("rotary bench: 9 of 9 rows, "));
  EXPECT_THAT(r.out, ::testing::ContainsRegex("GHz ! +shape"));
  const Result j = run("bench --json --quick --cases decode --dtypes float32 --threads 1 --repetitions 3 --torch none");
  ASSERT_EQ(j.exit_code, 0) << j.err;
  const json::Value rows = json::parse(j.out, "bench --json");
  for (const json::Value& row : rows.as_array()) {
    const json::Value* unreliable = row.find("unreliable");
    ASSERT_NE(unreliable, nullptr);
    EXPECT_TRUE(unreliable->is_null() || unreliable->as_string().find("spread ") == 0 ||
                unreliable->as_string().find("baseline spread ") == 0);
    const json::Value* other_cpu = row.find("other_cpu_percent");  // said, not judged
    ASSERT_NE(other_cpu, nullptr);
    EXPECT_TRUE(other_cpu->is_null() || other_cpu->as_double() >= 0.0);
  }
  // The legend under the table: what a ratio divides by, why it can pass 1, what "!" means.
  EXPECT_THAT(r.out, HasSubstr("# ratio (x copy): the row's GB/s / a memory stream's of the same dtype and threads"));
  EXPECT_THAT(r.out, HasSubstr("# ! = unreliable: the row's median was more than 15% above its fastest repetition"));
}

// "!" follows the spread of a row's repetitions (its own, or its stream's: the ratio divides by
// both), not other processes' load, which used to mark every row on a busy machine although each
// ratio is timed in alternation with its stream; the load is kept as a figure. The quick table's
// legend says why a ratio can pass 1 (the out-of-place kernel's four streams against one copy).
TEST(Cli, BenchMarksSpreadNotLoadAndExplainsRatiosAboveOne) {
  namespace bench = cli::bench;
  bench::Row steady;
  steady.name = steady.workload = "prefill";
  steady.dtype = "float32";
  steady.threads = 2;
  steady.median_ms = 1.10;
  steady.min_ms = 1.0;
  steady.gb_per_s = 20.0;
  steady.ratio_to_copy = 1.05;
  bench::Row spread = steady;
  bench::Row stream_spread = steady;
  bench::judge_noise(steady, 60.0);  // a busy machine, repetitions within 10%
  EXPECT_EQ(steady.unreliable, "");
  EXPECT_EQ(steady.other_cpu_percent, 60.0);
  spread.median_ms = 1.25;
  bench::judge_noise(spread, 0.0);
  EXPECT_EQ(spread.unreliable, "spread 25%");
  stream_spread.baseline_spread = 0.30;
  bench::judge_noise(stream_spread, std::nan(""));
  EXPECT_EQ(stream_spread.unreliable, "baseline spread 30%");
  EXPECT_TRUE(std::isnan(stream_spread.other_cpu_percent));

  std::ostringstream out;
  bench::print_quick(out, {.preset = "llama-3.1-8b", .target = "AVX2", .repetitions = 5}, {steady, spread}, {});
  const std::string text = out.str();
  EXPECT_THAT(text, ::testing::ContainsRegex("1\\.1000 +20\\.00 +1\\.050  \n"));  // no mark
  EXPECT_THAT(text, ::testing::ContainsRegex("1\\.2500 +20\\.00 +1\\.050 !\n"));
  EXPECT_THAT(text, HasSubstr("# ratio (x copy): the row's GB/s / a memory stream's of the same dtype and threads"));
  EXPECT_THAT(text, HasSubstr("Above 1 is possible: the\n#   stream is measured here, not a hardware limit, and the"
                              " out-of-place kernel runs four streams\n#   at once (q and k in, q and k out), which"
                              " can draw more from memory than one copy.\n"));
  EXPECT_THAT(text, HasSubstr("# ! = unreliable: the row's median was more than 15% above its fastest repetition, or"
                              " its\n#   stream's was"));
  EXPECT_THAT(text, HasSubstr("Other processes' load alone marks no\n#   row"));
  EXPECT_THAT(text, HasSubstr("# 1 of 2 rows marked !: rerun them"));
}

// The floors run with the kernels' target: every stream row but glibc's memcpy names it.
TEST(Cli, BenchStreamsRunWithTheKernelsTarget) {
  const std::string target = cpu_targets().back();  // the last: never the default on a SIMD CPU
  const Result r = run("bench --json --cases copy --dtypes float32 --threads 1 --repetitions 1 --torch none --target " +
                       target);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json::Value rows = json::parse(r.out, "bench --json");
  ASSERT_TRUE(rows.is_array());
  ASSERT_FALSE(rows.as_array().empty());
  for (const json::Value& row : rows.as_array()) {
    const std::string name = row.find("case")->as_string();
    EXPECT_EQ(row.find("target")->as_string(), name == "memcpy" ? "glibc" : target) << name;
  }
}

// $ROTARY_CPU_TARGET forces the target of the streams and of the kernels alike (the rows say
// which), and a --target that names another one is refused: rotary::apply would force the
// environment's at its first call, after --target.
TEST(Cli, BenchFollowsRotaryCpuTargetAndRefusesAnotherTarget) {
  const std::vector<std::string> targets = cpu_targets();
  if (targets.size() < 2) GTEST_SKIP() << "one target only";
  const std::string forced = targets[1];
  const Result r = run("bench --json --quick --cases decode --dtypes float32 --threads 1 --repetitions 1 --torch none",
                       "ROTARY_CPU_TARGET=" + forced + " ");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json::Value rows = json::parse(r.out, "bench --json");
  for (const json::Value& row : rows.as_array()) {
    const std::string name = row.find("case")->as_string();
    EXPECT_EQ(row.find("target")->as_string(), name == "memcpy" ? "glibc" : forced) << name;
  }
  const Result refused = run("bench --torch none --target " + targets[0], "ROTARY_CPU_TARGET=" + forced + " ");
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_THAT(refused.err, HasSubstr("bench: --target must agree with $ROTARY_CPU_TARGET, which rotary::apply forces"
                                     " at its first call (got --target " + targets[0] + " and ROTARY_CPU_TARGET=" +
                                     forced + ")"));
}

// ---- `rotary bench`'s PyTorch peer: the project's own script, found from the command ----------

// The command's smallest run that still asks the peer for rows (decode is a shape it can run).
const char* const kBenchPeerRun =
    "bench --json --quick --cases decode --dtypes float32 --threads 1 --repetitions 1";

// A stand-in for a Python (a shell script) in `dir`: `python -c "import torch"` succeeds if
// `has_torch`; run on a script, it writes the script's path to dir/peer_script_path and the JSON
// the peer writes (one torch_copy row) where --json says.
std::string write_fake_python(const ScratchDir& dir, const std::string& name, bool has_torch) {
  const std::string path = dir / name;
  std::ofstream(path) << "#!/bin/sh\n"
                      << "if [ \"$1\" = \"-c\" ]; then exit " << (has_torch ? 0 : 1) << "; fi\n"
                      << "printf '%s\\n' \"$1\" > '" << (dir / "peer_script_path") << "'\n"
                      << "printf '%s\\n' \"$@\" >> '" << (dir / "peer_args") << "'\n"
                      << "out=''\n"
                      << "while [ $# -gt 0 ]; do if [ \"$1\" = --json ]; then out=\"$2\"; fi; shift; done\n"
                      << "printf '%s' '{\"meta\": {\"torch_version\": \"0-fake\", \"cpu_capability\": \"fake\"},"
                         " \"results\": [{\"method\": \"copy\", \"layout\": \"-\", \"dtype\": \"float32\","
                         " \"threads\": 1, \"median_ms\": 0.5, \"min_ms\": 0.4, \"reps\": 1}]}' > \"$out\"\n";
  std::filesystem::permissions(path, std::filesystem::perms::owner_all);
  return path;
}

std::vector<std::string> torch_cases(const std::string& json_out) {
  std::vector<std::string> names;
  const json::Value rows = json::parse(json_out, "bench --json");
  for (const json::Value& row : rows.as_array()) {
    const std::string name = row.find("case")->as_string();
    if (name.rfind("torch_", 0) == 0) names.push_back(name);
  }
  return names;
}

// Run from a directory outside the source tree, without ROTARY_PEERS_DIR: the build-tree command
// finds the project's own bench/peers/torch_rope_bench.py.
TEST(CliBenchPeer, RunsTheProjectsOwnScriptFromAnyDirectory) {
  const ScratchDir dir("rotary_bench_peer_own");
  const std::string python = write_fake_python(dir, "python", true);
  const Result r = run(std::string(kBenchPeerRun) + " --torch " + python,
                       "cd '" + dir.path.string() + "' && env -u ROTARY_PEERS_DIR ");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string script = read_all(dir / "peer_script_path");
  ASSERT_FALSE(script.empty()) << "the peer did not run: " << r.err;
  script.pop_back();  // the newline
  EXPECT_TRUE(std::filesystem::equivalent(script, ROTARY_SOURCE_PEER_SCRIPT)) << script;
  EXPECT_THAT(script, Not(HasSubstr("shared")));
  EXPECT_EQ(torch_cases(r.out), std::vector<std::string>{"torch_copy"});
  const json::Value rows = json::parse(r.out, "bench --json");
  for (const json::Value& row : rows.as_array()) {
    if (row.find("case")->as_string() != "torch_copy") continue;
    EXPECT_EQ(row.find("target")->as_string(), "torch:fake");
    EXPECT_EQ(row.find("baseline")->as_string(), "copy");  // our floor, not torch's copy
    EXPECT_GT(row.find("ratio_to_copy")->as_double(), 0.0);
  }
}

// torch.compile's compiles took up to 80 s of `rotary bench --quick`'s 1-4 minutes on 2 cores:
// --quick asks the peer for no torch_hf_compile (--no-compile) and its torch line says so and how
// to get it; --torch-compile brings it back, and the full bench always runs it.
TEST(CliBenchPeer, QuickLeavesTorchCompileOutUnlessAsked) {
  const ScratchDir dir("rotary_bench_peer_compile");
  const std::string python = write_fake_python(dir, "python", true);
  const std::string in_dir = "cd '" + dir.path.string() + "' && env -u ROTARY_PEERS_DIR ";
  const auto run_peer = [&](const std::string& arguments, std::string& peer_args) {
    std::filesystem::remove(dir.path / "peer_args");
    const Result r = run(arguments + " --torch " + python, in_dir);
    peer_args = read_all(dir / "peer_args");
    return r;
  };
  const std::string left_out =
      "torch_hf_compile not run (--quick leaves torch.compile out: its compiles took up to 80 s on 2 cores;"
      " --torch-compile runs it)";
  std::string args;
  const Result quick_json = run_peer(kBenchPeerRun, args);
  ASSERT_EQ(quick_json.exit_code, 0) << quick_json.err;
  EXPECT_THAT(args, HasSubstr("\n--no-compile\n"));
  EXPECT_THAT(quick_json.err, HasSubstr(left_out));  // JSON: the note on stderr

  const Result quick_text = run_peer("bench --quick --cases decode --dtypes float32 --threads 1 --repetitions 1", args);
  ASSERT_EQ(quick_text.exit_code, 0) << quick_text.err;
  EXPECT_THAT(args, HasSubstr("\n--no-compile\n"));
  EXPECT_THAT(quick_text.out, HasSubstr("torch: torch 0-fake (cpu_capability fake) via " + python));
  EXPECT_THAT(quick_text.out, HasSubstr(left_out + "\n"));

  const Result asked = run_peer(std::string(kBenchPeerRun) + " --torch-compile", args);
  ASSERT_EQ(asked.exit_code, 0) << asked.err;
  EXPECT_THAT(args, HasSubstr("\n--table-positions\n0\n"));  // the peer ran
  EXPECT_THAT(args, Not(HasSubstr("--no-compile")));
  EXPECT_THAT(asked.err, Not(HasSubstr("torch_hf_compile not run")));

  const Result full = run_peer("bench --json --cases decode --dtypes float32 --threads 1 --repetitions 1", args);
  ASSERT_EQ(full.exit_code, 0) << full.err;
  EXPECT_THAT(args, HasSubstr("\n--table-positions\n0\n"));
  EXPECT_THAT(args, Not(HasSubstr("--no-compile")));

  // --quick without --threads: PyTorch at the largest of the default counts (1,2) only, the one the
  // short table shows, and the torch line says how to get both; the kernels still run at both.
  const Result quick_default = run_peer("bench --json --quick --cases decode --dtypes float32 --repetitions 1", args);
  ASSERT_EQ(quick_default.exit_code, 0) << quick_default.err;
  EXPECT_THAT(args, HasSubstr("\n--threads\n2\n--dtypes\n"));
  EXPECT_THAT(quick_default.err, HasSubstr("; --quick: PyTorch at 2 threads only (--threads 1,2 runs it at each); "));
  const json::Value rows = json::parse(quick_default.out, "bench --json");
  std::set<int64_t> decode_threads;
  for (const json::Value& row : rows.as_array()) {
    if (row.find("case")->as_string() == "decode") decode_threads.insert(row.find("threads")->as_int64());
  }
  EXPECT_EQ(decode_threads, (std::set<int64_t>{1, 2}));
}

// The attention cases (src/cli/bench_attention.hpp) on the smallest run that still has every
// kind of row: the FMA peak, the decode against the copy floor timed in alternation, and the
// PyTorch peer (a stand-in Python: its one row comes back as torch_copy on attn_decode). Each
// row names the CPU. (attn_prefill takes seconds a call and is left to `rotary bench` itself.)
TEST(CliBenchAttention, JsonRowsCarryTheirFloorPeakAndCpu) {
  const ScratchDir dir("rotary_bench_attention");
  const std::string python = write_fake_python(dir, "python", true);
  const Result r = run("bench --json --cases attn_decode --dtypes float32 --threads 1 --repetitions 1 --torch " + python);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string script = read_all(dir / "peer_script_path");
  ASSERT_FALSE(script.empty()) << "the attention peer did not run: " << r.err;
  EXPECT_THAT(script, HasSubstr("torch_attention_bench.py"));
  const json::Value rows = json::parse(r.out, "bench --json");
  std::map<std::string, int> cases;
  double peak = 0.0;
  for (const json::Value& row : rows.as_array()) {
    const std::string name = row.find("case")->as_string();
    ++cases[name];
    EXPECT_FALSE(row.find("cpu_model")->as_string().empty()) << name;
    EXPECT_TRUE(row.find("cpu_flags")->is_string()) << name;
    if (name == "fma_peak") {
      peak = row.find("gflop_per_s")->as_double();
      EXPECT_GT(peak, 0.1);
      EXPECT_EQ(row.find("ratio_to_peak")->as_double(), 1.0);
    }
    if (name == "attn_decode" || (name == "torch_copy" && row.find("workload")->as_string() == "attn_decode")) {
      SCOPED_TRACE(name);
      EXPECT_EQ(row.find("workload")->as_string(), "attn_decode");
      if (name == "attn_decode") EXPECT_EQ(row.find("layout")->as_string(), "bhsd");  // torch rows: the script's
      EXPECT_EQ(row.find("bytes")->as_int64(), 2 * 4096 * 8 * 128 * 4);                  // K + V read
      EXPECT_EQ(row.find("baseline")->as_string(), "copy");
      const double gb = row.find("gb_per_s")->as_double();
      EXPECT_NEAR(gb, 2.0 * 4096 * 8 * 128 * 4 / (row.find("median_ms")->as_double() * 1e-3) / 1e9, 1e-9 * gb);
      const double ratio = row.find("ratio_to_copy")->as_double();
      EXPECT_NEAR(ratio, gb / row.find("baseline_gb_per_s")->as_double(), 1e-9 * ratio);
      const double gflop = row.find("gflop_per_s")->as_double();
      EXPECT_NEAR(gflop, 4.0 * 32 * 128 * 4096 / (row.find("median_ms")->as_double() * 1e-3) / 1e9, 1e-9 * gflop);
      EXPECT_NEAR(row.find("ratio_to_peak")->as_double(), gflop / peak, 1e-9 * gflop / peak);
      if (name == "attn_decode") {  // the read stream over the same K and V, timed with it
        const double read = row.find("read_gb_per_s")->as_double();
        EXPECT_GT(read, 0.1);
        EXPECT_NEAR(row.find("ratio_to_read")->as_double(), gb / read, 1e-9 * gb / read);
      } else {
        EXPECT_TRUE(row.find("read_gb_per_s")->is_null());
      }
    }
    if (name == "copy" || name == "fma_peak") EXPECT_TRUE(row.find("ratio_to_read")->is_null()) << name;
  }
  EXPECT_EQ(cases["fma_peak"], 1);
  EXPECT_EQ(cases["attn_decode"], 1);  // out of place only: attention has no in-place form
  EXPECT_EQ(cases["copy"], 1);         // the floor it is compared with
  EXPECT_EQ(cases["attn_prefill"], 0);
  EXPECT_EQ(cases["torch_copy"], 1);   // the stand-in's row, read back through the attention peer
}

// --peers-dir first, then $ROTARY_PEERS_DIR; a directory named without the script is reported,
// not passed over for another one, and the run goes on without PyTorch rows.
TEST(CliBenchPeer, LooksWherePeersDirThenTheEnvironmentSay) {
  const ScratchDir dir("rotary_bench_peer_dirs");
  const std::string python = write_fake_python(dir, "python", true);
  std::filesystem::create_directories(dir.path / "peers");
  std::filesystem::create_directories(dir.path / "empty");
  std::filesystem::copy_file(ROTARY_SOURCE_PEER_SCRIPT, dir.path / "peers" / "torch_rope_bench.py");
  const std::string in_dir = "cd '" + dir.path.string() + "' && ";

  const Result from_env = run(std::string(kBenchPeerRun) + " --torch " + python,
                              in_dir + "ROTARY_PEERS_DIR='" + (dir / "peers") + "' ");
  ASSERT_EQ(from_env.exit_code, 0) << from_env.err;
  EXPECT_EQ(read_all(dir / "peer_script_path"), (dir / "peers") + "/torch_rope_bench.py\n");

  std::filesystem::remove(dir.path / "peer_script_path");
  const Result from_flag = run(std::string(kBenchPeerRun) + " --torch " + python + " --peers-dir " + (dir / "empty"),
                               in_dir + "ROTARY_PEERS_DIR='" + (dir / "peers") + "' ");
  ASSERT_EQ(from_flag.exit_code, 0) << from_flag.err;
  EXPECT_THAT(from_flag.err, HasSubstr("torch: torch_rope_bench.py not found in --peers-dir " + (dir / "empty") +
                                       " (PyTorch rows skipped)"));
  EXPECT_FALSE(std::filesystem::exists(dir.path / "peer_script_path"));
  EXPECT_TRUE(torch_cases(from_flag.out).empty());
}

// Without torch the command says so, leaves out the PyTorch rows and succeeds: a Python that
// cannot import torch given with --torch, or none found (here python3 on PATH is one that cannot).
TEST(CliBenchPeer, WithoutTorchSaysSoAndSkipsThePyTorchRows) {
  const ScratchDir dir("rotary_bench_peer_no_torch");
  const std::string python = write_fake_python(dir, "python", false);
  std::filesystem::create_directories(dir.path / "bin");
  write_fake_python(dir, "bin/python3", false);
  const std::string in_dir = "cd '" + dir.path.string() + "' && env -u ROTARY_PEERS_DIR ";

  const Result given = run(std::string(kBenchPeerRun) + " --torch " + python, in_dir);
  ASSERT_EQ(given.exit_code, 0) << given.err;
  EXPECT_THAT(given.err, HasSubstr("torch: " + python + " cannot import torch (PyTorch rows skipped)"));
  EXPECT_TRUE(torch_cases(given.out).empty());

  const Result found = run(kBenchPeerRun, in_dir + "PATH='" + (dir / "bin") + "':\"$PATH\" ");
  ASSERT_EQ(found.exit_code, 0) << found.err;
  EXPECT_THAT(found.err, HasSubstr("torch: not installed (PyTorch rows skipped)"));
  EXPECT_TRUE(torch_cases(found.out).empty());
}

// The same run as users get it, in a temporary directory without ROTARY_PEERS_DIR, with whatever
// python3 this machine has: PyTorch rows from the project's script if it imports torch, else the
// note that it does not. Either way the command succeeds.
TEST(CliBenchPeer, RunsWithThisMachinesPython) {
  const ScratchDir dir("rotary_bench_peer_machine");
  const Result r = run(kBenchPeerRun, "cd '" + dir.path.string() + "' && env -u ROTARY_PEERS_DIR ");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<std::string> cases = torch_cases(r.out);
  if (cases.empty()) {
    EXPECT_THAT(r.err, HasSubstr("(PyTorch rows skipped)"));
    EXPECT_THAT(r.err, Not(HasSubstr("not found")));
  } else {
    EXPECT_THAT(cases, ::testing::Contains("torch_copy"));
    EXPECT_THAT(cases, ::testing::Contains("torch_hf"));
  }
}

// The project's script with real torch (the project's .venv, if it has torch): the rows the
// command reads from its JSON, one per formulation the script runs on float32.
TEST(CliBenchPeer, ReadsEveryFormulationOfTheProjectsScript) {
  const std::string python = ROTARY_PROJECT_PYTHON;
  if (std::system(("'" + python + "' -c 'import torch' >/dev/null 2>&1").c_str()) != 0) {
    GTEST_SKIP() << python << " cannot import torch";
  }
  const ScratchDir dir("rotary_bench_peer_torch");
  const Result r = run(std::string(kBenchPeerRun) + " --torch-compile --torch " + python,
                       "cd '" + dir.path.string() + "' && env -u ROTARY_PEERS_DIR ");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> cases = torch_cases(r.out);
  std::sort(cases.begin(), cases.end());
  EXPECT_EQ(cases, (std::vector<std::string>{"torch_copy", "torch_hf", "torch_hf_apply", "torch_hf_compile",
                                             "torch_hf_noalloc", "torch_meta"}));
  EXPECT_THAT(r.err, HasSubstr("torch_hf_compile: Inductor compile time, not timed: decode float32 1 thr "));
  const json::Value rows = json::parse(r.out, "bench --json");
  for (const json::Value& row : rows.as_array()) {
    const std::string name = row.find("case")->as_string();
    if (name.rfind("torch_", 0) != 0) continue;
    EXPECT_EQ(row.find("bytes")->as_int64(), 64 * (40 + 8) * 128 * 4 * 2) << name;
    EXPECT_EQ(row.find("layout")->as_string(), name == "torch_copy" ? "-" : "bshd") << name;
    EXPECT_GT(row.find("median_ms")->as_double(), 0.0) << name;
    EXPECT_EQ(row.find("repetitions")->as_int64(), 1) << name;
    EXPECT_THAT(row.find("target")->as_string(), HasSubstr("torch:")) << name;
  }
  // Every row says which CPU it was measured on: figures from two machines are not comparable.
  for (const json::Value& row : rows.as_array()) {
    ASSERT_NE(row.find("cpu_model"), nullptr);
    ASSERT_NE(row.find("cpu_flags"), nullptr);
    EXPECT_TRUE(row.find("cpu_model")->is_string());
  }
}


// ---------------------------------------------------------------------------------------------
// Files the command writes: never two outputs on one file, never an input replaced, all or
// nothing, never a truncated file, and a message with the path and the system's reason.

void write_file(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

npy::Array int64_array(std::vector<int64_t> shape, const std::vector<int64_t>& values) {
  npy::Array a{npy::ElementType::Int64, std::move(shape), {}};
  a.bytes.resize(values.size() * sizeof(int64_t));
  std::memcpy(a.bytes.data(), values.data(), a.bytes.size());
  return a;
}

// The files apply tests start from: q (2, 3, 2, 128), k (2, 3, 1, 128), and "sentinel" files.
struct ApplyFiles {
  ScratchDir dir;
  std::string q, k;
  explicit ApplyFiles(const std::string& name) : dir(name), q(dir / "q.npy"), k(dir / "k.npy") {
    npy::write(q, random_array({2, 3, 2, 128}, 21));
    npy::write(k, random_array({2, 3, 1, 128}, 22));
  }
  std::string sentinel(const std::string& name) const {
    write_file(dir / name, "sentinel " + name);
    return dir / name;
  }
};

// Bug: `--out-q X --out-k X` wrote q, then k over it, and exited 0: q was lost.
TEST(CliFiles, ApplyRefusesOneFileForBothOutputs) {
  const ApplyFiles files("rotary_same_out");
  const std::string out = files.sentinel("x.npy");
  const std::string q_bytes = read_all(files.q);
  const std::string base = "apply --layout bshd --q " + files.q + " --k " + files.k;
  struct Case {
    std::string out_q, out_k, message;
  };
  const std::string via_dot = (files.dir.path / "." / "x.npy").string();
  std::filesystem::create_hard_link(out, files.dir / "hard.npy");
  const Case cases[] = {
      {out, out, "apply: --out-k must differ from --out-q (got " + out + " for both, the same file)"},
      {out, via_dot, "apply: --out-k must differ from --out-q (got " + out + " and " + via_dot + ", the same file)"},
      {out, files.dir / "hard.npy", "apply: --out-k must differ from --out-q"},
      // Neither exists yet: the paths are compared once resolved.
      {files.dir / "new.npy", (files.dir.path / "sub" / ".." / "new.npy").string(), "apply: --out-k must differ from --out-q"},
  };
  std::filesystem::create_directories(files.dir.path / "sub");
  for (const Case& c : cases) {
    const Result r = run(base + " --out-q " + c.out_q + " --out-k " + c.out_k);
    EXPECT_EQ(r.exit_code, 2) << c.out_k;
    EXPECT_THAT(r.err, HasSubstr(c.message));
  }
  EXPECT_EQ(read_all(out), "sentinel x.npy");
  EXPECT_FALSE(std::filesystem::exists(files.dir / "new.npy"));
  EXPECT_EQ(read_all(files.q), q_bytes);
}

// An output that is one of the inputs is refused too (safest: a mistyped --out-k k.npy would
// otherwise replace the data it was given); devices are never "the same file".
TEST(CliFiles, ApplyRefusesAnOutputThatIsAnInput) {
  const ApplyFiles files("rotary_out_is_in");
  const std::string k_bytes = read_all(files.k);
  const std::string offsets = files.dir / "off.npy";
  npy::write(offsets, int64_array({2}, {3, 9}));
  const std::string base = "apply --layout bshd --q " + files.q + " --k " + files.k + " --offsets " + offsets;
  const Result into_k = run(base + " --out-q " + (files.dir / "q1.npy") + " --out-k " + files.k);
  EXPECT_EQ(into_k.exit_code, 2);
  EXPECT_THAT(into_k.err, HasSubstr("apply: --out-k must not be the input --k: it would be replaced by the result (got " +
                                    files.k + " for both, the same file)"));
  const Result into_offsets = run(base + " --out-q " + offsets + " --out-k " + (files.dir / "k1.npy"));
  EXPECT_EQ(into_offsets.exit_code, 2);
  EXPECT_THAT(into_offsets.err, HasSubstr("apply: --out-q must not be the input --offsets"));
  EXPECT_EQ(read_all(files.k), k_bytes);
  EXPECT_EQ(files.dir.names(), (std::vector<std::string>{"k.npy", "off.npy", "q.npy"}));
  // Two outputs to /dev/null destroy nothing.
  const Result discarded = run(base + " --out-q /dev/null --out-k /dev/null");
  EXPECT_EQ(discarded.exit_code, 0) << discarded.err;
}

// Bug: a second output that failed left the first one written (and replaced what was there).
TEST(CliFiles, ApplyWritesNeitherOutputWhenTheSecondCannotBeWritten) {
  const ApplyFiles files("rotary_all_or_nothing");
  const std::string out_q = files.sentinel("out_q.npy");
  const std::string missing = files.dir / "no_such_dir/k.npy";
  const Result r = run("apply --layout bshd --q " + files.q + " --k " + files.k + " --out-q " + out_q + " --out-k " + missing);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("apply: cannot write --out-k " + missing + ": No such file or directory"));
  EXPECT_EQ(read_all(out_q), "sentinel out_q.npy");
  EXPECT_EQ(files.dir.names(), (std::vector<std::string>{"k.npy", "out_q.npy", "q.npy"}));  // no temporary file left
}

// A file size limit (ulimit -f, SIGXFSZ ignored: writes past it fail with EFBIG) between the
// size of out_q and that of out_k: out_k's write fails half way. Before, out_q was replaced and
// out_k left truncated; now both keep their old contents and no temporary file remains.
TEST(CliFiles, ApplyLeavesBothOutputsAsTheyWereWhenAWriteFailsHalfWay) {
  ScratchDir dir("rotary_half_write");
  npy::write(dir / "q.npy", random_array({1, 4, 1, 128}, 23));   // 2 KiB of data
  npy::write(dir / "k.npy", random_array({1, 4, 8, 128}, 24));   // 16 KiB (Llama 3's 8 kv heads)
  write_file(dir / "out_q.npy", "old q");
  write_file(dir / "out_k.npy", "old k");
  // dash counts ulimit -f in 512-byte blocks, bash in 1024: 4 or 8 KiB, either between the two.
  const Result r = run("apply --layout bshd --q " + (dir / "q.npy") + " --k " + (dir / "k.npy") + " --out-q " +
                           (dir / "out_q.npy") + " --out-k " + (dir / "out_k.npy"),
                       "trap '' XFSZ; ulimit -f 8; ");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("apply: cannot write --out-k " + (dir / "out_k.npy") + ": File too large"));
  EXPECT_EQ(read_all(dir / "out_q.npy"), "old q");
  EXPECT_EQ(read_all(dir / "out_k.npy"), "old k");
  EXPECT_EQ(dir.names(), (std::vector<std::string>{"k.npy", "out_k.npy", "out_q.npy", "q.npy"}));
}

// Bug: a report that could not be written said only "-o must name a writable file".
TEST(CliFiles, ReportNamesThePathAndTheSystemReason) {
  const Result r = run("report --preset llama-2-7b -o /nonexistent/x.html");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("rotary: error: report: cannot write /nonexistent/x.html: No such file or directory"));
  ScratchDir dir("rotary_report_dir");
  const Result directory = run("report --preset llama-2-7b -o " + dir.path.string());
  EXPECT_EQ(directory.exit_code, 2);
  EXPECT_THAT(directory.err, HasSubstr("report: cannot write " + dir.path.string() + ": Is a directory"));
}

// Bug: a report that failed half way (full disk) left a truncated HTML page in place of the old one.
TEST(CliFiles, ReportLeavesTheOldPageWhenTheWriteFailsHalfWay) {
  ScratchDir dir("rotary_report_half");
  const std::string page = dir / "page.html";
  write_file(page, "old page");
  const Result r = run("report --preset llama-2-7b -o " + page, "trap '' XFSZ; ulimit -f 8; ");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("report: cannot write " + page + ": File too large"));
  EXPECT_EQ(read_all(page), "old page");
  EXPECT_EQ(dir.names(), (std::vector<std::string>{"page.html"}));
  // Without the limit the page replaces the old one, keeping its permission bits.
  std::filesystem::permissions(page, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  const Result ok = run("report --preset llama-2-7b -o " + page);
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_THAT(read_all(page), HasSubstr("<html"));
  EXPECT_EQ(std::filesystem::status(page).permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  EXPECT_EQ(dir.names(), (std::vector<std::string>{"page.html"}));
  // -o through a symlink replaces the file it names; the link stays a link.
  std::filesystem::create_symlink(page, dir.path / "link.html");
  write_file(page, "old page");
  const Result via_link = run("report --preset llama-2-7b -o " + (dir / "link.html"));
  ASSERT_EQ(via_link.exit_code, 0) << via_link.err;
  EXPECT_TRUE(std::filesystem::is_symlink(dir.path / "link.html"));
  EXPECT_THAT(read_all(page), HasSubstr("<html"));
}

TEST(CliFiles, ReportRefusesToReplaceItsConfig) {
  ScratchDir dir("rotary_report_config");
  const std::string config = dir / "config.json";
  const std::string text = R"({"hidden_size": 2048, "num_attention_heads": 16, "rope_theta": 10000.0})";
  write_file(config, text);
  const Result r = run("report --config " + config + " -o " + config);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("report: -o must not be the input --config"));
  EXPECT_EQ(read_all(config), text);
}

// Bugs: `--out-q --reference` wrote a file named --reference; `--q --k k.npy` blamed k.npy. A
// flag's value is never another flag, in every command; negative numbers are still values.
TEST(CliFiles, AFlagIsNeverTheValueOfTheFlagBeforeIt) {
  const ApplyFiles files("rotary_flag_value");
  struct Case {
    std::string arguments, message;
  };
  const std::string q = files.q;
  const Case cases[] = {
      {"apply --q " + q + " --layout bshd --out-q --reference", "apply: --out-q needs a file path (got the flag --reference)"},
      {"apply --q --k " + files.k + " --layout bshd --out-q x.npy --out-k y.npy", "apply: --q needs a file path (got the flag --k)"},
      {"apply --q " + q + " --layout --out-q x.npy", "apply: --layout needs a value (got the flag --out-q)"},
      {"apply --q " + q + " --layout bshd --out-q x.npy --threads --reference", "apply: --threads needs a value (got the flag --reference)"},
      {"apply --config --q " + q, "apply: --config needs a config.json or a model folder (got the flag --q)"},
      {"freqs --layer-type --json", "freqs: --layer-type needs a value (got the flag --json)"},
      {"freqs --preset --json", "freqs: --preset needs a preset name (got the flag --json)"},
      {"explain --context --seq-len 5", "explain: --context needs a value (got the flag --seq-len)"},
      {"table --positions --json", "table: --positions needs a value (got the flag --json)"},
      {"check --layer-type --json", "check: --layer-type needs a value (got the flag --json)"},
      {"report -o --preset llama-2-7b", "report: -o needs a file path (got the flag --preset)"},
      {"report --compare -o x.html", "report: --compare needs a value (got the flag -o)"},
      {"bench --cases --json", "bench: --cases needs a value (got the flag --json)"},
      {"apply --q " + q + " --layout bshd --out-q=", "apply: --out-q needs a file path (got an empty value)"},
      {"report -o ''", "report: -o needs a file path (got an empty value)"},
  };
  const std::filesystem::path previous = std::filesystem::current_path();
  std::filesystem::current_path(files.dir.path);  // a file named after a flag would appear here
  for (const Case& c : cases) {
    const Result r = run(c.arguments);
    EXPECT_EQ(r.exit_code, 2) << c.arguments;
    EXPECT_THAT(r.err, HasSubstr("rotary: error: " + c.message)) << c.arguments;
  }
  std::filesystem::current_path(previous);
  EXPECT_EQ(files.dir.names(), (std::vector<std::string>{"k.npy", "q.npy"}));
  EXPECT_EQ(run("table --positions -4").err.find("needs"), std::string::npos);
  // A value that starts with "--" is still possible, spelled --flag=VALUE.
  const Result explicit_value = run("apply --q=--odd.npy --layout bshd --out-q " + (files.dir / "x.npy"));
  EXPECT_THAT(explicit_value.err, HasSubstr("--odd.npy: cannot read file: No such file or directory"));
}

// /dev/zero as --q: read until memory ran out before; now the first 8 bytes are enough.
TEST(CliFiles, ApplyRefusesDevZeroAtTheMagicString) {
  const Result r = run("apply --q /dev/zero --layout bshd --out-q /dev/null", "timeout 60 ");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("npy /dev/zero: file must start with the magic string '\\x93NUMPY' (got "
                               "'\\x00\\x00\\x00\\x00\\x00\\x00'): not a .npy file (bad magic)"));
}

// Bug: positions were checked by count only, so a (seq, batch) array passed for (batch, seq)
// and M-RoPE's (tokens, 3) for (3, tokens): silently wrong positions. Now the shape must be one
// of the layout's; (1, seq) and (seq,) share positions across the batch.
TEST(CliFiles, ApplyChecksTheShapeOfPositionArrays) {
  const ApplyFiles files("rotary_position_shapes");
  auto save = [&](const std::string& name, std::vector<int64_t> shape, std::vector<int64_t> values) {
    npy::write(files.dir / name, int64_array(std::move(shape), values));
    return files.dir / name;
  };
  const std::string q = files.q;  // (2, 3, 2, 128): batch 2, seq 3
  const std::string per_sequence = save("bs.npy", {2, 3}, {5, 6, 7, 5, 6, 7});
  const std::string transposed = save("sb.npy", {3, 2}, {5, 5, 6, 6, 7, 7});
  const std::string flat = save("flat.npy", {6}, {5, 6, 7, 5, 6, 7});
  const std::string shared_1s = save("1s.npy", {1, 3}, {5, 6, 7});
  const std::string shared_s = save("s.npy", {3}, {5, 6, 7});
  const std::string base = "apply --layout bshd --q " + q + " --positions ";

  // Accepted: (batch, seq), and the shared forms, which give the same bytes.
  ASSERT_EQ(run(base + per_sequence + " --out-q " + (files.dir / "o_bs.npy")).exit_code, 0);
  ASSERT_EQ(run(base + shared_1s + " --out-q " + (files.dir / "o_1s.npy")).exit_code, 0);
  ASSERT_EQ(run(base + shared_s + " --out-q " + (files.dir / "o_s.npy")).exit_code, 0);
  EXPECT_EQ(read_all(files.dir / "o_1s.npy"), read_all(files.dir / "o_bs.npy"));
  EXPECT_EQ(read_all(files.dir / "o_s.npy"), read_all(files.dir / "o_bs.npy"));

  const std::string mrope_good = save("m.npy", {3, 2, 3}, std::vector<int64_t>(18, 4));
  const std::string mrope_tokens_first = save("mt.npy", {6, 3}, std::vector<int64_t>(18, 4));
  const std::string mrope_2d = save("m2.npy", {3, 6}, std::vector<int64_t>(18, 4));
  npy::write(files.dir / "qt.npy", random_array({6, 2, 128}, 25));
  const std::string cu = save("cu.npy", {3}, {0, 2, 6});
  const std::string cu_2d = save("cu2.npy", {1, 3}, {0, 2, 6});
  const std::string offsets_2d = save("off2.npy", {2, 1}, {0, 4});
  const std::string offsets_3 = save("off3.npy", {3}, {0, 4, 8});
  const std::string out = " --out-q " + (files.dir / "bad.npy");
  struct Case {
    std::string arguments, message;
  };
  const Case cases[] = {
      {base + transposed + out,
       "apply: --positions must have shape (2, 3) = (batch, seq) for q of shape (2, 3, 2, 128) (layout bshd), or (1, 3) "
       "or (3,) for the same positions in every sequence (got shape (3, 2))"},
      {base + flat + out, "apply: --positions must have shape (2, 3) = (batch, seq)"},
      {"apply --preset qwen2-vl-7b --layout bshd --q " + q + " --positions " + mrope_tokens_first + out,
       "apply: --positions must have shape (3, 2, 3) = (streams, batch, seq) for q of shape (2, 3, 2, 128) (layout bshd, "
       "3 position streams), or (3, 1, 3) or (3, 3) for the same positions in every sequence (got shape (6, 3))"},
      {"apply --preset qwen2-vl-7b --layout bshd --q " + q + " --positions " + mrope_2d + out,
       "apply: --positions must have shape (3, 2, 3) = (streams, batch, seq)"},
      {"apply --layout thd --q " + (files.dir / "qt.npy") + " --cu-seqlens " + cu + " --positions " + per_sequence + out,
       "apply: --positions must have shape (6,) = (tokens,) for q of shape (6, 2, 128) (layout thd) (got shape (2, 3))"},
      {"apply --layout thd --q " + (files.dir / "qt.npy") + " --cu-seqlens " + cu_2d + out,
       "apply: --cu-seqlens must have shape (sequences + 1,): one dimension, at least 2 entries (got shape (1, 3))"},
      {"apply --layout bshd --q " + q + " --offsets " + offsets_2d + out,
       "apply: --offsets must have shape (2,) = (batch,), one per sequence (got shape (2, 1))"},
      {"apply --layout thd --q " + (files.dir / "qt.npy") + " --cu-seqlens " + cu + " --offsets " + offsets_3 + out,
       "apply: --offsets must have shape (2,) = (sequences,), one per --cu-seqlens segment (got shape (3,))"},
  };
  for (const Case& c : cases) {
    const Result r = run(c.arguments);
    EXPECT_EQ(r.exit_code, 2) << c.arguments;
    EXPECT_THAT(r.err, HasSubstr("rotary: error: " + c.message)) << c.arguments;
  }
  EXPECT_FALSE(std::filesystem::exists(files.dir / "bad.npy"));
  // M-RoPE (3, batch, seq) and its shared (3, seq) form agree.
  ASSERT_EQ(run("apply --preset qwen2-vl-7b --layout bshd --q " + q + " --positions " + mrope_good + " --out-q " +
                (files.dir / "o_m.npy")).exit_code, 0);
  const std::string mrope_shared = save("m_s.npy", {3, 3}, std::vector<int64_t>(9, 4));
  ASSERT_EQ(run("apply --preset qwen2-vl-7b --layout bshd --q " + q + " --positions " + mrope_shared + " --out-q " +
                (files.dir / "o_ms.npy")).exit_code, 0);
  EXPECT_EQ(read_all(files.dir / "o_ms.npy"), read_all(files.dir / "o_m.npy"));
}

// ---- export: vLLM's row count, stdout and --json ----

TEST(CliExport, VllmYarnCacheHasOriginalTimesFactorRowsAsVllmBuildsIt) {
  // Qwen2.5 YaRN: max_position_embeddings 32768, original 32768, x4. vLLM's
  // YaRNScalingRotaryEmbedding builds ceil(32768 x 4) rows; the export used to write 32768.
  test::ScratchDir dir("rotary_cli_export_rows");
  const Result r = run("export --format vllm --preset qwen2.5-7b-yarn --dtype bfloat16 -o " + dir / "c.npy");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const npy::Array array = npy::read(dir / "c.npy");
  EXPECT_EQ(array.shape, (std::vector<int64_t>{131072, 128}));
  EXPECT_THAT(r.err, HasSubstr("cos_sin_cache (131072, 128) bfloat16"));
  // Linear: max_position_embeddings x factor (vLLM reads it as the unscaled length).
  const Result gemma = run("export --format vllm --preset gemma-3-27b --layer-type full_attention --dtype bfloat16 --json");
  ASSERT_EQ(gemma.exit_code, 0) << gemma.err;
  EXPECT_EQ(json::parse(gemma.out, "export --json").find("rows")->as_int64(), 1048576);
  // The other formats keep max_position_embeddings.
  const Result fi = run("export --format flashinfer --preset qwen2.5-7b-yarn --json");
  ASSERT_EQ(fi.exit_code, 0) << fi.err;
  EXPECT_EQ(json::parse(fi.out, "export --json").find("rows")->as_int64(), 32768);
}

TEST(CliExport, DashOWritesTheNpyToStdoutAndNoFileNamedDash) {
  test::ScratchDir dir("rotary_cli_export_stdout");
  const std::string flags = "export --format flash-attn --preset llama-2-7b --dtype float16 --max-position 5";
  const Result to_stdout = run(flags + " -o -", "cd " + dir.path.string() + " && ");
  ASSERT_EQ(to_stdout.exit_code, 0) << to_stdout.err;
  EXPECT_EQ(dir.names(), std::vector<std::string>{});  // not a file called "-"
  EXPECT_THAT(to_stdout.err, HasSubstr("rotary: wrote stdout: cos_sin"));
  const Result to_file = run(flags + " -o " + dir / "f.npy");
  ASSERT_EQ(to_file.exit_code, 0) << to_file.err;
  EXPECT_EQ(to_stdout.out, read_all(dir / "f.npy"));  // the same bytes, binary intact
  const npy::Array array =
      npy::parse(std::vector<unsigned char>(to_stdout.out.begin(), to_stdout.out.end()), "stdout");
  EXPECT_EQ(array.shape, (std::vector<int64_t>{2, 5, 64}));
  EXPECT_EQ(array.type, npy::ElementType::Float16);
}

TEST(CliExport, JsonSummarizesWhatWasOrWouldBeWritten) {
  test::ScratchDir dir("rotary_cli_export_json");
  const std::string flags = "export --format vllm --preset phi-3-mini-128k --dtype float32 --json";
  const Result written = run(flags + " -o " + dir / "c.npy");
  ASSERT_EQ(written.exit_code, 0) << written.err;
  const json::Value doc = json::parse(written.out, "export --json");
  EXPECT_EQ(doc.find("format")->as_string(), "vllm");
  // Phi-3's LongRoPE in vLLM: the short factors' 4096 rows, then the long factors' 131072.
  EXPECT_EQ(doc.find("tensor_name")->as_string(), "long_short_cos_sin_cache");
  EXPECT_EQ(doc.find("rows")->as_int64(), 4096 + 131072);
  EXPECT_EQ(doc.find("shape")->as_array()[1].as_int64(), 96);
  EXPECT_EQ(doc.find("dtype")->as_string(), "float32");
  EXPECT_EQ(doc.find("path")->as_string(), dir / "c.npy");
  EXPECT_EQ(doc.find("bytes")->as_int64(), static_cast<int64_t>(std::filesystem::file_size(dir / "c.npy")));
  EXPECT_EQ(doc.find("name")->as_string(), "phi-3-mini-128k");
  EXPECT_TRUE(doc.find("layer_type")->is_null());
  // Without -o: the same summary, path null, nothing written.
  const Result dry = run(flags, "cd " + dir.path.string() + " && ");
  ASSERT_EQ(dry.exit_code, 0) << dry.err;
  const json::Value would = json::parse(dry.out, "export --json");
  EXPECT_TRUE(would.find("path")->is_null());
  EXPECT_EQ(would.find("bytes")->as_int64(), doc.find("bytes")->as_int64());
  EXPECT_EQ(dir.names(), std::vector<std::string>{"c.npy"});
  // --json and -o - would share stdout.
  const Result both = run(flags + " -o -");
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_THAT(both.err, HasSubstr("export: --json prints to stdout, which -o - holds for the .npy"));
  EXPECT_TRUE(both.out.empty());
  const Result neither = run("export --format vllm --preset llama-2-7b --dtype float32");
  EXPECT_EQ(neither.exit_code, 2);
  EXPECT_THAT(neither.err, HasSubstr("export: -o FILE.npy is required (- for stdout"));
}

// ---- layer types: every command says which one it used, and never picks one silently ----

TEST(CliLayerTypes, OneTableCommandsRefuseWithoutLayerTypeNamingTheChoices) {
  for (const std::string& command :
       {std::string("table --positions 0:2"), std::string("export --format flashinfer -o -"),
        std::string("attention --tokens 8")}) {
    SCOPED_TRACE(command);
    const Result r = run(command + " --preset gemma-3-27b");
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_THAT(r.err, HasSubstr("gives each layer type its own RoPE: choose one with --layer-type full_attention "
                                 "or sliding_attention (got none)"));
    EXPECT_TRUE(r.out.empty());
  }
  // With it, the output says which.
  const Result table = run("table --preset gemma-3-27b --positions 1 --layer-type sliding_attention --json");
  ASSERT_EQ(table.exit_code, 0) << table.err;
  const json::Value doc = json::parse(table.out, "table --json");
  EXPECT_EQ(doc.find("layer_type")->as_string(), "sliding_attention");
  // theta 10000 (rope_local_base_freq): pair 1's angle at position 1 is 10000^(-1/64).
  EXPECT_FLOAT_EQ(static_cast<float>(doc.find("sin")->as_array()[0].as_array()[1].as_double()),
                  static_cast<float>(std::sin(std::pow(10000.0, -1.0 / 64))));
  const Result text = run("table --preset gemma-3-27b --positions 1 --layer-type full_attention");
  EXPECT_THAT(text.out, HasSubstr("(layer type full_attention): exact table"));
  EXPECT_TRUE(json::parse(run("table --preset llama-3.1-8b --positions 1 --json").out, "t").find("layer_type")->is_null());
}

TEST(CliLayerTypes, FreqsAndCheckReportEveryLayerType) {
  const Result freqs = run("freqs --preset gemma-3-27b --json");
  ASSERT_EQ(freqs.exit_code, 0) << freqs.err;
  const json::Value freqs_doc = json::parse(freqs.out, "freqs --json");
  const auto& types = freqs_doc.find("layer_types")->as_array();
  ASSERT_EQ(types.size(), 2u);
  EXPECT_EQ(types[0].find("layer_type")->as_string(), "full_attention");
  EXPECT_EQ(types[0].find("theta_base")->as_double(), 1e6);
  EXPECT_EQ(types[0].find("rope_type")->as_string(), "linear");
  EXPECT_EQ(types[1].find("layer_type")->as_string(), "sliding_attention");
  EXPECT_EQ(types[1].find("theta_base")->as_double(), 1e4);
  const Result freqs_text = run("freqs --preset gemma-3-27b");
  EXPECT_THAT(freqs_text.out, HasSubstr("Layer type full_attention\n"));
  EXPECT_THAT(freqs_text.out, HasSubstr("Layer type sliding_attention\n"));
  const Result one = run("freqs --preset gemma-3-27b --layer-type sliding_attention --json");
  EXPECT_EQ(json::parse(one.out, "freqs --json").find("layer_type")->as_string(), "sliding_attention");

  const Result check = run("check --preset gemma-3-27b");
  ASSERT_EQ(check.exit_code, 0) << check.out << check.err;
  EXPECT_THAT(check.out, HasSubstr("layer type full_attention: linear"));
  EXPECT_THAT(check.out, HasSubstr("layer type sliding_attention: default"));
  const Result check_json = run("check --preset gemma-3-27b --json");
  ASSERT_EQ(check_json.exit_code, 0) << check_json.err;
  const json::Value checked = json::parse(check_json.out, "check --json");
  EXPECT_TRUE(checked.find("passed")->as_bool());
  ASSERT_EQ(checked.find("layer_types")->as_array().size(), 2u);
}

TEST(CliLayerTypes, CheckTrainedContextAgreesWithExplain) {
  // Gemma 3's global layers: linear x8 over max_position_embeddings 131072, trained on 16384.
  const Result check = run("check --preset gemma-3-27b --layer-type full_attention --json");
  ASSERT_EQ(check.exit_code, 0) << check.err;
  const Result explain = run("explain --preset gemma-3-27b --layer-type full_attention --json");
  ASSERT_EQ(explain.exit_code, 0) << explain.err;
  const json::Value c = json::parse(check.out, "check --json");
  const json::Value e = json::parse(explain.out, "explain --json").find("layer_types")->as_array()[0];
  EXPECT_EQ(c.find("trained_context")->as_int64(), 16384);
  EXPECT_EQ(c.find("trained_context")->as_int64(), e.find("trained_context")->as_int64());
  EXPECT_EQ(c.find("layer_type")->as_string(), "full_attention");
  EXPECT_THAT(run("check --preset gemma-3-27b --layer-type full_attention").out, HasSubstr("trained 16384\n"));
}

// --precision vllm serves the rows vLLM builds (Gemma 3's global layers, linear x8: 8 x 131072)
// and refuses a position past them naming the length, before printing anything.
TEST(CliLayerTypes, TableVllmServesTheRowsVllmBuilds) {
  const std::string base = "table --preset gemma-3-27b --layer-type full_attention --precision vllm --positions ";
  const Result last = run(base + "1048575");
  ASSERT_EQ(last.exit_code, 0) << last.err;
  EXPECT_THAT(last.out, HasSubstr("\ncos[1048575] "));
  const Result past = run(base + "7,1048576");
  EXPECT_EQ(past.exit_code, 2);
  EXPECT_THAT(past.err, HasSubstr("position must be < the fixed table length 1048576 (got 1048576): vLLM's cache has "
                                  "no row for it"));
  EXPECT_TRUE(past.out.empty());
}

// apply writes one rotation: a per-layer-type config needs --layer-type, and the rotation is that
// layer type's (Gemma 3's local layers: theta 10000, no scaling).
TEST(CliLayerTypes, ApplyRotatesWithTheNamedLayerTypeOnly) {
  const ScratchDir dir("rotary_apply_layer_types");
  npy::Array q = random_array({1, 3, 2, 128}, 5);
  npy::write(dir / "q.npy", q);
  const std::string base = "apply --preset gemma-3-27b --layout bshd --q " + (dir / "q.npy") + " --out-q ";
  const Result none = run(base + (dir / "none.npy"));
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_THAT(none.err, HasSubstr("apply: preset gemma-3-27b gives each layer type its own RoPE: choose one with "
                                  "--layer-type full_attention or sliding_attention (got none)"));
  EXPECT_FALSE(std::filesystem::exists(dir / "none.npy"));
  const Result local = run(base + (dir / "local.npy") + " --layer-type sliding_attention --json");
  ASSERT_EQ(local.exit_code, 0) << local.err;
  const json::Value doc = json::parse(local.out, "apply --json");
  EXPECT_EQ(doc.find("layer_type")->as_string(), "sliding_attention");
  EXPECT_EQ(doc.find("model")->as_string(), "gemma-3-27b/sliding_attention");
  const HfRopeConfig gemma = preset("gemma-3-27b");
  const RopeSpec& sliding = gemma.layer_type_specs[1].second;
  ASSERT_EQ(gemma.layer_type_specs[1].first, "sliding_attention");
  const CosSinTable table(sliding, {.storage = Storage::OnTheFly});
  std::vector<float> q_in = floats(q), q_ref(q_in.size());
  rotary::apply(contiguous_view(q_in.data(), DType::F32, Layout::BSHD, {1, 3, 2, 128}), TensorView{},
                contiguous_view(q_ref.data(), DType::F32, Layout::BSHD, {1, 3, 2, 128}), TensorView{},
                Positions::arange(), table);
  EXPECT_EQ(floats(npy::read(dir / "local.npy")), q_ref);
  const Result global = run(base + (dir / "global.npy") + " --layer-type full_attention");
  ASSERT_EQ(global.exit_code, 0) << global.err;
  EXPECT_THAT(global.err, HasSubstr("gemma-3-27b/full_attention, layer type full_attention, SIMD"));
  EXPECT_NE(floats(npy::read(dir / "global.npy")), q_ref);  // theta 1e6 and linear x8 there
}

TEST(CliLayerTypes, AttentionPairsEachLayerTypesRopeWithItsOwnWindow) {
  const std::string flags = "attention --preset gemma-3-27b --tokens 16 --heads 2 --kv-heads 1 --json";
  const Result local = run(flags + " --layer-type sliding_attention");
  ASSERT_EQ(local.exit_code, 0) << local.err;
  const json::Value l = json::parse(local.out, "attention --json");
  EXPECT_EQ(l.find("layer_type")->as_string(), "sliding_attention");
  EXPECT_EQ(l.find("model")->as_string(), "gemma-3-27b/sliding_attention");
  EXPECT_EQ(l.find("window")->as_int64(), 1024);
  const Result global = run(flags + " --layer-type full_attention");
  ASSERT_EQ(global.exit_code, 0) << global.err;
  const json::Value g = json::parse(global.out, "attention --json");
  EXPECT_EQ(g.find("model")->as_string(), "gemma-3-27b/full_attention");
  EXPECT_EQ(g.find("window")->as_int64(), 0);  // full-attention layers have no window
  // --window still overrides; a config without layer types keeps its window (Mistral: every layer).
  EXPECT_EQ(json::parse(run(flags + " --layer-type full_attention --window 8").out, "a").find("window")->as_int64(), 8);
  const Result mistral = run("attention --preset mistral-7b-v0.1 --tokens 8 --heads 2 --kv-heads 1 --json");
  EXPECT_EQ(json::parse(mistral.out, "a").find("window")->as_int64(), 4096);
  // A config whose layer_types differ in window only (one RoPE, as gpt-oss) must name one too.
  test::ScratchDir dir("rotary_cli_layer_windows");
  const std::string config = dir / "config.json";
  std::ofstream(config) << R"({"head_dim": 16, "num_attention_heads": 2, "num_key_value_heads": 1,
      "max_position_embeddings": 64, "sliding_window": 4,
      "layer_types": ["sliding_attention", "full_attention"]})";
  const Result refused = run("attention --config " + config + " --tokens 8");
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_THAT(refused.err, HasSubstr("choose one with --layer-type sliding_attention or full_attention (got none)"));
  const Result sliding = run("attention --config " + config + " --tokens 8 --layer-type sliding_attention --json");
  ASSERT_EQ(sliding.exit_code, 0) << sliding.err;
  EXPECT_EQ(json::parse(sliding.out, "a").find("window")->as_int64(), 4);
}

TEST(CliLayerTypes, ReportDrawsEveryLayerType) {
  test::ScratchDir dir("rotary_cli_layer_report");
  const Result r = run("report --preset gemma-3-27b --json -o " + dir / "g.html");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json::Value doc = json::parse(r.out, "report --json");
  const auto& models = doc.find("models")->as_array();
  ASSERT_EQ(models.size(), 2u);
  EXPECT_EQ(models[0].find("source")->as_string(), "preset gemma-3-27b, layer type full_attention");
  EXPECT_EQ(models[1].find("source")->as_string(), "preset gemma-3-27b, layer type sliding_attention");
  const Result one = run("report --preset gemma-3-27b --layer-type sliding_attention --json -o " + dir / "s.html");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  EXPECT_EQ(json::parse(one.out, "report --json").find("models")->as_array().size(), 1u);
}

// ---- preset names, suggestions and the CLI's own wording ------------------------------------

// A repository id gives the config that repository ships: Qwen2.5-7B-Instruct has no rope_scaling;
// the YaRN of its model card is the preset qwen2.5-7b-yarn, reached by that name only. Each
// command says which preset it resolved to.
TEST(CliPresetNames, ARepositoryIdGivesTheConfigItShipsAndTheCommandsSayWhichPreset) {
  const Result freqs = run("freqs --preset Qwen/Qwen2.5-7B-Instruct --json");
  ASSERT_EQ(freqs.exit_code, 0) << freqs.err;
  const json::Value doc = json::parse(freqs.out, "freqs");
  EXPECT_EQ(doc.find("name")->as_string(), "qwen2.5-7b-instruct");
  EXPECT_EQ(doc.find("source")->as_string(), "preset qwen2.5-7b-instruct");
  EXPECT_EQ(doc.find("rope_type")->as_string(), "default");
  EXPECT_EQ(doc.find("attention_scaling")->as_double(), 1.0);
  const Result text = run("freqs --preset qwen/qwen2.5-7b-instruct");
  EXPECT_THAT(text.out, testing::StartsWith("qwen2.5-7b-instruct: default, theta 1000000"));
  const Result table = run("table --preset Qwen/Qwen2.5-7B-Instruct --positions 0 --json");
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_EQ(json::parse(table.out, "table").find("source")->as_string(), "preset qwen2.5-7b-instruct");
  const Result explain = run("explain --preset Qwen/Qwen2.5-7B-Instruct");
  EXPECT_THAT(explain.out, testing::StartsWith("RoPE of qwen2.5-7b-instruct (preset qwen2.5-7b-instruct)"));
  const Result yarn = run("freqs --preset qwen2.5-7b-yarn --json");
  ASSERT_EQ(yarn.exit_code, 0) << yarn.err;
  EXPECT_EQ(json::parse(yarn.out, "yarn").find("rope_type")->as_string(), "yarn");
  // `rotary presets --json`: the changed preset claims no repository.
  const json::Value list = json::parse(run("presets --json").out, "presets");
  for (const json::Value& p : list.as_array()) {
    const std::string name = p.find("name")->as_string();
    if (name == "qwen2.5-7b-yarn") EXPECT_TRUE(p.find("repo")->is_null());
    if (name == "qwen2.5-7b-instruct") EXPECT_EQ(p.find("repo")->as_string(), "Qwen/Qwen2.5-7B-Instruct");
  }
}

TEST(CliPresetNames, DidYouMeanKeepsToTheFamilyAndVersion) {
  const std::string prefix = "rotary: error: freqs: --preset must be a built-in preset, see rotary presets (got \"";
  const std::pair<const char*, const char*> cases[] = {
      {"llama-3-8b", "llama-3-8b\"); did you mean one of llama-3.1-8b, llama-3.2-1b, llama-3.2-3b?\n"},
      {"mistral-7b", "mistral-7b\"); did you mean mistral-7b-v0.1?\n"},
      {"gemma3", "gemma3\"); did you mean one of gemma-3-1b, gemma-3-27b?\n"},
      {"qwen3", "qwen3\"); did you mean one of qwen3-8b, qwen3-vl-8b?\n"},
  };
  for (const auto& [name, tail] : cases) {
    const Result r = run(std::string("freqs --preset ") + name);
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_EQ(r.err, prefix + tail);
  }
  const Result compare = run("report --compare llama-3-8b,gpt-j-6b -o -");
  EXPECT_THAT(compare.err, HasSubstr("(got \"llama-3-8b\", neither a preset nor a path); did you mean one of "
                                     "llama-3.1-8b, llama-3.2-1b, llama-3.2-3b?"));
  // NoPE is spelt none; by edit distance "nope" is nearer "rope".
  const Result nope = run("attention --tokens 8 --encoding nope");
  EXPECT_EQ(nope.exit_code, 2);
  EXPECT_THAT(nope.err, HasSubstr("(got \"nope\"); did you mean none?"));
}

TEST(CliFiles, ApplyReadsInt32PositionsAndNamesTheMissingCuSeqlens) {
  const ApplyFiles files("rotary_int32_positions");
  // The positions (2, 3) as np.int32 saves them: '<i4'.
  const std::string header = "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }\n";
  std::string file = "\x93NUMPY\x01";
  file += '\0';
  file += static_cast<char>(header.size());
  file += '\0';
  file += header;
  for (int32_t p : {5, 6, 7, 5, 6, 7}) file.append(reinterpret_cast<const char*>(&p), sizeof(p));
  write_file(files.dir / "p32.npy", file);
  npy::write(files.dir / "p64.npy", int64_array({2, 3}, {5, 6, 7, 5, 6, 7}));
  const std::string base = "apply --layout bshd --q " + files.q + " --positions ";
  const Result r32 = run(base + (files.dir / "p32.npy") + " --out-q " + (files.dir / "o32.npy"));
  ASSERT_EQ(r32.exit_code, 0) << r32.err;
  ASSERT_EQ(run(base + (files.dir / "p64.npy") + " --out-q " + (files.dir / "o64.npy")).exit_code, 0);
  EXPECT_EQ(read_all(files.dir / "o32.npy"), read_all(files.dir / "o64.npy"));

  npy::write(files.dir / "qt.npy", random_array({6, 2, 128}, 25));
  const Result thd = run("apply --layout thd --q " + (files.dir / "qt.npy") + " --out-q " + (files.dir / "ot.npy"));
  EXPECT_EQ(thd.exit_code, 2);
  EXPECT_EQ(thd.err,
            "rotary: error: apply: --cu-seqlens is required with --layout thd (an integer .npy of the sequences' token "
            "offsets, 0, len0, len0 + len1, ..., tokens)\n");
  EXPECT_FALSE(std::filesystem::exists(files.dir / "ot.npy"));
}

}  // namespace
}  // namespace rotary
