// bench/copy_bandwidth.hpp: the memory streams RoPE kernels are compared with, and the timing
// rule of `rotary bench`. Header-only; shared by src/cli/bench_command.cpp and bench/*.cpp.
//
// RoPE reads q and k once and writes them once, so no kernel can beat a stream that moves the
// same bytes. The streams, each over one buffer the size of the call's q + k, in two access
// patterns, because which is faster depends on the machine:
//   copy          src -> dst with non-temporal (streaming) stores: the floor for out-of-place
//                 calls. Either sequential, or four pages at a time (one 64-byte line from each of
//                 four consecutive pages per step), as glibc's memcpy copies buffers above its
//                 x86_non_temporal_threshold (3/4 of the shared cache size it is told of). On the
//                 Intel machine of 2026-11-22/23 the four-page copy was the faster (25-29 GB/s with
//                 1 thread against 20-27 sequentially), and glibc's memcpy of the 84 MB prefill
//                 buffer, below its 104 MB threshold there, used ordinary stores that pay a
//                 read-for-ownership per line (14 GB/s). On the AMD EPYC machine of 2026-11-24
//                 the sequential copy was the faster (64-68 GB/s against 40-46).
//   memcpy        glibc's memcpy as called, for reference.
//   copy_inplace  x[i] = x[i] * 1.0000001f over one buffer: the floor for in-place calls. It
//                 writes lines it has just read, so it needs no read-for-ownership of a
//                 separate destination. Sequential, or four pages at a time.
// `rotary bench` times both patterns of each stream and takes the faster as the floor
// (Streams::choose_floor), so that a kernel's ratio is never taken against a pattern this
// machine serves badly.
// Each counts bytes = 2 x buffer size (every byte read once and written once), the rule the
// kernels' GB/s use. With `threads` > 1 the buffer is cut into that many contiguous, 4 KiB
// aligned parts; the calling thread streams the first, one std::thread each of the others
// (thread start-up, ~20-50 us, is inside the timed call: under 1% of a prefill-sized stream).
//
// The streams use the widest vectors the CPU has (AVX-512, AVX2, else SSE2; chosen at run time),
// as the Highway kernels they are compared with do: a baseline-SSE2 in-place loop is measurably
// slower on data in cache (here: 25 vs 44 GB/s on an 84 MB buffer).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace rotary::bench {

// An owning, 4 KiB-aligned, zero-filled buffer (every page touched once: no page faults inside
// a timed call).
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(size_t bytes) : bytes_(bytes) {
    if (bytes == 0) return;
    const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    void* data = std::aligned_alloc(kAlignment, rounded);
    if (data == nullptr) throw std::bad_alloc();
    std::memset(data, 0, rounded);
    data_.reset(static_cast<std::byte*>(data));
  }
  std::byte* data() const { return data_.get(); }
  size_t bytes() const { return bytes_; }

  static constexpr size_t kAlignment = 4096;

 private:
  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  std::unique_ptr<std::byte, Free> data_;
  size_t bytes_ = 0;
};

// Runs part(begin, end) over `threads` contiguous parts of [0, bytes), each starting on a 4 KiB
// boundary: the calling thread takes the first part, std::threads the rest.
template <typename Part>
void for_each_part(size_t bytes, int threads, Part&& part) {
  const size_t num_parts = static_cast<size_t>(std::max(threads, 1));
  const size_t pages = (bytes + Buffer::kAlignment - 1) / Buffer::kAlignment;
  auto bounds = [&](size_t i) { return std::min(bytes, pages * i / num_parts * Buffer::kAlignment); };
  std::vector<std::thread> workers;
  workers.reserve(num_parts - 1);
  for (size_t i = 1; i < num_parts; ++i) workers.emplace_back([&, i] { part(bounds(i), bounds(i + 1)); });
  part(bounds(0), bounds(1));
  for (std::thread& worker : workers) worker.join();
}

// memcpy: glibc's, as called.
inline void memcpy_stream(std::byte* dst, const std::byte* src, size_t bytes, int threads) {
  for_each_part(bytes, threads, [&](size_t begin, size_t end) { std::memcpy(dst + begin, src + begin, end - begin); });
}

