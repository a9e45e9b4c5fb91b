"""The Python API's contract on the paths users take first: every class of silent wrong
answer or crash that a probe found, swept across the API functions and backends it can reach.

  1. seq_len: Hugging Face's rule (the call's largest position + 1, or seq_len= named) everywhere,
     and a table that cannot serve a call's seq_len is an error, never an answer.
  2. Writing paths check writability (a read-only mmap segfaulted; a read-only array was written).
  3. One validation for every backend (the pure-torch path skipped the kernel path's checks).
  4. torch.compile(fullgraph=True) from a cold start (tests in a fresh interpreter).
  6. Positions checked by shape, not only by count; no meta-device positions read as memory.
  8. Memory: a discarded Spec frees its tables without the cyclic GC; table limits are settable.
  9. No silent coercion (1.5 -> 1), no misleading message (empty list "float64", uint64 negative).

Every rejected call asserts the error names the argument and the value, and that no input or
output byte changed.
"""
import gc
import os
import subprocess
import sys
import textwrap
import weakref

import numpy as np
import pytest

import rotary

import torch  # required: a missing dependency fails, never skips
import transformers  # required: a missing dependency fails, never skips
import rotary.torch as rt  # noqa: E402

U = 2.0**-24  # float32 unit roundoff

# Small specs: a dynamic-NTK model that grows past 64 positions, Phi-3's LongRoPE (long factors
# past 4096), and a plain one. The tensors here have their own head counts (q 3, k 2), so the
# specs' model head counts are cleared (0 = unknown: apply does not check the heads axis).
def without_head_counts(spec):
    return spec.replace(num_attention_heads=0, num_key_value_heads=0)


DYNAMIC_CONFIG = dict(hidden_size=192, num_attention_heads=6, num_key_value_heads=2, head_dim=32,
                      max_position_embeddings=64,
                      rope_parameters=dict(rope_type="dynamic", factor=2.0, rope_theta=10000.0))
DYNAMIC = rotary.Spec.from_hf_config(dict(DYNAMIC_CONFIG, model_type="llama"))
LONGROPE = without_head_counts(rotary.Spec.preset("phi-3-mini-128k"))
PLAIN = without_head_counts(rotary.Spec.preset("llama-3.1-8b").replace(head_dim=32, rotary_dim=32))
MROPE = without_head_counts(rotary.Spec.preset("qwen2-vl-7b"))


def rng(seed=0):
    return np.random.default_rng(seed)


def qk(spec, batch=2, seq=5, heads=(3, 2), layout="bshd", seed=0):
    """Random nonzero q, k (float32) for a spec, in a layout."""
    g = rng(seed)
    d = spec.head_dim
    shapes = {"bshd": lambda h: (batch, seq, h, d), "bhsd": lambda h: (batch, h, seq, d),
              "sbhd": lambda h: (seq, batch, h, d), "thd": lambda h: (batch * seq, h, d)}[layout]
    return (g.standard_normal(shapes(heads[0])).astype(np.float32),
            g.standard_normal(shapes(heads[1])).astype(np.float32))


# ---- 1. the seq_len rule ---------------------------------------------------------------------------
def hf_module_cos_sin(spec_name, positions):
    """transformers' own rotary-embedding module, fresh (no call history), on [1, seq] position_ids:
    its dynamic_rope_update picks the frequencies for seq_len = max(position_ids) + 1."""
    if spec_name == "dynamic":
        config = transformers.LlamaConfig(**DYNAMIC_CONFIG)
        module = transformers.models.llama.modeling_llama.LlamaRotaryEmbedding(config)
    else:
        config = transformers.Phi3Config(**json_config(LONGROPE))
        module = transformers.models.phi3.modeling_phi3.Phi3RotaryEmbedding(config)
    ids = torch.as_tensor(positions).reshape(1, -1)
    cos, sin = module(torch.zeros(1, dtype=torch.float32), ids)
    return cos[0].double().numpy(), sin[0].double().numpy()


def json_config(spec):
    import json

    return json.loads(rotary._rotary.preset_config_json(spec.name))


