"""rotary.attention on NumPy arrays (python/rotary/_attention.py over include/rotary/attention.hpp):
the float64 reference against a NumPy float64 definition written here, the kernels against the
reference within the bound of docs/attention.md ("Error analysis"), fused RoPE, varlen, out= and
strides, and the refusals by message.

The bound, per query i and output element e (u = 2^-24; A = max over visible j of
scale * sum_e |q_ie| |k_je|, with rotated elements' magnitudes s (|a| + |c|) for fused RoPE; n
visible keys; V = max over visible j of |v_je|):
    E = (d + 6) u A,  eta = E + 110 u,  acc = (n + 2 ceil(n / 64) + 4) u
    tol = V (2 eta (1 + 2 eta) + 2 acc) + storage
storage: u |ref| for float32; one unit in the last place of max(|fast|, |ref|) in bfloat16 /
float16 (the fast path rounds its float32 result once to the format).
"""
import math
import re

import ml_dtypes
import numpy as np
import pytest

import rotary
from test_kv_cache import U, pair_magnitudes, random_values

BF16 = np.dtype(ml_dtypes.bfloat16)
FORMAT_BITS = {np.dtype(np.float32): 24, BF16: 8, np.dtype(np.float16): 11}


def to_bhsd(x, layout):
    return {"bhsd": x, "bshd": x.transpose(0, 2, 1, 3), "sbhd": x.transpose(1, 2, 0, 3)}[layout]


def from_bhsd(x, layout):
    return {"bhsd": x, "bshd": x.transpose(0, 2, 1, 3), "sbhd": x.transpose(2, 0, 1, 3)}[layout]


def visibility(batch, q_len, kv_len, causal, window, offsets, kv_lengths):
    """[batch, q_len, kv_len] bool: attention.hpp's mask, written from its definition."""
    i = np.arange(q_len)[None, :, None]
    j = np.arange(kv_len)[None, None, :]
    p = i + np.asarray(offsets).reshape(batch, 1, 1)
    visible = j < np.asarray(kv_lengths).reshape(batch, 1, 1)
    if causal:
        visible = visible & (j <= p)
    if window > 0:
        visible = visible & (p - j < window)
    return np.broadcast_to(visible, (batch, q_len, kv_len))


def definition(q, k, v, visible, scale, bias=None):
    """softmax(scale q kᵀ + bias) v over the visible keys in float64, BHSD; zeros for rows seeing
    nothing. bias (ALiBi's): None or broadcastable to [batch, q_heads, q_len, kv_len]."""
    group = q.shape[1] // k.shape[1]
    k = np.repeat(k.astype(np.float64), group, axis=1)
    v = np.repeat(v.astype(np.float64), group, axis=1)
    scores = scale * np.einsum("bhie,bhje->bhij", q.astype(np.float64), k)
    if bias is not None:
        scores = scores + bias
    mask = visible[:, None]
    scores = np.where(mask, scores, -np.inf)
    top = np.where(mask.any(-1, keepdims=True), scores.max(-1, keepdims=True), 0.0)
    weights = np.where(mask, np.exp(scores - top), 0.0)
    total = weights.sum(-1, keepdims=True)
    return np.einsum("bhij,bhje->bhie", weights / np.where(total > 0, total, 1.0), v)


def bound(q_mag, k_mag, v, visible, scale, ref, fast_dtype, fast):
    """docs/attention.md's tolerance per output element, BHSD (q_mag, k_mag: element magnitudes)."""
    group = q_mag.shape[1] // k_mag.shape[1]
    k_mag = np.repeat(k_mag, group, axis=1)
    v_abs = np.repeat(np.abs(v.astype(np.float64)), group, axis=1)
    d = q_mag.shape[-1]
    mask = visible[:, None]
    a = scale * np.einsum("bhie,bhje->bhij", q_mag, k_mag)
    a_max = np.where(mask, a, 0).max(-1)[..., None]
    n = mask.sum(-1)[..., None].astype(np.float64)
    v_bar = np.where(mask[..., None], v_abs[:, :, None], 0).max(-2)
    eta = (d + 6) * U * a_max + 110 * U
    acc = (n + 2 * np.ceil(n / 64) + 4) * U
    bits = FORMAT_BITS[np.dtype(fast_dtype)]
    if bits == 24:
        storage = U * np.abs(ref)
    else:
        largest = np.maximum(np.abs(fast.astype(np.float64)), np.abs(ref))
        exponent = np.floor(np.log2(np.where(largest > 0, largest, 1.0)))
        smallest = 2.0 ** (-133 if np.dtype(fast_dtype) == BF16 else -24)
        storage = np.maximum(2.0 ** (exponent - (bits - 1)), smallest)
    return v_bar * (2 * eta * (1 + 2 * eta) + 2 * acc) + storage