namespace detail {

#if defined(__x86_64__)
// Streaming copies of whole 16 KiB blocks (dst and src 4 KiB aligned, bytes a multiple of
// 16 KiB): each step loads one 64-byte line from each of four consecutive pages, then stores
// them with non-temporal stores, as glibc's __memmove_*_unaligned_erms large_memcpy_4x does
// (four pages in flight keep more DRAM rows open than one sequential stream).
constexpr size_t kPageBytes = 4096;
constexpr size_t kBlockBytes = 4 * kPageBytes;

__attribute__((target("avx512f"))) inline void stream_blocks_avx512(std::byte* dst, const std::byte* src,
                                                                     size_t bytes) {
  for (size_t block = 0; block < bytes; block += kBlockBytes) {
    for (size_t line = 0; line < kPageBytes; line += 64) {
      const std::byte* s = src + block + line;
      std::byte* d = dst + block + line;
      const __m512i v0 = _mm512_load_si512(s);
      const __m512i v1 = _mm512_load_si512(s + kPageBytes);
      const __m512i v2 = _mm512_load_si512(s + 2 * kPageBytes);
      const __m512i v3 = _mm512_load_si512(s + 3 * kPageBytes);
      _mm512_stream_si512(reinterpret_cast<__m512i*>(d), v0);
      _mm512_stream_si512(reinterpret_cast<__m512i*>(d + kPageBytes), v1);
      _mm512_stream_si512(reinterpret_cast<__m512i*>(d + 2 * kPageBytes), v2);
      _mm512_stream_si512(reinterpret_cast<__m512i*>(d + 3 * kPageBytes), v3);
    }
  }
}

__attribute__((target("avx2"))) inline void stream_blocks_avx2(std::byte* dst, const std::byte* src, size_t bytes) {
  for (size_t block = 0; block < bytes; block += kBlockBytes) {
    for (size_t line = 0; line < kPageBytes; line += 64) {
      for (size_t page = 0; page < 4; ++page) {
        const std::byte* s = src + block + page * kPageBytes + line;
        std::byte* d = dst + block + page * kPageBytes + line;
        const __m256i low = _mm256_load_si256(reinterpret_cast<const __m256i*>(s));
        const __m256i high = _mm256_load_si256(reinterpret_cast<const __m256i*>(s + 32));
        _mm256_stream_si256(reinterpret_cast<__m256i*>(d), low);
        _mm256_stream_si256(reinterpret_cast<__m256i*>(d + 32), high);
      }
    }
  }
}

inline void stream_blocks_sse2(std::byte* dst, const std::byte* src, size_t bytes) {
  for (size_t block = 0; block < bytes; block += kBlockBytes) {
    for (size_t line = 0; line < kPageBytes; line += 64) {
      for (size_t page = 0; page < 4; ++page) {
        const std::byte* s = src + block + page * kPageBytes + line;
        std::byte* d = dst + block + page * kPageBytes + line;
        for (size_t part = 0; part < 64; part += 16) {
          _mm_stream_si128(reinterpret_cast<__m128i*>(d + part),
                           _mm_load_si128(reinterpret_cast<const __m128i*>(s + part)));
        }
      }
    }
  }
}

// Sequential streaming copies of whole 64-byte lines (dst and src 64-byte aligned, bytes a
// multiple of 64).
__attribute__((target("avx512f"))) inline void stream_lines_avx512(std::byte* dst, const std::byte* src,
                                                                    size_t bytes) {
  for (size_t i = 0; i < bytes; i += 64) {
    _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + i), _mm512_load_si512(src + i));
  }
}

__attribute__((target("avx2"))) inline void stream_lines_avx2(std::byte* dst, const std::byte* src, size_t bytes) {
  for (size_t i = 0; i < bytes; i += 64) {
    const __m256i low = _mm256_load_si256(reinterpret_cast<const __m256i*>(src + i));
    const __m256i high = _mm256_load_si256(reinterpret_cast<const __m256i*>(src + i + 32));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i), low);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 32), high);
  }
}

