// src/cpu/bandwidth/fma_peak.hpp: the arithmetic ceiling the compute-bound kernels (attention's
// prefill) are compared with, measured like the memory floors: with the kernels' Highway target,
// on the same machine, in the same run. Internal to rotary_bandwidth's users (`rotary bench`).
#pragma once

namespace rotary::bandwidth {

// float32 GFLOP/s of `threads` threads (one std::thread each beyond the caller) running
// independent fused multiply-adds for about `milliseconds`: 16 accumulator vectors per thread,
// enough to cover the FMA latency (4-5 cycles) times the FMA units (2) on current x86 and Arm
// cores, so the figure is the issue rate, not the latency. A multiply-add counts 2 flops. It is
// the ceiling of a float32 kernel on this target; the kernels' loads, exps and shuffles keep them
// below it. Like the streams, it first applies $ROTARY_CPU_TARGET once per process.
double fma_peak_gflop_per_s(int threads, double milliseconds = 50.0);

}  // namespace rotary::bandwidth
