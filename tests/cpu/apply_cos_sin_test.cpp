// tests/cpu/apply_cos_sin_test.cpp: rotary::apply_cos_sin (include/rotary/apply_cos_sin.hpp), the
// explicit cos/sin form behind the Python drop-in, against an independent float64 evaluation of
// its formula written here:
//
//   forward:   out[j] = x[j] c[j] + rot(x)[j] s[j]
//   backward:  out[j] = g[j] c[j] + (rot^T (g * s))[j]
//   rot(x)[j] = -x[j + R/2] (j < R/2), x[j - R/2] (NeoX);  rot(x)[2i] = -x[2i+1], rot(x)[2i+1] = x[2i]
//
// Rounding::Once must be the correctly rounded value of that float64 result (one rounding of a
// value computed with error far below half an ulp of the storage type: equal bits except at the
// rare exact ties, so the test allows 1 ulp and counts); Rounding::LikeTorch must equal the same
// formula evaluated as eager torch does, emulated here op by op in float32 with a rounding to
// the storage type after each op (bit-identical). The Python tests compare LikeTorch with real
// torch; these run in the C++ suite and so under `make sanitize` too.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "rotary/apply.hpp"
#include "rotary/apply_cos_sin.hpp"
#include "rotary/error.hpp"
#include "rotary/tensor.hpp"
#include "tests/support/cpu_scope.hpp"

