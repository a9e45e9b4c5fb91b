// src/core/scaling/proportional.cpp: Gemma 4's proportional RoPE.
//
// Hugging Face _compute_proportional_rope_parameters: frequencies over the full head_dim, zero
// for the pairs past int(partial_rotary_factor * head_dim // 2), then inv_freq /= factor
// (default 1). default_inv_freq() gives the unscaled form (frequencies.cpp).
#include <cmath>

#include "core/scaling/registry.hpp"
#include "core/scaling/scheme_support.hpp"

namespace rotary::scaling {

namespace {

constexpr std::string_view kOptional[] = {"factor"};

void proportional_frequencies(const RopeSpec&, FrequencyWork& work) {
  const Real factor = work.out.effective_factor;
  for (Real& t : work.theta) t /= factor;
  fill_diagnostics(work.out, work.theta, work.reference);
  classify_by_factor(work.out, work.out.effective_factor);
}

std::vector<float> proportional_hf_inv_freq_f32(const RopeSpec& spec, int64_t) {
  const int64_t num_pairs = spec.rotary_dim / 2;
  const float base = f32(spec.theta_base);
  const auto rotated =
      static_cast<int64_t>(std::floor(spec.partial_rotary_factor * static_cast<double>(spec.head_dim) / 2.0));
  std::vector<float> inv(static_cast<size_t>(num_pairs));
  for (int64_t i = 0; i < num_pairs; ++i) {
    inv[i] = i < rotated ? 1.0f / powf_rounded(base, hf_exponent(i, spec.head_dim)) : 0.0f;
  }
  const float factor = f32(spec.scaling.factor.value_or(1.0));
  for (float& v : inv) v /= factor;
  return inv;
}

std::string proportional_describe(const RopeSpec& spec, const Frequencies&) {
  return "proportional: frequencies over the full head_dim " + std::to_string(spec.head_dim) +
         ", partial_rotary_factor " + fmt(spec.partial_rotary_factor) +
         " of the pairs rotate, the rest have frequency 0";
}

std::string proportional_ggml_rope(const RopeSpec&, int64_t, GgmlRope&) {
  return "rope_type proportional is not modelled";
}

}  // namespace

ScalingScheme proportional_scheme() {
  return {
      .type = ScalingType::Proportional,
      .name = "proportional",
      .alias = "",
      .required_keys = {},
      .optional_keys = kOptional,
      .requires_factor = false,
      .reads_original_context = false,
      .derives_factor_from_context = false,
      .rotates_whole_head = true,
      .supports_vision2d = false,
      .sequence_dependent = false,
      .check = check_nothing,
      .read_hf_config = read_no_keys,
      .write_hf_config = write_shared_keys,
      .frequencies = proportional_frequencies,
      .frequency_seq_len = seq_len_ignored,
      .hf_inv_freq_f32 = proportional_hf_inv_freq_f32,
      .ggml_rope = proportional_ggml_rope,
      .ggml_reads_freq_factors = false,
      .vllm_cache_rows = vllm_rows_declared,
      .describe = proportional_describe,
  };
}

}  // namespace rotary::scaling
