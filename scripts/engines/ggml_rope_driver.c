/* scripts/engines/ggml_rope_driver.c: runs ggml's own CPU rope (ggml_rope_ext, mode 0) on unit
 * vectors and prints the cos / sin it applies, for ggml_rope_reference.py. Built against the ggml
 * of the llama-cpp-python sdist that script downloads; not part of rotary's build.
 *
 * stdin:  cases, each "n_dims n_ctx_orig freq_base freq_scale ext_factor attn_factor beta_fast
 *         beta_slow n_factors factors... n_positions positions..." (floats as C hex literals;
 *         attn_factor -1: llama_context's YaRN attention factor, computed here with logf).
 * stdout: per case, per position, per pair: "cos_bits sin_bits" (float32 bit patterns, hex).
 * A pair (x0, x1) = (1, 0) comes out as (cos, sin) exactly: x0*cos - x1*sin = cos, x0*sin + x1*cos = sin. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml.h"
#include "ggml-cpu.h"

int main(void) {
  int n_dims, n_ctx_orig, n_factors, n_positions;
  float base, freq_scale, ext_factor, attn_factor, beta_fast, beta_slow;
  while (scanf("%d %d %a %a %a %a %a %a %d", &n_dims, &n_ctx_orig, &base, &freq_scale, &ext_factor, &attn_factor,
               &beta_fast, &beta_slow, &n_factors) == 9) {
    float* factors = n_factors > 0 ? malloc(sizeof(float) * (size_t)n_factors) : NULL;
    if (attn_factor < 0.0f) {
      /* llama_context's YaRN attention factor (llama-context.cpp, llama_context::llama_context):
       * get_mscale(factor, 1), then divided by the mscale rope_yarn multiplies in again. */
      const float factor = 1.0f / freq_scale;
      attn_factor = factor <= 1.0f ? 1.0f : (0.1f * 1.0f * logf(factor) + 1.0f);
      attn_factor *= 1.0f / (1.0f + 0.1f * logf(factor));
    }
    for (int i = 0; i < n_factors; ++i) {
      if (scanf("%a", &factors[i]) != 1) return 2;
    }
    if (scanf("%d", &n_positions) != 1) return 2;
    struct ggml_init_params params = {(size_t)n_positions * (size_t)n_dims * 16 + (64 << 20), NULL, false};
    struct ggml_context* ctx = ggml_init(params);
    struct ggml_tensor* x = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, n_dims, 1, n_positions);
    struct ggml_tensor* pos = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, n_positions);
    for (int p = 0; p < n_positions; ++p) {
      long long value;
      if (scanf("%lld", &value) != 1) return 2;
      ((int32_t*)pos->data)[p] = (int32_t)value;
      float* row = (float*)x->data + (size_t)p * (size_t)n_dims;
      for (int i = 0; i < n_dims; ++i) row[i] = (i % 2 == 0) ? 1.0f : 0.0f;
    }
    struct ggml_tensor* ff = NULL;
    if (n_factors > 0) {
      ff = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, n_factors);
      memcpy(ff->data, factors, sizeof(float) * (size_t)n_factors);
    }
    struct ggml_tensor* out = ggml_rope_ext(ctx, x, pos, ff, n_dims, 0, n_ctx_orig, base, freq_scale, ext_factor,
                                            attn_factor, beta_fast, beta_slow);
    struct ggml_cgraph* graph = ggml_new_graph(ctx);
    ggml_build_forward_expand(graph, out);
    if (ggml_graph_compute_with_ctx(ctx, graph, 1) != GGML_STATUS_SUCCESS) return 3;
    for (int p = 0; p < n_positions; ++p) {
      const float* row = (const float*)out->data + (size_t)p * (size_t)n_dims;
      for (int i = 0; i < n_dims; i += 2) {
        uint32_t c, s;
        memcpy(&c, &row[i], 4);
        memcpy(&s, &row[i + 1], 4);
        printf("%08x %08x\n", c, s);
      }
    }
    ggml_free(ctx);
    free(factors);
  }
  return 0;
}
