"""rotary.torch.attention (the custom op rotary::attention) and the transformers backend
attn_implementation="rotary" (rotary.torch.register_attention), python/rotary/_torch_attention.py.

The op: the same bits as rotary.attention on the same data (one C++ call behind both), in eager,
through the op's dispatch and under torch.compile(fullgraph=True) from a cold start; against
torch's scaled_dot_product_attention; float64 through the reference; gradients by gradcheck.

The backend: real transformers model classes (Llama, Qwen3, Gemma 3 with a sliding window of 4
tokens, shorter than the 12-token prompts, and both layer types) from tiny random configs, run
with attn_implementation="rotary" against "sdpa" on the same weights: logits, generation (dynamic
and static caches, padded), torch.compile of a whole model, and a training step's gradients.

Tolerances. Both backends compute each attention output in float32 from the same rotated q, k
and v; each is within docs/attention.md's bound of the float64 attention, which for these models
(head_dim 16, |scale q.k| < 1, at most 28 keys) is below 40 u V (u = 2^-24, V the largest |v|),
so the two differ by at most 80 u V per attention output. The rest of the network (2-3 layers,
norms, MLP, the head) is the same float32 code on both sides and carries that difference to the
logits with some gain; the gain is not derived here: we allow 12.8, i.e. logits within 1024 u
max|logit| (6.1e-5 relative). Observed: 3.0 u (Llama), 5.7 u (Qwen3), 8.4 u (Gemma 3). The
tolerance is still tight: ignoring Gemma 3's window moves the logits by ~1.0 max|logit|, a mask one
position off or the padding ignored by > 1e-3 (tested below). Greedy generation must give
identical tokens in float32.
bfloat16: both round each attention output once to bfloat16 (at most one unit, 2^-8 relative,
apart) and every later bfloat16 op rounds again; we allow 16 bfloat16 units of max|logit| (observed
1.1 Llama, 1.7 Qwen3, 3.6 Gemma 3 units).
"""
import copy
import re
import ml_dtypes
import numpy as np
import pytest

import torch  # required: a missing dependency fails, never skips
import transformers  # required: a missing dependency fails, never skips
import rotary  # noqa: E402
import rotary.torch as rt  # noqa: E402
import rotary._torch_attention as backend  # noqa: E402  (the mask reading's internals)
from hf_harness import (ATTENTION_FAMILIES as FAMILIES, counted_calls, logits, one_torch_thread,  # noqa: E402,F401
                        prompt, small)

U = 2.0**-24
F32_LOGIT_TOLERANCE = 1024 * U  # relative to max|logit|, the derivation above
BF16_LOGIT_TOLERANCE = 16 * 2.0**-8


def random_tensor(gen, shape, dtype=torch.float32):
    magnitude = torch.rand(shape, generator=gen, dtype=torch.float64) * 0.9 + 0.1
    sign = torch.where(torch.rand(shape, generator=gen) < 0.5, -1.0, 1.0)
    return (magnitude * sign).to(dtype)


# ---- the op -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_op_equals_the_numpy_function_bit_for_bit(dtype):
    gen = torch.Generator().manual_seed(1)
    q = random_tensor(gen, (2, 4, 9, 32), dtype)
    k = random_tensor(gen, (2, 2, 13, 32), dtype)
    v = random_tensor(gen, (2, 2, 13, 24), dtype)
    kwargs = dict(causal=True, window=6, query_offsets=[4, 2], kv_lengths=[13, 11], kv_starts=[2, 5])
    tensors = {"query_offsets": torch.tensor([4, 2]), "kv_lengths": torch.tensor([13, 11]),
               "kv_starts": torch.tensor([2, 5])}
    got = rt.attention(q, k, v, **{**kwargs, **tensors})
    as_numpy = (lambda t: t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)) if dtype == torch.bfloat16 \
        else (lambda t: t.numpy())
    want = rotary.attention(as_numpy(q), as_numpy(k), as_numpy(v), **kwargs)
    assert got.shape == (2, 4, 9, 24) and got.dtype == dtype
    assert np.array_equal(as_numpy(got).view(np.uint16 if dtype != torch.float32 else np.uint32),
                          want.view(np.uint16 if dtype != torch.float32 else np.uint32))
    # Through the op's dispatch (grad mode with a leaf that requires grad skips the eager shortcut).
    through_op = rt.attention(q.clone().requires_grad_(dtype != torch.float16), k, v, **{**kwargs, **tensors})
    assert torch.equal(through_op.detach(), got)


def test_op_against_torch_sdpa_with_gqa_and_causal_mask():
    gen = torch.Generator().manual_seed(2)
    q = random_tensor(gen, (1, 8, 20, 64))
    k = random_tensor(gen, (1, 2, 20, 64))
    v = random_tensor(gen, (1, 2, 20, 64))
    got = rt.attention(q, k, v, causal=True)
    want = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True,
                                                            enable_gqa=True)
    # docs/attention.md's bound with A <= scale * d (|q|, |k| <= 1): E = 70 u * 8, V <= 1, n <= 20.
    eta = (64 + 6) * U * 8 + 110 * U
    tolerance = 2 * eta * (1 + 2 * eta) + 2 * (20 + 2 + 4) * U + U
    assert (got.double() - want).abs().max().item() <= tolerance
    # A mask one position off is far outside it.
    moved = rt.attention(q, k, v, causal=True, query_offset=1)
    assert (moved.double() - want).abs().max().item() > 100 * tolerance


def test_float64_runs_the_reference_and_fused_rope_matches_apply():
    spec = rotary.Spec.preset("llama-3.1-8b")
    gen = torch.Generator().manual_seed(3)
    q = random_tensor(gen, (1, 4, 6, 128), torch.float64)
    k = random_tensor(gen, (1, 2, 6, 128), torch.float64)
    v = random_tensor(gen, (1, 2, 6, 128), torch.float64)
    positions = torch.arange(100, 106)
    fused = rt.attention(q, k, v, causal=True, rope=rt.FusedRope(spec, q_positions=positions, k_positions=positions))
    q_rot, k_rot = rt.apply_rotary(q, k, positions, spec)
    unfused = torch.nn.functional.scaled_dot_product_attention(q_rot, k_rot, v, is_causal=True, enable_gqa=True)
    assert fused.dtype == torch.float64
    assert (fused - unfused).abs().max().item() < 1e-12


