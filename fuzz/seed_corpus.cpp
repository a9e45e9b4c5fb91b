// fuzz/seed_corpus.cpp: writes the seed corpus of every fuzz target (fuzz/corpus/<target>/).
//
//   fuzz_seed_corpus OUT_DIR [GOLDEN_DIR]
//
// hf_config: every preset's config.json, the "config" of every tests/golden case, and
//            hand-made texts (NaN / Infinity, duplicate keys, per-layer parameters, deep nesting).
// npy:       np.save's bytes for every element type and a few shapes, the 2.0 / 3.0 headers,
//            ml_dtypes' bfloat16 descr, and some broken files.
// cli:       one command line per command with its usual flags (NUL-separated arguments).
// apply_args: valid calls for every spec, layout and position source of fuzz/apply_case.hpp,
//            and a few with edits that break one rule.
// attention_args: valid calls for every layout and position encoding of fuzz/attention_case.hpp
//            (two query blocks and several key tiles in some), and a few with edits.
// kv_cache_ops: a cache for each spec of attention_case.hpp's set and each storage type, then
//            prefill, attend, decode, shift, queries and clear (fuzz/kv_cache_ops_fuzz.cpp).
// safetensors: a geometry byte (fuzz/safetensors_fuzz.cpp) and a checkpoint: valid ones for each
//            geometry and pairing (q/k weights, biases, norms, other tensors, metadata), ones
//            the conversion refuses (rows, dtype, fused, quantized) and malformed files.
// The files are small (the largest is a few kilobytes), so they are checked in; rerun after
// changing a preset, the golden set or a target's byte grammar.
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "core/json.hpp"
#include "interop/safetensors.hpp"
#include "cli/npy.hpp"
#include "rotary/presets.hpp"

