// src/cli/bench_probe.cpp: the machine `rotary bench` measures (bench_probe.hpp).
#include "cli/bench_probe.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <iterator>
#include <set>
#include <sstream>
#include <thread>
#include <string>
#include <vector>

#include "cli/args.hpp"
#include "rotary/apply.hpp"
#include "rotary/error.hpp"

namespace rotary::cli::bench {

std::string resolve_target(const std::string& requested) {
  const std::vector<std::string> available = cpu_targets();
  const auto upper = [](std::string text) {
    for (char& c : text) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return text;
  };
  std::string names;
  for (const std::string& name : available) {
    if (upper(name) == upper(requested)) return name;
    names += (names.empty() ? "" : ", ") + name;
  }
  throw UsageError(detail::concat("bench: --target must be one of the targets compiled in that this CPU supports (",
                                  names, ") (got \"", requested, "\")"));
}

void check_target_environment(const std::optional<std::string>& target) {
  const char* env = std::getenv("ROTARY_CPU_TARGET");
  if (!target || env == nullptr || *env == '\0' || *target == env) return;
  throw UsageError(detail::concat("bench: --target must agree with $ROTARY_CPU_TARGET, which rotary::apply forces at",
                                  " its first call (got --target ", *target, " and ROTARY_CPU_TARGET=", env, ")"));
}

SettingsGuard::SettingsGuard() : threads_(num_threads()) {}

SettingsGuard::~SettingsGuard() {
  try {
    set_num_threads(threads_);
    if (forced_) force_cpu_target("");
  } catch (...) {  // never throw from a destructor; the process is ending anyway
  }
}

CpuSnapshot cpu_snapshot() {
  CpuSnapshot snapshot;
  const double tick_s = 1.0 / static_cast<double>(sysconf(_SC_CLK_TCK));
  if (std::FILE* file = std::fopen("/proc/stat", "r"); file != nullptr) {
    unsigned long long user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
    if (std::fscanf(file, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &user, &nice, &system, &idle, &iowait, &irq,
                    &softirq, &steal) == 8) {
      snapshot.all_busy_s = static_cast<double>(user + nice + system + irq + softirq) * tick_s;
      snapshot.steal_s = static_cast<double>(steal) * tick_s;
    }
    std::fclose(file);
  }
  for (int who : {RUSAGE_SELF, RUSAGE_CHILDREN}) {
    rusage usage{};
    getrusage(who, &usage);
    snapshot.own_s += static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
                      static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) * 1e-6;
  }
  return snapshot;
}

namespace {

// The value of the first "<key>\t: value" line of /proc/cpuinfo, or "" where there is none.
std::string cpuinfo_field(const std::string& key) {
  std::FILE* file = std::fopen("/proc/cpuinfo", "r");
  if (file == nullptr) return "";
  std::string value;
  std::string line;
  char buffer[8192];
  while (std::fgets(buffer, sizeof buffer, file) != nullptr) {
    line = buffer;
    if (line.rfind(key, 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    value = line.substr(colon + 1);
    break;
  }
  std::fclose(file);
  while (!value.empty() && std::isspace(static_cast<unsigned char>(value.front()))) value.erase(value.begin());
  while (!value.empty() && std::isspace(static_cast<unsigned char>(value.back()))) value.pop_back();
  return value;
}

}  // namespace

std::string cpu_model_name() {
  const std::string model = cpuinfo_field("model name");
  return model.empty() ? "unknown" : model;
}

std::string cpu_simd_flags() {
  std::string line = cpuinfo_field("flags");
  if (line.empty()) line = cpuinfo_field("Features");  // Arm
  std::istringstream words(line);
  const std::set<std::string> present{std::istream_iterator<std::string>(words), std::istream_iterator<std::string>()};
  std::string chosen;
  for (const char* flag : {"sse4_2", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512_bf16",
                           "avx512_fp16", "avx512_vnni", "amx_bf16", "amx_tile", "asimd", "sve"}) {
    if (present.count(flag) == 0) continue;
    chosen.append(chosen.empty() ? 0 : 1, ' ').append(flag);
  }
  return chosen;
}

std::string contention_line(const CpuSnapshot& before, const CpuSnapshot& after) {
  if (before.all_busy_s < 0 || after.all_busy_s < 0) return "";
  const double wall_s = std::chrono::duration<double>(after.when - before.when).count();
  const double cpus = static_cast<double>(std::max(1u, std::thread::hardware_concurrency()));
  const double others = std::max(0.0, (after.all_busy_s - before.all_busy_s) - (after.own_s - before.own_s));
  const double others_percent = 100.0 * others / (wall_s * cpus);
  const double steal_percent = 100.0 * (after.steal_s - before.steal_s) / (wall_s * cpus);
  std::string line = detail::concat("other processes used ", format_number(others_percent, 2), "% of the ", cpus,
                                    " CPUs during this run (hypervisor steal ", format_number(steal_percent, 2), "%)");
  if (others_percent + steal_percent > 5.0) {
    line += ": times and GB/s are slower than on a quiet machine (the ratios less so: each is timed in alternation"
            " with its stream); rerun on a quiet machine for absolute figures";
  }
  return line;
}

double other_cpu_percent(const CpuSnapshot& before, const CpuSnapshot& after) {
  const double wall_s = std::chrono::duration<double>(after.when - before.when).count();
  if (before.all_busy_s < 0 || after.all_busy_s < 0 || wall_s < 0.05) return std::nan("");
  const double cpus = static_cast<double>(std::max(1u, std::thread::hardware_concurrency()));
  const double others = std::max(0.0, (after.all_busy_s - before.all_busy_s) - (after.own_s - before.own_s));
  return 100.0 * (others + (after.steal_s - before.steal_s)) / (wall_s * cpus);
}

double add_chain_ghz(int64_t adds) {
#if defined(__x86_64__) || defined(__aarch64__)
  uint64_t value = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < adds; ++i) {
#if defined(__x86_64__)
    asm volatile("add $1, %0" : "+r"(value));
#else
    asm volatile("add %0, %0, #1" : "+r"(value));
#endif
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return static_cast<double>(adds) / seconds / 1e9;
#else
  (void)adds;
  return std::nan("");
#endif
}

std::string core_clock_line(double at_start_ghz, double at_end_ghz) {
  if (std::isnan(at_start_ghz) || std::isnan(at_end_ghz)) return "";
  return detail::concat("core: dependent additions ran at ", format_number(at_start_ghz, 3), " per ns at the start, ",
                        format_number(at_end_ghz, 3),
                        " at the end (the effective clock in GHz; bf16 and f16 rows, bound by arithmetic, move with"
                        " it)");
}


}  // namespace rotary::cli::bench
