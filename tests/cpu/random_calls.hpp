// tests/cpu/random_calls.hpp: random, seeded apply() calls and their comparison with the float64
// reference, for tests/cpu/apply_test.cpp.
//
// A "family" fixes the RopeSpec and the table (scheme, style, rotary_dim, M-RoPE / 2-D vision /
// xPos, precision, storage); each of its configurations (Config) draws the call: layout,
// q/k/output dtypes, head counts (GQA, MQA, no k), head dims, rotary_offset, direction, positions
// (arange, per token up to 2^31 - 1, sequence offsets), in place or out of place, and where the
// views sit in memory (padded token / head / dim axes, q and k cut from one fused qkv buffer,
// blocked or with interleaved heads, outputs in the same buffer as the inputs, permuted axis
// orders). run_and_check() fills every buffer with random bytes, runs both implementations, and
// reports: every byte outside the output views must be unchanged, pass-through elements must
// equal the reference bit for bit, and rotated elements must be within the tolerances below.
//
// Tolerances (docs/numerics.md, "Fast CPU apply"). u = 2^-24, the float32 unit roundoff.
// For a pair (a, c) with table values C, S (float32, the same in kernel and reference:
// TableValues::TableFloat32), the exact result is x = a*C - c*S (or the backward sign), and
// M = |a*C| + |c*S| bounds every intermediate; for the partner element x = c*C + a*S and
// M = |c*C| + |a*S|.
//   Kernel: loads a, c exactly (bf16, f16 and f32 widen exactly to float32), computes in float32
//     with at most two roundings, fl(a*C - fl(c*S)) as an FMA, or fl(fl(a*C) - fl(c*S)):
//     |k32 - x| <= u*|c*S| + u*(|a*C| + |c*S|)(1 + u) <= 2u*M(1 + u)      (the "f32 term")
//   Reference: computes x in float64 (|x64 - x| <= 2^-52 M) and rounds once on store.
//   float32 output: the kernel stores k32, the reference fl32(x64), within u*|ref| of x:
//     |kernel - ref| <= 2u*M + u*|ref|                                    (+ 2^-50 M slack)
//   bf16 / f16 output: the kernel rounds k32 to the format, the reference rounds x64; each
//     rounding moves by at most half a unit of the format at the value, so
//     |kernel - ref| <= 2u*M + ulp_fmt(max(|kernel|, |ref|)),
//     ulp_fmt(v) = 2^(floor(log2 v) - p), p = 7 (bf16) or 10 (f16), at least the smallest
//     subnormal (bf16 2^-133, f16 2^-24): one unit in the last place, i.e. the two roundings may
//     land on either side of a rounding boundary, never further.
//   float64 storage: the kernel's float32 math rounds a float64 input to float32 (another u*M)
//     and a float64 output holds k32 exactly: 3u*M (+ 2^-52 |ref|).
//   xPos: the kernel scales C and S by f = zeta_i^e(p) (q) or 1/f (k), e = (p - L//2)/scale_base,
//     computed in float32 (or rounded to it), the reference in float64. With f's relative error
//     delta_f: rounding zeta to float32 costs |e|*u, rounding e costs |e ln zeta|*u, pow/exp2
//     <= 2 ulps (4u), and C*f, S*f one more rounding (u) each, so the f32 term grows by
//     (u + delta_f) * M', M' = |a*C*f| + |c*S*f|, delta_f = (4 + 2|e|(1 + |ln zeta_i|))u. The
//     tests keep |e| <= 6 (positions within L//2 +- 3000, scale_base 512): f and 1/f stay in
//     [5e-4, 2e3] (zeta_0 = 2/7), so f16 outputs neither overflow nor underflow.
//   Pass-through elements: copies, or conversions when the dtypes differ: bitwise equal to the
//   reference's (which narrows float64 once; from float-representable values that equals the
//   float path).
//   Non-finite inputs (NanAndInfStayInTheirLanes): a pair with a NaN or Inf input gives the
//   reference's outputs (NaN where it has NaN, the same infinity otherwise); no other pair may
//   change.
#pragma once

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <new>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "rotary/apply.hpp"
#include "rotary/spec.hpp"
#include "rotary/table.hpp"
#include "rotary/tensor.hpp"
#include "tests/support/cpu_scope.hpp"