namespace rotary {
namespace {

double load(const std::vector<uint16_t>& bits, const std::vector<float>& f32, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::F32: return f32[static_cast<size_t>(i)];
    case DType::BF16: return bf16_to_float(bits[static_cast<size_t>(i)]);
    case DType::F16: return f16_to_float(bits[static_cast<size_t>(i)]);
    case DType::F64: break;
  }
  return 0.0;
}

float round_to(DType dtype, float v) {
  switch (dtype) {
    case DType::BF16: return bf16_to_float(float_to_bf16(v));
    case DType::F16: return f16_to_float(float_to_f16(v));
    default: return v;
  }
}

// A tensor of one storage type, in a buffer with room for strides.
struct Buffer {
  DType dtype = DType::F32;
  std::vector<float> f32;
  std::vector<uint16_t> bits;
  void resize(int64_t n) {
    f32.assign(static_cast<size_t>(dtype == DType::F32 ? n : 0), 0.0f);
    bits.assign(static_cast<size_t>(dtype == DType::F32 ? 0 : n), 0);
  }
  void* data() { return dtype == DType::F32 ? static_cast<void*>(f32.data()) : static_cast<void*>(bits.data()); }
  double get(int64_t i) const { return load(bits, f32, dtype, i); }
  void set(int64_t i, double v) {
    if (dtype == DType::F32) f32[static_cast<size_t>(i)] = static_cast<float>(v);
    if (dtype == DType::BF16) bits[static_cast<size_t>(i)] = double_to_bf16(v);
    if (dtype == DType::F16) bits[static_cast<size_t>(i)] = double_to_f16(v);
  }
};

struct Case {
  DType dtype = DType::F32;
  Layout layout = Layout::BSHD;
  Style style = Style::NeoX;
  Direction direction = Direction::Forward;
  Rounding rounding = Rounding::Once;
  int64_t batch = 1, seq = 1, heads = 1, dim = 8, rotary_dim = 8;
  int64_t head_pad = 0;       // extra elements between heads of x (a strided view)
  bool broadcast_batch = false;  // cos/sin batch 1 against x's batch
  bool in_place = false;
  bool special_values = false;  // special_value() for x, cos and sin instead of normal / cos(angle)
  std::string describe() const {
    return std::string(to_string(dtype)) + " " + std::string(to_string(layout)) + " " +
           (style == Style::NeoX ? "neox" : "gptj") + (direction == Direction::Forward ? " fwd " : " bwd ") +
           std::string(to_string(rounding)) + " b" + std::to_string(batch) + " s" + std::to_string(seq) + " h" +
           std::to_string(heads) + " d" + std::to_string(dim) + " r" + std::to_string(rotary_dim) + " pad" +
           std::to_string(head_pad) + (broadcast_batch ? " bcast" : "") + (in_place ? " in_place" : "") +
           (special_values ? " special" : "");
  }
};

// Element (b, t, h, j) of x in its buffer (any layout, heads padded by head_pad).
struct Geometry {
  TensorView view;
  int64_t index(int64_t b, int64_t t, int64_t h, int64_t j) const {
    const NamedAxes a = named_axes(view);
    return b * a.stride_batch + t * a.stride_seq + h * a.stride_heads + j * a.stride_dim;
  }
};

Geometry make_geometry(const Case& c, void* data) {
  std::array<int64_t, 4> shape{};
  switch (c.layout) {
    case Layout::BSHD: shape = {c.batch, c.seq, c.heads, c.dim}; break;
    case Layout::BHSD: shape = {c.batch, c.heads, c.seq, c.dim}; break;
    case Layout::SBHD: shape = {c.seq, c.batch, c.heads, c.dim}; break;
    case Layout::THD: shape = {c.seq, c.heads, c.dim, 0}; break;
  }
  Geometry g;
  g.view = contiguous_view(data, c.dtype, c.layout, shape);
  if (c.head_pad > 0) {
    // Re-stride so that consecutive heads are dim + head_pad elements apart, in the layout's order.
    std::array<int64_t, 4> stride{};
    const int64_t hs = c.dim + c.head_pad;
    switch (c.layout) {
      case Layout::BSHD: stride = {c.seq * c.heads * hs, c.heads * hs, hs, 1}; break;
      case Layout::BHSD: stride = {c.heads * c.seq * hs, c.seq * hs, hs, 1}; break;
      case Layout::SBHD: stride = {c.batch * c.heads * hs, c.heads * hs, hs, 1}; break;
      case Layout::THD: stride = {c.heads * hs, hs, 1, 0}; break;
    }
    g.view.stride_elems = stride;
  }
  return g;
}

int64_t buffer_elements(const Case& c) {
  return c.batch * c.seq * c.heads * (c.dim + c.head_pad);
}

double random_value(std::mt19937_64& rng) {
  std::normal_distribution<double> normal(0.0, 1.0);
  return normal(rng);
}

// The values where a rounding slip shows, for the storage type: few-bit significands (their
// products land on ties of the storage precision: 1.5 * (1 + 2^-7) = 1.1000001|1 in bf16),
// subnormals of the type and products that become subnormal or underflow, values near the
// largest finite (sums overflow to infinity), zeros of both signs, and ordinary normals.
double special_value(std::mt19937_64& rng, DType dtype) {
  const double sign = rng() % 2 ? -1.0 : 1.0;
  const int tiny = dtype == DType::F16 ? -24 : -149;    // the smallest subnormal's exponent
  const int huge = dtype == DType::F16 ? 15 : 127;      // the largest finite's exponent
  const int bits = dtype == DType::F32 ? 23 : dtype == DType::BF16 ? 7 : 10;
  switch (rng() % 7) {
    case 0: return sign * std::ldexp(1.0 + static_cast<double>(rng() % 8) / 8.0, static_cast<int>(rng() % 7) - 3);
    case 1: return sign * std::ldexp(1.0 + static_cast<double>(rng() % (1u << bits)) / std::ldexp(1.0, bits), 0);
    case 2: return sign * std::ldexp(static_cast<double>(1 + rng() % 1000), tiny);  // subnormal (or tiny normal)
    case 3: {  // products near the subnormal range of the type, or below it (underflow)
      const int low = dtype == DType::F16 ? -13 : -76;
      return sign * std::ldexp(1.0 + static_cast<double>(rng() % 64) / 64.0, low + static_cast<int>(rng() % 6));
    }
    case 4: return sign * std::ldexp(1.0 + static_cast<double>(rng() % 128) / 128.0, huge - static_cast<int>(rng() % 2));
    case 5: return rng() % 2 ? 0.0 : -0.0;
    default: return random_value(rng) * 3.0;
  }
}

// partner p(j) and sigma(j): rot(x)[j] = sigma(j) x[p(j)].
void pairing(Style style, int64_t r, int64_t j, int64_t& p, double& sigma) {
  const bool first = style == Style::NeoX ? j < r / 2 : j % 2 == 0;
  p = style == Style::NeoX ? (first ? j + r / 2 : j - r / 2) : (first ? j + 1 : j - 1);
  sigma = first ? -1.0 : 1.0;
}

struct Result {
  int64_t checked = 0, ulp_off = 0, wrong = 0;
  std::string first_wrong;
};

Result run_case(const Case& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int64_t n = buffer_elements(c);
  Buffer x{c.dtype}, out{c.dtype};
  x.resize(n);
  out.resize(n);
  for (int64_t i = 0; i < n; ++i) x.set(i, c.special_values ? special_value(rng, c.dtype) : random_value(rng));
  for (int64_t i = 0; i < n; ++i) out.set(i, 1e4);  // sentinel: padding must stay untouched
  const int64_t cos_batch = c.broadcast_batch ? 1 : (c.layout == Layout::THD ? 1 : c.batch);
  const int64_t rows = c.layout == Layout::THD ? c.seq : c.seq;
  Buffer cs{c.dtype}, sn{c.dtype};
  cs.resize(cos_batch * rows * c.rotary_dim);
  sn.resize(cos_batch * rows * c.rotary_dim);
  for (int64_t i = 0; i < cos_batch * rows * c.rotary_dim; ++i) {
    const double angle = std::uniform_real_distribution<double>(-20.0, 20.0)(rng);
    cs.set(i, c.special_values ? special_value(rng, c.dtype) : std::cos(angle));
    sn.set(i, c.special_values ? special_value(rng, c.dtype) : std::sin(angle));
  }
  const Buffer x_initial = x;
  Geometry gx = make_geometry(c, x.data());
  Geometry go = make_geometry(c, c.in_place ? x.data() : out.data());
  const TensorView cos_view = contiguous_view(cs.data(), c.dtype, Layout::BSHD, {cos_batch, rows, 1, c.rotary_dim});
  const TensorView sin_view = contiguous_view(sn.data(), c.dtype, Layout::BSHD, {cos_batch, rows, 1, c.rotary_dim});
  apply_cos_sin(gx.view, go.view, cos_view, sin_view,
                {.style = c.style, .direction = c.direction, .rounding = c.rounding, .name = "q"});

  const Buffer& result = c.in_place ? x : out;
  const int64_t batches = c.layout == Layout::THD ? 1 : c.batch;
  const int64_t r = c.rotary_dim;
  Result res;
  for (int64_t b = 0; b < batches; ++b) {
    const int64_t cb = cos_batch == 1 ? 0 : b;
    for (int64_t t = 0; t < c.seq; ++t) {
      auto C = [&](int64_t j) { return cs.get((cb * rows + t) * r + j); };
      auto S = [&](int64_t j) { return sn.get((cb * rows + t) * r + j); };
      for (int64_t h = 0; h < c.heads; ++h) {
        auto X = [&](int64_t j) { return x_initial.get(gx.index(b, t, h, j)); };
        for (int64_t j = 0; j < c.dim; ++j) {
          const double got = result.get(go.index(b, t, h, j));
          double want = X(j);  // pass-through
          if (j < r) {
            int64_t p = 0;
            double sigma = 0.0;
            pairing(c.style, r, j, p, sigma);
            const bool fwd = c.direction == Direction::Forward;
            // forward: x c + sigma x[p] s[j];  backward: g c - sigma g[p] s[p]
            const double t_coef = fwd ? sigma * S(j) : -sigma * S(p);
            if (c.rounding == Rounding::Once) {
              want = X(j) * C(j) + X(p) * t_coef;
            } else {
              const float direct = round_to(c.dtype, static_cast<float>(X(j)) * static_cast<float>(C(j)));
              const float cross = round_to(c.dtype, static_cast<float>(X(p)) * static_cast<float>(t_coef));
              want = round_to(c.dtype, direct + cross);
            }
          }
          Buffer one{c.dtype};
          one.resize(1);
          one.set(0, want);
          const double want_stored = one.get(0);
          ++res.checked;
          if (got == want_stored || (std::isnan(got) && std::isnan(want_stored))) continue;
          // Once: a tie in the storage type can round either way between our float64 value and
          // the kernel's (both within a quarter ulp); allow one ulp there, nothing more.
          const double ulp = c.dtype == DType::F32 ? std::ldexp(1.0, std::ilogb(want_stored) - 23)
                             : c.dtype == DType::BF16 ? std::ldexp(1.0, std::ilogb(want_stored) - 7)
                                                      : std::ldexp(1.0, std::max(std::ilogb(want_stored), -14) - 10);
          if (c.rounding == Rounding::Once && std::abs(got - want_stored) <= ulp) {
            ++res.ulp_off;
            continue;
          }
          if (res.wrong++ == 0) {
            res.first_wrong = detail::concat("b", b, " t", t, " h", h, " j", j, ": got ", got, " want ", want_stored);
          }
        }
      }
    }
  }
  // Out of place: the padding between heads of the output is not written.
  if (!c.in_place && c.head_pad > 0) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t within = i % (c.dim + c.head_pad);
      if (within >= c.dim && out.get(i) != round_to(c.dtype, 1e4f)) {
        if (res.wrong++ == 0) res.first_wrong = "padding element " + std::to_string(i) + " was written";
      }
    }
  }
  return res;
}

