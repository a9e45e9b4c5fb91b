// src/attention/prefetch.hpp: a paced software prefetch for the decode form's in-place float32 K
// and V reads (internal to rotary_attention; plain C++, no Highway).
//
// Why: a decode step reads every cached K and V row once and does about four FMAs per 64-byte line,
// so it runs at the rate the core keeps lines in flight. Its loads do not come in address order
// (the scores read four K rows side by side, p.v reads each V row in two halves), an order the
// hardware prefetchers follow poorly: on the AMD EPYC VM (Zen 5, AVX-512) a loop of
// that order with no software prefetch read 16-20 GB/s where a plain sequential read reads 42. The
// kernels used to prefetch a tile ahead in bursts (32 lines per four keys); a burst fills the
// core's miss buffers at once and the loads behind it wait, and the same loop read 26-28 GB/s.
// One prefetch per line consumed, in address order, a tile ahead, read 38 GB/s with arithmetic
// in between (docs/results/performance/2026-11-25-decode-paced-prefetch.md). This cursor does that: it walks the
// rows in address order, and each time the consuming loop reports how far it has read, prefetches
// the lines up to the same place `ahead` rows later; never more than a few lines per call, so a
// cursor that starts behind catches up at twice the loop's rate instead of bursting.
#pragma once

#include <algorithm>
#include <cstdint>

namespace rotary::attention_internal {

class PrefetchCursor {
 public:
  PrefetchCursor() = default;
  // Rows first_row, first_row + 1, ... < end_row of `row_bytes` bytes each, `stride_bytes` apart
  // from `base` (row r at base + r * stride_bytes, every row up to end_row inside the caller's
  // view); the cursor starts at first_row and runs `ahead` rows ahead of the consumer.
  PrefetchCursor(const void* base, int64_t stride_bytes, int64_t row_bytes, int64_t first_row, int64_t end_row,
                 int64_t ahead)
      : base_(static_cast<const char*>(base)), stride_(stride_bytes), row_(first_row), end_(end_row), ahead_(ahead) {
    // A row that does not start on a line boundary may touch one line more: lines are counted
    // from the one that holds the row's first byte.
    const bool aligned = reinterpret_cast<uintptr_t>(base_) % 64 == 0 && stride_ % 64 == 0;
    row_lines_ = (row_bytes + 63) / 64 + (aligned ? 0 : 1);
    next_ = first_row * row_lines_;
    if (row_ < end_) row_start_ = line_of(row_);
  }

  int64_t row_lines() const { return row_lines_; }

  // The consumer works on a tile whose row 0 is the cursor's row `tile`.
  void at_tile(int64_t tile) { tile_ = tile; }

  // The consumer has read `lines` lines from the start of the tile's row `row` on (they may run
  // past that row into the next ones): prefetch up to the same place `ahead` rows later, at most
  // max_lines lines in this call.
  inline void follow(int64_t row, int64_t lines, int64_t max_lines) {
    advance_to((tile_ + row + ahead_) * row_lines_ + lines, max_lines);
  }

 private:
  // Lines are numbered row * row_lines_ + line. Prefetches the lines before `target` not
  // prefetched yet, at most max_lines of them, none of rows at or past end_.
  inline void advance_to(int64_t target, int64_t max_lines) {
    const int64_t last = std::min(target, next_ + max_lines);
    for (; next_ < last && row_ < end_; ++next_) {
      __builtin_prefetch(row_start_ + line_ * 64);
      if (++line_ == row_lines_) {
        line_ = 0;
        if (++row_ < end_) row_start_ = line_of(row_);
      }
    }
  }

  // The line that holds row r's first byte (r < end_: inside the view).
  const char* line_of(int64_t r) const {
    return reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(base_ + r * stride_) & ~uintptr_t{63});
  }

  const char* base_ = nullptr;
  int64_t stride_ = 0;
  int64_t row_lines_ = 1;
  int64_t row_ = 0, line_ = 0, next_ = 0;  // the next line to prefetch: line_ of row_, number next_
  const char* row_start_ = nullptr;        // line_of(row_)
  int64_t end_ = 0;
  int64_t ahead_ = 0;
  int64_t tile_ = 0;
};

}  // namespace rotary::attention_internal
