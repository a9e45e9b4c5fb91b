// src/cli/bench_output.cpp: the text table and the JSON of `rotary bench` (bench_output.hpp).
#include "cli/bench_output.hpp"

#include <algorithm>
#include <cmath>

#include "cli/args.hpp"
#include "cli/bench_probe.hpp"
#include "core/json.hpp"
#include "rotary/error.hpp"

namespace rotary::cli::bench {

void print_preamble(std::ostream& out, const Preamble& p) {
  out << format_line("# rotary bench: %s table (exact, stored, %lld rows, built in %.1f ms before timing); target %s\n",
                     p.preset.c_str(), static_cast<long long>(p.table_rows), p.table_ms, p.target.c_str());
  if (!p.cpu_model.empty()) {
    out << format_line("# cpu: %s; SIMD flags: %s\n", p.cpu_model.c_str(), p.cpu_flags.c_str());
  }
  out << format_line(
      "# median of %d repetitions after 1 warm-up (calls < 2 ms repeated within a repetition, time per call);"
      " prefill_long at most %d\n",
      p.repetitions, p.long_repetitions_cap);
  out << format_line(
      "# bytes = (q + k elements) x element size x 2; ratio = GB/s / base_GB/s, the stream of the same dtype and"
      " threads over q + k of prefill (in-place rows: copy_inplace, others: copy), timed in alternation with the"
      " row's repetitions, each after an untimed run of the same operation (torch rows: the copy rows above)\n");
  out << format_line(
      "# decode uses 40 q heads (a large model's decode step); its q + k fit in the caches, so its base is a"
      " stream of its own bytes on one thread (cached_copy: memcpy; cached_copy_inplace)\n");
  out << format_line("%-17s %-8s %3s %-8s %-6s %10s %8s %9s %6s %-13s %4s %5s %1s  %s\n", "case", "dtype", "thr",
                     "in_place", "layout", "median_ms", "GB/s", "base_GB/s", "ratio", "target", "reps", "GHz", "!",
                     "shape");
}

void print_row(std::ostream& out, const Row& row) {
  out << format_line("%-17s %-8s %3d %-8s %-6s %10.4f %8.2f %9.2f %6.3f %-13s %4d %5.2f %1s  %s\n", row.name.c_str(),
                     row.dtype.c_str(), row.threads, row.in_place ? "yes" : "no", row.layout.c_str(), row.median_ms,
                     row.gb_per_s, row.baseline_gb_per_s, row.ratio_to_copy, row.target.c_str(), row.repetitions,
                     row.core_ghz, row.unreliable.empty() ? "" : "!", row.shape.c_str());
  if (!std::isnan(row.gflop_per_s)) {  // compute-bound rows: their GFLOP/s against the FMA peak
    out << format_line("%-17s   %.1f GFLOP/s = %.3f x the FMA peak of %d thread%s (%.1f GFLOP/s)\n", "",
                       row.gflop_per_s, row.ratio_to_peak, row.threads, row.threads == 1 ? "" : "s",
                       row.peak_gflop_per_s);
  }
  if (!std::isnan(row.read_gb_per_s)) {  // read-only rows: against reading the same bytes in address order
    out << format_line("%-17s   %.2f GB/s = %.3f x the read stream over the same bytes on %d thread%s (%.2f GB/s)\n", "",
                       row.gb_per_s, row.ratio_to_read, row.threads, row.threads == 1 ? "" : "s", row.read_gb_per_s);
  }
}

void judge_noise(Row& row, double other_cpu_percent) {
  row.other_cpu_percent = other_cpu_percent;
  const double spread = row.min_ms > 0.0 ? row.median_ms / row.min_ms - 1.0 : 0.0;
  if (spread > kUnreliableSpread) {
    row.unreliable = detail::concat("spread ", format_number(100.0 * spread, 2), "%");
  } else if (row.baseline_spread > kUnreliableSpread) {  // false for NaN
    row.unreliable = detail::concat("baseline spread ", format_number(100.0 * row.baseline_spread, 2), "%");
  }
}

std::string legend_lines() {
  // Why a ratio can pass 1 (docs/results/performance/2026-11-25-apply-kernels-epyc-avx2.md): the floors
  // are streams measured in the run, not limits of the hardware, and the out-of-place kernel,
  // which reads q and k and writes other buffers (four streams at once), has run faster than the
  // one copy timed beside it (1.02-1.15 in a run with slow memory). Both sides count bytes the same
  // way (read + written).
  return format_line(
      "# ratio (x copy): the row's GB/s / a memory stream's of the same dtype and threads, timed in\n"
      "#   alternation with it (PyTorch rows: the copy row): a streaming copy (in place: x *= c in place;\n"
      "#   decode, which fits in the caches: a copy of its own bytes there). Above 1 is possible: the\n"
      "#   stream is measured here, not a hardware limit, and the out-of-place kernel runs four streams\n"
      "#   at once (q and k in, q and k out), which can draw more from memory than one copy.\n"
      "# ! = unreliable: the row's median was more than %.0f%% above its fastest repetition, or its\n"
      "#   stream's was: another run would give another figure. Other processes' load alone marks no\n"
      "#   row (both sides of a ratio share it); the \"other processes used\" line says how much.\n",
      100.0 * kUnreliableSpread);
}

namespace {

// The footnote of the "!" column, when a row has one.
void print_unreliable_note(std::ostream& out, const std::vector<Row>& rows) {
  const auto flagged = static_cast<size_t>(
      std::count_if(rows.begin(), rows.end(), [](const Row& row) { return !row.unreliable.empty(); }));
  if (flagged == 0) return;
  out << format_line("# %zu of %zu rows marked !: rerun them (on a quieter machine if other processes' load was high)\n",
                     flagged, rows.size());
}

}  // namespace

void print_closing_text(std::ostream& out, const Closing& closing, const std::vector<Row>& rows) {
  out << legend_lines();
  print_unreliable_note(out, rows);
  if (!closing.torch_note.empty()) out << format_line("%s\n", closing.torch_note.c_str());
  if (!closing.contention.empty()) out << format_line("# %s\n", closing.contention.c_str());
  if (!closing.core_clock.empty()) out << format_line("# %s\n", closing.core_clock.c_str());
  out << format_line("# %zu rows in %.1f s\n", rows.size(), closing.total_s);
}

void print_quick(std::ostream& out, const QuickHeader& header, const std::vector<Row>& rows, const Closing& closing) {
  // The kernel rows (a row's name is its workload's) out of place, at the largest thread count.
  int max_threads = 1;
  for (const Row& row : rows) max_threads = std::max(max_threads, row.threads);
  std::vector<const Row*> shown;
  for (const Row& row : rows) {
    if (row.name == row.workload && !row.in_place && row.threads == max_threads && shown.size() < kQuickMaxRows) {
      shown.push_back(&row);
    }
  }
  const Row* prefill = nullptr;
  for (const Row* row : shown) {
    if (prefill == nullptr && row->name == "prefill") prefill = row;
  }
  // Hugging Face's formulation in PyTorch, on the prefill shape, next to the kernel.
  const Row* torch = nullptr;
  for (const Row& row : rows) {
    if (row.name == "torch_hf" && row.workload == "prefill" && prefill != nullptr && row.dtype == prefill->dtype &&
        row.threads == prefill->threads && shown.size() < kQuickMaxRows) {
      torch = &row;
      shown.push_back(&row);
    }
  }
  out << format_line("rotary bench --quick: %s shapes, SIMD target %s, median of %d repetitions (rotary bench for"
                     " every row)\n\n",
                     header.preset.c_str(), header.target.c_str(), header.repetitions);
  out << format_line("%-9s %-9s %7s %10s %8s %9s %1s\n", "case", "dtype", "threads", "median_ms", "GB/s", "x copy", "!");
  for (const Row* row : shown) {
    out << format_line("%-9s %-9s %7d %10.4f %8.2f %9.3f %1s\n", row->name.c_str(), row->dtype.c_str(), row->threads,
                       row->median_ms, row->gb_per_s, row->ratio_to_copy, row->unreliable.empty() ? "" : "!");
  }
  out << "\n";
  const Row* lead = prefill != nullptr ? prefill : (shown.empty() ? nullptr : shown.front());
  if (lead != nullptr) {
    std::string takeaway = detail::concat("takeaway: ", lead->name, " at ", format_number(lead->ratio_to_copy, 3),
                                          "x this machine's copy bandwidth (", lead->dtype, ", ", lead->threads,
                                          lead->threads == 1 ? " thread)" : " threads)");
    if (torch != nullptr && torch->median_ms > 0.0 && lead->median_ms > 0.0) {
      takeaway += detail::concat(", ", format_number(torch->median_ms / lead->median_ms, 3),
                                 "x as fast as Hugging Face's PyTorch code (torch_hf)");
    }
    out << takeaway << "\n";
  }
  out << legend_lines();
  std::vector<Row> shown_rows;
  for (const Row* row : shown) shown_rows.push_back(*row);
  print_unreliable_note(out, shown_rows);
  if (!closing.torch_note.empty()) out << format_line("%s\n", closing.torch_note.c_str());
  if (!closing.contention.empty()) out << format_line("# %s\n", closing.contention.c_str());
}

void print_json(std::ostream& out, std::ostream& err, const std::vector<Row>& rows, const Closing& closing) {
  json::Writer writer;
  writer.begin_array();
  for (const Row& row : rows) {
    writer.begin_object();
    writer.key("case").value(row.name);
    writer.key("workload").value(row.workload);
    writer.key("dtype").value(row.dtype);
    writer.key("threads").value(row.threads);
    writer.key("in_place").value(row.in_place);
    writer.key("layout").value(row.layout);
    writer.key("shape").value(row.shape);
    writer.key("bytes").value(row.bytes);
    writer.key("median_ms").value(row.median_ms);
    writer.key("min_ms").value(row.min_ms);
    writer.key("gb_per_s").value(row.gb_per_s);
    writer.key("ratio_to_copy").value(row.ratio_to_copy);  // null when NaN
    writer.key("baseline").value(row.baseline);
    writer.key("baseline_gb_per_s").value(row.baseline_gb_per_s);
    writer.key("target").value(row.target);
    writer.key("repetitions").value(row.repetitions);
    writer.key("calls_per_repetition").value(row.calls_per_repetition);
    writer.key("core_ghz").value(row.core_ghz);  // null when NaN
    writer.key("gflop_per_s").value(row.gflop_per_s);
    writer.key("peak_gflop_per_s").value(row.peak_gflop_per_s);
    writer.key("ratio_to_peak").value(row.ratio_to_peak);
    writer.key("read_gb_per_s").value(row.read_gb_per_s);  // null when NaN
    writer.key("ratio_to_read").value(row.ratio_to_read);
    writer.key("cpu_model").value(closing.cpu_model);
    writer.key("cpu_flags").value(closing.cpu_flags);
    writer.key("other_cpu_percent").value(row.other_cpu_percent);  // null when NaN (not known)
    if (row.unreliable.empty()) {
      writer.key("unreliable").null();
    } else {
      writer.key("unreliable").value(row.unreliable);
    }
    writer.end_object();
  }
  writer.end_array();
  out << writer.str() << "\n";
  // stdout stays one JSON document; what people should know goes to stderr.
  // torch.compile's compile time, which the torch_hf_compile rows leave out, is said there too, or
  // that --quick left those rows out.
  if (closing.torch_note.find("skipped") != std::string::npos ||
      closing.torch_note.find("compile time") != std::string::npos ||
      closing.torch_note.find("torch_hf_compile not run") != std::string::npos) {
    err << closing.torch_note << "\n";
  }
  if (closing.contention.find("rerun on a quiet machine") != std::string::npos) {
    err << "rotary: warning: " << closing.contention << "\n";
  }
  if (!closing.core_clock.empty()) err << "rotary: " << closing.core_clock << "\n";
}

}  // namespace rotary::cli::bench
