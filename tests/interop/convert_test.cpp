// tests/interop/convert_test.cpp: checkpoint conversion between RoPE's pairing conventions
// (include/rotary/convert.hpp). The conversion is checked by what it is for: attention scores
// computed with half-split RoPE on the original rows equal those computed with interleaved RoPE on
// the converted rows (and the reverse), for full, partial and DeepSeek MLA geometries; the round
// trip is the identity, bit for bit; every refusal names the tensor and the value.
#include "rotary/convert.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "interop/safetensors.hpp"
#include "rotary/error.hpp"

namespace rotary {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

std::string random_floats(int64_t count, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> values(static_cast<size_t>(count));
  for (float& v : values) v = uniform(rng);
  std::string bytes(values.size() * 4, '\0');
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

CheckpointGeometry llama_geometry(int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t rotary_dim) {
  CheckpointGeometry g;
  g.source = "test config";
  g.num_attention_heads = heads;
  g.num_key_value_heads = kv_heads;
  g.head_dim = head_dim;
  g.rotary_dim = rotary_dim;
  return g;
}

CheckpointGeometry mla_geometry(int64_t heads, int64_t nope, int64_t rope, int64_t kv_lora_rank) {
  CheckpointGeometry g = llama_geometry(heads, heads, nope + rope, rope);
  g.rotary_offset = nope;
  g.kv_lora_rank = kv_lora_rank;
  g.config_pairing = Style::GPTJ;
  return g;
}

constexpr int64_t kInputs = 12;

// Rows of the q and k projections for `g`.
int64_t q_rows(const CheckpointGeometry& g) { return g.num_attention_heads * g.head_dim; }
int64_t k_rows(const CheckpointGeometry& g) {
  return g.mla() ? g.kv_lora_rank + g.rotary_dim : g.num_key_value_heads * g.head_dim;
}

// A random F32 checkpoint of two layers: q and k weights and biases, and tensors that are not q/k.
std::string random_checkpoint(const CheckpointGeometry& g, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<safetensors::TensorData> tensors;
  const std::string q = g.mla() ? "self_attn.q_b_proj" : "self_attn.q_proj";
  const std::string k = g.mla() ? "self_attn.kv_a_proj_with_mqa" : "self_attn.k_proj";
  tensors.push_back({"model.embed_tokens.weight", "F32", {5, kInputs}, random_floats(5 * kInputs, rng)});
  for (int layer = 0; layer < 2; ++layer) {
    const std::string prefix = "model.layers." + std::to_string(layer) + ".";
    tensors.push_back({prefix + q + ".weight", "F32", {q_rows(g), kInputs}, random_floats(q_rows(g) * kInputs, rng)});
    tensors.push_back({prefix + q + ".bias", "F32", {q_rows(g)}, random_floats(q_rows(g), rng)});
    tensors.push_back({prefix + k + ".weight", "F32", {k_rows(g), kInputs}, random_floats(k_rows(g) * kInputs, rng)});
    tensors.push_back({prefix + k + ".bias", "F32", {k_rows(g)}, random_floats(k_rows(g), rng)});
    tensors.push_back({prefix + "self_attn.v_proj.weight", "BF16", {6, kInputs}, random_floats(3 * kInputs, rng)});
  }
  return safetensors::serialize(tensors, {{"format", "pt"}});
}

std::vector<float> floats_of(const std::string& file, const std::string& name) {
  const safetensors::Header header = safetensors::parse(file, "checkpoint");
  for (const auto& t : header.tensors) {
    if (t.name != name) continue;
    std::vector<float> values(static_cast<size_t>((t.end - t.begin) / 4));
    std::memcpy(values.data(), file.data() + header.data_start + t.begin, values.size() * 4);
    return values;
  }
  ADD_FAILURE() << "no tensor " << name;
  return {};
}

// W x + b in float64.
std::vector<double> project(const std::vector<float>& w, const std::vector<float>& b, const std::vector<double>& x) {
  std::vector<double> out(b.size());
  for (size_t r = 0; r < b.size(); ++r) {
    double sum = b[r];
    for (size_t c = 0; c < x.size(); ++c) sum += static_cast<double>(w[r * x.size() + c]) * x[c];
    out[r] = sum;
  }
  return out;
}

// RoPE on rows [start, start + rotary) of v, pairs by `pairing`, written here from the definition
// (docs/formulas.md) and independent of the conversion code.
void rotate(std::vector<double>& v, int64_t start, int64_t rotary, Style pairing, int64_t position) {
  const int64_t half = rotary / 2;
  for (int64_t i = 0; i < half; ++i) {
    const double angle = static_cast<double>(position) * std::pow(10000.0, -2.0 * static_cast<double>(i) / static_cast<double>(rotary));
    const int64_t a = pairing == Style::NeoX ? start + i : start + 2 * i;
    const int64_t b = pairing == Style::NeoX ? start + i + half : start + 2 * i + 1;
    const double x = v[static_cast<size_t>(a)], y = v[static_cast<size_t>(b)];
    v[static_cast<size_t>(a)] = x * std::cos(angle) - y * std::sin(angle);
    v[static_cast<size_t>(b)] = y * std::cos(angle) + x * std::sin(angle);
  }
}

// Attention logits q_h . k_{h / group} of layer 0 for a query at position 11 and a key at position
// 4, each head's RoPE block rotated with `pairing`. Llama: the whole head; MLA: the rope block
// (its nope part comes from kv_b_proj, which the conversion does not touch).
std::vector<double> logits(const std::string& file, const CheckpointGeometry& g, Style pairing) {
  const std::string q = g.mla() ? "self_attn.q_b_proj" : "self_attn.q_proj";
  const std::string k = g.mla() ? "self_attn.kv_a_proj_with_mqa" : "self_attn.k_proj";
  std::vector<double> xq(kInputs), xk(kInputs);
  for (int64_t c = 0; c < kInputs; ++c) {
    xq[static_cast<size_t>(c)] = std::sin(0.7 * static_cast<double>(c) + 0.3);
    xk[static_cast<size_t>(c)] = std::cos(1.3 * static_cast<double>(c) - 0.2);
  }
  const std::string prefix = "model.layers.0.";
  std::vector<double> qv = project(floats_of(file, prefix + q + ".weight"), floats_of(file, prefix + q + ".bias"), xq);
  std::vector<double> kv = project(floats_of(file, prefix + k + ".weight"), floats_of(file, prefix + k + ".bias"), xk);
  const int64_t group = g.num_attention_heads / g.num_key_value_heads;
  std::vector<double> out;
  for (int64_t h = 0; h < g.num_attention_heads; ++h) rotate(qv, h * g.head_dim + g.rotary_offset, g.rotary_dim, pairing, 11);
  if (g.mla()) {
    rotate(kv, g.kv_lora_rank, g.rotary_dim, pairing, 4);
  } else {
    for (int64_t h = 0; h < g.num_key_value_heads; ++h) rotate(kv, h * g.head_dim, g.rotary_dim, pairing, 4);
  }
  for (int64_t h = 0; h < g.num_attention_heads; ++h) {
    double dot = 0;
    if (g.mla()) {
      for (int64_t r = 0; r < g.rotary_dim; ++r) {
        dot += qv[static_cast<size_t>(h * g.head_dim + g.rotary_offset + r)] * kv[static_cast<size_t>(g.kv_lora_rank + r)];
      }
    } else {
      for (int64_t r = 0; r < g.head_dim; ++r) {
        dot += qv[static_cast<size_t>(h * g.head_dim + r)] * kv[static_cast<size_t>((h / group) * g.head_dim + r)];
      }
    }
    out.push_back(dot);
  }
  return out;
}

double max_difference(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

// The worked example of docs/interop.md: a head of 8 rows labelled by their index.
TEST(ConvertWeights, RowOrderForHeadDim8) {
  EXPECT_EQ(pairing_row_order(8, Style::GPTJ), (std::vector<int64_t>{0, 4, 1, 5, 2, 6, 3, 7}));
  EXPECT_EQ(pairing_row_order(8, Style::NeoX), (std::vector<int64_t>{0, 2, 4, 6, 1, 3, 5, 7}));
  for (const int64_t rows : {2, 4, 6, 64, 128}) {
    const std::vector<int64_t> to = pairing_row_order(rows, Style::GPTJ);
    const std::vector<int64_t> back = pairing_row_order(rows, Style::NeoX);
    for (int64_t r = 0; r < rows; ++r) EXPECT_EQ(to[static_cast<size_t>(back[static_cast<size_t>(r)])], r);
  }
  EXPECT_THROW(pairing_row_order(7, Style::GPTJ), Error);
  EXPECT_THROW(pairing_row_order(0, Style::GPTJ), Error);
}

struct Case {
  const char* what;
  CheckpointGeometry geometry;
};

std::vector<Case> cases() {
  return {{"llama, GQA", llama_geometry(4, 2, 8, 8)},
          {"llama, MHA, head_dim 16", llama_geometry(2, 2, 16, 16)},
          {"partial rotary 0.5", llama_geometry(4, 4, 12, 6)},
          {"partial rotary 0.25, GQA", llama_geometry(4, 1, 16, 4)},
          {"DeepSeek MLA", mla_geometry(3, 6, 4, 10)}};
}

TEST(ConvertWeights, InterleavedLogitsOfConvertedRowsEqualHalfSplitLogitsOfOriginal) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.what);
    const std::string original = random_checkpoint(c.geometry, 7);
    std::string converted = original;
    ConvertOptions to_interleaved;
    to_interleaved.to = Style::GPTJ;
    const ConvertResult result = convert_safetensors(converted, c.geometry, to_interleaved, "t");
    EXPECT_EQ(result.permuted.size(), 8u);  // 2 layers x (q, k) x (weight, bias)
    EXPECT_EQ(result.copied, 3);
    const std::vector<double> reference = logits(original, c.geometry, Style::NeoX);
    // Float64 sums of the same float32 products in another order: agreement to ~1e-15 relative.
    EXPECT_LT(max_difference(logits(converted, c.geometry, Style::GPTJ), reference), 1e-12);
    // The check can fail: the converted rows with the wrong pairing give other logits.
    EXPECT_GT(max_difference(logits(converted, c.geometry, Style::NeoX), reference), 1e-3);

    // The reverse: an interleaved checkpoint converted to half-split runs with half-split RoPE.
    std::string back = original;
    ConvertOptions to_half;
    to_half.to = Style::NeoX;
    convert_safetensors(back, c.geometry, to_half, "t");
    EXPECT_LT(max_difference(logits(back, c.geometry, Style::NeoX), logits(original, c.geometry, Style::GPTJ)), 1e-12);
  }
}

