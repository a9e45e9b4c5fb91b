// src/analysis/encodings.cpp: the position encodings RoPE is compared with (analysis.hpp,
// section 7): sinusoidal, a learned-table stand-in, ALiBi, and the comparison itself.
//
// The formulas themselves (sinusoidal_encoding, alibi_slopes, alibi_bias) live once in
// src/core/encodings.cpp (include/rotary/encodings.hpp), shared with attention's encodings.
// Sources:
//   sinusoidal: Vaswani et al. 2017, "Attention Is All You Need" (arXiv:1706.03762), section 3.5:
//     PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model));
//   ALiBi: Press, Smith, Lewis 2021, "Train Short, Test Long" (arXiv:2108.12409), section 3: a bias
//     -m * (i - j) added to the logit of query i and key j, with head slopes a geometric sequence
//     starting at 2^(-8/n) with ratio 2^(-8/n); for n not a power of two, the authors' get_slopes
//     (github.com/ofirpress/attention_with_linear_biases) takes the slopes of the closest lower
//     power of two c, then every other slope of the 2c-head sequence;
//   learned: GPT-2 / BERT style absolute position tables; here a random stand-in (see the header).
// The analysis here is structural (what depends on what, what exists past the trained length),
// with W_q = W_k = I: these are properties of the encodings, not of a trained model.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <numbers>
#include <random>

#include "rotary/analysis.hpp"
#include "rotary/encodings.hpp"
#include "rotary/error.hpp"

