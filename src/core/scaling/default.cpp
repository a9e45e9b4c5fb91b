// src/core/scaling/default.cpp: no scaling, RoFormer's frequencies.
//
// RoFormer (Su et al. 2021, arXiv:2104.09864): theta_i = base^(-2i/d) (1-based there:
// -2(i-1)/d); Hugging Face _compute_default_rope_parameters.
#include "core/scaling/registry.hpp"
#include "core/scaling/scheme_support.hpp"

namespace rotary::scaling {

namespace {

void default_frequencies(const RopeSpec&, FrequencyWork& work) {
  fill_diagnostics(work.out, work.theta, work.reference);
}

std::vector<float> default_hf_inv_freq_f32(const RopeSpec& spec, int64_t) {
  return hf_default_chain(spec, f32(spec.theta_base));
}

std::string default_describe(const RopeSpec&, const Frequencies&) {
  return "default (RoFormer: theta_i = base^(-2i/d))";
}

}  // namespace

ScalingScheme default_scheme() {
  return {
      .type = ScalingType::Default,
      .name = "default",
      .alias = "",
      .required_keys = {},
      .optional_keys = {},
      .requires_factor = false,
      .reads_original_context = false,
      .derives_factor_from_context = false,
      .rotates_whole_head = false,
      .supports_vision2d = true,
      .sequence_dependent = false,
      .check = check_nothing,
      .read_hf_config = read_no_keys,
      .write_hf_config = write_shared_keys,
      .frequencies = default_frequencies,
      .frequency_seq_len = seq_len_ignored,
      .hf_inv_freq_f32 = default_hf_inv_freq_f32,
      .ggml_rope = ggml_plain,
      .ggml_reads_freq_factors = false,
      .vllm_cache_rows = vllm_rows_declared,
      .describe = default_describe,
  };
}

}  // namespace rotary::scaling
