// src/core/tensor.cpp: dtype and layout names, axis naming, element counts, and the scalar
// bf16 / f16 conversions every storage path shares.
//
// The conversions are portable integer code (no F16C, no _Float16): results must not depend on
// the CPU or compiler, and Highway 1.0.3's DemoteTo truncates (docs/numerics.md), so the kernels
// and the reference both round through these definitions.
#include "rotary/tensor.hpp"

#include <cstring>

#include <bit>
#include <sstream>

#include "rotary/error.hpp"
#include "core/shape_text.hpp"

namespace rotary {

int64_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::F32: return 4;
    case DType::BF16: return 2;
    case DType::F16: return 2;
    case DType::F64: return 8;
  }
  return 0;
}

std::string_view to_string(DType dtype) {
  switch (dtype) {
    case DType::F32: return "float32";
    case DType::BF16: return "bfloat16";
    case DType::F16: return "float16";
    case DType::F64: return "float64";
  }
  return "unknown";
}

// The spellings of PyTorch ("float32", "bfloat16", "half"), NumPy / ml_dtypes and the short
// forms users type on the command line ("f32", "bf16", "fp16").
std::optional<DType> parse_dtype(std::string_view name) {
  if (name == "float32" || name == "f32" || name == "fp32") return DType::F32;
  if (name == "bfloat16" || name == "bf16") return DType::BF16;
  if (name == "float16" || name == "f16" || name == "fp16" || name == "half") return DType::F16;
  if (name == "float64" || name == "f64") return DType::F64;
  return std::nullopt;
}

std::string_view to_string(Layout layout) {
  switch (layout) {
    case Layout::BSHD: return "bshd";
    case Layout::BHSD: return "bhsd";
    case Layout::SBHD: return "sbhd";
    case Layout::THD: return "thd";
  }
  return "unknown";
}

std::optional<Layout> parse_layout(std::string_view name) {
  if (name == "bshd") return Layout::BSHD;
  if (name == "bhsd") return Layout::BHSD;
  if (name == "sbhd") return Layout::SBHD;
  if (name == "thd") return Layout::THD;
  return std::nullopt;
}

int layout_rank(Layout layout) { return layout == Layout::THD ? 3 : 4; }

std::string_view to_string(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::CPU: return "cpu";
    case DeviceKind::CUDA: return "cuda";
  }
  return "unknown";
}

// PyTorch's spelling (str(torch.device)): the CPU has no index, a GPU always has one.
std::string to_string(Device device) {
  if (device.kind == DeviceKind::CPU) return "cpu";
  return std::string(to_string(device.kind)) + ":" + std::to_string(device.index);
}

// Strides are suffix products. They are computed in unsigned (wrapping) arithmetic so that an
// absurd shape gives meaningless strides rather than undefined behaviour; element_count() is
// the check that rejects such shapes, at the entry point that receives them.
TensorView contiguous_view(void* data, DType dtype, Layout layout, std::array<int64_t, 4> shape) {
  TensorView view;
  view.data = data;
  view.dtype = dtype;
  view.layout = layout;
  const int rank = layout_rank(layout);
  // THD has three axes; the unused fourth is a unit axis so that code iterating four entries
  // sees neither a zero extent nor a zero stride.
  if (rank == 3) shape[3] = 1;
  view.shape = shape;
  uint64_t stride = 1;
  view.stride_elems[3] = 1;
  for (int axis = rank - 1; axis >= 0; --axis) {
    view.stride_elems[axis] = static_cast<int64_t>(stride);
    stride *= static_cast<uint64_t>(shape[axis]);
  }
  return view;
}

NamedAxes named_axes(const TensorView& view) {
  const auto& n = view.shape;
  const auto& s = view.stride_elems;
  NamedAxes axes;
  switch (view.layout) {
    case Layout::BSHD:
      axes = {n[0], n[1], n[2], n[3], s[0], s[1], s[2], s[3]};
      break;
    case Layout::BHSD:
      axes = {n[0], n[2], n[1], n[3], s[0], s[2], s[1], s[3]};
      break;
    case Layout::SBHD:
      axes = {n[1], n[0], n[2], n[3], s[1], s[0], s[2], s[3]};
      break;
    case Layout::THD:
      // One "sequence" of all tokens; cu_seqlens splits it. stride_batch is never stepped.
      axes = {1, n[0], n[1], n[2], 0, s[0], s[1], s[2]};
      break;
  }
  return axes;
}