@pytest.mark.parametrize("name, positions", [
    ("dynamic", np.arange(0, 40)),                 # seq_len 40 <= 64: the original frequencies
    ("dynamic", np.arange(300, 340)),              # seq_len 340: grown
    ("dynamic", np.array([5, 20000, 7])),          # one far position grows the whole call
    ("longrope", np.arange(4000, 4090)),           # seq_len 4090 <= 4096: short factors
    ("longrope", np.arange(4090, 4110)),           # crosses 4096: long factors for every row
    ("longrope", np.array([3, 100000])),
])
def test_table_follows_hugging_faces_seq_len_rule(name, positions):
    spec = DYNAMIC if name == "dynamic" else LONGROPE
    cos, sin = rotary.table(spec, positions)
    hf_cos, hf_sin = hf_module_cos_sin(name, positions)
    # transformers computes in float32: its inv_freq is within a few float32 ulps of the exact value
    # (test_hf_frequencies.py), the angle fl(fl(p) * inv_freq) adds 1/2 ulp, cos/sin and the scaling
    # 2 ulps: |hf - exact| <= s (5 P + 3) u with P the largest position (test_hf_models.py derives it).
    s = max(1.0, rotary.Table(spec, seq_len=int(positions.max()) + 1).attention_scaling)
    bound = s * (5 * int(positions.max()) + 3) * U
    assert np.max(np.abs(cos - hf_cos)) <= bound and np.max(np.abs(sin - hf_sin)) <= bound
    # The rule's table, exactly: the table built for max + 1.
    right = rotary.Table(spec, seq_len=int(positions.max()) + 1, storage="on_the_fly").cos_sin(positions)
    assert np.array_equal(cos, right[0]) and np.array_equal(sin, right[1])
    if spec.frequencies(int(positions.max()) + 1).inv_freq.tolist() != spec.frequencies(0).inv_freq.tolist():
        # What the old code answered (the seq_len-0 table) is far from transformers: the test can fail.
        stale = rotary.Table(spec, storage="on_the_fly").cos_sin(positions, seq_len=0)[0]
        assert np.max(np.abs(stale - hf_cos)) > 10 * bound


def test_named_seq_len_overrides_the_rule():
    positions = np.arange(10, 20)
    for seq_len in (0, 64, 65, 500):
        cos, _ = rotary.table(DYNAMIC, positions, seq_len=seq_len)
        want = rotary.Table(DYNAMIC, seq_len=seq_len, storage="on_the_fly").cos_sin(positions, seq_len=seq_len)[0]
        assert np.array_equal(cos, want)
    assert not np.array_equal(rotary.table(DYNAMIC, positions, seq_len=500)[0], rotary.table(DYNAMIC, positions)[0])


def rotate_all_ways(spec_or_table, q, k, positions, **kwargs):
    """rotary.apply (kernel and reference) and rotary.torch.apply_rotary (both backends, three output
    modes) on the same call; returns {way: (q_out, k_out)} as NumPy arrays."""
    kwargs.setdefault("layout", "bshd")  # qk() makes bshd arrays
    out = {"numpy": rotary.apply(q, k, positions, spec_or_table, **kwargs),
           "numpy-reference": rotary.apply(q, k, positions, spec_or_table, implementation="reference", **kwargs)}
    pos = None if positions is None else torch.from_numpy(np.asarray(positions))
    kwargs = {key: torch.as_tensor(value) if key in ("offsets", "cu_seqlens") else value for key, value in kwargs.items()}
    for backend in ("auto", "torch"):
        qt, kt = torch.from_numpy(q.copy()), torch.from_numpy(k.copy())
        fresh = rt.apply_rotary(qt, kt, pos, spec_or_table, backend=backend, **kwargs)
        buffers = (torch.empty_like(qt), torch.empty_like(kt))
        rt.apply_rotary(qt, kt, pos, spec_or_table, backend=backend, out=buffers, **kwargs)
        rt.apply_rotary(qt, kt, pos, spec_or_table, backend=backend, inplace=True, **kwargs)
        for mode, (a, b) in (("fresh", fresh), ("out", buffers), ("inplace", (qt, kt))):
            out[f"torch-{backend}-{mode}"] = (a.numpy(), b.numpy())
    return out


