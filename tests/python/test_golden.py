"""Golden parity through the Python API: every case of tests/golden (Hugging Face's own
outputs, and exact float64 values computed independently of rotary).

Tolerances (docs/numerics.md): u = 2^-24.
  inv_freq, attention_scaling vs exact_f64:       1 double ulp (computed in binary128, rounded once)
  exact table float64 rows vs exact_f64 cos/sin:  1e-15 (1 + p) x scale (the float64 angle's error)
  exact table float32 rows:                       1 float32 ulp of fl32(exact_f64) (correct rounding;
                                                  exact_f64 itself is rounded, hence 1 not 0.5)
  rotary.apply float32 vs exact q/k_embed:        4u*M + u*|ref|, M = |a C| + |c S| (table rounding of
                                                  C and S, two kernel roundings, the final rounding)
  apply_cos_sin like_torch with HF's cos/sin:     bit-identical to HF's q/k_embed (same IEEE ops)
"""
import numpy as np
import pytest

import rotary

from conftest import golden_cases, load_case, tensor

U = 2.0**-24
POSITIVE = golden_cases("positive")
NEGATIVE = golden_cases("negative")


def case_id(path):
    return path.stem


@pytest.fixture(params=POSITIVE, ids=case_id)
def case(request):
    return load_case(request.param)


def spec_and_seq_len(case):
    spec = rotary.Spec.from_hf_config(case["config"])
    return spec, case["seq_len"] or 0


def test_frequencies_match_exact_f64(case):
    spec, seq_len = spec_and_seq_len(case)
    freqs = spec.frequencies(seq_len)
    expected = tensor(case["exact_f64"]["inv_freq"])
    np.testing.assert_array_less(np.abs(freqs.inv_freq - expected), np.spacing(expected) * 1.0001)
    scaling = case["exact_f64"]["attention_scaling"]
    assert abs(freqs.attention_scaling - scaling) <= np.spacing(scaling)


def test_exact_table_matches_exact_f64(case):
    spec, seq_len = spec_and_seq_len(case)
    table = rotary.Table(spec, "exact", seq_len=seq_len, storage="on_the_fly")
    positions = np.asarray(case["positions"])
    scale = abs(case["exact_f64"]["attention_scaling"])
    exact_cos, exact_sin = tensor(case["exact_f64"]["cos"]), tensor(case["exact_f64"]["sin"])
    # Pair order (the first half of HF's cat(freqs, freqs)), whatever the model's style.
    pairs = table.num_pairs
    exact_cos, exact_sin = exact_cos[:, :pairs], exact_sin[:, :pairs]
    cos64, sin64 = table.rows(positions, float64=True)
    bound = 1e-15 * (1.0 + positions[:, None]) * scale
    assert np.all(np.abs(cos64 - exact_cos) <= bound)
    assert np.all(np.abs(sin64 - exact_sin) <= bound)
    cos32, sin32 = table.rows(positions)
    for got, exact in ((cos32, exact_cos), (sin32, exact_sin)):
        nearest = exact.astype(np.float32)
        assert np.all(np.abs(got.astype(np.float64) - nearest) <= np.spacing(np.abs(nearest)) * 1.0001)
    # A stored table gives the same values as the on-the-fly one (positions below 2^16 here, to
    # keep the stored rows small).
    if seq_len == 0:
        small = positions[positions < 65536]
        cos_shared, _ = rotary.table(spec, small)
        np.testing.assert_array_equal(cos_shared[:, :pairs] if spec.style == "neox" else cos_shared[:, ::2],
                                      cos32[positions < 65536])


@pytest.mark.parametrize("style", ["neox", "gptj"])
def test_apply_matches_exact_q_k_embed(case, style):
    spec, seq_len = spec_and_seq_len(case)
    spec = spec.replace(style=style)  # the golden file has both pairings of the same frequencies
    table = rotary.Table(spec, "exact", seq_len=seq_len, storage="on_the_fly")
    positions = np.asarray(case["positions"])
    q, k = tensor(case["inputs"]["q"]), tensor(case["inputs"]["k"])
    suffix = "half_split" if style == "neox" else "interleaved"
    expected_q = tensor(case["exact_f64"][f"q_embed_{suffix}"])
    expected_k = tensor(case["exact_f64"][f"k_embed_{suffix}"])
    # [tokens, heads, dim] as bshd with batch 1; positions [1, tokens].
    q_out, k_out = rotary.apply(q[None], k[None], positions[None], table, layout="bshd")
    cos, sin = table.cos_sin(positions, float64=True)
    for x, got, ref in ((q, q_out[0], expected_q), (k, k_out[0], expected_k)):
        d = cos.shape[-1]
        x64 = x.astype(np.float64)[..., :d]
        partner = np.concatenate([x64[..., d // 2:], x64[..., : d // 2]], -1) if style == "neox" else \
            x64.reshape(*x64.shape[:-1], d // 2, 2)[..., ::-1].reshape(x64.shape)
        m = np.abs(x64 * cos[:, None, :]) + np.abs(partner * sin[:, None, :])
        bound = 4 * U * m + U * np.abs(ref[..., :d]) + 1e-300
        err = np.abs(got[..., :d].astype(np.float64) - ref[..., :d])
        assert np.all(err <= bound), f"worst error/bound {np.max(err / bound):.3g}"
        np.testing.assert_array_equal(got[..., d:], x[..., d:])  # pass-through is copied


def test_like_torch_is_bit_identical_to_hf(case):
    """HF's own cos/sin through rotary.apply_cos_sin(rounding='like_torch') give HF's q/k_embed."""
    hf = case["hf_f32"]
    cos, sin = tensor(hf["cos"]), tensor(hf["sin"])
    for name in ("q", "k"):
        x = tensor(case["inputs"][name])  # [tokens, heads, head_dim]
        got = rotary.apply_cos_sin(x[None], cos[None], sin[None], layout="bshd", rounding="like_torch")
        np.testing.assert_array_equal(got[0], tensor(hf[f"{name}_embed"]))


NEGATIVE_EXPECTED = {
    "neg_yarn_missing_factor": ("factor", "missing"),
    "neg_llama3_missing_low_freq_factor": ("low_freq_factor", "missing"),
    "neg_longrope_wrong_length": ("short_factor", "got 47"),
    "neg_linear_factor_below_1": ("factor", "got 0.5"),
    "neg_llama3_low_ge_high": ("high_freq_factor", "got 1"),
    "neg_yarn_beta_fast_lt_beta_slow": ("beta_fast", "got 1"),
}


@pytest.mark.parametrize("path", NEGATIVE, ids=case_id)
def test_negative_cases_raise_naming_the_field(path):
    case = load_case(path)
    field, fragment = NEGATIVE_EXPECTED[path.stem]
    with pytest.raises(rotary.RotaryError) as error:
        rotary.Spec.from_hf_config(case["config"])
    assert field in str(error.value) and fragment in str(error.value), str(error.value)
