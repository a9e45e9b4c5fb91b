"""patch_model's contract beyond the README's families: per-layer-type RoPE in every transformers
5.16 text model whose rotary module takes a layer type, refusals at patch time for what rotary
cannot serve exactly, the dtype rule of RotaryEmbedding (the two-line recipe after
model.to(bfloat16)), and copies of patched models.

Survey (transformers 5.16, models/*/modeling_*.py): 145 *RotaryEmbedding modules have
forward(x, position_ids) (patch_model probes each one it meets, see test_hf_families.py for the
README's families); 18 take a layer type, forward(x, position_ids, layer_type): Gemma 3, Gemma 3n,
Gemma 4, Gemma 4 unified, DiffusionGemma, T5Gemma 2, OLMo 3, ModernBERT, ModernBERT decoder,
MiMo-V2-Flash, Step3p7, Laguna, Mellum, Zaya, ESM and Evolla's SaProt (both accept the argument and
ignore it: one RoPE), Cohere Compass and DeepSeek-V4. The other 29 (vision and audio towers,
SAM trackers, matchers) take other arguments (position_ids alone, seqlen, grid_thw,
pixel_values, ...): 25 have no config and patch_model leaves them as they are; 4 have one
(EfficientLoFTR, EoMT-DINOv3, Llama 4's vision tower, MusicFlamingo) and a model holding one is
refused for its signature (patch its language model instead). All 18 layer-type models are run
below (Evolla shares ESM's code); Cohere Compass and DeepSeek-V4 are refused (see REFUSED).
"""
import copy

import pytest

import torch  # required: a missing dependency fails, never skips
import transformers  # required: a missing dependency fails, never skips
import rotary  # noqa: E402
import rotary.torch as rt  # noqa: E402
from hf_harness import (build, counting, one_torch_thread, output, restore_modeling,  # noqa: E402,F401
                        small)

T = transformers
LAYER_TYPES = ["sliding_attention", "full_attention"]


def per_type(sliding=10000.0, full=1000000.0, **extra):
    return {"sliding_attention": dict({"rope_type": "default", "rope_theta": sliding}, **extra),
            "full_attention": dict({"rope_type": "default", "rope_theta": full}, **extra)}


def _t5gemma2():
    text = dict(head_dim=16, sliding_window=4, layer_types=LAYER_TYPES, rope_parameters=per_type())
    config = T.T5Gemma2Config(
        encoder=dict(text_config=small(T.T5Gemma2TextConfig, **text).to_dict(),
                     vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                        num_attention_heads=2, image_size=28, patch_size=14)),
        decoder=small(T.T5Gemma2TextConfig, **copy.deepcopy(text)).to_dict(), attn_implementation="eager")
    return T.T5Gemma2ForConditionalGeneration, config


