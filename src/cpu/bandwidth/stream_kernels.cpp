// src/cpu/bandwidth/stream_kernels.cpp: one part of each stream of streams.hpp, compiled once
// per Highway target and dispatched at run time (HWY_DYNAMIC_DISPATCH), as the kernels are
// (src/cpu/rotate_kernels_f32.cpp), so a stream runs with the target the kernels run with.
//
// A "line" is 64 bytes, the cache line: 1 vector on AVX3, 2 on AVX2, 4 on SSE4 / SSSE3, 8 lanes
// on SCALAR. Each part starts on dst's first line boundary: the bytes before it, and those after
// the last whole line, are copied (or scaled) without streaming stores, so that every streaming
// store covers whole aligned vectors inside [dst, dst + bytes).
//   copy, Sequential:  line after line, each vector loaded and stored with a non-temporal store.
//   copy, FourPages:   whole 16 KiB blocks (from the first line boundary), one line from each of
//                      the block's four pages per step; the rest line after line.
//   in place:          the same orders with x * kInPlaceFactor and ordinary aligned stores.
//   read:              line after line, each vector loaded and xor-ed into one of a line's worth
//                      of accumulators (no stores; the checksum keeps the loads live).
// Highway 1.0.3 ops only (Load, LoadU, Stream, Store, Mul, Set, Zero, Xor), present on every target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/bandwidth/stream_kernels.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "cpu/bandwidth/stream_kernels.hpp"

HWY_BEFORE_NAMESPACE();
namespace rotary::bandwidth::detail::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DU = hn::ScalableTag<uint64_t>;  // copy: any lane type moves the same bits
using DF = hn::ScalableTag<float>;

constexpr size_t kLineBytes = 64;
constexpr size_t kPageBytes = 4096;
constexpr size_t kPagesPerBlock = 4;
constexpr size_t kBlockBytes = kPagesPerBlock * kPageBytes;

// Whole vectors per line (a target with vectors wider than a line takes one vector per "line").
template <class D>
HWY_INLINE size_t VectorsPerLine(D d) {
  const size_t vector_bytes = hn::Lanes(d) * sizeof(hn::TFromD<D>);
  return vector_bytes >= kLineBytes ? 1 : kLineBytes / vector_bytes;
}

// ---- copy ------------------------------------------------------------------------------------

// One vector from src to dst (vector-aligned) with a non-temporal store.
template <bool kSrcAligned>
HWY_INLINE void StreamVector(DU d, uint8_t* HWY_RESTRICT dst, const uint8_t* HWY_RESTRICT src) {
  const uint64_t* from = reinterpret_cast<const uint64_t*>(src);
  if constexpr (kSrcAligned) {
    hn::Stream(hn::Load(d, from), d, reinterpret_cast<uint64_t*>(dst));
  } else {
    hn::Stream(hn::LoadU(d, from), d, reinterpret_cast<uint64_t*>(dst));
  }
}

// Whole lines of [0, bytes), dst line-aligned; returns the bytes copied.
template <bool kSrcAligned>
HWY_INLINE size_t CopyLines(uint8_t* HWY_RESTRICT dst, const uint8_t* HWY_RESTRICT src, size_t bytes) {
  const DU d;
  const size_t vector_bytes = hn::Lanes(d) * sizeof(uint64_t);
  const size_t vectors = VectorsPerLine(d);
  const size_t line_bytes = vectors * vector_bytes;
  const size_t whole = bytes / line_bytes * line_bytes;
  for (size_t i = 0; i < whole; i += line_bytes) {
    for (size_t v = 0; v < vectors; ++v) StreamVector<kSrcAligned>(d, dst + i + v * vector_bytes, src + i + v * vector_bytes);
  }
  return whole;
}

