// Rotates one head with an installed rotary and checks the result against the formula; then runs
// attention with fused RoPE (rotary::attention, the installed rotary_attention library) on a small
// GQA call and checks it against the installed float64 reference.
#include <cmath>
#include <cstdio>
#include <vector>

#include "rotary/apply.hpp"
#include "rotary/attention.hpp"
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
  // Attention: 4 q heads over 2 kv heads, 5 tokens, head dim 128, causal, RoPE fused; float32
  // against the float64 reference (the tolerance is loose: this checks linking and the call).
  const int64_t heads = 4, kv_heads = 2, tokens = 5, dim = 128;  // bhsd below spells 5 and 128
  std::vector<float> aq(heads * tokens * dim), ak(kv_heads * tokens * dim), av(kv_heads * tokens * dim),
      aout(heads * tokens * dim);
  std::vector<double> ref(heads * tokens * dim);
  for (size_t i = 0; i < aq.size(); ++i) aq[i] = 0.02f * static_cast<float>(static_cast<int>(i * 7919 % 97) - 48);
  for (size_t i = 0; i < ak.size(); ++i) ak[i] = 0.02f * static_cast<float>(static_cast<int>(i * 104729 % 89) - 44);
  for (size_t i = 0; i < av.size(); ++i) av[i] = 0.05f * static_cast<float>(static_cast<int>(i * 15485863 % 83) - 41);
  const auto bhsd = [](void* data, rotary::DType dtype, int64_t h) {
    return rotary::contiguous_view(data, dtype, rotary::Layout::BHSD, {1, h, 5, 128});
  };
  std::vector<int64_t> token_positions = {3, 4, 5, 6, 7};
  const rotary::AttentionRope rope{.table = &table, .q_positions = token_positions, .k_positions = token_positions};
  const rotary::AttentionOptions options{.mask = rotary::Mask::Causal};
  rotary::attention(bhsd(aq.data(), rotary::DType::F32, heads), bhsd(ak.data(), rotary::DType::F32, kv_heads),
                    bhsd(av.data(), rotary::DType::F32, kv_heads), bhsd(aout.data(), rotary::DType::F32, heads), rope,
                    options);
  std::vector<double> q64(aq.begin(), aq.end()), k64(ak.begin(), ak.end()), v64(av.begin(), av.end());
  rotary::reference::attention(bhsd(q64.data(), rotary::DType::F64, heads), bhsd(k64.data(), rotary::DType::F64, kv_heads),
                               bhsd(v64.data(), rotary::DType::F64, kv_heads), bhsd(ref.data(), rotary::DType::F64, heads),
                               rope, options);
  double worst = 0.0;
  for (size_t i = 0; i < aout.size(); ++i) worst = std::fmax(worst, std::fabs(aout[i] - ref[i]));
  if (!(worst < 1e-4)) {
    std::printf("consumer: attention differs from the reference by %.3g\n", worst);
    return 1;
  }
  std::printf("consumer: ok (%s, %s; attention within %.2g of the reference)\n", spec.name.c_str(),
              rotary::current_cpu_target().c_str(), worst);
  return 0;
}
