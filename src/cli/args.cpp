// src/cli/args.cpp: command-line parsing shared by the subcommands.
#include "cli/args.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "core/edit_distance.hpp"
#include "rotary/error.hpp"
#include "rotary/presets.hpp"
#include "rotary/table.hpp"

namespace rotary::cli {

Args::Args(std::string command, std::vector<std::string> tokens, std::ostream& out, std::ostream& err, Effects effects)
    : command_(std::move(command)),
      tokens_(std::move(tokens)),
      used_(tokens_.size(), false),
      out_(&out),
      err_(&err),
      effects_(effects) {}

namespace {

// --name, --, -o: a token the user meant as a flag, never as the value of the flag before it.
bool looks_like_flag(const std::string& token) {
  if (token.rfind("--", 0) == 0) return true;
  return token.size() == 2 && token[0] == '-' &&
         ((token[1] >= 'a' && token[1] <= 'z') || (token[1] >= 'A' && token[1] <= 'Z'));
}

}  // namespace

std::optional<std::string> Args::value(std::string_view flag, std::string_view needs) {
  known_flags_.emplace_back(flag);
  std::optional<std::string> found;
  const std::string with_equals = std::string(flag) + "=";
  for (size_t i = 0; i < tokens_.size(); ++i) {
    if (used_[i]) continue;
    if (tokens_[i] == flag) {
      if (i + 1 >= tokens_.size()) throw UsageError(detail::concat(command_, ": ", flag, " needs ", needs));
      if (looks_like_flag(tokens_[i + 1])) {
        throw UsageError(detail::concat(command_, ": ", flag, " needs ", needs, " (got the flag ", tokens_[i + 1], ")"));
      }
      if (found) throw UsageError(detail::concat(command_, ": ", flag, " is given more than once"));
      used_[i] = used_[i + 1] = true;
      found = tokens_[i + 1];
      ++i;
    } else if (tokens_[i].rfind(with_equals, 0) == 0) {
      if (found) throw UsageError(detail::concat(command_, ": ", flag, " is given more than once"));
      used_[i] = true;
      found = tokens_[i].substr(with_equals.size());
    }
  }
  // No flag takes an empty value: `--out-q=` or `--out-q ""` is a slip, not a file named "".
  if (found && found->empty()) throw UsageError(detail::concat(command_, ": ", flag, " needs ", needs, " (got an empty value)"));
  return found;
}

bool Args::has_switch(std::string_view flag) {
  known_flags_.emplace_back(flag);
  bool found = false;
  for (size_t i = 0; i < tokens_.size(); ++i) {
    if (!used_[i] && tokens_[i] == flag) {
      used_[i] = true;
      found = true;
    }
  }
  return found;
}

std::optional<int64_t> Args::integer(std::string_view flag, int64_t minimum, int64_t maximum) {
  const std::optional<std::string> text = value(flag);
  if (!text) return std::nullopt;
  int64_t parsed = 0;
  const char* begin = text->data();
  const char* end = begin + text->size();
  auto [ptr, ec] = std::from_chars(begin, end, parsed);
  if (ec != std::errc() || ptr != end || text->empty()) {
    throw UsageError(detail::concat(command_, ": ", flag, " must be an integer in [", minimum, ", ", maximum,
                                    "] (got \"", *text, "\")"));
  }
  if (parsed < minimum || parsed > maximum) {
    throw UsageError(detail::concat(command_, ": ", flag, " must be an integer in [", minimum, ", ", maximum,
                                    "] (got ", parsed, ")"));
  }
  return parsed;
}

std::optional<std::string> Args::positional() {
  for (size_t i = 0; i < tokens_.size(); ++i) {
    if (!used_[i] && tokens_[i].rfind("--", 0) != 0) {
      used_[i] = true;
      return tokens_[i];
    }
  }
  return std::nullopt;
}

void Args::finish() const {
  for (size_t i = 0; i < tokens_.size(); ++i) {
    if (used_[i]) continue;
    std::string suggestion;
    if (tokens_[i].rfind("--", 0) == 0) {
      const std::string flag = tokens_[i].substr(0, tokens_[i].find('='));
      if (const std::optional<std::string> near = nearest(flag, known_flags_)) suggestion = "; did you mean " + *near + "?";
    }
    throw UsageError(detail::concat(command_, ": unexpected argument \"", tokens_[i], "\"", suggestion, " (see rotary ",
                                    command_, " --help)"));
  }
}

std::optional<std::string> nearest(std::string_view word, const std::vector<std::string>& candidates) {
  std::optional<std::string> best;
  size_t best_distance = std::max<size_t>(2, word.size() / 3) + 1;
  for (const std::string& candidate : candidates) {
    const size_t d = detail::edit_distance(word, candidate);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  return best;
}

std::optional<std::string> resolve_preset_name(const std::string& command, std::string_view flag,
                                               const std::string& given, bool or_nothing) {
  if (std::optional<std::string> name = find_preset(given)) return name;
  if (or_nothing) return std::nullopt;
  throw UsageError(detail::concat(command, ": ", flag, " must be a built-in preset, see rotary presets (got \"", given,
                                  "\")", did_you_mean(suggest_presets(given))));
}

std::string config_file_path(const std::string& command, std::string_view flag, const std::string& path) {
  std::error_code ignored;
  if (!std::filesystem::is_directory(path, ignored)) return path;
  const std::string file = (std::filesystem::path(path) / "config.json").string();
  if (!std::filesystem::exists(file, ignored)) {
    throw UsageError(detail::concat(command, ": ", flag, " must be a config.json or a model folder holding one (got the folder ",
                                    path, ", which has no ", file, ")"));
  }
  return file;
}

LoadedConfig load_config(Args& args) {
  const std::optional<std::string> preset_name = args.value("--preset", "a preset name");
  const std::optional<std::string> config_arg = args.value("--config", "a config.json or a model folder");
  if (preset_name && config_arg) {
    throw UsageError(detail::concat(args.command(), ": give --preset or --config, not both (got --preset ",
                                    *preset_name, " and --config ", *config_arg, ")"));
  }
  LoadedConfig loaded;
  if (config_arg) {
    const std::string config_path = config_file_path(args.command(), "--config", *config_arg);
    loaded.config = load_hf_config(config_path);
    loaded.source = config_path;
    loaded.config_path = config_path;
  } else {
    const std::string name =
        preset_name ? *resolve_preset_name(args.command(), "--preset", *preset_name) : std::string(kDefaultPreset);
    loaded.config = preset(name);
    loaded.source = "preset " + name;
  }
  for (const std::string& warning : loaded.config.warnings) args.err() << "rotary: warning: " << warning << "\n";
  return loaded;
}

const RopeSpec& select_spec(const LoadedConfig& loaded, const std::optional<std::string>& layer_type) {
  if (!layer_type) return loaded.config.spec;
  std::string names;
  for (const auto& [name, spec] : loaded.config.layer_type_specs) {
    if (name == *layer_type) return spec;
    names += (names.empty() ? "" : ", ") + name;
  }
  throw UsageError(detail::concat("--layer-type must be one of the config's layer types (",
                                  names.empty() ? std::string("it has none") : names, ") (got \"", *layer_type,
                                  "\")"));
}

std::string format_line(const char* format, ...) {
  va_list arguments;
  va_start(arguments, format);
  va_list again;
  va_copy(again, arguments);
  const int length = std::vsnprintf(nullptr, 0, format, arguments);
  va_end(arguments);
  std::string text(static_cast<size_t>(length > 0 ? length : 0), '\0');
  if (length > 0) std::vsnprintf(text.data(), text.size() + 1, format, again);
  va_end(again);
  return text;
}

std::string format_number(double value, int significant) {
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  if (std::isnan(value)) return "nan";
  std::ostringstream out;
  out.precision(significant);
  out << value;
  return out.str();
}

// A list "0,1,4096" or a range "FIRST:LAST" (LAST exclusive).
std::vector<int64_t> parse_positions(const std::string& command, const std::string& text) {
  constexpr int64_t kMaxRows = 1'000'000;
  auto parse_one = [&](std::string_view item) {
    int64_t value = 0;
    const char* end = item.data() + item.size();
    auto [ptr, ec] = std::from_chars(item.data(), end, value);
    if (item.empty() || ec != std::errc() || ptr != end) {
      throw UsageError(detail::concat(command + ": --positions must be integers like 0,1,4096 or a range 0:16 (got \"",
                                      text, "\")"));
    }
    if (value < 0 || value > kMaxPosition) {
      throw UsageError(detail::concat(command + ": --positions entries must be in [0, ", kMaxPosition, "] (got ", value, ")"));
    }
    return value;
  };
  std::vector<int64_t> positions;
  if (const size_t colon = text.find(':'); colon != std::string::npos) {
    const int64_t first = parse_one(std::string_view(text).substr(0, colon));
    const int64_t last = parse_one(std::string_view(text).substr(colon + 1));
    if (last <= first || last - first > kMaxRows) {
      throw UsageError(detail::concat(command + ": --positions FIRST:LAST must have FIRST < LAST and at most ", kMaxRows,
                                      " rows (got \"", text, "\")"));
    }
    for (int64_t p = first; p < last; ++p) positions.push_back(p);
    return positions;
  }
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const size_t end = comma == std::string::npos ? text.size() : comma;
    positions.push_back(parse_one(std::string_view(text).substr(start, end - start)));
    if (positions.size() > static_cast<size_t>(kMaxRows)) {
      throw UsageError(detail::concat(command + ": --positions must list at most ", kMaxRows, " positions"));
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return positions;
}


}  // namespace rotary::cli