namespace {

}  // namespace

int64_t element_count(const TensorView& view, std::string_view what) {
  const int rank = layout_rank(view.layout);
  // Negative extents first: they are the more likely mistake and make "overflow" meaningless.
  for (int axis = 0; axis < rank; ++axis) {
    if (view.shape[axis] < 0) {
      throw Error(detail::concat("tensor ", what, ": shape[", axis, "] must be >= 0 (got ", view.shape[axis], ")"));
    }
  }
  // An empty tensor is valid whatever its other extents: its product is 0, not an overflow.
  for (int axis = 0; axis < rank; ++axis) {
    if (view.shape[axis] == 0) return 0;
  }
  int64_t count = 1;
  for (int axis = 0; axis < rank; ++axis) {
    if (__builtin_mul_overflow(count, view.shape[axis], &count)) {
      throw Error(detail::concat("tensor ", what, ": element count must fit in int64 (got shape ", shape_text(view),
                                 ")"));
    }
  }
  return count;
}

// bfloat16 is the top half of a float32, so widening is a shift.
float bf16_to_float(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

// Round to nearest even on the 16 dropped bits: adding 0x7FFF plus the lowest kept bit carries
// into the kept half exactly when the dropped half is above one half, or equal to it with an
// odd kept half. A carry out of the mantissa steps the exponent, so the largest finite values
// round up to infinity as IEEE requires. NaN must be caught first: the addition could carry a
// NaN with a small payload into infinity (or clear it); setting the quiet bit keeps it a NaN.
uint16_t float_to_bf16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  const uint32_t rounding = 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

// binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits. Every binary16 value, subnormals
// included, is a float32 with the mantissa shifted up 13 bits, so widening is exact.
float f16_to_float(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1Fu;
  const uint32_t mantissa = bits & 0x3FFu;
  if (exponent == 0x1F) return std::bit_cast<float>(sign | 0x7F800000u | (mantissa << 13));  // inf, NaN payload kept
  if (exponent == 0) {
    // Subnormal or zero: mantissa * 2^-24, exact in float32 (mantissa < 2^10).
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(magnitude));
  }
  return std::bit_cast<float>(sign | ((exponent + (127 - 15)) << 23) | (mantissa << 13));
}

uint16_t float_to_f16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const auto sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7FFFFFFFu;
  if (magnitude > 0x7F800000u) {
    // NaN: keep the top payload bits and set the quiet bit, which also keeps it from becoming
    // infinity when the surviving payload bits are all zero.
    return static_cast<uint16_t>(sign | 0x7E00u | ((magnitude >> 13) & 0x3FFu));
  }
  // 65520 = 65504 (the largest binary16, odd mantissa) plus half an ulp: ties go to the even
  // neighbour 65536, which is out of range. So everything from 65520 up, infinity included,
  // rounds to infinity.
  if (magnitude >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);
  if (magnitude >= 0x38800000u) {
    // Normal (>= 2^-14): round the 13 dropped bits to nearest even as in float_to_bf16, then
    // rebias the exponent from 127 to 15. A mantissa carry steps the exponent, as it should.
    const uint32_t rounded = magnitude + 0xFFFu + ((magnitude >> 13) & 1u);
    return static_cast<uint16_t>(sign | ((rounded >> 13) - ((127u - 15u) << 10)));
  }
  // Below 2^-14 the result is a subnormal m * 2^-24 (or 2^-14 itself after rounding up).
  // 2^-25 is the tie between 0 and 2^-24, and goes to the even one, 0.
  if (magnitude <= 0x33000000u) return sign;
  // magnitude = m * 2^(e - 150) with the implicit bit in m, so in units of 2^-24 it is
  // m >> (126 - e); the shift is 14..24 here. Round the shifted-out bits to nearest even.
  const uint32_t exponent = magnitude >> 23;
  const uint32_t mantissa = (magnitude & 0x7FFFFFu) | 0x800000u;
  const uint32_t shift = 126u - exponent;
  uint32_t units = mantissa >> shift;
  const uint32_t rest = mantissa & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  if (rest > half || (rest == half && (units & 1u))) ++units;
  return static_cast<uint16_t>(sign | units);
}

