// include/rotary/engine_export.hpp: rotary's tables in the layout and dtype each inference engine
// expects, so that a user can hand an engine exact values (docs/interop.md has each layout with a
// worked example, and the engines' sources).
//
//   Vllm                 cos_sin_cache [rows, rotary_dim] = cat(cos, sin) along the last axis,
//                        pair order, attention_scaling included, in the model dtype (vLLM
//                        RotaryEmbedding._compute_cos_sin_cache; the buffer is cast to the model
//                        dtype at construction), with the rows vLLM builds (vllm_cache_rows()).
//                        LongRoPE: long_short_cos_sin_cache, the short factors' rows for positions
//                        [0, original) then the long factors' for [0, max_position_embeddings)
//                        (Phi3LongRoPEScaledRotaryEmbedding).
//   FlashInfer           the same layout in float32 (flashinfer.rope.apply_rope_with_cos_sin_cache
//                        and _inplace: "cos_sin_cache: (max_seq_len, rotary_dim), cosine first
//                        half, sine second half", float32).
//   FlashAttn            cos and sin, each (seqlen, rotary_dim / 2), stacked as [2, seqlen,
//                        rotary_dim / 2] (cos = [0], sin = [1]), in the activation dtype
//                        (flash_attn/layers/rotary.py: RotaryEmbedding._update_cos_sin_cache).
//   TransformerEngine    the float32 angle table freqs [max_position, 1, 1, rotary_dim]
//                        (transformer_engine/pytorch/attention/rope.py RotaryPositionEmbedding.
//                        forward): cat(angles, angles) for NeoX pairing, each pair's angle twice
//                        (2i, 2i+1) for interleaved. TE takes cos/sin of it. rotary's angles are
//                        p * inv_freq reduced modulo 2 pi into (-pi, pi] before the one rounding
//                        to float32, so cos/sin of the table are within ~1.2e-7 of the true values
//                        at every position (TE's own table holds the unreduced float32 product).
//   LlamaCppFreqFactors  the float32 tensor rope_freqs.weight [rotary_dim / 2] (Llama 3: the
//                        per-pair divisor llama.cpp's convert_hf_to_gguf.py writes), or
//                        rope_factors_long / rope_factors_short.weight (LongRoPE, one set chosen
//                        by factor_set). ggml divides each pair's angle by it.
//
// Values come from Precision::Exact (every entry the correctly rounded value of the formula on the
// config's numbers, rounded once to the output dtype from a double within ~1e-15 of it; bf16 and
// f16 are not rounded through float32). A scheme a format cannot express is refused with a
// rotary::Error naming the argument: a sequence-dependent scheme (dynamic NTK; LongRoPE except in
// vLLM's long/short cache) in a static cache, xPos or 2-D vision positions, attention scaling in
// TE's angle table, a dtype the format does not take.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rotary/frequencies.hpp"
#include "rotary/spec.hpp"
#include "rotary/tensor.hpp"

namespace rotary {

enum class ExportFormat { Vllm, FlashInfer, FlashAttn, TransformerEngine, LlamaCppFreqFactors };

// "vllm", "flashinfer", "flash-attn", "transformer-engine", "llama-cpp-freq-factors".
std::string_view to_string(ExportFormat format);
std::optional<ExportFormat> parse_export_format(std::string_view name);
// Every format's name, in the order above (for messages and help).
std::vector<std::string_view> export_format_names();

struct ExportOptions {
  ExportFormat format = ExportFormat::Vllm;
  // Rows of a cache (positions [0, max_position)). 0: for Vllm, the rows vLLM builds
  // (vllm_cache_rows()); for the others, the spec's max_position_embeddings. Not read by
  // LlamaCppFreqFactors, fixed for Vllm with LongRoPE (an error when set).
  int64_t max_position = 0;
  // The element type. Vllm and FlashAttn: required (the model's / activations' dtype: F32, BF16,
  // F16). The others are float32 only (nullopt or F32).
  std::optional<DType> dtype;
  // LlamaCppFreqFactors with LongRoPE: which factor list (Short or Long); an error for the other
  // formats and schemes.
  LongRopeFactorSet factor_set = LongRopeFactorSet::None;
};

// One array: little-endian elements in C order. BF16 / F16 are their 16-bit patterns.
struct ExportedArray {
  std::string tensor_name;  // the engine's name for it: "cos_sin_cache", "rope_freqs.weight", ...
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<unsigned char> bytes;
};

// The largest array export_table() builds (bytes): 4 GiB. A larger request is an error naming
// max_position.
inline constexpr int64_t kMaxExportBytes = int64_t{4} << 30;

// The rows of vLLM's cache for the spec, as each class's _compute_cos_sin_cache builds them (t =
// torch.arange(n), n rounded up), with get_rope's arguments (L = max_position_embeddings,
// L0 = original context, s = factor): L for default, Llama 3 and NTK-alpha; ceil(L * s) for
// linear and dynamic NTK (vLLM takes L as the length before scaling); ceil(L0 * s) for YaRN and
// DeepSeek YaRN; L0 + L for LongRoPE (its short and long caches); 4 L for M-RoPE. 0 when the spec
// lacks the length it needs.
int64_t vllm_cache_rows(const RopeSpec& spec);

// Builds the array. Errors (rotary::Error) name the argument: format, max_position, dtype,
// factor_set, or the spec field the format cannot express.
ExportedArray export_table(const RopeSpec& spec, const ExportOptions& options);

}  // namespace rotary
