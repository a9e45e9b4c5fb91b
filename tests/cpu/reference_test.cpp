// tests/cpu/reference_test.cpp: properties of reference::apply, the float64 definition of apply().
//
// Each test states one property of the rotation (norm, relative position, inverse, explicit
// matrices, conventions, layouts, storage rounding, xPos, M-RoPE, 2-D vision) and checks it on
// random, seeded, non-zero inputs. Tolerances are derived next to each check. The argument
// checks are in apply_args_test.cpp, parity with Hugging Face in reference_golden_test.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <complex>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "rotary/apply.hpp"
#include "rotary/error.hpp"
#include "rotary/spec.hpp"
#include "rotary/table.hpp"
#include "rotary/tensor.hpp"
#include "tests/support/spec_builder.hpp"

namespace rotary {
namespace {

using reference::TableValues;

// ---- test support -------------------------------------------------------------------------------

// An owning tensor with a TensorView over it: contiguous over shape + pad (pad > 0 makes the
// view non-contiguous), accessed by named coordinates (batch, seq, heads, dim); THD: (0, token,
// heads, dim).
class HostTensor {
 public:
  HostTensor() = default;  // absent (TensorView{}): "no k"
  HostTensor(DType dtype, Layout layout, std::array<int64_t, 4> shape, std::array<int64_t, 4> pad = {}) {
    const int rank = layout_rank(layout);
    std::array<int64_t, 4> allocated = shape;
    for (int axis = 0; axis < rank; ++axis) allocated[axis] += pad[axis];
    view_ = contiguous_view(nullptr, dtype, layout, allocated);
    int64_t count = 1;
    for (int axis = 0; axis < rank; ++axis) count *= allocated[axis];
    for (int axis = 0; axis < rank; ++axis) view_.shape[axis] = shape[axis];
    bytes_.assign(static_cast<size_t>(count * dtype_size(dtype)), 0);
    view_.data = bytes_.data();
  }
  HostTensor(const HostTensor& other) : view_(other.view_), bytes_(other.bytes_) { rebind(); }
  HostTensor& operator=(const HostTensor& other) {
    view_ = other.view_;
    bytes_ = other.bytes_;
    rebind();
    return *this;
  }
  HostTensor(HostTensor&& other) noexcept = default;
  HostTensor& operator=(HostTensor&& other) noexcept = default;

  const TensorView& view() const { return view_; }
  DType dtype() const { return view_.dtype; }
  Layout layout() const { return view_.layout; }
  std::array<int64_t, 4> shape() const { return view_.shape; }
  NamedAxes axes() const { return named_axes(view_); }

  int64_t offset(int64_t b, int64_t s, int64_t h, int64_t d) const {
    const NamedAxes a = axes();
    return b * a.stride_batch + s * a.stride_seq + h * a.stride_heads + d * a.stride_dim;
  }
  uint64_t bits(int64_t b, int64_t s, int64_t h, int64_t d) const {
    uint64_t out = 0;
    std::memcpy(&out, bytes_.data() + offset(b, s, h, d) * dtype_size(dtype()), static_cast<size_t>(dtype_size(dtype())));
    return out;
  }
  double get(int64_t b, int64_t s, int64_t h, int64_t d) const {
    const uint64_t raw = bits(b, s, h, d);
    switch (dtype()) {
      case DType::F32: {
        float f = 0;
        const auto u = static_cast<uint32_t>(raw);
        std::memcpy(&f, &u, sizeof f);
        return f;
      }
      case DType::BF16: return bf16_to_float(static_cast<uint16_t>(raw));
      case DType::F16: return f16_to_float(static_cast<uint16_t>(raw));
      case DType::F64: {
        double v = 0;
        std::memcpy(&v, &raw, sizeof v);
        return v;
      }
    }
    return 0;
  }
  void set(int64_t b, int64_t s, int64_t h, int64_t d, double value) {
    unsigned char* where = bytes_.data() + offset(b, s, h, d) * dtype_size(dtype());
    switch (dtype()) {
      case DType::F32: {
        const auto f = static_cast<float>(value);
        std::memcpy(where, &f, sizeof f);
        return;
      }
      case DType::BF16: {
        const uint16_t u = float_to_bf16(static_cast<float>(value));
        std::memcpy(where, &u, sizeof u);
        return;
      }
      case DType::F16: {
        const uint16_t u = float_to_f16(static_cast<float>(value));
        std::memcpy(where, &u, sizeof u);
        return;
      }
      case DType::F64: std::memcpy(where, &value, sizeof value); return;
    }
  }
  template <typename Fn>
  void for_each(Fn&& fn) const {
    const NamedAxes a = axes();
    for (int64_t b = 0; b < a.batch; ++b)
      for (int64_t s = 0; s < a.seq; ++s)
        for (int64_t h = 0; h < a.heads; ++h)
          for (int64_t d = 0; d < a.dim; ++d) fn(b, s, h, d);
  }
  const std::vector<unsigned char>& bytes() const { return bytes_; }

 private:
  void rebind() { view_.data = view_.data == nullptr ? nullptr : bytes_.data(); }
  TensorView view_{};
  std::vector<unsigned char> bytes_;
};

class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}
  int64_t uniform(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(engine_); }
  bool coin() { return uniform(0, 1) == 1; }
  // Non-zero: magnitude in [0.25, 2), random sign.
  double value() {
    const double magnitude = std::uniform_real_distribution<double>(0.25, 2.0)(engine_);
    return coin() ? magnitude : -magnitude;
  }
  template <typename T>
  const T& pick(const std::vector<T>& items) {
    return items[static_cast<size_t>(uniform(0, static_cast<int64_t>(items.size()) - 1))];
  }
  std::mt19937_64& engine() { return engine_; }

 private:
  std::mt19937_64 engine_;
};

void fill_random(HostTensor& t, Rng& rng) {
  t.for_each([&](int64_t b, int64_t s, int64_t h, int64_t d) { t.set(b, s, h, d, rng.value()); });
}

// A default-scheme spec (scaling 1).
RopeSpec text_spec(int64_t head_dim, int64_t rotary_dim, Style style, double theta = 10000.0) {
  return test::rope_spec({.head_dim = head_dim, .rotary_dim = rotary_dim, .theta_base = theta, .style = style});
}

// YaRN with an explicit attention factor 1.25: cos and sin carry attention_scaling 1.25.
RopeSpec scaled_spec(int64_t head_dim, int64_t rotary_dim, Style style) {
  RopeSpec spec = text_spec(head_dim, rotary_dim, style);
  spec.scaling.type = ScalingType::Yarn;
  spec.scaling.factor = 4.0;
  spec.scaling.original_max_position_embeddings = 4096;
  spec.scaling.attention_factor = 1.25;
  spec.max_position_embeddings = 16384;
  return spec;
}

TableOptions on_the_fly() {
  TableOptions options;
  options.storage = Storage::OnTheFly;
  return options;
}

struct Rotated {
  HostTensor q;
  HostTensor k;
};

// reference::apply into fresh contiguous outputs of `out_dtype` (default: the input's dtype).
Rotated rotate(const HostTensor& q, const HostTensor* k, const Positions& positions, const CosSinTable& table,
               const ApplyOptions& options = {}, TableValues values = TableValues::TableFloat32,
               std::optional<DType> out_dtype = std::nullopt) {
  Rotated out;
  out.q = HostTensor(out_dtype.value_or(q.dtype()), q.layout(), q.shape());
  if (k != nullptr) out.k = HostTensor(out_dtype.value_or(k->dtype()), k->layout(), k->shape());
  reference::apply(q.view(), k ? k->view() : TensorView{}, out.q.view(), k ? out.k.view() : TensorView{}, positions,
                   table, options, values);
  return out;
}

// Element indices of pair i within a head.
std::pair<int64_t, int64_t> pair_elements(Style style, int64_t offset, int64_t rotary_dim, int64_t i) {
  if (style == Style::NeoX) return {offset + i, offset + i + rotary_dim / 2};
  return {offset + 2 * i, offset + 2 * i + 1};
}

std::string seed_trace(uint64_t seed) { return "seed " + std::to_string(seed); }

// Random positions: a mix of small ones and ones anywhere up to the table's limit.
int64_t random_position(Rng& rng) {
  return rng.coin() ? rng.uniform(0, 5000) : rng.uniform(0, kMaxPosition);
}

