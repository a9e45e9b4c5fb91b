// include/rotary/hf_config.hpp: RopeSpec from a Hugging Face config.json.
//
// Reads both forms Hugging Face has used:
//   new (transformers v5):  "rope_parameters": {"rope_type": ..., "rope_theta": ..., ...}
//   old:                    "rope_theta": ..., "rope_scaling": {"type" | "rope_type": ..., ...}
// per-layer-type parameters ("rope_parameters": {"full_attention": {...}, "sliding_attention":
// {...}} with "layer_types"), and the geometry fields under every name models use:
//   head_dim | qk_rope_head_dim (DeepSeek) | hidden_size / num_attention_heads,
//   partial_rotary_factor | rotary_pct (GPT-NeoX) | rotary_dim (GPT-J),
//   rope_theta | rotary_emb_base (GPT-NeoX), n_embd / n_head / n_positions (GPT-J),
//   num_key_value_heads, max_position_embeddings, original_max_position_embeddings (Phi-3),
//   rope_interleave (DeepSeek), mrope_section / mrope_interleaved (Qwen-VL), text_config.
// The semantics follow transformers' modeling_rope_utils.py (standardize_rope_params,
// validate_rope, _compute_*_parameters); docs/formulas.md says where rotary is stricter.
//
// Errors: every invalid value is a rotary::ConfigError naming the source, the field (as the
// file spells its path), the value and what is accepted, e.g.
//   "config.json:7: rope_scaling.factor must be a number >= 1 (got 0.5)".
// What Hugging Face only warns about is returned in HfRopeConfig::warnings (the CLI prints
// each to stderr as "rotary: warning: ...").
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rotary/spec.hpp"

namespace rotary {

struct HfRopeConfig {
  // The spec of the full-attention layers (or of every layer when the config has one set of
  // rope parameters).
  RopeSpec spec;
  // Per-layer-type specs, in the order the config lists them; empty unless the config gives
  // rope parameters per layer type.
  std::vector<std::pair<std::string, RopeSpec>> layer_type_specs;
  // The config's layer_types list (one entry per layer), if any.
  std::vector<std::string> layer_types;
  // Messages for what Hugging Face accepts with a warning, and for values rotary defaulted.
  std::vector<std::string> warnings;
  // What Hugging Face warns about in a config that is correct as published (Phi-3's factor
  // derived from its top-level original_max_position_embeddings; Qwen's YaRN recipe, whose
  // factor reaches past max_position_embeddings): said, but not as a warning.
  std::vector<std::string> notes;
  std::string model_type;  // the config's model_type, if any
  // The config's sliding_window (text_config's for multimodal configs) when it is a positive
  // integer and use_sliding_window is not false: the window of Mistral's layers, of Gemma 2 / 3's
  // local (sliding_attention) layers. Informative: rotary's attention takes it as
  // AttentionOptions::window (the `rotary attention` command's default --window).
  std::optional<int64_t> sliding_window;
};

// `source_name` starts every message ("config.json", a path, "preset qwen2.5-7b").
HfRopeConfig parse_hf_config(std::string_view json_text, std::string_view source_name = "config.json");
// Reads the file; an unreadable file is a ConfigError naming the path and the reason.
HfRopeConfig load_hf_config(const std::string& path);

}  // namespace rotary
