// src/cli/export_command.cpp: `rotary export`: a model's exact table in an engine's layout and
// dtype, as one .npy file (export_table(), include/rotary/engine_export.hpp; docs/interop.md).
#include <string>

#include "cli/commands.hpp"
#include "core/atomic_file.hpp"
#include "core/json.hpp"
#include "cli/layer_types.hpp"
#include "cli/npy.hpp"
#include "rotary/engine_export.hpp"
#include "rotary/error.hpp"
#include "rotary/table.hpp"

namespace rotary::cli {

const char* const kExportHelp =
    "usage: rotary export --format FORMAT [--preset NAME | --config FILE] [--max-position N]\n"
    "                     [--dtype float32|bfloat16|float16] [--factor-set short|long]\n"
    "                     [--layer-type T] (-o FILE.npy | -o - | --json)\n"
    "\n"
    "Writes the model's exact cos/sin table (every value the correctly rounded formula, rounded\n"
    "once to the dtype) in the layout an inference engine reads. docs/interop.md shows each.\n"
    "\n"
    "  --format vllm                   cos_sin_cache [rows, rotary_dim] = cat(cos, sin) with the\n"
    "                                  rows vLLM builds (YaRN: original x factor; linear: max_position\n"
    "                                  x factor; M-RoPE: 4 x max_position; LongRoPE: vLLM's\n"
    "                                  long_short_cos_sin_cache, original + max_position rows), in\n"
    "                                  the model dtype (--dtype required)\n"
    "           flashinfer             the same layout, float32 (apply_rope_with_cos_sin_cache)\n"
    "           flash-attn             cos and sin, each (seqlen, rotary_dim/2), stacked as\n"
    "                                  [2, seqlen, rotary_dim/2] (cos = [0], sin = [1]), in the\n"
    "                                  activation dtype (--dtype required)\n"
    "           transformer-engine     float32 angles [max_position, 1, 1, rotary_dim], duplicated\n"
    "                                  halves (interleaved pairing: each angle twice), reduced\n"
    "                                  modulo 2 pi into (-pi, pi]\n"
    "           llama-cpp-freq-factors float32 [rotary_dim/2]: rope_freqs.weight (Llama 3), or\n"
    "                                  rope_factors_short/long.weight (LongRoPE, --factor-set)\n"
    "  --max-position N  rows of a cache, positions [0, N); default: vllm the rows vLLM builds,\n"
    "                    the others max_position_embeddings\n"
    "  --dtype T         float32, bfloat16 (written as uint16 bit patterns) or float16\n"
    "  --factor-set S    short or long: LongRoPE's factor list for llama-cpp-freq-factors\n"
    "  --layer-type T    required for configs with per-layer-type RoPE (Gemma 3: full_attention\n"
    "                    or sliding_attention): each type has its own table\n"
    "  -o, --output FILE the .npy to write (written whole or not at all); - writes it to stdout\n"
    "  --json            print {format, tensor_name, shape, rows, dtype, bytes, path, name, source,\n"
    "                    layer_type} (path null and nothing written without -o; not with -o -)\n"
    "\n"
    "Refused, with the reason: schemes that change with the sequence length (dynamic NTK,\n"
    "LongRoPE except vLLM's long/short cache) in a static cache, xPos and 2-D vision positions,\n"
    "attention scaling in transformer-engine's angle table, a dtype the format does not take.\n";

namespace {

npy::ElementType element_type(DType dtype) {
  switch (dtype) {
    case DType::F32: return npy::ElementType::Float32;
    case DType::BF16: return npy::ElementType::BFloat16;
    case DType::F16: return npy::ElementType::Float16;
    case DType::F64: break;
  }
  return npy::ElementType::Float64;
}

}  // namespace

int run_export(Args& args) {
  LoadedConfig loaded = load_config(args);
  const std::optional<std::string> format_text = args.value("--format", "an engine's format");
  const std::optional<int64_t> max_position = args.integer("--max-position", 1, kMaxPosition + 1);
  const std::optional<std::string> dtype_text = args.value("--dtype", "a dtype");
  const std::optional<std::string> factor_set_text = args.value("--factor-set", "short or long");
  const std::optional<std::string> layer_type = args.value("--layer-type");
  std::optional<std::string> output = args.value("-o", "a file path");
  if (const std::optional<std::string> long_output = args.value("--output", "a file path")) {
    if (output) throw UsageError("export: give the output once, as -o or --output");
    output = long_output;
  }
  const bool as_json = args.has_switch("--json");
  args.finish();

  std::string formats;
  for (const std::string_view name : export_format_names()) formats += (formats.empty() ? "" : ", ") + std::string(name);
  if (!format_text) throw UsageError("export: --format is required (one of " + formats + ")");
  ExportOptions options;
  const std::optional<ExportFormat> format = parse_export_format(*format_text);
  if (!format) throw UsageError("export: --format must be one of " + formats + " (got \"" + *format_text + "\")");
  options.format = *format;
  if (max_position) options.max_position = *max_position;
  if (dtype_text) {
    const std::optional<DType> dtype = parse_dtype(*dtype_text);
    if (!dtype || *dtype == DType::F64) {
      throw UsageError("export: --dtype must be float32, bfloat16 or float16 (got \"" + *dtype_text + "\")");
    }
    options.dtype = dtype;
  }
  if (factor_set_text) {
    if (*factor_set_text == "short") {
      options.factor_set = LongRopeFactorSet::Short;
    } else if (*factor_set_text == "long") {
      options.factor_set = LongRopeFactorSet::Long;
    } else {
      throw UsageError("export: --factor-set must be short or long (got \"" + *factor_set_text + "\")");
    }
  }
  if (!output && !as_json) {
    throw UsageError("export: -o FILE.npy is required (- for stdout; --json alone prints what would be written)");
  }
  if (as_json && is_stdout(output)) {
    throw UsageError("export: --json prints to stdout, which -o - holds for the .npy: give -o FILE (got -o - and --json)");
  }
  const LayerTypeSpec chosen = one_layer_type("export", loaded, layer_type);
  const RopeSpec& spec = *chosen.spec;
  if (args.parse_only()) return 0;

  ExportedArray exported;
  try {
    exported = export_table(spec, options);
  } catch (const Error& e) {
    // Name the command's flags, not the library's fields.
    std::string message = e.what();
    for (const auto& [field, flag] : {std::pair<std::string, std::string>{"max_position", "--max-position"},
                                      {"dtype", "--dtype"},
                                      {"factor_set", "--factor-set"},
                                      {"format", "--format"}}) {
      for (size_t at = message.find(field + " "); at != std::string::npos; at = message.find(field + " ", at + flag.size())) {
        const bool word_start = at == 0 || message[at - 1] == ' ' || message[at - 1] == '(';
        if (word_start) message.replace(at, field.size(), flag);
      }
    }
    if (message.rfind("export_table: ", 0) == 0) message = "export: " + message.substr(14);
    throw Error(message);
  }
  npy::Array array;
  array.type = element_type(exported.dtype);
  array.shape = exported.shape;
  array.bytes = std::move(exported.bytes);
  // The serialized file, so that stdout, a file and the summary's byte count are the same bytes.
  const std::vector<unsigned char> file = npy::serialize(array);
  array.bytes = {};
  const std::string_view file_text(reinterpret_cast<const char*>(file.data()), file.size());
  if (is_stdout(output)) {
    args.out().write(file_text.data(), static_cast<std::streamsize>(file_text.size()));
    args.out().flush();
  } else if (output) {
    detail::write_file_atomically(*output, file_text, "npy");
  }
  std::string shape;
  for (size_t i = 0; i < exported.shape.size(); ++i) shape += (i ? ", " : "") + std::to_string(exported.shape[i]);
  const std::string where = !output ? std::string("nothing (no -o)") : is_stdout(output) ? "stdout" : *output;
  if (as_json) {
    json::Writer out;
    out.begin_object();
    out.key("format").value(to_string(options.format));
    out.key("tensor_name").value(exported.tensor_name);
    out.key("shape").begin_array();
    for (const int64_t extent : exported.shape) out.value(extent);
    out.end_array();
    // The positions a cache holds (flash-attn's [2, rows, pairs]: the middle axis); null for a
    // per-pair tensor.
    if (options.format == ExportFormat::LlamaCppFreqFactors) {
      out.key("rows").null();
    } else {
      out.key("rows").value(exported.shape[options.format == ExportFormat::FlashAttn ? 1 : 0]);
    }
    out.key("dtype").value(to_string(exported.dtype));
    out.key("bytes").value(static_cast<int64_t>(file.size()));
    if (output) {
      out.key("path").value(*output);
    } else {
      out.key("path").null();
    }
    out.key("name").value(spec.name);
    out.key("source").value(loaded.source);
    if (chosen.name.empty()) {
      out.key("layer_type").null();
    } else {
      out.key("layer_type").value(chosen.name);
    }
    out.end_object();
    args.out() << out.str() << "\n";
    return 0;
  }
  args.err() << "rotary: wrote " << where << ": " << exported.tensor_name << " (" << shape << ") "
             << to_string(exported.dtype) << ", " << file.size() << " bytes, format " << to_string(options.format)
             << ", " << spec.name << (chosen.name.empty() ? "" : ", layer type " + chosen.name) << "\n";
  return 0;
}

}  // namespace rotary::cli
