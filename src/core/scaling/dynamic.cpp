// src/core/scaling/dynamic.cpp: dynamic NTK scaling (Hugging Face rope_type "dynamic").
//
// Hugging Face _compute_dynamic_ntk_parameters and dynamic_rope_update: the base grows with the
// sequence length once it passes max_position_embeddings (NTK-aware scaling, bloc97 2023).
#include <algorithm>

#include "core/scaling/hf_reader.hpp"
#include "core/scaling/registry.hpp"
#include "core/scaling/scheme_support.hpp"

namespace rotary::scaling {

namespace {

// "alpha" makes the dict NTK-alpha scaling instead (vLLM's reading; hf_config.cpp).
constexpr std::string_view kRequired[] = {"factor"};
constexpr std::string_view kOptional[] = {"alpha"};

void dynamic_check(const RopeSpec& spec, const SpecCheck& check) {
  if (spec.max_position_embeddings <= 0) {
    check.fail("max_position_embeddings must be > 0 for dynamic scaling (got ", spec.max_position_embeddings, ")");
  }
  check_ntk_exponent(spec, check);
}

void dynamic_read_hf_config(HfScalingReader& reader, RopeSpec&) {
  if (reader.max_position_embeddings <= 0) {
    reader.config.fail_at(reader.params.value,
                          "max_position_embeddings is missing: dynamic NTK scaling grows the base past it");
  }
}

void dynamic_frequencies(const RopeSpec& spec, FrequencyWork& work) {
  //   L = max(seq_len, Lmax);  base' = base * ((s * L / Lmax) - (s - 1)) ^ (d / (d - 2)).
  // At L = Lmax the bracket is exactly 1, so short sequences keep the original frequencies
  // (HF dynamic_rope_update restores them when a sequence shrinks below Lmax). Evaluated as
  // 1 + s (L - Lmax) / Lmax, the same value without the cancellation of s L / Lmax - (s - 1):
  // with s = 2.8e44 that difference was 0 even in binary128, and every inv_freq inf (found by
  // the one-hour hf_config fuzz run; HF's double arithmetic does the same).
  const int64_t dim = spec.rotary_dim;
  const Real lmax = static_cast<Real>(spec.max_position_embeddings);
  const Real length = std::max(static_cast<Real>(work.seq_len), lmax);
  const Real factor = *spec.scaling.factor;
  const Real growth = 1 + factor * (length - lmax) / lmax;
  const Real new_base =
      static_cast<Real>(spec.theta_base) * detail::ext_pow(growth, static_cast<Real>(dim) / static_cast<Real>(dim - 2));
  for (int64_t i = 0; i < dim / 2; ++i) work.theta[i] = default_theta(new_base, i, dim);
  work.out.effective_theta_base = static_cast<double>(new_base);
  work.out.effective_factor = static_cast<double>(growth);
  fill_diagnostics(work.out, work.theta, work.reference);
  classify_by_factor(work.out, work.out.effective_factor);
}

int64_t dynamic_frequency_seq_len(const RopeSpec& spec, int64_t seq_len) {
  // L = max(seq_len, Lmax): the bracket is 1 up to Lmax (see above).
  return seq_len <= spec.max_position_embeddings ? 0 : seq_len;
}

std::vector<float> dynamic_hf_inv_freq_f32(const RopeSpec& spec, int64_t seq_len) {
  const int64_t dim = spec.rotary_dim;
  const float base = f32(spec.theta_base);
  const int64_t lmax = spec.max_position_embeddings;
  if (seq_len <= lmax) {
    // Construction (or reset): base * 1 ** (d/(d-2)) in Python float64 = base.
    return hf_default_chain(spec, base);
  }
  // Growth path: seq_len is a 0-dim int64 tensor, so the new base is float32 arithmetic:
  // base * ((factor * seq_len / max) - (factor - 1)) ** (dim / (dim - 2)).
  const float factor = f32(*spec.scaling.factor);
  float growth = factor * static_cast<float>(seq_len);
  growth = growth / static_cast<float>(lmax);
  growth = growth - f32(*spec.scaling.factor - 1.0);
  // The exponent stays a Python float: torch raises the float32 value to the double exponent
  // and rounds (measured on the golden dynamic case: a float32 exponent is 2 ulps off).
  const float new_base =
      base * f32(std::pow(static_cast<double>(growth), static_cast<double>(dim) / static_cast<double>(dim - 2)));
  return hf_default_chain(spec, new_base);
}

int64_t dynamic_vllm_cache_rows(const RopeSpec& spec) {
  // vLLM DynamicNTKScalingRotaryEmbedding: max_position_embeddings x factor rows.
  const int64_t declared = spec.max_position_embeddings;
  return declared > 0 ? vllm_rows_times(declared, spec.resolved_factor()) : 0;
}

std::string dynamic_describe(const RopeSpec& spec, const Frequencies& freqs) {
  return "dynamic NTK: factor " + fmt(*spec.scaling.factor) + "; the base grows once sequences pass " +
         std::to_string(spec.max_position_embeddings) + " tokens (here " + fmt(freqs.effective_theta_base) +
         " at seq_len " + std::to_string(freqs.seq_len) + ")";
}

std::string dynamic_ggml_rope(const RopeSpec&, int64_t, GgmlRope&) { return "llama.cpp has no dynamic NTK scaling"; }

}  // namespace

ScalingScheme dynamic_scheme() {
  return {
      .type = ScalingType::Dynamic,
      .name = "dynamic",
      .alias = "",
      .required_keys = kRequired,
      .optional_keys = kOptional,
      .requires_factor = true,
      .reads_original_context = false,
      .derives_factor_from_context = false,
      .rotates_whole_head = false,
      .supports_vision2d = false,
      .sequence_dependent = true,
      .check = dynamic_check,
      .read_hf_config = dynamic_read_hf_config,
      .write_hf_config = write_shared_keys,
      .frequencies = dynamic_frequencies,
      .frequency_seq_len = dynamic_frequency_seq_len,
      .hf_inv_freq_f32 = dynamic_hf_inv_freq_f32,
      .ggml_rope = dynamic_ggml_rope,
      .ggml_reads_freq_factors = false,
      .vllm_cache_rows = dynamic_vllm_cache_rows,
      .describe = dynamic_describe,
  };
}

}  // namespace rotary::scaling
