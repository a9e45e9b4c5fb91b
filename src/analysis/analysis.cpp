// src/analysis/analysis.cpp: RoPE's properties, measured (include/rotary/analysis.hpp).
//
// Sources of the math:
//   rotation, norm, relative invariance: RoFormer (Su et al., arXiv:2104.09864), section 3:
//     f(x, p) = R_p W x with R_p block-diagonal 2-D rotations, so |R_p x| = |x| and
//     <R_m q, R_n k> = <q, R_(n-m) k>;
//   long-term decay: RoFormer section 3, "long-term decay": Abel summation of
//     sum_i h_i e^{i r theta_i} with S_j = sum_{k<j} e^{i r theta_k} gives
//     |score| <= max_i |h_{i+1} - h_i| * sum_j |S_j|, and the relative bound
//     (1/(d/2)) sum_{j=1}^{d/2} |S_j| decays with r for theta_i = b^(-2i/d);
//   attention scaling: HF / vLLM / ggml multiply cos and sin by m (docs/formulas.md section 2);
//   context coverage: docs/formulas.md section 13 (context_coverage() in frequencies.cpp);
//   expanded layouts: HF LlamaRotaryEmbedding (cat(freqs, freqs), rotate_half) and GPT-J
//     (repeat_interleave, rotate_every_two), docs/formulas.md section 2.
//
// Everything is evaluated in double in pair space (analysis.hpp header comment); rows come from
// a Rotation so that tests can inject broken ones.
//
// This file holds the rotations and the checks 1 to 3 (norm, relative position, long-term
// decay); the per-pair analyses (4 to 6) are in per_pair.cpp, the convention-mismatch detector
// (8) in convention.cpp and run_checks (9) in checks.cpp.
#include "rotary/analysis.hpp"

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdio>
#include <memory>
#include <numbers>
#include <random>

#include "rotary/apply.hpp"
#include "rotary/error.hpp"
#include "rotary/tensor.hpp"
#include "analysis/rotation_only.hpp"

namespace rotary::detail {

RopeSpec rotation_only(const RopeSpec& spec) {
  RopeSpec copy = spec;
  copy.xpos.reset();
  return copy;
}

}  // namespace rotary::detail

