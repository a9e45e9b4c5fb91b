"""rotary.diagnose on NumPy arrays and torch tensors: buggy implementations synthesized by hand
from the spec's float64 frequencies (8 rows) are named, correct ones give no mismatch, bad input
raises rotary.RotaryError naming the argument. Mirrors tests/analysis/diagnose_test.cpp."""
import numpy as np
import pytest

import rotary

POSITIONS = np.array([0, 1, 9, 70, 600, 5000, 40000, 300000], dtype=np.int64)


def synthesize(spec, *, interleaved=False, offset=0, sign=1.0, heads=None, seed=20):
    f = spec.frequencies(int(POSITIONS[-1]) + 1)
    d, half = spec.rotary_dim, spec.rotary_dim // 2
    rng = np.random.default_rng(seed)
    shape = (len(POSITIONS), spec.head_dim) if heads is None else (len(POSITIONS), heads, spec.head_dim)
    x = rng.standard_normal(shape)
    y = x.copy()
    angle = sign * (POSITIONS[:, None] + offset) * f.inv_freq[None, :]  # [rows, pairs]
    if heads is not None:
        angle = angle[:, None, :]
    c, s = f.attention_scaling * np.cos(angle), f.attention_scaling * np.sin(angle)
    a = np.arange(half) * 2 if interleaved else np.arange(half)
    b = a + 1 if interleaved else a + half
    y[..., a] = x[..., a] * c - x[..., b] * s
    y[..., b] = x[..., b] * c + x[..., a] * s
    assert d <= spec.head_dim
    return x, y


@pytest.mark.parametrize("name", ["llama-3.1-8b", "qwen2.5-7b-yarn", "gpt-j-6b", "gpt-neox-20b"])
def test_correct_implementations_have_no_mismatch(name):
    spec = rotary.Spec.preset(name)
    x, y = synthesize(spec, interleaved=spec.style == "gptj")
    result = rotary.diagnose(x, y, POSITIONS, target=name)
    assert result["matches"], result["mismatches"]
    assert result["rotary_dim"] == spec.rotary_dim
    assert result["precision"] == "exact"
    np.testing.assert_allclose(result["inv_freq"], spec.frequencies(300001).inv_freq, rtol=1e-9)


def test_names_interleaved_pairing_of_a_half_split_model():
    spec = rotary.Spec.preset("llama-3.1-8b")
    x, y = synthesize(spec, interleaved=True)
    result = rotary.diagnose(x, y, POSITIONS, target=spec)
    assert result["pairing"] == "interleaved"
    assert [m["aspect"] for m in result["mismatches"]] == ["pairing"]
    assert ("your implementation pairs (x[2i], x[2i+1]) (interleaved, GPT-J); this model pairs (x[i], x[i+64]) "
            "(half-split, NeoX)") in result["mismatches"][0]["message"]
    assert result["nearest_preset"] == "llama-3.1-8b"


def test_names_off_by_one_and_conjugate_without_a_target_too():
    spec = rotary.Spec.preset("gpt-neox-20b")
    x, y = synthesize(spec, offset=1, sign=-1.0)
    alone = rotary.diagnose(x, y, POSITIONS)
    assert "mismatches" not in alone
    assert alone["position_offset"] == 1  # -(p + 1) theta: the angle of position p + 1, conjugated
    assert alone["direction"] == "backward"
    result = rotary.diagnose(x, y, POSITIONS, target="gpt-neox-20b")
    assert [m["aspect"] for m in result["mismatches"]] == ["direction", "position_offset"]


def test_torch_tensors_with_heads_and_float32_storage():
    torch = pytest.importorskip("torch")
    spec = rotary.Spec.preset("gpt-neox-20b")
    x, y = synthesize(spec, heads=4)
    result = rotary.diagnose(torch.from_numpy(x).float(), torch.from_numpy(y).float(), torch.from_numpy(POSITIONS),
                             target=spec)
    assert result["rows"] == 32
    assert result["matches"], result["mismatches"]


def test_bad_input_names_the_argument():
    spec = rotary.Spec.preset("gpt-neox-20b")
    x, y = synthesize(spec)
    with pytest.raises(rotary.RotaryError, match=r"diagnose: y must have the shape of x, \(8, 96\) \(got \(4, 96\)\)"):
        rotary.diagnose(x, y[:4], POSITIONS)
    bad = y.copy()
    bad[2, 8] = np.nan
    with pytest.raises(rotary.RotaryError, match=r"diagnose: y must be finite \(got nan at row 2, column 8\)"):
        rotary.diagnose(x, bad, POSITIONS)
    with pytest.raises(rotary.RotaryError, match="at least 2 distinct values"):
        rotary.diagnose(x, y, np.full(8, 7, dtype=np.int64))
    with pytest.raises(rotary.RotaryError, match="positions must hold integers"):
        rotary.diagnose(x, y, POSITIONS.astype(np.float64))
    with pytest.raises(rotary.RotaryError, match="llama-3.1-7b"):
        rotary.diagnose(x, y, POSITIONS, target="llama-3.1-7b")


