// tests/interop/convert_cli_test.cpp: `rotary convert-weights` run as a user runs it, on real files:
// the round trip through the command is byte-identical, --dry-run writes nothing, every refusal
// exits 2 naming the value.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

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
       "--to must be interleaved or half-split (got \"interleavd\"); did you mean interleaved?"},
      {"convert-weights" + config + in + out, "--to is required"},
      {"convert-weights --to interleaved" + in + out, "--config is required"},
      {"convert-weights" + config + " --to interleaved" + in, "IN.safetensors and OUT.safetensors are required (got IN only)"},
      {"convert-weights" + config + " --to interleaved" + in + in, "is the input"},
      {"convert-weights --config " + path("wrong.json") + " --to interleaved" + in + out,
       "tensor \"model.layers.0.self_attn.k_proj.weight\" (k) has 16 rows (shape [16, 32]), but the config"},
      {"convert-weights" + config + " --to interleaved " + path("truncated.safetensors") + out, "truncated.safetensors: header"},
      {"convert-weights" + config + " --to interleaved --q-module a,,b" + in + out, "--q-module must be module paths"},
      {"convert-weights" + config + " --to interleaved --dryrun" + in + out, "did you mean --dry-run?"},
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

}  // namespace
}  // namespace rotary
