// src/cli/run_cli.hpp: the whole `rotary` command as a function, so that it runs in-process.
//
// main() is run_cli(argv[1..], std::cout, std::cerr). Tests and the CLI fuzzer call it with
// string streams, and with Effects::ParseOnly when the command must only parse (args.hpp).
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "cli/args.hpp"

namespace rotary::cli {

// Runs one command line (without the program name) and returns the exit code: 0 success, 2 any
// error, with "rotary: error: <message>" on `err` (check: 1 on a violated property). Nothing
// is thrown: every exception a command raises becomes that message.
int run_cli(const std::vector<std::string>& tokens, std::ostream& out, std::ostream& err,
            Effects effects = Effects::Run);

// Every subcommand's name, in the order `rotary --help` lists them (for tests: each has a help).
std::vector<std::string> command_names();

}  // namespace rotary::cli
