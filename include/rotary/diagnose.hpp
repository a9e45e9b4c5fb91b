// include/rotary/diagnose.hpp: what an unknown RoPE implementation does, inferred from samples of
// it (inputs x, outputs y and positions), and how that differs from a model's spec.
//
// diagnose() reads only the samples: which elements pass through, which elements form rotation
// pairs (half-split, interleaved or another permutation), the rotation direction, inv_freq per
// pair and the position offset, the attention scaling (|y_pair| / |x_pair|), and the precision
// class of the angles. It then fits theta (log-linear fit of inv_freq against the pair index) and
// compares inv_freq with every built-in preset. compare_to_spec() lists each mismatch against a
// target spec in plain words ("your implementation pairs (x[2i], x[2i+1]) ...; this model pairs
// (x[i], x[i+64]) ..."). docs/analysis.md, "Diagnose", gives the math, how many rows and which
// positions are needed, and what stays ambiguous.
//
// diagnose() refuses (rotary::Error) samples in which y is not x rotated pair by pair: y = 0,
// noise, y = 2x, y = -x (no pair's angle depends on the position). A property the samples cannot
// pin down (a fit whose residual is too large, or aliased positions) is left empty and listed in
// Diagnosis::cannot_tell; compare_to_spec() never calls it a mismatch.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rotary/apply.hpp"  // Direction
#include "rotary/spec.hpp"

namespace rotary::analysis {

// How the implementation pairs elements (memory layout of the pairs inside the rotated block).
enum class Pairing {
  HalfSplit,    // NeoX: (x[o + i], x[o + i + d/2])
  Interleaved,  // GPT-J: (x[o + 2i], x[o + 2i + 1])
  Other,        // another permutation (listed in Diagnosis::pairs)
  Ambiguous,    // both patterns fit the samples (every angle below the noise)
};
std::string_view to_string(Pairing pairing);  // "half-split", "interleaved", "other", "ambiguous"

// The accuracy of the implementation's angles, from the residuals of the fit angle = p theta + c.
enum class PrecisionClass {
  Exact,              // residuals at the samples' own rounding (float64: ~1e-15 rad)
  Float32Table,       // flat ~1e-7 rad: cos/sin rounded to float32, angles exact
  Float32AngleDrift,  // grows with the angle, ~ |p theta| 2^-24: the angle p * theta formed in float32
  Float16,            // ~1e-4 .. 1e-3 rad at small angles too: float16 (or bfloat16) cos/sin or angles
};
std::string_view to_string(PrecisionClass precision);  // "exact", "float32-table", ...

struct DiagnoseOptions {
  // Unit roundoff of the storage the samples came in (2^-53 float64, 2^-24 float32, 2^-11
  // float16, 2^-8 bfloat16): residuals at this level are "exact". The CLI sets it from the .npy.
  double storage_epsilon = 0x1p-53;
  // Integer position offsets searched: [-max_position_offset, max_position_offset].
  int64_t max_position_offset = 4096;
};

// Samples: x and y are [num_rows, head_dim] row-major float64, positions [num_rows]; each row is
// one head vector at one position (rows may share positions, e.g. several heads of one token).
struct DiagnoseSamples {
  std::span<const double> x;
  std::span<const double> y;
  std::span<const int64_t> positions;
  int64_t head_dim = 0;
};

struct PairFinding {
  int64_t first = 0;   // element index a (a < c); the angle is measured from a towards c:
  int64_t second = 0;  // y_a = s (a cos phi - c sin phi), y_c = s (c cos phi + a sin phi)
  double inv_freq = 0.0;         // |theta_i|, radians per position
  double inv_freq_signed = 0.0;  // the fitted slope (negative for a conjugate rotation)
  double phase_rad = 0.0;        // the fitted intercept c_i in (-pi, pi] (offset * theta_i)
  double max_residual_rad = 0.0;  // max over rows of |angle - (p theta + c)|
  double attention_scaling = 1.0;  // median over rows of |y_pair| / |x_pair|
  double norm_spread = 0.0;        // (max - min) / mean over rows of |y_pair|^2 / |x_pair|^2
  // The samples pin inv_freq down: the fit's max residual is at most
  // Diagnosis::fit_residual_limit_rad and exactly one inv_freq in [-pi, pi] (integer positions
  // cannot tell theta from theta + 2 pi) fits every sampled angle. Otherwise inv_freq is the
  // fit's guess and no finding uses it.
  bool identified = false;
};

// What the CLI and Python print for a property in Diagnosis::cannot_tell.
inline constexpr std::string_view kCannotTell = "cannot tell from these positions; use positions 0..7 or more rows";

// A frequency set the measured inv_freq was compared with: a preset at one seq_len.
struct FrequencyCandidate {
  std::string name;        // "llama-3.1-8b", "phi-3-mini-128k (long factors)", "gemma-3-1b:sliding_attention"
  std::string scheme;      // "llama3", "longrope", ...
  double max_log_deviation = 0.0;  // max_i |ln(measured_i / candidate_i)|
  bool matches = false;  // every pair within its (finite) tolerance (Diagnosis::inv_freq_tolerance)
};

struct Diagnosis {
  int64_t head_dim = 0;
  int64_t num_rows = 0;
  int64_t num_distinct_positions = 0;
  int64_t max_position = 0;  // seq_len = max_position + 1 (HF's rule) for compare_to_spec