TEST(ConvertWeights, RoundTripIsTheIdentityBitForBit) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.what);
    const std::string original = random_checkpoint(c.geometry, 11);
    std::string file = original;
    convert_safetensors(file, c.geometry, {.to = Style::GPTJ}, "t");
    EXPECT_NE(file, original);
    // Only q/k data changed: the header and every other tensor are byte for byte the same.
    const safetensors::Header header = safetensors::parse(original, "t");
    EXPECT_EQ(file.substr(0, static_cast<size_t>(header.data_start)), original.substr(0, static_cast<size_t>(header.data_start)));
    for (const auto& t : header.tensors) {
      const auto at = static_cast<size_t>(header.data_start + t.begin);
      const auto size = static_cast<size_t>(t.end - t.begin);
      const bool attention_qk = t.name.find("q_") != std::string::npos || t.name.find("k_proj") != std::string::npos ||
                                t.name.find("kv_a_proj") != std::string::npos;
      if (!attention_qk) {
        EXPECT_EQ(file.substr(at, size), original.substr(at, size)) << t.name;
      }
    }
    convert_safetensors(file, c.geometry, {.to = Style::NeoX}, "t");
    EXPECT_EQ(file, original);
  }
}

// Rows outside the rotary block stay where they are (partial rotary, MLA's nope and latent rows).
TEST(ConvertWeights, RowsOutsideTheRotaryBlockAreUntouched) {
  const CheckpointGeometry g = mla_geometry(3, 6, 4, 10);
  const std::string original = random_checkpoint(g, 5);
  std::string file = original;
  convert_safetensors(file, g, {.to = Style::GPTJ}, "t");
  const std::vector<float> before = floats_of(original, "model.layers.0.self_attn.kv_a_proj_with_mqa.bias");
  const std::vector<float> after = floats_of(file, "model.layers.0.self_attn.kv_a_proj_with_mqa.bias");
  for (size_t r = 0; r < 10; ++r) EXPECT_EQ(before[r], after[r]);  // the latent rows
  const std::vector<size_t> order = {0, 2, 1, 3};                   // rope rows to interleaved
  for (size_t r = 0; r < 4; ++r) EXPECT_EQ(after[10 + r], before[10 + order[r]]);
  const std::vector<float> q_before = floats_of(original, "model.layers.0.self_attn.q_b_proj.bias");
  const std::vector<float> q_after = floats_of(file, "model.layers.0.self_attn.q_b_proj.bias");
  for (size_t h = 0; h < 3; ++h) {
    for (size_t r = 0; r < 6; ++r) EXPECT_EQ(q_after[h * 10 + r], q_before[h * 10 + r]);
    for (size_t r = 0; r < 4; ++r) EXPECT_EQ(q_after[h * 10 + 6 + r], q_before[h * 10 + 6 + order[r]]);
  }
}

