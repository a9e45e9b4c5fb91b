"""Inputs a careful caller never sends but a model can produce, through every Python surface of
attention: NaN and infinities (propagated as the float64 reference and torch's SDPA do: NaN in,
NaN out for the rows that see it; never a finite answer that ignores a key, never zeros), zero
head dims (the empty dot product: every score 0), and threads sharing one KvCache (calls are
serialized: the capacity holds, memory is never corrupted). The C++ side's contract and tests:
src/attention/attention_kernels-inl.h, tests/attention/special_values_test.cpp, kv_cache.hpp.
"""
import copy
import sys
import threading

import numpy as np
import pytest
import torch

import rotary
import rotary.torch as rt
from hf_harness import ATTENTION_FAMILIES, prompt

NAN = float("nan")
INF = float("inf")


def nan_key_case(dtype):
    """The probe's example: q = ones, two keys of ones with one NaN element, values 10 and 20."""
    q = np.ones((1, 1, 1, 4), dtype)
    k = np.ones((1, 1, 2, 4), dtype)
    k[0, 0, 1, 0] = NAN
    v = np.stack([np.full(4, 10.0), np.full(4, 20.0)])[None, None].astype(dtype)
    return q, k, v


@pytest.mark.parametrize("implementation", ["kernels", "reference"])
def test_numpy_attention_nan_key_gives_nan_not_the_other_keys_value(implementation):
    q, k, v = nan_key_case(np.float32)
    out = rotary.attention(q, k, v, implementation=implementation)
    assert np.isnan(out).all(), out  # the kernels gave [10, 10, 10, 10]: the NaN key ignored


