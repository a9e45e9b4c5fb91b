// src/analysis/diagnose.cpp: an unknown RoPE implementation inferred from samples (x, y,
// positions), and its differences from a spec (include/rotary/diagnose.hpp). The math, the
// thresholds and what stays ambiguous are in docs/analysis.md, "Diagnose".
#include "rotary/diagnose.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numbers>
#include <set>
#include <sstream>

#include "rotary/error.hpp"
#include "rotary/frequencies.hpp"
#include "rotary/presets.hpp"
#include "rotary/table.hpp"

namespace rotary::analysis {

std::string_view to_string(Pairing pairing) {
  switch (pairing) {
    case Pairing::HalfSplit: return "half-split";
    case Pairing::Interleaved: return "interleaved";
    case Pairing::Other: return "other";
    case Pairing::Ambiguous: return "ambiguous";
  }
  return "?";
}

std::string_view to_string(PrecisionClass precision) {
  switch (precision) {
    case PrecisionClass::Exact: return "exact";
    case PrecisionClass::Float32Table: return "float32-table";
    case PrecisionClass::Float32AngleDrift: return "float32-angle-drift";
    case PrecisionClass::Float16: return "float16";
  }
  return "?";
}

std::vector<double> Diagnosis::inv_freq() const {
  std::vector<double> out;
  out.reserve(pairs.size());
  for (const PairFinding& pair : pairs) out.push_back(pair.inv_freq);
  return out;
}

namespace {

constexpr double kTwoPi = 2.0 * std::numbers::pi;

// A pair whose norm ratio |y|^2 / |x|^2 varies by more than this across rows is not a rotation
// pair: a wrong partner mixes in a third element, which changes the ratio by O(angle). Float16
// cos/sin move it by ~1e-3 at most (docs/analysis.md, "Diagnose").
constexpr double kPairSpreadThreshold = 1e-2;
// Residuals of the angle fit at or below this (flat, at small angles) are float32 rounding of
// cos/sin (~6e-8 rad); float16 cos/sin give ~2.4e-4 rad and more.
constexpr double kFloat16SmallAngleResidual = 1e-5;
// Angles up to this many radians are "small": a float32 product p * theta is off by at most half
// an ulp of 32, 1.9e-6 rad, there, below kFloat16SmallAngleResidual.
constexpr double kSmallAngleRad = 32.0;
// A pair's norm ratio varying by more than this across rows (while it is the best pairing) is
// cos/sin rounded to float16 or bfloat16: cos^2 + sin^2 is then off by ~2^-11.
constexpr double kFloat16NormSpread = 1e-5;

double wrap(double angle) { return std::remainder(angle, kTwoPi); }  // (-pi, pi]

std::string number(double value, int digits = 6) {
  std::ostringstream out;
  out.precision(digits);
  out << value;
  return out.str();
}

struct RowView {
  const DiagnoseSamples& s;
  double x(int64_t row, int64_t dim) const { return s.x[static_cast<size_t>(row * s.head_dim + dim)]; }
  double y(int64_t row, int64_t dim) const { return s.y[static_cast<size_t>(row * s.head_dim + dim)]; }
};

void check_samples(const DiagnoseSamples& s) {
  if (s.head_dim < 2) throw Error(detail::concat("diagnose: head_dim must be >= 2 (got ", s.head_dim, ")"));
  const int64_t num_rows = static_cast<int64_t>(s.positions.size());
  if (num_rows < 2) {
    throw Error(detail::concat("diagnose: positions must hold at least 2 rows (got ", num_rows, ")"));
  }
  const auto expected = static_cast<size_t>(num_rows * s.head_dim);
  if (s.x.size() != expected) {
    throw Error(detail::concat("diagnose: x must hold rows * head_dim = ", num_rows, " * ", s.head_dim, " = ",
                               expected, " values, one row per position (got ", s.x.size(), ")"));
  }
  if (s.y.size() != expected) {
    throw Error(detail::concat("diagnose: y must hold rows * head_dim = ", num_rows, " * ", s.head_dim, " = ",
                               expected, " values, the shape of x (got ", s.y.size(), ")"));
  }
  for (const auto& [name, values] : {std::pair{"x", s.x}, std::pair{"y", s.y}}) {
    for (size_t k = 0; k < values.size(); ++k) {
      if (!std::isfinite(values[k])) {
        throw Error(detail::concat("diagnose: ", name, " must be finite (got ", values[k], " at row ",
                                   k / static_cast<size_t>(s.head_dim), ", column ",
                                   k % static_cast<size_t>(s.head_dim), ")"));
      }
    }
  }
  for (int64_t r = 0; r < num_rows; ++r) {
    const int64_t p = s.positions[static_cast<size_t>(r)];
    if (p < 0 || p > kMaxPosition) {
      throw Error(detail::concat("diagnose: positions must be in [0, ", kMaxPosition, "] (got ", p, " at row ", r, ")"));
    }
  }
  const std::set<int64_t> distinct(s.positions.begin(), s.positions.end());
  if (distinct.size() < 2) {
    throw Error(detail::concat("diagnose: positions must hold at least 2 distinct values to separate theta from "
                               "the offset (got all ",
                               num_rows, " rows at position ", *distinct.begin(), ")"));
  }
}

// (max - min) / mean over rows of |y_pair|^2 / |x_pair|^2; rows whose x pair is (near) zero are
// skipped. 0 for a rotation scaled by a constant.
double norm_spread(const RowView& v, int64_t num_rows, int64_t a, int64_t c) {
  double lo = std::numeric_limits<double>::infinity(), hi = 0.0, sum = 0.0;
  int64_t n = 0;
  for (int64_t r = 0; r < num_rows; ++r) {
    const double nx = v.x(r, a) * v.x(r, a) + v.x(r, c) * v.x(r, c);
    if (!(nx > 1e-300)) continue;
    const double ratio = (v.y(r, a) * v.y(r, a) + v.y(r, c) * v.y(r, c)) / nx;
    lo = std::min(lo, ratio);
    hi = std::max(hi, ratio);
    sum += ratio;
    ++n;
  }
  if (n == 0 || sum <= 0.0) return std::numeric_limits<double>::infinity();
  return (hi - lo) / (sum / static_cast<double>(n));
}

double pattern_score(const RowView& v, int64_t num_rows, const std::vector<std::pair<int64_t, int64_t>>& pairs) {
  double worst = 0.0;
  for (const auto& [a, c] : pairs) worst = std::max(worst, norm_spread(v, num_rows, a, c));
  return worst;
}

double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

// Angle fit of one pair: theta (signed), intercept, residuals. Angles are grouped by position
// (atan2 of the summed cross and dot products: rows weighted by |x_pair|^2), unwrapped along the
// sorted positions with the running least-squares slope, then fitted by ordinary least squares.
//
// small_residual: the max residual of a second fit over the positions whose angle is at most
// kSmallAngleRad (when there are 3 or more), which the drift of large angles cannot reach; -1 if
// there are fewer.
void fit_pair(const RowView& v, int64_t num_rows, PairFinding& pair, std::vector<double>& row_residual,
              std::vector<double>& row_angle, double& small_residual) {
  const int64_t a = pair.first, c = pair.second;
  std::map<int64_t, std::pair<double, double>> by_position;  // position -> (sum cross, sum dot)
  std::vector<double> ratios;
  for (int64_t r = 0; r < num_rows; ++r) {
    const double xa = v.x(r, a), xc = v.x(r, c), ya = v.y(r, a), yc = v.y(r, c);
    auto& [cross, dot] = by_position[v.s.positions[static_cast<size_t>(r)]];
    cross += xa * yc - xc * ya;
    dot += xa * ya + xc * yc;
    const double nx = xa * xa + xc * xc;
    if (nx > 1e-300) ratios.push_back(std::sqrt((ya * ya + yc * yc) / nx));
  }
  pair.attention_scaling = median(ratios);
  std::vector<double> positions, angles;
  for (const auto& [p, cd] : by_position) {
    positions.push_back(static_cast<double>(p));
    angles.push_back(std::atan2(cd.first, cd.second));
  }
  const size_t k_count = positions.size();
  std::vector<double> unwrapped(k_count, 0.0);  // relative to the first position
  double theta = 0.0, s_pp = 0.0, s_pu = 0.0;
  for (size_t k = 1; k < k_count; ++k) {
    const double dp = positions[k] - positions[0];
    const double measured = wrap(angles[k] - angles[0]);
    double u = measured;
    if (k > 1) u = measured + kTwoPi * std::round((theta * dp - measured) / kTwoPi);
    unwrapped[k] = u;
    s_pp += dp * dp;
    s_pu += dp * u;
    theta = s_pu / s_pp;
  }
  // Ordinary least squares of angles[0] + unwrapped on the positions.
  double mean_p = 0.0, mean_u = 0.0;
  for (size_t k = 0; k < k_count; ++k) {
    mean_p += positions[k];
    mean_u += unwrapped[k];
  }
  mean_p /= static_cast<double>(k_count);
  mean_u /= static_cast<double>(k_count);
  double spp = 0.0, spu = 0.0;
  for (size_t k = 0; k < k_count; ++k) {
    spp += (positions[k] - mean_p) * (positions[k] - mean_p);
    spu += (positions[k] - mean_p) * (unwrapped[k] - mean_u);
  }
  theta = spu / spp;
  const double intercept = angles[0] + mean_u - theta * mean_p;
  pair.inv_freq_signed = theta;
  pair.inv_freq = std::abs(theta);
  pair.phase_rad = wrap(intercept);
  pair.max_residual_rad = 0.0;
  row_residual.assign(static_cast<size_t>(num_rows), 0.0);
  row_angle.assign(static_cast<size_t>(num_rows), 0.0);
  for (int64_t r = 0; r < num_rows; ++r) {
    const double xa = v.x(r, a), xc = v.x(r, c), ya = v.y(r, a), yc = v.y(r, c);
    const double p = static_cast<double>(v.s.positions[static_cast<size_t>(r)]);
    const double predicted = theta * p + pair.phase_rad;
    row_angle[static_cast<size_t>(r)] = std::abs(predicted);
    if (!(xa * xa + xc * xc > 1e-300)) continue;
    const double residual = std::abs(wrap(std::atan2(xa * yc - xc * ya, xa * ya + xc * yc) - predicted));
    row_residual[static_cast<size_t>(r)] = residual;
    pair.max_residual_rad = std::max(pair.max_residual_rad, residual);
  }
  // The small-angle fit.
  small_residual = -1.0;
  std::vector<size_t> small;
  for (size_t k = 0; k < k_count; ++k) {
    if (std::abs(theta * positions[k] + pair.phase_rad) <= kSmallAngleRad) small.push_back(k);
  }
  if (small.size() < 3) return;
  double sp = 0, su = 0;
  for (const size_t k : small) {
    sp += positions[k];
    su += unwrapped[k];
  }
  sp /= static_cast<double>(small.size());
  su /= static_cast<double>(small.size());
  double qpp = 0, qpu = 0;
  for (const size_t k : small) {
    qpp += (positions[k] - sp) * (positions[k] - sp);
    qpu += (positions[k] - sp) * (unwrapped[k] - su);
  }
  const double small_theta = qpu / qpp;
  const double small_intercept = angles[0] + su - small_theta * sp;
  small_residual = 0.0;
  for (int64_t r = 0; r < num_rows; ++r) {
    const double p = static_cast<double>(v.s.positions[static_cast<size_t>(r)]);
    if (std::abs(theta * p + pair.phase_rad) > kSmallAngleRad) continue;
    const double xa = v.x(r, a), xc = v.x(r, c), ya = v.y(r, a), yc = v.y(r, c);
    if (!(xa * xa + xc * xc > 1e-300)) continue;
    const double measured = std::atan2(xa * yc - xc * ya, xa * ya + xc * yc);
    small_residual = std::max(small_residual, std::abs(wrap(measured - (small_theta * p + small_intercept))));
  }
}

std::vector<std::pair<int64_t, int64_t>> standard_pairs(Pairing pairing, int64_t offset, int64_t rotary_dim) {
  std::vector<std::pair<int64_t, int64_t>> pairs;
  const int64_t half = rotary_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    if (pairing == Pairing::HalfSplit) pairs.emplace_back(offset + i, offset + i + half);
    else pairs.emplace_back(offset + 2 * i, offset + 2 * i + 1);
  }
  return pairs;
}

// Candidate frequency sets: every preset (and its per-layer-type specs) with `num_pairs` pairs.
std::vector<FrequencyCandidate> compare_with_presets(const std::vector<double>& measured,
                                                     const std::vector<double>& tolerance, int64_t seq_len) {
  std::vector<FrequencyCandidate> out;
  const auto add = [&](const std::string& name, const RopeSpec& spec, int64_t at_seq_len) {
    const Frequencies f = frequencies(spec, at_seq_len);
    if (f.inv_freq.size() != measured.size()) return;
    FrequencyCandidate candidate{name, std::string(to_string(spec.scaling.type)), 0.0, true};
    for (size_t i = 0; i < measured.size(); ++i) {
      const double dev = f.inv_freq[i] > 0.0 && measured[i] > 0.0 ? std::abs(std::log(measured[i] / f.inv_freq[i]))
                                                                  : std::numeric_limits<double>::infinity();
      candidate.max_log_deviation = std::max(candidate.max_log_deviation, dev);
      if (!(dev <= tolerance[i])) candidate.matches = false;
    }
    out.push_back(candidate);
  };
  for (const PresetInfo& info : list_presets()) {
    const HfRopeConfig config = preset(info.name);
    std::vector<std::pair<std::string, RopeSpec>> specs{{info.name, config.spec}};
    for (const auto& [layer_type, spec] : config.layer_type_specs) {
      if (spec.theta_base != config.spec.theta_base || spec.scaling.type != config.spec.scaling.type ||
          spec.rotary_dim != config.spec.rotary_dim) {
        specs.emplace_back(info.name + ":" + layer_type, spec);
      }
    }
    for (const auto& [name, spec] : specs) {
      if (spec.scaling.type == ScalingType::Proportional) continue;
      if (spec.scaling.type == ScalingType::LongRope) {
        add(name + " (short factors)", spec, 0);
        add(name + " (long factors)", spec, spec.original_context() + 1);
      } else {
        add(name, spec, seq_len);
      }
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const FrequencyCandidate& l, const FrequencyCandidate& r) {
    return l.max_log_deviation < r.max_log_deviation;
  });
  return out;
}

}  // namespace

