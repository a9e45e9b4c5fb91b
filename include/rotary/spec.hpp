// include/rotary/spec.hpp: RopeSpec, the complete description of one model's rotary embedding.
//
// A RopeSpec is plain data: build it by hand, from a Hugging Face config.json (hf_config.hpp) or
// from a preset (presets.hpp). validate() names every impossible combination. The formulas that
// turn a spec into frequencies live in frequencies.hpp / src/core/scaling/ (one file per scheme), and each
// scheme's parameters are documented there and in docs/formulas.md.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rotary {

// Which two elements of a head form rotation pair i (pair i always uses frequency i).
//   NeoX (half-split, HF `rotate_half`):         (x[i], x[i + rotary_dim/2])
//   GPTJ (interleaved, Meta's complex form):      (x[2i], x[2i + 1])
// NeoX, rotary_dim = 8 of head_dim = 10:  [a b c d A B C D . .]  pairs (a,A) (b,B) ...
// GPTJ, rotary_dim = 8 of head_dim = 10:  [a A b B c C d D . .]  (. = passed through)
enum class Style { NeoX, GPTJ };

// The frequency scheme. Names follow Hugging Face's rope_type where one exists.
enum class ScalingType {
  Default,       // theta_i = base^(-2i/d)
  Linear,        // position interpolation: theta_i / factor
  Dynamic,       // dynamic NTK: base grows with seq_len past max_position_embeddings (HF `dynamic`)
  NtkAlpha,      // static NTK-aware: base * alpha^(d/(d-2)) (not an HF rope_type; vLLM/Hunyuan)
  Yarn,          // YaRN: per-pair blend of interpolation and extrapolation, plus mscale
  LongRope,      // LongRoPE / su (Phi-3): per-pair factor lists, short or long by seq_len
  Llama3,        // Llama 3.1: wavelength bands, smooth blend in between
  Proportional,  // Gemma-4: frequencies over the full head dim, zero for unrotated pairs
};

// Every parameter any scheme reads. Fields a scheme does not read are ignored by it (and by
// validate()). Defaults are Hugging Face's.
struct Scaling {
  ScalingType type = ScalingType::Default;

  // linear, dynamic, yarn, llama3, proportional: the context extension factor s (>= 1).
  // yarn and longrope: when absent, s = max_position_embeddings / original_max_position_embeddings.
  std::optional<double> factor;

  // yarn, longrope, llama3: the pretraining context L0. 0 = use max_position_embeddings
  // (what HF's standardize_rope_params does when the key is missing).
  int64_t original_max_position_embeddings = 0;

  // yarn: correction range bounds in rotations, and whether to floor/ceil it (gpt-oss: false).
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  bool truncate = true;
  // yarn: mscale / mscale_all_dim (DeepSeek). Used only when both are present and non-zero
  // (HF tests their truthiness); then attention_scaling = mscale(s, mscale) / mscale(s, mscale_all_dim).
  std::optional<double> mscale;
  std::optional<double> mscale_all_dim;
  // yarn, longrope: explicit attention factor; overrides the formula.
  std::optional<double> attention_factor;

  // longrope: per-pair factors (length rotary_dim/2), short for seq_len <= L0, long beyond.
  std::vector<double> short_factor;
  std::vector<double> long_factor;

  // llama3: wavelength band edges as fractions of L0.
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;

  // ntk_alpha: the NTK alpha (> 0).
  double ntk_alpha = 1.0;
};

// xPos (Sun et al. 2022; flash-attn `scale_base`): queries are scaled by zeta_i^e(p), keys by
// zeta_i^-e(p), with zeta_i = (2i + 0.4 d) / (1.4 d) and e(p) = (p - L//2) / scale_base.
struct XPos {
  double scale_base = 512.0;
};

// How many position streams a token carries, and which stream each pair reads.
enum class PositionAxes {
  Single,    // one position per token (text)
  MRope,     // M-RoPE (Qwen2-VL and later): three streams t, h, w; see MRopeSections
  Vision2D,  // 2-D axial RoPE for image patches: pairs [0, d/4) read the row, [d/4, d/2) the column,
             // and the frequency index restarts at 0 for the column half
};

// M-RoPE section assignment of pairs to the (t, h, w) streams. The sections sum to rotary_dim/2.
enum class MRopeAssignment {
  Chunked,      // Qwen2-VL / Qwen2.5-VL: pairs [0, s_t) -> t, [s_t, s_t+s_h) -> h, the rest -> w
  Interleaved,  // Qwen3-VL: pair i -> h if i%3==1 && i < 3 s_h; w if i%3==2 && i < 3 s_w; else t
};

struct MRopeSections {
  std::array<int64_t, 3> pairs{};  // (s_t, s_h, s_w), counted in pairs (HF's mrope_section)
  MRopeAssignment assignment = MRopeAssignment::Chunked;
};

struct RopeSpec {
  std::string name;      // where the spec came from ("llama-3.1-8b", a config path); informative
  int64_t head_dim = 0;  // elements per head that the rotary embedding sees
  int64_t rotary_dim = 0;  // leading elements rotated (even, <= head_dim); the rest pass through.
                           // Proportional: always head_dim (see rotated_pairs()).
  double partial_rotary_factor = 1.0;  // as configured; Proportional reads it, others use rotary_dim
  double theta_base = 10000.0;         // the config's rope_theta
  Style style = Style::NeoX;
  Scaling scaling;
  int64_t max_position_embeddings = 0;  // the context the config declares (0 = unknown)

  std::optional<XPos> xpos;
  PositionAxes axes = PositionAxes::Single;
  MRopeSections mrope;  // read when axes == MRope

  // Model geometry, informative (0 = unknown). num_key_value_heads defaults to num_attention_heads.
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t hidden_size = 0;

  int64_t num_pairs() const { return rotary_dim / 2; }
  // The pretraining context: scaling.original_max_position_embeddings, else max_position_embeddings.
  int64_t original_context() const;
  // The scaling factor s: scaling.factor, else for YaRN and LongRoPE (as HF)
  // max_position_embeddings / original_context(), else 1.
  double resolved_factor() const;
};

// Throws rotary::ConfigError naming the first invalid field and its value, e.g.
// "RopeSpec llama-3.1-8b: rotary_dim must be even (got 63)". Checks every field the scheme reads.
void validate(const RopeSpec& spec);

std::string_view to_string(Style style);              // "neox", "gptj"
std::string_view to_string(ScalingType type);         // HF rope_type: "default", "llama3", ...
std::string_view to_string(PositionAxes axes);        // "single", "mrope", "vision2d"
std::string_view to_string(MRopeAssignment assignment);  // "chunked", "interleaved"

// Parses the names above (and HF aliases: "su" -> LongRope, "gpt-j"/"interleaved" -> GPTJ,
// "half-split"/"gpt-neox" -> NeoX). Returns nullopt for an unknown name.
std::optional<Style> parse_style(std::string_view name);
std::optional<ScalingType> parse_scaling_type(std::string_view name);

}  // namespace rotary