def test_torch_attention_and_sdpa_agree_on_nan_and_inf():
    q, k, v = (torch.from_numpy(a) for a in nan_key_case(np.float32))
    ours = rt.attention(q, k, v)
    sdpa = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    assert torch.isnan(sdpa).all() and torch.isnan(ours).all(), (ours, sdpa)
    # An infinite q element: torch's SDPA gives NaN; the kernels gave zeros (a row with no key).
    q = torch.ones(1, 2, 3, 8)
    q[0, 1, 2, 5] = INF
    k, v = torch.rand(1, 2, 3, 8) + 0.1, torch.rand(1, 2, 3, 8) + 0.1
    ours = rt.attention(q, k, v, causal=True)
    sdpa = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert torch.equal(torch.isnan(ours), torch.isnan(sdpa)) and torch.isnan(ours[0, 1, 2]).all()
    torch.testing.assert_close(torch.nan_to_num(ours), torch.nan_to_num(sdpa), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_kv_cache_attend_propagates_a_nan_value(dtype):
    spec = rotary.Spec.preset("llama-3.1-8b")
    cache = rotary.KvCache(spec, batch=1, kv_heads=1, capacity=8, dtype=dtype)
    rng = np.random.default_rng(3)
    k = rng.uniform(0.1, 1, (1, 4, 1, 128)).astype(cache.dtype)
    v = rng.uniform(0.1, 1, (1, 4, 1, 128)).astype(cache.dtype)
    v[0, 2, 0, 7] = NAN  # element 7 of key 2's value
    cache.append(k, v)
    out = cache.attend(rng.uniform(0.1, 1, (1, 4, 2, 128)).astype(cache.dtype)).astype(np.float64)
    # Queries 0 and 1 do not see key 2 (causal); queries 2 and 3 do, in element 7 only.
    assert not np.isnan(out[0, :2]).any()
    assert np.isnan(out[0, 2:, :, 7]).all()
    assert not np.isnan(np.delete(out[0, 2:], 7, axis=-1)).any()


@pytest.mark.parametrize("family", ["llama", "gemma3"])
def test_transformers_backend_gives_nan_where_sdpa_does(family):
    """A NaN in one token's embedding row (position 4): every position that attends to it is NaN
    under sdpa, and must be under the "rotary" backend, not answered as if the token were not
    there. Positions before it differ by design: torch's SDPA (and eager) add the causal mask to
    the scores, NaN + -inf = NaN, so a NaN key poisons even the rows that cannot see it; rotary
    never reads an invisible key (the float64 reference's definition), so those rows stay finite."""
    rt.register_attention()
    model_cls, config = ATTENTION_FAMILIES[family]()
    torch.manual_seed(0)
    sdpa = model_cls._from_config(copy.deepcopy(config), attn_implementation="sdpa").eval()
    ours = model_cls._from_config(copy.deepcopy(config), attn_implementation="rotary").eval()
    ours.load_state_dict(sdpa.state_dict())
    ids = prompt(batch=1, seq=10)
    poisoned = int(ids[0, 4])
    with torch.no_grad():
        for model in (sdpa, ours):
            model.get_input_embeddings().weight[poisoned, 3] = NAN
        a, b = sdpa(ids).logits, ours(ids).logits
    # Without the poisoned token's own logit (Gemma ties lm_head to the embeddings: that column is
    # NaN at every position).
    a, b = (torch.cat([x[..., :poisoned], x[..., poisoned + 1:]], -1) for x in (a, b))
    nan_a, nan_b = torch.isnan(a).any(-1)[0], torch.isnan(b).any(-1)[0]
    assert nan_a[4:].all() and nan_b[4:].all(), (nan_a, nan_b)
    assert not nan_b[:4].any(), nan_b
    clean = model_cls._from_config(copy.deepcopy(config), attn_implementation="sdpa").eval()
    clean.load_state_dict(sdpa.state_dict())
    with torch.no_grad():
        clean.get_input_embeddings().weight[poisoned, 3] = 0.0
        expected = clean(ids[:, :4]).logits  # the first 4 positions never see position 4
    expected = torch.cat([expected[..., :poisoned], expected[..., poisoned + 1:]], -1)
    torch.testing.assert_close(b[0, :4], expected[0], atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("implementation", ["kernels", "reference"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_zero_head_dim_is_the_mean_of_the_values(implementation, dtype):
    """The probe's call died with SIGFPE in the kernels (a division by the head dim's vector
    count); the reference answered [1, 1, 1]: every score is the empty sum 0."""
    q = np.zeros((1, 1, 2, 0), dtype)
    v = np.arange(6, dtype=dtype).reshape(1, 1, 2, 3)
    out = rotary.attention(q, q.copy(), v, implementation=implementation)
    np.testing.assert_array_equal(out, np.array([[[[1.5, 2.5, 3.5], [1.5, 2.5, 3.5]]]], dtype))
    ones = rotary.attention(q, q.copy(), np.ones((1, 1, 2, 3), dtype), implementation=implementation)
    np.testing.assert_array_equal(ones, np.ones((1, 1, 2, 3), dtype))
    # Causal: query 0 sees key 0 alone.
    causal = rotary.attention(q, q.copy(), v, causal=True, implementation=implementation)
    np.testing.assert_array_equal(causal[0, 0, 0], v[0, 0, 0])


def test_zero_head_dim_through_the_torch_op_and_empty_value_dim():
    q = torch.zeros(1, 1, 2, 0)
    out = rt.attention(q, q.clone(), torch.ones(1, 1, 2, 3))
    assert torch.equal(out, torch.ones(1, 1, 2, 3))
    empty = rt.attention(torch.ones(1, 2, 3, 4), torch.ones(1, 1, 3, 4), torch.ones(1, 1, 3, 0))
    assert empty.shape == (1, 2, 3, 0)


@pytest.mark.parametrize("call, message", [
    (lambda: rotary.KvCache(rotary.Spec.preset("llama-3.1-8b"), batch=1, kv_heads=0, capacity=4), "kv_heads"),
    (lambda: rotary.KvCache(rotary.Spec.preset("llama-3.1-8b"), batch=0, kv_heads=1, capacity=4), "batch"),
    (lambda: rotary.KvCache(rotary.Spec.preset("llama-3.1-8b"), batch=1, kv_heads=1, capacity=-1), "capacity"),
    (lambda: rotary.KvCache(rotary.Spec.preset("llama-3.1-8b"), batch=1, kv_heads=1, capacity=4, head_dim=0), "head_dim"),
    (lambda: rotary.attention(np.ones((1, 2, 3, 4), np.float32), np.ones((1, 0, 3, 4), np.float32),
                              np.ones((1, 0, 3, 4), np.float32)), "heads"),
    (lambda: rotary.attention(np.ones((1, 2, 3, 4), np.float32), np.ones((1, 2, 3, 4), np.float32),
                              np.ones((1, 2, 3, 4), np.float32), window=-1), "window"),
])
def test_zero_and_negative_sizes_are_refused_naming_them(call, message):
    with pytest.raises(rotary.RotaryError, match=message):
        call()


def test_two_threads_appending_to_one_kv_cache_never_pass_its_capacity():
    """The probe: two threads x 20 one-token appends to a cache of capacity 16 reached length 17,
    then "double free or corruption" (the binding releases the GIL; the cache had no lock)."""
    spec = rotary.Spec.preset("llama-3.1-8b")
    for round_ in range(10):
        cache = rotary.KvCache(spec, batch=1, kv_heads=2, capacity=16)
        landed, refused, other = [], [], []

        def writer(tag):
            k = np.full((1, 1, 2, 128), tag, np.float32)
            for i in range(20):
                try:
                    cache.append(k, k)
                    landed.append(tag)
                except rotary.RotaryError as error:
                    (refused if "capacity" in str(error) else other).append(str(error))

        threads = [threading.Thread(target=writer, args=(t + 1,)) for t in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert (len(landed), len(refused), other) == (16, 24, []), round_
        assert cache.lengths == [16]
        np.testing.assert_array_equal(cache.positions(0), np.arange(16))
        tags = cache.values[0, 0, :16, 0]
        assert sorted(tags.tolist()) == sorted(float(t) for t in landed)


def test_threads_growing_dynamic_ntk_tables_of_one_spec():
    """Threads calling with dynamic NTK past max_position_embeddings at different lengths share
    the spec's table cache (rotary._table: one table per seq_len, the last few kept). Its lookup
    and eviction are several steps each; interleaved they raised KeyError or "OrderedDict mutated
    during iteration". Every call must return its own length's rotation."""
    spec = rotary.Spec.from_hf_config(dict(
        model_type="llama", hidden_size=32, num_attention_heads=2, max_position_embeddings=16,
        rope_parameters=dict(rope_type="dynamic", factor=2.0, rope_theta=10000.0)))
    rng = np.random.default_rng(5)
    x = rng.uniform(-1, 1, (1, 64, 2, 16)).astype(np.float32)
    expected = {n: rotary.apply(x[:, :n], None, None, spec, layout="bshd")[0] for n in range(17, 64)}
    errors = []

    def worker(seed):
        order = np.random.default_rng(seed).permutation(np.arange(17, 64))
        try:
            for _ in range(3):
                for n in order:
                    np.testing.assert_array_equal(rotary.apply(x[:, :n], None, None, spec, layout="bshd")[0], expected[n])
        except Exception as error:  # noqa: BLE001 - reported below with the thread's seed
            errors.append(f"{seed}: {type(error).__name__}: {error}")

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads between nearly every bytecode: the race shows
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert errors == []
