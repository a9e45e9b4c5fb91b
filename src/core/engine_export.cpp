// src/core/engine_export.cpp: export_table(), rotary's exact tables in each engine's layout.
//
// Sources, read at these versions (docs/interop.md quotes them):
//   vLLM  vllm/model_executor/layers/rotary_embedding/base.py (commit 04458da):
//         RotaryEmbedding._compute_cos_sin_cache: freqs = einsum("i,j->ij", t, inv_freq);
//         cache = cat((freqs.cos(), freqs.sin()), dim=-1); then cache.to(dtype) in __init__.
//         The rows (t = arange(n), n = ceil of a float length) per class: get_rope in __init__.py
//         (commit 07b12f1) passes the config's max_position_embeddings, except original_max_position
//         for yarn and deepseek_yarn; base.py and llama3_rope.py (045d757) build that many rows;
//         linear_scaling_rope.py (0f17ee0) and dynamic_ntk_scaling_rope.py (3cfbaf3) that times the
//         factor; yarn_scaling_rope.py (0cd5784) and deepseek_scaling_rope.py (00d678e) the original
//         context times the factor; mrope.py (055e47c) 4 x max_position_embeddings;
//         phi3_long_rope_scaled_rope.py (17d618b) cat(short cache over original rows, long cache
//         over max_position_embeddings rows) as long_short_cos_sin_cache.
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
#include <initializer_list>
#include <numbers>
#include <optional>
#include <vector>

#include "rotary/error.hpp"
#include "rotary/table.hpp"
#include "core/scaling/registry.hpp"
#include "core/scaling/scheme_support.hpp"

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

// Writes one value at `at`, rounded once from double to the dtype, little-endian.
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

// Appends one value, rounded once from double to the dtype, little-endian.
void append_value(std::vector<unsigned char>& bytes, DType dtype, double value) {
  unsigned char buffer[4];
  store_value(buffer, dtype, value);
  bytes.insert(bytes.end(), buffer, buffer + dtype_size(dtype));
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
    rows = options.format == ExportFormat::Vllm ? vllm_cache_rows(spec) : spec.max_position_embeddings;
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

// vLLM's Phi3LongRoPEScaledRotaryEmbedding scales both halves of its cache by
// sqrt(1 + ln(s) / ln(original)) with s = max_position_embeddings / original (1 when s <= 1),
// whatever the config's factor or attention_factor say (phi3_long_rope_scaled_rope.py).
double vllm_longrope_mscale(const RopeSpec& spec) {
  const double scale =
      static_cast<double>(spec.max_position_embeddings) / static_cast<double>(spec.original_context());
  if (scale <= 1.0) return 1.0;
  return std::sqrt(1.0 + std::log(scale) / std::log(static_cast<double>(spec.original_context())));
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
  // vLLM's LongRoPE cache: the short factors' rows [0, original), then the long factors' rows
  // for positions [0, max_position_embeddings); vLLM offsets a position by original when it uses
  // the long factors.
  const bool long_short = options.format == ExportFormat::Vllm && spec.scaling.type == ScalingType::LongRope;
  if (long_short && options.max_position != 0) {
    throw Error(detail::concat("export_table: max_position is fixed for format vllm with rope_type longrope (vLLM's "
                               "long_short_cos_sin_cache has original_max_position_embeddings + "
                               "max_position_embeddings rows) (got ",
                               options.max_position, ")"));
  }
  const int64_t rows = resolve_rows(spec, options, values_per_row, dtype_size(dtype));
  const int64_t first_rows = long_short ? spec.original_context() : rows;
  // Rows from the first table: the whole cache, or LongRoPE's short factors (seq_len = original).
  const CosSinTable first(spec, {.precision = Precision::Exact, .storage = Storage::OnTheFly,
                                 .seq_len = long_short ? first_rows : 0});
  std::optional<CosSinTable> second;
  if (long_short) {
    second.emplace(spec, TableOptions{.precision = Precision::Exact, .storage = Storage::OnTheFly,
                                      .seq_len = first_rows + 1});
    const double vllm_mscale = vllm_longrope_mscale(spec);
    for (const CosSinTable* table : std::initializer_list<const CosSinTable*>{&first, &*second}) {
      if (std::abs(table->attention_scaling() - vllm_mscale) > 1e-12 * vllm_mscale) {
        throw Error(detail::concat(
            "export_table: format vllm cannot hold spec ", spec.name, "'s attention scaling ",
            detail::shortest(table->attention_scaling()), " (factor or attention_factor): vLLM's LongRoPE scales its "
            "cache by sqrt(1 + ln(max_position_embeddings / original) / ln(original)) = ", detail::shortest(vllm_mscale)));
      }
    }
  }

  out.tensor_name = long_short ? "long_short_cos_sin_cache" : "cos_sin_cache";
  if (options.format == ExportFormat::FlashAttn) out.tensor_name = "cos_sin (cos = [0], sin = [1])";
  if (options.format == ExportFormat::TransformerEngine) out.tensor_name = "freqs";
  out.shape = options.format == ExportFormat::FlashAttn           ? std::vector<int64_t>{2, rows, pairs}
              : options.format == ExportFormat::TransformerEngine ? std::vector<int64_t>{rows, 1, 1, values_per_row}
                                                                  : std::vector<int64_t>{rows, values_per_row};
  const int64_t size = dtype_size(dtype);
  out.bytes.resize(static_cast<size_t>(rows * values_per_row * size));
  unsigned char* const bytes = out.bytes.data();
  // Row by row, so that memory is the output alone (vLLM's linear cache for Gemma 3 has 2^20 rows).
  std::vector<double> c(static_cast<size_t>(pairs));
  std::vector<double> s(static_cast<size_t>(pairs));
  for (int64_t p = 0; p < rows; ++p) {
    if (p < first_rows) {
      first.row_f64(p, c.data(), s.data());
    } else {
      second->row_f64(p - first_rows, c.data(), s.data());
    }
    switch (options.format) {
      case ExportFormat::Vllm:
      case ExportFormat::FlashInfer:
        for (int64_t i = 0; i < pairs; ++i) {
          store_value(bytes + (p * values_per_row + i) * size, dtype, c[i]);
          store_value(bytes + (p * values_per_row + pairs + i) * size, dtype, s[i]);
        }
        break;
      case ExportFormat::FlashAttn:
        for (int64_t i = 0; i < pairs; ++i) {
          store_value(bytes + (p * pairs + i) * size, dtype, c[i]);
          store_value(bytes + ((rows + p) * pairs + i) * size, dtype, s[i]);
        }
        break;
      case ExportFormat::TransformerEngine:
        // The angle of the exact cos/sin (atan2 of values within ~1e-15 of the true ones): p * inv_freq
        // reduced into (-pi, pi], to ~1e-15 absolute before its one rounding to float32.
        for (int64_t k = 0; k < values_per_row; ++k) {
          const int64_t i = spec.style == Style::NeoX ? k % pairs : k / 2;
          store_value(bytes + (p * values_per_row + k) * size, DType::F32, std::atan2(s[i], c[i]));
        }
        break;
      case ExportFormat::LlamaCppFreqFactors: break;  // returned above
    }
  }
  return out;
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

}  // namespace rotary