// The bf16 / f16 value nearest to `value` (ties to the even pattern), the oracle for rounding
// once. Independent of reference.cpp: the float path's answer is at most one pattern off (double
// rounding errs by one step at most), so the nearest of it and its two neighbours, by exact
// distance (long double: the differences of nearby values are exact), is the answer. Past the
// largest finite value the next pattern is infinity, which IEEE rounds to as if it were
// 2^(emax+1) (an even significand, so ties go to it).
uint16_t round_once(double value, DType dtype) {
  const bool bf16 = dtype == DType::BF16;
  const float as_float = static_cast<float>(value);
  const uint16_t guess = bf16 ? float_to_bf16(as_float) : float_to_f16(as_float);
  const uint16_t sign = guess & 0x8000u;
  const auto magnitude_guess = static_cast<int>(guess & 0x7FFFu);
  const int infinity = bf16 ? 0x7F80 : 0x7C00;
  const long double overflow_value = bf16 ? std::ldexp(1.0L, 128) : 65536.0L;
  auto as_value = [&](int magnitude) -> long double {
    if (magnitude >= infinity) return overflow_value;
    const auto pattern = static_cast<uint16_t>(magnitude);
    return bf16 ? bf16_to_float(pattern) : f16_to_float(pattern);
  };
  const long double target = std::fabs(static_cast<long double>(value));
  int best = magnitude_guess;
  for (int candidate = magnitude_guess - 1; candidate <= magnitude_guess + 1; ++candidate) {
    if (candidate < 0 || candidate > infinity) continue;
    const long double distance = std::fabs(as_value(candidate) - target);
    const long double best_distance = std::fabs(as_value(best) - target);
    if (distance < best_distance || (distance == best_distance && candidate % 2 == 0 && best % 2 != 0)) {
      best = candidate;
    }
  }
  return static_cast<uint16_t>(sign | best);
}

// ---- properties ---------------------------------------------------------------------------------

// A rotation preserves length; attention scaling multiplies it. Exact64 values are cos/sin to
// ~1e-15, so |C|^2 + |S|^2 = scaling^2 (1 +- 3e-15) and each rotated element carries ~2 roundings:
// the norm ratio is 1 within ~1e-14. (TableFloat32 values would only give ~1e-7.)
TEST(Reference, NormPreserved) {
  for (const bool scaled : {false, true}) {
    for (uint64_t trial = 0; trial < 8; ++trial) {
      const uint64_t seed = 1000 + trial + (scaled ? 100 : 0);
      SCOPED_TRACE(seed_trace(seed));
      Rng rng(seed);
      const int64_t head_dim = rng.pick(std::vector<int64_t>{8, 16, 24, 64, 96, 128});
      const int64_t rotary_dim = 2 * rng.uniform(1, head_dim / 2);
      const Style style = rng.coin() ? Style::NeoX : Style::GPTJ;
      const RopeSpec spec = scaled ? scaled_spec(rotary_dim, rotary_dim, style) : text_spec(rotary_dim, rotary_dim, style);
      const CosSinTable table(spec, on_the_fly());
      const double scaling = table.attention_scaling();
      if (scaled) {
        ASSERT_DOUBLE_EQ(scaling, 1.25);
      } else {
        ASSERT_EQ(scaling, 1.0);
      }
      ApplyOptions options;
      options.rotary_offset = rng.uniform(0, head_dim - rotary_dim);
      const int64_t batch = rng.uniform(1, 3), seq = rng.uniform(1, 5), heads = rng.uniform(1, 4);
      HostTensor q(DType::F64, Layout::BSHD, {batch, seq, heads, head_dim});
      HostTensor k(DType::F64, Layout::BSHD, {batch, seq, rng.uniform(1, heads), head_dim});
      fill_random(q, rng);
      fill_random(k, rng);
      std::vector<int64_t> positions(static_cast<size_t>(batch * seq));
      for (int64_t& p : positions) p = random_position(rng);
      const Rotated out = rotate(q, &k, Positions::per_token(positions), table, options, TableValues::Exact64);
      for (const auto& [in, rotated] : {std::pair{&q, &out.q}, std::pair{&k, &out.k}}) {
        const NamedAxes a = in->axes();
        for (int64_t b = 0; b < a.batch; ++b)
          for (int64_t s = 0; s < a.seq; ++s)
            for (int64_t h = 0; h < a.heads; ++h) {
              double norm_in = 0, norm_out = 0;
              for (int64_t d = options.rotary_offset; d < options.rotary_offset + rotary_dim; ++d) {
                norm_in += in->get(b, s, h, d) * in->get(b, s, h, d);
                norm_out += rotated->get(b, s, h, d) * rotated->get(b, s, h, d);
              }
              norm_in = std::sqrt(norm_in);
              norm_out = std::sqrt(norm_out) / scaling;
              EXPECT_NEAR(norm_out, norm_in, 1e-12 * norm_in)
                  << "token (" << b << ", " << s << ") head " << h << " position " << positions[b * seq + s];
            }
      }
    }
  }
}

// RoPE's defining property: <R_m q, R_n k> depends on m - n only. With Exact64 values each
// rotated element is within ~2e-15 (|a| + |c|) of the exact rotation at any position < 2^31
// (table.hpp), so a D-term score moves by at most ~4e-15 D |q| |k|, far inside 1e-12 |q| |k|.
TEST(Reference, ScoreDependsOnlyOnRelativePosition) {
  for (const Style style : {Style::NeoX, Style::GPTJ}) {
    const uint64_t seed = style == Style::NeoX ? 2001 : 2002;
    SCOPED_TRACE(seed_trace(seed));
    Rng rng(seed);
    const int64_t head_dim = 128;
    const CosSinTable table(text_spec(head_dim, head_dim, style), on_the_fly());
    for (int trial = 0; trial < 6; ++trial) {
      const int64_t m = rng.uniform(0, 5000), n = rng.uniform(0, 5000);
      const int64_t largest = std::max(m, n);
      for (const int64_t t : {int64_t{1}, int64_t{1000}, int64_t{123457}, int64_t{1} << 20, int64_t{1} << 30,
                              kMaxPosition - largest}) {
        SCOPED_TRACE("m " + std::to_string(m) + " n " + std::to_string(n) + " t " + std::to_string(t));
        // Tokens at positions m, n, m + t, n + t; q lives at tokens 0 and 2, k at 1 and 3.
        HostTensor q(DType::F64, Layout::BSHD, {1, 4, 1, head_dim});
        HostTensor k(DType::F64, Layout::BSHD, {1, 4, 1, head_dim});
        fill_random(q, rng);
        fill_random(k, rng);
        double q_norm = 0, k_norm = 0;
        for (int64_t d = 0; d < head_dim; ++d) {
          q.set(0, 2, 0, d, q.get(0, 0, 0, d));
          k.set(0, 3, 0, d, k.get(0, 1, 0, d));
          q_norm += q.get(0, 0, 0, d) * q.get(0, 0, 0, d);
          k_norm += k.get(0, 1, 0, d) * k.get(0, 1, 0, d);
        }
        const std::vector<int64_t> positions = {m, n, m + t, n + t};
        const Rotated out = rotate(q, &k, Positions::per_token(positions), table, {}, TableValues::Exact64);
        double near = 0, far = 0;
        for (int64_t d = 0; d < head_dim; ++d) {
          near += out.q.get(0, 0, 0, d) * out.k.get(0, 1, 0, d);
          far += out.q.get(0, 2, 0, d) * out.k.get(0, 3, 0, d);
        }
        EXPECT_NEAR(far, near, 1e-12 * std::sqrt(q_norm * k_norm));
      }
    }
  }
}

