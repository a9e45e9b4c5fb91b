"""rotary.torch.fuse_rope: transformers models whose attention hands un-rotated q and k to rotary's
kernel, which rotates them as it loads them (python/rotary/_torch_fused.py; docs/attention.md,
"Fused RoPE in the transformers backend").

Real model classes from tiny random configs (Llama, Qwen3, Gemma 3 with a sliding window of 4
tokens and both layer types, a YaRN-scaled Llama), float32, against the same weights on "sdpa":
logits, greedy generation (unpadded and left-padded, DynamicCache and StaticCache), then every
refusal, and the models the fusion must leave alone.

Tolerance: logits within 1024 u max|logit| (u = 2^-24), the unfused backend's
(test_torch_attention.py), derived in docs/attention.md ("Fused RoPE ...", tolerance). The fused
path differs from SDPA's inputs only in how q and k are rotated: rotary's HF-compatible table
(cos/sin within one float32 ulp of the model's) and the kernel's float32 rotation instead of
transformers' three roundings: each rotated pair moves by at most 10 u of its length, each score
by at most 20 u A (A = scale |q| |k|: 0.21 Llama, 4.0 Qwen3 (its q/k RMSNorm gives |q| = |k| =
sqrt(16) at unit weights), 1.0 Gemma 3, 0.28 YaRN Llama, measured) and each attention output by
at most 40 u A V = 160 u V, on top of the unfused 80 u V. The network's gain is not derived (as
for the unfused backend); 1024 u allows 4.3 on this bound. Observed (3 x 12 tokens): 3.0 u Llama,
5.2 u Qwen3, 8.8 u Gemma 3, 3.7 u YaRN Llama. Greedy tokens must be identical.
"""
import copy
import gc
import threading

import pytest

import torch  # required: a missing dependency fails, never skips
import transformers  # required: a missing dependency fails, never skips
import rotary  # noqa: E402
import rotary.torch as rt  # noqa: E402
from hf_harness import (ATTENTION_FAMILIES as FAMILIES, counted_calls, logits, one_torch_thread,  # noqa: E402,F401
                        prompt, small)

U = 2.0**-24
F32_LOGIT_TOLERANCE = 1024 * U  # relative to max|logit| (module docstring, docs/attention.md)


def _yarn():
    return transformers.LlamaForCausalLM, small(
        transformers.LlamaConfig, max_position_embeddings=256,
        rope_parameters={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
                         "rope_theta": 10000.0})


ALL = {**FAMILIES, "llama-yarn": _yarn}


def fused_pair(family, precision="hf", **config_changes):
    """(sdpa model, fused model) with the same weights; the fused one through rt.fuse_rope."""
    model_cls, config = ALL[family]()
    for key, value in config_changes.items():
        setattr(config, key, value)
    torch.manual_seed(0)
    sdpa = model_cls._from_config(copy.deepcopy(config), attn_implementation="sdpa").eval()
    fused = model_cls._from_config(copy.deepcopy(config), attn_implementation="sdpa").eval()
    fused.load_state_dict(sdpa.state_dict())
    names = rt.fuse_rope(fused, precision=precision)
    assert len(names) == config.num_hidden_layers
    assert fused.config._attn_implementation == "rotary_fused"
    return sdpa, fused


def close(got, want, where=None):
    if where is not None:
        got, want = got[where], want[where]
    worst = (got - want).abs().max().item()
    return worst <= F32_LOGIT_TOLERANCE * want.abs().max().item()


@pytest.fixture
def fused_calls(monkeypatch):
    """Counts the fused kernel's row passes: a model that silently ran unfused must fail."""
    import rotary._torch_fused_backend as module

    return counted_calls(monkeypatch, module, "_fused_rows")