TEST(ConvertWeights, NormWeightsSharedByTheHeadsArePermutedOnce) {
  const CheckpointGeometry g = llama_geometry(2, 2, 4, 4);
  std::mt19937_64 rng(3);
  std::vector<float> norm = {10, 11, 12, 13};
  std::string bytes(16, '\0');
  std::memcpy(bytes.data(), norm.data(), 16);
  std::string file = safetensors::serialize({{"model.layers.0.self_attn.q_norm.weight", "F32", {4}, bytes},
                                             {"model.layers.0.self_attn.k_norm.weight", "F32", {8}, random_floats(8, rng)}});
  const ConvertResult result = convert_safetensors(file, g, {.to = Style::GPTJ}, "t");
  ASSERT_EQ(result.permuted.size(), 2u);
  EXPECT_EQ(result.permuted[0].heads, 1);
  EXPECT_EQ(result.permuted[1].heads, 2);
  EXPECT_EQ(floats_of(file, "model.layers.0.self_attn.q_norm.weight"), (std::vector<float>{10, 12, 11, 13}));
}

TEST(ConvertWeights, MetaNamesAndCustomModules) {
  const CheckpointGeometry g = llama_geometry(2, 1, 4, 4);
  std::mt19937_64 rng(9);
  const std::string original = safetensors::serialize({{"layers.0.attention.wq.weight", "F32", {8, 3}, random_floats(24, rng)},
                                                       {"layers.0.attention.wk.weight", "F32", {4, 3}, random_floats(12, rng)},
                                                       {"blocks.0.attn.query.weight", "F32", {8, 3}, random_floats(24, rng)}});
  std::string file = original;
  ConvertResult result = convert_safetensors(file, g, {.to = Style::NeoX}, "t");
  ASSERT_EQ(result.permuted.size(), 2u);
  EXPECT_EQ(result.permuted[0].name, "layers.0.attention.wq.weight");
  EXPECT_EQ(result.copied, 1);
  file = original;
  result = convert_safetensors(file, g, {.to = Style::NeoX, .q_modules = {"attn.query"}, .k_modules = {"attention.wk"}}, "t");
  ASSERT_EQ(result.permuted.size(), 2u);
  EXPECT_EQ(result.permuted[1].name, "blocks.0.attn.query.weight");
  // A module path matches whole components only: "query" does not match "attn.query.weight"'s
  // module by a partial name such as "uery".
  file = original;
  result = convert_safetensors(file, g, {.to = Style::NeoX, .q_modules = {"uery"}, .k_modules = {"nothing"}}, "t");
  EXPECT_TRUE(result.permuted.empty());
  EXPECT_EQ(file, original);
}

void expect_refusal(std::string file, const CheckpointGeometry& g, const ConvertOptions& options,
                    const std::vector<std::string>& parts) {
  const std::string before = file;
  try {
    convert_safetensors(file, g, options, "in.safetensors");
    ADD_FAILURE() << "accepted";
  } catch (const Error& error) {
    for (const std::string& part : parts) EXPECT_THAT(error.what(), HasSubstr(part));
  }
  EXPECT_EQ(file, before);  // nothing changed: every check runs before the first byte moves
}

TEST(ConvertWeights, RefusesWhatItCannotConvertNamingTheTensor) {
  const CheckpointGeometry g = llama_geometry(4, 2, 8, 8);
  std::mt19937_64 rng(1);
  const safetensors::TensorData good_q{"model.layers.0.self_attn.q_proj.weight", "F32", {32, 3}, random_floats(96, rng)};
  auto with = [&](safetensors::TensorData bad) { return safetensors::serialize({good_q, bad}); };
  expect_refusal(with({"model.layers.0.self_attn.k_proj.weight", "F32", {24, 3}, random_floats(72, rng)}), g, {},
                 {"in.safetensors: tensor \"model.layers.0.self_attn.k_proj.weight\" (k) has 24 rows (shape [24, 3])",
                  "the config (test config) gives 2 heads x head_dim 8 = 16 rows"});
  expect_refusal(with({"model.layers.0.self_attn.k_proj.weight", "I8", {16, 3}, std::string(48, '\1')}), g, {},
                 {"\"model.layers.0.self_attn.k_proj.weight\" (k) has dtype I8"});
  expect_refusal(with({"model.layers.0.self_attn.k_proj.weight", "F8_E4M3", {16, 3}, std::string(48, '\1')}), g, {},
                 {"has dtype F8_E4M3"});
  expect_refusal(with({"model.layers.0.self_attn.k_proj.qweight", "I32", {16, 3}, std::string(192, '\1')}), g, {},
                 {"\"model.layers.0.self_attn.k_proj.qweight\" belongs to the k projection but is not its weight or bias"});
  expect_refusal(with({"model.layers.0.self_attn.qkv_proj.weight", "F32", {16, 3}, random_floats(48, rng)}), g, {},
                 {"\"model.layers.0.self_attn.qkv_proj.weight\" is a fused q/k/v projection"});
  expect_refusal(with({"gpt_neox.layers.0.attention.query_key_value.weight", "F32", {16, 3}, random_floats(48, rng)}), g,
                 {}, {"query_key_value.weight\" is a fused q/k/v projection"});
  expect_refusal(with({"model.layers.0.self_attn.k_proj.weight", "F32", {16, 3, 1}, random_floats(48, rng)}), g, {},
                 {"(k) has shape [16, 3, 1]"});
  expect_refusal(with({"model.layers.0.self_attn.k_proj.bias", "F32", {8}, random_floats(8, rng)}), g, {},
                 {"k_proj.bias\" (k) has 8 rows"});
  expect_refusal(with({"x.weight", "F32", {1}, random_floats(1, rng)}), g, {.q_modules = {"self_attn.q_proj"}, .k_modules = {"self_attn.q_proj"}},
                 {"matches both the q and the k modules"});
  expect_refusal(with({"x.weight", "F32", {1}, random_floats(1, rng)}), g, {.to = static_cast<Style>(7)},
                 {"to must be interleaved or half-split (got 7)"});
  CheckpointGeometry odd = g;
  odd.rotary_dim = 7;
  expect_refusal(with({"x.weight", "F32", {1}, random_floats(1, rng)}), odd, {}, {"invalid geometry from test config"});
  expect_refusal("not a safetensors file", g, {}, {"in.safetensors: header length"});
}

