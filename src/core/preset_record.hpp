// src/core/preset_record.hpp: the storage behind presets.hpp (internal to rotary_core).
#pragma once

#include <string_view>
#include <vector>

namespace rotary::detail {

struct PresetRecord {
  std::string_view name;         // lower case, as Hugging Face spells the model: "llama-3.1-8b"
  std::string_view summary;      // one line: scheme and key numbers
  std::string_view source;       // "meta-llama/Llama-3.1-8B config.json"
  std::string_view repo;         // "meta-llama/Llama-3.1-8B"; "" when the preset changes that file
  std::string_view config_json;  // the RoPE-relevant keys of that config.json, verbatim
};

// Defined in preset_data.cpp, in a stable order grouped by family.
const std::vector<PresetRecord>& preset_records();

}  // namespace rotary::detail
