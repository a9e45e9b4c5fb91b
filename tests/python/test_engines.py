"""Engines: rotary.export_table's layouts and rotary's vLLM numerics (Precision::Vllm) against vLLM's
published formulas, reproduced in torch here (vLLM needs CUDA and cannot be installed on this
machine). Sources, read through the repository at the commits named:

  vllm/model_executor/layers/rotary_embedding/base.py (04458da): RotaryEmbedding._compute_inv_freq,
      _compute_cos_sin_cache (t float32, einsum, cat(cos, sin)), __init__'s cache.to(dtype)
  .../llama3_rope.py (045d757): Llama3RotaryEmbedding._compute_inv_freq
  .../yarn_scaling_rope.py (0cd5784), .../common.py (002d181): YaRN's inv_freq, mscale, cache length
  llama.cpp conversion/llama.py (llama-cpp-python 0.3.36 sdist): rope_freqs for rope_type llama3
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import rotary
from rotary import _rotary

# ---- vLLM's formulas, as written in its sources -----------------------------------------------------


def vllm_inv_freq_default(base: float, rotary_dim: int) -> torch.Tensor:
    return 1.0 / (base ** (torch.arange(0, rotary_dim, 2, dtype=torch.float) / rotary_dim))


def vllm_inv_freq_llama3(base, rotary_dim, scaling_factor, low_freq_factor, high_freq_factor, orig_max_position):
    inv_freqs = vllm_inv_freq_default(base, rotary_dim)
    low_freq_wavelen = orig_max_position / low_freq_factor
    high_freq_wavelen = orig_max_position / high_freq_factor
    wave_len = 2 * math.pi / inv_freqs
    smooth = (orig_max_position / wave_len - low_freq_factor) / (high_freq_factor - low_freq_factor)
    return torch.where(wave_len < high_freq_wavelen, inv_freqs,
                       torch.where(wave_len > low_freq_wavelen, inv_freqs / scaling_factor,
                                   (1 - smooth) * inv_freqs / scaling_factor + smooth * inv_freqs))


def vllm_inv_freq_yarn(base, rotary_dim, scaling_factor, original, beta_fast=32, beta_slow=1):
    pos_freqs = base ** (torch.arange(0, rotary_dim, 2, dtype=torch.float) / rotary_dim)
    extrapolation = 1.0 / pos_freqs
    interpolation = 1.0 / (scaling_factor * pos_freqs)

    def correction_dim(rotations):
        return (rotary_dim * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low = max(math.floor(correction_dim(beta_fast)), 0)
    high = min(math.ceil(correction_dim(beta_slow)), rotary_dim - 1)
    if low == high:
        high += 0.001
    ramp = torch.clamp((torch.arange(rotary_dim // 2, dtype=torch.float) - low) / (high - low), 0, 1)
    mask = 1 - ramp
    return interpolation * (1 - mask) + extrapolation * mask


def vllm_cache(inv_freq: torch.Tensor, rows: int, mscale: float = 1.0, position_divisor: float = 1.0):
    t = torch.arange(rows, dtype=torch.float32)
    if position_divisor != 1.0:
        t = t / position_divisor  # LinearScalingRotaryEmbedding
    freqs = torch.einsum("i,j -> ij", t, inv_freq)
    return torch.cat((freqs.cos() * mscale, freqs.sin() * mscale), dim=-1)


def rotary_rows(spec: rotary.Spec, precision: str, positions, cache_dtype="float32", inv_freq=None, rows=0):
    table = _rotary.CosSinTable(spec._native, precision, "on_the_fly", 0, rows,
                                [] if inv_freq is None else [float(v) for v in inv_freq], 1 << 33, cache_dtype)
    pairs = table.num_pairs
    cos = np.empty((len(positions), pairs), np.float32)
    sin = np.empty((len(positions), pairs), np.float32)
    pos = np.ascontiguousarray(positions, dtype=np.int64)
    table.rows((pos.ctypes.data, pos.size), cos.ctypes.data, sin.ctypes.data, False, int(pos.max()) + 1)
    return table, np.concatenate([cos, sin], axis=1)


CASES = {
    "llama-2-7b": lambda s: (vllm_inv_freq_default(10000.0, 128), 1.0, 1.0),
    "llama-3.1-8b": lambda s: (vllm_inv_freq_llama3(500000.0, 128, 8.0, 1.0, 4.0, 8192), 1.0, 1.0),
    "qwen2.5-7b-yarn": lambda s: (vllm_inv_freq_yarn(1000000.0, 128, 4.0, 32768), 0.1 * math.log(4.0) + 1.0, 1.0),
    "gemma-3-27b": lambda s: (vllm_inv_freq_default(1000000.0, 128), 1.0, 8.0),
}


@pytest.mark.parametrize("preset", sorted(CASES))
def test_vllm_mode_reproduces_vllms_cache(preset):
    spec = rotary.Spec.preset(preset)
    inv_freq, mscale, divisor = CASES[preset](spec)
    positions = list(range(0, 2048)) + list(range(2048, 131072, 997)) + [131071]
    reference = vllm_cache(inv_freq, 131072, mscale, divisor)[positions]
    # inv_freq: rotary's float32 chain against vLLM's, within torch's pow (1 ulp).
    table, _ = rotary_rows(spec, "vllm", [0], rows=131072)
    ours = np.array(table.inv_freq_f32, dtype=np.float32)
    ulps = np.abs(ours.view(np.int32).astype(np.int64) - inv_freq.numpy().view(np.int32).astype(np.int64))
    assert ulps.max() <= 1, (preset, ulps.max())
    # The cache: with vLLM's own inv_freq, values within torch's float32 cos/sin (1 ulp) for float32,
    # and the same bf16 / f16 values but where that ulp crosses a rounding boundary.
    for dtype, torch_dtype, ulp in (("float32", torch.float32, 2.0**-23), ("bfloat16", torch.bfloat16, 2.0**-7),
                                    ("float16", torch.float16, 2.0**-10)):
        _, rows = rotary_rows(spec, "vllm", positions, dtype, inv_freq.numpy(), rows=131072)
        expected = reference.to(torch_dtype).float().numpy()
        diff = np.abs(rows - expected)
        if dtype == "float32":  # within 1 ulp of torch's value, counted in float32 steps (across zero too)
            def ordered(a):
                bits = a.view(np.int32).astype(np.int64)
                return np.where(bits < 0, -(bits & 0x7FFFFFFF), bits)
            steps = np.abs(ordered(rows) - ordered(expected))
            # 1 ulp of torch's cos/sin; times an mscale (1.14 here) the product's own rounding can add one.
            assert steps.max() <= (1 if mscale == 1.0 else 2), (preset, steps.max())
            assert (steps == 0).mean() > 0.9, (preset, (steps == 0).mean())  # torch's SLEEF cos/sin: ~4% differ
        else:  # the same rounding of (nearly) the same float32 value
            assert diff.max() <= ulp * max(1.0, mscale) + 1e-12, (preset, dtype, diff.max())
            assert (diff == 0).mean() > 0.99, (preset, dtype, (diff == 0).mean())


def test_vllm_mode_cache_length_and_refusals():
    spec = rotary.Spec.preset("qwen2.5-7b-yarn")
    table, _ = rotary_rows(spec, "vllm", [0])
    assert table.max_position == math.ceil(32768 * 4.0) - 1  # YaRN: ceil(original * factor) rows
    with pytest.raises(rotary.RotaryError, match="positions\\[0\\] must be in \\[0, 131071\\] \\(got 131072\\)"):
        rotary_rows(spec, "vllm", [131072])
    # LongRoPE: seq_len 0 plays a max_model_len within the original context: the short cache's 4096 rows.
    phi, _ = rotary_rows(rotary.Spec.preset("phi-3-mini-128k"), "vllm", [0])
    assert phi.max_position == 4096 - 1
    with pytest.raises(rotary.RotaryError, match="cache_dtype must be float32, bfloat16 or float16"):
        rotary_rows(spec, "vllm", [0], cache_dtype="int8")


# ---- export_table -------------------------------------------------------------------------------------


def exact_cos_sin(spec: rotary.Spec, positions):
    f = spec.frequencies()
    angles = np.asarray(positions, dtype=np.float64)[:, None] * np.asarray(f.inv_freq)[None, :]
    return np.cos(angles) * f.attention_scaling, np.sin(angles) * f.attention_scaling


def test_export_vllm_and_flashinfer_layouts():
    spec = rotary.Spec.preset("qwen2.5-7b-yarn")
    cache = rotary.export_table(spec, "vllm", max_position=3000, dtype="float16")
    assert cache.shape == (3000, 128) and cache.dtype == np.float16
    cos, sin = exact_cos_sin(spec, range(3000))
    assert np.abs(cache[:, :64].astype(np.float64) - cos).max() <= 2.0**-11 * 1.2
    assert np.abs(cache[:, 64:].astype(np.float64) - sin).max() <= 2.0**-11 * 1.2
    fi = rotary.export_table(spec, "flashinfer", max_position=3000)
    assert fi.dtype == np.float32 and fi.shape == (3000, 128)
    assert np.abs(fi[:, :64] - cos).max() <= 2.0**-24 * 1.2
    bf = rotary.export_table("llama-3.1-8b", "vllm", max_position=10, dtype="bfloat16")
    assert bf.dtype == torch.bfloat16 and tuple(bf.shape) == (10, 128)


def test_export_flash_attn_and_transformer_engine():
    spec = rotary.Spec.preset("llama-3.1-8b")
    cos, sin = rotary.export_table(spec, "flash-attn", max_position=500, dtype="float32")
    assert cos.shape == (500, 64) and sin.shape == (500, 64)
    ref_cos, ref_sin = exact_cos_sin(spec, range(500))
    assert np.abs(cos - ref_cos).max() <= 2.0**-24 and np.abs(sin - ref_sin).max() <= 2.0**-24
    freqs = rotary.export_table(spec, "transformer-engine", max_position=500)
    assert freqs.shape == (500, 1, 1, 128) and freqs.dtype == np.float32
    angles = freqs[:, 0, 0, :].astype(np.float64)
    assert np.array_equal(angles[:, :64], angles[:, 64:])  # duplicated halves, NeoX pairing
    assert np.abs(angles).max() <= math.pi
    assert np.abs(np.cos(angles[:, :64]) - ref_cos).max() <= 1.3e-7


def test_export_llama_cpp_factors_match_the_converter():
    """conversion/llama.py generate_extra_tensors computes the factors from float32 frequencies; rotary's
    are the exact ratios. They agree to a few float32 ulps."""
    spec = rotary.Spec.preset("llama-3.1-8b")
    ours = rotary.export_table(spec, "llama-cpp-freq-factors")
    freqs = vllm_inv_freq_default(500000.0, 128)
    factors = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < 8192 / 4.0:
            factors.append(1)
        elif wavelen > 8192 / 1.0:
            factors.append(8.0)
        else:
            smooth = (8192 / wavelen - 1.0) / (4.0 - 1.0)
            factors.append(1 / ((1 - smooth) / 8.0 + smooth))
    converter = torch.tensor(factors, dtype=torch.float32).numpy()
    ulps = np.abs(ours.view(np.int32).astype(np.int64) - converter.view(np.int32).astype(np.int64))
    assert ours.shape == (64,) and ulps.max() <= 4, ulps.max()


def test_export_errors_name_the_argument():
    with pytest.raises(rotary.RotaryError, match="dtype is required for format vllm"):
        rotary.export_table("llama-3.1-8b", "vllm")
    with pytest.raises(rotary.RotaryError, match="format must be one of vllm"):
        rotary.export_table("llama-3.1-8b", "tensorrt")
    with pytest.raises(rotary.RotaryError, match="max_position must be an integer >= 1"):
        rotary.export_table("llama-3.1-8b", "flashinfer", max_position=0)
    with pytest.raises(rotary.RotaryError, match="factor_set must be 'short' or 'long'"):
        rotary.export_table("phi-3-mini-128k", "llama-cpp-freq-factors", factor_set="medium")
    with pytest.raises(rotary.RotaryError, match="cannot carry attention_scaling"):
        rotary.export_table("qwen2.5-7b-yarn", "transformer-engine", max_position=4)