namespace rotary::analysis {
namespace {

using detail::rotation_only;

// Positions log-uniform in [0, max_position]: every scale from 1 to 2^31 gets the same weight,
// so large positions (where float32 angles fail) are as common as small ones.
int64_t log_uniform_position(std::mt19937_64& rng, int64_t max_position) {
  if (max_position <= 0) return 0;
  std::uniform_real_distribution<double> u(0.0, std::log(static_cast<double>(max_position) + 1.0));
  const auto p = static_cast<int64_t>(std::floor(std::exp(u(rng)))) - 1;
  return std::clamp<int64_t>(p, 0, max_position);
}

// A random pair-space vector, N(0, 1) per element, never all zero.
struct PairVector {
  std::vector<double> a, c;  // pair i = (a[i], c[i])
  double norm() const {
    double sum = 0.0;
    for (size_t i = 0; i < a.size(); ++i) sum += a[i] * a[i] + c[i] * c[i];
    return std::sqrt(sum);
  }
};

PairVector random_vector(std::mt19937_64& rng, int64_t num_pairs) {
  std::normal_distribution<double> normal(0.0, 1.0);
  PairVector v;
  v.a.resize(static_cast<size_t>(num_pairs));
  v.c.resize(static_cast<size_t>(num_pairs));
  do {
    for (int64_t i = 0; i < num_pairs; ++i) {
      v.a[static_cast<size_t>(i)] = normal(rng);
      v.c[static_cast<size_t>(i)] = normal(rng);
    }
  } while (v.norm() == 0.0);
  return v;
}

// Rows of one position, held for reuse.
struct Row {
  std::vector<double> cos, sin;
};

Row fetch_row(const Rotation& rotation, int64_t position) {
  if (position < 0 || position > rotation.max_position) {
    throw Error(detail::concat("analysis: position must be in [0, ", rotation.max_position, "] (got ", position, ")"));
  }
  Row row;
  row.cos.resize(static_cast<size_t>(rotation.num_pairs));
  row.sin.resize(static_cast<size_t>(rotation.num_pairs));
  rotation.row(position, row.cos.data(), row.sin.data());
  return row;
}

// R_p v: a' = a C - c S, c' = c C + a S per pair (docs/formulas.md section 2).
PairVector rotate(const PairVector& v, const Row& row) {
  PairVector out;
  out.a.resize(v.a.size());
  out.c.resize(v.c.size());
  for (size_t i = 0; i < v.a.size(); ++i) {
    out.a[i] = v.a[i] * row.cos[i] - v.c[i] * row.sin[i];
    out.c[i] = v.c[i] * row.cos[i] + v.a[i] * row.sin[i];
  }
  return out;
}

double dot(const PairVector& x, const PairVector& y) {
  double sum = 0.0;
  for (size_t i = 0; i < x.a.size(); ++i) sum += x.a[i] * y.a[i] + x.c[i] * y.c[i];
  return sum;
}

void check_rotation(const Rotation& rotation, const char* where) {
  if (rotation.num_pairs <= 0) {
    throw Error(detail::concat(where, ": rotation.num_pairs must be > 0 (got ", rotation.num_pairs, ")"));
  }
  if (!(rotation.attention_scaling > 0.0) || !std::isfinite(rotation.attention_scaling)) {
    throw Error(detail::concat(where, ": rotation.attention_scaling must be a finite number > 0 (got ",
                               rotation.attention_scaling, ")"));
  }
  if (!rotation.row) throw Error(detail::concat(where, ": rotation.row must be set (got an empty function)"));
  if (rotation.max_position < 0) {
    throw Error(detail::concat(where, ": rotation.max_position must be >= 0 (got ", rotation.max_position, ")"));
  }
}

void check_samples(int64_t num_samples, const char* where) {
  if (num_samples < 1) throw Error(detail::concat(where, ": num_samples must be >= 1 (got ", num_samples, ")"));
}

// The float32 kernel figure: rotary::apply on float32 q in the spec's own layout. The norm is
// taken over the rotated block [0, rotary_dim) (pass-through dims are copied, not scaled by m),
// against the float32 input widened to double.
double float32_kernel_norm_deviation(const RopeSpec& spec, const NormOptions& options) {
  const int64_t tokens = options.num_samples;
  const int64_t head_dim = spec.head_dim;
  const int64_t rotary_dim = spec.rotary_dim;
  const int streams = position_streams(spec);
  TableOptions table_options;
  table_options.storage = Storage::OnTheFly;
  table_options.seq_len = options.seq_len;
  const CosSinTable table(spec, table_options);
  const int64_t max_position = std::min(options.max_position, table.max_position());

  std::mt19937_64 rng(options.seed ^ 0x5f3759dfULL);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const auto elements = static_cast<size_t>(tokens * head_dim);
  std::vector<float> q(elements), k(elements), q_out(elements), k_out(elements);
  for (size_t e = 0; e < elements; ++e) {
    q[e] = normal(rng);
    k[e] = normal(rng);
  }
  // Text tokens: every stream carries the same position (stream-major layout, apply.hpp).
  std::vector<int64_t> token_positions(static_cast<size_t>(tokens));
  for (int64_t t = 0; t < tokens; ++t) {
    token_positions[static_cast<size_t>(t)] = t == 0   ? 0
                                              : t == 1 ? max_position
                                                       : log_uniform_position(rng, max_position);
  }
  std::vector<int64_t> per_token(static_cast<size_t>(tokens * streams));
  for (int s = 0; s < streams; ++s) {
    for (int64_t t = 0; t < tokens; ++t) {
      per_token[static_cast<size_t>(s * tokens + t)] = token_positions[static_cast<size_t>(t)];
    }
  }
  const std::array<int64_t, 4> shape{1, tokens, 1, head_dim};
  const TensorView q_view = contiguous_view(q.data(), DType::F32, Layout::BSHD, shape);
  const TensorView k_view = contiguous_view(k.data(), DType::F32, Layout::BSHD, shape);
  const TensorView q_out_view = contiguous_view(q_out.data(), DType::F32, Layout::BSHD, shape);
  const TensorView k_out_view = contiguous_view(k_out.data(), DType::F32, Layout::BSHD, shape);
  rotary::apply(q_view, k_view, q_out_view, k_out_view, Positions::per_token(per_token), table);

  const double m = table.attention_scaling();
  double worst = 0.0;
  for (int64_t t = 0; t < tokens; ++t) {
    for (const auto* pair : {&q, &k}) {
      const std::vector<float>& in = *pair;
      const std::vector<float>& out = pair == &q ? q_out : k_out;
      double in_sq = 0.0, out_sq = 0.0;
      for (int64_t e = 0; e < rotary_dim; ++e) {
        const auto index = static_cast<size_t>(t * head_dim + e);
        in_sq += static_cast<double>(in[index]) * in[index];
        out_sq += static_cast<double>(out[index]) * out[index];
      }
      if (in_sq == 0.0) continue;
      worst = std::max(worst, std::abs(std::sqrt(out_sq) / (m * std::sqrt(in_sq)) - 1.0));
    }
  }
  return worst;
}

// Mean of the bound over the integers in [first, last], every one or `max_points` evenly spaced.
double mean_bound(std::span<const double> inv_freq, int64_t first, int64_t last, int64_t max_points) {
  const int64_t count = last - first + 1;
  double sum = 0.0;
  int64_t n = 0;
  if (count <= max_points) {
    for (int64_t r = first; r <= last; ++r, ++n) sum += decay_bound(inv_freq, static_cast<double>(r));
  } else {
    for (int64_t j = 0; j < max_points; ++j, ++n) {
      const double r = std::round(static_cast<double>(first) +
                                  static_cast<double>(last - first) * static_cast<double>(j) /
                                      static_cast<double>(max_points - 1));
      sum += decay_bound(inv_freq, r);
    }
  }
  return sum / static_cast<double>(n);
}

LongTermDecay decay_curves(std::span<const double> inv_freq, const Rotation& rotation, const DecayOptions& options) {
  const int64_t max_distance = options.max_distance;
  if (max_distance <= 16) {
    throw Error(detail::concat("long_term_decay: max_distance must be > 16, past the near range [1, 16] (got ",
                               max_distance, ")"));
  }
  if (max_distance > rotation.max_position) {
    throw Error(detail::concat("long_term_decay: max_distance must be <= ", rotation.max_position, " (got ",
                               max_distance, ")"));
  }
  check_samples(options.num_samples, "long_term_decay");
  if (options.points_per_octave < 1) {
    throw Error(
        detail::concat("long_term_decay: points_per_octave must be >= 1 (got ", options.points_per_octave, ")"));
  }
  if (static_cast<int64_t>(inv_freq.size()) != rotation.num_pairs) {
    throw Error(detail::concat("long_term_decay: inv_freq must have rotation.num_pairs = ", rotation.num_pairs,
                               " values (got ", inv_freq.size(), ")"));
  }
  // Unrotated pairs (theta = 0: Proportional's tail past partial_rotary_factor) are pass-through
  // dims, like the dims past rotary_dim: they are left out of the bound, and the vectors of the
  // scores are zero there. Kept in, they would add a constant, always-in-phase term that hides
  // the decay of the rotated pairs.
  std::vector<double> rotated;
  std::vector<bool> is_rotated(inv_freq.size(), false);
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    if (inv_freq[i] != 0.0) {
      rotated.push_back(inv_freq[i]);
      is_rotated[i] = true;
    }
  }
  LongTermDecay out;
  out.max_distance = max_distance;
  const std::vector<double> grid = log_distance_grid(max_distance, options.points_per_octave);
  if (rotated.empty()) {
    // Nothing rotates (NoPE): the score is the same at every distance; nothing decays.
    for (double r : grid) {
      out.bound.push_back({r, 0.0});
      out.score_identical_ones.push_back({r, 1.0});
      out.score_identical_random.push_back({r, 1.0});
      out.score_independent_random.push_back({r, 0.0});
    }
    out.decay_ratio = 1.0;
    return out;
  }
  out.bound_at_zero = (static_cast<double>(rotated.size()) + 1.0) / 2.0;
  auto mask = [&](PairVector v) {
    for (size_t i = 0; i < is_rotated.size(); ++i) {
      if (!is_rotated[i]) v.a[i] = v.c[i] = 0.0;
    }
    return v;
  };

