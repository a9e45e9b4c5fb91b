// src/core/scaling/registry.cpp: the one list of scaling schemes.
//
// A new scheme: its file in this folder (docs/design.md, "Adding a scaling scheme"), its declaration and
// its row below, in ScalingType order.
#include "core/scaling/registry.hpp"

#include <cstddef>

#include "rotary/error.hpp"

namespace rotary::scaling {

ScalingScheme default_scheme();       // default.cpp
ScalingScheme linear_scheme();        // linear.cpp
ScalingScheme dynamic_scheme();       // dynamic.cpp
ScalingScheme ntk_alpha_scheme();     // ntk_alpha.cpp
ScalingScheme yarn_scheme();          // yarn.cpp
ScalingScheme longrope_scheme();      // longrope.cpp
ScalingScheme llama3_scheme();        // llama3.cpp
ScalingScheme proportional_scheme();  // proportional.cpp

std::span<const ScalingScheme> schemes() {
  // Built on first use (a function-local static), so no file's static initialization depends
  // on another's.
  static const ScalingScheme rows[] = {
      default_scheme(), linear_scheme(),   dynamic_scheme(), ntk_alpha_scheme(),
      yarn_scheme(),    longrope_scheme(), llama3_scheme(),  proportional_scheme(),
  };
  return rows;
}

const ScalingScheme& scheme(ScalingType type) {
  // Rows are in ScalingType order (tests/core/scaling_registry_test.cpp checks it). A value
  // outside the enum (a cast) has no row.
  const auto index = static_cast<size_t>(type);
  const std::span<const ScalingScheme> all = schemes();
  if (index >= all.size()) {
    throw Error(detail::concat("scaling scheme: ScalingType ", static_cast<int>(type), " has no row in the registry"));
  }
  return all[index];
}

const ScalingScheme* find_scheme(std::string_view name) {
  for (const ScalingScheme& row : schemes()) {
    if (name == row.name || (!row.alias.empty() && name == row.alias)) return &row;
  }
  return nullptr;
}

}  // namespace rotary::scaling
