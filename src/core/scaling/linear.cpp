// src/core/scaling/linear.cpp: position interpolation.
//
// Chen et al. 2023 (arXiv:2306.15595); Hugging Face _compute_linear_scaling_rope_parameters:
// theta_i / s, the same as feeding positions p / s.
#include "core/scaling/registry.hpp"
#include "core/scaling/scheme_support.hpp"

namespace rotary::scaling {

namespace {

constexpr std::string_view kRequired[] = {"factor"};

void linear_frequencies(const RopeSpec& spec, FrequencyWork& work) {
  const Real factor = *spec.scaling.factor;
  for (Real& t : work.theta) t /= factor;
  fill_diagnostics(work.out, work.theta, work.reference);
  classify_by_factor(work.out, *spec.scaling.factor);
}

std::vector<float> linear_hf_inv_freq_f32(const RopeSpec& spec, int64_t) {
  // Default chain, then inv_freq /= factor.
  std::vector<float> inv = hf_default_chain(spec, f32(spec.theta_base));
  for (float& v : inv) v /= f32(*spec.scaling.factor);
  return inv;
}

int64_t linear_vllm_cache_rows(const RopeSpec& spec) {
  // vLLM LinearScalingRotaryEmbedding: max_position_embeddings x factor rows.
  const int64_t declared = spec.max_position_embeddings;
  return declared > 0 ? vllm_rows_times(declared, spec.resolved_factor()) : 0;
}

std::string linear_describe(const RopeSpec& spec, const Frequencies&) {
  return "linear: position interpolation, every frequency divided by " + fmt(*spec.scaling.factor);
}

std::string linear_ggml_rope(const RopeSpec& spec, int64_t, GgmlRope& rope) {
  rope.freq_scale = 1.0f / static_cast<float>(*spec.scaling.factor);
  return "";
}

}  // namespace

ScalingScheme linear_scheme() {
  return {
      .type = ScalingType::Linear,
      .name = "linear",
      .alias = "",
      .required_keys = kRequired,
      .optional_keys = {},
      .requires_factor = true,
      .reads_original_context = false,
      .derives_factor_from_context = false,
      .rotates_whole_head = false,
      .supports_vision2d = true,
      .sequence_dependent = false,
      .check = check_nothing,
      .read_hf_config = read_no_keys,
      .write_hf_config = write_shared_keys,
      .frequencies = linear_frequencies,
      .frequency_seq_len = seq_len_ignored,
      .hf_inv_freq_f32 = linear_hf_inv_freq_f32,
      .ggml_rope = linear_ggml_rope,
      .ggml_reads_freq_factors = false,
      .vllm_cache_rows = linear_vllm_cache_rows,
      .describe = linear_describe,
  };
}

}  // namespace rotary::scaling
