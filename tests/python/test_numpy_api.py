"""The NumPy API: rotary.apply against the float64 reference on random configurations, zero-copy
and in-place behaviour, tables, specs, targets and threads.

Kernel tolerance (docs/numerics.md, "The SIMD kernels"): u = 2^-24, M = |a C| + |c S| <= s (|a| + |c|)
with s = max(1, attention_scaling) and |C|, |S| <= s; here M is bounded per tensor by 2 s max|x|:
  float32:     2u M + u |ref|
  bf16 / f16:  2u M + ulp of the format at |ref| (2^-7 |ref| for bf16, 2^-10 |ref| for f16, and at
               least the format's smallest subnormal)
"""
import json

import ml_dtypes
import numpy as np
import pytest

import rotary

U = 2.0**-24
BF16 = np.dtype(ml_dtypes.bfloat16)
DTYPES = {"float32": np.dtype(np.float32), "float16": np.dtype(np.float16), "bfloat16": BF16}
FORMAT_ULP = {"float32": 0.0, "float16": 2.0**-10, "bfloat16": 2.0**-7}
FORMAT_MIN = {"float32": 0.0, "float16": 2.0**-24, "bfloat16": 2.0**-133}


def assert_close_to_reference(got, ref, x, dtype_name, scaling):
    got64, ref64 = got.astype(np.float64), ref.astype(np.float64)
    m = 2.0 * max(1.0, scaling) * float(np.max(np.abs(x.astype(np.float64))))
    bound = 2 * U * m + (U if dtype_name == "float32" else FORMAT_ULP[dtype_name]) * np.abs(ref64)
    bound = np.maximum(bound, FORMAT_MIN[dtype_name])
    err = np.abs(got64 - ref64)
    assert np.all(err <= bound), f"worst error / bound = {np.max(err / bound):.3g}"


def shape_of(layout, batch, seq, heads, dim):
    return {"bshd": (batch, seq, heads, dim), "bhsd": (batch, heads, seq, dim), "sbhd": (seq, batch, heads, dim),
            "thd": (batch * seq, heads, dim)}[layout]


def random_tensor(rng, shape, dtype, strided):
    """Random normal values; strided: a view into a larger buffer (a fused-qkv-like slice)."""
    if strided:
        padded = shape[:-1] + (shape[-1] + 8,)
        base = rng.standard_normal(padded).astype(dtype)
        return base[..., 3:3 + shape[-1]]
    return rng.standard_normal(shape).astype(dtype)


SPECS = ["llama-3.1-8b", "qwen2.5-7b-yarn", "phi-3-mini-128k", "gpt-neox-20b", "gpt-j-6b", "deepseek-v3"]


