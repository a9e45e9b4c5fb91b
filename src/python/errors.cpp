// src/python/errors.cpp: rotary::Error becomes rotary.RotaryError, a ValueError, with the C++
// message unchanged (a bad argument is a bad value to Python code, and the message already
// names the argument and the value).
#include "rotary/error.hpp"
#include "python/bindings.hpp"

namespace rotary::python {

void bind_errors(py::module_& m) {
  static py::exception<Error> rotary_error(m, "RotaryError", PyExc_ValueError);
  py::register_exception_translator([](std::exception_ptr pointer) {
    try {
      if (pointer) std::rethrow_exception(pointer);
    } catch (const Error& error) {
      py::set_error(rotary_error, error.what());
    }
  });
}

}  // namespace rotary::python
