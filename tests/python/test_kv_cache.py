"""rotary.KvCache (python/rotary/_kv_cache.py), mirroring tests/attention/kv_cache_test.cpp:
decode after prefill against attention recomputed over the whole sequence, context shift against
a cache rebuilt at the new positions, and the refusals by message.

Tolerances (docs/attention.md, "The KV cache"), u = 2^-24, u_fmt the storage format's unit
roundoff (2^-8 bf16, 0 for float32):
  decode: the C++ test's bound with the score magnitude A bounded from above by
          scale * sum_e s (|x_a| + |x_c|) per rotated pair element (|a||C| + |c||S| <= s(|a| + |c|)),
          the whole-sequence side computed in float64 with rotary.apply's reference rotation;
  shift:  (10 u + 4.01 u_fmt) * s (|a0| + |c0|) per rotated element, the rest bitwise.
"""
import math

import ml_dtypes
import numpy as np
import pytest

import rotary

U = 2.0**-24
BF16 = np.dtype(ml_dtypes.bfloat16)


def random_values(rng, shape, dtype):
    magnitude = rng.uniform(0.1, 1.0, size=shape)
    return np.where(rng.random(shape) < 0.5, magnitude, -magnitude).astype(dtype)


def pair_magnitudes(x, spec, scaling):
    """s (|a| + |c|) on rotated elements, |x| elsewhere (NeoX or GPT-J pairs), in float64."""
    x = np.abs(x.astype(np.float64))
    m = x.copy()
    half = spec.rotary_dim // 2
    if spec.style == "neox":
        total = x[..., :half] + x[..., half:2 * half]
        m[..., :half] = scaling * total
        m[..., half:2 * half] = scaling * total
    else:
        total = x[..., 0:2 * half:2] + x[..., 1:2 * half:2]
        m[..., 0:2 * half:2] = scaling * total
        m[..., 1:2 * half:2] = scaling * total
    return m


@pytest.mark.parametrize("preset,seq_len,starts", [
    ("llama-3.1-8b", 0, [0, 70000]),
    ("qwen2.5-7b-yarn", 0, [0, 100000]),
    ("phi-3-mini-128k", 0, [0, 4000]),
    ("phi-3-mini-128k", 131072, [5000, 60000]),
])
def test_decode_after_prefill_equals_whole_sequence_attention(rng, preset, seq_len, starts):
    spec = rotary.Spec.preset(preset)
    table = rotary.Table(spec, seq_len=seq_len)
    batch, kv_heads, q_heads, d, dv, prefill, total = len(starts), 2, 4, spec.head_dim, 16, 21, 27
    q = random_values(rng, (batch, total, q_heads, d), np.float32)
    k = random_values(rng, (batch, total, kv_heads, d), np.float32)
    v = random_values(rng, (batch, total, kv_heads, dv), np.float32)
    positions = np.array([[s + i for i in range(total)] for s in starts], np.int64)

    cache = rotary.KvCache(table, batch=batch, kv_heads=kv_heads, capacity=total, v_head_dim=dv)
    cache.append(k[:, :prefill], v[:, :prefill], positions[:, :prefill])
    outs = [cache.attend(q[:, :prefill])]
    for t in range(prefill, total):
        cache.append(k[:, t:t + 1], v[:, t:t + 1])  # the next positions
        outs.append(cache.attend(q[:, t:t + 1]))
    got = np.concatenate(outs, axis=1).astype(np.float64)
    assert cache.lengths == [total] * batch

    # Whole sequence in float64: rotary.apply's reference rotation, then causal softmax.
    q_rot, k_rot = rotary.apply(q.astype(np.float64), k.astype(np.float64), positions, table, layout="bshd")
    scale = 1.0 / math.sqrt(d)
    group = q_heads // kv_heads
    k_rep = np.repeat(k_rot, group, axis=2)
    v_rep = np.repeat(v.astype(np.float64), group, axis=2)
    scores = scale * np.einsum("bihe,bjhe->bhij", q_rot, k_rep)
    mask = np.tril(np.ones((total, total), bool))
    scores = np.where(mask, scores, -np.inf)
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)
    ref = np.einsum("bhij,bjhe->bihe", weights, v_rep)

    # Bound per query and output element.
    s = table.attention_scaling
    qm, km = pair_magnitudes(q, spec, s), np.repeat(pair_magnitudes(k, spec, s), group, axis=2)
    a = scale * np.einsum("bihe,bjhe->bhij", qm, km)
    a_max = np.where(mask, a, 0).max(axis=-1).transpose(0, 2, 1)[..., None]  # [b, i, h, 1]
    n = np.arange(1, total + 1, dtype=np.float64)[None, :, None, None]
    e_score = (d + 6) * U * a_max
    eta = e_score + 110 * U
    acc = (n + 2 * np.ceil(n / 64) + 4) * U
    v_bar = np.maximum.accumulate(np.abs(v_rep), axis=1)  # max over visible j <= i
    tolerance = v_bar * (2 * eta * (1 + 2 * eta) + 2 * acc) + U * np.abs(ref)
    ratio = np.abs(got - ref) / tolerance
    assert ratio.max() <= 1.0, f"worst |cache - ref| / bound = {ratio.max():.4f}"


