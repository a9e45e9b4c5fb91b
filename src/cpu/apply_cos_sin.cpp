// src/cpu/apply_cos_sin.cpp: the explicit cos/sin form of the rotation (apply_cos_sin.hpp).
//
// Source of the formula: Hugging Face transformers, models/llama/modeling_llama.py,
// apply_rotary_pos_emb: q_embed = (q * cos) + (rotate_half(q) * sin), rotate_half(x) =
// cat(-x2, x1); the interleaved form is the pairwise rotation of GPT-J (modeling_gptj.py,
// rotate_every_two). Partial rotary as in modeling_phi3.py: the first cos.shape[-1] elements are
// rotated, the rest pass through.
//
// Rounding::LikeTorch (bit-identical to eager PyTorch) over tensors in cos/sin's own storage type
// with unit stride along the head runs the Highway kernel of cos_sin_kernels-inl.h (the
// Hugging Face drop-in's path); everything else (Once, float64, mixed dtypes, strided
// heads) runs plain loops that the compiler vectorizes (float32 math for LikeTorch, float64 for
// Once). Both are threaded over (batch, token) rows on apply()'s pool.
//
// Why float64 reproduces torch's float32 / bf16 / f16 rounding exactly: a product of two values
// of p-bit precision (p = 24, 8, 11) needs 2p <= 48 bits, so it is exact in double and rounding
// it once to the storage type is torch's own single rounding; for the sum, rounding to double
// first and then to the storage type equals rounding once, because 53 >= 2p + 2 (double
// rounding is innocuous for +, -, * at that margin: Figueroa, "When is double rounding
// innocuous?", SIGNUM 1995). torch's bf16 / f16 add rounds through float32 first, which is
// innocuous for the same reason (24 >= 2*11 + 2).
#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "rotary/apply_cos_sin.hpp"
#include "rotary/error.hpp"
#include "cpu/backends.hpp"
#include "cpu/cos_sin_kernels.hpp"
#include "cpu/kernels.hpp"
#include "cpu/storage.hpp"

