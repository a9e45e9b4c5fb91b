// src/analysis/rotation_only.hpp: the spec the rotation checks use, shared by the checks in
// analysis.cpp, convention.cpp and checks.cpp. Internal to rotary_analysis (not installed).
#pragma once

#include "rotary/spec.hpp"

namespace rotary::detail {

// The spec the rotation checks use: xPos is a per-position scale of q and k, not a rotation.
RopeSpec rotation_only(const RopeSpec& spec);

}  // namespace rotary::detail
