// tests/interop/convert_cli_test.cpp: `rotary convert-weights` run as a user runs it, on real files:
// the round trip through the command is byte-identical, --dry-run writes nothing, every refusal
// exits 2 naming the value.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "cli_runner.hpp"
#include "interop/safetensors.hpp"

namespace rotary {
namespace {

using ::testing::HasSubstr;
using test::run_cli;
namespace fs = std::filesystem;

class ConvertCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("rotary_convert_cli_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    std::mt19937 rng(4);
    std::uniform_int_distribution<int> byte(0, 255);
    auto random_bytes = [&](size_t n) {
      std::string s(n, '\0');
      for (char& c : s) c = static_cast<char>(byte(rng) & 0x3F);  // finite BF16/F32 bit patterns
      return s;
    };
    // 4 heads, 2 kv heads, head_dim 8 (hidden 32), BF16 as most checkpoints ship.
    original_ = safetensors::serialize(
        {{"model.embed_tokens.weight", "BF16", {10, 32}, random_bytes(640)},
         {"model.layers.0.self_attn.q_proj.weight", "BF16", {32, 32}, random_bytes(2048)},
         {"model.layers.0.self_attn.k_proj.weight", "BF16", {16, 32}, random_bytes(1024)},
         {"model.layers.0.self_attn.v_proj.weight", "BF16", {16, 32}, random_bytes(1024)}},
        {{"format", "pt"}});
    std::ofstream(path("in.safetensors"), std::ios::binary) << original_;
    std::ofstream(path("config.json"))
        << R"({"model_type":"llama","hidden_size":32,"num_attention_heads":4,"num_key_value_heads":2,"rope_theta":10000.0})";
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
  std::string original_;
};

TEST_F(ConvertCli, RoundTripThroughTheCommandIsByteIdentical) {
  const test::CliResult there = run_cli("convert-weights --config " + path("config.json") + " --to interleaved " +
                                        path("in.safetensors") + " " + path("mid.safetensors"));
  ASSERT_EQ(there.exit_code, 0) << there.err;
  EXPECT_THAT(there.out, HasSubstr("pairing: half-split -> interleaved"));
  EXPECT_THAT(there.out, HasSubstr("4 heads, 2 kv heads, head_dim 8, rotary rows [0, 8) of each head"));
  EXPECT_THAT(there.out, HasSubstr("model.layers.0.self_attn.q_proj.weight"));
  EXPECT_THAT(there.out, HasSubstr("2 heads, rows [0, 8) of 8"));
  EXPECT_THAT(there.out, HasSubstr("copied unchanged: 2 tensors"));
  EXPECT_EQ(there.err, "");
  const std::string mid = test::read_all(path("mid.safetensors"));
  EXPECT_NE(mid, original_);
  EXPECT_EQ(mid.size(), original_.size());
  // --config takes the model folder too.
  const test::CliResult back = run_cli("convert-weights --config " + dir_.string() + " --to=half-split " +
                                       path("mid.safetensors") + " " + path("back.safetensors"));
  ASSERT_EQ(back.exit_code, 0) << back.err;
  EXPECT_EQ(test::read_all(path("back.safetensors")), original_);
}

TEST_F(ConvertCli, DryRunWritesNothing) {
  const test::CliResult dry = run_cli("convert-weights --config " + path("config.json") + " --to interleaved --dry-run " +
                                      path("in.safetensors") + " " + path("out.safetensors"));
  ASSERT_EQ(dry.exit_code, 0) << dry.err;
  EXPECT_THAT(dry.out, HasSubstr("would permute 2 tensors"));
  EXPECT_THAT(dry.out, HasSubstr("dry run: nothing written"));
  EXPECT_FALSE(fs::exists(path("out.safetensors")));
}

TEST_F(ConvertCli, NothingMatchedIsSaidOnStderr) {
  const test::CliResult none = run_cli("convert-weights --config " + path("config.json") +
                                       " --to interleaved --q-module attn.wq --k-module attn.wk " +
                                       path("in.safetensors") + " " + path("out.safetensors"));
  ASSERT_EQ(none.exit_code, 0) << none.err;
  EXPECT_THAT(none.err, HasSubstr("rotary: warning: no tensor matched the q or k modules"));
  EXPECT_EQ(test::read_all(path("out.safetensors")), original_);
}

TEST_F(ConvertCli, RefusalsExit2NamingTheValue) {
  const std::string config = " --config " + path("config.json");
  const std::string in = " " + path("in.safetensors");
  const std::string out = " " + path("out.safetensors");
  struct Refusal {
    std::string arguments;
    std::string message;
  };
  std::ofstream(path("wrong.json")) << R"({"hidden_size":32,"num_attention_heads":2,"num_key_value_heads":2})";
  std::ofstream(path("truncated.safetensors"), std::ios::binary) << original_.substr(0, 100);
  const std::vector<Refusal> refusals = {
      {"convert-weights" + config + " --to interleavd" + in + out,
       "--to must be interleaved (or gptj) or half-split (or neox) (got \"interleavd\"); did you mean interleaved?"},
      {"convert-weights" + config + " --to sideways" + in + out,
       "--to must be interleaved (or gptj) or half-split (or neox) (got \"sideways\")"},
      {"convert-weights" + config + in + out, "--to is required"},
      {"convert-weights --to interleaved" + in + out, "--config is required"},
      {"convert-weights" + config + " --to interleaved" + in, "IN and OUT are required (a .safetensors file and the output file, or a model folder and a new folder) (got IN only)"},
      {"convert-weights" + config + " --to interleaved" + in + in, "is the input"},
      {"convert-weights --config " + path("wrong.json") + " --to interleaved" + in + out,
       "tensor \"model.layers.0.self_attn.k_proj.weight\" (k) has 16 rows (shape [16, 32]), but the config"},
      {"convert-weights" + config + " --to interleaved " + path("truncated.safetensors") + out, "truncated.safetensors: header"},
      {"convert-weights" + config + " --to interleaved --q-module a,,b" + in + out, "--q-module must be module paths"},
      {"convert-weights" + config + " --to interleaved --dryrun" + in + out, "did you mean --dry-run?"},
      {"convert-weights" + config + " --to interleaved " + dir_.string() + out,
       "the folder " + dir_.string() + " holds neither model.safetensors nor model.safetensors.index.json"},
  };
  for (const Refusal& r : refusals) {
    SCOPED_TRACE(r.arguments);
    const test::CliResult result = run_cli(r.arguments);
    EXPECT_EQ(result.exit_code, 2);
    EXPECT_THAT(result.err, HasSubstr("rotary: error: "));
    EXPECT_THAT(result.err, HasSubstr(r.message));
    EXPECT_FALSE(fs::exists(path("out.safetensors")));
  }
  EXPECT_EQ(test::read_all(path("in.safetensors")), original_);
}

TEST_F(ConvertCli, HelpAndCommandList) {
  const test::CliResult help = run_cli("help convert-weights");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_THAT(help.out, HasSubstr("usage: rotary convert-weights --config CONFIG --to interleaved|half-split"));
  EXPECT_THAT(run_cli("--help").out, HasSubstr("convert-weights"));
}


// --to takes the pairing names the other commands take (apply --style neox|gptj and the aliases
// parse_style knows), each giving the same file as its long name.
TEST_F(ConvertCli, ToTakesThePairingNamesOfEveryCommand) {
  const std::string config = " --config " + path("config.json");
  ASSERT_EQ(run_cli("convert-weights" + config + " --to interleaved " + path("in.safetensors") + " " + path("il.safetensors")).exit_code, 0);
  const std::string interleaved = test::read_all(path("il.safetensors"));
  ASSERT_NE(interleaved, original_);
  for (const std::string name : {"gptj", "gpt-j"}) {
    SCOPED_TRACE(name);
    fs::remove(path("x.safetensors"));
    const test::CliResult r =
        run_cli("convert-weights" + config + " --to " + name + " " + path("in.safetensors") + " " + path("x.safetensors"));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr("pairing: half-split -> interleaved"));
    EXPECT_EQ(test::read_all(path("x.safetensors")), interleaved);
  }
  for (const std::string name : {"neox", "gpt-neox", "half_split", "half-split"}) {
    SCOPED_TRACE(name);
    fs::remove(path("x.safetensors"));
    const test::CliResult r =
        run_cli("convert-weights" + config + " --to " + name + " " + path("il.safetensors") + " " + path("x.safetensors"));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr("pairing: interleaved -> half-split"));
    EXPECT_EQ(test::read_all(path("x.safetensors")), original_);
  }
  const test::CliResult typo = run_cli("convert-weights" + config + " --to gptx " + path("in.safetensors") + " " + path("y.safetensors"));
  EXPECT_EQ(typo.exit_code, 2);
  EXPECT_THAT(typo.err, HasSubstr("(got \"gptx\"); did you mean gptj?"));
}

