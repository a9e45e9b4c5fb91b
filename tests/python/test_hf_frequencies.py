"""rotary's frequencies against transformers' own rope functions.

For every rope_type transformers has (ROPE_INIT_FUNCTIONS, plus the models' "default"), configs
are built as transformers config objects and read with rotary.Spec.from_hf_config:
  1. rotary.torch.hf_inv_freq(spec, seq_len) equals transformers' float32 inv_freq bit for bit,
     and the attention scaling equals transformers' second return value;
  2. rotary's exact float64 inv_freq (spec.frequencies(seq_len).inv_freq) is within the error
     bound of transformers' float32 chain, derived per rope type and per pair (hf_chain_bound).
"""
import math
from fractions import Fraction

import numpy as np
import pytest

import torch  # required: a missing dependency fails, never skips
import transformers  # required: a missing dependency fails, never skips
import rotary  # noqa: E402
import rotary.torch as rt  # noqa: E402
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402

U = 2.0**-24  # float32 unit roundoff: one correctly rounded float32 operation is off by <= U relative
D = 2.0**-53  # float64 unit roundoff


def llama(head_dim=128, heads=32, max_pos=131072, **rope):
    return transformers.LlamaConfig(hidden_size=head_dim * heads, num_attention_heads=heads, head_dim=head_dim,
                                    max_position_embeddings=max_pos, rope_parameters=rope)


def phi3(heads, partial, short_factor, long_factor, **extra):
    return transformers.Phi3Config(hidden_size=3072, num_attention_heads=heads, max_position_embeddings=131072,
                                   original_max_position_embeddings=4096,
                                   rope_parameters=dict(rope_type="longrope", rope_theta=10000.0,
                                                        partial_rotary_factor=partial, short_factor=short_factor,
                                                        long_factor=long_factor, **extra))


def ramp(n, lo, hi):
    return [lo + (hi - lo) * (i / (n - 1)) ** 2 for i in range(n)]


DYNAMIC = dict(head_dim=128, max_pos=4096, rope_type="dynamic", factor=2.0, rope_theta=10000.0)
PHI3_MINI = dict(heads=32, partial=1.0, short_factor=ramp(48, 1.0, 1.3), long_factor=ramp(48, 1.0, 40.0))
PHI4_MINI = dict(heads=24, partial=0.75, short_factor=ramp(48, 1.0, 1.2), long_factor=ramp(48, 1.0, 30.0),
                 factor=32.0)

# (id, config factory, rotary seq_len, the seq_len transformers' dynamic_rope_update passes)
CASES = [
    ("default-llama2", lambda: llama(rope_type="default", rope_theta=10000.0), None, None),
    ("default-theta1e6-hd80", lambda: llama(head_dim=80, rope_type="default", rope_theta=1000000.0), None, None),
    ("linear", lambda: llama(rope_type="linear", factor=4.0, rope_theta=10000.0), None, None),
    ("dynamic-init", lambda: llama(**DYNAMIC), None, None),
    # dynamic_rope_update passes seq_len = torch.max(position_ids) + 1, a tensor: the new base is
    # then computed in float32 tensor arithmetic (hf_inv_freq follows that path).
    ("dynamic-grown-10000", lambda: llama(**DYNAMIC), 10000, torch.tensor(10000)),
    ("dynamic-grown-4097", lambda: llama(**DYNAMIC), 4097, torch.tensor(4097)),
    ("dynamic-hd96-grown", lambda: llama(**dict(DYNAMIC, head_dim=96)), 50000, torch.tensor(50000)),
    ("yarn-qwen2.5", lambda: llama(rope_type="yarn", factor=4.0, original_max_position_embeddings=32768,
                                   rope_theta=1000000.0), None, None),
    ("yarn-deepseek-v3-mscale", lambda: llama(head_dim=64, rope_type="yarn", factor=40.0,
                                              original_max_position_embeddings=4096, mscale=1.0, mscale_all_dim=1.0,
                                              beta_fast=32, beta_slow=1, rope_theta=10000.0), None, None),
    ("yarn-mscale-ne-mscale_all_dim", lambda: llama(head_dim=64, rope_type="yarn", factor=40.0,
                                                    original_max_position_embeddings=4096, mscale=1.0,
                                                    mscale_all_dim=0.707, rope_theta=10000.0), None, None),
    ("yarn-attention_factor", lambda: llama(head_dim=64, rope_type="yarn", factor=8.0,
                                            original_max_position_embeddings=8192, attention_factor=1.25,
                                            beta_fast=16, beta_slow=2, rope_theta=500000.0), None, None),
    ("yarn-gpt-oss-truncate-false", lambda: llama(head_dim=64, rope_type="yarn", factor=32.0,
                                                  original_max_position_embeddings=4096, beta_fast=32.0,
                                                  beta_slow=1.0, truncate=False, rope_theta=150000.0), None, None),
    ("longrope-phi3-short", lambda: phi3(**PHI3_MINI), None, None),
    ("longrope-phi3-short-at-original", lambda: phi3(**PHI3_MINI), 4096, 4096),
    # longrope_frequency_update asks for the long factors with seq_len = original + 1.
    ("longrope-phi3-long", lambda: phi3(**PHI3_MINI), 4097, 4097),
    ("longrope-phi4-partial-short", lambda: phi3(**PHI4_MINI), None, None),
    ("longrope-phi4-partial-long", lambda: phi3(**PHI4_MINI), 4097, 4097),
    ("llama3", lambda: llama(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                             original_max_position_embeddings=8192, rope_theta=500000.0), None, None),
    ("llama3.2-factor32", lambda: llama(head_dim=64, rope_type="llama3", factor=32.0, low_freq_factor=1.0,
                                        high_freq_factor=4.0, original_max_position_embeddings=8192,
                                        rope_theta=500000.0), None, None),
    ("proportional", lambda: llama(head_dim=256, heads=8, rope_type="proportional", partial_rotary_factor=0.25,
                                   factor=2.0, rope_theta=1000000.0), None, None),
]


