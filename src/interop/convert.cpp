// src/interop/convert.cpp: checkpoint conversion between RoPE's pairing conventions
// (include/rotary/convert.hpp; the permutation is transformers' `permute` in
// models/llama/convert_llama_weights_to_hf.py and llama.cpp's LlamaModel.permute in
// convert_hf_to_gguf.py; docs/interop.md, "Converting checkpoints between pairing conventions").
//
// This file holds the pairing row order, the plan of a conversion (every check, from the
// safetensors header alone) and the conversion of one file; the geometry read from a config is
// in convert_geometry.cpp, a model folder (index, shards, the other files) in
// convert_checkpoint.cpp, and what both conversion files share in conversion.hpp.
#include "rotary/convert.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "core/atomic_file.hpp"
#include "core/json.hpp"
#include "interop/conversion.hpp"
#include "interop/safetensors.hpp"
#include "rotary/error.hpp"
#include "core/shape_text.hpp"

namespace rotary {

bool detail::ends_with(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

namespace {

using detail::ConversionPlan;
using detail::ends_with;
using detail::InputFile;
using detail::kCopyBytes;
using detail::Plan;
using detail::plan_conversion;
using detail::read_exactly;

bool in_module(std::string_view module, const std::vector<std::string>& patterns) {
  for (const std::string& pattern : patterns) {
    if (module == pattern) return true;
    if (module.size() > pattern.size() && ends_with(module, pattern) &&
        module[module.size() - pattern.size() - 1] == '.') {
      return true;
    }
  }
  return false;
}

// Projections that hold q, k and v in one matrix: their q and k rows cannot be found without the
// model's own split (and GPT-NeoX interleaves them per head), so rotary refuses them rather than
// copying them unconverted.
constexpr std::string_view kFusedModules[] = {"qkv_proj", "query_key_value", "Wqkv", "wqkv", "c_attn", "qkv", "W_pack"};

// The dtypes whose rows rotary reorders: plain floating point. Integer and 8-bit tensors are
// quantized weights, whose scales are laid out by blocks of rows.
bool permutable_dtype(std::string_view dtype) {
  return dtype == "F64" || dtype == "F32" || dtype == "F16" || dtype == "BF16";
}

}  // namespace

std::vector<int64_t> pairing_row_order(int64_t rotary_rows, Style to) {
  if (rotary_rows < 2 || rotary_rows % 2 != 0) {
    throw Error(detail::concat("pairing_row_order: rotary_rows must be even and >= 2 (got ", rotary_rows, ")"));
  }
  const int64_t half = rotary_rows / 2;
  std::vector<int64_t> order(static_cast<size_t>(rotary_rows));
  for (int64_t j = 0; j < half; ++j) {
    for (int64_t t = 0; t < 2; ++t) {
      if (to == Style::GPTJ) {
        order[static_cast<size_t>(2 * j + t)] = t * half + j;  // new[2j + t] = old[t*R/2 + j]
      } else {
        order[static_cast<size_t>(t * half + j)] = 2 * j + t;  // new[t*R/2 + j] = old[2j + t]
      }
    }
  }
  return order;
}

ConversionPlan detail::plan_conversion(const safetensors::Header& header, int64_t file_size,
                                       const CheckpointGeometry& geometry, const ConvertOptions& options,
                                       std::string_view source) {
  if (options.to != Style::GPTJ && options.to != Style::NeoX) {
    throw Error(detail::concat("convert: to must be interleaved or half-split (got ", static_cast<int>(options.to), ")"));
  }
  if (geometry.num_attention_heads <= 0 || geometry.num_key_value_heads <= 0 || geometry.head_dim <= 0 ||
      geometry.rotary_dim < 2 || geometry.rotary_dim % 2 != 0 || geometry.rotary_offset < 0 ||
      geometry.rotary_offset > geometry.head_dim - geometry.rotary_dim || geometry.kv_lora_rank < 0) {
    throw Error(detail::concat("convert: invalid geometry from ", geometry.source, ": ", geometry.num_attention_heads,
                               " heads, ", geometry.num_key_value_heads, " kv heads, head_dim ", geometry.head_dim,
                               ", rotary rows [", geometry.rotary_offset, ", ",
                               geometry.rotary_offset + geometry.rotary_dim, ")"));
  }
  std::vector<std::string> q_modules = options.q_modules;
  std::vector<std::string> k_modules = options.k_modules;
  if (q_modules.empty()) {
    q_modules = geometry.mla() ? std::vector<std::string>{"self_attn.q_proj", "self_attn.q_b_proj"}
                               : std::vector<std::string>{"self_attn.q_proj", "self_attn.q_norm", "attention.wq"};
  }
  if (k_modules.empty()) {
    k_modules = geometry.mla() ? std::vector<std::string>{"self_attn.kv_a_proj_with_mqa"}
                               : std::vector<std::string>{"self_attn.k_proj", "self_attn.k_norm", "attention.wk"};
  }

  ConversionPlan conversion;
  ConvertResult& result = conversion.result;
  result.file_bytes = file_size;
  std::vector<Plan>& plans = conversion.plans;
  for (const safetensors::TensorEntry& entry : header.tensors) {
    const size_t dot = entry.name.rfind('.');
    const std::string_view module =
        dot == std::string::npos ? std::string_view() : std::string_view(entry.name).substr(0, dot);
    const std::string_view leaf =
        dot == std::string::npos ? std::string_view(entry.name) : std::string_view(entry.name).substr(dot + 1);
    const bool is_q = in_module(module, q_modules);
    const bool is_k = in_module(module, k_modules);
    if (!is_q && !is_k) {
      const size_t last_dot = module.rfind('.');
      const std::string_view last = last_dot == std::string_view::npos ? module : module.substr(last_dot + 1);
      for (std::string_view fused : kFusedModules) {
        if (last == fused) {
          throw Error(detail::concat(source, ": tensor ", json::quote(entry.name),
                                     " is a fused q/k/v projection; rotary converts separate q and k projections "
                                     "only (name them with --q-module / --k-module if these are not fused)"));
        }
      }
      ++result.copied;
      continue;
    }
    if (is_q && is_k) {
      throw Error(detail::concat(source, ": tensor ", json::quote(entry.name),
                                 " matches both the q and the k modules; give modules that tell them apart"));
    }
    const char* role = is_q ? "q" : "k";
    if (leaf != "weight" && leaf != "bias") {
      throw Error(detail::concat(source, ": tensor ", json::quote(entry.name), " belongs to the ", role,
                                 " projection but is not its weight or bias (a quantized checkpoint?); rotary "
                                 "converts unquantized float weights only"));
    }
    if (!permutable_dtype(entry.dtype)) {
      throw Error(detail::concat(source, ": tensor ", json::quote(entry.name), " (", role, ") has dtype ",
                                 entry.dtype, "; rotary reorders F32, F64, F16 and BF16 rows only (quantized "
                                 "weights carry per-block scales whose layout it does not know)"));
    }
    Plan plan;
    plan.tensor.name = entry.name;
    plan.tensor.role = role;
    plan.tensor.dtype = entry.dtype;
    plan.tensor.shape = entry.shape;
    int64_t heads = is_q ? geometry.num_attention_heads : geometry.num_key_value_heads;
    int64_t head_rows = geometry.head_dim;
    int64_t offset = geometry.rotary_offset;
    std::string layout = detail::concat(heads, " heads x head_dim ", head_rows);
    if (geometry.mla() && !is_q) {
      heads = 1;
      head_rows = geometry.kv_lora_rank + geometry.rotary_dim;
      offset = geometry.kv_lora_rank;
      layout = detail::concat("kv_lora_rank ", geometry.kv_lora_rank, " + qk_rope_head_dim ", geometry.rotary_dim);
    } else if (geometry.mla()) {
      layout = detail::concat(heads, " heads x (qk_nope_head_dim ", geometry.rotary_offset, " + qk_rope_head_dim ",
                              geometry.rotary_dim, ")");
    }
    const int64_t expected_rows = heads * head_rows;  // both from validated positive ints of a config
    const int64_t rows = entry.shape.empty() ? -1 : entry.shape[0];
    const bool weight_2d = leaf == "weight" && entry.shape.size() == 2;
    const bool vector = entry.shape.size() == 1;
    if (!weight_2d && !vector) {
      throw Error(detail::concat(source, ": tensor ", json::quote(entry.name), " (", role, ") has shape ",
                                 json_shape_text(entry.shape), "; a projection weight is [rows, inputs], a bias or norm "
                                 "weight [rows]"));
    }
    if (leaf == "weight" && vector && rows == head_rows) {
      heads = 1;  // a norm weight shared by every head (Qwen3's q_norm / k_norm over head_dim)
    } else if (rows != expected_rows) {
      throw Error(detail::concat(source, ": tensor ", json::quote(entry.name), " (", role, ") has ", rows,
                                 " rows (shape ", json_shape_text(entry.shape), "), but the config (", geometry.source,
                                 ") gives ", layout, " = ", expected_rows, " rows",
                                 leaf == "weight" && vector ? detail::concat(" (or ", head_rows, " for a norm shared by the heads)") : std::string()));
    }
    plan.tensor.heads = heads;
    plan.tensor.head_rows = head_rows;
    plan.tensor.offset = offset;
    plan.tensor.rotary_rows = geometry.rotary_dim;
    plan.data_offset = header.data_start + entry.begin;
    // rows > 0 and elements x size == span <= file size, so the row size fits too.
    plan.row_bytes = (entry.end - entry.begin) / rows;
    plan.bytes = entry.end - entry.begin;
    plans.push_back(plan);
  }

  return conversion;
}

namespace {

// Reorders the rotary rows of every head of one planned tensor, whose bytes start at `data`.
void permute_tensor(char* data, const Plan& plan, const std::vector<int64_t>& order, std::string& block) {
  const PermutedTensor& t = plan.tensor;
  const auto block_bytes = static_cast<size_t>(t.rotary_rows * plan.row_bytes);
  block.resize(block_bytes);
  for (int64_t h = 0; h < t.heads; ++h) {
    char* rows = data + (h * t.head_rows + t.offset) * plan.row_bytes;
    std::memcpy(block.data(), rows, block_bytes);
    for (int64_t r = 0; r < t.rotary_rows; ++r) {
      std::memcpy(rows + r * plan.row_bytes, block.data() + order[static_cast<size_t>(r)] * plan.row_bytes,
                  static_cast<size_t>(plan.row_bytes));
    }
  }
}

}  // namespace

void detail::read_exactly(int fd, int64_t offset, int64_t size, std::string& out, const std::string& path, int64_t file_size) {
  out.resize(static_cast<size_t>(size));
  int64_t done = 0;
  while (done < size) {
    const ssize_t got = ::pread(fd, out.data() + done, static_cast<size_t>(size - done), offset + done);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw Error(detail::concat("convert-weights: cannot read ", path, ": ", std::strerror(errno)));
    if (got == 0) {
      throw Error(detail::concat("convert-weights: ", path, " changed size while it was read (", file_size,
                                 " bytes expected)"));
    }
    done += got;
  }
}

ConvertResult convert_safetensors(std::string& file, const CheckpointGeometry& geometry, const ConvertOptions& options,
                                  std::string_view source) {
  const safetensors::Header header = safetensors::parse(file, source);
  ConversionPlan conversion = plan_conversion(header, static_cast<int64_t>(file.size()), geometry, options, source);
  ConvertResult& result = conversion.result;
  if (!options.dry_run) {
    const std::vector<int64_t> order = pairing_row_order(geometry.rotary_dim, options.to);
    std::string block;
    for (const Plan& plan : conversion.plans) permute_tensor(file.data() + plan.data_offset, plan, order, block);
  }
  for (Plan& plan : conversion.plans) result.permuted.push_back(std::move(plan.tensor));
  return result;
}

ConvertResult convert_weights(const std::string& in_path, const std::string& out_path,
                              const CheckpointGeometry& geometry, const ConvertOptions& options) {
  if (detail::same_file(in_path, out_path)) {
    throw Error(detail::concat("convert-weights: the output ", out_path, " is the input ", in_path,
                               "; write the converted checkpoint to a new file"));
  }
  const InputFile input(in_path);
  const int fd = input.fd;
  // Streamed: the header is read and checked whole, then the data buffer goes from the input to
  // the output in pieces (kCopyBytes, or one q / k tensor at a time, permuted on the way), so the
  // memory a conversion takes is its largest q / k tensor, not the file: a 15 GB single-file
  // checkpoint converts on a machine with less memory than that.
  const int64_t file_size = input.size;
  const safetensors::Header header = input.header();
  ConversionPlan conversion = plan_conversion(header, file_size, geometry, options, in_path);
  if (!options.dry_run) {
    // The tensors tile the data buffer (parse checked it), so in offset order the planned tensors
    // and the gaps between them cover the file once, front to back.
    std::vector<const Plan*> in_order;
    for (const Plan& plan : conversion.plans) in_order.push_back(&plan);
    std::sort(in_order.begin(), in_order.end(),
              [](const Plan* a, const Plan* b) { return a->data_offset < b->data_offset; });
    const std::vector<int64_t> order = pairing_row_order(geometry.rotary_dim, options.to);
    detail::write_file_atomically(
        out_path,
        [&](detail::AtomicFileSet::Sink& sink) {
          std::string piece, block;
          const auto copy = [&](int64_t from, int64_t to) {
            for (int64_t at = from; at < to; at += kCopyBytes) {
              read_exactly(fd, at, std::min(kCopyBytes, to - at), piece, in_path, file_size);
              sink.write(piece);
            }
          };
          int64_t at = 0;
          for (const Plan* plan : in_order) {
            copy(at, plan->data_offset);
            read_exactly(fd, plan->data_offset, plan->bytes, piece, in_path, file_size);
            permute_tensor(piece.data(), *plan, order, block);
            sink.write(piece);
            at = plan->data_offset + plan->bytes;
          }
          copy(at, file_size);
          // A file that grew, or was rewritten in place, while it was read would give a mix of
          // two files: refuse it (the temporary output is removed, the target left as it was).
          input.check_unchanged();
        },
        "convert-weights");
  }
  ConvertResult& result = conversion.result;
  for (Plan& plan : conversion.plans) result.permuted.push_back(std::move(plan.tensor));
  return result;
}

}  // namespace rotary
