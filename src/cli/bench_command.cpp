// src/cli/bench_command.cpp: `rotary bench`: the kernels' time and GB/s next to this machine's
// copy bandwidth and PyTorch, all measured in one run.
//
// RoPE is memory-bound: a call reads q and k once and writes them once, so its floor is a
// stream of the same bytes. What the command does, in order:
//   1. the machine: the SIMD target (--target, $ROTARY_CPU_TARGET, else the best; the streams and
//      the kernels run with the same one), the core's clock, the CPU time of all processes
//      (bench_probe.hpp);
//   2. the cos/sin table (llama-3.1-8b preset, Exact, Stored), built once before any timing, up
//      to the largest position used, so no timed call builds rows;
//   3. the floors, per dtype and thread count, over q + k of the prefill case: a streaming-store
//      copy (out-of-place calls) and an in-place read-modify-write stream (in-place calls), each
//      sequential and four pages at a time, the faster taken (src/cpu/bandwidth, streams.hpp);
//      glibc's memcpy for reference;
//   4. rotary::apply on each workload (bench_workloads.hpp), every row timed in alternation with
//      its floor (bench_timing.hpp, time_paired: on this shared 2-core machine other processes'
//      load comes and goes, and a floor timed at another moment would move the ratios by as
//      much); a call that fits in the caches (decode) against a stream of its own bytes
//      (bench_measure.hpp);
//   5. PyTorch's eager formulations from the project's own peer script, in another process, on
//      the same shapes, dtypes and thread counts; their ratio_to_copy uses OUR floors
//      (bench_peer.hpp);
//   6. the rows as a table or JSON, and how quiet the machine was (bench_output.hpp).
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <functional>
#include <iostream>
#include <optional>
#include <tuple>
#include <utility>
#include <string>
#include <vector>

#include "cli/bench_attention.hpp"
#include "cli/bench_measure.hpp"
#include "cli/bench_output.hpp"
#include "cli/bench_peer.hpp"
#include "cli/bench_probe.hpp"
#include "cli/bench_workloads.hpp"
#include "cli/commands.hpp"
#include "cpu/bandwidth/floors.hpp"
#include "cpu/bandwidth/streams.hpp"
#include "rotary/apply.hpp"
#include "rotary/error.hpp"
#include "rotary/presets.hpp"
#include "rotary/table.hpp"

