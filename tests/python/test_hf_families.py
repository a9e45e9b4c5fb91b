"""Every family the README names, as real transformers model classes with tiny random configs
(2 layers, hidden 64), run with Hugging Face's RoPE and with rotary's drop-in
(rotary.torch.patch_model, precision="hf"): logits and greedy generation with the KV cache, at
position 0 and at position 100000, in float32 and bfloat16. Every output must be bit-identical
(torch.equal), and the call counters must show rotary's code ran (an exact count per forward).

Position 100000: the RoPE positions are offset, the cache is not. The logits pass gives
position_ids = 100000 + arange(seq) explicitly; the cached greedy loop (greedy_at) prefills with
those position_ids and then feeds position_ids = last + 1 per step, while the KV cache fills slots
0, 1, 2, ... as usual (cache_position is left to transformers, so the attention masks are those of
a 12-token sequence; only the rotation sees 100000+). M-RoPE (Qwen2-VL) gets [3, batch, seq]
position_ids with the same offset in every stream. GPT-J has a position table of n_positions rows
instead of a rotary module, so its config has n_positions = 100032. Position 0 uses
model.generate(do_sample=False, use_cache=True) itself, its generated tokens and per-step logits.

Each test runs both models through the same calls in the same order, so the sequence-dependent
schemes (Phi-3's LongRoPE) see the same history: short factors at position 0, long at 100000.
"""
import copy

import pytest

import torch  # required: a missing dependency fails, never skips
import transformers  # required: a missing dependency fails, never skips
import rotary  # noqa: E402
import rotary.torch as rt  # noqa: E402
from hf_harness import build, counting, one_torch_thread, restore_modeling, small  # noqa: E402,F401

OFFSET = 100_000
SEQ, STEPS = 12, 4


def _llama():
    return transformers.LlamaForCausalLM, small(
        transformers.LlamaConfig, max_position_embeddings=4096,
        rope_parameters={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 64, "rope_theta": 500000.0})


def _qwen3():
    return transformers.Qwen3ForCausalLM, small(transformers.Qwen3Config, head_dim=16, max_position_embeddings=256,
                                                rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})


def _qwen2_vl():
    config = transformers.Qwen2VLConfig(
        text_config=dict(vocab_size=97, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         rope_parameters={"rope_type": "default", "mrope_section": [2, 3, 3], "rope_theta": 1000000.0}),
        vision_config=dict(depth=1, embed_dim=32, hidden_size=64, num_heads=2, mlp_ratio=2, patch_size=14,
                           spatial_merge_size=2, temporal_patch_size=2),
        image_token_id=90, video_token_id=91, vision_start_token_id=92, vision_end_token_id=93,
        pad_token_id=0, bos_token_id=1, eos_token_id=2, attn_implementation="eager")
    return transformers.Qwen2VLForConditionalGeneration, config


def _mistral():
    return transformers.MistralForCausalLM, small(transformers.MistralConfig, head_dim=16, sliding_window=8,
                                                  rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})


def _deepseek_v3():
    return transformers.DeepseekV3ForCausalLM, small(
        transformers.DeepseekV3Config, num_key_value_heads=4, moe_intermediate_size=32, q_lora_rank=None,
        kv_lora_rank=32, qk_rope_head_dim=16, qk_nope_head_dim=16, v_head_dim=16, n_routed_experts=4,
        num_experts_per_tok=2, n_group=1, topk_group=1, first_k_dense_replace=1, max_position_embeddings=256,
        rope_interleave=True,
        rope_parameters={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64, "mscale": 1.0,
                         "mscale_all_dim": 0.5, "beta_fast": 32, "beta_slow": 1, "rope_theta": 10000.0})


def _phi3():
    pairs = 6  # partial rotary as Phi-4-mini: 12 of 16 dims rotate
    return transformers.Phi3ForCausalLM, small(
        transformers.Phi3Config, max_position_embeddings=256, original_max_position_embeddings=64,
        rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0, "partial_rotary_factor": 0.75,
                         "short_factor": [1.0 + 0.05 * i for i in range(pairs)],
                         "long_factor": [1.5 + 0.75 * i for i in range(pairs)]})


def _gemma():
    return transformers.GemmaForCausalLM, small(transformers.GemmaConfig, head_dim=16,
                                                rope_parameters={"rope_type": "default", "rope_theta": 10000.0})


