// src/core/engines/flash_attn.cpp: flash-attention's cos and sin tables, exported.
//
// Source: flash_attn/layers/rotary.py RotaryEmbedding._update_cos_sin_cache:
//   freqs = outer(t, inv_freq); _cos_cached = cos(freqs).to(dtype), (seqlen, rotary_dim / 2), and
//   _sin_cached the same; rotary exports both stacked as [2, seqlen, rotary_dim / 2].
#include "core/engines/engine_support.hpp"
#include "rotary/engine_export.hpp"
#include "rotary/table.hpp"

namespace rotary::engines {

ExportedArray export_flash_attn(const RopeSpec& spec, const ExportOptions& options) {
  check_static_cache(spec, ExportFormat::FlashAttn);
  const DType dtype = resolve_dtype(options);
  const int64_t pairs = spec.rotary_dim / 2;
  const int64_t rows = resolve_rows(spec, options, spec.rotary_dim, dtype_size(dtype));
  ExportedArray out;
  out.dtype = dtype;
  out.tensor_name = "cos_sin (cos = [0], sin = [1])";
  out.shape = {2, rows, pairs};
  const int64_t size = dtype_size(dtype);
  out.bytes.resize(static_cast<size_t>(2 * rows * pairs * size));
  unsigned char* const bytes = out.bytes.data();
  for_each_exact_row(CosSinTable(spec, {.precision = Precision::Exact, .storage = Storage::OnTheFly}), rows,
                     [&](int64_t p, const double* c, const double* s) {
                       for (int64_t i = 0; i < pairs; ++i) {
                         store_value(bytes + (p * pairs + i) * size, dtype, c[i]);
                         store_value(bytes + ((rows + p) * pairs + i) * size, dtype, s[i]);
                       }
                     });
  return out;
}

}  // namespace rotary::engines
