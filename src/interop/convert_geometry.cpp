// src/interop/convert_geometry.cpp: a checkpoint's q / k geometry, read from its config
// (checkpoint_geometry and load_checkpoint_geometry in include/rotary/convert.hpp): Hugging
// Face's config.json and Meta's params.json. The conversion itself is in convert.cpp and, for a
// model folder, convert_checkpoint.cpp.
#include "rotary/convert.hpp"

#include <fstream>
#include <iterator>
#include <optional>
#include <string>

#include "core/json.hpp"
#include "rotary/error.hpp"
#include "rotary/hf_config.hpp"

namespace rotary {
namespace {

// A positive integer field of the config, at the top level or under text_config (as
// parse_hf_config looks fields up), or nullopt when absent or null.
std::optional<int64_t> positive_field(const json::Value& root, std::string_view key, std::string_view source) {
  const json::Value* value = root.find(key);
  std::string path(key);
  if (value == nullptr || value->is_null()) {
    if (const json::Value* text = root.find("text_config"); text != nullptr && text->is_object()) {
      value = text->find(key);
      path = "text_config." + std::string(key);
    }
  }
  if (value == nullptr || value->is_null()) return std::nullopt;
  if (!value->is_number() || !value->is_integer() || value->as_int64() <= 0) {
    throw ConfigError(detail::concat(source, ":", value->location().line, ": ", path,
                                     " must be a positive integer (got ", value->describe(), ")"));
  }
  return value->as_int64();
}

// Meta's params.json: {"dim": 4096, "n_heads": 32, "n_kv_heads": 8, "head_dim": 128 (Mistral), ...}.
CheckpointGeometry meta_params_geometry(const json::Value& root, std::string_view source) {
  CheckpointGeometry geometry;
  geometry.source = std::string(source);
  geometry.config_pairing = Style::GPTJ;  // Meta's reference code rotates complex pairs (2i, 2i+1)
  const std::optional<int64_t> heads = positive_field(root, "n_heads", source);
  const std::optional<int64_t> kv_heads = positive_field(root, "n_kv_heads", source);
  const std::optional<int64_t> dim = positive_field(root, "dim", source);
  const std::optional<int64_t> head_dim = positive_field(root, "head_dim", source);
  if (!heads) throw ConfigError(detail::concat(source, ": n_heads must be a positive integer (got null)"));
  geometry.num_attention_heads = *heads;
  geometry.num_key_value_heads = kv_heads.value_or(*heads);
  if (head_dim) {
    geometry.head_dim = *head_dim;
  } else if (dim) {
    if (*dim % *heads != 0) {
      throw ConfigError(detail::concat(source, ": dim ", *dim, " must be a multiple of n_heads ", *heads,
                                       " (or give head_dim)"));
    }
    geometry.head_dim = *dim / *heads;
  } else {
    throw ConfigError(detail::concat(source, ": head_dim is missing: give head_dim, or dim and n_heads"));
  }
  if (geometry.num_attention_heads % geometry.num_key_value_heads != 0) {
    throw ConfigError(detail::concat(source, ": n_kv_heads must divide n_heads ", geometry.num_attention_heads,
                                     " (got ", geometry.num_key_value_heads, ")"));
  }
  if (geometry.head_dim % 2 != 0) {
    throw ConfigError(detail::concat(source, ": head_dim must be even to hold RoPE pairs (got ", geometry.head_dim, ")"));
  }
  geometry.rotary_dim = geometry.head_dim;
  return geometry;
}

CheckpointGeometry hf_geometry(std::string_view text, const json::Value& root, std::string_view source) {
  const HfRopeConfig config = parse_hf_config(text, source);
  const RopeSpec& spec = config.spec;
  for (const auto& [type, other] : config.layer_type_specs) {
    if (other.head_dim != spec.head_dim || other.rotary_dim != spec.rotary_dim) {
      throw ConfigError(detail::concat(source, ": layer type ", type, " rotates ", other.rotary_dim, " of ",
                                       other.head_dim, " dims per head but the main layers ", spec.rotary_dim, " of ",
                                       spec.head_dim, "; rotary converts checkpoints with one geometry for every layer"));
    }
  }
  CheckpointGeometry geometry;
  geometry.source = std::string(source);
  geometry.config_pairing = spec.style;
  geometry.num_attention_heads = spec.num_attention_heads;
  geometry.num_key_value_heads = spec.num_key_value_heads;
  if (geometry.num_attention_heads <= 0) {
    throw ConfigError(detail::concat(source, ": num_attention_heads is missing: the q and k rows are split per head"));
  }
  const std::optional<int64_t> kv_lora_rank = positive_field(root, "kv_lora_rank", source);
  const std::optional<int64_t> rope_dim = positive_field(root, "qk_rope_head_dim", source);
  if (kv_lora_rank || rope_dim) {
    // DeepSeek V2 / V3 multi-head latent attention (transformers' modeling_deepseek_v3.py):
    // q heads are [qk_nope_head_dim | qk_rope_head_dim] rows; kv_a_proj_with_mqa is
    // [kv_lora_rank latent rows | qk_rope_head_dim rows of the one shared rotary key].
    const std::optional<int64_t> nope_dim = positive_field(root, "qk_nope_head_dim", source);
    if (!kv_lora_rank || !rope_dim || !nope_dim) {
      throw ConfigError(detail::concat(
          source, ": a DeepSeek multi-head latent attention config needs kv_lora_rank, qk_rope_head_dim and "
                  "qk_nope_head_dim (got ",
          kv_lora_rank ? "kv_lora_rank" : "no kv_lora_rank", ", ", rope_dim ? "qk_rope_head_dim" : "no qk_rope_head_dim",
          ", ", nope_dim ? "qk_nope_head_dim" : "no qk_nope_head_dim", ")"));
    }
    if (*rope_dim % 2 != 0) {
      throw ConfigError(detail::concat(source, ": qk_rope_head_dim must be even to hold RoPE pairs (got ", *rope_dim, ")"));
    }
    geometry.head_dim = *nope_dim + *rope_dim;
    geometry.rotary_dim = *rope_dim;
    geometry.rotary_offset = *nope_dim;
    geometry.kv_lora_rank = *kv_lora_rank;
    return geometry;
  }
  geometry.head_dim = spec.head_dim;
  geometry.rotary_dim = spec.rotary_dim;
  if (geometry.rotary_dim < 2 || geometry.rotary_dim % 2 != 0 || geometry.rotary_dim > geometry.head_dim) {
    throw ConfigError(detail::concat(source, ": the rotary dims must be an even number in [2, head_dim ",
                                     geometry.head_dim, "] (got ", geometry.rotary_dim, ")"));
  }
  return geometry;
}

}  // namespace

CheckpointGeometry checkpoint_geometry(std::string_view config_json, std::string_view source) {
  const json::Value root = json::parse(config_json, source);
  if (!root.is_object()) {
    throw ConfigError(detail::concat(source, ": a config must be a JSON object (got ", root.describe(), ")"));
  }
  if (root.find("n_heads") != nullptr && root.find("num_attention_heads") == nullptr) {
    return meta_params_geometry(root, source);
  }
  return hf_geometry(config_json, root, source);
}

CheckpointGeometry load_checkpoint_geometry(const std::string& path) {
  // parse_file names an unreadable path and its reason, and refuses a file far larger than any
  // config (a weights file given by mistake) before reading it whole.
  json::parse_file(path);
  std::ifstream in(path, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return checkpoint_geometry(text, path);
}

}  // namespace rotary
