// src/python/arguments.hpp: the name arguments every binding parses the same way (direction,
// precision, style, implementation), each refused in one message that names the argument and
// the value, and float64 results handed back as bytes.
#pragma once

#include <pybind11/pybind11.h>
// Every file of the module converts with the same casters: a file without stl.h would compile a
// cast to std::vector and fail it at run time (and pybind11 needs one set of casters per type
// across the module).
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "rotary/apply.hpp"
#include "rotary/spec.hpp"
#include "rotary/table.hpp"

namespace rotary::python {

namespace py = pybind11;

// Throws rotary::Error (rotary.RotaryError in Python) with `message`.
[[noreturn]] void fail(const std::string& message);

Direction parse_direction(const std::string& name);               // "forward" or "backward"
Precision parse_precision_or_fail(const std::string& name);       // parse_precision's names
Style parse_style_or_fail(const std::string& name);               // parse_style's names
// "kernels" (the fast path), "reference" (the float64 definition), or "checks" (only the
// argument checks: the pure-torch paths check the same way, then torch computes).
void check_implementation(const std::string& name);

// float64 values as raw bytes, for the Python side to view with NumPy (no copy there).
py::bytes floats_bytes(const std::vector<double>& values);

}  // namespace rotary::python
