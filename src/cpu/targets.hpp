// src/cpu/targets.hpp: how the SIMD target and the per-CPU tuning are chosen (internal to
// rotary_cpu and its internal libraries). The public side is in include/rotary/apply.hpp:
// cpu_targets(), force_cpu_target(), current_cpu_target().
//
// Environment, read once per process:
//   ROTARY_CPU_TARGET   a target name to force (as force_cpu_target); applied before the first
//                       call that dispatches or reports targets, so an explicit
//                       force_cpu_target() afterwards wins, and the kernels and the bandwidth
//                       streams (src/cpu/bandwidth) always run with one target.
//   ROTARY_HEAD_GROUPS  the most page groups the kernels interleave heads by (kernels.hpp,
//                       max_head_groups).
//   ROTARY_NUM_THREADS  the default thread count (src/cpu/thread_pool.cpp).
#pragma once

namespace rotary::cpu {

// Forces $ROTARY_CPU_TARGET the first time it is called in the process (nothing if unset). An
// unknown name throws rotary::Error naming the choices, and the next call tries again.
void apply_target_from_environment();

}  // namespace rotary::cpu
