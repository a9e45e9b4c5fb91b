// include/rotary/convert.hpp: converting a checkpoint's q and k projections between RoPE's two
// pairing conventions.
//
// RoPE rotates pairs of the query and key features of each head. Two layouts of the pairs exist:
//   interleaved  pairs (2i, 2i + 1): Meta's original Llama checkpoints, GGUF (llama.cpp's
//                LLAMA_ROPE_TYPE_NORM), DeepSeek V2/V3's rope dims, GPT-J;
//   half-split   pairs (i, i + rotary_dim/2): Hugging Face transformers' rotate_half (GPT-NeoX).
// A model trained with one runs with the other if the rows of its q and k projections (weight
// rows, bias entries, per-head norm weights) are reordered within each head's rotary block: the
// dot product q.k is a sum over features, so reordering q and k alike changes nothing else.
// The reorder, per head, for a rotary block of R rows (j < R/2, t in {0, 1}):
//   to half-split:   new[t * R/2 + j] = old[2j + t]
//   to interleaved:  new[2j + t]      = old[t * R/2 + j]
// This is transformers' `permute` in models/llama/convert_llama_weights_to_hf.py (Meta ->
// Hugging Face: w.view(n_heads, dim1 // n_heads // 2, 2, dim2).transpose(1, 2)) and llama.cpp's
// LlamaModel.permute in convert_hf_to_gguf.py (Hugging Face -> GGUF: reshape(n_head, 2, rows //
// n_head // 2, ...).swapaxes(1, 2), with n_head = num_key_value_heads for k). docs/interop.md
// has a worked example.
//
// Where the rotary block sits in a head's rows (CheckpointGeometry):
//   Llama family: rows [0, rotary_dim) of each head of head_dim rows (partial rotary, as GPT-NeoX
//                 and Phi: the leading rotary_dim rows; the rest are copied);
//   DeepSeek MLA: the last qk_rope_head_dim rows of each q head of qk_nope_head_dim +
//                 qk_rope_head_dim rows (q_proj or q_b_proj), and the last qk_rope_head_dim rows
//                 of kv_a_proj_with_mqa (kv_lora_rank + qk_rope_head_dim rows, one shared head),
//                 as transformers' modeling_deepseek_v3.py splits them.
// Every other tensor is copied bit for bit; so is the rest of each permuted tensor.
//
// Errors: rotary::Error (ConfigError for the config) naming the tensor, the argument and the value.
// Refused: a q/k tensor whose rows do not fit heads x head rows; a q/k tensor of an integer or
// 8-bit dtype (quantized weights carry scales laid out by row blocks that rotary does not know);
// a quantized or fused projection (q_proj.qweight, qkv_proj, query_key_value); a malformed file;
// writing over the input.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "rotary/spec.hpp"

