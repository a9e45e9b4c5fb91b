// src/core/engines/vllm.cpp: vLLM's RoPE, as a table (Precision::Vllm: its cache's rows, dtype
// and positions) and as an export (cos_sin_cache in its layout).
//
// Sources, read at these versions (docs/interop.md quotes them):
//   vllm/model_executor/layers/rotary_embedding/base.py (commit 04458da):
//     RotaryEmbedding._compute_cos_sin_cache: freqs = einsum("i,j->ij", t, inv_freq);
//     cache = cat((freqs.cos(), freqs.sin()), dim=-1); then cache.to(dtype) in __init__.
//   The rows (t = arange(n), n = ceil of a float length) per class: get_rope in __init__.py
//   (commit 07b12f1) passes the config's max_position_embeddings, except original_max_position
//   for yarn and deepseek_yarn; base.py and llama3_rope.py (045d757) build that many rows;
//   linear_scaling_rope.py (0f17ee0) and dynamic_ntk_scaling_rope.py (3cfbaf3) that times the
//   factor; yarn_scaling_rope.py (0cd5784) and deepseek_scaling_rope.py (00d678e) the original
//   context times the factor; mrope.py (055e47c) 4 x max_position_embeddings;
//   phi3_long_rope_scaled_rope.py (17d618b) cat(short cache over original rows, long cache over
//   max_position_embeddings rows) as long_short_cos_sin_cache.
#include <cmath>

#include "core/engines/engine_support.hpp"
#include "core/scaling/registry.hpp"
#include "core/scaling/scheme_support.hpp"
#include "core/table_internal.hpp"
#include "rotary/engine_export.hpp"
#include "rotary/error.hpp"
#include "rotary/table.hpp"

