// src/python/bind_table.cpp: CosSinTable (the cos/sin rows apply and attention read) and RopeCache
// (Hugging Face's dynamic-NTK and LongRoPE switching), table.hpp.
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "python/arguments.hpp"
#include "python/bindings.hpp"
#include "rotary/table.hpp"
#include "python/tensor_arg.hpp"

namespace rotary::python {
namespace {

std::shared_ptr<CosSinTable> make_table(const RopeSpec& spec, const std::string& precision, const std::string& storage,
                                        int64_t seq_len, int64_t fixed_positions, std::vector<float> hf_inv_freq,
                                        int64_t max_bytes, const std::string& cache_dtype) {
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
}

// Rows for `count` positions at `positions` into float32 (cos, sin) buffers of count x
// num_pairs each (pair order, attention_scaling included), or float64 for exact64.
// seq_len: the seq_len the caller's frequencies are for, -1 for the largest position + 1
// (Hugging Face's rule); the table must serve it, as in apply().
void table_rows(const CosSinTable& t, const py::tuple& positions, uintptr_t cos_out, uintptr_t sin_out, bool f64,
                int64_t seq_len) {
  const std::span<const int64_t> values = int64s_arg(positions);
  const auto count = static_cast<int64_t>(values.size());
  int64_t largest = -1;
  for (int64_t n = 0; n < count; ++n) {  // all checked before any is written
    if (values[n] < 0 || values[n] > t.max_position()) {
      fail("positions[" + std::to_string(n) + "] must be in [0, " + std::to_string(t.max_position()) + "] (got " +
           std::to_string(values[n]) + ")");
    }
    largest = std::max(largest, values[n]);
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
      t.row_f64(values[n], reinterpret_cast<double*>(cos_out) + n * pairs, reinterpret_cast<double*>(sin_out) + n * pairs);
    } else {
      t.row(values[n], reinterpret_cast<float*>(cos_out) + n * pairs, reinterpret_cast<float*>(sin_out) + n * pairs);
    }
  }
}

}  // namespace

void bind_table(py::module_& m) {
  py::class_<CosSinTable, std::shared_ptr<CosSinTable>>(m, "CosSinTable")
      .def(py::init(&make_table), py::arg("spec"), py::arg("precision"), py::arg("storage"), py::arg("seq_len"),
           py::arg("fixed_positions"), py::arg("hf_inv_freq"), py::arg("max_bytes"), py::arg("cache_dtype") = "float32")
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
      .def("rows", &table_rows);

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
}

}  // namespace rotary::python
