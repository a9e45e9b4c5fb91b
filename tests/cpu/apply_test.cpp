// tests/cpu/apply_test.cpp: the fast CPU apply() (Highway SIMD, threads) against the float64
// reference, on every compiled SIMD target.
//
// The main test draws random, seeded configurations: a "family" fixes the RopeSpec and the table
// (scheme, style, rotary_dim, M-RoPE / 2-D vision / xPos, precision, storage), and each of its
// configurations draws the call: layout, q/k/output dtypes, head counts (GQA, MQA, no k), head
// dims, rotary_offset, direction, positions (none, per token up to 2^31 - 1, sequence offsets),
// in place or out of place, and where the views sit in memory (padded token / head / dim axes,
// q and k cut from one fused qkv buffer, blocked or with interleaved heads, outputs in the same
// buffer as the inputs, permuted axis orders). Every buffer is filled with random bytes first;
// after the call, every byte outside the output views must be unchanged, pass-through elements
// must equal the reference bit for bit, and rotated elements must be within the tolerance below.
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
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <tuple>
#include <vector>

#include "rotary/apply.hpp"
#include "rotary/error.hpp"
#include "rotary/spec.hpp"
#include "rotary/table.hpp"
#include "rotary/tensor.hpp"
#include "src/cpu/kernels.hpp"  // cpu::set_max_head_groups: both head orders on every machine
#include "tests/support/spec_builder.hpp"

namespace rotary {
namespace {

using reference::TableValues;
using ::testing::ContainerEq;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::StrEq;
using ::testing::ThrowsMessage;

constexpr double kU = 0x1p-24;  // float32 unit roundoff

// ---- scope guards -------------------------------------------------------------------------------

// Forces a SIMD target for a scope; restores the automatic choice however the scope ends.
class ForcedTarget {
 public:
  explicit ForcedTarget(const std::string& name) { force_cpu_target(name); }
  ~ForcedTarget() { force_cpu_target(""); }
  ForcedTarget(const ForcedTarget&) = delete;
  ForcedTarget& operator=(const ForcedTarget&) = delete;
};

// Restores num_threads() however the scope ends.
class SavedThreadCount {
 public:
  SavedThreadCount() : saved_(num_threads()) {}
  ~SavedThreadCount() { set_num_threads(saved_); }
  SavedThreadCount(const SavedThreadCount&) = delete;
  SavedThreadCount& operator=(const SavedThreadCount&) = delete;