namespace rotary::analysis {

namespace {

// SplitMix64 (Steele, Lea, Flood 2014): a counter-based generator, so a learned-table row is a
// pure function of (seed, position, index) and needs no storage.
uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// A uniform in (0, 1) from the top 53 bits.
double unit_open(uint64_t bits) { return (static_cast<double>(bits >> 11) + 0.5) * 0x1.0p-53; }

std::vector<double> random_content(std::mt19937_64& rng, int64_t dim) {
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> v(static_cast<size_t>(dim));
  double norm = 0.0;
  do {
    norm = 0.0;
    for (double& x : v) {
      x = normal(rng);
      norm += x * x;
    }
  } while (norm == 0.0);
  return v;
}

double norm2(const std::vector<double>& v) {
  double sum = 0.0;
  for (double x : v) sum += x * x;
  return std::sqrt(sum);
}

// <q + P_m, k + P_n>: an additive absolute encoding's score with W_q = W_k = I.
double additive_score(const std::vector<double>& q, const std::vector<double>& k, const std::vector<double>& pm,
                      const std::vector<double>& pn) {
  double sum = 0.0;
  for (size_t e = 0; e < q.size(); ++e) sum += (q[e] + pm[e]) * (k[e] + pn[e]);
  return sum;
}

double dot(const std::vector<double>& x, const std::vector<double>& y) {
  double sum = 0.0;
  for (size_t e = 0; e < x.size(); ++e) sum += x[e] * y[e];
  return sum;
}

// 4 significant digits, for notes.
std::string format_4(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.4g", value);
  return buffer;
}

int64_t log_uniform(std::mt19937_64& rng, int64_t max_value) {
  if (max_value <= 0) return 0;
  std::uniform_real_distribution<double> u(0.0, std::log(static_cast<double>(max_value) + 1.0));
  return std::clamp<int64_t>(static_cast<int64_t>(std::floor(std::exp(u(rng)))) - 1, 0, max_value);
}

// Positions m, n and shift t with max(m, n) + t <= limit.
struct ShiftSample {
  int64_t m = 0, n = 0, t = 0;
};
ShiftSample shift_sample(std::mt19937_64& rng, int64_t limit) {
  ShiftSample s;
  s.t = 1 + log_uniform(rng, std::max<int64_t>(limit / 2 - 1, 0));
  s.m = log_uniform(rng, limit - s.t);
  s.n = log_uniform(rng, limit - s.t);
  return s;
}

}  // namespace

// ---- sinusoidal: rotary::sinusoidal_encoding (src/core/encodings.cpp) ------------------------

// ---- learned stand-in --------------------------------------------------------------------------

LearnedEncodingStandIn::LearnedEncodingStandIn(int64_t num_positions, int64_t d_model, uint64_t seed)
    : num_positions_(num_positions), d_model_(d_model), seed_(seed) {
  if (num_positions <= 0) {
    throw Error(detail::concat("LearnedEncodingStandIn: num_positions must be > 0 (got ", num_positions, ")"));
  }
  if (d_model <= 0) throw Error(detail::concat("LearnedEncodingStandIn: d_model must be > 0 (got ", d_model, ")"));
}

std::vector<double> LearnedEncodingStandIn::row(int64_t position) const {
  if (position < 0 || position >= num_positions_) {
    throw Error(detail::concat("LearnedEncodingStandIn::row: position must be in [0, ", num_positions_,
                               ") (got ", position, "): a learned table has no row past its length"));
  }
  std::vector<double> out(static_cast<size_t>(d_model_));
  for (int64_t e = 0; e < d_model_; ++e) {
    // Box-Muller on two uniforms derived from (seed, position, index): N(0, 1).
    const uint64_t h1 = splitmix64(seed_ ^ splitmix64(static_cast<uint64_t>(position) * 0x100000001B3ULL +
                                                      static_cast<uint64_t>(e)));
    const uint64_t h2 = splitmix64(h1);
    out[static_cast<size_t>(e)] =
        std::sqrt(-2.0 * std::log(unit_open(h1))) * std::cos(2.0 * std::numbers::pi * unit_open(h2));
  }
  return out;
}

// ---- ALiBi: rotary::alibi_slopes, rotary::alibi_bias (src/core/encodings.cpp) ---------------------

// ---- the comparison ----------------------------------------------------------------------------

namespace {

// RoPE: the spec's own rotation.
EncodingComparison rope_comparison(const RopeSpec& spec, const ComparisonOptions& options, int64_t trained,
                                   int64_t max_distance) {
  const int64_t d = spec.rotary_dim;
  InvarianceOptions invariance_options;
  invariance_options.num_samples = options.num_samples;
  invariance_options.seed = options.seed;
  invariance_options.max_position = max_distance;
  invariance_options.seq_len = max_distance;
  const RelativeInvariance invariance = relative_invariance(spec, invariance_options);
  DecayOptions decay_options;
  decay_options.max_distance = max_distance;
  decay_options.num_samples = options.num_samples;
  decay_options.seed = options.seed;
  decay_options.points_per_octave = options.points_per_octave;
  const LongTermDecay decay = long_term_decay(spec, decay_options);
  const Extrapolation ext = extrapolation(spec, trained, max_distance);
  EncodingComparison rope;
  rope.name = "rope";
  rope.description = detail::concat("RoPE (", spec.name, "): <R_m q, R_n k>, rotary_dim ", d);
  rope.shift_deviation = invariance.max_deviation;
  rope.relative_only = invariance.max_deviation <= kRelativeOnlyThreshold;
  rope.defined_past_trained = true;
  rope.past_trained_note = detail::concat(
      "defined at every position; at ", max_distance, " tokens ", ext.num_out_of_distribution, " of ",
      ext.num_pairs, " pairs reach angles training on ", trained, " tokens never produced (largest overshoot x",
      format_4(ext.largest_overshoot), ")");
  rope.decay = decay.score_identical_ones;
  rope.decay_meaning = "<R_r q, R_0 q> / (m^2 |q|^2) for q = all-ones: (2/d) sum_i cos(r theta_i)";
  return rope;
}

// Sinusoidal (Vaswani), added to the content. Draws from rng: the encodings after RoPE share one
// stream, in this order, so a seed gives the same samples as ever.
EncodingComparison sinusoidal_comparison(std::mt19937_64& rng, const ComparisonOptions& options, int64_t d,
                                         int64_t max_distance, const std::vector<double>& grid) {
  EncodingComparison sin_enc;
  sin_enc.name = "sinusoidal";
  sin_enc.description =
      detail::concat("sinusoidal absolute (Vaswani et al.), added: <q + PE_m, k + PE_n>, d_model ", d);
  for (int64_t s = 0; s < options.num_samples; ++s) {
    const ShiftSample p = shift_sample(rng, max_distance);
    const std::vector<double> q = random_content(rng, d);
    const std::vector<double> k = random_content(rng, d);
    const double before = additive_score(q, k, sinusoidal_encoding(p.m, d), sinusoidal_encoding(p.n, d));
    const double after =
        additive_score(q, k, sinusoidal_encoding(p.m + p.t, d), sinusoidal_encoding(p.n + p.t, d));
    sin_enc.shift_deviation = std::max(sin_enc.shift_deviation, std::abs(before - after) / (norm2(q) * norm2(k)));
  }
  sin_enc.relative_only = sin_enc.shift_deviation <= kRelativeOnlyThreshold;
  sin_enc.defined_past_trained = true;
  sin_enc.past_trained_note =
      "defined at every position (a formula), but the model never saw the sums of content and position past the "
      "trained length; Press et al. (section 2) measure perplexity rising quickly past it";
  const std::vector<double> origin = sinusoidal_encoding(0, d);
  const double origin_sq = dot(origin, origin);  // d/2
  for (double r : grid) {
    sin_enc.decay.push_back({r, dot(sinusoidal_encoding(static_cast<int64_t>(r), d), origin) / origin_sq});
  }
  sin_enc.decay_meaning =
      "<PE_(p+r), PE_p> / |PE_p|^2, the position-position term of the score: (2/d) sum_i cos(r w_i), the same "
      "for every p; the content-position cross terms are what make the score absolute";
  return sin_enc;
}

// Learned table stand-in, added to the content.
EncodingComparison learned_comparison(std::mt19937_64& rng, const ComparisonOptions& options, int64_t d,
                                      int64_t trained, const std::vector<double>& grid) {
  const LearnedEncodingStandIn table(trained, d, options.seed);
  EncodingComparison learned;
  learned.name = "learned";
  learned.description = detail::concat("learned absolute table (random stand-in, ", trained,
                                       " rows), added: <q + P_m, k + P_n>");
  for (int64_t s = 0; s < options.num_samples; ++s) {
    const ShiftSample p = shift_sample(rng, trained - 1);  // every row must exist
    const std::vector<double> q = random_content(rng, d);
    const std::vector<double> k = random_content(rng, d);
    const double before = additive_score(q, k, table.row(p.m), table.row(p.n));
    const double after = additive_score(q, k, table.row(p.m + p.t), table.row(p.n + p.t));
    learned.shift_deviation = std::max(learned.shift_deviation, std::abs(before - after) / (norm2(q) * norm2(k)));
  }
  learned.relative_only = learned.shift_deviation <= kRelativeOnlyThreshold;
  learned.defined_past_trained = false;
  learned.past_trained_note = detail::concat("undefined: the table has rows for positions [0, ", trained,
                                             ") only, so it cannot extrapolate past its length");
  for (double r : grid) {
    const auto distance = static_cast<int64_t>(r);
    if (distance >= trained) break;  // no pair of rows that far apart
    double sum = 0.0;
    for (int64_t s = 0; s < options.num_samples; ++s) {
      std::uniform_int_distribution<int64_t> start(0, trained - 1 - distance);
      const int64_t p = start(rng);
      const std::vector<double> a = table.row(p);
      const std::vector<double> b = table.row(p + distance);
      sum += dot(a, b) / (norm2(a) * norm2(b));
    }
    learned.decay.push_back({r, sum / static_cast<double>(options.num_samples)});
  }
  learned.decay_meaning =
      "mean cosine similarity of table rows r apart (random stand-in: 1 at r = 0, ~0 beyond; a trained table "
      "learns whatever structure it has); no points past the table's length";
  return learned;
}

// ALiBi: a bias on the logit, no change to q or k.
EncodingComparison alibi_comparison(std::mt19937_64& rng, const ComparisonOptions& options, int64_t d, int64_t heads,
                                    int64_t max_distance, const std::vector<double>& grid) {
  const std::vector<double> slopes = alibi_slopes(heads);
  EncodingComparison alibi;
  alibi.name = "alibi";
  alibi.description = detail::concat("ALiBi (Press et al.), ", heads, " heads: <q, k> - slope_h |m - n|");
  std::uniform_int_distribution<size_t> head(0, slopes.size() - 1);
  for (int64_t s = 0; s < options.num_samples; ++s) {
    const ShiftSample p = shift_sample(rng, max_distance);
    const std::vector<double> q = random_content(rng, d);
    const std::vector<double> k = random_content(rng, d);
    const double slope = slopes[head(rng)];
    const double before = dot(q, k) + alibi_bias(slope, p.m, p.n);
    const double after = dot(q, k) + alibi_bias(slope, p.m + p.t, p.n + p.t);
    alibi.shift_deviation = std::max(alibi.shift_deviation, std::abs(before - after) / (norm2(q) * norm2(k)));
  }
  alibi.relative_only = alibi.shift_deviation <= kRelativeOnlyThreshold;
  alibi.defined_past_trained = true;
  alibi.past_trained_note =
      "defined at every distance: a linear penalty with nothing learned per position (the paper trains on 1024 "
      "tokens and tests on 2048+)";
  for (double r : grid) {
    double sum = 0.0;
    for (double slope : slopes) sum += std::exp(alibi_bias(slope, static_cast<int64_t>(r), 0));
    alibi.decay.push_back({r, sum / static_cast<double>(slopes.size())});
  }
  alibi.decay_meaning =
      "mean over heads of exp(-slope_h r), the factor ALiBi puts on the unnormalised attention weight of a key r "
      "tokens back";
  return alibi;
}

}  // namespace

std::vector<EncodingComparison> compare_encodings(const RopeSpec& spec, const ComparisonOptions& options) {
  const int64_t trained = options.trained_context > 0 ? options.trained_context : default_trained_context(spec);
  const int64_t max_distance = options.max_distance > 0 ? options.max_distance : 2 * trained;
  if (trained <= 16 || max_distance <= 16) {
    throw Error(detail::concat("compare_encodings: trained_context and max_distance must be > 16 (got ", trained,
                               " and ", max_distance, ")"));
  }
  if (max_distance > kMaxPosition) {
    throw Error(
        detail::concat("compare_encodings: max_distance must be <= ", kMaxPosition, " (got ", max_distance, ")"));
  }
  if (options.num_samples < 1) {
    throw Error(detail::concat("compare_encodings: num_samples must be >= 1 (got ", options.num_samples, ")"));
  }
  const int64_t d = spec.rotary_dim;
  const int64_t heads = options.num_heads > 0 ? options.num_heads
                        : spec.num_attention_heads > 0 ? spec.num_attention_heads
                                                       : 8;
  const std::vector<double> grid = log_distance_grid(max_distance, options.points_per_octave);
  std::vector<EncodingComparison> out;

  out.push_back(rope_comparison(spec, options, trained, max_distance));
  std::mt19937_64 rng(options.seed);
  out.push_back(sinusoidal_comparison(rng, options, d, max_distance, grid));
  out.push_back(learned_comparison(rng, options, d, trained, grid));
  out.push_back(alibi_comparison(rng, options, d, heads, max_distance, grid));
  return out;
}

}  // namespace rotary::analysis
