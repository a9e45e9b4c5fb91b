// src/cli/presets_command.cpp: `rotary presets [--json]`.
#include <algorithm>
#include <iostream>

#include "cli/commands.hpp"
#include "core/json.hpp"
#include "rotary/presets.hpp"

namespace rotary::cli {

const char* const kPresetsHelp =
    "usage: rotary presets [--json]\n"
    "\n"
    "Lists the built-in presets: the RoPE part of real models' config.json, each cited to its\n"
    "source. Use a name with --preset in the other commands.\n"
    "\n"
    "A Hugging Face repository id names the preset that is its config.json as published; a preset\n"
    "that changes it (qwen2.5-7b-yarn) has no repo.\n"
    "\n"
    "  --json   one JSON array of {\"name\", \"summary\", \"source\", \"repo\" (null: changed),\n"
    "           \"default\"}\n";

int run_presets(Args& args) {
  const bool as_json = args.has_switch("--json");
  args.finish();
  if (args.parse_only()) return 0;
  const std::vector<PresetInfo> presets = list_presets();
  if (as_json) {
    json::Writer out;
    out.begin_array();
    for (const PresetInfo& p : presets) {
      out.begin_object();
      out.key("name").value(p.name);
      out.key("summary").value(p.summary);
      out.key("source").value(p.source);
      if (p.repo.empty()) {
        out.key("repo").null();
      } else {
        out.key("repo").value(p.repo);
      }
      out.key("default").value(p.name == kDefaultPreset);
      out.end_object();
    }
    out.end_array();
    args.out() << out.str() << "\n";
    return 0;
  }
  size_t width = 0;
  for (const PresetInfo& p : presets) width = std::max(width, p.name.size());
  for (const PresetInfo& p : presets) {
    args.out() << p.name << std::string(width - p.name.size() + 2, ' ') << p.summary
               << (p.name == kDefaultPreset ? "  [default]" : "") << "\n";
  }
  args.out() << "\n" << presets.size() << " presets. Sources: rotary presets --json.\n";
  return 0;
}

}  // namespace rotary::cli