def _gemma2():
    return transformers.Gemma2ForCausalLM, small(transformers.Gemma2Config, head_dim=16, sliding_window=4,
                                                 rope_parameters={"rope_type": "default", "rope_theta": 10000.0})


def _gemma3():
    # Both layer types, each with its own RoPE: sliding layers theta 10^4, full-attention layers
    # theta 10^6 with linear scaling (as Gemma 3 4B and larger).
    return transformers.Gemma3ForCausalLM, small(
        transformers.Gemma3TextConfig, head_dim=16, sliding_window=4,
        layer_types=["sliding_attention", "full_attention"],
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                         "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0}})


def _gpt_neox():
    return transformers.GPTNeoXForCausalLM, transformers.GPTNeoXConfig(
        vocab_size=97, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
        rotary_pct=0.25, max_position_embeddings=256, attn_implementation="eager", bos_token_id=1, eos_token_id=2,
        pad_token_id=0)


def _gptj():
    return transformers.GPTJForCausalLM, transformers.GPTJConfig(
        vocab_size=97, n_embd=64, n_layer=2, n_head=4, rotary_dim=8, n_positions=OFFSET + 32,
        attn_implementation="eager", bos_token_id=1, eos_token_id=2, pad_token_id=0)


def _gpt_oss():
    # gpt-oss's own RoPE: YaRN with truncate=False, factor 32 over 4096.
    return transformers.GptOssForCausalLM, small(transformers.GptOssConfig, head_dim=16, num_local_experts=4,
                                                 num_experts_per_tok=2, sliding_window=4)


# family: (builder, what patch_model must replace, rotary-embedding calls per forward, apply calls per
# layer and forward). Gemma 3's module is called once per layer type; GPT-J has no module (its
# tables are replaced) and rotates q and k in two calls, as do the one-tensor functions.
FAMILIES = {
    "llama": (_llama, ["model.rotary_emb", "modeling_llama.apply_rotary_pos_emb"], 1, 1),
    "qwen3": (_qwen3, ["model.rotary_emb", "modeling_qwen3.apply_rotary_pos_emb"], 1, 1),
    "qwen2_vl": (_qwen2_vl, ["language_model.rotary_emb", "modeling_qwen2_vl.apply_multimodal_rotary_pos_emb"], 1, 1),
    "mistral": (_mistral, ["model.rotary_emb", "modeling_mistral.apply_rotary_pos_emb"], 1, 1),
    "deepseek_v3": (_deepseek_v3, ["model.rotary_emb", "modeling_deepseek_v3.apply_rotary_pos_emb_interleave"], 1, 1),
    "phi3_longrope": (_phi3, ["model.rotary_emb", "modeling_phi3.apply_rotary_pos_emb"], 1, 1),
    "gemma": (_gemma, ["model.rotary_emb", "modeling_gemma.apply_rotary_pos_emb"], 1, 1),
    "gemma2": (_gemma2, ["model.rotary_emb", "modeling_gemma2.apply_rotary_pos_emb"], 1, 1),
    "gemma3": (_gemma3, ["model.rotary_emb", "modeling_gemma3.apply_rotary_pos_emb"], 2, 1),
    "gpt_neox": (_gpt_neox, ["gpt_neox.rotary_emb", "modeling_gpt_neox.apply_rotary_pos_emb"], 1, 1),
    "gptj": (_gptj, ["transformer.h.0.attn.embed_positions", "modeling_gptj.apply_rotary_pos_emb"], 0, 2),
    "gpt_oss": (_gpt_oss, ["model.rotary_emb", "modeling_gpt_oss.apply_rotary_pos_emb"], 1, 1),
}


def positions(model, start, length):
    """position_ids [1, length] from start ([3, 1, length] for M-RoPE: t = h = w for text)."""
    pos = torch.arange(start, start + length)[None]
    if isinstance(model, transformers.Qwen2VLForConditionalGeneration):
        return pos[None].expand(3, 1, length).contiguous()
    return pos


def logits_at(model, input_ids, start):
    with torch.no_grad():
        return model(input_ids=input_ids, position_ids=positions(model, start, input_ids.shape[1]),
                     use_cache=False).logits


def greedy_at(model, input_ids, start, steps=STEPS):
    """Greedy decoding with the KV cache, the RoPE positions starting at `start` (the cache slots at
    0). Returns the generated tokens and the logits of every step."""
    tokens, step_logits = [], []
    cache = transformers.DynamicCache(config=model.config)
    ids, pos = input_ids, positions(model, start, input_ids.shape[1])
    with torch.no_grad():
        for _ in range(steps + 1):
            out = model(input_ids=ids, position_ids=pos, past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            step_logits.append(out.logits[:, -1])
            ids = out.logits[:, -1:].argmax(-1)
            tokens.append(ids)
            pos = pos[..., -1:] + 1
    return torch.cat(tokens, dim=1), torch.stack(step_logits)


def generate(model, input_ids):
    with torch.no_grad():
        out = model.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=STEPS,
                             do_sample=False, use_cache=True, return_dict_in_generate=True, output_logits=True)
    return out.sequences, torch.stack(out.logits)


def run_all(model, input_ids):
    """Logits at 0 and at OFFSET, generate() at 0, the cached greedy loop at OFFSET; and how many
    forwards of the model that was (generate stops early at an end-of-sequence token)."""
    forwards = []
    hook = model.register_forward_pre_hook(lambda module, args: forwards.append(1))
    results = {"logits@0": logits_at(model, input_ids, 0), f"logits@{OFFSET}": logits_at(model, input_ids, OFFSET)}
    results["generate@0"] = generate(model, input_ids)
    results[f"greedy@{OFFSET}"] = greedy_at(model, input_ids, OFFSET)
    hook.remove()
    return results, len(forwards)


def assert_identical(expected, got, name):
    if isinstance(expected, tuple):
        for i, (e, g) in enumerate(zip(expected, got)):
            assert_identical(e, g, f"{name}[{i}]")
        return
    assert expected.dtype == got.dtype and expected.shape == got.shape, (name, expected.dtype, got.dtype)
    assert torch.isfinite(expected.float()).all() and expected.float().abs().max() > 0, name
    diff = (expected.double() - got.double()).abs().max().item()
    assert torch.equal(expected, got), f"{name}: max |diff| {diff:.3g}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_family_bit_identical_logits_and_cached_generation(family, dtype, monkeypatch, restore_modeling):
    builder, expect_replaced, embedding_calls, apply_calls = FAMILIES[family]
    model_cls, config = builder()
    model = build(model_cls, config, dtype)
    patched = copy.deepcopy(model)
    input_ids = torch.randint(3, 89, (1, SEQ), generator=torch.Generator().manual_seed(7))
    expected, forwards = run_all(model, input_ids)

    restore_modeling(patched)
    replaced = rt.patch_model(patched, precision="hf")
    for item in expect_replaced:
        assert any(r.endswith(item) for r in replaced), f"patch_model did not replace {item}: {replaced}"
    calls = counting(monkeypatch, patched)
    got, patched_forwards = run_all(patched, input_ids)
    assert patched_forwards == forwards

    layers = config.get_text_config().num_hidden_layers
    assert calls == {"embedding": embedding_calls * forwards, "apply": apply_calls * layers * forwards}, calls
    for name in expected:
        assert_identical(expected[name], got[name], name)
    # Position 100000 is not a replay of position 0: RoPE moved the float32 logits (in bfloat16 a
    # tiny random model's logits may not resolve the change, Gemma 2's soft-capped ones do not).
    if dtype == torch.float32:
        assert not torch.equal(expected["logits@0"], expected[f"logits@{OFFSET}"])


def test_gemma3_uses_both_layer_types_with_their_own_rope(monkeypatch, restore_modeling):
    """Gemma 3's sliding and full-attention layers get different cos/sin (different theta and a
    linear factor): the patched module serves each type from its own spec."""
    model_cls, config = _gemma3()
    model = build(model_cls, config, torch.float32)
    restore_modeling(model)
    rt.patch_model(model)
    module = model.model.rotary_emb
    assert isinstance(module, rt.RotaryEmbedding) and module.layer_types == ("full_attention", "sliding_attention")
    specs = {name: module.layers[name].spec for name in module.layer_types}
    assert specs["sliding_attention"].theta_base == 10000.0 and specs["full_attention"].theta_base == 1000000.0
    assert specs["full_attention"].rope_type == "linear"
    x, pos = torch.zeros(1), torch.arange(5)[None]
    cos_full, _ = module(x, pos, "full_attention")
    cos_sliding, _ = module(x, pos, "sliding_attention")
    assert not torch.equal(cos_full, cos_sliding)
    with pytest.raises(rotary.RotaryError, match="layer_type must be one of this module's layer types"):
        module(x, pos)