@pytest.mark.parametrize("spec, positions", [
    (DYNAMIC, np.array([[0, 1, 2, 3, 300], [7, 8, 9, 10, 11]])),
    (LONGROPE, np.array([[4094, 4095, 4096, 4097, 9000], [0, 1, 2, 3, 4]])),
])
def test_every_apply_path_uses_the_calls_seq_len(spec, positions):
    q, k = qk(spec)
    seq_len = int(positions.max()) + 1
    right = rotary.Table(spec, seq_len=seq_len, storage="on_the_fly")
    want_q, want_k = rotary.apply(q, k, positions, right, implementation="reference", layout="bshd")
    stale_q, _ = rotary.apply(q, k, positions, rotary.Table(spec, storage="on_the_fly"), seq_len=0,
                              implementation="reference", layout="bshd")
    scale = 2 * max(1.0, right.attention_scaling) * float(np.abs(q).max())
    bound = 3 * U * scale  # docs/numerics.md: the kernels are within 2u M + u |ref| of the reference
    assert np.max(np.abs(stale_q - want_q)) > 1000 * bound  # the old answer was wrong: this can fail
    for way, (got_q, got_k) in rotate_all_ways(spec, q, k, positions).items():
        assert np.max(np.abs(got_q - want_q)) <= bound, way
        assert np.max(np.abs(got_k - want_k)) <= bound, way


def test_offsets_and_arange_calls_use_their_seq_len():
    q, k = qk(DYNAMIC)
    for kwargs, seq_len in ((dict(offsets=[0, 200]), 205), (dict(), 5), (dict(offsets=[10, 0]), 15)):
        want, _ = rotary.apply(q, k, None, rotary.Table(DYNAMIC, seq_len=seq_len, storage="on_the_fly"), layout="bshd", **kwargs)
        for way, (got, _) in rotate_all_ways(DYNAMIC, q, k, None, **kwargs).items():
            assert np.max(np.abs(got - want)) <= 3 * U * 2 * float(np.abs(q).max()), way


STALE_TABLE = rotary.Table(DYNAMIC)  # built for seq_len 0: serves calls up to 64 positions only
STALE_MESSAGE = "seq_len (largest position + 1) 301 needs dynamic frequencies other than the table's " \
                "(got a table built for seq_len 0)"


@pytest.mark.parametrize("way", ["apply", "apply-reference", "table", "rows", "cos_sin", "torch-auto", "torch-torch",
                                 "torch-out", "torch-inplace"])
def test_a_table_that_cannot_serve_the_seq_len_is_an_error(way):
    q, k = qk(DYNAMIC)
    positions = np.array([[0, 1, 2, 3, 300], [7, 8, 9, 10, 11]])
    q0, k0 = q.copy(), k.copy()
    qt, kt = torch.from_numpy(q), torch.from_numpy(k)
    out = (torch.full_like(qt, 7.0), torch.full_like(kt, 7.0))
    calls = {
        "apply": lambda: rotary.apply(q, k, positions, STALE_TABLE, layout="bshd"),
        "apply-reference": lambda: rotary.apply(q, k, positions, STALE_TABLE, implementation="reference", layout="bshd"),
        "table": lambda: rotary.table(STALE_TABLE, positions),
        "rows": lambda: STALE_TABLE.rows(positions),
        "cos_sin": lambda: STALE_TABLE.cos_sin(positions),
        "torch-auto": lambda: rt.apply_rotary(qt, kt, torch.from_numpy(positions), STALE_TABLE, layout="bshd"),
        "torch-torch": lambda: rt.apply_rotary(qt, kt, torch.from_numpy(positions), STALE_TABLE, backend="torch", layout="bshd"),
        "torch-out": lambda: rt.apply_rotary(qt, kt, torch.from_numpy(positions), STALE_TABLE, out=out, layout="bshd"),
        "torch-inplace": lambda: rt.apply_rotary(qt, kt, torch.from_numpy(positions), STALE_TABLE, inplace=True, layout="bshd"),
    }
    with pytest.raises(rotary.RotaryError, match="seq_len") as error:
        calls[way]()
    assert "301" in str(error.value) and "seq_len 0" in str(error.value), str(error.value)
    if way.startswith("apply") or way.startswith("torch"):
        assert STALE_MESSAGE in str(error.value)
    assert np.array_equal(q, q0) and np.array_equal(k, k0)
    assert bool((out[0] == 7.0).all()) and bool((out[1] == 7.0).all())
    # Named on purpose, the same table answers.
    rotary.apply(q, k, positions, STALE_TABLE, seq_len=0, layout="bshd")


