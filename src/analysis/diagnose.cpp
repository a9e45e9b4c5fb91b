// src/analysis/diagnose.cpp: an unknown RoPE implementation inferred from samples (x, y,
// positions), and its differences from a spec (include/rotary/diagnose.hpp). The math, the
// thresholds and what stays ambiguous are in docs/analysis.md, "Diagnose".
#include "rotary/diagnose.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numbers>
#include <optional>
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

// A pair's angle fit is supported when its max residual is at most this (or 16 u of the storage):
// bfloat16 cos/sin err by ~2^-8 rad, float32 angles at p = 3e5 by ~0.02 rad. An aliased or failed
// fit leaves residuals of order 1 rad.
constexpr double kFitResidualLimitRad = 0.05;
// Angles that move by no more than this (or 16 u) between positions do not turn: the smallest
// turn a real RoPE makes between two distinct positions is that of pair 0 (theta_0 = 1 rad).
constexpr double kConstantAngleRad = 1e-3;
// The angle noise assumed when looking for aliases of a supported fit (at least this), and when
// searching the slopes of a failed one: float16 cos/sin err by ~5e-4 rad.
constexpr double kAliasNoiseRad = 1e-3;
constexpr double kSearchNoiseRad = 5e-3;

double wrap(double angle) { return std::remainder(angle, kTwoPi); }  // (-pi, pi]

// The part of every ln(theta_i) tolerance that covers inv_freq rounded to float32 (HF computes it
// so; 6e-8 relative).
constexpr double kInvFreqRounding = 1e-6;

// |ln(measured / model)| within a pair's tolerance (Diagnosis::inv_freq_tolerance). Its noise part,
// 8 noise / (measured span), is an uncertainty on theta over the measured theta; it is taken over
// the larger of the two thetas, so that a pair measured near 0 (it barely turned) does not match a
// model pair that turns by far more than the noise. A zero, infinite or NaN value never matches.
bool within_tolerance(double measured, double model, double tolerance) {
  if (!(measured > 0.0) || !(model > 0.0) || !std::isfinite(tolerance)) return false;
  const double noise_part = (tolerance - kInvFreqRounding) * std::min(1.0, measured / model);
  return std::abs(std::log(measured / model)) <= kInvFreqRounding + noise_part;
}

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
// The angle of pair (a, c) at each distinct position (sorted): atan2 of the summed cross and dot
// products of the rows at that position.
void grouped_angles(const RowView& v, int64_t num_rows, int64_t a, int64_t c, std::vector<double>& positions,
                    std::vector<double>& angles) {
  std::map<int64_t, std::pair<double, double>> by_position;  // position -> (sum cross, sum dot)
  for (int64_t r = 0; r < num_rows; ++r) {
    const double xa = v.x(r, a), xc = v.x(r, c), ya = v.y(r, a), yc = v.y(r, c);
    auto& [cross, dot] = by_position[v.s.positions[static_cast<size_t>(r)]];
    cross += xa * yc - xc * ya;
    dot += xa * ya + xc * yc;
  }
  positions.clear();
  angles.clear();
  for (const auto& [p, cd] : by_position) {
    positions.push_back(static_cast<double>(p));
    angles.push_back(std::atan2(cd.first, cd.second));
  }
}

// Every slope theta in [-pi, pi] with |wrap(theta (P_k - P_0) - (phi_k - phi_0))| <= tolerance at
// each distinct position, as the midpoints of disjoint intervals (one crossing +-pi counts once).
// Integer positions cannot tell theta from theta + 2 pi, so [-pi, pi] holds every distinct
// candidate; more than one means the positions alias. Empty when none fits; nullopt when the
// candidates exceed `cap` (positions so sparse that aliases abound).
std::optional<std::vector<double>> consistent_slopes(const std::vector<double>& positions,
                                                     const std::vector<double>& angles, double tolerance,
                                                     size_t cap = size_t{1} << 16) {
  std::vector<std::pair<double, double>> intervals{{-std::numbers::pi, std::numbers::pi}}, next;
  for (size_t k = 1; k < positions.size(); ++k) {
    const double dp = positions[k] - positions[0];
    const double target = wrap(angles[k] - angles[0]);
    next.clear();
    for (const auto& [lo, hi] : intervals) {
      const double n_lo = std::ceil((lo * dp - target - tolerance) / kTwoPi);
      const double n_hi = std::floor((hi * dp - target + tolerance) / kTwoPi);
      for (double n = n_lo; n <= n_hi; n += 1.0) {
        const double a = std::max(lo, (target + kTwoPi * n - tolerance) / dp);
        const double b = std::min(hi, (target + kTwoPi * n + tolerance) / dp);
        if (a <= b) next.emplace_back(a, b);
        if (next.size() > cap) return std::nullopt;
      }
    }
    intervals.swap(next);
  }
  // The intervals come in increasing order: merge the touching ones, then the two ends of the band.
  std::vector<std::pair<double, double>> merged;
  for (const auto& interval : intervals) {
    if (!merged.empty() && interval.first <= merged.back().second) {
      merged.back().second = std::max(merged.back().second, interval.second);
    } else {
      merged.push_back(interval);
    }
  }
  if (merged.size() > 1 && merged.front().first <= -std::numbers::pi && merged.back().second >= std::numbers::pi) {
    merged.erase(merged.begin());
  }
  std::vector<double> out;
  for (const auto& [lo, hi] : merged) out.push_back(0.5 * (lo + hi));
  return out;
}

