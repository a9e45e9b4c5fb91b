// src/cpu/bandwidth/buffer.hpp: an owning, page-aligned, zero-filled byte buffer, for the streams
// (streams.hpp) and the tensors that benchmarks time kernels on.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

#include "core/huge_pages.hpp"

namespace rotary::bandwidth {

// Zero-filled: every page is touched once here, so no page fault falls inside a timed call.
// Buffers of 2 MiB and more are 2 MiB-aligned, rounded to whole 2 MiB and advised for transparent
// huge pages before that first touch (core/huge_pages.hpp), as rotary's own large allocations are
// (the KV cache, the table, the Python package's outputs): the kernels and the floors they are
// divided by are timed over the same kind of pages. Smaller buffers are 4 KiB-aligned and rounded
// to whole 4 KiB. bytes() is the size asked for.
class Buffer {
 public:
  static constexpr size_t kAlignment = 4096;  // the least alignment of data()

  Buffer() = default;
  explicit Buffer(size_t bytes) : bytes_(bytes) {
    if (bytes == 0) return;
    const size_t alignment = bytes >= rotary::detail::kHugePageBytes ? rotary::detail::kHugePageBytes : kAlignment;
    const size_t rounded = (bytes + alignment - 1) / alignment * alignment;
    void* data = std::aligned_alloc(alignment, rounded);
    if (data == nullptr) throw std::bad_alloc();
    rotary::detail::advise_huge_pages(data, rounded);
    std::memset(data, 0, rounded);
    data_.reset(static_cast<std::byte*>(data));
  }
  std::byte* data() const { return data_.get(); }
  size_t bytes() const { return bytes_; }

 private:
  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  std::unique_ptr<std::byte, Free> data_;
  size_t bytes_ = 0;
};

}  // namespace rotary::bandwidth