// Whole 16 KiB blocks, one line of each of the four pages per step, then the rest line by line.
template <bool kSrcAligned>
HWY_INLINE size_t CopyBlocks(uint8_t* HWY_RESTRICT dst, const uint8_t* HWY_RESTRICT src, size_t bytes) {
  const DU d;
  const size_t vector_bytes = hn::Lanes(d) * sizeof(uint64_t);
  const size_t vectors = VectorsPerLine(d);
  const size_t line_bytes = vectors * vector_bytes;
  const size_t whole = bytes / kBlockBytes * kBlockBytes;
  for (size_t block = 0; block < whole; block += kBlockBytes) {
    for (size_t line = 0; line < kPageBytes; line += line_bytes) {
      for (size_t page = 0; page < kPagesPerBlock; ++page) {
        const size_t at = block + page * kPageBytes + line;
        for (size_t v = 0; v < vectors; ++v) {
          StreamVector<kSrcAligned>(d, dst + at + v * vector_bytes, src + at + v * vector_bytes);
        }
      }
    }
  }
  return whole + CopyLines<kSrcAligned>(dst + whole, src + whole, bytes - whole);
}

void CopyPart(std::byte* dst_bytes, const std::byte* src_bytes, size_t bytes, Pattern pattern) {
  if (bytes == 0) return;
  uint8_t* dst = reinterpret_cast<uint8_t*>(dst_bytes);
  const uint8_t* src = reinterpret_cast<const uint8_t*>(src_bytes);
  const DU d;
  const size_t vector_bytes = hn::Lanes(d) * sizeof(uint64_t);
  const size_t line_bytes = VectorsPerLine(d) * vector_bytes;
  const size_t misalignment = reinterpret_cast<uintptr_t>(dst) % line_bytes;
  const size_t head = std::min(bytes, misalignment == 0 ? size_t{0} : line_bytes - misalignment);
  if (head > 0) std::memcpy(dst, src, head);
  dst += head;
  src += head;
  bytes -= head;
  const bool src_aligned = reinterpret_cast<uintptr_t>(src) % vector_bytes == 0;
  size_t done = 0;
  if (pattern == Pattern::Sequential) {
    done = src_aligned ? CopyLines<true>(dst, src, bytes) : CopyLines<false>(dst, src, bytes);
  } else {
    done = src_aligned ? CopyBlocks<true>(dst, src, bytes) : CopyBlocks<false>(dst, src, bytes);
  }
  if (done < bytes) std::memcpy(dst + done, src + done, bytes - done);
}

// ---- in place --------------------------------------------------------------------------------

HWY_INLINE void ScaleScalar(float* HWY_RESTRICT x, size_t begin, size_t end) {
  for (size_t i = begin; i < end; ++i) x[i] *= kInPlaceFactor;
}

// Whole lines of [0, count), x line-aligned; returns the floats done.
HWY_INLINE size_t ScaleLines(float* HWY_RESTRICT x, size_t count) {
  const DF d;
  const size_t lanes = hn::Lanes(d);
  const size_t vectors = VectorsPerLine(d);
  const size_t line_floats = vectors * lanes;
  const auto factor = hn::Set(d, kInPlaceFactor);
  const size_t whole = count / line_floats * line_floats;
  for (size_t i = 0; i < whole; i += line_floats) {
    for (size_t v = 0; v < vectors; ++v) {
      float* at = x + i + v * lanes;
      hn::Store(hn::Mul(hn::Load(d, at), factor), d, at);
    }
  }
  return whole;
}

// Whole 16 KiB blocks, one line of each of the four pages per step, then the rest line by line.
HWY_INLINE size_t ScaleBlocks(float* HWY_RESTRICT x, size_t count) {
  const DF d;
  const size_t lanes = hn::Lanes(d);
  const size_t vectors = VectorsPerLine(d);
  const size_t line_floats = vectors * lanes;
  const auto factor = hn::Set(d, kInPlaceFactor);
  constexpr size_t kPageFloats = kPageBytes / sizeof(float);
  constexpr size_t kBlockFloats = kPagesPerBlock * kPageFloats;
  const size_t whole = count / kBlockFloats * kBlockFloats;
  for (size_t block = 0; block < whole; block += kBlockFloats) {
    for (size_t line = 0; line < kPageFloats; line += line_floats) {
      for (size_t page = 0; page < kPagesPerBlock; ++page) {
        for (size_t v = 0; v < vectors; ++v) {
          float* at = x + block + page * kPageFloats + line + v * lanes;
          hn::Store(hn::Mul(hn::Load(d, at), factor), d, at);
        }
      }
    }
  }
  return whole + ScaleLines(x + whole, count - whole);
}