def test_torch_compile_fullgraph_from_a_cold_start():
    torch._dynamo.reset()
    spec = rotary.Spec.preset("qwen3-8b")
    gen = torch.Generator().manual_seed(4)
    q = random_tensor(gen, (2, 4, 5, 128))
    k = random_tensor(gen, (2, 2, 7, 128))
    v = random_tensor(gen, (2, 2, 7, 128))
    lengths = torch.tensor([7, 5])

    def step(q, k, v, lengths):
        out = rt.attention(q * 1.0, k, v, causal=True, query_offset=2, kv_lengths=lengths, rope=rt.FusedRope(spec))
        return out + 1.0

    compiled = torch.compile(step, fullgraph=True)
    got = compiled(q, k, v, lengths)
    assert torch.equal(got, step(q, k, v, lengths))
    got_again = compiled(q, k, v, torch.tensor([6, 7]))  # new values, same graph
    assert torch.equal(got_again, step(q, k, v, torch.tensor([6, 7])))


def _leaf(gen, *shape):
    return random_tensor(gen, shape, torch.float64).requires_grad_()


def test_gradients_pass_gradcheck_for_every_mask_layout_and_fused_rope():
    """torch.autograd.gradcheck (float64: the forward runs the float64 reference) against finite
    differences: the dense backward, GQA folding, masks, layouts, varlen, and fused RoPE through
    rotary's backward rotation."""
    gen = torch.Generator().manual_seed(6)
    spec = rotary.Spec.preset("qwen2.5-7b-yarn")  # attention_scaling 1.1386 inside the rotation
    phi3 = rotary.Spec.preset("phi-3-mini-128k")  # LongRoPE: the factors depend on the call's seq_len
    cases = {
        "bhsd causal gqa window offsets lengths": (
            lambda q, k, v: rt.attention(q, k, v, causal=True, window=3, query_offsets=torch.tensor([2, 0]),
                                         kv_lengths=torch.tensor([6, 4]), scale=0.3),
            (_leaf(gen, 2, 4, 4, 8), _leaf(gen, 2, 2, 6, 8), _leaf(gen, 2, 2, 6, 5))),
        "bhsd causal left padding (kv_starts), a row that sees nothing": (
            lambda q, k, v: rt.attention(q, k, v, causal=True, query_offsets=torch.tensor([2, 2, 0]),
                                         kv_starts=torch.tensor([0, 3, 4]), kv_lengths=torch.tensor([6, 6, 4])),
            (_leaf(gen, 3, 4, 4, 8), _leaf(gen, 3, 2, 6, 8), _leaf(gen, 3, 2, 6, 5))),
        "bshd no mask": (lambda q, k, v: rt.attention(q, k, v, layout="bshd"),
                         (_leaf(gen, 1, 3, 4, 8), _leaf(gen, 1, 5, 2, 8), _leaf(gen, 1, 5, 2, 8))),
        "sbhd causal offset": (lambda q, k, v: rt.attention(q, k, v, layout="sbhd", causal=True, query_offset=1),
                               (_leaf(gen, 3, 2, 2, 8), _leaf(gen, 4, 2, 1, 8), _leaf(gen, 4, 2, 1, 8))),
        "thd varlen with an empty segment": (
            lambda q, k, v: rt.attention(q, k, v, layout="thd", causal=True, cu_seqlens_q=torch.tensor([0, 2, 2, 5]),
                                         cu_seqlens_k=torch.tensor([0, 3, 4, 8]),
                                         query_offsets=torch.tensor([1, 1, 1])),
            (_leaf(gen, 5, 2, 8), _leaf(gen, 8, 1, 8), _leaf(gen, 8, 1, 8))),
        "fused rope, positions": (
            lambda q, k, v: rt.attention(q, k, v, layout="bshd", causal=True, query_offset=2,
                                         rope=rt.FusedRope(spec, q_positions=torch.tensor([[7, 8], [100, 101]]),
                                                           k_positions=torch.tensor([[5, 6, 7, 8],
                                                                                     [98, 99, 100, 101]]))),
            (_leaf(gen, 2, 2, 4, 128), _leaf(gen, 2, 4, 2, 128), _leaf(gen, 2, 4, 2, 16))),
        "thd, fused LongRoPE: one seq_len for the whole call (long factors past 4096)": (
            lambda q, k, v: rt.attention(q, k, v, layout="thd", causal=True,
                                         cu_seqlens_q=torch.tensor([0, 2, 4]), cu_seqlens_k=torch.tensor([0, 2, 4]),
                                         rope=rt.FusedRope(phi3, q_positions=torch.tensor([10, 11, 5000, 5001]),
                                                           k_positions=torch.tensor([10, 11, 5000, 5001]))),
            (_leaf(gen, 4, 2, 96), _leaf(gen, 4, 1, 96), _leaf(gen, 4, 1, 8))),
        "fused rope, the mask's positions": (
            lambda q, k, v: rt.attention(q, k, v, causal=True, rope=rt.FusedRope(spec)),
            (_leaf(gen, 1, 2, 3, 128), _leaf(gen, 1, 1, 3, 128), _leaf(gen, 1, 1, 3, 8))),
    }
    for name, (fn, args) in cases.items():
        assert torch.autograd.gradcheck(fn, args, eps=1e-6, atol=1e-7, rtol=1e-5), name


def test_backward_in_query_blocks_equals_one_block(monkeypatch):
    """The backward recomputes the softmax per block of query rows (_BACKWARD_BLOCK_SCORES): with
    blocks of 1, 2 and 3 rows the gradients equal those of one block (float64, to rounding), with
    every per-query term (causal offsets, window, lengths, ALiBi's bias, fused RoPE) cut per block;
    and gradcheck passes with blocks of one row."""
    import rotary._torch_attention as module

    gen = torch.Generator().manual_seed(31)
    spec = rotary.Spec.preset("llama-3.1-8b")
    slopes = torch.tensor([0.9, -0.3, 0.05, 0.5])
    cases = {
        "gqa causal window offsets lengths alibi": (
            lambda q, k, v: rt.attention(q, k, v, causal=True, window=4, query_offsets=torch.tensor([2, 0]),
                                         kv_lengths=torch.tensor([6, 5]), alibi_slopes=slopes),
            [_leaf(gen, 2, 4, 5, 8), _leaf(gen, 2, 2, 6, 8), _leaf(gen, 2, 2, 6, 5)], 2 * 4 * 6),
        "fused rope bshd": (
            lambda q, k, v: rt.attention(q, k, v, layout="bshd", causal=True, query_offset=3,
                                         rope=rt.FusedRope(spec)),
            [_leaf(gen, 1, 5, 2, 128), _leaf(gen, 1, 8, 1, 128), _leaf(gen, 1, 8, 1, 16)], 1 * 2 * 8),
    }
    for name, (fn, args, scores_per_row) in cases.items():
        grad_out = torch.randn(fn(*args).shape, generator=gen, dtype=torch.float64)
        one_block = torch.autograd.grad(fn(*args), args, grad_out)
        for rows in (1, 2, 3):
            monkeypatch.setattr(module, "_BACKWARD_BLOCK_SCORES", rows * scores_per_row)
            blocked = torch.autograd.grad(fn(*args), args, grad_out)
            for a, b in zip(one_block, blocked):
                assert torch.allclose(a, b, rtol=1e-12, atol=1e-14), (name, rows)
        monkeypatch.setattr(module, "_BACKWARD_BLOCK_SCORES", scores_per_row)
        assert torch.autograd.gradcheck(fn, tuple(args), eps=1e-6, atol=1e-7, rtol=1e-5), name
        monkeypatch.undo()


