// fuzz/case_support.hpp: what the argument fuzz targets share (apply_args, attention_args,
// kv_cache_ops): a reader over the fuzz bytes, the values an edit sets, an arena of moderate
// finite numbers, position-like spans backed as their sizes promise, and the byte bookkeeping
// that checks an implementation wrote only its output's elements.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "rotary/table.hpp"
#include "rotary/tensor.hpp"

namespace rotary::fuzz {

inline constexpr int64_t kMaxArray = 4096;  // longest position / length array the harnesses back

// Reads the fuzz input front to back; past the end every read is 0.
class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t u8() { return pos_ < size_ ? data_[pos_++] : 0; }
  int64_t i64() {
    uint64_t value = 0;
    for (int i = 0; i < 8; ++i) value |= static_cast<uint64_t>(u8()) << (8 * i);
    return static_cast<int64_t>(value);
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// Values an edit sets: small, raw, or near a limit where index math overflows.
inline int64_t read_value(ByteReader& in) {
  static constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  static constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  static constexpr int64_t kSpecial[] = {
      0, 1, -1, 2, 16, 4096, kMaxPosition, kMaxPosition + 1, int64_t{1} << 32, kMax, kMin, kMax / 2 + 1,
      int64_t{1} << 62, 3037000500 /* ~sqrt(2^63) */, -(int64_t{1} << 62), kMax / 4, kMax / 16 + 1, 65536};
  switch (in.u8() % 4) {
    case 0: return static_cast<int8_t>(in.u8());
    case 1: return in.u8();
    case 2: return kSpecial[in.u8() % (sizeof kSpecial / sizeof kSpecial[0])];
    default: return in.i64();
  }
}

// One edit of a case: its kind, the byte naming what it edits (a view `target % 4`, an axis
// `(target >> 2) % 4`, an element of a span `target % size`), and the value it sets.
struct Edit {
  uint8_t kind = 0;
  uint8_t target = 0;
  size_t view = 0;
  size_t axis = 0;
  int64_t value = 0;
};

inline Edit read_edit(ByteReader& in) {
  Edit edit;
  edit.kind = in.u8();
  edit.target = in.u8();
  edit.view = edit.target % 4;
  edit.axis = (edit.target >> 2) % 4;
  edit.value = read_value(in);
  return edit;
}

// A view's shape in `layout` from its named extents (THD: tokens = seq, a trailing 1).
inline std::array<int64_t, 4> shape_in_layout(Layout layout, int64_t batch, int64_t seq, int64_t heads, int64_t dim) {
  switch (layout) {
    case Layout::BSHD: return {batch, seq, heads, dim};
    case Layout::BHSD: return {batch, heads, seq, dim};
    case Layout::SBHD: return {seq, batch, heads, dim};
    case Layout::THD: return {seq, heads, dim, 1};
  }
  return {};
}

// A span of `count` values (an int64 count read as size_t) over `values`, resized to it
// (repeating what was decoded); its data is null when count is negative or past kMaxArray: a
// span's size is the caller's promise about its array, and the harnesses keep it.
template <typename T>
std::span<const T> backed_span(std::vector<T>& values, int64_t count) {
  const auto size = static_cast<size_t>(count);
  if (count < 0 || count > kMaxArray) return {static_cast<const T*>(nullptr), size};
  std::vector<T> decoded = values.empty() ? std::vector<T>{T{}} : values;
  values.resize(size);
  for (size_t i = decoded.size(); i < size; ++i) values[i] = decoded[i % decoded.size()];
  return {values.data(), size};
}

// Bytes that are finite, moderate numbers in every storage type (f32, bf16, f16, f64 alike):
// each byte in 0x38..0x3F or 0xB8..0xBF keeps every format's exponent field mid-range (|x| in
// [2^-15, 2) for f32 and bf16, [2^-1, 2) for f16, [2^-127, 2) for f64). `seed` picks the
// sequence (each target keeps the one its corpus grew with).
inline std::vector<unsigned char> arena_pattern(size_t bytes, uint32_t seed = 12345) {
  std::vector<unsigned char> arena(bytes);
  uint32_t state = seed;
  for (unsigned char& b : arena) {
    state = state * 1664525u + 1013904223u;
    b = static_cast<unsigned char>(0x38u + ((state >> 24) & 7u) + ((state >> 20) & 1u) * 0x80u);
  }
  return arena;
}

// A checked view's elements and the bytes from its data through its last element.
inline int64_t elements_of(const TensorView& view) { return element_count(view, "fuzz"); }
inline int64_t span_bytes(const TensorView& view) {
  int64_t last = 0;
  for (int axis = 0; axis < layout_rank(view.layout); ++axis) last += (view.shape[axis] - 1) * view.stride_elems[axis];
  return (last + 1) * dtype_size(view.dtype);
}

// Marks the bytes of every element of `view` (at byte `offset` of the buffer).
inline void mark_elements(const TensorView& view, int64_t offset, std::vector<bool>& written) {
  const int rank = layout_rank(view.layout);
  std::array<int64_t, 4> extent{1, 1, 1, 1};
  std::array<int64_t, 4> stride{0, 0, 0, 0};
  for (int axis = 0; axis < rank; ++axis) {
    extent[static_cast<size_t>(axis)] = view.shape[static_cast<size_t>(axis)];
    stride[static_cast<size_t>(axis)] = view.stride_elems[static_cast<size_t>(axis)];
  }
  const int64_t size = dtype_size(view.dtype);
  for (int64_t i0 = 0; i0 < extent[0]; ++i0) {
    for (int64_t i1 = 0; i1 < extent[1]; ++i1) {
      for (int64_t i2 = 0; i2 < extent[2]; ++i2) {
        for (int64_t i3 = 0; i3 < extent[3]; ++i3) {
          const int64_t at = offset + (i0 * stride[0] + i1 * stride[1] + i2 * stride[2] + i3 * stride[3]) * size;
          for (int64_t b = 0; b < size; ++b) written[static_cast<size_t>(at + b)] = true;
        }
      }
    }
  }
}

}  // namespace rotary::fuzz
