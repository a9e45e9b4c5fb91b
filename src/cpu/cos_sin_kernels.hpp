// src/cpu/cos_sin_kernels.hpp: the SIMD kernel of apply_cos_sin's Rounding::LikeTorch (internal to
// rotary_cpu; Highway stays in cos_sin_kernels-inl.h, so no other file needs its headers).
//
// A block of tokens x heads of one tensor, rotated as eager torch evaluates Hugging Face's
// x * cos + rotate(x) * sin (apply_cos_sin.cpp cites the source): every operation in float32 and
// each result rounded to the storage type (nearest even; nothing to round for float32):
//   NeoX forward,  pair (a, b) = (x[i], x[i + R/2]):  a' = R(a c[i]) - R(b s[i]),
//                                                     b' = R(b c[i + R/2]) + R(a s[i + R/2])
//   NeoX backward (the transpose):                    a' = R(a c[i]) + R(b s[i + R/2]),
//                                                     b' = R(b c[i + R/2]) - R(a s[i])
//   GPT-J, pair (a, b) = (x[2i], x[2i + 1]), c, s likewise split into even and odd entries: the same
//   with (c[i], c[i + R/2]) -> (c_even, c_odd) and (s[i], s[i + R/2]) -> (s_even, s_odd);
// and the sum's rounding on store. rotate(x)'s sign is the subtraction: torch's (-x2) * s rounds
// to exactly -(x2 * s), and u + (-v) is u - v bit for bit. Compiled once per Highway target and
// picked at run time, as the rotate kernels (kernels.hpp), so force_cpu_target() narrows it too.
#pragma once

#include <cstdint>

#include "rotary/spec.hpp"
#include "rotary/tensor.hpp"

namespace rotary::cpu {

// The caller (apply_cos_sin.cpp) guarantees: in, out, cos and sin share one storage dtype (F32,
// BF16 or F16) and have unit stride along the head dim; out == in (in place) or no overlap;
// rotary_dim even and <= head_dim; every element addressed below lies inside its tensor (the
// checks of check_cos_sin_arguments). Element e of head h of token n is at
// in + n * in_token_stride + h * in_head_stride + e, likewise out; cos and sin row n at
// cos + n * cos_token_stride (the heads share it).
struct CosSinBlockArgs {
  const void* in = nullptr;
  void* out = nullptr;
  const void* cos = nullptr;
  const void* sin = nullptr;
  int64_t tokens = 0;
  int64_t in_token_stride = 0;  // elements, as every stride here
  int64_t out_token_stride = 0;
  int64_t cos_token_stride = 0;
  int64_t sin_token_stride = 0;
  int64_t heads = 0;
  int64_t in_head_stride = 0;
  int64_t out_head_stride = 0;
  int64_t head_dim = 0;
  int64_t rotary_dim = 0;
  Style style = Style::NeoX;
  bool backward = false;
  bool heads_outer = false;  // visit head by head (each head's tokens one stream: head-major tensors)
  // 2 * tokens * rotary_dim floats: the block's cos and sin rows widened once (GPT-J's split into
  // even and odd entries), so that the heads read float32 rows without converting them again.
  float* rows = nullptr;
};

void rotate_cos_sin_like_torch(DType dtype, const CosSinBlockArgs& args);

}  // namespace rotary::cpu
