// tests/core/frequencies_golden_test.cpp: parity with Hugging Face on every case of tests/golden.
//
// Positive cases: the case's config.json goes through parse_hf_config, then frequencies() at the
// seq_len Hugging Face's forward would see (max(positions) + 1). Checked:
//   - geometry (rope_type, head_dim, rotary_dim, max_position_embeddings) as HF resolved it;
//   - inv_freq and attention_scaling against exact_f64 within 1 double ulp. Derivation
//     (docs/numerics.md): we evaluate in long double (relative error ~1e-19 for these short
//     op chains) and round once; exact_f64 is the exact value rounded once; the two roundings
//     can land on adjacent doubles only when the exact value is within 1e-19 relative of a
//     rounding boundary, so the distance is 0 or 1 ulp;
//   - float32(inv_freq) against HF's float32 buffer within the ulps the case file states
//     (errors.inv_freq_f32_max_ulp_vs_correctly_rounded_exact: HF's own float32 op chain error);
//   - attention_scaling against HF's Python float, within 1 double ulp;
//   - when HF logged a warning while loading the config, rotary reports one too.
// Negative cases: rotary raises ConfigError naming the field and the value, whether HF raised
// or only warned.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "rotary/error.hpp"
#include "rotary/frequencies.hpp"
#include "rotary/hf_config.hpp"
#include "core/json.hpp"
#include "tests/support/golden_files.hpp"
#include "tests/support/ulp.hpp"