def test_gradients_under_torch_compile_fullgraph_equal_eager():
    """The backward is an op of its own (rotary::attention_backward, with a fake): a compiled
    training step traces it as one node and gives eager's gradients."""
    torch._dynamo.reset()
    spec = rotary.Spec.preset("llama-3.1-8b")
    gen = torch.Generator().manual_seed(12)
    leaves = [random_tensor(gen, s).requires_grad_() for s in ((2, 4, 5, 128), (2, 2, 7, 128), (2, 2, 7, 16))]

    def loss(q, k, v):
        out = rt.attention(q, k, v, causal=True, query_offset=2, kv_lengths=torch.tensor([7, 6]),
                           rope=rt.FusedRope(spec))
        return out.square().sum()

    torch.compile(loss, fullgraph=True)(*leaves).backward()
    compiled = [t.grad.clone() for t in leaves]
    for t in leaves:
        t.grad = None
    loss(*leaves).backward()
    assert all(torch.equal(c, t.grad) for c, t in zip(compiled, leaves))


def test_gradcheck_fails_on_a_wrong_backward(monkeypatch):
    """The gradcheck above can fail: a backward that forgets the softmax's row term is caught."""
    import rotary._torch_attention as module

    original = module._dense_grads

    def wrong(q, k, v, grad_out, visible, scale, bias=None):
        dq, dk, dv = original(q, k, v, grad_out, visible, scale, bias)
        return dq * 1.001, dk, dv

    monkeypatch.setattr(module, "_dense_grads", wrong)
    gen = torch.Generator().manual_seed(8)
    args = (_leaf(gen, 1, 2, 3, 8), _leaf(gen, 1, 2, 3, 8), _leaf(gen, 1, 2, 3, 8))
    assert not torch.autograd.gradcheck(lambda q, k, v: rt.attention(q, k, v, causal=True), args, eps=1e-6,
                                        atol=1e-7, rtol=1e-5, raise_exception=False)


def test_op_refusals_name_the_argument_and_value():
    q = torch.zeros(1, 4, 3, 8)
    k = v = torch.zeros(1, 2, 3, 8)
    with pytest.raises(rotary.RotaryError, match=r"window"):
        rt.attention(q, k, v, window=-2)
    with pytest.raises(rotary.RotaryError, match=r"kv_lengths must be an integer torch.Tensor or None \(got dtype "
                                                 r"torch.float32\)"):
        rt.attention(q, k, v, kv_lengths=torch.tensor([1.0]))
    with pytest.raises(rotary.RotaryError, match=r"q dtype must be float32, bfloat16, float16 or float64 \(got "
                                                 r"torch.int32\)"):
        rt.attention(q.int(), k, v)
    with pytest.raises(rotary.RotaryError, match=r"out must have shape \(1, 4, 3, 8\) and dtype torch.float32 "
                                                 r"\(got shape \(1, 4, 3, 7\)"):
        rt.attention(q, k, v, out=torch.empty(1, 4, 3, 7))
    with pytest.raises(rotary.RotaryError, match="heads"):
        rt.attention(torch.zeros(1, 3, 3, 8), k, v)


# ---- the other position encodings: ALiBi and an absolute table -------------------------------------------
def test_encodings_equal_the_numpy_function_bit_for_bit():
    gen = torch.Generator().manual_seed(21)
    q = random_tensor(gen, (2, 4, 5, 16))
    k = random_tensor(gen, (2, 2, 9, 16))
    v = random_tensor(gen, (2, 2, 9, 8))
    slopes = torch.tensor(rotary.alibi_slopes(4))
    table = torch.from_numpy(rotary.sinusoidal_table(30, 16))
    q_pos, k_pos = torch.randint(0, 30, (2, 5), generator=gen), torch.randint(0, 30, (2, 9), generator=gen)
    common = dict(causal=True, query_offsets=torch.tensor([4, 1]), kv_lengths=torch.tensor([9, 7]))
    numpy_common = dict(causal=True, query_offsets=[4, 1], kv_lengths=[9, 7])
    with_alibi = rt.attention(q, k, v, alibi_slopes=slopes, **common)
    assert torch.equal(with_alibi, torch.from_numpy(rotary.attention(q.numpy(), k.numpy(), v.numpy(),
                                                                     alibi_slopes=slopes.numpy(), **numpy_common)))
    with_table = rt.attention(q, k, v, absolute=table, q_positions=q_pos, k_positions=k_pos, **common)
    assert torch.equal(with_table, torch.from_numpy(rotary.attention(
        q.numpy(), k.numpy(), v.numpy(), absolute=table.numpy(), q_positions=q_pos.numpy(), k_positions=k_pos.numpy(),
        **numpy_common)))
    # Through the op's dispatch (a leaf that requires grad), the same bits.
    through_op = rt.attention(q.clone().requires_grad_(), k, v, alibi_slopes=slopes, **common)
    assert torch.equal(through_op.detach(), with_alibi)
    table_leaf = table.clone().requires_grad_()
    through_op = rt.attention(q, k, v, absolute=table_leaf, q_positions=q_pos, k_positions=k_pos, **common)
    assert torch.equal(through_op.detach(), with_table)