 private:
  int saved_;
};

// A stable seed per target name (the list's order may change between builds).
uint64_t seed_of(const std::string& target) {
  uint64_t hash = 1469598103934665603u;  // FNV-1a
  for (const char ch : target) hash = (hash ^ static_cast<unsigned char>(ch)) * 1099511628211u;
  return hash % 1000000u;
}

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

// ---- element storage ----------------------------------------------------------------------------

// dtype_size(), inline (the checks below run per element).
inline int64_t element_size(DType dtype) { return dtype == DType::F64 ? 8 : (dtype == DType::F32 ? 4 : 2); }

double load(const unsigned char* base, DType dtype, int64_t index) {
  const unsigned char* at = base + index * element_size(dtype);
  switch (dtype) {
    case DType::F32: {
      float f = 0;
      std::memcpy(&f, at, sizeof f);
      return f;
    }
    case DType::BF16: {
      uint16_t u = 0;
      std::memcpy(&u, at, sizeof u);
      return bf16_to_float(u);
    }
    case DType::F16: {
      uint16_t u = 0;
      std::memcpy(&u, at, sizeof u);
      return f16_to_float(u);
    }
    case DType::F64: {
      double v = 0;
      std::memcpy(&v, at, sizeof v);
      return v;
    }
  }
  return 0;
}

// Stores `value` rounded to the dtype (through float for bf16 / f16: test inputs only need to
// be some value of the dtype).
void store(unsigned char* base, DType dtype, int64_t index, double value) {
  unsigned char* at = base + index * element_size(dtype);
  switch (dtype) {
    case DType::F32: {
      const auto f = static_cast<float>(value);
      std::memcpy(at, &f, sizeof f);
      return;
    }
    case DType::BF16: {
      const uint16_t u = float_to_bf16(static_cast<float>(value));
      std::memcpy(at, &u, sizeof u);
      return;
    }
    case DType::F16: {
      const uint16_t u = float_to_f16(static_cast<float>(value));
      std::memcpy(at, &u, sizeof u);
      return;
    }
    case DType::F64: std::memcpy(at, &value, sizeof value); return;
  }
}

bool same_bits(const unsigned char* a, const unsigned char* b, DType dtype, int64_t index) {
  const int64_t size = element_size(dtype);
  a += index * size;
  b += index * size;
  switch (size) {
    case 2: {
      uint16_t x = 0, y = 0;
      std::memcpy(&x, a, 2);
      std::memcpy(&y, b, 2);
      return x == y;
    }
    case 4: {
      uint32_t x = 0, y = 0;
      std::memcpy(&x, a, 4);
      std::memcpy(&y, b, 4);
      return x == y;
    }
    default: {
      uint64_t x = 0, y = 0;
      std::memcpy(&x, a, 8);
      std::memcpy(&y, b, 8);
      return x == y;
    }
  }
}

std::string hex_bits(const unsigned char* base, DType dtype, int64_t index) {
  uint64_t raw = 0;
  std::memcpy(&raw, base + index * dtype_size(dtype), static_cast<size_t>(dtype_size(dtype)));
  std::ostringstream out;
  out << "0x" << std::hex << raw;
  return out.str();
}

// One unit in the last place of the output format at magnitude v (at least its smallest
// subnormal).
double format_ulp(DType dtype, double v) {
  int precision = 23;
  double smallest = 0x1p-149;
  switch (dtype) {
    case DType::F32: break;
    case DType::BF16: precision = 7, smallest = 0x1p-133; break;
    case DType::F16: precision = 10, smallest = 0x1p-24; break;
    case DType::F64: precision = 52, smallest = 0x1p-1074; break;
  }
  v = std::fabs(v);
  if (!(v > 0) || !std::isfinite(v)) return smallest;
  return std::max(std::ldexp(1.0, std::ilogb(v) - precision), smallest);
}

// ---- views in buffers ---------------------------------------------------------------------------

// Named axes: batch, seq (THD: tokens, batch 1), heads, dim.
enum Axis { kBatch = 0, kSeq = 1, kHeads = 2, kDim = 3 };

// The named axes of a layout in its axis order (THD: batch first, extent 1, never stepped).
std::array<int, 4> layout_axes(Layout layout) {
  switch (layout) {
    case Layout::BSHD: return {kBatch, kSeq, kHeads, kDim};
    case Layout::BHSD: return {kBatch, kHeads, kSeq, kDim};
    case Layout::SBHD: return {kSeq, kBatch, kHeads, kDim};
    case Layout::THD: return {kBatch, kSeq, kHeads, kDim};
  }
  return {kBatch, kSeq, kHeads, kDim};
}

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

TensorView make_view(unsigned char* data, Layout layout, const ViewPlan& plan) {
  if (!plan.present()) return TensorView{};
  TensorView view;
  view.data = data + plan.offset * dtype_size(plan.dtype);
  view.dtype = plan.dtype;
  view.layout = layout;
  const std::array<int, 4> axes = layout_axes(layout);
  const int first = layout == Layout::THD ? 1 : 0;  // THD has no batch axis
  for (int k = first; k < 4; ++k) {
    view.shape[static_cast<size_t>(k - first)] = plan.extent[static_cast<size_t>(axes[static_cast<size_t>(k)])];
    view.stride_elems[static_cast<size_t>(k - first)] = plan.stride[static_cast<size_t>(axes[static_cast<size_t>(k)])];
  }
  return view;
}

std::string dims_text(const std::array<int64_t, 4>& v) {
  return "[" + std::to_string(v[0]) + "," + std::to_string(v[1]) + "," + std::to_string(v[2]) + "," +
         std::to_string(v[3]) + "]";
}

// ---- families: a spec and its table ---------------------------------------------------------------

struct Family {
  uint64_t seed = 0;
  RopeSpec spec;
  TableOptions table_options;
  int64_t position_limit = 0;  // the largest position a configuration may use
  std::string text;
};

int streams_of(const RopeSpec& spec) {
  return spec.axes == PositionAxes::MRope ? 3 : (spec.axes == PositionAxes::Vision2D ? 2 : 1);
}

// The stream pair i reads, from the rules in spec.hpp (independent of pair_streams()).
int stream_of_pair(const RopeSpec& spec, int64_t i) {
  if (spec.axes == PositionAxes::Vision2D) return i < spec.rotary_dim / 4 ? 0 : 1;
  if (spec.axes != PositionAxes::MRope) return 0;
  const auto [t, h, w] = spec.mrope.pairs;
  if (spec.mrope.assignment == MRopeAssignment::Chunked) return i < t ? 0 : (i < t + h ? 1 : 2);
  if (i % 3 == 1 && i < 3 * h) return 1;
  if (i % 3 == 2 && i < 3 * w) return 2;
  return 0;
}

std::string spec_text(const RopeSpec& spec) {
  std::ostringstream out;
  out << "rotary_dim " << spec.rotary_dim << ", " << to_string(spec.style) << ", theta " << spec.theta_base << ", "
      << to_string(spec.scaling.type);
  const Scaling& s = spec.scaling;
  if (s.type == ScalingType::Yarn) {
    out << " (factor " << s.factor.value_or(0) << ", original " << s.original_max_position_embeddings;
    if (s.attention_factor) out << ", attention_factor " << *s.attention_factor;
    if (s.mscale) out << ", mscale " << *s.mscale << "/" << s.mscale_all_dim.value_or(0);
    if (!s.truncate) out << ", truncate false";
    out << ")";
  }
  if (s.type == ScalingType::Proportional) out << " (partial_rotary_factor " << spec.partial_rotary_factor << ")";
  out << ", max_position_embeddings " << spec.max_position_embeddings;
  if (spec.axes == PositionAxes::MRope) {
    out << ", mrope " << to_string(spec.mrope.assignment) << " [" << spec.mrope.pairs[0] << ", "
        << spec.mrope.pairs[1] << ", " << spec.mrope.pairs[2] << "]";
  }
  if (spec.axes == PositionAxes::Vision2D) out << ", vision2d";
  if (spec.xpos) out << ", xpos scale_base " << spec.xpos->scale_base;
  return out.str();
}

// Rotated pair counts: everything up to 48 (head_dim 96), with extra weight on odd counts (SIMD
// tails) and on multiples of 8 (whole vectors).
int64_t draw_pairs(Rng& rng) {
  const int64_t r = rng.uniform(0, 99);
  if (r < 40) return rng.uniform(1, 48);
  if (r < 70) return rng.pick(std::vector<int64_t>{3, 5, 7, 11, 13, 17, 23});  // rotary_dim 6, 10, 14, 22, ...
  return rng.pick(std::vector<int64_t>{8, 16, 24, 32, 40, 48});
}

Family draw_family(uint64_t seed) {
  Rng rng(seed);
  Family family;
  family.seed = seed;
  RopeSpec& spec = family.spec;
  spec.name = "apply_test";
  const int64_t axes = rng.uniform(0, 99);
  spec.axes = axes < 70 ? PositionAxes::Single : (axes < 85 ? PositionAxes::MRope : PositionAxes::Vision2D);
  spec.style = rng.coin() ? Style::NeoX : Style::GPTJ;
  spec.theta_base = rng.pick(std::vector<double>{10000.0, 500000.0, 1000000.0});
  spec.max_position_embeddings = 4096;
  const int64_t scheme = spec.axes == PositionAxes::Vision2D ? 0 : rng.uniform(0, 99);
  int64_t pairs = draw_pairs(rng);
  if (spec.axes == PositionAxes::Vision2D) pairs = 2 * rng.uniform(1, 24);  // rotary_dim % 4 == 0
  spec.rotary_dim = 2 * pairs;
  spec.head_dim = spec.rotary_dim;
  if (scheme >= 55 && scheme < 80) {
    Scaling& s = spec.scaling;
    s.type = ScalingType::Yarn;
    spec.max_position_embeddings = 16384;
    s.original_max_position_embeddings = 4096;
    switch (rng.uniform(0, 2)) {
      case 0:  // explicit attention factor
        s.factor = 4.0;
        s.attention_factor = 1.25;
        break;
      case 1:  // DeepSeek-style mscale ratio
        s.factor = 40.0;
        s.mscale = 1.0;
        s.mscale_all_dim = 0.5;
        break;
      default:  // gpt-oss-style fractional range, the 0.1 ln(s) + 1 formula
        s.factor = 32.0;
        s.truncate = false;
        break;
    }
  } else if (scheme >= 80) {
    spec.scaling.type = ScalingType::Proportional;
    spec.partial_rotary_factor = static_cast<double>(rng.uniform(0, pairs)) / static_cast<double>(pairs);
  }
  if (spec.axes == PositionAxes::Single && rng.percent(18)) spec.xpos = XPos{512.0};
  if (spec.axes == PositionAxes::MRope) {
    // Random sections summing to the pair count (a section may be empty).
    int64_t cut1 = rng.uniform(0, pairs), cut2 = rng.uniform(0, pairs);
    if (cut1 > cut2) std::swap(cut1, cut2);
    spec.mrope.pairs = {cut1, cut2 - cut1, pairs - cut2};
    spec.mrope.assignment = rng.coin() ? MRopeAssignment::Chunked : MRopeAssignment::Interleaved;
  }
  TableOptions& options = family.table_options;
  options.precision = rng.percent(30) ? Precision::HFCompat : Precision::Exact;
  const int64_t storage = rng.uniform(0, 99);
  if (storage < 40) {  // stored, grown by the calls: the pages of their positions, up to 2^31 - 1
    options.storage = Storage::Stored;
    options.initial_positions = rng.coin() ? 0 : rng.uniform(1, 300);
    family.position_limit = kMaxPosition;
  } else if (storage < 50) {  // a fixed table: the calls' positions stay below its length
    options.storage = Storage::Stored;
    options.fixed_positions = rng.uniform(16, 3000);
    family.position_limit = options.fixed_positions - 1;
  } else {  // on the fly: any position up to 2^31 - 1
    options.storage = Storage::OnTheFly;
    family.position_limit = kMaxPosition;
  }
  std::ostringstream text;
  text << "family seed " << seed << ": " << spec_text(spec) << "; table " << to_string(options.precision) << ", "
       << (options.storage == Storage::OnTheFly ? "on the fly"
                                                 : (options.fixed_positions > 0
                                                        ? "fixed " + std::to_string(options.fixed_positions) + " rows"
                                                        : "stored, initial " + std::to_string(options.initial_positions)));
  family.text = text.str();
  return family;
}

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

std::string list_text(const std::vector<int64_t>& values) {
  std::ostringstream out;
  out << "{";
  for (size_t i = 0; i < values.size(); ++i) out << (i ? ", " : "") << values[i];
  out << "}";
  return out.str();
}

std::string Config::describe() const {
  std::ostringstream out;
  out << family->text << "\nconfig seed " << seed << ": " << to_string(layout);
  if (layout == Layout::THD) {
    out << " cu_seqlens " << list_text(cu_seqlens);
  } else {
    out << " batch " << batch << " seq " << seq;
  }
  out << "; q " << q_heads << " heads x " << q_dim << " " << to_string(q_dtype) << " -> " << to_string(q_out_dtype);
  if (has_k()) {
    out << "; k " << k_heads << " heads x " << k_dim << " " << to_string(k_dtype) << " -> " << to_string(k_out_dtype);
  } else {
    out << "; no k";
  }
  out << "; " << (in_place ? "in place" : "out of place") << ", " << to_string(options.direction)
      << ", rotary_offset " << options.rotary_offset;
  if (family->spec.xpos) out << ", xpos_length " << options.xpos_length;
  out << "; positions ";
  switch (source) {
    case Source::Arange: out << "none (arange)"; break;
    case Source::PerToken: out << "per_token " << list_text(per_token); break;
    case Source::SequenceOffsets: out << "sequence_offsets " << list_text(offsets); break;
  }
  out << "; " << (fast_first ? "apply() ran first" : "reference ran first") << "\n" << placement;
  return out.str();
}

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
const char* const kRoleNames[] = {"q", "k", "q_out", "k_out", "v"};

// Places the members in a new buffer with `dim` elements per head slot, plain (rng null:
// contiguous, blocked in the given order) or drawn (padding, axis order, interleaved heads).
void place(Config& c, Rng* rng, DType dtype, int64_t dim, std::vector<Member> members) {
  Physical physical;
  physical.order = layout_axes(c.layout);
  bool interleave = false;
  int64_t shift = 0;  // elements before the first view: the views' alignment
  if (rng != nullptr) {
    shift = rng->uniform(0, 15);
    // Mostly the layout's own axis order; sometimes batch, seq and heads in another order
    // (heads outside tokens, ...); rarely the dim axis not innermost, or every other element.
    const int64_t order = rng->uniform(0, 99);
    if (order < 10) {
      std::shuffle(physical.order.begin(), physical.order.begin() + 3, rng->engine());
    } else if (order < 13) {
      std::shuffle(physical.order.begin(), physical.order.end(), rng->engine());
    }
    for (int64_t& pad : physical.pad) pad = rng->percent(40) ? rng->uniform(1, 5) : 0;
    physical.inner_step = rng->percent(3) ? 2 : 1;
    bool same_heads = members.size() > 1;
    for (const Member& m : members) same_heads = same_heads && m.heads == members[0].heads;
    interleave = same_heads && rng->coin();
    std::shuffle(members.begin(), members.end(), rng->engine());
  }
  int64_t slots = 0;
  for (const Member& m : members) slots += m.heads;
  const std::array<int64_t, 4> extent = {c.batch, c.seq, slots, dim};
  std::array<int64_t, 4> stride{};
  int64_t running = physical.inner_step;
  for (int k = 3; k >= 0; --k) {
    const auto axis = static_cast<size_t>(physical.order[static_cast<size_t>(k)]);
    stride[axis] = running;
    running *= extent[axis] + physical.pad[axis];
  }
  const int buffer = static_cast<int>(c.buffer_dtypes.size());
  std::ostringstream text;
  text << "buffer " << buffer << " " << to_string(dtype) << ": views from element " << shift
       << ", named strides (b,s,h,d) " << dims_text(stride)
       << (interleave ? ", heads interleaved:" : ", heads blocked:");
  int64_t last = 0;
  int64_t first_slot = 0;
  for (size_t m = 0; m < members.size(); ++m) {
    const Member& member = members[m];
    const int64_t first = interleave ? static_cast<int64_t>(m) : first_slot;
    const int64_t step = interleave ? static_cast<int64_t>(members.size()) : 1;
    first_slot += member.heads;
    text << " " << kRoleNames[member.role] << "@" << first << (step > 1 ? "+" + std::to_string(step) + "n" : "");
    if (member.role == 4) continue;
    ViewPlan plan;
    plan.buffer = buffer;
    plan.dtype = dtype;
    plan.offset = shift + first * stride[kHeads];
    plan.extent = {c.batch, c.seq, member.heads, member.role % 2 == 0 ? c.q_dim : c.k_dim};
    plan.stride = stride;
    plan.stride[kHeads] *= step;
    if (plan.count() > 0) {
      last = std::max(last, plan.index(plan.extent[0] - 1, plan.extent[1] - 1, plan.extent[2] - 1, plan.extent[3] - 1));
    }
    (member.role == 0 ? c.q : member.role == 1 ? c.k : member.role == 2 ? c.q_out : c.k_out) = plan;
  }
  // Tight: the furthest element is the buffer's last, so an over-read past a view is out of bounds.
  c.buffer_dtypes.push_back(dtype);
  c.buffer_elements.push_back(last + 1);
  text << " (" << last + 1 << " elements)\n";
  c.placement += text.str();
}

// Where q, k and the outputs live: separate buffers, q and k fused in one qkv buffer (with v
// slots between), outputs fused, or outputs in the qkv buffer's own spare slots.
void plan_tensors(Config& c, Rng* rng) {
  const bool can_fuse_in = c.has_k() && c.q_dim == c.k_dim && c.q_dtype == c.k_dtype;
  const bool fuse_in = rng != nullptr && can_fuse_in && rng->percent(40);
  std::vector<Member> qkv = {{0, c.q_heads}, {1, c.k_heads}, {4, c.k_heads}};
  if (c.in_place) {
    if (fuse_in) {
      place(c, rng, c.q_dtype, c.q_dim, qkv);
    } else {
      place(c, rng, c.q_dtype, c.q_dim, {{0, c.q_heads}});
      if (c.has_k()) place(c, rng, c.k_dtype, c.k_dim, {{1, c.k_heads}});
    }
    c.q_out = c.q;
    c.k_out = c.k;
    return;
  }
  const bool all_same = can_fuse_in && c.q_out_dtype == c.q_dtype && c.k_out_dtype == c.q_dtype;
  if (fuse_in && all_same && rng->percent(25)) {
    qkv.push_back({2, c.q_heads});
    qkv.push_back({3, c.k_heads});
    place(c, rng, c.q_dtype, c.q_dim, qkv);
    return;
  }
  if (fuse_in) {
    place(c, rng, c.q_dtype, c.q_dim, qkv);
  } else {
    place(c, rng, c.q_dtype, c.q_dim, {{0, c.q_heads}});
    if (c.has_k()) place(c, rng, c.k_dtype, c.k_dim, {{1, c.k_heads}});
    // Inputs may have stride 0 (a broadcast view: one head read as all heads, one token as all
    // tokens), outputs not.
    for (ViewPlan* input : {&c.q, &c.k}) {
      if (rng == nullptr || !c.may_broadcast || !input->present() || !rng->percent(4)) continue;
      const auto axis = static_cast<size_t>(rng->pick(std::vector<int>{kBatch, kSeq, kHeads}));
      input->stride[axis] = 0;
      c.placement += std::string(input == &c.q ? "q" : "k") + " broadcast: stride 0 on named axis " +
                     std::to_string(axis) + "\n";
    }
  }
  const bool can_fuse_out = c.has_k() && c.q_dim == c.k_dim && c.q_out_dtype == c.k_out_dtype;
  if (rng != nullptr && can_fuse_out && rng->percent(30)) {
    place(c, rng, c.q_out_dtype, c.q_dim, {{2, c.q_heads}, {3, c.k_heads}});
  } else {
    place(c, rng, c.q_out_dtype, c.q_dim, {{2, c.q_heads}});
    if (c.has_k()) place(c, rng, c.k_out_dtype, c.k_dim, {{3, c.k_heads}});
  }
}

// A position for a token of the family: small, medium, around 2^24, past it, near 2^31 - 1 or
// anywhere, as the table allows; for xPos within L//2 +- 3000 (|e| <= 6).
int64_t draw_position(Rng& rng, const Config& c) {
  const Family& f = *c.family;
  const int64_t limit = f.position_limit;
  if (f.spec.xpos) {
    const int64_t half = (c.options.xpos_length > 0 ? c.options.xpos_length : f.spec.max_position_embeddings) / 2;
    return rng.uniform(std::max<int64_t>(0, half - 3000), std::min(limit, half + 3000));
  }
  constexpr int64_t k24 = int64_t{1} << 24;
  int64_t p = 0;
  switch (rng.uniform(0, 9)) {
    case 0: case 1: case 2: p = rng.uniform(0, 63); break;
    case 3: case 4: p = rng.uniform(0, 20000); break;
    case 5: p = k24 + rng.uniform(-64, 64); break;
    case 6: p = rng.uniform(k24, kMaxPosition); break;
    case 7: p = limit - rng.uniform(0, 64); break;
    default: p = rng.uniform(0, limit); break;
  }
  return std::clamp<int64_t>(p, 0, limit);
}

struct Constraints {
  bool out_of_place_same_dtype = false;  // InPlaceEqualsOutOfPlace
};

Config draw_config(const Family& family, uint64_t seed, Constraints constraints = {}) {
  Rng rng(seed);
  Config c;
  c.seed = seed;
  c.family = &family;
  const RopeSpec& spec = family.spec;
  c.layout = rng.pick(std::vector<Layout>{Layout::BSHD, Layout::BHSD, Layout::SBHD, Layout::THD});
  c.options.direction = rng.coin() ? Direction::Forward : Direction::Backward;
  // Head dims up to 96 (or rotary_dim): the rotated block at rotary_offset, then a tail.
  const int64_t room = std::max<int64_t>(96 - spec.rotary_dim, 0);
  c.options.rotary_offset = room > 0 && rng.coin() ? rng.uniform(1, room) : 0;
  const int64_t tail_room = room - c.options.rotary_offset;
  c.q_dim = c.options.rotary_offset + spec.rotary_dim + (tail_room > 0 && rng.coin() ? rng.uniform(1, tail_room) : 0);
  c.k_dim = rng.percent(75) ? c.q_dim : rng.uniform(c.options.rotary_offset + spec.rotary_dim, std::max<int64_t>(96, spec.rotary_dim));
  // Heads: GQA (k heads divide q heads), MQA (1), or no k.
  c.q_heads = rng.uniform(1, 6);
  std::vector<int64_t> divisors;
  for (int64_t d = 1; d <= c.q_heads; ++d) {
    if (c.q_heads % d == 0) divisors.push_back(d);
  }
  c.k_heads = rng.percent(85) ? rng.pick(divisors) : 0;
  // Tokens.
  if (c.layout == Layout::THD) {
    const int64_t sequences = rng.uniform(1, 4);
    c.cu_seqlens = {0};
    for (int64_t n = 0; n < sequences; ++n) c.cu_seqlens.push_back(c.cu_seqlens.back() + (rng.percent(20) ? 0 : rng.uniform(1, 9)));
    c.batch = 1;
    c.seq = c.cu_seqlens.back();
  } else {
    c.batch = rng.uniform(1, 3);
    c.seq = rng.uniform(1, 9);
  }
  // Dtypes: mostly the same in and out; some mixed (bf16 -> f32, f32 -> f16, ...); a few f64.
  const std::vector<DType> narrow = {DType::F32, DType::F32, DType::BF16, DType::BF16, DType::F16, DType::F16};
  auto draw_dtype = [&] { return rng.percent(5) ? DType::F64 : rng.pick(narrow); };
  c.q_dtype = draw_dtype();
  c.k_dtype = rng.percent(10) ? draw_dtype() : c.q_dtype;
  c.in_place = !constraints.out_of_place_same_dtype && rng.percent(35);
  const bool mixed = !c.in_place && !constraints.out_of_place_same_dtype && rng.percent(20);
  c.q_out_dtype = mixed ? draw_dtype() : c.q_dtype;
  c.k_out_dtype = mixed ? (rng.coin() ? c.q_out_dtype : draw_dtype()) : c.k_dtype;
  if (spec.xpos) {
    const int64_t half_default = spec.max_position_embeddings / 2;
    c.options.xpos_length = rng.coin() && half_default <= family.position_limit
                                ? 0
                                : rng.uniform(1, std::min<int64_t>(8192, 2 * family.position_limit + 1));
  }
  // Positions.
  const int streams = streams_of(spec);
  const int64_t source = rng.uniform(0, 99);
  if (streams > 1) {
    c.source = source < 80 ? Source::PerToken : Source::Arange;
  } else {
    c.source = source < 50 ? Source::PerToken : (source < 80 ? Source::SequenceOffsets : Source::Arange);
  }
  if (spec.xpos && c.source == Source::Arange) c.source = Source::PerToken;  // arange would put e near -16
  if (c.source == Source::PerToken) {
    c.per_token.resize(static_cast<size_t>(streams * c.tokens()));
    for (int64_t& p : c.per_token) p = draw_position(rng, c);
    if (streams == 3 && rng.percent(30)) {  // text tokens in M-RoPE: t = h = w
      for (int64_t t = 0; t < c.tokens(); ++t) {
        c.per_token[static_cast<size_t>(c.tokens() + t)] = c.per_token[static_cast<size_t>(2 * c.tokens() + t)] =
            c.per_token[static_cast<size_t>(t)];
      }
    }
  } else if (c.source == Source::SequenceOffsets) {
    for (const auto& [first, length] : c.sequences()) {
      if (length == 0) {
        // An empty THD segment reads no position: its offset is never checked, nor used.
        c.offsets.push_back(rng.pick(std::vector<int64_t>{-5, kMaxPosition + 1, int64_t{1} << 40, 7}));
        continue;
      }
      const int64_t p = draw_position(rng, c);
      c.offsets.push_back(std::max<int64_t>(0, std::min(p, family.position_limit - (length - 1))));
    }
  }
  c.fast_first = rng.coin();
  c.may_broadcast = !constraints.out_of_place_same_dtype;  // InPlaceEqualsOutOfPlace reuses the inputs in place
  plan_tensors(c, &rng);
  return c;
}

// A plain configuration for the hand-written tests: contiguous separate buffers.
Config plain_config(const Family& family, Layout layout, int64_t batch, int64_t seq, int64_t q_heads, int64_t k_heads,
                    int64_t dim, DType dtype) {
  Config c;
  c.family = &family;
  c.layout = layout;
  c.batch = layout == Layout::THD ? 1 : batch;
  c.seq = seq;
  if (layout == Layout::THD) c.cu_seqlens = {0, seq};
  c.q_heads = q_heads;
  c.k_heads = k_heads;
  c.q_dim = c.k_dim = dim;
  c.q_dtype = c.k_dtype = c.q_out_dtype = c.k_out_dtype = dtype;
  return c;
}

// A family from a spec, for the hand-written tests.
Family family_of(const RopeSpec& spec, TableOptions options = {}) {
  Family family;
  family.spec = spec;
  family.table_options = std::move(options);
  family.position_limit = family.table_options.fixed_positions > 0 ? family.table_options.fixed_positions - 1
                          : family.table_options.storage == Storage::Stored ? 12000
                                                                            : kMaxPosition;
  family.text = "hand-written: " + spec_text(spec);
  return family;
}

RopeSpec text_spec(int64_t rotary_dim, Style style) {
  return test::rope_spec({.name = "apply_test", .head_dim = rotary_dim, .style = style});
}

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
Buffers make_buffers(const Config& c) {
  FastRng rng(c.seed ^ 0x5EEDF00Du);
  Buffers buffers;
  for (size_t i = 0; i < c.buffer_dtypes.size(); ++i) {
    Bytes bytes(static_cast<size_t>(c.buffer_elements[i] * dtype_size(c.buffer_dtypes[i])));
    for (size_t at = 0; at < bytes.size(); at += 8) {
      const uint64_t word = rng.next();
      std::memcpy(bytes.data() + at, &word, std::min<size_t>(8, bytes.size() - at));
    }
    buffers.push_back(std::move(bytes));
  }
  for (const ViewPlan* plan : {&c.q, &c.k}) {
    if (!plan->present()) continue;
    unsigned char* base = buffers[static_cast<size_t>(plan->buffer)].data();
    plan->for_each([&](int64_t b, int64_t s, int64_t h, int64_t d) {
      store(base, plan->dtype, plan->index(b, s, h, d), rng.value());
    });
  }
  return buffers;
}

TensorView view_in(Buffers& buffers, const Config& c, const ViewPlan& plan) {
  if (!plan.present()) return TensorView{};
  return make_view(buffers[static_cast<size_t>(plan.buffer)].data(), c.layout, plan);
}

// Runs apply() (fast) or reference::apply on the buffers; returns the error message, if any.
std::optional<std::string> run(const Config& c, const CosSinTable& table, Buffers& buffers, bool fast) {
  const TensorView q = view_in(buffers, c, c.q), k = view_in(buffers, c, c.k);
  const TensorView q_out = view_in(buffers, c, c.q_out), k_out = view_in(buffers, c, c.k_out);
  const Positions positions = c.positions();
  try {
    if (fast) {
      apply(q, k, q_out, k_out, positions, table, c.options);
    } else {
      reference::apply(q, k, q_out, k_out, positions, table, c.options, TableValues::TableFloat32);
    }
  } catch (const std::exception& error) {
    return std::string(error.what());
  }
  return std::nullopt;
}

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
                   const Buffers& ref, Problems& problems) {
  const RopeSpec& spec = table.spec();
  // 1. Nothing outside the output views changed (gaps, v slots, inputs of out-of-place calls).
  for (size_t i = 0; i < initial.size(); ++i) {
    std::vector<char> covered(static_cast<size_t>(c.buffer_elements[i]), 0);
    for (const ViewPlan* plan : {&c.q_out, &c.k_out}) {
      if (plan->buffer != static_cast<int>(i)) continue;
      plan->for_each([&](int64_t b, int64_t s, int64_t h, int64_t d) { covered[static_cast<size_t>(plan->index(b, s, h, d))] = 1; });
    }
    const DType dtype = c.buffer_dtypes[i];
    for (int64_t e = 0; e < c.buffer_elements[i]; ++e) {
      if (covered[static_cast<size_t>(e)]) continue;
      if (!same_bits(fast[i].data(), initial[i].data(), dtype, e)) {
        problems.add("apply() changed buffer " + std::to_string(i) + " element " + std::to_string(e) +
                     ", outside the output views: " + hex_bits(initial[i].data(), dtype, e) + " -> " +
                     hex_bits(fast[i].data(), dtype, e));
      }
      if (!same_bits(ref[i].data(), initial[i].data(), dtype, e)) {
        problems.add("harness: the reference changed buffer " + std::to_string(i) + " element " + std::to_string(e));
      }
    }
  }
  // 2. The outputs. Table rows at every token's positions, as the kernel sees them (float32).
  const int64_t pairs = table.num_pairs(), rotary_dim = 2 * pairs, offset = c.options.rotary_offset;
  const std::vector<int64_t> positions = c.token_positions();
  std::vector<float> cos_rows(positions.size() * static_cast<size_t>(pairs));
  std::vector<float> sin_rows(cos_rows.size());
  for (size_t r = 0; r < positions.size(); ++r) {
    table.row(positions[r], cos_rows.data() + r * static_cast<size_t>(pairs), sin_rows.data() + r * static_cast<size_t>(pairs));
  }
  for (const bool is_q : {true, false}) {
    const ViewPlan& in = is_q ? c.q : c.k;
    const ViewPlan& out = is_q ? c.q_out : c.k_out;
    if (!in.present()) continue;
    const unsigned char* in_base = initial[static_cast<size_t>(in.buffer)].data();
    const unsigned char* fast_base = fast[static_cast<size_t>(out.buffer)].data();
    const unsigned char* ref_base = ref[static_cast<size_t>(out.buffer)].data();
    const char* name = is_q ? "q_out" : "k_out";
    out.for_each([&](int64_t b, int64_t s, int64_t h, int64_t d) {
      const int64_t token = b * c.seq + s;
      const int64_t index = out.index(b, s, h, d);
      const double got = load(fast_base, out.dtype, index);
      const double want = load(ref_base, out.dtype, index);
      auto where = [&] {
        std::ostringstream text;
        text << name << "(b " << b << ", s " << s << ", h " << h << ", d " << d << ") at position "
             << positions[static_cast<size_t>(token)];
        return text.str();
      };
      const bool identical = same_bits(fast_base, ref_base, out.dtype, index);
      if (d < offset || d >= offset + rotary_dim) {
        if (!identical) {
          problems.add(where() + ", passed through: " + hex_bits(fast_base, out.dtype, index) + ", reference " +
                       hex_bits(ref_base, out.dtype, index));
        }
        return;
      }
      if (identical && std::isfinite(got)) return;  // within any tolerance
      // The pair and its inputs.
      const int64_t j = d - offset;
      int64_t pair = 0, index_a = 0, index_c = 0;
      if (spec.style == Style::NeoX) {
        pair = j % pairs;
        index_a = offset + pair;
        index_c = offset + pair + pairs;
      } else {
        pair = j / 2;
        index_a = offset + 2 * pair;
        index_c = index_a + 1;
      }
      const double a = load(in_base, in.dtype, in.index(b, s, h, index_a));
      const double cc = load(in_base, in.dtype, in.index(b, s, h, index_c));
      const int stream = stream_of_pair(spec, pair);
      const size_t row = static_cast<size_t>(stream * c.tokens() + token) * static_cast<size_t>(pairs) + static_cast<size_t>(pair);
      double cos_value = cos_rows[row], sin_value = sin_rows[row];
      double xpos_relative = 0;  // (u + delta_f), see the top
      if (spec.xpos) {
        const int64_t length = c.options.xpos_length > 0 ? c.options.xpos_length : spec.max_position_embeddings;
        const double e = static_cast<double>(positions[static_cast<size_t>(token)] - length / 2) / spec.xpos->scale_base;
        const double zeta = (2.0 * static_cast<double>(pair) + 0.4 * static_cast<double>(rotary_dim)) /
                            (1.4 * static_cast<double>(rotary_dim));
        const double factor = std::pow(zeta, is_q ? e : -e);
        cos_value *= factor;
        sin_value *= factor;
        xpos_relative = kU + (4.0 + 2.0 * std::fabs(e) * (1.0 + std::fabs(std::log(zeta)))) * kU;
      }
      if (!std::isfinite(a) || !std::isfinite(cc)) {
        // A poisoned pair: the reference's non-finite outputs, NaN for NaN.
        const bool both_nan = std::isnan(got) && std::isnan(want);
        if (!both_nan && !(got == want)) {
          problems.add(where() + ", pair with non-finite input (" + std::to_string(a) + ", " + std::to_string(cc) +
                       "): got " + std::to_string(got) + ", reference " + std::to_string(want));
        }
        return;
      }
      // The two products of this element: a*C and c*S for a', c*C and a*S for c'.
      const bool is_a = d == index_a;
      const double magnitude = is_a ? std::fabs(a * cos_value) + std::fabs(cc * sin_value)
                                    : std::fabs(cc * cos_value) + std::fabs(a * sin_value);
      double f32_term = 2 * kU * magnitude + 0x1p-50 * magnitude + xpos_relative * magnitude;
      if (in.dtype == DType::F64) f32_term += kU * magnitude;  // the kernel rounds a float64 input to float32
      double tolerance = 0;
      switch (out.dtype) {
        case DType::F32: tolerance = f32_term + kU * std::fabs(want); break;
        case DType::F64: tolerance = f32_term + 0x1p-52 * std::fabs(want); break;
        case DType::BF16:
        case DType::F16: tolerance = f32_term + format_ulp(out.dtype, std::max(std::fabs(got), std::fabs(want))); break;
      }
      if (!std::isfinite(got) || !(std::fabs(got - want) <= tolerance)) {
        std::ostringstream text;
        text.precision(9);
        text << where() << ", pair " << pair << " (a " << a << ", c " << cc << ", C " << cos_value << ", S "
             << sin_value << "): got " << got << " (" << hex_bits(fast_base, out.dtype, index) << "), reference " << want
             << " (" << hex_bits(ref_base, out.dtype, index) << "), |diff| " << std::fabs(got - want) << " > tolerance "
             << tolerance << " = " << std::fabs(got - want) / tolerance << "x";
        problems.add(text.str());
      }
      // Harness self-check: the reference agrees with this test's reading of the contract (the
      // pair, the stream, the row, xPos), so the tolerance above is computed from the right values.
      const bool forward = c.options.direction == Direction::Forward;
      const double expected = is_a ? (forward ? a * cos_value - cc * sin_value : a * cos_value + cc * sin_value)
                                   : (forward ? cc * cos_value + a * sin_value : cc * cos_value - a * sin_value);
      const double own = format_ulp(out.dtype, expected) + 0x1p-45 * magnitude;
      if (!(std::fabs(want - expected) <= own)) {
        std::ostringstream text;
        text.precision(17);
        text << "harness: " << where() << " reference " << want << " but the test's formula gives " << expected;
        problems.add(text.str());
      }
    });
  }
}

// One configuration: both implementations on copies of the same buffers, then the comparison.
// Returns the problems found, empty when the call matches.
std::string run_and_check(const Config& c, const CosSinTable& table, const Buffers* initial_override = nullptr) {
  const Buffers initial = initial_override ? *initial_override : make_buffers(c);
  Buffers fast = initial, ref = initial;
  std::optional<std::string> fast_error, ref_error;
  if (c.fast_first) {
    fast_error = run(c, table, fast, true);
    ref_error = run(c, table, ref, false);
  } else {
    ref_error = run(c, table, ref, false);
    fast_error = run(c, table, fast, true);
  }
  if (ref_error) {
    return "  harness: reference::apply rejected the configuration: " + *ref_error +
           (fast_error ? "" : " (apply() accepted it)") + "\n";
  }
  if (fast_error) return "  apply() threw: " + *fast_error + "\n";
  Problems problems;
  check_results(c, table, initial, fast, ref, problems);
  return problems.str();
}

// ---- tests --------------------------------------------------------------------------------------

constexpr int kFamiliesPerTarget = 100;
constexpr int kConfigsPerFamily = 20;

TEST(ApplyCpu, MatchesReferenceOnRandomConfigsForEveryTarget) {
  const std::vector<std::string> targets = cpu_targets();
  ASSERT_FALSE(targets.empty());
  for (const std::string& target : targets) {
    const uint64_t target_seed = seed_of(target);
    SCOPED_TRACE("target " + target + ", seed " + std::to_string(target_seed));
    const ForcedTarget forced(target);
    ASSERT_EQ(current_cpu_target(), target);
    int failing = 0;
    int64_t checked = 0;
    for (int f = 0; f < kFamiliesPerTarget && failing < 10; ++f) {
      const Family family = draw_family(target_seed * 1000 + static_cast<uint64_t>(f));
      SCOPED_TRACE(family.text);
      ASSERT_NO_THROW(validate(family.spec));
      // One table per family, shared by its configurations: the first call grows a stored table,
      // later calls grow it further or read existing rows.
      const CosSinTable table(family.spec, family.table_options);
      for (int j = 0; j < kConfigsPerFamily && failing < 10; ++j) {
        const Config config = draw_config(family, family.seed * 100 + static_cast<uint64_t>(j));
        SCOPED_TRACE(config.describe());
        const std::string problems = run_and_check(config, table);
        ++checked;
        if (!problems.empty()) {
          ADD_FAILURE() << "apply() differs from reference::apply on " << target << ":\n" << problems;
          ++failing;
        }
      }
    }
    if (failing >= 10) ADD_FAILURE() << "stopped " << target << " after 10 failing configurations";
    if (failing == 0) {
      EXPECT_EQ(checked, kFamiliesPerTarget * kConfigsPerFamily);
    }
  }
}

// Threads split the work, never the arithmetic: 1, 2 and 3 threads give the same bytes.
TEST(ApplyCpu, BitwiseIdenticalForAnyThreadCount) {
  const SavedThreadCount saved;
  struct Case {
    std::string name;
    Family family;
    Config config;
  };
  std::vector<Case> cases;
  {
    Case one{"f32 bshd 1x512x8x128 neox, k 2 heads", family_of(text_spec(128, Style::NeoX)), {}};
    cases.push_back(std::move(one));
    Case two{"bf16 bshd 1x512x8x128 gptj yarn, k 8 heads, in place", {}, {}};
    RopeSpec yarn = text_spec(128, Style::GPTJ);
    yarn.scaling.type = ScalingType::Yarn;
    yarn.scaling.factor = 4.0;
    yarn.scaling.original_max_position_embeddings = 4096;
    yarn.max_position_embeddings = 16384;
    two.family = family_of(yarn);
    cases.push_back(std::move(two));
    Case three{"f16 thd 700 tokens x 4 heads x 96, mrope interleaved, rotary_dim 64 at offset 16, strided", {}, {}};
    RopeSpec mrope = text_spec(64, Style::NeoX);
    mrope.axes = PositionAxes::MRope;
    mrope.mrope = {{12, 10, 10}, MRopeAssignment::Interleaved};
    TableOptions on_the_fly;
    on_the_fly.storage = Storage::OnTheFly;
    three.family = family_of(mrope, on_the_fly);
    cases.push_back(std::move(three));
  }
  cases[0].config = plain_config(cases[0].family, Layout::BSHD, 1, 512, 8, 2, 128, DType::F32);
  cases[1].config = plain_config(cases[1].family, Layout::BSHD, 1, 512, 8, 8, 128, DType::BF16);
  cases[1].config.in_place = true;
  cases[2].config = plain_config(cases[2].family, Layout::THD, 1, 700, 4, 2, 96, DType::F16);
  cases[2].config.cu_seqlens = {0, 1, 300, 300, 700};
  cases[2].config.options.rotary_offset = 16;
  for (size_t i = 0; i < cases.size(); ++i) {
    Case& test_case = cases[i];
    Config& c = test_case.config;
    c.family = &test_case.family;
    c.seed = 31000 + i;
    Rng rng(c.seed);
    c.source = Source::PerToken;
    c.per_token.resize(static_cast<size_t>(streams_of(test_case.family.spec) * c.tokens()));
    for (int64_t& p : c.per_token) p = rng.uniform(0, i == 2 ? kMaxPosition : 4000);
    plan_tensors(c, i == 2 ? &rng : nullptr);
  }
  for (const Case& test_case : cases) {
    SCOPED_TRACE(test_case.name + "\n" + test_case.config.describe());
    const Config& c = test_case.config;
    const CosSinTable table(test_case.family.spec, test_case.family.table_options);
    const Buffers initial = make_buffers(c);
    std::vector<Buffers> results;
    for (const int threads : {1, 2, 3}) {
      set_num_threads(threads);
      ASSERT_EQ(num_threads(), threads);
      Buffers buffers = initial;
      const std::optional<std::string> error = run(c, table, buffers, true);
      ASSERT_FALSE(error.has_value()) << *error;
      results.push_back(std::move(buffers));
    }
    for (size_t n = 1; n < results.size(); ++n) {
      for (size_t b = 0; b < initial.size(); ++b) {
        EXPECT_TRUE(results[n][b] == results[0][b]) << n + 1 << " threads differ from 1 thread in buffer " << b;
      }
    }
    // And the result is right.
    set_num_threads(2);
    const std::string problems = run_and_check(c, table, &initial);
    EXPECT_TRUE(problems.empty()) << problems;
  }
}

// Re-strides a plain BSHD view so that its heads are `head_stride` elements apart (tokens
// contiguous), for heads at chosen alignments.
void set_head_stride(Config& c, ViewPlan& plan, int64_t head_stride) {
  plan.stride = {plan.extent[kSeq] * plan.extent[kHeads] * head_stride, plan.extent[kHeads] * head_stride, head_stride, 1};
  c.buffer_elements[static_cast<size_t>(plan.buffer)] =
      plan.index(plan.extent[0] - 1, plan.extent[1] - 1, plan.extent[2] - 1, plan.extent[3] - 1) + 1;
  c.placement += "(" + std::string(&plan == &c.q_out ? "q_out" : "a view") + " re-strided: heads " +
                 std::to_string(head_stride) + " elements apart)\n";
}

// Outputs of 16 MiB or more are written with non-temporal stores where both NeoX halves of a
// head are vector-aligned, ordinary stores elsewhere: the same values either way, on every target.
TEST(ApplyCpu, MatchesReferenceOnLargeStreamedCallsForEveryTarget) {
  const std::vector<std::string> targets = cpu_targets();
  ASSERT_FALSE(targets.empty());
  const uint64_t seed = 35000;
  SCOPED_TRACE("seed " + std::to_string(seed));
  Rng rng(seed);
  struct Case {
    Family family;
    Config config;
  };
  std::vector<Case> cases(2);
  // f32, 2048 tokens x 16 heads x 128: a 16 MiB output, every head aligned.
  cases[0].family = family_of(text_spec(128, Style::NeoX));
  cases[0].config = plain_config(cases[0].family, Layout::BSHD, 1, 2048, 16, 0, 128, DType::F32);
  cases[0].config.offsets = {rng.uniform(0, 9000)};
  // bf16, 4096 tokens x 16 heads x 128, rotary_dim 64 at offset 32 (pass-through copies on both
  // sides), k 4 heads; q_out heads 136 elements apart, so that their alignment alternates.
  cases[1].family = family_of(text_spec(64, Style::NeoX));
  cases[1].config = plain_config(cases[1].family, Layout::BSHD, 1, 4096, 16, 4, 128, DType::BF16);
  cases[1].config.options.rotary_offset = 32;
  cases[1].config.offsets = {rng.uniform(0, 7000)};
  // f16, 2048 tokens x 32 heads x 128 (16 MiB): the F16C conversions of the AVX2 / AVX3 targets
  // streamed, against the integer conversions of the others and the reference.
  cases.push_back({});
  cases[2].family = family_of(text_spec(128, Style::NeoX));
  cases[2].config = plain_config(cases[2].family, Layout::BSHD, 1, 2048, 32, 8, 128, DType::F16);
  cases[2].config.offsets = {rng.uniform(0, 9000)};
  // Calls this large are memory-bound, and the kernels interleave q and k heads by GQA group
  // (rotate_kernels-inl.h, RotateTokenImpl). In place f32, q 12 / k 4 heads (3 q heads a group: a
  // pair and a single), 17 MiB.
  cases.push_back({});
  cases[3].family = family_of(text_spec(128, Style::NeoX));
  cases[3].config = plain_config(cases[3].family, Layout::BSHD, 2, 1100, 12, 4, 128, DType::F32);
  cases[3].config.in_place = true;
  cases[3].config.offsets = {rng.uniform(0, 5000), rng.uniform(0, 5000)};
  // bf16 GPT-J (never streamed) out of place, q 10 / k 2 heads, head_dim 96 with rotary_dim 80
  // (odd vector counts, scalar tails, pass-through copies), THD.
  cases.push_back({});
  cases[4].family = family_of(text_spec(80, Style::GPTJ));
  cases[4].config = plain_config(cases[4].family, Layout::THD, 1, 9000, 10, 2, 96, DType::BF16);
  cases[4].config.cu_seqlens = {0, 4000, 9000};
  cases[4].config.offsets = {rng.uniform(0, 5000), rng.uniform(0, 5000)};
  // xPos: q and k take different cos/sin rows, so no interleaving; f32 streamed, q 8 / k 8 heads.
  cases.push_back({});
  RopeSpec xpos = text_spec(128, Style::NeoX);
  xpos.xpos = XPos{512.0};
  cases[5].family = family_of(xpos);
  cases[5].config = plain_config(cases[5].family, Layout::BSHD, 1, 2100, 8, 8, 128, DType::F32);
  cases[5].config.offsets = {rng.uniform(0, 3000)};
  // f32 GPT-J streamed (interleaved in registers on SSSE3/SSE4/AVX2, StoreInterleaved2 through
  // the cache on the others), q 16 / k 4 heads, 21 MB.
  cases.push_back({});
  cases[6].family = family_of(text_spec(128, Style::GPTJ));
  cases[6].config = plain_config(cases[6].family, Layout::BSHD, 1, 2048, 16, 4, 128, DType::F32);
  cases[6].config.offsets = {rng.uniform(0, 9000)};
  for (size_t i = 0; i < cases.size(); ++i) {
    Config& c = cases[i].config;
    c.family = &cases[i].family;
    c.seed = seed + i;
    c.options.direction = rng.coin() ? Direction::Forward : Direction::Backward;
    c.source = Source::SequenceOffsets;
    plan_tensors(c, nullptr);
    if (i == 1) set_head_stride(c, c.q_out, 136);
  }
  for (const Case& test_case : cases) {
    const Config& c = test_case.config;
    SCOPED_TRACE(c.describe());
    const CosSinTable table(test_case.family.spec, test_case.family.table_options);
    // The inputs and the reference once; apply() on every target.
    const Buffers initial = make_buffers(c);
    Buffers ref = initial;
    const std::optional<std::string> ref_error = run(c, table, ref, false);
    ASSERT_FALSE(ref_error.has_value()) << *ref_error;
    for (const std::string& target : targets) {
      SCOPED_TRACE("target " + target);
      const ForcedTarget forced(target);
      Buffers fast = initial;
      const std::optional<std::string> error = run(c, table, fast, true);
      ASSERT_FALSE(error.has_value()) << *error;
      Problems problems;
      check_results(c, table, initial, fast, ref, problems);
      EXPECT_TRUE(problems.empty()) << problems.str();
    }
  }
}

// Concurrent callers share the thread pool (one call at a time runs on it, the others wait)
// and a stored table that each of them grows: every result is still right.
TEST(ApplyCpu, ConcurrentCallersShareThePoolAndAGrowingTable) {
  const SavedThreadCount saved;
  set_num_threads(2);
  const uint64_t seed = 36000;
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Family family = family_of(text_spec(64, Style::NeoX));
  const CosSinTable shared(family.spec, family.table_options);  // grown by the concurrent calls
  const CosSinTable own(family.spec, family.table_options);     // for the reference
  constexpr size_t kCallers = 3;
  std::vector<Config> configs;
  std::vector<Buffers> initial, ref;
  for (size_t i = 0; i < kCallers; ++i) {
    // 1024 tokens x (8 + 2) heads x 64: large enough for the pool; positions 500 + 3000 i + s.
    Config c = plain_config(family, Layout::BSHD, 1, 1024, 8, 2, 64, i == 1 ? DType::BF16 : DType::F32);
    c.seed = seed + i;
    c.source = Source::SequenceOffsets;
    c.offsets = {3000 * static_cast<int64_t>(i) + 500};
    plan_tensors(c, nullptr);
    initial.push_back(make_buffers(c));
    Buffers r = initial.back();
    ASSERT_FALSE(run(c, own, r, false).has_value());
    ref.push_back(std::move(r));
    configs.push_back(std::move(c));
  }
  std::vector<Buffers> fast(kCallers);
  std::vector<std::string> errors(kCallers);
  std::vector<std::thread> callers;
  for (size_t i = 0; i < kCallers; ++i) {
    callers.emplace_back([&, i] {
      for (int repeat = 0; repeat < 3; ++repeat) {
        Buffers buffers = initial[i];
        if (const std::optional<std::string> error = run(configs[i], shared, buffers, true)) errors[i] = *error;
        fast[i] = std::move(buffers);
      }
    });
  }
  for (std::thread& caller : callers) caller.join();
  for (size_t i = 0; i < kCallers; ++i) {
    SCOPED_TRACE(configs[i].describe());
    EXPECT_EQ(errors[i], "");
    Problems problems;
    check_results(configs[i], own, initial[i], fast[i], ref[i], problems);
    EXPECT_TRUE(problems.empty()) << problems.str();
  }
}

// In place (q_out == q, k_out == k) writes the same bits as out of place into other buffers.
TEST(ApplyCpu, InPlaceEqualsOutOfPlace) {
  const std::vector<std::string> targets = cpu_targets();
  ASSERT_FALSE(targets.empty());
  for (const std::string& target : targets) {
    const uint64_t target_seed = seed_of(target) + 7;
    SCOPED_TRACE("target " + target + ", seed " + std::to_string(target_seed));
    const ForcedTarget forced(target);
    int failing = 0;
    for (int f = 0; f < 20 && failing < 5; ++f) {
      const Family family = draw_family(target_seed * 1000 + static_cast<uint64_t>(f));
      SCOPED_TRACE(family.text);
      const CosSinTable table(family.spec, family.table_options);
      for (int j = 0; j < 10 && failing < 5; ++j) {
        const Config c = draw_config(family, family.seed * 100 + static_cast<uint64_t>(j), {true});
        SCOPED_TRACE(c.describe());
        const Buffers initial = make_buffers(c);
        Buffers out_of_place = initial, in_place = initial;
        const std::optional<std::string> error = run(c, table, out_of_place, true);
        ASSERT_FALSE(error.has_value()) << *error;
        Config in_place_config = c;
        in_place_config.q_out = c.q;
        in_place_config.k_out = c.k;
        const std::optional<std::string> in_place_error = run(in_place_config, table, in_place, true);
        ASSERT_FALSE(in_place_error.has_value()) << *in_place_error;
        Problems problems;
        for (const bool is_q : {true, false}) {
          const ViewPlan& in = is_q ? c.q : c.k;
          const ViewPlan& out = is_q ? c.q_out : c.k_out;
          if (!in.present()) continue;
          const unsigned char* a = out_of_place[static_cast<size_t>(out.buffer)].data();
          const unsigned char* b = in_place[static_cast<size_t>(in.buffer)].data();
          in.for_each([&](int64_t bb, int64_t s, int64_t h, int64_t d) {
            if (std::memcmp(a + out.index(bb, s, h, d) * dtype_size(out.dtype), b + in.index(bb, s, h, d) * dtype_size(in.dtype),
                            static_cast<size_t>(dtype_size(in.dtype))) != 0) {
              problems.add(std::string(is_q ? "q" : "k") + "(" + std::to_string(bb) + ", " + std::to_string(s) + ", " +
                           std::to_string(h) + ", " + std::to_string(d) + "): out of place " +
                           hex_bits(a, out.dtype, out.index(bb, s, h, d)) + ", in place " +
                           hex_bits(b, in.dtype, in.index(bb, s, h, d)));
            }
          });
        }
        // The in-place call wrote nothing but q and k.
        Problems outside;
        Buffers reference_in_place = initial;
        ASSERT_FALSE(run(in_place_config, table, reference_in_place, false).has_value());
        check_results(in_place_config, table, initial, in_place, reference_in_place, outside);
        if (!problems.empty() || !outside.empty()) {
          ADD_FAILURE() << problems.str() << outside.str();
          ++failing;
        }
      }
    }
  }
}

TEST(ApplyCpu, ForcingAnUnknownTargetNamesTheAvailableOnes) {
  const std::vector<std::string> targets = cpu_targets();
  ASSERT_FALSE(targets.empty());
  EXPECT_THAT(targets, Contains(current_cpu_target()));
  const std::string automatic = current_cpu_target();
  EXPECT_EQ(automatic, targets.front()) << "the automatic choice is the best target";
  try {
    force_cpu_target("NOPE");
    ADD_FAILURE() << "force_cpu_target(\"NOPE\") did not throw";
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_THAT(message, HasSubstr("NOPE"));
    for (const std::string& target : targets) EXPECT_THAT(message, HasSubstr(target));
  }
  EXPECT_EQ(current_cpu_target(), automatic) << "a failed force changes nothing";
  for (const std::string& target : targets) {
    const ForcedTarget forced(target);
    EXPECT_EQ(current_cpu_target(), target);
  }
  EXPECT_EQ(current_cpu_target(), automatic);
  EXPECT_THAT([] { set_num_threads(0); }, ThrowsMessage<Error>(HasSubstr("0")));
  EXPECT_THAT([] { set_num_threads(257); }, ThrowsMessage<Error>(HasSubstr("257")));
}

// Bad calls: apply() checks exactly as the reference does, with the same message, and writes
// nothing.
TEST(ApplyCpu, RejectsTheSameBadInputAsTheReference) {
  const uint64_t seed = 32000;
  SCOPED_TRACE("seed " + std::to_string(seed));
  Rng rng(seed);
  std::vector<float> arena(8192);
  for (float& v : arena) v = static_cast<float>(rng.value());
  float* base = arena.data();
  auto bshd = [&](float* data, int64_t b, int64_t s, int64_t h, int64_t d) {
    return contiguous_view(data, DType::F32, Layout::BSHD, {b, s, h, d});
  };
  const CosSinTable table(text_spec(16, Style::NeoX));
  TableOptions fixed_options;
  fixed_options.fixed_positions = 8;
  const CosSinTable fixed(text_spec(16, Style::NeoX), fixed_options);
  RopeSpec mrope_spec = text_spec(16, Style::NeoX);
  mrope_spec.axes = PositionAxes::MRope;
  mrope_spec.mrope = {{4, 2, 2}, MRopeAssignment::Chunked};
  const CosSinTable mrope(mrope_spec);
  const std::vector<int64_t> negative = {0, 1, -1, 3};
  const std::vector<int64_t> past_fixed = {0, 1, 2, 8};
  const std::vector<int64_t> offsets = {5};
  const std::vector<int64_t> bad_cu = {0, 2, 3};
  struct Bad {
    std::string what;
    TensorView q, k, q_out, k_out;
    Positions positions;
    const CosSinTable* table;
    ApplyOptions options;
  };
  const TensorView q = bshd(base, 1, 4, 2, 16), k = bshd(base + 1000, 1, 4, 1, 16);
  const TensorView q_out = bshd(base + 2000, 1, 4, 2, 16), k_out = bshd(base + 3000, 1, 4, 1, 16);
  std::vector<Bad> bad;
  bad.push_back({"head_dim below rotary_dim", bshd(base, 1, 4, 2, 8), k, bshd(base + 2000, 1, 4, 2, 8), k_out, {}, &table, {}});
  bad.push_back({"rotary_offset past the head", q, k, q_out, k_out, {}, &table, {Direction::Forward, 2, 0}});
  bad.push_back({"k seq differs", q, bshd(base + 1000, 1, 3, 1, 16), q_out, bshd(base + 3000, 1, 3, 1, 16), {}, &table, {}});
  bad.push_back({"q_out shape differs", q, k, bshd(base + 2000, 1, 4, 3, 16), k_out, {}, &table, {}});
  bad.push_back({"q_out partially overlaps q", q, k, bshd(base + 1, 1, 4, 2, 16), k_out, {}, &table, {}});
  bad.push_back({"q_out overlaps k", q, k, bshd(base + 1000 + 16, 1, 4, 2, 16), k_out, {}, &table, {}});
  bad.push_back({"negative position", q, k, q_out, k_out, Positions::per_token(negative), &table, {}});
  bad.push_back({"position past a fixed table", q, k, q_out, k_out, Positions::per_token(past_fixed), &fixed, {}});
  bad.push_back({"offset + s past a fixed table", q, k, q_out, k_out, Positions::sequence_offsets(offsets), &fixed, {}});
  bad.push_back({"k without k_out", q, k, q_out, TensorView{}, {}, &table, {}});
  bad.push_back({"m-rope needs 3 streams", q, k, q_out, k_out, Positions::per_token(past_fixed), &mrope, {}});
  TensorView strided_zero = q_out;
  strided_zero.stride_elems[1] = 0;
  bad.push_back({"output stride 0", q, k, strided_zero, k_out, {}, &table, {}});
  {
    const TensorView thd_q = contiguous_view(base, DType::F32, Layout::THD, {4, 2, 16, 0});
    const TensorView thd_q_out = contiguous_view(base + 2000, DType::F32, Layout::THD, {4, 2, 16, 0});
    bad.push_back({"cu_seqlens does not end at the token count", thd_q, TensorView{}, thd_q_out, TensorView{},
                   Positions::arange(bad_cu), &table, {}});
  }
  for (const Bad& call : bad) {
    SCOPED_TRACE(call.what);
    const std::vector<float> before = arena;
    std::string reference_message;
    try {
      reference::apply(call.q, call.k, call.q_out, call.k_out, call.positions, *call.table, call.options);
    } catch (const Error& error) {
      reference_message = error.what();
    }
    ASSERT_FALSE(reference_message.empty()) << "harness: the reference accepted the call";
    EXPECT_EQ(std::memcmp(arena.data(), before.data(), arena.size() * sizeof(float)), 0);
    EXPECT_THAT([&] { apply(call.q, call.k, call.q_out, call.k_out, call.positions, *call.table, call.options); },
                ThrowsMessage<Error>(StrEq(reference_message)));
    EXPECT_EQ(std::memcmp(arena.data(), before.data(), arena.size() * sizeof(float)), 0) << "apply() wrote before throwing";
  }
}

// NaN and Inf inputs poison their own pair only (the partner may become NaN: Inf * 0 where
// sin is 0, Inf - Inf): every other output is finite and within tolerance.
TEST(ApplyCpu, NanAndInfStayInTheirLanes) {
  const std::vector<std::string> targets = cpu_targets();
  ASSERT_FALSE(targets.empty());
  for (const std::string& target : targets) {
    const uint64_t seed = seed_of(target) + 33000;
    SCOPED_TRACE("target " + target + ", seed " + std::to_string(seed));
    const ForcedTarget forced(target);
    Rng rng(seed);
    for (const Style style : {Style::NeoX, Style::GPTJ}) {
      for (const DType dtype : {DType::F32, DType::BF16, DType::F16}) {
        const Family family = family_of(text_spec(48, style));
        const CosSinTable table(family.spec, family.table_options);
        Config c = plain_config(family, Layout::BSHD, 2, 5, 4, 2, 64, dtype);
        c.seed = rng.bits() % 1000000;
        c.options.rotary_offset = 8;
        c.in_place = rng.coin();
        c.source = Source::PerToken;
        c.per_token = {0, 1, 2, 3, 4, 100, 2000, 4000, 7, 9};
        plan_tensors(c, &rng);
        SCOPED_TRACE(std::string(to_string(dtype)) + " " + std::string(to_string(style)) + "\n" + c.describe());
        Buffers initial = make_buffers(c);
        const std::vector<double> poisons = {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
                                             -std::numeric_limits<double>::infinity()};
        int64_t poisoned = 0;
        for (int n = 0; n < 12; ++n) {
          const int64_t b = rng.uniform(0, 1), s = rng.uniform(0, 4), h = rng.uniform(0, 3), d = rng.uniform(0, 63);
          store(initial[static_cast<size_t>(c.q.buffer)].data(), dtype, c.q.index(b, s, h, d), rng.pick(poisons));
          poisoned += d >= 8 && d < 56;
        }
        ASSERT_GT(poisoned, 0);
        const std::string problems = run_and_check(c, table, &initial);
        EXPECT_TRUE(problems.empty()) << problems;
      }
    }
  }
}

// The bf16 kernels round without a NaN test (rotate_kernels-inl.h, F32ToBf16High): correct only
// because every NaN they meet has zero low 16 bits. Here NaNs with the largest payloads (0x7FFF,
// 0xFFFF: a carry from the rounding would flip the sign or clear the exponent), signalling NaNs
// and infinities go through both styles, NeoX's split path included on every target (64 pairs,
// at least 2N on all of them), with other lanes at magnitudes where a product overflows.
TEST(ApplyCpu, Bf16NanPayloadsAndOverflow) {
  const std::vector<std::string> targets = cpu_targets();
  ASSERT_FALSE(targets.empty());
  const std::vector<uint16_t> poisons = {0x7FFF, 0xFFFF, 0x7F81, 0xFF81, 0x7FC0, 0x7F80, 0xFF80};
  for (const std::string& target : targets) {
    const uint64_t seed = seed_of(target) + 35000;
    SCOPED_TRACE("target " + target + ", seed " + std::to_string(seed));
    const ForcedTarget forced(target);
    Rng rng(seed);
    for (const auto& [style, backward] : {std::pair{Style::NeoX, false}, std::pair{Style::NeoX, true},
                                          std::pair{Style::GPTJ, false}, std::pair{Style::GPTJ, true}}) {
      const Family family = family_of(text_spec(128, style));
      const CosSinTable table(family.spec, family.table_options);
      Config c = plain_config(family, Layout::BSHD, 1, 6, 4, 2, 128, DType::BF16);
      c.seed = rng.bits() % 1000000;
      c.in_place = rng.coin();
      c.options.direction = backward ? Direction::Backward : Direction::Forward;
      c.source = Source::PerToken;
      c.per_token = {0, 1, 3, 1000, 4000, 4095};
      plan_tensors(c, &rng);
      SCOPED_TRACE(c.describe());
      Buffers initial = make_buffers(c);
      unsigned char* q = initial[static_cast<size_t>(c.q.buffer)].data();
      for (int n = 0; n < 24; ++n) {
        const int64_t s = rng.uniform(0, 5), h = rng.uniform(0, 3), d = rng.uniform(0, 127);
        const uint16_t bits = poisons[static_cast<size_t>(n) % poisons.size()];
        std::memcpy(q + c.q.index(0, s, h, d) * 2, &bits, 2);
      }
      // Large finite values (the largest bf16, 0x7F7F, and its negative): a*C - c*S may
      // overflow float32 to an infinity, which the rounding must keep.
      for (int n = 0; n < 8; ++n) {
        const int64_t s = rng.uniform(0, 5), h = rng.uniform(0, 3), d = rng.uniform(0, 127);
        const uint16_t bits = n % 2 == 0 ? 0x7F7F : 0xFF7F;
        std::memcpy(q + c.q.index(0, s, h, d) * 2, &bits, 2);
      }
      const std::string problems = run_and_check(c, table, &initial);
      EXPECT_TRUE(problems.empty()) << problems;
    }
  }
}

// The kernels' bf16 rounding of two vectors at once (rotate_kernels-inl.h, RoundJoinBf16: the
// rounding decision made in 16-bit lanes) against the scalar float_to_bf16, on every target, over
// a dense sample of float32 bit patterns: every low half (0x0000-0xFFFF, which decides the
// rounding: ties at 0x8000, the largest low half 0xFFFF) under 64 kept halves (both signs, odd and
// even, zero, subnormal, the largest finite that rounds up to infinity, infinity, quiet NaN with
// zero low bits, the only NaNs arithmetic hands the rounding) and random patterns up to 2^22 in
// all; even and odd lanes get different patterns.
TEST(ApplyCpu, Bf16RoundingOfTwoVectorsIsNearestEvenOnEveryTarget) {
  std::vector<uint32_t> patterns;
  const std::vector<uint32_t> kept = {0x0000, 0x0001, 0x0002, 0x007F, 0x0080, 0x0081, 0x3F80, 0x3F81, 0x3FFF,
                                      0x4000, 0x7F7E, 0x7F7F, 0x7F80, 0x7FC0, 0x8000, 0x8001, 0xBF80, 0xBF81,
                                      0xC000, 0xFF7F, 0xFF80, 0xFFC0, 0x1234, 0x4321, 0x7F00, 0x00FF, 0x8080,
                                      0x8081, 0xFE01, 0x0100, 0x7FFF & 0x7F7F, 0x5555};
  for (const uint32_t high : kept) {
    for (uint32_t low = 0; low <= 0xFFFF; ++low) {
      const uint32_t bits = (high << 16) | low;
      const bool nan = (bits & 0x7F800000u) == 0x7F800000u && (bits & 0x007FFFFFu) != 0;
      // The kernels round only results of arithmetic: a NaN is then quiet, and its low 16 bits
      // are zero (F32ToBf16High). float_to_bf16 would quiet a signalling one.
      if (nan && (low != 0 || (bits & 0x00400000u) == 0)) continue;
      patterns.push_back(bits);
    }
  }
  Rng rng(36000);
  while (patterns.size() < (size_t{1} << 22)) {
    const auto bits = static_cast<uint32_t>(rng.bits());
    const bool nan = (bits & 0x7F800000u) == 0x7F800000u && (bits & 0x007FFFFFu) != 0;
    patterns.push_back(nan ? (bits & 0xFFFF0000u) | 0x00400000u : bits);
  }
  const size_t n = patterns.size() / 2;
  std::vector<float> even(n), odd(n);
  std::memcpy(even.data(), patterns.data(), n * sizeof(float));
  std::memcpy(odd.data(), patterns.data() + n, n * sizeof(float));
  std::reverse(odd.begin(), odd.end());  // other neighbours than in `even`
  std::vector<uint32_t> expected(n);
  for (size_t i = 0; i < n; ++i) {
    expected[i] = static_cast<uint32_t>(float_to_bf16(even[i])) | (static_cast<uint32_t>(float_to_bf16(odd[i])) << 16);
  }
  for (const std::string& target : cpu_targets()) {
    SCOPED_TRACE("target " + target);
    const ForcedTarget forced(target);
    std::vector<uint32_t> out(n, 0xDEADBEEFu);
    cpu::round_join_bf16(even.data(), odd.data(), out.data(), static_cast<int64_t>(n));
    int64_t wrong = 0;
    for (size_t i = 0; i < n && wrong < 5; ++i) {
      if (out[i] != expected[i]) {
        ++wrong;
        uint32_t e = 0, o = 0;
        std::memcpy(&e, &even[i], 4);
        std::memcpy(&o, &odd[i], 4);
        ADD_FAILURE() << std::hex << "even 0x" << e << ", odd 0x" << o << ": got 0x" << out[i] << ", want 0x"
                      << expected[i];
      }
    }
  }
}

// The kernels' own conversions of bf16 and f16 (LoadF32 / StoreF32), on every target, against the
// scalar ones: widening over all 65,536 patterns of each, exactly (NaNs: a NaN, with the sign);
// narrowing over a dense sample of float32 patterns: every pattern of the bits a rounding to the
// type can look at (the low 16 bits for bf16; the low 13, and for the values f16 holds only as
// subnormals or not at all, the whole range of exponents) under a set of kept parts, plus random
// ones. f16 narrowing: every value, NaNs included (a quiet NaN with the sign); bf16: every value
// but NaNs with low bits (F32ToBf16High's precondition: the kernels never produce them).
TEST(ApplyCpu, Bf16AndF16ConversionsAreExactOnEveryTarget) {
  std::vector<uint16_t> all16(65536);
  for (uint32_t i = 0; i < 65536; ++i) all16[i] = static_cast<uint16_t>(i);
  std::vector<float> narrow_in;
  Rng rng(37000);
  // Every float32 exponent with 4 mantissa prefixes and every 13-bit tail, both signs: covers f16
  // normals, subnormals, underflow to zero and overflow, each with every rounding position.
  for (uint32_t sign = 0; sign < 2; ++sign) {
    for (uint32_t exponent = 0; exponent < 256; ++exponent) {
      for (uint32_t prefix : {0u, 1u, 0x2AAu, 0x3FFu}) {
        for (uint32_t tail = 0; tail < (1u << 13); tail += (exponent >= 101 && exponent <= 143) ? 1 : 37) {
          const uint32_t bits = (sign << 31) | (exponent << 23) | (prefix << 13) | tail;
          float value;
          std::memcpy(&value, &bits, 4);
          narrow_in.push_back(value);
        }
      }
    }
  }
  for (int n = 0; n < (1 << 20); ++n) {
    const auto bits = static_cast<uint32_t>(rng.bits());
    float value;
    std::memcpy(&value, &bits, 4);
    narrow_in.push_back(value);
  }
  const auto same_float = [](float got, float want) {
    if (std::isnan(want)) return std::isnan(got) && std::signbit(got) == std::signbit(want);
    uint32_t a = 0, b = 0;
    std::memcpy(&a, &got, 4);
    std::memcpy(&b, &want, 4);
    return a == b;
  };
  for (const std::string& target : cpu_targets()) {
    SCOPED_TRACE("target " + target);
    const ForcedTarget forced(target);
    for (DType dtype : {DType::BF16, DType::F16}) {
      SCOPED_TRACE(dtype == DType::F16 ? "f16" : "bf16");
      const bool f16 = dtype == DType::F16;
      std::vector<float> widened(all16.size());
      cpu::widen_16bit(dtype, all16.data(), widened.data(), static_cast<int64_t>(all16.size()));
      int wrong = 0;
      for (size_t i = 0; i < all16.size() && wrong < 5; ++i) {
        const float want = f16 ? f16_to_float(all16[i]) : bf16_to_float(all16[i]);
        if (!same_float(widened[i], want)) {
          ++wrong;
          ADD_FAILURE() << "widen 0x" << std::hex << all16[i] << ": got " << widened[i] << ", want " << want;
        }
      }
      std::vector<float> in;
      for (float v : narrow_in) {
        uint32_t bits = 0;
        std::memcpy(&bits, &v, 4);
        const bool nan = std::isnan(v);
        if (!f16 && nan && ((bits & 0xFFFFu) != 0 || (bits & 0x00400000u) == 0)) continue;  // see above
        if (f16 && nan && (bits & 0x00400000u) == 0) continue;  // arithmetic hands over quiet NaNs only
        in.push_back(v);
      }
      std::vector<uint16_t> narrowed(in.size(), 0xDEAD);
      cpu::narrow_16bit(dtype, in.data(), narrowed.data(), static_cast<int64_t>(in.size()));
      for (size_t i = 0; i < in.size() && wrong < 10; ++i) {
        const uint16_t want = f16 ? float_to_f16(in[i]) : float_to_bf16(in[i]);
        const bool ok = std::isnan(in[i]) ? ((narrowed[i] & 0x7FFF) > (f16 ? 0x7C00 : 0x7F80) &&
                                              (narrowed[i] & 0x8000) == (want & 0x8000))
                                           : narrowed[i] == want;
        if (!ok) {
          ++wrong;
          uint32_t bits = 0;
          std::memcpy(&bits, &in[i], 4);
          ADD_FAILURE() << "narrow 0x" << std::hex << bits << ": got 0x" << narrowed[i] << ", want 0x" << want;
        }
      }
    }
  }
}

// The kernels visit a token's heads in an interleaved order when they span more than a page and
// the CPU is one where that is faster (kernels.hpp, head_groups: up to 4 groups a page apart on
// Intel, head order elsewhere). Both orders are run on every machine here, on every target,
// against the reference: with at most 4 groups, head counts that give 4, 3, 2 and 1 groups
// (24 heads x 128 f32: 4; 7 heads x 256: 2 does not divide 7, so 1; 6 heads x 256: 2; 24 x 128
// bf16: 2), and with at most 1 (head order).
TEST(ApplyCpu, InterleavedHeadOrderMatchesTheReference) {
  const std::vector<std::string> targets = cpu_targets();
  ASSERT_FALSE(targets.empty());
  struct RestoreHeadGroups {
    ~RestoreHeadGroups() { cpu::set_max_head_groups(0); }
  } restore;
  for (const int64_t max_groups : {4, 1}) {
    cpu::set_max_head_groups(max_groups);
    ASSERT_EQ(cpu::max_head_groups(), max_groups);
    for (const std::string& target : targets) {
      const uint64_t seed = seed_of(target) + 36000 + static_cast<uint64_t>(max_groups);
      SCOPED_TRACE("target " + target + ", at most " + std::to_string(max_groups) + " head groups, seed " +
                   std::to_string(seed));
      const ForcedTarget forced(target);
      Rng rng(seed);
      for (const auto& [q_heads, k_heads, dim] :
           {std::tuple{24, 8, 128}, std::tuple{7, 6, 256}, std::tuple{12, 4, 256}, std::tuple{40, 8, 128}}) {
        for (const DType dtype : {DType::F32, DType::BF16, DType::F16}) {
          const Family family = family_of(text_spec(dim, rng.coin() ? Style::NeoX : Style::GPTJ));
          const CosSinTable table(family.spec, family.table_options);
          Config c = plain_config(family, Layout::BSHD, 1, 3, q_heads, k_heads, dim, dtype);
          c.seed = rng.bits() % 1000000;
          c.in_place = rng.coin();
          c.source = Source::PerToken;
          c.per_token = {0, 17, 3000};
          plan_tensors(c, &rng);
          SCOPED_TRACE(c.describe());
          const std::string problems = run_and_check(c, table);
          EXPECT_TRUE(problems.empty()) << problems;
        }
      }
    }
  }
  EXPECT_THAT([] { cpu::set_max_head_groups(9); }, ThrowsMessage<Error>(HasSubstr("9")));
}

// A decode step (1 token, 32 heads) with 2 threads: correct, and the same bytes as 1 thread.
TEST(ApplyCpu, DecodeCallRunsOnTheCallingThread) {
  const SavedThreadCount saved;
  const uint64_t seed = 34000;
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Family family = family_of(text_spec(128, Style::NeoX));
  const CosSinTable table(family.spec, family.table_options);
  for (const DType dtype : {DType::BF16, DType::F32}) {
    Config c = plain_config(family, Layout::BSHD, 1, 1, 32, 8, 128, dtype);
    c.seed = seed + static_cast<uint64_t>(dtype);
    c.source = Source::SequenceOffsets;
    c.offsets = {5000};
    plan_tensors(c, nullptr);
    SCOPED_TRACE(c.describe());
    const Buffers initial = make_buffers(c);
    set_num_threads(1);
    Buffers one = initial;
    ASSERT_FALSE(run(c, table, one, true).has_value());
    set_num_threads(2);
    const std::string problems = run_and_check(c, table, &initial);
    EXPECT_TRUE(problems.empty()) << problems;
    Buffers two = initial;
    ASSERT_FALSE(run(c, table, two, true).has_value());
    EXPECT_THAT(two, ContainerEq(one));
  }
}

// The user probe behind stored pages: decode steps of 16 sequences x 1 token at positions
// 10^6 .. 10^6 + 1000, and up to 2^31 - 1, on a stored table. Every call writes the bytes the
// same call writes with an on-the-fly table (the same rows, the same kernel), the reference
// agrees within tolerance, and the table holds the 9 pages those positions fall in (a page: 256
// rows x 2 x 64 floats = 128 KiB), where it used to hold 10^6 rows (0.5 GB), and failed past
// max_bytes at 2^31 - 1.
TEST(ApplyCpu, DecodeAtFarPositionsStoresOnlyTheirPagesAndMatchesTheReference) {
  const uint64_t seed = 37000;
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Family family = family_of(text_spec(128, Style::NeoX));
  const Family fly_family = family_of(text_spec(128, Style::NeoX), {.storage = Storage::OnTheFly});
  const CosSinTable stored(family.spec, family.table_options);
  const CosSinTable fly(fly_family.spec, fly_family.table_options);
  for (const int64_t first : {int64_t{1000000}, kMaxPosition - 1000}) {
    for (int64_t step = 0; step <= 1000; ++step) {
      const DType dtype = step % 2 == 0 ? DType::F32 : DType::BF16;
      Config c = plain_config(family, Layout::BSHD, 16, 1, 8, 2, 128, dtype);
      c.seed = seed + static_cast<uint64_t>(step);
      c.source = Source::PerToken;
      c.per_token.assign(16, first + step);
      c.per_token[15] = first + 1000 - step;  // one sequence walks down: pages out of order
      c.in_place = step % 3 == 0;
      plan_tensors(c, nullptr);
      SCOPED_TRACE(c.describe());
      const Buffers initial = make_buffers(c);
      Buffers on_stored = initial, on_fly = initial;
      ASSERT_EQ(run(c, stored, on_stored, true), std::nullopt);
      ASSERT_EQ(run(c, fly, on_fly, true), std::nullopt);
      ASSERT_TRUE(on_stored == on_fly) << "stored and on-the-fly rows gave different outputs";
      if (step % 50 == 0) {
        const std::string problems = run_and_check(c, stored, &initial);
        ASSERT_TRUE(problems.empty()) << problems;
      }
    }
  }
  // Pages 3906-3910 (10^6 .. 10^6 + 1000) and 8388604-8388607 (2^31 - 1001 .. 2^31 - 1); leaves
  // 0 and 2047 (32 KiB each); the directory (16 KiB); slabs at most double what is used
  // (under 2 MiB).
  constexpr int64_t kPageBytes = 256 * 2 * 64 * 4;
  EXPECT_EQ(stored.size(), 0);
  EXPECT_GE(stored.stored_bytes(), 16384 + 2 * 32768 + 9 * kPageBytes);
  EXPECT_LE(stored.stored_bytes(), 16384 + 2 * 32768 + 2 * 9 * kPageBytes);  // 2.4 MB
}

// Growth past max_bytes is the one error apply() meets after its checks: it is thrown before
// anything is written (every byte of every buffer as it was), with the reference's message, and
// stores nothing; a call whose pages fit then runs.
TEST(ApplyCpu, GrowthPastMaxBytesThrowsBeforeWritingAnything) {
  const uint64_t seed = 38000;
  SCOPED_TRACE("seed " + std::to_string(seed));
  // 32 pairs: a page is 64 KiB, a leaf 32 KiB, the directory 16 KiB.
  const Family family = family_of(text_spec(64, Style::GPTJ), {.max_bytes = 256 << 10});
  const CosSinTable table(family.spec, family.table_options);
  Config c = plain_config(family, Layout::BSHD, 16, 1, 4, 2, 64, DType::BF16);
  c.seed = seed;
  c.source = Source::PerToken;
  for (int64_t n = 0; n < 16; ++n) c.per_token.push_back((n + 1) << 20);  // 16 leaves, 16 pages: 1.5 MB
  plan_tensors(c, nullptr);
  const Buffers initial = make_buffers(c);
  Buffers fast = initial, ref = initial;
  const std::optional<std::string> fast_error = run(c, table, fast, true);
  const std::optional<std::string> ref_error = run(c, table, ref, false);
  ASSERT_TRUE(fast_error.has_value());
  EXPECT_THAT(*fast_error, HasSubstr("needs 1589248 bytes in all, more than max_bytes 262144"));
  EXPECT_EQ(ref_error, fast_error);
  EXPECT_TRUE(fast == initial) << "apply() wrote before throwing";
  EXPECT_TRUE(ref == initial) << "reference::apply wrote before throwing";
  EXPECT_EQ(table.stored_bytes(), 16384);
  EXPECT_FALSE(table.is_stored(int64_t{1} << 20));
  c.per_token.assign(16, 1000000);  // one page and one leaf: 112 KiB in all
  const std::string problems = run_and_check(c, table, &initial);
  EXPECT_TRUE(problems.empty()) << problems;
  EXPECT_EQ(table.stored_bytes(), 16384 + 32768 + 65536);
}

// A single head may have any head stride (it is never stepped), e.g. 2^62 elements, whose byte
// count overflows int64: the kernels must not multiply it (a fuzzer finding, 2026-11-25,
// tests/reliability/fuzz_crashes/apply_args/one_head_with_stride_2_pow_62; UBSan flags the
// overflow in `make sanitize`).
TEST(ApplyCpu, OneHeadMayHaveAnyHeadStride) {
  const std::vector<std::string> targets = cpu_targets();
  ASSERT_FALSE(targets.empty());
  for (const std::string& target : targets) {
    const uint64_t seed = seed_of(target) + 37000;
    SCOPED_TRACE("target " + target + ", seed " + std::to_string(seed));
    const ForcedTarget forced(target);
    for (const Style style : {Style::NeoX, Style::GPTJ}) {
      for (const DType dtype : {DType::F32, DType::BF16, DType::F16}) {
        for (const bool in_place : {false, true}) {
          const Family family = family_of(text_spec(64, style));
          const CosSinTable table(family.spec, family.table_options);
          Config c = plain_config(family, Layout::BSHD, 2, 3, 1, 1, 64, dtype);
          c.seed = seed + static_cast<uint64_t>(dtype) * 2 + (in_place ? 1 : 0);
          c.in_place = in_place;
          c.source = Source::PerToken;
          c.per_token = {0, 17, 3000, 5, 9000, 1};
          plan_tensors(c, nullptr);
          for (ViewPlan* plan : {&c.q, &c.k, &c.q_out, &c.k_out}) plan->stride[kHeads] = int64_t{1} << 62;
          SCOPED_TRACE(c.describe());
          const std::string problems = run_and_check(c, table);
          EXPECT_TRUE(problems.empty()) << problems;
        }
      }
    }
  }
}

}  // namespace
}  // namespace rotary
