// src/cli/bench_peer.cpp: the PyTorch peer of `rotary bench` (bench_peer.hpp).
#include "cli/bench_peer.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>

#include "cli/args.hpp"
#include "cli/bench_attention.hpp"
#include "cli/bench_timing.hpp"
#include "rotary/error.hpp"
#include "core/json.hpp"

extern char** environ;

namespace rotary::cli::bench {
namespace {

constexpr int kTorchLongRepetitionsCap = 2;  // eager PyTorch on prefill_long: 0.5-4 s per call
constexpr int kTorchQuickRepetitionsCap = 3;

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

// The script's path, or where it was looked for (bench_peer.hpp gives the order).
struct FoundScript {
  std::optional<std::string> path;
  std::string looked_in;  // for the message when path is empty
};

FoundScript find_peer_script(const std::optional<std::string>& peers_dir, const char* script_name = kPeerScript) {
  namespace fs = std::filesystem;
  std::vector<fs::path> directories;
  std::string looked_in;
  const char* env = std::getenv("ROTARY_PEERS_DIR");
  if (peers_dir) {
    directories.emplace_back(*peers_dir);
    looked_in = detail::concat("--peers-dir ", *peers_dir);
  } else if (env != nullptr && *env != '\0') {
    directories.emplace_back(env);
    looked_in = detail::concat("$ROTARY_PEERS_DIR (", env, ")");
  } else {
    std::error_code error;
    const fs::path executable = fs::read_symlink("/proc/self/exe", error);
    if (!error) directories.push_back(executable.parent_path() / ROTARY_PEERS_FROM_EXE);
    directories.emplace_back(ROTARY_SOURCE_PEERS_DIR);
    looked_in = detail::concat("<executable's directory>/", ROTARY_PEERS_FROM_EXE, " and ", ROTARY_SOURCE_PEERS_DIR,
                               " (neither --peers-dir nor $ROTARY_PEERS_DIR given)");
  }
  for (const fs::path& directory : directories) {
    std::error_code error;
    const fs::path script = directory / script_name;
    if (fs::is_regular_file(script, error)) return {fs::absolute(script, error).lexically_normal().string(), looked_in};
  }
  return {std::nullopt, looked_in};
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

// Each of a peer script's "results" as a row with what both scripts report (name torch_<method>,
// dtype, threads, layout, median_ms, min_ms, repetitions, target), the dtype parsed for the
// caller's byte count; results in a dtype rotary does not bench are left out. Throws on a result
// without method, dtype, threads or median_ms.
struct TorchResult {
  Row row;
  DType dtype = DType::F32;
};
std::vector<TorchResult> read_torch_results(const json::Value& root, const std::string& target) {
  const json::Value* results = root.find("results");
  if (results == nullptr || !results->is_array()) throw Error("its JSON has no \"results\" list");
  std::vector<TorchResult> parsed;
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
    row.dtype = dtype->as_string();
    row.threads = static_cast<int>(threads->as_int64());
    row.in_place = false;
    row.layout = layout != nullptr && layout->is_string() ? layout->as_string() : "-";
    row.median_ms = median->as_double();
    row.min_ms = minimum != nullptr && minimum->is_number() ? minimum->as_double() : row.median_ms;
    row.target = target;
    row.repetitions = reps != nullptr && reps->is_integer() ? static_cast<int>(reps->as_int64()) : 0;
    parsed.push_back({std::move(row), *parsed_dtype});
  }
  return parsed;
}

// The RoPE script's results as rows; bytes follow the same rule as ours.
std::vector<Row> read_torch_rows(const json::Value& root, const Workload& workload, const std::string& target) {
  std::vector<Row> rows;
  for (TorchResult& result : read_torch_results(root, target)) {
    Row& row = result.row;
    row.workload = workload.name;
    row.shape = detail::concat("q [", workload.torch_batch, ",", workload.torch_tokens, ",", workload.torch_heads_q,
                               ",128] k [", workload.torch_batch, ",", workload.torch_tokens, ",8,128], ",
                               workload.torch_tokens == 1
                                   ? std::string("pos 0 (the script's arange)")
                                   : detail::concat("pos 0..", workload.torch_tokens - 1));
    row.bytes = workload.elements() * dtype_size(result.dtype) * 2;
    row.gb_per_s = gb_per_s(row.bytes, row.median_ms);
    rows.push_back(std::move(row));
  }
  return rows;
}

// The rows' target ("torch:<cpu_capability>") from a script's "meta"; sets `version` (for the
// closing note) when the script gave its torch version.
std::string read_torch_meta(const json::Value& root, std::string& version) {
  std::string target = "torch";
  if (const json::Value* meta = root.find("meta"); meta != nullptr) {
    const json::Value* torch_version = meta->find("torch_version");
    const json::Value* capability = meta->find("cpu_capability");
    const std::string capability_name = capability != nullptr && capability->is_string() ? capability->as_string() : "?";
    target += ":" + capability_name;
    if (torch_version != nullptr && torch_version->is_string()) {
      version = detail::concat("torch ", torch_version->as_string(), " (cpu_capability ", capability_name, ")");
    }
  }
  return target;
}

// A Python that imports torch (--torch, else ./.venv/bin/python, else python3) into `python`;
// returns "" when found, else the line saying why the PyTorch rows are skipped.
std::string find_torch_python(const PeerOptions& options, std::string& python) {
  if (options.python && *options.python == "none") return "torch: skipped (--torch none)";
  const auto imports_torch = [](const std::string& candidate) {
    return run_process({candidate, "-c", "import torch"}, "/dev/null", "/dev/null") == 0;
  };
  if (options.python) {
    if (!imports_torch(*options.python)) {
      return detail::concat("torch: ", *options.python, " cannot import torch (PyTorch rows skipped)");
    }
    python = *options.python;
    return "";
  }
  std::error_code error;
  if (std::filesystem::exists(".venv/bin/python", error) && imports_torch(".venv/bin/python")) {
    python = ".venv/bin/python";
  } else if (imports_torch("python3")) {
    python = "python3";
  } else {
    return "torch: not installed (PyTorch rows skipped)";
  }
  return "";
}

// One run of a peer script on one case: `case_flags` (the script's flags for the case), then
// the repetitions, one warm-up like ours, the JSON path and the threads and dtypes asked for.
// Returns the script's JSON, or nothing with `failure` set to the note that ends the peer's
// rows (`rows`: which rows are skipped).
std::optional<json::Value> run_peer_case(const PeerOptions& options, const std::string& python,
                                         const std::string& script, const char* script_name,
                                         const std::string& temp_dir, const std::string& case_name,
                                         std::vector<std::string> case_flags, int repetitions, std::ostream& progress,
                                         const char* rows, std::string& failure) {
  if (options.progress) {
    progress << format_line("# torch: running %s on %s (%d repetitions)...\n", script_name, case_name.c_str(),
                            repetitions);
  }
  const std::string json_path = temp_dir + "/" + case_name + ".json";
  const std::string stdout_path = temp_dir + "/" + case_name + ".out";
  const std::string stderr_path = temp_dir + "/" + case_name + ".err";
  std::vector<std::string> argv = {python, script};
  argv.insert(argv.end(), case_flags.begin(), case_flags.end());
  argv.insert(argv.end(), {"--reps", std::to_string(repetitions), "--warmup", "1", "--json", json_path, "--threads"});
  for (int t : options.threads) argv.push_back(std::to_string(t));
  argv.emplace_back("--dtypes");
  for (DType dtype : options.dtypes) argv.emplace_back(to_string(dtype));
  const int exit_code = run_process(argv, stdout_path, stderr_path);
  if (exit_code != 0) {
    failure = detail::concat("torch: ", script, " failed on ", case_name, " (exit ", exit_code, "): ",
                             last_line(stderr_path), " (its remaining ", rows, " skipped)");
    return std::nullopt;
  }
  try {
    return json::parse_file(json_path);
  } catch (const std::exception& e) {
    failure = detail::concat("torch: could not read the results of ", script, " on ", case_name, ": ", e.what(),
                             " (its remaining ", rows, " skipped)");
    return std::nullopt;
  }
}

}  // namespace

std::string run_torch_peer(const PeerOptions& options, const std::vector<Workload>& workloads, const RopeSpec& spec,
                           std::ostream& progress, const std::function<void(Row)>& add_row) {
  if (std::none_of(workloads.begin(), workloads.end(), [](const Workload& w) { return w.torch_tokens > 0; })) {
    return "";  // nothing the script can run (varlen, or the streams alone)
  }
  std::string python;
  if (std::string note = find_torch_python(options, python); !note.empty()) return note;
  const FoundScript found = find_peer_script(options.peers_dir);
  if (!found.path) {
    return detail::concat("torch: ", kPeerScript, " not found in ", found.looked_in, " (PyTorch rows skipped)");
  }
  const std::string& script = *found.path;
  const TempDir temp;
  if (temp.path().empty()) return "torch: could not create a temporary directory (PyTorch rows skipped)";
  std::string version = "torch";
  std::string compile_note;  // torch.compile's compile time of each hf_compile row
  for (const Workload& workload : workloads) {
    if (workload.torch_tokens == 0) continue;  // THD: the script has no packed layout
    int repetitions = options.repetitions;
    if (options.quick) repetitions = std::min(repetitions, kTorchQuickRepetitionsCap);
    if (workload.name == "prefill_long") repetitions = std::min(repetitions, kTorchLongRepetitionsCap);
    // The script's flags (see its argparse): one shape, BSHD only, arange positions, no table
    // timing.
    std::string failure;
    std::vector<std::string> flags = {
        "--batch", std::to_string(workload.torch_batch), "--tokens", std::to_string(workload.torch_tokens),
        "--heads-q", std::to_string(workload.torch_heads_q), "--heads-kv", std::to_string(kKvHeads),
        "--head-dim", std::to_string(kHeadDim), "--theta", detail::shortest(spec.theta_base), "--layouts", "bshd",
        "--table-positions", "0"};
    if (!options.compile) flags.emplace_back("--no-compile");
    const std::optional<json::Value> root = run_peer_case(options, python, script, kPeerScript, temp.path(),
                                                          workload.name, flags, repetitions, progress, "PyTorch rows",
                                                          failure);
    if (!root) return failure;
    std::vector<Row> rows;
    try {
      rows = read_torch_rows(*root, workload, read_torch_meta(*root, version));
      // torch.compile's compile time: excluded from the torch_hf_compile rows' timing, said here.
      if (const json::Value* results = root->find("results"); results != nullptr && results->is_array()) {
        for (const json::Value& item : results->as_array()) {
          const json::Value* compile_s = item.find("compile_s");
          const json::Value* dtype = item.find("dtype");
          const json::Value* threads = item.find("threads");
          if (compile_s == nullptr || !compile_s->is_number() || dtype == nullptr || !dtype->is_string() ||
              threads == nullptr || !threads->is_integer()) {
            continue;
          }
          compile_note += detail::concat(compile_note.empty() ? "" : ", ", workload.name, " ", dtype->as_string(), " ",
                                         threads->as_int64(), " thr ", format_line("%.1f s", compile_s->as_double()));
        }
      }
    } catch (const std::exception& e) {
      return detail::concat("torch: could not read the results of ", script, " on ", workload.name, ": ", e.what(),
                            " (its remaining PyTorch rows skipped)");
    }
    for (Row& row : rows) add_row(std::move(row));
  }
  std::string closing_compile;
  if (!options.compile) {
    closing_compile = detail::concat("; ", kCompileLeftOut);
  } else if (!compile_note.empty()) {
    closing_compile = detail::concat("; torch_hf_compile: Inductor compile time, not timed: ", compile_note);
  }
  return detail::concat("torch: ", version, " via ", python, " ", script,
                        options.threads_note.empty() ? std::string() : "; " + options.threads_note, closing_compile);
}

std::string run_torch_attention_peer(const PeerOptions& options, const std::vector<AttentionCase>& cases,
                                     std::ostream& progress, const std::function<void(Row, double)>& add_row) {
  if (cases.empty()) return "";
  std::string python;
  if (std::string note = find_torch_python(options, python); !note.empty()) return note;
  const FoundScript found = find_peer_script(options.peers_dir, kAttentionPeerScript);
  if (!found.path) {
    return detail::concat("torch: ", kAttentionPeerScript, " not found in ", found.looked_in,
                          " (PyTorch attention rows skipped)");
  }
  const std::string& script = *found.path;
  const TempDir temp;
  if (temp.path().empty()) return "torch: could not create a temporary directory (PyTorch attention rows skipped)";
  std::string version = "torch";
  for (const AttentionCase& c : cases) {
    int repetitions = options.repetitions;
    if (options.quick) repetitions = std::min(repetitions, kTorchQuickRepetitionsCap);
    if (c.prefill) repetitions = std::min(repetitions, kAttentionPrefillRepetitionsCap);
    std::string failure;
    const std::optional<json::Value> root = run_peer_case(
        options, python, script, kAttentionPeerScript, temp.path(), c.name,
        {"--case", c.prefill ? "prefill" : "decode", "--tokens", std::to_string(c.keys), "--heads-q",
         std::to_string(kQHeads), "--heads-kv", std::to_string(kKvHeads), "--head-dim", std::to_string(kHeadDim)},
        repetitions, progress, "PyTorch attention rows", failure);
    if (!root) return failure;
    try {
      for (TorchResult& result : read_torch_results(*root, read_torch_meta(*root, version))) {
        Row& row = result.row;
        row.workload = c.name;
        row.shape = c.prefill ? detail::concat(c.shape.substr(0, c.shape.find(", fused")),
                                               ", eager rotate_half RoPE then SDPA(is_causal, enable_gqa)")
                              : detail::concat(c.shape, ", eager RoPE of q then SDPA(enable_gqa)");
        if (c.prefill) {
          row.bytes = (2 * c.queries * kQHeads + 2 * c.keys * kKvHeads) * kHeadDim * dtype_size(result.dtype);
          row.gb_per_s = gb_per_s(row.bytes, row.median_ms);
          row.baseline = "fma_peak";
          row.baseline_gb_per_s = std::nan("");
          row.ratio_to_copy = std::nan("");
        } else {
          row.bytes = c.kv_bytes(result.dtype);
          row.gb_per_s = gb_per_s(row.bytes, row.median_ms);
          row.baseline = "copy";
        }
        add_row(std::move(row), c.flops());
      }
    } catch (const std::exception& e) {
      return detail::concat("torch: could not read the results of ", script, " on ", c.name, ": ", e.what(),
                            " (its remaining PyTorch attention rows skipped)");
    }
  }
  return detail::concat("torch: ", version, " via ", python, " ", script);
}

}  // namespace rotary::cli::bench