def test_encoding_gradients_pass_gradcheck():
    """float64 (the forward is the reference): ALiBi's bias in the recomputed P, and an absolute
    table's gradient passing through the add to q and k; GQA, masks, THD."""
    gen = torch.Generator().manual_seed(22)
    table = torch.from_numpy(rotary.sinusoidal_table(20, 8))
    random_slopes = torch.tensor([0.9, -0.3, 0.05, 0.5])
    cases = {
        "alibi bhsd causal gqa offsets lengths window": (
            lambda q, k, v: rt.attention(q, k, v, causal=True, window=4, query_offsets=torch.tensor([2, 0]),
                                         kv_lengths=torch.tensor([6, 5]), alibi_slopes=random_slopes),
            (_leaf(gen, 2, 4, 4, 8), _leaf(gen, 2, 2, 6, 8), _leaf(gen, 2, 2, 6, 5))),
        "alibi non-causal, the paper's slopes, sbhd": (
            lambda q, k, v: rt.attention(q, k, v, layout="sbhd", query_offset=1,
                                         alibi_slopes=torch.tensor(rotary.alibi_slopes(4))),
            (_leaf(gen, 3, 1, 4, 8), _leaf(gen, 5, 1, 1, 8), _leaf(gen, 5, 1, 1, 8))),
        "alibi thd varlen": (
            lambda q, k, v: rt.attention(q, k, v, layout="thd", causal=True, cu_seqlens_q=torch.tensor([0, 2, 5]),
                                         cu_seqlens_k=torch.tensor([0, 3, 7]), query_offsets=torch.tensor([1, 1]),
                                         alibi_slopes=random_slopes[:2]),
            (_leaf(gen, 5, 2, 8), _leaf(gen, 7, 1, 8), _leaf(gen, 7, 1, 8))),
        "absolute, positions, bshd": (
            lambda q, k, v: rt.attention(q, k, v, layout="bshd", causal=True, query_offset=2, absolute=table,
                                         q_positions=torch.tensor([[7, 8], [1, 19]]),
                                         k_positions=torch.tensor([[5, 6, 7, 8], [3, 3, 0, 19]])),
            (_leaf(gen, 2, 2, 4, 8), _leaf(gen, 2, 4, 2, 8), _leaf(gen, 2, 4, 2, 3))),
        "absolute thd, the mask's positions": (
            lambda q, k, v: rt.attention(q, k, v, layout="thd", causal=True, absolute=table,
                                         cu_seqlens_q=torch.tensor([0, 2, 5]), cu_seqlens_k=torch.tensor([0, 3, 7]),
                                         query_offsets=torch.tensor([1, 1])),
            (_leaf(gen, 5, 2, 8), _leaf(gen, 7, 1, 8), _leaf(gen, 7, 1, 8))),
    }
    for name, (fn, args) in cases.items():
        assert torch.autograd.gradcheck(fn, args, eps=1e-6, atol=1e-7, rtol=1e-5), name


def test_absolute_table_gradient_passes_gradcheck():
    """The table's gradient (a scatter-add of dq and dk by position, repeated positions included).
    The op takes float32 tables, so the float64 leaf is cast: its values are float32 numbers of
    magnitude < 2, and eps = 2^-10 keeps every perturbed value exact in float32."""
    gen = torch.Generator().manual_seed(23)
    q, k, v = (random_tensor(gen, s, torch.float64) for s in ((2, 4, 3, 8), (2, 2, 5, 8), (2, 2, 5, 4)))
    table = torch.from_numpy(rotary.sinusoidal_table(6, 8)).double().requires_grad_()
    q_pos, k_pos = torch.tensor([[0, 1, 1], [5, 2, 3]]), torch.tensor([[0, 1, 2, 3, 4], [5, 5, 0, 2, 1]])

    def fn(t, q, k):
        return rt.attention(q, k, v, causal=True, query_offset=2, absolute=t.float(), q_positions=q_pos,
                            k_positions=k_pos)

    assert torch.autograd.gradcheck(fn, (table, q.requires_grad_(), k.requires_grad_()), eps=2.0**-10, atol=1e-5,
                                    rtol=1e-4)
    # And it can fail: a table gradient that forgets the k side is caught.
    import rotary._torch_attention as module

    original = module._attention_backward_op

    def without_k(*args):
        dq, dk, dv, d_table = original(*args)
        absolute, k_positions = args[11], args[9]
        rows = d_table.new_zeros(d_table.shape)
        if absolute is not None:
            rows.index_add_(0, torch.broadcast_to(k_positions, (2, 5)).reshape(-1).to(torch.int64),
                            dk.sum(1).reshape(-1, 8).float())  # dk [batch, kv_heads, seq, d]
        return dq, dk, dv, d_table - rows

    module._attention_backward_op = without_k
    try:
        assert not torch.autograd.gradcheck(fn, (table, q, k), eps=2.0**-10, atol=1e-5, rtol=1e-4,
                                            raise_exception=False)
    finally:
        module._attention_backward_op = original


def test_gradcheck_fails_when_the_backward_drops_alibis_bias(monkeypatch):
    import rotary._torch_attention as module

    original = module._dense_grads
    monkeypatch.setattr(module, "_dense_grads", lambda q, k, v, g, visible, scale, bias=None:
                        original(q, k, v, g, visible, scale, None))
    gen = torch.Generator().manual_seed(24)
    args = (_leaf(gen, 1, 2, 3, 8), _leaf(gen, 1, 2, 4, 8), _leaf(gen, 1, 2, 4, 8))
    assert not torch.autograd.gradcheck(
        lambda q, k, v: rt.attention(q, k, v, causal=True, query_offset=1, alibi_slopes=torch.tensor([0.5, 0.25])),
        args, eps=1e-6, atol=1e-7, rtol=1e-5, raise_exception=False)


def test_torch_compile_fullgraph_with_alibi_and_a_table():
    torch._dynamo.reset()
    gen = torch.Generator().manual_seed(25)
    leaves = [random_tensor(gen, s).requires_grad_() for s in ((2, 4, 5, 32), (2, 2, 7, 32), (2, 2, 7, 16))]
    slopes = torch.tensor(rotary.alibi_slopes(4))
    table = torch.from_numpy(rotary.sinusoidal_table(16, 32)).requires_grad_()

    def loss(q, k, v, table):
        a = rt.attention(q * 1.0, k, v, causal=True, query_offset=2, kv_lengths=torch.tensor([7, 6]),
                         alibi_slopes=slopes)
        b = rt.attention(q, k, v, causal=True, query_offset=2, absolute=table)
        return (a.square() + b.square()).sum()

    compiled = torch.compile(loss, fullgraph=True)
    value = compiled(*leaves, table)
    value.backward()
    grads = [t.grad.clone() for t in leaves + [table]]
    for t in leaves + [table]:
        t.grad = None
    eager = loss(*leaves, table)
    eager.backward()
    assert torch.allclose(value, eager, rtol=1e-6, atol=0)  # inductor fuses the square and the sum its own way
    assert all(torch.allclose(c, t.grad, rtol=1e-6, atol=1e-7) for c, t in zip(grads, leaves + [table]))
    # The ops themselves, compiled: the same bits as eager.
    outputs = lambda q, k, v, table: (  # noqa: E731
        rt.attention(q, k, v, causal=True, alibi_slopes=slopes), rt.attention(q, k, v, absolute=table))
    with torch.no_grad():
        assert all(torch.equal(a, b) for a, b in zip(torch.compile(outputs, fullgraph=True)(*leaves, table),
                                                     outputs(*leaves, table)))


