// bench/table_accuracy.cpp: how far the cos/sin tables are from the true values, by position.
//
// For positions p = 2^k - 1 and 2^k (k = 0..31, capped at 2^31 - 1) plus 64 random positions in
// each octave, every pair of a Llama-3.1-8B-like spec (theta 5e5, 64 pairs, no scaling) and of
// a Llama-2 spec (theta 1e4): the table's float32 value against an independent binary128
// evaluation (powq for inv_freq, cosq/sinq of p * inv_freq, rounded once to float32).
// Prints a Markdown table for docs/numerics.md: per octave, the largest error in float32 ulps
// and the share of entries equal to the correctly rounded value, for Precision::Exact, and the
// largest absolute error for Precision::HFCompat.
#include <quadmath.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "rotary/table.hpp"

namespace {

int64_t ulps(float a, float b) {
  if (a == b) return 0;
  int32_t ia = 0;
  int32_t ib = 0;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  if ((ia < 0) != (ib < 0)) return 1 << 30;
  return ia > ib ? int64_t{ia} - ib : int64_t{ib} - ia;
}

}  // namespace

int main() {
  for (double base : {500000.0, 10000.0}) {
    rotary::RopeSpec spec;
    spec.name = "accuracy";
    spec.head_dim = spec.rotary_dim = 128;
    spec.theta_base = base;
    spec.max_position_embeddings = 131072;
    const rotary::CosSinTable exact(spec, {.storage = rotary::Storage::OnTheFly});
    const rotary::CosSinTable hf(spec, {.precision = rotary::Precision::HFCompat, .storage = rotary::Storage::OnTheFly});
    std::vector<__float128> theta(64);
    for (int i = 0; i < 64; ++i) theta[i] = powq(static_cast<__float128>(base), -static_cast<__float128>(2 * i) / 128);
    std::mt19937_64 rng(42);
    std::printf("\ntheta %g, 64 pairs, cos and sin\n\n", base);
    std::printf("| positions | entries | exact: max ulps | exact: correctly rounded | hf: max abs error |\n");
    std::printf("|---|---|---|---|---|\n");
    int64_t total = 0;
    int64_t total_exact = 0;
    for (int k = 0; k <= 31; ++k) {
      std::vector<int64_t> positions;
      const int64_t low = k == 0 ? 0 : (int64_t{1} << (k - 1));
      const int64_t high = std::min<int64_t>((int64_t{1} << k) - 1, rotary::kMaxPosition);
      positions.push_back(high);
      if (k <= 30) positions.push_back(std::min<int64_t>(int64_t{1} << k, rotary::kMaxPosition));
      std::uniform_int_distribution<int64_t> octave(low, high);
      for (int j = 0; j < 64; ++j) positions.push_back(octave(rng));
      int64_t entries = 0;
      int64_t correct = 0;
      int64_t max_ulps = 0;
      double hf_error = 0;
      std::vector<float> c(64), s(64), hc(64), hs(64);
      for (int64_t p : positions) {
        exact.row(p, c.data(), s.data());
        hf.row(p, hc.data(), hs.data());
        for (int i = 0; i < 64; ++i) {
          const __float128 angle = static_cast<__float128>(p) * theta[i];
          const float true_cos = static_cast<float>(cosq(angle));
          const float true_sin = static_cast<float>(sinq(angle));
          for (auto [got, want, hf_got] : {std::tuple{c[i], true_cos, hc[i]}, std::tuple{s[i], true_sin, hs[i]}}) {
            const int64_t u = ulps(got, want);
            max_ulps = std::max(max_ulps, u);
            correct += u == 0;
            ++entries;
            hf_error = std::max(hf_error, std::abs(static_cast<double>(hf_got) - static_cast<double>(want)));
          }
        }
      }
      total += entries;
      total_exact += correct;
      std::printf("| [%lld, %lld] | %lld | %lld | %.4f%% | %.2e |\n", static_cast<long long>(low),
                  static_cast<long long>(positions[1 < positions.size() && k <= 30 ? 1 : 0]),
                  static_cast<long long>(entries), static_cast<long long>(max_ulps),
                  100.0 * static_cast<double>(correct) / static_cast<double>(entries), hf_error);
    }
    std::printf("\nall: %lld entries, %.5f%% correctly rounded\n", static_cast<long long>(total),
                100.0 * static_cast<double>(total_exact) / static_cast<double>(total));
  }
  return 0;
}
