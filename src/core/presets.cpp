// src/core/presets.cpp: lookup of the built-in presets (data in preset_data.cpp), and the "did you
// mean" for names that match none, shared by the CLI and the Python module.
#include "rotary/presets.hpp"

#include <algorithm>
#include <cctype>

#include "core/edit_distance.hpp"
#include "core/preset_record.hpp"
#include "rotary/error.hpp"

namespace rotary {

namespace {

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool is_letter(char c) { return c >= 'a' && c <= 'z'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Letters and digits only, lower case, after the last '/': "Qwen/Qwen2.5-7B" -> "qwen257b".
std::string alnum_key(std::string_view given) {
  const size_t slash = given.rfind('/');
  std::string out;
  for (char c : lower(slash == std::string_view::npos ? given : given.substr(slash + 1))) {
    if (is_letter(c) || is_digit(c)) out += c;
  }
  return out;
}

// A model name in parts: "llama-3.1-8b" -> family "llama", version "3.1", rest {"8b"};
// "deepseek-v2-lite" -> "deepseek", "2", {"lite"}; "mistral-7b-v0.1" -> "mistral", "", {"7b",
// "v", "0.1"}. Tokens are split at anything but letters, digits and '.', and where letters meet a
// digit ("qwen2.5" -> "qwen", "2.5"; "8b" stays whole). The family is the first token made of
// letters that `is_family` accepts (skipping an "org" prefix such as "meta" in Meta-Llama-3-8B);
// the version is the number right after it, or after a "v" there.
struct NameParts {
  std::string family;
  std::string version;
  std::vector<std::string> rest;
};

std::vector<std::string> tokens_of(std::string_view given) {
  const size_t slash = given.rfind('/');
  const std::string text = lower(slash == std::string_view::npos ? given : given.substr(slash + 1));
  std::vector<std::string> tokens;
  std::string token;
  for (char c : text) {
    const bool part = is_letter(c) || is_digit(c) || c == '.';
    if (!part || (is_digit(c) && !token.empty() && is_letter(token.back()))) {
      if (!token.empty()) tokens.push_back(token);
      token.clear();
    }
    if (part) token += c;
  }
  if (!token.empty()) tokens.push_back(token);
  return tokens;
}

bool is_number(const std::string& token) {
  return !token.empty() && is_digit(token.front()) &&
         std::all_of(token.begin(), token.end(), [](char c) { return is_digit(c) || c == '.'; });
}

template <typename IsFamily>
NameParts parts_of(std::string_view given, IsFamily is_family) {
  const std::vector<std::string> tokens = tokens_of(given);
  NameParts parts;
  size_t i = 0;
  while (i < tokens.size() && !is_family(tokens[i])) ++i;
  if (i == tokens.size()) return parts;
  parts.family = tokens[i++];
  if (i < tokens.size() && is_number(tokens[i])) {
    parts.version = tokens[i++];
  } else if (i + 1 < tokens.size() && tokens[i] == "v" && is_number(tokens[i + 1])) {
    parts.version = tokens[i + 1];
    i += 2;
  }
  parts.rest.assign(tokens.begin() + static_cast<std::ptrdiff_t>(i), tokens.end());
  return parts;
}

using detail::edit_distance;

// How a candidate's version relates to the one asked for: 2 the same, 1 one extends the other
// ("3" and "3.1", "3.1" and "3"), 0 none asked for, -1 a different version ("3" and "2"), which
// is never suggested: another version of a family is usually another RoPE (Llama 2 and 3).
int version_match(const std::string& asked, const std::string& candidate) {
  if (asked.empty()) return 0;
  if (asked == candidate) return 2;
  if (!candidate.empty() && (candidate.rfind(asked + ".", 0) == 0 || asked.rfind(candidate + ".", 0) == 0)) return 1;
  return -1;
}

const detail::PresetRecord* find_record(std::string_view given) {
  const std::string wanted = lower(given);
  for (const detail::PresetRecord& record : detail::preset_records()) {
    if (record.name == wanted) return &record;
  }
  for (const detail::PresetRecord& record : detail::preset_records()) {
    if (!record.repo.empty() && lower(record.repo) == wanted) return &record;
  }
  return nullptr;
}

const detail::PresetRecord& record_or_throw(std::string_view name) {
  if (const detail::PresetRecord* record = find_record(name)) return *record;
  throw ConfigError(detail::concat("preset: name must be a built-in preset's name or repository id (got \"", name,
                                   "\")", did_you_mean(suggest_presets(name))));
}

}  // namespace

std::vector<PresetInfo> list_presets() {
  std::vector<PresetInfo> out;
  for (const detail::PresetRecord& record : detail::preset_records()) {
    out.push_back({std::string(record.name), std::string(record.summary), std::string(record.source),
                   std::string(record.repo)});
  }
  return out;
}

std::optional<std::string> find_preset(std::string_view given) {
  if (const detail::PresetRecord* record = find_record(given)) return std::string(record->name);
  return std::nullopt;
}

std::vector<std::string> suggest_presets(std::string_view given) {
  constexpr size_t kMaxSuggestions = 4;
  const std::vector<detail::PresetRecord>& records = detail::preset_records();
  // The same letters and digits ("Llama3.1_8B", "gemma3-1b"): that preset alone.
  const std::string key = alnum_key(given);
  for (const detail::PresetRecord& record : records) {
    if (!key.empty() && (alnum_key(record.name) == key || (!record.repo.empty() && alnum_key(record.repo) == key))) {
      return {std::string(record.name)};
    }
  }
  std::vector<NameParts> parts;
  std::vector<std::string> families;
  for (const detail::PresetRecord& record : records) {
    parts.push_back(parts_of(record.name, [](const std::string& t) { return !t.empty() && is_letter(t[0]); }));
    if (std::find(families.begin(), families.end(), parts.back().family) == families.end()) {
      families.push_back(parts.back().family);
    }
  }
  // The family as written, or one edit away ("lama", "gema", "mistrl").
  const auto known_family = [&](const std::string& token) {
    for (const std::string& family : families) {
      if (token == family || (token.size() >= 3 && edit_distance(token, family) <= 1)) return true;
    }
    return false;
  };
  const std::string wanted = lower(given.substr(given.rfind('/') == std::string_view::npos ? 0 : given.rfind('/') + 1));
  NameParts asked = parts_of(given, known_family);
  if (asked.family.empty()) {
    // No known family: the nearest whole name, if it is a likely slip (at most max(2, size / 3) edits).
    std::optional<std::string> best;
    size_t best_distance = std::max<size_t>(2, wanted.size() / 3) + 1;
    for (const detail::PresetRecord& record : records) {
      const size_t d = edit_distance(wanted, record.name);
      if (d < best_distance) {
        best_distance = d;
        best = std::string(record.name);
      }
    }
    if (best) return {*best};
    return {};
  }
  for (const std::string& family : families) {
    if (edit_distance(asked.family, family) <= 1 && asked.family != family &&
        std::find(families.begin(), families.end(), asked.family) == families.end()) {
      asked.family = family;
    }
  }

  struct Candidate {
    size_t index;
    int version;      // version_match
    int shared;       // tokens of `rest` both have
    size_t distance;  // edit distance of the whole names ("qwen3-8bb" is 1 from qwen3-8b)
  };
  std::vector<Candidate> candidates;
  for (size_t i = 0; i < records.size(); ++i) {
    if (parts[i].family != asked.family) continue;
    const int version = version_match(asked.version, parts[i].version);
    if (version < 0) continue;
    int shared = 0;
    for (const std::string& token : asked.rest) {
      shared += std::count(parts[i].rest.begin(), parts[i].rest.end(), token) > 0 ? 1 : 0;
    }
    candidates.push_back({i, version, shared, edit_distance(wanted, records[i].name)});
  }
  if (candidates.empty()) return {};
  // Only the best version tier: the same version if any preset has it, else the related ones.
  int best_version = 0;
  for (const Candidate& c : candidates) best_version = std::max(best_version, c.version);
  std::erase_if(candidates, [&](const Candidate& c) { return c.version != best_version; });
  std::stable_sort(candidates.begin(), candidates.end(), [](const Candidate& l, const Candidate& r) {
    return l.shared != r.shared ? l.shared > r.shared : l.distance < r.distance;
  });
  // One clear answer only when the version is the one asked for (or none was asked) and one
  // candidate shares more of the rest than any other, or is a slip of at most 2 edits nearer
  // than any other; otherwise the tier, best first.
  const auto clearly_first = [&] {
    if (candidates.size() == 1 || candidates[0].shared > candidates[1].shared) return true;
    const auto nearest = std::min_element(candidates.begin(), candidates.end(),
                                          [](const Candidate& l, const Candidate& r) { return l.distance < r.distance; });
    if (nearest->distance > 2) return false;
    for (const Candidate& c : candidates) {
      if (&c != &*nearest && c.distance <= nearest->distance) return false;
    }
    std::rotate(candidates.begin(), nearest, nearest + 1);
    return true;
  };
  const bool one = best_version != 1 && clearly_first();
  std::vector<std::string> out;
  for (const Candidate& c : candidates) {
    if (out.size() == (one ? 1 : kMaxSuggestions)) break;
    out.emplace_back(records[c.index].name);
  }
  return out;
}

std::string did_you_mean(const std::vector<std::string>& suggestions) {
  if (suggestions.empty()) return "";
  if (suggestions.size() == 1) return "; did you mean " + suggestions[0] + "?";
  std::string list;
  for (const std::string& s : suggestions) list += (list.empty() ? "" : ", ") + s;
  return "; did you mean one of " + list + "?";
}

HfRopeConfig preset(std::string_view name) {
  const detail::PresetRecord& record = record_or_throw(name);
  HfRopeConfig config = parse_hf_config(record.config_json, "preset " + std::string(record.name));
  config.spec.name = std::string(record.name);
  for (auto& [layer_type, spec] : config.layer_type_specs) spec.name = std::string(record.name) + "/" + layer_type;
  return config;
}

std::string_view preset_config_json(std::string_view name) { return record_or_throw(name).config_json; }

}  // namespace rotary
