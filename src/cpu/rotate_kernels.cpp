// src/cpu/rotate_kernels.cpp: the kernels' entry points that need no SIMD: the dispatch of a
// token to the kernels of its storage type (rotate_kernels_f32.cpp, _bf16.cpp, _f16.cpp, all
// built from rotate_kernels-inl.h) and the fence for streamed stores.
#include "hwy/cache_control.h"
#include "cpu/kernels.hpp"

namespace rotary::cpu {

void flush_streamed_stores() { hwy::FlushStream(); }

void rotate_token(DType dtype, const HeadsArgs& q, const HeadsArgs* k) {
  switch (dtype) {
    case DType::F32: rotate_token_f32(q, k); return;
    case DType::BF16: rotate_token_bf16(q, k); return;
    case DType::F16: rotate_token_f16(q, k); return;
    case DType::F64: break;  // never called: apply.cpp rotates float64 through rotate_gathered
  }
}

}  // namespace rotary::cpu
