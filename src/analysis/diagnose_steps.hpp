// src/analysis/diagnose_steps.hpp: what the pieces of diagnose() share: its thresholds, the
// angle and row helpers, and the steps that live in their own files (diagnose_pairs.cpp: the
// rotation test and the pairing; diagnose_fit.cpp: the per-pair angle fits and the position
// offset; diagnose_compare.cpp: the frequency law and the presets). Internal to rotary_analysis
// (not installed). Names here are rotary::analysis::detail: write rotary::detail::concat for the
// message builder, which this namespace would otherwise hide.
#pragma once

#include <cmath>
#include <cstdint>
#include <numbers>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "rotary/diagnose.hpp"

namespace rotary::analysis::detail {

inline constexpr double kTwoPi = 2.0 * std::numbers::pi;

// A pair whose norm ratio |y|^2 / |x|^2 varies by more than this across rows is not a rotation
// pair: a wrong partner mixes in a third element, which changes the ratio by O(angle). Float16
// cos/sin move it by ~1e-3 at most (docs/analysis.md, "Diagnose").
inline constexpr double kPairSpreadThreshold = 1e-2;
// Residuals of the angle fit at or below this (flat, at small angles) are float32 rounding of
// cos/sin (~6e-8 rad); float16 cos/sin give ~2.4e-4 rad and more.
inline constexpr double kFloat16SmallAngleResidual = 1e-5;
// Angles up to this many radians are "small": a float32 product p * theta is off by at most half
// an ulp of 32, 1.9e-6 rad, there, below kFloat16SmallAngleResidual.
inline constexpr double kSmallAngleRad = 32.0;
// A pair's norm ratio varying by more than this across rows (while it is the best pairing) is
// cos/sin rounded to float16 or bfloat16: cos^2 + sin^2 is then off by ~2^-11.
inline constexpr double kFloat16NormSpread = 1e-5;

// A pair's angle fit is supported when its max residual is at most this (or 16 u of the storage):
// bfloat16 cos/sin err by ~2^-8 rad, float32 angles at p = 3e5 by ~0.02 rad. An aliased or failed
// fit leaves residuals of order 1 rad.
inline constexpr double kFitResidualLimitRad = 0.05;
// Angles that move by no more than this (or 16 u) between positions do not turn: the smallest
// turn a real RoPE makes between two distinct positions is that of pair 0 (theta_0 = 1 rad).
inline constexpr double kConstantAngleRad = 1e-3;
// The angle noise assumed when looking for aliases of a supported fit (at least this), and when
// searching the slopes of a failed one: float16 cos/sin err by ~5e-4 rad.
inline constexpr double kAliasNoiseRad = 1e-3;
inline constexpr double kSearchNoiseRad = 5e-3;

inline double wrap(double angle) { return std::remainder(angle, kTwoPi); }  // (-pi, pi]

// The part of every ln(theta_i) tolerance that covers inv_freq rounded to float32 (HF computes it
// so; 6e-8 relative).
inline constexpr double kInvFreqRounding = 1e-6;

// The element pairs (a, c) a diagnosis rotates, in dims order.
using DimPairs = std::vector<std::pair<int64_t, int64_t>>;

struct RowView {
  const DiagnoseSamples& s;
  double x(int64_t row, int64_t dim) const { return s.x[static_cast<size_t>(row * s.head_dim + dim)]; }
  double y(int64_t row, int64_t dim) const { return s.y[static_cast<size_t>(row * s.head_dim + dim)]; }
};

// diagnose.cpp
std::string number(double value, int digits = 6);

// diagnose_pairs.cpp
double norm_spread(const RowView& v, int64_t num_rows, int64_t a, int64_t c);
std::vector<int64_t> find_rotated_dims(const RowView& v, Diagnosis& d);
DimPairs choose_pairs(const RowView& v, const std::vector<int64_t>& rotated, const DiagnoseOptions& options,
                      Diagnosis& d);
void check_pairs_turn(const RowView& v, const DimPairs& chosen, const DiagnoseOptions& options, const Diagnosis& d);

// diagnose_fit.cpp
double median(std::vector<double> values);
void grouped_angles(const RowView& v, int64_t num_rows, int64_t a, int64_t c, std::vector<double>& positions,
                    std::vector<double>& angles);
double fit_pairs(const RowView& v, const DimPairs& chosen, const DiagnoseOptions& options, Diagnosis& d);
void find_position_offset(const DiagnoseOptions& options, Diagnosis& d);

// diagnose_compare.cpp
bool within_tolerance(double measured, double model, double tolerance);
void fit_frequency_law(Diagnosis& d);

}  // namespace rotary::analysis::detail
