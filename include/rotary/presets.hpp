// include/rotary/presets.hpp: built-in RoPE configurations of real models.
//
// Each preset is the RoPE-relevant part of the model's published config.json, kept verbatim
// (with its source cited next to it in src/core/preset_data.cpp) and read through the same
// parser as a user's file, so a preset is exactly what loading that config.json gives.
// Names are the models' names in lower case as Hugging Face spells them: "llama-3.1-8b".
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "rotary/hf_config.hpp"

namespace rotary {

// The preset used by `make run` and by commands given neither --preset nor --config.
inline constexpr std::string_view kDefaultPreset = "llama-3.1-8b";

struct PresetInfo {
  std::string name;     // "llama-3.1-8b"
  std::string summary;  // one line: scheme and its key numbers
  std::string source;   // the Hugging Face repository (and file) the values come from
};

// Every preset, in a stable order (grouped by family).
std::vector<PresetInfo> list_presets();

// The preset's config, parsed. An unknown name is a rotary::ConfigError that lists the names.
HfRopeConfig preset(std::string_view name);

// The preset's config.json text (what `rotary presets --json NAME` would print, and what a
// test can feed to other parsers).
std::string_view preset_config_json(std::string_view name);

}  // namespace rotary
