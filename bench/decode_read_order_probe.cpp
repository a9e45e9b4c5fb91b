// bench/decode_read_order_probe.cpp: how fast one core reads a decode's K and V rows in the order
// the decode kernels load them, with and without software prefetch, and with the prefetches in
// bursts or paced (the question behind src/attention/prefetch.hpp; docs/results/performance/
// 2026-11-25-decode-paced-prefetch.md). No rotary code: the loops below copy the kernels' access pattern only.
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
//
// Usage: rotary_decode_read_order_probe [MiB [repetitions [threads [4k|huge]]]]
//   MiB          K + V bytes per thread (256)
//   threads      threads reading at once, each its own K and V, started together (1); the GB/s
//                is the sum over the threads (bytes of all of them / the wall time of the slowest):
//                what the cores can read together, against rotary bench's copy floor on as many
//                threads
//   4k|huge      the buffers on 4 KiB pages or advised for transparent huge pages (madvise) before
//                their first touch (4k: the figures in
//                docs/results/performance/2026-11-25-decode-paced-prefetch.md; huge: rotary bench's buffers since 2026-11-26)
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <barrier>
#include <string>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

namespace {

constexpr int64_t kRowFloats = 128, kTileKeys = 64, kLineFloats = 16;

enum class Mode { Sequential, None, Burst, Paced };

struct Sink {
  __m256 a[8];  // independent accumulators: the FMAs are bound by throughput, not latency
};

template <int work>
__attribute__((target("avx2,fma"))) inline void Work(Sink& s, __m256 x, int first) {
  const __m256 q = _mm256_set1_ps(1.0001f);
  s.a[first] = _mm256_add_ps(s.a[first], x);  // every load is used
  for (int w = 0; w < work; ++w) {
    s.a[first + (2 * w) % 4] = _mm256_fmadd_ps(x, q, s.a[first + (2 * w) % 4]);
    s.a[first + (2 * w + 1) % 4] = _mm256_fmadd_ps(x, q, s.a[first + (2 * w + 1) % 4]);
  }
}

// One 64-byte line: two 32-byte loads, each with its own four accumulators.
template <int work>
__attribute__((target("avx2,fma"))) inline void Line(Sink& s, const float* p) {
  Work<work>(s, _mm256_load_ps(p), 0);
  Work<work>(s, _mm256_load_ps(p + 8), 4);
}

// One pass over K and V; mode and work are template arguments so that each combination is compiled
// on its own, its loops unswitched and unrolled (as the kernels are): a runtime `work` left a loop
// of FMAs with computed indices in the hot path and measured 17 instead of 35 GB/s.
template <Mode mode, int work>
__attribute__((target("avx2,fma"))) float PassOf(const float* k, const float* v, int64_t keys) {
  Sink s;
  for (__m256& a : s.a) a = _mm256_setzero_ps();
  const int64_t ahead_bytes = kTileKeys * kRowFloats * 4;
  const int64_t total = keys * kRowFloats;
  for (int64_t tile = 0; tile < keys; tile += kTileKeys) {
    const float* kt = k + tile * kRowFloats;
    const float* vt = v + tile * kRowFloats;
    if (mode == Mode::Sequential) {
      for (int64_t i = 0; i < kTileKeys * kRowFloats; i += kLineFloats) Line<work>(s, kt + i);
      for (int64_t i = 0; i < kTileKeys * kRowFloats; i += kLineFloats) Line<work>(s, vt + i);
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
          Line<work>(s, kt + (j + c) * kRowFloats + e);
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
          Line<work>(s, vt + j * kRowFloats + half * kRowFloats / 2 + e);
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

template <Mode mode>
float PassWork(const float* k, const float* v, int64_t keys, int work) {
  switch (work) {
    case 0: return PassOf<mode, 0>(k, v, keys);
    case 1: return PassOf<mode, 1>(k, v, keys);
    default: return PassOf<mode, 2>(k, v, keys);
  }
}

float Pass(const float* k, const float* v, int64_t keys, Mode mode, int work) {
  switch (mode) {
    case Mode::Sequential: return PassWork<Mode::Sequential>(k, v, keys, work);
    case Mode::None: return PassWork<Mode::None>(k, v, keys, work);
    case Mode::Burst: return PassWork<Mode::Burst>(k, v, keys, work);
    default: return PassWork<Mode::Paced>(k, v, keys, work);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
    std::puts("decode_read_order_probe: this CPU has no AVX2 + FMA; nothing measured");
    return 0;
  }
  const int64_t mib = argc > 1 ? std::atoll(argv[1]) : 256;  // K + V bytes per thread, MiB
  const int repetitions = argc > 2 ? std::atoi(argv[2]) : 10;
  const int threads = argc > 3 ? std::atoi(argv[3]) : 1;
  const bool huge = argc > 4 && std::string(argv[4]) == "huge";
  if (mib < 1 || repetitions < 1 || threads < 1 || threads > 64 || (argc > 4 && !huge && std::string(argv[4]) != "4k")) {
    std::puts("usage: rotary_decode_read_order_probe [MiB >= 1 [repetitions >= 1 [threads 1..64 [4k|huge]]]]");
    return 2;
  }
  const int64_t keys = std::max<int64_t>(kTileKeys, mib * (int64_t{1} << 20) / 2 / (kRowFloats * 4) / kTileKeys * kTileKeys);
  const size_t bytes = static_cast<size_t>(keys * kRowFloats * 4);
  const size_t allocated = (bytes + (2 << 20) - 1) / (2 << 20) * (2 << 20);
  std::vector<float*> k(threads), v(threads);
  for (int t = 0; t < threads; ++t) {
    k[t] = static_cast<float*>(std::aligned_alloc(2 << 20, allocated));
    v[t] = static_cast<float*>(std::aligned_alloc(2 << 20, allocated));
    if (k[t] == nullptr || v[t] == nullptr) {
      std::puts("decode_read_order_probe: out of memory");
      return 1;
    }
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (huge) {
      (void)madvise(k[t], allocated, MADV_HUGEPAGE);
      (void)madvise(v[t], allocated, MADV_HUGEPAGE);
    }
#endif
    for (size_t i = 0; i < bytes / 4; ++i) k[t][i] = v[t][i] = 1e-3f * static_cast<float>(i % 1000);
  }
  std::printf("K + V %.0f MiB per thread (%lld keys x 512 B each), %d thread(s), %s pages, best of %d; GB/s of K + V read%s\n",
              2.0 * static_cast<double>(bytes) / (1 << 20), static_cast<long long>(keys), threads, huge ? "huge" : "4 KiB",
              repetitions, threads > 1 ? ", summed over the threads" : "");
  std::printf("%-12s %8s %8s %8s\n", "mode", "work 0", "work 1", "work 2");
  const std::pair<const char*, Mode> modes[] = {
      {"sequential", Mode::Sequential}, {"none", Mode::None}, {"burst", Mode::Burst}, {"paced", Mode::Paced}};
  // Every pass: all threads wait at the barrier, run Pass on their own K and V, and wait again;
  // thread 0 times from the first barrier to the second (the slowest thread's end).
  std::barrier sync(threads);
  std::vector<float> sinks(static_cast<size_t>(threads), 0.0f);
  Mode pass_mode = Mode::Sequential;
  int pass_work = 0;
  bool done = false;
  const auto worker = [&](int t) {
    for (;;) {
      sync.arrive_and_wait();  // a pass is set up (or done)
      if (done) return;
      sinks[static_cast<size_t>(t)] += Pass(k[t], v[t], keys, pass_mode, pass_work);
      sync.arrive_and_wait();  // the pass is over
    }
  };
  std::vector<std::thread> helpers;
  for (int t = 1; t < threads; ++t) helpers.emplace_back(worker, t);
  for (const auto& [name, mode] : modes) {
    std::printf("%-12s", name);
    for (int work = 0; work <= 2; ++work) {
      double best = 1e30;
      for (int r = 0; r < repetitions; ++r) {
        pass_mode = mode;
        pass_work = work;
        sync.arrive_and_wait();
        const auto start = std::chrono::steady_clock::now();
        sinks[0] += Pass(k[0], v[0], keys, mode, work);
        sync.arrive_and_wait();
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      }
      std::printf(" %8.1f", 2.0 * static_cast<double>(bytes) * threads / best / 1e9);
    }
    std::printf("\n");
  }
  done = true;
  sync.arrive_and_wait();
  for (std::thread& helper : helpers) helper.join();
  float sink = 0;
  for (const float s : sinks) sink += s;
  std::printf("(work: 4 x work FMA instructions per 64-byte line; checksum %g)\n", static_cast<double>(sink));
  for (int t = 0; t < threads; ++t) {
    std::free(k[t]);
    std::free(v[t]);
  }
  return 0;
}

#else
int main() {
  std::puts("decode_read_order_probe: x86-64 only; nothing measured");
  return 0;
}
#endif
