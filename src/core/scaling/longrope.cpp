// src/core/scaling/longrope.cpp: LongRoPE (Phi-3's "su").
//
// LongRoPE (Ding et al. 2024, arXiv:2402.13753); Hugging Face _compute_longrope_parameters:
// theta_i = 1 / (f_i * base^(2i/d)), f = long_factor when seq_len > L0, else short_factor;
// attention scaling: given, else sqrt(1 + ln s / ln L0) for s > 1.
#include <algorithm>

#include "core/scaling/hf_reader.hpp"
#include "core/scaling/registry.hpp"
#include "core/scaling/scheme_support.hpp"

namespace rotary::scaling {

namespace {

constexpr std::string_view kRequired[] = {"short_factor", "long_factor"};
constexpr std::string_view kOptional[] = {"original_max_position_embeddings", "attention_factor", "factor"};

void longrope_check(const RopeSpec& spec, const SpecCheck& check) {
  const Scaling& s = spec.scaling;
  const auto expected = static_cast<size_t>(spec.rotary_dim / 2);
  for (const auto* list : {&s.short_factor, &s.long_factor}) {
    const char* field = list == &s.short_factor ? "short_factor" : "long_factor";
    if (list->size() != expected) {
      check.fail(field, " must have rotary_dim/2 = ", expected, " elements (got ", list->size(), ")");
    }
    for (size_t i = 0; i < list->size(); ++i) {
      if (!std::isfinite((*list)[i]) || (*list)[i] <= 0.0) {
        check.fail(field, "[", i, "] must be a finite number > 0 (got ", (*list)[i], ")");
      }
    }
  }
  if (s.attention_factor) check.finite_positive("attention_factor", *s.attention_factor);
  if (s.attention_factor) {
    check.float32_scaling(*s.attention_factor, "attention_factor");
  } else if (spec.resolved_factor() > 1.0 && spec.original_context() <= 1) {
    // sqrt(1 + ln s / ln L0): ln 1 = 0 (HF raises ZeroDivisionError).
    check.fail("original_max_position_embeddings must be > 1 for LongRoPE's attention scaling "
               "sqrt(1 + ln(factor)/ln(original_max_position_embeddings)) (got ",
               spec.original_context(), ")");
  }
}

void longrope_read_hf_config(HfScalingReader& reader, RopeSpec& spec) {
  Scaling& s = spec.scaling;
  HfFieldReader& config = reader.config;
  const auto expected = static_cast<size_t>(spec.rotary_dim / 2);
  auto read_list = [&](std::string_view key) {
    Field f = reader.member(key);
    if (!f.value->is_array()) config.fail_at(f.value, f.path, " must be a list of numbers (got ", f.value->describe(), ")");
    const auto& items = f.value->as_array();
    if (items.size() != expected) {
      config.fail_at(f.value, f.path, " must have rotary_dim/2 = ", expected, " elements (got ", items.size(), ")");
    }
    std::vector<double> values;
    values.reserve(items.size());
    for (size_t i = 0; i < items.size(); ++i) {
      values.push_back(config.number_at_least(Field{&items[i], f.path + "[" + std::to_string(i) + "]"}, 0.0, false));
    }
    return values;
  };
  s.short_factor = read_list("short_factor");
  s.long_factor = read_list("long_factor");
  if (Field f = reader.member("attention_factor"); f.present_non_null()) {
    s.attention_factor = config.number_at_least(f, 0.0, false);
  }
  if (s.factor) return;
  if (reader.max_position_embeddings <= 0) {
    config.fail_at(reader.params.value, reader.params.path,
                   ".factor and max_position_embeddings are both missing: LongRoPE's attention scaling needs one");
  }
  // HF's Phi-3 note: the factor is derived from max_position_embeddings / original. With a
  // top-level original_max_position_embeddings that is Phi-3's published layout, correct as
  // it is (transformers still asks for a factor): a note; otherwise a warning.
  const auto say = [&](auto&&... parts) {
    if (reader.original_max_at_top_level) {
      config.note(std::forward<decltype(parts)>(parts)...);
    } else {
      config.warn(std::forward<decltype(parts)>(parts)...);
    }
  };
  say(reader.params.path, " has no factor; LongRoPE's attention scaling uses max_position_embeddings / ",
      "original_max_position_embeddings = ",
      static_cast<double>(reader.max_position_embeddings) / static_cast<double>(s.original_max_position_embeddings),
      " (transformers recommends setting factor)");
}

void longrope_frequencies(const RopeSpec& spec, FrequencyWork& work) {
  const Scaling& s = spec.scaling;
  Frequencies& out = work.out;
  const int64_t num_pairs = spec.rotary_dim / 2;
  const int64_t original = spec.original_context();
  const bool use_long = work.seq_len > original;
  const std::vector<double>& factors = use_long ? s.long_factor : s.short_factor;
  out.longrope_factor_set = use_long ? LongRopeFactorSet::Long : LongRopeFactorSet::Short;
  for (int64_t i = 0; i < num_pairs; ++i) work.theta[i] = work.reference[i] / static_cast<Real>(factors[i]);
  fill_diagnostics(out, work.theta, work.reference);
  const double f = out.effective_factor;
  for (int64_t i = 0; i < num_pairs; ++i) {
    PairDiagnostics& pair = out.pairs[i];
    pair.regime = PairRegime::Rescaled;
    pair.blend = f > 1.0 ? std::clamp(std::log(factors[i]) / std::log(f), 0.0, 1.0) : 0.0;
  }
  if (s.attention_factor) {
    out.attention_scaling = *s.attention_factor;
    out.attention_scaling_source = fmt(*s.attention_factor) + " (attention_factor given in the config)";
  } else if (f <= 1.0) {
    out.attention_scaling = 1.0;
    out.attention_scaling_source = "1 (factor <= 1)";
  } else {
    out.attention_scaling = static_cast<double>(
        detail::ext_sqrt(1 + detail::ext_log(static_cast<Real>(f)) / detail::ext_log(static_cast<Real>(original))));
    out.attention_scaling_source = "sqrt(1 + ln(" + fmt(f) + ")/ln(" + std::to_string(original) + ")) = " +
                                   fmt(out.attention_scaling) + " (LongRoPE, factor = " +
                                   (s.factor ? std::string("config factor") : std::string("max/original")) + ")";
  }
}

int64_t longrope_frequency_seq_len(const RopeSpec& spec, int64_t seq_len) {
  // The long factors past the original context, the short below.
  return seq_len > spec.original_context() ? spec.original_context() + 1 : 0;
}

std::vector<float> longrope_hf_inv_freq_f32(const RopeSpec& spec, int64_t seq_len) {
  const int64_t dim = spec.rotary_dim;
  const float base = f32(spec.theta_base);
  const bool use_long = seq_len > spec.original_context();
  const std::vector<double>& factors = use_long ? spec.scaling.long_factor : spec.scaling.short_factor;
  std::vector<float> inv(static_cast<size_t>(dim / 2));
  for (int64_t i = 0; i < dim / 2; ++i) {
    inv[i] = 1.0f / (f32(factors[i]) * powf_rounded(base, hf_exponent(i, dim)));
  }
  return inv;
}

int64_t longrope_vllm_cache_rows(const RopeSpec& spec) {
  // vLLM Phi3LongRoPEScaledRotaryEmbedding: the short cache (L0 rows) then the long one (Lmax rows).
  const int64_t declared = spec.max_position_embeddings;
  return declared > 0 && spec.original_context() > 0 ? spec.original_context() + declared : 0;
}

std::string longrope_describe(const RopeSpec& spec, const Frequencies& freqs) {
  return "longrope: per-pair factor lists, " + std::string(to_string(freqs.longrope_factor_set)) +
         " set in use (long when seq_len > " + std::to_string(spec.original_context()) + "), factor " +
         fmt(freqs.effective_factor);
}

std::string longrope_write_hf_config(const RopeSpec& spec) {
  const Scaling& s = spec.scaling;
  std::vector<std::string> members = hf_shared_members(spec);
  members.push_back(hf_member("short_factor", s.short_factor));
  members.push_back(hf_member("long_factor", s.long_factor));
  if (s.attention_factor) members.push_back(hf_member("attention_factor", *s.attention_factor));
  return hf_members(members);
}

std::string longrope_ggml_rope(const RopeSpec& spec, int64_t seq_len, GgmlRope& rope) {
  // llama_model::get_rope_factors: long past n_ctx_orig_yarn; the converter's attn factor.
  const bool use_long = seq_len > spec.original_context();
  for (const double f : use_long ? spec.scaling.long_factor : spec.scaling.short_factor) {
    rope.freq_factors.push_back(static_cast<float>(f));
  }
  const double scale = static_cast<double>(spec.max_position_embeddings) / static_cast<double>(spec.original_context());
  rope.attn_factor =
      scale > 1.0 ? static_cast<float>(std::sqrt(1 + std::log(scale) / std::log(static_cast<double>(spec.original_context()))))
                  : 1.0f;
  return "";
}

}  // namespace

ScalingScheme longrope_scheme() {
  return {
      .type = ScalingType::LongRope,
      .name = "longrope",
      .alias = "su",  // Phi-3's first name for LongRoPE
      .required_keys = kRequired,
      .optional_keys = kOptional,
      .requires_factor = false,
      .reads_original_context = true,
      .derives_factor_from_context = true,
      .rotates_whole_head = false,
      .supports_vision2d = false,
      .sequence_dependent = true,
      .check = longrope_check,
      .read_hf_config = longrope_read_hf_config,
      .write_hf_config = longrope_write_hf_config,
      .frequencies = longrope_frequencies,
      .frequency_seq_len = longrope_frequency_seq_len,
      .hf_inv_freq_f32 = longrope_hf_inv_freq_f32,
      .ggml_rope = longrope_ggml_rope,
      .ggml_reads_freq_factors = true,
      .vllm_cache_rows = longrope_vllm_cache_rows,
      .describe = longrope_describe,
  };
}

}  // namespace rotary::scaling