TEST(ApplyCosSin, MatchesTheFormulaOnRandomConfigs) {
  std::mt19937_64 rng(20261122);
  const DType dtypes[] = {DType::F32, DType::BF16, DType::F16};
  const Layout layouts[] = {Layout::BSHD, Layout::BHSD, Layout::SBHD, Layout::THD};
  int64_t checked = 0, ulp_off = 0;
  for (int trial = 0; trial < 300; ++trial) {
    Case c;
    c.dtype = dtypes[rng() % 3];
    c.layout = layouts[rng() % 4];
    c.style = rng() % 2 ? Style::NeoX : Style::GPTJ;
    c.direction = rng() % 2 ? Direction::Forward : Direction::Backward;
    c.rounding = rng() % 2 ? Rounding::Once : Rounding::LikeTorch;
    c.batch = c.layout == Layout::THD ? 1 : 1 + static_cast<int64_t>(rng() % 3);
    c.seq = 1 + static_cast<int64_t>(rng() % 40);
    c.heads = 1 + static_cast<int64_t>(rng() % 5);
    c.dim = 2 * (1 + static_cast<int64_t>(rng() % 40));
    c.rotary_dim = 2 * (1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(c.dim / 2)));
    c.head_pad = rng() % 3 == 0 ? static_cast<int64_t>(rng() % 5) : 0;
    c.broadcast_batch = rng() % 2 == 0;
    c.in_place = rng() % 3 == 0;
    SCOPED_TRACE(c.describe());
    const Result r = run_case(c, 1000 + static_cast<uint64_t>(trial));
    EXPECT_EQ(r.wrong, 0) << r.first_wrong;
    checked += r.checked;
    ulp_off += r.ulp_off;
  }
  // Ties at the storage precision are rare: Once must be the correctly rounded value almost
  // everywhere (a systematic error would show up as a large count here).
  EXPECT_GT(checked, 100000);
  EXPECT_LT(ulp_off, checked / 1000) << ulp_off << " of " << checked << " one ulp off";
}

