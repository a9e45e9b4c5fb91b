// src/cli/bench_probe.hpp: what `rotary bench` learns about the machine it measures: the SIMD
// target it runs with, the core's effective clock, and how much CPU other processes took.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace rotary::cli::bench {

// ---- the target --------------------------------------------------------------------------------

// The canonical name of a --target value (case-insensitive), or a UsageError listing the targets
// compiled in that this CPU supports.
std::string resolve_target(const std::string& requested);

// rotary::apply forces $ROTARY_CPU_TARGET at its first call (and the streams at theirs), after
// any --target was forced: a --target that names another target would label rows with a target
// they did not run with, so it is a UsageError.
void check_target_environment(const std::optional<std::string>& target);

// Restores the thread count and the automatic target choice however the command ends.
class SettingsGuard {
 public:
  SettingsGuard();
  ~SettingsGuard();
  SettingsGuard(const SettingsGuard&) = delete;
  SettingsGuard& operator=(const SettingsGuard&) = delete;
  void forced() { forced_ = true; }

 private:
  int threads_;
  bool forced_ = false;
};

// ---- the CPU ------------------------------------------------------------------------------------

// /proc/cpuinfo's "model name" of the first CPU ("unknown" where there is none), and the flags
// among its "flags" that decide which kernels run (sse4_2 avx2 fma f16c avx512f avx512bw avx512dq
// avx512vl avx512_bf16 avx512_fp16 avx512_vnni amx_bf16 amx_tile, and Arm's asimd sve), in that
// order, space-separated.
std::string cpu_model_name();
std::string cpu_simd_flags();

// ---- how quiet the machine was -----------------------------------------------------------------

// CPU time of every process (from /proc/stat) and of this one and its children (getrusage), so
// that the run can say how much of the machine other processes took while it measured: a
// benchmark on 2 cores next to a compiler is not a measurement of the kernels.
struct CpuSnapshot {
  double all_busy_s = -1.0;  // -1: /proc/stat unreadable
  double steal_s = 0.0;
  double own_s = 0.0;
  std::chrono::steady_clock::time_point when = std::chrono::steady_clock::now();
};
CpuSnapshot cpu_snapshot();

// "other processes used 3% of the 2 CPUs during this run", with a warning above 5%; empty when
// /proc/stat could not be read.
std::string contention_line(const CpuSnapshot& before, const CpuSnapshot& after);

// Other processes' CPU use plus hypervisor steal between two snapshots, in percent of all CPUs
// (the figure contention_line judges); NaN when /proc/stat could not be read or the interval is
// under 50 ms (too short to say).
double other_cpu_percent(const CpuSnapshot& before, const CpuSnapshot& after);

// ---- how fast the core ran ---------------------------------------------------------------------

// A chain of dependent integer additions, timed for about 20 ms: one addition per cycle on any
// x86-64 or AArch64 core, so the rate is the core's effective clock in GHz. On the AMD EPYC VM it
// moved between 1.4 and 3.2 within the same hour (the host's use of the core's other
// hyperthread is the likely cause: a VM cannot see it), and the kernels that are bound by
// arithmetic rather than memory (bf16, f16) move with it while the copy floor does not. NaN where
// there is no such instruction to time.
double add_chain_ghz(int64_t adds = 40'000'000);

// Per row a shorter chain (5-10 ms): the clock just before the row is timed.
constexpr int64_t kRowClockAdds = 10'000'000;

// The clock at the start and the end, for people; empty where it was not measured.
std::string core_clock_line(double at_start_ghz, double at_end_ghz);


}  // namespace rotary::cli::bench