def test_every_transformers_rope_type_is_covered():
    covered = {case[0].split("-")[0] for case in CASES}
    assert set(ROPE_INIT_FUNCTIONS) | {"default"} <= covered, set(ROPE_INIT_FUNCTIONS) - covered


def hf_frequencies(config, seq_len):
    """transformers' (inv_freq, attention_scaling), as its rotary-embedding module computes them."""
    rope_type = config.rope_parameters["rope_type"]
    if rope_type == "default":
        return transformers.models.llama.modeling_llama.LlamaRotaryEmbedding.compute_default_rope_parameters(config)
    return ROPE_INIT_FUNCTIONS[rope_type](config, None, seq_len=seq_len)


@pytest.mark.parametrize("name, make, seq_len, hf_seq_len", CASES, ids=[c[0] for c in CASES])
def test_hf_inv_freq_and_attention_scaling_are_transformers(name, make, seq_len, hf_seq_len):
    config = make()
    spec = rotary.Spec.from_hf_config(config)
    assert spec.rope_type == config.rope_parameters["rope_type"]
    hf_inv, hf_scaling = hf_frequencies(config, hf_seq_len)
    ours = rt.hf_inv_freq(spec, seq_len)
    # bit for bit: the same float32 torch operations in the same order.
    assert ours.dtype == hf_inv.dtype == torch.float32 and ours.shape == hf_inv.shape
    assert torch.equal(ours, hf_inv), f"{(ours != hf_inv).sum().item()} of {ours.numel()} entries differ"
    # transformers computes the scaling in Python float64 (log, multiplies, a divide: <= 4 roundings);
    # rotary rounds its value once: they may differ by 4 float64 roundings at most.
    scaling = spec.frequencies(seq_len).attention_scaling
    assert math.isclose(scaling, hf_scaling, rel_tol=4 * D, abs_tol=0.0), (scaling, hf_scaling)
    if seq_len is None:  # the table (and so RotaryEmbedding) carries the same scaling
        assert math.isclose(rotary.Table(spec, "hf").attention_scaling, hf_scaling, rel_tol=4 * D, abs_tol=0.0)


# ---- the float32 chain's error bound ------------------------------------------------------------------
# Each correctly rounded float32 operation is off by <= U relative; torch's float32 pow by <= 2 U.
# Per pair k, with exponent e_k = 2k/d:
#   core: pow (2U) + the reciprocal (U), and, when e_k is not a float32 (d not a power of two), its
#         rounding (<= U e_k relative) amplified by ln(base) through base ** e_k:   (3 + ln(base) e_k [inexact]) U
#   extra roundings by rope type (each U): linear, proportional: / factor (1); dynamic at init: the
#         new base rounded to float32 (1); dynamic grown: the new base computed in float32 (see
#         dynamic_base_error); longrope: the factor rounded to float32, the product (2); yarn: factor *
#         pos_freqs, and the blend's two products and sum (4); llama3: / factor and the smoothing's
#         (1 - s), two products, / factor and sum (5).
#   blended pairs (YaRN ramp, Llama 3 smooth band), weight w: result = inv0 (1/f + w (1 - 1/f)), so an
#         absolute error dw in w moves it by dw (1 - 1/f) factor_applied relative (factor_applied =
#         inv0 / result, from rotary's Frequencies); dw is derived in blend_weight_error.
EXTRA = {"default": 0, "linear": 1, "proportional": 1, "longrope": 2, "yarn": 4, "llama3": 5}