TEST(ConvertWeights, GeometryFromConfigs) {
  CheckpointGeometry g = checkpoint_geometry(
      R"({"model_type":"llama","hidden_size":64,"num_attention_heads":4,"num_key_value_heads":2,"rope_theta":10000})");
  EXPECT_EQ(g.num_attention_heads, 4);
  EXPECT_EQ(g.num_key_value_heads, 2);
  EXPECT_EQ(g.head_dim, 16);
  EXPECT_EQ(g.rotary_dim, 16);
  EXPECT_EQ(g.config_pairing, Style::NeoX);
  g = checkpoint_geometry(R"({"hidden_size":64,"num_attention_heads":4,"head_dim":32,"partial_rotary_factor":0.5})");
  EXPECT_EQ(g.head_dim, 32);
  EXPECT_EQ(g.rotary_dim, 16);
  EXPECT_EQ(g.num_key_value_heads, 4);
  g = checkpoint_geometry(R"({"model_type":"gpt_neox","hidden_size":96,"num_attention_heads":4,"rotary_pct":0.25})");
  EXPECT_EQ(g.head_dim, 24);
  EXPECT_EQ(g.rotary_dim, 6);
  g = checkpoint_geometry(R"({"model_type":"deepseek_v3","hidden_size":64,"num_attention_heads":4,"num_key_value_heads":4,
      "qk_nope_head_dim":16,"qk_rope_head_dim":8,"kv_lora_rank":32,"q_lora_rank":24,"v_head_dim":16})");
  EXPECT_TRUE(g.mla());
  EXPECT_EQ(g.head_dim, 24);
  EXPECT_EQ(g.rotary_offset, 16);
  EXPECT_EQ(g.rotary_dim, 8);
  EXPECT_EQ(g.kv_lora_rank, 32);
  EXPECT_EQ(g.config_pairing, Style::GPTJ);
  g = checkpoint_geometry(R"({"dim":4096,"n_layers":32,"n_heads":32,"n_kv_heads":8,"rope_theta":500000})", "params.json");
  EXPECT_EQ(g.head_dim, 128);
  EXPECT_EQ(g.num_key_value_heads, 8);
  EXPECT_EQ(g.config_pairing, Style::GPTJ);

  auto refused = [](const char* json, const char* part) {
    try {
      checkpoint_geometry(json, "c.json");
      ADD_FAILURE() << "accepted " << json;
    } catch (const ConfigError& error) {
      EXPECT_THAT(error.what(), HasSubstr(part));
    }
  };
  refused(R"({"head_dim":64})", "num_attention_heads is missing");
  refused(R"({"hidden_size":64,"num_attention_heads":4,"qk_rope_head_dim":8,"kv_lora_rank":32})",
          "needs kv_lora_rank, qk_rope_head_dim and qk_nope_head_dim (got kv_lora_rank, qk_rope_head_dim, no qk_nope_head_dim)");
  refused(R"({"dim":100,"n_heads":3})", "dim 100 must be a multiple of n_heads 3");
  refused(R"({"dim":64,"n_heads":4,"n_kv_heads":3})", "n_kv_heads must divide n_heads 4 (got 3)");
  refused(R"({"dim":64,"n_heads":0})", "n_heads must be a positive integer (got number 0)");
  refused(R"([1])", "a config must be a JSON object");
}