# model: (class and config, module path patched, layer types the patched module serves)
LAYER_TYPE_MODELS = {
    "gemma3n": lambda: (T.Gemma3nForCausalLM, small(
        T.Gemma3nTextConfig, head_dim=16, sliding_window=4, layer_types=LAYER_TYPES, rope_parameters=per_type(),
        num_kv_shared_layers=0, laurel_rank=8, altup_num_inputs=2, hidden_size_per_layer_input=8,
        vocab_size_per_layer_input=97, intermediate_size=[128, 128], activation_sparsity_pattern=[0.0, 0.0])),
    # Gemma 4: the full-attention layers have their own head_dim (global_head_dim, through
    # per_layer_config) and proportional RoPE over a quarter of it.
    "gemma4": lambda: (T.Gemma4ForCausalLM, small(
        T.Gemma4TextConfig, head_dim=16, global_head_dim=32, sliding_window=4, layer_types=LAYER_TYPES,
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                         "full_attention": {"rope_type": "proportional", "rope_theta": 1000000.0,
                                            "partial_rotary_factor": 0.25}},
        hidden_size_per_layer_input=8, vocab_size_per_layer_input=97)),
    "gemma4_unified": lambda: (T.Gemma4UnifiedTextModel, small(
        T.Gemma4UnifiedTextConfig, head_dim=16, global_head_dim=32, sliding_window=4, layer_types=LAYER_TYPES,
        hidden_size_per_layer_input=8, vocab_size_per_layer_input=97)),
    "diffusion_gemma": lambda: (T.DiffusionGemmaEncoderTextModel, small(
        T.DiffusionGemmaTextConfig, head_dim=16, global_head_dim=32, sliding_window=4, layer_types=LAYER_TYPES,
        num_experts=2, top_k_experts=1, moe_intermediate_size=32)),
    "t5gemma2": _t5gemma2,
    "olmo3": lambda: (T.Olmo3ForCausalLM, small(T.Olmo3Config, sliding_window=4, layer_types=LAYER_TYPES,
                                                rope_parameters=per_type())),
    "modernbert": lambda: (T.ModernBertModel, small(T.ModernBertConfig, layer_types=LAYER_TYPES,
                                                    rope_parameters=per_type(), local_attention=4)),
    "modernbert_decoder": lambda: (T.ModernBertDecoderForCausalLM, small(
        T.ModernBertDecoderConfig, layer_types=LAYER_TYPES, rope_parameters=per_type(), sliding_window=4)),
    "mimo_v2_flash": lambda: (T.MiMoV2FlashForCausalLM, small(
        T.MiMoV2FlashConfig, layer_types=LAYER_TYPES, rope_parameters=per_type(partial_rotary_factor=0.5),
        sliding_window=4, head_dim=16)),
    "step3p7": lambda: (T.Step3p7TextModel, small(T.Step3p7TextConfig, layer_types=LAYER_TYPES,
                                                  rope_parameters=per_type(), sliding_window=4)),
    "laguna": lambda: (T.LagunaForCausalLM, small(T.LagunaConfig, layer_types=LAYER_TYPES,
                                                  rope_parameters=per_type(), sliding_window=4)),
    "mellum": lambda: (T.MellumForCausalLM, small(T.MellumConfig, layer_types=LAYER_TYPES,
                                                  rope_parameters=per_type(), sliding_window=4)),
    "zaya": lambda: (T.ZayaForCausalLM, small(
        T.ZayaConfig, layer_types=["hybrid", "hybrid_sliding"], sliding_window=4,
        rope_parameters={"hybrid": {"rope_type": "default", "rope_theta": 5000000.0, "partial_rotary_factor": 0.5},
                         "hybrid_sliding": {"rope_type": "default", "rope_theta": 10000.0,
                                            "partial_rotary_factor": 0.5}})),
    "esm": lambda: (T.EsmModel, T.EsmConfig(vocab_size=33, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                            intermediate_size=128, position_embedding_type="rotary",
                                            attn_implementation="eager", pad_token_id=1)),
}


def forward(model, input_ids):
    if isinstance(model, T.T5Gemma2ForConditionalGeneration):
        return output(model, {"input_ids": input_ids, "decoder_input_ids": input_ids[:, :5]})
    return output(model, {"input_ids": input_ids})


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("name", list(LAYER_TYPE_MODELS))
def test_layer_type_models_are_bit_identical(name, dtype, monkeypatch, restore_modeling):
    """Every text model whose rotary module takes a layer type, patched with precision="hf": the
    logits keep their bits, and rotary served each layer type the model asked for."""
    model_cls, config = LAYER_TYPE_MODELS[name]()
    model = build(model_cls, config, dtype)
    input_ids = torch.randint(3, 30, (1, 12), generator=torch.Generator().manual_seed(3))
    expected = forward(model, input_ids)
    patched = copy.deepcopy(model)
    restore_modeling(patched)
    replaced = rt.patch_model(patched)
    modules = [m for m in patched.modules() if isinstance(m, rt.RotaryEmbedding) and m.layers is not None] + \
              [m for m in patched.modules() if isinstance(m, rt.RotaryEmbedding) and name == "esm"]
    assert modules, replaced
    calls = counting(monkeypatch, patched)
    got = forward(patched, input_ids)
    assert calls["embedding"] > 0 and calls["apply"] > 0, calls
    assert got.dtype == expected.dtype and torch.equal(got, expected), \
        f"max |diff| {(got.double() - expected.double()).abs().max().item():.3g}"