namespace rotary {

// The attention geometry of a checkpoint: which rows of its q and k projections hold RoPE pairs.
struct CheckpointGeometry {
  std::string source;            // the config it was read from, for messages
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;          // rows per q / k head (MLA: qk_nope_head_dim + qk_rope_head_dim)
  int64_t rotary_dim = 0;        // rows of each head's rotary block (even, <= head_dim)
  int64_t rotary_offset = 0;     // first row of the block within a head (MLA: qk_nope_head_dim)
  // DeepSeek's multi-head latent attention: kv_a_proj_with_mqa holds kv_lora_rank latent rows,
  // then one shared key head of rotary_dim (= qk_rope_head_dim) rows. 0 when not MLA.
  int64_t kv_lora_rank = 0;
  bool mla() const { return kv_lora_rank > 0; }
  // The pairing the config says the model's RoPE uses (HF Llama: NeoX; rope_interleave,
  // DeepSeek, Meta's params.json: GPTJ). Informative: a checkpoint's row order is not in its config.
  Style config_pairing = Style::NeoX;
};

// The geometry from a Hugging Face config.json (num_attention_heads, num_key_value_heads,
// head_dim or hidden_size / num_attention_heads, partial_rotary_factor | rotary_pct |
// rotary_dim, DeepSeek's qk_nope_head_dim / qk_rope_head_dim / kv_lora_rank, text_config), read
// as parse_hf_config (include/rotary/hf_config.hpp) reads it, or from Meta's params.json (dim,
// n_heads, n_kv_heads, head_dim). Throws rotary::ConfigError naming the field and the value.
CheckpointGeometry checkpoint_geometry(std::string_view config_json, std::string_view source = "config.json");
CheckpointGeometry load_checkpoint_geometry(const std::string& path);

// For a rotary block of `rotary_rows` rows (even, >= 2): element r is the block row of the input
// that becomes row r of the output, when the pairs are reordered `to` the given pairing
// (Style::GPTJ = interleaved, Style::NeoX = half-split).
std::vector<int64_t> pairing_row_order(int64_t rotary_rows, Style to);

// Which tensors are q and k: a tensor belongs to a module when its name, less its last component
// (weight, bias), is the module path or ends with "." + the path. Empty lists take the defaults:
//   q: self_attn.q_proj, self_attn.q_norm, attention.wq   (MLA: self_attn.q_proj, self_attn.q_b_proj)
//   k: self_attn.k_proj, self_attn.k_norm, attention.wk   (MLA: self_attn.kv_a_proj_with_mqa)
struct ConvertOptions {
  Style to = Style::GPTJ;
  std::vector<std::string> q_modules;
  std::vector<std::string> k_modules;
  bool dry_run = false;  // check and plan everything, write nothing
};

// One permuted tensor: rows [h * head_rows + offset, h * head_rows + offset + rotary_rows) of each
// of `heads` heads were reordered.
struct PermutedTensor {
  std::string name;
  std::string role;  // "q" or "k"
  std::string dtype;
  std::vector<int64_t> shape;
  int64_t heads = 0;
  int64_t head_rows = 0;
  int64_t offset = 0;
  int64_t rotary_rows = 0;
};

struct ConvertResult {
  std::vector<PermutedTensor> permuted;  // in header order
  int64_t copied = 0;                    // tensors copied unchanged
  int64_t file_bytes = 0;
};

// Converts a safetensors file held in memory, in place: the header stays byte for byte, the data
// of q and k tensors is reordered. Everything is checked before any byte changes, so on an error
// `file` is as it was. `source` names the file in messages.
ConvertResult convert_safetensors(std::string& file, const CheckpointGeometry& geometry,
                                  const ConvertOptions& options, std::string_view source = "input");

// Reads `in_path`, converts it and writes `out_path` through a temporary file and a rename (never
// a half-written output). Streamed: the header is read whole and every check made before the
// output is opened; then the data goes through in 8 MiB pieces, each q / k tensor whole, so
// memory stays about the largest q / k tensor whatever the file's size. An input that changes
// size or modification time while it is read is refused, and nothing is written. Refuses
// out_path naming the same file as in_path. With options.dry_run, reads and checks the header only.
ConvertResult convert_weights(const std::string& in_path, const std::string& out_path,
                              const CheckpointGeometry& geometry, const ConvertOptions& options);

// How a checkpoint is laid out on disk (convert_checkpoint reads all three):
//   File     one .safetensors file;
//   Folder   a model folder holding model.safetensors;
//   Sharded  a model folder holding Hugging Face's sharded layout: model.safetensors.index.json,
//            {"metadata": {"total_size": N}, "weight_map": {"<tensor>": "<shard file>", ...}},
//            and the shard files it names (model-00001-of-00003.safetensors, ...); or that index
//            file given itself.
enum class CheckpointLayout { File, Folder, Sharded };

// One safetensors file of a folder checkpoint as converted: its name in the folder, and what
// happened to it.
struct ShardConversion {
  std::string name;
  int64_t permuted = 0;
  int64_t copied = 0;
  int64_t file_bytes = 0;
};

struct CheckpointConversion {
  CheckpointLayout layout = CheckpointLayout::File;
  std::string input;                      // the .safetensors file or the index that was read
  std::string index_name;                 // Sharded: the index's file name, written unchanged
  ConvertResult total;                    // every file's: permuted in file order, counts and bytes summed
  std::vector<ShardConversion> shards;    // Folder, Sharded: each safetensors file, in name order
  std::vector<std::string> copied_files;  // Folder, Sharded: the folder's other files, copied as they are
  std::vector<std::string> left_out;      // Folder, Sharded: entries not copied ("original/" for a folder)
};

// convert_weights for a checkpoint as a user has it: `in_path` a .safetensors file (then
// `out_path` is a file, as convert_weights), a model folder holding model.safetensors or
// model.safetensors.index.json, or a sharded checkpoint's index file. A folder checkpoint is
// converted into the new folder `out_path` (refused if it exists), one file at a time through
// convert_weights (memory: the largest q / k tensor, whatever the checkpoint's size):
//   - each safetensors file keeps its name; the index is written unchanged (no name, dtype,
//     shape or size changes, so its weight_map and metadata.total_size stay true);
//   - the folder's other regular files (config.json, generation_config.json, the tokenizer's
//     files, README.md; symlinks followed, as in a Hugging Face cache snapshot) are copied byte
//     for byte; left out, and listed in left_out: sub-folders (Meta's original/) and files of
//     weights this conversion did not reorder (other .safetensors files, *.bin, *.pt, *.pth,
//     *.gguf, ... and their *.index.json): copied, they would carry the old row order under the
//     new one's name.
// Everything is checked before anything is written: the index (a JSON object whose weight_map
// maps each tensor to a plain file name in the folder, each tensor once), every shard it names
// (present, a valid safetensors file whose header holds exactly the tensors the index maps to
// it) and every q / k tensor against the geometry. The output is built in a temporary folder
// beside `out_path` and renamed to it at the end: on any error the temporary folder is removed
// and `out_path` does not exist. With options.dry_run, checks everything and writes nothing.
CheckpointConversion convert_checkpoint(const std::string& in_path, const std::string& out_path,
                                        const CheckpointGeometry& geometry, const ConvertOptions& options);

}  // namespace rotary