@pytest.mark.parametrize("family", list(ALL))
def test_fused_logits_and_greedy_generation_equal_sdpa(family, fused_calls):
    sdpa, fused = fused_pair(family)
    ids = prompt()
    want, got = logits(sdpa, ids), logits(fused, ids)
    layers = fused.config.num_hidden_layers
    assert fused_calls["n"] == layers
    assert close(got, want)
    # 10 new tokens: Gemma 3's sliding layers (window 4) decode from a cache that dropped keys.
    tokens_sdpa = sdpa.generate(ids, max_new_tokens=10, do_sample=False)
    tokens_fused = fused.generate(ids, max_new_tokens=10, do_sample=False)
    assert fused_calls["n"] == layers * (1 + 10)
    assert torch.equal(tokens_fused, tokens_sdpa)


@pytest.mark.parametrize("family", list(ALL))
def test_fused_left_padded_batch_and_static_cache_equal_sdpa(family, fused_calls):
    sdpa, fused = fused_pair(family)
    ids = prompt(batch=3)
    mask = torch.ones(3, 12, dtype=torch.long)
    mask[0, :5] = 0  # left padding of 5 and of 1; row 2 unpadded
    mask[1, :1] = 0
    want, got = logits(sdpa, ids, attention_mask=mask), logits(fused, ids, attention_mask=mask)
    assert close(got, want, mask.bool())
    for cache in (None, "static"):
        tokens_sdpa = sdpa.generate(ids, attention_mask=mask, max_new_tokens=8, do_sample=False,
                                    cache_implementation=cache)
        tokens_fused = fused.generate(ids, attention_mask=mask, max_new_tokens=8, do_sample=False,
                                      cache_implementation=cache)
        assert torch.equal(tokens_fused, tokens_sdpa), cache
    assert fused_calls["n"] == fused.config.num_hidden_layers * (1 + 8 + 8)


def test_fused_custom_masks_take_one_call_or_one_per_row_and_equal_sdpa(monkeypatch):
    """A custom 4-D mask: left padding (row 1's keys from index 2) runs the batch in one kernel call
    per layer (kv_starts); a row whose queries sit before their keys (row 0: each query sees only
    the keys before it, a causal offset of -1) makes the layer run one call per row. Both equal
    SDPA with the same mask."""
    calls = counted_calls(monkeypatch, rotary._rotary, "attention")
    sdpa, fused = fused_pair("llama")
    ids = prompt(batch=2)
    n = ids.shape[1]
    i, j = torch.arange(n).view(n, 1), torch.arange(n).view(1, n)
    layers = fused.config.num_hidden_layers
    left_padded = torch.stack([j <= i, (j <= i) & (j >= 2)])[:, None]
    before_keys = torch.stack([j <= i - 1, (j <= i) & (j >= 2)])[:, None]
    for mask, want_calls in ((left_padded, layers), (before_keys, 2 * layers)):
        calls["n"] = 0
        got, want = logits(fused, ids, attention_mask=mask), logits(sdpa, ids, attention_mask=mask)
        assert calls["n"] == want_calls
        assert close(got, want)


def test_fused_keys_are_cached_unrotated_and_rotation_matters(fused_calls):
    """The cache of a fused model holds the un-rotated keys (the model's rotation was skipped), and
    the positions matter: shifting every position by 5 keeps the logits (RoPE is relative) while
    rotary rotates at the shifted positions; a cache continued with wrong positions is refused."""
    sdpa, fused = fused_pair("llama")
    ids = prompt(batch=1)
    cache_sdpa, cache_fused = transformers.DynamicCache(config=sdpa.config), \
        transformers.DynamicCache(config=fused.config)
    with torch.no_grad():
        sdpa(ids, past_key_values=cache_sdpa)
        fused(ids, past_key_values=cache_fused)
    k_sdpa, k_fused = cache_sdpa.layers[0].keys, cache_fused.layers[0].keys
    assert (k_sdpa - k_fused).abs().max().item() > 1e-2  # rotated vs not
    spec = fused.model.layers[0].self_attn._rotary_fused_rope.spec
    rotated = rotary.torch.apply_rotary(k_fused, None, torch.arange(12).view(1, 12), spec)[0]
    assert (rotated - k_sdpa).abs().max().item() < 1e-5
    # Consecutive positions from 5: exact (the cached keys' positions are slot + 5).
    shifted = torch.arange(5, 17).view(1, 12)
    assert close(logits(fused, ids, position_ids=shifted), logits(sdpa, ids, position_ids=shifted))


