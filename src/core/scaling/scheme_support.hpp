// src/core/scaling/scheme_support.hpp: what the scheme files of src/core/scaling/ share
// (internal to rotary_core: it uses the extended-precision type of extended.hpp).
//
//   SpecCheck       validate()'s message prefix and its checks of one field
//   FrequencyWork   one frequencies() evaluation: the unscaled and the scaled inv_freq in
//                   extended precision, and the Frequencies being filled
//   hf_*            the float32 steps of Hugging Face's inv_freq chains
#pragma once

#include <cfloat>
#include <cmath>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/extended.hpp"
#include "rotary/error.hpp"
#include "rotary/frequencies.hpp"
#include "rotary/spec.hpp"

namespace rotary::scaling {

using Real = detail::Extended;

// ---- validate() -------------------------------------------------------------------------------

class SpecCheck {
 public:
  explicit SpecCheck(const RopeSpec& spec)
      : where_(spec.name.empty() ? std::string("RopeSpec") : "RopeSpec " + spec.name) {}

  template <typename... Parts>
  [[noreturn]] void fail(Parts&&... parts) const {
    throw ConfigError(detail::concat(where_, ": ", std::forward<Parts>(parts)...));
  }

  void finite_positive(std::string_view field, double value) const {
    if (!std::isfinite(value) || value <= 0.0) fail(field, " must be a finite number > 0 (got ", value, ")");
  }

  // The attention scaling multiplies every float32 cos / sin entry, so it must be a normal
  // float32: past FLT_MAX the table is infinite, below FLT_MIN it is zero or subnormal (a config
  // with mscale 1e306 gave a table of inf: found by the one-hour hf_config fuzz run).
  template <typename... What>
  void float32_scaling(double value, What&&... what) const {
    if (!(value >= FLT_MIN && value <= FLT_MAX)) {
      fail(std::forward<What>(what)..., " must give an attention scaling in float32's normal range [", FLT_MIN,
           ", ", FLT_MAX, "] (it multiplies the float32 cos/sin) (got ", value, ")");
    }
  }

 private:
  std::string where_;
};

// For the schemes that read no field of their own.
void check_nothing(const RopeSpec& spec, const SpecCheck& check);
struct HfScalingReader;  // hf_reader.hpp
struct GgmlRope;         // registry.hpp
// For the schemes that read no rope_scaling key of their own.
void read_no_keys(HfScalingReader& reader, RopeSpec& spec);
// Dynamic NTK and NTK-alpha raise the base change to d / (d - 2).
void check_ntk_exponent(const RopeSpec& spec, const SpecCheck& check);

// ---- write_hf_config ---------------------------------------------------------------------------

// One config.json member, `"key": value`; doubles in their shortest round-trip text.
std::string hf_member(std::string_view key, double value);
std::string hf_member(std::string_view key, bool value);
std::string hf_member(std::string_view key, const std::vector<double>& values);
// The keys the shared part of hf_config.cpp reads: factor when given, and
// original_max_position_embeddings when the scheme reads it and it is set.
std::vector<std::string> hf_shared_members(const RopeSpec& spec);
// Members joined with ", ".
std::string hf_members(const std::vector<std::string>& members);
// For the schemes with no key beyond the shared ones.
std::string write_shared_keys(const RopeSpec& spec);

// ---- frequencies() ----------------------------------------------------------------------------

struct FrequencyWork {
  int64_t seq_len = 0;
  std::vector<Real> reference;  // the unscaled frequencies (default_inv_freq in Extended)
  std::vector<Real> theta;      // starts equal to reference; the scheme scales it
  Frequencies out;              // seq_len, effective_theta_base / factor and a scaling of 1 preset
};

// 2 pi in Extended.
Real two_pi();
// base^(-2i/d): RoFormer's frequencies, HF `1 / base ** (arange(0, d, 2) / d)`.
Real default_theta(Real base, int64_t pair, int64_t dim);
// Fills out.inv_freq and the per-pair diagnostics from the final and the unscaled frequencies.
void fill_diagnostics(Frequencies& out, const std::vector<Real>& theta, const std::vector<Real>& reference);
// Classifies NTK-style pairs: factor_applied grows from 1 (pair 0) to the full factor.
void classify_by_factor(Frequencies& out, double full_factor);
// YaRN's correction range [low, high] in pairs, in Extended (yarn.cpp).
std::pair<Real, Real> yarn_range(const RopeSpec& spec);
// A double as its shortest round-trip text, for attention_scaling_source.
inline std::string fmt(double value) { return detail::shortest(value); }

// For the schemes whose frequencies do not depend on seq_len.
int64_t seq_len_ignored(const RopeSpec& spec, int64_t seq_len);

// ---- Hugging Face's float32 chains ------------------------------------------------------------

inline float f32(double v) { return static_cast<float>(v); }
// torch's float32 pow, correctly rounded (torch itself is within 1 ulp of this).
inline float powf_rounded(float base, float exponent) {
  return f32(std::pow(static_cast<double>(base), static_cast<double>(exponent)));
}
// `torch.arange(0, dim, 2, dtype=int64).float() / dim`: fl32(fl32(2i) / fl32(dim)).
inline float hf_exponent(int64_t pair, int64_t dim) { return static_cast<float>(2 * pair) / static_cast<float>(dim); }
// The default chain: 1.0 / (base ** exponent), every step float32. 2-D vision restarts the
// index for the column half (Qwen2-VL VisionRotaryEmbedding over head_dim / 2).
std::vector<float> hf_default_chain(const RopeSpec& spec, float base_f32);

// ---- llama.cpp --------------------------------------------------------------------------------

// For the schemes llama.cpp applies as plain RoPE (GgmlRope's defaults).
std::string ggml_plain(const RopeSpec& spec, int64_t seq_len, GgmlRope& rope);

// ---- vLLM -------------------------------------------------------------------------------------

// torch.arange(float rows * factor) has ceil(rows * factor) elements; past kMaxPosition + 1 the
// count is kMaxPosition + 2, which export_table refuses.
int64_t vllm_rows_times(int64_t rows, double factor);
// For the schemes whose vLLM cache is max_position_embeddings rows.
int64_t vllm_rows_declared(const RopeSpec& spec);

}  // namespace rotary::scaling
