// include/rotary/rotary.hpp: everything public in one include.
#pragma once

#include "rotary/apply.hpp"
#include "rotary/error.hpp"
#include "rotary/frequencies.hpp"
#include "rotary/hf_config.hpp"
#include "rotary/presets.hpp"
#include "rotary/spec.hpp"
#include "rotary/table.hpp"
#include "rotary/tensor.hpp"