# model: (class and config, what the RotaryError must say)
REFUSED = {
    # Interleaved M-RoPE computed inside the module (three streams folded into one row).
    "cohere_compass": (lambda: (T.CohereCompassTextModel, small(
        T.CohereCompassTextConfig, layer_types=LAYER_TYPES, sliding_window=4,
        rope_parameters=per_type(mrope_section=[2, 3, 3]))),
        r"cannot serve CohereCompassTextModel exactly: rotary_emb \(CohereCompassRotaryEmbedding\): its cos/sin are "
        r"not rotary's .*transformers gives torch.float32 \(2, 9, 16\), rotary torch.float32 \(3, 2, 9, 16\)"),
    # RoPE parameters keyed by rope kind ('main', 'compress'), not by layer type.
    "deepseek_v4": (lambda: (T.DeepseekV4ForCausalLM, small(T.DeepseekV4Config)),
                    r"cannot serve DeepseekV4ForCausalLM exactly: model.layers.0.self_attn.compressor.rotary_emb "
                    r"\(DeepseekV4RotaryEmbedding\) has RoPE parameters for layer types compress, main, rotary's "
                    r"config reader finds none"),
    # MiMo-V2-Flash's module defaults partial_rotary_factor to 0.334 in code when rope_parameters
    # leave it out; rotary's config reader takes 1.0: caught by the probe, not served wrong.
    "mimo_v2_flash_implicit_partial": (lambda: (T.MiMoV2FlashForCausalLM, small(
        T.MiMoV2FlashConfig, layer_types=LAYER_TYPES, rope_parameters=per_type(), sliding_window=4, head_dim=16)),
        r"cannot serve MiMoV2FlashForCausalLM exactly: model.rotary_emb \(MiMoV2FlashRotaryEmbedding\): its cos/sin "
        r"are not rotary's .*transformers gives torch.float32 \(2, 9, 6\), rotary torch.float32 \(2, 9, 16\)"),
    # Complex freqs_cis instead of (cos, sin).
    "llama4": (lambda: (T.Llama4ForCausalLM, small(
        T.Llama4TextConfig, head_dim=16, intermediate_size_mlp=128, num_local_experts=2, num_experts_per_tok=1,
        attention_chunk_size=8, no_rope_layers=[1, 1])),
        r"cannot serve Llama4ForCausalLM exactly: model.rotary_emb \(Llama4TextRotaryEmbedding\): its cos/sin are "
        r"not rotary's .*transformers returns one torch.complex64 tensor"),
    # Qwen3-VL's interleaved M-RoPE, folded inside the module as Cohere Compass's.
    "qwen3_vl": (lambda: (T.Qwen3VLTextModel, small(
        T.Qwen3VLTextConfig, head_dim=16,
        rope_parameters={"rope_type": "default", "mrope_section": [2, 3, 3], "mrope_interleaved": True,
                         "rope_theta": 1e6})),
        r"cannot serve Qwen3VLTextModel exactly: rotary_emb \(Qwen3VLTextRotaryEmbedding\)"),
    # GLM: half of cos repeat-interleaved, rotated with rotate_half: not a rotation rotary implements.
    "glm": (lambda: (T.GlmForCausalLM, small(T.GlmConfig, head_dim=16)),
            r"cannot serve GlmForCausalLM exactly: transformers.models.glm.modeling_glm.apply_rotary_pos_emb computes "
            r"what no rotary variant reproduces bit for bit"),
    # No RoPE at all.
    "gpt2": (lambda: (T.GPT2LMHeadModel, T.GPT2Config(vocab_size=97, n_embd=64, n_layer=2, n_head=4)),
             r"GPT2LMHeadModel has no rotary-embedding module built from a config and no GPT-J position table"),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_refused_at_patch_time_naming_model_module_and_reason(name, restore_modeling):
    """A model rotary cannot serve exactly is a RotaryError at patch time (never a patch that
    answers wrong, never an error at the first forward), and nothing is changed."""
    builder, message = REFUSED[name]
    model_cls, config = builder()
    model = build(model_cls, config, torch.float32)
    modules = restore_modeling(model)
    functions = {(m.__name__, n): getattr(m, n) for m in modules for n in dir(m) if n.startswith("apply_")}
    structure = [(path, type(m)) for path, m in model.named_modules()]
    with pytest.raises(rotary.RotaryError, match=message) as error:
        rt.patch_model(model)
    assert "nothing was patched" in str(error.value)
    assert [(path, type(m)) for path, m in model.named_modules()] == structure
    assert {(m.__name__, n): getattr(m, n) for m in modules for n in dir(m) if n.startswith("apply_")} == functions


def test_refuses_a_model_patched_twice(restore_modeling):
    model = build(T.LlamaForCausalLM, small(T.LlamaConfig), torch.float32)
    restore_modeling(model)
    rt.patch_model(model)
    with pytest.raises(rotary.RotaryError, match=r"LlamaForCausalLM is already patched \(rotary modules at "
                                                 r"model.rotary_emb\); patch a fresh model"):
        rt.patch_model(model)


def test_a_second_model_of_a_patched_class_is_probed_against_transformers_own_function(restore_modeling):
    """patch_model replaces functions process-wide; patching another model of the class probes
    transformers' function (kept as rotary_original), not rotary's replacement."""
    first = build(T.CohereForCausalLM, small(T.CohereConfig), torch.float32)
    restore_modeling(first)
    rt.patch_model(first)
    from transformers.models.cohere import modeling_cohere

    installed = modeling_cohere.apply_rotary_pos_emb
    rt.patch_model(build(T.CohereForCausalLM, small(T.CohereConfig), torch.float32), precision="exact",
                   rounding="like_torch")
    assert modeling_cohere.apply_rotary_pos_emb.rotary_original is installed.rotary_original
    assert modeling_cohere.apply_rotary_pos_emb.rotary_variant == "gptj pairs, float32"


def test_a_second_model_with_another_rounding_patches_beside_the_first(restore_modeling):
    """The module-level functions always round "like_torch" (transformers' bits); precision="exact"
    (rounding "once") reaches the second model through its own attention methods. So the second
    patches while the first (precision "hf") runs, and the first keeps transformers' bits."""
    from transformers.models.llama import modeling_llama

    original_function = modeling_llama.apply_rotary_pos_emb
    first = build(T.LlamaForCausalLM, small(T.LlamaConfig), torch.float32)
    second = build(T.LlamaForCausalLM, small(T.LlamaConfig), torch.float32, seed=1)
    restore_modeling(first)
    ids = {"input_ids": torch.randint(3, 97, (2, 7), generator=torch.Generator().manual_seed(3)),
           "position_ids": torch.arange(7)[None] + 4000}
    before = output(first, ids)
    rt.patch_model(first)
    rt.patch_model(second, precision="exact")
    assert modeling_llama.apply_rotary_pos_emb.rotary_rounding == "like_torch"
    assert vars(second.model.layers[0].self_attn)["forward"].__func__.rotary_rounding == "once"
    assert torch.equal(output(first, ids), before)
    rt.unpatch_model(first)
    rt.unpatch_model(second)
    assert modeling_llama.apply_rotary_pos_emb is original_function
    assert "forward" not in vars(second.model.layers[0].self_attn)


# ---- the dtype rule: the two-line recipe after model.to(bfloat16) ----------------------------------------
def _llama_bf16():
    config = small(T.LlamaConfig, max_position_embeddings=256,
                   rope_parameters={"rope_type": "default", "rope_theta": 500000.0})
    return build(T.LlamaForCausalLM, config, torch.bfloat16), config


def test_model_to_bfloat16_casts_transformers_inv_freq():
    """Why the recipe needs the dtype: model.to(bfloat16) casts transformers' inv_freq buffer,
    and transformers then computes cos/sin from the bfloat16-rounded frequencies."""
    model, _ = _llama_bf16()
    assert model.model.rotary_emb.inv_freq.dtype == torch.bfloat16


def test_two_line_recipe_with_dtype_is_bit_identical_in_bfloat16(monkeypatch, restore_modeling):
    from transformers.models.llama import modeling_llama

    model, config = _llama_bf16()
    inputs = {"input_ids": torch.randint(3, 97, (2, 40), generator=torch.Generator().manual_seed(5)),
              "position_ids": torch.arange(40)[None] + 100_000}
    expected = output(model, inputs)
    restore_modeling(model)
    # The recipe (docs/python-transformers.md): the dtype of the inv_freq buffer being replaced.
    model.model.rotary_emb = rt.RotaryEmbedding(model.config, dtype=model.model.rotary_emb.inv_freq.dtype)
    monkeypatch.setattr(modeling_llama, "apply_rotary_pos_emb", rt.apply_rotary_pos_emb)
    assert torch.equal(output(model, inputs), expected)
    # Control: without the dtype (float32 frequencies) the bfloat16 model's logits move.
    model.model.rotary_emb = rt.RotaryEmbedding(model.config)
    assert not torch.equal(output(model, inputs), expected)


def test_two_line_recipe_before_the_cast_is_bit_identical(monkeypatch, restore_modeling):
    """Replaced before model.to(bfloat16), rotary's buffers are cast with the model, as transformers'."""
    from transformers.models.llama import modeling_llama

    config = small(T.LlamaConfig, rope_parameters={"rope_type": "default", "rope_theta": 500000.0})
    model = build(T.LlamaForCausalLM, config, torch.float32)
    reference = copy.deepcopy(model).to(torch.bfloat16)
    inputs = {"input_ids": torch.randint(3, 97, (1, 30), generator=torch.Generator().manual_seed(6)),
              "position_ids": torch.arange(30)[None] + 100_000}
    expected = output(reference, inputs)
    restore_modeling(model)
    model.model.rotary_emb = rt.RotaryEmbedding(model.config)
    monkeypatch.setattr(modeling_llama, "apply_rotary_pos_emb", rt.apply_rotary_pos_emb)
    model.to(torch.bfloat16)
    assert model.model.rotary_emb.inv_freq.dtype == model.model.rotary_emb.original_inv_freq.dtype == torch.bfloat16
    assert torch.equal(output(model, inputs), expected)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_rotary_embedding_dtype_matches_cast_transformers_module_every_scheme(dtype):
    """RotaryEmbedding(config, dtype=...) against transformers' module after .to(dtype), for the
    sequence-dependent schemes too (dynamic NTK's reset and LongRoPE's short factors come back
    as the cast original_inv_freq): short, long, short."""
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
    from transformers.models.phi3.modeling_phi3 import Phi3RotaryEmbedding

    dynamic = small(T.LlamaConfig, max_position_embeddings=64,
                    rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0})
    longrope = small(T.Phi3Config, max_position_embeddings=256, original_max_position_embeddings=64,
                     rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                                      "short_factor": [1.0 + 0.05 * i for i in range(8)],
                                      "long_factor": [1.5 + 0.75 * i for i in range(8)]})
    for hf_cls, config in ((LlamaRotaryEmbedding, dynamic), (Phi3RotaryEmbedding, longrope)):
        theirs = hf_cls(config).to(dtype)
        ours = rt.RotaryEmbedding(config, dtype=dtype)
        x = torch.zeros(1, dtype=dtype)
        for length in (16, 300, 16):
            pos = torch.arange(length)[None] + 5
            for a, b in zip(theirs(x, pos), ours(x, pos)):
                assert torch.equal(a, b), (hf_cls.__name__, length)