def test_encoding_refusals_name_the_argument_and_value():
    q = torch.zeros(1, 4, 3, 8)
    k = v = torch.zeros(1, 2, 3, 8)
    spec = rotary.Spec.from_hf_config({"model_type": "llama", "hidden_size": 32, "num_attention_heads": 4,
                                       "rope_theta": 10000.0, "max_position_embeddings": 64})
    table = torch.from_numpy(rotary.sinusoidal_table(3, 8))
    refusals = [
        (dict(alibi_slopes=torch.tensor([0.5, 0.25])), "options.alibi_slopes must hold one slope per q head, 4 (got 2)"),
        (dict(alibi_slopes=torch.tensor([1, 2, 3, 4])), "alibi_slopes must be a 1-D floating torch.Tensor, one slope "
                                                        "per q head (got dtype torch.int64, shape (4,))"),
        (dict(alibi_slopes=torch.ones(4, requires_grad=True)), "alibi_slopes must not require a gradient (got "
                                                               "requires_grad=True)"),
        (dict(absolute=table.double()), "absolute must be a float32 torch.Tensor [rows, head_dim] (got dtype "
                                        "torch.float64, shape (3, 8))"),
        (dict(absolute=torch.zeros(3, 6)), "absolute.dim must equal q's head dim, 8 (got 6)"),
        (dict(absolute=table, k_positions=torch.tensor([0, 3, 1])),
         "absolute.k_positions[1] must be in [0, 2] (the table's rows) (got 3)"),
        (dict(absolute=table, alibi_slopes=torch.ones(4)),
         "options.alibi_slopes must be empty with an absolute table: one position encoding per call (got 4 slopes)"),
        (dict(rope=rt.FusedRope(spec), alibi_slopes=torch.ones(4)),
         "options.alibi_slopes must be empty with fused RoPE: one position encoding per call (got 4 slopes)"),
        (dict(rope=rt.FusedRope(spec), absolute=table),
         "options.absolute must be null with fused RoPE: one position encoding per call (got a table)"),
    ]
    for kwargs, message in refusals:
        with pytest.raises(rotary.RotaryError, match=re.escape(message)):
            rt.attention(q, k, v, **kwargs)
        with pytest.raises(rotary.RotaryError, match=re.escape(message)):  # through the op
            rt.attention(q.clone().requires_grad_(), k, v, **kwargs)


# ---- the transformers backend ------------------------------------------------------------------------
rt.register_attention()


def pair(family, dtype=torch.float32, **config_changes):
    """The same weights under "sdpa" and under "rotary" (each model its own config copy)."""
    model_cls, config = FAMILIES[family]()
    for key, value in config_changes.items():
        setattr(config, key, value)
    torch.manual_seed(0)
    sdpa = model_cls._from_config(copy.deepcopy(config), attn_implementation="sdpa").to(dtype).eval()
    ours = model_cls._from_config(copy.deepcopy(config), attn_implementation="rotary").to(dtype).eval()
    ours.load_state_dict(sdpa.state_dict())
    assert sdpa.config._attn_implementation == "sdpa" and ours.config._attn_implementation == "rotary"
    return sdpa, ours


@pytest.fixture
def rotary_calls(monkeypatch):
    """Counts the backend's calls: a model that silently fell back to another backend must fail."""
    import rotary._torch_attention as module

    return counted_calls(monkeypatch, module, "_hf_attention_impl")


@pytest.mark.parametrize("family", list(FAMILIES))
def test_logits_and_greedy_generation_equal_sdpa_in_float32(family, rotary_calls):
    sdpa, ours = pair(family)
    ids = prompt()
    want, got = logits(sdpa, ids), logits(ours, ids)
    layers = ours.config.num_hidden_layers
    assert rotary_calls["n"] == layers
    assert (got - want).abs().max().item() <= F32_LOGIT_TOLERANCE * want.abs().max().item()
    tokens_sdpa = sdpa.generate(ids, max_new_tokens=10, do_sample=False)
    tokens_ours = ours.generate(ids, max_new_tokens=10, do_sample=False)
    assert rotary_calls["n"] == layers * (1 + 10)  # prefill + one decode step per token, all on rotary
    assert torch.equal(tokens_ours, tokens_sdpa)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_left_padded_batch_equals_sdpa_on_real_tokens(family, rotary_calls):
    sdpa, ours = pair(family)
    ids = prompt(batch=3)
    mask = torch.ones(3, 12, dtype=torch.long)
    mask[0, :5] = 0  # left padding of 5 and of 1; row 2 unpadded
    mask[1, :1] = 0
    want, got = logits(sdpa, ids, attention_mask=mask), logits(ours, ids, attention_mask=mask)
    real = mask.bool()
    assert (got - want)[real].abs().max().item() <= F32_LOGIT_TOLERANCE * want[real].abs().max().item()
    # The padding is honoured, not ignored: without the mask the padded rows' logits move.
    unmasked = logits(ours, ids)
    assert (unmasked - want)[0][real[0]].abs().max().item() > 1e-3
    tokens_sdpa = sdpa.generate(ids, attention_mask=mask, max_new_tokens=8, do_sample=False)
    tokens_ours = ours.generate(ids, attention_mask=mask, max_new_tokens=8, do_sample=False)
    assert torch.equal(tokens_ours, tokens_sdpa)


