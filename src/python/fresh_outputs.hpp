// src/python/fresh_outputs.hpp: the Python package's large fresh outputs (rotary.apply and
// rotary.torch.apply_rotary without out= or inplace: bind_apply.cpp, bind_torch_eager.cpp) are
// faulted in before the kernel writes them, split over the kernels' threads.
//
// Why: such an output is a new mmap block (glibc hands blocks of this size back to the kernel on
// free), so its first writes fault every page in. Large calls write their output with
// non-temporal stores (src/cpu/apply.cpp); on the Xeon, BF16 of docs/performance.md ("Fresh outputs
// from Python") an 80 MiB q + k output faulted in first took 7-13% less time than faulted in under
// those stores on one thread. Faulting in on one thread while the kernel then ran on two was slower
// than the kernel's own two threads faulting, hence the split.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/huge_pages.hpp"
#include "cpu/kernels.hpp"

namespace rotary::python {

// Faults in [data, data + bytes) of a fresh output of `elements` elements (which picks the number
// of threads as the kernels do), on huge pages where the system leaves them to madvise. The
// bytes' values are unspecified after it: the caller's kernel overwrites all of them next.
inline void prefault_fresh_output(void* data, int64_t bytes, int64_t elements) {
  if (data == nullptr || bytes <= 0) return;
  rotary::detail::advise_huge_pages(data, static_cast<size_t>(bytes));
  const auto piece = static_cast<int64_t>(rotary::detail::kHugePageBytes);
  auto* base = static_cast<unsigned char*>(data);
  cpu::parallel_rows((bytes + piece - 1) / piece, elements, [&](int64_t begin, int64_t end) {
    const int64_t from = begin * piece;
    const int64_t to = std::min(end * piece, bytes);
    rotary::detail::prefault_pages(base + from, static_cast<size_t>(to - from));
  });
}

}  // namespace rotary::python