namespace {

// Rounds a double to nearest even in a binary format with `mantissa_bits` stored mantissa bits
// and `exponent_bits` exponent bits (bf16: 7, 8; binary16: 10, 5), in one step from the double.
// NaN stays a quiet NaN with the sign kept, infinities stay infinite, overflow gives infinity,
// and the sign of zero is kept.
//
// Method: |v| = m * 2^q exactly (m < 2^53 from the double's bits). The target's unit in the last
// place at |v| is 2^u, u = max(e, emin) - mantissa_bits (e = floor(log2 |v|); below emin the
// unit stays that of the subnormals). k = round_to_nearest_even(m / 2^(u - q)) counts those
// units, and ((max(e, emin) + bias - 1) << mantissa_bits) + k is the target's bit pattern: k
// includes the implicit bit, which carries into the exponent field, and a rounding carry that
// doubles k steps the exponent correctly; for subnormals the exponent term is 0 and k is the
// pattern. Anything at or past the infinity pattern is infinity.
uint16_t narrow_from_double(double value, int mantissa_bits, int exponent_bits) {
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  const auto sign = static_cast<uint16_t>((bits >> 63) << (mantissa_bits + exponent_bits));
  const auto infinity = static_cast<uint16_t>(((1u << exponent_bits) - 1u) << mantissa_bits);
  const uint64_t exponent_field = (bits >> 52) & 0x7FFu;
  const uint64_t mantissa_field = bits & ((uint64_t{1} << 52) - 1u);
  if (exponent_field == 0x7FFu) {
    if (mantissa_field == 0) return static_cast<uint16_t>(sign | infinity);
    // NaN: the top payload bits, with the quiet bit set so that it cannot become infinity.
    const auto payload = static_cast<uint16_t>(mantissa_field >> (52 - mantissa_bits));
    return static_cast<uint16_t>(sign | infinity | payload | (1u << (mantissa_bits - 1)));
  }
  // Zero and double subnormals (< 2^-1022): far below half the smallest bf16 / f16 subnormal.
  if (exponent_field == 0) return sign;

  const int bias = (1 << (exponent_bits - 1)) - 1;
  const int emin = 1 - bias;
  const int e = static_cast<int>(exponent_field) - 1023;  // |v| in [2^e, 2^(e+1))
  const uint64_t m = mantissa_field | (uint64_t{1} << 52);  // |v| = m * 2^(e - 52)
  const int e_target = e > emin ? e : emin;
  const int shift = (e_target - mantissa_bits) - (e - 52);  // >= 52 - mantissa_bits > 0
  // m < 2^53, so shift >= 54 means |v| < 2^(u - 1): below half a unit, rounds to zero.
  if (shift >= 54) return sign;
  uint64_t k = m >> shift;
  const uint64_t rest = m & ((uint64_t{1} << shift) - 1u);
  const uint64_t half = uint64_t{1} << (shift - 1);
  if (rest > half || (rest == half && (k & 1u) != 0)) ++k;
  // e_target + bias - 1 >= 0; large exponents only make the pattern larger than infinity's.
  const uint64_t pattern = (static_cast<uint64_t>(e_target + bias - 1) << mantissa_bits) + k;
  if (pattern >= infinity) return static_cast<uint16_t>(sign | infinity);
  return static_cast<uint16_t>(sign | pattern);
}

}  // namespace

uint16_t double_to_bf16(double value) { return narrow_from_double(value, 7, 8); }
uint16_t double_to_f16(double value) { return narrow_from_double(value, 10, 5); }

}  // namespace rotary
