"""rotary.export_table: a model's exact table in the layout and dtype an inference engine reads.

The layouts, their sources and a worked example of each are in docs/interop.md; the values are
rotary's exact table (every entry the correctly rounded formula) rounded once to the dtype.
"""
from __future__ import annotations

import numpy as np

from . import _rotary
from ._spec import Spec

_NUMPY_DTYPES = {"float32": np.float32, "float16": np.float16}


def _as_spec(spec) -> Spec:
    if isinstance(spec, Spec):
        return spec
    if isinstance(spec, str):
        return Spec.preset(spec)
    raise _rotary.RotaryError(f"export_table: spec must be a rotary.Spec or a preset name (got {type(spec).__name__})")


def export_table(spec, format: str, *, max_position: int | None = None, dtype: str | None = None,
                 factor_set: str | None = None):
    """The table for `format`: "vllm", "flashinfer", "flash-attn", "transformer-engine" or
    "llama-cpp-freq-factors".

    max_position: rows of a cache (default: for vllm the rows vLLM builds, e.g. YaRN's original
        context x factor, LongRoPE's long_short cache; for the others max_position_embeddings).
    dtype: "float32", "bfloat16" or "float16"; required for vllm and flash-attn (the model's dtype),
        float32 only for the others. bfloat16 comes back as a torch.bfloat16 tensor when torch is
        installed, else as uint16 bit patterns.
    factor_set: "short" or "long", for LongRoPE's llama.cpp factors.

    Returns a NumPy array (flash-attn: a tuple (cos, sin), each [seqlen, rotary_dim / 2]). Raises
    rotary.RotaryError naming the argument when the format cannot express the spec.

    >>> cache = rotary.export_table("llama-3.1-8b", "flashinfer", max_position=4)
    >>> cache.shape, cache.dtype
    ((4, 128), dtype('float32'))
    >>> float(cache[1, 0]), float(cache[1, 64])  # cos and sin of pair 0 at position 1
    (0.5403022766113281, 0.8414709568023682)
    """
    native = _as_spec(spec)._native
    if max_position is not None and (isinstance(max_position, bool) or not isinstance(max_position, int)
                                     or max_position < 1):
        raise _rotary.RotaryError(f"export_table: max_position must be an integer >= 1 (got {max_position!r})")
    name, dtype_name, shape, data = _rotary.export_table(native, str(format), max_position or 0, dtype or "",
                                                         factor_set or "")
    if dtype_name == "bfloat16":
        bits = np.frombuffer(data, dtype=np.uint16).reshape(shape).copy()
        try:
            import torch
        except ImportError:
            array = bits
        else:
            array = torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16)
    else:
        array = np.frombuffer(data, dtype=_NUMPY_DTYPES[dtype_name]).reshape(shape).copy()
    if str(format) in ("flash-attn", "flash-attention", "flash_attn"):
        return array[0], array[1]
    return array
