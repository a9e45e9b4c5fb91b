// src/core/spec.cpp: RopeSpec validation and the names of its enums.
#include "rotary/spec.hpp"

#include <cfloat>
#include <cmath>
#include <numeric>
#include <string>

#include "rotary/error.hpp"
#include "rotary/frequencies.hpp"

namespace rotary {

namespace {

// Largest head_dim accepted: far above any real model (DeepSeek's 192, Gemma's 512), small
// enough that every size derived from it fits comfortably in memory and in int64 arithmetic.
constexpr int64_t kMaxHeadDim = int64_t{1} << 16;

class SpecChecker {
 public:
  explicit SpecChecker(const RopeSpec& spec)
      : where_(spec.name.empty() ? std::string("RopeSpec") : "RopeSpec " + spec.name) {}

  template <typename... Parts>
  [[noreturn]] void fail(Parts&&... parts) const {
    throw ConfigError(detail::concat(where_, ": ", std::forward<Parts>(parts)...));
  }

  void finite_positive(std::string_view field, double value) const {
    if (!std::isfinite(value) || value <= 0.0) fail(field, " must be a finite number > 0 (got ", value, ")");
  }

 private:
  std::string where_;
};

bool needs_factor(ScalingType type) {
  return type == ScalingType::Linear || type == ScalingType::Dynamic || type == ScalingType::Llama3;
}

bool uses_original_context(ScalingType type) {
  return type == ScalingType::Yarn || type == ScalingType::LongRope || type == ScalingType::Llama3;
}

}  // namespace

double RopeSpec::resolved_factor() const {
  if (scaling.factor) return *scaling.factor;
  if (scaling.type == ScalingType::Yarn || scaling.type == ScalingType::LongRope) {
    // HF: "if factor is None: factor = config.max_position_embeddings / original_max_position_embeddings"
    return static_cast<double>(max_position_embeddings) / static_cast<double>(original_context());
  }
  return 1.0;
}

int64_t RopeSpec::original_context() const {
  return scaling.original_max_position_embeddings > 0 ? scaling.original_max_position_embeddings
                                                      : max_position_embeddings;
}

void validate(const RopeSpec& spec) {
  const SpecChecker check(spec);
  const Scaling& s = spec.scaling;
  const bool proportional = s.type == ScalingType::Proportional;

  if (spec.head_dim < 2 || spec.head_dim > kMaxHeadDim) {
    check.fail("head_dim must be in [2, ", kMaxHeadDim, "] (got ", spec.head_dim, ")");
  }
  if (spec.rotary_dim <= 0) check.fail("rotary_dim must be > 0 (got ", spec.rotary_dim, ")");
  if (spec.rotary_dim % 2 != 0) check.fail("rotary_dim must be even (got ", spec.rotary_dim, ")");
  if (spec.rotary_dim > spec.head_dim) {
    check.fail("rotary_dim must be <= head_dim ", spec.head_dim, " (got ", spec.rotary_dim, ")");
  }
  if (proportional && spec.rotary_dim != spec.head_dim) {
    check.fail("rotary_dim must equal head_dim ", spec.head_dim,
               " for proportional RoPE, which rotates the whole head (got ", spec.rotary_dim, ")");
  }
  if (!std::isfinite(spec.partial_rotary_factor) || spec.partial_rotary_factor < 0.0 ||
      spec.partial_rotary_factor > 1.0 || (!proportional && spec.partial_rotary_factor == 0.0)) {
    check.fail("partial_rotary_factor must be in ", proportional ? "[0, 1]" : "(0, 1]", " (got ",
               spec.partial_rotary_factor, ")");
  }
  if (!std::isfinite(spec.theta_base) || spec.theta_base <= 1.0) {
    check.fail("rope_theta must be a finite number > 1 (got ", spec.theta_base, ")");
  }
  if (spec.max_position_embeddings < 0) {
    check.fail("max_position_embeddings must be >= 0 (got ", spec.max_position_embeddings, ")");
  }
  if (spec.num_attention_heads < 0) {
    check.fail("num_attention_heads must be >= 0 (got ", spec.num_attention_heads, ")");
  }
  if (spec.num_key_value_heads < 0) {
    check.fail("num_key_value_heads must be >= 0 (got ", spec.num_key_value_heads, ")");
  }
  if (spec.num_attention_heads > 0 && spec.num_key_value_heads > 0 &&
      spec.num_attention_heads % spec.num_key_value_heads != 0) {
    check.fail("num_key_value_heads must divide num_attention_heads ", spec.num_attention_heads,
               " (got ", spec.num_key_value_heads, ")");
  }
  if (spec.hidden_size < 0) check.fail("hidden_size must be >= 0 (got ", spec.hidden_size, ")");

  // Scaling parameters, only those the scheme reads.
  const std::string type_name(to_string(s.type));
  if (s.factor.has_value()) {
    if (!std::isfinite(*s.factor) || *s.factor < 1.0) {
      check.fail("factor must be a finite number >= 1 for ", type_name, " (got ", *s.factor, ")");
    }
  } else if (needs_factor(s.type)) {
    check.fail("factor is required for ", type_name, " scaling (got none)");
  }
  if (s.original_max_position_embeddings < 0) {
    check.fail("original_max_position_embeddings must be >= 0 (got ",
               s.original_max_position_embeddings, ")");
  }
  if (uses_original_context(s.type) && spec.original_context() <= 0) {
    check.fail("original_max_position_embeddings (or max_position_embeddings) must be > 0 for ",
               type_name, " (got ", spec.original_context(), ")");
  }
  if ((s.type == ScalingType::Yarn || s.type == ScalingType::LongRope) && !s.factor.has_value() &&
      spec.max_position_embeddings <= 0) {
    check.fail("max_position_embeddings must be > 0 when ", type_name,
               " derives its factor from it (got ", spec.max_position_embeddings, ")");
  }

  switch (s.type) {
    case ScalingType::Default:
    case ScalingType::Linear:
      break;
    case ScalingType::Dynamic:
      if (spec.max_position_embeddings <= 0) {
        check.fail("max_position_embeddings must be > 0 for dynamic scaling (got ",
                   spec.max_position_embeddings, ")");
      }
      [[fallthrough]];
    case ScalingType::NtkAlpha:
      // The NTK base change raises to d / (d - 2).
      if (spec.rotary_dim <= 2) {
        check.fail("rotary_dim must be > 2 for ", type_name, " (its base exponent is d/(d-2)) (got ",
                   spec.rotary_dim, ")");
      }
      if (s.type == ScalingType::NtkAlpha) check.finite_positive("alpha", s.ntk_alpha);
      break;
    case ScalingType::Yarn:
      check.finite_positive("beta_fast", s.beta_fast);
      check.finite_positive("beta_slow", s.beta_slow);
      if (s.beta_fast < s.beta_slow) {
        check.fail("beta_fast must be >= beta_slow ", s.beta_slow, " (got ", s.beta_fast, ")");
      }
      if (s.mscale && !std::isfinite(*s.mscale)) check.fail("mscale must be finite (got ", *s.mscale, ")");
      if (s.mscale_all_dim && !std::isfinite(*s.mscale_all_dim)) {
        check.fail("mscale_all_dim must be finite (got ", *s.mscale_all_dim, ")");
      }
      break;
    case ScalingType::LongRope: {
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
      break;
    }
    case ScalingType::Llama3:
      check.finite_positive("low_freq_factor", s.low_freq_factor);
      check.finite_positive("high_freq_factor", s.high_freq_factor);
      if (s.low_freq_factor >= s.high_freq_factor) {
        check.fail("low_freq_factor must be < high_freq_factor ", s.high_freq_factor, " (got ",
                   s.low_freq_factor, ")");
      }
      break;
    case ScalingType::Proportional:
      break;
  }
  if (s.attention_factor.has_value() &&
      (s.type == ScalingType::Yarn || s.type == ScalingType::LongRope)) {
    check.finite_positive("attention_factor", *s.attention_factor);
  }
  // The attention scaling multiplies every float32 cos / sin entry, so it must be a normal
  // float32: past FLT_MAX the table is infinite, below FLT_MIN it is zero or subnormal (a config
  // with mscale 1e306 gave a table of inf: found by the one-hour hf_config fuzz run). Formulas as
  // in frequencies() (docs/formulas.md, mscale).
  const auto float32_scaling = [&](double value, auto&&... what) {
    if (!(value >= FLT_MIN && value <= FLT_MAX)) {
      check.fail(what..., " must give an attention scaling in float32's normal range [", FLT_MIN, ", ", FLT_MAX,
                 "] (it multiplies the float32 cos/sin) (got ", value, ")");
    }
  };
  if (s.type == ScalingType::Yarn || s.type == ScalingType::LongRope) {
    const double factor = spec.resolved_factor();
    if (s.attention_factor) {
      float32_scaling(*s.attention_factor, "attention_factor");
    } else if (s.type == ScalingType::Yarn && s.mscale && s.mscale_all_dim && *s.mscale != 0.0 &&
               *s.mscale_all_dim != 0.0) {
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
      float32_scaling(numerator / denominator, "mscale ", *s.mscale, " and mscale_all_dim ", *s.mscale_all_dim);
    } else if (s.type == ScalingType::LongRope && factor > 1.0 && spec.original_context() <= 1) {
      // sqrt(1 + ln s / ln L0): ln 1 = 0 (HF raises ZeroDivisionError).
      check.fail("original_max_position_embeddings must be > 1 for LongRoPE's attention scaling "
                 "sqrt(1 + ln(factor)/ln(original_max_position_embeddings)) (got ",
                 spec.original_context(), ")");
    }
  }

  if (spec.xpos) check.finite_positive("xpos.scale_base", spec.xpos->scale_base);

  switch (spec.axes) {
    case PositionAxes::Single:
      break;
    case PositionAxes::MRope: {
      int64_t total = 0;
      for (int64_t pairs : spec.mrope.pairs) {
        if (pairs < 0) check.fail("mrope_section entries must be >= 0 (got ", pairs, ")");
        total += pairs;
      }
      if (total != spec.rotary_dim / 2) {
        check.fail("mrope_section must sum to rotary_dim/2 = ", spec.rotary_dim / 2, " (got [",
                   spec.mrope.pairs[0], ", ", spec.mrope.pairs[1], ", ", spec.mrope.pairs[2],
                   "], sum ", total, ")");
      }
      break;
    }
    case PositionAxes::Vision2D:
      if (spec.rotary_dim % 4 != 0) {
        check.fail("rotary_dim must be a multiple of 4 for 2-D vision RoPE (half the pairs per axis) (got ",
                   spec.rotary_dim, ")");
      }
      if (s.type != ScalingType::Default && s.type != ScalingType::Linear) {
        check.fail("2-D vision RoPE supports default and linear scaling only (got ", type_name, ")");
      }
      break;
  }
}

std::string_view to_string(Style style) {
  switch (style) {
    case Style::NeoX: return "neox";
    case Style::GPTJ: return "gptj";
  }
  return "?";
}

std::string_view to_string(ScalingType type) {
  switch (type) {
    case ScalingType::Default: return "default";
    case ScalingType::Linear: return "linear";
    case ScalingType::Dynamic: return "dynamic";
    case ScalingType::NtkAlpha: return "ntk_alpha";
    case ScalingType::Yarn: return "yarn";
    case ScalingType::LongRope: return "longrope";
    case ScalingType::Llama3: return "llama3";
    case ScalingType::Proportional: return "proportional";
  }
  return "?";
}

std::string_view to_string(PositionAxes axes) {
  switch (axes) {
    case PositionAxes::Single: return "single";
    case PositionAxes::MRope: return "mrope";
    case PositionAxes::Vision2D: return "vision2d";
  }
  return "?";
}

std::string_view to_string(MRopeAssignment assignment) {
  switch (assignment) {
    case MRopeAssignment::Chunked: return "chunked";
    case MRopeAssignment::Interleaved: return "interleaved";
  }
  return "?";
}

std::optional<Style> parse_style(std::string_view name) {
  if (name == "neox" || name == "half-split" || name == "half_split" || name == "gpt-neox") return Style::NeoX;
  if (name == "gptj" || name == "gpt-j" || name == "interleaved") return Style::GPTJ;
  return std::nullopt;
}

std::optional<ScalingType> parse_scaling_type(std::string_view name) {
  for (ScalingType type : {ScalingType::Default, ScalingType::Linear, ScalingType::Dynamic,
                           ScalingType::NtkAlpha, ScalingType::Yarn, ScalingType::LongRope,
                           ScalingType::Llama3, ScalingType::Proportional}) {
    if (name == to_string(type)) return type;
  }
  if (name == "su") return ScalingType::LongRope;  // Phi-3's first name for LongRoPE
  return std::nullopt;
}

}  // namespace rotary
