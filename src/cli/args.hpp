// src/cli/args.hpp: the command line of one subcommand, and the shared --preset/--config source.
#pragma once

#include <cstdint>
#include <optional>
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

// Flags are --name VALUE or --name=VALUE; switches are --name. Every token must be consumed:
// finish() rejects what is left, naming it.
class Args {
 public:
  Args(std::string command, std::vector<std::string> tokens);

  std::optional<std::string> value(std::string_view flag);
  bool has_switch(std::string_view flag);
  // An integer flag in [minimum, maximum], e.g. --seq-len 4096.
  std::optional<int64_t> integer(std::string_view flag, int64_t minimum, int64_t maximum);
  // The next token that is not a flag (--...) and not yet consumed, e.g. verify-golden's DIR.
  std::optional<std::string> positional();
  void finish() const;
  const std::string& command() const { return command_; }

 private:
  std::string command_;
  std::vector<std::string> tokens_;
  std::vector<bool> used_;
};

// --preset NAME | --config FILE (at most one; neither = the default preset). Warnings from the
// config are printed to stderr as "rotary: warning: ...".
struct LoadedConfig {
  HfRopeConfig config;
  std::string source;  // "preset llama-3.1-8b" or the path
};
LoadedConfig load_config(Args& args);

// The spec to use: the config's main spec, or --layer-type NAME for per-layer-type configs.
const RopeSpec& select_spec(const LoadedConfig& loaded, const std::optional<std::string>& layer_type);

// Formats a double compactly for tables: 6 significant digits, "inf" for infinity.
std::string format_number(double value, int significant = 6);

}  // namespace rotary::cli
