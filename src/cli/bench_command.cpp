// src/cli/bench_command.cpp: `rotary bench`: the kernels' time and GB/s next to this machine's
// copy bandwidth and PyTorch, all measured in one run.
//
// RoPE is memory-bound: a call reads q and k once and writes them once, so its floor is a
// stream of the same bytes. Every kernel row is therefore divided by a stream of the same dtype
// and thread count (bench/copy_bandwidth.hpp): out-of-place rows by "copy" (a streaming-store
// copy: glibc's memcpy would use ordinary stores at this size here and run at half the speed, see
// copy_bandwidth.hpp), in-place rows by "copy_inplace" (a read-modify-write stream), both over
// q + k of the prefill case; a call that fits in the caches (decode) by a stream of its own
// bytes, "cached_copy" (memcpy) or "cached_copy_inplace" (Streams::run_cached). The
// stream is timed in alternation with the row's own repetitions (bench::time_paired): on this
// shared 2-core machine other processes' load comes and goes (memcpy alone measured 8.5 to 15.5
// GB/s in runs minutes apart), and a stream timed at another moment would move the ratios by as
// much. Each timed repetition of either follows an untimed run of the same operation, so that
// neither is timed in the cache and memory state the other left. The copy rows at the top are
// the same streams timed on their own.
//
// Shapes are Llama-3-8B's (head_dim 128, q 32 heads, k 8 heads; issue 5):
//   prefill       BSHD, batch 1, 4096 tokens, positions 0..4095
//   prefill_long  the same with 32,768 tokens
//   decode        BSHD, 64 sequences x 1 token at scattered per-token positions, q 40 heads
//                 (the decode target: under 50 us per call with 1 thread)
//   varlen        THD, 8 packed sequences of 128..2560 tokens (8192 in all) with cu_seqlens,
//                 positions from 0 in each sequence
// The table (llama-3.1-8b preset, Exact, Stored) is built once before any timing, up to the
// largest position used, so no timed call builds rows.
//
// PyTorch rows come from ../shared/peers/torch_rope_bench.py, run on the same shapes, dtypes
// and thread counts; their ratio_to_copy uses OUR copy measurement (torch's own copy stays as
// the torch_copy row).
#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "commands.hpp"
#include "copy_bandwidth.hpp"
#include "rotary/apply.hpp"
#include "rotary/error.hpp"
#include "rotary/json.hpp"
#include "rotary/presets.hpp"
#include "rotary/table.hpp"
#include "rotary/tensor.hpp"

extern char** environ;

