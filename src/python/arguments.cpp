// src/python/arguments.cpp: see arguments.hpp.
#include "python/arguments.hpp"

#include "rotary/error.hpp"

namespace rotary::python {

void fail(const std::string& message) { throw Error(message); }

Direction parse_direction(const std::string& name) {
  if (name == "forward") return Direction::Forward;
  if (name == "backward") return Direction::Backward;
  fail("direction must be 'forward' or 'backward' (got '" + name + "')");
}

Precision parse_precision_or_fail(const std::string& name) {
  const auto precision = parse_precision(name);
  if (!precision) fail("precision must be 'exact', 'hf', 'ggml' or 'vllm' (got '" + name + "')");
  return *precision;
}

Style parse_style_or_fail(const std::string& name) {
  const auto style = parse_style(name);
  if (!style) fail("style must be 'neox' or 'gptj' (got '" + name + "')");
  return *style;
}

void check_implementation(const std::string& name) {
  if (name != "kernels" && name != "reference" && name != "checks") {
    fail("implementation must be 'kernels', 'reference' or 'checks' (got '" + name + "')");
  }
}

py::bytes floats_bytes(const std::vector<double>& values) {
  return py::bytes(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(double));
}

}  // namespace rotary::python
