"""patch_model touches only the model it is given, in every precision. The module-level apply
functions it installs always round "like_torch" (transformers' bits, proven by its probe), so
every other model of the class, patched or not, computes what transformers computes; a rounding
other than that ("once", precision="exact") reaches the patched model alone, through copies of its
attention modules' methods bound to those modules. Checked against models that were never near a
patch, eagerly and under torch.compile(fullgraph=True), and the "once" rounding is checked to
still be there (it differs from "like_torch" on the same exact cos/sin).
"""
import copy
import functools

import pytest

import torch  # required: a missing dependency fails, never skips
import transformers  # required: a missing dependency fails, never skips
import rotary  # noqa: E402
import rotary.torch as rt  # noqa: E402
from hf_harness import (build, counted_calls, kernel_calls, logits, one_torch_thread, output, prompt,  # noqa: E402,F401
                        restore_modeling, small)

T = transformers
FAMILIES = {
    "llama": lambda: (T.LlamaForCausalLM, small(T.LlamaConfig, max_position_embeddings=256)),
    "qwen2": lambda: (T.Qwen2ForCausalLM, small(T.Qwen2Config, max_position_embeddings=256)),
    # per-layer-type RoPE and the one-tensor apply_rotary_pos_emb(x, cos, sin)
    "gemma3n": lambda: (T.Gemma3nForCausalLM, small(
        T.Gemma3nTextConfig, head_dim=16, sliding_window=4, layer_types=["sliding_attention", "full_attention"],
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                         "full_attention": {"rope_type": "default", "rope_theta": 1000000.0}},
        num_kv_shared_layers=0, laurel_rank=8, altup_num_inputs=2, hidden_size_per_layer_input=8,
        vocab_size_per_layer_input=97, intermediate_size=[128, 128], activation_sparsity_pattern=[0.0, 0.0])),
    # GPT-J's apply_rotary_pos_emb(tensor, sin, cos) and per-layer position tables
    "gptj": lambda: (T.GPTJForCausalLM, small(T.GPTJConfig, n_embd=64, n_head=4, n_layer=2, rotary_dim=8,
                                              n_positions=4096)),
}
# Past 4000 precision="exact" cos/sin differ from transformers' float32 angles; the rotation's
# rounding ("once" against torch's three roundings) is what the patched pair below tells apart.
INPUTS = {"input_ids": torch.randint(3, 97, (2, 9), generator=torch.Generator().manual_seed(5)),
          "position_ids": torch.arange(9)[None] + 4000}


def _own_methods(model):
    """(module, attribute) of the methods patch_model bound to the model's own modules."""
    return [(m, a) for m in model.modules() for a, v in vars(m).items()
            if getattr(getattr(v, "__func__", None), "rotary_rounding", None) is not None]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_an_unpatched_model_of_the_class_keeps_transformers_bits_beside_an_exact_one(family, dtype,
                                                                                      restore_modeling):
    model_cls, config = FAMILIES[family]()
    never = build(model_cls, config, dtype)  # never near a patch: its logits before any
    want = output(never, INPUTS)
    eager = build(model_cls, config, dtype)  # an eager comparison model: the same class and config object
    once = build(model_cls, config, dtype)
    like_torch = build(model_cls, config, dtype)
    modules = restore_modeling(once)
    rt.patch_model(once, precision="exact")
    assert torch.equal(output(eager, INPUTS), want)
    rt.patch_model(like_torch, precision="exact", rounding="like_torch")  # the same exact cos/sin
    for modeling in modules:
        installed = getattr(modeling, "apply_rotary_pos_emb", None)
        assert getattr(installed, "rotary_rounding", "like_torch") == "like_torch", modeling.__name__
    assert _own_methods(once) and {a for _, a in _own_methods(once)} == {"forward"}
    assert not _own_methods(like_torch) and not _own_methods(eager)
    assert torch.equal(output(eager, INPUTS), want)
    got_once, got_like_torch = output(once, INPUTS), output(like_torch, INPUTS)
    # The patched model keeps its rounding: once differs from like_torch on the same cos/sin ...
    assert not torch.equal(got_once, got_like_torch)
    # ... and from transformers' (exact cos/sin at 4000+, one rounding): the patch ran.
    assert not torch.equal(got_once, want)
    assert torch.equal(output(eager, INPUTS), want)
    rt.unpatch_model(once)
    rt.unpatch_model(like_torch)
    assert not _own_methods(once)
    assert torch.equal(output(once, INPUTS), want) and torch.equal(output(eager, INPUTS), want)


