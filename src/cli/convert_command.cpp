// src/cli/convert_command.cpp: `rotary convert-weights`: a safetensors checkpoint's q and k rows
// reordered between interleaved and half-split RoPE pairing (include/rotary/convert.hpp;
// docs/interop.md, "Converting checkpoints between pairing conventions").
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "rotary/convert.hpp"
#include "rotary/error.hpp"
#include "core/shape_text.hpp"

namespace rotary::cli {

const char* const kConvertWeightsHelp =
    "usage: rotary convert-weights --config CONFIG --to interleaved|half-split IN OUT\n"
    "                              [--q-module M[,M...]] [--k-module M[,M...]] [--dry-run]\n"
    "\n"
    "Reorders the rows of a checkpoint's q and k projections (weights, biases, per-head norm\n"
    "weights) within each head's rotary block, so that a model trained with one RoPE pairing runs\n"
    "with the other:\n"
    "  interleaved  pairs (2i, 2i+1): Meta's original checkpoints, GGUF, DeepSeek's rope dims\n"
    "  half-split   pairs (i, i + rotary_dim/2): Hugging Face transformers (rotate_half)\n"
    "Every other tensor, and the header, are copied bit for bit; converting back gives the input\n"
    "byte for byte. Outputs are written to temporary names and renamed: never half written.\n"
    "\n"
    "IN and OUT:\n"
    "  IN.safetensors           OUT is the converted file\n"
    "  a model folder           holding model.safetensors, or a sharded checkpoint:\n"
    "  (or its *.index.json)    model.safetensors.index.json and the shards it names. OUT is a new\n"
    "                           folder: each .safetensors file converted under its name, the index\n"
    "                           unchanged (no name, shape or size changes), the folder's other files\n"
    "                           (config.json, tokenizer files, ...) copied. Left out, and listed:\n"
    "                           sub-folders and weights in other files (*.bin, *.pth, other\n"
    "                           .safetensors), which would keep the old row order. One file at a\n"
    "                           time; built in a temporary folder beside OUT, renamed at the end.\n"
    "\n"
    "  --config CONFIG  the model's config.json (or a folder holding one), or Meta's params.json:\n"
    "                   num_attention_heads, num_key_value_heads, head_dim (or hidden_size / heads),\n"
    "                   partial rotary (partial_rotary_factor, rotary_pct: the leading rotary dims of\n"
    "                   each head), DeepSeek MLA (qk_nope_head_dim, qk_rope_head_dim, kv_lora_rank)\n"
    "  --to PAIRING     interleaved, also gptj (half-split -> interleaved, as llama.cpp's\n"
    "                   convert_hf_to_gguf.py), or half-split, also neox (interleaved -> half-split,\n"
    "                   as transformers' convert_llama_weights_to_hf.py); the names --style takes\n"
    "  --q-module M     the q modules, comma-separated; a tensor MODULE.weight / MODULE.bias matches\n"
    "                   when MODULE is M or ends with .M (default self_attn.q_proj, self_attn.q_norm,\n"
    "                   attention.wq; DeepSeek MLA: self_attn.q_proj, self_attn.q_b_proj)\n"
    "  --k-module M     the k modules (default self_attn.k_proj, self_attn.k_norm, attention.wk;\n"
    "                   DeepSeek MLA: self_attn.kv_a_proj_with_mqa)\n"
    "  --dry-run        read and check everything, print what would be permuted, write nothing\n"
    "\n"
    "Refused, with the tensor and the value named, before anything is written: a malformed\n"
    "safetensors file; a q/k tensor whose rows do not fit heads x head_dim; a q/k tensor that is not\n"
    "F32, F64, F16 or BF16, or a quantized one (q_proj.qweight); a fused projection (qkv_proj,\n"
    "query_key_value); OUT naming IN; for a folder, an OUT that exists, a shard the index names\n"
    "that is missing, an index and a shard that disagree on the tensors it holds.\n"
    "\n"
    "Exit status: 0 converted (or checked, with --dry-run); 2 for any error, a refusal or a bad\n"
    "argument alike, with nothing written (as every rotary command).\n";

namespace {

std::vector<std::string> split_modules(const std::string& flag, const std::optional<std::string>& value) {
  std::vector<std::string> modules;
  if (!value) return modules;
  size_t start = 0;
  while (start <= value->size()) {
    const size_t comma = value->find(',', start);
    const std::string item = value->substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (item.empty()) {
      throw UsageError(detail::concat("convert-weights: ", flag, " must be module paths separated by commas (got \"",
                                      *value, "\", which has an empty one)"));
    }
    modules.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return modules;
}

const char* pairing_name(Style style) { return style == Style::GPTJ ? "interleaved" : "half-split"; }

}  // namespace

int run_convert_weights(Args& args) {
  const std::optional<std::string> config_arg = args.value("--config", "a config.json, a model folder or params.json");
  const std::optional<std::string> to = args.value("--to", "interleaved or half-split");
  const std::optional<std::string> q_modules = args.value("--q-module", "module paths");
  const std::optional<std::string> k_modules = args.value("--k-module", "module paths");
  ConvertOptions options;
  options.dry_run = args.has_switch("--dry-run");
  const std::optional<std::string> in_path = args.positional();
  const std::optional<std::string> out_path = args.positional();
  args.finish();
  if (!config_arg) throw UsageError("convert-weights: --config is required (the model's config.json or params.json)");
  if (!to) throw UsageError("convert-weights: --to is required (interleaved or half-split)");
  // The pairing names every command takes (parse_style: --style neox|gptj, and the aliases).
  if (const std::optional<Style> style = parse_style(*to)) {
    options.to = *style;
  } else {
    const std::optional<std::string> near =
        nearest(*to, {"interleaved", "half-split", "gptj", "neox", "gpt-j", "gpt-neox", "half_split"});
    throw UsageError(detail::concat("convert-weights: --to must be interleaved (or gptj) or half-split (or neox) (got \"",
                                    *to, "\")", near ? "; did you mean " + *near + "?" : std::string()));
  }
  if (!in_path || !out_path) {
    throw UsageError(detail::concat("convert-weights: IN and OUT are required (a .safetensors file and the output "
                                    "file, or a model folder and a new folder) (got ",
                                    in_path ? "IN only" : "neither", ")"));
  }
  options.q_modules = split_modules("--q-module", q_modules);
  options.k_modules = split_modules("--k-module", k_modules);
  const std::string config_path = config_file_path("convert-weights", "--config", *config_arg);
  const CheckpointGeometry geometry = load_checkpoint_geometry(config_path);
  if (args.parse_only()) return 0;

  std::ostream& out = args.out();
  const CheckpointConversion conversion = convert_checkpoint(*in_path, *out_path, geometry, options);
  const ConvertResult& result = conversion.total;
  const bool folder = conversion.layout != CheckpointLayout::File;
  const Style from = options.to == Style::GPTJ ? Style::NeoX : Style::GPTJ;
  out << "convert-weights: " << *in_path << " -> " << (options.dry_run ? "(dry run) " : "") << *out_path << "\n";
  if (conversion.layout == CheckpointLayout::Sharded) {
    out << "checkpoint: sharded, " << conversion.shards.size() << " files (" << conversion.input << ")\n";
  } else if (folder) {
    out << "checkpoint: " << conversion.input << "\n";
  }
  out << "pairing: " << pairing_name(from) << " -> " << pairing_name(options.to)
      << (options.to == Style::GPTJ ? " (pairs (i, i + R/2) become (2i, 2i+1))" : " (pairs (2i, 2i+1) become (i, i + R/2))")
      << "\n";
  out << "config: " << config_path << ": " << geometry.num_attention_heads << " heads, " << geometry.num_key_value_heads
      << " kv heads, head_dim " << geometry.head_dim << ", rotary rows [" << geometry.rotary_offset << ", "
      << geometry.rotary_offset + geometry.rotary_dim << ") of each head";
  if (geometry.mla()) out << ", MLA kv_lora_rank " << geometry.kv_lora_rank;
  out << "; its RoPE pairs " << pairing_name(geometry.config_pairing) << "\n";
  out << (options.dry_run ? "would permute " : "permuted ") << result.permuted.size() << " tensors:\n";
  for (const PermutedTensor& t : result.permuted) {
    out << format_line("  %-56s %s %-5s %-14s %lld head%s, rows [%lld, %lld) of %lld\n", t.name.c_str(), t.role.c_str(),
                       t.dtype.c_str(), json_shape_text(t.shape).c_str(), static_cast<long long>(t.heads),
                       t.heads == 1 ? "" : "s", static_cast<long long>(t.offset),
                       static_cast<long long>(t.offset + t.rotary_rows), static_cast<long long>(t.head_rows));
  }
  out << "copied unchanged: " << result.copied << " tensors\n";
  if (folder) {
    out << "files:\n";
    for (const ShardConversion& shard : conversion.shards) {
      out << format_line("  %-40s permuted %lld, copied %lld tensors (%lld bytes)\n", shard.name.c_str(),
                         static_cast<long long>(shard.permuted), static_cast<long long>(shard.copied),
                         static_cast<long long>(shard.file_bytes));
    }
    if (!conversion.index_name.empty()) out << "  " << conversion.index_name << " (unchanged)\n";
    for (const std::string& name : conversion.copied_files) out << "  " << name << " (copied)\n";
  }
  if (result.permuted.empty()) {
    args.err() << "rotary: warning: no tensor matched the q or k modules; " << *out_path
               << (options.dry_run ? " would be" : " is") << " a copy of " << *in_path
               << " (name the modules with --q-module / --k-module)\n";
  }
  if (!conversion.left_out.empty()) {
    std::string names;
    for (const std::string& name : conversion.left_out) names += (names.empty() ? "" : ", ") + name;
    args.err() << "rotary: warning: " << (options.dry_run ? "would leave out of " : "left out of ") << *out_path << ": "
               << names << " (sub-folders and weights that were not converted)\n";
  }
  out << (options.dry_run ? std::string("dry run: nothing written\n")
                          : detail::concat("wrote ", *out_path, folder && out_path->back() != '/' ? "/" : "", " (",
                                           folder ? detail::concat(conversion.shards.size(), " safetensors files, ") : "",
                                           result.file_bytes, " bytes)\n"));
  return 0;
}

}  // namespace rotary::cli