namespace rotary::cli {

const char* const kBenchHelp =
    "usage: rotary bench [--json] [--quick] [--threads LIST] [--cases LIST] [--dtypes LIST]\n"
    "                    [--repetitions N]\n"
    "                    [--target NAME] [--torch PYTHON|none] [--torch-compile] [--peers-dir DIR]\n"
    "\n"
    "Times rotary::apply on Llama-3-8B shapes (head_dim 128, q 32 heads, k 8 heads) in float32\n"
    "and bfloat16, out of place and in place, next to memory streams measured in the same run,\n"
    "each over a buffer the size of q + k of the prefill case: \"copy\" (a copy with streaming\n"
    "stores, as glibc's memcpy does for large buffers), \"memcpy\" (glibc's memcpy as called, for\n"
    "reference) and \"copy_inplace\" (x[i] *= 1.0000001f in place). copy and copy_inplace are\n"
    "each timed sequentially and four pages at a time (rows <stream>_sequential, <stream>_4pages);\n"
    "the faster is this machine's floor. The streams run with the kernels' SIMD target. Every\n"
    "buffer of 2 MiB or more, the kernels' tensors and the streams' alike, is advised onto\n"
    "transparent huge pages before its first touch, as rotary's own large allocations are.\n"
    "\n"
    "Bytes per call = (q + k elements) x element size x 2 (read once, written once). ratio = the\n"
    "row's GB/s / base_GB/s, the GB/s of the stream of the same dtype and thread count (in-place\n"
    "rows: copy_inplace; others: copy), timed in alternation with the row's own repetitions so\n"
    "that both see the same machine load (PyTorch rows: the copy rows). A call whose q + k fit in\n"
    "the caches (under 16 MiB: decode) is compared with a stream of its own bytes on one thread,\n"
    "in the caches as well: cached_copy (glibc's memcpy, ordinary stores) and cached_copy_inplace;\n"
    "the row's baseline field names which. Each timed repetition of\n"
    "either follows one untimed run of the same operation. Time: one warm-up call, then the\n"
    "median of N repetitions of wall time; calls under 2 ms are repeated back to back within a\n"
    "repetition and the time is per call. The cos/sin table (llama-3.1-8b, exact,\n"
    "stored) is built once beforehand, outside every timed call. The last lines say how much CPU\n"
    "other processes took during the run: above 5% the figures are not to be trusted; and how\n"
    "fast a chain of dependent additions ran at the start and the end (the core's effective\n"
    "clock in GHz: on a shared VM it was seen to halve within the hour, and the bf16 / f16\n"
    "rows, bound by arithmetic, with it). A row marked ! in the \"!\" column is unreliable: its\n"
    "median was more than 15% above its fastest repetition, or the median of the stream timed in\n"
    "alternation with it was (JSON: the row's unreliable field says why). Other processes' load\n"
    "alone marks no row: a ratio's two sides share it (JSON: other_cpu_percent, each row's share).\n"
    "A ratio above 1 is possible: the stream is measured here, not a hardware limit, and the\n"
    "out-of-place kernel runs four streams at once (q and k in, q and k out), which can draw more\n"
    "from memory than one copy. The table's closing lines say both. The full run prints its\n"
    "progress on stderr: rows done of the total, and the time elapsed.\n"
    "\n"
    "cases:\n"
    "  copy, memcpy, copy_inplace  the streams (always measured: every ratio needs them)\n"
    "  prefill       bshd, batch 1, 4096 tokens, positions 0..4095\n"
    "  prefill_long  bshd, batch 1, 32768 tokens, positions 0..32767\n"
    "  decode        bshd, 64 sequences x 1 token at scattered positions < 32768, q 40 heads\n"
    "                (a large model's decode step: 40 query heads)\n"
    "  varlen        thd, 8 packed sequences of 128..2560 tokens (8192 in all), cu_seqlens,\n"
    "                positions from 0 in each sequence\n"
    "  attn_decode   rotary::attention, bhsd, 32 q / 8 kv heads: 1 query at position 4095 against a\n"
    "                4096-token cache of rotated keys; bytes = K + V read; ratio = GB/s / the copy\n"
    "                floor of the dtype and threads, timed in alternation; a second line gives\n"
    "                GB/s / a read stream over the same K and V on the same threads (a decode\n"
    "                only reads: what the cores can read), timed in the same alternation\n"
    "  attn_decode_32k  the same against a 32768-token cache\n"
    "  attn_prefill  causal self-attention over 4096 tokens with RoPE fused into the loads, and\n"
    "                attn_prefill_unfused (rotary::apply, then attention), timed in alternation;\n"
    "                GFLOP/s (4 x 32 x 128 per visible query-key pair) / the FMA peak\n"
    "  fma_peak      float32 FMA GFLOP/s of 16 independent chains per thread (with attn_*)\n"
    "  torch_sdpa    PyTorch (torch_attention_bench.py) on the attn_* shapes: eager rotate_half\n"
    "                RoPE, then scaled_dot_product_attention(is_causal, enable_gqa)\n"
    "                (attention only in the full bench or named by --cases)\n"
    "  torch_<formulation>  PyTorch eager baselines from the project's torch_rope_bench.py on\n"
    "                the prefill, prefill_long and decode shapes (bshd; its decode positions are\n"
    "                all 0): torch_hf (Hugging Face's gather + rotate_half), torch_hf_apply (cos/sin\n"
    "                pre-gathered), torch_hf_noalloc (preallocated outputs), torch_meta (complex\n"
    "                multiply, float32), torch_copy (torch's own copy_), torch_hf_compile\n"
    "                (torch_hf under torch.compile, Inductor's CPU code; its compile time is not\n"
    "                timed, the closing torch line says it)\n"
    "\n"
    "  --json            a JSON list of rows: {case, workload, dtype, threads, in_place, layout,\n"
    "                    shape, bytes, median_ms, min_ms, gb_per_s, ratio_to_copy, baseline,\n"
    "                    baseline_gb_per_s, target, repetitions, calls_per_repetition, core_ghz,\n"
    "                    gflop_per_s, peak_gflop_per_s, ratio_to_peak, read_gb_per_s,\n"
    "                    ratio_to_read, cpu_model, cpu_flags, other_cpu_percent,\n"
    "                    unreliable}: unreliable is null or why the row is not to be trusted;\n"
    "                    other_cpu_percent: other processes' share of the CPUs while the row\n"
    "                    was timed (null for PyTorch rows);\n"
    "                    cpu_model / cpu_flags: /proc/cpuinfo's model name and its SIMD flags\n"
    "                    (x86) or Features (Arm);\n"
    "                    core_ghz is the core's effective clock just before the row was timed\n"
    "                    (null for PyTorch rows); notes\n"
    "                    (PyTorch missing, a busy machine) go to stderr\n"
    "  --quick           5 repetitions (3 for PyTorch), no prefill_long unless --cases names it,\n"
    "                    no torch_hf_compile unless --torch-compile, and PyTorch at the largest\n"
    "                    thread count only unless --threads is given: under a minute on 2 cores\n"
    "                    instead of 1-4 minutes. Prints a short table (each\n"
    "                    case out of place at the largest thread count, and Hugging Face's\n"
    "                    PyTorch code on prefill when it ran: at most 8 rows) and one line of\n"
    "                    takeaway; --json still lists every row\n"
    "  --threads LIST    thread counts, comma-separated (default 1,2): set_num_threads for the\n"
    "                    kernels, std::threads for the streams, torch.set_num_threads for PyTorch\n"
    "  --dtypes LIST     storage types, from float32, bfloat16, float16 (default float32,bfloat16)\n"
    "  --cases LIST      comma-separated, from prefill, prefill_long, decode, varlen, copy,\n"
    "                    attn_decode, attn_decode_32k, attn_prefill (default: all; with --quick\n"
    "                    all but prefill_long and the attn_* cases)\n"
    "  --repetitions N   timed repetitions per row (default 15; 5 with --quick; prefill_long and\n"
    "                    PyTorch on it use at most 5 and 2)\n"
    "  --target NAME     force a SIMD target (AVX3, AVX2, SSE4, ...: one of the targets compiled\n"
    "                    in that this CPU supports; default: $ROTARY_CPU_TARGET if set, which\n"
    "                    --target must then agree with, else the best)\n"
    "  --torch PYTHON    the Python that runs the PyTorch baseline (default: ./.venv/bin/python,\n"
    "                    else python3, if it imports torch; none: skip). Without torch one line\n"
    "                    says so and the PyTorch rows are left out.\n"
    "  --torch-compile   with --quick, run torch_hf_compile too (Inductor's compiles add up to 80 s\n"
    "                    on 2 cores; the full bench always runs it)\n"
    "  --peers-dir DIR   where the PyTorch peer script torch_rope_bench.py is (default:\n"
    "                    $ROTARY_PEERS_DIR if set, else the one installed with this command,\n"
    "                    share/rotary/peers beside its bin/, else bench/peers of the source tree\n"
    "                    it was built from)\n";

namespace {

constexpr int kDefaultRepetitions = 15;
constexpr int kQuickRepetitions = 5;
constexpr int kLongRepetitionsCap = 5;  // prefill_long: each call moves 0.7-1.3 GB
constexpr int kMaxThreads = 256;        // set_num_threads' limit

// ---- command line -------------------------------------------------------------------------------

struct BenchOptions {
  bool as_json = false;
  bool quick = false;
  std::vector<int> threads{1, 2};
  // PyTorch's thread counts: all of `threads`, but with --quick and no --threads only the largest,
  // the one its short table shows (eager PyTorch takes 0.1-0.6 s a call on prefill).
  std::vector<int> torch_threads;
  std::vector<DType> dtypes{DType::F32, DType::BF16};
  std::vector<std::string> workloads;  // kernel cases, in bench::kWorkloadNames order
  std::vector<std::string> attention;  // attention cases, in bench::kAttentionCaseNames order
  int repetitions = kDefaultRepetitions;
  std::optional<std::string> target;  // canonical name (bench::resolve_target)
  std::optional<std::string> torch_python;
  bool torch_compile = true;  // torch_hf_compile: off with --quick unless --torch-compile
  std::optional<std::string> peers_dir;
};

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> items;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    items.push_back(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return items;
}

std::vector<int> parse_threads(const std::string& text) {
  const auto fail = [&] {
    return UsageError(detail::concat("bench: --threads must be a comma-separated list of distinct thread counts",
                                     " in [1, ", kMaxThreads, "] like 1,2 (got \"", text, "\")"));
  };
  std::vector<int> threads;
  for (const std::string& item : split_list(text)) {
    int value = 0;
    const char* end = item.data() + item.size();
    auto [ptr, ec] = std::from_chars(item.data(), end, value);
    if (item.empty() || ec != std::errc() || ptr != end || value < 1 || value > kMaxThreads) throw fail();
    if (std::find(threads.begin(), threads.end(), value) != threads.end()) throw fail();
    threads.push_back(value);
  }
  return threads;
}

std::vector<DType> parse_dtypes(const std::string& text) {
  std::vector<DType> dtypes;
  for (const std::string& item : split_list(text)) {
    const std::optional<DType> dtype = parse_dtype(item);
    if (!dtype || *dtype == DType::F64 || std::find(dtypes.begin(), dtypes.end(), *dtype) != dtypes.end()) {
      throw UsageError(
          detail::concat("bench: --dtypes must list distinct types from float32, bfloat16, float16 (got \"", text, "\")"));
    }
    dtypes.push_back(*dtype);
  }
  return dtypes;
}

std::string threads_list(const std::vector<int>& threads) {
  std::string text;
  for (int t : threads) {
    if (!text.empty()) text += ',';
    text += std::to_string(t);
  }
  return text;
}

bool is_attention_case(const std::string& name) {
  return std::find(bench::kAttentionCaseNames.begin(), bench::kAttentionCaseNames.end(), name) !=
         bench::kAttentionCaseNames.end();
}

// The kernel and attention cases --cases names, each list in its run order.
std::pair<std::vector<std::string>, std::vector<std::string>> parse_cases(const std::string& text) {
  std::vector<std::string> chosen;
  bool any = false;
  for (const std::string& item : split_list(text)) {
    if (item == "copy" || item == "copy_inplace") {
      any = true;  // the streams are always measured
      continue;
    }
    if (std::find(bench::kWorkloadNames.begin(), bench::kWorkloadNames.end(), item) == bench::kWorkloadNames.end() &&
        !is_attention_case(item)) {
      throw UsageError(detail::concat(
          "bench: --cases entries must be prefill, prefill_long, decode, varlen, attn_decode, attn_decode_32k,"
          " attn_prefill or copy (got \"", item, "\" in \"", text, "\")"));
    }
    any = true;
    if (std::find(chosen.begin(), chosen.end(), item) == chosen.end()) chosen.push_back(item);
  }
  if (!any) throw UsageError(detail::concat("bench: --cases must name at least one case (got \"", text, "\")"));
  std::vector<std::string> ordered, attention;  // run in a fixed order whatever the list's order
  for (const std::string& name : bench::kWorkloadNames) {
    if (std::find(chosen.begin(), chosen.end(), name) != chosen.end()) ordered.push_back(name);
  }
  for (const std::string& name : bench::kAttentionCaseNames) {
    if (std::find(chosen.begin(), chosen.end(), name) != chosen.end()) attention.push_back(name);
  }
  return {ordered, attention};
}

BenchOptions parse_options(Args& args) {
  BenchOptions options;
  options.as_json = args.has_switch("--json");
  options.quick = args.has_switch("--quick");
  const std::optional<std::string> threads_text = args.value("--threads");
  const std::optional<std::string> cases_text = args.value("--cases");
  const std::optional<std::string> dtypes_text = args.value("--dtypes");
  const std::optional<int64_t> repetitions_arg = args.integer("--repetitions", 1, 10000);
  const std::optional<std::string> target_text = args.value("--target");
  options.torch_python = args.value("--torch");
  options.torch_compile = args.has_switch("--torch-compile") || !options.quick;
  options.peers_dir = args.value("--peers-dir", "a directory");
  args.finish();
  if (threads_text) options.threads = parse_threads(*threads_text);
  options.torch_threads = options.threads;
  if (options.quick && !threads_text) {
    options.torch_threads = {*std::max_element(options.threads.begin(), options.threads.end())};
  }
  if (dtypes_text) options.dtypes = parse_dtypes(*dtypes_text);
  if (cases_text) {
    std::tie(options.workloads, options.attention) = parse_cases(*cases_text);
  } else {
    for (const std::string& name : bench::kWorkloadNames) {
      if (!(options.quick && name == "prefill_long")) options.workloads.push_back(name);
    }
    // Attention takes minutes (a 4,096-token prefill is 1-3 s a call): the full bench only.
    if (!options.quick) options.attention = bench::kAttentionCaseNames;
  }
  options.repetitions = repetitions_arg ? static_cast<int>(*repetitions_arg)
                                        : (options.quick ? kQuickRepetitions : kDefaultRepetitions);
  if (options.torch_python && options.torch_python->empty()) {
    throw UsageError("bench: --torch must name a Python executable or be none (got \"\")");
  }
  if (target_text) options.target = bench::resolve_target(*target_text);
  bench::check_target_environment(options.target);
  return options;
}

// The workloads and attention cases the options name, and the largest position any of them
// reads (the table is sized to it once, outside every timed call).
int64_t make_cases(const BenchOptions& options, std::vector<bench::Workload>& workloads,
                   std::vector<bench::AttentionCase>& attention_cases) {
  int64_t max_position = 0;
  for (const std::string& name : options.workloads) {
    workloads.push_back(bench::make_workload(name));
    max_position = std::max(max_position, workloads.back().max_position);
  }
  for (const std::string& name : options.attention) {
    attention_cases.push_back(bench::make_attention_case(name));
    if (attention_cases.back().prefill) max_position = std::max(max_position, attention_cases.back().keys - 1);
  }
  return max_position;
}

// Steps 4 and 4b: the kernels, then attention (the FMA peak first: the prefill rows' ceiling).
void measure_kernels_and_attention(bench::MeasureContext& context, const BenchOptions& options,
                                   const std::vector<bench::Workload>& workloads,
                                   const std::vector<bench::AttentionCase>& attention_cases, const CosSinTable& table,
                                   int64_t prefill_elements, bench::FmaPeaks& peaks) {
  const auto stream_bytes = [&](DType dtype) { return static_cast<size_t>(prefill_elements * dtype_size(dtype)); };
  for (const bench::Workload& workload : workloads) {
    const int repetitions =
        workload.name == "prefill_long" ? std::min(options.repetitions, kLongRepetitionsCap) : options.repetitions;
    for (DType dtype : options.dtypes) {
      bench::measure_workload(context, workload, dtype, options.threads, repetitions, table, stream_bytes(dtype));
    }
  }
  if (!attention_cases.empty()) {
    bench::measure_fma_peaks(context, options.threads, std::min(options.repetitions, 5), peaks);
    for (const bench::AttentionCase& c : attention_cases) {
      const int repetitions =
          c.prefill ? std::min(options.repetitions, bench::kAttentionPrefillRepetitionsCap) : options.repetitions;
      for (DType dtype : options.dtypes) {
        bench::measure_attention(context, c, dtype, options.threads, repetitions, table, stream_bytes(dtype), peaks);
      }
    }
  }
}

// Step 5: PyTorch, side by side, in another process: its ratio_to_copy divides by OUR floors.
// Returns the note for the closing lines (why it was skipped, or what it ran).
std::string run_torch_peers(Args& args, const BenchOptions& options, const std::vector<bench::Workload>& workloads,
                            const std::vector<bench::AttentionCase>& attention_cases, const RopeSpec& spec,
                            bool full_text, bench::StreamFloors& floors, bench::FmaPeaks& peaks,
                            const std::function<void(bench::Row)>& keep_row) {
  const bench::PeerOptions peer_options{.python = options.torch_python,
                                        .peers_dir = options.peers_dir,
                                        .threads = options.torch_threads,
                                        .dtypes = options.dtypes,
                                        .repetitions = options.repetitions,
                                        .quick = options.quick,
                                        .compile = options.torch_compile,
                                        .threads_note = options.torch_threads.size() == options.threads.size()
                                                            ? std::string()
                                                            : detail::concat("--quick: PyTorch at ",
                                                                             options.torch_threads.front(),
                                                                             " threads only (--threads ",
                                                                             threads_list(options.threads),
                                                                             " runs it at each)"),
                                        .progress = full_text};
  std::string torch_note = bench::run_torch_peer(peer_options,
                                                 workloads, spec, args.out(), [&](bench::Row row) {
                                                   floors.compare(row);
                                                   // Another process: only its own spread is known.
                                                   bench::judge_noise(row, std::nan(""));
                                                   keep_row(std::move(row));
                                                 });

  // PyTorch's attention (eager RoPE + scaled_dot_product_attention) on the attention cases:
  // decode against OUR copy floors, prefill against OUR FMA peak.
  if (!attention_cases.empty() && torch_note.find("skipped") == std::string::npos) {
    const std::string attention_note = bench::run_torch_attention_peer(
        peer_options, attention_cases, args.out(), [&](bench::Row row, double flops) {
          if (row.baseline == "copy") floors.compare(row);
          peaks.compare(row, flops);
          bench::judge_noise(row, std::nan(""));
          keep_row(std::move(row));
        });
    if (!attention_note.empty()) {
      torch_note += (torch_note.empty() ? "" : "\n") + attention_note;
    }
  }
  return torch_note;
}

}  // namespace

int run_bench(Args& args) {
  const BenchOptions options = parse_options(args);
  if (args.parse_only()) return 0;

  // 1. The machine.
  const bench::CpuSnapshot started = bench::cpu_snapshot();
  const double clock_at_start_ghz = bench::add_chain_ghz();
  bench::SettingsGuard guard;
  if (options.target) {
    force_cpu_target(*options.target);
    guard.forced();
  }
  // The target both the streams and the kernels run with ($ROTARY_CPU_TARGET applied).
  const std::string target = bandwidth::stream_target();

  // 2. The table, built once, outside every timed call.
  std::vector<bench::Workload> workloads;
  std::vector<bench::AttentionCase> attention_cases;
  const int64_t max_position = make_cases(options, workloads, attention_cases);
  // The preset gives the frequencies; the workloads' head counts are the bench's own (the decode
  // case has 40 q heads), so the spec's head counts, which apply() checks tensors against, go.
  RopeSpec spec = preset(kDefaultPreset).spec;
  spec.num_attention_heads = 0;
  spec.num_key_value_heads = 0;
  const auto table_started = std::chrono::steady_clock::now();
  const CosSinTable table(spec, {.precision = Precision::Exact, .storage = Storage::Stored});
  table.reserve_positions(max_position + 1);
  const double table_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - table_started).count();

