// src/python/bindings.hpp: the bind_X functions that fill rotary._rotary, one per concept.
//
// module.cpp calls them in this order. The order matters: pybind11 writes a function's
// signature into its docstring when the function is defined, naming an argument's class by its
// Python name only if that class is bound by then (RopeSpec, CosSinTable), so the classes come
// before the functions that take them.
#pragma once

#include <pybind11/pybind11.h>
// Every file of the module converts with the same casters: a file without stl.h would compile a
// cast to std::vector and fail it at run time (and pybind11 needs one set of casters per type
// across the module).
#include <pybind11/stl.h>

namespace rotary::python {

namespace py = pybind11;

void bind_errors(py::module_& m);       // errors.cpp: rotary::Error as rotary.RotaryError
void bind_spec(py::module_& m);         // bind_spec.cpp: RopeSpec, presets, Hugging Face configs
void bind_table(py::module_& m);        // bind_table.cpp: CosSinTable, RopeCache
void bind_kv_cache(py::module_& m);     // bind_kv_cache.cpp: KvCache
void bind_attention(py::module_& m);    // bind_attention.cpp: attention, ALiBi, sinusoidal, scale
void bind_apply(py::module_& m);        // bind_apply.cpp: apply, apply_cos_sin
void bind_torch_eager(py::module_& m);  // bind_torch_eager.cpp: rotary.torch's one-call eager paths
void bind_runtime(py::module_& m);      // bind_runtime.cpp: threads and CPU targets
void bind_analysis(py::module_& m);     // bind_analysis.cpp: rotary.viz, rotary.check, diagnose, report
void bind_interop(py::module_& m);      // bind_interop.cpp: engine export, checkpoint conversion

}  // namespace rotary::python
