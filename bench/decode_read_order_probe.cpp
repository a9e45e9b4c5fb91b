// bench/decode_read_order_probe.cpp: how fast one core reads a decode's K and V rows in the order
// the decode kernels load them, with and without software prefetch, and with the prefetches in
// bursts or paced (the question behind src/attention/prefetch.hpp; docs/performance.md, "Decode:
// paced prefetch"). No rotary code: the loops below copy the kernels' access pattern only.
//
// Pattern (float32, head_dim 128: a row is 512 bytes, 8 lines): tiles of 64 keys; per tile the
// K tile (scores: four rows side by side, 64 bytes of each at a time) then the V tile (p.v: the
// rows' first halves key by key, then their second halves). Between the loads, 4 x `work` FMA
// instructions per 64-byte line (two 32-byte loads, two FMAs each): work 1 is the float32
// decode's instruction mix (4 q heads per K / V vector: 4 FMAs per line).
// Modes:
//   sequential    the same bytes read in address order, no software prefetch (the core's rate)
//   none          the decode's order, hardware prefetchers only
//   burst         the decode's order, each four-key block prefetching the same rows a tile
//                 ahead at its start (32 prefetches at once: the kernels before prefetch.hpp)
//   paced         the decode's order, one prefetch per line loaded, in address order, a tile
//                 ahead (what prefetch.hpp's cursor does)
// Output: GB/s of K + V read, best of the repetitions. x86-64 with AVX2 + FMA (checked at run time).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

namespace {

constexpr int64_t kRowFloats = 128, kTileKeys = 64, kLineFloats = 16;

enum class Mode { Sequential, None, Burst, Paced };

struct Sink {
  __m256 a[8];  // independent accumulators: the FMAs are bound by throughput, not latency
};

__attribute__((target("avx2,fma"))) inline void Work(Sink& s, __m256 x, int work, int first) {
  const __m256 q = _mm256_set1_ps(1.0001f);
  s.a[first] = _mm256_add_ps(s.a[first], x);  // every load is used
  for (int w = 0; w < work; ++w) {
    s.a[first + (2 * w) % 4] = _mm256_fmadd_ps(x, q, s.a[first + (2 * w) % 4]);
    s.a[first + (2 * w + 1) % 4] = _mm256_fmadd_ps(x, q, s.a[first + (2 * w + 1) % 4]);
  }
}

// One 64-byte line: two 32-byte loads, each with its own four accumulators.
__attribute__((target("avx2,fma"))) inline void Line(Sink& s, const float* p, int work) {
  Work(s, _mm256_load_ps(p), work, 0);
  Work(s, _mm256_load_ps(p + 8), work, 4);
}

__attribute__((target("avx2,fma"))) float Pass(const float* k, const float* v, int64_t keys, Mode mode, int work) {
  Sink s;
  for (__m256& a : s.a) a = _mm256_setzero_ps();
  const int64_t ahead_bytes = kTileKeys * kRowFloats * 4;
  const int64_t total = keys * kRowFloats;
  for (int64_t tile = 0; tile < keys; tile += kTileKeys) {
    const float* kt = k + tile * kRowFloats;
    const float* vt = v + tile * kRowFloats;
    if (mode == Mode::Sequential) {
      for (int64_t i = 0; i < kTileKeys * kRowFloats; i += kLineFloats) Line(s, kt + i, work);
      for (int64_t i = 0; i < kTileKeys * kRowFloats; i += kLineFloats) Line(s, vt + i, work);
      continue;
    }
    const bool more = (tile + kTileKeys) * kRowFloats < total;  // prefetch only inside the buffers
    const char* pk = reinterpret_cast<const char*>(kt) + ahead_bytes;
    const char* pv = reinterpret_cast<const char*>(vt) + ahead_bytes;
    int64_t pk_line = 0, pv_line = 0;
    for (int64_t j = 0; j < kTileKeys; j += 4) {
      if (mode == Mode::Burst && more) {
        for (int64_t l = 0; l < 4 * kRowFloats / kLineFloats; ++l) _mm_prefetch(pk + (j * kRowFloats / kLineFloats + l) * 64, _MM_HINT_T0);
      }
      for (int64_t e = 0; e < kRowFloats; e += kLineFloats) {
        for (int64_t c = 0; c < 4; ++c) {
          if (mode == Mode::Paced && more) _mm_prefetch(pk + 64 * pk_line++, _MM_HINT_T0);
          Line(s, kt + (j + c) * kRowFloats + e, work);
        }
      }
    }
    for (int64_t half = 0; half < 2; ++half) {
      for (int64_t j = 0; j < kTileKeys; ++j) {
        if (mode == Mode::Burst && more && half == 0) {
          for (int64_t l = 0; l < kRowFloats / kLineFloats; ++l) _mm_prefetch(pv + (j * kRowFloats / kLineFloats + l) * 64, _MM_HINT_T0);
        }
        for (int64_t e = 0; e < kRowFloats / 2; e += kLineFloats) {
          if (mode == Mode::Paced && more) _mm_prefetch(pv + 64 * pv_line++, _MM_HINT_T0);
          Line(s, vt + j * kRowFloats + half * kRowFloats / 2 + e, work);
        }
      }
    }
  }
  __m256 sum = s.a[0];
  for (int i = 1; i < 8; ++i) sum = _mm256_add_ps(sum, s.a[i]);
  float out[8];
  _mm256_storeu_ps(out, sum);
  return out[0];
}

}  // namespace