// Rounding::LikeTorch runs a Highway kernel (cos_sin_kernels-inl.h) wherever x, out, cos and sin
// share one storage type and the head is unit-stride: every compiled target this CPU supports,
// on random shapes (head widths whose halves fill whole vectors and leave tails, for every target's
// width), layouts, pairings, directions, head strides, cos/sin broadcast and in place, with
// ordinary and special values (ties, subnormals, underflow, overflow, signed zeros), must give
// the op-by-op float32 emulation's bits.
TEST(ApplyCosSin, LikeTorchIsBitExactOnEveryTarget) {
  const std::vector<std::string> targets = cpu_targets();
  ASSERT_FALSE(targets.empty());
  const DType dtypes[] = {DType::F32, DType::BF16, DType::F16};
  const Layout layouts[] = {Layout::BSHD, Layout::BHSD, Layout::SBHD, Layout::THD};
  for (const std::string& target : targets) {
    SCOPED_TRACE("target " + target);
    const test::ForcedTarget forced(target);
    ASSERT_EQ(current_cpu_target(), target);
    std::mt19937_64 rng(std::hash<std::string>{}(target));
    int64_t checked = 0;
    for (int trial = 0; trial < 120; ++trial) {
      Case c;
      c.dtype = dtypes[trial % 3];
      c.layout = layouts[rng() % 4];
      c.style = rng() % 2 ? Style::NeoX : Style::GPTJ;
      c.direction = rng() % 2 ? Direction::Forward : Direction::Backward;
      c.rounding = Rounding::LikeTorch;
      c.batch = c.layout == Layout::THD ? 1 : 1 + static_cast<int64_t>(rng() % 3);
      c.seq = 1 + static_cast<int64_t>(rng() % 40);
      c.heads = 1 + static_cast<int64_t>(rng() % 4);
      // Halves of 1..80 pairs: below, at and past 1, 2, 4 vectors of 4, 8 and 16 lanes.
      c.rotary_dim = 2 * (1 + static_cast<int64_t>(rng() % 80));
      c.dim = c.rotary_dim + (rng() % 2 ? 0 : 2 * static_cast<int64_t>(rng() % 8));
      c.head_pad = rng() % 3 == 0 ? static_cast<int64_t>(rng() % 5) : 0;
      c.broadcast_batch = rng() % 2 == 0;
      c.in_place = rng() % 3 == 0;
      c.special_values = trial % 2 == 0;
      SCOPED_TRACE(c.describe());
      const Result r = run_case(c, rng());
      EXPECT_EQ(r.wrong, 0) << r.first_wrong;
      checked += r.checked;
    }
    EXPECT_GT(checked, 100000);
  }
}

