// src/cli/bench_timing.hpp: the timing rule of `rotary bench`: warm-up, repetitions, median, and
// a call timed in alternation with the stream it is compared with.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <utility>
#include <vector>

namespace rotary::cli::bench {

struct Timing {
  double median_ms = 0.0;  // per call
  double min_ms = 0.0;     // per call, fastest repetition
  int repetitions = 0;
  int64_t calls_per_repetition = 1;
};

// How far the median lies above the fastest repetition (0.15: 15%); 0 for an empty timing.
inline double spread(const Timing& timing) {
  return timing.min_ms > 0.0 ? timing.median_ms / timing.min_ms - 1.0 : 0.0;
}

namespace timing_steps {  // not `detail`: that would hide rotary::detail (concat) in this namespace

using Clock = std::chrono::steady_clock;

inline double elapsed_ms(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// One warm-up call (page faults, pool threads started, table rows and code in cache); a call
// shorter than min_repetition_ms is timed once more, warm, to choose how many calls make one
// repetition.
template <typename Call>
int64_t warm_up(Call& call, double min_repetition_ms) {
  Clock::time_point start = Clock::now();
  call();
  if (elapsed_ms(start) >= min_repetition_ms) return 1;
  start = Clock::now();
  call();
  const double call_ms = std::max(elapsed_ms(start), 1e-4);
  return std::max<int64_t>(1, static_cast<int64_t>(min_repetition_ms / call_ms));
}

// Wall time per call of one repetition.
template <typename Call>
double time_repetition(Call& call, int64_t calls) {
  const Clock::time_point start = Clock::now();
  for (int64_t c = 0; c < calls; ++c) call();
  return elapsed_ms(start) / static_cast<double>(calls);
}

inline Timing summarize(std::vector<double> per_call_ms, int64_t calls_per_repetition) {
  Timing result;
  std::sort(per_call_ms.begin(), per_call_ms.end());
  const size_t n = per_call_ms.size();
  result.median_ms = n % 2 == 1 ? per_call_ms[n / 2] : 0.5 * (per_call_ms[n / 2 - 1] + per_call_ms[n / 2]);
  result.min_ms = per_call_ms.front();
  result.repetitions = static_cast<int>(n);
  result.calls_per_repetition = calls_per_repetition;
  return result;
}

}  // namespace timing_steps

// One warm-up call, then `repetitions` timed repetitions (std::chrono::steady_clock wall time);
// the median and the minimum per call. A call shorter than min_repetition_ms (a decode step: tens
// of microseconds, where clock reads and scheduler noise would dominate) is repeated back to back
// within each repetition until the repetition lasts about that long, and the repetition's time is
// divided by the number of calls.
template <typename Call>
Timing time_calls(Call&& call, int repetitions, double min_repetition_ms = 2.0) {
  const int64_t calls = timing_steps::warm_up(call, min_repetition_ms);
  std::vector<double> per_call_ms;
  for (int r = 0; r < std::max(repetitions, 1); ++r) per_call_ms.push_back(timing_steps::time_repetition(call, calls));
  return timing_steps::summarize(std::move(per_call_ms), calls);
}

// time_calls for a call and the reference it is compared with, their repetitions alternating
// (call, reference, call, reference, ...), so that both medians see the same machine: on a
// shared 2-core machine another process's load comes and goes within seconds, and a reference
// measured at another moment would move the ratio by more than the kernels' differences.
//
// Each timed repetition follows one untimed run of the same operation, so that each is timed
// in its own steady state rather than in the cache and memory state the other left. (In one run
// on a loaded machine a RoPE call, and a plain loop of loads, FMAs and streaming stores, ran
// 10-15% slower right after an 84 MB streaming copy than back to back; on a quiet machine the
// order made no measurable difference. docs/performance.md.)
struct PairedTiming {
  Timing call;
  Timing reference;
};
template <typename Call, typename Reference>
PairedTiming time_paired(Call&& call, Reference&& reference, int repetitions, double min_repetition_ms = 2.0) {
  const int64_t calls = timing_steps::warm_up(call, min_repetition_ms);
  const int64_t reference_calls = timing_steps::warm_up(reference, min_repetition_ms);
  std::vector<double> call_ms;
  std::vector<double> reference_ms;
  for (int r = 0; r < std::max(repetitions, 1); ++r) {
    call();
    call_ms.push_back(timing_steps::time_repetition(call, calls));
    reference();
    reference_ms.push_back(timing_steps::time_repetition(reference, reference_calls));
  }
  return {timing_steps::summarize(std::move(call_ms), calls), timing_steps::summarize(std::move(reference_ms), reference_calls)};
}

// time_paired with a second reference: call, reference, second, call, reference, second, ...
// each timed repetition after one untimed run of the same operation.
struct TripleTiming {
  Timing call;
  Timing reference;
  Timing second_reference;
};
template <typename Call, typename Reference, typename Second>
TripleTiming time_with_two_references(Call&& call, Reference&& reference, Second&& second, int repetitions,
                                      double min_repetition_ms = 2.0) {
  const int64_t calls = timing_steps::warm_up(call, min_repetition_ms);
  const int64_t reference_calls = timing_steps::warm_up(reference, min_repetition_ms);
  const int64_t second_calls = timing_steps::warm_up(second, min_repetition_ms);
  std::vector<double> call_ms, reference_ms, second_ms;
  for (int r = 0; r < std::max(repetitions, 1); ++r) {
    call();
    call_ms.push_back(timing_steps::time_repetition(call, calls));
    reference();
    reference_ms.push_back(timing_steps::time_repetition(reference, reference_calls));
    second();
    second_ms.push_back(timing_steps::time_repetition(second, second_calls));
  }
  return {timing_steps::summarize(std::move(call_ms), calls),
          timing_steps::summarize(std::move(reference_ms), reference_calls),
          timing_steps::summarize(std::move(second_ms), second_calls)};
}

// Bytes per millisecond as GB/s (1 GB = 1e9 bytes).
inline double gb_per_s(int64_t bytes_moved, double milliseconds) {
  return static_cast<double>(bytes_moved) / (milliseconds * 1e-3) / 1e9;
}

}  // namespace rotary::cli::bench