// A model folder: model.safetensors, or a sharded checkpoint (two shards, q and k in the
// first, the index, config.json, a pytorch_model.bin that is left out), converted into a new
// folder; refusals exit 2 with nothing written, also when a write fails after the first shard.
class ConvertCliFolder : public ConvertCli {
 protected:
  // The fixture's tensors in two shards, the second holding a `copied_floats` F32 tensor beside
  // embed_tokens and v_proj.
  void write_sharded(const fs::path& folder, int64_t copied_floats) {
    fs::create_directories(folder);
    const safetensors::Header header = safetensors::parse(original_, "in");
    std::vector<safetensors::TensorData> tensors;
    for (const auto& t : header.tensors) {
      tensors.push_back({t.name, t.dtype, t.shape, original_.substr(static_cast<size_t>(header.data_start + t.begin),
                                                                    static_cast<size_t>(t.end - t.begin))});
    }
    // Header order: embed_tokens, q_proj, k_proj, v_proj.
    const std::string first = "model-00001-of-00002.safetensors", second = "model-00002-of-00002.safetensors";
    std::ofstream(folder / first, std::ios::binary) << safetensors::serialize({tensors[1], tensors[2]});
    std::ofstream(folder / second, std::ios::binary)
        << safetensors::serialize({tensors[0], tensors[3],
                                   {"model.norm.weight", "F32", {copied_floats}, std::string(copied_floats * 4, '\1')}});
    std::ofstream(folder / "model.safetensors.index.json")
        << R"({"metadata": {"total_size": 1}, "weight_map": {"model.embed_tokens.weight": ")" << second
        << R"(", "model.layers.0.self_attn.q_proj.weight": ")" << first << R"(", "model.layers.0.self_attn.k_proj.weight": ")"
        << first << R"(", "model.layers.0.self_attn.v_proj.weight": ")" << second << R"(", "model.norm.weight": ")" << second
        << R"("}})";
    fs::copy_file(path("config.json"), folder / "config.json");
    std::ofstream(folder / "pytorch_model.bin") << "old weights";
  }
  std::vector<std::string> names_in(const fs::path& folder) const {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(folder)) names.push_back(entry.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
};

