// fuzz/attention_args_fuzz.cpp: rotary::check_attention_arguments, rotary::attention and
// reference::attention on calls built from fuzz bytes (fuzz/attention_case.hpp).
//
// Properties:
//   - check_attention_arguments either accepts a call or throws rotary::Error "attention: ...";
//     rotary::attention and reference::attention throw the same message for the same call, and
//     neither writes a byte of the arena before throwing. (The reference also takes float64
//     storage, so for a dtype error it throws its own message, which lists float64 too or names a
//     later check's argument, and it would accept four float64 views: such a call is not given
//     to it.)
//   - a call the checks accept, small enough to back with memory, runs in both implementations,
//     each on a fresh buffer exactly as long as the views' extents (AddressSanitizer catches any
//     access past them), and writes no byte outside out's elements. The one error allowed after
//     the checks is a stored RoPE table's growth past TableOptions::max_bytes, which also leaves
//     every byte as it was;
//   - with a non-finite value written into q, k or v (NaN, +inf or -inf: the case's last
//     bytes), the fast path's output is non-finite exactly where the reference's is, NaN where
//     it is NaN (compare_finiteness);
//   - head dims of 0 (q and k: every score 0; v and out: nothing written) run like any other;
//   - otherwise the fast path's output is finite (the arena holds moderate finite numbers in every storage
//     type, attention_case.hpp's tables and slopes are finite) and within the bound of
//     docs/attention.md, "Error analysis" (tests/support/attention_bound.hpp) of the reference's,
//     with call-wide maxima in place of the per-query terms (every term grows with them, so the
//     bound only loosens): A <= scale * d * max|q~| * max|k~| (q~ = q, |a||C| + |c||S| <=
//     2 s max|q| for rotated elements with s = attention_scaling, |q| + max|P| with an absolute
//     table), |b| <= max|slope| * (largest query position + keys), n <= k's tokens, Vbar <= max|v|.
//     Not compared: calls whose scores may leave float32's range (scale * d * max|q~| * max|k~|
//     or scale * max|q~| above 2^126), a range of the data the checks do not read.
//     The reference here stores in the call's dtype too (it rounds once), so the storage term is
//     doubled: 2u max(|fast|, |ref|) for float32, two units of the format for bfloat16 / float16.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "attention_case.hpp"
#include "fuzz_support.hpp"
#include "rotary/attention.hpp"
#include "rotary/error.hpp"
#include "tests/support/attention_bound.hpp"
#include "tests/support/elements.hpp"