Diagnosis diagnose(const DiagnoseSamples& samples, const DiagnoseOptions& options) {
  check_samples(samples);
  const RowView v{samples};
  const int64_t num_rows = static_cast<int64_t>(samples.positions.size());
  const int64_t head_dim = samples.head_dim;
  Diagnosis d;
  d.head_dim = head_dim;
  d.num_rows = num_rows;
  const std::set<int64_t> distinct(samples.positions.begin(), samples.positions.end());
  d.num_distinct_positions = static_cast<int64_t>(distinct.size());
  d.max_position = *distinct.rbegin();

  // 1. Pass-through dims: y == x in every row (a copy is exact in any storage).
  double scale = 0.0;
  for (const double value : samples.x) scale = std::max(scale, std::abs(value));
  const double same_tolerance = 4.0 * 0x1p-53 * scale;
  std::vector<int64_t> rotated;
  for (int64_t j = 0; j < head_dim; ++j) {
    bool same = true;
    for (int64_t r = 0; r < num_rows && same; ++r) same = std::abs(v.y(r, j) - v.x(r, j)) <= same_tolerance;
    (same ? d.pass_through_dims : rotated).push_back(j);
  }
  if (rotated.empty()) {
    throw Error(detail::concat("diagnose: y must differ from x somewhere (got y equal to x in all ", num_rows,
                               " rows: nothing is rotated at these positions)"));
  }
  if (rotated.size() % 2 != 0) {
    throw Error(detail::concat("diagnose: the changed elements must form pairs (got ", rotated.size(),
                               " changed elements, first ", rotated.front(), ", last ", rotated.back(), ")"));
  }
  d.rotated_offset = rotated.front();
  d.rotary_dim = static_cast<int64_t>(rotated.size());
  d.rotated_contiguous = rotated.back() - rotated.front() + 1 == d.rotary_dim;

  // 2. Pairing: the standard patterns first, else a greedy matching by norm-ratio spread.
  std::vector<std::pair<int64_t, int64_t>> chosen;
  if (d.rotated_contiguous) {
    const auto neox = standard_pairs(Pairing::HalfSplit, d.rotated_offset, d.rotary_dim);
    const auto gptj = standard_pairs(Pairing::Interleaved, d.rotated_offset, d.rotary_dim);
    const double neox_score = pattern_score(v, num_rows, neox);
    const double gptj_score = d.rotary_dim == 2 ? neox_score : pattern_score(v, num_rows, gptj);
    // bfloat16 storage alone moves the norm ratio by up to ~4 u = 0.016 (x and y each rounded).
    const double threshold = std::max(kPairSpreadThreshold, 8.0 * options.storage_epsilon);
    const bool neox_fits = neox_score <= threshold, gptj_fits = gptj_score <= threshold;
    if (d.rotary_dim == 2) {
      d.pairing = Pairing::HalfSplit;  // one pair: both patterns are the same pair
      chosen = neox;
      d.pairing_score = neox_score;
    } else if (neox_fits && gptj_fits) {
      d.pairing = Pairing::Ambiguous;
      chosen = neox_score <= gptj_score ? neox : gptj;
      d.pairing_score = std::min(neox_score, gptj_score);
      d.other_pattern_score = std::max(neox_score, gptj_score);
    } else if (neox_fits || gptj_fits) {
      d.pairing = neox_fits ? Pairing::HalfSplit : Pairing::Interleaved;
      chosen = neox_fits ? neox : gptj;
      d.pairing_score = neox_fits ? neox_score : gptj_score;
      d.other_pattern_score = neox_fits ? gptj_score : neox_score;
    }
  }
  if (chosen.empty()) {
    struct Candidate {
      double score;
      int64_t a, c;
    };
    std::vector<Candidate> candidates;
    for (size_t i = 0; i < rotated.size(); ++i) {
      for (size_t j = i + 1; j < rotated.size(); ++j) {
        candidates.push_back({norm_spread(v, num_rows, rotated[i], rotated[j]), rotated[i], rotated[j]});
      }
    }
    std::stable_sort(candidates.begin(), candidates.end(),
                     [](const Candidate& l, const Candidate& r) { return l.score < r.score; });
    std::set<int64_t> used;
    for (const Candidate& candidate : candidates) {
      if (used.count(candidate.a) || used.count(candidate.c)) continue;
      used.insert(candidate.a);
      used.insert(candidate.c);
      chosen.emplace_back(candidate.a, candidate.c);
      d.pairing_score = std::max(d.pairing_score, candidate.score);
    }
    std::sort(chosen.begin(), chosen.end());
    // The best matching may still be a standard pattern (e.g. noisy samples above the threshold).
    d.pairing = Pairing::Other;
    if (d.rotated_contiguous) {
      if (chosen == standard_pairs(Pairing::HalfSplit, d.rotated_offset, d.rotary_dim)) d.pairing = Pairing::HalfSplit;
      else if (chosen == standard_pairs(Pairing::Interleaved, d.rotated_offset, d.rotary_dim)) d.pairing = Pairing::Interleaved;
    }
  }

  // 3. Per pair: attention scaling, angle fit.
  std::vector<double> residual, angle;
  std::vector<double> scalings;
  double small_residual = 0.0, per_radian = 0.0, max_angle = 0.0;
  bool any_small = false;
  for (const auto& [a, c] : chosen) {
    PairFinding pair;
    pair.first = a;
    pair.second = c;
    pair.norm_spread = norm_spread(v, num_rows, a, c);
    double pair_small = -1.0;
    fit_pair(v, num_rows, pair, residual, angle, pair_small);
    scalings.push_back(pair.attention_scaling);
    if (pair_small >= 0.0) {
      small_residual = std::max(small_residual, pair_small);
      any_small = true;
    }
    for (int64_t r = 0; r < num_rows; ++r) {
      const double res = residual[static_cast<size_t>(r)], ang = angle[static_cast<size_t>(r)];
      max_angle = std::max(max_angle, ang);
      if (ang > kSmallAngleRad) per_radian = std::max(per_radian, res / ang);
    }
    d.max_residual_rad = std::max(d.max_residual_rad, pair.max_residual_rad);
    d.pairs.push_back(pair);
  }
  d.small_angle_residual_rad = any_small ? small_residual : d.max_residual_rad;
  d.residual_per_radian = per_radian;
  d.attention_scaling = median(scalings);
  for (const double s : scalings) {
    d.attention_scaling_spread = std::max(d.attention_scaling_spread, std::abs(s / d.attention_scaling - 1.0));
  }

  // 4. Direction: the sign of the slopes.
  int64_t negative = 0;
  for (const PairFinding& pair : d.pairs) negative += pair.inv_freq_signed < 0.0;
  const int64_t num_pairs = static_cast<int64_t>(d.pairs.size());
  d.direction = 2 * negative > num_pairs ? Direction::Backward : Direction::Forward;
  d.num_pairs_against_direction = d.direction == Direction::Backward ? num_pairs - negative : negative;

  // 5. Position offset: the integer delta minimising sum_i (1 - cos(c_i - delta theta_i)).
  {
    double best_cost = std::numeric_limits<double>::infinity();
    int64_t best = 0;
    const int64_t limit = std::max<int64_t>(0, options.max_position_offset);
    for (int64_t delta = -limit; delta <= limit; ++delta) {
      double cost = 0.0;
      for (const PairFinding& pair : d.pairs) {
        cost += 1.0 - std::cos(pair.phase_rad - static_cast<double>(delta) * pair.inv_freq_signed);
      }
      // Ties (and near-ties within rounding) go to the smallest |delta|.
      if (cost < best_cost - 1e-12 || (std::abs(cost - best_cost) <= 1e-12 && std::abs(delta) < std::abs(best))) {
        best_cost = cost;
        best = delta;
      }
    }
    d.position_offset = best;
    for (const PairFinding& pair : d.pairs) {
      d.position_offset_residual = std::max(
          d.position_offset_residual, std::abs(wrap(pair.phase_rad - static_cast<double>(best) * pair.inv_freq_signed)));
    }
  }

  // 6. Precision class from the residuals (docs/analysis.md, "Diagnose": precision).
  // Exact: float64 angles p * theta carry |angle| 2^-53 of rounding, and the fit of angles up to
  // max_angle loses about as much (the intercept is a difference of such angles).
  const double storage_floor = std::max(64.0 * options.storage_epsilon, 1e-12);
  const double large_floor = std::max(storage_floor, 0x1p-46 * max_angle);
  if (d.small_angle_residual_rad > std::max(kFloat16SmallAngleResidual, storage_floor) ||
      d.pairing_score > std::max(kFloat16NormSpread, storage_floor)) {
    d.precision = PrecisionClass::Float16;
  } else if (per_radian > 1e-10 && d.max_residual_rad > std::max(4.0 * d.small_angle_residual_rad, large_floor)) {
    d.precision = PrecisionClass::Float32AngleDrift;
  } else if (d.small_angle_residual_rad > storage_floor) {
    d.precision = PrecisionClass::Float32Table;
  } else {
    d.precision = PrecisionClass::Exact;
  }

  // 7. Tolerances on ln(theta_i): the angle residual spread over the position span, plus 1e-6
  // for inv_freq rounded to float32 (HF computes it so; 6e-8 relative).
  const double span = static_cast<double>(*distinct.rbegin() - *distinct.begin());
  // The fit absorbs part of the error of the far positions (they have the leverage), so the
  // noise is also taken from the small-angle fit, over every pair.
  for (const PairFinding& pair : d.pairs) {
    const double noise = std::max({pair.max_residual_rad, d.small_angle_residual_rad, 1e-15});
    d.inv_freq_tolerance.push_back(pair.inv_freq > 0.0 ? 1e-6 + 8.0 * noise / (pair.inv_freq * span)
                                                       : std::numeric_limits<double>::infinity());
  }

  // 8. Log-linear fit of ln theta_i on i, weighted by 1 / tolerance^2.
  {
    double sw = 0, si = 0, sl = 0, sii = 0, sil = 0;
    for (int64_t i = 0; i < num_pairs; ++i) {
      const double tol = d.inv_freq_tolerance[static_cast<size_t>(i)];
      if (!std::isfinite(tol) || tol > 0.1) continue;
      const double w = 1.0 / (tol * tol), l = std::log(d.pairs[static_cast<size_t>(i)].inv_freq);
      const double x = static_cast<double>(i);
      sw += w;
      si += w * x;
      sl += w * l;
      sii += w * x * x;
      sil += w * x * l;
    }
    const double det = sw * sii - si * si;
    bool log_linear = false;
    if (sw > 0 && det > 0) {
      const double slope = (sw * sil - si * sl) / det;
      const double intercept = (sl - slope * si) / sw;
      d.fitted_theta_base = std::exp(-slope * static_cast<double>(num_pairs));  // slope = -(2/d) ln b
      d.fitted_linear_factor = std::exp(-intercept);
      log_linear = true;
      for (int64_t i = 0; i < num_pairs; ++i) {
        const double tol = d.inv_freq_tolerance[static_cast<size_t>(i)];
        if (!std::isfinite(tol) || tol > 0.1) continue;
        const double res =
            std::abs(std::log(d.pairs[static_cast<size_t>(i)].inv_freq) - (intercept + slope * static_cast<double>(i)));
        d.fit_max_log_residual = std::max(d.fit_max_log_residual, res);
        if (res > tol) log_linear = false;
      }
    }
    d.candidates = compare_with_presets(d.inv_freq(), d.inv_freq_tolerance, d.max_position + 1);
    if (!d.candidates.empty()) d.nearest_preset = d.candidates.front().name;
    // Notes on what the samples leave uncertain.
    double slowest_turn = std::numeric_limits<double>::infinity(), fastest = 0.0;
    int64_t slowest_pair = 0;
    for (int64_t i = 0; i < num_pairs; ++i) {
      const double turn = d.pairs[static_cast<size_t>(i)].inv_freq * span;
      if (turn < slowest_turn) {
        slowest_turn = turn;
        slowest_pair = i;
      }
      fastest = std::max(fastest, d.pairs[static_cast<size_t>(i)].inv_freq);
    }
    // 50x the angle noise (0.02 rad at least) separates a wrong partner from the noise with margin.
    if (slowest_turn < std::max(0.02, 50.0 * d.small_angle_residual_rad)) {
      d.notes.push_back(detail::concat("pair ", slowest_pair, " turns by only ", slowest_turn,
                                       " rad over the sampled positions: its partner and inv_freq are uncertain, and "
                                       "slower pairs may look like pass-through dims; add a larger position"));
    }
    const double first_step = static_cast<double>(*std::next(distinct.begin()) - *distinct.begin());
    if (fastest * first_step > 2.5) {  // within ~0.6 rad of pi: noise could alias it
      d.notes.push_back(detail::concat("the first position step, ", first_step, ", turns the fastest pair by ",
                                       fastest * first_step,
                                       " rad: at pi or more its inv_freq aliases (theta and theta + 2 pi / step fit "
                                       "alike); add positions 1 apart"));
    }
    if (d.pairing == Pairing::Ambiguous) {
      d.notes.push_back("both the half-split and the interleaved pairing fit: every angle is below the noise at the "
                        "sampled positions");
    }
    if (!d.rotated_contiguous) {
      d.notes.push_back("the changed elements are not contiguous: a rotated block whose slowest pairs barely turn, "
                        "or a layout with pairs across the head (proportional)");
    }
    if (log_linear) {
      d.scheme = std::abs(std::log(d.fitted_linear_factor)) <= d.inv_freq_tolerance.front() ? "default" : "linear";
    } else if (!d.candidates.empty() && d.candidates.front().matches) {
      d.scheme = "per-pair scaling (" + d.candidates.front().scheme + ")";
    } else {
      d.scheme = "per-pair scaling (unknown)";
    }
  }
  return d;
}

