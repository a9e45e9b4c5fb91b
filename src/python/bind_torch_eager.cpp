// src/python/bind_torch_eager.cpp: rotary.torch's eager calls (python/rotary/_torch_ops.py,
// apply_rotary; python/rotary/_torch_cos_sin.py, _apply_cos_sin).
//
// A plain eager CPU call of rotary.torch.apply_rotary read straight from the torch tensors, in one
// binding call: the Python side of a decode step shrinks to a few attribute reads (the call's
// preparation in Python cost 4-5x the kernel: the "torch call" run that docs/performance.md links).
// Still no torch C++ API: a tensor is read through its Python attributes (data_ptr(), shape,
// stride(), dtype, is_cpu, requires_grad) with CPython calls, and torch's own functions
// (empty_like, empty, _increment_version, ...) are handed over once, by
// python/rotary/_torch_ops.py, at import.
//
// The contract of the slow path is kept by declining rather than deciding: whatever is not the
// common case (a tensor subclass, a functorch wrapper, another device, positions of another dtype
// or shape, offsets, THD, M-RoPE, gradients to record, arguments of another type) returns None and
// the caller runs the full path, which gives its own errors; so does a call that check_apply_arguments
// refuses, before any byte is written (apply.hpp), so that every error keeps the slow path's words.
//
// This file reads torch tensors itself rather than through tensor_arg (tensor_arg.hpp): that one
// refuses what it cannot take, this one declines it.
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "python/arguments.hpp"
#include "python/bindings.hpp"
#include "rotary/apply.hpp"
#include "rotary/apply_cos_sin.hpp"
#include "rotary/error.hpp"
#include "rotary/table.hpp"
#include "rotary/tensor.hpp"

// Internal (not installed): madvise for transparent huge pages.
#include "core/huge_pages.hpp"
#include "python/fresh_outputs.hpp"

