"""rotary.FusedRope: fused RoPE's terms grouped as one argument of rotary.attention and
rotary.torch.attention (rope=), as C++'s AttentionRope is apart from AttentionOptions. The group
gives the same bits as the deprecated flat keywords, which warn; mixing the two, or a rope that is
not a FusedRope, is refused by name."""
import dataclasses
import re
import warnings

import ml_dtypes
import numpy as np
import pytest
import torch

import rotary
import rotary.torch as rt

FLAT = ("spec_or_table", "q_positions", "k_positions", "rotary_offset", "precision", "seq_len")
SPEC = rotary.Spec.preset("llama-3.1-8b").replace(head_dim=32, rotary_dim=32, num_attention_heads=4,
                                                  num_key_value_heads=2)
PARTIAL = SPEC.replace(rotary_dim=16)  # rotary_offset 8: the rotated block is dims 8..23

# (spec, FusedRope's terms besides the source); positions are [batch, seq] with batch 2, q_len 5,
# kv_len 9, and far apart so that the rotation's angles differ from the mask's.
CASES = {
    "the mask's positions": (SPEC, {}),
    "positions": (SPEC, {"q_positions": np.array([[704, 705, 706, 707, 708], [9, 10, 11, 12, 13]]),
                         "k_positions": np.array([np.arange(700, 709), np.arange(5, 14)])}),
    "rotary_offset": (PARTIAL, {"rotary_offset": 8}),
    "precision hf, positions and seq_len": (SPEC, {"precision": "hf", "seq_len": 100_000,
                                                   "q_positions": 99_000 + np.arange(5)[None],
                                                   "k_positions": 98_996 + np.arange(9)[None]}),
}


def random_qkv(seed, dtype):
    rng = np.random.default_rng(seed)
    make = lambda *shape: (rng.uniform(0.25, 2.0, shape) * rng.choice([-1.0, 1.0], shape)).astype(dtype)  # noqa: E731
    return make(2, 4, 5, 32), make(2, 2, 9, 32), make(2, 2, 9, 24)


def numpy_call(q, k, v, **kwargs):
    return rotary.attention(q, k, v, causal=True, query_offset=4, **kwargs)


def torch_call(q, k, v, **kwargs):
    moved = {key: torch.from_numpy(value) if isinstance(value, np.ndarray) else value for key, value in kwargs.items()}
    if isinstance(moved.get("rope"), rotary.FusedRope):
        rope = moved["rope"]
        moved["rope"] = dataclasses.replace(rope, **{name: torch.from_numpy(getattr(rope, name)) for name in
                                                     ("q_positions", "k_positions") if getattr(rope, name) is not None})
    return rt.attention(q, k, v, causal=True, query_offset=4, **moved)


def torch_tensors(arrays, dtype):
    return [torch.from_numpy(a.astype(np.float32)).to(dtype) for a in arrays]


API = {
    "numpy float32": (numpy_call, lambda a: a),
    "numpy bfloat16": (numpy_call, lambda a: [x.astype(ml_dtypes.bfloat16) for x in a]),
    "torch float32": (torch_call, lambda a: torch_tensors(a, torch.float32)),
    "torch bfloat16": (torch_call, lambda a: torch_tensors(a, torch.bfloat16)),
}


def bits(out):
    if isinstance(out, torch.Tensor):
        return out.view(torch.int16).numpy() if out.dtype == torch.bfloat16 else out.view(torch.int32).numpy()
    return out.view(np.uint16 if out.dtype == ml_dtypes.bfloat16 else np.uint32)


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("api", list(API))
def test_rope_group_equals_the_deprecated_flat_keywords(api, case):
    """rope=rotary.FusedRope(spec, ...) gives the flat call's bits; the flat call warns once,
    naming the replacement. Not vacuous: the rotation changes the output."""
    call, convert = API[api]
    spec, terms = CASES[case]
    q, k, v = convert(random_qkv(11, np.float32))
    grouped = call(q, k, v, rope=rotary.FusedRope(spec, **terms))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        flat = call(q, k, v, spec_or_table=spec, **terms)
    deprecations = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    assert len(deprecations) == 1, [str(w.message) for w in caught]
    message = str(deprecations[0].message)
    assert "rope=rotary.FusedRope(" in message and "spec_or_table" in message
    assert all(name in message for name in terms)
    assert deprecations[0].filename == __file__  # points at the caller's line
    assert np.array_equal(bits(grouped), bits(flat))
    plain = call(q, k, v)
    assert not np.array_equal(bits(grouped), bits(plain))


@pytest.mark.parametrize("api", ["numpy float32", "torch float32"])
def test_the_group_is_a_fused_rope_and_not_mixed_with_the_flat_keywords(api):
    call, convert = API[api]
    q, k, v = convert(random_qkv(12, np.float32))
    rope = rotary.FusedRope(SPEC)
    for bad in (SPEC, rotary.Table(SPEC), {"source": SPEC}):
        with pytest.raises(rotary.RotaryError, match=re.escape(f"rope must be a rotary.FusedRope or None (got "
                                                               f"{type(bad).__name__})")):
            call(q, k, v, rope=bad)
    flat_values = {"spec_or_table": SPEC, "q_positions": np.arange(5), "k_positions": np.arange(9),
                   "rotary_offset": 2, "precision": "hf", "seq_len": 64}
    for name in FLAT:
        with pytest.raises(rotary.RotaryError, match=rf"^rope and {name} are exclusive: .*\(got rope and {name}\)$"):
            call(q, k, v, rope=rope, **{name: flat_values[name]})
    with pytest.raises(rotary.RotaryError, match=r"rope and spec_or_table, precision are exclusive"):
        call(q, k, v, rope=rope, spec_or_table=SPEC, precision="hf")
    with pytest.raises(rotary.RotaryError, match=re.escape("rope.source must be a rotary.Spec or rotary.Table (got "
                                                           "NoneType)")):
        call(q, k, v, rope=rotary.FusedRope(None))


