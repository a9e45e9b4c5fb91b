// tests/support/golden_files.hpp: finding and reading the golden case files (tests/golden, see
// its README.md), the one loader the golden tests share. rotary verify-golden has its own in
// src/cpu/golden.cpp: it is part of the library, and tests must not be.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string_view>
#include <vector>

#include "core/json.hpp"

namespace rotary::test {

// tests/golden, or $ROTARY_GOLDEN_DIR when set. The golden tests fail (never skip) when it
// is missing: CI always has shared/ beside the checkout. ROTARY_GOLDEN_DIR is defined by
// tests/CMakeLists.txt for the binaries that read the cases.
inline std::filesystem::path golden_dir() {
  if (const char* env = std::getenv("ROTARY_GOLDEN_DIR"); env != nullptr && *env != '\0') return env;
  return ROTARY_GOLDEN_DIR;
}

enum class GoldenKind { Positive, Negative };

// The case files of one kind, sorted; empty when the directory is missing (the tests that need
// it assert that it exists). The kind is read from the name (neg_*.json are the negative cases)
// rather than by parsing 17 MB of JSON in every test process; the tests check the "kind" field
// of the files they read.
inline std::vector<std::filesystem::path> golden_files(GoldenKind kind) {
  std::vector<std::filesystem::path> files;
  const std::filesystem::path dir = golden_dir();
  if (!std::filesystem::is_directory(dir)) return files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".json") continue;
    const bool negative = entry.path().filename().string().rfind("neg_", 0) == 0;
    if (negative == (kind == GoldenKind::Negative)) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// A tensor member {"shape": [...], "data": [...]} of `parent`: its data flattened, row-major
// (empty when the member is absent: some tensors exist only for some cases), and its shape.
inline std::vector<double> tensor_data(const json::Value& parent, std::string_view key) {
  std::vector<double> out;
  const json::Value* tensor = parent.find(key);
  if (tensor == nullptr) return out;
  for (const json::Value& v : tensor->find("data")->as_array()) out.push_back(v.as_double());
  return out;
}

inline std::vector<int64_t> tensor_shape(const json::Value& parent, std::string_view key) {
  std::vector<int64_t> out;
  for (const json::Value& v : parent.find(key)->find("shape")->as_array()) out.push_back(v.as_int64());
  return out;
}

}  // namespace rotary::test
