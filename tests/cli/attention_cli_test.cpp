// tests/cli/attention_cli_test.cpp: `rotary attention` as a user runs it: prefill and decode with
// every encoding and dtype held to the float64 reference (exit 0, "pass"), the --json object,
// defaults taken from the config (heads, kv heads, the sliding window), and bad input (exit 2,
// a message naming the flag and the value, did-you-mean).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "cli_runner.hpp"
#include "core/json.hpp"

namespace rotary {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

using Result = test::CliResult;

Result run(const std::string& arguments) { return test::run_cli(arguments); }

json::Value run_json(const std::string& arguments) {
  const Result r = run(arguments + " --json");
  EXPECT_EQ(r.exit_code, 0) << arguments << "\n" << r.err << r.out;
  return json::parse(r.out, arguments);
}

TEST(CliAttention, PrefillAndDecodeWithRopePassAgainstTheReference) {
  const Result r = run("attention --tokens 64 --decode 3 --threads 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, StartsWith("attention: llama-3.1-8b (preset llama-3.1-8b), rope, 32 q heads / 8 kv heads, head_dim 128, float32, window none, 1 thread, seed 0\n"));
  EXPECT_THAT(r.out, HasSubstr("prefill 64 tokens (KvCache append + attend): "));
  EXPECT_THAT(r.out, HasSubstr("decode 3 steps: "));
  EXPECT_THAT(r.out, HasSubstr("over 274432 outputs; bound "));  // 67 tokens x 32 heads x 128
  EXPECT_THAT(r.out, HasSubstr(": pass\n"));
  EXPECT_EQ(r.err, "");
}

// Every encoding and dtype: pass, with an error that is a real difference (not 0: the fast path's
// float32 arithmetic differs from float64) and a bound of the size the analysis gives.
TEST(CliAttention, EveryEncodingAndDtypePassesWithTheJsonFields) {
  for (const std::string encoding : {"rope", "none", "sinusoidal", "learned", "alibi"}) {
    for (const std::string dtype : {"f32", "bf16", "f16"}) {
      SCOPED_TRACE(encoding + " " + dtype);
      const json::Value doc = run_json("attention --preset qwen2.5-7b-yarn --tokens 40 --decode 4 --encoding " + encoding +
                                       " --dtype " + dtype + " --window 24 --seed 3");
      EXPECT_EQ(doc.find("model")->as_string(), "qwen2.5-7b-yarn");
      EXPECT_EQ(doc.find("source")->as_string(), "preset qwen2.5-7b-yarn");
      EXPECT_EQ(doc.find("encoding")->as_string(), encoding);
      EXPECT_EQ(doc.find("dtype")->as_string(), dtype == "f32" ? "float32" : dtype == "bf16" ? "bfloat16" : "float16");
      EXPECT_EQ(doc.find("q_heads")->as_int64(), 28);
      EXPECT_EQ(doc.find("kv_heads")->as_int64(), 4);
      EXPECT_EQ(doc.find("head_dim")->as_int64(), 128);
      EXPECT_EQ(doc.find("window")->as_int64(), 24);
      EXPECT_EQ(doc.find("tokens")->as_int64(), 40);
      EXPECT_EQ(doc.find("decode")->as_int64(), 4);
      EXPECT_EQ(doc.find("seed")->as_int64(), 3);
      EXPECT_EQ(doc.find("outputs")->as_int64(), 44 * 28 * 128);
      EXPECT_GT(doc.find("prefill_ms")->as_double(), 0.0);
      EXPECT_GT(doc.find("decode_ms_per_step")->as_double(), 0.0);
      EXPECT_GE(doc.find("decode_ms_total")->as_double(), doc.find("decode_ms_per_step")->as_double());
      EXPECT_TRUE(doc.find("threads")->is_integer());
      EXPECT_DOUBLE_EQ(doc.find("scale")->as_double(), 1.0 / std::sqrt(128.0));
      const double error = doc.find("max_abs_error")->as_double(), bound = doc.find("error_bound")->as_double();
      EXPECT_GT(error, 0.0);
      EXPECT_LE(error, bound);
      EXPECT_LT(bound, dtype == "f32" ? 1e-3 : 0.2);
      EXPECT_TRUE(doc.find("pass")->as_bool());
    }
  }
}

TEST(CliAttention, HeadsAndWindowDefaultFromTheConfigAndFlagsOverrideThem) {
  const json::Value mistral = run_json("attention --preset mistral-7b-v0.1 --tokens 8 --encoding none");
  EXPECT_EQ(mistral.find("window")->as_int64(), 4096);  // the config's sliding_window
  EXPECT_EQ(mistral.find("q_heads")->as_int64(), 32);
  EXPECT_EQ(mistral.find("kv_heads")->as_int64(), 8);
  const json::Value overridden = run_json("attention --preset mistral-7b-v0.1 --tokens 8 --window 3 --heads 4 --kv-heads 2");
  EXPECT_EQ(overridden.find("window")->as_int64(), 3);
  EXPECT_EQ(overridden.find("q_heads")->as_int64(), 4);
  EXPECT_EQ(overridden.find("kv_heads")->as_int64(), 2);
  EXPECT_EQ(run_json("attention --tokens 8").find("window")->as_int64(), 0);  // llama-3.1-8b: none
  // --heads alone: the config's kv heads when they divide it, else MHA.
  EXPECT_EQ(run_json("attention --tokens 4 --heads 16").find("kv_heads")->as_int64(), 8);
  EXPECT_EQ(run_json("attention --tokens 4 --heads 12").find("kv_heads")->as_int64(), 12);
}

TEST(CliAttention, MropeIsRefusedForRopeButRunsWithoutPositions) {
  const Result mrope = run("attention --preset qwen2-vl-7b --tokens 8");
  EXPECT_EQ(mrope.exit_code, 2);
  EXPECT_THAT(mrope.err, HasSubstr("rotary: error: KvCache: spec.axes must be single (got mrope)"));
  const Result none = run("attention --preset qwen2-vl-7b --tokens 8 --encoding none");
  EXPECT_EQ(none.exit_code, 0) << none.err;
}

TEST(CliAttention, BadArgumentsNameTheFlagAndTheValue) {
  struct Case {
    std::string arguments, message;
  };
  const std::vector<Case> cases{
      {"attention", "attention: --tokens N is required (got none)"},
      {"attention --tokens 0", "attention: --tokens must be an integer in [1, 32768]"},
      {"attention --tokens 40000", "attention: --tokens must be an integer in [1, 32768]"},
      {"attention --tokens 30000 --decode 3000", "attention: --tokens + --decode must be <= 32768 (got 30000 + 3000)"},
      {"attention --tokens 8 --encoding alibo", "attention: --encoding must be rope, none, sinusoidal, learned or alibi (got \"alibo\"); did you mean alibi?"},
      {"attention --tokens 8 --dtype fp32", "attention: --dtype must be f32, bf16 or f16 (got \"fp32\"); did you mean f32?"},
      {"attention --tokens 8 --kv-heads 6", "attention: --kv-heads must divide the q heads 32 (got 6)"},
      {"attention --tokens 8 --window -3", "attention: --window must be an integer in [0, "},
      {"attention --tokens 8 --threads 0", "attention: --threads must be an integer in [1, 256]"},
      {"attention --token 8", "did you mean --tokens?"},
      {"attention --tokens 8 --encoding", "attention: --encoding needs an encoding: rope, none, sinusoidal, learned or alibi"},
      {"attention --tokens 8 --preset llama-3.1-7b", "did you mean llama-3.1-8b?"},
      // Past any machine's memory: the sizes and the bytes, before allocating (was std::bad_alloc).
      {"attention --tokens 32768 --heads 65536 --kv-heads 65536",
       "attention: --tokens + --decode 32768 with 65536 q heads, 65536 kv heads and head_dim 128 need about 6597069766656 bytes "
       "for q, k, v, out and the KV cache, more than "},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.arguments);
    const Result r = run(c.arguments);
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_THAT(r.err, HasSubstr(c.message));
    EXPECT_EQ(r.out, "");
  }
}

TEST(CliAttention, HelpExplainsTheCommand) {
  for (const std::string arguments : {"help attention", "attention --help"}) {
    const Result r = run(arguments);
    EXPECT_EQ(r.exit_code, 0);
    EXPECT_THAT(r.out, StartsWith("usage: rotary attention [--preset NAME | --config FILE] --tokens N [--decode M]"));
    EXPECT_THAT(r.out, HasSubstr("--encoding E"));
  }
}

}  // namespace
}  // namespace rotary
