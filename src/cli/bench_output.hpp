// src/cli/bench_output.hpp: what `rotary bench` prints: its rows as a text table or as JSON, the
// lines that say how they were measured, and the notes at the end.
#pragma once

#include <cmath>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace rotary::cli::bench {

// One measured row: a stream, a kernel call, or a PyTorch formulation.
struct Row {
  std::string name;      // the case: "prefill", "copy", "torch_hf", ...
  std::string workload;  // the shape it ran on: "prefill", "decode", ...
  std::string dtype;
  int threads = 1;
  bool in_place = false;
  std::string layout;
  std::string shape;
  int64_t bytes = 0;  // per call: (q + k elements) x element size x 2
  double median_ms = 0.0;
  double min_ms = 0.0;
  double gb_per_s = 0.0;
  // gb_per_s / baseline_gb_per_s; NaN (null in JSON) when no stream of this dtype and thread count
  // was measured.
  double ratio_to_copy = 0.0;
  // The stream ratio_to_copy divides by: "copy" or "copy_inplace" (over q + k of prefill), or for
  // calls that fit in the caches "cached_copy" or "cached_copy_inplace" (over the call's own bytes).
  std::string baseline;
  // That stream's GB/s: for kernel rows, measured in alternation with the row's own repetitions
  // (time_paired); for PyTorch rows, the copy row of the same dtype and threads.
  double baseline_gb_per_s = 0.0;
  std::string target;
  int repetitions = 0;
  int64_t calls_per_repetition = 1;
  // The core's effective clock just before the row was timed (add_chain_ghz), NaN (null) where
  // not measured (PyTorch rows): the rows bound by arithmetic move with it.
  double core_ghz = std::nan("");
  // Compute-bound rows (attention; PyTorch's attention; the fma_peak rows themselves): float32
  // GFLOP/s of the call, the FMA peak of the same thread count measured in this run, and their
  // ratio. NaN (null in JSON) for the other rows.
  double gflop_per_s = std::nan("");
  double peak_gflop_per_s = std::nan("");
  double ratio_to_peak = std::nan("");
  // Rows that only read (attention's decode: the KV cache): the read stream over the same buffers
  // on the same threads (streams.hpp, read_stream), timed in alternation with the row and its copy
  // floor, and the row's GB/s over it: how close the call comes to what the cores can read. NaN
  // (null in JSON) for the other rows.
  double read_gb_per_s = std::nan("");
  double ratio_to_read = std::nan("");
  // The spread (median / fastest - 1) of the stream timed in alternation with this row, NaN where
  // none was (the streams themselves, PyTorch's rows): the ratio divides by that stream's median,
  // so it is only as steady as both.
  double baseline_spread = std::nan("");
  // The share of the CPUs other processes (and hypervisor steal) took while the row was timed, NaN
  // where not known (PyTorch's rows run in another process). Said, not judged: a steady load slows
  // the row and the stream timed in alternation with it alike.
  double other_cpu_percent = std::nan("");
  // Why this row's figures are not to be trusted ("spread 23%", "baseline spread 31%"), empty when
  // they are: the text table marks such a row with "!", JSON gives the reason.
  std::string unreliable;
};

// A row is unreliable when its median is more than kUnreliableSpread above its fastest repetition,
// or its paired stream's is: its repetitions disagree, so another run would give another median.
// Other processes' load alone does not mark a row: on a shared machine some load is always there,
// and every ratio is timed in alternation with its stream (bench_timing.hpp, time_paired), so a
// steady load slows both; a load that comes and goes shows as spread. The run's share of other
// processes is the closing line's (contention_line), each row's is in JSON (other_cpu_percent).
inline constexpr double kUnreliableSpread = 0.15;
// Sets row.unreliable from its own spread and its baseline's, and row.other_cpu_percent.
void judge_noise(Row& row, double other_cpu_percent);

// The legend of the ratio column and of the "!" column (lines starting "# "): what each ratio
// divides by and why it can pass 1, and what "!" means. Printed under the quick table and the full
// one.
std::string legend_lines();

// The text output's first lines: how the rows were measured, then the table's header.
struct Preamble {
  std::string preset;
  int64_t table_rows = 0;
  double table_ms = 0.0;
  std::string target;
  int repetitions = 0;
  int long_repetitions_cap = 0;
  std::string cpu_model;
  std::string cpu_flags;
};
void print_preamble(std::ostream& out, const Preamble& preamble);

// One row of the text table.
void print_row(std::ostream& out, const Row& row);

// What people should know after the rows: the PyTorch peer's note, how much CPU other processes
// took, the core's clock at the start and the end.
struct Closing {
  std::string cpu_model;  // /proc/cpuinfo's model name, and its SIMD flags (bench_probe.hpp)
  std::string cpu_flags;
  std::string torch_note;
  std::string contention;
  std::string core_clock;
  double total_s = 0.0;
};
// Text: the notes as "#" lines and the row count. JSON: every row as one JSON list on `out` (one
// document; each row also names the CPU: cpu_model, cpu_flags), the notes people need (PyTorch
// skipped, a busy machine, the clock) on `err`.
void print_closing_text(std::ostream& out, const Closing& closing, const std::vector<Row>& rows);

// `rotary bench --quick` for people: a few rows (each kernel case out of place at the largest
// thread count, and Hugging Face's PyTorch formulation on prefill when it ran), at most
// kQuickMaxRows, then one line of takeaway and the notes.
inline constexpr size_t kQuickMaxRows = 8;
struct QuickHeader {
  std::string preset;
  std::string target;
  int repetitions = 0;
};
void print_quick(std::ostream& out, const QuickHeader& header, const std::vector<Row>& rows, const Closing& closing);
void print_json(std::ostream& out, std::ostream& err, const std::vector<Row>& rows, const Closing& closing);

}  // namespace rotary::cli::bench
