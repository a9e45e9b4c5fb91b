// src/cli/layer_types.hpp: which layer type's RoPE a command uses, for configs that give each
// layer type its own (Gemma 3: sliding_attention layers with rope_local_base_freq and a window,
// full_attention layers with the global rope_theta and scaling). A command never picks one type
// silently: one that reports runs every type (as explain does), one whose output is one table or
// file refuses without --layer-type, naming the flag and the choices.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "cli/args.hpp"
#include "rotary/error.hpp"

namespace rotary::cli {

// One layer type to run: its name (empty for a config without per-layer-type RoPE) and its spec.
struct LayerTypeSpec {
  std::string name;
  const RopeSpec* spec = nullptr;
};

// "full_attention, sliding_attention": the config's layer types, for messages.
inline std::string layer_type_choices(const LoadedConfig& loaded) {
  std::string names;
  for (const auto& [name, spec] : loaded.config.layer_type_specs) names += (names.empty() ? "" : " or ") + name;
  return names;
}

// For commands that report: the --layer-type given (checked by select_spec), else every layer type
// of a per-layer-type config, else the config's one spec (name empty).
inline std::vector<LayerTypeSpec> layer_types_to_run(const LoadedConfig& loaded,
                                                     const std::optional<std::string>& layer_type) {
  const RopeSpec& selected = select_spec(loaded, layer_type);
  if (layer_type || loaded.config.layer_type_specs.empty()) return {{layer_type.value_or(""), &selected}};
  std::vector<LayerTypeSpec> out;
  for (const auto& [name, spec] : loaded.config.layer_type_specs) out.push_back({name, &spec});
  return out;
}

// For commands whose output is one table or file: the spec of --layer-type, or the config's one
// spec; a per-layer-type config without --layer-type is a UsageError naming the flag and choices.
inline LayerTypeSpec one_layer_type(const std::string& command, const LoadedConfig& loaded,
                                    const std::optional<std::string>& layer_type) {
  if (!layer_type && !loaded.config.layer_type_specs.empty()) {
    throw UsageError(detail::concat(command, ": ", loaded.source, " gives each layer type its own RoPE: choose one with "
                                    "--layer-type ", layer_type_choices(loaded), " (got none)"));
  }
  return {layer_type.value_or(""), &select_spec(loaded, layer_type)};
}

}  // namespace rotary::cli