namespace rotary {

// vLLM's cache: which schemes its classes build one static cache for, and its length: the rows
// vllm_cache_rows() counts (engine_export.hpp), so that `rotary table --precision vllm`,
// `rotary diverge` and `rotary export --format vllm` serve the same rows.
void CosSinTable::init_vllm() {
  const RopeSpec& spec = spec_;
  engines::check_engine_geometry(spec, Precision::Vllm);
  const ScalingType type = spec.scaling.type;
  if (type == ScalingType::Dynamic) {
    // DynamicNTKScalingRotaryEmbedding builds one cache at the unscaled frequencies (its base
    // formula gives the base back at max_len = L x factor), which is not dynamic NTK.
    engines::refuse_scheme(spec, Precision::Vllm,
                  "rope_type dynamic changes with the sequence length, and vLLM's dynamic class keeps the unscaled "
                  "frequencies in one cache instead");
  }
  if (type == ScalingType::Proportional) engines::refuse_scheme(spec, Precision::Vllm, "rope_type proportional is not modelled");
  if (spec.axes == PositionAxes::MRope && type == ScalingType::Yarn) {
    // mrope.py hands YaRN 4 x original_max_position_embeddings as its context, which moves the
    // correction range: vLLM's frequencies are not the config's (export_table refuses it too).
    engines::refuse_scheme(spec, Precision::Vllm, "axes mrope with rope_type yarn: vLLM's MRotaryEmbedding computes YaRN's "
                                         "correction range over 4 x the original context");
  }
  if (options_.cache_dtype == DType::F64) {
    throw Error("CosSinTable: cache_dtype must be float32, bfloat16 or float16 for Precision::Vllm (got float64)");
  }
  auto n = std::make_unique<EngineNumerics>();
  n->cache_dtype = options_.cache_dtype;
  if (type == ScalingType::Linear) n->position_divisor = static_cast<float>(*spec.scaling.factor);
  numerics_ = std::move(n);
  const int64_t original = spec.original_context();
  if (type == ScalingType::LongRope) {
    if (original <= 0 || spec.max_position_embeddings <= 0) {
      engines::refuse_scheme(spec, Precision::Vllm, detail::concat("rope_type longrope needs max_position_embeddings and the "
                                                          "original context for vLLM's mscale (got ",
                                                          spec.max_position_embeddings, " and ", original, ")"));
    }
    // Phi3LongRoPEScaledRotaryEmbedding: both caches times one mscale (vllm_longrope_mscale),
    // computed in Python float; get_rope
    // passes it no attention_factor (only short_mscale / long_mscale, which rotary does not read).
    attention_scaling_ = engines::vllm_longrope_mscale(spec);
  }
  if (options_.fixed_positions == 0) {
    int64_t rows = vllm_cache_rows(spec);
    if (type == ScalingType::LongRope && rows > 0) {
      // long_short_cos_sin_cache = cat(short cache [0, L0), long cache [0, L)). forward() picks
      // one for every call: the long one (index p + L0) when max_model_len > L0, else the short
      // one; TableOptions::seq_len plays max_model_len here, and the inv_freq chosen above by it
      // is the same choice.
      rows = options_.seq_len > original ? rows - original : original;
    }
    if (rows <= 0 || rows > kMaxPosition + 1) {
      throw Error(detail::concat("CosSinTable: fixed_positions must be given for Precision::Vllm: spec ", spec.name,
                                 " gives vLLM's cache ", rows, " rows (max_position_embeddings ",
                                 spec.max_position_embeddings, "), outside [1, ", kMaxPosition + 1, "]"));
    }
    options_.fixed_positions = rows;
  }
}

int64_t vllm_cache_rows(const RopeSpec& spec) {
  if (spec.axes == PositionAxes::MRope) {
    // mrope.py: cache_max_position_num = max_position_embeddings * 4 (video positions run past it).
    const int64_t declared = spec.max_position_embeddings;
    return declared > 0 ? scaling::vllm_rows_times(declared, 4.0) : 0;
  }
  // Each scheme's rows: its row's vllm_cache_rows (src/core/scaling/).
  return scaling::scheme(spec.scaling.type).vllm_cache_rows(spec);
}

namespace engines {

// vLLM's Phi3LongRoPEScaledRotaryEmbedding scales both halves of its cache by
// sqrt(1 + ln(s) / ln(original)) with s = max_position_embeddings / original (1 when s <= 1),
// whatever the config's factor or attention_factor say (phi3_long_rope_scaled_rope.py).
double vllm_longrope_mscale(const RopeSpec& spec) {
  const double scale =
      static_cast<double>(spec.max_position_embeddings) / static_cast<double>(spec.original_context());
  if (scale <= 1.0) return 1.0;
  return std::sqrt(1.0 + std::log(scale) / std::log(static_cast<double>(spec.original_context())));
}

ExportedArray export_vllm(const RopeSpec& spec, const ExportOptions& options) {
  check_static_cache(spec, ExportFormat::Vllm);
  const DType dtype = resolve_dtype(options);
  const int64_t values_per_row = spec.rotary_dim;
  // vLLM's LongRoPE cache: the short factors' rows [0, original), then the long factors' rows
  // for positions [0, max_position_embeddings); vLLM offsets a position by original when it uses
  // the long factors.
  const bool long_short = spec.scaling.type == ScalingType::LongRope;
  if (long_short && options.max_position != 0) {
    throw Error(detail::concat("export_table: max_position is fixed for format vllm with rope_type longrope (vLLM's "
                               "long_short_cos_sin_cache has original_max_position_embeddings + "
                               "max_position_embeddings rows) (got ",
                               options.max_position, ")"));
  }
  const int64_t rows = resolve_rows(spec, options, values_per_row, dtype_size(dtype));
  ExportedArray out;
  out.dtype = dtype;
  out.tensor_name = long_short ? "long_short_cos_sin_cache" : "cos_sin_cache";
  out.shape = {rows, values_per_row};
  out.bytes.resize(static_cast<size_t>(rows * values_per_row * dtype_size(dtype)));
  const auto write = [&](int64_t p, const double* c, const double* s) {
    store_cat_cos_sin_row(out.bytes.data(), p, spec.rotary_dim / 2, dtype, c, s);
  };
  if (!long_short) {
    for_each_exact_row(CosSinTable(spec, {.precision = Precision::Exact, .storage = Storage::OnTheFly}), rows, write);
    return out;
  }
  // The short factors are LongRoPE's choice at seq_len = original, the long ones past it.
  const int64_t original = spec.original_context();
  const CosSinTable short_table(spec, {.precision = Precision::Exact, .storage = Storage::OnTheFly, .seq_len = original});
  const CosSinTable long_table(spec, {.precision = Precision::Exact, .storage = Storage::OnTheFly, .seq_len = original + 1});
  const double vllm_mscale = vllm_longrope_mscale(spec);
  for (const CosSinTable* table : {&short_table, &long_table}) {
    if (std::abs(table->attention_scaling() - vllm_mscale) > 1e-12 * vllm_mscale) {
      throw Error(detail::concat(
          "export_table: format vllm cannot hold spec ", spec.name, "'s attention scaling ",
          detail::shortest(table->attention_scaling()), " (factor or attention_factor): vLLM's LongRoPE scales its "
          "cache by sqrt(1 + ln(max_position_embeddings / original) / ln(original)) = ", detail::shortest(vllm_mscale)));
    }
  }
  for_each_exact_row(short_table, original, write);
  for_each_exact_row(long_table, rows - original, [&](int64_t p, const double* c, const double* s) {
    write(original + p, c, s);
  });
  return out;
}

}  // namespace engines
}  // namespace rotary
