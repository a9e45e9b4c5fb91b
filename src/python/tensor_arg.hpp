// src/python/tensor_arg.hpp: the one place a tensor or buffer described by the Python side
// becomes a C++ view.
//
// Tensors cross as plain descriptors that python/rotary/_views.py (NumPy's
// __array_interface__) and the torch glue (data_ptr(), stride()) build: zero-copy, and no build
// dependency on NumPy's or PyTorch's C/C++ API, so the extension works with any torch version.
// The caller keeps the memory alive for the call; the library's argument checks
// (check_apply_arguments, check_attention_arguments) then see the real shapes and strides.
//
//   tensor:  (address, dtype, layout, shape, strides[, device]), or None for an absent tensor;
//            dtype and layout by name (parse_dtype, parse_layout), shape and strides in elements
//            in the layout's axis order; device as torch spells it ("cpu", "cuda:0"), default cpu
//            (docs/backends.md).
//   buffer:  (address, count, ...) of contiguous int64 or float32 values, or None.
//
// Three entries read memory otherwise: CosSinTable.rows writes to output addresses and diagnose
// reads float64 / int64 addresses, each given as separate ints by their signatures; and
// bind_torch_eager.cpp reads torch tensors' own attributes (it declines rather than refuses).
#pragma once

#include <pybind11/pybind11.h>
// Every file of the module converts with the same casters: a file without stl.h would compile a
// cast to std::vector and fail it at run time (and pybind11 needs one set of casters per type
// across the module).
#include <pybind11/stl.h>

#include <cstdint>
#include <span>

#include "rotary/tensor.hpp"

namespace rotary::python {

namespace py = pybind11;

// The view a tensor descriptor describes (an empty TensorView for None). A descriptor of another
// field count, an unknown dtype or layout, or a shape or strides of the wrong rank for the layout
// is a rotary::Error naming `name` or the value.
TensorView tensor_arg(const py::handle& descriptor, const char* name);

// The int64 values of an (address, count) buffer; empty (null data) for None.
std::span<const int64_t> int64s_arg(const py::handle& descriptor);

// The float32 values of an (address, count, ...) buffer; empty (null data) for None.
std::span<const float> float32s_arg(const py::handle& descriptor);

}  // namespace rotary::python
