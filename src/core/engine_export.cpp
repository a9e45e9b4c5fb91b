// src/core/engine_export.cpp: export_table(), rotary's exact tables in each engine's layout.
//
// Sources, read at these versions (docs/interop.md quotes them):
//   vLLM  vllm/model_executor/layers/rotary_embedding/base.py (commit 04458da):
//         RotaryEmbedding._compute_cos_sin_cache: freqs = einsum("i,j->ij", t, inv_freq);
//         cache = cat((freqs.cos(), freqs.sin()), dim=-1); then cache.to(dtype) in __init__.
//   FlashInfer  flashinfer.rope.apply_rope_with_cos_sin_cache(_inplace) documentation:
//         cos_sin_cache (max_seq_len, rotary_dim), cosine first half, sine second half, float32.
//   flash-attention  flash_attn/layers/rotary.py RotaryEmbedding._update_cos_sin_cache:
//         freqs = outer(t, inv_freq); _cos_cached = cos(freqs).to(dtype) (seqlen, rotary_dim/2).
//   TransformerEngine  transformer_engine/pytorch/attention/rope.py (commit 0dc141c)
//         RotaryPositionEmbedding.forward: emb = cat((freqs, freqs)) (interleaved: each twice),
//         returned as emb.reshape(seq, 1, 1, dim); FusedRoPEFunc converts it to float32.
//   llama.cpp  convert_hf_to_gguf.py LlamaModel.generate_extra_tensors (rope_freqs for
//         rope_type llama3) and Phi3MiniModel (rope_factors_long / rope_factors_short).
#include "rotary/engine_export.hpp"

#include <bit>
#include <cmath>
#include <cstring>
#include <numbers>

#include "rotary/error.hpp"
#include "rotary/table.hpp"

