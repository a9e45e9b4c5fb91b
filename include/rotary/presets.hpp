// include/rotary/presets.hpp: built-in RoPE configurations of real models.
//
// Each preset is the RoPE-relevant part of the model's published config.json, kept verbatim
// (with its source cited next to it in src/core/preset_data.cpp) and read through the same
// parser as a user's file, so a preset is exactly what loading that config.json gives.
// Names are the models' names in lower case as Hugging Face spells them: "llama-3.1-8b". A preset
// that changes what a repository ships (qwen2.5-7b-yarn adds the YaRN block of the model card)
// has a name that says so and does not answer to that repository's id: a repository id always
// gives exactly the configuration the repository ships.
#pragma once

#include <optional>
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
  // The Hugging Face repository whose config.json this preset is, unchanged ("meta-llama/Llama-3.1-8B");
  // empty for a preset that changes it (its source says what was changed).
  std::string repo;
};

// Every preset, in a stable order (grouped by family).
std::vector<PresetInfo> list_presets();

// The preset `given` names, or empty: a preset name in any case ("Llama-3.1-8B"), or, in any case,
// the repo of a preset ("meta-llama/Llama-3.1-8B"; PresetInfo::repo).
std::optional<std::string> find_preset(std::string_view given);

// The presets someone who wrote `given` (naming none) most likely meant, best first, at most 4;
// empty when none is close. Names are compared by family, version and the other tokens,
// ignoring case and punctuation and any "org/" prefix: "llama-3-8b" gives the Llama 3.x presets
// (llama-3.1-8b first), never llama-2-7b; "gemma3" gives gemma-3-1b and gemma-3-27b;
// "mistral-7b" gives mistral-7b-v0.1; a family with no preset of that version gives none.
std::vector<std::string> suggest_presets(std::string_view given);

// "; did you mean llama-3.1-8b?" or "; did you mean one of gemma-3-1b, gemma-3-27b?", or "" for
// no suggestions: the tail of an error message.
std::string did_you_mean(const std::vector<std::string>& suggestions);

// The preset's config, parsed; `name` is anything find_preset() accepts, and the spec's name is
// the preset's name. Anything else is a rotary::ConfigError naming the value, with
// did_you_mean(suggest_presets(name)).
HfRopeConfig preset(std::string_view name);

// The preset's config.json text (what `rotary presets --json NAME` would print, and what a
// test can feed to other parsers); `name` as for preset().
std::string_view preset_config_json(std::string_view name);

}  // namespace rotary