// ---- compare_to_spec ---------------------------------------------------------------------------

namespace {

std::string dims_range(int64_t begin, int64_t end) {  // "[0, 24)"
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + ")";
}

std::string pairing_words(Pairing pairing, int64_t offset, int64_t rotary_dim,
                          const std::vector<PairFinding>& pairs) {
  const std::string o = offset == 0 ? "" : std::to_string(offset) + "+";
  switch (pairing) {
    case Pairing::HalfSplit:
      return "pairs (x[" + o + "i], x[" + o + "i+" + std::to_string(rotary_dim / 2) + "]) (half-split, NeoX)";
    case Pairing::Interleaved:
      return "pairs (x[" + o + "2i], x[" + o + "2i+1]) (interleaved, GPT-J)";
    case Pairing::Ambiguous:
      return "pairs elements in a way the samples cannot tell (every angle is below the noise)";
    case Pairing::Other: break;
  }
  std::string text = "pairs ";
  for (size_t i = 0; i < pairs.size() && i < 4; ++i) {
    text += (i ? ", " : "") + std::string("(x[") + std::to_string(pairs[i].first) + "], x[" +
            std::to_string(pairs[i].second) + "])";
  }
  return text + (pairs.size() > 4 ? ", ..." : "") + " (another permutation)";
}

void add(std::vector<Mismatch>& out, std::string aspect, std::string implementation, std::string model) {
  std::string message = "your implementation " + implementation + "; this model " + model;
  out.push_back({std::move(aspect), std::move(implementation), std::move(model), std::move(message)});
}

// max_i |ln(a_i / b_i)| - tol_i <= 0 for every pair.
bool frequencies_match(const std::vector<double>& measured, const std::vector<double>& model,
                       const std::vector<double>& tolerance) {
  if (measured.size() != model.size()) return false;
  for (size_t i = 0; i < measured.size(); ++i) {
    if (!(model[i] > 0.0) || !(measured[i] > 0.0)) return false;
    if (std::abs(std::log(measured[i] / model[i])) > tolerance[i]) return false;
  }
  return true;
}

}  // namespace