namespace rotary::cli {

const char* const kBenchHelp =
    "usage: rotary bench [--json] [--quick] [--threads LIST] [--cases LIST] [--dtypes LIST]\n"
    "                    [--repetitions N]\n"
    "                    [--target NAME] [--torch PYTHON|none]\n"
    "\n"
    "Times rotary::apply on Llama-3-8B shapes (head_dim 128, q 32 heads, k 8 heads) in float32\n"
    "and bfloat16, out of place and in place, next to memory streams measured in the same run,\n"
    "each over a buffer the size of q + k of the prefill case: \"copy\" (a copy with streaming\n"
    "stores, as glibc's memcpy does for large buffers), \"memcpy\" (glibc's memcpy as called, for\n"
    "reference) and \"copy_inplace\" (x[i] *= 1.0000001f in place). copy and copy_inplace are\n"
    "each timed sequentially and four pages at a time (rows <stream>_sequential, <stream>_4pages);\n"
    "the faster is this machine's floor.\n"
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
    "rows, bound by arithmetic, with it).\n"
    "\n"
    "cases:\n"
    "  copy, memcpy, copy_inplace  the streams (always measured: every ratio needs them)\n"
    "  prefill       bshd, batch 1, 4096 tokens, positions 0..4095\n"
    "  prefill_long  bshd, batch 1, 32768 tokens, positions 0..32767\n"
    "  decode        bshd, 64 sequences x 1 token at scattered positions < 32768, q 40 heads\n"
    "                (the issue's decode target: 40 heads, under 50 us with 1 thread)\n"
    "  varlen        thd, 8 packed sequences of 128..2560 tokens (8192 in all), cu_seqlens,\n"
    "                positions from 0 in each sequence\n"
    "  torch_<formulation>  PyTorch eager baselines from ../shared/peers/torch_rope_bench.py on\n"
    "                the prefill, prefill_long and decode shapes (bshd; its decode positions are\n"
    "                all 0): torch_hf (Hugging Face's gather + rotate_half), torch_hf_apply (cos/sin\n"
    "                pre-gathered), torch_hf_noalloc (preallocated outputs), torch_meta (complex\n"
    "                multiply, float32), torch_copy (torch's own copy_)\n"
    "\n"
    "  --json            a JSON list of rows: {case, workload, dtype, threads, in_place, layout,\n"
    "                    shape, bytes, median_ms, min_ms, gb_per_s, ratio_to_copy, baseline,\n"
    "                    baseline_gb_per_s, target, repetitions, calls_per_repetition, core_ghz}:\n"
    "                    core_ghz is the core's effective clock just before the row was timed\n"
    "                    (null for PyTorch rows); notes\n"
    "                    (PyTorch missing, a busy machine) go to stderr\n"
    "  --quick           5 repetitions (3 for PyTorch) and no prefill_long unless --cases\n"
    "                    names it: 20-30 s instead of 2-3 minutes\n"
    "  --threads LIST    thread counts, comma-separated (default 1,2): set_num_threads for the\n"
    "                    kernels, std::threads for the streams, torch.set_num_threads for PyTorch\n"
    "  --dtypes LIST     storage types, from float32, bfloat16, float16 (default float32,bfloat16)\n"
    "  --cases LIST      comma-separated, from prefill, prefill_long, decode, varlen, copy\n"
    "                    (default: all but prefill_long with --quick)\n"
    "  --repetitions N   timed repetitions per row (default 15; 5 with --quick; prefill_long and\n"
    "                    PyTorch on it use at most 5 and 2)\n"
    "  --target NAME     force a SIMD target (AVX3, AVX2, SSE4, ...: one of the targets compiled\n"
    "                    in that this CPU supports; default: the best)\n"
    "  --torch PYTHON    the Python that runs the PyTorch baseline (default: ./.venv/bin/python,\n"
    "                    else python3, if it imports torch; none: skip). The script is looked for\n"
    "                    in $ROTARY_PEERS_DIR, ../shared/peers, ../../shared/peers (from the\n"
    "                    current directory) and ../../shared/peers from the executable's directory.\n"
    "                    Without torch one line says so and the PyTorch rows are left out.\n";

namespace {

// ---- shapes -------------------------------------------------------------------------------------

constexpr int64_t kHeadDim = 128;
constexpr int64_t kQHeads = 32;        // Llama-3-8B num_attention_heads
constexpr int64_t kKvHeads = 8;        // num_key_value_heads (GQA)
constexpr int64_t kDecodeQHeads = 40;  // issue 5's decode target: 64 x 1 token, 40 heads
constexpr int64_t kDecodeSequences = 64;
constexpr int64_t kDecodePositionLimit = 32768;  // decode positions are drawn from [0, this)
constexpr int64_t kPrefillTokens = 4096;
constexpr int64_t kLongPrefillTokens = 32768;
// Mixed lengths, short and long interleaved; they sum to 8192 tokens.
constexpr std::array<int64_t, 8> kVarlenLengths = {2048, 512, 1536, 128, 1024, 2560, 256, 128};

constexpr int kDefaultRepetitions = 15;
constexpr int kQuickRepetitions = 5;
constexpr int kLongRepetitionsCap = 5;       // prefill_long: each call moves 0.7-1.3 GB
constexpr int kTorchLongRepetitionsCap = 2;  // eager PyTorch on prefill_long: 0.5-4 s per call
constexpr int kTorchQuickRepetitionsCap = 3;
constexpr int kMaxThreads = 256;             // set_num_threads' limit

const std::vector<std::string> kWorkloadNames = {"prefill", "prefill_long", "decode", "varlen"};

struct Workload {
  std::string name;
  Layout layout = Layout::BSHD;
  std::array<int64_t, 4> q_shape{};  // THD: (tokens, heads, dim, 1); contiguous_view reads 3
  std::array<int64_t, 4> k_shape{};
  std::vector<int64_t> per_token_positions;  // empty: position = index within the sequence
  std::vector<int64_t> cu_seqlens;           // THD only
  int64_t max_position = 0;
  std::string shape;  // for people
  // The same shape for torch_rope_bench.py (BSHD, positions arange(tokens)); 0 = not expressible.
  int64_t torch_batch = 0, torch_tokens = 0, torch_heads_q = 0;

