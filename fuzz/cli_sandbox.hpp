// fuzz/cli_sandbox.hpp: the working directory of the CLI fuzz target and of its replay test.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

#include "fuzz_support.hpp"
#include "rotary/presets.hpp"

namespace rotary::fuzz {

// A fresh directory holding the files the dictionary names, as the working directory while
// it lives; the destructor goes back and removes it.
class Sandbox {
 public:
  Sandbox() : previous_(std::filesystem::current_path()) {
    std::string pattern = (std::filesystem::temp_directory_path() / "rotary-cli-fuzz-XXXXXX").string();
    require(::mkdtemp(pattern.data()) != nullptr, "mkdtemp for the CLI sandbox");
    path_ = pattern;
    std::filesystem::current_path(path_);
    std::ofstream("config.json") << preset_config_json("llama-3.1-8b");
    std::ofstream("gemma.json") << preset_config_json("gemma-3-27b");
    std::ofstream("bad.json") << "{\"rope_theta\": NaN, \"head_dim\": 7,";
    std::ofstream("big.json").close();
    std::filesystem::resize_file("big.json", std::uintmax_t{70} << 20);  // sparse, past ParseOptions::max_bytes
  }
  ~Sandbox() {
    std::error_code ignored;
    std::filesystem::current_path(previous_, ignored);
    std::filesystem::remove_all(path_, ignored);
  }
  Sandbox(const Sandbox&) = delete;
  Sandbox& operator=(const Sandbox&) = delete;

 private:
  std::filesystem::path previous_;
  std::filesystem::path path_;
};

}  // namespace rotary::fuzz
