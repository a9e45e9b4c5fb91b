// src/golden/golden.cpp: verify_golden_case(), the checks behind `rotary verify-golden`.
//
// Tolerances are the golden README's (tests/golden/README.md, "Errors and tolerances"),
// restated in golden.hpp and docs/numerics.md. Each check records the largest
// ratio error / tolerance it saw, so the margins are visible, not just pass/fail.
#include "golden/golden.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

#include "rotary/apply.hpp"
#include "rotary/error.hpp"
#include "rotary/frequencies.hpp"
#include "rotary/hf_config.hpp"
#include "core/json.hpp"
#include "rotary/table.hpp"

namespace rotary {

namespace {

int64_t ulps_f64(double a, double b) {
  if (a == b) return 0;
  if (std::isnan(a) || std::isnan(b) || std::signbit(a) != std::signbit(b)) return std::numeric_limits<int64_t>::max();
  int64_t ia = 0;
  int64_t ib = 0;
  std::memcpy(&ia, &a, sizeof a);
  std::memcpy(&ib, &b, sizeof b);
  return ia > ib ? ia - ib : ib - ia;
}

int64_t ulps_f32(float a, float b) {
  if (a == b) return 0;
  if (std::isnan(a) || std::isnan(b) || std::signbit(a) != std::signbit(b)) return std::numeric_limits<int64_t>::max();
  int32_t ia = 0;
  int32_t ib = 0;
  std::memcpy(&ia, &a, sizeof a);
  std::memcpy(&ib, &b, sizeof b);
  return ia > ib ? int64_t{ia} - ib : int64_t{ib} - ia;
}

const json::Value& member(const json::Value& object, std::string_view key) {
  const json::Value* v = object.find(key);
  if (v == nullptr) throw Error(detail::concat("golden: missing field \"", key, "\""));
  return *v;
}

std::vector<double> tensor(const json::Value& object, std::string_view key) {
  std::vector<double> out;
  for (const json::Value& v : member(member(object, key), "data").as_array()) out.push_back(v.as_double());
  return out;
}

// Accumulates the worst error / tolerance ratio of one check.
struct Ratio {
  double worst = 0.0;
  std::string where;
  void add(double error, double tolerance, const std::string& context) {
    const double ratio = tolerance > 0 ? error / tolerance : (error > 0 ? INFINITY : 0.0);
    if (ratio > worst || std::isnan(ratio)) {
      worst = std::isnan(ratio) ? INFINITY : ratio;
      where = context;
    }
  }
  GoldenCheck check(std::string name) const {
    GoldenCheck c{std::move(name), worst <= 1.0, worst, {}};
    c.detail = detail::concat("worst error/tolerance ", worst, where.empty() ? "" : " at ", where);
    return c;
  }
};

struct Inputs {
  std::vector<int64_t> positions;
  std::vector<double> q, k;
  int64_t q_heads = 0, k_heads = 0, head_dim = 0;
};

// Rotates the case's inputs with the float64 reference and exact table values.
std::vector<double> rotate(const Inputs& in, const std::vector<double>& x, int64_t heads, const RopeSpec& spec,
                           const CosSinTable& table) {
  std::vector<double> source = x;
  std::vector<double> out(x.size());
  const auto tokens = static_cast<int64_t>(in.positions.size());
  TensorView view = contiguous_view(source.data(), DType::F64, Layout::BSHD, {1, tokens, heads, in.head_dim});
  TensorView out_view = contiguous_view(out.data(), DType::F64, Layout::BSHD, {1, tokens, heads, in.head_dim});
  const Positions positions = Positions::per_token(in.positions);
  (void)spec;
  reference::apply(view, TensorView{}, out_view, TensorView{}, positions, table, {}, reference::TableValues::Exact64);
  return out;
}

// What the table and rotation checks share: the case's model, its positions, the length Hugging
// Face's forward sees for them, and the scale of the tolerances.
struct CaseContext {
  const RopeSpec& spec;
  const std::vector<int64_t>& positions;
  int64_t seq_len;
  int64_t pairs;
  double scale_bound;  // max(1, attention_scaling): the tables' values are scaled by it
};

// The exact table, float64 and float32 rows, against exact_f64's cos and sin (rows in the
// cat(freqs, freqs) layout: pair i is column i).
void check_exact_table(const CaseContext& context, const std::vector<double>& exact_cos,
                       const std::vector<double>& exact_sin, GoldenCaseResult& result) {
  const RopeSpec& spec = context.spec;
  const int64_t seq_len = context.seq_len, pairs = context.pairs;
  const double scale_bound = context.scale_bound;
  const auto n = static_cast<int64_t>(context.positions.size());
  auto at = [&](const std::vector<double>& rows, int64_t r, int64_t i) { return rows[r * 2 * pairs + i]; };
  const CosSinTable exact_table(spec, {.storage = Storage::OnTheFly, .seq_len = seq_len});
  Ratio f64_ratio;
  int64_t worst_f32 = 0;
  std::vector<double> c(pairs), s(pairs);
  std::vector<float> cf(pairs), sf(pairs);
  for (int64_t r = 0; r < n; ++r) {
    const int64_t p = context.positions[r];
    exact_table.row_f64(p, c.data(), s.data());
    exact_table.row(p, cf.data(), sf.data());
    const double tolerance = 1e-15 * (1.0 + static_cast<double>(p)) * scale_bound;
    for (int64_t i = 0; i < pairs; ++i) {
      const std::string where = detail::concat("position ", p, " pair ", i);
      f64_ratio.add(std::abs(c[i] - at(exact_cos, r, i)), tolerance, where);
      f64_ratio.add(std::abs(s[i] - at(exact_sin, r, i)), tolerance, where);
      worst_f32 = std::max({worst_f32, ulps_f32(cf[i], static_cast<float>(at(exact_cos, r, i))),
                            ulps_f32(sf[i], static_cast<float>(at(exact_sin, r, i)))});
    }
  }
  result.checks.push_back(f64_ratio.check("exact table float64 vs exact_f64 (1e-15 (1+p) max(1,s))"));
  result.checks.push_back({"exact table float32 vs exact_f64 rounded (<= 1 ulp)", worst_f32 <= 1,
                           static_cast<double>(worst_f32), detail::concat(worst_f32, " ulp")});
}

// The Hugging Face-compatible tables: from HF's own inv_freq against hf_f32's cos and sin, and
// the float32 inv_freq chain from the config against HF's inv_freq.
void check_hf_tables(const CaseContext& context, const std::vector<double>& hf_inv, const std::vector<double>& hf_cos,
                     const std::vector<double>& hf_sin, GoldenCaseResult& result) {
  const RopeSpec& spec = context.spec;
  const int64_t seq_len = context.seq_len, pairs = context.pairs;
  const double scale_bound = context.scale_bound;
  const auto n = static_cast<int64_t>(context.positions.size());
  auto at = [&](const std::vector<double>& rows, int64_t r, int64_t i) { return rows[r * 2 * pairs + i]; };
  std::vector<float> hf_buffer(hf_inv.begin(), hf_inv.end());
  const CosSinTable hf_table(spec, {.precision = Precision::HFCompat, .storage = Storage::OnTheFly,
                                    .seq_len = seq_len, .hf_inv_freq = hf_buffer});
  Ratio ratio;
  std::vector<float> c(pairs), s(pairs);
  const double tolerance = 2.0 * std::ldexp(1.0, -23) * scale_bound;
  for (int64_t r = 0; r < n; ++r) {
    const int64_t p = context.positions[r];
    if (p >= (int64_t{1} << 24)) continue;  // HF rounds the position itself there
    hf_table.row(p, c.data(), s.data());
    for (int64_t i = 0; i < pairs; ++i) {
      const std::string where = detail::concat("position ", p, " pair ", i);
      ratio.add(std::abs(c[i] - at(hf_cos, r, i)), tolerance, where);
      ratio.add(std::abs(s[i] - at(hf_sin, r, i)), tolerance, where);
    }
  }
  result.checks.push_back(ratio.check("hf table (HF inv_freq) vs hf_f32 cos/sin, p < 2^24 (2 ulps of scaling)"));

  const CosSinTable from_config(spec, {.precision = Precision::HFCompat, .storage = Storage::OnTheFly,
                                       .seq_len = seq_len});
  int64_t worst = 0;
  for (int64_t i = 0; i < pairs; ++i) {
    worst = std::max(worst, ulps_f32(from_config.inv_freq_f32()[i], static_cast<float>(hf_inv[i])));
  }
  result.checks.push_back({"hf chain inv_freq from config vs hf_f32 (<= 1 ulp)", worst <= 1,
                           static_cast<double>(worst), detail::concat(worst, " ulp")});
}

// q and k in both conventions, float64 reference with exact values.
void check_rotations(const CaseContext& context, const json::Value& root, const json::Value& exact, Inputs& in,
                     GoldenCaseResult& result) {
  const RopeSpec& spec = context.spec;
  const int64_t seq_len = context.seq_len, pairs = context.pairs;
  const double scale_bound = context.scale_bound;
  const auto n = static_cast<int64_t>(in.positions.size());
  const json::Value& inputs = member(root, "inputs");
  in.q = tensor(inputs, "q");
  in.k = tensor(inputs, "k");
  const auto& q_shape = member(member(inputs, "q"), "shape").as_array();
  const auto& k_shape = member(member(inputs, "k"), "shape").as_array();
  in.q_heads = q_shape[1].as_int64();
  in.k_heads = k_shape[1].as_int64();
  in.head_dim = q_shape[2].as_int64();
  for (Style style : {Style::NeoX, Style::GPTJ}) {
    RopeSpec styled = spec;
    styled.style = style;
    const CosSinTable table(styled, {.storage = Storage::OnTheFly, .seq_len = seq_len});
    const char* suffix = style == Style::NeoX ? "half_split" : "interleaved";
    Ratio ratio;
    for (int which = 0; which < 2; ++which) {
      const std::vector<double>& x = which == 0 ? in.q : in.k;
      const int64_t heads = which == 0 ? in.q_heads : in.k_heads;
      const std::vector<double> got = rotate(in, x, heads, styled, table);
      const std::vector<double> expected =
          tensor(exact, detail::concat(which == 0 ? "q_embed_" : "k_embed_", suffix));
      for (int64_t r = 0; r < n; ++r) {
        const double tolerance = 1e-15 * (1.0 + static_cast<double>(in.positions[r])) * scale_bound;
        for (int64_t h = 0; h < heads; ++h) {
          const int64_t base = (r * heads + h) * in.head_dim;
          for (int64_t i = 0; i < pairs; ++i) {
            const int64_t ia = style == Style::NeoX ? i : 2 * i;
            const int64_t ic = style == Style::NeoX ? i + pairs : 2 * i + 1;
            const double magnitude = std::abs(x[base + ia]) + std::abs(x[base + ic]);
            const std::string where = detail::concat(which == 0 ? "q" : "k", " position ", in.positions[r], " head ", h,
                                                     " pair ", i);
            ratio.add(std::abs(got[base + ia] - expected[base + ia]), tolerance * magnitude, where);
            ratio.add(std::abs(got[base + ic] - expected[base + ic]), tolerance * magnitude, where);
          }
          for (int64_t d = spec.rotary_dim; d < in.head_dim; ++d) {
            ratio.add(std::abs(got[base + d] - expected[base + d]), 0.0, "pass-through");
          }
        }
      }
    }
    result.checks.push_back(ratio.check(detail::concat("q/k ", suffix, " vs exact_f64")));
  }
}

void verify_positive(const json::Value& root, GoldenCaseResult& result) {
  // The config goes through the text parser, exactly as a user's config.json would.
  const HfRopeConfig config = parse_hf_config(json::serialize(member(root, "config")), result.file);
  const RopeSpec& spec = config.spec;

  {
    const bool ok = to_string(spec.scaling.type) == member(root, "rope_type").as_string() &&
                    spec.head_dim == member(root, "head_dim").as_int64() &&
                    spec.rotary_dim == member(root, "rotary_dim").as_int64() &&
                    spec.max_position_embeddings == member(root, "max_position_embeddings").as_int64();
    result.checks.push_back({"config geometry", ok, ok ? 0.0 : 1.0,
                             detail::concat(to_string(spec.scaling.type), ", head_dim ", spec.head_dim, ", rotary_dim ",
                                            spec.rotary_dim, ", max ", spec.max_position_embeddings)});
  }

  Inputs in;
  for (const json::Value& p : member(root, "positions").as_array()) in.positions.push_back(p.as_int64());
  const int64_t max_position = *std::max_element(in.positions.begin(), in.positions.end());
  const int64_t seq_len = max_position + 1;  // what HF's forward sees for this call
  const json::Value& exact = member(root, "exact_f64");
  const json::Value& hf = member(root, "hf_f32");
  const int64_t pairs = spec.rotary_dim / 2;

  // Frequencies.
  const Frequencies freqs = frequencies(spec, seq_len);
  const std::vector<double> exact_inv = tensor(exact, "inv_freq");
  const std::vector<double> hf_inv = tensor(hf, "inv_freq");
  if (static_cast<int64_t>(exact_inv.size()) != pairs || static_cast<int64_t>(hf_inv.size()) != pairs) {
    throw Error(detail::concat("golden: inv_freq has ", exact_inv.size(), " values, the spec ", pairs, " pairs"));
  }
  const int64_t stated_ulps = member(member(root, "errors"), "inv_freq_f32_max_ulp_vs_correctly_rounded_exact").as_int64();
  int64_t worst_exact = 0;
  int64_t worst_hf = 0;
  for (int64_t i = 0; i < pairs; ++i) {
    worst_exact = std::max(worst_exact, ulps_f64(freqs.inv_freq[i], exact_inv[i]));
    worst_hf = std::max(worst_hf, ulps_f32(static_cast<float>(freqs.inv_freq[i]), static_cast<float>(hf_inv[i])));
  }
  const int64_t scaling_ulps =
      std::max(ulps_f64(freqs.attention_scaling, member(exact, "attention_scaling").as_double()),
               ulps_f64(freqs.attention_scaling, member(hf, "attention_scaling").as_double()));
  result.checks.push_back({"inv_freq vs exact_f64 (<= 1 ulp)", worst_exact <= 1, static_cast<double>(worst_exact),
                           detail::concat(worst_exact, " ulp")});
  result.checks.push_back({"float32 inv_freq vs hf_f32 (<= stated ulps)", worst_hf <= stated_ulps,
                           static_cast<double>(worst_hf), detail::concat(worst_hf, " ulp, stated ", stated_ulps)});
  result.checks.push_back({"attention_scaling (<= 1 ulp)", scaling_ulps <= 1, static_cast<double>(scaling_ulps),
                           detail::concat(scaling_ulps, " ulp")});

  const double scaling = freqs.attention_scaling;
  const double scale_bound = std::max(1.0, scaling);
  const std::vector<double> exact_cos = tensor(exact, "cos");
  const std::vector<double> exact_sin = tensor(exact, "sin");
  const std::vector<double> hf_cos = tensor(hf, "cos");
  const std::vector<double> hf_sin = tensor(hf, "sin");

  const CaseContext context{spec, in.positions, seq_len, pairs, scale_bound};
  check_exact_table(context, exact_cos, exact_sin, result);
  check_hf_tables(context, hf_inv, hf_cos, hf_sin, result);
  check_rotations(context, root, exact, in, result);
}

}  // namespace

GoldenCaseResult verify_golden_case(const std::string& path) {
  GoldenCaseResult result;
  result.file = std::filesystem::path(path).filename().string();
  try {
    const json::Value root = json::parse_file(path);
    result.kind = member(root, "kind").as_string();
    if (result.kind == "negative") {
      try {
        parse_hf_config(json::serialize(member(root, "config")), result.file);
        result.checks.push_back({"rejected with ConfigError", false, 1.0, "the invalid config was accepted"});
      } catch (const ConfigError& e) {
        result.checks.push_back({"rejected with ConfigError", true, 0.0, e.what()});
      }
    } else if (result.kind == "positive") {
      verify_positive(root, result);
    } else {
      throw Error(detail::concat("golden: kind must be positive or negative (got \"", result.kind, "\")"));
    }
  } catch (const std::exception& e) {
    result.error = e.what();
  }
  result.passed = result.error.empty() && !result.checks.empty() &&
                  std::all_of(result.checks.begin(), result.checks.end(), [](const GoldenCheck& c) { return c.passed; });
  return result;
}

std::vector<GoldenCaseResult> verify_golden_dir(const std::string& directory) {
  std::error_code ec;
  if (!std::filesystem::is_directory(directory, ec)) {
    throw Error(detail::concat("verify-golden: ", directory, " must be a directory of golden case files (",
                               ec ? ec.message() : std::string("not a directory"), ")"));
  }
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(directory)) {
    if (entry.path().extension() == ".json") files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  std::vector<GoldenCaseResult> results;
  for (const std::string& file : files) results.push_back(verify_golden_case(file));
  return results;
}

}  // namespace rotary