inline void stream_lines_sse2(std::byte* dst, const std::byte* src, size_t bytes) {
  for (size_t i = 0; i < bytes; i += 16) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), _mm_load_si128(reinterpret_cast<const __m128i*>(src + i)));
  }
}

inline bool has_avx512f() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f");
}
inline bool has_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2");
}
#endif

}  // namespace detail

// The vector width the streams run with: "avx512f", "avx2", or "sse2" (x86-64 baseline);
// "memcpy" off x86-64, where copy falls back to memcpy.
inline const char* stream_isa() {
#if defined(__x86_64__)
  if (detail::has_avx512f()) return "avx512f";
  if (detail::has_avx2()) return "avx2";
  return "sse2";
#else
  return "memcpy";
#endif
}

// The two access patterns of the streams (see the top of this file).
enum class Pattern { Sequential, FourPages };

inline const char* to_string(Pattern pattern) {
  return pattern == Pattern::Sequential ? "sequential" : "4 pages at a time";
}

// copy: `bytes` from src to dst (both 4 KiB aligned) with streaming stores.
inline void copy_stream(std::byte* dst, const std::byte* src, size_t bytes, int threads,
                        Pattern pattern = Pattern::FourPages) {
#if defined(__x86_64__)
  using Copy = void (*)(std::byte*, const std::byte*, size_t);
  static const Copy stream_blocks = [] {
    if (detail::has_avx512f()) return &detail::stream_blocks_avx512;
    if (detail::has_avx2()) return &detail::stream_blocks_avx2;
    return &detail::stream_blocks_sse2;
  }();
  static const Copy stream_lines = [] {
    if (detail::has_avx512f()) return &detail::stream_lines_avx512;
    if (detail::has_avx2()) return &detail::stream_lines_avx2;
    return &detail::stream_lines_sse2;
  }();
  const Copy stream = pattern == Pattern::Sequential ? stream_lines : stream_blocks;
  const size_t unit = pattern == Pattern::Sequential ? 64 : detail::kBlockBytes;
  for_each_part(bytes, threads, [&](size_t begin, size_t end) {
    const size_t whole = (end - begin) / unit * unit;
    stream(dst + begin, src + begin, whole);
    std::memcpy(dst + begin + whole, src + begin + whole, end - begin - whole);
    _mm_sfence();  // streaming stores are weakly ordered: complete them before the timer stops
  });
#else
  (void)pattern;
  memcpy_stream(dst, src, bytes, threads);
#endif
}