def test_deep_copy_of_a_patched_model_has_its_own_state(restore_modeling):
    """copy.deepcopy of a patched model (EMA copies, reference models) gives modules with their own
    ids and RopeCache in the same state: dynamic NTK grown to seq_len 208 stays grown in the copy,
    and moving the original (a reset, then a growth to 68) does not move the copy."""
    config = small(T.LlamaConfig, max_position_embeddings=64,
                   rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0})
    model = build(T.LlamaForCausalLM, config, torch.float32)
    restore_modeling(model)
    rt.patch_model(model, precision="exact")
    ids = torch.randint(3, 97, (1, 8), generator=torch.Generator().manual_seed(8))

    def at(m, start):
        return output(m, {"input_ids": ids, "position_ids": torch.arange(8)[None] + start})

    at(model, 200)  # grown to seq_len 208
    twin = copy.deepcopy(model)
    assert twin.model.rotary_emb._id != model.model.rotary_emb._id
    grown = at(model, 60)  # 60..67: no growth, the seq_len-208 frequencies
    assert torch.equal(at(twin, 60), grown)
    at(model, 0)  # the original resets ...
    assert not torch.equal(at(model, 60), grown)  # ... and grows to 68: new frequencies
    assert torch.equal(at(twin, 60), grown)  # the copy still has its own, grown state


