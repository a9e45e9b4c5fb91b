// src/analysis/convention.cpp: the NeoX / GPT-J convention-mismatch detector (8 in
// include/rotary/analysis.hpp, docs/analysis.md): which layout a cos / sin row has, and how far
// from a rotation the product of one layout applied with the other pairing is. Expanded layouts:
// HF LlamaRotaryEmbedding (cat(freqs, freqs), rotate_half) and GPT-J (repeat_interleave,
// rotate_every_two), docs/formulas.md section 2.
#include "rotary/analysis.hpp"

#include <algorithm>
#include <cmath>
#include <span>
#include <utility>
#include <vector>

#include "rotary/error.hpp"
#include "rotary/table.hpp"
#include "analysis/rotation_only.hpp"

namespace rotary::analysis {
namespace {

using detail::rotation_only;

// 2x2 singular values of [[a, b], [c, d]] in closed form: with P = |(a + d, b - c)| and
// Q = |(a - d, b + c)|, sigma_max = (P + Q) / 2 and sigma_min = |P - Q| / 2. For a scaled
// rotation Q = 0 exactly in the formula, so the matched case shows only the rows' own error.
std::pair<double, double> singular_values(double a, double b, double c, double d) {
  const double p = std::hypot(a + d, b - c);
  const double q = std::hypot(a - d, b + c);
  return {(p + q) / 2.0, std::abs(p - q) / 2.0};
}

}  // namespace

// ---- 8. convention mismatch --------------------------------------------------------------------------

std::string_view to_string(DetectedConvention convention) {
  switch (convention) {
    case DetectedConvention::NeoX: return "neox";
    case DetectedConvention::GPTJ: return "gptj";
    case DetectedConvention::Ambiguous: return "ambiguous";
    case DetectedConvention::Unknown: return "unknown";
  }
  return "?";
}

DetectedConvention detect_convention(std::span<const double> cos_row, std::span<const double> sin_row,
                                     double tolerance) {
  const size_t n = cos_row.size();
  if (n == 0 || n % 2 != 0 || sin_row.size() != n) return DetectedConvention::Unknown;
  auto equal = [tolerance](double x, double y) { return std::abs(x - y) <= tolerance; };
  bool neox = true, gptj = true;
  for (size_t j = 0; j < n / 2; ++j) {
    // NeoX cat(v, v): element j and j + n/2 hold pair j.
    neox = neox && equal(cos_row[j], cos_row[j + n / 2]) && equal(sin_row[j], sin_row[j + n / 2]);
    // GPT-J repeat-interleave: elements 2j and 2j + 1 hold pair j.
    gptj = gptj && equal(cos_row[2 * j], cos_row[2 * j + 1]) && equal(sin_row[2 * j], sin_row[2 * j + 1]);
  }
  if (neox && gptj) return DetectedConvention::Ambiguous;
  if (neox) return DetectedConvention::NeoX;
  if (gptj) return DetectedConvention::GPTJ;
  return DetectedConvention::Unknown;
}

DetectedConvention detect_convention(std::span<const float> cos_row, std::span<const float> sin_row,
                                     double tolerance) {
  const std::vector<double> c(cos_row.begin(), cos_row.end());
  const std::vector<double> s(sin_row.begin(), sin_row.end());
  return detect_convention(std::span<const double>(c), std::span<const double>(s), tolerance);
}

std::vector<double> expand_row_f64(std::span<const double> pair_values, Style layout) {
  const size_t half = pair_values.size();
  std::vector<double> out(2 * half);
  for (size_t i = 0; i < half; ++i) {
    if (layout == Style::NeoX) {
      out[i] = out[i + half] = pair_values[i];
    } else {
      out[2 * i] = out[2 * i + 1] = pair_values[i];
    }
  }
  return out;
}

double expanded_rotation_norm_deviation(std::span<const double> cos_row, std::span<const double> sin_row,
                                        Style pairing, double attention_scaling) {
  const size_t n = cos_row.size();
  if (n == 0 || n % 2 != 0) {
    throw Error(detail::concat("expanded_rotation_norm_deviation: cos_row must have an even, non-zero length (got ", n,
                               ")"));
  }
  if (sin_row.size() != n) {
    throw Error(detail::concat("expanded_rotation_norm_deviation: sin_row must have the length of cos_row ", n,
                               " (got ", sin_row.size(), ")"));
  }
  if (!(attention_scaling > 0.0) || !std::isfinite(attention_scaling)) {
    throw Error(detail::concat("expanded_rotation_norm_deviation: attention_scaling must be a finite number > 0 (got ",
                               attention_scaling, ")"));
  }
  double worst = 0.0;
  for (size_t j = 0; j < n / 2; ++j) {
    // The applied pair (u, v): out[u] = x[u] C[u] - x[v] S[u], out[v] = x[v] C[v] + x[u] S[v]
    // (HF: x * cos + rotate(x) * sin, rotate(x)[u] = -x[v], rotate(x)[v] = x[u]).
    const size_t u = pairing == Style::NeoX ? j : 2 * j;
    const size_t v = pairing == Style::NeoX ? j + n / 2 : 2 * j + 1;
    const auto [sigma_max, sigma_min] = singular_values(cos_row[u], -sin_row[u], sin_row[v], cos_row[v]);
    worst = std::max({worst, std::abs(sigma_max / attention_scaling - 1.0),
                      std::abs(sigma_min / attention_scaling - 1.0)});
  }
  return worst;
}

ConventionMismatch convention_mismatch(const RopeSpec& spec, const ConventionOptions& options) {
  TableOptions table_options;
  table_options.storage = Storage::OnTheFly;
  table_options.seq_len = options.seq_len;
  const CosSinTable table(rotation_only(spec), table_options);
  const int64_t max_position = options.max_position > 0 ? options.max_position : default_trained_context(spec);
  if (max_position > table.max_position()) {
    throw Error(detail::concat("convention_mismatch: max_position must be <= ", table.max_position(), " (got ",
                               max_position, ")"));
  }
  if (options.probe_position < 0 || options.probe_position > table.max_position()) {
    throw Error(detail::concat("convention_mismatch: probe_position must be in [0, ", table.max_position(), "] (got ",
                               options.probe_position, ")"));
  }
  const auto num_pairs = static_cast<size_t>(table.num_pairs());
  const double m = table.attention_scaling();

  ConventionMismatch out;
  out.spec_style = spec.style;
  std::vector<double> cos_pairs(num_pairs), sin_pairs(num_pairs);
  for (double r : log_distance_grid(max_position, options.points_per_octave)) {
    table.row_f64(static_cast<int64_t>(r), cos_pairs.data(), sin_pairs.data());
    double deviation[2][2];  // [layout][pairing], 0 = NeoX, 1 = GPT-J
    for (int layout = 0; layout < 2; ++layout) {
      const Style layout_style = layout == 0 ? Style::NeoX : Style::GPTJ;
      const std::vector<double> c = expand_row_f64(cos_pairs, layout_style);
      const std::vector<double> s = expand_row_f64(sin_pairs, layout_style);
      for (int pairing = 0; pairing < 2; ++pairing) {
        deviation[layout][pairing] =
            expanded_rotation_norm_deviation(c, s, pairing == 0 ? Style::NeoX : Style::GPTJ, m);
      }
    }
    const int own = spec.style == Style::NeoX ? 0 : 1;
    out.matched_deviation = std::max(out.matched_deviation, deviation[own][own]);
    out.neox_layout_gptj_pairing_deviation = std::max(out.neox_layout_gptj_pairing_deviation, deviation[0][1]);
    out.gptj_layout_neox_pairing_deviation = std::max(out.gptj_layout_neox_pairing_deviation, deviation[1][0]);
    out.mismatch_by_position.push_back({r, deviation[own][own == 0 ? 1 : 0]});
  }

  // The detector reads the library's own float32 layout (expand_row), as a user's dump would be.
  std::vector<float> cos_f32(num_pairs), sin_f32(num_pairs);
  table.row(options.probe_position, cos_f32.data(), sin_f32.data());
  for (const Style layout : {Style::NeoX, Style::GPTJ}) {
    const std::vector<float> c = expand_row(cos_f32.data(), table.num_pairs(), layout);
    const std::vector<float> s = expand_row(sin_f32.data(), table.num_pairs(), layout);
    const DetectedConvention detected = detect_convention(std::span<const float>(c), std::span<const float>(s));
    (layout == Style::NeoX ? out.detected_from_neox_layout : out.detected_from_gptj_layout) = detected;
  }
  return out;
}

}  // namespace rotary::analysis
