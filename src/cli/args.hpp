// src/cli/args.hpp: the command line of one subcommand, and the shared --preset/--config source.
#pragma once

#include <cstdint>
#include <iostream>
#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "rotary/hf_config.hpp"

namespace rotary::cli {

// Thrown for a bad command line; main prints "rotary: error: <message>" and exits 2, like
// every other error.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What a command does once its command line is parsed.
//   Run:        everything (the command line).
//   ParseOnly:  parse and check the command line, read --config, then return 0 before anything
//               else: no input files read, no files written, no timing, no process-wide state
//               changed (threads, CPU target). For in-process callers: the CLI fuzzer
//               (fuzz/cli_fuzz.cpp) and the bad-input tests.
enum class Effects { Run, ParseOnly };

// Flags are --name VALUE or --name=VALUE; switches are --name. Every token must be consumed:
// finish() rejects what is left, naming it. Commands write to out() and err(), never to
// std::cout / std::cerr directly, so that run_cli() can run them in-process.
//
// A flag's VALUE is never a flag: `--out-q --reference` is an error naming --out-q ("needs a
// file path (got the flag --reference)"), not a file called --reference, and `--q --k k.npy`
// blames --q, not k.npy. "Looks like a flag" is any token starting with "--", or "-" and one
// letter (-o, -h); negative numbers (-4) are values. A value that really starts so is written
// --name=VALUE. An empty value (--out-q= or --out-q "") is refused too.
class Args {
 public:
  Args(std::string command, std::vector<std::string> tokens, std::ostream& out = std::cout,
       std::ostream& err = std::cerr, Effects effects = Effects::Run);

  // `needs` says what the flag takes, for the message when it is missing or is a flag:
  // "apply: --out-q needs a file path (got the flag --reference)".
  std::optional<std::string> value(std::string_view flag, std::string_view needs = "a value");
  bool has_switch(std::string_view flag);
  // An integer flag in [minimum, maximum], e.g. --seq-len 4096.
  std::optional<int64_t> integer(std::string_view flag, int64_t minimum, int64_t maximum);
  // The next token that is not a flag (--...) and not yet consumed, e.g. verify-golden's DIR.
  std::optional<std::string> positional();
  // Throws for the first token left over. An unknown --flag names the nearest flag this command
  // asked for (by edit distance): "freqs: unexpected argument "--seqlen"; did you mean --seq-len?".
  void finish() const;
  const std::string& command() const { return command_; }
  // The command's tokens as given (after the command name), e.g. for a report's provenance.
  const std::vector<std::string>& tokens() const { return tokens_; }

  std::ostream& out() const { return *out_; }
  std::ostream& err() const { return *err_; }
  // True when the command must stop here (Effects::ParseOnly): each command asks once, after
  // finish() and the checks of its flag values, before its first side effect.
  bool parse_only() const { return effects_ == Effects::ParseOnly; }

 private:
  std::string command_;
  std::vector<std::string> tokens_;
  std::vector<bool> used_;
  std::vector<std::string> known_flags_;  // every flag the command asked for, for finish()'s suggestion
  std::ostream* out_;
  std::ostream* err_;
  Effects effects_;
};

// --preset NAME | --config FILE (at most one; neither = the default preset). Warnings from the
// config are printed to stderr as "rotary: warning: ...". --config DIR reads DIR/config.json
// (a Hugging Face model folder); --preset takes the names resolve_preset_name() accepts.
struct LoadedConfig {
  HfRopeConfig config;
  std::string source;  // "preset llama-3.1-8b" or the path
  std::optional<std::string> config_path;  // the --config file; none for a preset
};
LoadedConfig load_config(Args& args);

// The preset `given` names (rotary::find_preset): a preset name in any case ("Llama-3.1-8B"), or
// the Hugging Face repository id whose config.json a preset is, unchanged ("meta-llama/Llama-3.1-8B").
// Otherwise a UsageError naming `flag` and the value, with rotary::suggest_presets(): "explain:
// --preset must be a built-in preset, see rotary presets (got "llama-3.1-7b"); did you mean
// llama-3.1-8b?". Empty optional when `or_nothing` and no preset matches (for --compare, whose
// items may also be paths).
std::optional<std::string> resolve_preset_name(const std::string& command, std::string_view flag,
                                               const std::string& given, bool or_nothing = false);

// A --config path: itself for a file, DIR/config.json for a folder (a UsageError naming both when
// the folder holds none).
std::string config_file_path(const std::string& command, std::string_view flag, const std::string& path);

// The candidate closest to `word` by edit distance, if close enough to be a likely slip (at most
// max(2, size / 3) edits), else empty. Ties go to the first candidate.
std::optional<std::string> nearest(std::string_view word, const std::vector<std::string>& candidates);

// True for the value "-": the output goes to stdout instead of a file.
inline bool is_stdout(const std::optional<std::string>& path) { return path && *path == "-"; }

// The spec to use: the config's main spec, or --layer-type NAME for per-layer-type configs.
const RopeSpec& select_spec(const LoadedConfig& loaded, const std::optional<std::string>& layer_type);

// --positions: a comma-separated list (0,1,4096) or a range FIRST:LAST = [FIRST, LAST), each in
// [0, kMaxPosition], at most 10^6; a UsageError naming `command` and --positions otherwise.
std::vector<int64_t> parse_positions(const std::string& command, const std::string& text);

// Formats a double compactly for tables: 6 significant digits, "inf" for infinity.
std::string format_number(double value, int significant = 6);

// printf-style formatting into a string, for the aligned tables commands write to out().
[[gnu::format(printf, 1, 2)]] std::string format_line(const char* format, ...);

}  // namespace rotary::cli