  // Elements that pass through unchanged, and the rotated block (contiguous when
  // rotated_contiguous; then rotated_offset .. rotated_offset + rotary_dim - 1).
  std::vector<int64_t> pass_through_dims;
  int64_t rotated_offset = 0;
  int64_t rotary_dim = 0;
  bool rotated_contiguous = true;

  Pairing pairing = Pairing::Other;
  std::vector<PairFinding> pairs;  // in frequency order (pair i); first is increasing
  double pairing_score = 0.0;      // max norm_spread over the chosen pairs (0 = a perfect rotation)
  double other_pattern_score = 0.0;  // the same for the rejected standard pattern (large = clear)

  // Properties the samples cannot pin down, by name: "pairing" (both patterns fit), "theta" (a
  // pair not identified: inv_freq, scheme, fitted theta and presets are then empty),
  // "position_offset", "direction", "precision". Their optional fields below hold no value.
  std::vector<std::string> cannot_tell;
  double fit_residual_limit_rad = 0.0;  // a pair's angle fit is supported up to this max residual
  int64_t num_pairs_identified = 0;     // pairs with PairFinding::identified

  // Backward: every pair turns by -p theta (conjugate). From the identified pairs' slopes.
  std::optional<Direction> direction;
  int64_t num_pairs_against_direction = 0;  // identified pairs whose slope has the other sign

  // The implementation rotates position p by the angle of p + offset (from the identified pairs).
  std::optional<int64_t> position_offset;
  double position_offset_residual = 0.0;  // max_i |wrap(c_i - phase - offset theta_i)|, rad
  // A phase added to every pair: 0, or pi/2, -pi/2, pi when that (and no offset alone) explains the
  // intercepts. pi/2 with a backward slope is cos and sin swapped (y = x sin + rotate_half(x) cos
  // turns each pair by pi/2 - p theta).
  double constant_phase_rad = 0.0;
  bool cos_sin_swapped = false;

  double attention_scaling = 1.0;         // median over pairs
  double attention_scaling_spread = 0.0;  // max |pair scaling / median - 1|

  std::optional<PrecisionClass> precision;  // from the identified pairs' residuals
  double max_residual_rad = 0.0;       // over all pairs and rows
  // Max residual of a second fit over angles |p theta| <= 32 rad (pairs with >= 3 such positions;
  // else max_residual_rad): large angles' drift cannot reach it.
  double small_angle_residual_rad = 0.0;
  double residual_per_radian = 0.0;  // max residual / |angle| over angles > 32 rad (0 if none)

  // Log-linear fit ln theta_i = ln(1 / factor) - (2 i / d) ln(theta_base): exact for default RoPE,
  // linear scaling (factor) and static NTK (a different base).
  std::optional<double> fitted_theta_base;     // empty when "theta" is in cannot_tell
  std::optional<double> fitted_linear_factor;
  double fit_max_log_residual = 0.0;  // max_i |ln theta_i - fit|; ~0 when the scheme is log-linear
  std::string scheme;  // "default", "linear", "per-pair scaling (llama3)", ...; empty if theta unknown

  // Per-pair tolerance on ln(theta_i) from the residuals and the position span.
  std::vector<double> inv_freq_tolerance;
  std::vector<FrequencyCandidate> candidates;  // sorted by max_log_deviation
  std::string nearest_preset;                  // candidates[0].name (empty if none has d/2 pairs)

  // What the samples leave uncertain, for people: a pair that barely turns over the sampled
  // positions, a first position step that may alias the fastest pair, ambiguous pairing.
  std::vector<std::string> notes;

  std::vector<double> inv_freq() const;  // pairs[i].inv_freq
};

// Throws rotary::Error naming the argument and the value for: x or y not num_rows * head_dim
// values, positions not num_rows, a non-finite value (naming the row and column), a negative
// position, fewer than 2 rows or 2 distinct positions, head_dim < 2, no element changed; and
// "y is not a rotation of x ..." with the reason when y is 0, when no pairing keeps every pair's
// norm ratio |y_pair| / |x_pair| the same in all rows (noise, a mix of pairs), or when no pair's
// angle changes with the position (y = 2x, y = -x: a constant rotation is no RoPE).
Diagnosis diagnose(const DiagnoseSamples& samples, const DiagnoseOptions& options = {});

// One difference from the target, in plain words naming both sides.
struct Mismatch {
  std::string aspect;  // "pairing", "rotated_dims", "direction", "theta", "scaling", "factor_set",
                       // "inv_freq", "position_offset", "attention_scaling", "precision"
  std::string implementation;  // what the samples show
  std::string model;           // what the spec does
  std::string message;         // "your implementation <implementation>; this model <model>"
};

// Each way the diagnosed implementation differs from `spec` (empty when it matches). The
// frequencies are the spec's at the samples' seq_len (largest position + 1, HF's rule: LongRoPE
// short or long factors, dynamic NTK). Throws rotary::ConfigError for an invalid spec.
std::vector<Mismatch> compare_to_spec(const Diagnosis& diagnosis, const RopeSpec& spec);

}  // namespace rotary::analysis