def test_dynamic_grown_tables_are_kept_few_and_computed_on_the_fly():
    spec = rotary.Spec.from_hf_config(dict(DYNAMIC_CONFIG, model_type="llama"))
    q, k = qk(spec, batch=1, seq=1)
    for position in range(100, 140):  # a decode loop past max_position_embeddings: one seq_len per step
        rotary.apply(q, k, np.array([[position]]), spec, layout="bshd")
    entries = rotary._table._SHARED[spec]
    grown = [slot for slot in entries if slot[2] != 0]
    assert len(grown) == rotary._table._GROWN_TABLES_KEPT
    assert all(entries[slot][1].storage == "on_the_fly" for slot in grown)


# ---- 2. writability -----------------------------------------------------------------------------------
@pytest.fixture
def read_only_mmap(tmp_path):
    x = rng(3).standard_normal((1, 2, 4, 32)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    return np.load(tmp_path / "x.npy", mmap_mode="r")


def test_apply_cos_sin_refuses_a_read_only_output(read_only_mmap):
    x = read_only_mmap
    before = np.array(x)
    cos = np.ones((4, 32), np.float32)
    sin = np.full((4, 32), 0.5, np.float32)
    for out in (x, np.broadcast_to(np.zeros((1, 2, 4, 32), np.float32), x.shape)):
        with pytest.raises(rotary.RotaryError, match=r"x_out must be writable \(got a read-only array\)"):
            rotary.apply_cos_sin(x, cos, sin, out=out)
    frozen = before.copy()
    frozen.flags.writeable = False
    with pytest.raises(rotary.RotaryError, match="x_out must be writable"):
        rotary.apply_cos_sin(frozen, cos, sin, out=frozen)
    assert np.array_equal(np.array(x), before) and np.array_equal(frozen, before)
    # Reading a read-only array into a fresh output is fine.
    assert rotary.apply_cos_sin(x, cos, sin).flags.writeable


def test_apply_in_place_refuses_read_only_arrays(read_only_mmap):
    x = read_only_mmap  # bhsd-shaped (1, 2, 4, 32) read as bshd: 1 batch, 2 tokens, 4 heads
    before = np.array(x)
    k = np.zeros((1, 2, 1, 32), np.float32)
    for name, call in (("q", lambda: rotary.apply(x, k, None, PLAIN, inplace=True, layout="bshd")),
                       ("k", lambda: rotary.apply(k, x, None, PLAIN, inplace=True, layout="bshd"))):
        with pytest.raises(rotary.RotaryError, match=rf"{name} must be writable \(got a read-only array\)"):
            call()
    assert np.array_equal(np.array(x), before)


# ---- 3, 6, 9. one validation for every backend, shapes not counts, no coercion ------------------------
def bad_calls():
    """(name, kwargs for apply / apply_rotary, message fragments). q (2, 5, 3, 32), k (2, 5, 2, 32) bshd."""
    return [
        ("transposed positions", dict(positions=np.zeros((5, 2), np.int64)),
         ["positions has shape (5, 2); q has 10 tokens (batch 2 x seq 5, layout bshd): expected (2, 5), (1, 5) or (5,)"]),
        ("position count", dict(positions=np.zeros((2, 4), np.int64)), ["positions has shape (2, 4); q has 10 tokens", "expected (2, 5)"]),
        ("flat positions", dict(positions=np.zeros(10, np.int64)), ["positions has shape (10,); q has 10 tokens", "expected (2, 5)"]),
        ("empty positions", dict(positions=[]), ["positions has shape (0,); q has 10 tokens", "expected (2, 5)"]),
        ("float positions", dict(positions=np.zeros((2, 5))), ["positions must hold integers (got dtype ", "float64)"]),
        ("uint64 positions", dict(positions=np.full((2, 5), 2**63, np.uint64)),
         ["positions values must fit in int64 (got 9223372036854775808)"]),
        ("negative position", dict(positions=np.array([[0, 1, -4, 2, 3]] * 2)), ["positions.values[2]", "got -4"]),
        ("offsets count", dict(offsets=np.array([0, 1, 2])), ["offsets has shape (3,): expected (2,)"]),
        ("empty offsets", dict(offsets=[]), ["offsets has shape (0,): expected (2,)"]),
        ("offsets 2-D", dict(offsets=np.zeros((2, 1), np.int64)), ["offsets has shape (2, 1): expected (2,)"]),
        ("cu_seqlens for bshd", dict(cu_seqlens=np.array([0, 10])), ["cu_seqlens is only for the thd layout"]),
        ("fractional rotary_offset", dict(rotary_offset=1.5), ["rotary_offset must be an integer (got 1.5)"]),
        ("bool rotary_offset", dict(rotary_offset=True), ["rotary_offset must be an integer (got True)"]),
        ("negative rotary_offset", dict(rotary_offset=-1), ["rotary_offset must be >= 0 (got -1)"]),
        ("huge rotary_offset", dict(rotary_offset=2**70), ["rotary_offset must be <= 9223372036854775807"]),
        ("fractional xpos_length", dict(xpos_length=2.5), ["xpos_length must be an integer (got 2.5)"]),
        ("fractional seq_len", dict(seq_len=64.0), ["seq_len must be an integer (got 64.0)"]),
        ("negative seq_len", dict(seq_len=-3), ["seq_len must be >= 0 (got -3)"]),
        ("bad style", dict(style="rotate_half"), ["style must be 'neox' or 'gptj' (got 'rotate_half')"]),
        ("bad precision", dict(precision="fp64"), ["precision must be 'exact' or 'hf' (got 'fp64')"]),
        ("bad direction", dict(direction="inverse"), ["direction must be 'forward' or 'backward' (got 'inverse')"]),
        ("bad layout", dict(layout="bsd"), ["layout must be one of bshd, bhsd, sbhd, thd (got 'bsd')"]),
    ]


def thd_bad_calls():
    """q (10, 3, 32), k (10, 2, 32) thd."""
    return [
        ("empty cu_seqlens", dict(cu_seqlens=[]), ["cu_seqlens must be 1-D with num_sequences + 1 offsets", "(0,)"]),
        ("short cu_seqlens", dict(cu_seqlens=np.array([0, 4])), ["cu_seqlens[1] (the last) must equal the token count 10",
                                                                "got 4"]),
        ("2-D cu_seqlens", dict(cu_seqlens=np.array([[0, 10]])), ["cu_seqlens must be 1-D", "got shape (1, 2)"]),
        ("thd positions [tokens, 1]", dict(cu_seqlens=np.array([0, 10]), positions=np.zeros((10, 1), np.int64)),
         ["positions has shape (10, 1); q has 10 tokens (layout thd): expected (10,) or (1, 10)"]),
        ("thd offsets count", dict(cu_seqlens=np.array([0, 4, 10]), offsets=np.array([0])),
         ["offsets has shape (1,): expected (2,)"]),
    ]


def mrope_bad_calls():
    """M-RoPE q (1, 5, 2, 128), k (1, 5, 1, 128) bshd."""
    return [
        ("mrope [tokens, 3]", dict(positions=np.zeros((5, 3), np.int64)),
         ["positions has shape (5, 3)", "expected (3, 1, 5)"]),
        ("mrope one stream", dict(positions=np.zeros((1, 5), np.int64)), ["positions has shape (1, 5)", "expected (3, 1, 5)"]),
    ]


def to_torch(value):
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value)
    if isinstance(value, list):
        return torch.tensor(value, dtype=torch.int64)
    return value


