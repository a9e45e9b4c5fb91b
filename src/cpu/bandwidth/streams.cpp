// src/cpu/bandwidth/streams.cpp: the streams of streams.hpp over threads: the split into parts,
// the target choice of $ROTARY_CPU_TARGET, and glibc's memcpy. The SIMD parts are in
// stream_kernels.cpp.
#include "cpu/bandwidth/streams.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "hwy/cache_control.h"
#include "cpu/bandwidth/stream_kernels.hpp"
#include "cpu/kernels.hpp"
#include "rotary/apply.hpp"

namespace rotary::bandwidth {
namespace {

constexpr size_t kPartAlignment = 4096;

// $ROTARY_CPU_TARGET, applied once per process before the first stream, as before rotary::apply's
// first call (src/cpu/targets.hpp): the streams and the kernels run with one target, and an
// explicit force_cpu_target() after it wins. current_cpu_target() applies it.
void follow_target_environment() { (void)current_cpu_target(); }

// Runs part(begin, end) over `threads` contiguous parts of [0, bytes), each starting a multiple
// of 4 KiB from 0: the calling thread takes the first part, std::threads the rest.
void for_each_part(size_t bytes, int threads, const std::function<void(size_t, size_t)>& part) {
  const size_t num_parts = static_cast<size_t>(std::max(threads, 1));
  const size_t pages = (bytes + kPartAlignment - 1) / kPartAlignment;
  const auto bound = [&](size_t i) { return std::min(bytes, pages * i / num_parts * kPartAlignment); };
  std::vector<std::thread> workers;
  workers.reserve(num_parts - 1);
  for (size_t i = 1; i < num_parts; ++i) workers.emplace_back([&, i] { part(bound(i), bound(i + 1)); });
  part(bound(0), bound(1));
  for (std::thread& worker : workers) worker.join();
}

}  // namespace

const char* to_string(Pattern pattern) {
  return pattern == Pattern::Sequential ? "sequential" : "4 pages at a time";
}

void copy_stream(std::byte* dst, const std::byte* src, size_t bytes, int threads, Pattern pattern) {
  follow_target_environment();
  for_each_part(bytes, threads, [&](size_t begin, size_t end) {
    detail::copy_part(dst + begin, src + begin, end - begin, pattern);
    hwy::FlushStream();  // streaming stores are weakly ordered: complete them before the timer stops
  });
}

void copy_inplace_stream(std::byte* data, size_t bytes, int threads, Pattern pattern) {
  follow_target_environment();
  // Parts start a multiple of 4 KiB from `data`, so they stay aligned for float.
  const size_t whole_floats_bytes = bytes / sizeof(float) * sizeof(float);
  for_each_part(whole_floats_bytes, threads, [&](size_t begin, size_t end) {
    detail::scale_part(reinterpret_cast<float*>(data + begin), (end - begin) / sizeof(float), pattern);
  });
}

uint64_t read_stream(const std::byte* data, size_t bytes) {
  follow_target_environment();
  const size_t words = bytes / sizeof(uint64_t);
  const int64_t pages = static_cast<int64_t>((words * sizeof(uint64_t) + kPartAlignment - 1) / kPartAlignment);
  std::atomic<uint64_t> checksum{0};
  // One "row" a 4 KiB page; elements = the floats read, the size measure the kernels pass.
  cpu::parallel_rows(pages, static_cast<int64_t>(bytes / sizeof(float)), [&](int64_t first, int64_t last) {
    const size_t begin = static_cast<size_t>(first) * kPartAlignment;
    const size_t end = std::min(words * sizeof(uint64_t), static_cast<size_t>(last) * kPartAlignment);
    if (end > begin) checksum.fetch_xor(detail::read_part(data + begin, end - begin), std::memory_order_relaxed);
  });
  return checksum.load();
}

void memcpy_stream(std::byte* dst, const std::byte* src, size_t bytes, int threads) {
  for_each_part(bytes, threads, [&](size_t begin, size_t end) {
    if (end > begin) std::memcpy(dst + begin, src + begin, end - begin);
  });
}

void copy_inplace_init(std::byte* data, size_t bytes) {
  float* x = reinterpret_cast<float*>(data);
  for (size_t i = 0; i < bytes / sizeof(float); ++i) x[i] = 1.0f + static_cast<float>(i % 1021) / 1021.0f;
}

std::string stream_target() {
  follow_target_environment();
  const std::string dispatched = detail::dispatched_target();
  // AVX3_BF16 is AVX3 with other bf16 stores: the streams, which convert nothing, run AVX3's code
  // under it, and are named as the kernels' target is.
  const std::string kernels = current_cpu_target();
  return kernels == "AVX3_BF16" && dispatched == "AVX3" ? kernels : dispatched;
}

}  // namespace rotary::bandwidth
