// src/cli/bench_measure.hpp: the rows of `rotary bench` that this process times: the memory
// streams (the floors) and rotary::apply on each workload, each kernel row timed in alternation
// with its floor (bench_timing.hpp, time_paired).
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "cli/bench_output.hpp"
#include "cli/bench_workloads.hpp"
#include "cpu/bandwidth/floors.hpp"
#include "rotary/table.hpp"

namespace rotary::cli::bench {

// The floors measured at the start, by dtype and thread count: what the memcpy row and the
// PyTorch rows are divided by.
class StreamFloors {
 public:
  void record(const std::string& dtype, int threads, bool in_place, double gb_per_s);
  // Sets a row's baseline to the stream row of its dtype and threads (copy_inplace for in-place
  // rows, copy for the others) and its ratio; NaN when that stream was not measured.
  void compare(Row& row) const;

 private:
  struct Bandwidth {
    double copy_gb_per_s;
    double copy_inplace_gb_per_s;
  };
  std::map<std::pair<std::string, int>, Bandwidth> floors_;
};

// What the measurements share.
struct MeasureContext {
  bandwidth::Streams& streams;  // buffers of the prefill case's q + k in float32
  int repetitions = 0;
  std::string target;  // the SIMD target streams and kernels run with
  std::function<void(Row)> add_row;
};

// The streams over `buffer_bytes` (q + k of prefill in `dtype`) on `threads` threads: copy and
// copy_inplace, each in both access patterns timed in alternation; the faster is the floor (rows
// copy and copy_inplace, recorded in `floors` and chosen in context.streams; the patterns' own
// rows are copy_sequential, copy_4pages, ...), then glibc's memcpy for reference.
void measure_streams(MeasureContext& context, DType dtype, int threads, size_t buffer_bytes, StreamFloors& floors);

// rotary::apply on one workload in one dtype, for each thread count, out of place and in place.
// A call that moves more than bandwidth::kCachedStreamBytes is compared with the floor over
// `stream_bytes` (q + k of prefill in `dtype`); a smaller one with a stream of its own bytes on
// one thread, in the caches (Streams::run_cached).
void measure_workload(MeasureContext& context, const Workload& workload, DType dtype, const std::vector<int>& threads,
                      int repetitions, const CosSinTable& table, size_t stream_bytes);

}  // namespace rotary::cli::bench