CASES = ([(name, PLAIN, "bshd", kw, msg) for name, kw, msg in bad_calls()]
         + [(name, PLAIN, "thd", kw, msg) for name, kw, msg in thd_bad_calls()]
         + [(name, MROPE, "bshd", kw, msg) for name, kw, msg in mrope_bad_calls()])
WAYS = ["numpy", "numpy-inplace", "torch-auto", "torch-auto-out", "torch-auto-inplace", "torch-torch",
        "torch-torch-out", "torch-torch-inplace"]


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("name, spec, layout, kwargs, fragments", CASES, ids=[c[0] for c in CASES])
def test_one_validation_for_every_api_and_backend(name, spec, layout, kwargs, fragments, way):
    kwargs = dict(kwargs)
    positions = kwargs.pop("positions", None)
    call_layout = kwargs.pop("layout", layout)
    heads = (2, 1) if spec is MROPE else (3, 2)
    q, k = qk(spec, batch=1 if spec is MROPE else 2, seq=5, heads=heads, layout=layout)
    q0, k0 = q.copy(), k.copy()
    sentinel = []
    if way.startswith("numpy"):
        def call():
            return rotary.apply(q, k, positions, spec, layout=call_layout, inplace=way.endswith("inplace"), **kwargs)
    else:
        backend = way.split("-")[1]
        qt, kt = torch.from_numpy(q), torch.from_numpy(k)
        targs = {key: to_torch(value) for key, value in kwargs.items()}
        if way.endswith("out"):
            targs["out"] = (torch.full_like(qt, 7.0), torch.full_like(kt, 7.0))
            sentinel = list(targs["out"])
        targs["inplace"] = way.endswith("inplace")

        def call():
            return rt.apply_rotary(qt, kt, to_torch(positions), spec, layout=call_layout, backend=backend, **targs)
    with pytest.raises(rotary.RotaryError) as error:
        call()
    for fragment in fragments:
        assert fragment in str(error.value), f"{way}: {error.value}"
    assert np.array_equal(q, q0) and np.array_equal(k, k0), "an input changed"
    assert all(bool((t == 7.0).all()) for t in sentinel), "an output was written"