// Large enough to be split over threads (apply's pool), then the same call on one thread: the
// same bits, and under TSan (this test's name matches SANITIZE_TSAN_TESTS) no race.
TEST(ApplyCosSin, ThreadCountDoesNotChangeTheBits) {
  for (DType dtype : {DType::F32, DType::BF16}) {
    Case c;
    c.dtype = dtype;
    c.layout = Layout::BHSD;
    c.rounding = Rounding::LikeTorch;
    c.seq = 2048;
    c.heads = 8;
    c.dim = 64;
    c.rotary_dim = 64;
    const int64_t n = buffer_elements(c);
    Buffer x{dtype}, cs{dtype}, sn{dtype};
    x.resize(n);
    cs.resize(c.seq * c.rotary_dim);
    sn.resize(c.seq * c.rotary_dim);
    std::mt19937_64 rng(7);
    for (int64_t i = 0; i < n; ++i) x.set(i, random_value(rng));
    for (int64_t i = 0; i < c.seq * c.rotary_dim; ++i) {
      cs.set(i, std::cos(0.01 * static_cast<double>(i)));
      sn.set(i, std::sin(0.01 * static_cast<double>(i)));
    }
    const TensorView cos_view = contiguous_view(cs.data(), dtype, Layout::BSHD, {1, c.seq, 1, c.rotary_dim});
    const TensorView sin_view = contiguous_view(sn.data(), dtype, Layout::BSHD, {1, c.seq, 1, c.rotary_dim});
    std::vector<Buffer> outs;
    const int previous = num_threads();
    for (int threads : {1, 2, 3}) {
      set_num_threads(threads);
      Buffer out{dtype};
      out.resize(n);
      const Geometry gx = make_geometry(c, x.data());
      const Geometry go = make_geometry(c, out.data());
      apply_cos_sin(gx.view, go.view, cos_view, sin_view, {.rounding = Rounding::LikeTorch});
      outs.push_back(out);
    }
    set_num_threads(previous);
    EXPECT_EQ(outs[0].f32, outs[1].f32);
    EXPECT_EQ(outs[0].bits, outs[1].bits);
    EXPECT_EQ(outs[0].f32, outs[2].f32);
    EXPECT_EQ(outs[0].bits, outs[2].bits);
  }
}