def random_call(rng):
    batch = int(rng.integers(1, 3))
    kv_heads = int(rng.integers(1, 3))
    q_heads = kv_heads * int(rng.choice([1, 2, 4]))
    d = int(rng.choice([8, 16, 40, 64]))
    dv = int(rng.choice([d, 24]))
    kv_len = int(rng.integers(1, 90))
    q_len = int(rng.integers(1, kv_len + 1))
    causal = bool(rng.integers(0, 2))
    window = int(rng.choice([0, 0, 1, 5, 17]))
    per_sequence = bool(rng.integers(0, 2))
    offsets = rng.integers(0, kv_len - q_len + 1, size=batch) if per_sequence else \
        np.full(batch, int(rng.integers(0, kv_len - q_len + 1)))
    kv_lengths = rng.integers(1, kv_len + 1, size=batch) if rng.integers(0, 2) else None
    return dict(batch=batch, kv_heads=kv_heads, q_heads=q_heads, d=d, dv=dv, kv_len=kv_len, q_len=q_len,
                causal=causal, window=window, per_sequence=per_sequence, offsets=offsets, kv_lengths=kv_lengths,
                layout=str(rng.choice(["bhsd", "bshd", "sbhd"])), scale=float(rng.choice([0.0, 0.3])))


def call_kwargs(c):
    """rotary.attention's mask arguments for a random_call."""
    kwargs = dict(causal=c["causal"], window=c["window"], layout=c["layout"], scale=c["scale"] or None)
    if c["per_sequence"]:
        kwargs["query_offsets"] = c["offsets"]
    else:
        kwargs["query_offset"] = int(c["offsets"][0])
    if c["kv_lengths"] is not None:
        kwargs["kv_lengths"] = c["kv_lengths"]
    return kwargs


def random_qkv(rng, c, dtype):
    """q, k, v of a random_call's shapes, BHSD."""
    b, qh, kh, d, dv, ql, kl = c["batch"], c["q_heads"], c["kv_heads"], c["d"], c["dv"], c["q_len"], c["kv_len"]
    return (random_values(rng, (b, qh, ql, d), dtype), random_values(rng, (b, kh, kl, d), dtype),
            random_values(rng, (b, kh, kl, dv), dtype))


def run_random(rng, dtype, mutate_offset=0):
    """One random call: (worst |reference - definition|, worst |kernels - reference| / bound)."""
    c = random_call(rng)
    b, qh, d, ql, kl = c["batch"], c["q_heads"], c["d"], c["q_len"], c["kv_len"]
    q, k, v = random_qkv(rng, c, dtype)
    layout = c["layout"]
    kwargs = call_kwargs(c)
    args = [np.ascontiguousarray(from_bhsd(x, layout)) for x in (q, k, v)]
    fast = to_bhsd(rotary.attention(*args, **kwargs), layout).astype(np.float64)
    ref = to_bhsd(rotary.attention(*args, implementation="reference", **kwargs), layout).astype(np.float64)
    scale = c["scale"] or 1.0 / math.sqrt(d)
    lengths = c["kv_lengths"] if c["kv_lengths"] is not None else np.full(b, kl)
    visible = visibility(b, ql, kl, c["causal"], c["window"], c["offsets"] + mutate_offset, lengths)
    want = definition(q, k, v, visible, scale)
    tol = bound(np.abs(q.astype(np.float64)), np.abs(k.astype(np.float64)), v, visible, scale, want, dtype, fast)
    return np.abs(ref - want).max() if dtype == np.float32 else 0.0, worst_ratio(fast, want, tol)


def worst_ratio(got, want, tol):
    """max |got - want| / tol; a query that sees no key (tol 0) must be exactly 0 (else inf)."""
    diff = np.abs(got - want)
    return np.where(tol > 0, diff / np.where(tol > 0, tol, 1.0), np.where(diff == 0, 0.0, np.inf)).max()


