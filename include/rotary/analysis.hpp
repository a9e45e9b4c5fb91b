// include/rotary/analysis.hpp: what a RoPE spec does, measured: property checks, decay curves,
// per-pair rotations, extrapolation, scheme scaling, other position encodings, and the
// NeoX / GPT-J convention-mismatch detector.
//
// The analysis layer sits above core and cpu: it reads frequencies(), context_coverage(),
// CosSinTable and rotary::apply, and nothing below includes it. Every function is a plain
// function of a RopeSpec (plus an options struct where there are many parameters) returning
// plain data, so the CLI (`rotary check`), the HTML report and the Python module can print,
// plot or test the same numbers. docs/analysis.md states each formula, each threshold and why.
//
// Notation (docs/formulas.md section 1): d = rotary_dim, pair i in [0, d/2), theta_i =
// inv_freq[i], m = attention_scaling (multiplies cos and sin), R_p = the rotation at position p
// (pair i rotated by p * theta_i, then scaled by m). All analysis is in "pair space": a vector is
// d/2 pairs (a_i, c_i); the pairing convention only decides where a pair lives in memory, and
// norms and dot products do not depend on it. Only the float32 kernel figure and the
// convention-mismatch detector look at the memory layout.
//
// Multi-stream specs (M-RoPE, 2-D vision) are analysed for text tokens, whose streams all carry
// the same position: pair i then turns by p * theta_i as in single-stream RoPE. xPos is a
// deliberate per-position scale of q (zeta^e) and k (zeta^-e), not part of the rotation: the
// checks are about the rotation and drop spec.xpos (docs/analysis.md says why).
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "rotary/encodings.hpp"
#include "rotary/frequencies.hpp"
#include "rotary/spec.hpp"
#include "rotary/table.hpp"

