// src/core/hf_config.cpp: RopeSpec from a Hugging Face config.json.
//
// Mirrors transformers' modeling_rope_utils.py at v5 (RotaryEmbeddingConfigMixin:
// convert_rope_params_to_dict, standardize_rope_params, validate_rope, _check_received_keys,
// _validate_*_rope_parameters) and the config classes that rename fields (GPTJConfig,
// GPTNeoXConfig, DeepseekV3Config, Qwen2VLConfig, Gemma3Config, Phi3Config).
// Where transformers only logs a warning for an invalid value (factor < 1, beta_fast <
// beta_slow, low_freq_factor >= high_freq_factor, wrong LongRoPE list length), rotary raises
// ConfigError: those configs compute something, but not what their authors meant.
#include "rotary/hf_config.hpp"

#include <algorithm>
#include <cmath>
#include <set>
#include <string>

#include "rotary/error.hpp"
#include "core/json.hpp"
#include "core/scaling/hf_reader.hpp"
#include "core/scaling/registry.hpp"

namespace rotary {

namespace {

// transformers' config-class defaults for the RoPE keys a published config.json may omit
// (the class fills them in silently). Families not listed here get rope_theta 10000 with a
// warning, since their class default is not known to rotary.
struct FamilyDefaults {
  std::string_view model_type;
  double rope_theta;
  double local_rope_theta;          // sliding-window layers (0 = same as rope_theta)
  int64_t max_position_embeddings;  // 0 = no default
};
constexpr FamilyDefaults kFamilyDefaults[] = {
    // LlamaConfig, MistralConfig, Qwen2Config, GemmaConfig, Gemma2Config, PhiConfig, Phi3Config,
    // GPTJConfig, GPTNeoXConfig, DeepseekV2/V3Config, OlmoConfig: rope_theta = 10000.0.
    {"llama", 1e4, 0, 0},       {"mistral", 1e4, 0, 0},     {"mixtral", 1e4, 0, 0},
    {"qwen2", 1e4, 0, 0},       {"gemma", 1e4, 0, 0},       {"gemma2", 1e4, 0, 0},
    {"phi", 1e4, 0, 0},         {"phi3", 1e4, 0, 0},        {"gptj", 1e4, 0, 0},
    {"gpt_neox", 1e4, 0, 0},    {"deepseek_v2", 1e4, 0, 0}, {"deepseek_v3", 1e4, 0, 0},
    {"olmo", 1e4, 0, 0},        {"olmo2", 1e4, 0, 0},
    // Gemma3TextConfig: rope_theta 1e6 (global layers), rope_local_base_freq 1e4 (sliding
    // layers), max_position_embeddings 131072. Google's own Gemma 3 files state none of them.
    {"gemma3", 1e6, 1e4, 131072},
    {"gemma3_text", 1e6, 1e4, 131072},
};

const FamilyDefaults* family_defaults(std::string_view model_type) {
  for (const FamilyDefaults& family : kFamilyDefaults) {
    if (family.model_type == model_type) return &family;
  }
  return nullptr;
}

using scaling::Field;
using scaling::HfFieldReader;

// The messages and typed reads (fail_at, warn, note, member, number_at_least, ...) are
// HfFieldReader's (src/core/scaling/hf_reader.hpp), shared with the scheme files.
class ConfigReader : public HfFieldReader {
 public:
  ConfigReader(const json::Value& root, std::string_view source, std::vector<std::string> warnings)
      : HfFieldReader(source, std::move(warnings)), root_(root) {}

  HfRopeConfig read();

 private:
  // ---- lookups ------------------------------------------------------------------------------
  // A top-level field; multimodal configs (Qwen2.5-VL, Qwen3-VL, Gemma 3) keep the language
  // model's fields under text_config, so that is searched when the top level lacks the key.
  Field top(std::string_view key) const {
    if (const json::Value* v = root_.find(key); v != nullptr && !v->is_null()) return {v, std::string(key)};
    if (text_config_ != nullptr) {
      if (const json::Value* v = text_config_->find(key); v != nullptr && !v->is_null()) {
        return {v, "text_config." + std::string(key)};
      }
    }
    return {};
  }

  // ---- the parts of the config --------------------------------------------------------------
  void read_geometry();
  RopeSpec read_rope_parameters(const Field& params, bool per_layer_type, std::string_view layer_type = {});
  void read_scaling(const Field& params, const scaling::ScalingScheme& named, bool per_layer_type, RopeSpec& spec);
  void read_mrope(const Field& params, RopeSpec& spec);
  void check_unknown_keys(const Field& params, const scaling::ScalingScheme& scheme);

