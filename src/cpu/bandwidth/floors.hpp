// src/cpu/bandwidth/floors.hpp: the floor a kernel call is compared with: the streams of
// streams.hpp on buffers allocated once, in the access pattern found faster on this machine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>

#include "cpu/bandwidth/buffer.hpp"
#include "cpu/bandwidth/streams.hpp"

namespace rotary::bandwidth {

// Calls whose q + k are smaller than this are compared with streams of their own size, which
// stay in the caches (Streams::run_cached). The kernels stream their outputs past the caches from
// the same size up (src/cpu/apply.cpp, kStreamOutputBytes).
constexpr int64_t kCachedStreamBytes = int64_t{16} << 20;

// The three streams on buffers of max_bytes allocated once (sizes above it are cut to it).
// run() streams the floor of a kernel call: the pattern choose_floor() recorded for that kind of
// stream and thread count (by default four pages for copy, sequential in place).
class Streams {
 public:
  explicit Streams(size_t max_bytes);

  void copy(size_t bytes, int threads, Pattern pattern = Pattern::FourPages);
  void memcpy(size_t bytes, int threads);
  void copy_inplace(size_t bytes, int threads, Pattern pattern = Pattern::Sequential);
  // copy_inplace if in_place, else copy.
  void stream(bool in_place, size_t bytes, int threads, Pattern pattern);

  void choose_floor(bool in_place, int threads, Pattern pattern);
  Pattern floor(bool in_place, int threads) const;
  // The floor of an in-place call or of an out-of-place one.
  void run(bool in_place, size_t bytes, int threads) { stream(in_place, bytes, threads, floor(in_place, threads)); }
  // The floor of a call small enough to stay in the caches (below kCachedStreamBytes, where the
  // kernels store through the cache too): in place the read-modify-write stream, out of place
  // glibc's memcpy, which copies such sizes with ordinary stores (a streaming copy would send
  // them to memory). On the calling thread only, whatever the thread count: starting a thread
  // costs more than such a copy (a 2-thread memcpy of 1.6 MB ran slower than a 1-thread one),
  // and apply() keeps calls this small on the calling thread too (kMinElementsPerThread).
  void run_cached(bool in_place, size_t bytes);

 private:
  static int key(bool in_place, int threads) { return threads * 2 + (in_place ? 1 : 0); }
  size_t checked(size_t bytes) const { return bytes < src_.bytes() ? bytes : src_.bytes(); }
  Buffer src_, dst_, data_;
  std::map<int, Pattern> floors_;
};

}  // namespace rotary::bandwidth
