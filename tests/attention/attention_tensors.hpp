// tests/attention/attention_tensors.hpp: the random numbers and the strided tensors of the
// attention tests (attention_test.cpp, encodings_test.cpp): a seeded generator of values that are
// never zero, and a tensor in any layout with padded strides, read and written by named axes.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <random>
#include <vector>

#include "rotary/tensor.hpp"
#include "tests/support/elements.hpp"

namespace rotary::test {

class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}
  int64_t uniform(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(engine_); }
  bool percent(int64_t p) { return uniform(0, 99) < p; }
  // Never zero: magnitude in [0.1, 1], random sign (scores of a few units: a spread softmax).
  double value() {
    const double magnitude = std::uniform_real_distribution<double>(0.1, 1.0)(engine_);
    return percent(50) ? magnitude : -magnitude;
  }

 private:
  std::mt19937_64 engine_;
};

// A tensor in its own buffer: named extents, laid out in `layout` with optional padding after each
// axis (so strides are not the contiguous ones). Element (b, s, h, e) by name.
struct Tensor {
  std::vector<double> storage;  // 8-byte aligned bytes for any dtype
  TensorView view;
  NamedAxes axes;

  Tensor(DType dtype, Layout layout, int64_t batch, int64_t seq, int64_t heads, int64_t dim, std::array<int64_t, 3> pad = {}) {
    view.dtype = dtype;
    view.layout = layout;
    // Axis extents in the layout's order, and pads (dim never padded: it is the unit-stride axis).
    std::array<int64_t, 4> shape{};
    switch (layout) {
      case Layout::BSHD: shape = {batch, seq, heads, dim}; break;
      case Layout::BHSD: shape = {batch, heads, seq, dim}; break;
      case Layout::SBHD: shape = {seq, batch, heads, dim}; break;
      case Layout::THD: shape = {seq, heads, dim, 0}; break;
    }
    const int rank = layout_rank(layout);
    int64_t stride = 1;
    for (int axis = rank - 1; axis >= 0; --axis) {
      view.shape[axis] = shape[axis];
      view.stride_elems[axis] = stride;
      const int64_t pad_here = axis < rank - 1 ? pad[static_cast<size_t>(rank - 2 - axis)] : 0;
      stride = stride * std::max<int64_t>(shape[axis], 1) + pad_here * stride;
    }
    const int64_t bytes = stride * dtype_size(dtype);
    storage.assign(static_cast<size_t>(bytes / 8 + 2), 0.0);
    view.data = storage.data();
    axes = named_axes(view);
  }
  int64_t index(int64_t b, int64_t s, int64_t h, int64_t e) const {
    return b * axes.stride_batch + s * axes.stride_seq + h * axes.stride_heads + e * axes.stride_dim;
  }
  double at(int64_t b, int64_t s, int64_t h, int64_t e) const { return load_element(view.data, view.dtype, index(b, s, h, e)); }
  void set(int64_t b, int64_t s, int64_t h, int64_t e, double value) { store_element(view.data, view.dtype, index(b, s, h, e), value); }
  void fill(Rng& rng) {
    for (int64_t b = 0; b < axes.batch; ++b)
      for (int64_t s = 0; s < axes.seq; ++s)
        for (int64_t h = 0; h < axes.heads; ++h)
          for (int64_t e = 0; e < axes.dim; ++e) set(b, s, h, e, rng.value());
  }
  // A float64 copy in the same layout (exact: every storage type widens exactly).
  Tensor widened() const {
    Tensor copy(DType::F64, view.layout, axes.batch, axes.seq, axes.heads, axes.dim);
    for (int64_t b = 0; b < axes.batch; ++b)
      for (int64_t s = 0; s < axes.seq; ++s)
        for (int64_t h = 0; h < axes.heads; ++h)
          for (int64_t e = 0; e < axes.dim; ++e) copy.set(b, s, h, e, at(b, s, h, e));
    return copy;
  }
};

inline Tensor make(DType dtype, Layout layout, int64_t batch, int64_t seq, int64_t heads, int64_t dim) {
  return Tensor(dtype, layout, layout == Layout::THD ? 1 : batch, seq, heads, dim);
}

}  // namespace rotary::test
