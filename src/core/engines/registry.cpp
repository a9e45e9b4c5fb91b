// src/core/engines/registry.cpp: export_table() and the list of export formats, one row per
// engine. Each row's exporter lives in the engine's own file (vllm.cpp, flashinfer.cpp,
// flash_attn.cpp, transformer_engine.cpp, ggml.cpp); adding a format is its enum value
// (include/rotary/engine_export.hpp), its file and its row here.
#include <string>

#include "core/engines/engine_support.hpp"
#include "rotary/engine_export.hpp"
#include "rotary/error.hpp"

namespace rotary {

namespace {

struct EngineFormat {
  ExportFormat format;
  std::string_view name;
  std::string_view alias;  // another spelling parse_export_format accepts; "" for none
  ExportedArray (*exporter)(const RopeSpec& spec, const ExportOptions& options);
};
constexpr EngineFormat kFormats[] = {
    {ExportFormat::Vllm, "vllm", "", engines::export_vllm},
    {ExportFormat::FlashInfer, "flashinfer", "", engines::export_flashinfer},
    {ExportFormat::FlashAttn, "flash-attn", "flash_attn", engines::export_flash_attn},
    {ExportFormat::TransformerEngine, "transformer-engine", "transformer_engine", engines::export_transformer_engine},
    {ExportFormat::LlamaCppFreqFactors, "llama-cpp-freq-factors", "", engines::export_llama_cpp_freq_factors},
};

const EngineFormat* find_format(ExportFormat format) {
  for (const EngineFormat& f : kFormats) {
    if (f.format == format) return &f;
  }
  return nullptr;
}

std::string format_names() {
  std::string names;
  for (const EngineFormat& f : kFormats) names += (names.empty() ? "" : ", ") + std::string(f.name);
  return names;
}

}  // namespace

std::string_view to_string(ExportFormat format) {
  const EngineFormat* f = find_format(format);
  return f != nullptr ? f->name : "unknown";
}

std::optional<ExportFormat> parse_export_format(std::string_view name) {
  for (const EngineFormat& f : kFormats) {
    if (f.name == name || (!f.alias.empty() && f.alias == name)) return f.format;
  }
  // Spellings users reach for first: the project's full name, TransformerEngine's short one.
  if (name == "flash-attention") return ExportFormat::FlashAttn;
  if (name == "te") return ExportFormat::TransformerEngine;
  return std::nullopt;
}

std::vector<std::string_view> export_format_names() {
  std::vector<std::string_view> names;
  for (const EngineFormat& f : kFormats) names.push_back(f.name);
  return names;
}

ExportedArray export_table(const RopeSpec& spec, const ExportOptions& options) {
  validate(spec);
  const EngineFormat* f = find_format(options.format);
  if (f == nullptr) throw Error(detail::concat("export_table: format must be one of ", format_names()));
  if (options.format != ExportFormat::LlamaCppFreqFactors && options.factor_set != LongRopeFactorSet::None) {
    throw Error(detail::concat("export_table: factor_set is for format llama-cpp-freq-factors only (got format ",
                               f->name, ")"));
  }
  return f->exporter(spec, options);
}

}  // namespace rotary
