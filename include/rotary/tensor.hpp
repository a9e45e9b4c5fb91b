// include/rotary/tensor.hpp: non-owning tensor views, storage types and layouts.
//
// A TensorView borrows memory: the caller keeps it alive. Shapes and strides are in elements
// (not bytes), in the axis order the layout names. Kernels never read the layout themselves:
// named_axes() turns a view into batch / seq / heads / dim extents and strides.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace rotary {

// Storage types. Math is float32 in the fast kernels and float64 in the reference; F64 storage
// exists for the reference and for gradient checks.
enum class DType { F32, BF16, F16, F64 };

int64_t dtype_size(DType dtype);           // bytes per element
std::string_view to_string(DType dtype);   // "float32", "bfloat16", "float16", "float64"
std::optional<DType> parse_dtype(std::string_view name);  // also "f32", "bf16", "f16", "f64"

// Axis orders. B = batch, S = sequence, H = heads, D = head dim, T = packed tokens.
//   BSHD  (batch, seq, heads, dim)   Hugging Face after transpose, flash-attn, TE "bshd"
//   BHSD  (batch, heads, seq, dim)   Hugging Face's attention layout
//   SBHD  (seq, batch, heads, dim)   Megatron / TE "sbhd"
//   THD   (tokens, heads, dim)       packed variable-length batch; sequences given by cu_seqlens
enum class Layout { BSHD, BHSD, SBHD, THD };

std::string_view to_string(Layout layout);  // "bshd", "bhsd", "sbhd", "thd"
std::optional<Layout> parse_layout(std::string_view name);
int layout_rank(Layout layout);  // 4, or 3 for THD

// Where a view's memory lives. The argument checks read only shapes, strides and dtypes, so they
// hold for any device; apply() and attention() then hand the call to the backend registered for
// the device (docs/backends.md). This build has a backend for CPU only: the CUDA path is the
// Python package's (rotary.torch), which runs the same checks on views that name CUDA.
enum class DeviceKind { CPU, CUDA };

struct Device {
  DeviceKind kind = DeviceKind::CPU;
  int index = 0;  // which device of the kind (cuda:1); 0 for the CPU
  friend bool operator==(const Device&, const Device&) = default;
};

std::string_view to_string(DeviceKind kind);  // "cpu", "cuda"
std::string to_string(Device device);          // "cpu", "cuda:0" (PyTorch's spelling)

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::F32;
  Layout layout = Layout::BSHD;
  std::array<int64_t, 4> shape{};         // in the layout's axis order; THD uses the first 3
  std::array<int64_t, 4> stride_elems{};  // idem; may be any value >= 0 on input axes
  Device device{};                        // last, so that aggregate initializers stay valid
};

// A C-contiguous view of `shape` (in the layout's order).
TensorView contiguous_view(void* data, DType dtype, Layout layout, std::array<int64_t, 4> shape);

// The axes by name. THD: batch = 1 and seq = tokens.
struct NamedAxes {
  int64_t batch = 0, seq = 0, heads = 0, dim = 0;
  int64_t stride_batch = 0, stride_seq = 0, stride_heads = 0, stride_dim = 0;
};
NamedAxes named_axes(const TensorView& view);

// Number of elements; throws rotary::Error naming `what` when a dimension is negative or the
// product overflows int64.
int64_t element_count(const TensorView& view, std::string_view what);

// bfloat16 / float16 conversions (scalar, exact): widening is exact; narrowing rounds to nearest
// even, keeps NaN a NaN (quiet) and the sign of zero, and overflows to infinity.
float bf16_to_float(uint16_t bits);
uint16_t float_to_bf16(float value);
float f16_to_float(uint16_t bits);
uint16_t float_to_f16(float value);
// The same narrowing in one step from a double (double -> float -> bf16 would round twice).
uint16_t double_to_bf16(double value);
uint16_t double_to_f16(double value);

}  // namespace rotary