namespace rotary {

std::string_view to_string(Rounding rounding) {
  switch (rounding) {
    case Rounding::Once: return "once";
    case Rounding::LikeTorch: return "like_torch";
  }
  return "unknown";
}

namespace {

// Storage access by type (src/cpu/storage.hpp): one instantiation of the row loop per storage
// dtype, so that the inner loops have no per-element switch.
using cpu::ElementStorage;

// The rotation as out[j] = x[j] c[j] + x[p(j)] t[j], one formula for both pairings and both
// directions: p(j) is j's partner, and t[j] = sigma(j) s[j] forward (rotate(x)[j] =
// sigma(j) x[p(j)]), -sigma(j) s[p(j)] backward (the transpose). Folding the sign into t changes
// no bit: negation is exact and round-to-nearest-even is symmetric.
struct RowPlan {
  int64_t rotary_dim = 0;
  std::vector<int64_t> sin_index;  // j forward, p(j) backward
  std::vector<double> sign;        // sigma(j) forward, -sigma(j) backward
  Style style = Style::NeoX;       // NeoX: p(j) = j +- R/2; GPT-J: p(2i) = 2i + 1
  Direction direction = Direction::Forward;
};

// The arithmetic type of a mode: LikeTorch computes in float32 as torch does for float32, bf16
// and f16 storage (products of two stored values are exact in float32 for bf16 / f16; each op
// rounds to the storage type); Once computes in double and rounds once on store.
template <DType D, bool LikeTorch>
using Math = std::conditional_t<LikeTorch && D != DType::F64, float, double>;

// The row loop below is compiled for AVX-512 and AVX2 as well and picked by the CPU at load time
// (GCC function multiversioning): the three bf16 / f16 roundings per element of LikeTorch mode
// are a dozen integer operations each, which 4-wide SSE2 made the bottleneck. Not with clang (the
// fuzz build: clang 14 rejects target_clones with noinline) nor under ThreadSanitizer (its
// instrumented ifunc resolver runs before the TSan runtime is up); the default code serves there.
#if defined(__x86_64__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define ROTARY_ROW_CLONES __attribute__((target_clones("avx512f", "avx2", "default"), noinline))
#else
#define ROTARY_ROW_CLONES
#endif

// One head (or half of one), from h (the head in Math precision) and hp (its partners) into
// unit-stride out.
template <DType D, bool LikeTorch>
ROTARY_ROW_CLONES void rotate_head(int64_t r, const Math<D, LikeTorch>* __restrict h,
                                   const Math<D, LikeTorch>* __restrict hp, const Math<D, LikeTorch>* __restrict c,
                                   const Math<D, LikeTorch>* __restrict t,
                                   typename ElementStorage<D>::Bits* __restrict out) {
  using S = ElementStorage<D>;
  if constexpr (LikeTorch && D != DType::F64) {
    // torch: round(round(x * cos) + round(rotate_half(x) * sin)), each op in the storage type.
    for (int64_t j = 0; j < r; ++j) out[j] = S::store_rounded(S::round(S::round(h[j] * c[j]) + S::round(hp[j] * t[j])));
  } else {
    for (int64_t j = 0; j < r; ++j) out[j] = S::store(h[j] * c[j] + hp[j] * t[j]);
  }
}

// A unit-stride head of storage type D widened to M (f16's decoding vectorizes too).
template <DType D, typename M>
ROTARY_ROW_CLONES void load_head(const typename ElementStorage<D>::Bits* __restrict src, M* __restrict h, int64_t n) {
  for (int64_t j = 0; j < n; ++j) h[j] = static_cast<M>(ElementStorage<D>::load(src[j]));
}

// The same into out with any element stride.
template <DType D, bool LikeTorch>
void rotate_head(int64_t r, const Math<D, LikeTorch>* __restrict h, const Math<D, LikeTorch>* __restrict hp,
                 const Math<D, LikeTorch>* __restrict c, const Math<D, LikeTorch>* __restrict t,
                 typename ElementStorage<D>::Bits* __restrict out, int64_t out_stride) {
  using S = ElementStorage<D>;
  if (out_stride == 1) {  // the common case, as its own loop so that it vectorizes
    rotate_head<D, LikeTorch>(r, h, hp, c, t, out);
    return;
  }
  if constexpr (LikeTorch && D != DType::F64) {
    // torch: round(round(x * cos) + round(rotate_half(x) * sin)), each op in the storage type.
    for (int64_t j = 0; j < r; ++j) {
      out[j * out_stride] = S::store_rounded(S::round(S::round(h[j] * c[j]) + S::round(hp[j] * t[j])));
    }
  } else {
    for (int64_t j = 0; j < r; ++j) out[j * out_stride] = S::store(h[j] * c[j] + hp[j] * t[j]);
  }
}

template <DType D, bool LikeTorch>
void rotate_all(const TensorView& x, const TensorView& out, const TensorView& cos, const TensorView& sin,
                const RowPlan& plan) {
  using Bits = typename ElementStorage<D>::Bits;
  using M = Math<D, LikeTorch>;
  const NamedAxes in = named_axes(x);
  const NamedAxes to = named_axes(out);
  const int64_t r = plan.rotary_dim;
  const int64_t cos_batch_stride = cos.shape[0] == 1 ? 0 : cos.stride_elems[0];
  const int64_t sin_batch_stride = sin.shape[0] == 1 ? 0 : sin.stride_elems[0];
  auto* out_data = static_cast<Bits*>(out.data);
  const bool direct_load = x.dtype == D && in.stride_dim == 1;

  // Rows are (batch, token) pairs; each thread takes a contiguous range of them and works through
  // it in tiles of kTile rows: the tile's cos and t rows are converted once, then its heads are
  // visited in memory order. Head-major tensors (BHSD, Hugging Face's q.transpose(1, 2) made
  // contiguous) go head by head over the tile's tokens, so that each head's rows are one
  // contiguous stream; token-major ones (BSHD, SBHD, THD) go token by token.
  constexpr int64_t kTile = 32;
  const bool head_major = in.stride_heads > in.stride_seq;
  auto rotate_rows = [&](int64_t first, int64_t last) {
    const auto width = static_cast<size_t>(r);
    std::vector<M> c(kTile * width), t(kTile * width);
    std::vector<double> s_row(width);
    std::vector<M> h(static_cast<size_t>(in.dim)), hp(width);
    auto rotate_one = [&](int64_t row, int64_t head, const M* c_row, const M* t_row) {
      const int64_t b = row / in.seq;
      const int64_t tok = row % in.seq;
      const int64_t in_base = b * in.stride_batch + tok * in.stride_seq + head * in.stride_heads;
      const int64_t out_base = b * to.stride_batch + tok * to.stride_seq + head * to.stride_heads;
      // The whole head is read before any of it is written: in place is safe.
      if (direct_load) {
        load_head<D, M>(static_cast<const Bits*>(x.data) + in_base, h.data(), in.dim);
      } else {
        for (int64_t j = 0; j < in.dim; ++j) {
          h[static_cast<size_t>(j)] = static_cast<M>(cpu::load_element(x.data, x.dtype, in_base + j * in.stride_dim));
        }
      }
      // The partners: for NeoX the other half, so each half is one contiguous call; for GPT-J
      // the pair-swapped head.
      Bits* dest = out_data + out_base;
      const int64_t stride = to.stride_dim;
      if (plan.style == Style::NeoX) {
        const int64_t half = r / 2;
        rotate_head<D, LikeTorch>(half, h.data(), h.data() + half, c_row, t_row, dest, stride);
        rotate_head<D, LikeTorch>(half, h.data() + half, h.data(), c_row + half, t_row + half, dest + half * stride,
                                  stride);
      } else {
        for (size_t u = 0; u < width; u += 2) {
          hp[u] = h[u + 1];
          hp[u + 1] = h[u];
        }
        rotate_head<D, LikeTorch>(r, h.data(), hp.data(), c_row, t_row, dest, stride);
      }
      if (out.data != x.data || to.stride_dim != in.stride_dim || out_base != in_base) {
        for (int64_t j = r; j < in.dim; ++j) {
          out_data[out_base + j * to.stride_dim] = ElementStorage<D>::store(h[static_cast<size_t>(j)]);
        }
      }
    };
    for (int64_t tile = first; tile < last; tile += kTile) {
      const int64_t tile_rows = std::min(kTile, last - tile);
      for (int64_t i = 0; i < tile_rows; ++i) {
        const int64_t b = (tile + i) / in.seq;
        const int64_t tok = (tile + i) % in.seq;
        M* c_row = c.data() + static_cast<size_t>(i) * width;
        M* t_row = t.data() + static_cast<size_t>(i) * width;
        for (int64_t j = 0; j < r; ++j) {
          c_row[j] = static_cast<M>(cpu::load_element(
              cos.data, cos.dtype, b * cos_batch_stride + tok * cos.stride_elems[1] + j * cos.stride_elems[3]));
          s_row[static_cast<size_t>(j)] = cpu::load_element(
              sin.data, sin.dtype, b * sin_batch_stride + tok * sin.stride_elems[1] + j * sin.stride_elems[3]);
        }
        for (size_t u = 0; u < width; ++u) {
          t_row[u] = static_cast<M>(plan.sign[u] * s_row[static_cast<size_t>(plan.sin_index[u])]);
        }
      }
      auto tile_row = [&](int64_t i) { return static_cast<size_t>(i) * width; };
      if (head_major) {
        for (int64_t head = 0; head < in.heads; ++head) {
          for (int64_t i = 0; i < tile_rows; ++i) rotate_one(tile + i, head, &c[tile_row(i)], &t[tile_row(i)]);
        }
      } else {
        for (int64_t i = 0; i < tile_rows; ++i) {
          for (int64_t head = 0; head < in.heads; ++head) rotate_one(tile + i, head, &c[tile_row(i)], &t[tile_row(i)]);
        }
      }
    }
  };
  const int64_t rows = in.batch * in.seq;
  cpu::parallel_rows(rows, rows * in.heads * in.dim, rotate_rows);
}

// Rounding::LikeTorch where the SIMD kernel (cos_sin_kernels.hpp) reads x, out, cos and sin in
// their own storage type D with unit stride along the head: the common case of the Hugging Face
// drop-in. Each thread's rows go to the kernel in blocks of one sequence's consecutive tokens,
// whose cos and sin rows it widens to float32 once. Head-major tensors (BHSD, Hugging Face's
// q.transpose(1, 2) made contiguous) are visited head by head within a block, so that each head's
// tokens are one contiguous stream for the prefetchers, with blocks small enough that their
// widened rows, read again for every head, stay in L2 (kBlockBytes). Token-major ones (BSHD,
// SBHD, THD) go token by token, all heads of a token sharing its rows.
constexpr int64_t kBlockBytes = int64_t{256} << 10;

template <DType D>
void rotate_all_simd(const TensorView& x, const TensorView& out, const TensorView& cos, const TensorView& sin,
                     Style style, Direction direction) {
  using Bits = typename ElementStorage<D>::Bits;
  const NamedAxes in = named_axes(x);
  const NamedAxes to = named_axes(out);
  const int64_t r = cos.shape[3];
  const int64_t cos_batch_stride = cos.shape[0] == 1 ? 0 : cos.stride_elems[0];
  const int64_t sin_batch_stride = sin.shape[0] == 1 ? 0 : sin.stride_elems[0];
  const bool head_major = in.stride_heads > in.stride_seq;
  const int64_t block_tokens = std::max<int64_t>(1, kBlockBytes / (2 * r * static_cast<int64_t>(sizeof(float))));
  cpu::CosSinBlockArgs base;
  base.in_token_stride = in.stride_seq;
  base.out_token_stride = to.stride_seq;
  base.cos_token_stride = cos.stride_elems[1];
  base.sin_token_stride = sin.stride_elems[1];
  base.heads = in.heads;
  base.in_head_stride = in.stride_heads;
  base.out_head_stride = to.stride_heads;
  base.head_dim = in.dim;
  base.rotary_dim = r;
  base.style = style;
  base.backward = direction == Direction::Backward;
  base.heads_outer = head_major;
  auto rotate_rows = [&](int64_t first, int64_t last) {
    std::vector<float> rows(static_cast<size_t>(2 * std::min(block_tokens, last - first) * r));
    for (int64_t row = first; row < last;) {
      const int64_t b = row / in.seq;
      const int64_t tok = row % in.seq;
      const int64_t tokens = std::min({last - row, in.seq - tok, block_tokens});
      cpu::CosSinBlockArgs args = base;
      args.in = static_cast<const Bits*>(x.data) + b * in.stride_batch + tok * in.stride_seq;
      args.out = static_cast<Bits*>(out.data) + b * to.stride_batch + tok * to.stride_seq;
      args.cos = static_cast<const Bits*>(cos.data) + b * cos_batch_stride + tok * cos.stride_elems[1];
      args.sin = static_cast<const Bits*>(sin.data) + b * sin_batch_stride + tok * sin.stride_elems[1];
      args.tokens = tokens;
      args.rows = rows.data();
      cpu::rotate_cos_sin_like_torch(D, args);
      row += tokens;
    }
  };
  const int64_t rows = in.batch * in.seq;
  cpu::parallel_rows(rows, rows * in.heads * in.dim, rotate_rows);
}

template <DType D>
void rotate_all(const TensorView& x, const TensorView& out, const TensorView& cos, const TensorView& sin,
                const RowPlan& plan, Rounding rounding) {
  if constexpr (D != DType::F64) {
    if (rounding == Rounding::LikeTorch && x.dtype == D && cos.dtype == D && sin.dtype == D &&
        named_axes(x).stride_dim == 1 && named_axes(out).stride_dim == 1 && cos.stride_elems[3] == 1 &&
        sin.stride_elems[3] == 1) {
      rotate_all_simd<D>(x, out, cos, sin, plan.style, plan.direction);
      return;
    }
  }
  if (rounding == Rounding::LikeTorch) {
    rotate_all<D, true>(x, out, cos, sin, plan);
  } else {
    rotate_all<D, false>(x, out, cos, sin, plan);
  }
}

}  // namespace

void apply_cos_sin(const TensorView& x, const TensorView& out, const TensorView& cos, const TensorView& sin,
                   const CosSinOptions& options) {
  const Style style = options.style;
  const Direction direction = options.direction;
  const Rounding rounding = options.rounding;
  const char* name = options.name != nullptr ? options.name : "x";
  if (style != Style::NeoX && style != Style::GPTJ) {
    throw Error(detail::concat("apply: style must be neox or gptj (got enum value ", static_cast<int>(style), ")"));
  }
  if (direction != Direction::Forward && direction != Direction::Backward) {
    throw Error(detail::concat("apply: direction must be forward or backward (got enum value ",
                               static_cast<int>(direction), ")"));
  }
  if (rounding != Rounding::Once && rounding != Rounding::LikeTorch) {
    throw Error(detail::concat("apply: rounding must be once or like_torch (got enum value ",
                               static_cast<int>(rounding), ")"));
  }
  check_cos_sin_arguments(x, out, cos, sin, name);
  backends::backend_for(backends::rotate_backends(), x.device, "apply", name).apply_cos_sin(x, out, cos, sin, options);
}

namespace cpu {

// The CPU backend's apply_cos_sin (src/cpu/backends.hpp): a checked call.
void apply_cos_sin_checked(const TensorView& x, const TensorView& out, const TensorView& cos, const TensorView& sin,
                           const CosSinOptions& options) {
  const Style style = options.style;
  const Direction direction = options.direction;
  const Rounding rounding = options.rounding;
  const NamedAxes in = named_axes(x);
  if (in.batch == 0 || in.seq == 0 || in.heads == 0 || in.dim == 0) return;
  RowPlan plan;
  plan.rotary_dim = cos.shape[3];
  const bool backward = direction == Direction::Backward;
  plan.style = style;
  plan.direction = direction;
  const int64_t half = plan.rotary_dim / 2;
  for (int64_t j = 0; j < plan.rotary_dim; ++j) {
    const bool first = style == Style::NeoX ? j < half : j % 2 == 0;
    const int64_t partner = style == Style::NeoX ? (first ? j + half : j - half) : (first ? j + 1 : j - 1);
    const double sigma = first ? -1.0 : 1.0;
    plan.sin_index.push_back(backward ? partner : j);
    plan.sign.push_back(backward ? -sigma : sigma);
  }
  switch (out.dtype) {
    case DType::F32: rotate_all<DType::F32>(x, out, cos, sin, plan, rounding); break;
    case DType::BF16: rotate_all<DType::BF16>(x, out, cos, sin, plan, rounding); break;
    case DType::F16: rotate_all<DType::F16>(x, out, cos, sin, plan, rounding); break;
    case DType::F64: rotate_all<DType::F64>(x, out, cos, sin, plan, rounding); break;
  }
}

}  // namespace cpu
}  // namespace rotary