// Backward is the transpose; with attention scaling 1 it is the inverse. Forward then backward
// returns the input within a few double roundings (Exact64: C^2 + S^2 = 1 +- 3e-15).
TEST(Reference, BackwardUndoesForward) {
  for (uint64_t trial = 0; trial < 8; ++trial) {
    const uint64_t seed = 3000 + trial;
    SCOPED_TRACE(seed_trace(seed));
    Rng rng(seed);
    const int64_t head_dim = rng.pick(std::vector<int64_t>{4, 32, 64, 80, 128});
    const int64_t rotary_dim = 2 * rng.uniform(1, head_dim / 2);
    const Style style = rng.coin() ? Style::NeoX : Style::GPTJ;
    const CosSinTable table(text_spec(rotary_dim, rotary_dim, style), on_the_fly());
    ApplyOptions forward;
    forward.rotary_offset = rng.uniform(0, head_dim - rotary_dim);
    ApplyOptions backward = forward;
    backward.direction = Direction::Backward;
    const int64_t seq = rng.uniform(1, 6);
    HostTensor q(DType::F64, Layout::SBHD, {seq, 2, 3, head_dim});
    HostTensor k(DType::F64, Layout::SBHD, {seq, 2, 1, head_dim});
    fill_random(q, rng);
    fill_random(k, rng);
    std::vector<int64_t> positions(static_cast<size_t>(2 * seq));
    for (int64_t& p : positions) p = random_position(rng);
    Rotated there = rotate(q, &k, Positions::per_token(positions), table, forward, TableValues::Exact64);
    // Back in place.
    reference::apply(there.q.view(), there.k.view(), there.q.view(), there.k.view(), Positions::per_token(positions), table,
                     backward, TableValues::Exact64);
    for (const auto& [in, back] : {std::pair{&q, &there.q}, std::pair{&k, &there.k}}) {
      in->for_each([&](int64_t b, int64_t s, int64_t h, int64_t d) {
        EXPECT_NEAR(back->get(b, s, h, d), in->get(b, s, h, d), 1e-12) << "(" << b << ", " << s << ", " << h << ", " << d << ")";
      });
    }
  }
}

// An independent formulation: per pair, the 2x2 matrix [[C, -S], [S, C]] (its transpose for
// backward) times (a, c); for GPT-J also the complex product (a + ic)(C +- iS) of Meta's
// apply_rotary_emb. Same table values (TableFloat32: table.row() widened), same real operations
// in another order: at most one double rounding apart, 2^-52 (|a C| + |c S|).
TEST(Reference, AgreesWithExplicit2x2Matrices) {
  for (uint64_t trial = 0; trial < 12; ++trial) {
    const uint64_t seed = 4000 + trial;
    SCOPED_TRACE(seed_trace(seed));
    Rng rng(seed);
    const int64_t head_dim = rng.pick(std::vector<int64_t>{2, 6, 16, 64, 96});
    const int64_t rotary_dim = 2 * rng.uniform(1, head_dim / 2);
    const Style style = trial % 2 == 0 ? Style::NeoX : Style::GPTJ;
    const RopeSpec spec = rng.coin() ? scaled_spec(rotary_dim, rotary_dim, style) : text_spec(rotary_dim, rotary_dim, style);
    const CosSinTable table(spec, on_the_fly());
    ApplyOptions options;
    options.rotary_offset = rng.uniform(0, head_dim - rotary_dim);
    options.direction = rng.coin() ? Direction::Forward : Direction::Backward;
    SCOPED_TRACE(std::string(to_string(style)) + " " + std::string(to_string(options.direction)));
    const int64_t seq = rng.uniform(1, 5);
    HostTensor q(DType::F64, Layout::BHSD, {2, 3, seq, head_dim});
    HostTensor k(DType::F64, Layout::BHSD, {2, 1, seq, head_dim});
    fill_random(q, rng);
    fill_random(k, rng);
    std::vector<int64_t> positions(static_cast<size_t>(2 * seq));
    for (int64_t& p : positions) p = random_position(rng);
    const Rotated out = rotate(q, &k, Positions::per_token(positions), table, options);
    const int64_t num_pairs = rotary_dim / 2;
    std::vector<float> cos_row(static_cast<size_t>(num_pairs)), sin_row(static_cast<size_t>(num_pairs));
    for (const auto& [in, rotated] : {std::pair{&q, &out.q}, std::pair{&k, &out.k}}) {
      const NamedAxes a = in->axes();
      for (int64_t b = 0; b < a.batch; ++b)
        for (int64_t s = 0; s < a.seq; ++s) {
          table.row(positions[static_cast<size_t>(b * a.seq + s)], cos_row.data(), sin_row.data());
          for (int64_t h = 0; h < a.heads; ++h)
            for (int64_t i = 0; i < num_pairs; ++i) {
              const double C = cos_row[static_cast<size_t>(i)], S = sin_row[static_cast<size_t>(i)];
              const double sign = options.direction == Direction::Forward ? 1.0 : -1.0;
              const double matrix[2][2] = {{C, -sign * S}, {sign * S, C}};
              const auto [ia, ic] = pair_elements(style, options.rotary_offset, rotary_dim, i);
              const double x[2] = {in->get(b, s, h, ia), in->get(b, s, h, ic)};
              const double expected[2] = {matrix[0][0] * x[0] + matrix[0][1] * x[1],
                                          matrix[1][0] * x[0] + matrix[1][1] * x[1]};
              const double tolerance = 0x1p-52 * (std::fabs(x[0] * C) + std::fabs(x[1] * S));
              EXPECT_NEAR(rotated->get(b, s, h, ia), expected[0], tolerance) << "pair " << i;
              EXPECT_NEAR(rotated->get(b, s, h, ic), expected[1], tolerance) << "pair " << i;
              if (style == Style::GPTJ) {
                const std::complex<double> product = std::complex<double>(x[0], x[1]) * std::complex<double>(C, sign * S);
                EXPECT_NEAR(rotated->get(b, s, h, ia), product.real(), tolerance) << "pair " << i;
                EXPECT_NEAR(rotated->get(b, s, h, ic), product.imag(), tolerance) << "pair " << i;
              }
            }
        }
      // Outside the rotated block: the input, exactly.
      in->for_each([&](int64_t b, int64_t s, int64_t h, int64_t d) {
        if (d < options.rotary_offset || d >= options.rotary_offset + rotary_dim) {
          EXPECT_EQ(rotated->get(b, s, h, d), in->get(b, s, h, d));
        }
      });
    }
  }
}

// The two pairings are one permutation apart: NeoX's rotated block [a0..a_{h-1}, c0..c_{h-1}]
// is GPT-J's [a0, c0, a1, c1, ...] (the HF Meta -> HF weight permutation). Same values, same
// operations: bitwise equal.
TEST(Reference, NeoxEqualsGptjUnderPermutation) {
  for (uint64_t trial = 0; trial < 6; ++trial) {
    const uint64_t seed = 5000 + trial;
    SCOPED_TRACE(seed_trace(seed));
    Rng rng(seed);
    const int64_t head_dim = rng.pick(std::vector<int64_t>{2, 8, 64, 128, 192});
    const int64_t rotary_dim = 2 * rng.uniform(1, head_dim / 2);
    const int64_t offset = rng.uniform(0, head_dim - rotary_dim);
    const int64_t half = rotary_dim / 2;
    const CosSinTable neox_table(text_spec(rotary_dim, rotary_dim, Style::NeoX), on_the_fly());
    const CosSinTable gptj_table(text_spec(rotary_dim, rotary_dim, Style::GPTJ), on_the_fly());
    const DType dtype = rng.pick(std::vector<DType>{DType::F32, DType::F64, DType::BF16});
    ApplyOptions options;
    options.rotary_offset = offset;
    options.direction = rng.coin() ? Direction::Forward : Direction::Backward;
    HostTensor neox(dtype, Layout::BSHD, {2, 4, 3, head_dim});
    fill_random(neox, rng);
    // GPT-J input: the permuted NeoX input.
    auto permuted = [&](int64_t d) {  // NeoX element index -> GPT-J element index
      if (d < offset || d >= offset + rotary_dim) return d;
      const int64_t j = d - offset;
      return offset + (j < half ? 2 * j : 2 * (j - half) + 1);
    };
    HostTensor gptj = neox;
    neox.for_each([&](int64_t b, int64_t s, int64_t h, int64_t d) { gptj.set(b, s, h, permuted(d), neox.get(b, s, h, d)); });
    std::vector<int64_t> positions(8);
    for (int64_t& p : positions) p = random_position(rng);
    const Rotated neox_out = rotate(neox, nullptr, Positions::per_token(positions), neox_table, options);
    const Rotated gptj_out = rotate(gptj, nullptr, Positions::per_token(positions), gptj_table, options);
    neox.for_each([&](int64_t b, int64_t s, int64_t h, int64_t d) {
      EXPECT_EQ(gptj_out.q.bits(b, s, h, permuted(d)), neox_out.q.bits(b, s, h, d)) << "element " << d;
    });
  }
}

