// src/attention/backends.hpp: attention's backends, the rotation table's counterpart
// (src/cpu/backends.hpp explains the seam and why there are two tables).
#pragma once

#include <array>

#include "rotary/attention.hpp"
#include "rotary/tensor.hpp"
#include "attention/plan.hpp"
#include "cpu/backends.hpp"

namespace rotary::backends {

// `plan` is the checked call (make_plan): the views' extents and strides by name, the sequences
// and what their queries see. rope is null without fused RoPE. Every view is on the backend's
// device kind.
struct AttentionBackend {
  const char* name = "";
  DeviceKind kind = DeviceKind::CPU;
  void (*attention)(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                    const attention_internal::Plan& plan, const AttentionRope* rope) = nullptr;
};

// Defined in src/attention/attention.cpp: { "cpu", CPU, the Highway kernels }.
const std::array<AttentionBackend, 1>& attention_backends();

}  // namespace rotary::backends
