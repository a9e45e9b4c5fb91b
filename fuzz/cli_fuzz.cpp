// fuzz/cli_fuzz.cpp: the command line (src/cli: run_cli's dispatch, Args, every command's flag
// parsing and checks) on argv vectors built from fuzz bytes.
//
// The input is the argument list without the program name, arguments separated by NUL bytes
// (fuzz/cli.dict holds the commands, flags and values as tokens). Commands run with
// Effects::ParseOnly: they parse and check their flags, read --config, and stop before reading
// inputs, writing files, timing or changing threads. Every '/' becomes '_', so a path can only
// name a file in the sandbox directory the target works in (config.json, gemma.json, bad.json,
// big.json are there; see cli_sandbox.hpp).
//
// Properties: no arguments print the usage and exit 2; otherwise the exit code is 0 or 2 (1 is
// `check` finding a violation, which parsing never reaches); 2 comes with
// "rotary: error: <message>\n" on stderr, after at most warnings; 0 with nothing on stderr but
// warnings ("rotary: warning: ...").
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "cli_sandbox.hpp"
#include "fuzz_support.hpp"
#include "cli/run_cli.hpp"

namespace rotary::fuzz {

int cli_one_input(const uint8_t* data, size_t size) {
  std::vector<std::string> tokens(1);
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == 0) {
      tokens.emplace_back();
    } else {
      tokens.back() += data[i] == '/' ? '_' : static_cast<char>(data[i]);
    }
  }
  if (size == 0) tokens.clear();
  if (tokens.size() > 64) return 0;
  std::ostringstream out, err;
  const int code = cli::run_cli(tokens, out, err, cli::Effects::ParseOnly);
  const std::string errors = err.str();
  require(code == 0 || code == 2, "the exit code is 0 or 2", std::to_string(code));
  // No arguments at all: the usage on stdout, exit 2.
  if (tokens.empty()) {
    require(code == 2 && !out.str().empty() && errors.empty(), "no arguments print the usage and exit 2");
    return 0;
  }
  // Warnings (from reading the config) may come first; an error is the last thing printed. A
  // message can span lines when it quotes a token that holds a newline.
  if (code == 2) {
    const size_t at = errors.find("rotary: error: ");
    require(at != std::string::npos && errors.size() > at + 15 && errors.back() == '\n',
            "exit 2 prints \"rotary: error: <message>\\n\"", errors);
    require(at == 0 || starts_with(errors, "rotary: warning: "), "only warnings precede the error", errors);
  } else {
    require(errors.empty() || starts_with(errors, "rotary: warning: "), "exit 0 prints at most warnings", errors);
  }
  return 0;
}

}  // namespace rotary::fuzz

#ifndef ROTARY_FUZZ_NO_MAIN
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  static const rotary::fuzz::Sandbox sandbox;  // removed at exit
  return 0;
}
#endif

ROTARY_FUZZ_ENTRY(rotary::fuzz::cli_one_input)