// Elements outside [rotary_offset, rotary_offset + rotary_dim) are copied bit for bit, in every
// storage type (GPT-NeoX: head_dim 96, rotary_dim 24).
TEST(Reference, PartialRotaryPassesTailThrough) {
  const uint64_t seed = 6000;
  SCOPED_TRACE(seed_trace(seed));
  Rng rng(seed);
  const CosSinTable table(text_spec(96, 24, Style::NeoX), on_the_fly());
  for (const DType dtype : {DType::F32, DType::BF16, DType::F16, DType::F64}) {
    for (const int64_t offset : {int64_t{0}, int64_t{40}, int64_t{72}}) {
      SCOPED_TRACE(std::string(to_string(dtype)) + " offset " + std::to_string(offset));
      HostTensor q(dtype, Layout::BSHD, {1, 5, 2, 96});
      fill_random(q, rng);
      ApplyOptions options;
      options.rotary_offset = offset;
      const std::vector<int64_t> positions = {1, 2, 3, 1000, 70000};
      const Rotated out = rotate(q, nullptr, Positions::per_token(positions), table, options);
      int64_t changed = 0;
      q.for_each([&](int64_t b, int64_t s, int64_t h, int64_t d) {
        if (d < offset || d >= offset + 24) {
          EXPECT_EQ(out.q.bits(b, s, h, d), q.bits(b, s, h, d)) << "element " << d;
        } else {
          changed += out.q.bits(b, s, h, d) != q.bits(b, s, h, d);
        }
      });
      EXPECT_GT(changed, 0) << "nothing was rotated";
    }
  }
}

// DeepSeek MLA keeps q = [nope (128) | rope (64)]: rotary_offset 128 rotates the last 64
// elements exactly as rotating a 64-wide view of them alone would, and passes the rest through.
TEST(Reference, RotaryOffsetRotatesTheMiddleBlock) {
  for (const Style style : {Style::NeoX, Style::GPTJ}) {
    const uint64_t seed = style == Style::NeoX ? 7001 : 7002;
    SCOPED_TRACE(seed_trace(seed));
    Rng rng(seed);
    const CosSinTable table(text_spec(64, 64, style), on_the_fly());
    for (const int64_t head_dim : {int64_t{192}, int64_t{256}}) {  // 256: a tail after the block too
      HostTensor q(DType::F32, Layout::BSHD, {2, 3, 4, head_dim});
      HostTensor k(DType::F32, Layout::BSHD, {2, 3, 1, head_dim});
      fill_random(q, rng);
      fill_random(k, rng);
      std::vector<int64_t> positions(6);
      for (int64_t& p : positions) p = random_position(rng);
      ApplyOptions options;
      options.rotary_offset = 128;
      const Rotated whole = rotate(q, &k, Positions::per_token(positions), table, options);
      // The same block as a 64-wide strided view of copies.
      Rotated sliced{q, k};
      auto slice = [](const HostTensor& t) {
        TensorView v = t.view();
        v.data = static_cast<unsigned char*>(v.data) + 128 * dtype_size(v.dtype);
        v.shape[3] = 64;
        return v;
      };
      reference::apply(slice(q), slice(k), slice(sliced.q), slice(sliced.k), Positions::per_token(positions), table);
      for (const auto& [in, a, b_] : {std::tuple{&q, &whole.q, &sliced.q}, std::tuple{&k, &whole.k, &sliced.k}}) {
        in->for_each([&](int64_t b, int64_t s, int64_t h, int64_t d) {
          EXPECT_EQ(a->bits(b, s, h, d), b_->bits(b, s, h, d)) << "element " << d;
          if (d < 128 || d >= 192) {
            EXPECT_EQ(a->bits(b, s, h, d), in->bits(b, s, h, d)) << "element " << d;
          }
        });
      }
    }
  }
}

// Proportional RoPE (Gemma 4) is NeoX over the whole head with zero frequencies for the pairs
// past partial_rotary_factor: those pairs come out unchanged, and the rotated pairs equal a
// default full-head spec's (theta_i = base^(-2i/head_dim) in both).
TEST(Reference, ProportionalEqualsNeoxOverWholeHeadWithZeroFrequencies) {
  const uint64_t seed = 8000;
  SCOPED_TRACE(seed_trace(seed));
  Rng rng(seed);
  const int64_t head_dim = 64;
  RopeSpec proportional = text_spec(head_dim, head_dim, Style::NeoX);
  proportional.scaling.type = ScalingType::Proportional;
  proportional.partial_rotary_factor = 0.25;  // int(0.25 * 64 // 2) = 8 rotated pairs of 32
  const CosSinTable proportional_table(proportional, on_the_fly());
  const CosSinTable default_table(text_spec(head_dim, head_dim, Style::NeoX), on_the_fly());
  const int64_t rotated_pairs = 8;
  for (int64_t i = 0; i < head_dim / 2; ++i) {
    if (i < rotated_pairs) {
      EXPECT_EQ(proportional_table.inv_freq()[static_cast<size_t>(i)], default_table.inv_freq()[static_cast<size_t>(i)]);
    } else {
      EXPECT_EQ(proportional_table.inv_freq()[static_cast<size_t>(i)], 0.0) << "pair " << i;
    }
  }
  HostTensor q(DType::F32, Layout::BSHD, {1, 6, 2, head_dim});
  fill_random(q, rng);
  const std::vector<int64_t> positions = {0, 1, 17, 4095, 100000, 2000000000};
  const Rotated got = rotate(q, nullptr, Positions::per_token(positions), proportional_table);
  const Rotated full = rotate(q, nullptr, Positions::per_token(positions), default_table);
  q.for_each([&](int64_t b, int64_t s, int64_t h, int64_t d) {
    const int64_t pair = d % (head_dim / 2);
    if (pair < rotated_pairs) {
      EXPECT_EQ(got.q.bits(b, s, h, d), full.q.bits(b, s, h, d)) << "element " << d;
    } else {
      EXPECT_EQ(got.q.bits(b, s, h, d), q.bits(b, s, h, d)) << "element " << d;
    }
  });
}

// GQA / MQA: q and k head counts differ; each head is rotated as it would be alone.
TEST(Reference, GqaDifferentHeadCounts) {
  const uint64_t seed = 9000;
  SCOPED_TRACE(seed_trace(seed));
  Rng rng(seed);
  const CosSinTable table(text_spec(64, 64, Style::NeoX), on_the_fly());
  for (const int64_t kv_heads : {int64_t{1}, int64_t{2}, int64_t{8}}) {
    HostTensor q(DType::BF16, Layout::BSHD, {2, 3, 8, 64});
    HostTensor k(DType::BF16, Layout::BSHD, {2, 3, kv_heads, 64});
    fill_random(q, rng);
    fill_random(k, rng);
    std::vector<int64_t> positions(6);
    for (int64_t& p : positions) p = random_position(rng);
    const Rotated both = rotate(q, &k, Positions::per_token(positions), table);
    const Rotated q_alone = rotate(q, nullptr, Positions::per_token(positions), table);
    const Rotated k_alone = rotate(k, nullptr, Positions::per_token(positions), table);
    EXPECT_EQ(both.q.bytes(), q_alone.q.bytes());
    EXPECT_EQ(both.k.bytes(), k_alone.q.bytes());
  }
}

// k may be absent (TensorView{}): q alone is rotated, as with k.
TEST(Reference, RotatesQAloneWhenKIsAbsent) {
  const uint64_t seed = 9100;
  SCOPED_TRACE(seed_trace(seed));
  Rng rng(seed);
  const CosSinTable table(text_spec(32, 32, Style::GPTJ), on_the_fly());
  HostTensor q(DType::F32, Layout::BSHD, {1, 4, 2, 32});
  HostTensor k(DType::F32, Layout::BSHD, {1, 4, 1, 32});
  fill_random(q, rng);
  fill_random(k, rng);
  const Rotated both = rotate(q, &k, Positions::arange(), table);
  const Rotated alone = rotate(q, nullptr, Positions::arange(), table);
  EXPECT_EQ(both.q.bytes(), alone.q.bytes());
}