  int64_t elements() const {
    const auto product = [](const std::array<int64_t, 4>& s) {
      int64_t n = 1;
      for (int64_t d : s) n *= d;
      return n;
    };
    return product(q_shape) + product(k_shape);
  }
};

Workload make_prefill(const std::string& name, int64_t tokens) {
  Workload w;
  w.name = name;
  w.layout = Layout::BSHD;
  w.q_shape = {1, tokens, kQHeads, kHeadDim};
  w.k_shape = {1, tokens, kKvHeads, kHeadDim};
  w.max_position = tokens - 1;
  w.shape = detail::concat("q [1,", tokens, ",32,128] k [1,", tokens, ",8,128], pos 0..", tokens - 1);
  w.torch_batch = 1;
  w.torch_tokens = tokens;
  w.torch_heads_q = kQHeads;
  return w;
}

Workload make_decode() {
  Workload w;
  w.name = "decode";
  w.layout = Layout::BSHD;
  w.q_shape = {kDecodeSequences, 1, kDecodeQHeads, kHeadDim};
  w.k_shape = {kDecodeSequences, 1, kKvHeads, kHeadDim};
  std::mt19937_64 generator(20240605);
  std::uniform_int_distribution<int64_t> position(0, kDecodePositionLimit - 1);
  for (int64_t s = 0; s < kDecodeSequences; ++s) w.per_token_positions.push_back(position(generator));
  w.max_position = *std::max_element(w.per_token_positions.begin(), w.per_token_positions.end());
  w.shape = detail::concat("q [64,1,40,128] k [64,1,8,128], 64 scattered pos < ", kDecodePositionLimit);
  w.torch_batch = kDecodeSequences;
  w.torch_tokens = 1;
  w.torch_heads_q = kDecodeQHeads;
  return w;
}

Workload make_varlen() {
  Workload w;
  w.name = "varlen";
  w.layout = Layout::THD;
  int64_t tokens = 0;
  w.cu_seqlens.push_back(0);
  for (int64_t length : kVarlenLengths) {
    tokens += length;
    w.cu_seqlens.push_back(tokens);
    w.max_position = std::max(w.max_position, length - 1);
  }
  w.q_shape = {tokens, kQHeads, kHeadDim, 1};
  w.k_shape = {tokens, kKvHeads, kHeadDim, 1};
  w.shape = detail::concat("q [", tokens, ",32,128] k [", tokens, ",8,128], ", kVarlenLengths.size(),
                           " seqs of 128..2560, pos from 0");
  return w;
}

Workload make_workload(const std::string& name) {
  if (name == "prefill") return make_prefill(name, kPrefillTokens);
  if (name == "prefill_long") return make_prefill(name, kLongPrefillTokens);
  if (name == "decode") return make_decode();
  return make_varlen();
}

// Random non-zero values: sign random, magnitude in [0.25, 2), then rounded to the dtype.
void fill_random(std::byte* data, DType dtype, int64_t count, uint64_t seed) {
  uint64_t state = seed;
  auto next = [&state] {  // splitmix64: fast enough for 10^8 elements
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  for (int64_t i = 0; i < count; ++i) {
    const uint64_t bits = next();
    const float magnitude = 0.25f + 1.75f * static_cast<float>(bits >> 40) * 0x1.0p-24f;
    const float value = (bits & 1) ? -magnitude : magnitude;
    if (dtype == DType::BF16) {
      reinterpret_cast<uint16_t*>(data)[i] = float_to_bf16(value);
    } else if (dtype == DType::F16) {
      reinterpret_cast<uint16_t*>(data)[i] = float_to_f16(value);
    } else {
      reinterpret_cast<float*>(data)[i] = value;
    }
  }
}

// ---- rows ---------------------------------------------------------------------------------------

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
  // (bench::time_paired); for PyTorch rows, the copy row of the same dtype and threads.
  double baseline_gb_per_s = 0.0;
  std::string target;
  int repetitions = 0;
  int64_t calls_per_repetition = 1;
  // The core's effective clock just before the row was timed (add_chain_ghz), NaN (null) where
  // not measured (PyTorch rows): the rows bound by arithmetic move with it.
  double core_ghz = std::nan("");
};

// The stream bandwidths of this run, by (dtype, threads).
struct StreamKey {
  std::string dtype;
  int threads = 0;
  bool operator<(const StreamKey& other) const {
    return std::tie(dtype, threads) < std::tie(other.dtype, other.threads);
  }
};
struct StreamBandwidth {
  double copy_gb_per_s = std::nan("");
  double copy_inplace_gb_per_s = std::nan("");
};

// Sets a row's baseline to the stream row of its dtype and threads measured at the start.
void compare_with_stream_rows(const std::map<StreamKey, StreamBandwidth>& streams, Row& row) {
  row.baseline = row.in_place ? "copy_inplace" : "copy";
  const auto found = streams.find({row.dtype, row.threads});
  row.baseline_gb_per_s = found == streams.end()
                              ? std::nan("")
                              : (row.in_place ? found->second.copy_inplace_gb_per_s : found->second.copy_gb_per_s);
  row.ratio_to_copy = row.gb_per_s / row.baseline_gb_per_s;
}

void print_header(std::ostream& stream) {
  stream << format_line(
      "%-17s %-8s %3s %-8s %-6s %10s %8s %9s %6s %-13s %4s %5s  %s\n", "case", "dtype", "thr", "in_place", "layout",
      "median_ms", "GB/s", "base_GB/s", "ratio", "target", "reps", "GHz", "shape");
}

void print_row(std::ostream& stream, const Row& row) {
  stream << format_line(
      "%-17s %-8s %3d %-8s %-6s %10.4f %8.2f %9.2f %6.3f %-13s %4d %5.2f  %s\n", row.name.c_str(), row.dtype.c_str(),
      row.threads, row.in_place ? "yes" : "no", row.layout.c_str(), row.median_ms, row.gb_per_s, row.baseline_gb_per_s,
      row.ratio_to_copy, row.target.c_str(), row.repetitions, row.core_ghz, row.shape.c_str());
}

void write_json(std::ostream& stream, const std::vector<Row>& rows) {
  json::Writer out;
  out.begin_array();
  for (const Row& row : rows) {
    out.begin_object();
    out.key("case").value(row.name);
    out.key("workload").value(row.workload);
    out.key("dtype").value(row.dtype);
    out.key("threads").value(row.threads);
    out.key("in_place").value(row.in_place);
    out.key("layout").value(row.layout);
    out.key("shape").value(row.shape);
    out.key("bytes").value(row.bytes);
    out.key("median_ms").value(row.median_ms);
    out.key("min_ms").value(row.min_ms);
    out.key("gb_per_s").value(row.gb_per_s);
    out.key("ratio_to_copy").value(row.ratio_to_copy);  // null when NaN
    out.key("baseline").value(row.baseline);
    out.key("baseline_gb_per_s").value(row.baseline_gb_per_s);
    out.key("target").value(row.target);
    out.key("repetitions").value(row.repetitions);
    out.key("calls_per_repetition").value(row.calls_per_repetition);
    out.key("core_ghz").value(row.core_ghz);  // null when NaN
    out.end_object();
  }
  out.end_array();
  stream << out.str() << "\n";
}

// ---- command line -------------------------------------------------------------------------------

struct BenchOptions {
  bool as_json = false;
  bool quick = false;
  std::vector<int> threads{1, 2};
  std::vector<DType> dtypes{DType::F32, DType::BF16};
  std::vector<std::string> workloads;  // kernel cases, in kWorkloadNames order
  int repetitions = kDefaultRepetitions;
  std::optional<std::string> target;
  std::optional<std::string> torch_python;
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

std::vector<std::string> parse_cases(const std::string& text) {
  std::vector<std::string> chosen;
  bool any = false;
  for (const std::string& item : split_list(text)) {
    if (item == "copy" || item == "copy_inplace") {
      any = true;  // the streams are always measured
      continue;
    }
    if (std::find(kWorkloadNames.begin(), kWorkloadNames.end(), item) == kWorkloadNames.end()) {
      throw UsageError(detail::concat(
          "bench: --cases entries must be prefill, prefill_long, decode, varlen or copy (got \"", item, "\" in \"",
          text, "\")"));
    }
    any = true;
    if (std::find(chosen.begin(), chosen.end(), item) == chosen.end()) chosen.push_back(item);
  }
  if (!any) throw UsageError(detail::concat("bench: --cases must name at least one case (got \"", text, "\")"));
  std::vector<std::string> ordered;  // run in a fixed order whatever the list's order
  for (const std::string& name : kWorkloadNames) {
    if (std::find(chosen.begin(), chosen.end(), name) != chosen.end()) ordered.push_back(name);
  }
  return ordered;
}

// The canonical name of a --target value (case-insensitive), or a UsageError listing the choices.
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

// Restores the thread count and the automatic target choice however the command ends.
class SettingsGuard {
 public:
  SettingsGuard() : threads_(num_threads()) {}
  ~SettingsGuard() {
    try {
      set_num_threads(threads_);
      if (forced_) force_cpu_target("");
    } catch (...) {  // never throw from a destructor; the process is ending anyway
    }
  }
  void forced() { forced_ = true; }