@pytest.mark.parametrize("dtype", [np.float32, BF16, np.float16], ids=["float32", "bfloat16", "float16"])
def test_kernels_and_reference_match_the_definition_on_random_calls(rng, dtype):
    worst = 0.0
    for _ in range(40):
        ref_error, ratio = run_random(rng, dtype)
        assert ref_error <= 1e-6 if dtype == np.float32 else True  # the reference rounds once to float32
        worst = max(worst, ratio)
    assert worst <= 1.0, f"worst |kernels - definition| / bound = {worst:.4f}"


def test_bound_rejects_a_mask_moved_by_one_position(rng):
    ratios = [run_random(rng, np.float32, mutate_offset=1)[1] for _ in range(20)]
    assert max(ratios) > 1.0  # some random calls have a causal mask or a window that the move changes


def test_float64_runs_the_reference_and_equals_the_definition(rng):
    q = random_values(rng, (2, 4, 7, 16), np.float64)
    k = random_values(rng, (2, 2, 9, 16), np.float64)
    v = random_values(rng, (2, 2, 9, 16), np.float64)
    got = rotary.attention(q, k, v, causal=True, query_offset=2, kv_lengths=[9, 6])
    want = definition(q, k, v, visibility(2, 7, 9, True, 0, [2, 2], [9, 6]), 0.25)
    assert np.abs(got - want).max() < 1e-13


def test_fused_rope_equals_rotation_then_attention(rng):
    spec = rotary.Spec.preset("qwen2.5-7b-yarn")  # attention_scaling 1.1386: the table's values are used
    table = rotary.Table(spec)
    b, qh, kh, ql, kl, d = 2, 4, 2, 5, 11, spec.head_dim
    q = random_values(rng, (b, qh, ql, d), np.float32)
    k = random_values(rng, (b, kh, kl, d), np.float32)
    v = random_values(rng, (b, kh, kl, 24), np.float32)
    k_pos = np.array([np.arange(kl) + 300, np.arange(kl) + 7000])
    q_pos = k_pos[:, kl - ql:]
    fused = rotary.attention(q, k, v, causal=True, query_offset=kl - ql,
                             rope=rotary.FusedRope(table, q_positions=q_pos, k_positions=k_pos)).astype(np.float64)
    q_rot, _ = rotary.apply(q.astype(np.float64), None, q_pos, table)
    k_rot, _ = rotary.apply(k.astype(np.float64), None, k_pos, table)
    visible = visibility(b, ql, kl, True, 0, [kl - ql] * b, [kl] * b)
    want = definition(q_rot, k_rot, v, visible, 1 / math.sqrt(d))
    s = table.attention_scaling
    q_mag = pair_magnitudes(q.transpose(0, 2, 1, 3), spec, s).transpose(0, 2, 1, 3)
    k_mag = pair_magnitudes(k.transpose(0, 2, 1, 3), spec, s).transpose(0, 2, 1, 3)
    tol = bound(q_mag, k_mag, v, visible, 1 / math.sqrt(d), want, np.float32, fused)
    assert (np.abs(fused - want) / tol).max() <= 1.0
    # Default positions follow the mask: query i at query_offset + i, key j at j.
    default = rotary.attention(q, k, v, causal=True, query_offset=kl - ql, rope=rotary.FusedRope(table))
    explicit = rotary.attention(q, k, v, causal=True, query_offset=kl - ql,
                                rope=rotary.FusedRope(table, q_positions=np.arange(kl - ql, kl),
                                                      k_positions=np.arange(kl)))
    assert np.array_equal(default, explicit)
    # And positions matter: shifting only the keys changes the result well past the bound.
    moved = rotary.attention(q, k, v, causal=True, query_offset=kl - ql,
                             rope=rotary.FusedRope(table, q_positions=q_pos, k_positions=k_pos + 1)).astype(np.float64)
    assert (np.abs(moved - want) / tol).max() > 1.0