void ScalePart(float* x, size_t count, Pattern pattern) {
  if (count == 0) return;
  const DF d;
  const size_t line_bytes = VectorsPerLine(d) * hn::Lanes(d) * sizeof(float);
  const size_t misalignment = reinterpret_cast<uintptr_t>(x) % line_bytes;  // a multiple of 4
  const size_t head = std::min(count, misalignment == 0 ? size_t{0} : (line_bytes - misalignment) / sizeof(float));
  ScaleScalar(x, 0, head);
  x += head;
  count -= head;
  const size_t done = pattern == Pattern::Sequential ? ScaleLines(x, count) : ScaleBlocks(x, count);
  ScaleScalar(x, done, count);
}

// ---- read ------------------------------------------------------------------------------------

// The xor of every 64-bit word of [data, data + bytes) (data 8-byte aligned; trailing bytes that
// make no whole word are not read). Whole lines from the first line boundary, the words before
// and after it one by one. Xor, not a float sum: any bits (bf16 pairs, NaN patterns) cost the same.
uint64_t ReadPart(const std::byte* data_bytes, size_t bytes) {
  const uint64_t* data = reinterpret_cast<const uint64_t*>(data_bytes);
  size_t count = bytes / sizeof(uint64_t);
  const DU d;
  const size_t lanes = hn::Lanes(d);
  const size_t vectors = VectorsPerLine(d);
  const size_t line_words = vectors * lanes;
  const size_t misalignment = reinterpret_cast<uintptr_t>(data) % (line_words * sizeof(uint64_t));
  const size_t head = std::min(count, misalignment == 0 ? size_t{0} : (line_words * sizeof(uint64_t) - misalignment) / sizeof(uint64_t));
  uint64_t checksum = 0;
  for (size_t i = 0; i < head; ++i) checksum ^= data[i];
  data += head;
  count -= head;
  // Up to four vectors a line (SSE4: 4 x 16 bytes), one accumulator each.
  auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
  const size_t whole = count / line_words * line_words;
  for (size_t i = 0; i < whole; i += line_words) {
    a0 = hn::Xor(a0, hn::Load(d, data + i));
    if (vectors > 1) a1 = hn::Xor(a1, hn::Load(d, data + i + lanes));
    if (vectors > 2) {
      a2 = hn::Xor(a2, hn::Load(d, data + i + 2 * lanes));
      a3 = hn::Xor(a3, hn::Load(d, data + i + 3 * lanes));
    }
    for (size_t v = 4; v < vectors; ++v) a0 = hn::Xor(a0, hn::Load(d, data + i + v * lanes));  // SCALAR: 8 lanes of 1
  }
  const auto all = hn::Xor(hn::Xor(a0, a1), hn::Xor(a2, a3));
  alignas(64) uint64_t words[HWY_MAX_BYTES / sizeof(uint64_t)];
  hn::Store(all, d, words);
  for (size_t lane = 0; lane < lanes; ++lane) checksum ^= words[lane];
  for (size_t i = whole; i < count; ++i) checksum ^= data[i];
  return checksum;
}

const char* TargetName() { return hwy::TargetName(HWY_TARGET); }

}  // namespace rotary::bandwidth::detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace rotary::bandwidth::detail {

HWY_EXPORT(CopyPart);
HWY_EXPORT(ScalePart);
HWY_EXPORT(ReadPart);
HWY_EXPORT(TargetName);

void copy_part(std::byte* dst, const std::byte* src, size_t bytes, Pattern pattern) {
  HWY_DYNAMIC_DISPATCH(CopyPart)(dst, src, bytes, pattern);
}

void scale_part(float* x, size_t count, Pattern pattern) { HWY_DYNAMIC_DISPATCH(ScalePart)(x, count, pattern); }

uint64_t read_part(const std::byte* data, size_t bytes) { return HWY_DYNAMIC_DISPATCH(ReadPart)(data, bytes); }

std::string dispatched_target() { return HWY_DYNAMIC_DISPATCH(TargetName)(); }

}  // namespace rotary::bandwidth::detail
#endif  // HWY_ONCE