class TempDir {
 public:
  TempDir() : path_(fs::temp_directory_path() / ("rotary_convert_" + std::to_string(::getpid()))) {
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

void write(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }
std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST(ConvertWeights, FilesRoundTripAndFailuresLeaveNoOutput) {
  const TempDir dir;
  const CheckpointGeometry g = llama_geometry(4, 2, 8, 8);
  const std::string original = random_checkpoint(g, 21);
  write(dir.file("in.safetensors"), original);
  convert_weights(dir.file("in.safetensors"), dir.file("mid.safetensors"), g, {.to = Style::GPTJ});
  convert_weights(dir.file("mid.safetensors"), dir.file("back.safetensors"), g, {.to = Style::NeoX});
  EXPECT_EQ(read(dir.file("back.safetensors")), original);
  EXPECT_NE(read(dir.file("mid.safetensors")), original);

  // Dry run: everything checked, nothing written.
  const ConvertResult dry = convert_weights(dir.file("in.safetensors"), dir.file("dry.safetensors"), g,
                                            {.to = Style::GPTJ, .dry_run = true});
  EXPECT_EQ(dry.permuted.size(), 8u);
  EXPECT_FALSE(fs::exists(dir.file("dry.safetensors")));

  // Writing over the input is refused, under any spelling of its name.
  try {
    convert_weights(dir.file("in.safetensors"), dir.file("./in.safetensors"), g, {});
    ADD_FAILURE() << "accepted";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("is the input"));
  }
  // A malformed input leaves an existing output as it was, and no temporary file behind.
  write(dir.file("bad.safetensors"), original.substr(0, original.size() - 1));
  write(dir.file("kept.safetensors"), "previous contents");
  EXPECT_THROW(convert_weights(dir.file("bad.safetensors"), dir.file("kept.safetensors"), g, {}), Error);
  EXPECT_EQ(read(dir.file("kept.safetensors")), "previous contents");
  // A shape that does not fit the config: no output at all.
  EXPECT_THROW(convert_weights(dir.file("in.safetensors"), dir.file("new.safetensors"), llama_geometry(4, 4, 8, 8), {}),
               Error);
  EXPECT_FALSE(fs::exists(dir.file("new.safetensors")));
  int files = 0;
  for (const auto& entry : fs::directory_iterator(dir.file(""))) files += entry.is_regular_file() ? 1 : 0;
  EXPECT_EQ(files, 5);  // in, mid, back, bad, kept: no temporary file left
  // Missing input and a missing output directory name the path.
  EXPECT_THROW(convert_weights(dir.file("none.safetensors"), dir.file("x.safetensors"), g, {}), Error);
  EXPECT_THROW(convert_weights(dir.file("in.safetensors"), dir.file("no/such/dir/x.safetensors"), g, {}), Error);
}

// A checkpoint whose copied tensors span several of convert_weights' 8 MiB pieces, with q and k
// tensors between and after them: the streamed file equals the in-memory conversion byte for byte.
TEST(ConvertWeights, StreamedFileEqualsTheInMemoryConversion) {
  const TempDir dir;
  const CheckpointGeometry g = llama_geometry(4, 2, 8, 8);
  std::mt19937_64 rng(33);
  std::vector<safetensors::TensorData> tensors;
  tensors.push_back({"model.layers.0.self_attn.q_proj.weight", "F32", {q_rows(g), kInputs}, random_floats(q_rows(g) * kInputs, rng)});
  tensors.push_back({"model.embed_tokens.weight", "F32", {(int64_t{5} << 20) + 3}, random_floats((int64_t{5} << 20) + 3, rng)});
  tensors.push_back({"model.layers.0.self_attn.k_proj.weight", "BF16", {k_rows(g), kInputs}, random_floats(k_rows(g) * kInputs / 2, rng)});
  tensors.push_back({"model.layers.0.mlp.up_proj.weight", "F32", {int64_t{2} << 20}, random_floats(int64_t{2} << 20, rng)});
  tensors.push_back({"model.layers.1.self_attn.k_proj.bias", "F32", {k_rows(g)}, random_floats(k_rows(g), rng)});
  const std::string original = safetensors::serialize(tensors, {{"format", "pt"}});
  ASSERT_GT(original.size(), size_t{3} * (8 << 20));  // more than three pieces
  write(dir.file("in.safetensors"), original);
  for (const Style to : {Style::GPTJ, Style::NeoX}) {
    std::string expected = original;
    const ConvertResult in_memory = convert_safetensors(expected, g, {.to = to});
    const ConvertResult streamed = convert_weights(dir.file("in.safetensors"), dir.file("out.safetensors"), g, {.to = to});
    EXPECT_EQ(read(dir.file("out.safetensors")), expected);
    EXPECT_NE(expected, original);
    ASSERT_EQ(streamed.permuted.size(), 3u);
    EXPECT_EQ(streamed.permuted.size(), in_memory.permuted.size());
    EXPECT_EQ(streamed.copied, 2);
    EXPECT_EQ(streamed.file_bytes, static_cast<int64_t>(original.size()));
  }
}

// A checkpoint of one large float32 tensor (`floats` values, one random byte per 4 KiB: cheap
// to make, not all zeros) and a q projection to permute, written to `path`.
void write_large_checkpoint(const std::string& path, const CheckpointGeometry& g, int64_t floats, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string bytes(static_cast<size_t>(floats * 4), '\0');
  for (size_t i = 0; i < bytes.size(); i += 4096) bytes[i] = static_cast<char>(rng());
  std::vector<safetensors::TensorData> tensors;
  tensors.push_back({"model.embed_tokens.weight", "F32", {floats}, std::move(bytes)});
  tensors.push_back({"model.layers.0.self_attn.q_proj.weight", "F32", {q_rows(g), kInputs}, random_floats(q_rows(g) * kInputs, rng)});
  write(path, safetensors::serialize(tensors));
}

// An input rewritten in place while convert_weights reads it would give a mix of two files: its
// modification time moves, and the conversion is refused naming the input, the existing output
// left as it was and no temporary file behind. Another thread keeps setting the input's mtime
// from before the conversion starts until it returns: the conversion of a 96 MiB file (12
// pieces) takes tens of milliseconds, each change microseconds. (A file that grows is refused by
// the same check of size and mtime at the end; here a thread appending to it would usually be
// caught first, by the header's "trailing bytes" check, which makes no test of this one.)
TEST(ConvertWeights, AnInputRewrittenWhileReadIsRefusedAndNothingIsWritten) {
  const TempDir dir;
  const CheckpointGeometry g = llama_geometry(4, 2, 8, 8);
  write_large_checkpoint(dir.file("in.safetensors"), g, int64_t{24} << 20, 35);  // 96 MiB
  write(dir.file("kept.safetensors"), "previous contents");
  const int fd = ::open(dir.file("in.safetensors").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  std::atomic<bool> stop{false};
  std::atomic<int64_t> changes{0};
  std::thread changer([&] {
    for (int64_t i = 1; !stop.load(); ++i) {
      const struct timespec times[2] = {{.tv_sec = 0, .tv_nsec = UTIME_OMIT}, {.tv_sec = 1'000'000 + i, .tv_nsec = 0}};
      if (::futimens(fd, times) == 0) changes.fetch_add(1);
      std::this_thread::yield();
    }
  });
  while (changes.load() == 0) std::this_thread::yield();
  try {
    convert_weights(dir.file("in.safetensors"), dir.file("kept.safetensors"), g, {.to = Style::GPTJ});
    ADD_FAILURE() << "accepted an input that changed while it was read";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("convert-weights: " + dir.file("in.safetensors") +
                                        " changed while it was read (" + std::to_string(fs::file_size(dir.file("in.safetensors"))) +
                                        " bytes expected); nothing was written"));
  }
  stop = true;
  changer.join();
  ::close(fd);
  EXPECT_EQ(read(dir.file("kept.safetensors")), "previous contents");
  int files = 0;
  for (const auto& entry : fs::directory_iterator(dir.file(""))) files += entry.is_regular_file() ? 1 : 0;
  EXPECT_EQ(files, 2);  // in, kept: no temporary file left
  // Left alone, the same file converts (the refusal was the changes').
  convert_weights(dir.file("in.safetensors"), dir.file("kept.safetensors"), g, {.to = Style::GPTJ});
  EXPECT_EQ(fs::file_size(dir.file("kept.safetensors")), fs::file_size(dir.file("in.safetensors")));
}

// The peak memory of a conversion is its pieces and its largest q / k tensor, not the file: a
// 192 MiB checkpoint converts in a child process whose peak resident set grows by less than
// 64 MiB (reading the file whole, as an earlier convert_weights did, grew it by 192).
TEST(ConvertWeights, MemoryDoesNotGrowWithTheFile) {
  const TempDir dir;
  const CheckpointGeometry g = llama_geometry(4, 2, 8, 8);
  write_large_checkpoint(dir.file("big.safetensors"), g, int64_t{48} << 20, 34);  // 192 MiB
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Reset the peak resident set to the current one (Linux >= 4.0), convert, report the growth
    // in MiB as the exit status (capped at 250; 255 = could not measure).
    const auto status_kib = [](const char* field) -> long {
      std::ifstream status("/proc/self/status");
      std::string line;
      while (std::getline(status, line)) {
        if (line.rfind(field, 0) == 0) return std::atol(line.c_str() + std::strlen(field));
      }
      return -1;
    };
    std::ofstream("/proc/self/clear_refs") << "5";
    const long before = status_kib("VmHWM:");
    try {
      convert_weights(dir.file("big.safetensors"), dir.file("big_out.safetensors"), g, {.to = Style::GPTJ});
    } catch (...) {
      ::_exit(254);
    }
    const long after = status_kib("VmHWM:");
    ::_exit(before < 0 || after < 0 ? 255 : static_cast<int>(std::min<long>(250, (after - before) / 1024)));
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  const int grown_mib = WEXITSTATUS(status);
  ASSERT_NE(grown_mib, 254) << "the conversion threw";
  if (grown_mib == 255) GTEST_SKIP() << "no /proc/self/status VmHWM here";
  EXPECT_LT(grown_mib, 64) << "peak resident set grew by " << grown_mib << " MiB converting a 192 MiB file";
  EXPECT_EQ(fs::file_size(dir.file("big_out.safetensors")), fs::file_size(dir.file("big.safetensors")));
}


// A sharded checkpoint as transformers' save_pretrained writes one (max_shard_size): the tensors
// of random_checkpoint's layout split over three files model-0000N-of-00003.safetensors, an
// index {"metadata": {"total_size": ...}, "weight_map": {...}}, and the files beside them. Also
// the same tensors as one file, to compare with.
struct ShardedCheckpoint {
  std::vector<std::string> shard_names;
  std::string index;   // the index's text
  std::string single;  // every tensor in one file, shard by shard in order
};

ShardedCheckpoint write_sharded_checkpoint(const fs::path& folder, const CheckpointGeometry& g, uint64_t seed) {
  fs::create_directories(folder);
  const std::string file = random_checkpoint(g, seed);
  const safetensors::Header header = safetensors::parse(file, "checkpoint");
  std::vector<safetensors::TensorData> all;
  for (const safetensors::TensorEntry& t : header.tensors) {
    all.push_back({t.name, t.dtype, t.shape, file.substr(static_cast<size_t>(header.data_start + t.begin),
                                                         static_cast<size_t>(t.end - t.begin))});
  }
  // embed_tokens and layer 0's q in the first shard; layer 0's other tensors in the second;
  // layer 1 in the third (q and k of one layer in different shards, as real splits fall).
  const std::vector<std::vector<size_t>> split = {{0, 1}, {2, 3, 4, 5}, {6, 7, 8, 9, 10}};
  ShardedCheckpoint sharded;
  std::string weight_map;
  int64_t total_size = 0;
  for (size_t s = 0; s < split.size(); ++s) {
    const std::string name = "model-0000" + std::to_string(s + 1) + "-of-00003.safetensors";
    sharded.shard_names.push_back(name);
    std::vector<safetensors::TensorData> tensors;
    for (const size_t i : split[s]) {
      tensors.push_back(all[i]);
      weight_map += std::string(weight_map.empty() ? "" : ",\n") + "    \"" + all[i].name + "\": \"" + name + "\"";
      total_size += static_cast<int64_t>(all[i].bytes.size());
    }
    write((folder / name).string(), safetensors::serialize(tensors, {{"format", "pt"}}));
  }
  sharded.index = "{\n  \"metadata\": {\"total_size\": " + std::to_string(total_size) + "},\n  \"weight_map\": {\n" +
                  weight_map + "\n  }\n}\n";
  write((folder / "model.safetensors.index.json").string(), sharded.index);
  write((folder / "config.json").string(), R"({"num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8})");
  write((folder / "tokenizer.json").string(), R"({"version": "1.0"})");
  std::vector<safetensors::TensorData> ordered;
  for (const auto& shard : split) {
    for (const size_t i : shard) ordered.push_back(all[i]);
  }
  sharded.single = safetensors::serialize(ordered, {{"format", "pt"}});
  return sharded;
}

