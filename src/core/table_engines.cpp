// src/core/table_engines.cpp: the llama.cpp/ggml and vLLM numerics of a CosSinTable
// (Precision::Ggml, Precision::Vllm): which schemes each engine reproduces, and the float32
// parameters and cache length it holds for a spec. Kept apart from table.cpp, whose exact and
// Hugging Face rows and stored pages do not depend on any engine; compute_rows reads what these
// set (table_internal.hpp).
#include <cmath>
#include <string>
#include <string_view>

#include "core/scaling/registry.hpp"
#include "rotary/engine_export.hpp"
#include "rotary/error.hpp"
#include "rotary/table.hpp"
#include "core/table_internal.hpp"

namespace rotary {

namespace {

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

}  // namespace

// llama.cpp's parameters for the spec (see EngineNumerics): which GGUF keys and tensors the
// converter writes for each scheme, and what llama_context derives from them.
void CosSinTable::init_ggml() {
  const RopeSpec& spec = spec_;
  check_engine_geometry(spec, Precision::Ggml);
  auto n = std::make_unique<EngineNumerics>();
  const Scaling& s = spec.scaling;
  const float base = static_cast<float>(spec.theta_base);
  const int n_dims = static_cast<int>(spec.rotary_dim);
  n->theta_scale = std::pow(base, -2.0f / static_cast<float>(n_dims));
  // The scheme's llama.cpp form (its row's ggml_rope, src/core/scaling/).
  const scaling::ScalingScheme& scheme = scaling::scheme(s.type);
  scaling::GgmlRope rope;
  if (const std::string refusal = scheme.ggml_rope(spec, options_.seq_len, rope); !refusal.empty()) {
    refuse_scheme(spec, Precision::Ggml, refusal);
  }
  n->freq_scale = rope.freq_scale;
  n->ext_factor = rope.ext_factor;
  n->attn_factor = rope.attn_factor;
  n->corr_dims[0] = rope.corr_dims[0];
  n->corr_dims[1] = rope.corr_dims[1];
  n->freq_factors = std::move(rope.freq_factors);
  if (!options_.ggml_freq_factors.empty()) {
    if (!scheme.ggml_reads_freq_factors) {
      throw Error(detail::concat("CosSinTable: ggml_freq_factors is for rope_type llama3 or longrope (spec ", spec.name,
                                 " has rope_type ", to_string(s.type), ")"));
    }
    if (static_cast<int64_t>(options_.ggml_freq_factors.size()) != num_pairs_) {
      throw Error(detail::concat("CosSinTable: ggml_freq_factors must have rotary_dim/2 = ", num_pairs_, " values (got ",
                                 options_.ggml_freq_factors.size(), ")"));
    }
    for (size_t i = 0; i < options_.ggml_freq_factors.size(); ++i) {
      const float v = options_.ggml_freq_factors[i];
      if (!std::isfinite(v) || !(v > 0.0f)) {
        throw Error(detail::concat("CosSinTable: ggml_freq_factors[", i, "] must be finite and > 0 (got ", v, ")"));
      }
    }
    n->freq_factors = options_.ggml_freq_factors;
  }
  numerics_ = std::move(n);
  // The frequencies ggml reaches: its angle at position 1, pair by pair (scaling as it applies).
  inv_freq_f32_.resize(static_cast<size_t>(num_pairs_));
  float theta = 1.0f;
  for (int64_t i = 0; i < num_pairs_; ++i) {
    const float ff = numerics_->freq_factors.empty() ? 1.0f : numerics_->freq_factors[i];
    const float extrap = theta / ff;
    float angle = numerics_->freq_scale * extrap;
    if (numerics_->ext_factor != 0.0f) {
      const float y = (static_cast<float>(i) - numerics_->corr_dims[0]) /
                      std::max(0.001f, numerics_->corr_dims[1] - numerics_->corr_dims[0]);
      const float ramp_mix = (1 - std::min(1.0f, std::max(0.0f, y))) * numerics_->ext_factor;
      angle = std::fma(angle, 1 - ramp_mix, extrap * ramp_mix);
    }
    inv_freq_f32_[i] = angle;
    theta *= numerics_->theta_scale;
  }
  inv_freq_.assign(inv_freq_f32_.begin(), inv_freq_f32_.end());
  float mscale = numerics_->attn_factor;
  if (numerics_->ext_factor != 0.0f) mscale *= std::fma(0.1f, std::log(1.0f / numerics_->freq_scale), 1.0f);
  attention_scaling_ = mscale;
}

// vLLM's cache: which schemes its classes build one static cache for, and its length: the rows
// vllm_cache_rows() counts (engine_export.hpp), so that `rotary table --precision vllm`,
// `rotary diverge` and `rotary export --format vllm` serve the same rows.
void CosSinTable::init_vllm() {
  const RopeSpec& spec = spec_;
  check_engine_geometry(spec, Precision::Vllm);
  const ScalingType type = spec.scaling.type;
  if (type == ScalingType::Dynamic) {
    // DynamicNTKScalingRotaryEmbedding builds one cache at the unscaled frequencies (its base
    // formula gives the base back at max_len = L x factor), which is not dynamic NTK.
    refuse_scheme(spec, Precision::Vllm,
                  "rope_type dynamic changes with the sequence length, and vLLM's dynamic class keeps the unscaled "
                  "frequencies in one cache instead");
  }
  if (type == ScalingType::Proportional) refuse_scheme(spec, Precision::Vllm, "rope_type proportional is not modelled");
  if (spec.axes == PositionAxes::MRope && type == ScalingType::Yarn) {
    // mrope.py hands YaRN 4 x original_max_position_embeddings as its context, which moves the
    // correction range: vLLM's frequencies are not the config's (export_table refuses it too).
    refuse_scheme(spec, Precision::Vllm, "axes mrope with rope_type yarn: vLLM's MRotaryEmbedding computes YaRN's "
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
      refuse_scheme(spec, Precision::Vllm, detail::concat("rope_type longrope needs max_position_embeddings and the "
                                                          "original context for vLLM's mscale (got ",
                                                          spec.max_position_embeddings, " and ", original, ")"));
    }
    // Phi3LongRoPEScaledRotaryEmbedding: both caches times one mscale, sqrt(1 + ln s / ln L0)
    // with s = max_position_embeddings / L0 (1 for s <= 1), computed in Python float; get_rope
    // passes it no attention_factor (only short_mscale / long_mscale, which rotary does not read).
    const double scale = static_cast<double>(spec.max_position_embeddings) / static_cast<double>(original);
    attention_scaling_ = scale <= 1.0 ? 1.0 : std::sqrt(1 + std::log(scale) / std::log(static_cast<double>(original)));
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

}  // namespace rotary
