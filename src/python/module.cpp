// src/python/module.cpp: rotary._rotary, the compiled half of the Python package.
//
// A thin layer: every function forwards to the C++ library and converts arguments; the Python
// package (python/rotary) builds the user-facing API on top. One file per concept binds it
// (bindings.hpp); tensors cross as descriptors read in one place (tensor_arg.hpp), and the GIL
// is released while the kernels run.
#include <pybind11/pybind11.h>

#include "python/bindings.hpp"

PYBIND11_MODULE(_rotary, m) {
  using namespace rotary::python;
  m.doc() = "rotary's compiled core (use the rotary package, not this module)";
  m.attr("__version__") = ROTARY_VERSION;
  bind_errors(m);
  bind_spec(m);
  bind_table(m);
  bind_kv_cache(m);
  bind_attention(m);
  bind_apply(m);
  bind_torch_eager(m);
  bind_runtime(m);
  bind_analysis(m);
  bind_interop(m);
}
