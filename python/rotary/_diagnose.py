"""rotary.diagnose: what an unknown RoPE implementation does, from samples of it (C++:
rotary::analysis::diagnose and compare_to_spec, include/rotary/diagnose.hpp; the math in
docs/analysis.md, "Diagnose")."""
from __future__ import annotations

import os

import numpy as np

from . import _rotary
from ._spec import Spec

# Unit roundoff of the samples' storage: residuals at this level count as exact.
_EPSILON = {"float64": 2.0**-53, "float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}


def _as_float64(name, array):
    """(float64 ndarray, storage dtype name) from a NumPy array, a torch tensor or a sequence."""
    dtype = None
    if hasattr(array, "detach") and hasattr(array, "dtype"):  # torch, without importing it
        dtype = str(array.dtype).replace("torch.", "")
        array = array.detach().cpu().to(dtype=__import__("torch").float64).numpy()
    out = np.asarray(array)
    if dtype is None:
        dtype = str(out.dtype)
    if out.dtype.kind not in "fiu":
        raise _rotary.RotaryError(f"diagnose: {name} must hold floating-point values (got dtype {out.dtype})")
    return np.ascontiguousarray(out, dtype=np.float64), dtype


def _target_spec(target):
    if target is None or isinstance(target, Spec):
        return target
    if isinstance(target, str) and not os.path.exists(target):
        return Spec.preset(target)  # an unknown name is an error listing the presets
    return Spec.from_hf_config(target)  # a dict, a config.json path or a model folder


def diagnose(x, y, positions, target=None) -> dict:
    """Infers what a RoPE implementation does from samples of it, and how it differs from a model.

    x: (rows, head_dim) or (rows, heads, head_dim), the inputs; y: the implementation's outputs, the
    same shape; positions: (rows,) integers (each head of a row shares its position). NumPy arrays,
    torch tensors or sequences; float16 / bfloat16 / float32 / float64.
    target: None, a rotary.Spec, a preset name, or a Hugging Face config (dict or path).

    Returns a dict of findings: rotated_offset, rotary_dim, pass_through_dims, pairing
    ("half-split", "interleaved", "other", "ambiguous"), pairs, inv_freq, direction
    ("forward" | "backward"), position_offset, attention_scaling, precision ("exact",
    "float32-table", "float32-angle-drift", "float16"), scheme, fitted_theta_base,
    fitted_linear_factor, nearest_preset, candidates; with a target also matches (bool) and
    mismatches [{aspect, implementation, model, message}]. Nothing is modified.
    A property the samples cannot pin down (aliased positions, a fit with large residuals) is
    None (inv_freq entries too, scheme and nearest_preset ""), and named in cannot_tell
    ("pairing", "theta", "position_offset", "direction", "precision"); it is never a mismatch, so
    matches=True then means "no mismatch in what the samples show". cos_sin_swapped and
    constant_phase_rad name a constant phase on every pair (cos and sin swapped: pi/2).
    Raises rotary.RotaryError naming the argument for bad shapes, NaN, too few rows or positions,
    and "y is not a rotation of x ..." with the reason when y is 0, noise, 2x or -x (no pair's
    angle depends on the position).
    Positions must be diverse: a difference of 1 to 3, then steps growing by at most ~8x, up to
    where the slowest pair turns by 0.1 rad (docs/analysis.md, "Diagnose").

    >>> spec = rotary.Spec.preset("gpt-neox-20b")
    >>> pos = np.array([0, 1, 9, 70, 600, 5000, 40000, 300000])
    >>> x = np.random.default_rng(0).standard_normal((1, 1, 8, 96)).astype(np.float32)
    >>> y, _ = rotary.apply(x, None, pos[None], spec)   # the implementation under test
    >>> r = rotary.diagnose(x[0, 0], y[0, 0], pos, target=spec)
    >>> r["pairing"], r["rotary_dim"], r["precision"], r["matches"]
    ('half-split', 24, 'exact', True)
    >>> r = rotary.diagnose(x[0, 0], y[0, 0], pos, target="phi-2")
    >>> [m["aspect"] for m in r["mismatches"]]
    ['head_dim']
    """
    x64, x_dtype = _as_float64("x", x)
    y64, y_dtype = _as_float64("y", y)
    if x64.ndim not in (2, 3):
        raise _rotary.RotaryError(
            f"diagnose: x must be (rows, head_dim) or (rows, heads, head_dim) (got shape {tuple(x64.shape)})")
    if y64.shape != x64.shape:
        raise _rotary.RotaryError(
            f"diagnose: y must have the shape of x, {tuple(x64.shape)} (got {tuple(y64.shape)})")
    pos = positions
    if hasattr(pos, "detach"):
        pos = pos.detach().cpu().numpy()
    pos = np.asarray(pos)
    if pos.dtype.kind not in "iu":
        raise _rotary.RotaryError(f"diagnose: positions must hold integers (got dtype {pos.dtype})")
    if pos.shape != (x64.shape[0],):
        raise _rotary.RotaryError(
            f"diagnose: positions must be (rows,) = ({x64.shape[0]},) to match x {tuple(x64.shape)} "
            f"(got {tuple(pos.shape)})")
    heads = x64.shape[1] if x64.ndim == 3 else 1
    pos64 = np.ascontiguousarray(np.repeat(pos.astype(np.int64), heads))
    head_dim = x64.shape[-1]
    epsilon = max(_EPSILON.get(x_dtype, 2.0**-53), _EPSILON.get(y_dtype, 2.0**-53))
    spec = _target_spec(target)
    return _rotary.diagnose(x64.ctypes.data, y64.ctypes.data, x64.size, pos64.ctypes.data, pos64.size, head_dim,
                            epsilon, spec._native if spec is not None else None)