def test_custom_position_ids_are_refused_and_would_be_wrong(monkeypatch):
    """Positions that are not slot + a constant cannot be derived for the cached keys: refused,
    naming position_ids and the values. With the check removed the answer is wrong (not merely
    refused), so the refusal guards a real error."""
    import rotary._torch_fused_backend as module

    sdpa, fused = fused_pair("llama")
    ids = prompt(batch=1)
    gapped = torch.tensor([[0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 15]])
    with pytest.raises(rotary.RotaryError, match=r"position_ids of batch row 0 are not consecutive over the row's "
                                                 r"tokens \(got position_ids\[0, 6\] = 10, expected 6"):
        logits(fused, ids, position_ids=gapped)
    # A decode step whose position does not continue the cache: refused.
    cache = transformers.DynamicCache(config=fused.config)
    with torch.no_grad():
        fused(ids, past_key_values=cache)
        with pytest.raises(rotary.RotaryError, match=r"position_ids of batch row 0 do not continue the cached keys' "
                                                     r"positions \(got position_ids\[0, ...\] = cache slot \+ 3"):
            fused(prompt(batch=1, seq=1), past_key_values=cache, position_ids=torch.tensor([[15]]))
    # Without the check, the gapped positions give other logits than transformers' (which rotate
    # each token at its given position): the check is what keeps the answer exact.
    monkeypatch.setattr(module, "_row_delta", lambda where, b, seeing, q_pos_row, q_offset: int(q_pos_row[0]))
    want = logits(sdpa, ids, position_ids=gapped)
    got = logits(fused, ids, position_ids=gapped)
    assert not close(got, want)


def test_a_cache_not_written_by_the_fused_model_is_refused():
    sdpa, fused = fused_pair("qwen3")
    ids = prompt()
    cache = transformers.DynamicCache(config=sdpa.config)
    with torch.no_grad():
        sdpa(ids, past_key_values=cache)  # rotated keys
        with pytest.raises(rotary.RotaryError, match=r"past_key_values holds 12 tokens for layer 0 but no fused call "
                                                     r"wrote it"):
            fused(prompt(seq=1), past_key_values=cache)


def test_unsupported_cache_class_is_refused():
    class OtherCache(transformers.DynamicCache):
        pass

    _, fused = fused_pair("llama")
    with torch.no_grad(), pytest.raises(rotary.RotaryError, match=r"past_key_values must be a DynamicCache or "
                                                                  r"StaticCache \(got OtherCache\)"):
        fused(prompt(), past_key_values=OtherCache(config=fused.config))


