// src/cli/verify_golden_command.cpp: `rotary verify-golden DIR`.
#include <iostream>

#include "cli/commands.hpp"
#include "rotary/error.hpp"
#include "core/json.hpp"
#include "golden/golden.hpp"

namespace rotary::cli {

const char* const kVerifyGoldenHelp =
    "usage: rotary verify-golden DIR [--verbose] [--json]\n"
    "\n"
    "Checks rotary against every golden case file in DIR (the rotary-golden/1 format of\n"
    "tests/golden: Hugging Face's float32 numbers and the exact values of the same\n"
    "formulas). Positive cases: config reading, inv_freq and attention scaling, the exact and\n"
    "the Hugging Face-compatible tables, and rotated q/k in both conventions, each against the\n"
    "tolerance the golden README derives. Negative cases: the config must be rejected.\n"
    "Prints one line per case, then 'N passed, M failed'; exits 0 only when none failed.\n"
    "\n"
    "  --verbose   one more line per check, with the measured error / tolerance\n"
    "  --json      {\"passed\", \"num_passed\", \"num_failed\", \"cases\": [{\"file\", \"kind\", \"passed\",\n"
    "              \"error\", \"checks\": [{\"name\", \"passed\", \"detail\"}]}]}\n";

int run_verify_golden(Args& args) {
  const bool verbose = args.has_switch("--verbose");
  const bool as_json = args.has_switch("--json");
  const std::optional<std::string> directory = args.positional();
  args.finish();
  if (!directory) throw UsageError("verify-golden: DIR is required (e.g. tests/golden)");
  if (args.parse_only()) return 0;
  const std::vector<GoldenCaseResult> results = verify_golden_dir(*directory);
  int passed = 0;
  int failed = 0;
  if (as_json) {
    json::Writer out;
    out.begin_object();
    for (const GoldenCaseResult& r : results) (r.passed ? passed : failed) += 1;
    out.key("passed").value(failed == 0 && !results.empty());
    out.key("num_passed").value(passed);
    out.key("num_failed").value(failed);
    out.key("cases").begin_array();
    for (const GoldenCaseResult& r : results) {
      out.begin_object();
      out.key("file").value(r.file);
      out.key("kind").value(r.kind);
      out.key("passed").value(r.passed);
      out.key("error").value(r.error);
      out.key("checks").begin_array();
      for (const GoldenCheck& c : r.checks) {
        out.begin_object();
        out.key("name").value(c.name);
        out.key("passed").value(c.passed);
        out.key("detail").value(c.detail);
        out.end_object();
      }
      out.end_array();
      out.end_object();
    }
    out.end_array();
    out.end_object();
    args.out() << out.str() << "\n";
    return failed == 0 && !results.empty() ? 0 : 1;
  }
  for (const GoldenCaseResult& r : results) {
    (r.passed ? passed : failed) += 1;
    args.out() << (r.passed ? "PASS " : "FAIL ") << r.file << " (" << (r.kind.empty() ? "?" : r.kind) << ", "
               << r.checks.size() << " checks)";
    if (!r.error.empty()) args.out() << ": " << r.error;
    for (const GoldenCheck& c : r.checks) {
      if (!c.passed) args.out() << "\n    failed: " << c.name << ": " << c.detail;
    }
    args.out() << "\n";
    if (verbose) {
      for (const GoldenCheck& c : r.checks) {
        args.out() << "    " << (c.passed ? "ok   " : "FAIL ") << c.name << ": " << c.detail << "\n";
      }
    }
  }
  args.out() << passed << " passed, " << failed << " failed\n";
  return failed == 0 && !results.empty() ? 0 : 1;
}

}  // namespace rotary::cli