// The bytes of tensor `name` in a safetensors file, and its header entry's dtype and shape.
std::string tensor_bytes(const std::string& file, const std::string& name) {
  const safetensors::Header header = safetensors::parse(file, "checkpoint");
  for (const auto& t : header.tensors) {
    if (t.name == name) {
      std::string shape;
      for (const int64_t extent : t.shape) shape += std::to_string(extent) + ",";
      return t.dtype + "[" + shape + "]:" + file.substr(static_cast<size_t>(header.data_start + t.begin), static_cast<size_t>(t.end - t.begin));
    }
  }
  ADD_FAILURE() << "no tensor " << name;
  return {};
}

std::vector<std::string> names_in(const fs::path& folder) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(folder)) {
    names.push_back(entry.path().filename().string() + (entry.is_directory() ? "/" : ""));
  }
  std::sort(names.begin(), names.end());
  return names;
}

// A sharded checkpoint converts to the same tensors as the one file holding them all: each shard
// keeps its name and tensors (header unchanged), the index is the same, the folder's other files
// are copied, sub-folders and unconverted weights left out; converting back gives every file.
TEST(ConvertCheckpoint, ShardedCheckpointConvertsEqualToTheSingleFile) {
  const TempDir dir;
  const CheckpointGeometry g = llama_geometry(4, 2, 8, 8);
  const fs::path in = dir.file("model");
  const ShardedCheckpoint sharded = write_sharded_checkpoint(in, g, 41);
  write((in / "pytorch_model.bin").string(), "unconverted weights");
  fs::create_directories(in / "original");
  write((in / "original" / "consolidated.00.pth").string(), "unconverted weights");

  for (const Style to : {Style::GPTJ, Style::NeoX}) {
    SCOPED_TRACE(to == Style::GPTJ ? "to interleaved" : "to half-split");
    const fs::path out = dir.file(to == Style::GPTJ ? "interleaved" : "half");
    const CheckpointConversion conversion = convert_checkpoint(in.string(), out.string(), g, {.to = to});
    std::string expected = sharded.single;
    const ConvertResult single = convert_safetensors(expected, g, {.to = to});

    EXPECT_EQ(conversion.layout, CheckpointLayout::Sharded);
    EXPECT_EQ(conversion.input, (in / "model.safetensors.index.json").string());
    EXPECT_EQ(conversion.index_name, "model.safetensors.index.json");
    ASSERT_EQ(conversion.shards.size(), 3u);
    EXPECT_EQ(conversion.shards[0].name, "model-00001-of-00003.safetensors");
    EXPECT_EQ(conversion.shards[0].permuted, 1);  // layer 0's q weight
    EXPECT_EQ(conversion.shards[1].permuted, 3);  // layer 0's q bias, k weight and bias
    EXPECT_EQ(conversion.shards[2].permuted, 4);
    EXPECT_EQ(conversion.total.permuted.size(), 8u);
    EXPECT_EQ(conversion.total.copied, 3);
    ASSERT_EQ(conversion.total.permuted.size(), single.permuted.size());
    for (size_t i = 0; i < single.permuted.size(); ++i) EXPECT_EQ(conversion.total.permuted[i].name, single.permuted[i].name);
    EXPECT_EQ(conversion.copied_files, (std::vector<std::string>{"config.json", "tokenizer.json"}));
    EXPECT_EQ(conversion.left_out, (std::vector<std::string>{"original/", "pytorch_model.bin"}));

    EXPECT_EQ(names_in(out), (std::vector<std::string>{"config.json", "model-00001-of-00003.safetensors",
                                                        "model-00002-of-00003.safetensors",
                                                        "model-00003-of-00003.safetensors",
                                                        "model.safetensors.index.json", "tokenizer.json"}));
    EXPECT_EQ(read((out / "model.safetensors.index.json").string()), sharded.index);
    EXPECT_EQ(read((out / "config.json").string()), read((in / "config.json").string()));
    EXPECT_EQ(read((out / "tokenizer.json").string()), R"({"version": "1.0"})");
    int64_t bytes = 0;
    for (const std::string& name : sharded.shard_names) {
      const std::string original = read((in / name).string());
      const std::string converted = read((out / name).string());
      const safetensors::Header header = safetensors::parse(converted, name);
      EXPECT_EQ(converted.substr(0, static_cast<size_t>(header.data_start)),
                original.substr(0, static_cast<size_t>(header.data_start)));
      EXPECT_EQ(converted.size(), original.size());
      for (const auto& t : header.tensors) EXPECT_EQ(tensor_bytes(converted, t.name), tensor_bytes(expected, t.name)) << t.name;
      EXPECT_NE(converted, original);  // every shard holds a q or k tensor
      bytes += static_cast<int64_t>(original.size());
    }
    EXPECT_EQ(conversion.total.file_bytes, bytes);
  }
  // There and back: every file as it was.
  convert_checkpoint(dir.file("interleaved"), dir.file("back"), g, {.to = Style::NeoX});
  for (const std::string& name : names_in(dir.file("back"))) {
    EXPECT_EQ(read(dir.file("back/" + name)), read((in / name).string())) << name;
  }
  // Only the outputs are beside the input: no temporary folder is left.
  EXPECT_EQ(names_in(dir.file("")), (std::vector<std::string>{"back/", "half/", "interleaved/", "model/"}));
}