@pytest.mark.parametrize("params, message", [
    ({"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}, r"rope_type 'dynamic' changes its frequencies "
                                                                      r"with the sequence length"),
    ({"rope_type": "longrope", "short_factor": [1.0] * 8, "long_factor": [2.0] * 8,
      "original_max_position_embeddings": 64, "rope_theta": 10000.0}, r"rope_type 'longrope' changes its frequencies"),
])
def test_sequence_dependent_rope_is_refused(params, message):
    config = small(transformers.LlamaConfig, max_position_embeddings=256, rope_parameters=params)
    model = transformers.LlamaForCausalLM._from_config(config, attn_implementation="sdpa").eval()
    with pytest.raises(rotary.RotaryError, match=message):
        rt.fuse_rope(model)
    assert model.config._attn_implementation == "sdpa"  # nothing changed
    assert not hasattr(model, "_rotary_fused")


def test_mrope_is_refused():
    config = transformers.Qwen2VLTextConfig(
        vocab_size=97, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, bos_token_id=1, eos_token_id=2,
        rope_parameters={"rope_type": "default", "mrope_section": [2, 3, 3], "rope_theta": 10000.0})
    model = transformers.Qwen2VLTextModel._from_config(config, attn_implementation="sdpa").eval()
    with pytest.raises(rotary.RotaryError, match=r"mrope RoPE takes 3 position streams"):
        rt.fuse_rope(model)


def test_a_wrong_spec_mapping_is_caught_by_the_cos_sin_check(monkeypatch):
    """The first forward compares each layer's table with the model's position_embeddings: a spec
    with another theta (precision 'exact': the table computes its own frequencies) is refused
    before anything is computed. Without the check the logits are wrong by far more than the
    tolerance."""
    import rotary._torch_fused_backend as module

    original = rotary.Spec.from_hf_config
    monkeypatch.setattr(rotary.Spec, "from_hf_config",
                        classmethod(lambda cls, config, **kw: original(config, **kw).replace(theta_base=5000.0)))
    sdpa, fused = fused_pair("llama", precision="exact")
    ids = prompt()
    with pytest.raises(rotary.RotaryError, match=r"rotary's cos for this layer .* differs from the model's "
                                                 r"position_embeddings by .* at position .*a wrong spec mapping"):
        logits(fused, ids)
    monkeypatch.setattr(module, "_check_cos_sin", lambda *args: None)
    assert not close(logits(fused, ids), logits(sdpa, ids))


def test_the_rotation_must_be_intercepted_exactly_once(monkeypatch):
    """A modeling module whose function rotary's wrapper no longer sees (replaced after fuse_rope):
    q and k were rotated by other code, so the backend refuses instead of rotating twice."""
    import transformers.models.llama.modeling_llama as modeling

    _, fused = fused_pair("llama")
    wrapper = modeling.apply_rotary_pos_emb
    monkeypatch.setattr(modeling, "apply_rotary_pos_emb", wrapper.rotary_fused_inner)
    with pytest.raises(rotary.RotaryError, match=r"passed q and k through transformers.models.llama.modeling_llama."
                                                 r"apply_rotary_pos_emb 0 times"):
        logits(fused, prompt())

    def twice(q, k, cos, sin, unsqueeze_dim=1):
        wrapper(q, k, cos, sin, unsqueeze_dim)
        return wrapper(q, k, cos, sin, unsqueeze_dim)

    monkeypatch.setattr(modeling, "apply_rotary_pos_emb", twice)
    with pytest.raises(rotary.RotaryError, match=r"called apply_rotary_pos_emb 2 times in one forward"):
        logits(fused, prompt())


def test_other_refusals():
    sdpa, fused = fused_pair("gemma3")
    with pytest.raises(rotary.RotaryError, match=r"it is fused already"):
        rt.fuse_rope(fused)
    with pytest.raises(rotary.RotaryError, match=r"precision must be 'hf' or 'exact' \(got 'fast'\)"):
        rt.fuse_rope(sdpa, precision="fast")
    with pytest.raises(rotary.RotaryError, match=r"not a transformers PreTrainedModel"):
        rt.fuse_rope(torch.nn.Linear(2, 2))
    with pytest.raises(rotary.RotaryError, match=r"was not fused by rotary.torch.fuse_rope"):
        rt.unfuse_rope(sdpa)
    # Gradients: inference only.
    ids = prompt()
    with pytest.raises(rotary.RotaryError, match=r"fused RoPE is inference-only \(got q, k or v with "
                                                 r"requires_grad=True\)"):
        fused(ids)
    # The attention implementation switched away under a fused model: the model would compute
    # attention on un-rotated q and k; refused before the forward.
    fused.set_attn_implementation("sdpa")
    with pytest.raises(rotary.RotaryError, match=r"attn_implementation must stay 'rotary_fused' while RoPE is fused "
                                                 r"\(got 'sdpa'\)"):
        logits(fused, ids)
    # The backend outside a fused model.
    module = torch.nn.Module()
    q = torch.zeros(1, 2, 3, 8)
    with pytest.raises(rotary.RotaryError, match=r"runs only in a model prepared by rotary.torch.fuse_rope"):
        rt.rotary_fused_attention_forward(module, q, q, q, None)


def test_unfuse_restores_the_model_and_the_modeling_function():
    import transformers.models.qwen3.modeling_qwen3 as modeling

    gc.collect()  # fused Qwen3 models of earlier tests no longer hold the wrapper
    sdpa, fused = fused_pair("qwen3")
    _, other = fused_pair("qwen3")
    assert hasattr(modeling.apply_rotary_pos_emb, "rotary_fused_inner")
    ids = prompt()
    rt.unfuse_rope(fused)
    assert fused.config._attn_implementation == "sdpa"
    assert torch.equal(logits(fused, ids), logits(sdpa, ids))  # the model's own rotation and attention again
    tokens = fused.generate(ids, max_new_tokens=4, do_sample=False)
    assert torch.equal(tokens, sdpa.generate(ids, max_new_tokens=4, do_sample=False))
    assert hasattr(modeling.apply_rotary_pos_emb, "rotary_fused_inner")  # `other` still needs it
    assert close(logits(other, ids), logits(sdpa, ids))
    rt.unfuse_rope(other)
    assert not hasattr(modeling.apply_rotary_pos_emb, "rotary_fused_inner")  # transformers' own again


@pytest.mark.filterwarnings("ignore:Dynamo does not know how to trace the builtin")
def test_torch_compile_refuses_a_fused_model_and_compiles_the_others(fused_calls):
    """A fused model under torch.compile is refused (its checks read values), never run with the
    model's rotation and rotary's both; an unfused model of a class whose function is wrapped
    still compiles whole (fullgraph=True): the wrapper is transformers' function under Dynamo."""
    torch._dynamo.reset()
    sdpa, fused = fused_pair("gemma3")
    ids = prompt()
    with torch.no_grad(), pytest.raises(Exception):
        torch.compile(fused, fullgraph=True)(ids)
    torch._dynamo.reset()
    with torch.no_grad(), pytest.raises(rotary.RotaryError, match=r"apply_rotary_pos_emb 0 times|runs eagerly"):
        torch.compile(fused)(ids)
    torch._dynamo.reset()
    want = logits(sdpa, ids)
    compiled = torch.compile(copy.deepcopy(sdpa), fullgraph=True)
    with torch.no_grad():
        assert torch.equal(compiled(ids).logits.double(), want) or close(compiled(ids).logits.double(), want)
    torch._dynamo.reset()


def test_other_models_and_threads_still_rotate(fused_calls):
    """The wrapped module-level function rotates for every call that is not a fused module's: a
    plain model of the same class (before, after and inside a fused forward, in this thread and in
    another) and an unfused rotary-backend model give the bits they gave before any fusion."""
    model_cls, config = FAMILIES["llama"]()
    torch.manual_seed(1)
    plain = model_cls._from_config(copy.deepcopy(config), attn_implementation="sdpa").eval()
    rt.register_attention()
    unfused = model_cls._from_config(copy.deepcopy(config), attn_implementation="rotary").eval()
    unfused.load_state_dict(plain.state_dict())
    ids = prompt()
    before_plain, before_unfused = logits(plain, ids), logits(unfused, ids)
    sdpa, fused = fused_pair("llama")
    assert torch.equal(logits(plain, ids), before_plain)
    assert torch.equal(logits(unfused, ids), before_unfused)
    seen = {}

    def inside(module, args, output):  # runs inside the fused attention's forward, with its call set
        seen["same thread"] = logits(plain, ids)
        worker = threading.Thread(target=lambda: seen.__setitem__("other thread", logits(unfused, ids)))
        worker.start()
        worker.join()

    handle = fused.model.layers[0].self_attn.q_proj.register_forward_hook(inside)
    try:
        got = logits(fused, ids)
    finally:
        handle.remove()
    assert torch.equal(seen["same thread"], before_plain)
    assert torch.equal(seen["other thread"], before_unfused)
    assert close(got, logits(sdpa, ids))
    assert fused_calls["n"] == fused.config.num_hidden_layers


def test_exact_precision_is_within_the_same_tolerance(fused_calls):
    """precision='exact' (correctly rounded cos/sin instead of the model's float32 chain): at these
    positions (< 32) the two tables differ by < 2e-6, far inside the logit tolerance."""
    sdpa, fused = fused_pair("gemma3", precision="exact")
    ids = prompt()
    assert close(logits(fused, ids), logits(sdpa, ids))
    assert torch.equal(fused.generate(ids, max_new_tokens=6, do_sample=False),
                       sdpa.generate(ids, max_new_tokens=6, do_sample=False))


@pytest.mark.parametrize("family", list(ALL))
def test_bfloat16_logits_within_tolerance_when_cast_after_fusing(family, fused_calls):
    """model.to(bfloat16) after fuse_rope rounds the model's inv_freq buffer, and transformers then
    computes cos/sin from the rounded values: the table follows the buffer (rebuilt and checked
    again). bfloat16 tolerance: the unfused backend's, 16 bfloat16 units (2^-8) of max|logit|
    (observed 1.1 Llama, 1.5 Qwen3, 3.0 Gemma 3, 1.5 YaRN Llama)."""
    sdpa, fused = fused_pair(family)
    sdpa, fused = sdpa.to(torch.bfloat16), fused.to(torch.bfloat16)
    ids = prompt()
    want, got = logits(sdpa, ids), logits(fused, ids)
    assert fused_calls["n"] == fused.config.num_hidden_layers
    worst = (got - want).abs().max().item() / want.abs().max().item()
    assert worst <= 16 * 2.0**-8, f"worst |fused - sdpa| / max|logit| = {worst:.4g}"
    rope = fused.model.layers[0].self_attn._rotary_fused_rope
    assert rope.key[1] == torch.bfloat16 and rope.checked  # rebuilt from the rounded buffer, checked


@pytest.mark.parametrize("family", ["llama", "gemma3"])
def test_beam_search_and_sampling_equal_sdpa(family, fused_calls):
    """Beam search reorders the cache's rows between steps (beams of one prompt share its
    padding, so each row keeps its position offset) and sampling expands the batch before the
    prefill: the same tokens as SDPA, left-padded."""
    sdpa, fused = fused_pair(family)
    ids = prompt()
    mask = torch.ones(2, 12, dtype=torch.long)
    mask[0, :4] = 0
    for kwargs in (dict(num_beams=3), dict(do_sample=True, num_return_sequences=2, top_k=5)):
        torch.manual_seed(3)
        want = sdpa.generate(ids, attention_mask=mask, max_new_tokens=8, **kwargs)
        torch.manual_seed(3)
        got = fused.generate(ids, attention_mask=mask, max_new_tokens=8, **kwargs)
        assert torch.equal(got, want), kwargs
    assert fused_calls["n"] == 2 * 8 * fused.config.num_hidden_layers


def test_an_attention_function_swapped_under_the_fused_name_is_refused(monkeypatch):
    """If "rotary_fused" no longer names rotary's backend, the model attends over un-rotated q and
    k with another function: the forward hook sees that rotary's backend never ran and refuses the
    output. Without that check the logits are silently wrong."""
    import rotary._torch_fused_backend as module
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    sdpa, fused = fused_pair("llama")
    ids = prompt()
    monkeypatch.setitem(AttentionInterface._global_mapping, "rotary_fused", sdpa_attention_forward)
    with pytest.raises(rotary.RotaryError, match=r"did not call rotary's fused attention exactly once \(got 0 "
                                                 r"calls\): its q and k were not rotated"):
        logits(fused, ids)
    def reset_only(hooked, args, kwargs, output):  # the post-hook without its check
        module._ACTIVE.reset(module._ACTIVE.get().token)

    monkeypatch.setattr(module, "_post_hook", reset_only)
    fused_again = fused_pair("llama")[1]  # hooks registered with the post-hook that does not check
    monkeypatch.setitem(AttentionInterface._global_mapping, "rotary_fused", sdpa_attention_forward)  # again
    assert not close(logits(fused_again, ids), logits(sdpa, ids))


def test_patch_model_and_fuse_rope_share_the_modeling_function(fused_calls):
    """patch_model on another model of a fused model's class replaces the function behind rotary's
    wrapper, not the wrapper: the patched model runs rotary's rotation bit for bit, the fused
    model stays fused; unpatch_model and unfuse_rope each put back what they replaced. A patched
    model can be fused too."""
    import transformers.models.llama.modeling_llama as modeling

    gc.collect()
    own = modeling.apply_rotary_pos_emb
    own = getattr(own, "rotary_fused_inner", own)
    sdpa, fused = fused_pair("llama")
    other = copy.deepcopy(sdpa)
    ids = prompt()
    want = logits(sdpa, ids)
    rt.patch_model(other)
    wrapper = modeling.apply_rotary_pos_emb
    assert hasattr(wrapper.rotary_fused_inner, "rotary_original")  # patch_model's, behind the wrapper
    assert torch.equal(logits(other, ids), want)
    assert close(logits(fused, ids), want)
    assert fused_calls["n"] == fused.config.num_hidden_layers
    rt.unpatch_model(other)
    assert modeling.apply_rotary_pos_emb is wrapper and wrapper.rotary_fused_inner is own
    rt.unfuse_rope(fused)
    assert modeling.apply_rotary_pos_emb is own
    # A patched model, then fused: rotary's cos/sin module and rotation behind the fused backend.
    rt.patch_model(fused)
    rt.fuse_rope(fused)
    assert close(logits(fused, ids), want)
    rt.unfuse_rope(fused)
    rt.unpatch_model(fused)
    assert modeling.apply_rotary_pos_emb is own
    assert torch.equal(logits(fused, ids), want)


def _other(model_cls, config_cls, **kwargs):
    return lambda: (model_cls, small(config_cls, max_position_embeddings=256, **kwargs))


OTHER_FAMILIES = {
    "mistral": _other(transformers.MistralForCausalLM, transformers.MistralConfig, sliding_window=4),
    "cohere": _other(transformers.CohereForCausalLM, transformers.CohereConfig),  # interleaved pairs
    "gpt_neox": _other(transformers.GPTNeoXForCausalLM, transformers.GPTNeoXConfig),  # rotary on 1/4 of the head
    "phi3": _other(transformers.Phi3ForCausalLM, transformers.Phi3Config),
    "olmo2": _other(transformers.Olmo2ForCausalLM, transformers.Olmo2Config),
}


@pytest.mark.parametrize("family", list(OTHER_FAMILIES))
def test_other_families_fuse_exactly(family, fused_calls, monkeypatch):
    """Families beyond the three of the issue, as they are in transformers 5.16: Mistral (a
    sliding window on every layer), Cohere (interleaved pairs, rotated in float32), GPT-NeoX
    (partial rotary: 4 of 16 dims), Phi-3, OLMo 2. Same tolerance; observed 3.4 u, 3.3 u, 4.3 u,
    5.2 u, 7.6 u."""
    monkeypatch.setitem(ALL, family, OTHER_FAMILIES[family])
    sdpa, fused = fused_pair(family)
    ids = prompt()
    assert close(logits(fused, ids), logits(sdpa, ids))
    assert torch.equal(fused.generate(ids, max_new_tokens=6, do_sample=False),
                       sdpa.generate(ids, max_new_tokens=6, do_sample=False))
    assert fused_calls["n"] == fused.config.num_hidden_layers * (1 + 6)


def test_a_rotation_rotary_does_not_reproduce_is_refused():
    """GLM's apply_rotary_pos_emb (interleaved pairs that read the first half of cat(f, f) cos/sin,
    each value twice) is none of rotary's probed variants: refused at fuse_rope, before anything
    changes."""
    config = small(transformers.GlmConfig, head_dim=16, max_position_embeddings=256)
    model = transformers.GlmForCausalLM._from_config(config, attn_implementation="sdpa").eval()
    with pytest.raises(rotary.RotaryError, match=r"fuse_rope: cannot fuse GlmForCausalLM: rotary's rotation does not "
                                                 r"reproduce transformers.models.glm.modeling_glm.apply_rotary_pos_emb"):
        rt.fuse_rope(model)
    assert model.config._attn_implementation == "sdpa" and not hasattr(model, "_rotary_fused")


# ---- only the model it is given ------------------------------------------------------------------------
def test_fusing_leaves_models_that_share_its_config_alone(fused_calls):
    """transformers' from_config keeps the config object it is given, so every model built from one
    config shares it, and the attention modules read config._attn_implementation at each forward.
    fuse_rope gives the fused model its own copy: the eager model built from the same config object
    keeps transformers' eager logits bit for bit and runs (before the copy it crashed with "runs only
    in a model prepared by rotary.torch.fuse_rope(model)"), and the fused model computes what a
    fused model with a config of its own computes, bit for bit."""
    from transformers import AutoModelForCausalLM

    _, config = ALL["llama"]()
    torch.manual_seed(0)
    eager = AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    fused = AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    assert eager.config is fused.config is config  # transformers' sharing, which this test is about
    fused.load_state_dict(eager.state_dict())
    alone = AutoModelForCausalLM.from_config(copy.deepcopy(config), attn_implementation="eager").eval()
    alone.load_state_dict(eager.state_dict())
    ids = prompt()
    before = logits(eager, ids)
    rt.fuse_rope(fused)
    rt.fuse_rope(alone)
    assert config._attn_implementation == "eager" and eager.config is config
    assert fused.config is not config and fused.config._attn_implementation == "rotary_fused"
    assert all(m.config is fused.config for m in fused.modules() if "config" in m.__dict__
               and isinstance(m.config, transformers.LlamaConfig))
    assert torch.equal(logits(eager, ids), before)
    calls = fused_calls["n"]
    got = logits(fused, ids)
    assert fused_calls["n"] > calls  # it ran fused
    assert torch.equal(got, logits(alone, ids)) and close(got, before)
    tokens = eager.generate(ids, max_new_tokens=3, do_sample=False)
    assert torch.equal(tokens, fused.generate(ids, max_new_tokens=3, do_sample=False))
    rt.unfuse_rope(fused)
    assert fused.config._attn_implementation == "eager" and config._attn_implementation == "eager"
    assert torch.equal(logits(fused, ids), before)
    rt.unfuse_rope(alone)


def test_deep_copy_of_a_fused_model_runs_fused_and_outlives_the_original(fused_calls):
    """copy.deepcopy of a fused model (it raised "cannot pickle 'rotary._rotary.RopeSpec' object"):
    the copy gives the same logits through the fused kernel, shares the immutable spec and table,
    keeps running when the original is unfused (it counts as a user of the wrapper), and
    unfuse_rope of the copy removes the copy's hooks, not the original's."""
    import transformers.models.llama.modeling_llama as modeling

    gc.collect()  # fused Llama models of earlier tests no longer hold the wrapper
    sdpa, fused = fused_pair("llama")
    ids = prompt()
    want = logits(fused, ids)
    twin = copy.deepcopy(fused)
    rope, twin_rope = fused.model.layers[0].self_attn._rotary_fused_rope, twin.model.layers[0].self_attn._rotary_fused_rope
    assert twin_rope is not rope and twin_rope.spec is rope.spec
    assert twin_rope.source[0] is twin.model.rotary_emb  # the copy's own inv_freq buffer
    calls = fused_calls["n"]
    assert torch.equal(logits(twin, ids), want)
    assert fused_calls["n"] > calls
    rt.unfuse_rope(fused)
    assert torch.equal(logits(fused, ids), logits(sdpa, ids))
    assert hasattr(modeling.apply_rotary_pos_emb, "rotary_fused_inner")  # the copy still relies on it
    assert torch.equal(logits(twin, ids), want)
    rt.unfuse_rope(twin)
    assert torch.equal(logits(twin, ids), logits(sdpa, ids))
    assert not hasattr(modeling.apply_rotary_pos_emb, "rotary_fused_inner")
