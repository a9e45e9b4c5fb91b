// src/core/scaling/hf_reader.hpp: typed reads of a Hugging Face config.json (internal).
//
// HfFieldReader is the part of hf_config.cpp's reader that every scheme's read_hf_config needs:
// the messages (each names the file, the line, the field and the value) and the typed reads.
// HfScalingReader hands one rope_scaling / rope_parameters dict to a scheme.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/json.hpp"
#include "rotary/error.hpp"

namespace rotary::scaling {

// A JSON value and the path a user would use to find it in the file ("rope_scaling.factor").
struct Field {
  const json::Value* value = nullptr;
  std::string path;

  explicit operator bool() const { return value != nullptr; }
  bool present_non_null() const { return value != nullptr && !value->is_null(); }
};

class HfFieldReader {
 public:
  HfFieldReader(std::string_view source, std::vector<std::string> warnings)
      : source_(source), warnings_(std::move(warnings)) {}

  // ---- messages -----------------------------------------------------------------------------
  template <typename... Parts>
  [[noreturn]] void fail_at(const json::Value* where, Parts&&... parts) const {
    std::string prefix(source_);
    if (where != nullptr && where->location().line > 0) prefix += ":" + std::to_string(where->location().line);
    throw ConfigError(detail::concat(prefix, ": ", std::forward<Parts>(parts)...));
  }
  template <typename... Parts>
  void warn(Parts&&... parts) {
    warnings_.push_back(detail::concat(source_, ": ", std::forward<Parts>(parts)...));
  }
  // For what transformers warns about in a config that is correct as published (HfRopeConfig::notes).
  template <typename... Parts>
  void note(Parts&&... parts) {
    notes_.push_back(detail::concat(source_, ": ", std::forward<Parts>(parts)...));
  }

  static Field member(const Field& object, std::string_view key) {
    if (!object.present_non_null() || !object.value->is_object()) return {};
    const json::Value* v = object.value->find(key);
    if (v == nullptr) return {};
    return {v, object.path + "." + std::string(key)};
  }

  // ---- typed reads (each names the field and the value on failure) ---------------------------
  double number(const Field& f, std::string_view expectation = "a number") const {
    if (!f.value->is_number()) fail_at(f.value, f.path, " must be ", expectation, " (got ", f.value->describe(), ")");
    return f.value->as_double();
  }
  double finite_number(const Field& f, std::string_view expectation = "a finite number") const {
    const double v = number(f, expectation);
    if (!std::isfinite(v)) fail_at(f.value, f.path, " must be ", expectation, " (got ", v, ")");
    return v;
  }
  double number_at_least(const Field& f, double minimum, bool inclusive) const {
    const std::string expectation =
        detail::concat("a finite number ", inclusive ? ">= " : "> ", minimum);
    const double v = finite_number(f, expectation);
    if (inclusive ? v < minimum : v <= minimum) fail_at(f.value, f.path, " must be ", expectation, " (got ", v, ")");
    return v;
  }
  int64_t positive_integer(const Field& f) const {
    const double v = finite_number(f, "a positive integer");
    if (f.value->is_integer()) {
      const int64_t i = f.value->as_int64();
      if (i <= 0) fail_at(f.value, f.path, " must be a positive integer (got ", i, ")");
      return i;
    }
    // 4096.0 is accepted: Python writes ints that passed through float that way.
    if (v <= 0 || v != std::floor(v) || v > 9.0e15) {
      fail_at(f.value, f.path, " must be a positive integer (got ", f.value->describe(), ")");
    }
    return static_cast<int64_t>(v);
  }
  bool boolean(const Field& f) const {
    if (!f.value->is_bool()) fail_at(f.value, f.path, " must be true or false (got ", f.value->describe(), ")");
    return f.value->as_bool();
  }
  std::string string(const Field& f) const {
    if (!f.value->is_string()) fail_at(f.value, f.path, " must be a string (got ", f.value->describe(), ")");
    return f.value->as_string();
  }

 protected:
  std::string source_;
  std::vector<std::string> warnings_;
  std::vector<std::string> notes_;
};

// One rope_scaling / rope_parameters dict, as a scheme's read_hf_config sees it.
struct HfScalingReader {
  HfFieldReader& config;            // messages and typed reads
  Field params;                     // the dict
  std::string type_text;            // "rope_type 'yarn'", for messages
  int64_t max_position_embeddings;  // the config's (0 = absent)
  bool original_max_at_top_level;   // Phi-3 keeps original_max_position_embeddings at top level
  bool per_layer_type;              // the dict is one of several keyed by layer type

  Field member(std::string_view key) const { return HfFieldReader::member(params, key); }
};

}  // namespace rotary::scaling