namespace rotary::fuzz {
namespace {

// What the inputs did (ROTARY_FUZZ_STATS=1 prints it at exit: how many inputs reach each stage).
struct Stats {
  int64_t inputs = 0, rejected = 0, accepted = 0, ran = 0, compared_elements = 0, beyond_float32 = 0, with_special = 0;
  ~Stats() {
    if (std::getenv("ROTARY_FUZZ_STATS") != nullptr) {
      std::fprintf(stderr, "attention_args: %lld inputs, %lld rejected, %lld accepted, %lld run in both (%lld with scores past float32, "
                   "%lld with a non-finite input), %lld output elements compared\n",
                   static_cast<long long>(inputs), static_cast<long long>(rejected), static_cast<long long>(accepted),
                   static_cast<long long>(ran), static_cast<long long>(beyond_float32), static_cast<long long>(with_special),
                   static_cast<long long>(compared_elements));
    }
  }
};
Stats stats;

// Tables are built once per choice of spec and options.
const CosSinTable& table_for(const AttentionCase& c) {
  static std::map<int, std::unique_ptr<const CosSinTable>> tables;
  std::unique_ptr<const CosSinTable>& table = tables[c.spec_choice * kAttentionTableOptions + c.options_choice];
  if (!table) {  // valid: a throw is a harness bug
    table = std::make_unique<const CosSinTable>(attention_spec(c.spec_choice), attention_table_options(c.options_choice));
  }
  return *table;
}

enum class Implementation { Fast, Reference };
constexpr const char* name_of(Implementation i) { return i == Implementation::Fast ? "rotary::attention" : "reference::attention"; }

// Calls one implementation and returns its error message, or "" when it returned.
std::string call(Implementation implementation, const AttentionCase& c) {
  const auto& [q, k, v, out] = c.views;
  try {
    if (implementation == Implementation::Fast) {
      if (c.rope_on) rotary::attention(q, k, v, out, c.rope, c.options);
      else rotary::attention(q, k, v, out, c.options);
    } else {
      if (c.rope_on) reference::attention(q, k, v, out, c.rope, c.options);
      else reference::attention(q, k, v, out, c.options);
    }
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

// The fast path's output against the reference's (the header comment's bound).
void compare_outputs(const AttentionCase& c, const CosSinTable& table, const unsigned char* input, const unsigned char* fast,
                     const unsigned char* ref) {
  const auto& [q, k, v, out] = c.views;
  const NamedAxes qa = named_axes(q), ka = named_axes(k);
  const int64_t d = qa.dim;
  const double scale = c.options.scale.value_or(d > 0 ? 1.0 / std::sqrt(static_cast<double>(d)) : 1.0);
  double q_max = max_abs(q, input + c.offset_bytes[0]), k_max = max_abs(k, input + c.offset_bytes[1]);
  const double v_max = max_abs(v, input + c.offset_bytes[2]);
  if (c.rope_on) {
    const double s = table.attention_scaling() * (1 + 0x1p-20);  // the table's float32 values, rounded
    q_max = std::max(q_max, 2 * s * q_max);
    k_max = std::max(k_max, 2 * s * k_max);
  }
  if (c.absolute_on) {
    double p_max = 0;
    for (const float value : c.absolute.table) p_max = std::max(p_max, std::abs(static_cast<double>(value)));
    q_max += p_max;
    k_max += p_max;
  }
  const double max_a = scale * static_cast<double>(d) * q_max * k_max;
  double max_bias = 0;
  if (!c.options.alibi_slopes.empty()) {
    int64_t largest_offset = c.options.query_offset;
    for (const int64_t offset : c.options.query_offsets) largest_offset = std::max(largest_offset, offset);
    double slope = 0;
    for (const float s : c.options.alibi_slopes) slope = std::max(slope, std::abs(static_cast<double>(s)));
    max_bias = slope * static_cast<double>(largest_offset + qa.seq + ka.seq);
  }
  // Scores past float32's range are a data range the checks cannot see (they do not read q and
  // k): with them the fast path's output is not defined by the bound, so nothing is compared.
  if (!(max_a <= 0x1p126 && scale * q_max <= 0x1p126)) {
    ++stats.beyond_float32;
    return;
  }
  const bool alibi = !c.options.alibi_slopes.empty();
  const double arithmetic = test::attention_arithmetic_bound(q.dtype, d, alibi, max_a, max_bias, ka.seq, v_max);
  stats.compared_elements += require_within_attention_bound(out, fast + c.offset_bytes[3], ref + c.offset_bytes[3], arithmetic);
}

// Writes the case's non-finite value (NaN, +inf or -inf) into one element of q, k or v in
// `arena` (the bytes both implementations start from); whether it did.
bool inject_special(const AttentionCase& c, unsigned char* arena) {
  const size_t v = c.special_view;
  if (c.special_kind == 0 || c.null_data[v] || elements_of(c.views[v]) == 0) return false;
  const TensorView& view = c.views[v];
  if (view.dtype != DType::F32 && view.dtype != DType::BF16 && view.dtype != DType::F16) return false;
  std::vector<int64_t> indices;
  for_each_element(view, [&](int64_t index) { indices.push_back(index); });
  const int64_t index = indices[static_cast<size_t>(c.special_pick) % indices.size()];
  const double value = c.special_kind == 1 ? std::numeric_limits<double>::quiet_NaN()
                       : c.special_kind == 2 ? std::numeric_limits<double>::infinity()
                                             : -std::numeric_limits<double>::infinity();
  test::store_element(arena + c.offset_bytes[v], view.dtype, index, value);
  ++stats.with_special;
  return true;
}

// With a non-finite input, the outputs' finiteness must agree element by element
// (require_same_finiteness, attention_case.hpp). Compared only where the finite inputs' scores stay
// inside float32's range (as compare_outputs), judged on the arena before the injection.
void compare_finiteness(const AttentionCase& c, const CosSinTable& table, const unsigned char* finite_input,
                        const unsigned char* fast, const unsigned char* ref) {
  const TensorView &q = c.views[0], &k = c.views[1], &out = c.views[3];  // no structured bindings: clang 14 lambdas cannot capture them
  const int64_t d = named_axes(q).dim;
  const double scale = c.options.scale.value_or(d > 0 ? 1.0 / std::sqrt(static_cast<double>(d)) : 1.0);
  double q_max = max_abs(q, finite_input + c.offset_bytes[0]), k_max = max_abs(k, finite_input + c.offset_bytes[1]);
  if (c.rope_on) {
    q_max *= 2 * table.attention_scaling() * (1 + 0x1p-20);
    k_max *= 2 * table.attention_scaling() * (1 + 0x1p-20);
  }
  if (c.absolute_on) {
    double p_max = 0;
    for (const float value : c.absolute.table) p_max = std::max(p_max, std::abs(static_cast<double>(value)));
    q_max += p_max;
    k_max += p_max;
  }
  if (!(scale * static_cast<double>(d) * q_max * k_max <= 0x1p126 && scale * q_max <= 0x1p126)) return;
  stats.compared_elements += require_same_finiteness(out, fast + c.offset_bytes[3], ref + c.offset_bytes[3]);
}

// Runs an accepted call in both implementations on exactly-sized buffers.
void run_accepted(AttentionCase& c, const CosSinTable& table, const std::vector<unsigned char>& arena) {
  int64_t total_elements = 0;
  int64_t end = 1;
  for (size_t v = 0; v < 4; ++v) {
    if (c.null_data[v]) continue;
    const int64_t elements = elements_of(c.views[v]);
    total_elements += std::min<int64_t>(elements, int64_t{1} << 40);
    const int64_t span = elements > 0 ? span_bytes(c.views[v]) : 0;
    if (span > kAttentionArenaBytes - c.offset_bytes[v]) return;  // not backed by the arena: nothing to run
    end = std::max(end, c.offset_bytes[v] + span);
  }
  if (total_elements > (int64_t{1} << 16)) return;
  // The reference's work: q heads x queries x keys x (d + d_v) (a zero-head view has no work).
  const NamedAxes qa = named_axes(c.views[0]), ka = named_axes(c.views[1]), va = named_axes(c.views[2]);
  const double work = static_cast<double>(qa.batch) * static_cast<double>(qa.heads) * static_cast<double>(qa.seq) *
                      static_cast<double>(ka.seq) * static_cast<double>(qa.dim + va.dim);
  if (work > 1 << 24) return;

  std::vector<bool> written(static_cast<size_t>(end), false);
  if (!c.null_data[3] && elements_of(c.views[3]) > 0) mark_elements(c.views[3], c.offset_bytes[3], written);
  const std::vector<unsigned char> finite(arena.begin(), arena.begin() + end);  // the bounds' inputs
  std::vector<unsigned char> before = finite;
  const bool special = inject_special(c, before.data());
  std::array<std::unique_ptr<unsigned char[]>, 2> results;
  for (const Implementation i : {Implementation::Fast, Implementation::Reference}) {
    // A fresh allocation of exactly `end` bytes, so that AddressSanitizer's redzone starts right
    // after the last byte any view may touch.
    std::unique_ptr<unsigned char[]> buffer(new unsigned char[static_cast<size_t>(end)]);
    std::memcpy(buffer.get(), before.data(), before.size());
    c.bind(buffer.get(), &table);
    const std::string error = call(i, c);
    const bool unchanged = std::memcmp(buffer.get(), before.data(), before.size()) == 0;
    if (!error.empty()) {
      require(error.find("max_bytes") != std::string::npos,
              "after the checks accept a call, the only error is stored-table growth past max_bytes",
              std::string(name_of(i)) + ": " + error);
      require(unchanged, "a call that throws writes nothing", name_of(i));
      return;
    }
    for (size_t b = 0; b < before.size(); ++b) {
      if (written[b] || buffer[b] == before[b]) continue;
      require(false, "attention writes only out's elements", std::string(name_of(i)) + " changed byte " + std::to_string(b));
    }
    results[i == Implementation::Fast ? 0 : 1] = std::move(buffer);
  }
  ++stats.ran;
  if (c.null_data[3] || elements_of(c.views[3]) == 0) return;
  if (special) {
    compare_finiteness(c, table, finite.data(), results[0].get(), results[1].get());
  } else {
    compare_outputs(c, table, before.data(), results[0].get(), results[1].get());
  }
}

}  // namespace

int attention_args_one_input(const uint8_t* data, size_t size) {
  AttentionCase c = decode_attention_case(data, size);
  if (!c.spans_backed()) return 0;
  const CosSinTable& table = table_for(c);
  static const std::vector<unsigned char> arena = arena_pattern(static_cast<size_t>(kAttentionArenaBytes));
  std::vector<unsigned char> work = arena;
  c.bind(work.data(), &table);

  std::string check_error;
  try {
    check_attention_arguments(c.views[0], c.views[1], c.views[2], c.views[3], c.options, c.rope_on ? &c.rope : nullptr);
  } catch (const Error& error) {
    check_error = error.what();
    require(starts_with(check_error, "attention: "), "argument errors start with \"attention: \"", check_error);
  }
  ++stats.inputs;
  ++(check_error.empty() ? stats.accepted : stats.rejected);
  if (!check_error.empty()) {
    for (const Implementation i : {Implementation::Fast, Implementation::Reference}) {
      const bool dtype_error = check_error.find(".dtype must") != std::string::npos;
      if (i == Implementation::Reference && dtype_error) {
        // The reference also takes float64 (attention.hpp): with a float64 view it goes on to
        // the checks after the dtype's and may name any of them, or accept four float64 views.
        if (std::all_of(c.views.begin(), c.views.end(), [](const TensorView& view) { return view.dtype == DType::F64; })) continue;
        const std::string error = call(i, c);
        require(starts_with(error, "attention: "), "reference::attention rejects a call whose dtype the checks refuse",
                error + " vs check: " + check_error);
        require(work == arena, "a rejected call writes nothing", name_of(i));
        continue;
      }
      const std::string error = call(i, c);
      require(error == check_error, "attention and reference::attention reject a call as the checks do",
              std::string(name_of(i)) + ": \"" + error + "\" vs check: \"" + check_error + "\"");
      require(work == arena, "a rejected call writes nothing", name_of(i));
    }
    return 0;
  }
  run_accepted(c, table, arena);
  return 0;
}

}  // namespace rotary::fuzz

ROTARY_FUZZ_ENTRY(rotary::fuzz::attention_args_one_input)
