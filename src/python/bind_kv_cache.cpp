// src/python/bind_kv_cache.cpp: KvCache (kv_cache.hpp). It holds its table alive (keep_alive);
// keys / values cross as bytes (a copy) that the Python side reshapes.
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "python/arguments.hpp"
#include "python/bindings.hpp"
#include "rotary/kv_cache.hpp"
#include "python/tensor_arg.hpp"

namespace rotary::python {
namespace {

py::bytes view_bytes(const TensorView& view, const char* what) {
  return py::bytes(static_cast<const char*>(view.data),
                   static_cast<size_t>(element_count(view, what) * dtype_size(view.dtype)));
}

}  // namespace

void bind_kv_cache(py::module_& m) {
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
             const TensorView vk = tensor_arg(k, "k"), vv = tensor_arg(v, "v");
             const std::span<const int64_t> token_positions = int64s_arg(positions);
             py::gil_scoped_release release;
             cache.append(vk, vv, token_positions);
           })
      .def("attend",
           [](const KvCache& cache, const py::handle& q, const py::handle& out, std::optional<double> scale, bool causal,
              int64_t window) {
             const TensorView vq = tensor_arg(q, "q"), vout = tensor_arg(out, "out");
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
      .def("keys_bytes", [](const KvCache& cache) { return view_bytes(cache.keys(), "keys"); })
      .def("values_bytes", [](const KvCache& cache) { return view_bytes(cache.values(), "values"); });
}

}  // namespace rotary::python