def test_torch_backend_honours_out_and_refuses_what_the_kernel_refuses():
    q, k = (torch.from_numpy(a) for a in qk(PLAIN))
    want = rt.apply_rotary(q, k, None, PLAIN, layout="bshd")
    buffers = (torch.zeros_like(q), torch.zeros_like(k))
    got = rt.apply_rotary(q, k, None, PLAIN, out=buffers, backend="torch", layout="bshd")
    assert got[0] is buffers[0] and got[1] is buffers[1]
    assert torch.allclose(buffers[0], want[0], rtol=0, atol=1e-6) and float(buffers[0].abs().max()) > 0
    for backend in ("auto", "torch"):
        with pytest.raises(rotary.RotaryError, match=r"out= and inplace=True exclude each other \(got both\)"):
            rt.apply_rotary(q, k, None, PLAIN, out=buffers, inplace=True, backend=backend, layout="bshd")
        leaf = q.clone().requires_grad_()
        with pytest.raises(rotary.RotaryError, match=r"inplace=True does not record gradients"):
            rt.apply_rotary(leaf, k, None, PLAIN, inplace=True, backend=backend, layout="bshd")
        with pytest.raises(rotary.RotaryError, match=r"out= does not record gradients"):
            rt.apply_rotary(leaf, k, None, PLAIN, out=buffers, backend=backend, layout="bshd")
        with pytest.raises(rotary.RotaryError, match=r"q_out must have shape \(2, 5, 3, 32\) and dtype torch.float32"):
            rt.apply_rotary(q, k, None, PLAIN, out=(torch.zeros(2, 5, 3, 31), buffers[1]), backend=backend, layout="bshd")
        with pytest.raises(rotary.RotaryError, match=r"k_out must have shape .* \(got shape \(2, 5, 2, 32\), torch.float16"):
            rt.apply_rotary(q, k, None, PLAIN, out=(buffers[0], buffers[1].half()), backend=backend, layout="bshd")


