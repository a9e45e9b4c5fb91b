// src/cpu/backends.hpp: the device seam: which implementation runs a checked call.
//
// The public entry points (apply, apply_cos_sin, attention) run the device-neutral argument
// checks, which read shapes, strides, dtypes and devices but never tensor data, then hand the
// checked call to the backend registered for q's device (the checks made every view of the call
// share it). A backend is a plain struct of function pointers in an explicit array: no
// registration at static-initialization time, so what a build can run is readable here and in
// the attention table (src/attention/backends.hpp). This build registers the CPU backend alone;
// the CUDA path is the Python package's (python/rotary/_backends.py, docs/backends.md).
//
// Two tables, one per library: rotary_cpu (apply, apply_cos_sin) links without rotary_attention,
// so the rotation backends cannot point at attention code; rotary_attention keeps its own table
// of the same shape. backend_for() is the one lookup both use.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <string_view>

#include "rotary/apply.hpp"
#include "rotary/apply_cos_sin.hpp"
#include "rotary/error.hpp"
#include "rotary/tensor.hpp"

namespace rotary::backends {

// "<function>: q is on cuda:0; this build has no backend for cuda (...)".
[[noreturn]] inline void throw_no_backend(std::string_view function, std::string_view argument, const Device& device) {
  throw Error(detail::concat(function, ": ", argument, " is on ", to_string(device), "; this build has no backend for ",
                             to_string(device.kind), " (the GPU path is in the Python package: rotary.torch)"));
}

// The backend for `device` in `table`, or rotary::Error naming the argument and its device. The
// tables hold one entry per device kind; the loop is one compare for the CPU (first entry).
template <typename Backend, std::size_t N>
const Backend& backend_for(const std::array<Backend, N>& table, const Device& device, std::string_view function,
                           std::string_view argument) {
  for (const Backend& backend : table) {
    if (backend.kind == device.kind) return backend;
  }
  throw_no_backend(function, argument, device);
}

// Empty when the build can name `device` (kind CPU or CUDA, index >= 0, and 0 for the CPU: one cpu,
// as PyTorch has, or two cpu views would "differ" in a message spelling both "cpu"); else what is
// wrong, for the checks' "<name> device <problem>".
inline std::string device_problem(const Device& device) {
  if (device.kind != DeviceKind::CPU && device.kind != DeviceKind::CUDA) {
    return detail::concat("kind must be cpu or cuda (got enum value ", static_cast<int>(device.kind), ")");
  }
  if (device.kind == DeviceKind::CPU && device.index != 0) {
    return detail::concat("index must be 0 for the cpu (got ", device.index, ")");
  }
  if (device.index < 0) return detail::concat("index must be >= 0 (got ", device.index, ")");
  return {};
}

// The float64 references read every element on the host: a view on another device is refused
// before any read (the checks alone do not read data, so they passed it).
inline void require_cpu(const Device& device, std::string_view function, std::string_view argument) {
  if (device.kind == DeviceKind::CPU) return;
  throw Error(detail::concat(function, ": ", argument, " is on ", to_string(device),
                             "; the float64 reference reads host memory and runs on the cpu only"));
}

// Rotation backends. Each function receives a call its checks accepted (check_apply_arguments,
// check_cos_sin_arguments) with every view on the backend's device kind.
struct RotateBackend {
  const char* name = "";
  DeviceKind kind = DeviceKind::CPU;
  void (*apply)(const TensorView& q, const TensorView& k, const TensorView& q_out, const TensorView& k_out,
                const Positions& positions, const CosSinTable& table, const ApplyOptions& options) = nullptr;
  void (*apply_cos_sin)(const TensorView& x, const TensorView& out, const TensorView& cos, const TensorView& sin,
                        const CosSinOptions& options) = nullptr;
};

// Defined in src/cpu/apply.cpp: { "cpu", CPU, the Highway kernels }.
const std::array<RotateBackend, 1>& rotate_backends();

}  // namespace rotary::backends

namespace rotary::cpu {

// The CPU backend's entry points: checked calls only (src/cpu/apply.cpp, apply_cos_sin.cpp).
void apply_checked(const TensorView& q, const TensorView& k, const TensorView& q_out, const TensorView& k_out,
                   const Positions& positions, const CosSinTable& table, const ApplyOptions& options);
void apply_cos_sin_checked(const TensorView& x, const TensorView& out, const TensorView& cos, const TensorView& sin,
                           const CosSinOptions& options);

}  // namespace rotary::cpu