  // The full text table is printed as it is measured, with progress on stderr; --quick prints
  // its short table at the end, --json its list.
  const bool full_text = !options.as_json && !options.quick;
  const std::string cpu_model = bench::cpu_model_name();
  const std::string cpu_flags = bench::cpu_simd_flags();
  if (full_text) {
    bench::print_preamble(args.out(), {.preset = spec.name,
                                       .table_rows = table.size(),
                                       .table_ms = table_ms,
                                       .target = target,
                                       .repetitions = options.repetitions,
                                       .long_repetitions_cap = kLongRepetitionsCap,
                                       .cpu_model = cpu_model,
                                       .cpu_flags = cpu_flags});
  }
  // Rows this process times: 7 stream rows per dtype and thread count (copy and copy_inplace in
  // two patterns and the faster, memcpy), 2 kernel rows per workload, dtype and thread count;
  // with attention, one fma_peak row per thread count, and per dtype and thread count one row
  // per decode case and two (fused, unfused) for the prefill.
  size_t attention_rows_per_config = 0;
  for (const bench::AttentionCase& c : attention_cases) attention_rows_per_config += c.prefill ? 2 : 1;
  const size_t own_rows_expected =
      options.dtypes.size() * options.threads.size() * (7 + 2 * workloads.size() + attention_rows_per_config) +
      (attention_cases.empty() ? 0 : options.threads.size());
  size_t own_rows_done = 0;
  std::vector<bench::Row> rows;
  const bool progress_in_place = &args.err() == &std::cerr && ::isatty(STDERR_FILENO) == 1;
  const auto keep_row = [&](bench::Row row) {
    if (full_text && progress_in_place) args.err() << "\r\033[K" << std::flush;  // the progress line goes
    if (full_text) bench::print_row(args.out(), row);
    rows.push_back(std::move(row));
  };
  // Each row is judged by the CPU other processes took since the previous row; rows added
  // together (the three of a stream pair) share their interval's figure.
  bench::CpuSnapshot last_snapshot = started;
  double last_other_percent = std::nan("");
  const auto add_row = [&](bench::Row row) {
    const bench::CpuSnapshot now = bench::cpu_snapshot();
    const double other_percent = bench::other_cpu_percent(last_snapshot, now);
    if (!std::isnan(other_percent)) {
      last_other_percent = other_percent;
      last_snapshot = now;
    }
    bench::judge_noise(row, last_other_percent);
    keep_row(std::move(row));
    ++own_rows_done;
    if (full_text) {
      // On a terminal one line, rewritten in place (cleared before the next row is printed on
      // stdout); elsewhere one line per row.
      args.err() << format_line("%srotary bench: %zu of %zu rows, %.0f s%s", progress_in_place ? "\r\033[K" : "",
                                own_rows_done, own_rows_expected,
                                std::chrono::duration<double>(now.when - started.when).count(),
                                progress_in_place ? "" : "\n");
      args.err().flush();
    }
  };

