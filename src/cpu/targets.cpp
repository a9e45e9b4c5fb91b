// src/cpu/targets.cpp: the SIMD target the kernels run (Highway's runtime dispatch, plus
// AVX3_BF16, AVX3 with the CPU's bf16 conversions, on CPUs that have them; forced by name for
// tests and benchmarks) and the per-CPU head order; the environment variables that
// set them (src/cpu/targets.hpp).
#include "cpu/targets.hpp"

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#endif

#include "hwy/highway.h"
#include "hwy/targets.h"
#include "rotary/apply.hpp"
#include "rotary/error.hpp"
#include "cpu/kernels.hpp"

namespace rotary {

namespace {

// ---- head order -------------------------------------------------------------------------------

std::atomic<int64_t> g_max_head_groups{0};  // 0: the default (below), decided at first use

int64_t default_max_head_groups() {
  if (const char* env = std::getenv("ROTARY_HEAD_GROUPS"); env != nullptr && *env != '\0') {
    char* end = nullptr;
    const long n = std::strtol(env, &end, 10);
    if (end != env && *end == '\0' && n >= 1 && n <= 8) return n;
    throw Error(detail::concat("ROTARY_HEAD_GROUPS must be an integer in [1, 8] (got \"", env, "\")"));
  }
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
  // Measured on one machine of each (kernels.hpp, head_groups; docs/performance.md).
  __builtin_cpu_init();
  if (__builtin_cpu_is("intel")) return 4;
#endif
  return 1;
}

// ---- bf16 with the CPU's own conversions -------------------------------------------------------

// The target of rotate_kernels_bf16_hw.cpp: Highway's AVX3 with AVX512_BF16 conversions.
constexpr std::string_view kBf16HardwareTarget = "AVX3_BF16";
constexpr std::string_view kBf16HardwareBase = "AVX3";

// Whether this CPU and OS run AVX3_BF16's instructions: AVX-512 F, DQ, BW, VL (Highway's AVX3)
// and AVX512_BF16 (CPUID leaf 7 subleaf 1, EAX bit 5), with the OS saving the AVX-512 state
// (XCR0 bits 1, 2 and 5-7: SSE, AVX, opmask, the upper ZMM halves, ZMM16-31).
bool cpu_runs_bf16_hardware() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0 || (ecx & bit_OSXSAVE) == 0) return false;
  if (__get_cpuid_max(0, nullptr) < 7) return false;
  __cpuid_count(7, 0, eax, ebx, ecx, edx);
  const unsigned max_subleaf = eax;
  constexpr unsigned kAvx3 = (1u << 16) | (1u << 17) | (1u << 30) | (1u << 31);  // F, DQ, BW, VL
  if ((ebx & kAvx3) != kAvx3 || max_subleaf < 1) return false;
  __cpuid_count(7, 1, eax, ebx, ecx, edx);
  if ((eax & (1u << 5)) == 0) return false;  // AVX512_BF16
  unsigned xcr0 = 0, xcr0_high = 0;
  __asm__("xgetbv" : "=a"(xcr0), "=d"(xcr0_high) : "c"(0));
  return (xcr0 & 0xE6u) == 0xE6u;
#else
  return false;
#endif
}

// 0: not decided yet (the automatic choice, made at first use), 1: off, 2: on.
std::atomic<int> g_bf16_hardware{0};

void set_bf16_hardware(bool on) { g_bf16_hardware.store(on ? 2 : 1, std::memory_order_relaxed); }

// ---- targets ----------------------------------------------------------------------------------

std::mutex g_target_mutex;

int64_t target_bit(std::string_view name) {
  if (name == kBf16HardwareTarget) {
    if (!cpu::bf16_hardware_available()) return 0;
    name = kBf16HardwareBase;
  }
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    if (name == hwy::TargetName(target)) return target;
  }
  return 0;
}