def test_gemma3_sliding_window_matters_and_is_honoured(rotary_calls):
    ids = prompt(seq=16)
    sdpa, ours = pair("gemma3")
    want = logits(sdpa, ids)
    got = logits(ours, ids)
    assert (got - want).abs().max().item() <= F32_LOGIT_TOLERANCE * want.abs().max().item()
    # A window of 4 against one longer than the prompt: the window changes the logits by far more
    # than the tolerance, so a backend that ignored it would fail the comparison above.
    wide, _ = pair("gemma3", sliding_window=64)
    assert (logits(wide, ids) - want).abs().max().item() > 100 * F32_LOGIT_TOLERANCE * want.abs().max().item()
    # Generation past the window: the sliding layers' cache keeps window - 1 keys (kv_offset > 0).
    tokens_sdpa = sdpa.generate(ids, max_new_tokens=12, do_sample=False)
    tokens_ours = ours.generate(ids, max_new_tokens=12, do_sample=False)
    assert torch.equal(tokens_ours, tokens_sdpa)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_bfloat16_logits_within_tolerance(family, rotary_calls):
    sdpa, ours = pair(family, torch.bfloat16)
    ids = prompt()
    want, got = logits(sdpa, ids), logits(ours, ids)
    assert rotary_calls["n"] == ours.config.num_hidden_layers
    worst = (got - want).abs().max().item() / want.abs().max().item()
    assert worst <= BF16_LOGIT_TOLERANCE, f"worst |rotary - sdpa| / max|logit| = {worst:.4g}"


def test_backend_refusals():
    module = torch.nn.Module()
    module.is_causal = True
    q = torch.zeros(1, 2, 4, 8)
    k = v = torch.zeros(1, 2, 4, 8)
    with pytest.raises(rotary.RotaryError, match=r"dropout must be 0 \(got 0.1\)"):
        rt.rotary_attention_forward(module, q, k, v, None, dropout=0.1)
    with pytest.raises(rotary.RotaryError, match=r"softcap must be None \(got 50.0\)"):
        rt.rotary_attention_forward(module, q, k, v, None, softcap=50.0)
    with pytest.raises(rotary.RotaryError, match=r"s_aux must be None \(got a tensor of shape \(2,\)\): attention sinks"):
        rt.rotary_attention_forward(module, q, k, v, None, s_aux=torch.zeros(2))
    with pytest.raises(rotary.RotaryError, match=r"output_attentions must be False"):
        rt.rotary_attention_forward(module, q, k, v, None, output_attentions=True)
    # A block-diagonal (packed-sequence) mask is not one causal range of keys: refused by name.
    packed = torch.zeros(1, 1, 4, 4, dtype=torch.bool)
    packed[0, 0, :2, :2] = torch.tril(torch.ones(2, 2, dtype=torch.bool))
    packed[0, 0, 2:, 2:] = torch.tril(torch.ones(2, 2, dtype=torch.bool))
    with pytest.raises(rotary.RotaryError, match=r"attention_mask of batch row 0 is not a causal mask over one "
                                                 r"contiguous range of keys"):
        rt.rotary_attention_forward(module, q, k, v, packed)
    with pytest.raises(rotary.RotaryError, match=r"additive biases other than 0 and -inf"):
        rt.rotary_attention_forward(module, q, k, v, torch.full((1, 1, 4, 4), 0.5))
    # No mask but a window that would cut: the mask and the layer disagree; refused, not guessed.
    with pytest.raises(rotary.RotaryError, match=r"attention_mask is None \(no sliding window in the mask\) but the "
                                                 r"layer has sliding_window 2"):
        rt.rotary_attention_forward(module, q, k, v, None, sliding_window=2)
    out, _ = rt.rotary_attention_forward(module, q, k, v, None, sliding_window=4)  # cannot cut 4 tokens: runs
    assert out.shape == (1, 4, 2, 8)
    module.is_causal = False
    with pytest.raises(rotary.RotaryError, match=r"sliding window on non-causal attention"):
        rt.rotary_attention_forward(module, q, k, v, None, sliding_window=2)


def test_backend_reads_additive_masks_and_right_padding():
    """An additive float mask (0 / dtype minimum, transformers' eager_mask) and right padding (the
    training layout) give the same result as the boolean mask and SDPA on the real rows."""
    from transformers.masking_utils import eager_mask, sdpa_mask

    gen = torch.Generator().manual_seed(9)
    q = random_tensor(gen, (2, 4, 6, 16))
    k = random_tensor(gen, (2, 2, 6, 16))
    v = random_tensor(gen, (2, 2, 6, 16))
    padding = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]], dtype=torch.bool)
    bool_mask = sdpa_mask(batch_size=2, q_length=6, kv_length=6, attention_mask=padding, allow_is_causal_skip=False)
    float_mask = eager_mask(batch_size=2, q_length=6, kv_length=6, attention_mask=padding)
    module = torch.nn.Module()
    module.is_causal = True
    got_bool, _ = rt.rotary_attention_forward(module, q, k, v, bool_mask)
    got_float, _ = rt.rotary_attention_forward(module, q, k, v, float_mask)
    assert torch.equal(got_bool, got_float)
    want = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=bool_mask,
                                                            enable_gqa=True).transpose(1, 2)
    assert (got_bool.double() - want)[0, :4].abs().max().item() < 1e-5
    assert (got_bool.double() - want)[1].abs().max().item() < 1e-5


@pytest.mark.parametrize("family", list(FAMILIES))
def test_static_cache_generation_equals_sdpa(family, rotary_calls):
    """StaticCache: keys of max_cache_len slots, the unfilled ones masked as padding (key_end)."""
    sdpa, ours = pair(family)
    ids = prompt()
    mask = torch.ones(2, 12, dtype=torch.long)
    mask[0, :3] = 0
    tokens_sdpa = sdpa.generate(ids, attention_mask=mask, max_new_tokens=8, do_sample=False,
                                cache_implementation="static")
    tokens_ours = ours.generate(ids, attention_mask=mask, max_new_tokens=8, do_sample=False,
                                cache_implementation="static")
    assert rotary_calls["n"] == ours.config.num_hidden_layers * 8
    assert torch.equal(tokens_ours, tokens_sdpa)


def test_whole_model_under_torch_compile_fullgraph(rotary_calls):
    """Gemma 3 (sliding and full layers, left padding) compiled with fullgraph=True: the backend's
    op is one node; the mask is read inside it at run time."""
    torch._dynamo.reset()
    sdpa, ours = pair("gemma3")
    ids = prompt()
    mask = torch.ones(2, 12, dtype=torch.long)
    mask[0, :3] = 0
    want = logits(sdpa, ids, attention_mask=mask)
    compiled = torch.compile(ours, fullgraph=True)
    with torch.no_grad():
        got = compiled(ids, attention_mask=mask).logits.double()
    assert rotary_calls["n"] == ours.config.num_hidden_layers
    real = mask.bool()
    assert (got - want)[real].abs().max().item() <= F32_LOGIT_TOLERANCE * want[real].abs().max().item()