namespace rotary::python {
namespace {

enum TorchName { kDataPtr, kShape, kStride, kDtype, kIsCpu, kRequiresGrad, kNumNames };

struct TorchObjects {
  PyObject* tensor_type = nullptr;   // torch.Tensor
  PyObject* dtypes[4] = {};          // torch.float32, bfloat16, float16, float64 (DType order below)
  PyObject* int64 = nullptr;         // torch.int64
  PyObject* empty_like = nullptr;    // torch.empty_like
  PyObject* empty = nullptr;         // torch.empty (shape, dtype=): non-contiguous q's fresh output
  PyObject* increment_version = nullptr;  // torch._C._increment_version(tuple of tensors)
  PyObject* is_wrapped = nullptr;         // torch._C._functorch.is_functorch_wrapped_tensor
  PyObject* is_grad_enabled = nullptr;    // torch.is_grad_enabled
  PyObject* names[kNumNames] = {};        // interned attribute names (TorchName)
};
constexpr DType kTorchDTypes[4] = {DType::F32, DType::BF16, DType::F16, DType::F64};

TorchObjects* torch_objects = nullptr;  // set once by register_torch; never freed (lives to exit)

// A torch tensor as read: rank <= 4.
struct TorchTensor {
  void* data = nullptr;
  int rank = 0;
  int64_t shape[4] = {};
  int64_t strides[4] = {};
  PyObject* dtype = nullptr;  // borrowed from torch's dtype singletons
  bool requires_grad = false;
};

// Reads a tuple of ints (torch.Size, stride()) into `out`; false if it is not one of <= 4 ints.
bool read_ints(PyObject* tuple, int64_t* out, int& count) {
  if (tuple == nullptr || !PyTuple_Check(tuple)) return false;
  const Py_ssize_t n = PyTuple_GET_SIZE(tuple);
  if (n > 4) return false;
  for (Py_ssize_t i = 0; i < n; ++i) {
    const long long value = PyLong_AsLongLong(PyTuple_GET_ITEM(tuple, i));
    if (value == -1 && PyErr_Occurred()) {
      PyErr_Clear();
      return false;
    }
    out[i] = value;
  }
  count = static_cast<int>(n);
  return true;
}

bool attribute_is_true(PyObject* object, PyObject* name) {
  PyObject* value = PyObject_GetAttr(object, name);
  if (value == nullptr) {
    PyErr_Clear();
    return false;
  }
  const bool result = value == Py_True;
  Py_DECREF(value);
  return result;
}

// A plain CPU torch.Tensor (no subclass, no functorch wrapper) of rank <= 4, or false.
bool read_torch_tensor(PyObject* object, TorchTensor& t) {
  const TorchObjects& o = *torch_objects;
  if (object == nullptr || reinterpret_cast<PyObject*>(Py_TYPE(object)) != o.tensor_type) return false;
  if (!attribute_is_true(object, o.names[kIsCpu])) return false;
  PyObject* wrapped = PyObject_CallOneArg(o.is_wrapped, object);
  if (wrapped == nullptr) {
    PyErr_Clear();
    return false;
  }
  const bool is_wrapped = wrapped != Py_False;
  Py_DECREF(wrapped);
  if (is_wrapped) return false;
  PyObject* dtype = PyObject_GetAttr(object, o.names[kDtype]);
  if (dtype == nullptr) {
    PyErr_Clear();
    return false;
  }
  t.dtype = dtype;  // torch.dtype objects are immortal singletons: the reference is not kept
  Py_DECREF(dtype);
  PyObject* shape = PyObject_GetAttr(object, o.names[kShape]);
  int shape_rank = -1;
  const bool shape_ok = read_ints(shape, t.shape, shape_rank);
  Py_XDECREF(shape);
  PyObject* strides = PyObject_CallMethodNoArgs(object, o.names[kStride]);
  int stride_rank = -1;
  const bool strides_ok = read_ints(strides, t.strides, stride_rank);
  Py_XDECREF(strides);
  if (!shape_ok || !strides_ok || shape_rank != stride_rank) {
    PyErr_Clear();
    return false;
  }
  t.rank = shape_rank;
  PyObject* address = PyObject_CallMethodNoArgs(object, o.names[kDataPtr]);
  if (address == nullptr) {
    PyErr_Clear();
    return false;
  }
  t.data = PyLong_AsVoidPtr(address);
  Py_DECREF(address);
  if (PyErr_Occurred()) {
    PyErr_Clear();
    return false;
  }
  t.requires_grad = attribute_is_true(object, o.names[kRequiresGrad]);
  return true;
}

std::optional<DType> kernel_dtype(PyObject* dtype) {
  for (int i = 0; i < 4; ++i) {
    if (torch_objects->dtypes[i] == dtype) return kTorchDTypes[i];
  }
  return std::nullopt;
}

bool is_contiguous(const TorchTensor& t) {
  int64_t expected = 1;
  for (int axis = t.rank - 1; axis >= 0; --axis) {
    if (t.shape[axis] != 1 && t.strides[axis] != expected) return false;
    expected *= t.shape[axis];
  }
  return true;
}

TensorView torch_view(const TorchTensor& t, DType dtype, Layout layout) {
  TensorView view;
  view.data = t.data;
  view.dtype = dtype;
  view.layout = layout;
  for (int axis = 0; axis < t.rank; ++axis) {
    view.shape[axis] = t.shape[axis];
    view.stride_elems[axis] = t.strides[axis];
  }
  return view;
}

bool same_shape(const TorchTensor& a, const TorchTensor& b) {
  if (a.rank != b.rank) return false;
  for (int axis = 0; axis < a.rank; ++axis) {
    if (a.shape[axis] != b.shape[axis]) return false;
  }
  return true;
}

// A non-negative Python int (not bool), or nullopt.
std::optional<int64_t> plain_count(PyObject* value) {
  if (!PyLong_CheckExact(value)) return std::nullopt;
  const long long number = PyLong_AsLongLong(value);
  if (number == -1 && PyErr_Occurred()) {
    PyErr_Clear();
    return std::nullopt;
  }
  if (number < 0) return std::nullopt;
  return number;
}

// A fresh output of `bytes` bytes, not yet touched: on Linux, asked to be backed by transparent
// huge pages where the system leaves that to madvise (/sys/kernel/mm/transparent_hugepage/enabled
// = madvise, the common default). Its first writes fault in 2 MiB at a time instead of 4 KiB: on
// an AMD EPYC VM a fresh 64 MiB output took 76-80 ms of page faults under load against 12 ms so
// (the "drop-in" run that docs/performance.md links; what torch's own THP_MEM_ALLOC_ENABLE=1
// does for every allocation). Only outputs of several huge pages, and only the whole huge pages
// inside them; advice, so a failure changes nothing.
void advise_output_huge_pages(void* data, int64_t bytes) {
  if (bytes < 4 * static_cast<int64_t>(rotary::detail::kHugePageBytes)) return;
  rotary::detail::advise_huge_pages(data, static_cast<size_t>(bytes));
}

int64_t tensor_bytes(const TorchTensor& t, DType dtype) {
  int64_t count = 1;
  for (int axis = 0; axis < t.rank; ++axis) count *= t.shape[axis];
  return count * dtype_size(dtype);
}

// A fresh output like q: torch.empty_like for a contiguous q (the slow path's torch.empty(q.shape,
// dtype=q.dtype) is the same tensor then, in half the time), torch.empty otherwise.
py::object fresh_like(PyObject* tensor, const TorchTensor& t) {
  const TorchObjects& o = *torch_objects;
  if (is_contiguous(t)) {
    PyObject* fresh = PyObject_CallOneArg(o.empty_like, tensor);
    if (fresh == nullptr) throw py::error_already_set();
    return py::reinterpret_steal<py::object>(fresh);
  }
  py::tuple shape(t.rank);
  for (int axis = 0; axis < t.rank; ++axis) shape[axis] = py::int_(t.shape[axis]);
  py::dict kwargs;
  kwargs[o.names[kDtype]] = py::handle(t.dtype);
  return py::reinterpret_borrow<py::object>(py::handle(o.empty)).operator()(*shape, **kwargs);
}

// The eager call, or None where the full path must run (see the block comment).
py::object torch_apply_eager(py::handle q_obj, py::handle k_obj, py::handle positions_obj, const CosSinTable& table,
                             py::handle layout_obj, py::handle direction_obj, bool inplace, py::handle out_obj,
                             py::handle rotary_offset_obj, py::handle xpos_length_obj, py::handle seq_len_obj) {
  if (torch_objects == nullptr) fail("rotary._rotary.torch_apply_eager: register_torch was not called");
  const py::object none = py::none();
  if (!PyUnicode_CheckExact(layout_obj.ptr()) || !PyUnicode_CheckExact(direction_obj.ptr())) return none;
  const char* layout_name = PyUnicode_AsUTF8(layout_obj.ptr());
  const char* direction_chars = PyUnicode_AsUTF8(direction_obj.ptr());
  if (layout_name == nullptr || direction_chars == nullptr) {
    PyErr_Clear();
    return none;
  }
  // The four names exactly (parse_layout also takes other spellings; the full path refuses them).
  const std::string_view layout_text = layout_name;
  if (layout_text != "bshd" && layout_text != "bhsd" && layout_text != "sbhd") return none;
  const auto layout = parse_layout(layout_text);
  if (!layout) return none;
  const std::string_view direction_name = direction_chars;
  if (direction_name != "forward" && direction_name != "backward") return none;
  const auto rotary_offset = plain_count(rotary_offset_obj.ptr());
  const auto xpos_length = plain_count(xpos_length_obj.ptr());
  const auto seq_len = seq_len_obj.is_none() ? std::optional<int64_t>(kSeqLenFromPositions) : plain_count(seq_len_obj.ptr());
  if (!rotary_offset || !xpos_length || !seq_len) return none;

  TorchTensor q, k, q_out, k_out, pos;
  const bool has_k = !k_obj.is_none();
  if (!read_torch_tensor(q_obj.ptr(), q) || q.rank != 4) return none;
  if (has_k && (!read_torch_tensor(k_obj.ptr(), k) || k.rank != 4)) return none;
  const auto q_dtype = kernel_dtype(q.dtype);
  const auto k_dtype = has_k ? kernel_dtype(k.dtype) : q_dtype;
  if (!q_dtype || !k_dtype) return none;
  PyObject* grad = PyObject_CallNoArgs(torch_objects->is_grad_enabled);
  if (grad == nullptr) throw py::error_already_set();
  const bool grad_enabled = grad == Py_True;
  Py_DECREF(grad);
  // Gradients to record (fresh outputs) go through the op's autograd formula; with out= or in
  // place they are the slow path's error.
  if (grad_enabled && (q.requires_grad || (has_k && k.requires_grad))) return none;

  const bool has_out = !out_obj.is_none();
  if (has_out && inplace) return none;
  py::object q_out_obj, k_out_obj = none;
  if (has_out) {
    if (!PyTuple_CheckExact(out_obj.ptr()) && !PyList_CheckExact(out_obj.ptr())) return none;
    const py::sequence pair = py::reinterpret_borrow<py::sequence>(out_obj);
    if (pair.size() != 2) return none;
    q_out_obj = pair[0];
    k_out_obj = pair[1];
    if (!read_torch_tensor(q_out_obj.ptr(), q_out) || q_out.dtype != q.dtype || !same_shape(q_out, q)) return none;
    if (has_k ? (!read_torch_tensor(k_out_obj.ptr(), k_out) || k_out.dtype != k.dtype || !same_shape(k_out, k))
              : !k_out_obj.is_none()) {
      return none;
    }
  }

  // Positions: int64, contiguous, [batch, seq] or, broadcast over the batch, [1, seq] / [seq]
  // (token_positions in python/rotary/_views.py); single-stream specs only.
  const RopeSpec& spec = table.spec();
  if (position_streams(spec) != 1) return none;
  const NamedAxes axes = named_axes(torch_view(q, *q_dtype, *layout));
  std::vector<int64_t> broadcast;
  Positions positions = Positions::arange();
  if (!positions_obj.is_none()) {
    if (!read_torch_tensor(positions_obj.ptr(), pos) || pos.dtype != torch_objects->int64 || !is_contiguous(pos)) {
      return none;
    }
    const auto* values = static_cast<const int64_t*>(pos.data);
    const bool full = pos.rank == 2 && pos.shape[0] == axes.batch && pos.shape[1] == axes.seq;
    const bool one_row = (pos.rank == 2 && pos.shape[0] == 1 && pos.shape[1] == axes.seq) ||
                         (pos.rank == 1 && pos.shape[0] == axes.seq);
    if (full || (one_row && axes.batch == 1)) {
      positions = Positions::per_token({values, static_cast<size_t>(axes.batch * axes.seq)});
    } else if (one_row) {
      broadcast.resize(static_cast<size_t>(axes.batch * axes.seq));
      for (int64_t b = 0; b < axes.batch; ++b) std::copy(values, values + axes.seq, broadcast.begin() + b * axes.seq);
      positions = Positions::per_token(broadcast);
    } else {
      return none;
    }
  }

  if (!has_out) {
    if (inplace) {
      q_out_obj = py::reinterpret_borrow<py::object>(q_obj);
      k_out_obj = py::reinterpret_borrow<py::object>(k_obj);
      q_out = q;
      k_out = k;
    } else {
      q_out_obj = fresh_like(q_obj.ptr(), q);
      if (!read_torch_tensor(q_out_obj.ptr(), q_out)) return none;
      advise_output_huge_pages(q_out.data, tensor_bytes(q_out, *q_dtype));
      if (has_k) {
        k_out_obj = fresh_like(k_obj.ptr(), k);
        if (!read_torch_tensor(k_out_obj.ptr(), k_out)) return none;
        advise_output_huge_pages(k_out.data, tensor_bytes(k_out, *k_dtype));
      }
    }
  }
  const TensorView vq = torch_view(q, *q_dtype, *layout);
  const TensorView vq_out = torch_view(q_out, *q_dtype, *layout);
  const TensorView vk = has_k ? torch_view(k, *k_dtype, *layout) : TensorView{};
  const TensorView vk_out = has_k ? torch_view(k_out, *k_dtype, *layout) : TensorView{};
  ApplyOptions options;
  options.direction = direction_name == "forward" ? Direction::Forward : Direction::Backward;
  options.rotary_offset = *rotary_offset;
  options.xpos_length = *xpos_length;
  options.seq_len = *seq_len;
  // float64 tensors take the float64 definition, as in the slow path (_run).
  const bool f64 = *q_dtype == DType::F64 || (has_k && *k_dtype == DType::F64);
  // Large fresh outputs are faulted in before the kernel's stores, once the checks have passed
  // (fresh_outputs.hpp).
  const bool prefault = !has_out && !inplace &&
                        tensor_bytes(q_out, *q_dtype) >= 4 * static_cast<int64_t>(rotary::detail::kHugePageBytes);
  try {
    py::gil_scoped_release release;
    if (f64) {
      reference::apply(vq, vk, vq_out, vk_out, positions, table, options);
    } else {
      if (prefault) {
        check_apply_arguments(vq, vk, vq_out, vk_out, positions, table, options);
        const int64_t q_bytes = tensor_bytes(q_out, *q_dtype);
        prefault_fresh_output(vq_out.data, q_bytes, q_bytes / dtype_size(*q_dtype));
        if (has_k) {
          const int64_t k_bytes = tensor_bytes(k_out, *k_dtype);
          prefault_fresh_output(vk_out.data, k_bytes, k_bytes / dtype_size(*k_dtype));
        }
      }
      rotary::apply(vq, vk, vq_out, vk_out, positions, table, options);
    }
  } catch (const Error&) {
    return none;  // refused before a byte was written: the full path says why, in its words
  }
  if (has_out || inplace) {
    // As the mutating op would: autograd then refuses a tensor saved for backward that changed.
    const py::tuple written = has_k ? py::make_tuple(q_out_obj, k_out_obj) : py::make_tuple(q_out_obj);
    PyObject* result = PyObject_CallOneArg(torch_objects->increment_version, written.ptr());
    if (result == nullptr) throw py::error_already_set();
    Py_DECREF(result);
  }
  return py::make_tuple(q_out_obj, k_out_obj);
}

// The Hugging Face drop-in's eager call (python/rotary/_torch_cos_sin.py, _apply_cos_sin): x * cos +
// rotate(x) * sin into a fresh output, for x, cos and sin plain CPU tensors of one dtype (no type
// promotion to do) with nothing to record for autograd; None otherwise and for every error, as
// torch_apply_eager. cos / sin as _cos_sin_view takes them: [batch, seq, r], [seq, r], or already
// unsqueezed with size 1 at unsqueeze_dim.
bool cos_sin_view(const TorchTensor& t, DType dtype, int64_t unsqueeze_dim, TensorView& view) {
  int64_t shape[3], strides[3];
  if (t.rank == 4) {
    if (t.shape[unsqueeze_dim] != 1) return false;
    for (int axis = 0, to = 0; axis < 4; ++axis) {
      if (axis == unsqueeze_dim) continue;
      shape[to] = t.shape[axis];
      strides[to++] = t.strides[axis];
    }
  } else if (t.rank == 3) {
    std::copy(t.shape, t.shape + 3, shape);
    std::copy(t.strides, t.strides + 3, strides);
  } else if (t.rank == 2) {
    shape[0] = 1;
    strides[0] = t.shape[0] * t.strides[0];  // torch's stride of an axis unsqueezed at 0
    std::copy(t.shape, t.shape + 2, shape + 1);
    std::copy(t.strides, t.strides + 2, strides + 1);
  } else {
    return false;
  }
  view.data = t.data;
  view.dtype = dtype;
  view.layout = Layout::BSHD;
  view.shape = {shape[0], shape[1], 1, shape[2]};
  view.stride_elems = {strides[0], strides[1], 0, strides[2]};
  return true;
}

py::object torch_cos_sin_eager(py::handle x_obj, py::handle cos_obj, py::handle sin_obj, const std::string& style,
                               const std::string& direction, const std::string& rounding, int64_t unsqueeze_dim,
                               const std::string& name) {
  if (torch_objects == nullptr) fail("rotary._rotary.torch_cos_sin_eager: register_torch was not called");
  const py::object none = py::none();
  if ((style != "neox" && style != "gptj") || (direction != "forward" && direction != "backward")) return none;
  const Style parsed_style = style == "neox" ? Style::NeoX : Style::GPTJ;
  if ((rounding != "like_torch" && rounding != "once") || (unsqueeze_dim != 1 && unsqueeze_dim != 2)) return none;
  TorchTensor x, cos, sin;
  if (!read_torch_tensor(x_obj.ptr(), x) || !read_torch_tensor(cos_obj.ptr(), cos) ||
      !read_torch_tensor(sin_obj.ptr(), sin)) {
    return none;
  }
  const auto dtype = kernel_dtype(x.dtype);
  if (!dtype || x.rank != 4 || cos.dtype != x.dtype || sin.dtype != x.dtype) return none;
  PyObject* grad = PyObject_CallNoArgs(torch_objects->is_grad_enabled);
  if (grad == nullptr) throw py::error_already_set();
  const bool grad_enabled = grad == Py_True;
  Py_DECREF(grad);
  if (grad_enabled && (x.requires_grad || cos.requires_grad || sin.requires_grad)) return none;
  const Layout layout = unsqueeze_dim == 1 ? Layout::BHSD : Layout::BSHD;
  TensorView vcos, vsin;
  if (!cos_sin_view(cos, *dtype, unsqueeze_dim, vcos) || !cos_sin_view(sin, *dtype, unsqueeze_dim, vsin)) return none;
  py::object out_obj = fresh_like(x_obj.ptr(), x);
  TorchTensor out;
  if (!read_torch_tensor(out_obj.ptr(), out)) return none;
  advise_output_huge_pages(out.data, tensor_bytes(out, *dtype));
  const TensorView vx = torch_view(x, *dtype, layout), vout = torch_view(out, *dtype, layout);
  const CosSinOptions options{.style = parsed_style,
                              .direction = direction == "forward" ? Direction::Forward : Direction::Backward,
                              .rounding = rounding == "like_torch" ? Rounding::LikeTorch : Rounding::Once,
                              .name = name.c_str()};
  try {
    py::gil_scoped_release release;
    apply_cos_sin(vx, vout, vcos, vsin, options);
  } catch (const Error&) {
    return none;  // refused before a byte was written: the full path says why, in its words
  }
  return out_obj;
}

void register_torch(py::handle tensor_type, py::tuple dtypes, py::handle int64, py::handle empty_like, py::handle empty,
                    py::handle increment_version, py::handle is_wrapped, py::handle is_grad_enabled) {
  if (dtypes.size() != 4) fail("register_torch: dtypes must be (float32, bfloat16, float16, float64)");
  auto* o = new TorchObjects;  // kept to the end of the process, as torch's own objects are
  const auto keep = [](py::handle h) {
    h.inc_ref();
    return h.ptr();
  };
  o->tensor_type = keep(tensor_type);
  for (size_t i = 0; i < 4; ++i) o->dtypes[i] = keep(dtypes[i]);
  o->int64 = keep(int64);
  o->empty_like = keep(empty_like);
  o->empty = keep(empty);
  o->increment_version = keep(increment_version);
  o->is_wrapped = keep(is_wrapped);
  o->is_grad_enabled = keep(is_grad_enabled);
  const char* names[kNumNames] = {"data_ptr", "shape", "stride", "dtype", "is_cpu", "requires_grad"};
  for (int i = 0; i < kNumNames; ++i) o->names[i] = PyUnicode_InternFromString(names[i]);
  torch_objects = o;
}

}  // namespace

void bind_torch_eager(py::module_& m) {
  m.def("register_torch", &register_torch);
  m.def("torch_apply_eager", &torch_apply_eager, py::arg("q"), py::arg("k"), py::arg("positions"), py::arg("table"),
        py::arg("layout"), py::arg("direction"), py::arg("inplace"), py::arg("out"), py::arg("rotary_offset"),
        py::arg("xpos_length"), py::arg("seq_len"));
  m.def("torch_cos_sin_eager", &torch_cos_sin_eager, py::arg("x"), py::arg("cos"), py::arg("sin"), py::arg("style"),
        py::arg("direction"), py::arg("rounding"), py::arg("unsqueeze_dim"), py::arg("name"));
}

}  // namespace rotary::python