namespace rotary::analysis {

// ---- thresholds (derivations in docs/analysis.md, "Thresholds") -------------------------------

// float64 rotation from exact rows (|cos/sin error| <= ~1.2e-15 absolute, table.cpp): a pair's
// norm is off by <= ~2.4e-15 relative, and a norm or dot product summed over d <= 512 elements
// adds <= d * 2^-53 ~ 6e-14 in the worst case. 1e-12 keeps >= 10x margin over that bound, while
// any real defect (a float32 table ~6e-8, a wrong angle, a mismatched pairing ~0.1..1) is >= 1e4
// times larger.
inline constexpr double kNormThresholdF64 = 1e-12;
inline constexpr double kInvarianceThresholdF64 = 1e-12;
// The float32 kernel (rotary::apply): |out - ref| <= 4e-7 * (|x_i| + |x_partner|) per element
// (table rounding <= 1.2e-7 plus two FMA-chain roundings; docs/numerics.md), i.e. <= 8e-7 of a
// pair's norm, so the norm ratio is within 8e-7 of 1. 1e-6 is that bound, rounded up.
inline constexpr double kNormThresholdF32 = 1e-6;
// RoFormer's decay bound: the mean over distances [1, 16] must exceed the mean over [L/2, L] by
// at least this factor. Measured (docs/analysis.md): every built-in preset has >= 1.88 for every
// L >= 2048 (gpt-neox-20b, 12 pairs, is the lowest; 2.1 or more for the others at their declared
// contexts), while random frequency sets uniform in [0, pi] (no slow pairs to stay in phase)
// give 0.98..1.36 at L >= 2048, and a base of 1e30 (every pair but a few in phase at any distance)
// 1.04..1.39.
inline constexpr double kDecayMinRatio = 1.5;
// run_checks evaluates the decay over L = max(context, kDecayMinDistance): below ~2k tokens the
// slow pairs of every model are still in phase, so a short context shows little decay (1.26..1.78
// at L = 64 for the presets) without anything being wrong.
inline constexpr int64_t kDecayMinDistance = 2048;
// Encodings whose score deviation under a common shift is below this are "relative only".
inline constexpr double kRelativeOnlyThreshold = 1e-9;

// ---- rotations ---------------------------------------------------------------------------------

// One position's rotation values, num_pairs each, pair order: cos_out[i] = m cos(p theta_i),
// sin_out[i] = m sin(p theta_i). The checks take rotations through this interface so that a test
// can inject a broken one (cos^2 + sin^2 != m^2, an angle not linear in p, ...).
using RowFunction = std::function<void(int64_t position, double* cos_out, double* sin_out)>;

struct Rotation {
  int64_t num_pairs = 0;
  double attention_scaling = 1.0;       // m: every pair should have cos^2 + sin^2 = m^2
  int64_t max_position = kMaxPosition;  // row() accepts [0, max_position]
  RowFunction row;
};

// The spec's rotation from an exact on-the-fly CosSinTable (CosSinTable::row_f64: the exact
// value to ~1.2e-15 absolute at every position in [0, kMaxPosition]). seq_len as frequencies().
Rotation exact_rotation(const RopeSpec& spec, int64_t seq_len = 0);

// A rotation computed directly as m * cos(p * inv_freq[i]) in double (angle error ~p theta 2^-53:
// fine for curves, not for the 1e-12 checks at large positions). For arbitrary frequency sets.
Rotation direct_rotation(std::vector<double> inv_freq, double attention_scaling = 1.0);

// The context a model was trained on, as `rotary explain` reads it: the original context L0 for
// yarn, longrope and llama3 and wherever the config states one; for linear scaling
// max_position_embeddings / factor; max_position_embeddings for the others; 2048 when unknown.
int64_t default_trained_context(const RopeSpec& spec);

// The context the config extends the model to, the default target of `rotary check` and
// `explain`: max_position_embeddings, or for YaRN the original context times the factor when that
// is larger (Qwen's recipe adds factor 4 over 32768 and leaves max_position_embeddings at 32768
// or 40960: the model is configured for 131072); the trained context when neither is known.
int64_t default_target_context(const RopeSpec& spec);

// ---- 1. norm preservation ----------------------------------------------------------------------
//
// |R_p q| = m |q| for every q and p: a rotation (RoFormer, arXiv:2104.09864, section 3: R is
// orthogonal) scaled by the attention scaling. Metric: max over samples of
// | |R_p q| / (m |q|) - 1 |.

struct NormOptions {
  int64_t num_samples = 256;            // random (q, p) pairs, q ~ N(0, 1) per element (never 0)
  uint64_t seed = 1;
  int64_t max_position = kMaxPosition;  // p log-uniform in [0, max_position], plus 0, 1 and max
  int64_t seq_len = 0;                  // for the sequence-dependent schemes (frequencies())
  bool float32_kernel = true;           // also measure rotary::apply (float32) in the spec's layout
};

struct NormPreservation {
  double max_deviation_f64 = 0.0;  // exact rows, float64 rotation
  int64_t worst_position_f64 = 0;
  double threshold_f64 = kNormThresholdF64;
  // rotary::apply on float32 q (head_dim wide, the spec's pairing; pass-through dims excluded
  // from the norm). NaN when not measured.
  double max_deviation_f32 = std::numeric_limits<double>::quiet_NaN();
  double threshold_f32 = kNormThresholdF32;
  int64_t num_samples = 0;
  bool passed() const;
};

NormPreservation norm_preservation(const RopeSpec& spec, const NormOptions& options = {});
// The float64 part on any rotation (float32_kernel is ignored: there is no spec to apply).
NormPreservation norm_preservation(const Rotation& rotation, const NormOptions& options = {});

// ---- 2. relative-position invariance -----------------------------------------------------------
//
// <R_m q, R_n k> = <q, R_(n-m) k> depends on n - m only (RoFormer section 3, the
// inner product), so shifting both positions by t changes nothing. Metric: max over samples of
// |<R_m q, R_n k> - <R_(m+t) q, R_(n+t) k>| / (m^2 |q| |k|).

struct InvarianceOptions {
  int64_t num_samples = 256;
  uint64_t seed = 2;
  int64_t max_position = kMaxPosition;  // m, n, t log-uniform with max(m, n) + t <= max_position
  int64_t seq_len = 0;
};

struct RelativeInvariance {
  double max_deviation = 0.0;
  int64_t worst_m = 0, worst_n = 0, worst_t = 0;
  double threshold = kInvarianceThresholdF64;
  int64_t num_samples = 0;
  bool passed() const { return max_deviation <= threshold; }
};

RelativeInvariance relative_invariance(const RopeSpec& spec, const InvarianceOptions& options = {});
RelativeInvariance relative_invariance(const Rotation& rotation, const InvarianceOptions& options = {});

namespace fault_injection {
// Fault injection, for tests and demonstrations: the shifted evaluation moves k by
// t + k_shift_extra instead of t. Any non-zero value must make the check fail.
RelativeInvariance relative_invariance_with_k_shift(const RopeSpec& spec, const InvarianceOptions& options,
                                                    int64_t k_shift_extra);
}  // namespace fault_injection

// ---- 3. long-term decay ------------------------------------------------------------------------
//
// RoFormer section 3, "long-term decay": with h_i = the complex product of q's and k's pair i,
// the score is Re[sum_i h_i e^{i r theta_i}] (r = m - n). Abel summation with
// S_j = sum_{i<j} e^{i r theta_i} bounds it by (max_i |h_{i+1} - h_i|) * sum_{j=1}^{d/2} |S_j|,
// and RoFormer plots the relative bound (1/(d/2)) sum_{j=1}^{d/2} |S_j| against r: it decays as
// r grows because the slow pairs, which stay in phase for small r, drift apart. The bound is (d/2 + 1)/2 at r = 0.
// Unrotated pairs (theta = 0, Proportional's tail) are pass-through dims, like those past
// rotary_dim: long_term_decay() leaves them out of the bound and of the scores (d/2 above counts
// rotated pairs). A spec with no rotated pair has a flat bound of 0 and decay_ratio 1.

struct CurvePoint {
  double distance_tokens = 0.0;
  double value = 0.0;
};

// (1/n) sum_{j=1}^{n} |S_j(r)| over the n frequencies given, as given (a theta = 0 counts as a
// pair always in phase; long_term_decay() leaves such pairs out). inv_freq must not be empty.
double decay_bound(std::span<const double> inv_freq, double distance_tokens);

// 0, then a log grid from 1 to max_distance with points_per_octave points per doubling,
// rounded to integers, increasing, max_distance included.
std::vector<double> log_distance_grid(int64_t max_distance, int points_per_octave = 8);

struct DecayOptions {
  int64_t max_distance = 0;  // L; 0 = default_trained_context(spec) (frequency-set overload: required)
  int64_t num_samples = 64;  // random vectors averaged per distance
  uint64_t seed = 3;
  int points_per_octave = 8;
  int64_t seq_len = 0;       // spec overload: for frequencies(); 0 = max_distance
};

struct LongTermDecay {
  int64_t max_distance = 0;
  double bound_at_zero = 0.0;                  // (n + 1) / 2, n = rotated pairs
  std::vector<CurvePoint> bound;               // decay_bound(r) on the log grid
  // <R_r q, R_0 k> / (m^2 |q| |k|) on the grid, measured with the rotation's rows:
  std::vector<CurvePoint> score_identical_ones;    // q = k = all-ones: (2/d) sum_i cos(r theta_i)
  std::vector<CurvePoint> score_identical_random;  // q = k ~ N(0, 1), mean over samples
  // q, k independent N(0, 1): mean over samples of |score|. It does not decay: for uncorrelated
  // vectors there is no in-phase sum to lose (about 1/sqrt(d) at every distance, r = 0 too).
  std::vector<CurvePoint> score_independent_random;
  // The property check: near = mean bound over r = 1..16, far = mean over r in [L/2, L]
  // (every integer, or 4097 evenly spaced when there are more), ratio = near / far.
  double near_mean = 0.0;
  double far_mean = 0.0;
  double decay_ratio = 0.0;
  double threshold = kDecayMinRatio;
  // Meaningful for max_distance >= kDecayMinDistance (see there).
  bool passed() const { return decay_ratio >= threshold; }
};

// The spec's curves: the bound from frequencies(spec, seq_len), the scores from exact rows.
LongTermDecay long_term_decay(const RopeSpec& spec, int64_t max_distance, int64_t samples);
LongTermDecay long_term_decay(const RopeSpec& spec, const DecayOptions& options);
// Any frequency set (e.g. a random, non-geometric one that does not decay); scores from
// direct_rotation(inv_freq, attention_scaling). options.max_distance must be > 16.
LongTermDecay long_term_decay(std::span<const double> inv_freq, double attention_scaling,
                              const DecayOptions& options);

// ---- 4. per-pair wavelength and rotations over a context ----------------------------------------

struct PairRotation {
  int64_t pair = 0;
  double inv_freq = 0.0;           // radians per token (scaled, at seq_len = context)
  double wavelength_tokens = 0.0;  // 2 pi / inv_freq (+inf when unrotated)
  double rotations = 0.0;          // full turns over positions [0, context): (context - 1) theta / 2 pi
  PairRegime regime = PairRegime::Unscaled;
};

// From frequencies(spec, context) and its per-pair diagnostics.
std::vector<PairRotation> pair_rotations(const RopeSpec& spec, int64_t context);

// ---- 5. extrapolation past the trained context -------------------------------------------------
//
// Per pair, context_coverage() (frequencies.hpp; docs/formulas.md section 13): a pair whose
// trained angles never completed a full turn, and which the target context drives past its
// largest trained angle, is out of distribution; overshoot = target angle / trained angle.

struct Extrapolation {
  int64_t trained_context = 0;
  int64_t target_context = 0;
  std::vector<PairCoverage> pairs;           // context_coverage(spec, frequencies(spec, target), ...)
  int64_t num_pairs = 0;
  int64_t num_out_of_distribution = 0;
  int64_t num_full_turn_in_training = 0;     // trained angles covered [0, 2 pi): every angle seen
  int64_t num_below_one_turn_at_target = 0;  // rotated pairs that do not complete a turn at target
  double largest_overshoot = 1.0;
  int64_t largest_overshoot_pair = -1;       // -1 when no pair is out of distribution
};

Extrapolation extrapolation(const RopeSpec& spec, int64_t trained_context, int64_t target_context);

// ---- 6. what the scaling scheme does to each pair ----------------------------------------------

struct PairScaling {
  int64_t pair = 0;
  double default_inv_freq = 0.0;  // base^(-2i/d) (default_inv_freq())
  double inv_freq = 0.0;          // the scheme's
  double factor_applied = 1.0;    // default / scheme (1 = kept, s = fully interpolated; 0 unrotated)
  double default_wavelength_tokens = 0.0;
  double wavelength_tokens = 0.0;
  PairRegime regime = PairRegime::Unscaled;
  double blend = 0.0;             // interpolated share in [0, 1]
};

struct SchemeScaling {
  ScalingType type = ScalingType::Default;
  int64_t seq_len = 0;
  double effective_factor = 1.0;
  double attention_scaling = 1.0;
  std::string attention_scaling_source;
  LongRopeFactorSet longrope_factor_set = LongRopeFactorSet::None;
  std::vector<PairScaling> pairs;
};

// For every scheme (YaRN, Llama 3, LongRoPE, linear, NTK, ...), from Frequencies' diagnostics.
// seq_len as frequencies(): pass a length past L0 to see LongRoPE's long factors, past
// max_position_embeddings to see dynamic NTK grow.
SchemeScaling scheme_scaling(const RopeSpec& spec, int64_t seq_len = 0);

// ---- 7. other position encodings (src/analysis/encodings.cpp) ----------------------------------

// Vaswani et al. 2017 section 3.5, ALiBi's slopes and bias (Press et al. 2021): defined once in
// include/rotary/encodings.hpp (core), shared with attention; named here as well for the report.
using rotary::sinusoidal_encoding;

// A stand-in for a learned absolute position table (GPT-2, BERT): num_positions rows of d_model
// values, each N(0, 1) (the
// scale of the content vectors it is compared with), drawn from the seed. It is NOT a trained table: it shows the
// structural facts only: a learned table has rows for [0, num_positions) and nothing past them
// (row() throws), and its scores carry no built-in relation between positions. Rows are
// generated on demand from (seed, position, index), so a long table costs no memory.
class LearnedEncodingStandIn {
 public:
  LearnedEncodingStandIn(int64_t num_positions, int64_t d_model, uint64_t seed = 4);
  int64_t num_positions() const { return num_positions_; }
  int64_t d_model() const { return d_model_; }
  // Throws rotary::Error for a position outside [0, num_positions).
  std::vector<double> row(int64_t position) const;