std::vector<std::string> names_of_supported_targets() {
  std::vector<std::string> names;
  if (cpu::bf16_hardware_available()) names.emplace_back(kBf16HardwareTarget);  // the best: first
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) names.emplace_back(hwy::TargetName(target));
  return names;
}

// Every compiled target this CPU supports, whatever is forced: read once, before the first force
// narrows what Highway reports (guarded by g_target_mutex).
std::vector<std::string> g_all_targets;

const std::vector<std::string>& all_targets_locked() {
  if (g_all_targets.empty()) {
    // Empty only before the first force (force_target fills it after its reset): nothing is
    // forced, so Highway reports every supported target.
    g_all_targets = names_of_supported_targets();
  }
  return g_all_targets;
}

// force_cpu_target without the environment step (which itself forces a target).
void force_target(std::string_view name) {
  std::lock_guard<std::mutex> lock(g_target_mutex);
  if (name.empty()) {
    hwy::SetSupportedTargetsForTest(0);
    hwy::GetChosenTarget().Update(hwy::SupportedTargets());
    set_bf16_hardware(cpu::bf16_hardware_available());
    return;
  }
  // Look among every compiled target this CPU supports, not only the currently forced one.
  hwy::SetSupportedTargetsForTest(0);
  const std::vector<std::string>& all = all_targets_locked();
  const int64_t bit = target_bit(name);
  if (bit == 0) {
    hwy::GetChosenTarget().Update(hwy::SupportedTargets());
    std::string names;
    for (const std::string& n : all) names += (names.empty() ? "" : ", ") + n;
    throw Error(detail::concat("force_cpu_target: name must be one of ", names, " (got \"", name, "\")"));
  }
  hwy::SetSupportedTargetsForTest(bit);
  hwy::GetChosenTarget().Update(hwy::SupportedTargets());
  set_bf16_hardware(name == kBf16HardwareTarget);
}

}  // namespace

void cpu::apply_target_from_environment() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (const char* env = std::getenv("ROTARY_CPU_TARGET"); env != nullptr && *env != '\0') force_target(env);
  });
}

bool cpu::bf16_hardware_available() {
  static const bool available = bf16_hardware_compiled() && cpu_runs_bf16_hardware();
  return available;
}

bool cpu::bf16_hardware_in_use() {
  const int state = g_bf16_hardware.load(std::memory_order_relaxed);
  if (state != 0) return state == 2;
  // Nothing forced yet: the automatic choice. A force racing with this first use wins (it stores
  // after deciding; this only fills in the undecided state).
  int expected = 0;
  g_bf16_hardware.compare_exchange_strong(expected, bf16_hardware_available() ? 2 : 1, std::memory_order_relaxed);
  return g_bf16_hardware.load(std::memory_order_relaxed) == 2;
}

int64_t cpu::max_head_groups() {
  int64_t n = g_max_head_groups.load(std::memory_order_relaxed);
  if (n == 0) {
    n = default_max_head_groups();
    g_max_head_groups.store(n, std::memory_order_relaxed);
  }
  return n;
}

void cpu::set_max_head_groups(int64_t n) {
  if (n < 0 || n > 8) throw Error(detail::concat("set_max_head_groups: n must be in [0, 8] (got ", n, ")"));
  g_max_head_groups.store(n, std::memory_order_relaxed);
}

std::vector<std::string> cpu_targets() {
  cpu::apply_target_from_environment();
  std::lock_guard<std::mutex> lock(g_target_mutex);
  return all_targets_locked();  // a force fills it before narrowing what Highway reports
}

std::string current_cpu_target() {
  cpu::apply_target_from_environment();
  if (cpu::bf16_hardware_in_use()) return std::string(kBf16HardwareTarget);
  const std::vector<int64_t> targets = hwy::SupportedAndGeneratedTargets();
  return targets.empty() ? std::string() : std::string(hwy::TargetName(targets.front()));
}

void force_cpu_target(std::string_view name) {
  cpu::apply_target_from_environment();  // first, so that this explicit choice wins
  force_target(name);
}

}  // namespace rotary
