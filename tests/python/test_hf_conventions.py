"""Hugging Face's conventions by default: q/k as transformers passes them ([batch, heads, seq,
head_dim]), position_ids as [1, seq], [batch, seq] or a 1-D arange, k=None, and errors that say
what was given against what q holds."""
import numpy as np
import pytest
import torch

import rotary
import rotary.torch as rt

SPEC = rotary.Spec.preset("llama-3.1-8b")
RNG = np.random.default_rng(7)


def hf_qk(batch=2, heads=4, kv_heads=2, seq=9, head_dim=128):
    q = RNG.standard_normal((batch, heads, seq, head_dim)).astype(np.float32)
    k = RNG.standard_normal((batch, kv_heads, seq, head_dim)).astype(np.float32)
    return q, k


def test_the_default_layout_is_hugging_faces_bhsd_everywhere():
    q, k = hf_qk()
    positions = np.array([[5, 6, 7, 8, 9, 10, 11, 12, 13]] * 2)
    # The same call stated as bshd on the transposed arrays is the reference answer.
    want_q, want_k = rotary.apply(q.transpose(0, 2, 1, 3).copy(), k.transpose(0, 2, 1, 3).copy(), positions, SPEC,
                                  layout="bshd")
    got_q, got_k = rotary.apply(q, k, positions, SPEC)
    np.testing.assert_array_equal(got_q, want_q.transpose(0, 2, 1, 3))
    np.testing.assert_array_equal(got_k, want_k.transpose(0, 2, 1, 3))
    tq, tk = rt.apply_rotary(torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(positions), SPEC)
    np.testing.assert_array_equal(tq.numpy(), got_q)
    np.testing.assert_array_equal(tk.numpy(), got_k)
    # The pure-torch backend reads the same rows; each output a*C - c*S is rounded up to three
    # times there (two products, one sum) against the kernel's fewer: at most 3 float32 roundings
    # of |a| + |c| <= 2 max|q|.
    bq, _ = rt.apply_rotary(torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(positions), SPEC,
                            backend="torch")
    assert float((bq - tq).abs().max()) <= 3 * np.finfo(np.float32).eps * 2 * float(np.abs(q).max())
    # apply_cos_sin shares the default.
    cos, sin = rotary.table(SPEC, positions[0])
    explicit = rotary.apply_cos_sin(q, cos, sin, layout="bhsd")
    np.testing.assert_array_equal(rotary.apply_cos_sin(q, cos, sin), explicit)


@pytest.mark.parametrize("form", ["[1, seq]", "[batch, seq]", "arange [seq]"])
def test_position_ids_as_hugging_face_passes_them(form):
    q, k = hf_qk(batch=3, seq=6)
    full = np.broadcast_to(np.arange(6), (3, 6)).copy()
    given = {"[1, seq]": np.arange(6)[None], "[batch, seq]": full, "arange [seq]": np.arange(6)}[form]
    want, _ = rotary.apply(q, k, full, SPEC)
    got, _ = rotary.apply(q, k, given, SPEC)
    np.testing.assert_array_equal(got, want)
    got_t, _ = rt.apply_rotary(torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(given), SPEC)
    np.testing.assert_array_equal(got_t.numpy(), want)
    # and positions are not just ignored: at offset 1 every element of a non-zero q changes
    shifted, _ = rotary.apply(q, k, given + 1, SPEC)
    assert np.abs(shifted - want).max() > 1e-3


def test_position_ids_that_disagree_with_q_are_named_in_users_terms():
    q, k = hf_qk(batch=2, seq=64)
    with pytest.raises(rotary.RotaryError) as caught:
        rotary.apply(q, k, np.arange(128)[None], SPEC)
    assert str(caught.value) == (
        "positions has shape (1, 128); q has 128 tokens (batch 2 x seq 64, layout bhsd): expected (2, 64), (1, 64) "
        "or (64,) ([batch, seq]; batch 1 or no batch axis broadcasts over the batch)")
    with pytest.raises(rotary.RotaryError, match=r"positions has shape \(1, 128\); q has 128 tokens"):
        rt.apply_rotary(torch.from_numpy(q), torch.from_numpy(k), torch.arange(128)[None], SPEC)