def test_compiled_fullgraph_models_beside_an_exact_one_keep_their_own_bits(monkeypatch, restore_modeling):
    """torch.compile(fullgraph=True) of an unpatched model and of a precision="exact" one of the
    same class, side by side: each gives its eager bits (Dynamo reads the patched model's
    per-instance namespace, not the modeling module), and rotary's kernel runs in the patched one."""
    model_cls, config = FAMILIES["llama"]()
    never = build(model_cls, config, torch.bfloat16)
    want = output(never, INPUTS)
    eager = build(model_cls, config, torch.bfloat16)
    once = build(model_cls, config, torch.bfloat16)
    like_torch = build(model_cls, config, torch.bfloat16)
    restore_modeling(once)
    rt.patch_model(once, precision="exact")
    rt.patch_model(like_torch, precision="exact", rounding="like_torch")
    want_once = output(once, INPUTS)
    assert not torch.equal(want_once, output(like_torch, INPUTS))
    torch._dynamo.reset()
    compiled_eager = torch.compile(eager, fullgraph=True, backend="aot_eager")
    compiled_once = torch.compile(once, fullgraph=True, backend="aot_eager")
    calls = kernel_calls(monkeypatch)
    assert torch.equal(output(compiled_once, INPUTS), want_once)
    assert calls["kernel"] == 2 * config.num_hidden_layers, calls
    assert torch.equal(output(compiled_eager, INPUTS), want)
    assert torch.equal(output(compiled_once, INPUTS), want_once)  # again, after the other (no stale guard)


def test_deep_copy_of_an_exact_model_keeps_its_rounding_and_outlives_the_original(restore_modeling):
    """copy.deepcopy binds the copied methods to the copy's modules; unpatching the original
    leaves the copy on its rounding, unpatching the copy puts transformers' methods back."""
    model_cls, config = FAMILIES["llama"]()
    want = output(build(model_cls, config, torch.bfloat16), INPUTS)
    model = build(model_cls, config, torch.bfloat16)
    restore_modeling(model)
    rt.patch_model(model, precision="exact")
    want_once = output(model, INPUTS)
    twin = copy.deepcopy(model)
    attention = twin.model.layers[0].self_attn
    assert vars(attention)["forward"].__self__ is attention
    assert torch.equal(output(twin, INPUTS), want_once)
    rt.unpatch_model(model)
    assert torch.equal(output(model, INPUTS), want)
    assert torch.equal(output(twin, INPUTS), want_once)
    rt.unpatch_model(twin)
    assert not _own_methods(twin) and torch.equal(output(twin, INPUTS), want)


def test_a_module_with_its_own_forward_is_refused_for_another_rounding(restore_modeling):
    """A module that already has an instance-level forward (a hook's wrapper) cannot take rotary's
    copy without dropping it: RotaryError naming it, nothing patched. precision="hf" needs no copy."""
    model_cls, config = FAMILIES["llama"]()
    model = build(model_cls, config, torch.float32)
    modules = restore_modeling(model)
    attention = model.model.layers[1].self_attn
    hooked = functools.partial(type(attention).forward, attention)
    attention.forward = hooked
    functions = {(m.__name__, n): getattr(m, n) for m in modules for n in dir(m) if n.startswith("apply_")}
    with pytest.raises(rotary.RotaryError, match=r"patch_model: cannot serve LlamaForCausalLM with rounding 'once': "
                                                 r"model.layers.1.self_attn \(LlamaAttention\) has its own forward "
                                                 r"attribute.*nothing was patched"):
        rt.patch_model(model, precision="exact")
    assert attention.forward is hooked and not _own_methods(model)
    assert not isinstance(model.model.rotary_emb, rt.RotaryEmbedding) and not hasattr(model, "_rotary_patch")
    assert {(m.__name__, n): getattr(m, n) for m in modules for n in dir(m) if n.startswith("apply_")} == functions
    rt.patch_model(model)  # precision="hf": the module-level function serves it, the hook stays
    assert attention.forward is hooked
    rt.unpatch_model(model)


def test_an_exact_model_fused_rotates_once_inside_the_fused_kernel(monkeypatch, restore_modeling):
    """fuse_rope on a precision="exact" patched model: the model's own apply function hands the
    fused backend q and k un-rotated, as the module-level wrapper does (no rotation twice, no
    refusal for a missed call), and the logits stay within the fused tolerance of the unfused ones."""
    import rotary._torch_fused_backend as backend
    from test_torch_fused import close

    model_cls, config = FAMILIES["llama"]()
    model = build(model_cls, config, torch.float32)
    model.set_attn_implementation("sdpa")
    restore_modeling(model)
    rt.patch_model(model, precision="exact")
    ids = prompt()
    want = logits(model, ids)
    rt.fuse_rope(model, precision="exact")
    rows = counted_calls(monkeypatch, backend, "_fused_rows")
    assert close(logits(model, ids), want)
    assert rows["n"] == config.num_hidden_layers
    rt.unfuse_rope(model)
    rt.unpatch_model(model)
    assert not _own_methods(model)