// sequence_offsets[b] gives position offset[b] + s; the same as per_token positions spelled out.
// For THD, s counts from the start of each cu_seqlens segment.
TEST(Reference, OffsetsEqualShiftedPositions) {
  const uint64_t seed = 10000;
  SCOPED_TRACE(seed_trace(seed));
  Rng rng(seed);
  const CosSinTable table(text_spec(32, 32, Style::NeoX), on_the_fly());
  {
    HostTensor q(DType::F32, Layout::BSHD, {3, 5, 2, 32});
    HostTensor k(DType::F32, Layout::BSHD, {3, 5, 1, 32});
    fill_random(q, rng);
    fill_random(k, rng);
    const std::vector<int64_t> offsets = {5, 0, 1000000};
    std::vector<int64_t> explicit_positions;
    for (int64_t b = 0; b < 3; ++b)
      for (int64_t s = 0; s < 5; ++s) explicit_positions.push_back(offsets[static_cast<size_t>(b)] + s);
    const Positions by_offset = Positions::sequence_offsets(offsets);
    const Rotated a = rotate(q, &k, by_offset, table);
    const Rotated b = rotate(q, &k, Positions::per_token(explicit_positions), table);
    EXPECT_EQ(a.q.bytes(), b.q.bytes());
    EXPECT_EQ(a.k.bytes(), b.k.bytes());
  }
  {
    const std::vector<int64_t> cu_seqlens = {0, 3, 3, 10};  // lengths 3, 0, 7
    const std::vector<int64_t> offsets = {7, 123, 40000};
    HostTensor q(DType::F32, Layout::THD, {10, 2, 32});
    fill_random(q, rng);
    std::vector<int64_t> explicit_positions;
    for (size_t n = 0; n + 1 < cu_seqlens.size(); ++n)
      for (int64_t s = 0; s < cu_seqlens[n + 1] - cu_seqlens[n]; ++s) explicit_positions.push_back(offsets[n] + s);
    const Positions by_offset = Positions::sequence_offsets(offsets, cu_seqlens);
    const Positions spelled = Positions::per_token(explicit_positions, cu_seqlens);
    EXPECT_EQ(rotate(q, nullptr, by_offset, table).q.bytes(), rotate(q, nullptr, spelled, table).q.bytes());
  }
}

// No positions: position = s within each sequence (arange), restarting per THD segment.
TEST(Reference, ArangeWhenNoPositions) {
  const uint64_t seed = 11000;
  SCOPED_TRACE(seed_trace(seed));
  Rng rng(seed);
  const CosSinTable table(text_spec(16, 16, Style::GPTJ), on_the_fly());
  HostTensor q(DType::F64, Layout::BHSD, {2, 3, 7, 16});
  fill_random(q, rng);
  std::vector<int64_t> arange;
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t s = 0; s < 7; ++s) arange.push_back(s);
  EXPECT_EQ(rotate(q, nullptr, Positions::arange(), table).q.bytes(), rotate(q, nullptr, Positions::per_token(arange), table).q.bytes());

  const std::vector<int64_t> cu_seqlens = {0, 4, 9};
  HostTensor packed(DType::F64, Layout::THD, {9, 3, 16});
  fill_random(packed, rng);
  const Positions none = Positions::arange(cu_seqlens);
  const std::vector<int64_t> restarting = {0, 1, 2, 3, 0, 1, 2, 3, 4};
  const Positions spelled = Positions::per_token(restarting, cu_seqlens);
  EXPECT_EQ(rotate(packed, nullptr, none, table).q.bytes(), rotate(packed, nullptr, spelled, table).q.bytes());
}

// The same logical (batch, seq, heads, dim) data in BSHD, BHSD, SBHD and THD, contiguous or
// padded (non-contiguous strides), rotates to the same values bit for bit.
TEST(Reference, AllLayoutsAgree) {
  const uint64_t seed = 12000;
  SCOPED_TRACE(seed_trace(seed));
  Rng rng(seed);
  const int64_t B = 2, S = 5, H = 3, D = 32;
  const CosSinTable table(text_spec(D, 24, Style::NeoX), on_the_fly());
  std::vector<double> values(static_cast<size_t>(B * S * H * D));
  for (double& v : values) v = rng.value();
  std::vector<int64_t> positions(static_cast<size_t>(B * S));
  for (int64_t& p : positions) p = random_position(rng);
  auto logical = [&](int64_t b, int64_t s, int64_t h, int64_t d) { return values[static_cast<size_t>(((b * S + s) * H + h) * D + d)]; };

  struct Case {
    Layout layout;
    std::array<int64_t, 4> shape;
    std::array<int64_t, 4> pad;
  };
  const std::vector<Case> cases = {
      {Layout::BSHD, {B, S, H, D}, {}},         {Layout::BSHD, {B, S, H, D}, {1, 2, 1, 3}},
      {Layout::BHSD, {B, H, S, D}, {}},         {Layout::BHSD, {B, H, S, D}, {0, 1, 3, 5}},
      {Layout::SBHD, {S, B, H, D}, {}},         {Layout::SBHD, {S, B, H, D}, {2, 1, 0, 1}},
      {Layout::THD, {B * S, H, D, 0}, {}},      {Layout::THD, {B * S, H, D, 0}, {3, 2, 7, 0}},
  };
  const std::vector<int64_t> cu_seqlens = {0, S, 2 * S};
  std::optional<HostTensor> first;
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(to_string(c.layout)) + (c.pad[0] + c.pad[1] + c.pad[2] > 0 ? " padded" : ""));
    HostTensor q(DType::F32, c.layout, c.shape, c.pad);
    const bool thd = c.layout == Layout::THD;
    // Named coordinates: THD folds (b, s) into token b * S + s.
    for (int64_t b = 0; b < B; ++b)
      for (int64_t s = 0; s < S; ++s)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t d = 0; d < D; ++d) {
            q.set(thd ? 0 : b, thd ? b * S + s : s, h, d, logical(b, s, h, d));
          }
    const Positions p = Positions::per_token(positions, thd ? std::span<const int64_t>(cu_seqlens) : std::span<const int64_t>());
    // Out of place into a view with the same padding, so the output strides vary too.
    HostTensor out(DType::F32, c.layout, c.shape, c.pad);
    reference::apply(q.view(), TensorView{}, out.view(), TensorView{}, p, table);
    HostTensor canonical(DType::F32, Layout::BSHD, {B, S, H, D});
    for (int64_t b = 0; b < B; ++b)
      for (int64_t s = 0; s < S; ++s)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t d = 0; d < D; ++d) canonical.set(b, s, h, d, out.get(thd ? 0 : b, thd ? b * S + s : s, h, d));
    if (!first) {
      first = canonical;
    } else {
      EXPECT_EQ(canonical.bytes(), first->bytes());
    }
  }
}

// In place (q_out == q, k_out == k) gives the same bits as out of place, in every dtype.
TEST(Reference, InPlaceEqualsOutOfPlace) {
  const uint64_t seed = 13000;
  SCOPED_TRACE(seed_trace(seed));
  Rng rng(seed);
  for (const Style style : {Style::NeoX, Style::GPTJ}) {
    const CosSinTable table(scaled_spec(48, 32, style), on_the_fly());
    for (const DType dtype : {DType::F32, DType::BF16, DType::F16, DType::F64}) {
      SCOPED_TRACE(std::string(to_string(dtype)) + " " + std::string(to_string(style)));
      HostTensor q(dtype, Layout::BHSD, {2, 4, 3, 48}, {0, 0, 1, 2});
      HostTensor k(dtype, Layout::BHSD, {2, 2, 3, 48});
      fill_random(q, rng);
      fill_random(k, rng);
      std::vector<int64_t> positions(6);
      for (int64_t& p : positions) p = random_position(rng);
      ApplyOptions options;
      options.rotary_offset = 16;
      const Rotated out = rotate(q, &k, Positions::per_token(positions), table, options);
      reference::apply(q.view(), k.view(), q.view(), k.view(), Positions::per_token(positions), table, options);
      q.for_each([&](int64_t b, int64_t s, int64_t h, int64_t d) { EXPECT_EQ(q.bits(b, s, h, d), out.q.bits(b, s, h, d)); });
      k.for_each([&](int64_t b, int64_t s, int64_t h, int64_t d) { EXPECT_EQ(k.bits(b, s, h, d), out.k.bits(b, s, h, d)); });
    }
  }
}