@pytest.mark.parametrize("backend", ["auto", "torch"])
def test_torch_k_none_rotates_q_only(backend):
    q, k = hf_qk()
    positions = torch.arange(9)[None] + 40
    tq, tk = torch.from_numpy(q), torch.from_numpy(k)
    want_q, _ = rt.apply_rotary(tq, tk, positions, SPEC, backend=backend)
    got_q, got_k = rt.apply_rotary(tq, None, positions, SPEC, backend=backend)
    assert got_k is None
    torch.testing.assert_close(got_q, want_q, rtol=0, atol=0)
    out = torch.empty_like(tq)
    got = rt.apply_rotary(tq, None, positions, SPEC, out=(out, None), backend=backend)
    assert got[0] is out and got[1] is None
    torch.testing.assert_close(out, want_q, rtol=0, atol=0)
    inplace = tq.clone()
    got = rt.apply_rotary(inplace, None, positions, SPEC, inplace=True, backend=backend)
    assert got[1] is None
    torch.testing.assert_close(inplace, want_q, rtol=0, atol=0)
    with pytest.raises(rotary.RotaryError, match=r"out must be a pair of tensors \(q_out, None\) when k is None "
                                                 r"\(got \(Tensor, Tensor\)\)"):
        rt.apply_rotary(tq, None, positions, SPEC, out=(out, torch.empty_like(tk)), backend=backend)


def test_torch_k_none_has_a_gradient_and_compiles():
    q, _ = hf_qk()
    positions = torch.arange(9)[None]
    leaf = torch.from_numpy(q).double().requires_grad_()
    rotated, none = rt.apply_rotary(leaf, None, positions, SPEC)
    assert none is None
    weights = torch.randn_like(rotated)
    (rotated * weights).sum().backward()
    # The gradient of a rotation is the transposed rotation of the upstream gradient.
    want, _ = rt.apply_rotary(weights, None, positions, SPEC, direction="backward")
    torch.testing.assert_close(leaf.grad, want, rtol=0, atol=1e-12)
    compiled = torch.compile(lambda x: rt.apply_rotary(x, None, positions, SPEC)[0], fullgraph=True)
    eager = rt.apply_rotary(torch.from_numpy(q), None, positions, SPEC)[0]
    torch.testing.assert_close(compiled(torch.from_numpy(q)), eager, rtol=0, atol=0)


def test_a_tensor_in_another_layout_is_refused_by_its_heads_axis():
    """bshd tensors passed with the default (HF's bhsd): the heads axis then holds seq, which
    neither equals nor divides the model's 32 heads: an error, not a rotation along the wrong axis."""
    q = RNG.standard_normal((1, 64, 32, 128)).astype(np.float32)  # [batch, seq, heads, dim]
    k = RNG.standard_normal((1, 64, 8, 128)).astype(np.float32)
    message = (r"q heads axis \(64 in layout bhsd, shape bhsd \(1, 64, 32, 128\)\) must equal the model's "
               r"num_attention_heads = 32 or divide it \(a tensor-parallel shard\); is the tensor in another layout\?")
    with pytest.raises(rotary.RotaryError, match=message):
        rotary.apply(q, k[:, :, :1].repeat(32, axis=2), None, SPEC)
    with pytest.raises(rotary.RotaryError, match=message):
        rt.apply_rotary(torch.from_numpy(q), None, None, SPEC)
    # A tensor-parallel shard (8 of 32 heads, 2 of 8 kv heads) is legitimate.
    shard_q, shard_k = hf_qk(batch=1, heads=8, kv_heads=2, seq=5)
    rotary.apply(shard_q, shard_k, None, SPEC)