namespace detail {

// x[i] *= 1.0000001f over [0, count) (x 64-byte aligned), per instruction set: sequentially
// (scale_lines_*), or over whole 16 KiB blocks one 64-byte line from each of four consecutive
// pages per step (scale_blocks_*, the in-place counterpart of stream_blocks_*); the rest element
// by element. 1.0000001f is 1 + 2^-23: values in [1, 2) stay normal (no denormal slow path) for
// millions of passes. Intrinsics, not GCC's generic 64-byte vectors: GCC 12 lowered those on an
// avx2 clone through the stack (each line stored, reloaded as four 16-byte halves and stored
// again), 60 GB/s in cache where this loop runs at 80 (AMD EPYC, 2026-11-25): a floor must not be
// slower than it has to be.
inline void scale_tail(float* x, size_t begin, size_t count) {
  for (size_t i = begin; i < count; ++i) x[i] *= 1.0000001f;
}

#if defined(__x86_64__)
constexpr size_t kPageFloats = kPageBytes / sizeof(float);
constexpr size_t kBlockFloats = kBlockBytes / sizeof(float);

__attribute__((target("avx512f"))) inline void scale_lines_avx512(float* x, size_t count) {
  const __m512 factor = _mm512_set1_ps(1.0000001f);
  const size_t whole = count / 16 * 16;
  for (size_t i = 0; i < whole; i += 16) _mm512_store_ps(x + i, _mm512_mul_ps(_mm512_load_ps(x + i), factor));
  scale_tail(x, whole, count);
}

__attribute__((target("avx2"))) inline void scale_lines_avx2(float* x, size_t count) {
  const __m256 factor = _mm256_set1_ps(1.0000001f);
  const size_t whole = count / 16 * 16;
  for (size_t i = 0; i < whole; i += 16) {
    _mm256_store_ps(x + i, _mm256_mul_ps(_mm256_load_ps(x + i), factor));
    _mm256_store_ps(x + i + 8, _mm256_mul_ps(_mm256_load_ps(x + i + 8), factor));
  }
  scale_tail(x, whole, count);
}

inline void scale_lines_sse2(float* x, size_t count) {
  const __m128 factor = _mm_set1_ps(1.0000001f);
  const size_t whole = count / 4 * 4;
  for (size_t i = 0; i < whole; i += 4) _mm_store_ps(x + i, _mm_mul_ps(_mm_load_ps(x + i), factor));
  scale_tail(x, whole, count);
}

__attribute__((target("avx512f"))) inline void scale_blocks_avx512(float* x, size_t count) {
  const __m512 factor = _mm512_set1_ps(1.0000001f);
  const size_t whole = count / kBlockFloats * kBlockFloats;
  for (size_t block = 0; block < whole; block += kBlockFloats) {
    for (size_t line = 0; line < kPageFloats; line += 16) {
      for (size_t page = 0; page < 4; ++page) {
        float* v = x + block + page * kPageFloats + line;
        _mm512_store_ps(v, _mm512_mul_ps(_mm512_load_ps(v), factor));
      }
    }
  }
  scale_tail(x, whole, count);
}

__attribute__((target("avx2"))) inline void scale_blocks_avx2(float* x, size_t count) {
  const __m256 factor = _mm256_set1_ps(1.0000001f);
  const size_t whole = count / kBlockFloats * kBlockFloats;
  for (size_t block = 0; block < whole; block += kBlockFloats) {
    for (size_t line = 0; line < kPageFloats; line += 16) {
      for (size_t page = 0; page < 4; ++page) {
        float* v = x + block + page * kPageFloats + line;
        _mm256_store_ps(v, _mm256_mul_ps(_mm256_load_ps(v), factor));
        _mm256_store_ps(v + 8, _mm256_mul_ps(_mm256_load_ps(v + 8), factor));
      }
    }
  }
  scale_tail(x, whole, count);
}

inline void scale_blocks_sse2(float* x, size_t count) {
  const __m128 factor = _mm_set1_ps(1.0000001f);
  const size_t whole = count / kBlockFloats * kBlockFloats;
  for (size_t block = 0; block < whole; block += kBlockFloats) {
    for (size_t line = 0; line < kPageFloats; line += 16) {
      for (size_t page = 0; page < 4; ++page) {
        float* v = x + block + page * kPageFloats + line;
        for (size_t part = 0; part < 16; part += 4) _mm_store_ps(v + part, _mm_mul_ps(_mm_load_ps(v + part), factor));
      }
    }
  }
  scale_tail(x, whole, count);
}
#endif

}  // namespace detail

// copy_inplace: the read-modify-write stream over `bytes` of `data` (4 KiB aligned, holding
// floats that copy_inplace_init wrote).
inline void copy_inplace_stream(std::byte* data, size_t bytes, int threads, Pattern pattern = Pattern::Sequential) {
  using Scale = void (*)(float*, size_t);
#if defined(__x86_64__)
  static const Scale sequential = detail::has_avx512f() ? &detail::scale_lines_avx512
                                  : detail::has_avx2()  ? &detail::scale_lines_avx2
                                                        : &detail::scale_lines_sse2;
  static const Scale four_pages = detail::has_avx512f() ? &detail::scale_blocks_avx512
                                  : detail::has_avx2()  ? &detail::scale_blocks_avx2
                                                        : &detail::scale_blocks_sse2;
#else
  // Elsewhere the compiler's own vectorization of the plain loop; one pattern.
  static const Scale sequential = [](float* x, size_t count) { detail::scale_tail(x, 0, count); };
  static const Scale four_pages = sequential;
#endif
  const Scale scale = pattern == Pattern::Sequential ? sequential : four_pages;
  for_each_part(bytes, threads, [&](size_t begin, size_t end) {
    scale(reinterpret_cast<float*>(data + begin), (end - begin) / sizeof(float));
  });
}

