// src/cpu/bandwidth/buffer.hpp: an owning, page-aligned, zero-filled byte buffer, for the streams
// (streams.hpp) and the tensors that benchmarks time kernels on.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

namespace rotary::bandwidth {

// 4 KiB-aligned and zero-filled: every page is touched once here, so no page fault falls inside
// a timed call. The size is rounded up to whole pages for the allocation; bytes() is the size
// asked for.
class Buffer {
 public:
  static constexpr size_t kAlignment = 4096;

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

 private:
  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  std::unique_ptr<std::byte, Free> data_;
  size_t bytes_ = 0;
};

}  // namespace rotary::bandwidth