 private:
  int threads_;
  bool forced_ = false;
};

// ---- PyTorch ------------------------------------------------------------------------------------

// Runs argv[0] (found on PATH) with stdin from /dev/null and stdout, stderr into files. Returns
// the exit code, or -1 when it could not be started or did not exit normally.
int run_process(const std::vector<std::string>& argv, const std::string& stdout_path, const std::string& stderr_path) {
  std::vector<char*> pointers;
  for (const std::string& arg : argv) pointers.push_back(const_cast<char*>(arg.c_str()));
  pointers.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&actions, 2, stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  pid_t pid = 0;
  const int spawned = posix_spawnp(&pid, pointers[0], &actions, nullptr, pointers.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) return -1;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// The last non-empty line of a file (for a failure message), cut to 200 characters.
std::string last_line(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "r");
  if (file == nullptr) return "";
  std::string line, last;
  char buffer[4096];
  while (std::fgets(buffer, sizeof buffer, file) != nullptr) {
    line = buffer;
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
    if (!line.empty()) last = line;
  }
  std::fclose(file);
  return last.size() > 200 ? last.substr(0, 200) + "..." : last;
}

std::optional<std::string> find_torch_script() {
  namespace fs = std::filesystem;
  std::vector<fs::path> directories;
  if (const char* peers = std::getenv("ROTARY_PEERS_DIR"); peers != nullptr && *peers != '\0') {
    directories.emplace_back(peers);
  }
  directories.emplace_back("../shared/peers");
  directories.emplace_back("../../shared/peers");
  std::error_code error;
  const fs::path executable = fs::read_symlink("/proc/self/exe", error);
  if (!error) directories.push_back(executable.parent_path() / "../../shared/peers");  // build/rotary
  for (const fs::path& directory : directories) {
    const fs::path script = directory / "torch_rope_bench.py";
    if (fs::is_regular_file(script, error)) return fs::absolute(script, error).lexically_normal().string();
  }
  return std::nullopt;
}

class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/rotary-bench-XXXXXX";
    if (mkdtemp(pattern.data()) != nullptr) path_ = pattern;
  }
  ~TempDir() {
    std::error_code error;
    if (!path_.empty()) std::filesystem::remove_all(path_, error);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// torch_rope_bench.py's "results" as rows; bytes follow the same rule as ours.
std::vector<Row> read_torch_rows(const json::Value& root, const Workload& workload, const std::string& target) {
  const json::Value* results = root.find("results");
  if (results == nullptr || !results->is_array()) throw Error("its JSON has no \"results\" list");
  std::vector<Row> rows;
  for (const json::Value& item : results->as_array()) {
    const json::Value* method = item.find("method");
    const json::Value* dtype = item.find("dtype");
    const json::Value* threads = item.find("threads");
    const json::Value* layout = item.find("layout");
    const json::Value* median = item.find("median_ms");
    const json::Value* minimum = item.find("min_ms");
    const json::Value* reps = item.find("reps");
    if (method == nullptr || !method->is_string() || dtype == nullptr || !dtype->is_string() || threads == nullptr ||
        !threads->is_integer() || median == nullptr || !median->is_number()) {
      throw Error(detail::concat("a result lacks method, dtype, threads or median_ms (got ", item.describe(), ")"));
    }
    const std::optional<DType> parsed_dtype = parse_dtype(dtype->as_string());
    if (!parsed_dtype) continue;  // a dtype rotary does not bench
    Row row;
    row.name = "torch_" + method->as_string();
    row.workload = workload.name;
    row.dtype = dtype->as_string();
    row.threads = static_cast<int>(threads->as_int64());
    row.in_place = false;
    row.layout = layout != nullptr && layout->is_string() ? layout->as_string() : "-";
    row.shape = detail::concat("q [", workload.torch_batch, ",", workload.torch_tokens, ",", workload.torch_heads_q,
                               ",128] k [", workload.torch_batch, ",", workload.torch_tokens, ",8,128], ",
                               workload.torch_tokens == 1
                                   ? std::string("pos 0 (the script's arange)")
                                   : detail::concat("pos 0..", workload.torch_tokens - 1));
    row.bytes = workload.elements() * dtype_size(*parsed_dtype) * 2;
    row.median_ms = median->as_double();
    row.min_ms = minimum != nullptr && minimum->is_number() ? minimum->as_double() : row.median_ms;
    row.gb_per_s = bench::gb_per_s(row.bytes, row.median_ms);
    row.target = target;
    row.repetitions = reps != nullptr && reps->is_integer() ? static_cast<int>(reps->as_int64()) : 0;
    rows.push_back(std::move(row));
  }
  return rows;
}

// Finds a Python that imports torch and the script, runs the script once per workload it can
// express, and hands each row to add_row. Never throws: returns one line for people saying what
// ran, or why PyTorch rows are missing.
std::string run_torch(const BenchOptions& options, const std::vector<Workload>& workloads, const RopeSpec& spec,
                      std::ostream& progress, const std::function<void(Row)>& add_row) {
  if (std::none_of(workloads.begin(), workloads.end(), [](const Workload& w) { return w.torch_tokens > 0; })) {
    return "";  // nothing the script can run (varlen, or the streams alone)
  }
  if (options.torch_python && *options.torch_python == "none") return "torch: skipped (--torch none)";
  const auto imports_torch = [](const std::string& python) {
    return run_process({python, "-c", "import torch"}, "/dev/null", "/dev/null") == 0;
  };
  std::string python;
  if (options.torch_python) {
    if (!imports_torch(*options.torch_python)) {
      return detail::concat("torch: ", *options.torch_python, " cannot import torch (PyTorch rows skipped)");
    }
    python = *options.torch_python;
  } else {
    std::error_code error;
    if (std::filesystem::exists(".venv/bin/python", error) && imports_torch(".venv/bin/python")) {
      python = ".venv/bin/python";
    } else if (imports_torch("python3")) {
      python = "python3";
    } else {
      return "torch: not installed (PyTorch rows skipped)";
    }
  }
  const std::optional<std::string> script = find_torch_script();
  if (!script) {
    return "torch: torch_rope_bench.py not found in $ROTARY_PEERS_DIR, ../shared/peers, ../../shared/peers or "
           "../../shared/peers from the executable's directory (PyTorch rows skipped)";
  }
  const TempDir temp;
  if (temp.path().empty()) return "torch: could not create a temporary directory (PyTorch rows skipped)";
  std::string version = "torch";
  for (const Workload& workload : workloads) {
    if (workload.torch_tokens == 0) continue;  // THD: the script has no packed layout
    int repetitions = options.repetitions;
    if (options.quick) repetitions = std::min(repetitions, kTorchQuickRepetitionsCap);
    if (workload.name == "prefill_long") repetitions = std::min(repetitions, kTorchLongRepetitionsCap);
    if (!options.as_json) {
      progress << format_line(
          "# torch: running torch_rope_bench.py on %s (%d repetitions)...\n", workload.name.c_str(), repetitions);
    }
    const std::string json_path = temp.path() + "/" + workload.name + ".json";
    const std::string stdout_path = temp.path() + "/" + workload.name + ".out";
    const std::string stderr_path = temp.path() + "/" + workload.name + ".err";
    // The script's flags (see its argparse): one shape, BSHD only, arange positions, no table
    // timing, one warm-up like ours.
    std::vector<std::string> argv = {python, *script,
                                     "--batch", std::to_string(workload.torch_batch),
                                     "--tokens", std::to_string(workload.torch_tokens),
                                     "--heads-q", std::to_string(workload.torch_heads_q),
                                     "--heads-kv", std::to_string(kKvHeads),
                                     "--head-dim", std::to_string(kHeadDim),
                                     "--theta", detail::shortest(spec.theta_base),
                                     "--layouts", "bshd",
                                     "--reps", std::to_string(repetitions),
                                     "--warmup", "1",
                                     "--table-positions", "0",
                                     "--json", json_path,
                                     "--threads"};
    for (int t : options.threads) argv.push_back(std::to_string(t));
    argv.push_back("--dtypes");
    for (DType dtype : options.dtypes) argv.emplace_back(to_string(dtype));
    const int exit_code = run_process(argv, stdout_path, stderr_path);
    if (exit_code != 0) {
      return detail::concat("torch: ", *script, " failed on ", workload.name, " (exit ", exit_code, "): ",
                            last_line(stderr_path), " (its remaining PyTorch rows skipped)");
    }
    std::vector<Row> rows;
    try {
      const json::Value root = json::parse_file(json_path);
      std::string target = "torch";
      if (const json::Value* meta = root.find("meta"); meta != nullptr) {
        const json::Value* torch_version = meta->find("torch_version");
        const json::Value* capability = meta->find("cpu_capability");
        const std::string capability_name =
            capability != nullptr && capability->is_string() ? capability->as_string() : "?";
        target += ":" + capability_name;
        if (torch_version != nullptr && torch_version->is_string()) {
          version = detail::concat("torch ", torch_version->as_string(), " (cpu_capability ", capability_name, ")");
        }
      }
      rows = read_torch_rows(root, workload, target);
    } catch (const std::exception& e) {
      return detail::concat("torch: could not read the results of ", *script, " on ", workload.name, ": ", e.what(),
                            " (its remaining PyTorch rows skipped)");
    }
    for (Row& row : rows) add_row(std::move(row));
  }
  return detail::concat("torch: ", version, " via ", python, " ", *script);
}

// ---- how quiet the machine was ------------------------------------------------------------------

// CPU time of every process (from /proc/stat) and of this one and its children (getrusage), so
// that the run can say how much of the machine other processes took while it measured: a
// benchmark on 2 cores next to a compiler is not a measurement of the kernels.
struct CpuSnapshot {
  double all_busy_s = -1.0;  // -1: /proc/stat unreadable
  double steal_s = 0.0;
  double own_s = 0.0;
  std::chrono::steady_clock::time_point when = std::chrono::steady_clock::now();
};

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

// "other processes used 3% of the 2 CPUs during this run", with a warning above 5%.
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
    line += ": the figures are unreliable; rerun on a quiet machine";
  }
  return line;
}

// ---- how fast the core ran ----------------------------------------------------------------------

// A chain of dependent integer additions, timed for about 20 ms: one addition per cycle on any
// x86-64 or AArch64 core, so the rate is the core's effective clock in GHz. On this VM it moved
// between 1.4 and 3.2 within the same hour (2026-11-25; the host's use of the core's other
// hyperthread is the likely cause: a VM cannot see it), and the kernels that are bound by
// arithmetic rather than memory (bf16, f16) move with it while the copy floor does not. NaN where
// there is no such instruction to time.
double add_chain_ghz(int64_t adds = 40'000'000) {
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

// Per row a shorter chain (5-10 ms): the clock just before the row is timed.
constexpr int64_t kRowClockAdds = 10'000'000;

std::string core_clock_line(double at_start_ghz, double at_end_ghz) {
  if (std::isnan(at_start_ghz) || std::isnan(at_end_ghz)) return "";
  return detail::concat("core: dependent additions ran at ", format_number(at_start_ghz, 3), " per ns at the start, ",
                        format_number(at_end_ghz, 3),
                        " at the end (the effective clock in GHz; bf16 and f16 rows, bound by arithmetic, move with"
                        " it)");
}

}  // namespace

int run_bench(Args& args) {
  BenchOptions options;
  options.as_json = args.has_switch("--json");
  options.quick = args.has_switch("--quick");
  const std::optional<std::string> threads_text = args.value("--threads");
  const std::optional<std::string> cases_text = args.value("--cases");
  const std::optional<std::string> dtypes_text = args.value("--dtypes");
  const std::optional<int64_t> repetitions_arg = args.integer("--repetitions", 1, 10000);
  options.target = args.value("--target");
  options.torch_python = args.value("--torch");
  args.finish();
  if (threads_text) options.threads = parse_threads(*threads_text);
  if (dtypes_text) {
    options.dtypes.clear();
    for (const std::string& item : split_list(*dtypes_text)) {
      const std::optional<DType> dtype = parse_dtype(item);
      if (!dtype || *dtype == DType::F64 ||
          std::find(options.dtypes.begin(), options.dtypes.end(), *dtype) != options.dtypes.end()) {
        throw UsageError(detail::concat("bench: --dtypes must list distinct types from float32, bfloat16, float16 (got \"",
                                        *dtypes_text, "\")"));
      }
      options.dtypes.push_back(*dtype);
    }
  }
  if (cases_text) {
    options.workloads = parse_cases(*cases_text);
  } else {
    for (const std::string& name : kWorkloadNames) {
      if (!(options.quick && name == "prefill_long")) options.workloads.push_back(name);
    }
  }
  options.repetitions = repetitions_arg ? static_cast<int>(*repetitions_arg)
                                    : (options.quick ? kQuickRepetitions : kDefaultRepetitions);
  if (options.torch_python && options.torch_python->empty()) {
    throw UsageError("bench: --torch must name a Python executable or be none (got \"\")");
  }
  std::optional<std::string> target_name;
  if (options.target) target_name = resolve_target(*options.target);
  if (args.parse_only()) return 0;

  const CpuSnapshot started = cpu_snapshot();
  const double clock_at_start_ghz = add_chain_ghz();
  SettingsGuard guard;
  if (options.target) {
    force_cpu_target(*target_name);
    guard.forced();
  }
  const std::string target = current_cpu_target();

  std::vector<Workload> workloads;
  int64_t max_position = 0;
  for (const std::string& name : options.workloads) {
    workloads.push_back(make_workload(name));
    max_position = std::max(max_position, workloads.back().max_position);
  }

  // The table: built once, outside every timed call.
  const RopeSpec spec = preset(kDefaultPreset).spec;
  const auto table_started = std::chrono::steady_clock::now();
  const CosSinTable table(spec, {.precision = Precision::Exact, .storage = Storage::Stored});
  table.reserve_positions(max_position + 1);
  const double table_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - table_started).count();