  std::mt19937_64 rng(options.seed);
  std::vector<PairVector> identical, q_independent, k_independent;
  for (int64_t s = 0; s < options.num_samples; ++s) {
    identical.push_back(mask(random_vector(rng, rotation.num_pairs)));
    q_independent.push_back(mask(random_vector(rng, rotation.num_pairs)));
    k_independent.push_back(mask(random_vector(rng, rotation.num_pairs)));
  }
  PairVector ones;
  ones.a.assign(static_cast<size_t>(rotation.num_pairs), 1.0);
  ones.c.assign(static_cast<size_t>(rotation.num_pairs), 1.0);
  ones = mask(ones);

  const double m = rotation.attention_scaling;
  const Row origin = fetch_row(rotation, 0);  // R_0 = m I for a correct rotation
  for (double r : grid) {
    out.bound.push_back({r, decay_bound(rotated, r)});
    const Row row = fetch_row(rotation, static_cast<int64_t>(r));
    auto score = [&](const PairVector& q, const PairVector& k) {
      const double norms = q.norm() * k.norm();
      return norms > 0.0 ? dot(rotate(q, row), rotate(k, origin)) / (m * m * norms) : 0.0;
    };
    out.score_identical_ones.push_back({r, score(ones, ones)});
    double identical_sum = 0.0, independent_sum = 0.0;
    for (int64_t s = 0; s < options.num_samples; ++s) {
      const auto index = static_cast<size_t>(s);
      identical_sum += score(identical[index], identical[index]);
      independent_sum += std::abs(score(q_independent[index], k_independent[index]));
    }
    const auto samples = static_cast<double>(options.num_samples);
    out.score_identical_random.push_back({r, identical_sum / samples});
    out.score_independent_random.push_back({r, independent_sum / samples});
  }
  out.near_mean = mean_bound(rotated, 1, 16, 16);
  out.far_mean = mean_bound(rotated, max_distance / 2, max_distance, 4097);
  out.decay_ratio = out.far_mean > 0.0 ? out.near_mean / out.far_mean : std::numeric_limits<double>::infinity();
  return out;
}

}  // namespace

