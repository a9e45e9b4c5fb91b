// include/rotary/apply_cos_sin.hpp: rotating by explicit cos/sin tensors, Hugging Face's
// apply_rotary_pos_emb(q, k, cos, sin) as a kernel.
//
// apply() (apply.hpp) takes a CosSinTable and positions. Code that already holds cos and sin
// tensors (every Hugging Face model: its rotary-embedding module returns them, and the attention
// layer calls apply_rotary_pos_emb) needs the other form: the elementwise formula
//
//   forward:   out = x * cos + rotate(x) * sin
//   backward:  out = g * cos + rotate^T(g * sin)        (the gradient of forward with respect to x)
//
// over the first R = cos.shape[3] elements of each head (the rest are copied: HF's partial
// rotary, q_rot / q_pass), where rotate is rotate_half for Style::NeoX (rotate(x)[j] = -x[j+R/2]
// for j < R/2, x[j-R/2] otherwise) and the pairwise rotation for Style::GPTJ (rotate(x)[2i] =
// -x[2i+1], rotate(x)[2i+1] = x[2i]). cos and sin are read per element, so this is exactly the
// formula for any cos/sin, not only tables whose two halves repeat.
//
// Rounding:
//   Once:       float64 math from the stored values, one round-to-nearest-even on store: the
//               most exact result of the formula for the given cos/sin.
//   LikeTorch:  the arithmetic of eager PyTorch running HF's expression in x's dtype: each of
//               x*cos, rotate(x)*sin and their sum is rounded to x's dtype (no fused multiply-add),
//               as torch's CPU kernels do (bf16/f16 operands are widened to float32, the product
//               of two bf16 or two f16 is exact in float32, the result rounded once). Backward
//               rounds g*cos and g*sin, then their sum, as autograd accumulates them. In this
//               mode the result is bit-identical to Hugging Face's eager code (tests/python).
#pragma once

#include "rotary/apply.hpp"
#include "rotary/spec.hpp"
#include "rotary/tensor.hpp"

namespace rotary {

enum class Rounding { Once, LikeTorch };
std::string_view to_string(Rounding rounding);  // "once", "like_torch"

// x and out: one tensor (q or k) in any layout, out == x for in place (exact alias only).
// cos and sin: layout BSHD, shape (batch or 1, seq, 1, R) against x's named axes (THD: batch 1,
// seq = tokens); any strides >= 0 (0 broadcasts); any storage dtype. R must be even, >= 2 and
// <= head_dim. Errors name the argument (`name` for x, name + "_out" for out, "cos", "sin") and
// the value; nothing is written when a check fails.
void check_cos_sin_arguments(const TensorView& x, const TensorView& out, const TensorView& cos,
                             const TensorView& sin, const char* name = "x");

struct CosSinOptions {
  Style style = Style::NeoX;  // how rotate() pairs elements: rotate_half (NeoX) or interleaved (GPT-J)
  Direction direction = Direction::Forward;
  Rounding rounding = Rounding::Once;
  const char* name = "x";  // what errors call x ("q", "k"); out is name + "_out"
};

void apply_cos_sin(const TensorView& x, const TensorView& out, const TensorView& cos, const TensorView& sin,
                   const CosSinOptions& options = {});

}  // namespace rotary
