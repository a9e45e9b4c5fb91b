// src/python/bind_spec.cpp: RopeSpec (fields, derived values, pickling), the presets and the
// Hugging Face config reader.
#include <pybind11/stl.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "python/arguments.hpp"
#include "python/bindings.hpp"
#include "core/scaling/registry.hpp"
#include "rotary/analysis.hpp"
#include "rotary/apply.hpp"
#include "rotary/frequencies.hpp"
#include "rotary/hf_config.hpp"
#include "rotary/presets.hpp"
#include "rotary/spec.hpp"

namespace rotary::python {
namespace {

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

// The fields as read and written, the scaling ones read-only (a spec's scaling is set whole, by
// the presets or the config reader).
void bind_rope_spec_fields(py::class_<RopeSpec>& spec_class) {
  spec_class.def(py::init<>())
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
      .def_property_readonly("high_freq_factor", [](const RopeSpec& spec) { return spec.scaling.high_freq_factor; });
}

// What the library derives from a spec (frequencies.hpp, apply.hpp, analysis.hpp).
void bind_rope_spec_derived(py::class_<RopeSpec>& spec_class) {
  spec_class
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
                             [](const RopeSpec& spec) { return analysis::default_target_context(spec); });
}

// pickle and copy.deepcopy: every field, enums by name (to_string / its inverse), the layout
// named by its first element; a state of another layout or an unknown name is a RotaryError.
py::tuple rope_spec_state(const RopeSpec& spec) {
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
}

// The enum whose name is `name`, among `values`.
template <typename Enum, size_t N>
Enum named_value(const std::array<Enum, N>& values, const std::string& name, const char* field) {
  for (const Enum value : values) {
    if (to_string(value) == name) return value;
  }
  fail(std::string("RopeSpec: cannot unpickle ") + field + " '" + name + "'");
}

Scaling scaling_from_state(const py::tuple& scaling) {
  if (scaling.size() != 14) fail("RopeSpec: cannot unpickle scaling (expected 14 fields)");
  Scaling s;
  s.type = named_value(std::array{ScalingType::Default, ScalingType::Linear, ScalingType::Dynamic,
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
  return s;
}

RopeSpec rope_spec_from_state(const py::tuple& state) {
  if (state.size() != 16 || !py::isinstance<py::str>(state[0]) || state[0].cast<std::string>() != "RopeSpec/1") {
    fail("RopeSpec: cannot unpickle this state (expected 16 fields starting with 'RopeSpec/1', got " +
         std::to_string(state.size()) + " fields)");
  }
  RopeSpec spec;
  spec.name = state[1].cast<std::string>();
  spec.head_dim = state[2].cast<int64_t>();
  spec.rotary_dim = state[3].cast<int64_t>();
  spec.partial_rotary_factor = state[4].cast<double>();
  spec.theta_base = state[5].cast<double>();
  spec.style = named_value(std::array{Style::NeoX, Style::GPTJ}, state[6].cast<std::string>(), "style");
  spec.scaling = scaling_from_state(state[7].cast<py::tuple>());
  spec.max_position_embeddings = state[8].cast<int64_t>();
  if (const auto xpos = state[9].cast<std::optional<double>>()) spec.xpos = XPos{*xpos};
  spec.axes = named_value(std::array{PositionAxes::Single, PositionAxes::MRope, PositionAxes::Vision2D},
                          state[10].cast<std::string>(), "axes");
  spec.mrope.pairs = state[11].cast<std::array<int64_t, 3>>();
  spec.mrope.assignment = named_value(std::array{MRopeAssignment::Chunked, MRopeAssignment::Interleaved},
                                      state[12].cast<std::string>(), "mrope assignment");
  spec.num_attention_heads = state[13].cast<int64_t>();
  spec.num_key_value_heads = state[14].cast<int64_t>();
  spec.hidden_size = state[15].cast<int64_t>();
  return spec;
}

void bind_presets(py::module_& m) {
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
  // Every scaling scheme's name, from the one list (src/core/scaling/registry.cpp), so that
  // tests/python/test_hf_scaling_schemes.py fails for a scheme the Python chain lacks.
  m.def("scaling_types", [] {
    py::list out;
    for (const scaling::ScalingScheme& row : scaling::schemes()) out.append(std::string(row.name));
    return out;
  });
}

}  // namespace

void bind_spec(py::module_& m) {
  py::class_<RopeSpec> spec_class(m, "RopeSpec");
  bind_rope_spec_fields(spec_class);
  bind_rope_spec_derived(spec_class);
  spec_class.def(py::pickle(&rope_spec_state, &rope_spec_from_state));
  bind_presets(m);
}

}  // namespace rotary::python