def shift_and_rebuild(rng, spec, dtype, length, starts, n_keep, n_discard, rebuild_error=0):
    table = rotary.Table(spec)
    batch, kv_heads, d, dv = len(starts), 2, spec.head_dim, 8
    k = random_values(rng, (batch, length, kv_heads, d), dtype)
    v = random_values(rng, (batch, length, kv_heads, dv), dtype)
    positions = np.array([[s + i for i in range(length)] for s in starts], np.int64)
    cache = rotary.KvCache(table, batch=batch, kv_heads=kv_heads, capacity=length, v_head_dim=dv,
                           dtype="bfloat16" if dtype == BF16 else "float32")
    cache.append(k, v, positions)
    cache.shift(n_keep, n_discard)
    new_length = length - n_discard
    kept = np.r_[0:n_keep, n_keep + n_discard:length]
    rebuilt = rotary.KvCache(table, batch=batch, kv_heads=kv_heads, capacity=length, v_head_dim=dv,
                             dtype="bfloat16" if dtype == BF16 else "float32")
    new_positions = positions[:, kept] - np.where(kept >= n_keep, n_discard - rebuild_error, 0)
    rebuilt.append(np.ascontiguousarray(k[:, kept]), np.ascontiguousarray(v[:, kept]), new_positions)
    got = cache.keys[:, :, :new_length].astype(np.float64)
    want = rebuilt.keys[:, :, :new_length].astype(np.float64)
    u_fmt = 2.0**-8 if dtype == BF16 else 0.0
    bound = (10 * U + 4.01 * u_fmt) * pair_magnitudes(k[:, kept].transpose(0, 2, 1, 3), spec, table.attention_scaling)
    rest_equal = np.array_equal(cache.values[:, :, :new_length], rebuilt.values[:, :, :new_length])
    return (np.abs(got - want) / bound).max(), rest_equal, cache


@pytest.mark.parametrize("preset", ["llama-3.1-8b", "qwen2.5-7b-yarn", "gpt-j-6b"])
@pytest.mark.parametrize("dtype", [np.float32, BF16], ids=["float32", "bfloat16"])
def test_context_shift_equals_cache_rebuilt_at_new_positions(rng, preset, dtype):
    spec = rotary.Spec.preset(preset)
    ratio, values_equal, cache = shift_and_rebuild(rng, spec, dtype, 40, [0, 3000], 4, 18)
    assert ratio <= 1.0, f"worst |shifted - rebuilt| / bound = {ratio:.4f}"
    assert values_equal
    assert cache.lengths == [22, 22]
    assert list(cache.positions(1)[:6]) == [3000, 3001, 3002, 3003, 3004, 3005]


def test_bound_rejects_an_off_by_one_shift(rng):
    spec = rotary.Spec.preset("qwen2.5-7b-yarn")
    ratio, _, _ = shift_and_rebuild(rng, spec, np.float32, 24, [0], 2, 9, rebuild_error=1)
    assert ratio > 1.0


def test_refusals_name_the_argument_and_value(rng):
    spec = rotary.Spec.preset("llama-3.1-8b")
    cache = rotary.KvCache(spec, batch=1, kv_heads=1, capacity=4)
    k = random_values(rng, (1, 3, 1, 128), np.float32)
    cache.append(k, k)
    with pytest.raises(rotary.RotaryError, match=r"k new tokens must fit the capacity 4 of sequence 0, which holds 3 \(got 3: 6 > 4\)"):
        cache.append(k, k)
    with pytest.raises(rotary.RotaryError, match=r"positions\[0\] of sequence 0 must be > 2, the sequence's last position \(got 2\)"):
        cache.append(k[:, :1], k[:, :1], [[2]])
    with pytest.raises(rotary.RotaryError, match=r"n_keep \+ n_discard must be <= the length 3 of sequence 0 \(got 1 \+ 3\)"):
        cache.shift(1, 3)
    with pytest.raises(rotary.RotaryError, match=r"k dtype must be the cache's float32 \(got float16\)"):
        cache.append(k[:, :1].astype(np.float16), k[:, :1].astype(np.float16))
    with pytest.raises(rotary.RotaryError, match=r"dtype must be 'float32', 'bfloat16' or 'float16' \(got 'int8'\)"):
        rotary.KvCache(spec, batch=1, kv_heads=1, capacity=4, dtype="int8")
    assert cache.lengths == [3]


def test_a_cache_larger_than_the_machine_is_refused_before_allocating():
    # 64 sequences x 2^24 tokens x 8 kv heads x 128 float32, K and V: 8 TiB and more, beyond any
    # machine this runs on; refused naming the shape and the bytes, never the OOM killer.
    spec = rotary.Spec.preset("llama-3.1-8b")
    refused = (r"KvCache: shape.capacity 16777216 with batch 64, kv_heads 8 .* needs \d+ bytes, more than "
               r"this (machine's memory|process's cgroup memory limit) and swap \(\d+ bytes\)")
    with pytest.raises(rotary.RotaryError, match=refused):
        rotary.KvCache(spec, batch=64, kv_heads=8, capacity=1 << 24)


def test_longrope_switch_is_refused_saying_why(rng):
    spec = rotary.Spec.preset("phi-3-mini-128k")
    cache = rotary.KvCache(spec, batch=1, kv_heads=1, capacity=4)
    k = random_values(rng, (1, 2, 1, spec.head_dim), np.float32)
    cache.append(k, k, [[4094, 4095]])
    with pytest.raises(rotary.RotaryError, match="LongRoPE switches between its short and long factors"):
        cache.append(k, k, [[4096, 4097]])
    assert cache.lengths == [2]


def test_mrope_is_refused_at_construction():
    with pytest.raises(rotary.RotaryError, match=r"spec.axes must be single \(got mrope\)"):
        rotary.KvCache(rotary.Spec.preset("qwen2-vl-7b"), batch=1, kv_heads=1, capacity=4)
