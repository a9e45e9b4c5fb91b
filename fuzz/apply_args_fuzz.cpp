// fuzz/apply_args_fuzz.cpp: rotary::check_apply_arguments, rotary::apply and reference::apply on
// calls built from fuzz bytes (fuzz/apply_case.hpp).
//
// Properties:
//   - check_apply_arguments either accepts a call or throws rotary::Error "apply: ...";
//     rotary::apply and reference::apply throw the same message for the same call, and neither
//     writes a byte of the arena before throwing;
//   - a call the checks accept, small enough to back with memory, runs in both implementations
//     on a buffer exactly as long as the views' validated extents (AddressSanitizer catches any
//     access past them), and writes no byte outside the output views' elements. The one error
//     allowed after the checks is a stored table's growth past TableOptions::max_bytes, which
//     also leaves every byte as it was.
// Results are not compared with each other here: tests/cpu/apply_test.cpp does that on 2,000
// random configurations per SIMD target.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "apply_case.hpp"
#include "fuzz_support.hpp"
#include "rotary/apply.hpp"
#include "rotary/error.hpp"

namespace rotary::fuzz {
namespace {

using ApplyFunction = void (*)(const TensorView&, const TensorView&, const TensorView&, const TensorView&,
                               const Positions&, const CosSinTable&, const ApplyOptions&);

void run_fast(const TensorView& q, const TensorView& k, const TensorView& q_out, const TensorView& k_out,
              const Positions& positions, const CosSinTable& table, const ApplyOptions& options) {
  rotary::apply(q, k, q_out, k_out, positions, table, options);
}

void run_reference(const TensorView& q, const TensorView& k, const TensorView& q_out, const TensorView& k_out,
                   const Positions& positions, const CosSinTable& table, const ApplyOptions& options) {
  reference::apply(q, k, q_out, k_out, positions, table, options);
}

constexpr ApplyFunction kImplementations[] = {run_fast, run_reference};
constexpr const char* kImplementationNames[] = {"rotary::apply", "reference::apply"};

// Calls `apply` and returns its error message, or "" when it returned.
std::string call(ApplyFunction apply, const ApplyCase& c, const CosSinTable& table) {
  try {
    apply(c.views[0], c.views[1], c.views[2], c.views[3], c.positions, table, c.options);
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

bool present(const ApplyCase& c, size_t v) { return !c.absent[v]; }

// Runs an accepted call in both implementations on exactly-sized buffers.
void run_accepted(ApplyCase& c, const CosSinTable& table, const std::vector<unsigned char>& arena) {
  int64_t total_elements = 0;
  int64_t end = 1;
  for (size_t v = 0; v < 4; ++v) {
    if (!present(c, v) || c.null_data[v]) continue;
    const int64_t elements = elements_of(c.views[v]);
    total_elements += std::min<int64_t>(elements, int64_t{1} << 40);
    const int64_t span = elements > 0 ? span_bytes(c.views[v]) : 0;
    if (span > kArenaBytes - c.offset_bytes[v]) return;  // not backed by the arena: nothing to run
    end = std::max(end, c.offset_bytes[v] + span);
  }
  if (total_elements > (int64_t{1} << 16)) return;

  std::vector<bool> written(static_cast<size_t>(end), false);
  for (size_t v : {size_t{2}, size_t{3}}) {
    if (present(c, v) && !c.null_data[v] && elements_of(c.views[v]) > 0) mark_elements(c.views[v], c.offset_bytes[v], written);
  }
  const std::vector<unsigned char> before(arena.begin(), arena.begin() + end);
  for (size_t i = 0; i < 2; ++i) {
    // A fresh allocation of exactly `end` bytes, so that AddressSanitizer's redzone starts right
    // after the last byte any view may touch.
    std::unique_ptr<unsigned char[]> buffer(new unsigned char[static_cast<size_t>(end)]);
    std::memcpy(buffer.get(), before.data(), before.size());
    c.bind(buffer.get());
    const std::string error = call(kImplementations[i], c, table);
    const bool unchanged = std::memcmp(buffer.get(), before.data(), before.size()) == 0;
    if (!error.empty()) {
      require(error.find("max_bytes") != std::string::npos,
              "after the checks accept a call, the only error is stored-table growth past max_bytes",
              std::string(kImplementationNames[i]) + ": " + error);
      require(unchanged, "a call that throws writes nothing", kImplementationNames[i]);
      continue;
    }
    for (size_t b = 0; b < before.size(); ++b) {
      if (written[b] || buffer[b] == before[b]) continue;
      require(false, "apply writes only the output views' elements",
              std::string(kImplementationNames[i]) + " changed byte " + std::to_string(b));
    }
  }
}

}  // namespace

namespace {

// Tables are built once per choice of spec and options (a fixed 4096-row exact table takes
// longer than the rest of a run). Stored ones keep the rows earlier inputs grew, which changes
// no value a later input reads.
const CosSinTable& table_for(const ApplyCase& c) {
  static std::map<int, std::unique_ptr<const CosSinTable>> tables;
  std::unique_ptr<const CosSinTable>& table = tables[c.table_key];
  if (!table) table = std::make_unique<const CosSinTable>(c.spec, c.table_options);  // valid: a throw is a harness bug
  return *table;
}

}  // namespace

int apply_args_one_input(const uint8_t* data, size_t size) {
  ApplyCase c = decode_apply_case(data, size);
  const CosSinTable& table = table_for(c);
  static const std::vector<unsigned char> arena = arena_pattern(static_cast<size_t>(kArenaBytes));
  std::vector<unsigned char> work = arena;
  c.bind(work.data());

  std::string check_error;
  try {
    check_apply_arguments(c.views[0], c.views[1], c.views[2], c.views[3], c.positions, table, c.options);
  } catch (const Error& error) {
    check_error = error.what();
    require(starts_with(check_error, "apply: "), "argument errors start with \"apply: \"", check_error);
  }
  if (!check_error.empty()) {
    for (size_t i = 0; i < 2; ++i) {
      const std::string error = call(kImplementations[i], c, table);
      require(error == check_error, "apply and reference::apply reject a call as the checks do",
              std::string(kImplementationNames[i]) + ": \"" + error + "\" vs check: \"" + check_error + "\"");
      require(work == arena, "a rejected call writes nothing", kImplementationNames[i]);
    }
    return 0;
  }
  run_accepted(c, table, arena);
  return 0;
}

}  // namespace rotary::fuzz

ROTARY_FUZZ_ENTRY(rotary::fuzz::apply_args_one_input)