def test_opcheck_schema_fake_and_aot_dispatch():
    """torch.library.opcheck: the schema matches what the ops do (no hidden mutation), the fake
    implementations give the real outputs' shapes, dtypes and strides, and AOT dispatch traces them."""
    from rotary._torch_attention import (_attention_backward_op, _attention_op, _hf_attention_backward_op,
                                         _hf_attention_op)

    gen = torch.Generator().manual_seed(11)
    q = random_tensor(gen, (2, 4, 5, 16))
    k = random_tensor(gen, (2, 2, 7, 16))
    v = random_tensor(gen, (2, 2, 7, 12))
    utils = ("test_schema", "test_faketensor", "test_aot_dispatch_static")
    spec = rotary.Spec.preset("llama-3.1-8b")
    q_rope = random_tensor(gen, (2, 4, 5, 128))
    k_rope = random_tensor(gen, (2, 2, 7, 128))
    table = torch.from_numpy(rotary.sinusoidal_table(9, 16))
    cases = [
        (_attention_op, (q, k, v, None, torch.tensor([7, 5]), None, None, None, None, None, None, "", "", None, True,
                         0, 2, "bhsd", 0, -1, "kernels")),
        (_attention_op, (q_rope, k_rope, v, torch.tensor([2, 0]), None, None, None, None, None, None, None,
                         spec._handle, "", 0.1, True, 3, 0, "bhsd", 0, -1, "kernels")),
        (_attention_op, (q, k, v, None, None, None, None, None, None, torch.tensor(rotary.alibi_slopes(4)), None, "",
                         "", None, True, 0, 0, "bhsd", 0, -1, "kernels")),
        (_attention_op, (q, k, v, None, None, None, None, torch.tensor([3, 4, 5, 6, 7]), None, None, table, "", "",
                         None, True, 0, 2, "bhsd", 0, -1, "kernels")),
        (_hf_attention_op, (q, k, v, torch.ones(2, 1, 5, 7, dtype=torch.bool).tril(2), True, 0, None)),
        (_attention_backward_op, (q, k, v, random_tensor(gen, (2, 4, 5, 12)), None, torch.tensor([7, 5]), None, None,
                                  None, None, None, None, "", "", None, True, 0, 2, "bhsd", 0, -1)),
        (_attention_backward_op, (q, k, v, random_tensor(gen, (2, 4, 5, 12)), None, None, None, None, None, None,
                                  torch.tensor(rotary.alibi_slopes(4)), None, "", "", None, True, 0, 0, "bhsd", 0,
                                  -1)),
        (_attention_backward_op, (q, k, v, random_tensor(gen, (2, 4, 5, 12)), None, None, None, None,
                                  torch.tensor([3, 4, 5, 6, 7]), None, None, table, "", "", None, True, 0, 2, "bhsd",
                                  0, -1)),
        (_hf_attention_backward_op, (q, k, v, torch.ones(2, 1, 5, 7, dtype=torch.bool).tril(2),
                                     random_tensor(gen, (2, 5, 4, 12)), True, None)),
    ]
    for op, args in cases:
        result = torch.library.opcheck(op, args, test_utils=utils)
        assert all(value == "SUCCESS" for value in result.values()), result


def test_backend_gradients_pass_gradcheck_with_a_padding_mask_and_without_a_mask():
    module = torch.nn.Module()
    module.is_causal = True
    gen = torch.Generator().manual_seed(10)
    mask = torch.ones(2, 1, 4, 6, dtype=torch.bool).tril(2)
    mask[0, :, :, :2] = False  # left padding of row 0
    with_mask = lambda q, k, v: rt.rotary_attention_forward(module, q, k, v, mask)[0]  # noqa: E731
    without = lambda q, k, v: rt.rotary_attention_forward(module, q, k, v, None)[0]  # noqa: E731
    assert torch.autograd.gradcheck(with_mask, (_leaf(gen, 2, 4, 4, 8), _leaf(gen, 2, 2, 6, 8), _leaf(gen, 2, 2, 6, 8)),
                                    eps=1e-6, atol=1e-7)
    assert torch.autograd.gradcheck(without, (_leaf(gen, 1, 2, 5, 8), _leaf(gen, 1, 1, 5, 8), _leaf(gen, 1, 1, 5, 8)),
                                    eps=1e-6, atol=1e-7)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_training_step_gradients_equal_sdpa(family, rotary_calls):
    """model.train(), a left-padded batch, loss.backward(): every parameter's gradient equals SDPA's
    within 1e-4 of its largest element (observed <= 1e-6; both are float32 attention backwards of
    the same function, and the parameter gradients sum over every token)."""
    sdpa, ours = pair(family)
    sdpa.train()
    ours.train()
    ids = prompt()
    mask = torch.ones(2, 12, dtype=torch.long)
    mask[0, :4] = 0
    loss_sdpa = sdpa(ids, attention_mask=mask, labels=ids).loss
    loss_ours = ours(ids, attention_mask=mask, labels=ids).loss
    loss_sdpa.backward()
    loss_ours.backward()
    assert rotary_calls["n"] == ours.config.num_hidden_layers
    assert abs(loss_ours.item() - loss_sdpa.item()) <= 1e-5 * abs(loss_sdpa.item())
    checked = 0
    for (name, p_sdpa), (_, p_ours) in zip(sdpa.named_parameters(), ours.named_parameters()):
        if p_sdpa.grad is None:
            continue
        largest = p_sdpa.grad.abs().max().item()
        assert (p_ours.grad - p_sdpa.grad).abs().max().item() <= 1e-4 * largest + 1e-30, name
        checked += 1
    assert checked >= 10


def test_gemma2_soft_capping_is_refused_by_name():
    """Gemma 2 passes softcap=attn_logit_softcapping (50.0) to its attention function: rotary does
    not compute soft-capping, so the forward is refused, naming it, instead of ignoring it."""
    config = small(transformers.Gemma2Config, head_dim=16, sliding_window=4, max_position_embeddings=256,
                   attn_logit_softcapping=50.0)
    config._attn_implementation = "rotary"
    torch.manual_seed(0)
    model = transformers.Gemma2ForCausalLM._from_config(copy.deepcopy(config), attn_implementation="rotary").eval()
    with pytest.raises(rotary.RotaryError, match=r"softcap must be None \(got 50.0\): logit soft-capping"):
        logits(model, prompt())


def test_set_attn_implementation_switches_an_existing_model(rotary_calls):
    sdpa, ours = pair("qwen3")
    switched = copy.deepcopy(sdpa)
    switched.set_attn_implementation("rotary")
    ids = prompt()
    assert torch.equal(logits(switched, ids), logits(ours, ids))  # the same backend on the same weights
    assert rotary_calls["n"] == 2 * ours.config.num_hidden_layers


