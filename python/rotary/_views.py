"""Tensor descriptors for rotary._rotary: (address, dtype, layout, shape, strides in elements).

Read from NumPy's __array_interface__ here and from torch's data_ptr()/stride() in
rotary.torch: no copy, and no dependency on either library's C API. The C++ side checks every
shape and stride (check_apply_arguments); this side only refuses what it cannot describe.
"""
from __future__ import annotations

import numpy as np

from ._rotary import RotaryError

LAYOUTS = ("bshd", "bhsd", "sbhd", "thd")


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


def numpy_view(array, name: str, layout: str):
    """The descriptor of a NumPy array, or RotaryError naming `name`."""
    if not isinstance(array, np.ndarray):
        raise RotaryError(f"{name} must be a numpy.ndarray (got {type(array).__name__})")
    dtype = numpy_dtype_name(array.dtype)
    if dtype is None:
        raise RotaryError(f"{name} dtype must be float32, float16, bfloat16 or float64 (got {array.dtype})")
    itemsize = array.itemsize
    if any(stride % itemsize for stride in array.strides):
        raise RotaryError(
            f"{name} strides must be multiples of its item size {itemsize} bytes (got strides {array.strides})"
        )
    address = array.__array_interface__["data"][0]
    strides = tuple(stride // itemsize for stride in array.strides)
    return (address, dtype, layout, tuple(array.shape), strides)


def int64_positions(values, name: str) -> np.ndarray:
    """Positions (or offsets, cu_seqlens) as a C-contiguous int64 array; integers only."""
    array = np.asarray(values)
    if array.dtype.kind not in "iu":
        raise RotaryError(f"{name} must hold integers (got dtype {array.dtype})")
    if array.dtype.kind == "u" and array.size and int(array.max()) > np.iinfo(np.int64).max:
        raise RotaryError(f"{name} values must fit in int64 (got {int(array.max())})")
    return np.ascontiguousarray(array, dtype=np.int64)


def ints_descriptor(array: np.ndarray | None):
    if array is None:
        return None
    return (array.__array_interface__["data"][0], int(array.size))