// Fills a stream buffer with floats in [1, 2) (never zero, never denormal).
inline void copy_inplace_init(std::byte* data, size_t bytes) {
  float* x = reinterpret_cast<float*>(data);
  for (size_t i = 0; i < bytes / sizeof(float); ++i) x[i] = 1.0f + static_cast<float>(i % 1021) / 1021.0f;
}

// Calls whose q + k are smaller than this are compared with streams of their own size, which
// stay in the caches (Streams::run_cached). The kernels stream their outputs past the caches from
// the same size up (apply.cpp, kStreamOutputBytes).
constexpr int64_t kCachedStreamBytes = int64_t{16} << 20;

// The three streams on buffers allocated once, for any size up to max_bytes. run() times the
// floor of a kernel call: the pattern choose_floor() found faster for that kind of stream and
// thread count (by default four pages for copy, sequential in place).
class Streams {
 public:
  explicit Streams(size_t max_bytes) : src_(max_bytes), dst_(max_bytes), data_(max_bytes) {
    copy_inplace_init(src_.data(), max_bytes);  // a non-zero source: no zero-page shortcuts
    copy_inplace_init(data_.data(), max_bytes);
  }
  void copy(size_t bytes, int threads, Pattern pattern = Pattern::FourPages) {
    copy_stream(dst_.data(), src_.data(), checked(bytes), threads, pattern);
  }
  void memcpy(size_t bytes, int threads) { memcpy_stream(dst_.data(), src_.data(), checked(bytes), threads); }
  void copy_inplace(size_t bytes, int threads, Pattern pattern = Pattern::Sequential) {
    copy_inplace_stream(data_.data(), checked(bytes), threads, pattern);
  }
  void stream(bool in_place, size_t bytes, int threads, Pattern pattern) {
    if (in_place) {
      copy_inplace(bytes, threads, pattern);
    } else {
      copy(bytes, threads, pattern);
    }
  }
  void choose_floor(bool in_place, int threads, Pattern pattern) { floors_[key(in_place, threads)] = pattern; }
  Pattern floor(bool in_place, int threads) const {
    const auto found = floors_.find(key(in_place, threads));
    if (found != floors_.end()) return found->second;
    return in_place ? Pattern::Sequential : Pattern::FourPages;
  }
  // The floor of an in-place call or of an out-of-place one.
  void run(bool in_place, size_t bytes, int threads) { stream(in_place, bytes, threads, floor(in_place, threads)); }
  // The floor of a call small enough to stay in the caches (below kCachedStreamBytes, where the
  // kernels store through the cache too): in place the read-modify-write stream, out of place
  // glibc's memcpy, which copies such sizes with ordinary stores (a streaming copy would send
  // them to memory). On the calling thread only, whatever the thread count: starting a thread
  // costs more than such a copy (a 2-thread memcpy of 1.6 MB ran slower than a 1-thread one),
  // and apply() keeps calls this small on the calling thread too (kMinElementsPerThread).
  void run_cached(bool in_place, size_t bytes) {
    if (in_place) {
      copy_inplace(bytes, 1, Pattern::Sequential);
    } else {
      memcpy(bytes, 1);
    }
  }

 private:
  static int key(bool in_place, int threads) { return threads * 2 + (in_place ? 1 : 0); }
  size_t checked(size_t bytes) const { return std::min(bytes, src_.bytes()); }
  Buffer src_, dst_, data_;
  std::map<int, Pattern> floors_;
};

// ---- timing -----------------------------------------------------------------------------------

struct Timing {
  double median_ms = 0.0;  // per call
  double min_ms = 0.0;     // per call, fastest repetition
  int repetitions = 0;
  int64_t calls_per_repetition = 1;
};

