// src/cpu/bandwidth/fma_peak.cpp: fma_peak.hpp, the FMA loop compiled once per Highway target and
// dispatched at run time like the streams (stream_kernels.cpp), so that the peak is measured with
// the target the kernels run with.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/bandwidth/fma_peak.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "cpu/bandwidth/fma_peak.hpp"
#include "cpu/bandwidth/streams.hpp"

HWY_BEFORE_NAMESPACE();
namespace rotary::bandwidth::detail::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// `rounds` x 16 vectors of multiply-adds, each accumulator its own dependency chain; the result
// (never used but stored) keeps the compiler from dropping the loop. Returns the flops done.
double FmaRounds(int64_t rounds, float* sink) {
  const hn::ScalableTag<float> df;
  const auto a = hn::Set(df, 0.999999f), b = hn::Set(df, 1e-7f);
  // Sixteen different starting values: identical chains would be computed once (GCC merges them).
  const auto one = hn::Iota(df, 1.0f);
  const auto step = hn::Set(df, 1.0f / 16.0f);
  auto c0 = one, c1 = hn::Add(c0, step), c2 = hn::Add(c1, step), c3 = hn::Add(c2, step);
  auto c4 = hn::Add(c3, step), c5 = hn::Add(c4, step), c6 = hn::Add(c5, step), c7 = hn::Add(c6, step);
  auto c8 = hn::Add(c7, step), c9 = hn::Add(c8, step), c10 = hn::Add(c9, step), c11 = hn::Add(c10, step);
  auto c12 = hn::Add(c11, step), c13 = hn::Add(c12, step), c14 = hn::Add(c13, step), c15 = hn::Add(c14, step);
  for (int64_t r = 0; r < rounds; ++r) {
    c0 = hn::MulAdd(c0, a, b), c1 = hn::MulAdd(c1, a, b), c2 = hn::MulAdd(c2, a, b), c3 = hn::MulAdd(c3, a, b);
    c4 = hn::MulAdd(c4, a, b), c5 = hn::MulAdd(c5, a, b), c6 = hn::MulAdd(c6, a, b), c7 = hn::MulAdd(c7, a, b);
    c8 = hn::MulAdd(c8, a, b), c9 = hn::MulAdd(c9, a, b), c10 = hn::MulAdd(c10, a, b), c11 = hn::MulAdd(c11, a, b);
    c12 = hn::MulAdd(c12, a, b), c13 = hn::MulAdd(c13, a, b), c14 = hn::MulAdd(c14, a, b), c15 = hn::MulAdd(c15, a, b);
  }
  const auto sum = hn::Add(hn::Add(hn::Add(hn::Add(c0, c1), hn::Add(c2, c3)), hn::Add(hn::Add(c4, c5), hn::Add(c6, c7))),
                           hn::Add(hn::Add(hn::Add(c8, c9), hn::Add(c10, c11)), hn::Add(hn::Add(c12, c13), hn::Add(c14, c15))));
  *sink = hn::GetLane(sum);
  return static_cast<double>(rounds) * 16.0 * 2.0 * static_cast<double>(hn::Lanes(df));
}

}  // namespace rotary::bandwidth::detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace rotary::bandwidth {
namespace detail {
HWY_EXPORT(FmaRounds);
}  // namespace detail

double fma_peak_gflop_per_s(int threads, double milliseconds) {
  (void)stream_target();  // applies $ROTARY_CPU_TARGET as the streams do
  using Clock = std::chrono::steady_clock;
  const auto rounds_for = [](double ms, double gflops_guess) {
    return std::max<int64_t>(1000, static_cast<int64_t>(ms * 1e6 * gflops_guess / (16.0 * 2.0 * 16.0)));
  };
  // Calibrate on this thread: a short run gives the rate, then every thread runs `rounds`.
  float sink = 0.0f;
  Clock::time_point start = Clock::now();
  double flops = HWY_DYNAMIC_DISPATCH(detail::FmaRounds)(200000, &sink);
  const double seconds = std::max(std::chrono::duration<double>(Clock::now() - start).count(), 1e-6);
  const int64_t rounds = rounds_for(milliseconds, flops / seconds / 1e9);
  const int count = std::max(threads, 1);
  std::vector<float> sinks(static_cast<size_t>(count));
  std::vector<std::thread> workers;
  start = Clock::now();
  for (int t = 1; t < count; ++t) {
    workers.emplace_back([&, t] { HWY_DYNAMIC_DISPATCH(detail::FmaRounds)(rounds, &sinks[static_cast<size_t>(t)]); });
  }
  flops = HWY_DYNAMIC_DISPATCH(detail::FmaRounds)(rounds, &sinks[0]) * count;
  for (std::thread& worker : workers) worker.join();
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  return flops / elapsed / 1e9;
}

}  // namespace rotary::bandwidth
#endif  // HWY_ONCE