  // 3. The floors, over q + k of prefill in each dtype.
  const int64_t prefill_elements = bench::make_workload("prefill").elements();
  const auto stream_bytes = [&](DType dtype) { return static_cast<size_t>(prefill_elements * dtype_size(dtype)); };
  bandwidth::Streams streams(stream_bytes(DType::F32));
  bench::MeasureContext context{.streams = streams, .repetitions = options.repetitions, .target = target,
                                .add_row = add_row};
  bench::StreamFloors floors;
  for (DType dtype : options.dtypes) {
    for (int threads : options.threads) bench::measure_streams(context, dtype, threads, stream_bytes(dtype), floors);
  }

  // 4. The kernels; 4b. attention.
  bench::FmaPeaks peaks;
  measure_kernels_and_attention(context, options, workloads, attention_cases, table, prefill_elements, peaks);

  // 5. PyTorch.
  bench::Closing closing;
  closing.cpu_model = cpu_model;
  closing.cpu_flags = cpu_flags;
  closing.torch_note = run_torch_peers(args, options, workloads, attention_cases, spec, full_text, floors, peaks, keep_row);

  // 6. How quiet the machine was, and the output.
  const bench::CpuSnapshot finished = bench::cpu_snapshot();
  closing.contention = bench::contention_line(started, finished);
  closing.core_clock = bench::core_clock_line(clock_at_start_ghz, bench::add_chain_ghz());
  closing.total_s = std::chrono::duration<double>(finished.when - started.when).count();
  if (full_text && progress_in_place) args.err() << "\r\033[K" << std::flush;
  if (options.as_json) {
    bench::print_json(args.out(), args.err(), rows, closing);
  } else if (options.quick) {
    bench::print_quick(args.out(), {.preset = spec.name, .target = target, .repetitions = options.repetitions}, rows,
                       closing);
  } else {
    bench::print_closing_text(args.out(), closing, rows);
  }
  return 0;
}

}  // namespace rotary::cli