  const std::vector<DType>& dtypes = options.dtypes;
  const Workload prefill = make_prefill("prefill", kPrefillTokens);
  if (!options.as_json) {
    args.out() << format_line(
        "# rotary bench: %s table (exact, stored, %lld rows, built in %.1f ms before timing); target %s\n",
        spec.name.c_str(), static_cast<long long>(table.size()), table_ms, target.c_str());
    args.out() << format_line(
        "# median of %d repetitions after 1 warm-up (calls < 2 ms repeated within a repetition, time per call);"
        " prefill_long at most %d\n",
        options.repetitions, kLongRepetitionsCap);
    args.out() << format_line(
        "# bytes = (q + k elements) x element size x 2; ratio = GB/s / base_GB/s, the stream of the same dtype and"
        " threads over q + k of prefill (in-place rows: copy_inplace, others: copy), timed in alternation with the"
        " row's repetitions, each after an untimed run of the same operation (torch rows: the copy rows above)\n");
    args.out() << format_line(
        "# decode uses 40 q heads (the issue's 50 us decode target); its q + k fit in the caches, so its base is a"
        " stream of its own bytes on one thread (cached_copy: memcpy; cached_copy_inplace)\n");
    print_header(args.out());
  }

  std::vector<Row> rows;
  const auto add_row = [&](Row row) {
    if (!options.as_json) print_row(args.out(), row);
    rows.push_back(std::move(row));
  };