def exponent_inexact(k2, d):
    q = Fraction(k2, d)
    return q.denominator & (q.denominator - 1) != 0 or q.numerator >= 2**24


def dynamic_base_error(spec, seq_len):
    """Relative error (in U) of the grown dynamic-NTK base, computed in float32 from seq_len:
    r = f * seq / limit - (f - 1) (two roundings, then a subtraction that amplifies them by
    f seq / limit / r, plus its own), r ** (d / (d - 2)) (pow 2, the rounded exponent ln(r)),
    times base (1); r's error passes on scaled by the exponent d / (d - 2)."""
    d, f, limit = spec.rotary_dim, spec.factor, spec.max_position_embeddings
    r = f * seq_len / limit - (f - 1)
    return (d / (d - 2)) * (2 * (f * seq_len / limit) / r + 1) + 2 + math.log(r) + 1


def blend_weight_error(spec, w, config, core):
    """Absolute error (in U) of the blend weight w of one pair (core: the pair's inv_freq error, in U)."""
    params = config.rope_parameters
    if spec.rope_type == "yarn":
        # ramp = (k - low) / (high - low): exact for truncated (integer) low, high, else low rounded
        # to float32 and the subtraction add (low + k) U / (high - low); the divide adds U; then
        # 1 - ramp and 1 - (1 - ramp) add U each.
        low, high = spec._native.yarn_correction_range()
        extra = 0.0 if params.get("truncate", True) else (low + spec.rotary_dim / 2) / (high - low)
        return 3 + extra
    # llama3: s = (orig / wavelen - lf) / (hf - lf), wavelen = 2 pi / inv: inv's core error + 2 pi
    # rounded + the divide + orig / wavelen = (core + 3) U relative on v = orig / wavelen, then the
    # subtraction (U (v - lf)) and the divide (U s).
    lf, hf = params["low_freq_factor"], params["high_freq_factor"]
    v = lf + w * (hf - lf)
    return ((core + 3) * v + (v - lf)) / (hf - lf) + w


def hf_chain_bound(spec, config, seq_len):
    """Per-pair relative error bound (float64 array) of transformers' float32 inv_freq."""
    freqs = spec.frequencies(seq_len)
    n = len(freqs.inv_freq)
    d = spec.head_dim if spec.rope_type == "proportional" else spec.rotary_dim
    base = freqs.effective_theta_base if spec.rope_type == "dynamic" else spec.theta_base
    bound = np.empty(n)
    for k in range(n):
        e = 2 * k / d
        core = 3 + (math.log(base) * e if exponent_inexact(2 * k, d) else 0.0)
        if spec.rope_type == "dynamic":
            grown = seq_len is not None and seq_len > spec.max_position_embeddings
            extra = e * dynamic_base_error(spec, seq_len) if grown else 1
        else:
            extra = EXTRA[spec.rope_type]
        blend = 0.0
        w = freqs.blend[k]
        if spec.rope_type in ("yarn", "llama3") and 0 < w < 1:
            f = freqs.effective_factor
            blend = blend_weight_error(spec, w, config, core) * (1 - 1 / f) * freqs.factor_applied[k]
        bound[k] = (core + extra + blend) * U
    return bound


@pytest.mark.parametrize("name, make, seq_len, hf_seq_len", CASES, ids=[c[0] for c in CASES])
def test_exact_inv_freq_is_within_the_float32_chain_bound(name, make, seq_len, hf_seq_len):
    config = make()
    spec = rotary.Spec.from_hf_config(config)
    hf_inv, _ = hf_frequencies(config, hf_seq_len)
    exact = spec.frequencies(seq_len).inv_freq
    hf64 = hf_inv.double().numpy()
    assert exact.shape == hf64.shape
    rotated = exact != 0  # proportional RoPE: the unrotated pairs are 0 in both
    assert np.array_equal(hf64[~rotated], exact[~rotated])  # zeros: exactly equal
    rel = np.abs(exact[rotated] - hf64[rotated]) / exact[rotated]
    bound = hf_chain_bound(spec, config, seq_len)[rotated]  # derived above, per pair
    worst = int(np.argmax(rel / bound))
    assert np.all(rel <= bound), (f"pair {worst}: {rel[worst] / U:.2f} U > bound {bound[worst] / U:.2f} U")
    # and the bound is float32-sized, not a catch-all: < 2^-14 relative (1024 U), where a wrong
    # formula (a factor or base misread) is off by percents.
    assert bound.max() < 2.0**-14