namespace rotary {
namespace {

using ::testing::HasSubstr;

using test::GoldenKind;
using test::golden_files;
using test::tensor_data;

// Re-serializes a parsed config so it goes through the same text parser as a user's file.
std::string to_text(const json::Value& value) { return json::serialize(value); }

TEST(Golden, DirectoryHasEveryCase) {
  ASSERT_TRUE(std::filesystem::is_directory(test::golden_dir()))
      << "golden vectors not found at " << test::golden_dir() << " (set ROTARY_GOLDEN_DIR)";
  EXPECT_GE(golden_files(GoldenKind::Positive).size(), 18u);
  EXPECT_GE(golden_files(GoldenKind::Negative).size(), 6u);
}

class GoldenPositive : public ::testing::TestWithParam<std::filesystem::path> {};

TEST_P(GoldenPositive, FrequenciesMatchHuggingFace) {
  const json::Value root = json::parse_file(GetParam().string());
  SCOPED_TRACE(GetParam().filename().string());
  ASSERT_EQ(root.find("kind")->as_string(), "positive");
  const HfRopeConfig config = parse_hf_config(to_text(*root.find("config")), GetParam().filename().string());
  const RopeSpec& spec = config.spec;

  EXPECT_EQ(to_string(spec.scaling.type), root.find("rope_type")->as_string());
  EXPECT_EQ(spec.head_dim, root.find("head_dim")->as_int64());
  EXPECT_EQ(spec.rotary_dim, root.find("rotary_dim")->as_int64());
  EXPECT_EQ(spec.max_position_embeddings, root.find("max_position_embeddings")->as_int64());

  int64_t max_position = 0;
  for (const json::Value& p : root.find("positions")->as_array()) max_position = std::max(max_position, p.as_int64());
  const Frequencies freqs = frequencies(spec, max_position + 1);

  const json::Value& exact = *root.find("exact_f64");
  const json::Value& hf = *root.find("hf_f32");
  const std::vector<double> exact_inv_freq = tensor_data(exact, "inv_freq");
  const std::vector<double> hf_inv_freq = tensor_data(hf, "inv_freq");
  ASSERT_EQ(freqs.inv_freq.size(), exact_inv_freq.size());
  ASSERT_EQ(freqs.inv_freq.size(), hf_inv_freq.size());

  const int64_t hf_ulps =
      root.find("errors")->find("inv_freq_f32_max_ulp_vs_correctly_rounded_exact")->as_int64();
  for (size_t i = 0; i < exact_inv_freq.size(); ++i) {
    EXPECT_LE(test::ulp_distance(freqs.inv_freq[i], exact_inv_freq[i]), 1)
        << "pair " << i << ": " << freqs.inv_freq[i] << " vs exact " << exact_inv_freq[i];
    EXPECT_LE(test::ulp_distance(static_cast<float>(freqs.inv_freq[i]), static_cast<float>(hf_inv_freq[i])), hf_ulps)
        << "pair " << i << ": float32 " << static_cast<float>(freqs.inv_freq[i]) << " vs HF " << hf_inv_freq[i];
  }
  const double exact_scaling = exact.find("attention_scaling")->as_double();
  const double hf_scaling = hf.find("attention_scaling")->as_double();
  EXPECT_LE(test::ulp_distance(freqs.attention_scaling, exact_scaling), 1)
      << freqs.attention_scaling << " vs exact " << exact_scaling;
  EXPECT_LE(test::ulp_distance(freqs.attention_scaling, hf_scaling), 1)
      << freqs.attention_scaling << " vs HF " << hf_scaling;

  // What HF warns about, rotary reports (never silence): as a warning, or as a note when the
  // config is correct as published (Phi-3's derived factor).
  if (!root.find("hf_log_messages")->as_array().empty()) {
    EXPECT_FALSE(config.warnings.empty() && config.notes.empty())
        << "HF logged a warning for this config; rotary said nothing";
  }
}

std::string case_name(const ::testing::TestParamInfo<std::filesystem::path>& info) {
  std::string name = info.param.stem().string();
  std::replace_if(name.begin(), name.end(), [](char c) { return !std::isalnum(static_cast<unsigned char>(c)); }, '_');
  return name;
}

INSTANTIATE_TEST_SUITE_P(AllCases, GoldenPositive, ::testing::ValuesIn(golden_files(GoldenKind::Positive)), case_name);

// Each negative case: the field rotary must name, and the value it must quote.
struct NegativeExpectation {
  std::string file;
  std::string field;
  std::string value;
};

class GoldenNegative : public ::testing::TestWithParam<std::filesystem::path> {};

TEST_P(GoldenNegative, RejectedNamingFieldAndValue) {
  static const std::vector<NegativeExpectation> kExpected = {
      {"neg_yarn_missing_factor.json", "rope_scaling.factor", "missing"},
      {"neg_llama3_missing_low_freq_factor.json", "rope_scaling.low_freq_factor", "missing"},
      {"neg_longrope_wrong_length.json", "rope_scaling.short_factor", "got 47"},
      {"neg_linear_factor_below_1.json", "rope_scaling.factor", "got 0.5"},
      {"neg_llama3_low_ge_high.json", "rope_scaling.high_freq_factor", "got 1"},
      {"neg_yarn_beta_fast_lt_beta_slow.json", "rope_scaling.beta_fast", "got 1"},
  };
  const std::string file = GetParam().filename().string();
  SCOPED_TRACE(file);
  const auto expected = std::find_if(kExpected.begin(), kExpected.end(),
                                     [&](const NegativeExpectation& e) { return e.file == file; });
  ASSERT_NE(expected, kExpected.end()) << "new negative golden case: add its expectation here";
  const json::Value root = json::parse_file(GetParam().string());
  ASSERT_EQ(root.find("kind")->as_string(), "negative");
  const std::string text = to_text(*root.find("config"));
  EXPECT_THAT([&] { parse_hf_config(text, "config.json"); },
              ::testing::ThrowsMessage<ConfigError>(
                  ::testing::AllOf(HasSubstr(expected->field), HasSubstr(expected->value))));
}

INSTANTIATE_TEST_SUITE_P(AllCases, GoldenNegative, ::testing::ValuesIn(golden_files(GoldenKind::Negative)), case_name);

}  // namespace
}  // namespace rotary
