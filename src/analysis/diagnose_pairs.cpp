// src/analysis/diagnose_pairs.cpp: diagnose()'s first steps: which dims the implementation
// changes, how it pairs them (half-split, interleaved or another matching, by the spread of each
// pair's norm ratio), and whether the pairs turn with the position at all. The thresholds are in
// docs/analysis.md, "Diagnose".
#include "analysis/diagnose_steps.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numbers>
#include <optional>
#include <set>
#include <sstream>

#include "rotary/error.hpp"

namespace rotary::analysis::detail {

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

namespace {

double pattern_score(const RowView& v, int64_t num_rows, const std::vector<std::pair<int64_t, int64_t>>& pairs) {
  double worst = 0.0;
  for (const auto& [a, c] : pairs) worst = std::max(worst, norm_spread(v, num_rows, a, c));
  return worst;
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

}  // namespace

// Sets pass_through_dims, rotated_offset, rotary_dim and rotated_contiguous; returns the changed dims.
std::vector<int64_t> find_rotated_dims(const RowView& v, Diagnosis& d) {
  const DiagnoseSamples& samples = v.s;
  const int64_t num_rows = static_cast<int64_t>(v.s.positions.size());
  const int64_t head_dim = samples.head_dim;
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
    throw Error(rotary::detail::concat("diagnose: y must differ from x somewhere (got y equal to x in all ", num_rows,
                               " rows: nothing is rotated at these positions)"));
  }
  // A rotation keeps each pair's norm (times the attention scaling): y = 0 keeps none.
  bool y_zero = true;
  for (int64_t r = 0; r < num_rows && y_zero; ++r) {
    for (const int64_t j : rotated) y_zero = y_zero && v.y(r, j) == 0.0;
  }
  if (y_zero) {
    throw Error(rotary::detail::concat("diagnose: y is not a rotation of x: y is 0 at all ", rotated.size(),
                               " changed elements in all ", num_rows, " rows (a rotation keeps each pair's norm)"));
  }
  if (rotated.size() % 2 != 0) {
    throw Error(rotary::detail::concat("diagnose: the changed elements must form pairs (got ", rotated.size(),
                               " changed elements, first ", rotated.front(), ", last ", rotated.back(), ")"));
  }
  d.rotated_offset = rotated.front();
  d.rotary_dim = static_cast<int64_t>(rotated.size());
  d.rotated_contiguous = rotated.back() - rotated.front() + 1 == d.rotary_dim;
  return rotated;
}

// Sets pairing, pairing_score and other_pattern_score; returns the chosen pairs.
DimPairs choose_pairs(const RowView& v, const std::vector<int64_t>& rotated, const DiagnoseOptions& options,
                      Diagnosis& d) {
  const int64_t num_rows = static_cast<int64_t>(v.s.positions.size());
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
    throw Error(rotary::detail::concat("diagnose: y is not a rotation of x pair by pair: no pairing keeps each pair's norm "
                               "ratio |y_pair|^2 / |x_pair|^2 the same in all ",
                               num_rows, " rows (worst spread: ", tried, "best matching of the ", d.rotary_dim,
                               " changed elements ", number(d.pairing_score, 3), "; a rotation keeps it within ",
                               number(pair_threshold, 3), ")"));
  }
  return chosen;
}

// 3. RoPE turns a pair by an angle that depends on the position. When every pair has one angle
// at every sampled position, y is a constant rotation of x (y = 2x: 0 rad; y = -x: pi rad):
// there is no theta to infer.
void check_pairs_turn(const RowView& v, const DimPairs& chosen, const DiagnoseOptions& options, const Diagnosis& d) {
  const int64_t num_rows = static_cast<int64_t>(v.s.positions.size());
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
    throw Error(rotary::detail::concat("diagnose: y is not a rotation of x by a position-dependent angle: every pair has the "
                               "same angle at all ",
                               d.num_distinct_positions, " distinct positions (", what,
                               "); RoPE turns pair i by p * theta_i"));
  }
}

}  // namespace rotary::analysis::detail