@pytest.mark.parametrize("api", ["numpy float32", "torch float32"])
def test_the_groups_values_are_checked_by_the_call(api):
    """Validation stays in attention: a group's bad value gets the flat keyword's error."""
    call, convert = API[api]
    q, k, v = convert(random_qkv(13, np.float32))
    with pytest.raises(rotary.RotaryError, match=r"rotary_offset must be an integer \(got 1.5\)"):
        call(q, k, v, rope=rotary.FusedRope(SPEC, rotary_offset=1.5))
    with pytest.raises(rotary.RotaryError, match=r"precision must be 'exact' or 'hf'"):
        call(q, k, v, rope=rotary.FusedRope(SPEC, precision="fast"))
    with pytest.raises(rotary.RotaryError, match=r"k_positions has shape \(3,\)"):
        call(q, k, v, rope=rotary.FusedRope(SPEC, k_positions=np.arange(3)))


def test_the_deprecated_flat_keywords_keep_their_refusals():
    """The flat terms without a source are refused as before (after their warning); positions with
    an absolute table are that table's, not deprecated."""
    q, k, v = random_qkv(14, np.float32)
    with pytest.deprecated_call(match=r"rope=rotary\.FusedRope"):
        with pytest.raises(rotary.RotaryError, match=re.escape(
                "q_positions is for fused RoPE or an absolute table and needs spec_or_table or absolute (got "
                "q_positions without either)")):
            rotary.attention(q, k, v, q_positions=np.arange(5))
    with pytest.deprecated_call(match=r"rope=rotary\.FusedRope"):
        with pytest.raises(rotary.RotaryError, match=re.escape(
                "rotary_offset is for fused RoPE and needs spec_or_table (got rotary_offset 2)")):
            rotary.attention(q, k, v, rotary_offset=2)
    # One refusal for every entry point (fused_rope_terms), with the value.
    for call, args in ((rotary.attention, (q, k, v)), (rt.attention, torch_tensors((q, k, v), torch.float32))):
        for name, value in (("precision", "hf"), ("seq_len", 64)):
            with pytest.deprecated_call(match=r"rope=rotary\.FusedRope"):
                with pytest.raises(rotary.RotaryError, match=re.escape(
                        f"{name} is for fused RoPE and needs spec_or_table (got {name} {value!r})")):
                    call(*args, **{name: value})
    table = rotary.sinusoidal_table(16, 32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rotary.attention(q, k, v, causal=True, query_offset=4, absolute=table, q_positions=np.arange(4, 9),
                         k_positions=np.arange(9))
        rt.attention(*torch_tensors((q, k, v), torch.float32), absolute=torch.from_numpy(table),
                     q_positions=torch.arange(5), k_positions=torch.arange(9))


def test_fused_rope_is_a_frozen_dataclass_exported_by_both_modules():
    rope = rotary.FusedRope(SPEC, q_positions=np.arange(3))
    assert rt.FusedRope is rotary.FusedRope and "FusedRope" in rotary.__all__ and "FusedRope" in rt.__all__
    assert (rope.source, rope.k_positions, rope.rotary_offset, rope.precision, rope.seq_len) == (SPEC, None, 0,
                                                                                                 None, None)
    assert [f.name for f in dataclasses.fields(rotary.FusedRope)] == ["source", "q_positions", "k_positions",
                                                                      "rotary_offset", "precision", "seq_len"]
    for name, value in (("source", PARTIAL), ("q_positions", None), ("rotary_offset", 4), ("seq_len", 8)):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(rope, name, value)
    assert rope.source is SPEC and rope.rotary_offset == 0
    with pytest.raises(TypeError):
        rotary.FusedRope()  # the source is required
    assert "AttentionRope" in rotary.FusedRope.__doc__


def test_torch_compile_fullgraph_with_the_group_and_positions():
    """A FusedRope made inside the compiled function, its positions graph inputs: one graph, the
    eager bits, and new position values without a recompile changing the result's rule."""
    torch._dynamo.reset()
    q, k, v = torch_tensors(random_qkv(15, np.float32), torch.float32)

    def step(q, k, v, q_pos, k_pos):
        rope = rt.FusedRope(SPEC, q_positions=q_pos, k_positions=k_pos, precision="hf")
        return rt.attention(q * 1.0, k, v, causal=True, query_offset=4, rope=rope) + 1.0

    compiled = torch.compile(step, fullgraph=True)
    for base in (0, 300):
        q_pos, k_pos = base + 4 + torch.arange(5).expand(2, 5), base + torch.arange(9).expand(2, 9)
        assert torch.equal(compiled(q, k, v, q_pos, k_pos), step(q, k, v, q_pos, k_pos))