namespace {

namespace fs = std::filesystem;

void write_file(const fs::path& path, const std::string& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string as_text(const std::vector<unsigned char>& bytes) { return std::string(bytes.begin(), bytes.end()); }

void hf_config_seeds(const fs::path& out, const fs::path& golden) {
  for (const rotary::PresetInfo& info : rotary::list_presets()) {
    write_file(out / ("preset_" + info.name + ".json"), std::string(rotary::preset_config_json(info.name)));
  }
  if (!golden.empty() && fs::is_directory(golden)) {
    for (const auto& entry : fs::directory_iterator(golden)) {
      if (entry.path().extension() != ".json") continue;
      const rotary::json::Value root = rotary::json::parse_file(entry.path().string());
      if (const rotary::json::Value* config = root.find("config")) {
        write_file(out / ("golden_" + entry.path().stem().string() + ".json"), rotary::json::serialize(*config, rotary::json::TextLayout::Pretty));
      }
    }
  }
  write_file(out / "nan_theta.json", R"({"head_dim": 64, "rope_theta": NaN, "max_position_embeddings": Infinity})");
  write_file(out / "duplicate_keys.json", R"({"rope_theta": 10000, "rope_theta": 500000, "head_dim": 128})");
  write_file(out / "text_config.json",
             R"({"model_type": "qwen2_5_vl", "text_config": {"hidden_size": 3584, "num_attention_heads": 28,
"rope_theta": 1000000.0, "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}}})");
  write_file(out / "per_layer.json",
             R"({"head_dim": 256, "layer_types": ["sliding_attention", "full_attention"], "rope_parameters":
{"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}})");
  write_file(out / "escapes.json", "{\"model_type\": \"\\u00e9\\ud83d\\ude00\\n\", \"head_dim\": 1e2, \"x\": [-0, 0.5e-3]}");
  write_file(out / "deep.json", std::string(600, '[') + std::string(600, ']'));
}

void npy_seeds(const fs::path& out) {
  using rotary::npy::Array;
  using rotary::npy::ElementType;
  auto array = [](ElementType type, std::vector<int64_t> shape) {
    Array a;
    a.type = type;
    a.shape = std::move(shape);
    a.bytes.resize(static_cast<size_t>(a.size() * rotary::npy::element_size(type)));
    for (size_t i = 0; i < a.bytes.size(); ++i) a.bytes[i] = static_cast<unsigned char>(0x3C + i % 3);
    return a;
  };
  write_file(out / "f32_2x3.npy", as_text(rotary::npy::serialize(array(ElementType::Float32, {2, 3}))));
  write_file(out / "f16_4.npy", as_text(rotary::npy::serialize(array(ElementType::Float16, {4}))));
  write_file(out / "bf16_2x2.npy", as_text(rotary::npy::serialize(array(ElementType::BFloat16, {2, 2}))));
  write_file(out / "f64_scalar.npy", as_text(rotary::npy::serialize(array(ElementType::Float64, {}))));
  write_file(out / "i64_empty.npy", as_text(rotary::npy::serialize(array(ElementType::Int64, {0}))));
  write_file(out / "f32_1x2x2x4.npy", as_text(rotary::npy::serialize(array(ElementType::Float32, {1, 2, 2, 4}))));
  // Headers np.save does not write by default but NumPy reads.
  auto with_header = [](int major, const std::string& header, const std::string& data) {
    std::string file = "\x93NUMPY";
    file += static_cast<char>(major);
    file += '\0';
    const size_t length = header.size();
    for (int i = 0; i < (major == 1 ? 2 : 4); ++i) file += static_cast<char>((length >> (8 * i)) & 0xFF);
    return file + header + data;
  };
  write_file(out / "v2_header.npy", with_header(2, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }\n", "abcd"));
  write_file(out / "v3_header.npy", with_header(3, "{\"descr\": \"<i8\", \"fortran_order\": False, \"shape\": (1, 1)}\n",
                                                std::string(8, '\1')));
  write_file(out / "v2_bfloat16_descr.npy", with_header(1, "{'descr': '<V2', 'fortran_order': False, 'shape': (2,), }\n", "abcd"));
  write_file(out / "native_order.npy", with_header(1, "{'descr': '=f8', 'fortran_order': False, 'shape': (1L,), }\n",
                                                   std::string(8, '\0')));
  write_file(out / "fortran.npy", with_header(1, "{'descr': '<f4', 'fortran_order': True, 'shape': (1,), }\n", "abcd"));
  write_file(out / "lying_shape.npy", with_header(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (9999999999,), }\n", "abcd"));
  write_file(out / "truncated.npy", std::string("\x93NUMPY\x01\x00\x76\x00{'descr'", 17));
}

void cli_seeds(const fs::path& out) {
  const std::vector<std::vector<std::string>> lines = {
      {"presets", "--json"},
      {"freqs", "--preset", "qwen2.5-7b-yarn", "--seq-len", "4097", "--json"},
      {"freqs", "--config", "config.json"},
      {"explain", "--preset", "llama-2-7b", "--context", "16384"},
      {"explain", "--config=gemma.json", "--layer-type", "sliding_attention"},
      {"table", "--preset", "llama-3.1-8b", "--positions", "0:4", "--precision", "hf"},
      {"table", "--positions", "0,1,4096", "--seq-len=100", "--json"},
      {"apply", "--preset", "llama-3.1-8b", "--q", "q.npy", "--k", "k.npy", "--layout", "bshd", "--offsets",
       "offsets.npy", "--out-q", "q_rot.npy", "--out-k", "k_rot.npy", "--threads", "2"},
      {"apply", "--q", "q.npy", "--layout", "thd", "--cu-seqlens", "cu.npy", "--out-q", "o.npy", "--direction",
       "backward", "--rotary-offset", "8", "--style", "gptj", "--reference"},
      {"verify-golden", "..", "--verbose"},
      {"check", "--preset", "qwen2.5-7b-yarn", "--context", "65536", "--json"},
      {"bench", "--quick", "--torch", "none", "--cases", "decode,prefill", "--dtypes", "bf16,f32", "--threads",
       "1,2", "--repetitions", "3", "--target", "avx2"},
      {"report", "--compare", "llama-2-7b,llama-3.1-8b", "-o", "r.html", "--context", "8192"},
      {"report", "--config", "bad.json", "-o", "r.html"},
      {"freqs", "--config", "big.json"},
      {"--help"},
      {"--version"},
      {"table", "--help"},
      // CLI findings of the trust review: a flag taken as a value, one file for two outputs.
      {"apply", "--preset", "llama-3.1-8b", "--q", "--k", "k.npy", "--layout", "bshd", "--out-q", "--reference"},
      {"apply", "--q", "q.npy", "--layout", "bshd", "--out-q", "o.npy", "--out-k", "o.npy"},
      {"convert-weights", "--config", "config.json", "--to", "interleaved", "in.safetensors", "out.safetensors",
       "--q-module", "attn.wq,attn.q", "--dry-run"},
  };
  int index = 0;
  for (const std::vector<std::string>& line : lines) {
    std::string bytes;
    for (size_t i = 0; i < line.size(); ++i) bytes += (i ? std::string(1, '\0') : std::string()) + line[i];
    write_file(out / ("cmd_" + std::to_string(index++) + "_" + line[0]), bytes);
  }
}

// The byte grammar of fuzz/apply_case.hpp, decode_apply_case: header, positions, edits.
void apply_args_seeds(const fs::path& out) {
  int index = 0;
  auto emit = [&](const std::vector<uint8_t>& bytes) {
    write_file(out / ("call_" + std::to_string(index++)), std::string(bytes.begin(), bytes.end()));
  };
  for (uint8_t spec = 0; spec < 8; ++spec) {
    for (uint8_t layout = 0; layout < 4; ++layout) {
      for (uint8_t source = 0; source < 3; ++source) {
        const bool thd = layout == 3;
        const uint8_t batch = 2, seq = 5;
        // spec, precision, storage, fixed, seq_len, layout, dtypes q k q_out k_out
        std::vector<uint8_t> bytes = {spec, static_cast<uint8_t>(source % 2), static_cast<uint8_t>(spec % 2),
                                      static_cast<uint8_t>(layout % 2 ? 3 : 0), 0, layout,
                                      static_cast<uint8_t>(spec % 3), static_cast<uint8_t>(layout % 3), 0, 0};
        // batch, seq, heads_q, heads_k, extra_q, extra_k, flags (k, q in place, ...), rotary_offset, scale
        bytes.insert(bytes.end(), {batch, seq, 4, 2, static_cast<uint8_t>(source * 2), 2,
                                   static_cast<uint8_t>(1 | (spec % 2 ? 2 : 0) | (layout == 1 ? 8 : 0)), 0,
                                   static_cast<uint8_t>(source % 4)});
        if (thd) bytes.insert(bytes.end(), {1, 2});  // two sequences, split at token 2
        bytes.push_back(source);
        const int64_t tokens = thd ? seq : batch * seq;
        const int64_t streams = spec == 3 || spec == 4 ? 3 : (spec == 5 ? 2 : 1);
        const int64_t values = source == 1 ? tokens * streams : (source == 2 ? (thd ? 2 : batch) : 0);
        for (int64_t i = 0; i < values; ++i) bytes.push_back(static_cast<uint8_t>(3 * i + 1));
        bytes.push_back(0);  // no edits
        emit(bytes);
      }
    }
  }
  // Edits: (kind, target, value mode, value...). Mode 2 picks apply_case.hpp's special values.
  const std::vector<uint8_t> base = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 5, 4, 2, 0, 0, 1, 0, 0, 1};
  auto with_edits = [&](std::vector<uint8_t> edits) {
    std::vector<uint8_t> bytes = base;
    for (int i = 0; i < 10; ++i) bytes.push_back(static_cast<uint8_t>(i));  // 2 x 5 positions
    bytes.push_back(static_cast<uint8_t>(edits.size() / 4));
    bytes.insert(bytes.end(), edits.begin(), edits.end());
    emit(bytes);
  };
  with_edits({0, 0 | (1 << 2), 2, 9});        // q shape[1] = INT64_MAX
  with_edits({1, 2 | (2 << 2), 2, 2});         // q_out stride[2] = -1
  with_edits({1, 2 | (3 << 2), 2, 0});         // q_out stride[3] = 0
  with_edits({16, 2 | (0 << 2), 1, 0});        // q_out aliases q (in place)
  with_edits({17, 2 | (0 << 2), 1, 3});        // q_out = q shifted by 3 elements
  with_edits({8, 5, 2, 6});                    // per_token[5] = kMaxPosition
  with_edits({7, 0, 2, 8});                    // per_token_count = 2^32
  with_edits({13, 0, 2, 9});                   // rotary_offset = INT64_MAX
  with_edits({3, 1, 1, 5, 4, 0, 1, 3});        // k dtype invalid, q layout thd
  with_edits({0, 0, 2, 13, 0, 1 << 2, 2, 13}); // q shape[0] = shape[1] = ~sqrt(2^63)
}

// The byte grammar of fuzz/attention_case.hpp, decode_attention_case.
void attention_args_seeds(const fs::path& out) {
  int index = 0;
  auto emit = [&](const std::vector<uint8_t>& bytes) {
    write_file(out / ("call_" + std::to_string(index++)), std::string(bytes.begin(), bytes.end()));
  };
  auto call = [](uint8_t layout, uint8_t encoding, std::vector<uint8_t> edits, std::vector<uint8_t> starts = {}) {
    const bool thd = layout == 3;
    const int64_t batch = thd ? 1 : 2;
    // Two query blocks (BSHD + RoPE) or several key tiles and the split over keys (BHSD).
    const uint8_t q_byte = layout == 0 && encoding == 1 ? 0x80 | 70 : 5, k_byte = layout == 1 ? 0x80 | 130 : 7;
    const int64_t q_seq = (q_byte & 0x80) ? (q_byte & 0x7f) % 80 : q_byte % 7, k_seq = (k_byte & 0x80) ? (k_byte & 0x7f) % 200 : k_byte % 9;
    std::vector<uint8_t> b = {layout, static_cast<uint8_t>((layout + encoding) % 3)};
    if (!thd) b.push_back(static_cast<uint8_t>(batch));
    // q, k seq; kv heads 2, q heads 4; encoding; spec (RoPE: full, GPT-J partial, NeoX partial); table options
    b.insert(b.end(), {q_byte, k_byte, 1, 1, encoding, static_cast<uint8_t>(encoding == 1 ? layout % 3 : 0), 0});
    // qk dim (RoPE 18, else 8), v dim 8, mask, window, scale mode
    b.insert(b.end(), {static_cast<uint8_t>(encoding == 1 ? 2 : 7), 7, static_cast<uint8_t>(layout % 2),
                       static_cast<uint8_t>(encoding == 2 ? 3 : 0), static_cast<uint8_t>(layout % 3)});
    if (thd) {
      b.insert(b.end(), {1, 2, 3});  // two sequences: q split at 2, k at 3
    } else {
      b.push_back(encoding % 2);
      if (encoding % 2 == 1) b.insert(b.end(), {5, 7});  // kv_lengths
    }
    b.push_back(encoding % 3);  // query offsets: none, one (3), per sequence (1, 4)
    if (encoding % 3 == 1) b.push_back(3);
    if (encoding % 3 == 2) b.insert(b.end(), {1, 4});
    const int64_t q_tokens = thd ? q_seq : batch * q_seq, k_tokens = thd ? k_seq : batch * k_seq;
    if (encoding == 1) {
      b.insert(b.end(), {1, 1});  // positions x 3, rotary_offset 1
      for (int64_t i = 0; i < q_tokens + k_tokens; ++i) b.push_back(static_cast<uint8_t>(5 * i + 1));
    }
    if (encoding == 2) {
      b.push_back(layout % 2);  // the paper's slopes, or random ones
      if (layout % 2 == 1) b.insert(b.end(), {100, 156, 30, 200});
    }
    if (encoding == 3) {
      b.push_back(20);  // 21 rows
      for (int i = 0; i < 64; ++i) b.push_back(static_cast<uint8_t>(i * 37));
      for (int64_t i = 0; i < q_tokens + k_tokens; ++i) b.push_back(static_cast<uint8_t>(3 * i + 2));
    }
    b.push_back(static_cast<uint8_t>(edits.size() / 4));
    b.insert(b.end(), edits.begin(), edits.end());
    b.insert(b.end(), starts.begin(), starts.end());  // kv_starts, read last
    return b;
  };
  for (uint8_t layout = 0; layout < 4; ++layout) {
    for (uint8_t encoding = 0; encoding < 4; ++encoding) emit(call(layout, encoding, {}));
  }
  // Edits: (kind, target, value mode, value...). Mode 2 picks case_support.hpp's special values.
  emit(call(0, 0, {0, 0 | (1 << 2), 2, 9}));   // q shape[1] = INT64_MAX
  emit(call(0, 0, {1, 1 | (3 << 2), 2, 2}));   // k stride[3] = -1
  emit(call(0, 0, {6, 3 | (0 << 2), 1, 0}));   // out aliases q
  emit(call(0, 0, {19, 0, 1, 0}));             // scale NaN
  emit(call(0, 2, {29, 1, 1, 12}));            // slope 2^100
  emit(call(1, 1, {23, 3, 2, 7}));             // a RoPE position past kMaxPosition
  emit(call(3, 0, {14, 1, 1, 9}));             // cu_seqlens_q[1] = 9
  emit(call(2, 3, {33, 0, 1, 3, 20, 2, 1, 0}));  // absolute q count 3, and RoPE on too
  // kv_starts: a first key per sequence (left padding), with a causal mask and the split over
  // keys (BHSD), with RoPE (BSHD), a count off by one with raw values, and THD (refused).
  emit(call(1, 0, {}, {1, 3, 100}));
  emit(call(0, 1, {}, {1, 2, 4}));
  emit(call(0, 0, {}, {3, 1, 200, 7, 9}));
  emit(call(3, 0, {}, {1, 1, 2}));
}

// The byte grammar of fuzz/kv_cache_ops_fuzz.cpp: a cache, then operations.
void kv_cache_ops_seeds(const fs::path& out) {
  int index = 0;
  for (uint8_t spec = 0; spec < 8; ++spec) {
    for (uint8_t dtype = 0; dtype < 3; ++dtype) {
      // spec, table options (LongRoPE: the long factors), batch 2, kv heads 2, head dim 17,
      // v head dim 6, capacity 24, dtype, rotary offset 1, shape not broken, 9 ops
      std::vector<uint8_t> b = {spec, static_cast<uint8_t>(spec == 4 && dtype == 2 ? 2 : 0), 1, 1, 1, 6, 24, dtype, 1, 0, 8};
      const bool long_factors = spec == 4 && dtype == 2;
      // append 4 (BSHD), positions given with gaps up to 5 (long factors: up to 100, past 32)
      b.insert(b.end(), {0, 4, 0, 0, 0, 1, static_cast<uint8_t>(long_factors ? 4 : 3)});
      for (int i = 0; i < 8; ++i) b.push_back(static_cast<uint8_t>(long_factors ? 90 + i : i));
      b.push_back(0);
      b.insert(b.end(), {3, 2, 1, static_cast<uint8_t>(dtype), 0, 0, 0, 0, 0, 0});  // attend 2 queries
      b.insert(b.end(), {1, 1, 1, 0, 0, 0, 0});                                     // append 1, next positions
      b.insert(b.end(), {3, 1, 0, 1, 0, 0, 1, 2, 1, 0});                            // attend 1, no mask, window 2, scale 0.5
      b.insert(b.end(), {5, 0, 0, 1, 2});                                           // shift all: keep 1, discard 2
      b.insert(b.end(), {3, 1, 1, 2, 0, 0, 0, 0, 0, 0});                            // attend 1 (SBHD)
      b.insert(b.end(), {4, 0, 1, 0, 1});                                          // shift sequence 1: discard 1
      b.insert(b.end(), {6, 0, 1, 2});                                              // queries
      b.insert(b.end(), {7});                                                       // clear
      write_file(out / ("ops_" + std::to_string(index++)), std::string(b.begin(), b.end()));
    }
  }
}

}  // namespace

// Checkpoints for fuzz/safetensors_fuzz.cpp: byte 0 picks the geometry (0 Llama 4 heads / 2 kv
// heads of 8, 1 partial rotary 2 heads of 6 rotating 4, 2 DeepSeek MLA) and, with 0x80, the
// pairing to convert to (set: half-split).
void safetensors_seeds(const fs::path& out) {
  using rotary::safetensors::TensorData;
  using rotary::safetensors::serialize;
  auto bytes = [](int64_t count, int seed) {
    std::string b(static_cast<size_t>(count), '\0');
    for (int64_t i = 0; i < count; ++i) b[static_cast<size_t>(i)] = static_cast<char>((i * 37 + seed * 11) & 0x3F);
    return b;
  };
  auto seed = [&](const std::string& name, uint8_t geometry, const std::string& file) {
    write_file(out / (name + ".bin"), std::string(1, static_cast<char>(geometry)) + file);
  };
  const std::string p = "model.layers.0.self_attn.";
  const std::string llama = serialize({{"model.embed_tokens.weight", "BF16", {4, 3}, bytes(24, 1)},
                                       {p + "q_proj.weight", "F32", {32, 2}, bytes(256, 2)},
                                       {p + "q_proj.bias", "F32", {32}, bytes(128, 3)},
                                       {p + "k_proj.weight", "BF16", {16, 2}, bytes(64, 4)},
                                       {p + "k_norm.weight", "F16", {8}, bytes(16, 5)},
                                       {"layers.1.attention.wq.weight", "F64", {32, 1}, bytes(256, 6)},
                                       {"layers.1.attention.wk.weight", "F32", {16, 1}, bytes(64, 7)},
                                       {"scalar", "I64", {}, bytes(8, 8)},
                                       {"empty", "F32", {0, 4}, ""}},
                                      {{"format", "pt"}});
  seed("llama_to_interleaved", 0, llama);
  seed("llama_to_half_split", 0x80, llama);
  const std::string partial = serialize({{p + "q_proj.weight", "F32", {12, 2}, bytes(96, 9)},
                                         {p + "q_proj.bias", "F32", {12}, bytes(48, 10)},
                                         {p + "k_proj.weight", "F16", {12, 2}, bytes(48, 11)},
                                         {p + "dense.weight", "F32", {2, 12}, bytes(96, 12)}});
  seed("partial_to_interleaved", 1, partial);
  seed("partial_to_half_split", 0x81, partial);
  const std::string mla = serialize({{p + "q_b_proj.weight", "BF16", {12, 3}, bytes(72, 13)},
                                     {p + "q_a_proj.weight", "BF16", {3, 2}, bytes(12, 14)},
                                     {p + "kv_a_proj_with_mqa.weight", "F32", {8, 2}, bytes(64, 15)},
                                     {p + "kv_a_proj_with_mqa.bias", "F32", {8}, bytes(32, 16)}});
  seed("mla_to_half_split", 0x82, mla);
  seed("mla_to_interleaved", 2, mla);
  seed("wrong_rows", 0, serialize({{p + "k_proj.weight", "F32", {24, 1}, bytes(96, 17)}}));
  seed("int8_rows", 0, serialize({{p + "k_proj.weight", "I8", {16, 1}, bytes(16, 18)}}));
  seed("quantized", 0, serialize({{p + "q_proj.qweight", "I32", {4, 1}, bytes(16, 19)}}));
  seed("fused", 1, serialize({{"gpt_neox.layers.0.attention.query_key_value.weight", "F32", {6, 1}, bytes(24, 20)}}));
  seed("three_dims", 0, serialize({{p + "q_proj.weight", "F32", {32, 1, 1}, bytes(128, 21)}}));
  seed("no_attention", 0, serialize({{"lm_head.weight", "F32", {2, 2}, bytes(16, 22)}}));
  seed("empty_file_of_tensors", 0, serialize({}));
  seed("truncated", 0, llama.substr(0, llama.size() - 3));
  seed("header_only", 0, llama.substr(0, 40));
  auto with_header = [](const std::string& header, const std::string& data) {
    std::string file(8, '\0');
    for (size_t i = 0; i < 8; ++i) file[i] = static_cast<char>((header.size() >> (8 * i)) & 0xFF);
    return file + header + data;
  };
  const std::string t = R"("t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  seed("duplicate", 0, with_header("{" + t + "," + t + "}", bytes(8, 23)));
  seed("gap", 0, with_header(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", bytes(8, 24)));
  seed("overlap", 0, with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", bytes(8, 25)));
  seed("unknown_dtype", 0, with_header(R"({"t":{"dtype":"F31","shape":[2],"data_offsets":[0,8]}})", bytes(8, 26)));
  seed("huge_shape", 0, with_header(R"({"t":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8]}})", bytes(8, 27)));
  seed("metadata_number", 0, with_header(R"({"__metadata__":{"format":1}})", ""));
  seed("huge_length", 0, std::string("\xff\xff\xff\xff\xff\xff\xff\xff{}", 10));
}

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::cerr << "usage: fuzz_seed_corpus OUT_DIR [GOLDEN_DIR]\n";
    return 2;
  }
  const fs::path out = argv[1];
  const fs::path golden = argc > 2 ? fs::path(argv[2]) : fs::path();
  hf_config_seeds(out / "hf_config", golden);
  npy_seeds(out / "npy");
  cli_seeds(out / "cli");
  apply_args_seeds(out / "apply_args");
  attention_args_seeds(out / "attention_args");
  kv_cache_ops_seeds(out / "kv_cache_ops");
  safetensors_seeds(out / "safetensors");
  std::cout << "seed corpus written to " << out.string() << "\n";
  return 0;
}