int main(int argc, char** argv) {
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
    std::puts("decode_read_order_probe: this CPU has no AVX2 + FMA; nothing measured");
    return 0;
  }
  const int64_t mib = argc > 1 ? std::atoll(argv[1]) : 256;  // K + V bytes, MiB
  const int repetitions = argc > 2 ? std::atoi(argv[2]) : 10;
  const int64_t keys = std::max<int64_t>(kTileKeys, mib * (int64_t{1} << 20) / 2 / (kRowFloats * 4) / kTileKeys * kTileKeys);
  const size_t bytes = static_cast<size_t>(keys * kRowFloats * 4);
  auto* k = static_cast<float*>(std::aligned_alloc(2 << 20, (bytes + (2 << 20) - 1) / (2 << 20) * (2 << 20)));
  auto* v = static_cast<float*>(std::aligned_alloc(2 << 20, (bytes + (2 << 20) - 1) / (2 << 20) * (2 << 20)));
  if (k == nullptr || v == nullptr) {
    std::puts("decode_read_order_probe: out of memory");
    return 1;
  }
  for (size_t i = 0; i < bytes / 4; ++i) k[i] = v[i] = 1e-3f * static_cast<float>(i % 1000);
  std::printf("K + V %.0f MiB (%lld keys x 512 B each), best of %d; GB/s of K + V read\n", 2.0 * static_cast<double>(bytes) / (1 << 20),
              static_cast<long long>(keys), repetitions);
  std::printf("%-12s %8s %8s %8s\n", "mode", "work 0", "work 1", "work 2");
  const std::pair<const char*, Mode> modes[] = {
      {"sequential", Mode::Sequential}, {"none", Mode::None}, {"burst", Mode::Burst}, {"paced", Mode::Paced}};
  float sink = 0;
  for (const auto& [name, mode] : modes) {
    std::printf("%-12s", name);
    for (int work = 0; work <= 2; ++work) {
      double best = 1e30;
      for (int r = 0; r < repetitions; ++r) {
        const auto start = std::chrono::steady_clock::now();
        sink += Pass(k, v, keys, mode, work);
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      }
      std::printf(" %8.1f", 2.0 * static_cast<double>(bytes) / best / 1e9);
    }
    std::printf("\n");
  }
  std::printf("(work: 4 x work FMA instructions per 64-byte line; checksum %g)\n", static_cast<double>(sink));
  std::free(k);
  std::free(v);
  return 0;
}

#else
int main() {
  std::puts("decode_read_order_probe: x86-64 only; nothing measured");
  return 0;
}
#endif