@pytest.mark.parametrize("trial", range(40))
def test_apply_matches_reference_on_random_configurations(rng, trial):
    rng = np.random.default_rng(1000 + trial)
    spec = rotary.Spec.preset(SPECS[trial % len(SPECS)])
    head_dim = spec.head_dim
    layout = ["bshd", "bhsd", "sbhd", "thd"][trial % 4]
    dtype_name = ["float32", "bfloat16", "float16"][(trial // 4) % 3]
    dtype = DTYPES[dtype_name]
    batch = 1 if layout == "thd" else int(rng.integers(1, 4))
    seq = int(rng.integers(1, 40))
    hq = int(rng.integers(1, 9))
    hk = int(rng.integers(1, hq + 1))
    # A model these tensors can come from: q holds a divisor of its heads (a shard), k all kv heads.
    spec = spec.replace(num_attention_heads=hq * hk, num_key_value_heads=hk)
    strided = bool(trial % 2)
    q = random_tensor(rng, shape_of(layout, batch, seq, hq, head_dim), dtype, strided)
    k = random_tensor(rng, shape_of(layout, batch, seq, hk, head_dim), dtype, strided)
    kwargs = {"layout": layout}
    mode = trial % 3
    if layout == "thd":
        cuts = np.sort(rng.choice(np.arange(1, seq), size=min(2, seq - 1), replace=False)) if seq > 2 else []
        kwargs["cu_seqlens"] = np.concatenate([[0], cuts, [seq]]).astype(np.int64)
        if mode == 1:
            kwargs["offsets"] = rng.integers(0, 1 << 20, size=len(kwargs["cu_seqlens"]) - 1)
    elif mode == 1:
        kwargs["offsets"] = rng.integers(0, 1 << 20, size=batch)
    positions = rng.integers(0, 1 << 25, size=(batch, seq)) if mode == 2 else None  # past 2^24 too
    # The table for the call's seq_len (largest position + 1): LongRoPE's long factors past 4096.
    if positions is not None:
        seq_len = int(positions.max()) + 1
    else:
        seq_len = int(np.max(kwargs.get("offsets", [0]))) + seq
    table = rotary.Table(spec, storage="on_the_fly", seq_len=seq_len)
    q_ref, k_ref = rotary.apply(q, k, positions, table, implementation="reference", **kwargs)
    q_out, k_out = rotary.apply(q, k, positions, table, **kwargs)
    assert q_out.dtype == dtype and q_out.shape == q.shape
    assert_close_to_reference(q_out, q_ref, q, dtype_name, table.attention_scaling)
    assert_close_to_reference(k_out, k_ref, k, dtype_name, table.attention_scaling)
    # In place into copies gives the same bits as out of place.
    q2, k2 = q.copy(), k.copy()
    r_q, r_k = rotary.apply(q2, k2, positions, table, inplace=True, **kwargs)
    assert r_q is q2 and r_k is k2
    np.testing.assert_array_equal(q2.view(np.uint8), q_out.view(np.uint8))
    np.testing.assert_array_equal(k2.view(np.uint8), k_out.view(np.uint8))


def test_out_of_place_leaves_inputs_and_in_place_is_zero_copy(rng):
    spec = rotary.Spec.preset("llama-3.1-8b")
    q = rng.standard_normal((2, 5, 4, 128)).astype(np.float32)
    k = rng.standard_normal((2, 5, 2, 128)).astype(np.float32)
    q0 = q.copy()
    q_out, _ = rotary.apply(q, k, None, spec, layout="bshd")
    np.testing.assert_array_equal(q, q0)
    assert not np.array_equal(q_out[:, 1:], q0[:, 1:])  # position 0 is the identity
    np.testing.assert_array_equal(q_out[:, 0], q0[:, 0])
    address = q.__array_interface__["data"][0]
    out, _ = rotary.apply(q, k, None, spec, inplace=True, layout="bshd")
    assert out.__array_interface__["data"][0] == address
    np.testing.assert_array_equal(q, q_out)


def test_backward_inverts_forward_without_scaling(rng):
    spec = rotary.Spec.preset("llama-2-7b")  # attention_scaling 1: the transpose is the inverse
    q = rng.standard_normal((1, 64, 4, 128))
    k = rng.standard_normal((1, 64, 2, 128))
    positions = rng.integers(0, 100000, size=(1, 64))
    fq, fk = rotary.apply(q, k, positions, spec, layout="bshd")
    bq, bk = rotary.apply(fq, fk, positions, spec, direction="backward", layout="bshd")
    # float64 storage goes through the float64 reference: error ~ a few 2^-52 times the angle's
    # float32 table rounding cancels exactly (same C, S both ways); 1e-12 absolute is generous.
    np.testing.assert_allclose(bq, q, atol=1e-12)
    np.testing.assert_allclose(bk, k, atol=1e-12)


def test_style_override_matches_a_gptj_spec(rng):
    spec = rotary.Spec.preset("llama-2-7b")
    q = rng.standard_normal((1, 9, 2, 128)).astype(np.float32)
    a, _ = rotary.apply(q, None, None, spec, style="gptj", layout="bshd")
    b, _ = rotary.apply(q, None, None, spec.replace(style="gptj"), layout="bshd")
    np.testing.assert_array_equal(a, b)
    c, _ = rotary.apply(q, None, None, spec, layout="bshd")
    assert not np.array_equal(a, c)


def test_table_is_cos_and_sin_of_the_angle(rng):
    spec = rotary.Spec.preset("qwen2.5-7b-yarn")
    positions = rng.integers(0, 4096, size=50)
    cos, sin = rotary.table(spec, positions)
    freqs = spec.frequencies()
    angle = positions[:, None].astype(np.float64) * freqs.inv_freq[None, :]
    s = freqs.attention_scaling
    half = spec.rotary_dim // 2
    # Correctly rounded float32 of s*cos(angle): within 1 float32 ulp of the float64 value (the
    # float64 angle and numpy's cos add ~1e-13 at these positions).
    for got, exact in ((cos[:, :half], s * np.cos(angle)), (sin[:, :half], s * np.sin(angle))):
        assert np.all(np.abs(got - exact) <= np.spacing(np.abs(got)) + 1e-12)
    np.testing.assert_array_equal(cos[:, :half], cos[:, half:])  # HF's cat(freqs, freqs)


def test_mrope_positions_pick_streams(rng):
    spec = rotary.Spec.preset("qwen2-vl-7b")
    assert spec.position_streams == 3
    same = np.tile(rng.integers(0, 5000, size=(1, 1, 12)), (3, 1, 1))
    cos3, _ = rotary.table(spec, same)
    single = rotary.Table.shared(spec).rows(same[0])[0]
    np.testing.assert_array_equal(cos3[..., : spec.num_pairs], single)
    q = rng.standard_normal((1, 12, 4, spec.head_dim)).astype(np.float32)
    k = rng.standard_normal((1, 12, 2, spec.head_dim)).astype(np.float32)
    positions = rng.integers(0, 5000, size=(3, 1, 12))
    q_out, k_out = rotary.apply(q, k, positions, spec, layout="bshd")
    q_ref, k_ref = rotary.apply(q, k, positions, spec, implementation="reference", layout="bshd")
    assert_close_to_reference(q_out, q_ref, q, "float32", 1.0)
    assert_close_to_reference(k_out, k_ref, k, "float32", 1.0)


@pytest.mark.parametrize("target", rotary.cpu_targets())
def test_every_cpu_target_matches_the_reference(rng, target):
    spec = rotary.Spec.preset("llama-3.1-8b")
    q = rng.standard_normal((2, 33, 8, 128)).astype(np.float32)
    k = rng.standard_normal((2, 33, 2, 128)).astype(np.float32)
    positions = rng.integers(0, 1 << 20, size=(2, 33))
    q_ref, _ = rotary.apply(q, k, positions, spec, implementation="reference", layout="bshd")
    try:
        rotary.force_cpu_target(target)
        assert rotary.current_cpu_target() == target
        q_out, _ = rotary.apply(q, k, positions, spec, layout="bshd")
    finally:
        rotary.force_cpu_target("")
    assert_close_to_reference(q_out, q_ref, q, "float32", 1.0)


def implementation_call(rng):
    """A float32 call with random non-zero values at positions past 2^20 (YaRN: scaling above 1)."""
    spec = rotary.Spec.preset("qwen2.5-7b-yarn")
    q = rng.uniform(0.5, 2.0, (2, 4, 37, spec.head_dim)) * rng.choice([-1.0, 1.0], (2, 4, 37, spec.head_dim))
    k = rng.uniform(0.5, 2.0, (2, 2, 37, spec.head_dim)) * rng.choice([-1.0, 1.0], (2, 2, 37, spec.head_dim))
    positions = rng.integers(0, 1 << 20, size=(2, 37))
    return q.astype(np.float32), k.astype(np.float32), positions, spec


def test_implementation_reference_is_the_float64_definition_and_the_kernels_are_within_tolerance(rng):
    q, k, positions, spec = implementation_call(rng)
    q_ref, k_ref = rotary.apply(q, k, positions, spec, implementation="reference")
    q_ker, k_ker = rotary.apply(q, k, positions, spec, implementation="kernels")
    q_default, k_default = rotary.apply(q, k, positions, spec)
    np.testing.assert_array_equal(q_default.view(np.uint32), q_ker.view(np.uint32))
    np.testing.assert_array_equal(k_default.view(np.uint32), k_ker.view(np.uint32))
    assert np.all(q != 0) and np.all(k != 0)
    assert np.all(np.isfinite(q_ref)) and np.all(np.isfinite(k_ref))
    assert not np.array_equal(q_ref, q) and not np.array_equal(k_ref, k)  # rotated
    # The reference computes in float64 and rounds once on store (docs/numerics.md): the float64
    # call, rounded to float32, is the same bits; the kernels round twice and may differ from it.
    q_64, k_64 = rotary.apply(q.astype(np.float64), k.astype(np.float64), positions, spec)
    np.testing.assert_array_equal(q_ref, q_64.astype(np.float32))
    np.testing.assert_array_equal(k_ref, k_64.astype(np.float32))
    scaling = spec.frequencies(seq_len=int(positions.max()) + 1).attention_scaling
    assert scaling > 1.0
    assert_close_to_reference(q_ker, q_ref, q, "float32", scaling)
    assert_close_to_reference(k_ker, k_ref, k, "float32", scaling)


@pytest.mark.parametrize("bad", ["fast", "Reference", "", None, True])
def test_a_bad_implementation_is_refused_by_name_and_value(rng, bad):
    q, k, positions, spec = implementation_call(rng)
    with pytest.raises(rotary.RotaryError) as error:
        rotary.apply(q, k, positions, spec, implementation=bad)
    assert str(error.value) == f"implementation must be 'kernels' or 'reference' (got {bad!r})"


def test_deprecated_reference_true_warns_and_runs_the_reference(rng):
    q, k, positions, spec = implementation_call(rng)
    want_q, want_k = rotary.apply(q, k, positions, spec, implementation="reference")
    with pytest.warns(DeprecationWarning, match='use implementation="reference"') as record:
        got_q, got_k = rotary.apply(q, k, positions, spec, reference=True)
    assert record[0].filename == __file__  # the warning points at the caller's line
    np.testing.assert_array_equal(got_q.view(np.uint32), want_q.view(np.uint32))
    np.testing.assert_array_equal(got_k.view(np.uint32), want_k.view(np.uint32))
    with pytest.warns(DeprecationWarning, match='use implementation="reference"'):  # agreeing: no error
        agreed_q, _ = rotary.apply(q, k, positions, spec, reference=True, implementation="reference")
    np.testing.assert_array_equal(agreed_q.view(np.uint32), want_q.view(np.uint32))
    kernels_q, _ = rotary.apply(q, k, positions, spec)
    with pytest.warns(DeprecationWarning, match='use implementation="kernels"'):
        old_default_q, _ = rotary.apply(q, k, positions, spec, reference=False)
    np.testing.assert_array_equal(old_default_q.view(np.uint32), kernels_q.view(np.uint32))


@pytest.mark.parametrize("reference,implementation", [(True, "kernels"), (False, "reference")])
def test_deprecated_reference_beside_a_differing_implementation_is_refused(rng, reference, implementation):
    q, k, positions, spec = implementation_call(rng)
    with pytest.raises(rotary.RotaryError) as error:
        rotary.apply(q, k, positions, spec, reference=reference, implementation=implementation)
    assert str(error.value) == ("reference (deprecated) and implementation disagree; pass implementation only "
                                f"(got reference={reference}, implementation={implementation!r})")


def test_results_do_not_depend_on_the_thread_count(rng):
    spec = rotary.Spec.preset("llama-3.1-8b")
    q = rng.standard_normal((1, 1024, 32, 128)).astype(np.float32)
    k = rng.standard_normal((1, 1024, 8, 128)).astype(np.float32)
    before = rotary.num_threads()
    try:
        rotary.set_num_threads(1)
        one = rotary.apply(q, k, None, spec, layout="bshd")
        rotary.set_num_threads(2)
        two = rotary.apply(q, k, None, spec, layout="bshd")
    finally:
        rotary.set_num_threads(before)
    np.testing.assert_array_equal(one[0], two[0])
    np.testing.assert_array_equal(one[1], two[1])


def test_spec_from_dict_path_folder_and_transformers_config(tmp_path):
    config = {"hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
              "max_position_embeddings": 4096, "rope_theta": 10000.0,
              "rope_scaling": {"rope_type": "linear", "factor": 4.0}}
    from_dict = rotary.Spec.from_hf_config(config)
    (tmp_path / "config.json").write_text(json.dumps(config))
    from_path = rotary.Spec.from_hf_config(tmp_path / "config.json")
    from_folder = rotary.Spec.from_hf_config(str(tmp_path))
    import transformers  # required: a missing dependency fails, never skips
    llama = transformers.LlamaConfig(**config)
    from_object = rotary.Spec.from_hf_config(llama)
    for spec in (from_dict, from_path, from_folder, from_object):
        assert (spec.head_dim, spec.rotary_dim, spec.rope_type, spec.factor) == (64, 64, "linear", 4.0)
        np.testing.assert_array_equal(spec.frequencies().inv_freq, from_dict.frequencies().inv_freq)
    assert from_dict.frequencies().inv_freq[1] == pytest.approx(10000.0 ** (-2 / 64) / 4, rel=1e-15)


def test_presets_and_layer_types():
    names = [name for name, _, _ in rotary.presets()]
    assert "llama-3.1-8b" in names and len(names) >= 20
    gemma = rotary.Spec.preset("gemma-3-27b")
    assert set(gemma.layer_type_names) == {"sliding_attention", "full_attention"}
    local = gemma.for_layer_type("sliding_attention")
    assert local.theta_base == 10000.0 and gemma.for_layer_type("full_attention").theta_base == 1000000.0


def test_float_positions_and_unsigned_positions():
    spec = rotary.Spec.preset("llama-2-7b")
    q = np.ones((1, 3, 1, 128), np.float32)
    a, _ = rotary.apply(q, None, np.array([[0, 1, 2]], np.uint32), spec, layout="bshd")
    b, _ = rotary.apply(q, None, np.array([[0, 1, 2]], np.int64), spec, layout="bshd")
    np.testing.assert_array_equal(a, b)


def test_one_version_string():
    """CMake's project(rotary VERSION ...) is the version of the package, its metadata and the command."""
    import importlib.metadata
    import pathlib
    import re
    import shutil
    import subprocess

    cmake = (pathlib.Path(__file__).resolve().parents[2] / "CMakeLists.txt").read_text()
    version = re.search(r"project\(rotary VERSION ([0-9.]+)", cmake).group(1)
    assert rotary.__version__ == version
    assert importlib.metadata.version("rotary") == version
    command = shutil.which("rotary", path=str(pathlib.Path(__import__("sys").executable).parent))
    assert command is not None, "the package installs the rotary command"
    assert subprocess.run([command, "--version"], capture_output=True, text=True, check=True).stdout == f"rotary {version}\n"
