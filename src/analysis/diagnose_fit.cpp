// src/analysis/diagnose_fit.cpp: diagnose()'s per-pair angle fits: each pair's angles by
// position, the least-squares slope and the search of every slope consistent with them (which
// tells aliased positions from a unique inv_freq), then the integer position offset and constant
// phase that the identified pairs agree on. The thresholds are in docs/analysis.md, "Diagnose".
#include "analysis/diagnose_steps.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numbers>
#include <optional>
#include <set>
#include <sstream>

namespace rotary::analysis::detail {

double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

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

namespace {

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

// Angle fit of one pair: theta (signed), intercept, residuals. Angles are grouped by position
// (atan2 of the summed cross and dot products: rows weighted by |x_pair|^2), unwrapped along the
// sorted positions with the running least-squares slope, then fitted by ordinary least squares.
//
// small_residual: the max residual of a second fit over the positions whose angle is at most
// kSmallAngleRad (when there are 3 or more), which the drift of large angles cannot reach; -1 if
// there are fewer.
//
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

}  // namespace

// Fills d.pairs and the fit figures (fit_residual_limit_rad, max_residual_rad,
// small_angle_residual_rad, residual_per_radian, attention_scaling); returns the largest angle
// of the identified pairs' rows.
double fit_pairs(const RowView& v, const DimPairs& chosen, const DiagnoseOptions& options, Diagnosis& d) {
  const int64_t num_rows = static_cast<int64_t>(v.s.positions.size());
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
  return max_angle;
}

// 6. Position offset: the integer delta minimising sum_i (1 - cos(c_i - phase - delta theta_i))
// over the identified pairs, first with no constant phase, then with pi/2, -pi/2 and pi (cos and
// sin swapped, or negated). It is reported when its residual is within fit_limit and no other
// delta fits as well (slow pairs alone leave many).
void find_position_offset(const DiagnoseOptions& options, Diagnosis& d) {
  const double fit_limit = d.fit_residual_limit_rad;
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
}

}  // namespace rotary::analysis::detail
