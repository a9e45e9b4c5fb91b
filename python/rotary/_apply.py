"""rotary.apply() and rotary.apply_cos_sin() on NumPy arrays (include/rotary/apply.hpp,
include/rotary/apply_cos_sin.hpp), and the call preparation rotary.torch shares with them."""
from __future__ import annotations

import warnings
from typing import Optional, Union

import numpy as np
from numpy.typing import ArrayLike

from . import _rotary
from ._rotary import RotaryError
from ._spec import Spec
from ._table import Table, check_source, resolve
from ._views import (
    call_seq_len,
    check_implementation,
    check_layout,
    int64_positions,
    int_arg,
    ints_descriptor,
    numpy_view,
    sequence_values,
    token_axes,
    token_positions,
)

DIRECTIONS = ("forward", "backward")

# Fresh outputs of at least this many bytes start on a cache line and have their pages faulted in
# before the kernel writes them (fresh_output); under it, np.empty's own block is cheaper than the
# ~2 us per array that placing one costs (docs/python-performance.md, "Fresh outputs").
PLACED_OUTPUT_BYTES = 1 << 20
CACHE_LINE_BYTES = 64  # also the widest vector the kernels store (AVX-512)


def fresh_output(like: np.ndarray) -> np.ndarray:
    """A new C-contiguous writable array of like's shape and dtype; one of PLACED_OUTPUT_BYTES or
    more starts on a 64-byte boundary. NumPy's large blocks come from glibc's mmap chunks, 16 bytes
    past a page, where every 64-byte vector store straddles two cache lines and the kernels cannot
    use non-temporal stores (src/cpu/rotate_kernels-inl.h streams aligned vectors only): at
    Llama-3-8B prefill size a float32 call took 2.2-2.9 times as long as into an aligned output. The
    array is a view of a uint8 block (its .base); NumPy advises that block onto huge pages as it
    does any large allocation."""
    nbytes = like.size * like.itemsize
    if nbytes < PLACED_OUTPUT_BYTES:
        return np.empty(like.shape, dtype=like.dtype)
    block = np.empty(nbytes + CACHE_LINE_BYTES, dtype=np.uint8)
    start = -block.__array_interface__["data"][0] % CACHE_LINE_BYTES
    return np.ndarray(like.shape, dtype=like.dtype, buffer=block, offset=start)


class _DefaultImplementation(str):
    """apply's default implementation, "kernels": a distinct object, so that the deprecated
    reference= is refused only beside an implementation the caller named, not beside the default."""
    __slots__ = ()


DEFAULT_IMPLEMENTATION = _DefaultImplementation("kernels")


def apply_implementation(implementation, reference) -> str:
    """apply's implementation= with the deprecated reference= (a bool: True for "reference",
    False for "kernels") folded in; reference= warns, and refuses an implementation= that differs."""
    named = implementation is not DEFAULT_IMPLEMENTATION
    if named:
        implementation = check_implementation(implementation)
    if reference is None:
        return str(implementation)
    wanted = "reference" if reference else "kernels"
    if named and implementation != wanted:
        raise RotaryError(f"reference (deprecated) and implementation disagree; pass implementation only "
                          f"(got reference={reference!r}, implementation={implementation!r})")
    warnings.warn(f'rotary.apply: reference= is deprecated; use implementation="{wanted}"', DeprecationWarning,
                  stacklevel=3)
    return wanted


def check_direction(direction) -> str:
    if direction not in DIRECTIONS:
        raise RotaryError(f"direction must be 'forward' or 'backward' (got {direction!r})")
    return direction


def source_spec(source):
    """The Spec a Spec or Table source rotates by."""
    check_source(source)
    return source.spec if isinstance(source, Table) else source


def prepare_positions(positions, offsets, cu_seqlens, layout: str, q_shape, streams: int):
    """positions / offsets / cu_seqlens as the C++ side reads them (int64, C-contiguous), each
    checked by shape against q's tokens: (per_token, offsets, cu_seqlens, batch, seq)."""
    axes = token_axes(tuple(q_shape), layout)
    per_token = None if positions is None else int64_positions(positions, "positions")
    seq_offsets = None if offsets is None else int64_positions(offsets, "offsets")
    cu = None if cu_seqlens is None else int64_positions(cu_seqlens, "cu_seqlens")
    if cu is not None:
        if cu.ndim != 1 or cu.size == 0:
            raise RotaryError(f"cu_seqlens must be 1-D with num_sequences + 1 offsets (got shape {cu.shape})")
    if axes is None:  # q's rank is wrong: the C++ checks name it
        return per_token, seq_offsets, cu, 0, 0
    batch, seq = axes
    if per_token is not None:
        per_token = token_positions(per_token, "positions", layout, batch, seq, streams)
    if seq_offsets is not None:
        if layout == "thd":
            count = cu.size - 1 if cu is not None else seq_offsets.size
            seq_offsets = sequence_values(seq_offsets, "offsets", count, "one per cu_seqlens segment")
        else:
            seq_offsets = sequence_values(seq_offsets, "offsets", batch, "one per sequence of q's batch")
    return per_token, seq_offsets, cu, batch, seq


