// src/core/engines/flashinfer.cpp: FlashInfer's cos/sin cache, exported.
//
// Source: flashinfer.rope.apply_rope_with_cos_sin_cache(_inplace) documentation:
//   cos_sin_cache (max_seq_len, rotary_dim), cosine first half, sine second half, float32.
// The layout is vLLM's (store_cat_cos_sin_row) in float32 only.
#include "core/engines/engine_support.hpp"
#include "rotary/engine_export.hpp"
#include "rotary/table.hpp"

namespace rotary::engines {

ExportedArray export_flashinfer(const RopeSpec& spec, const ExportOptions& options) {
  check_static_cache(spec, ExportFormat::FlashInfer);
  const DType dtype = resolve_dtype(options);
  const int64_t values_per_row = spec.rotary_dim;
  const int64_t rows = resolve_rows(spec, options, values_per_row, dtype_size(dtype));
  ExportedArray out;
  out.dtype = dtype;
  out.tensor_name = "cos_sin_cache";
  out.shape = {rows, values_per_row};
  out.bytes.resize(static_cast<size_t>(rows * values_per_row * dtype_size(dtype)));
  for_each_exact_row(CosSinTable(spec, {.precision = Precision::Exact, .storage = Storage::OnTheFly}), rows,
                     [&](int64_t p, const double* c, const double* s) {
                       store_cat_cos_sin_row(out.bytes.data(), p, spec.rotary_dim / 2, dtype, c, s);
                     });
  return out;
}

}  // namespace rotary::engines
