// src/core/scaling/scheme_support.cpp: the helpers the scheme files share (scheme_support.hpp).
#include "core/scaling/scheme_support.hpp"

#include <algorithm>

#include "core/scaling/registry.hpp"
#include "rotary/table.hpp"

namespace rotary::scaling {

void check_nothing(const RopeSpec&, const SpecCheck&) {}

void read_no_keys(HfScalingReader&, RopeSpec&) {}

void check_ntk_exponent(const RopeSpec& spec, const SpecCheck& check) {
  // The NTK base change raises to d / (d - 2).
  if (spec.rotary_dim <= 2) {
    check.fail("rotary_dim must be > 2 for ", to_string(spec.scaling.type), " (its base exponent is d/(d-2)) (got ",
               spec.rotary_dim, ")");
  }
}

std::string hf_member(std::string_view key, double value) {
  return "\"" + std::string(key) + "\": " + detail::shortest(value);
}

std::string hf_member(std::string_view key, bool value) {
  return "\"" + std::string(key) + "\": " + (value ? "true" : "false");
}

std::string hf_member(std::string_view key, const std::vector<double>& values) {
  std::string list;
  for (double v : values) list += (list.empty() ? "" : ", ") + detail::shortest(v);
  return "\"" + std::string(key) + "\": [" + list + "]";
}

std::vector<std::string> hf_shared_members(const RopeSpec& spec) {
  std::vector<std::string> members;
  if (spec.scaling.factor) members.push_back(hf_member("factor", *spec.scaling.factor));
  if (scheme(spec.scaling.type).reads_original_context && spec.scaling.original_max_position_embeddings > 0) {
    members.push_back("\"original_max_position_embeddings\": " +
                      std::to_string(spec.scaling.original_max_position_embeddings));
  }
  return members;
}

std::string hf_members(const std::vector<std::string>& members) {
  std::string out;
  for (const std::string& member : members) out += (out.empty() ? "" : ", ") + member;
  return out;
}

std::string write_shared_keys(const RopeSpec& spec) { return hf_members(hf_shared_members(spec)); }

Real two_pi() {
  static const Real value = detail::ext_two_pi();
  return value;
}

Real default_theta(Real base, int64_t pair, int64_t dim) {
  return detail::ext_pow(base, -static_cast<Real>(2 * pair) / static_cast<Real>(dim));
}

void fill_diagnostics(Frequencies& out, const std::vector<Real>& theta, const std::vector<Real>& reference) {
  out.inv_freq.resize(theta.size());
  out.pairs.resize(theta.size());
  for (size_t i = 0; i < theta.size(); ++i) {
    out.inv_freq[i] = static_cast<double>(theta[i]);
    PairDiagnostics& pair = out.pairs[i];
    if (theta[i] == Real(0)) {  // proportional's unrotated pairs
      pair.wavelength_tokens = INFINITY;
      pair.factor_applied = 0.0;
      pair.regime = PairRegime::Unrotated;
      continue;
    }
    pair.wavelength_tokens = static_cast<double>(two_pi() / theta[i]);
    pair.factor_applied = static_cast<double>(reference[i] / theta[i]);
  }
}

void classify_by_factor(Frequencies& out, double full_factor) {
  for (PairDiagnostics& pair : out.pairs) {
    if (pair.regime == PairRegime::Unrotated) continue;
    if (full_factor <= 1.0) {
      pair.regime = PairRegime::Unscaled;
      pair.blend = 0.0;
      continue;
    }
    const double blend = std::clamp(std::log(pair.factor_applied) / std::log(full_factor), 0.0, 1.0);
    pair.blend = blend;
    // 1e-9: the factors come out of pow() in long double; anything this close is the endpoint.
    if (blend < 1e-9) {
      pair.regime = PairRegime::Extrapolated;
      pair.blend = 0.0;
    } else if (blend > 1.0 - 1e-9) {
      pair.regime = PairRegime::Interpolated;
      pair.blend = 1.0;
    } else {
      pair.regime = PairRegime::Blended;
    }
  }
}

int64_t seq_len_ignored(const RopeSpec&, int64_t) { return 0; }

std::vector<float> hf_default_chain(const RopeSpec& spec, float base_f32) {
  const int64_t dim = spec.rotary_dim;
  const int64_t num_pairs = dim / 2;
  const bool vision = spec.axes == PositionAxes::Vision2D;
  const int64_t per_axis = vision ? num_pairs / 2 : num_pairs;
  const int64_t exponent_dim = vision ? dim / 2 : dim;
  std::vector<float> inv(static_cast<size_t>(num_pairs));
  for (int64_t i = 0; i < num_pairs; ++i) {
    inv[i] = 1.0f / powf_rounded(base_f32, hf_exponent(i % per_axis, exponent_dim));
  }
  return inv;
}

std::string ggml_plain(const RopeSpec&, int64_t, GgmlRope&) { return ""; }

int64_t vllm_rows_times(int64_t rows, double factor) {
  const double n = std::ceil(static_cast<double>(rows) * factor);
  return n > static_cast<double>(kMaxPosition) + 1.0 ? kMaxPosition + 2 : static_cast<int64_t>(n);
}

int64_t vllm_rows_declared(const RopeSpec& spec) { return spec.max_position_embeddings; }

}  // namespace rotary::scaling