def test_varlen_thd_equals_one_call_per_sequence(rng):
    cu_q, cu_k = np.array([0, 3, 3, 8]), np.array([0, 6, 10, 18])
    q = random_values(rng, (8, 4, 16), np.float32)
    k = random_values(rng, (18, 2, 16), np.float32)
    v = random_values(rng, (18, 2, 16), np.float32)
    offsets = np.diff(cu_k) - np.diff(cu_q)  # bottom-right causal per sequence
    got = rotary.attention(q, k, v, causal=True, layout="thd", cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                           query_offsets=offsets, window=4)
    for n in range(3):
        qs, ks = slice(cu_q[n], cu_q[n + 1]), slice(cu_k[n], cu_k[n + 1])
        one = rotary.attention(q[None, qs], k[None, ks], v[None, ks], causal=True, layout="bshd",
                               query_offset=int(offsets[n]), window=4)
        assert np.array_equal(got[qs], one[0])


def test_strided_inputs_and_out(rng):
    base_q = random_values(rng, (2, 6, 5, 40), np.float32)
    base_k = random_values(rng, (2, 3, 9, 40), np.float32)
    q = base_q[:, ::2, :, :32]  # every other head, a head-dim prefix: strided, unit head-dim stride
    k, v = base_k[:, :, :, :32], base_k[:, :, :, 8:]
    assert not q.flags.c_contiguous
    out = np.full((2, 3, 5, 32), np.nan, np.float32)
    returned = rotary.attention(q, k, v, causal=True, query_offset=4, out=out)
    assert returned is out
    assert np.array_equal(out, rotary.attention(np.ascontiguousarray(q), np.ascontiguousarray(k),
                                                np.ascontiguousarray(v), causal=True, query_offset=4))


def test_a_query_that_sees_no_key_gets_zeros(rng):
    q = random_values(rng, (1, 2, 4, 8), np.float32)
    k = v = random_values(rng, (1, 2, 4, 8), np.float32)
    out = rotary.attention(q, k, v, causal=True, kv_lengths=[0])
    assert np.array_equal(out, np.zeros_like(out))


def test_attention_scale_rule():
    assert rotary.attention_scale(rotary.Spec.preset("llama-3.1-8b")) == pytest.approx(128**-0.5, rel=1e-15)
    deepseek = rotary.attention_scale(rotary.Spec.preset("deepseek-v3"), 192)
    assert deepseek == pytest.approx(192**-0.5 * (0.1 * math.log(40) + 1) ** 2, rel=1e-12)


