// src/core/scaling/llama3.cpp: Llama 3.1's wavelength bands.
//
// Hugging Face _compute_llama3_parameters (Meta's apply_scaling in llama-models):
//   wavelength < L0/high_freq_factor: keep; > L0/low_freq_factor: divide by s;
//   between: sigma = (L0/wavelength - low)/(high - low), theta' = (1-sigma) theta/s + sigma theta.
#include <numbers>

#include "core/scaling/hf_reader.hpp"
#include "core/scaling/registry.hpp"
#include "core/scaling/scheme_support.hpp"

namespace rotary::scaling {

namespace {

constexpr std::string_view kRequired[] = {"factor", "low_freq_factor", "high_freq_factor"};
constexpr std::string_view kOptional[] = {"original_max_position_embeddings"};

void llama3_check(const RopeSpec& spec, const SpecCheck& check) {
  const Scaling& s = spec.scaling;
  check.finite_positive("low_freq_factor", s.low_freq_factor);
  check.finite_positive("high_freq_factor", s.high_freq_factor);
  if (s.low_freq_factor >= s.high_freq_factor) {
    check.fail("low_freq_factor must be < high_freq_factor ", s.high_freq_factor, " (got ", s.low_freq_factor, ")");
  }
}

void llama3_read_hf_config(HfScalingReader& reader, RopeSpec& spec) {
  Scaling& s = spec.scaling;
  HfFieldReader& config = reader.config;
  s.low_freq_factor = config.number_at_least(reader.member("low_freq_factor"), 0.0, false);
  Field high = reader.member("high_freq_factor");
  s.high_freq_factor = config.number_at_least(high, 0.0, false);
  if (s.high_freq_factor <= s.low_freq_factor) {
    config.fail_at(high.value, high.path, " must be > low_freq_factor ", s.low_freq_factor, " (got ",
                   s.high_freq_factor, "; transformers only warns)");
  }
  if (reader.max_position_embeddings > 0 && s.original_max_position_embeddings >= reader.max_position_embeddings) {
    config.warn(reader.params.path, ".original_max_position_embeddings ", s.original_max_position_embeddings,
                " should be less than max_position_embeddings ", reader.max_position_embeddings,
                " (transformers warns: the scaling then extends nothing)");
  }
}

void llama3_frequencies(const RopeSpec& spec, FrequencyWork& work) {
  const Scaling& s = spec.scaling;
  const int64_t num_pairs = spec.rotary_dim / 2;
  const Real original = static_cast<Real>(spec.original_context());
  const Real factor = *s.factor;
  const Real low_ff = s.low_freq_factor;
  const Real high_ff = s.high_freq_factor;
  const Real low_freq_wavelength = original / low_ff;
  const Real high_freq_wavelength = original / high_ff;
  std::vector<PairRegime> regimes(static_cast<size_t>(num_pairs));
  std::vector<double> blends(static_cast<size_t>(num_pairs));
  for (int64_t i = 0; i < num_pairs; ++i) {
    const Real reference = work.reference[i];
    const Real wavelength = two_pi() / reference;
    if (wavelength < high_freq_wavelength) {
      regimes[i] = PairRegime::Extrapolated;
      blends[i] = 0.0;
    } else if (wavelength > low_freq_wavelength) {
      work.theta[i] = reference / factor;
      regimes[i] = PairRegime::Interpolated;
      blends[i] = 1.0;
    } else {
      const Real sigma = (original / wavelength - low_ff) / (high_ff - low_ff);
      work.theta[i] = (1 - sigma) * reference / factor + sigma * reference;
      regimes[i] = PairRegime::Blended;
      blends[i] = static_cast<double>(1 - sigma);
    }
  }
  fill_diagnostics(work.out, work.theta, work.reference);
  for (int64_t i = 0; i < num_pairs; ++i) {
    work.out.pairs[i].regime = factor == 1 ? PairRegime::Unscaled : regimes[i];
    work.out.pairs[i].blend = blends[i];
  }
}

std::vector<float> llama3_hf_inv_freq_f32(const RopeSpec& spec, int64_t) {
  const Scaling& s = spec.scaling;
  std::vector<float> inv = hf_default_chain(spec, f32(spec.theta_base));
  const float factor = f32(*s.factor);
  const double original = static_cast<double>(spec.original_context());
  const float low_wavelength = f32(original / s.low_freq_factor);
  const float high_wavelength = f32(original / s.high_freq_factor);
  const float two_pi_f32 = f32(2 * std::numbers::pi);
  for (float& v : inv) {
    const float wavelength = two_pi_f32 / v;
    const float scaled = wavelength > low_wavelength ? v / factor : v;
    const float smooth =
        (f32(original) / wavelength - f32(s.low_freq_factor)) / f32(s.high_freq_factor - s.low_freq_factor);
    const float smoothed = (1.0f - smooth) * scaled / factor + smooth * scaled;
    const bool medium = !(wavelength < high_wavelength) && !(wavelength > low_wavelength);
    v = medium ? smoothed : scaled;
  }
  return inv;
}

std::string llama3_describe(const RopeSpec& spec, const Frequencies&) {
  const Scaling& s = spec.scaling;
  const double original = static_cast<double>(spec.original_context());
  return "llama3: factor " + fmt(*s.factor) + ", low_freq_factor " + fmt(s.low_freq_factor) + ", high_freq_factor " +
         fmt(s.high_freq_factor) + ", original context " + std::to_string(spec.original_context()) +
         " (wavelengths below " + fmt(original / s.high_freq_factor) + " tokens kept, above " +
         fmt(original / s.low_freq_factor) + " divided by " + fmt(*s.factor) + ")";
}

std::string llama3_write_hf_config(const RopeSpec& spec) {
  std::vector<std::string> members = hf_shared_members(spec);
  members.push_back(hf_member("low_freq_factor", spec.scaling.low_freq_factor));
  members.push_back(hf_member("high_freq_factor", spec.scaling.high_freq_factor));
  return hf_members(members);
}

// Llama 3's rope_freqs as llama.cpp's converter writes them (conversion/llama.py
// generate_extra_tensors): float32 default frequencies, the bands and the smooth factor in Python
// float64, each factor stored as float32.
std::string llama3_ggml_rope(const RopeSpec& spec, int64_t, GgmlRope& rope) {
  const std::vector<float> freqs = hf_default_chain(spec, f32(spec.theta_base));
  const Scaling& s = spec.scaling;
  const double factor = *s.factor;
  const double old_context = static_cast<double>(spec.original_context());
  const double low_wavelength = old_context / s.low_freq_factor;
  const double high_wavelength = old_context / s.high_freq_factor;
  for (const float freq : freqs) {
    const double wavelength = 2 * std::numbers::pi / static_cast<double>(freq);
    if (wavelength < high_wavelength) {
      rope.freq_factors.push_back(1.0f);
    } else if (wavelength > low_wavelength) {
      rope.freq_factors.push_back(static_cast<float>(factor));
    } else {
      const double smooth = (old_context / wavelength - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      rope.freq_factors.push_back(static_cast<float>(1 / ((1 - smooth) / factor + smooth)));
    }
  }
  return "";
}

}  // namespace

ScalingScheme llama3_scheme() {
  return {
      .type = ScalingType::Llama3,
      .name = "llama3",
      .alias = "",
      .required_keys = kRequired,
      .optional_keys = kOptional,
      .requires_factor = true,
      .reads_original_context = true,
      .derives_factor_from_context = false,
      .rotates_whole_head = false,
      .supports_vision2d = false,
      .sequence_dependent = false,
      .check = llama3_check,
      .read_hf_config = llama3_read_hf_config,
      .write_hf_config = llama3_write_hf_config,
      .frequencies = llama3_frequencies,
      .frequency_seq_len = seq_len_ignored,
      .hf_inv_freq_f32 = llama3_hf_inv_freq_f32,
      .ggml_rope = llama3_ggml_rope,
      .ggml_reads_freq_factors = true,
      .vllm_cache_rows = vllm_rows_declared,
      .describe = llama3_describe,
  };
}

}  // namespace rotary::scaling