// ---- rotations -----------------------------------------------------------------------------------

Rotation exact_rotation(const RopeSpec& spec, int64_t seq_len) {
  TableOptions options;
  options.precision = Precision::Exact;
  options.storage = Storage::OnTheFly;
  options.seq_len = seq_len;
  auto table = std::make_shared<const CosSinTable>(rotation_only(spec), options);
  Rotation rotation;
  rotation.num_pairs = table->num_pairs();
  rotation.attention_scaling = table->attention_scaling();
  rotation.max_position = table->max_position();
  rotation.row = [table](int64_t position, double* cos_out, double* sin_out) {
    table->row_f64(position, cos_out, sin_out);
  };
  return rotation;
}

Rotation direct_rotation(std::vector<double> inv_freq, double attention_scaling) {
  if (inv_freq.empty()) throw Error("direct_rotation: inv_freq must not be empty (got 0 values)");
  for (double theta : inv_freq) {
    if (!std::isfinite(theta)) {
      throw Error(detail::concat("direct_rotation: inv_freq must be finite (got ", theta, ")"));
    }
  }
  Rotation rotation;
  rotation.num_pairs = static_cast<int64_t>(inv_freq.size());
  rotation.attention_scaling = attention_scaling;
  rotation.row = [inv_freq = std::move(inv_freq), attention_scaling](int64_t position, double* cos_out,
                                                                     double* sin_out) {
    for (size_t i = 0; i < inv_freq.size(); ++i) {
      const double angle = static_cast<double>(position) * inv_freq[i];
      cos_out[i] = attention_scaling * std::cos(angle);
      sin_out[i] = attention_scaling * std::sin(angle);
    }
  };
  return rotation;
}

int64_t default_trained_context(const RopeSpec& spec) {
  const ScalingType type = spec.scaling.type;
  if (type == ScalingType::Yarn || type == ScalingType::LongRope || type == ScalingType::Llama3 ||
      spec.scaling.original_max_position_embeddings > 0) {
    return spec.original_context();
  }
  // Linear interpolation maps max_position_embeddings onto the positions it was trained on
  // (Gemma 3's global layers: 131072 / 8 = 16384), as rotary explain reads it.
  if (type == ScalingType::Linear && spec.max_position_embeddings > 0) {
    return std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(spec.max_position_embeddings) /
                                                      *spec.scaling.factor));
  }
  return spec.max_position_embeddings > 0 ? spec.max_position_embeddings : 2048;
}