namespace rotary {

namespace {

struct FormatName {
  ExportFormat format;
  std::string_view name;
};
constexpr FormatName kFormats[] = {
    {ExportFormat::Vllm, "vllm"},
    {ExportFormat::FlashInfer, "flashinfer"},
    {ExportFormat::FlashAttn, "flash-attn"},
    {ExportFormat::TransformerEngine, "transformer-engine"},
    {ExportFormat::LlamaCppFreqFactors, "llama-cpp-freq-factors"},
};

// Appends one value, rounded once from double to the dtype, little-endian.
void append_value(std::vector<unsigned char>& bytes, DType dtype, double value) {
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
  bytes.insert(bytes.end(), buffer, buffer + size);
}

std::string format_names() {
  std::string names;
  for (const FormatName& f : kFormats) names += (names.empty() ? "" : ", ") + std::string(f.name);
  return names;
}

// The refusals shared by the static caches: what a [position, pair] table cannot hold.
void check_static_cache(const RopeSpec& spec, ExportFormat format) {
  const std::string_view name = to_string(format);
  if (spec.scaling.type == ScalingType::Dynamic) {
    throw Error(detail::concat("export_table: format ", name, " is a static cache built once, and rope_type dynamic "
                               "changes the frequencies with the sequence length (spec ", spec.name,
                               "); export its table at one length with rotary table --seq-len, or use a static scheme"));
  }
  if (spec.scaling.type == ScalingType::LongRope) {
    throw Error(detail::concat("export_table: format ", name, " is one static cache, and rope_type longrope switches "
                               "between its short and long factors with the sequence length (spec ", spec.name,
                               "); export the factors with --format llama-cpp-freq-factors --factor-set short|long"));
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
    rows = spec.max_position_embeddings;
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

// The exact table's rows [0, rows) in double: cos[row * pairs + pair], sin likewise (scaled).
void exact_rows(const RopeSpec& spec, int64_t rows, std::vector<double>& cos_values, std::vector<double>& sin_values) {
  const CosSinTable table(spec, {.precision = Precision::Exact, .storage = Storage::OnTheFly});
  const int64_t pairs = table.num_pairs();
  cos_values.resize(static_cast<size_t>(rows * pairs));
  sin_values.resize(static_cast<size_t>(rows * pairs));
  for (int64_t p = 0; p < rows; ++p) table.row_f64(p, &cos_values[p * pairs], &sin_values[p * pairs]);
}

ExportedArray export_freq_factors(const RopeSpec& spec, const ExportOptions& options) {
  if (options.max_position != 0) {
    throw Error(detail::concat("export_table: max_position is not read by format llama-cpp-freq-factors, a per-pair "
                               "tensor (got ", options.max_position, ")"));
  }
  resolve_dtype(options);
  if (spec.axes != PositionAxes::Single || spec.xpos) {
    throw Error(detail::concat("export_table: format llama-cpp-freq-factors is for one position stream without xPos (spec ",
                               spec.name, " has axes ", to_string(spec.axes), spec.xpos ? " and xPos" : "", ")"));
  }
  ExportedArray out;
  out.dtype = DType::F32;
  const int64_t pairs = spec.rotary_dim / 2;
  out.shape = {pairs};
  if (spec.scaling.type == ScalingType::Llama3) {
    if (options.factor_set != LongRopeFactorSet::None) {
      throw Error("export_table: factor_set is for rope_type longrope only (got a factor set with rope_type llama3)");
    }
    // ggml divides pair i's angle by factor_i, so factor_i = default inv_freq / Llama 3's inv_freq
    // (frequencies' factor_applied, the exact ratio rounded once).
    const Frequencies freqs = frequencies(spec, 0);
    out.tensor_name = "rope_freqs.weight";
    for (const PairDiagnostics& pair : freqs.pairs) append_value(out.bytes, DType::F32, pair.factor_applied);
    return out;
  }
  if (spec.scaling.type == ScalingType::LongRope) {
    if (options.factor_set == LongRopeFactorSet::None) {
      throw Error(detail::concat("export_table: factor_set is required for rope_type longrope (short or long: llama.cpp "
                                 "stores rope_factors_short.weight and rope_factors_long.weight) (spec ", spec.name, ")"));
    }
    const bool use_long = options.factor_set == LongRopeFactorSet::Long;
    const std::vector<double>& factors = use_long ? spec.scaling.long_factor : spec.scaling.short_factor;
    out.tensor_name = use_long ? "rope_factors_long.weight" : "rope_factors_short.weight";
    for (const double f : factors) append_value(out.bytes, DType::F32, f);
    return out;
  }
  throw Error(detail::concat("export_table: format llama-cpp-freq-factors holds per-pair factors for rope_type llama3 or "
                             "longrope, and spec ", spec.name, " has rope_type ", to_string(spec.scaling.type),
                             " (llama.cpp expresses it with its rope scaling parameters, no tensor)"));
}

}  // namespace

std::string_view to_string(ExportFormat format) {
  for (const FormatName& f : kFormats) {
    if (f.format == format) return f.name;
  }
  return "unknown";
}

std::optional<ExportFormat> parse_export_format(std::string_view name) {
  for (const FormatName& f : kFormats) {
    if (f.name == name) return f.format;
  }
  if (name == "flash-attention" || name == "flash_attn") return ExportFormat::FlashAttn;
  if (name == "te" || name == "transformer_engine") return ExportFormat::TransformerEngine;
  return std::nullopt;
}

std::vector<std::string_view> export_format_names() {
  std::vector<std::string_view> names;
  for (const FormatName& f : kFormats) names.push_back(f.name);
  return names;
}

ExportedArray export_table(const RopeSpec& spec, const ExportOptions& options) {
  validate(spec);
  bool known = false;
  for (const FormatName& f : kFormats) known = known || f.format == options.format;
  if (!known) throw Error(detail::concat("export_table: format must be one of ", format_names()));
  if (options.format == ExportFormat::LlamaCppFreqFactors) return export_freq_factors(spec, options);
  if (options.factor_set != LongRopeFactorSet::None) {
    throw Error(detail::concat("export_table: factor_set is for format llama-cpp-freq-factors only (got format ",
                               to_string(options.format), ")"));
  }
  check_static_cache(spec, options.format);
  const DType dtype = resolve_dtype(options);
  const int64_t pairs = spec.rotary_dim / 2;
  const int64_t values_per_row = spec.rotary_dim;

  ExportedArray out;
  out.dtype = dtype;
  if (options.format == ExportFormat::TransformerEngine) {
    const double scaling = frequencies(spec, 0).attention_scaling;
    if (scaling != 1.0) {
      throw Error(detail::concat("export_table: format transformer-engine is a table of angles, which cannot carry "
                                 "attention_scaling ",
                                 detail::shortest(scaling), " (spec ", spec.name,
                                 "); scale q and k yourself, or export --format vllm, flashinfer or flash-attn"));
    }
  }
  const int64_t rows = resolve_rows(spec, options, values_per_row, dtype_size(dtype));
  std::vector<double> cos_values;
  std::vector<double> sin_values;
  exact_rows(spec, rows, cos_values, sin_values);
  out.bytes.reserve(static_cast<size_t>(rows * values_per_row * dtype_size(dtype)));

  switch (options.format) {
    case ExportFormat::Vllm:
    case ExportFormat::FlashInfer:
      out.tensor_name = "cos_sin_cache";
      out.shape = {rows, values_per_row};
      for (int64_t p = 0; p < rows; ++p) {
        for (int64_t i = 0; i < pairs; ++i) append_value(out.bytes, dtype, cos_values[p * pairs + i]);
        for (int64_t i = 0; i < pairs; ++i) append_value(out.bytes, dtype, sin_values[p * pairs + i]);
      }
      break;
    case ExportFormat::FlashAttn:
      out.tensor_name = "cos_sin (cos = [0], sin = [1])";
      out.shape = {2, rows, pairs};
      for (const std::vector<double>* values : {&cos_values, &sin_values}) {
        for (const double v : *values) append_value(out.bytes, dtype, v);
      }
      break;
    case ExportFormat::TransformerEngine: {
      // The angle of the exact cos/sin (atan2 of values within ~1e-15 of the true ones): p * inv_freq
      // reduced into (-pi, pi], to ~1e-15 absolute before its one rounding to float32.
      out.tensor_name = "freqs";
      out.shape = {rows, 1, 1, values_per_row};
      std::vector<double> angles(static_cast<size_t>(pairs));
      for (int64_t p = 0; p < rows; ++p) {
        for (int64_t i = 0; i < pairs; ++i) angles[i] = std::atan2(sin_values[p * pairs + i], cos_values[p * pairs + i]);
        for (int64_t k = 0; k < values_per_row; ++k) {
          const int64_t i = spec.style == Style::NeoX ? k % pairs : k / 2;
          append_value(out.bytes, DType::F32, angles[i]);
        }
      }
      break;
    }
    case ExportFormat::LlamaCppFreqFactors: break;  // returned above
  }
  return out;
}

}  // namespace rotary
