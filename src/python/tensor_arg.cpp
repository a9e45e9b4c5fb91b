// src/python/tensor_arg.cpp: see tensor_arg.hpp.
#include "python/tensor_arg.hpp"

#include <string>
#include <vector>

#include "python/arguments.hpp"

namespace rotary::python {

namespace {

// torch's str(tensor.device) for the devices the library knows: "cpu", "cuda", "cuda:N".
Device device_arg(const std::string& text, const char* name) {
  if (text == "cpu") return Device{};
  if (text.rfind("cuda", 0) == 0) {
    if (text.size() == 4) return Device{DeviceKind::CUDA, 0};
    const std::string index = text.substr(5);
    const bool digits = text[4] == ':' && !index.empty() && index.size() <= 9 &&
                        index.find_first_not_of("0123456789") == std::string::npos;
    if (digits) return Device{DeviceKind::CUDA, std::stoi(index)};
  }
  fail(std::string(name) + " device must be cpu, cuda or cuda:<index> (got " + text + ")");
}

}  // namespace

TensorView tensor_arg(const py::handle& descriptor, const char* name) {
  if (descriptor.is_none()) return TensorView{};
  const auto items = descriptor.cast<py::tuple>();
  if (items.size() != 5 && items.size() != 6) fail(std::string(name) + ": internal descriptor must have 5 or 6 fields");
  TensorView view;
  if (items.size() == 6) view.device = device_arg(items[5].cast<std::string>(), name);
  view.data = reinterpret_cast<void*>(items[0].cast<uintptr_t>());
  const auto dtype_name = items[1].cast<std::string>();
  const auto dtype = parse_dtype(dtype_name);
  if (!dtype) fail(std::string(name) + " dtype must be float32, bfloat16, float16 or float64 (got " + dtype_name + ")");
  view.dtype = *dtype;
  const auto layout_name = items[2].cast<std::string>();
  const auto layout = parse_layout(layout_name);
  if (!layout) fail(std::string("layout must be bshd, bhsd, sbhd or thd (got ") + layout_name + ")");
  view.layout = *layout;
  const auto shape = items[3].cast<std::vector<int64_t>>();
  const auto strides = items[4].cast<std::vector<int64_t>>();
  const auto rank = static_cast<size_t>(layout_rank(view.layout));
  if (shape.size() != rank || strides.size() != rank) {
    fail(std::string(name) + " must have " + std::to_string(rank) + " dimensions for layout " + layout_name + " (got " +
         std::to_string(shape.size()) + ")");
  }
  for (size_t axis = 0; axis < rank; ++axis) {
    view.shape[axis] = shape[axis];
    view.stride_elems[axis] = strides[axis];
  }
  return view;
}

std::span<const int64_t> int64s_arg(const py::handle& descriptor) {
  if (descriptor.is_none()) return {};
  const auto items = descriptor.cast<py::tuple>();
  return {reinterpret_cast<const int64_t*>(items[0].cast<uintptr_t>()), static_cast<size_t>(items[1].cast<int64_t>())};
}

std::span<const float> float32s_arg(const py::handle& descriptor) {
  if (descriptor.is_none()) return {};
  const auto items = descriptor.cast<py::tuple>();
  return {reinterpret_cast<const float*>(items[0].cast<uintptr_t>()), items[1].cast<size_t>()};
}

}  // namespace rotary::python
