// src/core/scaling/registry.hpp: the table of RoPE scaling schemes (internal, not installed).
//
// Each scheme lives in one file of src/core/scaling/ (default.cpp, linear.cpp, ...) and is one
// row of kSchemes in registry.cpp. The row names the scheme, lists the Hugging Face rope_scaling
// keys it reads, states the properties validate() and RopeSpec ask about, and points at the
// scheme's free functions. spec.cpp, frequencies.cpp, table.cpp, hf_config.cpp,
// engines/ and the CLI's explain call through the row instead of switching on
// ScalingType, so a new scheme is one new file plus one row (docs/design.md, "Adding a scaling scheme").
//
// This header is safe for every layer (rotary_cli includes it for explain): the types that
// depend on rotary_core's extended precision are only forward-declared here.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "rotary/frequencies.hpp"
#include "rotary/spec.hpp"

namespace rotary::scaling {

class SpecCheck;          // scheme_support.hpp: validate()'s failure messages
struct FrequencyWork;     // scheme_support.hpp: one frequencies() evaluation in extended precision
struct HfScalingReader;   // hf_reader.hpp: typed reads of one config.json rope_scaling dict

// llama.cpp's parameters for a scheme, as llama_context and the GGUF converter set them (ggml-cpu
// ops.cpp rope_yarn; table.cpp's Precision::Ggml). Every value is the float32 llama.cpp holds.
struct GgmlRope {
  float freq_scale = 1.0f;   // 1 / rope scaling factor (linear, YaRN)
  float ext_factor = 0.0f;   // 1 for YaRN (llama_context: yarn_ext_factor), else 0
  float attn_factor = 1.0f;  // cparams.yarn_attn_factor, before rope_yarn's own mscale
  float corr_dims[2] = {0.0f, 0.0f};
  std::vector<float> freq_factors;  // rope_freqs / rope_factors_{short,long}; empty: none
};

struct ScalingScheme {
  ScalingType type;
  std::string_view name;   // Hugging Face's rope_type; to_string(type)
  std::string_view alias;  // another name parse_scaling_type() accepts ("su"); empty if none

  // Hugging Face rope_scaling keys (HF _validate_*_rope_parameters: required, optional).
  std::span<const std::string_view> required_keys;
  std::span<const std::string_view> optional_keys;

  // Properties validate() and RopeSpec read.
  bool requires_factor;              // validate(): factor must be given
  bool reads_original_context;       // validate(): original_context() must be > 0
  bool derives_factor_from_context;  // resolved_factor(): no factor -> Lmax / L0 (HF yarn, longrope)
  bool rotates_whole_head;           // rotary_dim is head_dim; the unscaled frequencies run over it and
                                     // partial_rotary_factor zeroes the pairs past its share (proportional)
  bool supports_vision2d;            // 2-D vision RoPE accepts the scheme
  bool sequence_dependent;           // frequencies depend on seq_len (frequencies.hpp)

  // validate()'s checks of the fields only this scheme reads (after the shared ones).
  void (*check)(const RopeSpec& spec, const SpecCheck& check);
  // Reads the scheme's keys from a config.json rope_scaling dict into spec.scaling (type set
  // already; factor and original_max_position_embeddings read by the shared code first).
  void (*read_hf_config)(HfScalingReader& reader, RopeSpec& spec);
  // The inverse: the scheme's keys as config.json members ("\"factor\": 8, ..."; rope_type
  // not included), which read_hf_config reads back into the same spec.scaling.
  std::string (*write_hf_config)(const RopeSpec& spec);
  // The float64 (binary128-evaluated) inverse frequencies, diagnostics and attention scaling.
  void (*frequencies)(const RopeSpec& spec, FrequencyWork& work);
  // frequency_seq_len() for this scheme (frequencies.hpp says the rule).
  int64_t (*frequency_seq_len)(const RopeSpec& spec, int64_t seq_len);
  // Hugging Face's float32 inv_freq chain (detail::hf_inv_freq_f32).
  std::vector<float> (*hf_inv_freq_f32)(const RopeSpec& spec, int64_t seq_len);
  // llama.cpp's form at seq_len: fills `rope` and returns "", or returns why llama.cpp has none
  // (CosSinTable then refuses Precision::Ggml, naming it).
  std::string (*ggml_rope)(const RopeSpec& spec, int64_t seq_len, GgmlRope& rope);
  bool ggml_reads_freq_factors;  // TableOptions::ggml_freq_factors applies (llama3, longrope)
  // vLLM's cos_sin_cache row count, before the M-RoPE rule (engine_export.hpp, vllm_cache_rows).
  int64_t (*vllm_cache_rows)(const RopeSpec& spec);
  // One line for `rotary explain`: the scheme and its parameters as this spec sets them.
  std::string (*describe)(const RopeSpec& spec, const Frequencies& freqs);
};

// Every scheme, in ScalingType order.
std::span<const ScalingScheme> schemes();
// The row of a type. Every ScalingType has one (tests/core/scaling_registry_test.cpp).
const ScalingScheme& scheme(ScalingType type);
// The row whose name or alias is `name`; nullptr for an unknown name.
const ScalingScheme* find_scheme(std::string_view name);

}  // namespace rotary::scaling
