"""Tensor descriptors for rotary._rotary, and the argument rules every Python entry point shares.

Descriptors are (address, dtype, layout, shape, strides in elements), read from NumPy's
__array_interface__ here and from torch's data_ptr()/stride() in rotary.torch: no copy, and no
dependency on either library's C API. The C++ side checks every shape and stride
(check_apply_arguments). What crosses as a plain address, the positions, cannot carry a shape,
so their shape is checked here (token_positions), before the count is all that is left.
"""
from __future__ import annotations

import operator

import numpy as np

from ._rotary import RotaryError

LAYOUTS = ("bshd", "bhsd", "sbhd", "thd")
INT64_MAX = np.iinfo(np.int64).max
# The numerics of a call: the SIMD kernels (the fast path) or the float64 reference (the
# definition). A separate axis from a device backend (rotary.torch's backend=), which picks the
# code and device that run a call.
IMPLEMENTATIONS = ("kernels", "reference")


def numpy_dtype_name(dtype: np.dtype) -> str | None:
    if dtype == np.float32:
        return "float32"
    if dtype == np.float16:
        return "float16"
    if dtype == np.float64:
        return "float64"
    if dtype.name == "bfloat16" and dtype.itemsize == 2:  # ml_dtypes.bfloat16
        return "bfloat16"
    return None


def check_layout(layout) -> str:
    if layout not in LAYOUTS:
        raise RotaryError(f"layout must be one of {', '.join(LAYOUTS)} (got {layout!r})")
    return layout


def check_implementation(implementation) -> str:
    """implementation=, the same rule for rotary.apply, rotary.attention and rotary.torch.attention."""
    if not isinstance(implementation, str) or implementation not in IMPLEMENTATIONS:
        raise RotaryError(f"implementation must be 'kernels' or 'reference' (got {implementation!r})")
    return str(implementation)


def int_arg(name: str, value, *, minimum: int | None = None, maximum: int = INT64_MAX) -> int:
    """An integer argument: Python or NumPy integers only (no bool, no float, no silent
    truncation of 1.5), in [minimum, maximum]."""
    if isinstance(value, (bool, np.bool_)):
        raise RotaryError(f"{name} must be an integer (got {value!r})")
    try:
        number = operator.index(value)
    except TypeError:
        raise RotaryError(f"{name} must be an integer (got {value!r})") from None
    if minimum is not None and number < minimum:
        raise RotaryError(f"{name} must be >= {minimum} (got {number})")
    if number > maximum:
        raise RotaryError(f"{name} must be <= {maximum} (got {number})")
    return number


def float_arg(name: str, value) -> float:
    """A real-number argument: int or float (no bool, no str)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise RotaryError(f"{name} must be a number (got {value!r})")
    return float(value)


def numpy_view(array, name: str, layout: str, *, writable: bool = False):
    """The descriptor of a NumPy array, or RotaryError naming `name`. writable: the array will be
    written (an output, or an input rotated in place): a read-only array (np.load(mmap_mode="r"),
    a broadcast view, flags.writeable = False) is refused before any byte is touched."""
    if not isinstance(array, np.ndarray):
        raise RotaryError(f"{name} must be a numpy.ndarray (got {type(array).__name__})")
    dtype = numpy_dtype_name(array.dtype)
    if dtype is None:
        raise RotaryError(f"{name} dtype must be float32, float16, bfloat16 or float64 (got {array.dtype})")
    if writable and not array.flags.writeable:
        raise RotaryError(f"{name} must be writable (got a read-only array)")
    itemsize = array.itemsize
    if any(stride % itemsize for stride in array.strides):
        raise RotaryError(
            f"{name} strides must be multiples of its item size {itemsize} bytes (got strides {array.strides})"
        )
    address = array.__array_interface__["data"][0]
    strides = tuple(stride // itemsize for stride in array.strides)
    return (address, dtype, layout, tuple(array.shape), strides)


def int64_positions(values, name: str) -> np.ndarray:
    """Positions (or offsets, cu_seqlens) as a C-contiguous int64 array; integers only. An empty
    list is an empty int64 array (its shape is checked by the caller)."""
    array = np.asarray(values)
    if array.size == 0 and array.dtype.kind == "f" and not isinstance(values, np.ndarray):
        array = array.astype(np.int64)  # [] and () come as float64: no value, so nothing to refuse
    if array.dtype.kind not in "iu":
        raise RotaryError(f"{name} must hold integers (got dtype {array.dtype})")
    if array.dtype.kind == "u" and array.size and int(array.max()) > INT64_MAX:
        raise RotaryError(f"{name} values must fit in int64 (got {int(array.max())})")
    return np.ascontiguousarray(array, dtype=np.int64)


def token_axes(shape, layout: str):
    """(batch, seq) of q's shape in `layout` (THD: (1, tokens)), or None if the rank is wrong
    (the C++ checks name that)."""
    rank = 3 if layout == "thd" else 4
    if len(shape) != rank:
        return None
    if layout == "bshd":
        return shape[0], shape[1]
    if layout == "bhsd":
        return shape[0], shape[2]
    if layout == "sbhd":
        return shape[1], shape[0]
    return 1, shape[0]


def _shape_text(shape) -> str:
    return str(tuple(shape))


def position_shape_rule(layout: str, batch: int, seq: int, streams: int) -> str:
    """The shapes per-token positions may have for q's tokens, as users write shapes."""
    lead = (streams,) if streams > 1 else ()
    if layout == "thd":
        what = "[streams, tokens]" if streams > 1 else "[tokens]"
        forms = [lead + (seq,), lead + (1, seq)]
        return f"{' or '.join(map(_shape_text, forms))} ({what}; Hugging Face's packed position_ids are [1, tokens])"
    forms = [lead + (batch, seq)]
    if batch != 1:
        forms.append(lead + (1, seq))
    if streams == 1:
        forms.append((seq,))
        rule = "[batch, seq]; batch 1 or no batch axis broadcasts over the batch"
    else:
        rule = "[streams, batch, seq]; batch 1 broadcasts over the batch"
    return f"{', '.join(map(_shape_text, forms[:-1]))}{' or ' if len(forms) > 1 else ''}{_shape_text(forms[-1])} ({rule})"


