// src/core/scaling/ntk_alpha.cpp: static NTK-aware scaling by alpha (not an HF rope_type).
//
// bloc97 2023; vLLM DynamicNTKAlphaRotaryEmbedding (Hunyuan): base' = base * alpha ^ (d / (d - 2)).
// The last pair's frequency is divided by alpha. A config's {"rope_type": "dynamic", "alpha": a}
// reads as this scheme, as vLLM reads it (hf_config.cpp).
#include "core/scaling/hf_reader.hpp"
#include "core/scaling/registry.hpp"
#include "core/scaling/scheme_support.hpp"

namespace rotary::scaling {

namespace {

constexpr std::string_view kRequired[] = {"alpha"};
constexpr std::string_view kOptional[] = {"factor"};

void ntk_alpha_check(const RopeSpec& spec, const SpecCheck& check) {
  check_ntk_exponent(spec, check);
  check.finite_positive("alpha", spec.scaling.ntk_alpha);
}

void ntk_alpha_read_hf_config(HfScalingReader& reader, RopeSpec& spec) {
  const Field alpha = reader.member("alpha");
  if (!alpha.present_non_null()) {
    reader.config.fail_at(alpha.value ? alpha.value : reader.params.value, reader.params.path,
                          ".alpha must be a finite number > 0 (got ",
                          alpha.value ? alpha.value->describe() : std::string("none"), ")");
  }
  spec.scaling.ntk_alpha = reader.config.number_at_least(alpha, 0.0, false);
}

Real new_base(const RopeSpec& spec) {
  const int64_t dim = spec.rotary_dim;
  return static_cast<Real>(spec.theta_base) *
         detail::ext_pow(static_cast<Real>(spec.scaling.ntk_alpha), static_cast<Real>(dim) / static_cast<Real>(dim - 2));
}

void ntk_alpha_frequencies(const RopeSpec& spec, FrequencyWork& work) {
  const Real base = new_base(spec);
  for (int64_t i = 0; i < spec.rotary_dim / 2; ++i) work.theta[i] = default_theta(base, i, spec.rotary_dim);
  work.out.effective_theta_base = static_cast<double>(base);
  work.out.effective_factor = spec.scaling.ntk_alpha;
  fill_diagnostics(work.out, work.theta, work.reference);
  classify_by_factor(work.out, spec.scaling.ntk_alpha);
}

std::vector<float> ntk_alpha_hf_inv_freq_f32(const RopeSpec& spec, int64_t) {
  // Not an HF rope_type: vLLM's form, the new base in float64, then the default chain.
  const double dim = static_cast<double>(spec.rotary_dim);
  return hf_default_chain(spec, f32(spec.theta_base * std::pow(spec.scaling.ntk_alpha, dim / (dim - 2))));
}

std::string ntk_alpha_describe(const RopeSpec& spec, const Frequencies& freqs) {
  return "ntk_alpha: static NTK-aware base change, alpha " + fmt(spec.scaling.ntk_alpha) + ", base " +
         fmt(spec.theta_base) + " -> " + fmt(freqs.effective_theta_base);
}

std::string ntk_alpha_write_hf_config(const RopeSpec& spec) {
  std::vector<std::string> members = hf_shared_members(spec);
  members.push_back(hf_member("alpha", spec.scaling.ntk_alpha));
  return hf_members(members);
}

std::string ntk_alpha_ggml_rope(const RopeSpec&, int64_t, GgmlRope&) {
  return "rope_type ntk_alpha has no llama.cpp form here";
}

}  // namespace

ScalingScheme ntk_alpha_scheme() {
  return {
      .type = ScalingType::NtkAlpha,
      .name = "ntk_alpha",
      .alias = "",
      .required_keys = kRequired,
      .optional_keys = kOptional,
      .requires_factor = false,
      .reads_original_context = false,
      .derives_factor_from_context = false,
      .rotates_whole_head = false,
      .supports_vision2d = false,
      .sequence_dependent = false,
      .check = ntk_alpha_check,
      .read_hf_config = ntk_alpha_read_hf_config,
      .write_hf_config = ntk_alpha_write_hf_config,
      .frequencies = ntk_alpha_frequencies,
      .frequency_seq_len = seq_len_ignored,
      .hf_inv_freq_f32 = ntk_alpha_hf_inv_freq_f32,
      .ggml_rope = ntk_alpha_ggml_rope,
      .ggml_reads_freq_factors = false,
      .vllm_cache_rows = vllm_rows_declared,
      .describe = ntk_alpha_describe,
  };
}

}  // namespace rotary::scaling