# ---- undoing the patch ----------------------------------------------------------------------------------
def test_unpatch_model_restores_the_model_and_transformers_functions(restore_modeling):
    from transformers.models.llama import modeling_llama

    model = build(T.LlamaForCausalLM, small(T.LlamaConfig), torch.float32)
    restore_modeling(model)
    original_module = model.model.rotary_emb
    original_function = modeling_llama.apply_rotary_pos_emb
    ids = {"input_ids": torch.randint(3, 97, (2, 7), generator=torch.Generator().manual_seed(3)),
           "position_ids": torch.arange(7)[None] + 4000}
    before = output(model, ids)
    replaced = rt.patch_model(model, precision="exact")
    assert isinstance(model.model.rotary_emb, rt.RotaryEmbedding)
    assert modeling_llama.apply_rotary_pos_emb is not original_function
    exact = output(model, ids)
    assert not torch.equal(exact, before)  # exact cos/sin at 4000+ differ from float32 angles: the patch ran
    restored = rt.unpatch_model(model)
    assert model.model.rotary_emb is original_module
    assert modeling_llama.apply_rotary_pos_emb is original_function
    assert restored == ["model.rotary_emb", "transformers.models.llama.modeling_llama.apply_rotary_pos_emb"]
    assert replaced == ["model.rotary_emb", "transformers.models.llama.modeling_llama.apply_rotary_pos_emb"]
    assert torch.equal(output(model, ids), before)
    with pytest.raises(rotary.RotaryError, match=r"unpatch_model: LlamaForCausalLM was not patched by "
                                                 r"rotary.torch.patch_model \(nothing to undo\)"):
        rt.unpatch_model(model)
    rt.patch_model(model)  # a model unpatched can be patched again
    rt.unpatch_model(model)


