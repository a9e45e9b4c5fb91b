// src/cpu/apply_cos_sin.cpp: the explicit cos/sin form of the rotation (apply_cos_sin.hpp).
//
// Source of the formula: Hugging Face transformers, models/llama/modeling_llama.py,
// apply_rotary_pos_emb: q_embed = (q * cos) + (rotate_half(q) * sin), rotate_half(x) =
// cat(-x2, x1); the interleaved form is the pairwise rotation of GPT-J (modeling_gptj.py,
// rotate_every_two). Partial rotary as in modeling_phi3.py: the first cos.shape[-1] elements are
// rotated, the rest pass through.
//
// A plain loop, float64 inside: this path exists for drop-in exactness (Rounding::LikeTorch is
// bit-identical to eager PyTorch), not for speed; apply() is the fast path.
//
// Why float64 reproduces torch's float32 / bf16 / f16 rounding exactly: a product of two values
// of p-bit precision (p = 24, 8, 11) needs 2p <= 48 bits, so it is exact in double and rounding
// it once to the storage type is torch's own single rounding; for the sum, rounding to double
// first and then to the storage type equals rounding once, because 53 >= 2p + 2 (double
// rounding is innocuous for +, -, * at that margin: Figueroa, "When is double rounding
// innocuous?", SIGNUM 1995). torch's bf16 / f16 add rounds through float32 first, which is
// innocuous for the same reason (24 >= 2*11 + 2).
#include <bit>
#include <cstdint>
#include <string>
#include <vector>

#include "rotary/apply_cos_sin.hpp"
#include "rotary/error.hpp"