namespace detail {

using Clock = std::chrono::steady_clock;

inline double elapsed_ms(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// One warm-up call (page faults, pool threads started, table rows and code in cache); a call
// shorter than min_repetition_ms is timed once more, warm, to choose how many calls make one
// repetition.
template <typename Call>
int64_t warm_up(Call& call, double min_repetition_ms) {
  Clock::time_point start = Clock::now();
  call();
  if (elapsed_ms(start) >= min_repetition_ms) return 1;
  start = Clock::now();
  call();
  const double call_ms = std::max(elapsed_ms(start), 1e-4);
  return std::max<int64_t>(1, static_cast<int64_t>(min_repetition_ms / call_ms));
}

// Wall time per call of one repetition.
template <typename Call>
double time_repetition(Call& call, int64_t calls) {
  const Clock::time_point start = Clock::now();
  for (int64_t c = 0; c < calls; ++c) call();
  return elapsed_ms(start) / static_cast<double>(calls);
}

inline Timing summarize(std::vector<double> per_call_ms, int64_t calls_per_repetition) {
  Timing timing;
  std::sort(per_call_ms.begin(), per_call_ms.end());
  const size_t n = per_call_ms.size();
  timing.median_ms = n % 2 == 1 ? per_call_ms[n / 2] : 0.5 * (per_call_ms[n / 2 - 1] + per_call_ms[n / 2]);
  timing.min_ms = per_call_ms.front();
  timing.repetitions = static_cast<int>(n);
  timing.calls_per_repetition = calls_per_repetition;
  return timing;
}

}  // namespace detail

// The timing rule of `rotary bench`: one warm-up call, then `repetitions` timed repetitions
// (std::chrono::steady_clock wall time); the median and the minimum per call. A call shorter
// than min_repetition_ms (a decode step: tens of microseconds, where clock reads and scheduler
// noise would dominate) is repeated back to back within each repetition until the repetition
// lasts about that long, and the repetition's time is divided by the number of calls.
template <typename Call>
Timing time_calls(Call&& call, int repetitions, double min_repetition_ms = 2.0) {
  const int64_t calls = detail::warm_up(call, min_repetition_ms);
  std::vector<double> per_call_ms;
  for (int r = 0; r < std::max(repetitions, 1); ++r) per_call_ms.push_back(detail::time_repetition(call, calls));
  return detail::summarize(std::move(per_call_ms), calls);
}

// time_calls for a call and the reference it is compared with, their repetitions alternating
// (call, reference, call, reference, ...), so that both medians see the same machine: on a
// shared 2-core machine another process's load comes and goes within seconds, and a reference
// measured at another moment would move the ratio by more than the kernels' differences.
//
// Each timed repetition follows one untimed run of the same operation, so that each is timed
// in its own steady state rather than in the cache and memory state the other left. (In one run
// on a loaded machine a RoPE call, and a plain loop of loads, FMAs and streaming stores, ran
// 10-15% slower right after an 84 MB streaming copy than back to back; on a quiet machine the
// order made no measurable difference. docs/performance.md.)
struct PairedTiming {
  Timing call;
  Timing reference;
};
template <typename Call, typename Reference>
PairedTiming time_paired(Call&& call, Reference&& reference, int repetitions, double min_repetition_ms = 2.0) {
  const int64_t calls = detail::warm_up(call, min_repetition_ms);
  const int64_t reference_calls = detail::warm_up(reference, min_repetition_ms);
  std::vector<double> call_ms;
  std::vector<double> reference_ms;
  for (int r = 0; r < std::max(repetitions, 1); ++r) {
    call();
    call_ms.push_back(detail::time_repetition(call, calls));
    reference();
    reference_ms.push_back(detail::time_repetition(reference, reference_calls));
  }
  return {detail::summarize(std::move(call_ms), calls), detail::summarize(std::move(reference_ms), reference_calls)};
}

// Bytes per millisecond as GB/s (1 GB = 1e9 bytes).
inline double gb_per_s(int64_t bytes_moved, double milliseconds) {
  return static_cast<double>(bytes_moved) / (milliseconds * 1e-3) / 1e9;
}

}  // namespace rotary::bench