namespace rotary::random_calls {

// ---- scope guards -------------------------------------------------------------------------------

using test::ForcedTarget;  // tests/support/cpu_scope.hpp
using test::SavedThreadCount;

// A stable seed per target name (the list's order may change between builds).
uint64_t seed_of(const std::string& target);

// ---- random numbers -----------------------------------------------------------------------------

class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}
  int64_t uniform(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(engine_); }
  bool percent(int64_t p) { return uniform(0, 99) < p; }
  bool coin() { return percent(50); }
  // Never zero: magnitude 2^x, x uniform in [-2, 2] (so in [0.25, 4], every binade alike), random sign.
  double value() {
    const double magnitude = std::exp2(std::uniform_real_distribution<double>(-2.0, 2.0)(engine_));
    return coin() ? magnitude : -magnitude;
  }
  template <typename T>
  const T& pick(const std::vector<T>& items) {
    return items[static_cast<size_t>(uniform(0, static_cast<int64_t>(items.size()) - 1))];
  }
  uint64_t bits() { return engine_(); }
  std::mt19937_64& engine() { return engine_; }

 private:
  std::mt19937_64 engine_;
};

// Bulk random data (buffer contents): SplitMix64, much cheaper than the config-level Rng.
class FastRng {
 public:
  explicit FastRng(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15u);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
    return z ^ (z >> 31);
  }
  // Never zero: magnitude in [0.25, 4), uniform within each of its four binades, random sign.
  double value() {
    const uint64_t bits = next();
    const double magnitude = std::ldexp(1.0 + static_cast<double>(bits >> 11) * 0x1p-53, static_cast<int>(bits & 3u) - 2);
    return (bits & 4u) != 0 ? -magnitude : magnitude;
  }

 private:
  uint64_t state_;
};

// Stores `value` rounded to the dtype (through float for bf16 / f16: test inputs only need to
// be some value of the dtype).
void store(unsigned char* base, DType dtype, int64_t index, double value);

std::string hex_bits(const unsigned char* base, DType dtype, int64_t index);

// ---- views in buffers ---------------------------------------------------------------------------

// Named axes: batch, seq (THD: tokens, batch 1), heads, dim.
enum Axis { kBatch = 0, kSeq = 1, kHeads = 2, kDim = 3 };

// A tensor of a call: named extents and strides at an element offset into one of the call's
// buffers. buffer < 0: absent (TensorView{}).
struct ViewPlan {
  int buffer = -1;
  int64_t offset = 0;
  DType dtype = DType::F32;
  std::array<int64_t, 4> extent{};
  std::array<int64_t, 4> stride{};

  bool present() const { return buffer >= 0; }
  int64_t index(int64_t b, int64_t s, int64_t h, int64_t d) const {
    return offset + b * stride[kBatch] + s * stride[kSeq] + h * stride[kHeads] + d * stride[kDim];
  }
  int64_t count() const { return extent[0] * extent[1] * extent[2] * extent[3]; }
  template <typename Fn>
  void for_each(Fn&& fn) const {
    for (int64_t b = 0; b < extent[kBatch]; ++b)
      for (int64_t s = 0; s < extent[kSeq]; ++s)
        for (int64_t h = 0; h < extent[kHeads]; ++h)
          for (int64_t d = 0; d < extent[kDim]; ++d) fn(b, s, h, d);
  }
};

// ---- families: a spec and its table ---------------------------------------------------------------

struct Family {
  uint64_t seed = 0;
  RopeSpec spec;
  TableOptions table_options;
  int64_t position_limit = 0;  // the largest position a configuration may use
  std::string text;
};

int streams_of(const RopeSpec& spec);

Family draw_family(uint64_t seed);

// ---- configurations: one call -------------------------------------------------------------------

using Source = Positions::Source;

struct Config {
  uint64_t seed = 0;
  const Family* family = nullptr;
  Layout layout = Layout::BSHD;
  ApplyOptions options;
  int64_t batch = 1, seq = 0;       // THD: batch 1, seq = tokens
  std::vector<int64_t> cu_seqlens;  // THD
  int64_t q_heads = 1, k_heads = 0;  // k_heads 0: no k
  int64_t q_dim = 0, k_dim = 0;
  DType q_dtype = DType::F32, k_dtype = DType::F32, q_out_dtype = DType::F32, k_out_dtype = DType::F32;
  bool in_place = false;
  Source source = Source::Arange;
  std::vector<int64_t> per_token;  // stream-major
  std::vector<int64_t> offsets;
  bool fast_first = true;  // which implementation runs (and grows a stored table) first
  bool may_broadcast = false;  // plan_tensors may give out-of-place inputs stride 0 on an axis
  // Where the views live.
  std::vector<DType> buffer_dtypes;
  std::vector<int64_t> buffer_elements;
  ViewPlan q, k, q_out, k_out;
  std::string placement;

