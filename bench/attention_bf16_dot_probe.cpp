// bench/attention_bf16_dot_probe.cpp: should attention's bf16 decode use AVX512_BF16's vdpbf16ps?
// Times the score step of one decode item, 4 q rows (a Llama-3-8B GQA group) against a bf16 K
// block of [keys][128] (one kv head of the KV cache), two ways, in alternation:
//   widen   K widened to float32 (shift left by 16), float32 FMA: what the kernels do now;
//   dpbf16  q rounded to bf16 once, vdpbf16ps on K as stored (_mm512_dpbf16_ps).
// Both end each key with _mm512_reduce_add_ps per row. The K block is small enough to stay in
// L2 / L3 (no memory-bound step): this is the arithmetic the instruction could save.
// Then the two instructions' throughput on one thread, 16 independent accumulator chains each
// (register-only: the ceiling a score kernel can reach): vfmadd231ps counts 32 flops (16 lanes x
// multiply + add), vdpbf16ps 64 (16 lanes x 2 pairs x multiply + add).
// docs/attention.md ("AVX512_BF16") records the figures and the decision.
//   build/bench/rotary_attention_bf16_dot_probe [keys ...]
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

namespace {

constexpr int kDim = 128, kRows = 4;

__attribute__((target("avx512f,avx512bw"))) void scores_widen(const uint16_t* k, int keys, const float* q, float* s) {
  for (int j = 0; j < keys; ++j) {
    const uint16_t* row = k + j * kDim;
    __m512 acc[kRows];
    for (auto& a : acc) a = _mm512_setzero_ps();
    for (int e = 0; e < kDim; e += 16) {
      const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + e));
      const __m512 kv = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
      for (int r = 0; r < kRows; ++r) acc[r] = _mm512_fmadd_ps(_mm512_loadu_ps(q + r * kDim + e), kv, acc[r]);
    }
    for (int r = 0; r < kRows; ++r) s[r * keys + j] = _mm512_reduce_add_ps(acc[r]);
  }
}

__attribute__((target("avx512f,avx512bw,avx512bf16"))) void scores_dpbf16(const uint16_t* k, int keys,
                                                                          const uint16_t* q_bf16, float* s) {
  __m512bh q[kRows][kDim / 32];
  for (int r = 0; r < kRows; ++r)
    for (int e = 0; e < kDim; e += 32) q[r][e / 32] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(q_bf16 + r * kDim + e));
  for (int j = 0; j < keys; ++j) {
    const uint16_t* row = k + j * kDim;
    __m512 acc[kRows];
    for (auto& a : acc) a = _mm512_setzero_ps();
    for (int e = 0; e < kDim; e += 32) {
      const __m512bh kv = reinterpret_cast<__m512bh>(_mm512_loadu_si512(row + e));
      for (int r = 0; r < kRows; ++r) acc[r] = _mm512_dpbf16_ps(acc[r], q[r][e / 32], kv);
    }
    for (int r = 0; r < kRows; ++r) s[r * keys + j] = _mm512_reduce_add_ps(acc[r]);
  }
}

// GFLOP/s of `iterations` x 16 independent vfmadd231ps (dp false) or vdpbf16ps (dp true) chains.
template <bool kDp>
__attribute__((target("avx512f,avx512bw,avx512bf16"), noinline)) double peak_gflops(int64_t iterations) {
  __m512 acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i) * 1e-3f);
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-6f);
  const __m512bh ah = reinterpret_cast<__m512bh>(_mm512_set1_epi32(0x3f803f80)), bh = ah;  // bf16 pairs (1, 1)
  const auto start = std::chrono::steady_clock::now();
  for (int64_t n = 0; n < iterations; ++n) {
    for (int i = 0; i < 16; ++i) {
      if constexpr (kDp) {
        acc[i] = _mm512_dpbf16_ps(acc[i], ah, bh);
      } else {
        acc[i] = _mm512_fmadd_ps(acc[i], a, b);
      }
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // The chains' results are used (printed if ever this value came up), so none is dropped.
  float lanes[16];
  float sink = 0;
  for (const __m512& v : acc) {
    _mm512_storeu_ps(lanes, v);
    sink += lanes[0];
  }
  if (sink == 1.2345f) std::printf(" ");
  return static_cast<double>(iterations) * 16 * (kDp ? 64 : 32) / seconds * 1e-9;
}

uint16_t to_bf16(float value) {  // round to nearest even (finite inputs)
  uint32_t bits = 0;
  std::memcpy(&bits, &value, 4);
  bits += 0x7fff + ((bits >> 16) & 1);
  return static_cast<uint16_t>(bits >> 16);
}

}  // namespace

int main(int argc, char** argv) {
  if (!__builtin_cpu_supports("avx512bf16")) {
    std::printf("this CPU has no AVX512_BF16: nothing to compare\n");
    return 0;
  }
  std::vector<int> sizes;
  for (int i = 1; i < argc; ++i) sizes.push_back(std::atoi(argv[i]));
  if (sizes.empty()) sizes = {512, 4096};
  for (const int keys : sizes) {
    std::mt19937 generator(1);
    std::uniform_real_distribution<float> uniform(-0.5f, 0.5f);
    std::vector<uint16_t> k(static_cast<size_t>(keys) * kDim), q_bf16(kRows * kDim);
    std::vector<float> q(kRows * kDim), s(static_cast<size_t>(kRows) * keys);
    for (auto& x : k) x = to_bf16(uniform(generator));
    for (int i = 0; i < kRows * kDim; ++i) q_bf16[i] = to_bf16(q[i] = uniform(generator));
    using Clock = std::chrono::steady_clock;
    std::vector<double> widen_us, dpbf16_us;
    for (int repetition = 0; repetition < 41; ++repetition) {
      const auto t0 = Clock::now();
      for (int i = 0; i < 8; ++i) scores_widen(k.data(), keys, q.data(), s.data());
      const auto t1 = Clock::now();
      for (int i = 0; i < 8; ++i) scores_dpbf16(k.data(), keys, q_bf16.data(), s.data());
      const auto t2 = Clock::now();
      widen_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / 8);
      dpbf16_us.push_back(std::chrono::duration<double, std::micro>(t2 - t1).count() / 8);
    }
    std::sort(widen_us.begin(), widen_us.end());
    std::sort(dpbf16_us.begin(), dpbf16_us.end());
    std::printf("keys %d: widen + fma %.1f us, dpbf16 %.1f us per item's scores (medians of 41): %.2fx\n", keys,
                widen_us[20], dpbf16_us[20], widen_us[20] / dpbf16_us[20]);
  }
  std::vector<double> fma, dp;
  for (int repetition = 0; repetition < 11; ++repetition) {
    fma.push_back(peak_gflops<false>(2'000'000));
    dp.push_back(peak_gflops<true>(2'000'000));
  }
  std::sort(fma.begin(), fma.end());
  std::sort(dp.begin(), dp.end());
  std::printf("one thread, 16 chains (medians of 11): vfmadd231ps %.1f GFLOP/s, vdpbf16ps %.1f GFLOP/s (%.2fx)\n", fma[5],
              dp[5], dp[5] / fma[5]);
  return 0;
}
