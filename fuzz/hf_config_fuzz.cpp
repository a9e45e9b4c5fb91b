// fuzz/hf_config_fuzz.cpp: the config.json path: json::parse, json::serialize, parse_hf_config,
// and what a valid config feeds (frequencies(), an exact on-the-fly table).
//
// Properties:
//   - json::parse accepts the text or throws rotary::ConfigError naming the source;
//   - serializing a parsed value and parsing that again gives the same text (round trip);
//   - parse_hf_config accepts the value or throws rotary::Error (ConfigError for the config);
//   - every spec of an accepted config has finite inv_freq >= 0 and a finite attention scaling
//     > 0 at any seq_len, and its exact table rows are finite and within the scaling.
// Anything else thrown (std::bad_alloc, std::out_of_range, ...) reaches libFuzzer as a crash.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_support.hpp"
#include "rotary/error.hpp"
#include "rotary/frequencies.hpp"
#include "rotary/hf_config.hpp"
#include "core/json.hpp"
#include "rotary/table.hpp"

namespace rotary::fuzz {
namespace {

void exercise(const RopeSpec& spec) {
  const int64_t past_max = std::clamp<int64_t>(spec.max_position_embeddings, 0, kMaxPosition) + 1;
  for (const int64_t seq_len : {int64_t{0}, past_max, int64_t{1} << 20}) {
    Frequencies freqs;
    try {
      freqs = frequencies(spec, seq_len);
    } catch (const Error&) {
      continue;  // a seq_len the scheme rejects, by name
    }
    for (size_t i = 0; i < freqs.inv_freq.size(); ++i) {
      require(std::isfinite(freqs.inv_freq[i]) && freqs.inv_freq[i] >= 0.0, "inv_freq of a valid spec is finite, >= 0",
              detail::concat(spec.name, " seq_len ", seq_len, " inv_freq[", i, "] = ", freqs.inv_freq[i]));
    }
    require(std::isfinite(freqs.attention_scaling) && freqs.attention_scaling > 0.0,
            "attention_scaling of a valid spec is finite, > 0",
            detail::concat(spec.name, " seq_len ", seq_len, ": ", freqs.attention_scaling));
  }
  // The exact engine keeps 16 KB per pair (4 digit levels x 256 x cos, sin): 512 MB at the
  // largest head_dim validate() accepts (65536). Tables are checked up to 8192 pairs, so that a
  // long run stays inside libFuzzer's 2 GB.
  if (spec.rotary_dim / 2 > 8192) return;
  const CosSinTable table(spec, {.storage = Storage::OnTheFly});
  const auto pairs = static_cast<size_t>(table.num_pairs());
  std::vector<float> cos_row(pairs), sin_row(pairs);
  const double bound = table.attention_scaling() * (1.0 + 1e-6);
  for (const int64_t position : {int64_t{0}, int64_t{4097}, kMaxPosition}) {
    table.row(position, cos_row.data(), sin_row.data());
    for (size_t i = 0; i < pairs; ++i) {
      require(std::abs(cos_row[i]) <= bound && std::abs(sin_row[i]) <= bound,
              "table rows are finite and within attention_scaling",
              detail::concat(spec.name, " position ", position, " pair ", i, ": cos ", cos_row[i], ", sin ", sin_row[i]));
    }
  }
}

}  // namespace

int hf_config_one_input(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> warnings;
  json::Value root;
  try {
    root = json::parse(text, "fuzz.json", &warnings);
  } catch (const ConfigError& error) {
    require(starts_with(error.what(), "fuzz.json: "), "JSON errors name the source", error.what());
    return 0;
  }
  const std::string once = json::serialize(root);
  const json::Value again = json::parse(once, "round trip");
  require(json::serialize(again) == once, "serialize(parse(serialize(v))) == serialize(v)", once);

  HfRopeConfig config;
  try {
    config = parse_hf_config(text, "fuzz.json");  // the public entry: text in, parsed again
  } catch (const Error& error) {
    require(std::string_view(error.what()).size() > 0, "config errors say something");
    return 0;
  }
  exercise(config.spec);
  for (const auto& [layer_type, spec] : config.layer_type_specs) exercise(spec);
  return 0;
}

}  // namespace rotary::fuzz

ROTARY_FUZZ_ENTRY(rotary::fuzz::hf_config_one_input)