  // The streams, per dtype and thread count, over q + k of prefill in that dtype: copy (the
  // out-of-place floor) and copy_inplace (the in-place floor), each in both access patterns
  // timed in alternation, the faster taken as the floor (rows copy and copy_inplace; the two
  // patterns' own rows are named copy_sequential, copy_4pages, ...); glibc's memcpy for reference.
  const auto stream_bytes = [&](DType dtype) { return prefill.elements() * dtype_size(dtype); };
  bench::Streams stream_buffers(static_cast<size_t>(stream_bytes(DType::F32)));
  std::map<StreamKey, StreamBandwidth> streams;
  for (DType dtype : dtypes) {
    const int64_t buffer_bytes = stream_bytes(dtype);
    const auto size = static_cast<size_t>(buffer_bytes);
    const std::string megabytes = format_number(static_cast<double>(buffer_bytes) / 1e6, 4);
    for (int threads : options.threads) {
      StreamBandwidth& bandwidth = streams[{std::string(to_string(dtype)), threads}];
      const double core_ghz = add_chain_ghz(kRowClockAdds);
      const auto stream_row = [&](std::string name, bool in_place, const bench::Timing& timing, std::string shape,
                                  const char* isa) {
        Row row;
        row.core_ghz = core_ghz;
        row.name = std::move(name);
        row.workload = "prefill";
        row.dtype = std::string(to_string(dtype));
        row.threads = threads;
        row.in_place = in_place;
        row.layout = "-";
        row.shape = std::move(shape);
        row.bytes = 2 * buffer_bytes;
        row.median_ms = timing.median_ms;
        row.min_ms = timing.min_ms;
        row.gb_per_s = bench::gb_per_s(row.bytes, timing.median_ms);
        row.target = isa;
        row.repetitions = timing.repetitions;
        row.calls_per_repetition = timing.calls_per_repetition;
        return row;
      };
      for (const bool in_place : {false, true}) {
        const bench::PairedTiming paired = bench::time_paired(
            [&] { stream_buffers.stream(in_place, size, threads, bench::Pattern::Sequential); },
            [&] { stream_buffers.stream(in_place, size, threads, bench::Pattern::FourPages); }, options.repetitions);
        const bool sequential_faster = paired.call.median_ms <= paired.reference.median_ms;
        const bench::Pattern floor = sequential_faster ? bench::Pattern::Sequential : bench::Pattern::FourPages;
        stream_buffers.choose_floor(in_place, threads, floor);
        const std::string name = in_place ? "copy_inplace" : "copy";
        const std::string what = detail::concat(in_place ? "x *= 1.0000001f over " : "streaming-store copy of ",
                                                megabytes, " MB (q+k of prefill)");
        Row sequential = stream_row(name + "_sequential", in_place, paired.call, what + ", sequential",
                                    bench::stream_isa());
        Row four_pages = stream_row(name + "_4pages", in_place, paired.reference, what + ", 4 pages at a time",
                                    bench::stream_isa());
        Row chosen = stream_row(name, in_place, sequential_faster ? paired.call : paired.reference,
                                detail::concat(what, ", ", bench::to_string(floor), " (the faster pattern here)"),
                                bench::stream_isa());
        chosen.ratio_to_copy = 1.0;
        chosen.baseline = chosen.name;
        chosen.baseline_gb_per_s = chosen.gb_per_s;
        for (Row* other : {&sequential, &four_pages}) {
          other->baseline = chosen.name;
          other->baseline_gb_per_s = chosen.gb_per_s;
          other->ratio_to_copy = other->gb_per_s / chosen.gb_per_s;
        }
        (in_place ? bandwidth.copy_inplace_gb_per_s : bandwidth.copy_gb_per_s) = chosen.gb_per_s;
        add_row(std::move(sequential));
        add_row(std::move(four_pages));
        add_row(std::move(chosen));
      }
      const bench::Timing memcpy_timing =
          bench::time_calls([&] { stream_buffers.memcpy(size, threads); }, options.repetitions);
      Row row = stream_row("memcpy", false, memcpy_timing, detail::concat("glibc memcpy of ", megabytes,
                                                                          " MB (q+k of prefill)"), "glibc");
      compare_with_stream_rows(streams, row);  // against the copy row just measured
      add_row(std::move(row));
    }
  }

