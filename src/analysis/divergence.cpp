// src/analysis/divergence.cpp: engine_divergence() (include/rotary/analysis.hpp): each engine's
// cos/sin numerics (table.hpp Precision::HFCompat, Ggml, Vllm) against the exact table.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <memory>

#include "rotary/analysis.hpp"
#include "rotary/error.hpp"

namespace rotary::analysis {

namespace {

constexpr int64_t kMaxDivergencePositions = 100'000;

int64_t bucket_of(int64_t position) {  // octave: 0 -> 0, 1 -> 1, [2, 3] -> 2, [4, 7] -> 3, ...
  return position == 0 ? 0 : 64 - std::countl_zero(static_cast<uint64_t>(position));
}

std::pair<int64_t, int64_t> bucket_range(int64_t bucket) {
  if (bucket == 0) return {0, 0};
  return {int64_t{1} << (bucket - 1), (int64_t{1} << bucket) - 1};
}

std::vector<int64_t> default_positions(int64_t max_position, int64_t samples) {
  std::vector<int64_t> positions;
  for (int64_t bucket = 0;; ++bucket) {
    auto [first, last] = bucket_range(bucket);
    if (first >= max_position) break;
    last = std::min(last, max_position - 1);
    const int64_t span = last - first;
    const int64_t count = std::min(samples, span + 1);
    for (int64_t k = 0; k < count; ++k) {
      positions.push_back(count == 1 ? first : first + (span * k) / (count - 1));
    }
  }
  std::sort(positions.begin(), positions.end());
  positions.erase(std::unique(positions.begin(), positions.end()), positions.end());
  return positions;
}

std::string engine_label(Precision precision, DType vllm_dtype) {
  std::string label(to_string(precision));
  if (precision == Precision::Vllm) label += " (" + std::string(to_string(vllm_dtype)) + " cache)";
  return label;
}

}  // namespace

int64_t float32_steps(float value, float reference) {
  const uint32_t value_bits = std::bit_cast<uint32_t>(value);
  const uint32_t reference_bits = std::bit_cast<uint32_t>(reference);
  const uint32_t value_magnitude = value_bits & 0x7fffffffu;
  const uint32_t reference_magnitude = reference_bits & 0x7fffffffu;
  if ((value_bits ^ reference_bits) >> 31 == 0 && value_magnitude != 0 && reference_magnitude != 0) {
    // One sign: the magnitudes' bit patterns are in the floats' order, one integer per float32.
    return std::abs(static_cast<int64_t>(value_magnitude) - static_cast<int64_t>(reference_magnitude));
  }
  // Across zero or to zero, counting every float32 between them would count all the binades below
  // both values (about 2^30 between +-1e-3): each value's distance to zero in its own ulps,
  // |v| / ulp(v), is its significand with the implicit bit (subnormals: the bits themselves).
  const auto steps_to_zero = [](uint32_t magnitude) {
    return static_cast<int64_t>((magnitude & 0x7fffffu) | (magnitude >> 23 != 0 ? 0x800000u : 0u));
  };
  return steps_to_zero(value_magnitude) + steps_to_zero(reference_magnitude);
}

Divergence engine_divergence(const RopeSpec& spec, const DivergenceOptions& options) {
  validate(spec);
  if (options.samples_per_bucket < 2) {
    throw Error(detail::concat("engine_divergence: samples_per_bucket must be >= 2 (got ", options.samples_per_bucket, ")"));
  }
  std::vector<int64_t> positions = options.positions;
  if (positions.empty()) {
    int64_t max_position = options.max_position;
    if (max_position == 0) max_position = spec.max_position_embeddings > 0 ? spec.max_position_embeddings : 131072;
    if (max_position < 1 || max_position > kMaxPosition + 1) {
      throw Error(detail::concat("engine_divergence: max_position must be in [1, ", kMaxPosition + 1, "] (got ",
                                 max_position, ")"));
    }
    positions = default_positions(max_position, options.samples_per_bucket);
  } else {
    for (const int64_t p : positions) {
      if (p < 0 || p > kMaxPosition) {
        throw Error(detail::concat("engine_divergence: positions must be in [0, ", kMaxPosition, "] (got ", p, ")"));
      }
    }
    std::sort(positions.begin(), positions.end());
    positions.erase(std::unique(positions.begin(), positions.end()), positions.end());
  }
  if (static_cast<int64_t>(positions.size()) > kMaxDivergencePositions) {
    throw Error(detail::concat("engine_divergence: positions must number at most ", kMaxDivergencePositions, " (got ",
                               positions.size(), ")"));
  }

  Divergence out;
  out.spec_name = spec.name;
  out.positions = positions;
  out.seq_len = positions.back() + 1;
  const CosSinTable exact(spec, {.precision = Precision::Exact, .storage = Storage::OnTheFly, .seq_len = out.seq_len});
  const int64_t pairs = exact.num_pairs();
  const Frequencies freqs = frequencies(spec, out.seq_len);

  struct Engine {
    EngineDivergence result;
    std::unique_ptr<CosSinTable> table;
  };
  std::vector<Engine> engines;
  for (const Precision precision : options.precisions) {
    Engine e;
    e.result.precision = precision;
    e.result.label = engine_label(precision, options.vllm_dtype);
    try {
      TableOptions table_options{.precision = precision, .storage = Storage::OnTheFly, .seq_len = out.seq_len};
      // vLLM's table holds the rows vLLM builds (vllm_cache_rows): positions past them are not
      // vLLM's numerics but an index past its cache.
      if (precision == Precision::Vllm) table_options.cache_dtype = options.vllm_dtype;
      e.table = std::make_unique<CosSinTable>(spec, table_options);
      if (precision == Precision::Vllm && e.table->max_position() < positions.back()) {
        throw Error(detail::concat("positions reach ", positions.back(), ", past the ", e.table->max_position() + 1,
                                   " rows of vLLM's cache for spec ", spec.name));
      }
    } catch (const Error& error) {
      e.table.reset();
      e.result.available = false;
      e.result.reason = error.what();
    }
    for (int64_t i = 0; i < pairs; ++i) {
      e.result.pairs.push_back({.pair = i, .wavelength_tokens = freqs.pairs[i].wavelength_tokens});
    }
    engines.push_back(std::move(e));
  }

  std::vector<double> exact_cos(pairs), exact_sin(pairs);
  std::vector<float> rounded_cos(pairs), rounded_sin(pairs), cos_row(pairs), sin_row(pairs);
  for (const int64_t p : positions) {
    exact.row_f64(p, exact_cos.data(), exact_sin.data());
    exact.row(p, rounded_cos.data(), rounded_sin.data());
    const int64_t bucket = bucket_of(p);
    for (Engine& e : engines) {
      if (!e.table) continue;
      e.table->row(p, cos_row.data(), sin_row.data());
      std::vector<DivergenceBucket>& buckets = e.result.buckets;
      if (buckets.empty() || bucket_of(buckets.back().first) != bucket) {
        const auto [first, last] = bucket_range(bucket);
        buckets.push_back({.first = first, .last = last, .worst_position = p});
      }
      DivergenceBucket& b = buckets.back();
      ++b.positions;
      for (int64_t i = 0; i < pairs; ++i) {
        for (int which = 0; which < 2; ++which) {
          const float value = which == 0 ? cos_row[i] : sin_row[i];
          const double error = std::abs(static_cast<double>(value) - (which == 0 ? exact_cos[i] : exact_sin[i]));
          const int64_t ulps = float32_steps(value, which == 0 ? rounded_cos[i] : rounded_sin[i]);
          if (error > b.max_abs_error) {
            b.max_abs_error = error;
            b.worst_position = p;
            b.worst_pair = i;
          }
          b.max_ulps = std::max(b.max_ulps, ulps);
          DivergencePair& pair = e.result.pairs[i];
          pair.max_abs_error = std::max(pair.max_abs_error, error);
          pair.max_ulps = std::max(pair.max_ulps, ulps);
          e.result.max_abs_error = std::max(e.result.max_abs_error, error);
          e.result.max_ulps = std::max(e.result.max_ulps, ulps);
        }
      }
    }
  }
  for (Engine& e : engines) {
    if (!e.result.available) e.result.pairs.clear();
    out.engines.push_back(std::move(e.result));
  }
  return out;
}

}  // namespace rotary::analysis