// guide: when set, each angle is unwrapped to the multiple of 2 pi nearest guide * (P_k - P_0)
// (a slope found by count_consistent_slopes) instead of the running slope.
void fit_pair(const RowView& v, int64_t num_rows, PairFinding& pair, std::vector<double>& row_residual,
              std::vector<double>& row_angle, double& small_residual, std::optional<double> guide = std::nullopt) {
  const int64_t a = pair.first, c = pair.second;
  std::vector<double> ratios;
  for (int64_t r = 0; r < num_rows; ++r) {
    const double xa = v.x(r, a), xc = v.x(r, c), ya = v.y(r, a), yc = v.y(r, c);
    const double nx = xa * xa + xc * xc;
    if (nx > 1e-300) ratios.push_back(std::sqrt((ya * ya + yc * yc) / nx));
  }
  pair.attention_scaling = median(ratios);
  std::vector<double> positions, angles;
  grouped_angles(v, num_rows, a, c, positions, angles);
  const size_t k_count = positions.size();
  std::vector<double> unwrapped(k_count, 0.0);  // relative to the first position
  double theta = 0.0, s_pp = 0.0, s_pu = 0.0;
  for (size_t k = 1; k < k_count; ++k) {
    const double dp = positions[k] - positions[0];
    const double measured = wrap(angles[k] - angles[0]);
    double u = measured;
    if (guide) u = measured + kTwoPi * std::round((*guide * dp - measured) / kTwoPi);
    else if (k > 1) u = measured + kTwoPi * std::round((theta * dp - measured) / kTwoPi);
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
      // An infinite or NaN deviation or tolerance proves nothing (inf <= inf must not match).
      if (!within_tolerance(measured[i], f.inv_freq[i], tolerance[i])) candidate.matches = false;
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
  // A rotation keeps each pair's norm (times the attention scaling): y = 0 keeps none.
  bool y_zero = true;
  for (int64_t r = 0; r < num_rows && y_zero; ++r) {
    for (const int64_t j : rotated) y_zero = y_zero && v.y(r, j) == 0.0;
  }
  if (y_zero) {
    throw Error(detail::concat("diagnose: y is not a rotation of x: y is 0 at all ", rotated.size(),
                               " changed elements in all ", num_rows, " rows (a rotation keeps each pair's norm)"));
  }
  if (rotated.size() % 2 != 0) {
    throw Error(detail::concat("diagnose: the changed elements must form pairs (got ", rotated.size(),
                               " changed elements, first ", rotated.front(), ", last ", rotated.back(), ")"));
  }
  d.rotated_offset = rotated.front();
  d.rotary_dim = static_cast<int64_t>(rotated.size());
  d.rotated_contiguous = rotated.back() - rotated.front() + 1 == d.rotary_dim;

  // 2. Pairing: the standard patterns first, else a greedy matching by norm-ratio spread.
  // bfloat16 storage alone moves the norm ratio by up to ~4 u = 0.016 (x and y each rounded).
  const double pair_threshold = std::max(kPairSpreadThreshold, 8.0 * options.storage_epsilon);
  std::vector<std::pair<int64_t, int64_t>> chosen;
  double neox_score = std::numeric_limits<double>::infinity(), gptj_score = neox_score;
  if (d.rotated_contiguous) {
    const auto neox = standard_pairs(Pairing::HalfSplit, d.rotated_offset, d.rotary_dim);
    const auto gptj = standard_pairs(Pairing::Interleaved, d.rotated_offset, d.rotary_dim);
    neox_score = pattern_score(v, num_rows, neox);
    gptj_score = d.rotary_dim == 2 ? neox_score : pattern_score(v, num_rows, gptj);
    const bool neox_fits = neox_score <= pair_threshold, gptj_fits = gptj_score <= pair_threshold;
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
  // A rotation scaled by s keeps |y_pair|^2 / |x_pair|^2 = s^2 in every row, in float16 too
  // (kPairSpreadThreshold): when even the best pairing breaks that, y is not x rotated pair by pair.
  if (!(d.pairing_score <= pair_threshold)) {
    std::string tried;
    if (d.rotated_contiguous) {
      tried = "half-split " + number(neox_score, 3) + ", interleaved " + number(gptj_score, 3) + ", ";
    }
    throw Error(detail::concat("diagnose: y is not a rotation of x pair by pair: no pairing keeps each pair's norm "
                               "ratio |y_pair|^2 / |x_pair|^2 the same in all ",
                               num_rows, " rows (worst spread: ", tried, "best matching of the ", d.rotary_dim,
                               " changed elements ", number(d.pairing_score, 3), "; a rotation keeps it within ",
                               number(pair_threshold, 3), ")"));
  }

  // 3. RoPE turns a pair by an angle that depends on the position. When every pair has one angle
  // at every sampled position, y is a constant rotation of x (y = 2x: 0 rad; y = -x: pi rad):
  // there is no theta to infer.
  {
    const double constant_limit = std::max(kConstantAngleRad, 16.0 * options.storage_epsilon);
    bool turns = false, all_zero = true, all_pi = true;
    std::vector<double> positions, angles;
    for (const auto& [a, c] : chosen) {
      grouped_angles(v, num_rows, a, c, positions, angles);
      for (size_t k = 1; k < angles.size(); ++k) turns = turns || std::abs(wrap(angles[k] - angles[0])) > constant_limit;
      all_zero = all_zero && std::abs(angles[0]) <= constant_limit;
      all_pi = all_pi && std::abs(wrap(angles[0] - std::numbers::pi)) <= constant_limit;
    }
    if (!turns) {
      grouped_angles(v, num_rows, chosen[0].first, chosen[0].second, positions, angles);
      std::vector<double> ratios;
      for (const auto& [a, c] : chosen) {
        for (int64_t r = 0; r < num_rows; ++r) {
          const double nx = v.x(r, a) * v.x(r, a) + v.x(r, c) * v.x(r, c);
          if (nx > 1e-300) ratios.push_back(std::sqrt((v.y(r, a) * v.y(r, a) + v.y(r, c) * v.y(r, c)) / nx));
        }
      }
      const std::string s = number(median(ratios), 6);
      const std::string what = all_zero ? "y = " + s + " * x: nothing rotates"
                               : all_pi ? "y = -" + s + " * x: every pair turned by pi"
                                        : "pair 0 turned by " + number(angles[0], 6) + " rad, scaled by " + s;
      throw Error(detail::concat("diagnose: y is not a rotation of x by a position-dependent angle: every pair has the "
                                 "same angle at all ",
                                 d.num_distinct_positions, " distinct positions (", what,
                                 "); RoPE turns pair i by p * theta_i"));
    }
  }

  // 4. Per pair: attention scaling, angle fit, and whether the samples pin inv_freq down. The
  // running-slope unwrapping fails when a first step turns a fast pair past pi; the slopes
  // consistent with every angle then settle it when exactly one fits (8 random positions do).
  const double fit_limit = std::max(kFitResidualLimitRad, 16.0 * options.storage_epsilon);
  d.fit_residual_limit_rad = fit_limit;
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
    std::vector<double> positions, angles;
    grouped_angles(v, num_rows, a, c, positions, angles);
    const bool fit_supported = pair.max_residual_rad <= fit_limit;
    // Each difference of two angles carries twice their noise.
    const double noise = fit_supported ? std::max(2.0 * pair.max_residual_rad, kAliasNoiseRad)
                                       : std::max(kSearchNoiseRad, 4.0 * options.storage_epsilon);
    const std::optional<std::vector<double>> slopes = consistent_slopes(positions, angles, 2.0 * noise);
    const bool unique = slopes && slopes->size() == 1;
    if (!fit_supported && unique) {
      fit_pair(v, num_rows, pair, residual, angle, pair_small, slopes->front());
    }
    pair.identified = unique && pair.max_residual_rad <= fit_limit;
    scalings.push_back(pair.attention_scaling);
    if (pair.identified) {
      ++d.num_pairs_identified;
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
    }
    d.pairs.push_back(pair);
  }
  d.small_angle_residual_rad = any_small ? small_residual : d.max_residual_rad;
  d.residual_per_radian = per_radian;
  d.attention_scaling = median(scalings);
  for (const double s : scalings) {
    d.attention_scaling_spread = std::max(d.attention_scaling_spread, std::abs(s / d.attention_scaling - 1.0));
  }
  const int64_t num_pairs = static_cast<int64_t>(d.pairs.size());
  const bool any_identified = d.num_pairs_identified > 0;
  const bool all_identified = d.num_pairs_identified == num_pairs;
  if (d.pairing == Pairing::Ambiguous) d.cannot_tell.push_back("pairing");
  if (!all_identified) d.cannot_tell.push_back("theta");

  // 5. Direction: the sign of the identified pairs' slopes.
  if (any_identified) {
    int64_t negative = 0;
    for (const PairFinding& pair : d.pairs) negative += pair.identified && pair.inv_freq_signed < 0.0;
    d.direction = 2 * negative > d.num_pairs_identified ? Direction::Backward : Direction::Forward;
    d.num_pairs_against_direction = d.direction == Direction::Backward ? d.num_pairs_identified - negative : negative;
  } else {
    d.cannot_tell.push_back("direction");
  }

  // 6. Position offset: the integer delta minimising sum_i (1 - cos(c_i - phase - delta theta_i))
  // over the identified pairs, first with no constant phase, then with pi/2, -pi/2 and pi (cos and
  // sin swapped, or negated). It is reported when its residual is within fit_limit and no other
  // delta fits as well (slow pairs alone leave many).
  if (any_identified) {
    const int64_t limit = std::max<int64_t>(0, options.max_position_offset);
    bool found = false;
    for (const double phase : {0.0, std::numbers::pi / 2, -std::numbers::pi / 2, std::numbers::pi}) {
      double best_cost = std::numeric_limits<double>::infinity(), best_residual = 0.0;
      int64_t best = 0, fitting = 0;
      for (int64_t delta = -limit; delta <= limit; ++delta) {
        double cost = 0.0, worst = 0.0;
        for (const PairFinding& pair : d.pairs) {
          if (!pair.identified) continue;
          const double miss = pair.phase_rad - phase - static_cast<double>(delta) * pair.inv_freq_signed;
          cost += 1.0 - std::cos(miss);
          worst = std::max(worst, std::abs(wrap(miss)));
        }
        fitting += worst <= fit_limit;
        // Ties (and near-ties within rounding) go to the smallest |delta|.
        if (cost < best_cost - 1e-12 || (std::abs(cost - best_cost) <= 1e-12 && std::abs(delta) < std::abs(best))) {
          best_cost = cost;
          best = delta;
          best_residual = worst;
        }
      }
      if (phase == 0.0) d.position_offset_residual = best_residual;
      if (best_residual <= fit_limit && fitting == 1) {
        d.position_offset = best;
        d.position_offset_residual = best_residual;
        d.constant_phase_rad = phase;
        found = true;
        break;
      }
      if (best_residual <= fit_limit) break;  // fits, but aliased: no other phase will do better
    }
    if (!found) d.cannot_tell.push_back("position_offset");
    d.cos_sin_swapped = found && d.constant_phase_rad == std::numbers::pi / 2 && d.direction == Direction::Backward;
  } else {
    d.cannot_tell.push_back("position_offset");
  }

  // 7. Precision class from the identified pairs' residuals (docs/analysis.md, "Diagnose": precision).
  // Exact: float64 angles p * theta carry |angle| 2^-53 of rounding, and the fit of angles up to
  // max_angle loses about as much (the intercept is a difference of such angles).
  const double storage_floor = std::max(64.0 * options.storage_epsilon, 1e-12);
  const double large_floor = std::max(storage_floor, 0x1p-46 * max_angle);
  if (!any_identified) {
    d.cannot_tell.push_back("precision");
  } else if (d.small_angle_residual_rad > std::max(kFloat16SmallAngleResidual, storage_floor) ||
             d.pairing_score > std::max(kFloat16NormSpread, storage_floor)) {
    d.precision = PrecisionClass::Float16;
  } else if (per_radian > 1e-10 && d.max_residual_rad > std::max(4.0 * d.small_angle_residual_rad, large_floor)) {
    d.precision = PrecisionClass::Float32AngleDrift;
  } else if (d.small_angle_residual_rad > storage_floor) {
    d.precision = PrecisionClass::Float32Table;
  } else {
    d.precision = PrecisionClass::Exact;
  }

  // 8. Tolerances on ln(theta_i): the angle residual spread over the position span, plus 1e-6
  // for inv_freq rounded to float32 (HF computes it so; 6e-8 relative). An unidentified pair's is
  // infinite: it matches nothing and contradicts nothing.
  const double span = static_cast<double>(*distinct.rbegin() - *distinct.begin());
  // The fit absorbs part of the error of the far positions (they have the leverage), so the
  // noise is also taken from the small-angle fit, over every pair.
  for (const PairFinding& pair : d.pairs) {
    const double noise = std::max({pair.max_residual_rad, d.small_angle_residual_rad, 1e-15});
    d.inv_freq_tolerance.push_back(pair.identified && pair.inv_freq > 0.0
                                       ? kInvFreqRounding + 8.0 * noise / (pair.inv_freq * span)
                                       : std::numeric_limits<double>::infinity());
  }

  // 9. Log-linear fit of ln theta_i on i, weighted by 1 / tolerance^2, and the presets: only when
  // every pair is identified (a law fitted to some pairs can take llama3's slow pairs for linear).
  if (all_identified) {
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
    if (log_linear) {
      d.scheme = std::abs(std::log(*d.fitted_linear_factor)) <= d.inv_freq_tolerance.front() ? "default" : "linear";
    } else if (!d.candidates.empty() && d.candidates.front().matches) {
      d.scheme = "per-pair scaling (" + d.candidates.front().scheme + ")";
    } else {
      d.scheme = "per-pair scaling (unknown)";
    }
  }

  // Notes on what the samples leave uncertain (from the identified pairs).
  if (!all_identified) {
    d.notes.push_back(detail::concat(
        num_pairs - d.num_pairs_identified, " of ", num_pairs,
        " pairs fit no single inv_freq in [-pi, pi] within ", number(fit_limit, 3),
        " rad (the positions alias, or the angles are off): theta, the scheme and the presets cannot be told"));
  }
  double slowest_turn = std::numeric_limits<double>::infinity(), fastest = 0.0;
  int64_t slowest_pair = 0;
  for (int64_t i = 0; i < num_pairs; ++i) {
    if (!d.pairs[static_cast<size_t>(i)].identified) continue;
    const double turn = d.pairs[static_cast<size_t>(i)].inv_freq * span;
    if (turn < slowest_turn) {
      slowest_turn = turn;
      slowest_pair = i;
    }
    fastest = std::max(fastest, d.pairs[static_cast<size_t>(i)].inv_freq);
  }
  // 50x the angle noise (0.02 rad at least) separates a wrong partner from the noise with margin.
  if (any_identified && slowest_turn < std::max(0.02, 50.0 * d.small_angle_residual_rad)) {
    d.notes.push_back(detail::concat("pair ", slowest_pair, " turns by only ", slowest_turn,
                                     " rad over the sampled positions: its partner and inv_freq are uncertain, and "
                                     "slower pairs may look like pass-through dims; add a larger position"));
  }
  // Only while some pair is unidentified: when the slope search pinned every pair to one inv_freq
  // (the other steps told the aliases apart), a large first step left nothing uncertain.
  const double first_step = static_cast<double>(*std::next(distinct.begin()) - *distinct.begin());
  // An unidentified pair may be the fastest; RoPE's fastest pair has inv_freq theta^0 = 1.
  const double fastest_possible = std::max(fastest, 1.0);
  if (!all_identified && fastest_possible * first_step > 2.5) {  // within ~0.6 rad of pi: noise could alias it
    d.notes.push_back(detail::concat("the first position step, ", first_step, ", turns the fastest pair by ",
                                     fastest >= 1.0 ? "" : "up to ", fastest_possible * first_step,
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
    if (!within_tolerance(measured[i], model[i], tolerance[i])) return false;
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

  // cos and sin swapped: each pair turns by pi/2 - p theta, which reads as a backward slope plus a
  // constant pi/2; named as the swap, not as a direction.
  if (diag.cos_sin_swapped) {
    add(out, "cos_sin",
        "swaps cos and sin (y = x * sin + rotate_half(x) * cos: every pair turns by pi/2 - p*theta)",
        "computes y = x * cos + rotate_half(x) * sin (every pair turns by p*theta)");
  } else if (diag.position_offset && diag.constant_phase_rad != 0.0) {
    add(out, "phase",
        "adds a constant " + number(diag.constant_phase_rad, 6) + " rad to every pair's angle" +
            (diag.constant_phase_rad == std::numbers::pi ? " (the output negated)" : " (cos and sin swapped or negated)"),
        "turns every pair by p*theta with no constant phase");
  }

  // Direction.
  if (diag.direction == Direction::Backward && !diag.cos_sin_swapped) {
    add(out, "direction",
        "rotates by -p*theta (the inverse, conjugate rotation: sin negated) in " +
            std::to_string(diag.pairs.size() - static_cast<size_t>(diag.num_pairs_against_direction)) + " of " +
            std::to_string(diag.pairs.size()) + " pairs",
        "rotates by +p*theta (forward)");
  }

  // Frequencies (only when the pair counts agree). When some pairs are not identified, only the
  // identified ones can contradict the model: a failed fit is not a mismatch.
  const std::vector<double> measured = diag.inv_freq();
  const bool all_identified = diag.num_pairs_identified == static_cast<int64_t>(diag.pairs.size());
  if (!all_identified && static_cast<int64_t>(measured.size()) == model_pairs) {
    size_t worst = measured.size();
    double worst_dev = -1.0;
    for (size_t i = 0; i < measured.size(); ++i) {
      if (!diag.pairs[i].identified || !(model_inv_freq[i] > 0.0)) continue;
      if (within_tolerance(measured[i], model_inv_freq[i], diag.inv_freq_tolerance[i])) continue;
      const double dev = measured[i] > 0.0 ? std::abs(std::log(measured[i] / model_inv_freq[i]))
                                           : std::numeric_limits<double>::infinity();
      if (dev > worst_dev) {
        worst_dev = dev;
        worst = i;
      }
    }
    if (worst < measured.size()) {
      const size_t unknown = measured.size() - static_cast<size_t>(diag.num_pairs_identified);
      add(out, "inv_freq",
          "has inv_freq[" + std::to_string(worst) + "] = " + number(measured[worst]) + " (" + std::to_string(unknown) +
              " other pairs: " + std::string(kCannotTell) + ")",
          "has inv_freq[" + std::to_string(worst) + "] = " + number(model_inv_freq[worst]) + " (" +
              std::string(to_string(spec.scaling.type)) + ", rope_theta " + number(spec.theta_base) + ")");
    }
  }
  if (all_identified && static_cast<int64_t>(measured.size()) == model_pairs &&
      !frequencies_match(measured, model_inv_freq, diag.inv_freq_tolerance)) {
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
        if (!within_tolerance(measured[i], std::exp(mid) * model_inv_freq[i], diag.inv_freq_tolerance[i])) {
          constant = false;
        }
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
    if (!explained && diag.scheme == "default" && diag.fitted_theta_base) {
      add(out, "theta",
          "uses rope_theta " + number(*diag.fitted_theta_base) + " (its inv_freq fit base^(-2i/d) with no scaling)",
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
              (diag.fitted_theta_base ? "; fits rope_theta " + number(*diag.fitted_theta_base) + ", linear factor " +
                                            number(diag.fitted_linear_factor.value_or(1.0))
                                      : std::string()) +
              (diag.nearest_preset.empty() ? "" : "; nearest preset " +
                                                                                          diag.nearest_preset) + ")",
          "has inv_freq[" + std::to_string(worst) + "] = " + number(model_inv_freq[worst]) + " (" +
              std::string(to_string(spec.scaling.type)) + ", rope_theta " + number(spec.theta_base) + ")");
    }
  }

  // Position offset.
  if (diag.position_offset && *diag.position_offset != 0) {
    const std::string sign = *diag.position_offset > 0 ? "+" : "-";
    const std::string magnitude = std::to_string(std::abs(*diag.position_offset));
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