 private:
  int64_t num_positions_;
  int64_t d_model_;
  uint64_t seed_;
};

using rotary::alibi_bias;
using rotary::alibi_slopes;

struct EncodingComparison {
  std::string name;           // "rope", "sinusoidal", "learned", "alibi"
  std::string description;    // one line: what is compared
  bool relative_only = false;  // the score depends on the relative distance only (measured)
  double shift_deviation = 0.0;  // max |score(m, n) - score(m+t, n+t)| / (|q| |k|) over samples
  bool defined_past_trained = false;
  std::string past_trained_note;  // what happens past the trained length
  std::vector<CurvePoint> decay;  // see decay_meaning; 1 at distance 0
  std::string decay_meaning;
};

struct ComparisonOptions {
  int64_t trained_context = 0;  // 0 = default_trained_context(spec); the learned table's length
  int64_t max_distance = 0;     // 0 = 2 * trained_context: the curves go past the trained length
  int64_t num_heads = 0;        // ALiBi heads; 0 = spec.num_attention_heads, else 8
  int64_t num_samples = 64;
  uint64_t seed = 5;
  int points_per_octave = 8;
};

// RoPE (the spec), sinusoidal, learned and ALiBi at d_model = spec.rotary_dim, with content
// vectors q, k ~ N(0, 1) and W_q = W_k = I: additive encodings score <q + P_m, k + P_n>, RoPE
// <R_m q, R_n k>, ALiBi <q, k> + bias(m, n). Data for the HTML report.
std::vector<EncodingComparison> compare_encodings(const RopeSpec& spec, const ComparisonOptions& options = {});

// ---- 8. NeoX / GPT-J convention mismatch -------------------------------------------------------
//
// A cos (or sin) row in the expanded layout Hugging Face returns (rotary_dim values): NeoX
// cat(v, v) (element j holds pair j mod d/2), GPT-J repeat-interleave (element j holds pair j/2).
// Applying such a row with the other pairing (HF's x * cos + rotate(x) * sin with the wrong
// rotate) gives each applied pair two different angles: the block [[C_u, -S_u], [S_v, C_v]] with
// det = m^2 cos(alpha_u - alpha_v), no longer a rotation, so norms change by O(1).

enum class DetectedConvention {
  NeoX,       // first half equals second half, adjacent values differ
  GPTJ,       // adjacent values equal (2i == 2i+1), halves differ
  Ambiguous,  // both patterns hold (position 0, a single pair, or equal frequencies)
  Unknown,    // neither (not an expanded row, or an odd length)
};
std::string_view to_string(DetectedConvention convention);  // "neox", "gptj", "ambiguous", "unknown"

// Looks at one expanded cos row and sin row (equal lengths) and says which layout they are in.
// Values are equal when they differ by at most `tolerance` (absolute; rows copy their values, so
// 0 works for rows made by one code path, and 1e-6 absorbs a float32 recomputation).
DetectedConvention detect_convention(std::span<const double> cos_row, std::span<const double> sin_row,
                                     double tolerance = 1e-6);
DetectedConvention detect_convention(std::span<const float> cos_row, std::span<const float> sin_row,
                                     double tolerance = 1e-6);

// The pair rows expanded to rotary_dim values in `layout` (expand_row() in float64).
std::vector<double> expand_row_f64(std::span<const double> pair_values, Style layout);

// Largest relative norm change | |M x| / (m |x|) - 1 | over ALL vectors x, when the expanded rows
// are applied with `pairing` (HF's x * cos + rotate(x) * sin, rotate = rotate_half for NeoX,
// rotate_every_two for GPT-J): the map is block diagonal in the pairing's pairs, and each 2x2
// block's singular values give its extreme norm ratios exactly. ~1e-16 for a matching layout.
double expanded_rotation_norm_deviation(std::span<const double> cos_row, std::span<const double> sin_row,
                                        Style pairing, double attention_scaling);

struct ConventionOptions {
  int64_t probe_position = 1;     // the row given to the detector (not 0: cos = m, sin = 0 there)
  int64_t max_position = 0;       // mismatch measured on a log grid up to it; 0 = the trained context
  int points_per_octave = 4;
  int64_t seq_len = 0;
};

struct ConventionMismatch {
  Style spec_style = Style::NeoX;
  // Max over the grid positions of expanded_rotation_norm_deviation(layout, pairing):
  double matched_deviation = 0.0;              // the spec's layout with the spec's pairing
  double neox_layout_gptj_pairing_deviation = 0.0;
  double gptj_layout_neox_pairing_deviation = 0.0;
  // The spec's layout applied with the other pairing, per position: near 0 at small positions
  // (every angle is small, both conventions are near the identity: "a few good tokens, then
  // garbage", as NeuraLegion/shainet PR #111 saw), O(1) further on.
  std::vector<CurvePoint> mismatch_by_position;
  // The detector on the row at probe_position: expand_row() (the library's float32 layout).
  DetectedConvention detected_from_neox_layout = DetectedConvention::Unknown;
  DetectedConvention detected_from_gptj_layout = DetectedConvention::Unknown;
};

ConventionMismatch convention_mismatch(const RopeSpec& spec, const ConventionOptions& options = {});

// ---- 9. every check, for `rotary check` --------------------------------------------------------

enum class Bound { AtMost, AtLeast };  // passed when measured <= threshold / >= threshold

struct CheckResult {
  std::string name;
  bool passed = false;
  double measured = 0.0;
  double threshold = 0.0;
  Bound bound = Bound::AtMost;
  std::string explanation;  // what was checked, on what, and why the threshold
};

struct CheckReport {
  std::string spec_name;
  int64_t context = 0;          // target context (extrapolation target, seq_len)
  int64_t decay_distance = 0;   // L of the decay check: max(context, kDecayMinDistance)
  int64_t trained_context = 0;  // default_trained_context(spec)
  std::vector<CheckResult> checks;
  Extrapolation extrapolation;  // informative, not a check: past the trained context by design
  bool all_passed() const;
};

// Runs norm preservation (float64 and the float32 kernel), relative invariance, the decay bound
// (over max(context, kDecayMinDistance)) and the pairing-convention check, and the extrapolation
// figures for the context. context: 0 = default_target_context(spec); it is
// also the seq_len of the sequence-dependent schemes. Throws rotary::ConfigError for an invalid
// spec, rotary::Error for a context outside [1, kMaxPosition].
CheckReport run_checks(const RopeSpec& spec, int64_t context = 0);

// "measured / threshold" margin for people: threshold / measured for AtMost, measured / threshold
// for AtLeast (> 1 = passed with that factor to spare; +inf when measured is 0 for AtMost).
double check_margin(const CheckResult& check);

// ---- engine numerics against the exact table (`rotary diverge`, the report's last plot) -------
//
// Each engine's cos/sin (table.hpp: Precision::HFCompat, Ggml, Vllm) against the exact values, by
// position bucket and by pair: where a long context goes wrong in each engine, and by how much.
// abs error = |engine value - true value| (the exact table's float64 row, ~1e-15 from the truth);
// ulps = float32 steps between the engine's value and the correctly rounded float32 (the exact
// table's value), float32_steps() below. Buckets are octaves of the position: [0], [1], [2, 3],
// [4, 7], ... An engine that cannot reproduce the spec (ggml has no dynamic NTK; vLLM's one cache
// has no LongRoPE) is listed with the reason instead of numbers.

struct DivergenceOptions {
  // Positions to evaluate; empty = samples_per_bucket positions in each octave of
  // [0, max_position), evenly spaced and including each octave's ends.
  std::vector<int64_t> positions;
  int64_t max_position = 0;  // 0: the spec's max_position_embeddings (131072 if it states none)
  int64_t samples_per_bucket = 64;
  // The engines, in order. Vllm's cache is cast to vllm_dtype and built for positions
  // [0, largest evaluated + 1), "a cache built once to max_position".
  std::vector<Precision> precisions = {Precision::HFCompat, Precision::Ggml, Precision::Vllm};
  DType vllm_dtype = DType::F32;
};

struct DivergenceBucket {
  int64_t first = 0, last = 0;  // the octave [first, last], positions inclusive
  int64_t positions = 0;        // evaluated in it
  double max_abs_error = 0.0;
  int64_t max_ulps = 0;
  int64_t worst_position = 0;
  int64_t worst_pair = 0;
};

struct DivergencePair {
  int64_t pair = 0;
  double wavelength_tokens = 0.0;  // of the exact frequency (+inf: unrotated)
  double max_abs_error = 0.0;
  int64_t max_ulps = 0;
};

struct EngineDivergence {
  Precision precision = Precision::HFCompat;
  std::string label;      // "hf", "ggml", "vllm (bfloat16 cache)"
  bool available = true;  // false: the engine cannot reproduce this spec (reason says why)
  std::string reason;
  double max_abs_error = 0.0;
  int64_t max_ulps = 0;
  std::vector<DivergenceBucket> buckets;  // non-empty octaves, increasing
  std::vector<DivergencePair> pairs;      // every pair, worst over all positions
};

struct Divergence {
  std::string spec_name;
  int64_t seq_len = 0;  // the frequencies' seq_len: largest position + 1 (Hugging Face's rule)
  std::vector<int64_t> positions;  // evaluated, increasing, unique
  std::vector<EngineDivergence> engines;
};

// Throws rotary::Error naming the option for positions outside [0, kMaxPosition], an empty or
// oversized request (more than 100,000 positions), samples_per_bucket < 2, a max_position < 1.
Divergence engine_divergence(const RopeSpec& spec, const DivergenceOptions& options = {});

// The ulps of engine_divergence: float32 steps from `reference` to `value`. Of one sign, the
// float32 values between them (the ordered-integer difference). Across zero, or to zero, each
// value's own steps down to zero, |value| / ulp(value) + |reference| / ulp(reference): 1e-3 and
// -1e-3 are 17,179,870 steps apart (1e-3 and 3e-3: 12,683,575), not the 1,963,336,926 float32
// values between them, which count every binade down to the subnormals.
int64_t float32_steps(float value, float reference);

}  // namespace rotary::analysis