def test_the_functions_stay_patched_while_another_model_uses_them(restore_modeling):
    from transformers.models.llama import modeling_llama

    first = build(T.LlamaForCausalLM, small(T.LlamaConfig), torch.float32)
    second = build(T.LlamaForCausalLM, small(T.LlamaConfig), torch.float32, seed=1)
    restore_modeling(first)
    original_function = modeling_llama.apply_rotary_pos_emb
    rt.patch_model(first)
    rt.patch_model(second)
    rt.unpatch_model(first)
    assert hasattr(modeling_llama.apply_rotary_pos_emb, "rotary_original")  # second still runs on it
    assert isinstance(second.model.rotary_emb, rt.RotaryEmbedding)
    rt.unpatch_model(second)
    assert modeling_llama.apply_rotary_pos_emb is original_function


def test_patched_context_manager_undoes_on_exit_and_on_error(restore_modeling):
    from transformers.models.llama import modeling_llama

    model = build(T.LlamaForCausalLM, small(T.LlamaConfig), torch.float32)
    restore_modeling(model)
    original_function = modeling_llama.apply_rotary_pos_emb
    with rt.patched(model, precision="exact") as replaced:
        assert "model.rotary_emb" in replaced
        assert isinstance(model.model.rotary_emb, rt.RotaryEmbedding)
    assert modeling_llama.apply_rotary_pos_emb is original_function
    assert not isinstance(model.model.rotary_emb, rt.RotaryEmbedding)
    with pytest.raises(KeyError):
        with rt.patched(model):
            raise KeyError("inside")
    assert modeling_llama.apply_rotary_pos_emb is original_function
    assert not isinstance(model.model.rotary_emb, rt.RotaryEmbedding)