def tokens_text(layout: str, batch: int, seq: int) -> str:
    """q's tokens in users' words: "q has 128 tokens (batch 2 x seq 64, layout bhsd)"."""
    if layout == "thd":
        return f"q has {seq} tokens (layout thd)"
    return f"q has {batch * seq} tokens (batch {batch} x seq {seq}, layout {layout})"


def token_positions(array: np.ndarray, name: str, layout: str, batch: int, seq: int, streams: int) -> np.ndarray:
    """Per-token positions checked by shape, not only by count, and laid out as the C++ side
    reads them: C-contiguous [streams, batch * seq] (THD: [streams, tokens]).

    Accepted shapes (S = streams, leading axis only when S > 1):
      bshd / bhsd / sbhd: [S, batch, seq] and [S, 1, seq] (broadcast over the batch, as Hugging
                          Face's position_ids [1, seq]); single-stream also [seq];
      thd:                [S, tokens] and [S, 1, tokens] (Hugging Face's packed position_ids).
    A (seq, batch) array for (batch, seq) tokens, or M-RoPE positions as [tokens, 3], is an error
    naming the shape expected, not a silent misreading."""
    lead = (streams,) if streams > 1 else ()
    shape = tuple(array.shape)
    if layout == "thd":
        accepted = shape in (lead + (seq,), lead + (1, seq))
    else:
        forms = [lead + (batch, seq), lead + (1, seq)] + ([(seq,)] if streams == 1 else [])
        accepted = shape in forms
    if not accepted:
        raise RotaryError(
            f"{name} has shape {_shape_text(shape)}; {tokens_text(layout, batch, seq)}: expected "
            f"{position_shape_rule(layout, batch, seq, streams)}"
        )
    if layout != "thd" and shape != lead + (batch, seq):
        array = np.broadcast_to(array.reshape(lead + (1, seq)), lead + (batch, seq))
    return np.ascontiguousarray(array, dtype=np.int64)


def sequence_values(array: np.ndarray, name: str, count: int, what: str) -> np.ndarray:
    """offsets (one per sequence) or cu_seqlens (sequences + 1): 1-D of `count` values."""
    if array.shape != (count,):
        raise RotaryError(f"{name} has shape {_shape_text(array.shape)}: expected ({count},) ({what})")
    return array


def call_seq_len(per_token, offsets, cu_seqlens, batch: int, seq: int, thd: bool) -> int:
    """Hugging Face's seq_len of a call: its largest position + 1 (0 without tokens). Inputs are
    int64 arrays as the C++ side reads them (checked there again: the table must serve it)."""
    if per_token is not None:
        return int(per_token.max()) + 1 if per_token.size else 0
    if thd:
        if cu_seqlens is None or cu_seqlens.size < 2:
            return 0
        lengths = np.diff(cu_seqlens)
    else:
        lengths = np.full(batch, seq, dtype=np.int64)
    if lengths.size == 0 or int(lengths.max()) <= 0:
        return 0
    firsts = offsets if offsets is not None and offsets.shape == lengths.shape else np.zeros_like(lengths)
    return int((firsts + lengths)[lengths > 0].max())


def ints_descriptor(array: np.ndarray | None):
    if array is None:
        return None
    return (array.__array_interface__["data"][0], int(array.size))
