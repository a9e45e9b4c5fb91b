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
#include <vector>

#include "rotary/analysis.hpp"
#include "rotary/apply.hpp"
#include "rotary/apply_cos_sin.hpp"
#include "rotary/convert.hpp"
#include "rotary/attention.hpp"
#include "rotary/encodings.hpp"
#include "rotary/diagnose.hpp"
#include "rotary/error.hpp"
#include "rotary/frequencies.hpp"
#include "rotary/hf_config.hpp"
#include "rotary/kv_cache.hpp"
#include "rotary/presets.hpp"
#include "rotary/report.hpp"
#include "rotary/table.hpp"

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
    if (to == "interleaved") {
      options.to = Style::GPTJ;
    } else if (to == "half-split") {
      options.to = Style::NeoX;
    } else {
      fail("convert_weights: to must be \"interleaved\" or \"half-split\" (got \"" + to + "\")");
    }
    options.q_modules = q_modules;
    options.k_modules = k_modules;
    options.dry_run = dry_run;
    const CheckpointGeometry geometry = checkpoint_geometry(config_text, config_source);
    ConvertResult result;
    {
      py::gil_scoped_release release;
      result = convert_weights(in_path, out_path, geometry, options);
    }
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
      .def_property_readonly("sequence_dependent", [](const RopeSpec& spec) { return sequence_dependent(spec); });

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
                       int64_t fixed_positions, std::vector<float> hf_inv_freq, int64_t max_bytes) {
             TableOptions options;
             const auto parsed = parse_precision(precision);
             if (!parsed) fail("precision must be 'exact' or 'hf' (got '" + precision + "')");
             options.precision = *parsed;
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
           py::arg("hf_inv_freq"), py::arg("max_bytes"))
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
        const auto parsed = parse_precision(precision);
        if (!parsed) fail("precision must be 'exact' or 'hf' (got '" + precision + "')");
        options.precision = *parsed;
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
         const py::handle& absolute) {
        if (implementation != "kernels" && implementation != "reference" && implementation != "checks") {
          fail("implementation must be 'kernels', 'reference' or 'checks' (got '" + implementation + "')");
        }
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
      py::arg("absolute") = py::none());
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
        // "kernels" (rotary::apply), "reference" (the float64 definition), or "checks" (only
        // check_apply_arguments: the pure-torch path checks the same way, then torch computes).
        if (implementation != "kernels" && implementation != "reference" && implementation != "checks") {
          fail("implementation must be 'kernels', 'reference' or 'checks' (got '" + implementation + "')");
        }
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
    std::vector<double> inv_freq, residual;
    for (const auto& pair : d.pairs) {
      pairs.emplace_back(pair.first, pair.second);
      inv_freq.push_back(pair.inv_freq);
      residual.push_back(pair.max_residual_rad);
    }
    out["pairs"] = pairs;
    out["inv_freq"] = inv_freq;
    out["pair_residual_rad"] = residual;
    out["direction"] = d.direction == Direction::Forward ? "forward" : "backward";
    out["position_offset"] = d.position_offset;
    out["attention_scaling"] = d.attention_scaling;
    out["precision"] = std::string(analysis::to_string(d.precision));
    out["max_residual_rad"] = d.max_residual_rad;
    out["small_angle_residual_rad"] = d.small_angle_residual_rad;
    out["scheme"] = d.scheme;
    out["fitted_theta_base"] = d.fitted_theta_base;
    out["fitted_linear_factor"] = d.fitted_linear_factor;
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
  m.def("render_report", [](const std::vector<RopeSpec>& specs, const std::string& title) {
    std::vector<analysis::ReportModel> models;
    for (const auto& spec : specs) models.push_back(analysis::ReportModel{spec.name, spec.name, spec, 0});
    analysis::ReportOptions options;
    options.title = title;
    return analysis::render_report(models, options);
  });
  bind_convert_weights(m);
}
