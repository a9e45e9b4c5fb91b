// src/cli/diagnose_command.cpp: `rotary diagnose`: what an unknown RoPE implementation does, from
// .npy samples of it, and how it differs from a model (analysis::diagnose / compare_to_spec,
// include/rotary/diagnose.hpp). Exit codes: 0 no target or no mismatch, 1 mismatches (a result,
// not an error: the findings are still printed), 2 errors as every command, "y is not a rotation
// of x" included, 3 no mismatch but properties the samples cannot tell were not compared.
#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "cli/layer_types.hpp"
#include "core/json.hpp"
#include "cli/npy.hpp"
#include "rotary/diagnose.hpp"
#include "rotary/error.hpp"
#include "rotary/tensor.hpp"
#include "core/shape_text.hpp"

namespace rotary::cli {

const char* const kDiagnoseHelp =
    "usage: rotary diagnose --x X.npy --y Y.npy --positions P.npy [--preset NAME | --config FILE]\n"
    "                       [--layer-type T] [--json]\n"
    "\n"
    "Infers what an unknown RoPE implementation does from samples of it: inputs x, its outputs y\n"
    "and the positions. Finds the pass-through dims and the rotated block, the pairing (half-split,\n"
    "interleaved or another permutation), the direction, inv_freq per pair and the position offset,\n"
    "the attention scaling, the precision class (exact, float32 table, float32 angle drift,\n"
    "float16), then fits theta and names the nearest preset. With --preset or --config, prints each\n"
    "mismatch against that model in plain words. docs/analysis.md (\"Diagnose\") says which\n"
    "positions are needed: a difference of 1 or 2 between two of them, then differences growing by\n"
    "at most ~8x, up to a position where the slowest pair turns by 0.1 rad or more; a \"note:\"\n"
    "line says when the samples leave something uncertain, and a property they cannot pin down\n"
    "(aliased positions, a fit with large residuals) reads \"cannot tell from these positions\" and is\n"
    "never a mismatch. y that is not x rotated pair by pair (y = 0, noise, y = 2x, y = -x) is an\n"
    "error saying why.\n"
    "\n"
    "  --x FILE         inputs, [rows, head_dim] or [rows, heads, head_dim]; float32, float64,\n"
    "                   float16 or bfloat16\n"
    "  --y FILE         the implementation's outputs for x, the same shape\n"
    "  --positions FILE int64 [rows], one position per row (shared by its heads)\n"
    "  --preset NAME    the target model, a built-in preset (rotary presets)\n"
    "  --config FILE    the target model, a config.json or a model folder holding one\n"
    "  --layer-type T   the target's layer type, required for configs with per-layer-type RoPE\n"
    "                   (Gemma 3: full_attention or sliding_attention), whose types differ\n"
    "  --json           a JSON object: the findings, candidates, and with a target: target,\n"
    "                   layer_type (null without layer types), matches, mismatches [{aspect,\n"
    "                   implementation, model, message}]\n"
    "\n"
    "Exit status: 0 no target or no mismatch, 1 mismatches, 2 an error (y not a rotation of x too),\n"
    "3 no mismatch in what the samples show but something not compared (a \"not compared:\" line).\n";

namespace {

// The samples as float64 rows, and the unit roundoff of their storage.
struct Rows {
  std::vector<double> values;
  std::vector<int64_t> shape;
  double epsilon = 0x1p-53;
  std::string dtype = "float64";
};

Rows read_rows(const std::string& flag, const std::string& path) {
  const npy::Array array = npy::read(path);
  if (array.shape.size() != 2 && array.shape.size() != 3) {
    std::string shape;
    for (size_t i = 0; i < array.shape.size(); ++i) shape += (i ? ", " : "") + std::to_string(array.shape[i]);
    throw Error(detail::concat("diagnose: ", flag, " must be [rows, head_dim] or [rows, heads, head_dim] (got shape (",
                               shape, ") in ", path, ")"));
  }
  Rows rows;
  rows.shape = array.shape;
  const size_t n = static_cast<size_t>(array.size());
  rows.values.resize(n);
  const unsigned char* bytes = array.bytes.data();
  for (size_t i = 0; i < n; ++i) {
    switch (array.type) {
      case npy::ElementType::Float64: {
        double value;
        std::memcpy(&value, bytes + 8 * i, 8);
        rows.values[i] = value;
        break;
      }
      case npy::ElementType::Float32: {
        float value;
        std::memcpy(&value, bytes + 4 * i, 4);
        rows.values[i] = value;
        break;
      }
      case npy::ElementType::Float16:
      case npy::ElementType::BFloat16: {
        uint16_t bits;
        std::memcpy(&bits, bytes + 2 * i, 2);
        rows.values[i] = array.type == npy::ElementType::Float16 ? f16_to_float(bits) : bf16_to_float(bits);
        break;
      }
      case npy::ElementType::Int64:
        throw Error(detail::concat("diagnose: ", flag, " must hold float32, float64, float16 or bfloat16 (got int64 in ",
                                   path, ")"));
    }
  }
  rows.dtype = std::string(npy::to_string(array.type));
  switch (array.type) {
    case npy::ElementType::Float32: rows.epsilon = 0x1p-24; break;
    case npy::ElementType::Float16: rows.epsilon = 0x1p-11; break;
    case npy::ElementType::BFloat16: rows.epsilon = 0x1p-8; break;
    default: break;
  }
  return rows;
}

// The samples, checked against each other: x and y of one shape, one int64 position per token.
struct Samples {
  Rows x;
  Rows y;
  std::vector<int64_t> positions;  // one per row: each head of a token gets the token's position
  int64_t head_dim = 0;
};

Samples read_samples(const std::string& x_path, const std::string& y_path, const std::string& positions_path) {
  Samples samples{read_rows("--x", x_path), read_rows("--y", y_path), {}, 0};
  const Rows& x = samples.x;
  const Rows& y = samples.y;
  if (x.shape != y.shape) {
    throw Error(detail::concat("diagnose: --y must have the shape of --x, ", shape_text(x.shape), " (got ",
                               shape_text(y.shape), ")"));
  }
  const npy::Array positions_array = npy::read(positions_path);
  if (positions_array.type != npy::ElementType::Int64) {
    throw Error(detail::concat("diagnose: --positions must hold int64 (got ", npy::to_string(positions_array.type),
                               ")"));
  }
  const int64_t num_tokens = x.shape[0];
  const int64_t heads = x.shape.size() == 3 ? x.shape[1] : 1;
  samples.head_dim = x.shape.back();
  if (positions_array.shape.size() != 1 || positions_array.shape[0] != num_tokens) {
    throw Error(detail::concat("diagnose: --positions must be [rows] = (", num_tokens, ",) to match --x ",
                               shape_text(x.shape), " (got ", shape_text(positions_array.shape), ")"));
  }
  std::vector<int64_t> token_positions(static_cast<size_t>(num_tokens));
  if (num_tokens > 0) std::memcpy(token_positions.data(), positions_array.bytes.data(), token_positions.size() * 8);
  for (const int64_t p : token_positions) {
    samples.positions.insert(samples.positions.end(), static_cast<size_t>(heads), p);
  }
  return samples;
}

// The model the findings are compared with, when --preset or --config named one.
struct Target {
  const RopeSpec* spec = nullptr;  // null: no comparison
  std::string source;              // the preset or config it came from
  std::string layer_type;          // empty when the config has no layer types
};

void write_diagnosis_json(std::ostream& stream, const analysis::Diagnosis& d, const std::string& storage,
                          const Target& target, const std::vector<analysis::Mismatch>& mismatches) {
  json::Writer out;
  out.begin_object();
  out.key("rows").value(d.num_rows);
  out.key("distinct_positions").value(d.num_distinct_positions);
  out.key("head_dim").value(d.head_dim);
  out.key("rotated_offset").value(d.rotated_offset);
  out.key("rotary_dim").value(d.rotary_dim);
  out.key("rotated_contiguous").value(d.rotated_contiguous);
  out.key("pairing").value(analysis::to_string(d.pairing));
  out.key("pairing_score").value(d.pairing_score);
  // A property the samples cannot pin down is null, and named in cannot_tell.
  out.key("cannot_tell").begin_array();
  for (const std::string& property : d.cannot_tell) out.value(property);
  out.end_array();
  if (d.direction) out.key("direction").value(*d.direction == Direction::Forward ? "forward" : "backward");
  else out.key("direction").null();
  if (d.position_offset) out.key("position_offset").value(*d.position_offset);
  else out.key("position_offset").null();
  out.key("constant_phase_rad").value(d.constant_phase_rad);
  out.key("cos_sin_swapped").value(d.cos_sin_swapped);
  out.key("attention_scaling").value(d.attention_scaling);
  if (d.precision) out.key("precision").value(analysis::to_string(*d.precision));
  else out.key("precision").null();
  out.key("storage").value(storage);
  out.key("max_residual_rad").value(d.max_residual_rad);
  out.key("small_angle_residual_rad").value(d.small_angle_residual_rad);
  out.key("scheme").value(d.scheme);
  if (d.fitted_theta_base) out.key("fitted_theta_base").value(*d.fitted_theta_base);
  else out.key("fitted_theta_base").null();
  if (d.fitted_linear_factor) out.key("fitted_linear_factor").value(*d.fitted_linear_factor);
  else out.key("fitted_linear_factor").null();
  out.key("nearest_preset").value(d.nearest_preset);
  out.key("pairs").begin_array();
  for (const analysis::PairFinding& pair : d.pairs) {
    out.begin_object();
    out.key("first").value(pair.first);
    out.key("second").value(pair.second);
    if (pair.identified) out.key("inv_freq").value(pair.inv_freq);
    else out.key("inv_freq").null();
    out.key("max_residual_rad").value(pair.max_residual_rad);
    out.key("attention_scaling").value(pair.attention_scaling);
    out.end_object();
  }
  out.end_array();
  out.key("notes").begin_array();
  for (const std::string& note : d.notes) out.value(note);
  out.end_array();
  out.key("candidates").begin_array();
  for (size_t i = 0; i < d.candidates.size() && i < 5; ++i) {
    out.begin_object();
    out.key("name").value(d.candidates[i].name);
    out.key("scheme").value(d.candidates[i].scheme);
    out.key("max_log_deviation").value(d.candidates[i].max_log_deviation);
    out.key("matches").value(d.candidates[i].matches);
    out.end_object();
  }
  out.end_array();
  if (target.spec) {
    out.key("target").value(target.source);
    if (target.layer_type.empty()) {
      out.key("layer_type").null();
    } else {
      out.key("layer_type").value(target.layer_type);
    }
    out.key("matches").value(mismatches.empty());
    out.key("mismatches").begin_array();
    for (const analysis::Mismatch& m : mismatches) {
      out.begin_object();
      out.key("aspect").value(m.aspect);
      out.key("implementation").value(m.implementation);
      out.key("model").value(m.model);
      out.key("message").value(m.message);
      out.end_object();
    }
    out.end_array();
  }
  out.end_object();
  stream << out.str() << "\n";
}

// The header and the structural findings: which dims rotate, how they pair, which way they turn.
void print_structure(std::ostream& out, const analysis::Diagnosis& d) {
  out << "Diagnosis of " << d.num_rows << " rows (" << d.num_distinct_positions << " distinct positions, up to "
      << d.max_position << "), head_dim " << d.head_dim << "\n";
  out << "  rotated dims       ";
  if (d.rotated_contiguous) {
    out << "[" << d.rotated_offset << ", " << d.rotated_offset + d.rotary_dim << ") (" << d.rotary_dim << " dims), "
        << d.pass_through_dims.size() << " passed through\n";
  } else {
    out << d.rotary_dim << " dims, not contiguous (first " << d.rotated_offset << ")\n";
  }
  out << "  pairing            " << analysis::to_string(d.pairing);
  const std::string o = d.rotated_offset == 0 ? "" : std::to_string(d.rotated_offset) + "+";
  if (d.pairing == analysis::Pairing::HalfSplit) out << ": (x[" << o << "i], x[" << o << "i+" << d.rotary_dim / 2 << "])";
  if (d.pairing == analysis::Pairing::Interleaved) out << ": (x[" << o << "2i], x[" << o << "2i+1])";
  if (d.pairing == analysis::Pairing::Ambiguous) out << ": " << analysis::kCannotTell;
  if (d.pairing == analysis::Pairing::Other && !d.pairs.empty()) {
    out << ": (x[" << d.pairs[0].first << "], x[" << d.pairs[0].second << "]), ...";
  }
  out << "  (norm-ratio spread " << format_number(d.pairing_score, 3);
  if (d.other_pattern_score > 0) out << "; the other pattern " << format_number(d.other_pattern_score, 3);
  out << ")\n";
  const std::string cannot_tell(analysis::kCannotTell);
  out << "  direction          ";
  if (d.direction) {
    out << (*d.direction == Direction::Forward ? "forward (+p*theta)" : "backward (-p*theta)") << "; "
        << d.num_pairs_against_direction << " of " << d.num_pairs_identified << " identified pairs against\n";
  } else {
    out << cannot_tell << "\n";
  }
}

// The angle findings: offset, phase, scaling, precision, frequencies and the nearest preset.
void print_angles(std::ostream& out, const analysis::Diagnosis& d, const std::string& storage) {
  const std::string cannot_tell(analysis::kCannotTell);
  out << "  position offset    ";
  if (d.position_offset) {
    out << *d.position_offset << " (phase residual " << format_number(d.position_offset_residual, 3) << " rad)\n";
  } else {
    out << cannot_tell << "\n";
  }
  if (d.cos_sin_swapped) {
    out << "  cos and sin        swapped: every pair turns by pi/2 - p*theta (y = x*sin + rotate_half(x)*cos)\n";
  } else if (d.position_offset && d.constant_phase_rad != 0.0) {
    out << "  constant phase     " << format_number(d.constant_phase_rad, 6) << " rad on every pair\n";
  }
  out << "  attention scaling  " << format_number(d.attention_scaling, 8) << " (spread over pairs "
      << format_number(d.attention_scaling_spread, 3) << ")\n";
  out << "  precision          ";
  if (d.precision) {
    out << analysis::to_string(*d.precision)
        << (d.precision == analysis::PrecisionClass::Exact && storage != "float64"
                ? " to the samples' " + storage + " storage"
                : std::string())
        << " (max angle residual " << format_number(d.max_residual_rad, 3) << " rad; "
        << format_number(d.small_angle_residual_rad, 3) << " rad at angles <= 32 rad)\n";
  } else {
    out << cannot_tell << "\n";
  }
  out << "  frequencies        ";
  if (d.scheme.empty()) {
    out << cannot_tell << " (" << d.pairs.size() - static_cast<size_t>(d.num_pairs_identified) << " of "
        << d.pairs.size() << " pairs not identified)\n";
  } else {
    out << d.scheme;
    if (d.fitted_theta_base) {
      out << "; log-linear fit: rope_theta " << format_number(*d.fitted_theta_base) << ", linear factor "
          << format_number(d.fitted_linear_factor.value_or(1.0)) << " (max |ln residual| "
          << format_number(d.fit_max_log_residual, 3) << ")";
    }
    out << "\n";
  }
  if (!d.candidates.empty()) {
    const analysis::FrequencyCandidate& best = d.candidates.front();
    out << "  nearest preset     " << best.name << " (" << best.scheme << "; "
        << (best.matches ? "matches" : "does not match") << ", max |ln ratio| " << format_number(best.max_log_deviation, 3)
        << ")\n";
  }
}

void print_pairs(std::ostream& out, const analysis::Diagnosis& d) {
  for (const std::string& note : d.notes) out << "  note: " << note << "\n";
  out << "\n  pair  elements      inv_freq      residual_rad\n";
  for (size_t i = 0; i < d.pairs.size(); ++i) {
    const analysis::PairFinding& pair = d.pairs[i];
    out << format_line("  %4zu  (%3lld, %3lld)  %-12s  %s\n", i, static_cast<long long>(pair.first),
                       static_cast<long long>(pair.second),
                       pair.identified ? format_number(pair.inv_freq, 6).c_str() : "?",
                       format_number(pair.max_residual_rad, 3).c_str());
  }
}

void print_comparison(std::ostream& out, const analysis::Diagnosis& d, const Target& target,
                      const std::vector<analysis::Mismatch>& mismatches) {
  out << "\nAgainst " << target.spec->name << " (" << target.source
      << (target.layer_type.empty() ? "" : ", layer type " + target.layer_type) << "): ";
  if (mismatches.empty()) {
    out << (d.cannot_tell.empty() ? "no mismatch\n" : "no mismatch in what these samples show\n");
  } else {
    out << mismatches.size() << (mismatches.size() == 1 ? " mismatch\n" : " mismatches\n");
    for (const analysis::Mismatch& m : mismatches) out << "  " << m.aspect << ": " << m.message << "\n";
  }
  // Not a clean bill: what the samples cannot pin down was not compared.
  if (!d.cannot_tell.empty()) {
    std::string untold;
    for (const std::string& property : d.cannot_tell) untold += (untold.empty() ? "" : ", ") + property;
    out << "  not compared: " << untold << " (" << analysis::kCannotTell << ")\n";
  }
}

}  // namespace

int run_diagnose(Args& args) {
  const std::optional<std::string> x_path = args.value("--x", "a .npy file");
  const std::optional<std::string> y_path = args.value("--y", "a .npy file");
  const std::optional<std::string> positions_path = args.value("--positions", "a .npy file");
  bool has_target = false;
  for (const std::string& token : args.tokens()) {
    if (token.rfind("--preset", 0) == 0 || token.rfind("--config", 0) == 0) has_target = true;
  }
  std::optional<LoadedConfig> loaded;
  if (has_target) loaded = load_config(args);
  const std::optional<std::string> layer_type = args.value("--layer-type");
  const bool as_json = args.has_switch("--json");
  args.finish();
  if (!x_path) throw UsageError("diagnose: --x is required (the inputs, a .npy file)");
  if (!y_path) throw UsageError("diagnose: --y is required (the implementation's outputs, a .npy file)");
  if (!positions_path) throw UsageError("diagnose: --positions is required (int64 positions, a .npy file)");
  if (layer_type && !loaded) {
    throw UsageError(detail::concat("diagnose: --layer-type needs --preset or --config (got --layer-type ", *layer_type,
                                    " alone)"));
  }
  // One comparison: a per-layer-type target needs --layer-type (its types differ in theta).
  const LayerTypeSpec chosen = loaded ? one_layer_type("diagnose", *loaded, layer_type) : LayerTypeSpec{};
  const Target target{chosen.spec, loaded ? loaded->source : std::string(), chosen.name};
  if (args.parse_only()) return 0;

  const Samples samples = read_samples(*x_path, *y_path, *positions_path);
  const Rows& x = samples.x;
  const Rows& y = samples.y;
  analysis::DiagnoseOptions options;
  options.storage_epsilon = std::max(x.epsilon, y.epsilon);
  const analysis::Diagnosis d =
      analysis::diagnose({x.values, y.values, samples.positions, samples.head_dim}, options);
  std::vector<analysis::Mismatch> mismatches;
  if (target.spec) mismatches = analysis::compare_to_spec(d, *target.spec);
  // 3, not 0, when a target was given and the samples left something uncompared: a script that
  // gates on the exit status must not read "no mismatch in what these samples show" as a pass.
  const int exit_code = !mismatches.empty() ? 1 : (target.spec && !d.cannot_tell.empty()) ? 3 : 0;
  const std::string storage = x.epsilon >= y.epsilon ? x.dtype : y.dtype;  // the coarser of the two

  if (as_json) {
    write_diagnosis_json(args.out(), d, storage, target, mismatches);
    return exit_code;
  }
  std::ostream& out = args.out();
  print_structure(out, d);
  print_angles(out, d, storage);
  print_pairs(out, d);
  if (target.spec) print_comparison(out, d, target, mismatches);
  return exit_code;
}

}  // namespace rotary::cli