int64_t default_target_context(const RopeSpec& spec) {
  int64_t target = spec.max_position_embeddings > 0 ? spec.max_position_embeddings : default_trained_context(spec);
  if (spec.scaling.type == ScalingType::Yarn && spec.scaling.factor) {
    const double extended = std::round(static_cast<double>(spec.original_context()) * *spec.scaling.factor);
    if (extended > static_cast<double>(target) && extended <= static_cast<double>(kMaxPosition)) {
      target = static_cast<int64_t>(extended);
    }
  }
  return target;
}

// ---- 1. norm preservation --------------------------------------------------------------------------

bool NormPreservation::passed() const {
  const bool f64_ok = max_deviation_f64 <= threshold_f64;
  const bool f32_ok = std::isnan(max_deviation_f32) || max_deviation_f32 <= threshold_f32;
  return f64_ok && f32_ok;
}

NormPreservation norm_preservation(const Rotation& rotation, const NormOptions& options) {
  check_rotation(rotation, "norm_preservation");
  check_samples(options.num_samples, "norm_preservation");
  const int64_t max_position = std::clamp<int64_t>(options.max_position, 0, rotation.max_position);
  std::mt19937_64 rng(options.seed);
  NormPreservation out;
  out.num_samples = options.num_samples;
  const double m = rotation.attention_scaling;
  for (int64_t s = 0; s < options.num_samples; ++s) {
    // The first samples pin the edges: position 0, 1 and the largest allowed.
    const int64_t position = s == 0 ? 0 : s == 1 ? std::min<int64_t>(1, max_position)
                                   : s == 2      ? max_position
                                                 : log_uniform_position(rng, max_position);
    const PairVector q = random_vector(rng, rotation.num_pairs);
    const double deviation = std::abs(rotate(q, fetch_row(rotation, position)).norm() / (m * q.norm()) - 1.0);
    if (deviation > out.max_deviation_f64 || std::isnan(deviation)) {
      out.max_deviation_f64 = std::isnan(deviation) ? std::numeric_limits<double>::infinity() : deviation;
      out.worst_position_f64 = position;
    }
  }
  return out;
}

NormPreservation norm_preservation(const RopeSpec& spec, const NormOptions& options) {
  const RopeSpec rotation_spec = rotation_only(spec);
  NormPreservation out = norm_preservation(exact_rotation(rotation_spec, options.seq_len), options);
  if (options.float32_kernel) out.max_deviation_f32 = float32_kernel_norm_deviation(rotation_spec, options);
  return out;
}

// ---- 2. relative-position invariance -----------------------------------------------------------------

namespace {

RelativeInvariance relative_invariance_shifted(const Rotation& rotation, const InvarianceOptions& options,
                                               int64_t k_shift_extra) {
  check_rotation(rotation, "relative_invariance");
  check_samples(options.num_samples, "relative_invariance");
  const int64_t max_position = std::clamp<int64_t>(options.max_position, 0, rotation.max_position);
  const int64_t extra = k_shift_extra;
  if (extra < -max_position / 4 || extra > max_position / 4) {
    throw Error(detail::concat("relative_invariance: k_shift_extra must be within a quarter of max_position ",
                               max_position, " (got ", extra, ")"));
  }
  std::mt19937_64 rng(options.seed);
  RelativeInvariance out;
  out.num_samples = options.num_samples;
  const double m = rotation.attention_scaling;
  // Room for the fault-injection offset on both sides.
  const int64_t margin = extra < 0 ? -extra : extra;
  const int64_t usable = max_position - 2 * margin;
  if (usable < 2) {
    throw Error(detail::concat("relative_invariance: max_position must be >= 2 + 2 |k_shift_extra| (got ",
                               max_position, ")"));
  }
  for (int64_t s = 0; s < options.num_samples; ++s) {
    int64_t t = 0, pm = 0, pn = 0;
    if (s == 0) {  // the largest shift: from the origin to the end of the range
      pm = 0;
      pn = 1;
      t = usable - 1;
    } else if (s == 1) {  // large positions, far apart
      pm = usable / 2;
      pn = 0;
      t = usable / 2;
    } else {
      t = log_uniform_position(rng, usable / 2);
      pm = log_uniform_position(rng, usable - t);
      pn = log_uniform_position(rng, usable - t);
    }
    pm += margin;
    pn += margin;
    const PairVector q = random_vector(rng, rotation.num_pairs);
    const PairVector k = random_vector(rng, rotation.num_pairs);
    const double before = dot(rotate(q, fetch_row(rotation, pm)), rotate(k, fetch_row(rotation, pn)));
    const double after = dot(rotate(q, fetch_row(rotation, pm + t)), rotate(k, fetch_row(rotation, pn + t + extra)));
    double deviation = std::abs(before - after) / (m * m * q.norm() * k.norm());
    if (std::isnan(deviation)) deviation = std::numeric_limits<double>::infinity();
    if (s == 0 || deviation > out.max_deviation) {
      out.max_deviation = deviation;
      out.worst_m = pm;
      out.worst_n = pn;
      out.worst_t = t;
    }
  }
  return out;
}

}  // namespace