  int64_t tokens() const { return batch * seq; }
  bool has_k() const { return k_heads > 0; }
  Positions positions() const {
    const std::span<const int64_t> cu = layout == Layout::THD ? std::span(cu_seqlens) : std::span<const int64_t>();
    switch (source) {
      case Source::PerToken: return Positions::per_token(per_token, cu);
      case Source::SequenceOffsets: return Positions::sequence_offsets(offsets, cu);
      case Source::Arange: break;
    }
    return Positions::arange(cu);
  }
  // The sequences as (first token, length).
  std::vector<std::pair<int64_t, int64_t>> sequences() const {
    std::vector<std::pair<int64_t, int64_t>> out;
    if (layout == Layout::THD) {
      for (size_t n = 0; n + 1 < cu_seqlens.size(); ++n) out.emplace_back(cu_seqlens[n], cu_seqlens[n + 1] - cu_seqlens[n]);
    } else {
      for (int64_t b = 0; b < batch; ++b) out.emplace_back(b * seq, seq);
    }
    return out;
  }
  // Every token's position per stream, stream-major, from the documented rules.
  std::vector<int64_t> token_positions() const {
    const int streams = streams_of(family->spec);
    std::vector<int64_t> out(static_cast<size_t>(streams * tokens()));
    const auto seqs = sequences();
    for (size_t n = 0; n < seqs.size(); ++n)
      for (int64_t s = 0; s < seqs[n].second; ++s) {
        const int64_t token = seqs[n].first + s;
        for (int stream = 0; stream < streams; ++stream) {
          int64_t p = s;
          if (source == Source::PerToken) p = per_token[static_cast<size_t>(stream * tokens() + token)];
          if (source == Source::SequenceOffsets) p = offsets[n] + s;
          out[static_cast<size_t>(stream * tokens() + token)] = p;
        }
      }
    return out;
  }
  std::string describe() const;
};

// Physical placement of one buffer: its named axes outermost first, padding per axis, and the
// stride of the innermost axis.
struct Physical {
  std::array<int, 4> order{};
  std::array<int64_t, 4> pad{};
  int64_t inner_step = 1;
};

// A role in a buffer: 0 q, 1 k, 2 q_out, 3 k_out, 4 v (slots nobody views: a gap).
struct Member {
  int role;
  int64_t heads;
};

// Places the members in a new buffer with `dim` elements per head slot, plain (rng null:
// contiguous, blocked in the given order) or drawn (padding, axis order, interleaved heads).
void place(Config& c, Rng* rng, DType dtype, int64_t dim, std::vector<Member> members);

// Where q, k and the outputs live: separate buffers, q and k fused in one qkv buffer (with v
// slots between), outputs fused, or outputs in the qkv buffer's own spare slots.
void plan_tensors(Config& c, Rng* rng);

struct Constraints {
  bool out_of_place_same_dtype = false;  // InPlaceEqualsOutOfPlace
};

Config draw_config(const Family& family, uint64_t seed, Constraints constraints = {});

// A plain configuration for the hand-written tests: contiguous separate buffers.
Config plain_config(const Family& family, Layout layout, int64_t batch, int64_t seq, int64_t q_heads, int64_t k_heads,
                    int64_t dim, DType dtype);

// A family from a spec, for the hand-written tests.
Family family_of(const RopeSpec& spec, TableOptions options = {});

RopeSpec text_spec(int64_t rotary_dim, Style style);

// ---- running and checking -----------------------------------------------------------------------

// Buffers aligned to 64 bytes, so that a view's alignment is its element offset's (place()
// shifts each buffer's views by a random number of elements; plain configurations are aligned).
template <typename T>
struct Aligned64 {
  using value_type = T;
  Aligned64() = default;
  template <typename U>
  explicit Aligned64(const Aligned64<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{64})); }
  void deallocate(T* p, size_t) { ::operator delete(p, std::align_val_t{64}); }
  friend bool operator==(const Aligned64&, const Aligned64&) { return true; }
};
using Bytes = std::vector<unsigned char, Aligned64<unsigned char>>;
using Buffers = std::vector<Bytes>;

// Random bytes everywhere (the sentinel), then random non-zero input values in the input views.
Buffers make_buffers(const Config& c);

// Runs apply() (fast) or reference::apply on the buffers; returns the error message, if any.
std::optional<std::string> run(const Config& c, const CosSinTable& table, Buffers& buffers, bool fast);

// Collects the problems of one call, the first few in full.
class Problems {
 public:
  void add(const std::string& line) {
    if (++count_ <= 8) text_ << "  " << line << "\n";
  }
  bool empty() const { return count_ == 0; }
  std::string str() const {
    return text_.str() + (count_ > 8 ? "  ... and " + std::to_string(count_ - 8) + " more\n" : "");
  }

 private:
  int64_t count_ = 0;
  std::ostringstream text_;
};

// Compares the fast call's buffers with the reference's, element by element (see the tolerances
// at the top). `initial` holds the inputs as they were before either call.
void check_results(const Config& c, const CosSinTable& table, const Buffers& initial, const Buffers& fast,
                   const Buffers& ref, Problems& problems);

// One configuration: both implementations on copies of the same buffers, then the comparison.
// Returns the problems found, empty when the call matches.
std::string run_and_check(const Config& c, const CosSinTable& table, const Buffers* initial_override = nullptr);

}  // namespace rotary::random_calls
