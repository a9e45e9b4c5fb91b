// tests/cpu/reference_golden_test.cpp: reference::apply and its tables against every positive
// case of tests/golden (Hugging Face transformers' float32 path, and exact values rounded
// once to float64; see tests/golden/README.md).
//
// Checks, per case (p = position, s = max(1, attention_scaling), (a, c) = the pair's inputs):
//   1. Exact table + Exact64 apply on float64 inputs vs exact_f64.{q,k}_embed_half_split (NeoX)
//      and *_interleaved (GPT-J): |delta| <= 1e-15 (1 + p) s (|a| + |c|). README: a plain float64
//      evaluation keeps cos/sin within 3.8e-16 max(p, 1) s; the rotation adds two products and
//      a sum (a few 1e-16 relative), the table's row_f64 is ~1e-15 absolute at any position.
//      The pass-through tail must be bit-exact.
//   2. Exact table rows: row_f64 vs exact_f64.cos/sin within 1e-15 (1 + p) s; the float32 rows
//      within 1 float32 ulp of exact_f64 rounded to float32 (table.hpp's contract).
//   3. HFCompat table given HF's inv_freq buffer: float32 rows vs hf_f32.cos/sin within
//      2 * 2^-23 s at every p < 2^24 (README: "within 2 float32 ulps of attention_scaling ...
//      independent of position"; torch's cosf is within 1 ulp of correctly rounded, ours is
//      correctly rounded, and both scale by fl32(scaling)).
//   4. reference::apply (TableFloat32) on that table, float32 storage, vs hf_f32.{q,k}_embed.
//      For an element x with partner y (x' = x C -+ y S), HF computes fl32(fl32(x C) -+ fl32(y S)):
//      three roundings of at most 2^-24 (|x C| + |y S|) each; the reference rounds once from
//      double. With our C', S' possibly differing from HF's C, S (check 3),
//      |delta| <= 2 * 2^-23 (|x C| + |y S|) + |x| |C' - C| + |y| |S' - S|.
//   5. HFCompat table from the config alone: inv_freq_f32() within 1 float32 ulp of HF's buffer
//      (table.hpp: torch's vectorized pow and glibc's powf differ by 1 ulp in ~1% of entries).
//   6. DeepSeek-V3 (rope_interleave): hf_f32.deepseek_interleave_{q,k}_embed equals the exact
//      GPT-J result de-interleaved ([0, 2, 4, ..., 1, 3, 5, ...]) within HF's float32 error,
//      README: |hf - exact| <= scaling (1e-7 p + 3e-7) per unit input, times (|a| + |c|).
// The largest error / tolerance ratio of each check is printed once at the end of the run.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "rotary/apply.hpp"
#include "rotary/hf_config.hpp"
#include "core/json.hpp"
#include "rotary/table.hpp"
#include "rotary/tensor.hpp"
#include "tests/support/golden_files.hpp"
#include "tests/support/ulp.hpp"

namespace rotary {
namespace {

// ---- the cases, parsed once per test binary ---------------------------------------------------

struct GoldenCase {
  std::string name;
  RopeSpec spec;
  std::vector<int64_t> positions;
  int64_t q_heads = 0, k_heads = 0, head_dim = 0, rotary_dim = 0;
  std::vector<double> q, k;  // float32 values, [n_positions, heads, head_dim]
  std::vector<float> hf_inv_freq;
  double hf_scaling = 1.0;
  std::vector<double> hf_cos, hf_sin, hf_q_embed, hf_k_embed;  // cos/sin: [n_positions, rotary_dim]
  std::vector<double> exact_cos, exact_sin;
  std::vector<double> exact_q_half_split, exact_k_half_split, exact_q_interleaved, exact_k_interleaved;
  std::vector<double> deepseek_q, deepseek_k;  // empty except for the DeepSeek case