def _masked_softmax_reference(q, k, v, mask, scale):
    """softmax(scale q kᵀ over the visible keys) v in float64, GQA by repeating k / v; zeros for a
    query that sees no key. q [b, h, q, d], k / v [b, g, kv, d], mask bool [b, 1, q, kv]."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    scores = scale * q @ k.transpose(-1, -2)
    scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, -1).nan_to_num(0.0)  # a row of -inf: NaN -> 0
    return (weights @ v).transpose(1, 2)  # [b, q, h, d]


@pytest.mark.parametrize("window", [0, 3])
def test_backend_masks_one_call_for_left_padding_and_per_row_only_for_queries_before_their_keys(monkeypatch, window):
    """The backend reads each row's mask as (first key, last key, causal offset). Left padding
    (and rows that see no key) go in one call through kv_starts; a row whose queries sit before
    its keys (a negative causal offset) takes the per-row path. Both equal the masked softmax in
    float64."""
    calls = counted_calls(monkeypatch, rotary._rotary, "attention")
    module = torch.nn.Module()
    module.is_causal = True
    module.sliding_window = window or None
    gen = torch.Generator().manual_seed(11)
    q = random_tensor(gen, (4, 4, 6, 8), torch.float64)
    k = random_tensor(gen, (4, 2, 9, 8), torch.float64)
    v = random_tensor(gen, (4, 2, 9, 8), torch.float64)
    i, j = torch.arange(6).view(6, 1), torch.arange(9).view(1, 9)
    causal = j <= i + 3  # bottom-right: 3 cached keys before the 6 new ones
    if window:
        causal = causal & (i + 3 - j < window)
    padded = causal.expand(4, 1, 6, 9).clone()
    padded[0, :, :, :4] = False  # left padding of 4 (the first query sees nothing)
    padded[1, :, :, :1] = False  # of 1
    padded[3] = False            # a row that sees no key at all
    scale = 8 ** -0.5
    got = rt.rotary_attention_forward(module, q, k, v, padded)[0]
    assert calls["n"] == 1
    assert torch.allclose(got, _masked_softmax_reference(q, k, v, padded, scale), rtol=0, atol=1e-13)
    before = padded.clone()
    before[2] = (j <= i - 1) & (i - 1 - j < (window or 99))  # row 2's queries one position before their keys
    calls["n"] = 0
    got = rt.rotary_attention_forward(module, q, k, v, before)[0]
    assert calls["n"] == 3  # rows 0-2 on their own; row 3 sees nothing
    assert torch.allclose(got, _masked_softmax_reference(q, k, v, before, scale), rtol=0, atol=1e-13)


def _plan_rows_by_row(mask, causal, window):
    """The backend's mask reading row by row, as it was written first: the definition the
    vectorized _plan_rows is checked against (plans, or the RotaryError's message)."""
    batch, q_len, kv_len = mask.shape
    seen = mask.any(-1)
    first = mask.int().argmax(-1)
    last = kv_len - 1 - mask.flip(-1).int().argmax(-1)
    rows_i, cols_j = torch.arange(q_len).unsqueeze(1), torch.arange(kv_len).unsqueeze(0)
    plans = []
    for b in range(batch):
        visible_rows = seen[b].nonzero().flatten()
        if visible_rows.numel() == 0:
            plans.append(None)
            continue
        key_start = int(first[b][visible_rows].min())
        key_end = int(last[b][visible_rows].max()) + 1
        offset = 0
        if causal:
            short = (last[b][visible_rows] < key_end - 1).nonzero().flatten()
            row = int(visible_rows[short[0]]) if short.numel() else None
            offset = int(last[b][row]) - row if row is not None else key_end - 1 - int(visible_rows[0])
        expected = ((cols_j >= key_start) & (cols_j < key_end)).expand(q_len, kv_len)
        if causal:
            expected = expected & (cols_j <= rows_i + offset)
        if window > 0:
            expected = expected & (rows_i + offset - cols_j < window)
        if not torch.equal(expected, mask[b]):
            bad = (expected != mask[b]).nonzero()[0].tolist()
            return f"row {b} at {bad}: {bool(mask[b, bad[0], bad[1]])} expected {bool(expected[bad[0], bad[1]])}"
        plans.append(backend._RowPlan(key_start, key_end, offset))
    return plans


def test_mask_reading_equals_the_row_by_row_definition_on_random_masks():
    """_plan_rows reads all rows at once; on 400 random masks (left and right padding, rows that
    see nothing, causal offsets of either sign, windows, and single flipped elements that make a
    mask inexpressible) it gives the row-by-row reading's plans, or refuses at the same element."""
    gen = torch.Generator().manual_seed(12)
    draw = lambda lo, hi: int(torch.randint(lo, hi + 1, (1,), generator=gen))  # noqa: E731
    refused = 0
    for trial in range(400):
        batch, q_len, kv_len = draw(1, 4), draw(1, 9), draw(1, 12)
        causal, window = bool(draw(0, 1)), draw(0, 4) * draw(0, 1)
        i, j = torch.arange(q_len).view(q_len, 1), torch.arange(kv_len).view(1, kv_len)
        rows = []
        for _ in range(batch):
            start, end, offset = draw(0, kv_len), draw(0, kv_len), draw(-3, kv_len)
            row = (j >= start) & (j < end)
            if causal:
                row = row & (j <= i + offset)
            if window:
                row = row & (i + offset - j < window)
            rows.append(row.expand(q_len, kv_len))
        mask = torch.stack(rows)
        if draw(0, 3) == 0:
            b, qi, kj = draw(0, batch - 1), draw(0, q_len - 1), draw(0, kv_len - 1)
            mask[b, qi, kj] = ~mask[b, qi, kj]
        want = _plan_rows_by_row(mask, causal, window)
        try:
            got = backend._plan_rows(mask, causal, window)
        except rotary.RotaryError as error:
            assert isinstance(want, str), (trial, str(error), want)
            b, at = want.split(" at ")[0].split()[1], want.split(" at ")[1].split(":")[0]
            qi, kj = (int(x) for x in at.strip("[]").split(","))
            assert f"attention_mask of batch row {b} " in str(error)
            assert f"(got mask[{b}, 0, {qi}, {kj}] = " in str(error), (trial, str(error), want)
            refused += 1
            continue
        assert got == want, (trial, got, want)
    assert 20 < refused < 200