// bf16 / f16 outputs are the float64 result rounded once (to nearest even): equal, bit for
// bit, to the float64-storage result rounded by an independent oracle (round_once above).
TEST(Reference, Bf16AndF16StorageRoundOnce) {
  const uint64_t seed = 14000;
  SCOPED_TRACE(seed_trace(seed));
  Rng rng(seed);
  const CosSinTable table(scaled_spec(64, 64, Style::NeoX), on_the_fly());
  for (const DType out_dtype : {DType::BF16, DType::F16}) {
    for (const DType in_dtype : {DType::BF16, DType::F16, DType::F32, DType::F64}) {
      SCOPED_TRACE(std::string(to_string(in_dtype)) + " -> " + std::string(to_string(out_dtype)));
      HostTensor q(in_dtype, Layout::BSHD, {2, 8, 4, 64});
      fill_random(q, rng);
      // The same values in float64 storage (loads are exact, so the math sees the same inputs).
      HostTensor q64(DType::F64, Layout::BSHD, q.shape());
      q.for_each([&](int64_t b, int64_t s, int64_t h, int64_t d) { q64.set(b, s, h, d, q.get(b, s, h, d)); });
      std::vector<int64_t> positions(16);
      for (int64_t& p : positions) p = random_position(rng);
      for (const TableValues values : {TableValues::TableFloat32, TableValues::Exact64}) {
        const Rotated narrow = rotate(q, nullptr, Positions::per_token(positions), table, {}, values, out_dtype);
        const Rotated wide = rotate(q64, nullptr, Positions::per_token(positions), table, {}, values);
        int64_t mismatches = 0;
        q.for_each([&](int64_t b, int64_t s, int64_t h, int64_t d) {
          const uint16_t expected = round_once(wide.q.get(b, s, h, d), out_dtype);
          const auto got = static_cast<uint16_t>(narrow.q.bits(b, s, h, d));
          if (got != expected && ++mismatches < 10) {
            ADD_FAILURE() << "(" << b << ", " << s << ", " << h << ", " << d << "): float64 result "
                          << wide.q.get(b, s, h, d) << " stored as 0x" << std::hex << got << ", nearest is 0x" << expected;
          }
        });
        EXPECT_EQ(mismatches, 0);
      }
    }
  }
}

// The narrowing seen directly through the pass-through tail (copied, converted to the output
// dtype): on values a float32 holds exactly, double -> bf16 / f16 equals the library's float
// path (float_to_bf16 / float_to_f16), including subnormals, overflow, infinities and NaN.
TEST(Reference, NarrowingFromDoubleMatchesFloatPathOnFloatValues) {
  const uint64_t seed = 15000;
  SCOPED_TRACE(seed_trace(seed));
  Rng rng(seed);
  const CosSinTable table(text_spec(2, 2, Style::NeoX), on_the_fly());
  const int64_t count = 1 << 16;
  std::vector<float> floats;
  for (int64_t i = 0; i < count; ++i) {
    // Random bit patterns, spread over every exponent, plus the edge values below.
    const auto pattern = static_cast<uint32_t>(rng.uniform(0, 0xFFFFFFFF));
    float f = 0;
    std::memcpy(&f, &pattern, sizeof f);
    if (std::isnan(f)) f = std::numeric_limits<float>::quiet_NaN();
    floats.push_back(f);
  }
  for (const float edge : {0.0f, -0.0f, 1.0f, 65504.0f, 65519.0f, 65520.0f, -65520.0f, 0x1p-24f, 0x1p-25f,
                           0x1.8p-25f, 0x1p-14f, 0x1.ffcp-15f, std::numeric_limits<float>::max(),
                           std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(), 0x1.fefffep127f, 0x1.ff0000p127f}) {
    floats.push_back(edge);
  }
  // One token, one head per value: q = (rotated pair at position 0 | the value in the tail).
  const auto tokens = static_cast<int64_t>(floats.size());
  HostTensor q(DType::F64, Layout::BSHD, {1, tokens, 1, 3});
  for (int64_t t = 0; t < tokens; ++t) {
    q.set(0, t, 0, 0, 1.0);
    q.set(0, t, 0, 1, 1.0);
    q.set(0, t, 0, 2, floats[static_cast<size_t>(t)]);
  }
  const std::vector<int64_t> positions(static_cast<size_t>(tokens), 0);
  for (const DType dtype : {DType::BF16, DType::F16}) {
    SCOPED_TRACE(std::string(to_string(dtype)));
    const Rotated out = rotate(q, nullptr, Positions::per_token(positions), table, {}, TableValues::TableFloat32, dtype);
    int64_t mismatches = 0;
    for (int64_t t = 0; t < tokens; ++t) {
      const float f = floats[static_cast<size_t>(t)];
      const uint16_t expected = dtype == DType::BF16 ? float_to_bf16(f) : float_to_f16(f);
      const auto got = static_cast<uint16_t>(out.q.bits(0, t, 0, 2));
      if (got != expected && ++mismatches < 10) {
        ADD_FAILURE() << "float " << f << " (0x" << std::hex << std::bit_cast<uint32_t>(f) << "): 0x" << got
                      << ", float path 0x" << expected;
      }
    }
    EXPECT_EQ(mismatches, 0);
  }
}

// Where double -> float -> bf16/f16 rounds twice and errs: a value just above (below) a tie
// between two neighbours rounds to float as the tie itself, which then goes to the even
// neighbour. Rounding once from the double goes up (down) as it must; an exact tie goes to even.
TEST(Reference, NarrowingFromDoubleRoundsOnceNearTies) {
  const uint64_t seed = 16000;
  SCOPED_TRACE(seed_trace(seed));
  Rng rng(seed);
  const CosSinTable table(text_spec(2, 2, Style::NeoX), on_the_fly());
  for (const DType dtype : {DType::BF16, DType::F16}) {
    SCOPED_TRACE(std::string(to_string(dtype)));
    const bool bf16 = dtype == DType::BF16;
    auto widen = [&](int pattern) -> double {
      return bf16 ? bf16_to_float(static_cast<uint16_t>(pattern)) : f16_to_float(static_cast<uint16_t>(pattern));
    };
    const int largest_finite = bf16 ? 0x7F7F : 0x7BFF;
    std::vector<double> values;
    std::vector<uint16_t> expected;
    int64_t float_path_wrong = 0;
    for (int trial = 0; trial < 4000; ++trial) {
      // Neighbours lo < hi (hi may be infinity's pattern: then the tie is max + half an ulp).
      const int lo = trial < 8 ? trial : (trial < 16 ? largest_finite - (trial - 8) : static_cast<int>(rng.uniform(0, largest_finite)));
      const double lo_value = widen(lo);
      const double hi_value = lo == largest_finite ? 2.0 * lo_value - widen(lo - 1) : widen(lo + 1);
      const double tie = (lo_value + hi_value) / 2;  // exact: a few more bits than the format
      const double nudge = std::ldexp(std::max(tie, 0x1p-200), -40);  // below float's resolution at tie
      const double sign = rng.coin() ? 1.0 : -1.0;
      const auto sign_bits = static_cast<uint16_t>(sign < 0 ? 0x8000u : 0u);
      const int even = lo % 2 == 0 ? lo : lo + 1;
      for (const auto& [value, pattern] : {std::pair{tie + nudge, lo + 1}, std::pair{tie - nudge, lo}, std::pair{tie, even}}) {
        values.push_back(sign * value);
        expected.push_back(static_cast<uint16_t>(sign_bits | pattern));
        const float f = static_cast<float>(sign * value);
        const uint16_t twice = bf16 ? float_to_bf16(f) : float_to_f16(f);
        float_path_wrong += twice != expected.back();
        EXPECT_EQ(round_once(sign * value, dtype), expected.back()) << "oracle at " << sign * value;
      }
    }
    // The cases are the ones where rounding twice goes wrong (about half of the nudged ones).
    EXPECT_GT(float_path_wrong, 1000);
    const auto tokens = static_cast<int64_t>(values.size());
    HostTensor q(DType::F64, Layout::BSHD, {1, tokens, 1, 3});
    for (int64_t t = 0; t < tokens; ++t) {
      q.set(0, t, 0, 0, 1.0);
      q.set(0, t, 0, 1, 1.0);
      q.set(0, t, 0, 2, values[static_cast<size_t>(t)]);
    }
    const std::vector<int64_t> positions(static_cast<size_t>(tokens), 0);
    const Rotated out = rotate(q, nullptr, Positions::per_token(positions), table, {}, TableValues::TableFloat32, dtype);
    int64_t mismatches = 0;
    for (int64_t t = 0; t < tokens; ++t) {
      const auto got = static_cast<uint16_t>(out.q.bits(0, t, 0, 2));
      if (got != expected[static_cast<size_t>(t)] && ++mismatches < 10) {
        ADD_FAILURE() << "value " << values[static_cast<size_t>(t)] << ": 0x" << std::hex << got << ", expected 0x"
                      << expected[static_cast<size_t>(t)];
      }
    }
    EXPECT_EQ(mismatches, 0);
  }
}

