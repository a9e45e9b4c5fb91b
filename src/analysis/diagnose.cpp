// src/analysis/diagnose.cpp: an unknown RoPE implementation inferred from samples (x, y,
// positions), and its differences from a spec (include/rotary/diagnose.hpp). The math, the
// thresholds and what stays ambiguous are in docs/analysis.md, "Diagnose".
//
// The steps live by job: diagnose_pairs.cpp (the rotation test and the pairing), diagnose_fit.cpp
// (the per-pair angle fits and the position offset), diagnose_compare.cpp (the frequency law, the
// presets and compare_to_spec); diagnose_steps.hpp is what they share.
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
#include "analysis/diagnose_steps.hpp"

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

namespace detail {

std::string number(double value, int digits) {
  std::ostringstream out;
  out.precision(digits);
  out << value;
  return out.str();
}

}  // namespace detail

namespace {

using detail::DimPairs;
using detail::kFloat16NormSpread;
using detail::kFloat16SmallAngleResidual;
using detail::kInvFreqRounding;
using detail::number;
using detail::RowView;

void check_samples(const DiagnoseSamples& s) {
  if (s.head_dim < 2) throw Error(rotary::detail::concat("diagnose: head_dim must be >= 2 (got ", s.head_dim, ")"));
  const int64_t num_rows = static_cast<int64_t>(s.positions.size());
  if (num_rows < 2) {
    throw Error(rotary::detail::concat("diagnose: positions must hold at least 2 rows (got ", num_rows, ")"));
  }
  const auto expected = static_cast<size_t>(num_rows * s.head_dim);
  if (s.x.size() != expected) {
    throw Error(rotary::detail::concat("diagnose: x must hold rows * head_dim = ", num_rows, " * ", s.head_dim, " = ",
                               expected, " values, one row per position (got ", s.x.size(), ")"));
  }
  if (s.y.size() != expected) {
    throw Error(rotary::detail::concat("diagnose: y must hold rows * head_dim = ", num_rows, " * ", s.head_dim, " = ",
                               expected, " values, the shape of x (got ", s.y.size(), ")"));
  }
  for (const auto& [name, values] : {std::pair{"x", s.x}, std::pair{"y", s.y}}) {
    for (size_t k = 0; k < values.size(); ++k) {
      if (!std::isfinite(values[k])) {
        throw Error(rotary::detail::concat("diagnose: ", name, " must be finite (got ", values[k], " at row ",
                                   k / static_cast<size_t>(s.head_dim), ", column ",
                                   k % static_cast<size_t>(s.head_dim), ")"));
      }
    }
  }
  for (int64_t r = 0; r < num_rows; ++r) {
    const int64_t p = s.positions[static_cast<size_t>(r)];
    if (p < 0 || p > kMaxPosition) {
      throw Error(rotary::detail::concat("diagnose: positions must be in [0, ", kMaxPosition, "] (got ", p, " at row ", r, ")"));
    }
  }
  const std::set<int64_t> distinct(s.positions.begin(), s.positions.end());
  if (distinct.size() < 2) {
    throw Error(rotary::detail::concat("diagnose: positions must hold at least 2 distinct values to separate theta from "
                               "the offset (got all ",
                               num_rows, " rows at position ", *distinct.begin(), ")"));
  }
}

// Notes on what the samples leave uncertain (from the identified pairs).
void add_notes(const std::set<int64_t>& distinct, Diagnosis& d) {
  const int64_t num_pairs = static_cast<int64_t>(d.pairs.size());
  const bool any_identified = d.num_pairs_identified > 0;
  const bool all_identified = d.num_pairs_identified == num_pairs;
  const double fit_limit = d.fit_residual_limit_rad;
  const double span = static_cast<double>(*distinct.rbegin() - *distinct.begin());
  if (!all_identified) {
    d.notes.push_back(rotary::detail::concat(
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
    d.notes.push_back(rotary::detail::concat("pair ", slowest_pair, " turns by only ", slowest_turn,
                                     " rad over the sampled positions: its partner and inv_freq are uncertain, and "
                                     "slower pairs may look like pass-through dims; add a larger position"));
  }
  // Only while some pair is unidentified: when the slope search pinned every pair to one inv_freq
  // (the other steps told the aliases apart), a large first step left nothing uncertain.
  const double first_step = static_cast<double>(*std::next(distinct.begin()) - *distinct.begin());
  // An unidentified pair may be the fastest; RoPE's fastest pair has inv_freq theta^0 = 1.
  const double fastest_possible = std::max(fastest, 1.0);
  if (!all_identified && fastest_possible * first_step > 2.5) {  // within ~0.6 rad of pi: noise could alias it
    d.notes.push_back(rotary::detail::concat("the first position step, ", first_step, ", turns the fastest pair by ",
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

  // 1. Pass-through dims, 2. the pairing, 3. whether the pairs turn (diagnose_pairs.cpp).
  const std::vector<int64_t> rotated = detail::find_rotated_dims(v, d);
  const DimPairs chosen = detail::choose_pairs(v, rotated, options, d);
  detail::check_pairs_turn(v, chosen, options, d);

  // 4. Per pair: attention scaling, angle fit, and whether the samples pin inv_freq down
  // (diagnose_fit.cpp).
  const double max_angle = detail::fit_pairs(v, chosen, options, d);
  const double per_radian = d.residual_per_radian;
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

  // 6. Position offset (diagnose_fit.cpp).
  if (any_identified) {
    detail::find_position_offset(options, d);
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

  // 9. Log-linear fit of ln theta_i on i and the presets (diagnose_compare.cpp).
  if (all_identified) detail::fit_frequency_law(d);

  add_notes(distinct, d);
  return d;
}

}  // namespace rotary::analysis