// Concurrent callers share the pool: each gets its own right result.
TEST(ApplyCosSin, ConcurrentCallersGetTheirOwnResults) {
  Case c;
  c.layout = Layout::BSHD;
  c.seq = 1024;
  c.heads = 16;
  c.dim = 64;
  c.rotary_dim = 64;
  std::vector<std::thread> threads;
  std::vector<Result> results(4);
  for (size_t i = 0; i < results.size(); ++i) {
    threads.emplace_back([&, i] {
      Case mine = c;
      mine.rounding = i % 2 ? Rounding::Once : Rounding::LikeTorch;
      mine.style = i < 2 ? Style::NeoX : Style::GPTJ;
      results[i] = run_case(mine, 50 + i);
    });
  }
  for (std::thread& t : threads) t.join();
  for (const Result& r : results) EXPECT_EQ(r.wrong, 0) << r.first_wrong;
}

// Bad arguments: the message names the argument and the value, and nothing is written.
TEST(ApplyCosSin, RejectsBadArgumentsWithoutWriting) {
  std::vector<float> x(2 * 3 * 2 * 8, 0.5f), out(x.size(), 7.0f), cs(2 * 3 * 8, 1.0f), sn(cs.size(), 0.0f);
  const TensorView xv = contiguous_view(x.data(), DType::F32, Layout::BSHD, {2, 3, 2, 8});
  const TensorView ov = contiguous_view(out.data(), DType::F32, Layout::BSHD, {2, 3, 2, 8});
  auto expect_error = [&](const TensorView& xx, const TensorView& oo, const TensorView& cc, const TensorView& ss,
                          const std::string& needle) {
    try {
      apply_cos_sin(xx, oo, cc, ss);
      ADD_FAILURE() << "no error; expected one containing: " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    for (float v : out) ASSERT_EQ(v, 7.0f) << "output written before the error: " << needle;
  };
  const TensorView cv = contiguous_view(cs.data(), DType::F32, Layout::BSHD, {2, 3, 1, 8});
  const TensorView sv = contiguous_view(sn.data(), DType::F32, Layout::BSHD, {2, 3, 1, 8});
  expect_error(xv, ov, contiguous_view(cs.data(), DType::F32, Layout::BSHD, {2, 3, 1, 7}),
               contiguous_view(sn.data(), DType::F32, Layout::BSHD, {2, 3, 1, 7}), "must be even and >= 2 (got 7)");
  expect_error(xv, ov, contiguous_view(cs.data(), DType::F32, Layout::BSHD, {2, 4, 1, 8}), sv,
               "cos shape[1] must be x's seq 3");
  expect_error(xv, ov, contiguous_view(cs.data(), DType::F32, Layout::BSHD, {3, 3, 1, 8}), sv,
               "cos shape[0] must be x's batch 2 or 1");
  expect_error(xv, ov, cv, contiguous_view(sn.data(), DType::F32, Layout::BSHD, {2, 3, 1, 6}),
               "sin shape must equal cos shape");
  std::vector<float> wide(2 * 3 * 10, 1.0f);
  expect_error(xv, ov, contiguous_view(wide.data(), DType::F32, Layout::BSHD, {2, 3, 1, 10}),
               contiguous_view(wide.data(), DType::F32, Layout::BSHD, {2, 3, 1, 10}),
               "(rotary_dim) must be <= x's head_dim 8 (got 10)");
  TensorView partial = ov;  // overlaps x by half a tensor: partial overlap is an error
  partial.data = x.data() + 4;
  try {
    apply_cos_sin(xv, partial, cv, sv);
    ADD_FAILURE() << "partial overlap accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("overlap"), std::string::npos) << e.what();
  }
  for (float v : x) ASSERT_EQ(v, 0.5f);
}

}  // namespace
}  // namespace rotary
