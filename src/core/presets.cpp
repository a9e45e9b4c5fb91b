// src/core/presets.cpp: lookup of the built-in presets (data in preset_data.cpp).
#include "rotary/presets.hpp"

#include "preset_record.hpp"
#include "rotary/error.hpp"

namespace rotary {

namespace {

const detail::PresetRecord& find_record(std::string_view name) {
  for (const detail::PresetRecord& record : detail::preset_records()) {
    if (record.name == name) return record;
  }
  std::string names;
  for (const detail::PresetRecord& record : detail::preset_records()) {
    names += (names.empty() ? "" : ", ") + std::string(record.name);
  }
  throw ConfigError(detail::concat("preset: name must be one of ", names, " (got \"", name, "\")"));
}

}  // namespace

std::vector<PresetInfo> list_presets() {
  std::vector<PresetInfo> out;
  for (const detail::PresetRecord& record : detail::preset_records()) {
    out.push_back({std::string(record.name), std::string(record.summary), std::string(record.source)});
  }
  return out;
}

HfRopeConfig preset(std::string_view name) {
  const detail::PresetRecord& record = find_record(name);
  HfRopeConfig config = parse_hf_config(record.config_json, "preset " + std::string(record.name));
  config.spec.name = std::string(record.name);
  for (auto& [layer_type, spec] : config.layer_type_specs) spec.name = std::string(record.name) + "/" + layer_type;
  return config;
}

std::string_view preset_config_json(std::string_view name) { return find_record(name).config_json; }

}  // namespace rotary