def check_out(out, q, k, inplace: bool):
    """apply's out=: a pair (q_out, k_out) of NumPy arrays of q's and k's shapes and dtypes
    ((q_out, None) when k is None). Writability and overlap with q and k are the C++ checks'."""
    if inplace:
        raise RotaryError("out= and inplace=True exclude each other (got both)")
    if not (isinstance(out, (tuple, list)) and len(out) == 2 and isinstance(out[0], np.ndarray)
            and (isinstance(out[1], np.ndarray) if k is not None else out[1] is None)):
        want = "(q_out, k_out)" if k is not None else "(q_out, None) when k is None"
        got = type(out).__name__ if not isinstance(out, (tuple, list)) else \
            "(" + ", ".join(type(x).__name__ for x in out) + ")"
        raise RotaryError(f"out must be a pair of numpy arrays {want} (got {got})")
    for name, given, like in (("q_out", out[0], q), ("k_out", out[1], k)):
        if like is not None and (given.dtype != like.dtype or given.shape != like.shape):
            raise RotaryError(f"{name} must have shape {like.shape} and dtype {like.dtype} "
                              f"(got shape {given.shape}, {given.dtype})")
    return out[0], out[1]


def apply(q: np.ndarray, k: Optional[np.ndarray], positions: Optional[ArrayLike], spec_or_table: Union[Spec, Table],
          *, offsets: Optional[ArrayLike] = None, cu_seqlens: Optional[ArrayLike] = None, layout: str = "bhsd",
          style: Optional[str] = None, inplace: bool = False, direction: str = "forward",
          precision: Optional[str] = None, rotary_offset: int = 0, xpos_length: int = 0,
          seq_len: Optional[int] = None, implementation: str = DEFAULT_IMPLEMENTATION,
          reference: Optional[bool] = None, out: Optional[tuple] = None) -> tuple[np.ndarray, Optional[np.ndarray]]:
    """Rotates q and k (head counts may differ) by RoPE at each token's position.

    Every positional argument is required (k and positions may be None).
    q, k:          NumPy arrays (float32, float16, bfloat16 from ml_dtypes, float64), any
                   non-negative strides, in `layout` ("bshd", "bhsd", "sbhd", or "thd" with
                   cu_seqlens). k may be None to rotate q only.
    positions:     integer positions [batch, seq] ([1, seq] and [seq] broadcast over the batch;
                   thd: [tokens]; M-RoPE / vision: [streams, batch, seq] or [streams, tokens]);
                   or None with `offsets` ([batch]: position = offset + index) or neither
                   (0, 1, 2, ... per sequence).
    spec_or_table: a rotary.Spec (its shared table of `precision`, default "exact") or a
                   rotary.Table.
    style:         'neox' / 'gptj' to override the spec's pairing.
    inplace:       write into q and k (returned); else new C-contiguous arrays are returned.
    out:           (q_out, k_out): writable arrays of q's and k's shapes and dtypes to write into
                   and return ((q_out, None) when k is None); excludes inplace. Reusing them
                   saves a fresh output's first-touch page faults (docs/performance.md).
    direction:     'forward', or 'backward' (the transpose: the gradient).
    seq_len:       the seq_len the frequencies are for (dynamic NTK, LongRoPE); None: the call's
                   largest position + 1, Hugging Face's rule.
    implementation: "kernels" (the SIMD fast path) or "reference" (the float64 definition);
                   float64 arrays always run the reference.
    reference:     deprecated alias: True for implementation="reference", False for "kernels"; it
                   warns (DeprecationWarning), and is refused beside an implementation that differs.
    Returns (q_out, k_out) (k_out None when k is None).

    >>> spec = rotary.Spec.preset("llama-3.1-8b")
    >>> q = np.ones((1, 32, 4, 128), np.float32)      # Hugging Face's [batch, heads, seq, head_dim]
    >>> k = np.ones((1, 8, 4, 128), np.float32)       # GQA: 8 key/value heads
    >>> q_out, k_out = rotary.apply(q, k, np.arange(4)[None], spec)
    >>> q_out.shape, k_out.shape, float(q_out[0, 0, 0, 0]), round(float(q_out[0, 0, 1, 0]), 6)
    ((1, 32, 4, 128), (1, 8, 4, 128), 1.0, -0.301169)
    """
    implementation = apply_implementation(implementation, reference)
    if spec_or_table is None:
        raise RotaryError("spec_or_table is required: a rotary.Spec or rotary.Table (got None)")
    spec = source_spec(spec_or_table)
    check_layout(layout)
    check_direction(direction)
    rotary_offset = int_arg("rotary_offset", rotary_offset, minimum=0)
    xpos_length = int_arg("xpos_length", xpos_length, minimum=0)
    named_seq_len = None if seq_len is None else int_arg("seq_len", seq_len, minimum=0)
    q_view = numpy_view(q, "q", layout, writable=inplace)
    k_view = None if k is None else numpy_view(k, "k", layout, writable=inplace)
    per_token, seq_offsets, cu, batch, seq = prepare_positions(positions, offsets, cu_seqlens, layout, q.shape,
                                                               spec.position_streams)
    _, native = resolve(spec_or_table, precision, style, lambda: named_seq_len if named_seq_len is not None else
                        call_seq_len(per_token, seq_offsets, cu, batch, seq, layout == "thd"))
    if out is not None:
        q_out, k_out = check_out(out, q, k, inplace)
    elif inplace:
        q_out, k_out = q, k
    else:
        q_out = fresh_output(q)
        k_out = None if k is None else fresh_output(k)
    prefault = out is None and not inplace and q_out.nbytes >= PLACED_OUTPUT_BYTES
    use_reference = implementation == "reference" or q.dtype == np.float64 or (k is not None and k.dtype == np.float64)
    _rotary.apply(
        q_view,
        k_view,
        numpy_view(q_out, "q_out", layout, writable=True),
        None if k_out is None else numpy_view(k_out, "k_out", layout, writable=True),
        ints_descriptor(per_token),
        ints_descriptor(seq_offsets),
        ints_descriptor(cu),
        native,
        direction,
        rotary_offset,
        xpos_length,
        -1 if named_seq_len is None else named_seq_len,
        "reference" if use_reference else "kernels",
        prefault,
    )
    return q_out, k_out


