// tests/core/scaling_registry_test.cpp: the table of scaling schemes (src/core/scaling/registry.hpp)
// is complete: one row per ScalingType, in order, names unique, every function set, and each
// scheme's config.json keys read back into the same spec (write_hf_config, then parse_hf_config).
#include "core/scaling/registry.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <string>

#include "rotary/error.hpp"
#include "rotary/frequencies.hpp"
#include "rotary/hf_config.hpp"
#include "rotary/spec.hpp"

namespace rotary {
namespace {

using scaling::ScalingScheme;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// One valid spec per scheme, with every field the scheme reads set away from its default where
// the scheme allows it. A new scheme without an entry here fails EveryRowHasARepresentativeSpec.
std::map<ScalingType, RopeSpec> representative_specs() {
  auto base = [](ScalingType type) {
    RopeSpec spec;
    spec.name = "registry";
    spec.head_dim = 16;
    spec.rotary_dim = 16;
    spec.theta_base = 500000.0;
    spec.max_position_embeddings = 131072;
    spec.scaling.type = type;
    return spec;
  };
  std::map<ScalingType, RopeSpec> specs;
  specs[ScalingType::Default] = base(ScalingType::Default);
  RopeSpec linear = base(ScalingType::Linear);
  linear.scaling.factor = 4.0;
  specs[ScalingType::Linear] = linear;
  RopeSpec dynamic = base(ScalingType::Dynamic);
  dynamic.scaling.factor = 2.5;
  specs[ScalingType::Dynamic] = dynamic;
  RopeSpec ntk_alpha = base(ScalingType::NtkAlpha);
  ntk_alpha.scaling.ntk_alpha = 1000.0;
  specs[ScalingType::NtkAlpha] = ntk_alpha;
  RopeSpec yarn = base(ScalingType::Yarn);
  yarn.scaling.factor = 40.0;
  yarn.scaling.original_max_position_embeddings = 4096;
  yarn.scaling.beta_fast = 16.0;
  yarn.scaling.beta_slow = 2.0;
  yarn.scaling.truncate = false;
  yarn.scaling.mscale = 0.707;
  yarn.scaling.mscale_all_dim = 0.5;
  specs[ScalingType::Yarn] = yarn;
  RopeSpec longrope = base(ScalingType::LongRope);
  longrope.scaling.factor = 32.0;
  longrope.scaling.original_max_position_embeddings = 4096;
  longrope.scaling.short_factor = {1.0, 1.05, 1.1, 1.25, 1.5, 2.0, 2.5, 3.0};
  longrope.scaling.long_factor = {1.0, 1.5, 2.25, 4.0, 8.5, 16.0, 24.0, 31.5};
  longrope.scaling.attention_factor = 1.19;
  specs[ScalingType::LongRope] = longrope;
  RopeSpec llama3 = base(ScalingType::Llama3);
  llama3.scaling.factor = 8.0;
  llama3.scaling.original_max_position_embeddings = 8192;
  llama3.scaling.low_freq_factor = 1.5;
  llama3.scaling.high_freq_factor = 3.0;
  specs[ScalingType::Llama3] = llama3;
  RopeSpec proportional = base(ScalingType::Proportional);
  proportional.partial_rotary_factor = 0.25;
  proportional.scaling.factor = 2.0;
  specs[ScalingType::Proportional] = proportional;
  return specs;
}

// The config.json whose rope_scaling is the row's write_hf_config of the spec.
std::string config_json(const ScalingScheme& row, const RopeSpec& spec) {
  const std::string members = row.write_hf_config(spec);
  return detail::concat("{\"head_dim\": ", spec.head_dim, ", \"max_position_embeddings\": ", spec.max_position_embeddings,
                        ", \"rope_theta\": ", spec.theta_base, ", \"partial_rotary_factor\": ", spec.partial_rotary_factor,
                        ", \"rope_scaling\": {\"rope_type\": \"", row.name, "\"", members.empty() ? "" : ", ", members,
                        "}}");
}

TEST(ScalingRegistry, OneRowPerScalingTypeInOrder) {
  const auto rows = scaling::schemes();
  ASSERT_EQ(rows.size(), 8u);  // Default .. Proportional
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(static_cast<size_t>(rows[i].type), i) << rows[i].name;
    EXPECT_EQ(&scaling::scheme(rows[i].type), &rows[i]) << rows[i].name;
  }
  EXPECT_THAT([] { scaling::scheme(static_cast<ScalingType>(99)); },
              ::testing::ThrowsMessage<Error>(HasSubstr("ScalingType 99 has no row")));
}

TEST(ScalingRegistry, NamesAndAliasesAreUniqueAndParse) {
  std::set<std::string_view> names;
  for (const ScalingScheme& row : scaling::schemes()) {
    EXPECT_FALSE(row.name.empty());
    EXPECT_TRUE(names.insert(row.name).second) << "duplicate name " << row.name;
    if (!row.alias.empty()) {
      EXPECT_TRUE(names.insert(row.alias).second) << "duplicate alias " << row.alias;
      EXPECT_EQ(parse_scaling_type(row.alias), row.type) << row.alias;
    }
    EXPECT_EQ(to_string(row.type), row.name);
    EXPECT_EQ(parse_scaling_type(row.name), row.type) << row.name;
    EXPECT_EQ(scaling::find_scheme(row.name), &row);
  }
  EXPECT_EQ(parse_scaling_type("su"), ScalingType::LongRope);
  EXPECT_EQ(scaling::find_scheme("ntk"), nullptr);
  EXPECT_EQ(parse_scaling_type(""), std::nullopt);
}

TEST(ScalingRegistry, EveryFunctionIsSet) {
  for (const ScalingScheme& row : scaling::schemes()) {
    SCOPED_TRACE(std::string(row.name));
    EXPECT_NE(row.check, nullptr);
    EXPECT_NE(row.read_hf_config, nullptr);
    EXPECT_NE(row.write_hf_config, nullptr);
    EXPECT_NE(row.frequencies, nullptr);
    EXPECT_NE(row.frequency_seq_len, nullptr);
    EXPECT_NE(row.hf_inv_freq_f32, nullptr);
    EXPECT_NE(row.vllm_cache_rows, nullptr);
    EXPECT_NE(row.describe, nullptr);
  }
}

TEST(ScalingRegistry, KeysAreDistinct) {
  for (const ScalingScheme& row : scaling::schemes()) {
    std::set<std::string_view> keys;
    for (std::string_view key : row.required_keys) EXPECT_TRUE(keys.insert(key).second) << row.name << ": " << key;
    for (std::string_view key : row.optional_keys) EXPECT_TRUE(keys.insert(key).second) << row.name << ": " << key;
    // A scheme that requires a factor lists it among the keys config.json must hold.
    if (row.requires_factor) {
      EXPECT_EQ(keys.count("factor"), 1u) << row.name;
    }
  }
}

TEST(ScalingRegistry, EveryRowHasARepresentativeSpec) {
  const auto specs = representative_specs();
  for (const ScalingScheme& row : scaling::schemes()) {
    ASSERT_EQ(specs.count(row.type), 1u) << "tests/core/scaling_registry_test.cpp has no spec for " << row.name;
    EXPECT_NO_THROW(validate(specs.at(row.type))) << row.name;
  }
}

// write_hf_config then parse_hf_config gives back the same scaling, and so the same frequencies
// bit for bit, at construction and past the original context.
TEST(ScalingRegistry, HfConfigRoundTrip) {
  const auto specs = representative_specs();
  for (const ScalingScheme& row : scaling::schemes()) {
    const RopeSpec& spec = specs.at(row.type);
    const std::string text = config_json(row, spec);
    SCOPED_TRACE(text);
    const RopeSpec parsed = parse_hf_config(text, "registry").spec;
    const Scaling& a = spec.scaling;
    const Scaling& b = parsed.scaling;
    EXPECT_EQ(b.type, a.type);
    EXPECT_EQ(b.factor, a.factor);
    if (row.reads_original_context) {
      EXPECT_EQ(b.original_max_position_embeddings, a.original_max_position_embeddings);
    }
    EXPECT_EQ(b.beta_fast, a.beta_fast);
    EXPECT_EQ(b.beta_slow, a.beta_slow);
    EXPECT_EQ(b.truncate, a.truncate);
    EXPECT_EQ(b.mscale, a.mscale);
    EXPECT_EQ(b.mscale_all_dim, a.mscale_all_dim);
    EXPECT_EQ(b.attention_factor, a.attention_factor);
    EXPECT_EQ(b.short_factor, a.short_factor);
    EXPECT_EQ(b.long_factor, a.long_factor);
    EXPECT_EQ(b.low_freq_factor, a.low_freq_factor);
    EXPECT_EQ(b.high_freq_factor, a.high_freq_factor);
    EXPECT_EQ(b.ntk_alpha, a.ntk_alpha);
    EXPECT_EQ(parsed.rotary_dim, spec.rotary_dim);
    for (int64_t seq_len : {int64_t{0}, int64_t{1} << 20}) {
      const Frequencies want = frequencies(spec, seq_len);
      const Frequencies got = frequencies(parsed, seq_len);
      EXPECT_EQ(got.inv_freq, want.inv_freq) << "seq_len " << seq_len;
      EXPECT_EQ(got.attention_scaling, want.attention_scaling) << "seq_len " << seq_len;
    }
  }
}

// The rows' per-scheme answers agree with each other on the representative specs.
TEST(ScalingRegistry, RowsAnswerForTheirSpecs) {
  const auto specs = representative_specs();
  for (const ScalingScheme& row : scaling::schemes()) {
    SCOPED_TRACE(std::string(row.name));
    const RopeSpec& spec = specs.at(row.type);
    const Frequencies freqs = frequencies(spec, 0);
    EXPECT_THAT(row.describe(spec, freqs), StartsWith(std::string(row.name)));
    const std::vector<float> hf = row.hf_inv_freq_f32(spec, 0);
    ASSERT_EQ(hf.size(), freqs.inv_freq.size());
    for (size_t i = 0; i < hf.size(); ++i) {
      // Hugging Face's float32 chain is within a few float32 ulps of the float64 value (docs/numerics.md);
      // Llama 3's blended pairs subtract nearly equal float32 terms, measured here at 6 ulps.
      EXPECT_NEAR(hf[i], freqs.inv_freq[i], 16 * std::abs(freqs.inv_freq[i]) * 0x1p-24) << "pair " << i;
    }
    // A scheme whose frequencies do not depend on seq_len maps every seq_len to 0.
    if (!row.sequence_dependent) {
      EXPECT_EQ(row.frequency_seq_len(spec, int64_t{1} << 20), 0);
    }
    EXPECT_EQ(sequence_dependent(spec), row.sequence_dependent);
  }
  EXPECT_EQ(scaling::scheme(ScalingType::Dynamic).frequency_seq_len(specs.at(ScalingType::Dynamic), 200000), 200000);
  EXPECT_EQ(scaling::scheme(ScalingType::LongRope).frequency_seq_len(specs.at(ScalingType::LongRope), 5000), 4097);
}

}  // namespace
}  // namespace rotary
