// src/core/huge_pages.hpp: asking Linux for transparent huge pages (2 MiB) under a large buffer
// before its first touch. Internal: not installed; included as "core/huge_pages.hpp" (or
// "src/core/huge_pages.hpp") by the table's slabs (table.cpp), the KV cache's blocks
// (src/attention/kv_cache.cpp), the Python package's fresh outputs (src/python/fresh_outputs.hpp)
// and the benchmarks' buffers (src/cpu/bandwidth/buffer.hpp).
//
// Why: with transparent huge pages in "madvise" mode (a common default, and this project's AMD EPYC
// VMs), memory stays on 4 KiB pages unless asked. A kernel that streams a large buffer then pays a
// TLB miss every 4 KiB, the hardware prefetchers stop at every page boundary, and the first writes
// fault 4 KiB at a time. Measured on the EPYC AVX-512 machine: KvCache::attend over 32,768
// cached tokens, float32, 9.18-9.36 -> 7.82-8.01 ms; a fresh 64 MiB torch output 76-80 -> 12 ms of
// page faults; rotary bench's attn_decode_32k float32 8.6-9.7 -> 7.7-8.1 ms (docs/performance.md).
// It is advice: where THP is off, or the call fails, nothing changes but speed.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace rotary::detail {

inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// Advises the whole 2 MiB-aligned huge pages inside [data, data + bytes) (none when the range
// holds no whole one). Call it before the first write to the range.
inline void advise_huge_pages(void* data, size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  const auto begin = reinterpret_cast<uintptr_t>(data);
  const uintptr_t first = (begin + kHugePageBytes - 1) & ~(uintptr_t{kHugePageBytes} - 1);
  const uintptr_t last = (begin + bytes) & ~(uintptr_t{kHugePageBytes} - 1);
  if (data != nullptr && last > first) (void)madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
#else
  (void)data;
  (void)bytes;
#endif
}

// Faults in every page of [data, data + bytes) with one store of 0 per 4 KiB page (and its last
// byte), for a fresh buffer that a kernel overwrites whole next: its page faults then come before
// the kernel's stream of (non-temporal) stores rather than inside it (src/python/fresh_outputs.hpp
// has the measurement). Advise huge pages first: a 2 MiB page then faults in once.
inline void prefault_pages(void* data, size_t bytes) {
  constexpr size_t kPageBytes = 4096;
  auto* first = static_cast<volatile unsigned char*>(data);
  for (size_t offset = 0; offset < bytes; offset += kPageBytes) first[offset] = 0;
  if (bytes > 0) first[bytes - 1] = 0;
}

}  // namespace rotary::detail
