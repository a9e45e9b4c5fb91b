// src/analysis/diagnose_compare.cpp: a diagnosis's frequencies against the known ones: the
// log-linear law (theta base and linear factor) fitted to the measured inv_freq, the presets
// whose frequencies match within the tolerances, and compare_to_spec's mismatch messages (what
// the implementation does, what the model does) for one spec (include/rotary/diagnose.hpp,
// docs/analysis.md, "Diagnose").
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
#include "rotary/frequencies.hpp"
#include "rotary/presets.hpp"

namespace rotary::analysis {

namespace detail {

// |ln(measured / model)| within a pair's tolerance (Diagnosis::inv_freq_tolerance). Its noise part,
// 8 noise / (measured span), is an uncertainty on theta over the measured theta; it is taken over
// the larger of the two thetas, so that a pair measured near 0 (it barely turned) does not match a
// model pair that turns by far more than the noise. A zero, infinite or NaN value never matches.
bool within_tolerance(double measured, double model, double tolerance) {
  if (!(measured > 0.0) || !(model > 0.0) || !std::isfinite(tolerance)) return false;
  const double noise_part = (tolerance - kInvFreqRounding) * std::min(1.0, measured / model);
  return std::abs(std::log(measured / model)) <= kInvFreqRounding + noise_part;
}

namespace {

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

// 9. Log-linear fit of ln theta_i on i, weighted by 1 / tolerance^2, and the presets: only when
// every pair is identified (a law fitted to some pairs can take llama3's slow pairs for linear).
void fit_frequency_law(Diagnosis& d) {
  const int64_t num_pairs = static_cast<int64_t>(d.pairs.size());
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

}  // namespace detail

// ---- compare_to_spec ---------------------------------------------------------------------------

namespace {

using detail::median;
using detail::number;
using detail::within_tolerance;

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

// Frequencies (only when the pair counts agree). When some pairs are not identified, only the
// identified ones can contradict the model: a failed fit is not a mismatch. model_inv_freq holds
// the frequencies of the model's rotated pairs at seq_len (without Proportional's zeros).
void compare_frequencies(const Diagnosis& diag, const RopeSpec& spec, const Frequencies& model_freqs,
                         const std::vector<double>& model_inv_freq, int64_t model_pairs, int64_t seq_len,
                         std::vector<Mismatch>& out) {
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

  // Frequencies.
  compare_frequencies(diag, spec, model_freqs, model_inv_freq, model_pairs, seq_len, out);

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