// src/interop/convert.cpp: checkpoint conversion between RoPE's pairing conventions
// (include/rotary/convert.hpp; the permutation is transformers' `permute` in
// models/llama/convert_llama_weights_to_hf.py and llama.cpp's LlamaModel.permute in
// convert_hf_to_gguf.py; docs/interop.md, "Converting checkpoints between pairing conventions").
#include "rotary/convert.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/atomic_file.hpp"
#include "core/json.hpp"
#include "interop/safetensors.hpp"
#include "rotary/error.hpp"
#include "rotary/hf_config.hpp"

namespace rotary {
namespace {

// A positive integer field of the config, at the top level or under text_config (as
// parse_hf_config looks fields up), or nullopt when absent or null.
std::optional<int64_t> positive_field(const json::Value& root, std::string_view key, std::string_view source) {
  const json::Value* value = root.find(key);
  std::string path(key);
  if (value == nullptr || value->is_null()) {
    if (const json::Value* text = root.find("text_config"); text != nullptr && text->is_object()) {
      value = text->find(key);
      path = "text_config." + std::string(key);
    }
  }
  if (value == nullptr || value->is_null()) return std::nullopt;
  if (!value->is_number() || !value->is_integer() || value->as_int64() <= 0) {
    throw ConfigError(detail::concat(source, ":", value->location().line, ": ", path,
                                     " must be a positive integer (got ", value->describe(), ")"));
  }
  return value->as_int64();
}

// Meta's params.json: {"dim": 4096, "n_heads": 32, "n_kv_heads": 8, "head_dim": 128 (Mistral), ...}.
CheckpointGeometry meta_params_geometry(const json::Value& root, std::string_view source) {
  CheckpointGeometry geometry;
  geometry.source = std::string(source);
  geometry.config_pairing = Style::GPTJ;  // Meta's reference code rotates complex pairs (2i, 2i+1)
  const std::optional<int64_t> heads = positive_field(root, "n_heads", source);
  const std::optional<int64_t> kv_heads = positive_field(root, "n_kv_heads", source);
  const std::optional<int64_t> dim = positive_field(root, "dim", source);
  const std::optional<int64_t> head_dim = positive_field(root, "head_dim", source);
  if (!heads) throw ConfigError(detail::concat(source, ": n_heads must be a positive integer (got null)"));
  geometry.num_attention_heads = *heads;
  geometry.num_key_value_heads = kv_heads.value_or(*heads);
  if (head_dim) {
    geometry.head_dim = *head_dim;
  } else if (dim) {
    if (*dim % *heads != 0) {
      throw ConfigError(detail::concat(source, ": dim ", *dim, " must be a multiple of n_heads ", *heads,
                                       " (or give head_dim)"));
    }
    geometry.head_dim = *dim / *heads;
  } else {
    throw ConfigError(detail::concat(source, ": head_dim is missing: give head_dim, or dim and n_heads"));
  }
  if (geometry.num_attention_heads % geometry.num_key_value_heads != 0) {
    throw ConfigError(detail::concat(source, ": n_kv_heads must divide n_heads ", geometry.num_attention_heads,
                                     " (got ", geometry.num_key_value_heads, ")"));
  }
  if (geometry.head_dim % 2 != 0) {
    throw ConfigError(detail::concat(source, ": head_dim must be even to hold RoPE pairs (got ", geometry.head_dim, ")"));
  }
  geometry.rotary_dim = geometry.head_dim;
  return geometry;
}

CheckpointGeometry hf_geometry(std::string_view text, const json::Value& root, std::string_view source) {
  const HfRopeConfig config = parse_hf_config(text, source);
  const RopeSpec& spec = config.spec;
  for (const auto& [type, other] : config.layer_type_specs) {
    if (other.head_dim != spec.head_dim || other.rotary_dim != spec.rotary_dim) {
      throw ConfigError(detail::concat(source, ": layer type ", type, " rotates ", other.rotary_dim, " of ",
                                       other.head_dim, " dims per head but the main layers ", spec.rotary_dim, " of ",
                                       spec.head_dim, "; rotary converts checkpoints with one geometry for every layer"));
    }
  }
  CheckpointGeometry geometry;
  geometry.source = std::string(source);
  geometry.config_pairing = spec.style;
  geometry.num_attention_heads = spec.num_attention_heads;
  geometry.num_key_value_heads = spec.num_key_value_heads;
  if (geometry.num_attention_heads <= 0) {
    throw ConfigError(detail::concat(source, ": num_attention_heads is missing: the q and k rows are split per head"));
  }
  const std::optional<int64_t> kv_lora_rank = positive_field(root, "kv_lora_rank", source);
  const std::optional<int64_t> rope_dim = positive_field(root, "qk_rope_head_dim", source);
  if (kv_lora_rank || rope_dim) {
    // DeepSeek V2 / V3 multi-head latent attention (transformers' modeling_deepseek_v3.py):
    // q heads are [qk_nope_head_dim | qk_rope_head_dim] rows; kv_a_proj_with_mqa is
    // [kv_lora_rank latent rows | qk_rope_head_dim rows of the one shared rotary key].
    const std::optional<int64_t> nope_dim = positive_field(root, "qk_nope_head_dim", source);
    if (!kv_lora_rank || !rope_dim || !nope_dim) {
      throw ConfigError(detail::concat(
          source, ": a DeepSeek multi-head latent attention config needs kv_lora_rank, qk_rope_head_dim and "
                  "qk_nope_head_dim (got ",
          kv_lora_rank ? "kv_lora_rank" : "no kv_lora_rank", ", ", rope_dim ? "qk_rope_head_dim" : "no qk_rope_head_dim",
          ", ", nope_dim ? "qk_nope_head_dim" : "no qk_nope_head_dim", ")"));
    }
    if (*rope_dim % 2 != 0) {
      throw ConfigError(detail::concat(source, ": qk_rope_head_dim must be even to hold RoPE pairs (got ", *rope_dim, ")"));
    }
    geometry.head_dim = *nope_dim + *rope_dim;
    geometry.rotary_dim = *rope_dim;
    geometry.rotary_offset = *nope_dim;
    geometry.kv_lora_rank = *kv_lora_rank;
    return geometry;
  }
  geometry.head_dim = spec.head_dim;
  geometry.rotary_dim = spec.rotary_dim;
  if (geometry.rotary_dim < 2 || geometry.rotary_dim % 2 != 0 || geometry.rotary_dim > geometry.head_dim) {
    throw ConfigError(detail::concat(source, ": the rotary dims must be an even number in [2, head_dim ",
                                     geometry.head_dim, "] (got ", geometry.rotary_dim, ")"));
  }
  return geometry;
}

bool ends_with(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

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

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

struct Plan {
  PermutedTensor tensor;
  int64_t data_offset = 0;  // in the file
  int64_t row_bytes = 0;
  int64_t bytes = 0;  // the whole tensor's, from data_offset
};

}  // namespace

CheckpointGeometry checkpoint_geometry(std::string_view config_json, std::string_view source) {
  const json::Value root = json::parse(config_json, source);
  if (!root.is_object()) {
    throw ConfigError(detail::concat(source, ": a config must be a JSON object (got ", root.describe(), ")"));
  }
  if (root.find("n_heads") != nullptr && root.find("num_attention_heads") == nullptr) {
    return meta_params_geometry(root, source);
  }
  return hf_geometry(config_json, root, source);
}

CheckpointGeometry load_checkpoint_geometry(const std::string& path) {
  // parse_file names an unreadable path and its reason, and refuses a file far larger than any
  // config (a weights file given by mistake) before reading it whole.
  json::parse_file(path);
  std::ifstream in(path, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return checkpoint_geometry(text, path);
}

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

namespace {

// Every check of a conversion and what it will do, from the header alone: the tensors to permute
// (in header order) and the counts. Nothing is read from the data buffer.
struct ConversionPlan {
  ConvertResult result;
  std::vector<Plan> plans;
};

ConversionPlan plan_conversion(const safetensors::Header& header, int64_t file_size,
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
                                 shape_text(entry.shape), "; a projection weight is [rows, inputs], a bias or norm "
                                 "weight [rows]"));
    }
    if (leaf == "weight" && vector && rows == head_rows) {
      heads = 1;  // a norm weight shared by every head (Qwen3's q_norm / k_norm over head_dim)
    } else if (rows != expected_rows) {
      throw Error(detail::concat(source, ": tensor ", json::quote(entry.name), " (", role, ") has ", rows,
                                 " rows (shape ", shape_text(entry.shape), "), but the config (", geometry.source,
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

// The bytes [offset, offset + size) of the file open as `fd`, into `out` (resized). A read that
// ends early means the file shrank since it was measured: an Error, as is a read error.
void read_exactly(int fd, int64_t offset, int64_t size, std::string& out, const std::string& path, int64_t file_size) {
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

// The pieces the data goes through: large enough for few system calls, small beside any
// machine's memory.
constexpr int64_t kCopyBytes = int64_t{8} << 20;

// An input file open for reading (a regular file; a symlink is followed), with its size and
// modification time when opened, to tell whether it changed while it was read.
struct InputFile {
  explicit InputFile(const std::string& file_path) : path(file_path) {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw Error(detail::concat("convert-weights: cannot read ", path, ": ", std::strerror(errno)));
    if (::fstat(fd, &info) != 0) {
      const int error = errno;
      ::close(fd);
      throw Error(detail::concat("convert-weights: cannot read ", path, ": ", std::strerror(error)));
    }
    if (!S_ISREG(info.st_mode)) {
      ::close(fd);
      throw Error(detail::concat("convert-weights: ", path, " is not a regular file"));
    }
    size = static_cast<int64_t>(info.st_size);
  }
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  ~InputFile() { ::close(fd); }

  // The safetensors header, read and checked whole (safetensors::parse_prefix).
  safetensors::Header header() const {
    std::string prefix;
    read_exactly(fd, 0, std::min<int64_t>(size, 8), prefix, path, size);
    read_exactly(fd, 0, std::min(size, safetensors::header_end(prefix)), prefix, path, size);
    return safetensors::parse_prefix(prefix, size, path);
  }

  // Throws when the file's size or modification time differs from when it was opened.
  void check_unchanged() const {
    struct stat after {};
    if (::fstat(fd, &after) != 0 || after.st_size != info.st_size || after.st_mtim.tv_sec != info.st_mtim.tv_sec ||
        after.st_mtim.tv_nsec != info.st_mtim.tv_nsec) {
      throw Error(detail::concat("convert-weights: ", path, " changed while it was read (", size,
                                 " bytes expected); nothing was written"));
    }
  }

  std::string path;
  int fd = -1;
  struct stat info {};
  int64_t size = 0;
};

}  // namespace

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


namespace {

namespace fs = std::filesystem;

// Hugging Face's names (transformers' SAFE_WEIGHTS_NAME and SAFE_WEIGHTS_INDEX_NAME).
constexpr std::string_view kSingleFileName = "model.safetensors";
constexpr std::string_view kIndexName = "model.safetensors.index.json";
// An index is a few MB for the largest models (one line per tensor); the JSON reader's limit.
constexpr int64_t kMaxIndexBytes = int64_t{64} << 20;

// What `in_path` holds, and for a folder, the safetensors files to convert and the index.
struct CheckpointFiles {
  CheckpointLayout layout = CheckpointLayout::File;
  fs::path folder;
  std::string index_name;                 // Sharded
  std::string index_bytes;                // Sharded: written back unchanged
  std::vector<std::string> files;         // Folder, Sharded: names in the folder, sorted
  // Sharded: the file the index maps each tensor to, and the tensors it maps to each file.
  std::unordered_map<std::string, std::string> shard_of;
  std::map<std::string, std::vector<std::string>> tensors_of;
};

bool regular_file(const fs::path& path) {
  std::error_code ignored;
  return fs::is_regular_file(path, ignored);  // follows symlinks: a Hugging Face cache snapshot links its files
}

bool ends_with_any(std::string_view name, std::initializer_list<std::string_view> suffixes) {
  for (const std::string_view suffix : suffixes) {
    if (ends_with(name, suffix)) return true;
  }
  return false;
}

// Files of weights in some format: none of them is reordered by this conversion, so a folder's
// copy leaves them out rather than ship them, unconverted, beside the converted rows. The
// *.index.json files are the indexes of such weights (pytorch_model.bin.index.json).
bool weights_file(std::string_view name) {
  return ends_with_any(name, {".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".ggml", ".h5", ".msgpack",
                              ".onnx", ".onnx_data", ".npz", ".npy", ".pkl", ".pickle", ".tflite", ".index.json"});
}

// The whole of a small file (an index), at most `limit` bytes.
std::string read_small_file(const std::string& path, int64_t limit) {
  const InputFile input(path);
  if (input.size > limit) {
    throw Error(detail::concat("convert-weights: ", path, " is ", input.size, " bytes, more than an index can be (",
                               limit, ")"));
  }
  std::string bytes;
  read_exactly(input.fd, 0, input.size, bytes, path, input.size);
  return bytes;
}

// Reads and checks a sharded checkpoint's index: {"weight_map": {"<tensor>": "<file>", ...}, ...}
// (transformers' modeling_utils.load_sharded_checkpoint reads the same), each tensor once, each
// file a plain .safetensors name in the index's folder.
void read_index(CheckpointFiles& files, const std::string& index_path) {
  files.index_bytes = read_small_file(index_path, kMaxIndexBytes);
  const json::Value root = json::parse(files.index_bytes, index_path);
  const json::Value* weight_map = root.is_object() ? root.find("weight_map") : nullptr;
  if (weight_map == nullptr || !weight_map->is_object()) {
    throw Error(detail::concat(index_path, ": a sharded checkpoint's index must be a JSON object with a weight_map "
                                           "{tensor: shard file} (got ",
                               weight_map != nullptr ? "weight_map " + weight_map->describe() : root.describe(), ")"));
  }
  if (weight_map->as_object().empty()) {
    throw Error(detail::concat(index_path, ": weight_map names no tensor"));
  }
  std::unordered_map<std::string, std::string>& shard_of = files.shard_of;
  std::map<std::string, std::vector<std::string>>& tensors_of = files.tensors_of;
  for (const auto& [tensor, file] : weight_map->as_object()) {
    const std::string where = detail::concat(index_path, ": weight_map[", json::quote(tensor), "]");
    if (!file.is_string()) {
      throw Error(detail::concat(where, " must be the name of a shard file (got ", file.describe(), ")"));
    }
    const std::string& name = file.as_string();
    // A plain name: a shard outside the folder ("../x", "/x") would be read from, and written to,
    // places the user did not give.
    if (name.find('/') != std::string::npos || name.find('\\') != std::string::npos ||
        name.find('\0') != std::string::npos || !ends_with(name, ".safetensors") || name == ".safetensors") {
      throw Error(detail::concat(where, " must be a .safetensors file name in the index's folder, without a path (got ",
                                 json::quote(name), ")"));
    }
    if (const auto [it, inserted] = shard_of.emplace(tensor, name); !inserted) {
      throw Error(detail::concat(index_path, ": tensor ", json::quote(tensor), " appears twice in weight_map (",
                                 json::quote(it->second), " and ", json::quote(name), ")"));
    }
    tensors_of[name].push_back(tensor);
  }
  std::string missing;
  for (const auto& [name, tensors] : tensors_of) {
    files.files.push_back(name);
    if (!regular_file(files.folder / name)) missing += (missing.empty() ? "" : ", ") + name;
  }
  if (!missing.empty()) {
    throw Error(detail::concat(index_path, ": the index names shard files that ", files.folder.string(),
                               " does not hold: ", missing, "; nothing was written"));
  }
}

CheckpointFiles find_checkpoint(const std::string& in_path) {
  CheckpointFiles files;
  std::error_code ignored;
  if (fs::is_directory(in_path, ignored)) {
    files.folder = in_path;
    const bool sharded = regular_file(files.folder / kIndexName);
    const bool single = regular_file(files.folder / kSingleFileName);
    if (sharded && single) {
      throw Error(detail::concat("convert-weights: the folder ", in_path, " holds both ", kSingleFileName, " and ",
                                 kIndexName, ", so which is the checkpoint is unclear; give IN as ",
                                 (files.folder / kSingleFileName).string(), " or ", (files.folder / kIndexName).string()));
    }
    if (sharded) {
      files.layout = CheckpointLayout::Sharded;
      files.index_name = std::string(kIndexName);
      read_index(files, (files.folder / kIndexName).string());
    } else if (single) {
      files.layout = CheckpointLayout::Folder;
      files.files.emplace_back(kSingleFileName);
    } else {
      throw Error(detail::concat("convert-weights: the folder ", in_path, " holds neither ", kSingleFileName, " nor ",
                                 kIndexName, " (give a .safetensors file, or a sharded checkpoint's *.index.json)"));
    }
    return files;
  }
  if (ends_with(in_path, ".safetensors.index.json")) {
    files.layout = CheckpointLayout::Sharded;
    const fs::path index(in_path);
    files.folder = index.has_parent_path() ? index.parent_path() : fs::path(".");
    files.index_name = index.filename().string();
    read_index(files, in_path);
  }
  return files;
}

// A folder's output: `out_path` as a folder name, without trailing slashes; it must not exist.
fs::path new_folder_path(const std::string& out_path) {
  std::string trimmed = out_path;
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
  const fs::path path(trimmed);
  const std::string name = path.filename().string();
  if (name.empty() || name == "." || name == ".." || trimmed == "/") {
    throw Error(detail::concat("convert-weights: OUT must name a new folder for the converted checkpoint (got ",
                               out_path, ")"));
  }
  if (ends_with(name, ".safetensors")) {
    throw Error(detail::concat("convert-weights: a model folder converts into a new folder, but OUT ", out_path,
                               " names a .safetensors file (give a folder, or give IN as the folder's .safetensors file)"));
  }
  struct stat status {};
  if (::lstat(trimmed.c_str(), &status) == 0) {
    throw Error(detail::concat("convert-weights: OUT ", out_path, " exists; a model folder converts into a new folder "
                               "(remove it or give another name)"));
  }
  return path;
}

// Copies `from` to `to` through a temporary file and a rename, in kCopyBytes pieces.
void copy_file(const std::string& from, const std::string& to) {
  const InputFile input(from);
  detail::write_file_atomically(
      to,
      [&](detail::AtomicFileSet::Sink& sink) {
        std::string piece;
        for (int64_t at = 0; at < input.size; at += kCopyBytes) {
          read_exactly(input.fd, at, std::min(kCopyBytes, input.size - at), piece, from, input.size);
          sink.write(piece);
        }
        input.check_unchanged();
      },
      "convert-weights");
}

void sync_directory(const fs::path& path) {
  const int fd = ::open(path.empty() ? "." : path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;  // durability only: the rename has been made either way
  ::fsync(fd);
  ::close(fd);
}

// A folder beside `target` that did not exist: "<name>.tmp-<pid>-<8 hex digits>", made with the
// process's umask (as the renamed folder should be).
fs::path make_temp_folder(const fs::path& target) {
  std::random_device entropy;
  const fs::path parent = target.has_parent_path() ? target.parent_path() : fs::path(".");
  for (int attempt = 0;; ++attempt) {
    char suffix[40];
    std::snprintf(suffix, sizeof suffix, ".tmp-%ld-%08x", static_cast<long>(::getpid()), static_cast<unsigned>(entropy()));
    const fs::path temp = parent / (target.filename().string() + suffix);
    if (::mkdir(temp.c_str(), 0777) == 0) return temp;
    if (errno != EEXIST || attempt == 100) {
      throw Error(detail::concat("convert-weights: cannot create a folder beside ", target.string(), " (",
                                 temp.string(), "): ", std::strerror(errno)));
    }
  }
}

}  // namespace

CheckpointConversion convert_checkpoint(const std::string& in_path, const std::string& out_path,
                                        const CheckpointGeometry& geometry, const ConvertOptions& options) {
  CheckpointFiles files = find_checkpoint(in_path);
  CheckpointConversion conversion;
  conversion.layout = files.layout;
  if (files.layout == CheckpointLayout::File) {
    conversion.input = in_path;
    conversion.total = convert_weights(in_path, out_path, geometry, options);
    return conversion;
  }
  conversion.index_name = files.index_name;
  conversion.input = (files.folder / (files.layout == CheckpointLayout::Sharded ? files.index_name : files.files[0])).string();
  const fs::path out_folder = new_folder_path(out_path);

  // Every check before anything is written: each file's header against the index and the geometry.
  for (const std::string& name : files.files) {
    const std::string path = (files.folder / name).string();
    const InputFile input(path);
    const safetensors::Header header = input.header();
    if (files.layout == CheckpointLayout::Sharded) {
      // The index and the shard agree: the tensors it maps to this file are the ones it holds.
      std::unordered_set<std::string> held;
      for (const safetensors::TensorEntry& entry : header.tensors) {
        held.insert(entry.name);
        const auto listed = files.shard_of.find(entry.name);
        if (listed != files.shard_of.end() && listed->second == name) continue;
        throw Error(detail::concat(path, ": holds tensor ", json::quote(entry.name), ", which the index ",
                                   conversion.input, " ",
                                   listed == files.shard_of.end() ? std::string("does not list")
                                                                  : "maps to " + listed->second,
                                   "; nothing was written"));
      }
      for (const std::string& tensor : files.tensors_of.at(name)) {
        if (held.count(tensor) == 0) {
          throw Error(detail::concat(conversion.input, ": weight_map maps tensor ", json::quote(tensor), " to ", name,
                                     ", which does not hold it; nothing was written"));
        }
      }
    }
    ConversionPlan plan = plan_conversion(header, input.size, geometry, options, path);
    conversion.shards.push_back({name, static_cast<int64_t>(plan.plans.size()), plan.result.copied, input.size});
    for (Plan& p : plan.plans) conversion.total.permuted.push_back(std::move(p.tensor));
    conversion.total.copied += plan.result.copied;
    conversion.total.file_bytes += input.size;
  }

  // The folder's other entries: copied, or left out (sub-folders, weights in other files).
  std::error_code error;
  for (fs::directory_iterator it(files.folder, error), end; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (name == files.index_name || std::find(files.files.begin(), files.files.end(), name) != files.files.end()) continue;
    std::error_code ignored;
    if (fs::is_directory(it->path(), ignored)) {
      conversion.left_out.push_back(name + "/");
    } else if (regular_file(it->path()) && !weights_file(name)) {
      conversion.copied_files.push_back(name);
    } else {
      conversion.left_out.push_back(name);
    }
  }
  if (error) {
    throw Error(detail::concat("convert-weights: cannot list ", files.folder.string(), ": ", error.message()));
  }
  std::sort(conversion.copied_files.begin(), conversion.copied_files.end());
  std::sort(conversion.left_out.begin(), conversion.left_out.end());
  if (options.dry_run) return conversion;

  // Built in a temporary folder beside OUT and renamed to it: OUT is the whole converted
  // checkpoint or does not exist.
  const fs::path temp = make_temp_folder(out_folder);
  try {
    conversion.total = {};
    for (ShardConversion& shard : conversion.shards) {
      ConvertResult result =
          convert_weights((files.folder / shard.name).string(), (temp / shard.name).string(), geometry, options);
      shard.permuted = static_cast<int64_t>(result.permuted.size());
      shard.copied = result.copied;
      shard.file_bytes = result.file_bytes;
      for (PermutedTensor& t : result.permuted) conversion.total.permuted.push_back(std::move(t));
      conversion.total.copied += result.copied;
      conversion.total.file_bytes += result.file_bytes;
    }
    if (files.layout == CheckpointLayout::Sharded) {
      detail::write_file_atomically((temp / files.index_name).string(), files.index_bytes, "convert-weights");
    }
    for (const std::string& name : conversion.copied_files) {
      copy_file((files.folder / name).string(), (temp / name).string());
    }
    sync_directory(temp);
    // RENAME_NOREPLACE: a folder that appeared at OUT since the check is refused, not replaced.
    if (::renameat2(AT_FDCWD, temp.c_str(), AT_FDCWD, out_folder.c_str(), RENAME_NOREPLACE) != 0) {
      int rename_error = errno;
      if (rename_error == EINVAL || rename_error == ENOSYS) {  // no RENAME_NOREPLACE on this file system
        struct stat status {};
        rename_error = ::lstat(out_folder.c_str(), &status) == 0          ? EEXIST
                       : std::rename(temp.c_str(), out_folder.c_str()) == 0 ? 0
                                                                            : errno;
      }
      if (rename_error != 0) {
        throw Error(detail::concat("convert-weights: cannot rename ", temp.string(), " to ", out_folder.string(), ": ",
                                   std::strerror(rename_error)));
      }
    }
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(temp, ignored);
    throw;
  }
  sync_directory(out_folder.has_parent_path() ? out_folder.parent_path() : fs::path("."));
  return conversion;
}

}  // namespace rotary