RelativeInvariance relative_invariance(const Rotation& rotation, const InvarianceOptions& options) {
  return relative_invariance_shifted(rotation, options, 0);
}

RelativeInvariance relative_invariance(const RopeSpec& spec, const InvarianceOptions& options) {
  return relative_invariance(exact_rotation(spec, options.seq_len), options);
}

RelativeInvariance fault_injection::relative_invariance_with_k_shift(const RopeSpec& spec, const InvarianceOptions& options,
                                                            int64_t k_shift_extra) {
  return relative_invariance_shifted(exact_rotation(spec, options.seq_len), options, k_shift_extra);
}

// ---- 3. long-term decay ------------------------------------------------------------------------------

double decay_bound(std::span<const double> inv_freq, double distance_tokens) {
  if (inv_freq.empty()) throw Error("decay_bound: inv_freq must not be empty (got 0 values)");
  // S_j = sum_{k<j} e^{i r theta_k}; RoFormer section 3, "long-term decay".
  std::complex<double> partial(0.0, 0.0);
  double sum_abs = 0.0;
  for (double theta : inv_freq) {
    const double angle = distance_tokens * theta;
    partial += std::complex<double>(std::cos(angle), std::sin(angle));
    sum_abs += std::abs(partial);
  }
  return sum_abs / static_cast<double>(inv_freq.size());
}

std::vector<double> log_distance_grid(int64_t max_distance, int points_per_octave) {
  if (max_distance < 1) {
    throw Error(detail::concat("log_distance_grid: max_distance must be >= 1 (got ", max_distance, ")"));
  }
  if (points_per_octave < 1) {
    throw Error(detail::concat("log_distance_grid: points_per_octave must be >= 1 (got ", points_per_octave, ")"));
  }
  std::vector<double> grid{0.0};
  const double octaves = std::log2(static_cast<double>(max_distance));
  const auto steps = static_cast<int64_t>(std::ceil(octaves * points_per_octave));
  for (int64_t j = 0; j <= steps; ++j) {
    const double r = std::min(std::round(std::exp2(static_cast<double>(j) / points_per_octave)),
                              static_cast<double>(max_distance));
    if (r > grid.back()) grid.push_back(r);
  }
  if (grid.back() < static_cast<double>(max_distance)) grid.push_back(static_cast<double>(max_distance));
  return grid;
}

LongTermDecay long_term_decay(std::span<const double> inv_freq, double attention_scaling, const DecayOptions& options) {
  const Rotation rotation = direct_rotation(std::vector<double>(inv_freq.begin(), inv_freq.end()), attention_scaling);
  check_rotation(rotation, "long_term_decay");
  return decay_curves(inv_freq, rotation, options);
}

LongTermDecay long_term_decay(const RopeSpec& spec, const DecayOptions& options) {
  DecayOptions resolved = options;
  if (resolved.max_distance == 0) resolved.max_distance = default_trained_context(spec);
  const int64_t seq_len = resolved.seq_len > 0 ? resolved.seq_len : resolved.max_distance;
  const Frequencies freqs = frequencies(spec, seq_len);
  return decay_curves(freqs.inv_freq, exact_rotation(spec, seq_len), resolved);
}

LongTermDecay long_term_decay(const RopeSpec& spec, int64_t max_distance, int64_t samples) {
  DecayOptions options;
  options.max_distance = max_distance;
  options.num_samples = samples;
  return long_term_decay(spec, options);
}

}  // namespace rotary::analysis