TEST_F(ConvertCliFolder, AFolderHoldingModelSafetensors) {
  fs::create_directories(path("model"));
  fs::copy_file(path("in.safetensors"), path("model/model.safetensors"));
  fs::copy_file(path("config.json"), path("model/config.json"));
  const test::CliResult r = run_cli("convert-weights --config " + path("model") + " --to gptj " + path("model") + " " +
                                    path("out"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("checkpoint: " + path("model/model.safetensors") + "\n"));
  EXPECT_THAT(r.out, HasSubstr("  config.json (copied)\n"));
  EXPECT_THAT(r.out, HasSubstr("wrote " + path("out") + "/ (1 safetensors files, " + std::to_string(original_.size()) + " bytes)"));
  EXPECT_EQ(names_in(path("out")), (std::vector<std::string>{"config.json", "model.safetensors"}));
  ASSERT_EQ(run_cli("convert-weights --config " + path("config.json") + " --to interleaved " + path("in.safetensors") + " " +
                    path("file.safetensors")).exit_code, 0);
  EXPECT_EQ(test::read_all(path("out/model.safetensors")), test::read_all(path("file.safetensors")));
}

TEST_F(ConvertCliFolder, AShardedCheckpoint) {
  write_sharded(path("model"), 4);
  const test::CliResult r = run_cli("convert-weights --config " + path("model") + " --to gptj " + path("model") + " " +
                                    path("out"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("checkpoint: sharded, 2 files (" + path("model/model.safetensors.index.json") + ")\n"));
  EXPECT_THAT(r.out, HasSubstr("permuted 2 tensors:"));
  EXPECT_THAT(r.out, HasSubstr("copied unchanged: 3 tensors"));
  EXPECT_THAT(r.out, HasSubstr("  model-00001-of-00002.safetensors         permuted 2, copied 0 tensors"));
  EXPECT_THAT(r.out, HasSubstr("  model-00002-of-00002.safetensors         permuted 0, copied 3 tensors"));
  EXPECT_THAT(r.out, HasSubstr("  model.safetensors.index.json (unchanged)\n  config.json (copied)\n"));
  EXPECT_THAT(r.err, HasSubstr("rotary: warning: left out of " + path("out") +
                               ": pytorch_model.bin (sub-folders and weights that were not converted)"));
  EXPECT_EQ(names_in(path("out")),
            (std::vector<std::string>{"config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                                      "model.safetensors.index.json"}));
  // The shard with q and k: as the file converted alone; the other, and the index, as they were.
  ASSERT_EQ(run_cli("convert-weights --config " + path("config.json") + " --to interleaved " +
                    path("model/model-00001-of-00002.safetensors") + " " + path("first.safetensors")).exit_code, 0);
  EXPECT_EQ(test::read_all(path("out/model-00001-of-00002.safetensors")), test::read_all(path("first.safetensors")));
  for (const std::string name : {"model-00002-of-00002.safetensors", "model.safetensors.index.json", "config.json"}) {
    EXPECT_EQ(test::read_all(path("out/" + name)), test::read_all(path("model/" + name))) << name;
  }
  // --dry-run: the same plan, nothing written.
  const test::CliResult dry = run_cli("convert-weights --config " + path("model") + " --to neox --dry-run " + path("out") +
                                      " " + path("back"));
  ASSERT_EQ(dry.exit_code, 0) << dry.err;
  EXPECT_THAT(dry.out, HasSubstr("would permute 2 tensors"));
  EXPECT_FALSE(fs::exists(path("back")));
}

TEST_F(ConvertCliFolder, RefusalsExit2WithNothingWritten) {
  write_sharded(path("model"), 4);
  const std::string command = "convert-weights --config " + path("config.json") + " --to gptj " + path("model") + " ";
  const auto refused = [&](const std::string& out, const std::string& message, const std::string& prefix = "") {
    SCOPED_TRACE(message);
    const test::CliResult r = run_cli(command + out, prefix);
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_THAT(r.err, HasSubstr("rotary: error: "));
    EXPECT_THAT(r.err, HasSubstr(message));
    EXPECT_EQ(r.out, "");
  };
  // OUT exists.
  fs::create_directories(path("taken"));
  refused(path("taken"), "convert-weights: OUT " + path("taken") + " exists");
  // A shard missing.
  fs::rename(path("model/model-00002-of-00002.safetensors"), path("moved.safetensors"));
  refused(path("out"), "does not hold: model-00002-of-00002.safetensors; nothing was written");
  fs::rename(path("moved.safetensors"), path("model/model-00002-of-00002.safetensors"));
  EXPECT_FALSE(fs::exists(path("out")));
  // A write that fails after the first shard is written (a file size limit: dash counts ulimit -f
  // in 512-byte blocks, bash in 1024, so 16 KiB or 32; the first shard is 3 KiB, the second
  // 64 KiB): the temporary folder is removed, OUT never appears.
  fs::remove_all(path("model"));
  write_sharded(path("model"), 16384);
  refused(path("out"), "cannot write", "trap '' XFSZ; ulimit -f 32; ");
  EXPECT_FALSE(fs::exists(path("out")));
  EXPECT_EQ(names_in(dir_), (std::vector<std::string>{"config.json", "in.safetensors", "model", "taken"}));
  // Without the limit it converts.
  EXPECT_EQ(run_cli(command + path("out")).exit_code, 0);
  EXPECT_TRUE(fs::exists(path("out/model-00002-of-00002.safetensors")));
}

}  // namespace
}  // namespace rotary
