// src/python/module.cpp: rotary._rotary, the compiled half of the Python package.
//
// A thin layer: every function here forwards to the C++ library and converts arguments; the
// Python package (python/rotary) builds the user-facing API on top. Tensors cross as plain
// descriptors (address, dtype, layout, shape, strides in elements) that the Python side reads
// from NumPy's __array_interface__ or from torch's data_ptr()/stride(): zero-copy, and no build
// dependency on NumPy's or PyTorch's C/C++ API (the extension works with any torch version).
// The caller keeps the memory alive for the call; the C++ checks (check_apply_arguments) see
// the real shapes and strides, and the GIL is released while the kernels run.
//
// rotary::Error becomes rotary.RotaryError, a ValueError, with the C++ message unchanged.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#if defined(__linux__)
#endif

#include "rotary/analysis.hpp"
#include "rotary/apply.hpp"
#include "rotary/apply_cos_sin.hpp"
#include "rotary/convert.hpp"
#include "rotary/attention.hpp"
#include "rotary/encodings.hpp"
#include "rotary/diagnose.hpp"
#include "rotary/engine_export.hpp"
#include "rotary/error.hpp"
#include "rotary/frequencies.hpp"
#include "rotary/hf_config.hpp"
#include "rotary/kv_cache.hpp"
#include "rotary/presets.hpp"
#include "rotary/report.hpp"
#include "rotary/table.hpp"

// Internal (not installed): madvise for transparent huge pages.
#include "core/huge_pages.hpp"

namespace py = pybind11;
using namespace rotary;