// xPos (flash-attn scale_base): q's C and S are multiplied by zeta_i^e(p) and k's divided by it,
// zeta_i = (2i + 0.4 d) / (1.4 d), e(p) = (p - L // 2) / scale_base. Since zeta_i < 1, queries
// grow and keys shrink before L // 2 (e < 0), the reverse after it. Each element is the
// non-xPos element times the factor to ~4 double roundings (pow adds ~1 ulp): 1e-14 relative.
TEST(Reference, XposScalesQueriesUpAndKeysDown) {
  const uint64_t seed = 17000;
  SCOPED_TRACE(seed_trace(seed));
  Rng rng(seed);
  for (const Style style : {Style::NeoX, Style::GPTJ}) {
    RopeSpec plain = text_spec(64, 64, style);
    plain.max_position_embeddings = 4096;
    RopeSpec with_xpos = plain;
    with_xpos.xpos = XPos{512.0};
    const CosSinTable plain_table(plain, on_the_fly());
    const CosSinTable xpos_table(with_xpos, on_the_fly());
    for (const int64_t xpos_length : {int64_t{0}, int64_t{1001}}) {
      const int64_t half_length = (xpos_length > 0 ? xpos_length : 4096) / 2;  // integer division
      SCOPED_TRACE("L // 2 = " + std::to_string(half_length));
      HostTensor q(DType::F64, Layout::BSHD, {1, 6, 2, 64});
      HostTensor k(DType::F64, Layout::BSHD, {1, 6, 1, 64});
      fill_random(q, rng);
      fill_random(k, rng);
      const std::vector<int64_t> positions = {0, half_length - 1, half_length, half_length + 1, 3000, 70000};
      ApplyOptions options;
      options.xpos_length = xpos_length;
      const Rotated base = rotate(q, &k, Positions::per_token(positions), plain_table, options, TableValues::Exact64);
      const Rotated scaled = rotate(q, &k, Positions::per_token(positions), xpos_table, options, TableValues::Exact64);
      for (int64_t s = 0; s < 6; ++s) {
        const int64_t p = positions[static_cast<size_t>(s)];
        const double e = static_cast<double>(p - half_length) / 512.0;
        for (int64_t i = 0; i < 32; ++i) {
          const double zeta = (2.0 * static_cast<double>(i) + 0.4 * 64) / (1.4 * 64);
          const double factor = std::pow(zeta, e);
          if (p < half_length) {
            EXPECT_GT(factor, 1.0);
          } else if (p > half_length) {
            EXPECT_LT(factor, 1.0);
          } else {
            EXPECT_EQ(factor, 1.0);
          }
          const auto [ia, ic] = pair_elements(style, 0, 64, i);
          // Relative to the pair's inputs, not to the result (which may cancel).
          for (const int64_t d : {ia, ic}) {
            for (int64_t h = 0; h < 2; ++h) {
              const double size = std::fabs(q.get(0, s, h, ia)) + std::fabs(q.get(0, s, h, ic));
              EXPECT_NEAR(scaled.q.get(0, s, h, d), base.q.get(0, s, h, d) * factor, 1e-14 * factor * size)
                  << "q p " << p << " pair " << i;
            }
            const double size = std::fabs(k.get(0, s, 0, ia)) + std::fabs(k.get(0, s, 0, ic));
            EXPECT_NEAR(scaled.k.get(0, s, 0, d), base.k.get(0, s, 0, d) / factor, 1e-14 / factor * size)
                << "k p " << p << " pair " << i;
          }
        }
      }
    }
  }
}

// In q.k the xPos factors combine to zeta_i^(e(m) - e(n)) = zeta_i^((m - n) / scale_base): the
// score is each pair's non-xPos contribution times that decay, it depends on m - n only, and at
// m == n it equals the non-xPos score.
TEST(Reference, XposScoreIsRelativeScoreTimesDecay) {
  const uint64_t seed = 18000;
  SCOPED_TRACE(seed_trace(seed));
  Rng rng(seed);
  const int64_t D = 64;
  RopeSpec plain = text_spec(D, D, Style::NeoX);
  RopeSpec with_xpos = plain;
  with_xpos.xpos = XPos{512.0};
  const CosSinTable plain_table(plain, on_the_fly());
  const CosSinTable xpos_table(with_xpos, on_the_fly());
  for (int trial = 0; trial < 5; ++trial) {
    const int64_t m = rng.uniform(0, 3000), n = rng.uniform(0, 3000), t = rng.uniform(1, 100000);
    SCOPED_TRACE("m " + std::to_string(m) + " n " + std::to_string(n) + " t " + std::to_string(t));
    // Tokens at m, n, m + t, n + t, m, m: q at tokens 0, 2, 4; k at 1, 3, 5.
    HostTensor q(DType::F64, Layout::BSHD, {1, 6, 1, D});
    HostTensor k(DType::F64, Layout::BSHD, {1, 6, 1, D});
    fill_random(q, rng);
    fill_random(k, rng);
    double norms = 0;
    for (int64_t d = 0; d < D; ++d) {
      q.set(0, 2, 0, d, q.get(0, 0, 0, d));
      q.set(0, 4, 0, d, q.get(0, 0, 0, d));
      k.set(0, 3, 0, d, k.get(0, 1, 0, d));
      k.set(0, 5, 0, d, k.get(0, 1, 0, d));
      norms += std::fabs(q.get(0, 0, 0, d) * k.get(0, 1, 0, d));
    }
    const std::vector<int64_t> positions = {m, n, m + t, n + t, m, m};
    const Rotated base = rotate(q, &k, Positions::per_token(positions), plain_table, {}, TableValues::Exact64);
    const Rotated xp = rotate(q, &k, Positions::per_token(positions), xpos_table, {}, TableValues::Exact64);
    double expected = 0, got = 0, shifted = 0, same_base = 0, same_xpos = 0;
    for (int64_t i = 0; i < D / 2; ++i) {
      const double zeta = (2.0 * static_cast<double>(i) + 0.4 * D) / (1.4 * D);
      const double decay = std::pow(zeta, static_cast<double>(m - n) / 512.0);
      for (const int64_t d : {i, i + D / 2}) {
        expected += base.q.get(0, 0, 0, d) * base.k.get(0, 1, 0, d) * decay;
        got += xp.q.get(0, 0, 0, d) * xp.k.get(0, 1, 0, d);
        shifted += xp.q.get(0, 2, 0, d) * xp.k.get(0, 3, 0, d);
        same_base += base.q.get(0, 4, 0, d) * base.k.get(0, 5, 0, d);
        same_xpos += xp.q.get(0, 4, 0, d) * xp.k.get(0, 5, 0, d);
      }
    }
    // The decay reaches zeta_0^(-3000/512) ~ 1.6e3: bound by the decayed magnitudes.
    const double scale = norms * std::pow(0.4 / 1.4, -3000.0 / 512.0);
    EXPECT_NEAR(got, expected, 1e-12 * scale);
    EXPECT_NEAR(shifted, got, 1e-12 * scale);
    EXPECT_NEAR(same_xpos, same_base, 1e-12 * norms);
  }
}

// The streams each pair reads, from the documented rules (docs/formulas.md, M-RoPE), written out
// independently of pair_streams().
int expected_stream(const MRopeSections& sections, int64_t i) {
  const auto [t, h, w] = sections.pairs;
  if (sections.assignment == MRopeAssignment::Chunked) return i < t ? 0 : (i < t + h ? 1 : 2);
  if (i % 3 == 1 && i < 3 * h) return 1;
  if (i % 3 == 2 && i < 3 * w) return 2;
  return 0;
}