namespace rotary {

std::string_view to_string(Rounding rounding) {
  switch (rounding) {
    case Rounding::Once: return "once";
    case Rounding::LikeTorch: return "like_torch";
  }
  return "unknown";
}

namespace {

// Storage access by type: one instantiation of the row loop per storage dtype, so that the inner
// loops have no per-element switch.
template <DType D> struct Storage;
template <> struct Storage<DType::F32> {
  using Bits = float;
  static float load(float v) { return v; }
  static float store(double v) { return static_cast<float>(v); }
  static float round(float v) { return v; }
  static float store_rounded(float v) { return v; }
};
// bf16 is the common case of the drop-in: its conversions are inlined here (the library's are
// out of line). Round to nearest even on the bits, NaN kept a quiet NaN: c10::BFloat16's rule.
inline uint16_t bf16_bits(float value) {
  const auto bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}
inline float bf16_value(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

template <> struct Storage<DType::BF16> {
  using Bits = uint16_t;
  static float load(uint16_t v) { return bf16_value(v); }
  static uint16_t store(double v) { return double_to_bf16(v); }
  static float round(float v) { return bf16_value(bf16_bits(v)); }
  static uint16_t store_rounded(float v) { return bf16_bits(v); }  // v already representable
};
template <> struct Storage<DType::F16> {
  using Bits = uint16_t;
  static float load(uint16_t v) { return f16_to_float(v); }
  static uint16_t store(double v) { return double_to_f16(v); }
  static float round(float v) { return f16_to_float(float_to_f16(v)); }
  static uint16_t store_rounded(float v) { return float_to_f16(v); }
};
template <> struct Storage<DType::F64> {
  using Bits = double;
  static double load(double v) { return v; }
  static double store(double v) { return v; }
  static double round(double v) { return v; }
};

double load_any(const void* data, DType dtype, int64_t offset) {
  switch (dtype) {
    case DType::F32: return static_cast<const float*>(data)[offset];
    case DType::BF16: return bf16_to_float(static_cast<const uint16_t*>(data)[offset]);
    case DType::F16: return f16_to_float(static_cast<const uint16_t*>(data)[offset]);
    case DType::F64: return static_cast<const double*>(data)[offset];
  }
  return 0.0;  // unreachable: checked
}

struct RowPlan {
  int64_t rotary_dim = 0;
  int64_t head_dim = 0;
  std::vector<int64_t> partner;  // p(j)
  std::vector<double> sign;      // sigma(j): rotate(x)[j] = sigma(j) x[p(j)]
  bool backward = false;
};

// One head: x (input dtype D_in, any dim stride) -> out (D). LikeTorch: float math for float32 /
// bf16 / f16 storage is torch's own arithmetic (products of two stored values are exact in
// float32 for bf16 / f16; each op rounds to the storage type); Once: double math, one rounding.
template <DType D, bool LikeTorch>
void rotate_head(const RowPlan& plan, const double* c, const double* s, const float* cf, const float* sf,
                 const double* head, typename Storage<D>::Bits* out, int64_t out_stride) {
  using S = Storage<D>;
  const int64_t r = plan.rotary_dim;
  for (int64_t j = 0; j < r; ++j) {
    const size_t u = static_cast<size_t>(j);
    const size_t p = static_cast<size_t>(plan.partner[u]);
    // forward:  x[j] c[j] + sigma(j) x[p] s[j];   backward: g[j] c[j] - sigma(j) g[p] s[p]
    const size_t sin_index = plan.backward ? p : u;
    const double sign = plan.backward ? -plan.sign[u] : plan.sign[u];
    if constexpr (LikeTorch && D != DType::F64) {
      const float direct = S::round(static_cast<float>(head[u]) * cf[u]);
      const float cross = static_cast<float>(sign) * S::round(static_cast<float>(head[p]) * sf[sin_index]);
      out[j * out_stride] = S::store_rounded(S::round(direct + cross));
    } else {
      out[j * out_stride] = S::store(head[u] * c[u] + sign * head[p] * s[sin_index]);
    }
  }
}

template <DType D, bool LikeTorch>
void rotate_all(const TensorView& x, const TensorView& out, const TensorView& cos, const TensorView& sin,
                const RowPlan& plan) {
  using Bits = typename Storage<D>::Bits;
  const NamedAxes in = named_axes(x);
  const NamedAxes to = named_axes(out);
  const int64_t r = plan.rotary_dim;
  const int64_t cos_batch_stride = cos.shape[0] == 1 ? 0 : cos.stride_elems[0];
  const int64_t sin_batch_stride = sin.shape[0] == 1 ? 0 : sin.stride_elems[0];
  std::vector<double> c(static_cast<size_t>(r)), s(static_cast<size_t>(r));
  std::vector<float> cf(static_cast<size_t>(r)), sf(static_cast<size_t>(r));
  std::vector<double> head(static_cast<size_t>(in.dim));
  auto* out_data = static_cast<Bits*>(out.data);
  for (int64_t b = 0; b < in.batch; ++b) {
    for (int64_t t = 0; t < in.seq; ++t) {
      for (int64_t j = 0; j < r; ++j) {
        const size_t u = static_cast<size_t>(j);
        c[u] = load_any(cos.data, cos.dtype, b * cos_batch_stride + t * cos.stride_elems[1] + j * cos.stride_elems[3]);
        s[u] = load_any(sin.data, sin.dtype, b * sin_batch_stride + t * sin.stride_elems[1] + j * sin.stride_elems[3]);
        cf[u] = static_cast<float>(c[u]);
        sf[u] = static_cast<float>(s[u]);
      }
      for (int64_t h = 0; h < in.heads; ++h) {
        const int64_t in_base = b * in.stride_batch + t * in.stride_seq + h * in.stride_heads;
        const int64_t out_base = b * to.stride_batch + t * to.stride_seq + h * to.stride_heads;
        // The whole head is read before any of it is written: in place is safe.
        if (x.dtype == D) {
          const auto* row = static_cast<const Bits*>(x.data) + in_base;
          for (int64_t j = 0; j < in.dim; ++j) {
            head[static_cast<size_t>(j)] = Storage<D>::load(row[j * in.stride_dim]);
          }
        } else {
          for (int64_t j = 0; j < in.dim; ++j) {
            head[static_cast<size_t>(j)] = load_any(x.data, x.dtype, in_base + j * in.stride_dim);
          }
        }
        rotate_head<D, LikeTorch>(plan, c.data(), s.data(), cf.data(), sf.data(), head.data(), out_data + out_base,
                                  to.stride_dim);
        if (out.data != x.data || to.stride_dim != in.stride_dim || out_base != in_base) {
          for (int64_t j = r; j < in.dim; ++j) {
            out_data[out_base + j * to.stride_dim] = Storage<D>::store(head[static_cast<size_t>(j)]);
          }
        }
      }
    }
  }
}

template <DType D>
void rotate_all(const TensorView& x, const TensorView& out, const TensorView& cos, const TensorView& sin,
                const RowPlan& plan, Rounding rounding) {
  if (rounding == Rounding::LikeTorch) {
    rotate_all<D, true>(x, out, cos, sin, plan);
  } else {
    rotate_all<D, false>(x, out, cos, sin, plan);
  }
}

}  // namespace

void apply_cos_sin(const TensorView& x, const TensorView& out, const TensorView& cos, const TensorView& sin,
                   Style style, Direction direction, Rounding rounding, const char* name) {
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

  const NamedAxes in = named_axes(x);
  if (in.batch == 0 || in.seq == 0 || in.heads == 0 || in.dim == 0) return;
  RowPlan plan;
  plan.rotary_dim = cos.shape[3];
  plan.head_dim = in.dim;
  plan.backward = direction == Direction::Backward;
  const int64_t half = plan.rotary_dim / 2;
  for (int64_t j = 0; j < plan.rotary_dim; ++j) {
    const bool first = style == Style::NeoX ? j < half : j % 2 == 0;
    plan.partner.push_back(style == Style::NeoX ? (first ? j + half : j - half) : (first ? j + 1 : j - 1));
    plan.sign.push_back(first ? -1.0 : 1.0);
  }
  switch (out.dtype) {
    case DType::F32: rotate_all<DType::F32>(x, out, cos, sin, plan, rounding); break;
    case DType::BF16: rotate_all<DType::BF16>(x, out, cos, sin, plan, rounding); break;
    case DType::F16: rotate_all<DType::F16>(x, out, cos, sin, plan, rounding); break;
    case DType::F64: rotate_all<DType::F64>(x, out, cos, sin, plan, rounding); break;
  }
}

}  // namespace rotary