  // The kernels.
  for (const Workload& workload : workloads) {
    const int repetitions =
        workload.name == "prefill_long" ? std::min(options.repetitions, kLongRepetitionsCap) : options.repetitions;
    Positions positions;
    if (!workload.per_token_positions.empty()) {
      positions.per_token = workload.per_token_positions.data();
      positions.per_token_count = static_cast<int64_t>(workload.per_token_positions.size());
    }
    if (!workload.cu_seqlens.empty()) {
      positions.cu_seqlens = workload.cu_seqlens.data();
      positions.num_sequences = static_cast<int64_t>(workload.cu_seqlens.size()) - 1;
    }
    const std::array<int64_t, 4>& q_shape = workload.q_shape;
    const std::array<int64_t, 4>& k_shape = workload.k_shape;
    const int64_t q_elements = q_shape[0] * q_shape[1] * q_shape[2] * q_shape[3];
    const int64_t k_elements = k_shape[0] * k_shape[1] * k_shape[2] * k_shape[3];
    for (DType dtype : dtypes) {
      const int64_t element_bytes = dtype_size(dtype);
      bench::Buffer q(static_cast<size_t>(q_elements * element_bytes));
      bench::Buffer k(static_cast<size_t>(k_elements * element_bytes));
      bench::Buffer q_out(q.bytes());
      bench::Buffer k_out(k.bytes());
      fill_random(q.data(), dtype, q_elements, 1);
      fill_random(k.data(), dtype, k_elements, 2);
      const TensorView q_view = contiguous_view(q.data(), dtype, workload.layout, q_shape);
      const TensorView k_view = contiguous_view(k.data(), dtype, workload.layout, k_shape);
      const TensorView q_out_view = contiguous_view(q_out.data(), dtype, workload.layout, q_shape);
      const TensorView k_out_view = contiguous_view(k_out.data(), dtype, workload.layout, k_shape);
      for (int threads : options.threads) {
        set_num_threads(threads);
        for (bool in_place : {false, true}) {
          const TensorView& qo = in_place ? q_view : q_out_view;
          const TensorView& ko = in_place ? k_view : k_out_view;
          // Each repetition of the call is followed by one of its stream (same dtype and threads):
          // the ratio compares the two under the same load. A call whose q + k fit in the caches
          // (decode) is compared with a stream of its own bytes, also in the caches
          // (bench::Streams::run_cached): alternating it with the 84 MB one slowed decode by a
          // third, as that stream leaves the last-level cache full of dirty lines that the next
          // ~15 calls write back (173 us right after it, 63 us fifteen calls later; AMD EPYC,
          // 2026-11-25).
          const int64_t call_bytes = (q_elements + k_elements) * element_bytes;
          const bool cached = call_bytes < bench::kCachedStreamBytes;
          const size_t reference_bytes = static_cast<size_t>(cached ? call_bytes : stream_bytes(dtype));
          const double core_ghz = add_chain_ghz(kRowClockAdds);
          const bench::PairedTiming paired = bench::time_paired(
              [&] { apply(q_view, k_view, qo, ko, positions, table); },
              [&] {
                if (cached) {
                  stream_buffers.run_cached(in_place, reference_bytes);
                } else {
                  stream_buffers.run(in_place, reference_bytes, threads);
                }
              },
              repetitions);
          const bench::Timing& timing = paired.call;
          Row row;
          row.name = workload.name;
          row.workload = workload.name;
          row.dtype = std::string(to_string(dtype));
          row.threads = threads;
          row.in_place = in_place;
          row.layout = std::string(to_string(workload.layout));
          row.shape = workload.shape;
          row.bytes = (q_elements + k_elements) * element_bytes * 2;
          row.median_ms = timing.median_ms;
          row.min_ms = timing.min_ms;
          row.gb_per_s = bench::gb_per_s(row.bytes, timing.median_ms);
          row.baseline = cached ? (in_place ? "cached_copy_inplace" : "cached_copy") : (in_place ? "copy_inplace" : "copy");
          row.baseline_gb_per_s =
              bench::gb_per_s(2 * static_cast<int64_t>(reference_bytes), paired.reference.median_ms);
          row.ratio_to_copy = row.gb_per_s / row.baseline_gb_per_s;
          row.target = target;
          row.repetitions = timing.repetitions;
          row.calls_per_repetition = timing.calls_per_repetition;
          row.core_ghz = core_ghz;
          add_row(std::move(row));
        }
      }
    }
  }

