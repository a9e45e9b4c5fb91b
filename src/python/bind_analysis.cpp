// src/python/bind_analysis.cpp: what rotary.viz, rotary.check, rotary.diagnose and the report
// read (analysis.hpp, diagnose.hpp, report.hpp), as dicts of plain Python values.
#include <pybind11/stl.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "python/arguments.hpp"
#include "python/bindings.hpp"
#include "rotary/analysis.hpp"
#include "rotary/diagnose.hpp"
#include "rotary/report.hpp"

namespace rotary::python {
namespace {

py::list curve(const std::vector<analysis::CurvePoint>& points) {
  py::list out;
  for (const auto& point : points) out.append(py::make_tuple(point.distance_tokens, point.value));
  return out;
}

py::dict long_term_decay_dict(const RopeSpec& spec, int64_t max_distance, int64_t samples) {
  const auto decay = analysis::long_term_decay(spec, max_distance, samples);
  py::dict out;
  out["bound"] = curve(decay.bound);
  out["score_identical_ones"] = curve(decay.score_identical_ones);
  out["score_identical_random"] = curve(decay.score_identical_random);
  out["score_independent_random"] = curve(decay.score_independent_random);
  out["bound_at_zero"] = decay.bound_at_zero;
  out["decay_ratio"] = decay.decay_ratio;
  return out;
}

py::dict extrapolation_dict(const RopeSpec& spec, int64_t trained, int64_t target) {
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
}

py::dict scheme_scaling_dict(const RopeSpec& spec, int64_t seq_len) {
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
}

py::list run_checks_list(const RopeSpec& spec, int64_t context) {
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
}

// What the samples cannot pin down is None, and named in cannot_tell.
py::dict diagnosis_dict(const analysis::Diagnosis& d) {
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
  out["fitted_theta_base"] = d.fitted_theta_base ? py::object(py::float_(*d.fitted_theta_base)) : py::object(py::none());
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
  return out;
}

// rotary.diagnose (python/rotary/_diagnose.py): x, y [rows * head_dim] and positions [rows] as
// float64 / int64 buffers (address, count) that the caller keeps alive; target a RopeSpec or None.
py::dict diagnose_call(uintptr_t x_address, uintptr_t y_address, int64_t num_values, uintptr_t positions_address,
                       int64_t num_rows, int64_t head_dim, double storage_epsilon, const RopeSpec* target) {
  analysis::DiagnoseSamples samples;
  samples.x = {reinterpret_cast<const double*>(x_address), static_cast<size_t>(num_values)};
  samples.y = {reinterpret_cast<const double*>(y_address), static_cast<size_t>(num_values)};
  samples.positions = {reinterpret_cast<const int64_t*>(positions_address), static_cast<size_t>(num_rows)};
  samples.head_dim = head_dim;
  analysis::DiagnoseOptions options;
  options.storage_epsilon = storage_epsilon;
  const analysis::Diagnosis d = analysis::diagnose(samples, options);
  py::dict out = diagnosis_dict(d);
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
}

}  // namespace

void bind_analysis(py::module_& m) {
  m.def("long_term_decay", &long_term_decay_dict);
  m.def("extrapolation", &extrapolation_dict);
  m.def("scheme_scaling", &scheme_scaling_dict);
  m.def("run_checks", &run_checks_list);
  m.def("diagnose", &diagnose_call, py::arg("x_address"), py::arg("y_address"), py::arg("num_values"),
        py::arg("positions_address"), py::arg("num_rows"), py::arg("head_dim"), py::arg("storage_epsilon"),
        py::arg("target").none(true));
  m.def("render_report", [](const std::vector<RopeSpec>& specs, const std::string& title) {
    std::vector<analysis::ReportModel> models;
    for (const auto& spec : specs) models.push_back(analysis::ReportModel{spec.name, spec.name, spec, 0});
    analysis::ReportOptions options;
    options.title = title;
    return analysis::render_report(models, options);
  });
}

}  // namespace rotary::python
