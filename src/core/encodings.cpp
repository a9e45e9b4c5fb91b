// src/core/encodings.cpp: ALiBi's slopes and bias, the sinusoidal encoding (include/rotary/
// encodings.hpp, which cites the sources: Press et al. 2021, arXiv:2108.12409, section 3 and the
// authors' get_slopes; Vaswani et al. 2017, arXiv:1706.03762, section 3.5).
#include "rotary/encodings.hpp"

#include <cmath>

#include "rotary/error.hpp"

namespace rotary {
namespace {

// get_slopes_power_of_2(n): start = 2^(-8/n), slope_h = start^(h+1).
std::vector<double> power_of_two_slopes(int64_t n) {
  std::vector<double> slopes(static_cast<size_t>(n));
  for (int64_t h = 0; h < n; ++h) {
    slopes[static_cast<size_t>(h)] = std::exp2(-8.0 * static_cast<double>(h + 1) / static_cast<double>(n));
  }
  return slopes;
}

void check_sinusoidal(const char* where, int64_t d_model, double base) {
  if (d_model <= 0 || d_model % 2 != 0) {
    throw Error(detail::concat(where, ": d_model must be even and > 0 (got ", d_model, ")"));
  }
  if (!(base > 1.0) || !std::isfinite(base)) {
    throw Error(detail::concat(where, ": base must be a finite number > 1 (got ", base, ")"));
  }
}

}  // namespace

std::vector<double> alibi_slopes(int64_t num_heads) {
  if (num_heads <= 0) throw Error(detail::concat("alibi_slopes: num_heads must be > 0 (got ", num_heads, ")"));
  if (num_heads > (int64_t{1} << 20)) {
    throw Error(detail::concat("alibi_slopes: num_heads must be <= 1048576 (got ", num_heads, ")"));
  }
  if ((num_heads & (num_heads - 1)) == 0) return power_of_two_slopes(num_heads);
  // Press et al.'s rule for other head counts: the closest lower power of two c, then the
  // even-indexed slopes of the 2c sequence (which interleave with the first c) until n slopes.
  int64_t closest = 1;
  while (closest * 2 <= num_heads) closest *= 2;
  std::vector<double> slopes = power_of_two_slopes(closest);
  const std::vector<double> doubled = power_of_two_slopes(2 * closest);
  for (size_t j = 0; static_cast<int64_t>(slopes.size()) < num_heads; j += 2) slopes.push_back(doubled[j]);
  return slopes;
}

double alibi_bias(double slope, int64_t query_position, int64_t key_position) {
  // Causal models mask key > query; for it this returns the symmetric -slope |i - j|.
  const int64_t distance = query_position >= key_position ? query_position - key_position
                                                          : key_position - query_position;
  return -slope * static_cast<double>(distance);
}

std::vector<double> sinusoidal_encoding(int64_t position, int64_t d_model, double base) {
  check_sinusoidal("sinusoidal_encoding", d_model, base);
  std::vector<double> pe(static_cast<size_t>(d_model));
  for (int64_t i = 0; i < d_model / 2; ++i) {
    // pos / base^(2i/d_model) (Vaswani et al. section 3.5)
    const double angle =
        static_cast<double>(position) / std::pow(base, static_cast<double>(2 * i) / static_cast<double>(d_model));
    pe[static_cast<size_t>(2 * i)] = std::sin(angle);
    pe[static_cast<size_t>(2 * i + 1)] = std::cos(angle);
  }
  return pe;
}

std::vector<float> sinusoidal_table(int64_t rows, int64_t d_model, double base) {
  check_sinusoidal("sinusoidal_table", d_model, base);
  if (rows < 0) throw Error(detail::concat("sinusoidal_table: rows must be >= 0 (got ", rows, ")"));
  if (rows > (int64_t{1} << 31) / d_model) {
    throw Error(detail::concat("sinusoidal_table: rows * d_model must be <= 2^31 (got ", rows, " * ", d_model, ")"));
  }
  std::vector<float> table(static_cast<size_t>(rows * d_model));
  for (int64_t p = 0; p < rows; ++p) {
    const std::vector<double> row = sinusoidal_encoding(p, d_model, base);
    for (int64_t e = 0; e < d_model; ++e) table[static_cast<size_t>(p * d_model + e)] = static_cast<float>(row[static_cast<size_t>(e)]);
  }
  return table;
}

}  // namespace rotary
