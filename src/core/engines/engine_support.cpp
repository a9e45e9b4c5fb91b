// src/core/engines/engine_support.cpp: the checks and the value writer every engine file shares
// (engine_support.hpp).
#include "core/engines/engine_support.hpp"

#include <bit>
#include <cstring>
#include <string>

#include "rotary/error.hpp"

namespace rotary::engines {

[[noreturn]] void refuse_scheme(const RopeSpec& spec, Precision precision, std::string_view what) {
  throw Error(detail::concat("CosSinTable: precision ", to_string(precision), " cannot reproduce spec ", spec.name, ": ",
                             what));
}

void check_engine_geometry(const RopeSpec& spec, Precision precision) {
  if (spec.xpos) refuse_scheme(spec, precision, "xPos is not part of its rope");
  if (spec.axes == PositionAxes::Vision2D) refuse_scheme(spec, precision, "axes vision2d has another frequency layout there");
  if (spec.axes == PositionAxes::MRope && precision == Precision::Ggml) {
    refuse_scheme(spec, precision, "axes mrope (ggml_rope_multi) is not modelled");
  }
}

void store_value(unsigned char* at, DType dtype, double value) {
  static_assert(std::endian::native == std::endian::little, "export writes little-endian bytes");
  unsigned char buffer[4];
  size_t size = 0;
  switch (dtype) {
    case DType::F32: {
      const float v = static_cast<float>(value);
      std::memcpy(buffer, &v, 4);
      size = 4;
      break;
    }
    case DType::BF16: {
      const uint16_t v = double_to_bf16(value);
      std::memcpy(buffer, &v, 2);
      size = 2;
      break;
    }
    case DType::F16: {
      const uint16_t v = double_to_f16(value);
      std::memcpy(buffer, &v, 2);
      size = 2;
      break;
    }
    case DType::F64: throw Error("export_table: float64 output is not an engine's dtype");
  }
  std::memcpy(at, buffer, size);
}

void append_value(std::vector<unsigned char>& bytes, DType dtype, double value) {
  unsigned char buffer[4];
  store_value(buffer, dtype, value);
  bytes.insert(bytes.end(), buffer, buffer + dtype_size(dtype));
}

void store_cat_cos_sin_row(unsigned char* bytes, int64_t row, int64_t pairs, DType dtype, const double* c,
                           const double* s) {
  const int64_t size = dtype_size(dtype);
  unsigned char* const at = bytes + row * 2 * pairs * size;
  for (int64_t i = 0; i < pairs; ++i) {
    store_value(at + i * size, dtype, c[i]);
    store_value(at + (pairs + i) * size, dtype, s[i]);
  }
}

void check_static_cache(const RopeSpec& spec, ExportFormat format) {
  const std::string_view name = to_string(format);
  if (spec.scaling.type == ScalingType::Dynamic) {
    // vLLM's DynamicNTKScalingRotaryEmbedding builds max_position_embeddings x factor rows at the
    // base times ((max_len / max_position_embeddings) - (factor - 1))^(d / (d - 2)) = base: the
    // unscaled frequencies, which are dynamic NTK's only up to max_position_embeddings.
    throw Error(detail::concat("export_table: format ", name, " is a static cache built once, and rope_type dynamic "
                               "changes the frequencies with the sequence length (spec ", spec.name, ")",
                               format == ExportFormat::Vllm
                                   ? "; vLLM's own dynamic cache keeps the unscaled frequencies past "
                                     "max_position_embeddings, which is not dynamic NTK"
                                   : "",
                               "; export its table at one length with rotary table --seq-len, or use a static scheme"));
  }
  if (spec.scaling.type == ScalingType::LongRope && format != ExportFormat::Vllm) {
    throw Error(detail::concat("export_table: format ", name, " is one static cache, and rope_type longrope switches "
                               "between its short and long factors with the sequence length (spec ", spec.name,
                               "); export the factors with --format llama-cpp-freq-factors --factor-set short|long, "
                               "or vLLM's long_short_cos_sin_cache with --format vllm"));
  }
  if (spec.axes == PositionAxes::MRope && spec.scaling.type == ScalingType::Yarn && format == ExportFormat::Vllm) {
    // mrope.py hands YaRN 4 x original_max_position_embeddings as its context, which moves the
    // correction range: vLLM's frequencies are not the config's.
    throw Error(detail::concat("export_table: format vllm with axes mrope and rope_type yarn is refused: vLLM's "
                               "MRotaryEmbedding computes YaRN's correction range over 4 x the original context, so "
                               "its frequencies differ from the config's (spec ", spec.name, ")"));
  }
  if (spec.xpos) {
    throw Error(detail::concat("export_table: format ", name, " holds a rotation per position, and xPos (spec ", spec.name,
                               ", xpos.scale_base ", detail::shortest(spec.xpos->scale_base),
                               ") also scales queries and keys differently: not expressible"));
  }
  if (spec.axes == PositionAxes::Vision2D) {
    throw Error(detail::concat("export_table: format ", name, " takes one position per token, and spec ", spec.name,
                               " has axes vision2d (row and column positions): not expressible"));
  }
  if (spec.axes == PositionAxes::MRope && format != ExportFormat::Vllm) {
    throw Error(detail::concat("export_table: format ", name, " takes one position per token, and spec ", spec.name,
                               " has axes mrope (three position streams); vLLM's MRotaryEmbedding reads the same "
                               "cache with three streams: use --format vllm"));
  }
}

int64_t resolve_rows(const RopeSpec& spec, const ExportOptions& options, int64_t values_per_row, int64_t element_size) {
  int64_t rows = options.max_position;
  if (rows < 0) throw Error(detail::concat("export_table: max_position must be >= 1 (got ", rows, ")"));
  if (rows == 0) {
    rows = options.format == ExportFormat::Vllm ? rotary::vllm_cache_rows(spec) : spec.max_position_embeddings;
    if (rows <= 0) {
      throw Error(detail::concat("export_table: max_position must be given: spec ", spec.name,
                                 " states no max_position_embeddings (got 0)"));
    }
  }
  if (rows > kMaxPosition + 1) {
    throw Error(detail::concat("export_table: max_position must be <= ", kMaxPosition + 1, " (got ", rows, ")"));
  }
  if (rows > kMaxExportBytes / (values_per_row * element_size)) {
    throw Error(detail::concat("export_table: max_position ", rows, " x ", values_per_row, " values of ", element_size,
                               " bytes is more than ", kMaxExportBytes, " bytes (got max_position ", rows, ")"));
  }
  return rows;
}

DType resolve_dtype(const ExportOptions& options) {
  const std::string_view name = to_string(options.format);
  const bool model_dtype = options.format == ExportFormat::Vllm || options.format == ExportFormat::FlashAttn;
  if (model_dtype) {
    if (!options.dtype) {
      throw Error(detail::concat("export_table: dtype is required for format ", name,
                                 " (the model's dtype: float32, bfloat16 or float16)"));
    }
    if (*options.dtype == DType::F64) {
      throw Error(detail::concat("export_table: dtype must be float32, bfloat16 or float16 for format ", name,
                                 " (got float64)"));
    }
    return *options.dtype;
  }
  if (options.dtype && *options.dtype != DType::F32) {
    throw Error(detail::concat("export_table: dtype must be float32 for format ", name, ", which takes float32 only (got ",
                               to_string(*options.dtype), ")"));
  }
  return DType::F32;
}

}  // namespace rotary::engines