def test_unpatch_puts_gptj_position_tables_back(restore_modeling):
    config = small(T.GPTJConfig, n_embd=64, n_head=4, n_layer=2, rotary_dim=8, n_positions=64)
    model = build(T.GPTJForCausalLM, config, torch.float32)
    restore_modeling(model)
    holder = next(m for m in model.modules() if hasattr(m, "embed_positions"))
    table = holder.embed_positions
    persistent = "embed_positions" not in holder._non_persistent_buffers_set
    rt.patch_model(model)
    assert holder.embed_positions is not table
    rt.unpatch_model(model)
    assert holder.embed_positions is table
    assert ("embed_positions" not in holder._non_persistent_buffers_set) == persistent


# ---- only the model it is given ----------------------------------------------------------------------
def test_patching_leaves_models_that_share_its_config_alone(restore_modeling):
    """transformers' from_config keeps the config object it is given: models built from one config
    share it. Patching one of them leaves the other on transformers' eager logits bit for bit (its
    modules are its own; the module-level functions patch_model installs with precision "hf" give
    transformers' bits), and the patched model gives what it gave before its sibling existed."""
    from transformers import AutoModelForCausalLM

    config = small(T.LlamaConfig, max_position_embeddings=256)
    torch.manual_seed(0)
    eager = AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    patched = AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    assert eager.config is patched.config is config
    patched.load_state_dict(eager.state_dict())
    restore_modeling(eager)
    ids = {"input_ids": torch.randint(3, 97, (2, 9), generator=torch.Generator().manual_seed(5)),
           "position_ids": torch.arange(9)[None] + 3000}
    before = output(eager, ids)
    rt.patch_model(patched)
    assert isinstance(patched.model.rotary_emb, rt.RotaryEmbedding)
    assert not isinstance(eager.model.rotary_emb, rt.RotaryEmbedding)
    assert config._attn_implementation == "eager"
    assert torch.equal(output(eager, ids), before)
    assert torch.equal(output(patched, ids), before)  # "hf": transformers' bits
    rt.unpatch_model(patched)
    assert torch.equal(output(eager, ids), before)


def test_deep_copy_of_a_patched_model_gives_its_logits_and_outlives_the_original(restore_modeling):
    """copy.deepcopy of a patched model gives the same logits (precision "exact": rotary's own
    rounding, which differs from transformers' at 4000+), and the copy counts as a user of the
    patched functions: unpatching the original leaves them in place for the copy."""
    from transformers.models.llama import modeling_llama

    model = build(T.LlamaForCausalLM, small(T.LlamaConfig), torch.float32)
    restore_modeling(model)
    original_function = modeling_llama.apply_rotary_pos_emb
    ids = {"input_ids": torch.randint(3, 97, (2, 7), generator=torch.Generator().manual_seed(3)),
           "position_ids": torch.arange(7)[None] + 4000}
    unpatched = output(model, ids)
    rt.patch_model(model, precision="exact")
    want = output(model, ids)
    assert not torch.equal(want, unpatched)  # the patch ran
    twin = copy.deepcopy(model)
    assert twin.model.rotary_emb.spec is model.model.rotary_emb.spec  # immutable: shared
    assert torch.equal(output(twin, ids), want)
    rt.unpatch_model(model)
    assert not isinstance(model.model.rotary_emb, rt.RotaryEmbedding)
    assert modeling_llama.apply_rotary_pos_emb is not original_function  # the copy still uses rotary's
    assert torch.equal(output(twin, ids), want)
    rt.unpatch_model(twin)
    assert modeling_llama.apply_rotary_pos_emb is original_function
    assert torch.equal(output(twin, ids), unpatched) and torch.equal(output(model, ids), unpatched)