def cos_sin_descriptor(array, name: str):
    """cos / sin [batch, seq, rotary_dim] or [seq, rotary_dim] as the kernel's bshd (b, s, 1, r)."""
    if not isinstance(array, np.ndarray):
        raise RotaryError(f"{name} must be a numpy.ndarray (got {type(array).__name__})")
    if array.ndim == 2:
        array = array[None]
    if array.ndim != 3:
        raise RotaryError(f"{name} must have shape [batch, seq, rotary_dim] or [seq, rotary_dim] (got shape {array.shape})")
    address, dtype, _, shape, strides = numpy_view(array, name, "bshd")
    return (address, dtype, "bshd", (shape[0], shape[1], 1, shape[2]), (strides[0], strides[1], 0, strides[2]))


def apply_cos_sin(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, *, layout: str = "bhsd", style: str = "neox",
                  direction: str = "forward", rounding: str = "once", out: Optional[np.ndarray] = None) -> np.ndarray:
    """x * cos + rotate(x) * sin with explicit cos/sin (Hugging Face's apply_rotary_pos_emb for one
    tensor). cos/sin: [batch or 1, seq, rotary_dim] or [seq, rotary_dim]; the first rotary_dim
    elements of each head are rotated. rounding 'once' (float64 math, one rounding) or
    'like_torch' (bit-identical to eager PyTorch in x's dtype). out: a writable array to write
    into (x itself for in place); default a new array.

    >>> spec = rotary.Spec.preset("llama-3.1-8b")
    >>> cos, sin = rotary.table(spec, np.arange(4))   # Hugging Face's cos/sin [seq, rotary_dim]
    >>> x = np.ones((1, 32, 4, 128), np.float32)
    >>> bool((rotary.apply_cos_sin(x, cos, sin) == rotary.apply(x, None, np.arange(4), spec)[0]).all())
    True
    """
    check_layout(layout)
    check_direction(direction)
    x_view = numpy_view(x, "x", layout)
    if out is None:
        out = np.empty(x.shape, dtype=x.dtype)
    out_view = numpy_view(out, "x_out", layout, writable=True)
    _rotary.apply_cos_sin(
        x_view,
        out_view,
        cos_sin_descriptor(cos, "cos"),
        cos_sin_descriptor(sin, "sin"),
        style,
        direction,
        rounding,
        "x",
    )
    return out