std::vector<Mismatch> compare_to_spec(const Diagnosis& diag, const RopeSpec& spec) {
  validate(spec);
  std::vector<Mismatch> out;
  if (diag.head_dim != spec.head_dim) {
    add(out, "head_dim", "has head_dim " + std::to_string(diag.head_dim),
        "has head_dim " + std::to_string(spec.head_dim) + " (" + spec.name + ")");
    return out;
  }
  const int64_t seq_len = diag.max_position + 1;
  const Frequencies model_freqs = frequencies(spec, seq_len);
  // The model's rotated elements: Proportional rotates pairs (i, i + D/2) with a non-zero theta.
  const bool proportional = spec.scaling.type == ScalingType::Proportional;
  int64_t model_pairs = spec.num_pairs();
  std::vector<double> model_inv_freq = model_freqs.inv_freq;
  if (proportional) {
    model_inv_freq.erase(std::remove(model_inv_freq.begin(), model_inv_freq.end(), 0.0), model_inv_freq.end());
    model_pairs = static_cast<int64_t>(model_inv_freq.size());
  }
  const int64_t model_rotary_dim = 2 * model_pairs;

  // Rotated dims.
  const bool same_block = proportional ? true
                                       : diag.rotated_contiguous && diag.rotated_offset == 0 &&
                                             diag.rotary_dim == model_rotary_dim;
  if (!same_block) {
    std::string impl;
    if (diag.rotated_contiguous) {
      impl = "rotates dims " + dims_range(diag.rotated_offset, diag.rotated_offset + diag.rotary_dim) + " (" +
             std::to_string(diag.rotary_dim) + " dims)";
      if (diag.rotary_dim < diag.head_dim) {
        impl += " and passes the other " + std::to_string(diag.head_dim - diag.rotary_dim) + " through";
      }
    } else {
      impl = "rotates " + std::to_string(diag.rotary_dim) + " dims that are not contiguous (first " +
             std::to_string(diag.rotated_offset) + ")";
    }
    std::string model = "rotates dims " + dims_range(0, model_rotary_dim) + " (" + std::to_string(model_rotary_dim) +
                        " dims)";
    if (model_rotary_dim < spec.head_dim) {
      model += " and passes " + dims_range(model_rotary_dim, spec.head_dim) + " through";
    }
    add(out, "rotated_dims", impl, model);
  }

  // Pairing.
  const Pairing model_pairing =
      proportional || spec.style == Style::NeoX ? Pairing::HalfSplit : Pairing::Interleaved;
  if (diag.pairing != Pairing::Ambiguous && diag.pairing != model_pairing && model_rotary_dim > 2) {
    const std::string model_words =
        proportional ? "pairs (x[i], x[i+" + std::to_string(spec.head_dim / 2) + "]) (half-split over the full head, "
                                                                                    "proportional)"
                     : pairing_words(model_pairing, 0, model_rotary_dim, {});
    add(out, "pairing", pairing_words(diag.pairing, diag.rotated_offset, diag.rotary_dim, diag.pairs), model_words);
  }

  // Direction.
  if (diag.direction == Direction::Backward) {
    add(out, "direction",
        "rotates by -p*theta (the inverse, conjugate rotation: sin negated) in " +
            std::to_string(diag.pairs.size() - static_cast<size_t>(diag.num_pairs_against_direction)) + " of " +
            std::to_string(diag.pairs.size()) + " pairs",
        "rotates by +p*theta (forward)");
  }

  // Frequencies (only when the pair counts agree).
  const std::vector<double> measured = diag.inv_freq();
  if (static_cast<int64_t>(measured.size()) == model_pairs && !frequencies_match(measured, model_inv_freq,
                                                                                  diag.inv_freq_tolerance)) {
    bool explained = false;
    // LongRoPE: the other factor set.
    if (spec.scaling.type == ScalingType::LongRope) {
      const bool model_long = model_freqs.longrope_factor_set == LongRopeFactorSet::Long;
      const int64_t other_seq_len = model_long ? 0 : spec.original_context() + 1;
      if (frequencies_match(measured, frequencies(spec, other_seq_len).inv_freq, diag.inv_freq_tolerance)) {
        const std::string used = model_long ? "short_factor" : "long_factor";
        const std::string want = model_long ? "long_factor" : "short_factor";
        add(out, "factor_set",
            "uses LongRoPE's " + used + " at positions up to " + std::to_string(diag.max_position),
            "uses " + want + " there (seq_len " + std::to_string(seq_len) + (model_long ? " > " : " <= ") +
                "original context " + std::to_string(spec.original_context()) + ")");
        explained = true;
      }
    }
    // A constant ratio: positions scaled (a linear factor missing or extra).
    if (!explained) {
      std::vector<double> log_ratio;
      for (size_t i = 0; i < measured.size(); ++i) log_ratio.push_back(std::log(measured[i] / model_inv_freq[i]));
      const double mid = median(log_ratio);
      bool constant = true;
      for (size_t i = 0; i < measured.size(); ++i) {
        if (std::abs(log_ratio[i] - mid) > diag.inv_freq_tolerance[i]) constant = false;
      }
      if (constant) {
        const double k = std::exp(mid);
        const double model_factor = spec.scaling.type == ScalingType::Linear ? spec.resolved_factor() : 1.0;
        if (spec.scaling.type == ScalingType::Linear && std::abs(k / model_factor - 1.0) < 1e-3) {
          add(out, "factor",
              "uses inv_freq " + number(k) + "x the model's at every pair (positions not divided by the factor: "
              "linear scaling missing)",
              "divides inv_freq by its linear factor " + number(model_factor) + " (rope_scaling linear)");
        } else {
          add(out, "factor", "uses inv_freq " + number(k) + "x the model's at every pair (as if positions were " +
                                 (k > 1 ? "multiplied" : "divided") + " by " + number(k > 1 ? k : 1 / k) + ")",
              std::string("uses ") +
                  (spec.scaling.type == ScalingType::Linear ? "linear factor " + number(model_factor)
                                                            : std::string("no linear factor")));
        }
        explained = true;
      }
    }
    // The unscaled frequencies of a scaled model: the scheme is not applied.
    if (!explained && spec.scaling.type != ScalingType::Default &&
        frequencies_match(measured, default_inv_freq(spec), diag.inv_freq_tolerance)) {
      add(out, "scaling", "uses the unscaled frequencies rope_theta^(-2i/d) (no scaling scheme)",
          "applies " + std::string(to_string(spec.scaling.type)) + " scaling (factor " +
              number(spec.resolved_factor()) + ")");
      explained = true;
    }
    // A plain theta^(-2i/d) law with another base.
    if (!explained && diag.scheme == "default") {
      add(out, "theta",
          "uses rope_theta " + number(diag.fitted_theta_base) + " (its inv_freq fit base^(-2i/d) with no scaling)",
          "uses rope_theta " + number(spec.theta_base) +
              (spec.scaling.type == ScalingType::Default
                   ? std::string()
                   : " with " + std::string(to_string(spec.scaling.type)) + " scaling"));
      explained = true;
    }
    if (!explained) {
      size_t worst = 0;
      double worst_dev = -1;
      for (size_t i = 0; i < measured.size(); ++i) {
        const double dev = std::abs(std::log(measured[i] / model_inv_freq[i]));
        if (dev > worst_dev) {
          worst_dev = dev;
          worst = i;
        }
      }
      add(out, "inv_freq",
          "has inv_freq[" + std::to_string(worst) + "] = " + number(measured[worst]) + " (" + diag.scheme +
              "; fits rope_theta " + number(diag.fitted_theta_base) + ", linear factor " +
              number(diag.fitted_linear_factor) + (diag.nearest_preset.empty() ? "" : "; nearest preset " +
                                                                                          diag.nearest_preset) + ")",
          "has inv_freq[" + std::to_string(worst) + "] = " + number(model_inv_freq[worst]) + " (" +
              std::string(to_string(spec.scaling.type)) + ", rope_theta " + number(spec.theta_base) + ")");
    }
  }

  // Position offset.
  if (diag.position_offset != 0) {
    const std::string sign = diag.position_offset > 0 ? "+" : "-";
    const std::string magnitude = std::to_string(std::abs(diag.position_offset));
    add(out, "position_offset",
        "rotates position p by the angle of position p" + sign + magnitude + " (position offset " + sign + magnitude +
            ")",
        "rotates position p by the angle of p (offset 0)");
  }

  // Attention scaling.
  const double model_scaling = model_freqs.attention_scaling;
  const double scaling_tolerance = std::max(1e-6, 2.0 * diag.attention_scaling_spread + 1e-9);
  if (std::abs(diag.attention_scaling / model_scaling - 1.0) > scaling_tolerance) {
    add(out, "attention_scaling",
        "scales cos and sin by " + number(diag.attention_scaling) + " (|y_pair| / |x_pair|)",
        "scales them by " + number(model_scaling) + " (attention_scaling" +
            (model_freqs.attention_scaling_source.empty() ? std::string()
                                                          : ": " + model_freqs.attention_scaling_source) +
            ")");
  }

  // Precision.
  if (diag.precision == PrecisionClass::Float16) {
    add(out, "precision",
        "computes its angles or cos/sin in float16 (angle errors up to " + number(diag.max_residual_rad, 3) +
            " rad, " + number(diag.small_angle_residual_rad, 3) + " rad at small angles)",
        "needs them in float32 or better (Hugging Face forms them in float32; rotary's exact table in float64)");
  }
  return out;
}

}  // namespace rotary::analysis
