// src/core/engines/ggml.cpp: llama.cpp's RoPE (ggml), as a table (Precision::Ggml: the float32
// parameters llama_context derives from the GGUF fields, and ggml_rope's angle per pair) and as an
// export (the per-pair factor tensors its converter writes).
//
// Sources: llama.cpp's ggml/src/ggml-cpu/ops.cpp (rope_yarn, ggml_rope_cache_init: theta_scale =
// powf(base, -2/n_dims), the ramp mix and mscale) and convert_hf_to_gguf.py
// (LlamaModel.generate_extra_tensors: rope_freqs for rope_type llama3; Phi3MiniModel:
// rope_factors_long / rope_factors_short). Each scheme's GGUF fields are its row's ggml_rope
// (src/core/scaling/). docs/interop.md quotes them.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/engines/engine_support.hpp"
#include "core/scaling/registry.hpp"
#include "core/table_internal.hpp"
#include "rotary/engine_export.hpp"
#include "rotary/error.hpp"
#include "rotary/frequencies.hpp"
#include "rotary/table.hpp"

namespace rotary {

namespace {

// ggml's rope_yarn_ramp and rope_yarn (ops.cpp): one pair's cos and sin, as ggml-cpu is built for
// x86-64 with FMA (GGML_FMA, -mfma): GCC contracts the blend a*b + c*d into fma(a, b, c*d) and
// 1 + 0.1*log(..) into fma(0.1, log(..), 1), so those two are fused here too (checked bit for bit
// against ggml itself, tests/core/engine_numerics_test.cpp; without them the YaRN ramp's pairs
// differ by an ulp).
void ggml_rope_yarn(float theta_extrap, float freq_scale, const float corr_dims[2], int64_t i0, float ext_factor,
                    float mscale, float* cos_theta, float* sin_theta) {
  const float theta_interp = freq_scale * theta_extrap;
  float theta = theta_interp;
  if (ext_factor != 0.0f) {
    const float y = (static_cast<float>(static_cast<int>(i0) / 2) - corr_dims[0]) / std::max(0.001f, corr_dims[1] - corr_dims[0]);
    const float ramp = 1 - std::min(1.0f, std::max(0.0f, y));
    const float ramp_mix = ramp * ext_factor;
    theta = std::fma(theta_interp, 1 - ramp_mix, theta_extrap * ramp_mix);
    mscale *= std::fma(0.1f, std::log(1.0f / freq_scale), 1.0f);
  }
  *cos_theta = std::cos(theta) * mscale;
  *sin_theta = std::sin(theta) * mscale;
}

}  // namespace

// llama.cpp's parameters for the spec (see EngineNumerics): which GGUF keys and tensors the
// converter writes for each scheme, and what llama_context derives from them.
void CosSinTable::init_ggml() {
  const RopeSpec& spec = spec_;
  engines::check_engine_geometry(spec, Precision::Ggml);
  auto n = std::make_unique<EngineNumerics>();
  const Scaling& s = spec.scaling;
  const float base = static_cast<float>(spec.theta_base);
  const int n_dims = static_cast<int>(spec.rotary_dim);
  n->theta_scale = std::pow(base, -2.0f / static_cast<float>(n_dims));
  // The scheme's llama.cpp form (its row's ggml_rope, src/core/scaling/).
  const scaling::ScalingScheme& scheme = scaling::scheme(s.type);
  scaling::GgmlRope rope;
  if (const std::string refusal = scheme.ggml_rope(spec, options_.seq_len, rope); !refusal.empty()) {
    engines::refuse_scheme(spec, Precision::Ggml, refusal);
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

// The rows [first, last) as ggml computes them.
void CosSinTable::ggml_rows(int64_t first, int64_t last, float* out) const {
  // ggml_rope_cache_init: theta starts at the float position and is multiplied by theta_scale
  // once per pair; each pair's angle is divided by its frequency factor, then rope_yarn.
  const EngineNumerics& n = *numerics_;
  for (int64_t position = first; position < last; ++position) {
    float* co = out + (position - first) * 2 * num_pairs_;
    float* so = co + num_pairs_;
    float theta = static_cast<float>(position);
    for (int64_t pair = 0; pair < num_pairs_; ++pair) {
      const float ff = n.freq_factors.empty() ? 1.0f : n.freq_factors[pair];
      ggml_rope_yarn(theta / ff, n.freq_scale, n.corr_dims, 2 * pair, n.ext_factor, n.attn_factor, &co[pair], &so[pair]);
      theta *= n.theta_scale;
    }
  }
}

namespace engines {

ExportedArray export_llama_cpp_freq_factors(const RopeSpec& spec, const ExportOptions& options) {
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

}  // namespace engines
}  // namespace rotary
