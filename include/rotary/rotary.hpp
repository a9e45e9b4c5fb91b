// include/rotary/rotary.hpp: the RoPE API in one include: a spec (by hand, from a Hugging Face
// config or a preset), its frequencies, the cos/sin table, tensor views and apply / apply_cos_sin,
// with the one error type. Everything here is rotary::core + rotary::cpu, so a program that links
// rotary::cpu can include it and use all of it.
//
// Left out on purpose: analysis.hpp and report.hpp are a separate library (rotary::analysis) that
// measures and draws RoPE rather than applying it; include them, and link rotary::analysis, to
// use them. File formats and test helpers (JSON, .npy, golden checks) are internal and not
// installed (src/core, src/cli, src/golden).
#pragma once

#include "rotary/apply.hpp"
#include "rotary/apply_cos_sin.hpp"
#include "rotary/error.hpp"
#include "rotary/frequencies.hpp"
#include "rotary/hf_config.hpp"
#include "rotary/presets.hpp"
#include "rotary/spec.hpp"
#include "rotary/table.hpp"
#include "rotary/tensor.hpp"