namespace {

[[noreturn]] void fail(const std::string& message) { throw Error(message); }

// A tensor descriptor from Python: (address, dtype, layout, shape, strides), shape and strides
// in elements, in the layout's axis order.
TensorView to_view(const py::handle& descriptor, const char* name) {
  if (descriptor.is_none()) return TensorView{};
  const auto items = descriptor.cast<py::tuple>();
  if (items.size() != 5) fail(std::string(name) + ": internal descriptor must have 5 fields");
  TensorView view;
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

// An int64 buffer from Python: (address, count) or None.
std::pair<const int64_t*, int64_t> to_ints(const py::handle& descriptor) {
  if (descriptor.is_none()) return {nullptr, 0};
  const auto items = descriptor.cast<py::tuple>();
  return {reinterpret_cast<const int64_t*>(items[0].cast<uintptr_t>()), items[1].cast<int64_t>()};
}

Direction parse_direction(const std::string& name) {
  if (name == "forward") return Direction::Forward;
  if (name == "backward") return Direction::Backward;
  fail("direction must be 'forward' or 'backward' (got '" + name + "')");
}

Precision parse_precision_or_fail(const std::string& name) {
  const auto precision = parse_precision(name);
  if (!precision) fail("precision must be 'exact', 'hf', 'ggml' or 'vllm' (got '" + name + "')");
  return *precision;
}

// "kernels" (the fast path), "reference" (the float64 definition), or "checks" (only the
// argument checks: the pure-torch paths check the same way, then torch computes).
void check_implementation(const std::string& name) {
  if (name != "kernels" && name != "reference" && name != "checks") {
    fail("implementation must be 'kernels', 'reference' or 'checks' (got '" + name + "')");
  }
}

Style parse_style_or_fail(const std::string& name) {
  const auto style = parse_style(name);
  if (!style) fail("style must be 'neox' or 'gptj' (got '" + name + "')");
  return *style;
}

py::bytes floats_bytes(const std::vector<double>& values) {
  return py::bytes(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(double));
}

py::dict frequencies_dict(const Frequencies& freqs) {
  py::dict out;
  out["inv_freq"] = floats_bytes(freqs.inv_freq);
  out["attention_scaling"] = freqs.attention_scaling;
  out["attention_scaling_source"] = freqs.attention_scaling_source;
  out["effective_theta_base"] = freqs.effective_theta_base;
  out["effective_factor"] = freqs.effective_factor;
  out["seq_len"] = freqs.seq_len;
  out["longrope_factor_set"] = std::string(to_string(freqs.longrope_factor_set));
  std::vector<double> wavelength, factor, blend;
  std::vector<std::string> regime;
  for (const auto& pair : freqs.pairs) {
    wavelength.push_back(pair.wavelength_tokens);
    factor.push_back(pair.factor_applied);
    blend.push_back(pair.blend);
    regime.emplace_back(to_string(pair.regime));
  }
  out["wavelength_tokens"] = floats_bytes(wavelength);
  out["factor_applied"] = floats_bytes(factor);
  out["blend"] = floats_bytes(blend);
  out["regime"] = regime;
  return out;
}

py::list curve(const std::vector<analysis::CurvePoint>& points) {
  py::list out;
  for (const auto& point : points) out.append(py::make_tuple(point.distance_tokens, point.value));
  return out;
}

py::dict hf_config_dict(const HfRopeConfig& config) {
  py::dict out;
  out["spec"] = config.spec;
  py::list layers;
  for (const auto& [name, spec] : config.layer_type_specs) layers.append(py::make_tuple(name, spec));
  out["layer_type_specs"] = layers;
  out["layer_types"] = config.layer_types;
  out["warnings"] = config.warnings;
  out["model_type"] = config.model_type;
  return out;
}

// Checkpoint conversion between pairing conventions (include/rotary/convert.hpp), for
// rotary.convert_weights (python/rotary/_convert.py). The config arrives as JSON text (a file's
// contents or a dict json.dumps'ed by the Python side) with the name messages give it.
void bind_convert_weights(py::module_& m) {
  m.def("convert_weights", [](const std::string& in_path, const std::string& out_path, const std::string& config_text,
                              const std::string& config_source, const std::string& to,
                              const std::vector<std::string>& q_modules, const std::vector<std::string>& k_modules,
                              bool dry_run) {
    ConvertOptions options;
    // The pairing names every rotary function takes (parse_style: neox, gptj and their aliases).
    if (const std::optional<Style> style = parse_style(to)) {
      options.to = *style;
    } else {
      fail("convert_weights: to must be \"interleaved\" (or \"gptj\") or \"half-split\" (or \"neox\") (got \"" + to + "\")");
    }
    options.q_modules = q_modules;
    options.k_modules = k_modules;
    options.dry_run = dry_run;
    const CheckpointGeometry geometry = checkpoint_geometry(config_text, config_source);
    CheckpointConversion conversion;  // a .safetensors file, a model folder or a sharded checkpoint
    {
      py::gil_scoped_release release;
      conversion = convert_checkpoint(in_path, out_path, geometry, options);
    }
    const ConvertResult& result = conversion.total;
    py::list permuted;
    for (const PermutedTensor& t : result.permuted) {
      py::dict row;
      row["name"] = t.name;
      row["role"] = t.role;
      row["dtype"] = t.dtype;
      row["shape"] = t.shape;
      row["heads"] = t.heads;
      row["head_rows"] = t.head_rows;
      row["offset"] = t.offset;
      row["rotary_rows"] = t.rotary_rows;
      permuted.append(row);
    }
    py::dict out;
    out["permuted"] = permuted;
    out["copied"] = result.copied;
    out["file_bytes"] = result.file_bytes;
    py::list files;
    for (const ShardConversion& shard : conversion.shards) files.append(shard.name);
    out["files"] = files;  // a folder's converted .safetensors files; empty for a file
    out["copied_files"] = conversion.copied_files;
    out["left_out"] = conversion.left_out;
    py::dict shape;
    shape["num_attention_heads"] = geometry.num_attention_heads;
    shape["num_key_value_heads"] = geometry.num_key_value_heads;
    shape["head_dim"] = geometry.head_dim;
    shape["rotary_dim"] = geometry.rotary_dim;
    shape["rotary_offset"] = geometry.rotary_offset;
    shape["kv_lora_rank"] = geometry.kv_lora_rank;
    shape["config_pairing"] = geometry.config_pairing == Style::GPTJ ? "interleaved" : "half-split";
    out["geometry"] = shape;
    return out;
  }, py::arg("in_path"), py::arg("out_path"), py::arg("config_text"), py::arg("config_source"), py::arg("to"),
     py::arg("q_modules"), py::arg("k_modules"), py::arg("dry_run"));
}

// ---- rotary.torch's eager call (python/rotary/_torch_ops.py, apply_rotary) ---------------------------
// A plain eager CPU call of rotary.torch.apply_rotary read straight from the torch tensors, in one
// binding call: the Python side of a decode step shrinks to a few attribute reads (issue 21: the
// call's preparation in Python cost 4-5x the kernel). Still no torch C++ API: a tensor is read
// through its Python attributes (data_ptr(), shape, stride(), dtype, is_cpu, requires_grad) with
// CPython calls, and torch's own functions (empty_like, empty, _increment_version, ...) are
// handed over once, by python/rotary/_torch_ops.py, at import.
//
// The contract of the slow path is kept by declining rather than deciding: whatever is not the
// common case (a tensor subclass, a functorch wrapper, another device, positions of another dtype
// or shape, offsets, THD, M-RoPE, gradients to record, arguments of another type) returns None and
// the caller runs the full path, which gives its own errors; so does a call that check_apply_arguments
// refuses, before any byte is written (apply.hpp), so that every error keeps the slow path's words.
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
// the AMD EPYC VM of 2026-11-25 a fresh 64 MiB output took 76-80 ms of page faults under load
// against 12 ms so (what torch's own THP_MEM_ALLOC_ENABLE=1 does for every allocation). Only
// outputs of several huge pages, and only the whole huge pages inside them; advice, so a failure
// changes nothing.
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
  try {
    py::gil_scoped_release release;
    if (f64) {
      reference::apply(vq, vk, vq_out, vk_out, positions, table, options);
    } else {
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

// The Hugging Face drop-in's eager call (python/rotary/_torch_hf.py, _apply_cos_sin): x * cos +
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

PYBIND11_MODULE(_rotary, m) {
  m.doc() = "rotary's compiled core (use the rotary package, not this module)";
  m.attr("__version__") = ROTARY_VERSION;
  static py::exception<Error> rotary_error(m, "RotaryError", PyExc_ValueError);
  py::register_exception_translator([](std::exception_ptr pointer) {
    try {
      if (pointer) std::rethrow_exception(pointer);
    } catch (const Error& error) {
      py::set_error(rotary_error, error.what());
    }
  });

  // ---- specs ------------------------------------------------------------------------------------
  py::class_<RopeSpec>(m, "RopeSpec")
      .def(py::init<>())
      .def(py::init<const RopeSpec&>())
      .def_readwrite("name", &RopeSpec::name)
      .def_readwrite("head_dim", &RopeSpec::head_dim)
      .def_readwrite("rotary_dim", &RopeSpec::rotary_dim)
      .def_readwrite("partial_rotary_factor", &RopeSpec::partial_rotary_factor)
      .def_readwrite("theta_base", &RopeSpec::theta_base)
      .def_readwrite("max_position_embeddings", &RopeSpec::max_position_embeddings)
      .def_readwrite("num_attention_heads", &RopeSpec::num_attention_heads)
      .def_readwrite("num_key_value_heads", &RopeSpec::num_key_value_heads)
      .def_readwrite("hidden_size", &RopeSpec::hidden_size)
      .def_property(
          "style", [](const RopeSpec& spec) { return std::string(to_string(spec.style)); },
          [](RopeSpec& spec, const std::string& name) { spec.style = parse_style_or_fail(name); })
      .def_property_readonly("rope_type", [](const RopeSpec& spec) { return std::string(to_string(spec.scaling.type)); })
      .def_property_readonly("factor", [](const RopeSpec& spec) { return spec.scaling.factor; })
      .def_property_readonly("original_max_position_embeddings",
                             [](const RopeSpec& spec) { return spec.scaling.original_max_position_embeddings; })
      .def_property_readonly("axes", [](const RopeSpec& spec) { return std::string(to_string(spec.axes)); })
      .def_property_readonly("mrope_section", [](const RopeSpec& spec) { return spec.mrope.pairs; })
      .def_property_readonly("xpos_scale_base",
                             [](const RopeSpec& spec) -> std::optional<double> {
                               if (!spec.xpos) return std::nullopt;
                               return spec.xpos->scale_base;
                             })
      .def_property_readonly("short_factor", [](const RopeSpec& spec) { return spec.scaling.short_factor; })
      .def_property_readonly("long_factor", [](const RopeSpec& spec) { return spec.scaling.long_factor; })
      .def_property_readonly("low_freq_factor", [](const RopeSpec& spec) { return spec.scaling.low_freq_factor; })
      .def_property_readonly("high_freq_factor", [](const RopeSpec& spec) { return spec.scaling.high_freq_factor; })
      .def("yarn_correction_range",
           [](const RopeSpec& spec) {
             const auto range = yarn_correction_range(spec);
             return py::make_tuple(range.low, range.high);
           })
      .def_property_readonly("num_pairs", &RopeSpec::num_pairs)
      .def_property_readonly("original_context", &RopeSpec::original_context)
      .def("validate", [](const RopeSpec& spec) { validate(spec); })
      .def("frequencies", [](const RopeSpec& spec, int64_t seq_len) { return frequencies_dict(frequencies(spec, seq_len)); },
           py::arg("seq_len") = 0)
      .def("pair_streams", [](const RopeSpec& spec) { return pair_streams(spec); })
      .def("position_streams", [](const RopeSpec& spec) { return position_streams(spec); })
      .def("frequency_seq_len", [](const RopeSpec& spec, int64_t seq_len) { return frequency_seq_len(spec, seq_len); })
      .def_property_readonly("sequence_dependent", [](const RopeSpec& spec) { return sequence_dependent(spec); })
      .def_property_readonly("default_trained_context",
                             [](const RopeSpec& spec) { return analysis::default_trained_context(spec); })
      .def_property_readonly("default_target_context",
                             [](const RopeSpec& spec) { return analysis::default_target_context(spec); })
      // pickle and copy.deepcopy: every field, enums by name (to_string / its inverse), the layout
      // named by its first element; a state of another layout or an unknown name is a RotaryError.
      .def(py::pickle(
          [](const RopeSpec& spec) {
            const Scaling& s = spec.scaling;
            const py::tuple scaling = py::make_tuple(
                std::string(to_string(s.type)), s.factor, s.original_max_position_embeddings, s.beta_fast, s.beta_slow,
                s.truncate, s.mscale, s.mscale_all_dim, s.attention_factor, s.short_factor, s.long_factor,
                s.low_freq_factor, s.high_freq_factor, s.ntk_alpha);
            const std::optional<double> xpos = spec.xpos ? std::optional<double>(spec.xpos->scale_base) : std::nullopt;
            return py::make_tuple("RopeSpec/1", spec.name, spec.head_dim, spec.rotary_dim, spec.partial_rotary_factor,
                                  spec.theta_base, std::string(to_string(spec.style)), scaling,
                                  spec.max_position_embeddings, xpos, std::string(to_string(spec.axes)),
                                  spec.mrope.pairs, std::string(to_string(spec.mrope.assignment)),
                                  spec.num_attention_heads, spec.num_key_value_heads, spec.hidden_size);
          },
          [](const py::tuple& state) {
            if (state.size() != 16 || !py::isinstance<py::str>(state[0]) || state[0].cast<std::string>() != "RopeSpec/1") {
              fail("RopeSpec: cannot unpickle this state (expected 16 fields starting with 'RopeSpec/1', got " +
                   std::to_string(state.size()) + " fields)");
            }
            // The enum whose name is `name`, among `values`.
            const auto named = [](const auto& values, const std::string& name, const char* field) {
              for (const auto value : values) {
                if (to_string(value) == name) return value;
              }
              fail(std::string("RopeSpec: cannot unpickle ") + field + " '" + name + "'");
            };
            RopeSpec spec;
            spec.name = state[1].cast<std::string>();
            spec.head_dim = state[2].cast<int64_t>();
            spec.rotary_dim = state[3].cast<int64_t>();
            spec.partial_rotary_factor = state[4].cast<double>();
            spec.theta_base = state[5].cast<double>();
            spec.style = named(std::array{Style::NeoX, Style::GPTJ}, state[6].cast<std::string>(), "style");
            const auto scaling = state[7].cast<py::tuple>();
            if (scaling.size() != 14) fail("RopeSpec: cannot unpickle scaling (expected 14 fields)");
            Scaling& s = spec.scaling;
            s.type = named(std::array{ScalingType::Default, ScalingType::Linear, ScalingType::Dynamic,
                                      ScalingType::NtkAlpha, ScalingType::Yarn, ScalingType::LongRope,
                                      ScalingType::Llama3, ScalingType::Proportional},
                           scaling[0].cast<std::string>(), "rope_type");
            s.factor = scaling[1].cast<std::optional<double>>();
            s.original_max_position_embeddings = scaling[2].cast<int64_t>();
            s.beta_fast = scaling[3].cast<double>();
            s.beta_slow = scaling[4].cast<double>();
            s.truncate = scaling[5].cast<bool>();
            s.mscale = scaling[6].cast<std::optional<double>>();
            s.mscale_all_dim = scaling[7].cast<std::optional<double>>();
            s.attention_factor = scaling[8].cast<std::optional<double>>();
            s.short_factor = scaling[9].cast<std::vector<double>>();
            s.long_factor = scaling[10].cast<std::vector<double>>();
            s.low_freq_factor = scaling[11].cast<double>();
            s.high_freq_factor = scaling[12].cast<double>();
            s.ntk_alpha = scaling[13].cast<double>();
            spec.max_position_embeddings = state[8].cast<int64_t>();
            if (const auto xpos = state[9].cast<std::optional<double>>()) spec.xpos = XPos{*xpos};
            spec.axes = named(std::array{PositionAxes::Single, PositionAxes::MRope, PositionAxes::Vision2D},
                              state[10].cast<std::string>(), "axes");
            spec.mrope.pairs = state[11].cast<std::array<int64_t, 3>>();
            spec.mrope.assignment = named(std::array{MRopeAssignment::Chunked, MRopeAssignment::Interleaved},
                                          state[12].cast<std::string>(), "mrope assignment");
            spec.num_attention_heads = state[13].cast<int64_t>();
            spec.num_key_value_heads = state[14].cast<int64_t>();
            spec.hidden_size = state[15].cast<int64_t>();
            return spec;
          }));

  m.def("parse_hf_config", [](const std::string& text, const std::string& source) {
    return hf_config_dict(parse_hf_config(text, source));
  });
  m.def("load_hf_config", [](const std::string& path) { return hf_config_dict(load_hf_config(path)); });
  m.def("preset", [](const std::string& name) { return hf_config_dict(preset(name)); });
  m.def("preset_config_json", [](const std::string& name) { return std::string(preset_config_json(name)); });
  m.def("list_presets", [] {
    py::list out;
    for (const auto& info : list_presets()) out.append(py::make_tuple(info.name, info.summary, info.source));
    return out;
  });
  m.attr("default_preset") = std::string(kDefaultPreset);

  // ---- tables -----------------------------------------------------------------------------------
  py::class_<CosSinTable, std::shared_ptr<CosSinTable>>(m, "CosSinTable")
      .def(py::init([](const RopeSpec& spec, const std::string& precision, const std::string& storage, int64_t seq_len,
                       int64_t fixed_positions, std::vector<float> hf_inv_freq, int64_t max_bytes,
                       const std::string& cache_dtype) {
             TableOptions options;
             options.precision = parse_precision_or_fail(precision);
             const auto dtype = parse_dtype(cache_dtype);
             if (!dtype) fail("cache_dtype must be float32, bfloat16 or float16 (got '" + cache_dtype + "')");
             options.cache_dtype = *dtype;
             if (storage == "stored") {
               options.storage = Storage::Stored;
             } else if (storage == "on_the_fly") {
               options.storage = Storage::OnTheFly;
             } else {
               fail("storage must be 'stored' or 'on_the_fly' (got '" + storage + "')");
             }
             options.seq_len = seq_len;
             options.fixed_positions = fixed_positions;
             options.hf_inv_freq = std::move(hf_inv_freq);
             options.max_bytes = max_bytes;
             return std::make_shared<CosSinTable>(spec, std::move(options));
           }),
           py::arg("spec"), py::arg("precision"), py::arg("storage"), py::arg("seq_len"), py::arg("fixed_positions"),
           py::arg("hf_inv_freq"), py::arg("max_bytes"), py::arg("cache_dtype") = "float32")
      .def_property_readonly("spec", &CosSinTable::spec)
      .def_property_readonly("precision", [](const CosSinTable& t) { return std::string(to_string(t.precision())); })
      .def_property_readonly("storage",
                             [](const CosSinTable& t) { return t.storage() == Storage::Stored ? "stored" : "on_the_fly"; })
      .def_property_readonly("num_pairs", &CosSinTable::num_pairs)
      .def_property_readonly("attention_scaling", &CosSinTable::attention_scaling)
      .def_property_readonly("inv_freq", [](const CosSinTable& t) { return floats_bytes(t.inv_freq()); })
      .def_property_readonly("inv_freq_f32", &CosSinTable::inv_freq_f32)
      .def_property_readonly("size", &CosSinTable::size)
      .def_property_readonly("max_position", &CosSinTable::max_position)
      .def_property_readonly("seq_len", &CosSinTable::seq_len)
      .def_property_readonly("stored_bytes", &CosSinTable::stored_bytes)
      .def("reserve_positions", &CosSinTable::reserve_positions, py::call_guard<py::gil_scoped_release>())
      // Rows for `count` positions at `positions` into float32 (cos, sin) buffers of count x
      // num_pairs each (pair order, attention_scaling included), or float64 for exact64.
      // seq_len: the seq_len the caller's frequencies are for, -1 for the largest position + 1
      // (Hugging Face's rule); the table must serve it, as in apply().
      .def("rows", [](const CosSinTable& t, const py::tuple& positions, uintptr_t cos_out, uintptr_t sin_out, bool f64,
                      int64_t seq_len) {
        const auto [data, count] = to_ints(positions);
        int64_t largest = -1;
        for (int64_t n = 0; n < count; ++n) {  // all checked before any is written
          if (data[n] < 0 || data[n] > t.max_position()) {
            fail("positions[" + std::to_string(n) + "] must be in [0, " + std::to_string(t.max_position()) + "] (got " +
                 std::to_string(data[n]) + ")");
          }
          largest = std::max(largest, data[n]);
        }
        if (seq_len < -1) fail("seq_len must be >= 0, or None for the largest position + 1 (got " + std::to_string(seq_len) + ")");
        const bool named = seq_len >= 0;
        if (!named) seq_len = largest + 1;
        if (!t.serves_seq_len(seq_len)) {
          fail(std::string(named ? "seq_len " : "the positions' seq_len (largest position + 1) ") + std::to_string(seq_len) +
               " needs " + std::string(to_string(t.spec().scaling.type)) +
               " frequencies other than the table's (got a table built for seq_len " + std::to_string(t.seq_len()) +
               "): use a table built for seq_len " + std::to_string(seq_len) + (named ? "" : ", or name seq_len"));
        }
        py::gil_scoped_release release;
        const int64_t pairs = t.num_pairs();
        for (int64_t n = 0; n < count; ++n) {
          if (f64) {
            t.row_f64(data[n], reinterpret_cast<double*>(cos_out) + n * pairs, reinterpret_cast<double*>(sin_out) + n * pairs);
          } else {
            t.row(data[n], reinterpret_cast<float*>(cos_out) + n * pairs, reinterpret_cast<float*>(sin_out) + n * pairs);
          }
        }
      });

  // Hugging Face's dynamic-NTK and LongRoPE switching (RopeCache, table.hpp).
  py::class_<RopeCache, std::shared_ptr<RopeCache>>(m, "RopeCache")
      .def(py::init([](const RopeSpec& spec, const std::string& precision) {
        TableOptions options;
        options.precision = parse_precision_or_fail(precision);
        return std::make_shared<RopeCache>(spec, options);
      }))
      .def("table_for",
           [](RopeCache& cache, int64_t max_position) {
             return std::const_pointer_cast<CosSinTable>(cache.table_for(max_position));
           })
      .def_property_readonly("max_seq_len_cached", &RopeCache::max_seq_len_cached);

  // ---- KV cache (kv_cache.hpp) ---------------------------------------------------------------------
  // Holds the table alive (keep_alive); keys / values cross as bytes (a copy) that the Python
  // side reshapes.
  py::class_<KvCache>(m, "KvCache")
      .def(py::init([](const CosSinTable& table, int64_t batch, int64_t kv_heads, int64_t head_dim, int64_t v_head_dim,
                       int64_t capacity, const std::string& dtype_name, int64_t rotary_offset) {
             const auto dtype = parse_dtype(dtype_name);
             if (!dtype) fail("KvCache: dtype must be float32, bfloat16 or float16 (got " + dtype_name + ")");
             return std::make_unique<KvCache>(table, KvCacheShape{.batch = batch, .kv_heads = kv_heads, .head_dim = head_dim,
                                                                  .v_head_dim = v_head_dim, .capacity = capacity,
                                                                  .dtype = *dtype, .rotary_offset = rotary_offset});
           }),
           py::arg("table"), py::arg("batch"), py::arg("kv_heads"), py::arg("head_dim"), py::arg("v_head_dim"),
           py::arg("capacity"), py::arg("dtype"), py::arg("rotary_offset"), py::keep_alive<1, 2>())
      .def("append",
           [](KvCache& cache, const py::handle& k, const py::handle& v, const py::handle& positions) {
             const TensorView vk = to_view(k, "k"), vv = to_view(v, "v");
             const auto [data, count] = to_ints(positions);
             py::gil_scoped_release release;
             cache.append(vk, vv, {data, static_cast<size_t>(count)});
           })
      .def("attend",
           [](const KvCache& cache, const py::handle& q, const py::handle& out, std::optional<double> scale, bool causal,
              int64_t window) {
             const TensorView vq = to_view(q, "q"), vout = to_view(out, "out");
             KvAttendOptions options;
             options.scale = scale;
             options.mask = causal ? Mask::Causal : Mask::None;
             options.window = window;
             py::gil_scoped_release release;
             cache.attend(vq, vout, options);
           })
      .def("shift", [](KvCache& cache, int64_t n_keep, int64_t n_discard) { cache.shift(n_keep, n_discard); })
      .def("shift_sequence",
           [](KvCache& cache, int64_t sequence, int64_t n_keep, int64_t n_discard) { cache.shift(sequence, n_keep, n_discard); })
      .def("clear", &KvCache::clear)
      .def("length", &KvCache::length)
      .def("last_position", &KvCache::last_position)
      .def("position", &KvCache::position)
      .def("keys_bytes",
           [](const KvCache& cache) {
             const TensorView view = cache.keys();
             return py::bytes(static_cast<const char*>(view.data),
                              static_cast<size_t>(element_count(view, "keys") * dtype_size(view.dtype)));
           })
      .def("values_bytes", [](const KvCache& cache) {
        const TensorView view = cache.values();
        return py::bytes(static_cast<const char*>(view.data),
                         static_cast<size_t>(element_count(view, "values") * dtype_size(view.dtype)));
      });

  // ---- attention (attention.hpp): rotary.attention and rotary.torch.attention ---------------------
  // Tensors cross as descriptors (no copy); the int64 arrays (offsets, lengths, cu_seqlens,
  // positions) as (address, count) buffers the caller keeps alive. table None = no fused RoPE.
  // implementation: "kernels" (rotary::attention), "reference" (the float64 definition) or
  // "checks" (check_attention_arguments only). Every value is checked in C++.
  m.def(
      "attention",
      [](const py::handle& q, const py::handle& k, const py::handle& v, const py::handle& out,
         std::optional<double> scale, bool causal, int64_t query_offset, const py::handle& query_offsets, int64_t window,
         const py::handle& kv_lengths, const py::handle& cu_seqlens_q, const py::handle& cu_seqlens_k,
         const CosSinTable* table, const py::handle& q_positions, const py::handle& k_positions, int64_t rotary_offset,
         int64_t seq_len, const std::string& implementation, const py::handle& alibi_slopes,
         const py::handle& absolute, const py::handle& kv_starts) {
        check_implementation(implementation);
        const TensorView vq = to_view(q, "q"), vk = to_view(k, "k"), vv = to_view(v, "v"), vout = to_view(out, "out");
        const auto span_of = [](const py::handle& handle) {
          const auto [data, count] = to_ints(handle);
          return std::span<const int64_t>(data, static_cast<size_t>(count));
        };
        AttentionOptions options;
        options.scale = scale;
        options.mask = causal ? Mask::Causal : Mask::None;
        options.query_offset = query_offset;
        options.query_offsets = span_of(query_offsets);
        options.window = window;
        options.kv_lengths = span_of(kv_lengths);
        options.kv_starts = span_of(kv_starts);
        options.cu_seqlens_q = span_of(cu_seqlens_q);
        options.cu_seqlens_k = span_of(cu_seqlens_k);
        AttentionRope rope;
        rope.table = table;
        rope.q_positions = span_of(q_positions);
        rope.k_positions = span_of(k_positions);
        rope.rotary_offset = rotary_offset;
        rope.seq_len = seq_len;
        // ALiBi: (address, count) of float32 slopes. Absolute: (address, count, rows, dim) of a
        // float32 table; it reads the same per-token positions as fused RoPE (the C++ check
        // refuses the two together, and ALiBi with either).
        if (!alibi_slopes.is_none()) {
          const auto items = alibi_slopes.cast<py::tuple>();
          options.alibi_slopes = std::span<const float>(reinterpret_cast<const float*>(items[0].cast<uintptr_t>()),
                                                        items[1].cast<size_t>());
        }
        AttentionAbsolute absolute_table;
        if (!absolute.is_none()) {
          const auto items = absolute.cast<py::tuple>();
          absolute_table.table = std::span<const float>(reinterpret_cast<const float*>(items[0].cast<uintptr_t>()),
                                                        items[1].cast<size_t>());
          absolute_table.rows = items[2].cast<int64_t>();
          absolute_table.dim = items[3].cast<int64_t>();
          absolute_table.q_positions = rope.q_positions;
          absolute_table.k_positions = rope.k_positions;
          options.absolute = &absolute_table;
        }
        const bool fused = table != nullptr;
        py::gil_scoped_release release;
        if (implementation == "checks") {
          check_attention_arguments(vq, vk, vv, vout, options, fused ? &rope : nullptr);
        } else if (implementation == "reference") {
          if (fused) {
            reference::attention(vq, vk, vv, vout, rope, options);
          } else {
            reference::attention(vq, vk, vv, vout, options);
          }
        } else if (fused) {
          rotary::attention(vq, vk, vv, vout, rope, options);
        } else {
          rotary::attention(vq, vk, vv, vout, options);
        }
      },
      py::arg("q"), py::arg("k"), py::arg("v"), py::arg("out"), py::arg("scale").none(true), py::arg("causal"),
      py::arg("query_offset"), py::arg("query_offsets").none(true), py::arg("window"), py::arg("kv_lengths").none(true),
      py::arg("cu_seqlens_q").none(true), py::arg("cu_seqlens_k").none(true), py::arg("table").none(true),
      py::arg("q_positions").none(true), py::arg("k_positions").none(true), py::arg("rotary_offset"),
      py::arg("seq_len"), py::arg("implementation"), py::arg("alibi_slopes") = py::none(),
      py::arg("absolute") = py::none(), py::arg("kv_starts") = py::none());
  // encodings.hpp, the one definition: ALiBi's slopes (float64 bytes) and the sinusoidal table
  // (float32 bytes, row-major [rows][d_model]).
  m.def("alibi_slopes", [](int64_t num_heads) { return floats_bytes(alibi_slopes(num_heads)); }, py::arg("num_heads"));
  m.def(
      "sinusoidal_table",
      [](int64_t rows, int64_t d_model, double base) {
        const std::vector<float> values = sinusoidal_table(rows, d_model, base);
        return py::bytes(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
      },
      py::arg("rows"), py::arg("d_model"), py::arg("base") = 10000.0);
  m.def("attention_scale", [](const RopeSpec& spec, int64_t qk_head_dim) { return attention_scale(spec, qk_head_dim); },
        py::arg("spec"), py::arg("qk_head_dim"));
  // ---- end attention ------------------------------------------------------------------------------

  // ---- apply ------------------------------------------------------------------------------------
  m.def(
      "apply",
      [](const py::handle& q, const py::handle& k, const py::handle& q_out, const py::handle& k_out,
         const py::handle& per_token, const py::handle& offsets, const py::handle& cu_seqlens, const CosSinTable& table,
         const std::string& direction, int64_t rotary_offset, int64_t xpos_length, int64_t seq_len,
         const std::string& implementation) {
        check_implementation(implementation);
        const TensorView vq = to_view(q, "q"), vk = to_view(k, "k");
        const TensorView vq_out = to_view(q_out, "q_out"), vk_out = to_view(k_out, "k_out");
        // Python takes positions and offsets as two keywords; C++ takes one source, so giving
        // both is this binding's error (in the contract's words).
        const auto [cu_data, cu_count] = to_ints(cu_seqlens);
        const std::span<const int64_t> cu(cu_data, static_cast<size_t>(cu_count));
        const auto [per_token_data, per_token_count] = to_ints(per_token);
        const auto [offset_data, num_offsets] = to_ints(offsets);
        if (!per_token.is_none() && !offsets.is_none()) {
          fail("apply: positions must come from one source, per-token positions or sequence offsets (got both: " +
               std::to_string(per_token_count) + " positions, " + std::to_string(num_offsets) + " offsets)");
        }
        Positions positions = Positions::arange(cu);
        if (!per_token.is_none()) {
          positions = Positions::per_token({per_token_data, static_cast<size_t>(per_token_count)}, cu);
        } else if (!offsets.is_none()) {
          positions = Positions::sequence_offsets({offset_data, static_cast<size_t>(num_offsets)}, cu);
        }
        ApplyOptions options;
        options.direction = parse_direction(direction);
        options.rotary_offset = rotary_offset;
        options.xpos_length = xpos_length;
        options.seq_len = seq_len;
        py::gil_scoped_release release;
        if (implementation == "checks") {
          check_apply_arguments(vq, vk, vq_out, vk_out, positions, table, options);
        } else if (implementation == "reference") {
          reference::apply(vq, vk, vq_out, vk_out, positions, table, options);
        } else {
          rotary::apply(vq, vk, vq_out, vk_out, positions, table, options);
        }
      },
      py::arg("q"), py::arg("k"), py::arg("q_out"), py::arg("k_out"), py::arg("per_token"), py::arg("offsets"),
      py::arg("cu_seqlens"), py::arg("table"), py::arg("direction"), py::arg("rotary_offset"), py::arg("xpos_length"),
      py::arg("seq_len"), py::arg("implementation"));

  m.def(
      "apply_cos_sin",
      [](const py::handle& x, const py::handle& out, const py::handle& cos, const py::handle& sin,
         const std::string& style, const std::string& direction, const std::string& rounding, const std::string& name) {
        const TensorView vx = to_view(x, name.c_str()), vout = to_view(out, (name + "_out").c_str());
        const TensorView vcos = to_view(cos, "cos"), vsin = to_view(sin, "sin");
        Rounding mode = Rounding::Once;
        if (rounding == "like_torch") {
          mode = Rounding::LikeTorch;
        } else if (rounding != "once") {
          fail("rounding must be 'once' or 'like_torch' (got '" + rounding + "')");
        }
        const Style parsed_style = parse_style_or_fail(style);
        const Direction parsed_direction = parse_direction(direction);
        py::gil_scoped_release release;
        apply_cos_sin(vx, vout, vcos, vsin,
                      {.style = parsed_style, .direction = parsed_direction, .rounding = mode, .name = name.c_str()});
      },
      py::arg("x"), py::arg("out"), py::arg("cos"), py::arg("sin"), py::arg("style"), py::arg("direction"),
      py::arg("rounding"), py::arg("name"));

  // ---- rotary.torch's eager call (torch_apply_eager above) -------------------------------------------
  m.def("register_torch", &register_torch);
  m.def("torch_apply_eager", &torch_apply_eager, py::arg("q"), py::arg("k"), py::arg("positions"), py::arg("table"),
        py::arg("layout"), py::arg("direction"), py::arg("inplace"), py::arg("out"), py::arg("rotary_offset"),
        py::arg("xpos_length"), py::arg("seq_len"));
  m.def("torch_cos_sin_eager", &torch_cos_sin_eager, py::arg("x"), py::arg("cos"), py::arg("sin"), py::arg("style"),
        py::arg("direction"), py::arg("rounding"), py::arg("unsqueeze_dim"), py::arg("name"));

  m.def("set_num_threads", &set_num_threads);
  m.def("num_threads", &num_threads);
  m.def("cpu_targets", &cpu_targets);
  m.def("force_cpu_target", [](const std::string& name) { force_cpu_target(name); });
  m.def("current_cpu_target", &current_cpu_target);

  // ---- analysis (rotary.viz, rotary.check) ------------------------------------------------------
  m.def("long_term_decay", [](const RopeSpec& spec, int64_t max_distance, int64_t samples) {
    const auto decay = analysis::long_term_decay(spec, max_distance, samples);
    py::dict out;
    out["bound"] = curve(decay.bound);
    out["score_identical_ones"] = curve(decay.score_identical_ones);
    out["score_identical_random"] = curve(decay.score_identical_random);
    out["score_independent_random"] = curve(decay.score_independent_random);
    out["bound_at_zero"] = decay.bound_at_zero;
    out["decay_ratio"] = decay.decay_ratio;
    return out;
  });
  m.def("extrapolation", [](const RopeSpec& spec, int64_t trained, int64_t target) {
    const auto result = analysis::extrapolation(spec, trained, target);
    py::dict out;
    std::vector<double> trained_angle, target_angle, overshoot;
    std::vector<bool> ood;
    for (const auto& pair : result.pairs) {
      trained_angle.push_back(pair.max_angle_trained_rad);
      target_angle.push_back(pair.max_angle_target_rad);
      overshoot.push_back(pair.overshoot);
      ood.push_back(pair.out_of_distribution);
    }
    out["max_angle_trained_rad"] = trained_angle;
    out["max_angle_target_rad"] = target_angle;
    out["overshoot"] = overshoot;
    out["out_of_distribution"] = ood;
    out["num_out_of_distribution"] = result.num_out_of_distribution;
    out["trained_context"] = result.trained_context;
    out["target_context"] = result.target_context;
    return out;
  });
  m.def("scheme_scaling", [](const RopeSpec& spec, int64_t seq_len) {
    const auto scaling = analysis::scheme_scaling(spec, seq_len);
    py::dict out;
    std::vector<double> default_inv_freq, inv_freq, factor, blend;
    std::vector<std::string> regime;
    for (const auto& pair : scaling.pairs) {
      default_inv_freq.push_back(pair.default_inv_freq);
      inv_freq.push_back(pair.inv_freq);
      factor.push_back(pair.factor_applied);
      blend.push_back(pair.blend);
      regime.emplace_back(to_string(pair.regime));
    }
    out["default_inv_freq"] = default_inv_freq;
    out["inv_freq"] = inv_freq;
    out["factor_applied"] = factor;
    out["blend"] = blend;
    out["regime"] = regime;
    out["attention_scaling"] = scaling.attention_scaling;
    return out;
  });
  m.def("run_checks", [](const RopeSpec& spec, int64_t context) {
    const auto report = analysis::run_checks(spec, context);
    py::list checks;
    for (const auto& check : report.checks) {
      py::dict row;
      row["name"] = check.name;
      row["measured"] = check.measured;
      row["threshold"] = check.threshold;
      row["passed"] = check.passed;
      row["margin"] = analysis::check_margin(check);
      row["explanation"] = check.explanation;
      checks.append(row);
    }
    return checks;
  });
  // rotary.diagnose (python/rotary/_diagnose.py): x, y [rows * head_dim] and positions [rows] as
  // float64 / int64 buffers (address, count) that the caller keeps alive; target a RopeSpec or None.
  m.def("diagnose", [](uintptr_t x_address, uintptr_t y_address, int64_t num_values, uintptr_t positions_address,
                       int64_t num_rows, int64_t head_dim, double storage_epsilon, const RopeSpec* target) {
    analysis::DiagnoseSamples samples;
    samples.x = {reinterpret_cast<const double*>(x_address), static_cast<size_t>(num_values)};
    samples.y = {reinterpret_cast<const double*>(y_address), static_cast<size_t>(num_values)};
    samples.positions = {reinterpret_cast<const int64_t*>(positions_address), static_cast<size_t>(num_rows)};
    samples.head_dim = head_dim;
    analysis::DiagnoseOptions options;
    options.storage_epsilon = storage_epsilon;
    const analysis::Diagnosis d = analysis::diagnose(samples, options);
    py::dict out;
    out["rows"] = d.num_rows;
    out["distinct_positions"] = d.num_distinct_positions;
    out["head_dim"] = d.head_dim;
    out["pass_through_dims"] = d.pass_through_dims;
    out["rotated_offset"] = d.rotated_offset;
    out["rotary_dim"] = d.rotary_dim;
    out["rotated_contiguous"] = d.rotated_contiguous;
    out["pairing"] = std::string(analysis::to_string(d.pairing));
    out["pairing_score"] = d.pairing_score;
    std::vector<std::pair<int64_t, int64_t>> pairs;
    std::vector<double> residual;
    py::list inv_freq;  // None for a pair the samples do not pin down
    for (const auto& pair : d.pairs) {
      pairs.emplace_back(pair.first, pair.second);
      inv_freq.append(pair.identified ? py::object(py::float_(pair.inv_freq)) : py::object(py::none()));
      residual.push_back(pair.max_residual_rad);
    }
    out["pairs"] = pairs;
    out["inv_freq"] = inv_freq;
    out["pair_residual_rad"] = residual;
    // What the samples cannot pin down is None, and named in cannot_tell.
    out["cannot_tell"] = d.cannot_tell;
    out["direction"] = d.direction ? py::object(py::str(*d.direction == Direction::Forward ? "forward" : "backward"))
                                   : py::object(py::none());
    out["position_offset"] = d.position_offset ? py::object(py::int_(*d.position_offset)) : py::object(py::none());
    out["constant_phase_rad"] = d.constant_phase_rad;
    out["cos_sin_swapped"] = d.cos_sin_swapped;
    out["attention_scaling"] = d.attention_scaling;
    out["precision"] = d.precision ? py::object(py::str(std::string(analysis::to_string(*d.precision))))
                                   : py::object(py::none());
    out["max_residual_rad"] = d.max_residual_rad;
    out["small_angle_residual_rad"] = d.small_angle_residual_rad;
    out["scheme"] = d.scheme;
    out["fitted_theta_base"] =
        d.fitted_theta_base ? py::object(py::float_(*d.fitted_theta_base)) : py::object(py::none());
    out["fitted_linear_factor"] =
        d.fitted_linear_factor ? py::object(py::float_(*d.fitted_linear_factor)) : py::object(py::none());
    out["nearest_preset"] = d.nearest_preset;
    py::list candidates;
    for (const auto& candidate : d.candidates) {
      py::dict row;
      row["name"] = candidate.name;
      row["scheme"] = candidate.scheme;
      row["max_log_deviation"] = candidate.max_log_deviation;
      row["matches"] = candidate.matches;
      candidates.append(row);
    }
    out["candidates"] = candidates;
    out["notes"] = d.notes;
    if (target) {
      py::list mismatches;
      for (const auto& m : analysis::compare_to_spec(d, *target)) {
        py::dict row;
        row["aspect"] = m.aspect;
        row["implementation"] = m.implementation;
        row["model"] = m.model;
        row["message"] = m.message;
        mismatches.append(row);
      }
      out["matches"] = mismatches.empty();
      out["mismatches"] = mismatches;
    }
    return out;
  }, py::arg("x_address"), py::arg("y_address"), py::arg("num_values"), py::arg("positions_address"),
     py::arg("num_rows"), py::arg("head_dim"), py::arg("storage_epsilon"), py::arg("target").none(true));
  // ---- engine export (rotary.export_table, python/rotary/_export.py; engine_export.hpp) -------
  // Returns (tensor_name, dtype name, shape, bytes); the Python side makes the NumPy array.
  m.def("export_table", [](const RopeSpec& spec, const std::string& format, int64_t max_position,
                           const std::string& dtype, const std::string& factor_set) {
    ExportOptions options;
    const std::optional<ExportFormat> parsed = parse_export_format(format);
    if (!parsed) {
      std::string names;
      for (const std::string_view name : export_format_names()) names += (names.empty() ? "" : ", ") + std::string(name);
      fail("export_table: format must be one of " + names + " (got '" + format + "')");
    }
    options.format = *parsed;
    options.max_position = max_position;
    if (!dtype.empty()) {
      const std::optional<DType> d = parse_dtype(dtype);
      if (!d) fail("export_table: dtype must be float32, bfloat16 or float16 (got '" + dtype + "')");
      options.dtype = d;
    }
    if (factor_set == "short") {
      options.factor_set = LongRopeFactorSet::Short;
    } else if (factor_set == "long") {
      options.factor_set = LongRopeFactorSet::Long;
    } else if (!factor_set.empty()) {
      fail("export_table: factor_set must be 'short' or 'long' (got '" + factor_set + "')");
    }
    ExportedArray a;
    {
      py::gil_scoped_release release;
      a = export_table(spec, options);
    }
    return py::make_tuple(a.tensor_name, std::string(to_string(a.dtype)), a.shape,
                          py::bytes(reinterpret_cast<const char*>(a.bytes.data()), a.bytes.size()));
  }, py::arg("spec"), py::arg("format"), py::arg("max_position"), py::arg("dtype"), py::arg("factor_set"));

  m.def("render_report", [](const std::vector<RopeSpec>& specs, const std::string& title) {
    std::vector<analysis::ReportModel> models;
    for (const auto& spec : specs) models.push_back(analysis::ReportModel{spec.name, spec.name, spec, 0});
    analysis::ReportOptions options;
    options.title = title;
    return analysis::render_report(models, options);
  });
  bind_convert_weights(m);
}
