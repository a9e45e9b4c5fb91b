// src/core/spec.cpp: RopeSpec validation and the names of its enums.
#include "rotary/spec.hpp"

#include <cmath>
#include <numeric>
#include <string>

#include "rotary/error.hpp"
#include "rotary/frequencies.hpp"
#include "core/scaling/registry.hpp"
#include "core/scaling/scheme_support.hpp"

namespace rotary {

namespace {

using scaling::SpecCheck;

// Largest head_dim accepted: far above any real model (DeepSeek's 192, Gemma's 512), small
// enough that every size derived from it fits comfortably in memory and in int64 arithmetic.
constexpr int64_t kMaxHeadDim = int64_t{1} << 16;

}  // namespace

double RopeSpec::resolved_factor() const {
  if (scaling.factor) return *scaling.factor;
  if (scaling::scheme(scaling.type).derives_factor_from_context) {
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
  const SpecCheck check(spec);
  const Scaling& s = spec.scaling;
  const scaling::ScalingScheme& scheme = scaling::scheme(s.type);
  const bool proportional = scheme.rotates_whole_head;

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
  } else if (scheme.requires_factor) {
    check.fail("factor is required for ", type_name, " scaling (got none)");
  }
  if (s.original_max_position_embeddings < 0) {
    check.fail("original_max_position_embeddings must be >= 0 (got ",
               s.original_max_position_embeddings, ")");
  }
  if (scheme.reads_original_context && spec.original_context() <= 0) {
    check.fail("original_max_position_embeddings (or max_position_embeddings) must be > 0 for ",
               type_name, " (got ", spec.original_context(), ")");
  }
  if (scheme.derives_factor_from_context && !s.factor.has_value() && spec.max_position_embeddings <= 0) {
    check.fail("max_position_embeddings must be > 0 when ", type_name,
               " derives its factor from it (got ", spec.max_position_embeddings, ")");
  }

  // The fields only this scheme reads, and its attention scaling (src/core/scaling/).
  scheme.check(spec, check);

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
      if (!scheme.supports_vision2d) {
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
  for (const scaling::ScalingScheme& row : scaling::schemes()) {
    if (row.type == type) return row.name;
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
  // The names and aliases ("su", Phi-3's first name for LongRoPE) of src/core/scaling/registry.cpp.
  if (const scaling::ScalingScheme* row = scaling::find_scheme(name)) return row->type;
  return std::nullopt;
}

}  // namespace rotary
