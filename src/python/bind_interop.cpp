// src/python/bind_interop.cpp: tables in other engines' layouts (engine_export.hpp) and
// checkpoints converted between pairing conventions (convert.hpp).
#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "python/arguments.hpp"
#include "python/bindings.hpp"
#include "rotary/convert.hpp"
#include "rotary/engine_export.hpp"

namespace rotary::python {
namespace {

// rotary.export_table (python/rotary/_export.py). Returns (tensor_name, dtype name, shape,
// bytes); the Python side makes the NumPy array.
py::tuple export_table_call(const RopeSpec& spec, const std::string& format, int64_t max_position,
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
}

// Checkpoint conversion between pairing conventions (include/rotary/convert.hpp), for
// rotary.convert_weights (python/rotary/_convert.py). The config arrives as JSON text (a file's
// contents or a dict json.dumps'ed by the Python side) with the name messages give it.
py::dict convert_weights_call(const std::string& in_path, const std::string& out_path,
                              const std::string& config_text, const std::string& config_source, const std::string& to,
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
}

}  // namespace

void bind_interop(py::module_& m) {
  m.def("export_table", &export_table_call, py::arg("spec"), py::arg("format"), py::arg("max_position"),
        py::arg("dtype"), py::arg("factor_set"));
  m.def("convert_weights", &convert_weights_call, py::arg("in_path"), py::arg("out_path"), py::arg("config_text"),
        py::arg("config_source"), py::arg("to"), py::arg("q_modules"), py::arg("k_modules"), py::arg("dry_run"));
}

}  // namespace rotary::python