  const json::Value& root_;
  const json::Value* text_config_ = nullptr;

  // Geometry shared by every layer type.
  std::string model_type_;
  int64_t head_dim_ = 0;
  int64_t hidden_size_ = 0;
  int64_t num_attention_heads_ = 0;
  int64_t num_key_value_heads_ = 0;
  int64_t max_position_embeddings_ = 0;
  Field top_original_max_;  // Phi-3 keeps original_max_position_embeddings at top level
  int64_t global_head_dim_ = 0;  // Gemma 4: head size of the full-attention layers
  std::optional<int64_t> sliding_window_;
  Style style_ = Style::NeoX;
};

void ConfigReader::read_geometry() {
  if (const json::Value* text = root_.find("text_config"); text != nullptr && !text->is_null()) {
    if (!text->is_object()) fail_at(text, "text_config must be an object (got ", text->describe(), ")");
    text_config_ = text;
  }
  if (Field f = top("model_type")) model_type_ = string(f);

  // GPTJConfig.attribute_map: n_embd -> hidden_size, n_head -> num_attention_heads,
  // n_positions -> max_position_embeddings.
  auto first = [&](std::initializer_list<std::string_view> keys) -> Field {
    for (std::string_view key : keys) {
      if (Field f = top(key)) return f;
    }
    return {};
  };
  if (Field f = first({"hidden_size", "n_embd"})) hidden_size_ = positive_integer(f);
  if (Field f = first({"num_attention_heads", "n_head"})) num_attention_heads_ = positive_integer(f);
  if (Field f = top("num_key_value_heads")) num_key_value_heads_ = positive_integer(f);
  if (Field f = first({"max_position_embeddings", "n_positions"})) {
    max_position_embeddings_ = positive_integer(f);
  } else if (const FamilyDefaults* family = family_defaults(model_type_); family != nullptr) {
    max_position_embeddings_ = family->max_position_embeddings;
  }
  top_original_max_ = top("original_max_position_embeddings");
  if (Field f = top("global_head_dim")) global_head_dim_ = positive_integer(f);
  // sliding_window (Mistral; Gemma 2 / 3's local layers; Qwen2 when use_sliding_window is true).
  // Informative for rotary (attention's window), so a value that is not a positive integer is
  // left out with a warning rather than failing a config that only RoPE is read from.
  if (Field f = top("sliding_window")) {
    const Field use = top("use_sliding_window");
    const bool used = !use || !use.value->is_bool() || use.value->as_bool();
    if (used && f.value->is_integer() && f.value->as_int64() > 0) {
      sliding_window_ = f.value->as_int64();
    } else if (used) {
      warn(f.path, " is not a positive integer (got ", f.value->describe(), "); no sliding window is read from it");
    }
  }

  if (num_key_value_heads_ > 0 && num_attention_heads_ > 0 && num_attention_heads_ % num_key_value_heads_ != 0) {
    Field f = top("num_key_value_heads");
    fail_at(f.value, f.path, " must divide num_attention_heads ", num_attention_heads_, " (got ",
            num_key_value_heads_, ")");
  }

  // head_dim: DeepSeek's rotary slice (DeepseekV3Config sets head_dim = qk_rope_head_dim), else
  // an explicit head_dim (Llama 3, Gemma, Qwen3, Mistral), else hidden_size // num_attention_heads.
  if (Field f = top("qk_rope_head_dim")) {
    head_dim_ = positive_integer(f);
  } else if (Field g = top("head_dim")) {
    head_dim_ = positive_integer(g);
  } else if (hidden_size_ > 0 && num_attention_heads_ > 0) {
    head_dim_ = hidden_size_ / num_attention_heads_;
    if (hidden_size_ % num_attention_heads_ != 0) {
      warn("hidden_size ", hidden_size_, " is not a multiple of num_attention_heads ", num_attention_heads_,
           "; head_dim is hidden_size // num_attention_heads = ", head_dim_, ", as transformers computes it");
    }
    if (head_dim_ == 0) {
      fail_at(top("hidden_size").value, "head_dim = hidden_size // num_attention_heads must be > 0 (got ",
              hidden_size_, " // ", num_attention_heads_, " = 0)");
    }
  } else {
    fail_at(nullptr, "head_dim is missing: give head_dim, or hidden_size and num_attention_heads (got ",
            hidden_size_ > 0 ? "hidden_size only" : num_attention_heads_ > 0 ? "num_attention_heads only" : "neither",
            ")");
  }

  // Pairing convention. DeepSeek V2/V3 rotate interleaved pairs (HF: rope_interleave, default
  // true for deepseek_v3); GPT-J uses interleaved pairs (its rotate_every_two); Cohere, Cohere 2
  // and BLT too (modeling_cohere.py: repeat_interleave(freqs, 2) and a rotate_half over
  // x[..., ::2] / x[..., 1::2]).
  static constexpr std::string_view kInterleaved[] = {
      "gptj", "deepseek_v2", "deepseek_v3", "cohere", "cohere2", "cohere2_moe", "blt", "blt_local_encoder",
      "blt_local_decoder", "blt_global_transformer", "blt_patcher"};
  if (Field f = top("rope_interleave")) {
    style_ = boolean(f) ? Style::GPTJ : Style::NeoX;
  } else if (std::find(std::begin(kInterleaved), std::end(kInterleaved), model_type_) != std::end(kInterleaved)) {
    style_ = Style::GPTJ;
  }
}

// The names read_rope_parameters accepts, for its message: each scheme's name (and alias), and
// "mrope", which Qwen2VLConfig rewrites to "default".
std::string known_rope_types() {
  std::string names;
  for (const scaling::ScalingScheme& row : scaling::schemes()) {
    names += std::string(row.name) + (row.alias.empty() ? "" : " (or " + std::string(row.alias) + ")") + ", ";
  }
  return names + "mrope";
}

// Keys the scheme reads: its row's required and optional keys (HF _validate_*_rope_parameters).
void ConfigReader::check_unknown_keys(const Field& params, const scaling::ScalingScheme& scheme) {
  std::set<std::string_view> known = {"rope_type", "type", "rope_theta", "partial_rotary_factor",
                                      "mrope_section", "mrope_interleaved"};
  known.insert(scheme.required_keys.begin(), scheme.required_keys.end());
  known.insert(scheme.optional_keys.begin(), scheme.optional_keys.end());
  std::string unknown;
  for (const auto& [key, value] : params.value->as_object()) {
    if (known.count(key) == 0) unknown += (unknown.empty() ? "" : ", ") + key;
  }
  if (!unknown.empty()) {
    warn("unrecognized keys in ", params.path, " for rope_type '", scheme.name, "': ", unknown,
         " (ignored; transformers warns about them too)");
  }
}

void ConfigReader::read_mrope(const Field& params, RopeSpec& spec) {
  Field section = member(params, "mrope_section");
  if (!section.present_non_null()) section = top("mrope_section");
  if (!section.present_non_null()) return;
  if (!section.value->is_array() || section.value->as_array().size() != 3) {
    fail_at(section.value, section.path, " must be a list of 3 integers [t, h, w] (got ", section.value->describe(), ")");
  }
  spec.axes = PositionAxes::MRope;
  int64_t total = 0;
  for (size_t i = 0; i < 3; ++i) {
    const json::Value& item = section.value->as_array()[i];
    const Field f{&item, section.path + "[" + std::to_string(i) + "]"};
    if (!item.is_number() || !item.is_integer() || item.as_int64() < 0) {
      fail_at(&item, f.path, " must be an integer >= 0 (got ", item.describe(), ")");
    }
    spec.mrope.pairs[i] = item.as_int64();
    total += item.as_int64();
  }
  if (total != spec.rotary_dim / 2) {
    fail_at(section.value, section.path, " must sum to rotary_dim/2 = ", spec.rotary_dim / 2, " (got [",
            spec.mrope.pairs[0], ", ", spec.mrope.pairs[1], ", ", spec.mrope.pairs[2], "], sum ", total, ")");
  }
  Field interleaved = member(params, "mrope_interleaved");
  if (!interleaved.present_non_null()) interleaved = top("mrope_interleaved");
  if (interleaved.present_non_null() && boolean(interleaved)) spec.mrope.assignment = MRopeAssignment::Interleaved;
}

// The keys every scheme shares (factor, original_max_position_embeddings), then the scheme's
// own through its row's read_hf_config (src/core/scaling/).
void ConfigReader::read_scaling(const Field& params, const scaling::ScalingScheme& named, bool per_layer_type,
                                RopeSpec& spec) {
  Scaling& s = spec.scaling;
  const std::string type_text = "rope_type '" + std::string(named.name) + "'";
  // vLLM reads {"rope_type": "dynamic", "alpha": a} (Hunyuan) as static NTK-alpha scaling, which
  // needs no factor.
  const scaling::ScalingScheme& scheme = named.type == ScalingType::Dynamic && member(params, "alpha").present_non_null()
                                             ? scaling::scheme(ScalingType::NtkAlpha)
                                             : named;

  // Required keys (HF _check_received_keys raises KeyError for these).
  for (std::string_view key : scheme.required_keys) {
    if (!member(params, key)) {
      fail_at(params.value, params.path, ".", key, " is missing: ", type_text, " requires it",
              " (transformers raises KeyError: Missing required keys)");
    }
  }
  check_unknown_keys(params, scheme);

  // factor: >= 1 (HF warns "must be a float >= 1" and computes anyway; rotary rejects it).
  if (Field f = member(params, "factor"); f.present_non_null()) {
    s.factor = number_at_least(f, 1.0, true);
  } else if (f && named.requires_factor) {
    fail_at(f.value, f.path, " must be a finite number >= 1 (got null)");
  }

  // original_max_position_embeddings (HF standardize_rope_params): for llama3/yarn/longrope a
  // top-level value (Phi-3) wins, else the dict's, else max_position_embeddings.
  if (named.reads_original_context) {
    Field in_dict = member(params, "original_max_position_embeddings");
    int64_t dict_value = in_dict.present_non_null() ? positive_integer(in_dict) : 0;
    // HF standardize_rope_params gives the top-level value priority only for a single rope
    // dict; per-layer-type dicts default to max_position_embeddings.
    if (top_original_max_.present_non_null() && !per_layer_type) {
      s.original_max_position_embeddings = positive_integer(top_original_max_);
      if (dict_value > 0 && dict_value != s.original_max_position_embeddings) {
        warn(top_original_max_.path, " = ", s.original_max_position_embeddings, " overrides ", in_dict.path,
             " = ", dict_value, ", as transformers does");
      }
    } else if (dict_value > 0) {
      s.original_max_position_embeddings = dict_value;
    } else if (max_position_embeddings_ > 0) {
      s.original_max_position_embeddings = max_position_embeddings_;
      warn(params.path, ".original_max_position_embeddings is not set; using max_position_embeddings = ",
           max_position_embeddings_, " as transformers does");
    } else {
      fail_at(params.value, params.path, ".original_max_position_embeddings is missing and so is max_position_embeddings: ",
              type_text, " needs the pretraining context length");
    }
  }

  s.type = scheme.type;
  scaling::HfScalingReader reader{*this, params, type_text, max_position_embeddings_,
                                  top_original_max_.present_non_null(), per_layer_type};
  scheme.read_hf_config(reader, spec);
}

RopeSpec ConfigReader::read_rope_parameters(const Field& params, bool per_layer_type, std::string_view layer_type) {
  // Gemma 4's full-attention layers have their own head size (HF passes
  // head_dim_key="global_head_dim" to the proportional init for them).
  const int64_t head_dim = layer_type == "full_attention" && global_head_dim_ > 0 ? global_head_dim_ : head_dim_;
  RopeSpec spec;
  spec.name = source_;
  spec.head_dim = head_dim;
  spec.hidden_size = hidden_size_;
  spec.num_attention_heads = num_attention_heads_;
  spec.num_key_value_heads = num_key_value_heads_ > 0 ? num_key_value_heads_ : num_attention_heads_;
  spec.max_position_embeddings = max_position_embeddings_;
  spec.style = style_;

  // rope_type, with "type" as its older alias (HF: setdefault("rope_type", get("type", "default"))).
  std::string rope_type = "default";
  Field type_field = member(params, "rope_type");
  Field alias_field = member(params, "type");
  if (type_field.present_non_null()) {
    rope_type = string(type_field);
    if (alias_field.present_non_null() && string(alias_field) != rope_type) {
      warn(params.path, " has rope_type '", rope_type, "' and type '", string(alias_field),
           "'; rope_type is used, as transformers does");
    }
  } else if (alias_field.present_non_null()) {
    rope_type = string(alias_field);
    type_field = alias_field;
  }
  if (rope_type == "mrope") rope_type = "default";  // Qwen2VLConfig rewrites "mrope" to "default"
  // A scheme's name or alias ("su", Phi-3's first name for LongRoPE): src/core/scaling/registry.cpp.
  const scaling::ScalingScheme* scheme = scaling::find_scheme(rope_type);
  if (scheme == nullptr) {
    fail_at(type_field.value, type_field.path, " must be one of ", known_rope_types(), " (got \"", rope_type, "\")");
  }

  // rope_theta: the dict's, else the top-level rope_theta, else GPT-NeoX's rotary_emb_base,
  // else transformers' default_theta 10000.
  Field theta = member(params, "rope_theta");
  if (!theta.present_non_null()) theta = top("rope_theta");
  if (!theta.present_non_null()) theta = top("rotary_emb_base");
  if (theta.present_non_null()) {
    spec.theta_base = number_at_least(theta, 1.0, false);
  } else if (const FamilyDefaults* family = family_defaults(model_type_); family != nullptr) {
    spec.theta_base = family->rope_theta;  // what the model's config class fills in
  } else {
    spec.theta_base = 10000.0;
    warn("rope_theta is not set; using transformers' default 10000 (model_type \"", model_type_,
         "\" has no known class default)");
  }

  // Partial rotary: a top-level partial_rotary_factor (or GPT-NeoX's rotary_pct) overrides the
  // dict's (HF standardize_rope_params); GPT-J gives an absolute rotary_dim.
  Field partial = top("partial_rotary_factor");
  if (!partial.present_non_null()) partial = top("rotary_pct");
  if (!partial.present_non_null()) partial = member(params, "partial_rotary_factor");
  const bool proportional = scheme->rotates_whole_head;
  if (partial.present_non_null()) {
    const double value = finite_number(partial, proportional ? "a number in [0, 1]" : "a number in (0, 1]");
    if (value > 1.0 || value < 0.0 || (!proportional && value == 0.0)) {
      fail_at(partial.value, partial.path, " must be a number in ", proportional ? "[0, 1]" : "(0, 1]", " (got ",
              value, ")");
    }
    spec.partial_rotary_factor = value;
  }
  // HF: dim = int(head_dim * partial_rotary_factor) (truncation). A head_dim within 512 of
  // INT64_MAX becomes 2^63 as a double, which does not convert back (undefined behaviour, found
  // by the one-hour hf_config fuzz run): such a head_dim keeps itself here, and the rotary_dim
  // check below rejects it, naming head_dim and its value.
  const double scaled_dim = static_cast<double>(head_dim) * spec.partial_rotary_factor;
  spec.rotary_dim = proportional || !(scaled_dim < 0x1p63) ? head_dim : static_cast<int64_t>(scaled_dim);
  const Field rotary_dim = top("rotary_dim");
  if (rotary_dim.present_non_null() && !proportional) {
    const int64_t value = positive_integer(rotary_dim);
    if (partial.present_non_null() && value != spec.rotary_dim) {
      warn(rotary_dim.path, " = ", value, " overrides ", partial.path, " (which gives ", spec.rotary_dim, ")");
    }
    spec.rotary_dim = value;
    spec.partial_rotary_factor = static_cast<double>(value) / static_cast<double>(head_dim);
  }
  const Field& dim_source = rotary_dim.present_non_null() ? rotary_dim : partial;
  if (spec.rotary_dim > head_dim) {
    fail_at(dim_source.value, dim_source.path, " gives rotary_dim ", spec.rotary_dim, ", more than head_dim ",
            head_dim, " (got ", spec.rotary_dim, ")");
  }
  if (spec.rotary_dim <= 0 || spec.rotary_dim % 2 != 0) {
    std::string how = dim_source.present_non_null() ? dim_source.path : std::string("head_dim");
    fail_at(dim_source.value, "rotary_dim (from ", how, ") must be even and > 0 (got ", spec.rotary_dim,
            "; head_dim ", head_dim, ", partial_rotary_factor ", spec.partial_rotary_factor, ")");
  }

  read_scaling(params, *scheme, per_layer_type, spec);
  read_mrope(params, spec);

  validate(spec);  // backstop: the reads above name fields; this checks the assembled spec
  return spec;
}

HfRopeConfig ConfigReader::read() {
  if (!root_.is_object()) fail_at(&root_, "the config must be a JSON object (got ", root_.describe(), ")");
  read_geometry();

  HfRopeConfig result;
  result.model_type = model_type_;

  // rope_scaling (old form) or rope_parameters (v5). HF: `rope_scaling or self.rope_parameters`,
  // so a non-empty rope_scaling wins.
  Field scaling = top("rope_scaling");
  Field parameters = top("rope_parameters");
  for (const Field* f : {&scaling, &parameters}) {
    if (f->present_non_null() && !f->value->is_object()) {
      fail_at(f->value, f->path, " must be an object (got ", f->value->describe(), ")");
    }
  }
  auto non_empty = [](const Field& f) { return f.present_non_null() && !f.value->as_object().empty(); };
  Field params;
  if (non_empty(scaling)) {
    params = scaling;
    if (non_empty(parameters)) {
      warn("both rope_scaling and rope_parameters are set; rope_scaling is used, as transformers does");
    }
  } else if (non_empty(parameters)) {
    params = parameters;
  }
  static const json::Value kEmptyObject = json::Value::make_object({});
  if (!params) params = Field{&kEmptyObject, "rope_parameters"};

  // layer_types: one entry per layer. Parameters keyed by layer type give each its own spec.
  if (Field layer_types = top("layer_types"); layer_types.present_non_null()) {
    if (!layer_types.value->is_array()) {
      fail_at(layer_types.value, layer_types.path, " must be a list of strings (got ", layer_types.value->describe(), ")");
    }
    for (size_t i = 0; i < layer_types.value->as_array().size(); ++i) {
      result.layer_types.push_back(
          string(Field{&layer_types.value->as_array()[i], layer_types.path + "[" + std::to_string(i) + "]"}));
    }
  }
  const std::set<std::string> type_set(result.layer_types.begin(), result.layer_types.end());
  bool nested = !type_set.empty() && !params.value->as_object().empty();
  for (const auto& [key, value] : params.value->as_object()) {
    if (type_set.count(key) == 0) nested = false;
  }

  if (nested) {
    for (const auto& [key, value] : params.value->as_object()) {
      Field sub{&value, params.path + "." + key};
      if (!value.is_object()) fail_at(&value, sub.path, " must be an object (got ", value.describe(), ")");
      result.layer_type_specs.emplace_back(key, read_rope_parameters(sub, true, key));
    }
    auto full = std::find_if(result.layer_type_specs.begin(), result.layer_type_specs.end(),
                             [](const auto& entry) { return entry.first == "full_attention"; });
    result.spec = full != result.layer_type_specs.end() ? full->second : result.layer_type_specs.front().second;
    for (const std::string& type : type_set) {
      if (std::none_of(result.layer_type_specs.begin(), result.layer_type_specs.end(),
                       [&](const auto& entry) { return entry.first == type; })) {
        fail_at(params.value, params.path, " has no entry for layer type \"", type, "\" listed in layer_types");
      }
    }
  } else {
    result.spec = read_rope_parameters(params, false);
    // Gemma 3 before v5: sliding-window layers use rope_local_base_freq with default RoPE
    // (Gemma3Config turns it into rope_parameters["sliding_attention"]; its layer_types may be
    // absent from the file and derived from sliding_window_pattern).
    const FamilyDefaults* family = family_defaults(model_type_);
    const Field local = top("rope_local_base_freq");
    if (local.present_non_null() || (family != nullptr && family->local_rope_theta > 0)) {
      RopeSpec sliding = result.spec;
      sliding.theta_base = local.present_non_null() ? number_at_least(local, 1.0, false) : family->local_rope_theta;
      sliding.scaling = Scaling{};
      result.layer_type_specs.emplace_back("full_attention", result.spec);
      result.layer_type_specs.emplace_back("sliding_attention", sliding);
    }
  }
  result.sliding_window = sliding_window_;
  result.warnings = std::move(warnings_);
  result.notes = std::move(notes_);
  return result;
}

HfRopeConfig read_config(const json::Value& root, std::string_view source_name, std::vector<std::string> warnings) {
  return ConfigReader(root, source_name, std::move(warnings)).read();
}

}  // namespace

HfRopeConfig parse_hf_config(std::string_view json_text, std::string_view source_name) {
  std::vector<std::string> warnings;
  const json::Value root = json::parse(json_text, source_name, &warnings);
  return read_config(root, source_name, std::move(warnings));
}

HfRopeConfig load_hf_config(const std::string& path) {
  std::vector<std::string> warnings;
  const json::Value root = json::parse_file(path, &warnings);
  return read_config(root, path, std::move(warnings));
}

}  // namespace rotary
