// Rotates one head with an installed rotary and checks the result against the formula.
#include <cmath>
#include <cstdio>
#include <vector>

#include "rotary/apply.hpp"
#include "rotary/presets.hpp"

int main() {
  const rotary::RopeSpec spec = rotary::preset("llama-3.1-8b").spec;
  const rotary::CosSinTable table(spec);
  std::vector<float> q(128), out(128);
  for (int i = 0; i < 128; ++i) q[i] = 0.01f * static_cast<float>(i + 1);
  const int64_t position = 7;
  const auto view = rotary::contiguous_view(q.data(), rotary::DType::F32, rotary::Layout::THD, {1, 1, 128, 0});
  const auto out_view = rotary::contiguous_view(out.data(), rotary::DType::F32, rotary::Layout::THD, {1, 1, 128, 0});
  const int64_t cu_seqlens[] = {0, 1};
  const auto positions = rotary::Positions::per_token({&position, 1}, cu_seqlens);
  rotary::apply(view, rotary::TensorView{}, out_view, rotary::TensorView{}, positions, table);
  // Pair 1 (NeoX: elements 1 and 65) at angle 7 * inv_freq[1].
  const double angle = 7.0 * table.inv_freq()[1];
  const double expected = q[1] * std::cos(angle) - q[65] * std::sin(angle);
  if (std::fabs(out[1] - expected) > 1e-6) {
    std::printf("consumer: got %.9g, expected %.9g\n", out[1], expected);
    return 1;
  }
  std::printf("consumer: ok (%s, %s)\n", spec.name.c_str(), rotary::current_cpu_target().c_str());
  return 0;
}
