// src/cli/run_cli.cpp: the `rotary` command line: dispatch to one file per subcommand.
//
// Exit codes: 0 success, 2 any error (bad arguments, invalid config, unreadable file), with
// "rotary: error: <message>" on err. Warnings go to err as "rotary: warning: <message>".
#include "cli/run_cli.hpp"

#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "rotary/error.hpp"

namespace {

constexpr const char* kUsage =
    "usage: rotary <command> [options]\n"
    "\n"
    "Rotary Position Embedding (RoPE): frequencies, tables and kernels for every variant.\n"
    "\n"
    "commands:\n"
    "  presets   list the built-in model presets\n"
    "  freqs     print inv_freq and attention scaling of a preset or config.json\n"
    "  explain   explain, for a person, what a model's RoPE does to each pair\n"
    "  table     print cos/sin table rows (exact, or Hugging Face's float32 numerics)\n"
    "  apply     rotate q and k read from .npy files, write the results as .npy\n"
    "  verify-golden DIR   check rotary against Hugging Face golden vectors\n"
    "  check     run RoPE's property checks (norm, relative position, decay, pairing); exit 1 on a violation\n"
    "  bench     time the kernels against this machine's copy bandwidth, and PyTorch\n"
    "  report    write an HTML page of plots (frequencies, angles, similarity, decay, scaling, coverage)\n"
    "  diagnose  infer what an unknown implementation does from .npy samples; name mismatches with a model\n"
    "  attention run random q, k, v through prefill and decode of rotary's attention (RoPE, none,\n"
    "            sinusoidal, learned, ALiBi); compare with the float64 reference; time it\n"
    "  convert-weights  reorder a safetensors checkpoint's q/k rows between interleaved and half-split pairing\n"
    "  export    write a model's exact table in an engine's layout (vLLM, FlashInfer, flash-attn, TE, llama.cpp)\n"
    "  diverge   each engine's numerics (Hugging Face, ggml, vLLM) against the exact table, by position and pair\n"
    "\n"
    "rotary help COMMAND (or rotary COMMAND --help) explains a command; rotary -V (--version)\n"
    "prints the version. A command given neither --preset nor --config uses the default preset,\n"
    "llama-3.1-8b. --preset takes a preset's name in any case or its Hugging Face repository id\n"
    "(meta-llama/Llama-3.1-8B); --config a config.json or a model folder holding one.\n";

struct Command {
  const char* name;
  int (*run)(rotary::cli::Args&);
  const char* const* help;
};

const Command kCommands[] = {
    {"presets", rotary::cli::run_presets, &rotary::cli::kPresetsHelp},
    {"freqs", rotary::cli::run_freqs, &rotary::cli::kFreqsHelp},
    {"explain", rotary::cli::run_explain, &rotary::cli::kExplainHelp},
    {"table", rotary::cli::run_table, &rotary::cli::kTableHelp},
    {"apply", rotary::cli::run_apply, &rotary::cli::kApplyHelp},
    {"verify-golden", rotary::cli::run_verify_golden, &rotary::cli::kVerifyGoldenHelp},
    {"check", rotary::cli::run_check, &rotary::cli::kCheckHelp},
    {"bench", rotary::cli::run_bench, &rotary::cli::kBenchHelp},
    {"report", rotary::cli::run_report, &rotary::cli::kReportHelp},
    {"diagnose", rotary::cli::run_diagnose, &rotary::cli::kDiagnoseHelp},
    {"attention", rotary::cli::run_attention, &rotary::cli::kAttentionHelp},
    {"convert-weights", rotary::cli::run_convert_weights, &rotary::cli::kConvertWeightsHelp},
    {"export", rotary::cli::run_export, &rotary::cli::kExportHelp},
    {"diverge", rotary::cli::run_diverge, &rotary::cli::kDivergeHelp},
};

}  // namespace

namespace rotary::cli {

std::vector<std::string> command_names() {
  std::vector<std::string> names;
  for (const Command& command : kCommands) names.emplace_back(command.name);
  return names;
}

namespace {

// The command names in table order, comma-separated: the one list every message quotes.
std::string command_list() {
  std::string list;
  for (const Command& command : kCommands) list += (list.empty() ? "" : ", ") + std::string(command.name);
  return list;
}

// "command must be one of ... (got "explian"); did you mean explain?".
int unknown_command(const std::string& what, const std::string& given, std::ostream& err) {
  const std::optional<std::string> near = nearest(given, command_names());
  err << "rotary: error: " << what
      << " must be one of " << command_list() << " (got \"" << given
      << "\")" << (near ? "; did you mean " + *near + "?" : std::string()) << " (see rotary --help)\n";
  return 2;
}

}  // namespace

int run_cli(const std::vector<std::string>& tokens, std::ostream& out, std::ostream& err, Effects effects) {
  if (tokens.empty() || tokens[0] == "--help" || tokens[0] == "-h" || (tokens[0] == "help" && tokens.size() == 1)) {
    out << kUsage;
    return tokens.empty() ? 2 : 0;
  }
  if (tokens[0] == "help") {  // rotary help COMMAND
    if (tokens.size() > 2) {
      err << "rotary: error: help takes one command (got " << tokens.size() - 1 << " arguments: " << tokens[1] << " "
          << tokens[2] << (tokens.size() > 3 ? " ..." : "") << ")\n";
      return 2;
    }
    for (const Command& command : kCommands) {
      if (tokens[1] == command.name) {
        out << *command.help;
        return 0;
      }
    }
    return unknown_command("help: COMMAND", tokens[1], err);
  }
  if (tokens[0] == "--version" || tokens[0] == "-V") {
    out << "rotary " << ROTARY_VERSION << "\n";  // CMake's project(VERSION): the one version string
    return 0;
  }
  for (const Command& command : kCommands) {
    if (tokens[0] != command.name) continue;
    const std::vector<std::string> rest(tokens.begin() + 1, tokens.end());
    for (const std::string& token : rest) {
      if (token == "--help" || token == "-h") {
        out << *command.help;
        return 0;
      }
    }
    try {
      Args args(command.name, rest, out, err, effects);
      return command.run(args);
    } catch (const std::exception& e) {
      out.flush();
      err << "rotary: error: " << e.what() << "\n";
      return 2;
    }
  }
  return unknown_command("command", tokens[0], err);
}

}  // namespace rotary::cli
