// tests/cli/cli_runner.hpp: running the built `rotary` command from tests, as a user runs it.
// Needs ROTARY_CLI_PATH (the command's path) as a compile definition.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

namespace rotary::test {

struct CliResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

inline std::string read_all(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Runs the command with `arguments` (already shell-quoted where needed), stdin from /dev/null.
// `shell_prefix` goes before the command in the same /bin/sh line, for limits the command must
// run under: "trap '' XFSZ; ulimit -f 16; " (a file size limit that makes writes fail with
// EFBIG), "timeout 20 " (so that a command that would never end fails instead).
inline CliResult run_cli(const std::string& arguments, const std::string& shell_prefix = "") {
  static int counter = 0;
  const std::filesystem::path dir = std::filesystem::temp_directory_path();
  const std::string stem = "rotary_cli_run_" + std::to_string(::getpid()) + "_" + std::to_string(counter++);
  const std::filesystem::path out = dir / (stem + ".out");
  const std::filesystem::path err = dir / (stem + ".err");
  const std::string command = shell_prefix + std::string(ROTARY_CLI_PATH) + " " + arguments + " >" + out.string() +
                              " 2>" + err.string() + " </dev/null";
  const int status = std::system(command.c_str());
  CliResult result;
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result.out = read_all(out);
  result.err = read_all(err);
  std::filesystem::remove(out);
  std::filesystem::remove(err);
  return result;
}

// Writes `text` to a file in the temporary directory whose name ends with `name`.
inline std::filesystem::path write_temp(const std::string& name, const std::string& text) {
  const std::filesystem::path path = std::filesystem::temp_directory_path() / (std::to_string(::getpid()) + name);
  std::ofstream(path) << text;
  return path;
}

// A fresh directory under the temporary directory, removed with everything in it at the end of
// the scope.
struct ScratchDir {
  std::filesystem::path path;
  explicit ScratchDir(const std::string& name)
      : path(std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  std::string operator/(const std::string& name) const { return (path / name).string(); }
  // The names in the directory, sorted: shows a file left behind (a temporary file, a file named
  // after a flag).
  std::vector<std::string> names() const {
    std::vector<std::string> found;
    for (const auto& entry : std::filesystem::directory_iterator(path)) found.push_back(entry.path().filename().string());
    std::sort(found.begin(), found.end());
    return found;
  }
};

}  // namespace rotary::test