@pytest.mark.parametrize("kwargs,message", [
    (dict(window=-1), "window"),
    (dict(kv_lengths=[3, 3]), "kv_lengths"),
    (dict(kv_lengths=[[3]]), "kv_lengths must be 1-D (got shape (1, 1))"),
    (dict(causal=1), "causal must be True or False (got 1)"),
    (dict(layout="bhds"), "layout must be one of bshd, bhsd, sbhd, thd (got 'bhds')"),
    (dict(implementation="fast"), "implementation must be 'kernels' or 'reference' (got 'fast')"),
    (dict(scale=float("nan")), "scale"),
    (dict(scale="0.1"), "scale must be a number (got '0.1')"),
    # Found by the attention_args fuzz target: the float32 fast path's scale was inf (NaN out).
    (dict(scale=1e39), "options.scale must be finite in float32, at most 3.4028235e.38 (attention computes in "
                       "float32) (got 1e.39)"),
    (dict(query_offset=1.5), "query_offset must be an integer (got 1.5)"),
    (dict(cu_seqlens_q=[0, 3]), "cu_seqlens"),
])
def test_refusals_name_the_argument_and_value(rng, kwargs, message):
    q = random_values(rng, (1, 4, 3, 8), np.float32)
    k = v = random_values(rng, (1, 2, 3, 8), np.float32)
    with pytest.raises(rotary.RotaryError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        rotary.attention(q, k, v, **kwargs)


def test_refusals_of_shapes_and_positions(rng):
    q = random_values(rng, (1, 6, 3, 8), np.float32)
    k = v = random_values(rng, (1, 4, 3, 8), np.float32)
    with pytest.raises(rotary.RotaryError, match="heads"):
        rotary.attention(q, k, v)  # 4 kv heads do not divide 6
    spec = rotary.Spec.from_hf_config({"model_type": "llama", "hidden_size": 32, "num_attention_heads": 4,
                                       "rope_theta": 10000.0, "max_position_embeddings": 64})
    q = random_values(rng, (1, 4, 3, 8), np.float32)
    k = v = random_values(rng, (1, 2, 5, 8), np.float32)
    with pytest.raises(rotary.RotaryError, match=r"k_positions has shape \(3,\); k has 5 tokens"):
        rotary.attention(q, k, v, rope=rotary.FusedRope(spec, k_positions=[0, 1, 2]))
    with pytest.raises(rotary.RotaryError, match=r"q_positions has shape \(2, 3\)"):
        rotary.attention(q, k, v, rope=rotary.FusedRope(spec, q_positions=np.zeros((2, 3), np.int64)))
    with pytest.raises(rotary.RotaryError, match="out must be writable"):
        out = np.zeros((1, 4, 3, 8), np.float32)
        out.flags.writeable = False
        rotary.attention(q, k, v, out=out)
    with pytest.raises(rotary.RotaryError, match="q dtype must be"):
        rotary.attention(q.astype(np.int32), k, v)


# ---- the other position encodings: ALiBi and an absolute table (docs/attention.md, "Position encodings") ----
def alibi_bias(slopes, batch, q_len, kv_len, offsets):
    """[batch, heads, q_len, kv_len]: -slope_h |p_i - j|, p_i = offset_b + i, slopes widened from
    float32 (attention.hpp: flash-attention's alibi_slopes convention)."""
    p = np.arange(q_len)[None, None, :, None] + np.asarray(offsets).reshape(batch, 1, 1, 1)
    j = np.arange(kv_len)[None, None, None, :]
    return -np.asarray(slopes, np.float32).astype(np.float64).reshape(1, -1, 1, 1) * np.abs(p - j)


def encoded_definition(q, k, v, visible, scale, bias=None, table=None, q_pos=None, k_pos=None):
    """The float64 definition with the encodings: bias added to the scores after the scale; the
    table's rows (float32 widened) added to q and k by position ([batch, seq] each). BHSD."""
    q = q.astype(np.float64)
    k = k.astype(np.float64)
    if table is not None:
        wide = table.astype(np.float64)
        q = q + wide[q_pos][:, None]
        k = k + wide[k_pos][:, None]
    return definition(q, k, v, visible, scale, bias), q, k


def encoded_bound(q_mag, k_mag, v, visible, scale, ref, fast_dtype, fast, bias=None):
    """bound() with docs/attention.md's ALiBi term: E = (d + 7) u A + 3 u max_visible |b| (step 5);
    an absolute table changes only A, computed by the caller from |q + P| and |k + P| (step 6)."""
    if bias is None:
        return bound(q_mag, k_mag, v, visible, scale, ref, fast_dtype, fast)
    group = q_mag.shape[1] // k_mag.shape[1]
    k_rep = np.repeat(k_mag, group, axis=1)
    d = q_mag.shape[-1]
    mask = visible[:, None]
    a_max = np.where(mask, scale * np.einsum("bhie,bhje->bhij", q_mag, k_rep), 0).max(-1)[..., None]
    b_max = np.where(mask, np.abs(bias), 0).max(-1)[..., None]
    # bound()'s tolerance with E = (d + 6) u A, plus the difference: u A + 3 u b, times its factor.
    base = bound(q_mag, k_mag, v, visible, scale, ref, fast_dtype, fast)
    v_abs = np.repeat(np.abs(v.astype(np.float64)), group, axis=1)
    v_bar = np.where(mask[..., None], v_abs[:, :, None], 0).max(-2)
    eta_old = (d + 6) * U * a_max + 110 * U
    eta_new = (d + 7) * U * a_max + 3 * U * b_max + 110 * U
    return base + v_bar * (2 * eta_new * (1 + 2 * eta_new) - 2 * eta_old * (1 + 2 * eta_old))


def run_encoded(rng, dtype, encoding, mutate=0):
    """One random call with ALiBi or an absolute table: (|reference - definition|, worst
    |kernels - definition| / bound). mutate shifts the definition's positions by one (the bound
    must then fail somewhere)."""
    c = random_call(rng)
    b, qh, d, ql, kl = c["batch"], c["q_heads"], c["d"], c["q_len"], c["kv_len"]
    q, k, v = random_qkv(rng, c, dtype)
    layout = c["layout"]
    kwargs = call_kwargs(c)
    scale = c["scale"] or 1.0 / math.sqrt(d)
    lengths = c["kv_lengths"] if c["kv_lengths"] is not None else np.full(b, kl)
    visible = visibility(b, ql, kl, c["causal"], c["window"], c["offsets"], lengths)
    bias = table = q_pos = k_pos = None
    if encoding == "alibi":
        slopes = rotary.alibi_slopes(qh) if rng.integers(0, 2) else rng.uniform(-1.0, 1.0, qh)
        kwargs["alibi_slopes"] = slopes
        bias = alibi_bias(slopes, b, ql, kl, c["offsets"] + mutate)
    else:
        rows = int(rng.integers(kl + ql, 3 * kl + 8))
        table = rotary.sinusoidal_table(rows, d) if rng.integers(0, 2) else \
            rng.uniform(-1.0, 1.0, (rows, d)).astype(np.float32)
        q_pos = rng.integers(0, rows, size=(b, ql))
        k_pos = rng.integers(0, rows, size=(b, kl))
        kwargs.update(absolute=table, q_positions=q_pos, k_positions=k_pos)
        k_pos = np.minimum(k_pos + mutate, rows - 1) if mutate else k_pos
    args = [np.ascontiguousarray(from_bhsd(x, layout)) for x in (q, k, v)]
    fast = to_bhsd(rotary.attention(*args, **kwargs), layout).astype(np.float64)
    ref = to_bhsd(rotary.attention(*args, implementation="reference", **kwargs), layout).astype(np.float64)
    want, q_sum, k_sum = encoded_definition(q, k, v, visible, scale, bias, table, q_pos, k_pos)
    tol = encoded_bound(np.abs(q_sum), np.abs(k_sum), v, visible, scale, want, dtype, fast, bias)
    return np.abs(ref - want).max() if dtype == np.float32 else 0.0, worst_ratio(fast, want, tol)


@pytest.mark.parametrize("encoding", ["alibi", "absolute"])
@pytest.mark.parametrize("dtype", [np.float32, BF16, np.float16], ids=["float32", "bfloat16", "float16"])
def test_encodings_match_the_definition_on_random_calls(rng, dtype, encoding):
    worst = 0.0
    for _ in range(30):
        ref_error, ratio = run_encoded(rng, dtype, encoding)
        assert ref_error <= 1e-6  # the reference rounds once to float32
        worst = max(worst, ratio)
    assert worst <= 1.0, f"worst |kernels - definition| / bound = {worst:.4f} ({encoding})"


@pytest.mark.parametrize("encoding", ["alibi", "absolute"])
def test_encoding_bound_rejects_positions_moved_by_one(rng, encoding):
    ratios = [run_encoded(rng, np.float32, encoding, mutate=1)[1] for _ in range(10)]
    assert max(ratios) > 1.0


def test_encodings_on_varlen_thd_equal_one_call_per_sequence(rng):
    cu_q, cu_k = np.array([0, 3, 3, 8]), np.array([0, 6, 10, 18])
    q = random_values(rng, (8, 4, 16), np.float32)
    k = random_values(rng, (18, 2, 16), np.float32)
    v = random_values(rng, (18, 2, 16), np.float32)
    offsets = np.diff(cu_k) - np.diff(cu_q)
    slopes = rotary.alibi_slopes(4)
    table = rotary.sinusoidal_table(40, 16)
    q_pos, k_pos = rng.integers(0, 40, 8), rng.integers(0, 40, 18)
    common = dict(causal=True, layout="thd", cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, query_offsets=offsets)
    with_alibi = rotary.attention(q, k, v, alibi_slopes=slopes, **common)
    with_table = rotary.attention(q, k, v, absolute=table, q_positions=q_pos, k_positions=k_pos, **common)
    for n in range(3):
        qs, ks = slice(cu_q[n], cu_q[n + 1]), slice(cu_k[n], cu_k[n + 1])
        one = dict(causal=True, layout="bshd", query_offset=int(offsets[n]))
        a = rotary.attention(q[None, qs], k[None, ks], v[None, ks], alibi_slopes=slopes, **one)
        t = rotary.attention(q[None, qs], k[None, ks], v[None, ks], absolute=table, q_positions=q_pos[qs],
                             k_positions=k_pos[ks], **one)
        assert np.array_equal(with_alibi[qs], a[0]) and np.array_equal(with_table[qs], t[0])


def test_absolute_table_default_positions_follow_the_mask(rng):
    q = random_values(rng, (2, 4, 3, 8), np.float32)
    k = v = random_values(rng, (2, 2, 7, 8), np.float32)
    table = rotary.sinusoidal_table(7, 8)
    default = rotary.attention(q, k, v, causal=True, query_offset=4, absolute=table)
    explicit = rotary.attention(q, k, v, causal=True, query_offset=4, absolute=table, q_positions=np.arange(4, 7),
                                k_positions=np.arange(7))
    assert np.array_equal(default, explicit)
    assert not np.array_equal(default, rotary.attention(q, k, v, causal=True, query_offset=4))


def paper_slopes(n):
    """Press et al.'s get_slopes (github.com/ofirpress/attention_with_linear_biases, transcribed)."""
    def power_of_2(n):
        start = 2 ** (-2 ** -(math.log2(n) - 3))
        return [start * start ** i for i in range(n)]
    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + paper_slopes(2 * closest)[0::2][:n - closest]


@pytest.mark.parametrize("heads", [8, 12, 16])
def test_alibi_slopes_equal_the_papers(heads):
    got = rotary.alibi_slopes(heads)
    assert got.dtype == np.float64 and got.shape == (heads,)
    assert np.allclose(got, paper_slopes(heads), rtol=1e-14, atol=0)  # the paper's code rounds start ** i
    explicit = {8: [2.0 ** -(h + 1) for h in range(8)],
                12: [2.0 ** -(h + 1) for h in range(8)] + [2 ** -0.5, 2 ** -1.5, 2 ** -2.5, 2 ** -3.5],
                16: [2.0 ** -((h + 1) / 2) for h in range(16)]}[heads]
    assert np.allclose(got, explicit, rtol=1e-15, atol=0)


def test_sinusoidal_table_is_vaswanis():
    rows, d = 50, 12
    table = rotary.sinusoidal_table(rows, d)
    assert table.dtype == np.float32 and table.shape == (rows, d)
    angle = np.arange(rows)[:, None] / 10000.0 ** (np.arange(0, d, 2)[None, :] / d)
    want = np.empty((rows, d))
    want[:, 0::2], want[:, 1::2] = np.sin(angle), np.cos(angle)
    assert np.all(np.abs(table - want) <= 2.0 ** -24 * np.abs(want) + 1e-30)  # rounded once to float32
    assert rotary.sinusoidal_table(3, 4, 100.0)[2, 3] == np.float32(np.cos(2 / 10.0))  # base: 100^(2/4) = 10


def small_spec():
    return rotary.Spec.from_hf_config({"model_type": "llama", "hidden_size": 32, "num_attention_heads": 4,
                                       "rope_theta": 10000.0, "max_position_embeddings": 64})


@pytest.mark.parametrize("make_kwargs,message", [
    (lambda: dict(alibi_slopes=[0.5, 0.25, 0.125]), "options.alibi_slopes must hold one slope per q head, 4 (got 3)"),
    (lambda: dict(alibi_slopes=[0.5, np.inf, 0.1, 0.1]), "options.alibi_slopes[1] must be finite (got inf)"),
    (lambda: dict(alibi_slopes=[[0.5]]), "alibi_slopes must be a 1-D array of real numbers"),
    (lambda: dict(alibi_slopes=[0.5, 0.5, 1e300, 0.5]), "alibi_slopes[2] must fit in float32 (got 1e+300)"),
    (lambda: dict(absolute=rotary.sinusoidal_table(9, 6)), "absolute.dim must equal q's head dim, 8 (got 6)"),
    (lambda: dict(absolute=rotary.sinusoidal_table(9, 8).astype(np.float64)),
     "absolute must be a float32 array [rows, head_dim] (got dtype float64, shape (9, 8))"),
    (lambda: dict(absolute=np.zeros(8, np.float32)), "absolute must be a float32 array [rows, head_dim]"),
    (lambda: dict(absolute=rotary.sinusoidal_table(3, 8), k_positions=[0, 1, 3]),
     "absolute.k_positions[2] must be in [0, 2] (the table's rows) (got 3)"),
    (lambda: dict(absolute=rotary.sinusoidal_table(3, 8), q_positions=[0, -1, 2]),
     "absolute.q_positions[1] must be in [0, 2] (the table's rows) (got -1)"),
    (lambda: dict(absolute=rotary.sinusoidal_table(3, 8), alibi_slopes=rotary.alibi_slopes(4)),
     "options.alibi_slopes must be empty with an absolute table: one position encoding per call (got 4 slopes)"),
    (lambda: dict(rope=rotary.FusedRope(small_spec()), alibi_slopes=rotary.alibi_slopes(4)),
     "options.alibi_slopes must be empty with fused RoPE: one position encoding per call (got 4 slopes)"),
    (lambda: dict(rope=rotary.FusedRope(small_spec()), absolute=rotary.sinusoidal_table(3, 8)),
     "options.absolute must be null with fused RoPE: one position encoding per call (got a table)"),
])
def test_encoding_refusals_name_the_argument_and_value(rng, make_kwargs, message):
    q = random_values(rng, (1, 4, 3, 8), np.float32)
    k = v = random_values(rng, (1, 2, 3, 8), np.float32)
    out = np.full((1, 4, 3, 8), 7.0, np.float32)
    with pytest.raises(rotary.RotaryError, match=re.escape(message)):
        rotary.attention(q, k, v, out=out, **make_kwargs())
    assert np.all(out == 7.0)  # nothing written


@pytest.mark.parametrize("call,message", [
    (lambda: rotary.alibi_slopes(0), "0"),
    (lambda: rotary.alibi_slopes(2.0), "num_heads must be an integer (got 2.0)"),
    (lambda: rotary.sinusoidal_table(4, 5), "5"),
    (lambda: rotary.sinusoidal_table(-1, 4), "-1"),
    (lambda: rotary.sinusoidal_table(4, 4, 1.0), "1"),
])
def test_encoding_helper_refusals(call, message):
    with pytest.raises(rotary.RotaryError, match=re.escape(message)):
        call()


def test_kv_starts_equal_each_sequence_on_its_keys_from_the_start(rng):
    """kv_starts hides each sequence's keys before it (left padding) with positions unchanged: the
    same as each sequence alone on k[b, :, start:], its query offset moved back by the start. The
    float64 reference gives the same bits; the kernels agree within float32 rounding. With fused
    RoPE the keys keep their positions too."""
    q = random_values(rng, (3, 4, 5, 16), np.float64)
    k = random_values(rng, (3, 2, 20, 16), np.float64)
    v = random_values(rng, (3, 2, 20, 16), np.float64)
    starts, offsets = np.array([0, 6, 14]), np.array([15, 15, 15])
    spec = rotary.Spec.preset("llama-3.1-8b").replace(head_dim=16, rotary_dim=16)
    for extra in ({}, {"rope": rotary.FusedRope(spec)}):
        full = rotary.attention(q, k, v, causal=True, query_offsets=offsets, kv_starts=starts, **extra)
        fast = rotary.attention(q.astype(np.float32), k.astype(np.float32), v.astype(np.float32), causal=True,
                                query_offsets=offsets, kv_starts=starts, **extra)
        for b, s in enumerate(starts):
            # Alone, the keys from s: the mask's positions shift, so fused RoPE is given the originals.
            rope = rotary.FusedRope(spec, q_positions=(offsets[b] + np.arange(5))[None, :],
                                    k_positions=np.arange(s, 20)[None, :])
            alone = rotary.attention(q[b:b + 1], k[b:b + 1, :, s:], v[b:b + 1, :, s:], causal=True,
                                     query_offset=int(offsets[b] - s), **({"rope": rope} if extra else {}))
            np.testing.assert_array_equal(full[b:b + 1], alone)
            np.testing.assert_allclose(fast[b:b + 1], alone, rtol=0, atol=2e-6)
    with pytest.raises(rotary.RotaryError, match=r"attention: options.kv_starts\[2\] must be in \[0, 20\] \(k's seq\) "
                                                 r"\(got 21\)"):
        rotary.attention(q, k, v, kv_starts=[0, 0, 21])
    with pytest.raises(rotary.RotaryError, match=r"options.kv_starts must hold one value per sequence, 3 \(got 2\)"):
        rotary.attention(q, k, v, kv_starts=[0, 0])
    with pytest.raises(rotary.RotaryError, match=r"kv_starts must be 1-D"):
        rotary.attention(q, k, v, kv_starts=[[0, 0, 0]])
