// src/python/bind_runtime.cpp: the thread pool and the CPU target of the kernels (apply.hpp),
// shared by apply and attention.
#include <pybind11/stl.h>

#include <string>

#include "python/bindings.hpp"
#include "rotary/apply.hpp"

namespace rotary::python {

void bind_runtime(py::module_& m) {
  m.def("set_num_threads", &set_num_threads);
  m.def("num_threads", &num_threads);
  m.def("cpu_targets", &cpu_targets);
  m.def("force_cpu_target", [](const std::string& name) { force_cpu_target(name); });
  m.def("current_cpu_target", &current_cpu_target);
}

}  // namespace rotary::python