// M-RoPE: with distinct t, h, w positions, every pair equals the single-stream rotation at the
// position of the stream its section assigns (same default frequencies, index not reset).
TEST(Reference, MropeChunkedAndInterleavedReadTheirStreams) {
  const uint64_t seed = 19000;
  SCOPED_TRACE(seed_trace(seed));
  Rng rng(seed);
  const std::vector<MRopeSections> all_sections = {{{16, 24, 24}, MRopeAssignment::Chunked},
                                                   {{24, 20, 20}, MRopeAssignment::Interleaved},
                                                   {{11, 11, 10}, MRopeAssignment::Interleaved}};
  for (const MRopeSections& sections : all_sections) {
    const int64_t rotary_dim = 2 * (sections.pairs[0] + sections.pairs[1] + sections.pairs[2]);
    SCOPED_TRACE(std::string(to_string(sections.assignment)) + " rotary_dim " + std::to_string(rotary_dim));
    RopeSpec single = text_spec(rotary_dim, rotary_dim, Style::NeoX, 1000000.0);
    RopeSpec mrope = single;
    mrope.axes = PositionAxes::MRope;
    mrope.mrope = sections;
    const CosSinTable single_table(single, on_the_fly());
    const CosSinTable mrope_table(mrope, on_the_fly());
    const int64_t head_dim = rotary_dim + 8, tokens = 6;
    HostTensor q(DType::F32, Layout::BSHD, {1, tokens, 2, head_dim});
    HostTensor k(DType::F32, Layout::BSHD, {1, tokens, 1, head_dim});
    fill_random(q, rng);
    fill_random(k, rng);
    // Stream-major [3][tokens], every stream different.
    std::vector<int64_t> streams(static_cast<size_t>(3 * tokens));
    for (int64_t& p : streams) p = rng.uniform(0, 100000);
    const Rotated got = rotate(q, &k, Positions::per_token(streams), mrope_table);
    std::vector<Rotated> by_stream;
    for (int stream = 0; stream < 3; ++stream) {
      const std::vector<int64_t> one(streams.begin() + stream * tokens, streams.begin() + (stream + 1) * tokens);
      by_stream.push_back(rotate(q, &k, Positions::per_token(one), single_table));
    }
    for (const bool is_q : {true, false}) {
      const HostTensor& in = is_q ? q : k;
      in.for_each([&](int64_t b, int64_t s, int64_t h, int64_t d) {
        const HostTensor& out = is_q ? got.q : got.k;
        if (d >= rotary_dim) {
          EXPECT_EQ(out.bits(b, s, h, d), in.bits(b, s, h, d));
          return;
        }
        const int stream = expected_stream(sections, d % (rotary_dim / 2));
        const HostTensor& want = is_q ? by_stream[static_cast<size_t>(stream)].q : by_stream[static_cast<size_t>(stream)].k;
        EXPECT_EQ(out.bits(b, s, h, d), want.bits(b, s, h, d)) << "element " << d << " stream " << stream;
      });
    }
  }
}

// Text tokens in M-RoPE carry t = h = w: the result is the single-stream rotation, bitwise.
TEST(Reference, MropeWithEqualStreamsEqualsSingleStream) {
  const uint64_t seed = 20000;
  SCOPED_TRACE(seed_trace(seed));
  Rng rng(seed);
  for (const MRopeAssignment assignment : {MRopeAssignment::Chunked, MRopeAssignment::Interleaved}) {
    RopeSpec single = text_spec(128, 128, Style::NeoX, 1000000.0);
    RopeSpec mrope = single;
    mrope.axes = PositionAxes::MRope;
    mrope.mrope = {{24, 20, 20}, assignment};
    const CosSinTable single_table(single, on_the_fly());
    const CosSinTable mrope_table(mrope, on_the_fly());
    HostTensor q(DType::BF16, Layout::BHSD, {2, 4, 3, 128});
    fill_random(q, rng);
    std::vector<int64_t> positions(6);
    for (int64_t& p : positions) p = random_position(rng);
    std::vector<int64_t> three;
    for (int stream = 0; stream < 3; ++stream) three.insert(three.end(), positions.begin(), positions.end());
    EXPECT_EQ(rotate(q, nullptr, Positions::per_token(three), mrope_table).q.bytes(),
              rotate(q, nullptr, Positions::per_token(positions), single_table).q.bytes());
  }
}

// 2-D vision (Qwen2-VL's vision tower): pairs [0, d/4) turn by row * theta_i, pairs [d/4, d/2)
// by column * theta_(i - d/4), theta_j = base^(-2j/(d/2)). Checked against cos/sin of the angle
// in double: positions < 64 keep the angle's error below 1e-14, so 1e-13 (|a| + |c|) holds.
TEST(Reference, Vision2DRowAndColumnHalves) {
  const uint64_t seed = 21000;
  SCOPED_TRACE(seed_trace(seed));
  Rng rng(seed);
  const int64_t d = 80, quarter = d / 4;
  for (const Style style : {Style::NeoX, Style::GPTJ}) {
    RopeSpec spec = text_spec(d, d, style);
    spec.axes = PositionAxes::Vision2D;
    const CosSinTable table(spec, on_the_fly());
    const int64_t tokens = 8;
    HostTensor q(DType::F64, Layout::THD, {tokens, 2, d});
    fill_random(q, rng);
    std::vector<int64_t> positions(static_cast<size_t>(2 * tokens));  // [rows..., columns...]
    for (int64_t& p : positions) p = rng.uniform(0, 63);
    const std::vector<int64_t> cu_seqlens = {0, tokens};
    const Positions p = Positions::per_token(positions, cu_seqlens);
    const Rotated out = rotate(q, nullptr, p, table, {}, TableValues::Exact64);
    for (int64_t t = 0; t < tokens; ++t) {
      const int64_t row = positions[static_cast<size_t>(t)], column = positions[static_cast<size_t>(tokens + t)];
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t i = 0; i < d / 2; ++i) {
          const int64_t j = i < quarter ? i : i - quarter;  // the index restarts for the column half
          const double theta = std::pow(10000.0, -2.0 * static_cast<double>(j) / static_cast<double>(d / 2));
          const double angle = static_cast<double>(i < quarter ? row : column) * theta;
          const auto [ia, ic] = pair_elements(style, 0, d, i);
          const double a = q.get(0, t, h, ia), c = q.get(0, t, h, ic);
          const double tolerance = 1e-13 * (std::fabs(a) + std::fabs(c));
          EXPECT_NEAR(out.q.get(0, t, h, ia), a * std::cos(angle) - c * std::sin(angle), tolerance) << "pair " << i;
          EXPECT_NEAR(out.q.get(0, t, h, ic), c * std::cos(angle) + a * std::sin(angle), tolerance) << "pair " << i;
        }
    }
  }
}

// TableFloat32 uses the table's float32 values (what kernels use), Exact64 its float64 values:
// they differ by the float32 rounding of cos/sin only (<= 1 float32 ulp, 2^-24 relative).
TEST(Reference, TableValuesSelectFloat32OrFloat64Rows) {
  const uint64_t seed = 22000;
  SCOPED_TRACE(seed_trace(seed));
  Rng rng(seed);
  const CosSinTable table(text_spec(64, 64, Style::NeoX), on_the_fly());
  HostTensor q(DType::F64, Layout::BSHD, {1, 4, 1, 64});
  fill_random(q, rng);
  const std::vector<int64_t> positions = {3, 77, 4096, 1000000};
  const Rotated f32 = rotate(q, nullptr, Positions::per_token(positions), table, {}, TableValues::TableFloat32);
  const Rotated f64 = rotate(q, nullptr, Positions::per_token(positions), table, {}, TableValues::Exact64);
  int64_t differ = 0;
  q.for_each([&](int64_t b, int64_t s, int64_t h, int64_t d) {
    const int64_t i = d % 32;
    const double a = q.get(b, s, h, i), c = q.get(b, s, h, i + 32);
    EXPECT_NEAR(f32.q.get(b, s, h, d), f64.q.get(b, s, h, d), 0x1p-23 * (std::fabs(a) + std::fabs(c)));
    differ += f32.q.get(b, s, h, d) != f64.q.get(b, s, h, d);
  });
  EXPECT_GT(differ, 0);
}

}  // namespace
}  // namespace rotary