  int64_t n_positions() const { return static_cast<int64_t>(positions.size()); }
  int64_t seq_len() const { return *std::max_element(positions.begin(), positions.end()) + 1; }
};

using test::tensor_data;
using test::tensor_shape;

// Parses a case file the first time it is asked for; keeps only the numbers the checks need.
const GoldenCase& load_case(const std::filesystem::path& path) {
  static std::map<std::string, std::unique_ptr<GoldenCase>> cache;
  auto& slot = cache[path.string()];
  if (slot) return *slot;
  const json::Value root = json::parse_file(path.string());
  auto c = std::make_unique<GoldenCase>();
  c->name = path.stem().string();
  c->spec = parse_hf_config(json::serialize(*root.find("config")), path.filename().string()).spec;
  for (const json::Value& p : root.find("positions")->as_array()) c->positions.push_back(p.as_int64());
  const json::Value& inputs = *root.find("inputs");
  const json::Value& hf = *root.find("hf_f32");
  const json::Value& exact = *root.find("exact_f64");
  const std::vector<int64_t> q_shape = tensor_shape(inputs, "q");
  c->q_heads = q_shape[1];
  c->head_dim = q_shape[2];
  c->k_heads = tensor_shape(inputs, "k")[1];
  c->rotary_dim = root.find("rotary_dim")->as_int64();
  c->q = tensor_data(inputs, "q");
  c->k = tensor_data(inputs, "k");
  for (const double v : tensor_data(hf, "inv_freq")) c->hf_inv_freq.push_back(static_cast<float>(v));
  c->hf_scaling = hf.find("attention_scaling")->as_double();
  c->hf_cos = tensor_data(hf, "cos");
  c->hf_sin = tensor_data(hf, "sin");
  c->hf_q_embed = tensor_data(hf, "q_embed");
  c->hf_k_embed = tensor_data(hf, "k_embed");
  c->deepseek_q = tensor_data(hf, "deepseek_interleave_q_embed");
  c->deepseek_k = tensor_data(hf, "deepseek_interleave_k_embed");
  c->exact_cos = tensor_data(exact, "cos");
  c->exact_sin = tensor_data(exact, "sin");
  c->exact_q_half_split = tensor_data(exact, "q_embed_half_split");
  c->exact_k_half_split = tensor_data(exact, "k_embed_half_split");
  c->exact_q_interleaved = tensor_data(exact, "q_embed_interleaved");
  c->exact_k_interleaved = tensor_data(exact, "k_embed_interleaved");
  slot = std::move(c);
  return *slot;
}

// ---- margins: the largest error / tolerance per check, printed once ----------------------------

struct Margin {
  double ratio = -1.0;  // below any ratio: the first record sets `where`
  std::string where;
};

std::map<std::string, Margin>& margins() {
  static std::map<std::string, Margin> all;
  return all;
}

void record(const std::string& check, double ratio, const std::string& where) {
  Margin& m = margins()[check];
  if (ratio > m.ratio) m = {ratio, where};
}

class MarginReport : public ::testing::Environment {
 public:
  void TearDown() override {
    if (margins().empty()) return;
    std::cout << "[ReferenceGolden] largest error / tolerance per check:\n";
    for (const auto& [check, m] : margins()) {
      std::cout << "  " << check << ": " << m.ratio << "  (" << m.where << ")\n";
    }
  }
};

[[maybe_unused]] ::testing::Environment* const kMarginReport =
    ::testing::AddGlobalTestEnvironment(new MarginReport);

std::string at(const GoldenCase& c, int64_t token, int64_t head, int64_t element) {
  std::ostringstream out;
  out << c.name << ", position " << c.positions[static_cast<size_t>(token)] << ", head " << head << ", element "
      << element;
  return out.str();
}

// ---- helpers ------------------------------------------------------------------------------------

Positions per_token(const GoldenCase& c) {
  return Positions::per_token(c.positions);
}

TableOptions table_options(const GoldenCase& c, Precision precision) {
  TableOptions options;
  options.precision = precision;
  options.storage = Storage::OnTheFly;  // positions reach 2^24 + 1: no stored rows
  options.seq_len = c.seq_len();        // what HF's forward sees: max(position_ids) + 1
  return options;
}

// The case's inputs in the given storage, BSHD (1, n_positions, heads, head_dim).
struct Buffer {
  std::vector<double> f64;
  std::vector<float> f32;
  TensorView view;
};

Buffer make_buffer(const GoldenCase& c, const std::vector<double>& values, int64_t heads, DType dtype) {
  Buffer b;
  const std::array<int64_t, 4> shape = {1, c.n_positions(), heads, c.head_dim};
  if (dtype == DType::F64) {
    b.f64 = values;
    b.view = contiguous_view(b.f64.data(), DType::F64, Layout::BSHD, shape);
  } else {
    b.f32.assign(values.begin(), values.end());
    b.view = contiguous_view(b.f32.data(), DType::F32, Layout::BSHD, shape);
  }
  return b;
}

double value_at(const Buffer& b, size_t index) { return b.f64.empty() ? b.f32[index] : b.f64[index]; }

// The pair (a, c) element `element` of a head belongs to, in the given style.
std::pair<int64_t, int64_t> pair_of(Style style, int64_t rotary_dim, int64_t element) {
  const int64_t half = rotary_dim / 2;
  if (style == Style::NeoX) {
    const int64_t i = element % half;
    return {i, i + half};
  }
  return {element & ~int64_t{1}, element | 1};
}

// Exact64 apply on float64 inputs, for q (is_q) or k, in a style.
std::vector<double> exact_apply(const GoldenCase& c, Style style, bool is_q) {
  RopeSpec spec = c.spec;
  spec.style = style;
  const CosSinTable table(spec, table_options(c, Precision::Exact));
  const int64_t heads = is_q ? c.q_heads : c.k_heads;
  const Buffer in = make_buffer(c, is_q ? c.q : c.k, heads, DType::F64);
  Buffer out = make_buffer(c, is_q ? c.q : c.k, heads, DType::F64);
  reference::apply(in.view, TensorView{}, out.view, TensorView{}, per_token(c), table, {}, reference::TableValues::Exact64);
  return out.f64;
}

class ReferenceGolden : public ::testing::TestWithParam<std::filesystem::path> {
 protected:
  const GoldenCase& golden() const { return load_case(GetParam()); }
};

// ---- 1. exact apply ------------------------------------------------------------------------------

TEST_P(ReferenceGolden, Exact64ApplyMatchesExactF64InBothStyles) {
  const GoldenCase& c = golden();
  SCOPED_TRACE(c.name);
  ASSERT_EQ(c.spec.rotary_dim, c.rotary_dim);
  const CosSinTable probe(c.spec, table_options(c, Precision::Exact));
  const double scale = std::max(1.0, probe.attention_scaling());
  for (const Style style : {Style::NeoX, Style::GPTJ}) {
    for (const bool is_q : {true, false}) {
      const std::vector<double>& inputs = is_q ? c.q : c.k;
      const std::vector<double>& expected = style == Style::NeoX ? (is_q ? c.exact_q_half_split : c.exact_k_half_split)
                                                                 : (is_q ? c.exact_q_interleaved : c.exact_k_interleaved);
      const std::vector<double> got = exact_apply(c, style, is_q);
      ASSERT_EQ(got.size(), expected.size());
      const int64_t heads = is_q ? c.q_heads : c.k_heads;
      const std::string check = std::string("1 exact apply vs exact_f64 ") + (style == Style::NeoX ? "half_split" : "interleaved");
      for (int64_t t = 0; t < c.n_positions(); ++t) {
        const auto p = static_cast<double>(c.positions[static_cast<size_t>(t)]);
        for (int64_t h = 0; h < heads; ++h) {
          const size_t base = static_cast<size_t>((t * heads + h) * c.head_dim);
          for (int64_t d = 0; d < c.head_dim; ++d) {
            const size_t index = base + static_cast<size_t>(d);
            if (d >= c.rotary_dim) {
              EXPECT_EQ(got[index], expected[index]) << at(c, t, h, d) << " (pass-through)";
              continue;
            }
            const auto [ia, ic] = pair_of(style, c.rotary_dim, d);
            const double size = std::fabs(inputs[base + static_cast<size_t>(ia)]) + std::fabs(inputs[base + static_cast<size_t>(ic)]);
            const double tolerance = 1e-15 * (1.0 + p) * scale * size;
            const double error = std::fabs(got[index] - expected[index]);
            EXPECT_LE(error, tolerance) << at(c, t, h, d) << ": " << got[index] << " vs exact " << expected[index];
            record(check, error / tolerance, at(c, t, h, d));
          }
        }
      }
    }
  }
}

// ---- 2. exact table rows -------------------------------------------------------------------------

TEST_P(ReferenceGolden, ExactTableRowsMatchExactCosSin) {
  const GoldenCase& c = golden();
  SCOPED_TRACE(c.name);
  const CosSinTable table(c.spec, table_options(c, Precision::Exact));
  const double scale = std::max(1.0, table.attention_scaling());
  const int64_t half = c.rotary_dim / 2;
  std::vector<double> cos64(static_cast<size_t>(half)), sin64(static_cast<size_t>(half));
  std::vector<float> cos32(static_cast<size_t>(half)), sin32(static_cast<size_t>(half));
  for (int64_t t = 0; t < c.n_positions(); ++t) {
    const int64_t position = c.positions[static_cast<size_t>(t)];
    table.row_f64(position, cos64.data(), sin64.data());
    table.row(position, cos32.data(), sin32.data());
    const double tolerance = 1e-15 * (1.0 + static_cast<double>(position)) * scale;
    for (int64_t j = 0; j < c.rotary_dim; ++j) {  // cat(freqs, freqs): pair j mod half
      const auto pair = static_cast<size_t>(j % half);
      const size_t index = static_cast<size_t>(t * c.rotary_dim + j);
      const std::string where = c.name + ", position " + std::to_string(position) + ", pair " + std::to_string(pair);
      for (const auto& [got64, got32, exact, what] :
           {std::tuple{cos64[pair], cos32[pair], c.exact_cos[index], "cos"}, std::tuple{sin64[pair], sin32[pair], c.exact_sin[index], "sin"}}) {
        const double error = std::fabs(got64 - exact);
        EXPECT_LE(error, tolerance) << where << " " << what << ": " << got64 << " vs exact " << exact;
        record("2a exact row_f64 vs exact_f64 cos/sin", error / tolerance, where);
        const int64_t ulps = test::ulp_distance(got32, static_cast<float>(exact));
        EXPECT_LE(ulps, 1) << where << " " << what << ": float32 " << got32 << " vs exact " << exact;
        record("2b exact float32 row vs fl32(exact_f64) (ulps / 1)", static_cast<double>(ulps), where);
      }
    }
  }
}

// ---- 3, 4. HF-compatible table and apply -----------------------------------------------------------

TEST_P(ReferenceGolden, HfCompatTableMatchesHfCosSinGivenHfInvFreq) {
  const GoldenCase& c = golden();
  SCOPED_TRACE(c.name);
  TableOptions options = table_options(c, Precision::HFCompat);
  options.hf_inv_freq = c.hf_inv_freq;
  const CosSinTable table(c.spec, options);
  const double tolerance = 2 * 0x1p-23 * std::max(1.0, c.hf_scaling);
  const int64_t half = c.rotary_dim / 2;
  std::vector<float> cos32(static_cast<size_t>(half)), sin32(static_cast<size_t>(half));
  int64_t checked = 0;
  for (int64_t t = 0; t < c.n_positions(); ++t) {
    const int64_t position = c.positions[static_cast<size_t>(t)];
    if (position >= (int64_t{1} << 24)) continue;
    table.row(position, cos32.data(), sin32.data());
    for (int64_t j = 0; j < c.rotary_dim; ++j) {
      const auto pair = static_cast<size_t>(j % half);
      const size_t index = static_cast<size_t>(t * c.rotary_dim + j);
      const std::string where = c.name + ", position " + std::to_string(position) + ", pair " + std::to_string(pair);
      const double cos_error = std::fabs(cos32[pair] - c.hf_cos[index]);
      const double sin_error = std::fabs(sin32[pair] - c.hf_sin[index]);
      EXPECT_LE(cos_error, tolerance) << where << " cos: " << cos32[pair] << " vs HF " << c.hf_cos[index];
      EXPECT_LE(sin_error, tolerance) << where << " sin: " << sin32[pair] << " vs HF " << c.hf_sin[index];
      record("3 hfcompat float32 row vs hf_f32 cos/sin", std::max(cos_error, sin_error) / tolerance, where);
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
}

TEST_P(ReferenceGolden, HfCompatApplyMatchesHfEmbedWithinHfRounding) {
  const GoldenCase& c = golden();
  SCOPED_TRACE(c.name);
  RopeSpec spec = c.spec;
  spec.style = Style::NeoX;  // hf_f32.q_embed is apply_rotary_pos_emb (rotate_half)
  TableOptions options = table_options(c, Precision::HFCompat);
  options.hf_inv_freq = c.hf_inv_freq;
  const CosSinTable table(spec, options);
  const int64_t half = c.rotary_dim / 2;
  std::vector<float> cos32(static_cast<size_t>(half)), sin32(static_cast<size_t>(half));
  for (const bool is_q : {true, false}) {
    const int64_t heads = is_q ? c.q_heads : c.k_heads;
    const Buffer in = make_buffer(c, is_q ? c.q : c.k, heads, DType::F32);
    Buffer out = make_buffer(c, is_q ? c.q : c.k, heads, DType::F32);
    reference::apply(in.view, TensorView{}, out.view, TensorView{}, per_token(c), table);
    const std::vector<double>& expected = is_q ? c.hf_q_embed : c.hf_k_embed;
    for (int64_t t = 0; t < c.n_positions(); ++t) {
      table.row(c.positions[static_cast<size_t>(t)], cos32.data(), sin32.data());
      for (int64_t h = 0; h < heads; ++h) {
        const size_t base = static_cast<size_t>((t * heads + h) * c.head_dim);
        for (int64_t d = 0; d < c.head_dim; ++d) {
          const size_t index = base + static_cast<size_t>(d);
          const double got = value_at(out, index);
          if (d >= c.rotary_dim) {
            EXPECT_EQ(got, expected[index]) << at(c, t, h, d) << " (pass-through)";
            continue;
          }
          // Element d = self * C -+ partner * S: a' = a C - c S (d < half), c' = c C + a S.
          const int64_t i = d % half;
          const double self = value_at(in, index);
          const double partner = value_at(in, base + static_cast<size_t>(d < half ? d + half : d - half));
          const size_t row = static_cast<size_t>(t * c.rotary_dim + i);
          const double hf_cos = c.hf_cos[row], hf_sin = c.hf_sin[row];
          const double table_difference = std::fabs(self) * std::fabs(cos32[static_cast<size_t>(i)] - hf_cos) +
                                          std::fabs(partner) * std::fabs(sin32[static_cast<size_t>(i)] - hf_sin);
          const double tolerance = 2 * 0x1p-23 * (std::fabs(self * hf_cos) + std::fabs(partner * hf_sin)) +
                                   table_difference + 1e-300;
          const double error = std::fabs(got - expected[index]);
          EXPECT_LE(error, tolerance) << at(c, t, h, d) << ": " << got << " vs HF " << expected[index];
          record("4 hfcompat apply (float32) vs hf_f32 q/k_embed", error / tolerance, at(c, t, h, d));
        }
      }
    }
  }
}

// ---- 5. HF's float32 inv_freq chain --------------------------------------------------------------

TEST_P(ReferenceGolden, HfCompatInvFreqFromConfigWithinOneUlpOfHf) {
  const GoldenCase& c = golden();
  SCOPED_TRACE(c.name);
  const CosSinTable table(c.spec, table_options(c, Precision::HFCompat));
  const std::vector<float>& ours = table.inv_freq_f32();
  ASSERT_EQ(ours.size(), c.hf_inv_freq.size());
  for (size_t i = 0; i < ours.size(); ++i) {
    const int64_t ulps = test::ulp_distance(ours[i], c.hf_inv_freq[i]);
    EXPECT_LE(ulps, 1) << "pair " << i << ": " << ours[i] << " vs HF " << c.hf_inv_freq[i];
    record("5 hfcompat inv_freq_f32 vs hf_f32.inv_freq (ulps / 1)", static_cast<double>(ulps),
           c.name + ", pair " + std::to_string(i));
  }
}

std::string case_name(const ::testing::TestParamInfo<std::filesystem::path>& info) {
  std::string name = info.param.stem().string();
  std::replace_if(name.begin(), name.end(), [](char ch) { return !std::isalnum(static_cast<unsigned char>(ch)); }, '_');
  return name;
}

INSTANTIATE_TEST_SUITE_P(AllCases, ReferenceGolden, ::testing::ValuesIn(test::golden_files(test::GoldenKind::Positive)), case_name);

TEST(ReferenceGoldenDirectory, HasEveryPositiveCase) {
  ASSERT_TRUE(std::filesystem::is_directory(test::golden_dir()))
      << "golden vectors not found at " << test::golden_dir() << " (set ROTARY_GOLDEN_DIR)";
  EXPECT_GE(test::golden_files(test::GoldenKind::Positive).size(), 18u);
}

// The one case with rope_interleave (README, "DeepSeek-V3 layout").
TEST(ReferenceGoldenDeepseek, InterleaveEqualsDeinterleavedGptj) {
  const GoldenCase& c = load_case(test::golden_dir() / "yarn_deepseek_v3.json");
  SCOPED_TRACE(c.name);
  ASSERT_FALSE(c.deepseek_q.empty()) << "hf_f32.deepseek_interleave_q_embed missing";
  EXPECT_EQ(c.spec.style, Style::GPTJ) << "rope_interleave should select GPT-J pairs";
  const double scaling = std::max(1.0, c.hf_scaling);
  const int64_t half = c.rotary_dim / 2;
  for (const bool is_q : {true, false}) {
    const std::vector<double> gptj = exact_apply(c, Style::GPTJ, is_q);
    const std::vector<double>& inputs = is_q ? c.q : c.k;
    const std::vector<double>& hf = is_q ? c.deepseek_q : c.deepseek_k;
    const int64_t heads = is_q ? c.q_heads : c.k_heads;
    ASSERT_EQ(hf.size(), gptj.size());
    for (int64_t t = 0; t < c.n_positions(); ++t) {
      const auto p = static_cast<double>(c.positions[static_cast<size_t>(t)]);
      for (int64_t h = 0; h < heads; ++h) {
        const size_t base = static_cast<size_t>((t * heads + h) * c.head_dim);
        for (int64_t j = 0; j < c.rotary_dim; ++j) {
          // HF output j holds rotated element 2j (j < half) or 2(j - half) + 1.
          const int64_t source = j < half ? 2 * j : 2 * (j - half) + 1;
          const int64_t pair = source / 2;
          const double size = std::fabs(inputs[base + static_cast<size_t>(2 * pair)]) +
                              std::fabs(inputs[base + static_cast<size_t>(2 * pair + 1)]);
          const double tolerance = scaling * (1e-7 * p + 3e-7) * size;
          const double error = std::fabs(hf[base + static_cast<size_t>(j)] - gptj[base + static_cast<size_t>(source)]);
          EXPECT_LE(error, tolerance) << at(c, t, h, j);
          record("6 deepseek interleave vs de-interleaved exact GPT-J", error / tolerance, at(c, t, h, j));
        }
      }
    }
  }
}

}  // namespace
}  // namespace rotary