TEST(ConvertCheckpoint, AFolderOrAnIndexAsInput) {
  const TempDir dir;
  const CheckpointGeometry g = llama_geometry(4, 2, 8, 8);
  // A folder holding model.safetensors: converted into a new folder, as the file alone would be.
  fs::create_directories(dir.file("single"));
  write(dir.file("single/model.safetensors"), random_checkpoint(g, 42));
  write(dir.file("single/config.json"), "{}");
  const CheckpointConversion single = convert_checkpoint(dir.file("single"), dir.file("single_out/"), g, {});
  EXPECT_EQ(single.layout, CheckpointLayout::Folder);
  EXPECT_EQ(single.input, dir.file("single/model.safetensors"));
  EXPECT_EQ(single.total.permuted.size(), 8u);
  convert_weights(dir.file("single/model.safetensors"), dir.file("single.safetensors"), g, {});
  EXPECT_EQ(names_in(dir.file("single_out")), (std::vector<std::string>{"config.json", "model.safetensors"}));
  EXPECT_EQ(read(dir.file("single_out/model.safetensors")), read(dir.file("single.safetensors")));
  // A sharded checkpoint's index given itself.
  write_sharded_checkpoint(dir.file("sharded"), g, 43);
  const CheckpointConversion by_index =
      convert_checkpoint(dir.file("sharded/model.safetensors.index.json"), dir.file("by_index"), g, {});
  EXPECT_EQ(by_index.layout, CheckpointLayout::Sharded);
  EXPECT_EQ(by_index.shards.size(), 3u);
  convert_checkpoint(dir.file("sharded"), dir.file("by_folder"), g, {});
  for (const std::string& name : names_in(dir.file("by_folder"))) {
    EXPECT_EQ(read(dir.file("by_index/" + name)), read(dir.file("by_folder/" + name))) << name;
  }
  // A .safetensors file: convert_weights itself.
  const CheckpointConversion file = convert_checkpoint(dir.file("single/model.safetensors"), dir.file("f.safetensors"), g, {});
  EXPECT_EQ(file.layout, CheckpointLayout::File);
  EXPECT_TRUE(file.shards.empty());
  EXPECT_EQ(read(dir.file("f.safetensors")), read(dir.file("single.safetensors")));
  // Dry run: everything checked and counted, nothing written.
  const CheckpointConversion dry = convert_checkpoint(dir.file("sharded"), dir.file("dry"), g, {.dry_run = true});
  EXPECT_EQ(dry.total.permuted.size(), 8u);
  EXPECT_EQ(dry.shards.size(), 3u);
  EXPECT_FALSE(fs::exists(dir.file("dry")));
}