  // PyTorch, side by side, in another process: its ratio_to_copy divides by OUR copy row of the
  // same dtype and threads.
  const std::string torch_note = run_torch(options, workloads, spec, args.out(), [&](Row row) {
    compare_with_stream_rows(streams, row);
    add_row(std::move(row));
  });
  const CpuSnapshot finished = cpu_snapshot();
  const std::string contention = contention_line(started, finished);
  const std::string core_clock = core_clock_line(clock_at_start_ghz, add_chain_ghz());
  const double total_s = std::chrono::duration<double>(finished.when - started.when).count();
  if (options.as_json) {
    write_json(args.out(), rows);
    // stdout stays one JSON document; what people should know goes to stderr.
    if (torch_note.find("skipped") != std::string::npos) args.err() << torch_note << "\n";
    if (contention.find("unreliable") != std::string::npos) args.err() << "rotary: warning: " << contention << "\n";
    if (!core_clock.empty()) args.err() << "rotary: " << core_clock << "\n";
  } else {
    if (!torch_note.empty()) args.out() << format_line("%s\n", torch_note.c_str());
    if (!contention.empty()) args.out() << format_line("# %s\n", contention.c_str());
    if (!core_clock.empty()) args.out() << format_line("# %s\n", core_clock.c_str());
    args.out() << format_line("# %zu rows in %.1f s\n", rows.size(), total_s);
  }
  return 0;
}

}  // namespace rotary::cli