def test_notes_say_what_the_samples_leave_uncertain():
    spec = rotary.Spec.preset("llama-3.1-8b")
    x, y = synthesize(spec)
    assert rotary.diagnose(x, y, POSITIONS)["notes"] == []
    few = np.array([0, 4, 9, 30])
    result = rotary.diagnose(x[:4], _rotate_at(spec, x[:4], few), few)
    assert any("turns by only" in note for note in result["notes"])
    # Steps 4 and 5 tell every pair's aliases apart: no note about the first step's size.
    assert not any("the first position step" in note for note in result["notes"])
    aliased = np.array([0, 4, 8, 32])  # every step a multiple of 4: the fastest pair aliases
    result = rotary.diagnose(x[:4], _rotate_at(spec, x[:4], aliased), aliased)
    assert any("the first position step, 4" in note for note in result["notes"])


def _rotate_at(spec, x, positions):
    f = spec.frequencies()
    half = spec.rotary_dim // 2
    angle = positions[:, None] * f.inv_freq[None, :]
    a, b = np.arange(half), np.arange(half) + half
    y = x.copy()
    y[:, a] = x[:, a] * np.cos(angle) - x[:, b] * np.sin(angle)
    y[:, b] = x[:, b] * np.cos(angle) + x[:, a] * np.sin(angle)
    return y


# ---- y that is not a rotation, and what the samples cannot tell -----------------------------------

def test_refuses_y_that_is_not_a_rotation():
    x, _ = synthesize(rotary.Spec.preset("llama-3.1-8b"))
    with pytest.raises(rotary.RotaryError, match=r"every pair has the same angle at all 8 distinct positions "
                                                 r"\(y = 2 \* x: nothing rotates\)"):
        rotary.diagnose(x, 2 * x, POSITIONS, target="llama-3.1-8b")
    with pytest.raises(rotary.RotaryError, match=r"\(y = -1 \* x: every pair turned by pi\)"):
        rotary.diagnose(x, -x, POSITIONS)
    with pytest.raises(rotary.RotaryError, match="y is 0 at all 128 changed elements in all 8 rows"):
        rotary.diagnose(x, np.zeros_like(x), POSITIONS)
    noise = np.random.default_rng(4).standard_normal(x.shape)
    with pytest.raises(rotary.RotaryError, match="y is not a rotation of x pair by pair: no pairing keeps"):
        rotary.diagnose(x, noise, POSITIONS)


def _rotate(x, positions, inv_freq, *, interleaved=False, swap=False):
    half = len(inv_freq)
    angle = positions[:, None] * inv_freq[None, :]
    c, s = np.cos(angle), np.sin(angle)
    if swap:
        c, s = s, c
    a = np.arange(half) * 2 if interleaved else np.arange(half)
    b = a + 1 if interleaved else a + half
    y = x.copy()
    y[:, a] = x[:, a] * c - x[:, b] * s
    y[:, b] = x[:, b] * c + x[:, a] * s
    return y


RANDOM_POSITIONS = np.sort(np.random.default_rng(11).choice(8192, 8, replace=False)).astype(np.int64)


def test_random_positions_name_no_false_mismatch():
    spec = rotary.Spec.preset("llama-3.1-8b")
    x = np.random.default_rng(1).standard_normal((8, 128))
    f = spec.frequencies(int(RANDOM_POSITIONS[-1]) + 1).inv_freq
    result = rotary.diagnose(x, _rotate(x, RANDOM_POSITIONS, f, interleaved=True), RANDOM_POSITIONS, target=spec)
    assert [m["aspect"] for m in result["mismatches"]] == ["pairing"], result["mismatches"]
    assert result["position_offset"] in (0, None)
    assert result["precision"] in ("exact", None)
    # The theta-1e4 bug on a theta-1e6 model: named, either as theta or on the identified pairs.
    qwen = rotary.Spec.preset("qwen2.5-7b")
    wrong = 10000.0 ** (-np.arange(64) * 2 / 128)
    result = rotary.diagnose(x, _rotate(x, RANDOM_POSITIONS, wrong), RANDOM_POSITIONS, target=qwen)
    aspects = [m["aspect"] for m in result["mismatches"]]
    assert aspects in (["theta"], ["inv_freq"]), result["mismatches"]
    if aspects == ["theta"]:
        assert "your implementation uses rope_theta 10000" in result["mismatches"][0]["message"]


def test_aliased_positions_say_cannot_tell():
    spec = rotary.Spec.preset("llama-3.1-8b")
    positions = np.arange(0, 32, 4)
    x = np.random.default_rng(2).standard_normal((8, 128))
    result = rotary.diagnose(x, _rotate(x, positions, spec.frequencies(29).inv_freq), positions, target=spec)
    assert "theta" in result["cannot_tell"]
    assert result["fitted_theta_base"] is None and result["nearest_preset"] == "" and result["candidates"] == []
    assert result["inv_freq"][0] is None
    assert not any(m["aspect"] in ("theta", "inv_freq", "factor") for m in result["mismatches"])


def test_names_swapped_cos_and_sin():
    spec = rotary.Spec.preset("llama-3.1-8b")
    x = np.random.default_rng(3).standard_normal((8, 128))
    y = _rotate(x, POSITIONS, spec.frequencies(300001).inv_freq, swap=True)
    result = rotary.diagnose(x, y, POSITIONS, target=spec)
    assert result["cos_sin_swapped"]
    assert [m["aspect"] for m in result["mismatches"]] == ["cos_sin"]
    assert "your implementation swaps cos and sin" in result["mismatches"][0]["message"]
