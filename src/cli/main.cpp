// src/cli/main.cpp: the `rotary` command. run_cli.cpp dispatches to one file per subcommand.
//
// Exit codes: 0 success, 2 any error (bad arguments, invalid config, unreadable file), with
// "rotary: error: <message>" on stderr. Warnings go to stderr as "rotary: warning: <message>".
#include <iostream>
#include <string>
#include <vector>

#include "cli/run_cli.hpp"

int main(int argc, char** argv) {
  return rotary::cli::run_cli(std::vector<std::string>(argv + 1, argv + argc), std::cout, std::cerr);
}
