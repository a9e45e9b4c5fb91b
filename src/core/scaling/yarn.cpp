// src/core/scaling/yarn.cpp: YaRN.
//
// YaRN (Peng et al. 2023, arXiv:2309.00071): "NTK-by-parts", a per-pair blend of interpolation
// and extrapolation over a correction range, plus an attention temperature (mscale). Hugging Face
// _compute_yarn_parameters (find_correction_range, linear_ramp_factor, get_mscale).
#include <algorithm>
#include <numbers>

#include "core/scaling/hf_reader.hpp"
#include "core/scaling/registry.hpp"
#include "core/scaling/scheme_support.hpp"

namespace rotary {

double yarn_mscale(double factor, double mscale) {
  // HF _compute_yarn_parameters.get_mscale; the YaRN paper's attention temperature,
  // sqrt(1/t) = 0.1 ln s + 1.
  if (factor <= 1.0) return 1.0;
  return static_cast<double>(scaling::Real(1) / 10 * mscale * detail::ext_log(static_cast<scaling::Real>(factor)) + 1);
}

YarnCorrectionRange yarn_correction_range(const RopeSpec& spec) {
  const auto [low, high] = scaling::yarn_range(spec);
  return {static_cast<double>(low), static_cast<double>(high)};
}

namespace scaling {

// The correction range in extended precision: the ramp divides by (high - low), and with
// truncate = false a double-rounded range would cost up to ~3 ulps in the blended frequencies
// (measured on gpt-oss-20b, pair 17), because the blend 1 - ramp (1 - 1/s) amplifies the ramp's error.
std::pair<Real, Real> yarn_range(const RopeSpec& spec) {
  // HF find_correction_dim: d * ln(L0 / (2 pi r)) / (2 ln base), with L0 the ORIGINAL context
  // (transformers <= 4.44 passed max_position_embeddings here, in modeling_rope_utils.py's
  // _compute_yarn_parameters; docs/formulas.md, YaRN, "Other engines").
  const Real dim = static_cast<Real>(spec.rotary_dim);
  const Real base = spec.theta_base;
  const Real original = static_cast<Real>(spec.original_context());
  auto correction_dim = [&](double rotations) {
    return dim * detail::ext_log(original / (static_cast<Real>(rotations) * two_pi())) / (2 * detail::ext_log(base));
  };
  Real low = correction_dim(spec.scaling.beta_fast);
  Real high = correction_dim(spec.scaling.beta_slow);
  if (spec.scaling.truncate) {
    low = detail::ext_floor(low);
    high = detail::ext_ceil(high);
  }
  return {std::max(low, Real(0)), std::min(high, dim - 1)};
}

namespace {

constexpr std::string_view kRequired[] = {"factor"};
constexpr std::string_view kOptional[] = {"original_max_position_embeddings", "attention_factor", "beta_fast",
                                          "beta_slow", "mscale", "mscale_all_dim", "truncate"};

bool mscale_pair_given(const Scaling& s) {
  // HF tests the truthiness of both.
  return s.mscale && s.mscale_all_dim && *s.mscale != 0.0 && *s.mscale_all_dim != 0.0;
}

void yarn_check(const RopeSpec& spec, const SpecCheck& check) {
  const Scaling& s = spec.scaling;
  check.finite_positive("beta_fast", s.beta_fast);
  check.finite_positive("beta_slow", s.beta_slow);
  if (s.beta_fast < s.beta_slow) {
    check.fail("beta_fast must be >= beta_slow ", s.beta_slow, " (got ", s.beta_fast, ")");
  }
  if (s.mscale && !std::isfinite(*s.mscale)) check.fail("mscale must be finite (got ", *s.mscale, ")");
  if (s.mscale_all_dim && !std::isfinite(*s.mscale_all_dim)) {
    check.fail("mscale_all_dim must be finite (got ", *s.mscale_all_dim, ")");
  }
  if (s.attention_factor) check.finite_positive("attention_factor", *s.attention_factor);
  // Formulas as in yarn_frequencies() (docs/formulas.md, mscale).
  const double factor = spec.resolved_factor();
  if (s.attention_factor) {
    check.float32_scaling(*s.attention_factor, "attention_factor");
  } else if (mscale_pair_given(s)) {
    // Each term is the YaRN temperature factor sqrt(1/t) = 0.1 k ln s + 1: positive.
    const double numerator = yarn_mscale(factor, *s.mscale);
    const double denominator = yarn_mscale(factor, *s.mscale_all_dim);
    if (!(numerator > 0.0)) {
      check.fail("mscale must make 0.1*mscale*ln(factor)+1 > 0 (factor ", factor, ") (got mscale ", *s.mscale,
                 ": ", numerator, ")");
    }
    if (!(denominator > 0.0)) {
      check.fail("mscale_all_dim must make 0.1*mscale_all_dim*ln(factor)+1 > 0 (factor ", factor,
                 ") (got mscale_all_dim ", *s.mscale_all_dim, ": ", denominator, ")");
    }
    check.float32_scaling(numerator / denominator, "mscale ", *s.mscale, " and mscale_all_dim ", *s.mscale_all_dim);
  }
}

// Warns (or notes) where the explicit factor and max_position_embeddings / L0 disagree.
void compare_factor_with_context(HfScalingReader& reader, const Scaling& s) {
  // HF _validate_yarn_rope_parameters warns when factor != Lmax / L0 (unless that ratio is 1).
  // Lmax past L0 x factor, the context YaRN extends to, is a fault; Lmax below it is Qwen's own
  // recipe (factor 4 over 32768, max_position_embeddings left at 40960), correct: a note.
  const double implicit = static_cast<double>(reader.max_position_embeddings) /
                          static_cast<double>(s.original_max_position_embeddings);
  if (implicit == *s.factor || implicit == 1.0) return;
  const auto say = [&](auto&&... parts) {
    if (implicit > *s.factor) {
      reader.config.warn(std::forward<decltype(parts)>(parts)...);
    } else {
      reader.config.note(std::forward<decltype(parts)>(parts)...);
    }
  };
  say("the explicit YaRN factor ", *s.factor, " does not match max_position_embeddings / ",
      "original_max_position_embeddings = ", implicit, "; the explicit factor is used, as transformers does",
      implicit > *s.factor ? "" : " (transformers warns; the scaling reaches past max_position_embeddings)");
}

void yarn_read_hf_config(HfScalingReader& reader, RopeSpec& spec) {
  Scaling& s = spec.scaling;
  HfFieldReader& config = reader.config;
  // HF: beta_fast = get("beta_fast") or 32; beta_slow = get("beta_slow") or 1. A 0 or null
  // therefore means the default.
  auto beta = [&](std::string_view key, double fallback) {
    Field f = reader.member(key);
    if (!f.present_non_null()) return fallback;
    const double v = config.finite_number(f, "a finite number > 0");
    if (v == 0.0) {
      config.warn(f.path, " = 0 is treated as unset (", fallback, "), as transformers does");
      return fallback;
    }
    if (v < 0.0) config.fail_at(f.value, f.path, " must be a finite number > 0 (got ", v, ")");
    return v;
  };
  s.beta_fast = beta("beta_fast", 32.0);
  s.beta_slow = beta("beta_slow", 1.0);
  if (s.beta_fast < s.beta_slow) {
    Field f = reader.member("beta_fast");
    config.fail_at(f.value ? f.value : reader.params.value, reader.params.path, ".beta_fast must be >= beta_slow ",
                   s.beta_slow, " (got ", s.beta_fast, "; transformers only warns and inverts the ramp)");
  }
  if (Field f = reader.member("mscale"); f.present_non_null()) s.mscale = config.finite_number(f);
  if (Field f = reader.member("mscale_all_dim"); f.present_non_null()) s.mscale_all_dim = config.finite_number(f);
  if (Field f = reader.member("attention_factor"); f.present_non_null()) {
    s.attention_factor = config.number_at_least(f, 0.0, false);
  }
  if (Field f = reader.member("truncate"); f.present_non_null()) s.truncate = config.boolean(f);
  if (!s.factor) {
    if (reader.max_position_embeddings <= 0) {
      config.fail_at(reader.params.value, reader.params.path,
                     ".factor is null and max_position_embeddings is missing: YaRN needs one");
    }
    config.warn(reader.params.path, ".factor is null; using max_position_embeddings / original_max_position_embeddings = ",
                static_cast<double>(reader.max_position_embeddings) /
                    static_cast<double>(s.original_max_position_embeddings),
                " as transformers does");
  } else if (reader.max_position_embeddings > 0) {
    compare_factor_with_context(reader, s);
  }
  // HF reads YaRN's truncate from the top-level rope_parameters even for per-layer-type configs
  // (so a per-layer "truncate": false is ignored there). rotary honours the per-layer value.
  if (reader.per_layer_type && !s.truncate) {
    config.warn(reader.params.path, ".truncate = false is honoured by rotary; transformers reads truncate from the ",
                "top level of rope_parameters and would use true for this layer type");
  }
}

void yarn_frequencies(const RopeSpec& spec, FrequencyWork& work) {
  const Scaling& s = spec.scaling;
  Frequencies& out = work.out;
  const int64_t num_pairs = spec.rotary_dim / 2;
  const Real factor = out.effective_factor;
  auto [low, high] = yarn_range(spec);
  if (low == high) high += Real(1) / 1000;  // HF linear_ramp_factor: "Prevent singularity"
  std::vector<double> ramps(static_cast<size_t>(num_pairs));
  for (int64_t i = 0; i < num_pairs; ++i) {
    // ramp 0: extrapolate (keep theta_i); ramp 1: interpolate (theta_i / s).
    const Real ramp = std::clamp((static_cast<Real>(i) - low) / (high - low), Real(0), Real(1));
    const Real extrapolation_share = 1 - ramp;
    const Real reference = work.reference[i];
    work.theta[i] = (reference / factor) * (1 - extrapolation_share) + reference * extrapolation_share;
    ramps[i] = static_cast<double>(ramp);
  }
  fill_diagnostics(out, work.theta, work.reference);
  for (int64_t i = 0; i < num_pairs; ++i) {
    PairDiagnostics& pair = out.pairs[i];
    pair.blend = ramps[i];
    pair.regime = factor <= 1             ? PairRegime::Unscaled
                  : ramps[i] == 0.0      ? PairRegime::Extrapolated
                  : ramps[i] == 1.0      ? PairRegime::Interpolated
                                         : PairRegime::Blended;
  }
  // attention_factor: explicit value; else mscale(s, mscale) / mscale(s, mscale_all_dim) when
  // both are given and non-zero (HF tests truthiness); else mscale(s, 1) = 0.1 ln s + 1.
  const double f = out.effective_factor;
  if (s.attention_factor) {
    out.attention_scaling = *s.attention_factor;
    out.attention_scaling_source = fmt(*s.attention_factor) + " (attention_factor given in the config)";
  } else if (mscale_pair_given(s)) {
    out.attention_scaling = static_cast<double>(static_cast<Real>(yarn_mscale(f, *s.mscale)) /
                                                static_cast<Real>(yarn_mscale(f, *s.mscale_all_dim)));
    out.attention_scaling_source =
        "(0.1*" + fmt(*s.mscale) + "*ln(" + fmt(f) + ")+1) / (0.1*" + fmt(*s.mscale_all_dim) + "*ln(" + fmt(f) +
        ")+1) = " + fmt(out.attention_scaling) +
        " (YaRN mscale / mscale_all_dim; DeepSeek also multiplies the softmax scale by mscale(s, "
        "mscale_all_dim)^2, which is not part of RoPE)";
  } else {
    out.attention_scaling = yarn_mscale(f, 1.0);
    out.attention_scaling_source =
        f <= 1.0 ? std::string("1 (factor <= 1)")
                 : "0.1*ln(" + fmt(f) + ")+1 = " + fmt(out.attention_scaling) + " (YaRN mscale: 0.1 ln s + 1)";
  }
}

std::vector<float> yarn_hf_inv_freq_f32(const RopeSpec& spec, int64_t seq_len) {
  // _compute_yarn_parameters: correction range in Python float64, the rest float32.
  const int64_t dim = spec.rotary_dim;
  const float base = f32(spec.theta_base);
  const double factor = frequencies(spec, seq_len).effective_factor;
  const YarnCorrectionRange range = yarn_correction_range(spec);
  double low = range.low;
  double high = range.high;
  if (low == high) high += 0.001;
  std::vector<float> inv(static_cast<size_t>(dim / 2));
  for (int64_t i = 0; i < dim / 2; ++i) {
    const float pos_freq = powf_rounded(base, hf_exponent(i, dim));
    const float extrapolation = 1.0f / pos_freq;
    const float interpolation = 1.0f / (f32(factor) * pos_freq);
    float ramp = (static_cast<float>(i) - f32(low)) / f32(high - low);
    ramp = std::clamp(ramp, 0.0f, 1.0f);
    const float extrapolation_factor = 1.0f - ramp;
    inv[i] = interpolation * (1.0f - extrapolation_factor) + extrapolation * extrapolation_factor;
  }
  return inv;
}

int64_t yarn_vllm_cache_rows(const RopeSpec& spec) {
  // vLLM YaRNScalingRotaryEmbedding: original context x factor rows.
  return spec.original_context() > 0 ? vllm_rows_times(spec.original_context(), spec.resolved_factor()) : 0;
}

std::string yarn_describe(const RopeSpec& spec, const Frequencies& freqs) {
  const Scaling& s = spec.scaling;
  const YarnCorrectionRange range = yarn_correction_range(spec);
  return "yarn: factor " + fmt(freqs.effective_factor) + ", original context " +
         std::to_string(spec.original_context()) + ", beta_fast " + fmt(s.beta_fast) + ", beta_slow " +
         fmt(s.beta_slow) + ", ramp over pairs [" + fmt(range.low) + ", " + fmt(range.high) + "]" +
         (s.truncate ? "" : " (truncate false)");
}

std::string yarn_write_hf_config(const RopeSpec& spec) {
  const Scaling& s = spec.scaling;
  std::vector<std::string> members = hf_shared_members(spec);
  members.push_back(hf_member("beta_fast", s.beta_fast));
  members.push_back(hf_member("beta_slow", s.beta_slow));
  members.push_back(hf_member("truncate", s.truncate));
  if (s.mscale) members.push_back(hf_member("mscale", *s.mscale));
  if (s.mscale_all_dim) members.push_back(hf_member("mscale_all_dim", *s.mscale_all_dim));
  if (s.attention_factor) members.push_back(hf_member("attention_factor", *s.attention_factor));
  return hf_members(members);
}

// ggml's ggml_rope_yarn_corr_dim / ggml_rope_yarn_corr_dims (ggml.c), float32 as there.
float ggml_corr_dim(int n_dims, int n_ctx_orig, float n_rot, float base) {
  return static_cast<float>(n_dims) *
         std::log(static_cast<float>(n_ctx_orig) / (n_rot * 2 * static_cast<float>(std::numbers::pi))) /
         (2 * std::log(base));
}

std::string yarn_ggml_rope(const RopeSpec& spec, int64_t, GgmlRope& rope) {
  const Scaling& s = spec.scaling;
  if (mscale_pair_given(s)) return "YaRN with mscale and mscale_all_dim (llama.cpp's DeepSeek path) is not modelled";
  const float base = static_cast<float>(spec.theta_base);
  const int n_dims = static_cast<int>(spec.rotary_dim);
  rope.freq_scale = 1.0f / static_cast<float>(spec.resolved_factor());
  rope.ext_factor = 1.0f;
  const int n_ctx_orig = static_cast<int>(spec.original_context());
  const float start = std::floor(ggml_corr_dim(n_dims, n_ctx_orig, static_cast<float>(s.beta_fast), base));
  const float end = std::ceil(ggml_corr_dim(n_dims, n_ctx_orig, static_cast<float>(s.beta_slow), base));
  rope.corr_dims[0] = std::max(0.0f, start);
  rope.corr_dims[1] = std::min(static_cast<float>(n_dims - 1), end);
  // llama_context: yarn_attn_factor = get_mscale(factor, 1), then divided by the mscale that
  // rope_yarn multiplies in again (an explicit attention_factor is not read there).
  const float factor = 1.0f / rope.freq_scale;
  const float get_mscale = factor <= 1.0f ? 1.0f : 0.1f * 1.0f * std::log(factor) + 1.0f;
  rope.attn_factor = get_mscale;
  rope.attn_factor *= 1.0f / (1.0f + 0.1f * std::log(factor));
  rope.attn_factor *= 1.0f;  // hparams.rope_attn_factor (not written for YaRN)
  return "";
}

}  // namespace

ScalingScheme yarn_scheme() {
  return {
      .type = ScalingType::Yarn,
      .name = "yarn",
      .alias = "",
      .required_keys = kRequired,
      .optional_keys = kOptional,
      .requires_factor = false,
      .reads_original_context = true,
      .derives_factor_from_context = true,
      .rotates_whole_head = false,
      .supports_vision2d = false,
      .sequence_dependent = false,
      .check = yarn_check,
      .read_hf_config = yarn_read_hf_config,
      .write_hf_config = yarn_write_hf_config,
      .frequencies = yarn_frequencies,
      .frequency_seq_len = seq_len_ignored,
      .hf_inv_freq_f32 = yarn_hf_inv_freq_f32,
      .ggml_rope = yarn_ggml_rope,
      .ggml_reads_freq_factors = false,
      .vllm_cache_rows = yarn_vllm_cache_rows,
      .describe = yarn_describe,
  };
}

}  // namespace scaling
}  // namespace rotary
