// src/cli/bench_measure.cpp: the streams and the kernels timed by `rotary bench`
// (bench_measure.hpp).
#include "cli/bench_measure.hpp"

#include <cmath>

#include "cli/args.hpp"
#include "cli/bench_probe.hpp"
#include "cli/bench_timing.hpp"
#include "cpu/bandwidth/buffer.hpp"
#include "rotary/apply.hpp"
#include "rotary/error.hpp"

namespace rotary::cli::bench {

void StreamFloors::record(const std::string& dtype, int threads, bool in_place, double gb_per_s) {
  auto [found, inserted] = floors_.try_emplace({dtype, threads}, Bandwidth{std::nan(""), std::nan("")});
  (in_place ? found->second.copy_inplace_gb_per_s : found->second.copy_gb_per_s) = gb_per_s;
}

void StreamFloors::compare(Row& row) const {
  row.baseline = row.in_place ? "copy_inplace" : "copy";
  const auto found = floors_.find({row.dtype, row.threads});
  row.baseline_gb_per_s = found == floors_.end()
                              ? std::nan("")
                              : (row.in_place ? found->second.copy_inplace_gb_per_s : found->second.copy_gb_per_s);
  row.ratio_to_copy = row.gb_per_s / row.baseline_gb_per_s;
}

void measure_streams(MeasureContext& context, DType dtype, int threads, size_t buffer_bytes, StreamFloors& floors) {
  const std::string megabytes = format_number(static_cast<double>(buffer_bytes) / 1e6, 4);
  const double core_ghz = add_chain_ghz(kRowClockAdds);
  const auto stream_row = [&](std::string name, bool in_place, const Timing& timing, std::string shape,
                              std::string target) {
    Row row;
    row.core_ghz = core_ghz;
    row.name = std::move(name);
    row.workload = "prefill";
    row.dtype = std::string(to_string(dtype));
    row.threads = threads;
    row.in_place = in_place;
    row.layout = std::string(1, '-');  // not = "-": GCC 12 reports a false -Wrestrict on it here
    row.shape = std::move(shape);
    row.bytes = 2 * static_cast<int64_t>(buffer_bytes);
    row.median_ms = timing.median_ms;
    row.min_ms = timing.min_ms;
    row.gb_per_s = gb_per_s(row.bytes, timing.median_ms);
    row.target = std::move(target);
    row.repetitions = timing.repetitions;
    row.calls_per_repetition = timing.calls_per_repetition;
    return row;
  };
  bandwidth::Streams& streams = context.streams;
  for (const bool in_place : {false, true}) {
    const PairedTiming paired = time_paired(
        [&] { streams.stream(in_place, buffer_bytes, threads, bandwidth::Pattern::Sequential); },
        [&] { streams.stream(in_place, buffer_bytes, threads, bandwidth::Pattern::FourPages); }, context.repetitions);
    const bool sequential_faster = paired.call.median_ms <= paired.reference.median_ms;
    const bandwidth::Pattern floor = sequential_faster ? bandwidth::Pattern::Sequential : bandwidth::Pattern::FourPages;
    streams.choose_floor(in_place, threads, floor);
    const std::string name = in_place ? "copy_inplace" : "copy";
    const std::string what = detail::concat(in_place ? "x *= 1.0000001f over " : "streaming-store copy of ", megabytes,
                                            " MB (q+k of prefill)");
    Row sequential = stream_row(name + "_sequential", in_place, paired.call, what + ", sequential", context.target);
    Row four_pages = stream_row(name + "_4pages", in_place, paired.reference, what + ", 4 pages at a time",
                                context.target);
    Row chosen = stream_row(name, in_place, sequential_faster ? paired.call : paired.reference,
                            detail::concat(what, ", ", bandwidth::to_string(floor), " (the faster pattern here)"),
                            context.target);
    chosen.ratio_to_copy = 1.0;
    chosen.baseline = chosen.name;
    chosen.baseline_gb_per_s = chosen.gb_per_s;
    for (Row* other : {&sequential, &four_pages}) {
      other->baseline = chosen.name;
      other->baseline_gb_per_s = chosen.gb_per_s;
      other->ratio_to_copy = other->gb_per_s / chosen.gb_per_s;
    }
    floors.record(chosen.dtype, threads, in_place, chosen.gb_per_s);
    context.add_row(std::move(sequential));
    context.add_row(std::move(four_pages));
    context.add_row(std::move(chosen));
  }
  const Timing memcpy_timing = time_calls([&] { streams.memcpy(buffer_bytes, threads); }, context.repetitions);
  Row row = stream_row("memcpy", false, memcpy_timing, detail::concat("glibc memcpy of ", megabytes, " MB (q+k of prefill)"),
                       "glibc");
  floors.compare(row);  // against the copy row just measured
  context.add_row(std::move(row));
}

void measure_workload(MeasureContext& context, const Workload& workload, DType dtype, const std::vector<int>& threads,
                      int repetitions, const CosSinTable& table, size_t stream_bytes) {
  const Positions positions = workload.positions();
  const int64_t q_elements = workload.q_elements();
  const int64_t k_elements = workload.k_elements();
  const int64_t element_bytes = dtype_size(dtype);
  bandwidth::Buffer q(static_cast<size_t>(q_elements * element_bytes));
  bandwidth::Buffer k(static_cast<size_t>(k_elements * element_bytes));
  bandwidth::Buffer q_out(q.bytes());
  bandwidth::Buffer k_out(k.bytes());
  fill_random(q.data(), dtype, q_elements, 1);
  fill_random(k.data(), dtype, k_elements, 2);
  const TensorView q_view = contiguous_view(q.data(), dtype, workload.layout, workload.q_shape);
  const TensorView k_view = contiguous_view(k.data(), dtype, workload.layout, workload.k_shape);
  const TensorView q_out_view = contiguous_view(q_out.data(), dtype, workload.layout, workload.q_shape);
  const TensorView k_out_view = contiguous_view(k_out.data(), dtype, workload.layout, workload.k_shape);
  for (int thread_count : threads) {
    set_num_threads(thread_count);
    for (bool in_place : {false, true}) {
      const TensorView& qo = in_place ? q_view : q_out_view;
      const TensorView& ko = in_place ? k_view : k_out_view;
      // Each repetition of the call is followed by one of its stream (same dtype and threads):
      // the ratio compares the two under the same load. A call whose q + k fit in the caches
      // (decode) is compared with a stream of its own bytes, also in the caches
      // (Streams::run_cached): alternating it with the 84 MB one slowed decode by a third, as
      // that stream leaves the last-level cache full of dirty lines that the next ~15 calls
      // write back (173 us right after it, 63 us fifteen calls later, on an AMD EPYC).
      const int64_t call_bytes = (q_elements + k_elements) * element_bytes;
      const bool cached = call_bytes < bandwidth::kCachedStreamBytes;
      const size_t reference_bytes = cached ? static_cast<size_t>(call_bytes) : stream_bytes;
      const double core_ghz = add_chain_ghz(kRowClockAdds);
      const PairedTiming paired = time_paired(
          [&] { apply(q_view, k_view, qo, ko, positions, table); },
          [&] {
            if (cached) {
              context.streams.run_cached(in_place, reference_bytes);
            } else {
              context.streams.run(in_place, reference_bytes, thread_count);
            }
          },
          repetitions);
      const Timing& timing = paired.call;
      Row row;
      row.name = workload.name;
      row.workload = workload.name;
      row.dtype = std::string(to_string(dtype));
      row.threads = thread_count;
      row.in_place = in_place;
      row.layout = std::string(to_string(workload.layout));
      row.shape = workload.shape;
      row.bytes = call_bytes * 2;
      row.median_ms = timing.median_ms;
      row.min_ms = timing.min_ms;
      row.gb_per_s = gb_per_s(row.bytes, timing.median_ms);
      row.baseline = cached ? (in_place ? "cached_copy_inplace" : "cached_copy") : (in_place ? "copy_inplace" : "copy");
      row.baseline_gb_per_s = gb_per_s(2 * static_cast<int64_t>(reference_bytes), paired.reference.median_ms);
      row.ratio_to_copy = row.gb_per_s / row.baseline_gb_per_s;
      row.baseline_spread = spread(paired.reference);
      row.target = context.target;
      row.repetitions = timing.repetitions;
      row.calls_per_repetition = timing.calls_per_repetition;
      row.core_ghz = core_ghz;
      context.add_row(std::move(row));
    }
  }
}

}  // namespace rotary::cli::bench
