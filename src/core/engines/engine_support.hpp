// src/core/engines/engine_support.hpp: what the engine files share. Each engine rotary reproduces
// or exports to has one file in this folder (ggml.cpp, vllm.cpp, flashinfer.cpp, flash_attn.cpp,
// transformer_engine.cpp), holding its table numerics (the CosSinTable precision that copies the
// engine) and its export layout; registry.cpp lists the export formats once. Hugging Face's
// float32 chain is not here: it is every scheme's own (src/core/scaling/) and table.cpp's
// Precision::HFCompat rows.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "rotary/engine_export.hpp"
#include "rotary/spec.hpp"
#include "rotary/table.hpp"
#include "rotary/tensor.hpp"

namespace rotary::engines {

// ---- table numerics (Precision::Ggml, Precision::Vllm) ----------------------------------------

// "CosSinTable: precision <p> cannot reproduce spec <name>: <what>".
[[noreturn]] void refuse_scheme(const RopeSpec& spec, Precision precision, std::string_view what);
// The geometry no engine table models: xPos, 2-D vision positions, and M-RoPE for ggml.
void check_engine_geometry(const RopeSpec& spec, Precision precision);

// ---- export ------------------------------------------------------------------------------------

// Writes one value at `at`, rounded once from double to the dtype, little-endian.
void store_value(unsigned char* at, DType dtype, double value);
// Appends one value, rounded once from double to the dtype, little-endian.
void append_value(std::vector<unsigned char>& bytes, DType dtype, double value);
// Row `row` of a cat(cos, sin) cache (vLLM's and FlashInfer's layout): [row, 0..pairs) the
// cosines, [row, pairs..2 pairs) the sines, each rounded once to the dtype.
void store_cat_cos_sin_row(unsigned char* bytes, int64_t row, int64_t pairs, DType dtype, const double* c,
                           const double* s);
// The refusals shared by the static caches: what a [position, pair] table cannot hold.
void check_static_cache(const RopeSpec& spec, ExportFormat format);
// The cache's rows: options.max_position, else the engine's default (vLLM's own count, the
// spec's max_position_embeddings for the others), within kMaxPosition and kMaxExportBytes.
int64_t resolve_rows(const RopeSpec& spec, const ExportOptions& options, int64_t values_per_row, int64_t element_size);
// The element type: the model's dtype for vllm and flash-attn (required), float32 for the others.
DType resolve_dtype(const ExportOptions& options);
// The exact table's rows [0, rows) in float64, one at a time (so that memory is the output alone),
// each handed to write(position, cos, sin) with rotary_dim/2 values each.
template <class Write>
void for_each_exact_row(const CosSinTable& table, int64_t rows, Write&& write) {
  const auto pairs = static_cast<size_t>(table.spec().rotary_dim / 2);
  std::vector<double> c(pairs);
  std::vector<double> s(pairs);
  for (int64_t p = 0; p < rows; ++p) {
    table.row_f64(p, c.data(), s.data());
    write(p, c.data(), s.data());
  }
}

// One exporter per engine file; export_table (registry.cpp) checks the common options first.
ExportedArray export_vllm(const RopeSpec& spec, const ExportOptions& options);
ExportedArray export_flashinfer(const RopeSpec& spec, const ExportOptions& options);
ExportedArray export_flash_attn(const RopeSpec& spec, const ExportOptions& options);
ExportedArray export_transformer_engine(const RopeSpec& spec, const ExportOptions& options);
ExportedArray export_llama_cpp_freq_factors(const RopeSpec& spec, const ExportOptions& options);

// vLLM's Phi3LongRoPEScaledRotaryEmbedding scales both halves of its cache by
// sqrt(1 + ln(s) / ln(original)) with s = max_position_embeddings / original (1 when s <= 1).
double vllm_longrope_mscale(const RopeSpec& spec);

}  // namespace rotary::engines