@pytest.mark.parametrize("argument", ["positions", "offsets"])
def test_meta_positions_with_cpu_tensors_are_refused(argument):
    q, k = (torch.from_numpy(a) for a in qk(PLAIN))
    q0 = q.clone()
    value = torch.empty((2, 5) if argument == "positions" else (2,), dtype=torch.int64, device="meta")
    for backend in ("auto", "torch"):
        with pytest.raises(rotary.RotaryError, match=rf"{argument} must hold values, not be on the meta device"):
            rt.apply_rotary(q, k, value if argument == "positions" else None, PLAIN, backend=backend,
                            **({argument: value} if argument == "offsets" else {}))
    assert torch.equal(q, q0)


def test_meta_tensors_give_shapes_only():
    q, k = torch.empty(2, 5, 3, 32, device="meta"), torch.empty(2, 5, 2, 32, device="meta")
    got_q, got_k = rt.apply_rotary(q, k, torch.zeros(2, 5, dtype=torch.int64, device="meta"), PLAIN, layout="bshd")
    assert got_q.device.type == "meta" and got_q.shape == q.shape and got_k.shape == k.shape


def test_uint_positions_in_torch_report_their_true_value():
    q, k = (torch.from_numpy(a) for a in qk(PLAIN))
    huge = torch.full((2, 5), 2**63 + 5, dtype=torch.uint64)
    for backend in ("auto", "torch"):
        with pytest.raises(rotary.RotaryError, match=r"positions values must fit in int64 \(got 9223372036854775813\)"):
            rt.apply_rotary(q, k, huge, PLAIN, backend=backend, layout="bshd")
    small = torch.from_numpy(np.arange(10, dtype=np.uint16).reshape(2, 5))
    want = rt.apply_rotary(q, k, small.to(torch.int64), PLAIN, layout="bshd")
    assert torch.equal(rt.apply_rotary(q, k, small, PLAIN, layout="bshd")[0], want[0])


def test_positions_broadcast_like_hugging_faces_position_ids():
    q, k = qk(PLAIN)
    row = np.arange(7, 12)
    full = np.stack([row, row])
    want = rotary.apply(q, k, full, PLAIN, layout="bshd")
    for given in (row, row[None]):
        got = rotary.apply(q, k, given, PLAIN, layout="bshd")
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
        got_t = rt.apply_rotary(torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(given), PLAIN, layout="bshd")
        assert np.array_equal(got_t[0].numpy(), want[0])


@pytest.mark.parametrize("field, value, fragment", [
    ("head_dim", 130.7, "Spec.replace: head_dim must be an integer (got 130.7)"),
    ("head_dim", 2**70, "Spec.replace: head_dim must be <= 9223372036854775807 (got 1180591620717411303424)"),
    ("rotary_dim", True, "Spec.replace: rotary_dim must be an integer (got True)"),
    ("max_position_embeddings", "4096", "Spec.replace: max_position_embeddings must be an integer (got '4096')"),
    ("theta_base", "1e4", "Spec.replace: theta_base must be a number (got '1e4')"),
    ("style", 1, "Spec.replace: style must be a str (got 1)"),
])
def test_spec_replace_never_coerces(field, value, fragment):
    with pytest.raises(rotary.RotaryError) as error:
        PLAIN.replace(**{field: value})
    assert fragment in str(error.value)


@pytest.mark.parametrize("call, fragment", [
    (lambda: rotary.Table(PLAIN, seq_len=1.5), "seq_len must be an integer (got 1.5)"),
    (lambda: rotary.Table(PLAIN, fixed_positions=10.0), "fixed_positions must be an integer (got 10.0)"),
    (lambda: rotary.Table(PLAIN, max_bytes=0), "max_bytes must be >= 1 (got 0)"),
    (lambda: rotary.Table(PLAIN).reserve(3.5), "positions must be an integer (got 3.5)"),
    (lambda: PLAIN.frequencies(seq_len=2.5), "seq_len must be an integer (got 2.5)"),
    (lambda: rotary.table(PLAIN, [1, 2], seq_len=-1), "seq_len must be >= 0 (got -1)"),
    (lambda: rotary.Table(PLAIN).rows([]), None),  # an empty call is not an error: no rows
])
def test_table_arguments_never_coerce(call, fragment):
    if fragment is None:
        cos, sin = call()
        assert cos.shape == (0, PLAIN.num_pairs)
        return
    with pytest.raises(rotary.RotaryError) as error:
        call()
    assert fragment in str(error.value)


