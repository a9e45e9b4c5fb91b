// src/core/engines/transformer_engine.cpp: TransformerEngine's angle table, exported.
//
// Source: transformer_engine/pytorch/attention/rope.py (commit 0dc141c)
//   RotaryPositionEmbedding.forward: emb = cat((freqs, freqs)) (interleaved: each twice), returned
//   as emb.reshape(seq, 1, 1, dim); FusedRoPEFunc converts it to float32 and takes cos/sin of it.
#include <cmath>

#include "core/engines/engine_support.hpp"
#include "rotary/engine_export.hpp"
#include "rotary/error.hpp"
#include "rotary/frequencies.hpp"
#include "rotary/table.hpp"

namespace rotary::engines {

ExportedArray export_transformer_engine(const RopeSpec& spec, const ExportOptions& options) {
  check_static_cache(spec, ExportFormat::TransformerEngine);
  const DType dtype = resolve_dtype(options);
  const double scaling = frequencies(spec, 0).attention_scaling;
  if (scaling != 1.0) {
    throw Error(detail::concat("export_table: format transformer-engine is a table of angles, which cannot carry "
                               "attention_scaling ",
                               detail::shortest(scaling), " (spec ", spec.name,
                               "); scale q and k yourself, or export --format vllm, flashinfer or flash-attn"));
  }
  const int64_t pairs = spec.rotary_dim / 2;
  const int64_t values_per_row = spec.rotary_dim;
  const int64_t rows = resolve_rows(spec, options, values_per_row, dtype_size(dtype));
  ExportedArray out;
  out.dtype = dtype;
  out.tensor_name = "freqs";
  out.shape = {rows, 1, 1, values_per_row};
  const int64_t size = dtype_size(dtype);
  out.bytes.resize(static_cast<size_t>(rows * values_per_row * size));
  unsigned char* const bytes = out.bytes.data();
  // The angle of the exact cos/sin (atan2 of values within ~1e-15 of the true ones): p * inv_freq
  // reduced into (-pi, pi], to ~1e-15 absolute before its one rounding to float32.
  for_each_exact_row(CosSinTable(spec, {.precision = Precision::Exact, .storage = Storage::OnTheFly}), rows,
                     [&](int64_t p, const double* c, const double* s) {
                       for (int64_t k = 0; k < values_per_row; ++k) {
                         const int64_t i = spec.style == Style::NeoX ? k % pairs : k / 2;
                         store_value(bytes + (p * values_per_row + k) * size, DType::F32, std::atan2(s[i], c[i]));
                       }
                     });
  return out;
}

}  // namespace rotary::engines