// Every refusal is made before anything is written: no output folder, no temporary folder.
TEST(ConvertCheckpoint, InconsistentShardsAreRefusedWithNothingWritten) {
  const TempDir dir;
  const CheckpointGeometry g = llama_geometry(4, 2, 8, 8);
  const fs::path in = dir.file("model");
  const ShardedCheckpoint sharded = write_sharded_checkpoint(in, g, 44);
  const auto refused = [&](const std::string& in_path, const std::string& out, const CheckpointGeometry& geometry,
                           const std::string& message) {
    SCOPED_TRACE(message);
    try {
      convert_checkpoint(in_path, out, geometry, {});
      ADD_FAILURE() << "accepted";
    } catch (const Error& error) {
      EXPECT_THAT(error.what(), HasSubstr(message));
    }
    EXPECT_EQ(names_in(dir.file("")), (std::vector<std::string>{"model/"}));
  };
  const std::string index_path = (in / "model.safetensors.index.json").string();
  const std::string out = dir.file("out");

  // A shard missing.
  fs::rename(in / sharded.shard_names[2], in / "moved.bak");
  refused(in.string(), out, g,
          index_path + ": the index names shard files that " + in.string() +
              " does not hold: model-00003-of-00003.safetensors; nothing was written");
  fs::rename(in / "moved.bak", in / sharded.shard_names[2]);
  // The index naming a tensor its shard does not hold.
  std::string index = sharded.index;
  const std::string entry = "\"model.layers.1.self_attn.v_proj.weight\": \"model-00003-of-00003.safetensors\"";
  ASSERT_NE(index.find(entry), std::string::npos);
  write(index_path, std::string(index).replace(index.find(entry), entry.size(),
                                               "\"model.layers.1.self_attn.v_proj.weight\": \"model-00003-of-00003.safetensors\",\n"
                                               "    \"model.norm.weight\": \"model-00002-of-00003.safetensors\""));
  refused(in.string(), out, g,
          index_path + ": weight_map maps tensor \"model.norm.weight\" to model-00002-of-00003.safetensors, which does "
                       "not hold it; nothing was written");
  write(index_path, std::string(index).replace(index.find(entry), entry.size(),
                                               "\"model.layers.1.self_attn.v_proj.weight\": \"model-00001-of-00003.safetensors\""));
  refused(in.string(), out, g,
          index_path + ": weight_map maps tensor \"model.layers.1.self_attn.v_proj.weight\" to "
                       "model-00001-of-00003.safetensors, which does not hold it; nothing was written");
  // A shard holding a tensor the index maps to another shard, or does not list.
  const std::string embed = "\"model.embed_tokens.weight\": \"model-00001-of-00003.safetensors\"";
  ASSERT_NE(index.find(embed), std::string::npos);
  write(index_path, std::string(index).replace(index.find(embed), embed.size(),
                                               "\"model.embed_tokens.weight\": \"model-00003-of-00003.safetensors\""));
  refused(in.string(), out, g,
          (in / "model-00001-of-00003.safetensors").string() + ": holds tensor \"model.embed_tokens.weight\", which the "
              "index " + index_path + " maps to model-00003-of-00003.safetensors; nothing was written");
  write(index_path, std::string(index).replace(index.find(entry) - 6, entry.size() + 6, ""));
  refused(in.string(), out, g,
          (in / "model-00003-of-00003.safetensors").string() +
              ": holds tensor \"model.layers.1.self_attn.v_proj.weight\", which the index " + index_path +
              " does not list; nothing was written");
  // A shard outside the folder, a tensor twice, no weight_map.
  write(index_path, R"({"weight_map": {"a.weight": "../model-00001-of-00003.safetensors"}})");
  refused(in.string(), out, g, "weight_map[\"a.weight\"] must be a .safetensors file name in the index's folder, without a path (got \"../model-00001-of-00003.safetensors\")");
  write(index_path, R"({"weight_map": {"a": "x.safetensors", "a": "y.safetensors"}})");
  refused(in.string(), out, g, "tensor \"a\" appears twice in weight_map (\"x.safetensors\" and \"y.safetensors\")");
  write(index_path, R"({"metadata": {}})");
  refused(in.string(), out, g, "must be a JSON object with a weight_map {tensor: shard file} (got object");
  write(index_path, sharded.index);
  // A q / k tensor of the last shard that does not fit the config: refused before the first
  // shard is written.
  refused(in.string(), out, llama_geometry(4, 4, 8, 8),
          (in / "model-00002-of-00003.safetensors").string() + ": tensor \"model.layers.0.self_attn.k_proj.weight\" (k) has 16 rows");
  // An output that exists, or names a file.
  fs::create_directories(dir.file("model/sub"));
  refused(in.string(), (in / "sub").string(), g, "convert-weights: OUT " + (in / "sub").string() + " exists");
  fs::remove(dir.file("model/sub"));
  refused(in.string(), dir.file("out.safetensors"), g, "names a .safetensors file");
  // A folder with no checkpoint, or two.
  refused((in / "..").string(), out, g, "holds neither model.safetensors nor model.safetensors.index.json");
  write((in / "model.safetensors").string(), sharded.single);
  refused(in.string(), out, g, "holds both model.safetensors and model.safetensors.index.json");
  fs::remove(in / "model.safetensors");
  // Then it converts.
  convert_checkpoint(in.string(), out, g, {});
  EXPECT_TRUE(fs::exists(dir.file("out/model.safetensors.index.json")));
}

}  // namespace
}  // namespace rotary