# ---- 8. memory -----------------------------------------------------------------------------------------
def test_a_discarded_spec_frees_its_tables_without_the_cyclic_gc():
    gc.collect()
    gc.disable()
    try:
        shared_before = len(rotary._table._SHARED)
        spec = rotary.Spec.preset("llama-3.1-8b")
        q = rng().standard_normal((1, 4, 2, 128)).astype(np.float32)
        rotary.apply(q, None, None, spec, layout="bshd")
        rotary.apply(q, None, None, spec, style="gptj", precision="hf", layout="bshd")
        rotary.table(spec, np.arange(10))
        assert len(rotary._table._SHARED) == shared_before + 1
        alive = weakref.ref(spec)
        del spec
        assert alive() is None, "the Spec is kept alive by a reference cycle"
        assert len(rotary._table._SHARED) == shared_before, "its shared tables outlived it"
    finally:
        gc.enable()


def test_far_decode_steps_store_rows_not_a_table_up_to_them():
    spec = rotary.Spec.preset("llama-3.1-8b")
    q = rng().standard_normal((16, 32, 1, 128)).astype(np.float32)
    k = rng(1).standard_normal((16, 8, 1, 128)).astype(np.float32)
    for step in range(300):  # 16 sequences decoding near position 10^6
        rotary.apply(q, k, np.arange(16)[:, None] * 10 + 1_000_000 + step, spec, layout="bhsd")
    qt, kt = torch.from_numpy(q), torch.from_numpy(k)
    rt.apply_rotary(qt, kt, torch.full((16, 1), 4_000_000), spec, layout="bhsd", inplace=True)
    shared = rotary.Table.shared(spec)
    # Rows 10^6 .. 10^6 + 450 span 2-3 pages of 256 rows x 64 pairs x 8 bytes (128 KiB each), 4e6 one
    # more, plus the page directory and leaves: well under 2 MB, where a table up to 4e6 would be 2 GB.
    assert 0 < shared.stored_bytes < 2 << 20, shared.stored_bytes
    assert shared.size == 0  # no prefix was stored


def test_table_memory_limit_is_settable_and_named():
    table = rotary.Table(PLAIN, max_bytes=4096)
    with pytest.raises(rotary.RotaryError, match="max_bytes"):
        table.reserve(100000)


# ---- 4. torch.compile from a cold start ------------------------------------------------------------------
COLD_COMPILE = textwrap.dedent("""
    import torch, rotary, rotary.torch as rt
    torch._dynamo.reset()
    # Brand-new specs and a table: no shared table exists before the first traced call.
    plain = rotary.Spec.preset("llama-3.1-8b")
    longrope = rotary.Spec.preset("phi-3-mini-128k")
    table = rotary.Table(plain, precision="hf")

    def step(q, k, pos, source, style):
        q2, k2 = rt.apply_rotary(q, k, pos, source, layout="bhsd", style=style)
        return q2 * 2.0, k2 + 1.0

    compiled = torch.compile(step, fullgraph=True)
    for source, dim, style in ((plain, 128, None), (plain, 128, "gptj"), (table, 128, None), (longrope, 96, None)):
        for start in (0, 5000, 3):  # LongRoPE: short, long, short again
            q = torch.randn(1, 4, 6, dim, requires_grad=True)
            k = torch.randn(1, 2, 6, dim)
            pos = torch.arange(start, start + 6).reshape(1, 6)
            got = compiled(q, k, pos, source, style)
            want = step(q, k, pos, source, style)
            assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), (source, start)
            got[0].sum().backward()
            assert q.grad is not None and torch.isfinite(q.grad).all()
    print("cold compile ok")
""")


def test_torch_compile_fullgraph_from_a_cold_start():
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=os.path.join(os.environ.get("TMPDIR", "/tmp"),
                                                               f"rotary-cold-{os.getpid()}"))
    result = subprocess.run([sys.executable, "-c", COLD_COMPILE], capture_output=True, text=True, env=env,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "cold compile ok" in result.stdout
