// src/golden/golden.hpp: checking rotary against Hugging Face golden vectors.
// rotary_golden, an internal library above core and cpu (it reads config files and calls apply):
// a test of rotary, used by `rotary verify-golden` and the tests, so not part of the installed API.
//
// A golden case file (format "rotary-golden/1", tests/golden/README.md) holds a config, the
// numbers transformers' own code produced for it in float32 (hf_f32), and the exact values of
// the same formulas (exact_f64). verify_golden_case() checks, with the tolerances the README
// derives (docs/numerics.md restates them):
//   positive cases
//     config      rope_type, head_dim, rotary_dim, max_position_embeddings as HF resolved them
//     frequencies inv_freq and attention_scaling within 1 double ulp of exact_f64; float32
//                 inv_freq within the case's stated ulps of HF's buffer
//     exact table cos/sin (float64 values) within 1e-15 (1 + p) max(1, scaling) of exact_f64,
//                 and the float32 rows within 1 float32 ulp of exact_f64 rounded to float32
//     hf table    given HF's inv_freq buffer: cos/sin within 2 float32 ulps of scaling of
//                 hf_f32 at every position below 2^24; from the config: inv_freq within 1
//                 float32 ulp of HF's
//     q/k         the float64 reference with exact values, NeoX and GPT-J, within
//                 1e-15 (1 + p) max(1, scaling) (|a| + |c|) of exact_f64's half-split and
//                 interleaved results
//   negative cases
//     the config is rejected with a ConfigError
#pragma once

#include <string>
#include <vector>

namespace rotary {

struct GoldenCheck {
  std::string name;      // "inv_freq vs exact_f64", ...
  bool passed = false;
  double worst = 0.0;    // largest error / tolerance ratio seen (<= 1 passes), or ulps
  std::string detail;    // what failed, or the measured figure
};

struct GoldenCaseResult {
  std::string file;      // file name
  std::string kind;      // "positive" / "negative"
  bool passed = false;
  std::vector<GoldenCheck> checks;
  std::string error;     // set when the file could not be read or the case could not run
};

GoldenCaseResult verify_golden_case(const std::string& path);

// Every *.json in the directory, sorted by name. A missing or unreadable directory is a
// rotary::Error naming it.
std::vector<GoldenCaseResult> verify_golden_dir(const std::string& directory);

}  // namespace rotary
