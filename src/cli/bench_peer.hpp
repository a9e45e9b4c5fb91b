// src/cli/bench_peer.hpp: the PyTorch peer of `rotary bench`: the project's own
// torch_rope_bench.py (bench/peers/, installed as share/rotary/peers/), run in another process
// on the same shapes, dtypes and thread counts, its JSON results read back as rows.
#pragma once

#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "cli/bench_output.hpp"
#include "cli/bench_workloads.hpp"
#include "rotary/spec.hpp"

namespace rotary::cli::bench {

// The script's name; it is looked for, in this order and each only when the one before is not
// given (an explicit directory without the script is reported, not passed over):
//   1. --peers-dir DIR
//   2. $ROTARY_PEERS_DIR
//   3. the installed location: <directory of the executable>/ROTARY_PEERS_FROM_EXE
//      (../share/rotary/peers with the default install directories), then the project's source
//      tree as configured (ROTARY_SOURCE_PEERS_DIR, bench/peers) for a build-tree executable.
constexpr const char* kPeerScript = "torch_rope_bench.py";

struct PeerOptions {
  std::optional<std::string> python;     // --torch: a Python, "none", or unset (.venv/bin/python, python3)
  std::optional<std::string> peers_dir;  // --peers-dir
  std::vector<int> threads;
  std::vector<DType> dtypes;
  int repetitions = 0;
  bool quick = false;
  // torch_hf_compile (Hugging Face's function under torch.compile): Inductor compiles it once per
  // shape, dtype and thread count, 1-20 s each (8-80 s in all for --quick's 8 on 2 cores, the
  // most with a cold compile cache), so --quick leaves it out unless --torch-compile asks for it
  // (the closing torch line says so).
  bool compile = true;
  // What the closing torch line adds when the caller ran the peer on fewer thread counts than its
  // own rows (--quick), e.g. "PyTorch at 2 threads only (--threads 1,2 runs it at each)"; empty
  // when it did not.
  std::string threads_note;
  bool progress = false;  // a "# torch: running ..." line per workload on `progress`
};

// What the closing torch line says when PeerOptions::compile is false.
constexpr const char* kCompileLeftOut =
    "torch_hf_compile not run (--quick leaves torch.compile out: its compiles took up to 80 s on 2 cores;"
    " --torch-compile runs it)";

// Finds a Python that imports torch and the script, runs the script once per workload it can
// express (BSHD: prefill, prefill_long, decode; not varlen), and hands each row to add_row
// (ratio_to_copy left to the caller). Never throws: returns one line for people saying what ran,
// or why PyTorch rows are missing ("... skipped"), or "" when no workload needed it.
std::string run_torch_peer(const PeerOptions& options, const std::vector<Workload>& workloads, const RopeSpec& spec,
                           std::ostream& progress, const std::function<void(Row)>& add_row);

// The attention peer: torch_attention_bench.py, found the same way, run once per attention
// case (bench_attention.hpp) with the same dtypes and thread counts: eager RoPE (Hugging Face's
// rotate_half) then scaled_dot_product_attention(is_causal=True, enable_gqa=True) for the
// prefill, RoPE of the query then scaled_dot_product_attention(enable_gqa=True) over the cache for
// decode. Each row goes to add_row with the case's flops (decode rows: baseline "copy", for the
// caller's floors; prefill rows: "fma_peak"). Never throws; returns a line for people as
// run_torch_peer does.
constexpr const char* kAttentionPeerScript = "torch_attention_bench.py";
struct AttentionCase;
std::string run_torch_attention_peer(const PeerOptions& options, const std::vector<AttentionCase>& cases,
                                     std::ostream& progress, const std::function<void(Row, double)>& add_row);

}  // namespace rotary::cli::bench
