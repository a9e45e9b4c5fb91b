"""rotary.apply() and rotary.apply_cos_sin() on NumPy arrays (include/rotary/apply.hpp,
include/rotary/apply_cos_sin.hpp)."""
from __future__ import annotations

import numpy as np

from . import _rotary
from ._rotary import RotaryError
from ._views import check_layout, int64_positions, ints_descriptor, numpy_view

DIRECTIONS = ("forward", "backward")


def resolve_table(spec_or_table, style=None, precision: str = "exact"):
    """The Table a call uses: a Table as given, or the spec's shared table (restyled if asked)."""
    from ._spec import Spec
    from ._table import Table

    if isinstance(spec_or_table, Table):
        if style is not None and style != spec_or_table.spec.style:
            raise RotaryError(
                f"style must match the table's style {spec_or_table.spec.style!r} (got {style!r}); "
                "pass a Spec to choose the style"
            )
        return spec_or_table
    if isinstance(spec_or_table, Spec):
        spec = spec_or_table
        if style is not None and style != spec.style:
            if style not in ("neox", "gptj"):
                raise RotaryError(f"style must be 'neox' or 'gptj' (got {style!r})")
            key = f"{precision}:{style}"
            if key not in spec._tables:
                from ._table import Table as _Table

                spec._tables[key] = _Table(spec.replace(style=style), precision)
            return spec._tables[key]
        return spec.table(precision)
    raise RotaryError(f"spec_or_table must be a rotary.Spec or rotary.Table (got {type(spec_or_table).__name__})")


def check_direction(direction) -> str:
    if direction not in DIRECTIONS:
        raise RotaryError(f"direction must be 'forward' or 'backward' (got {direction!r})")
    return direction


def apply(q, k=None, positions=None, spec_or_table=None, *, offsets=None, cu_seqlens=None, layout="bshd",
          style=None, inplace=False, direction="forward", precision="exact", rotary_offset=0, xpos_length=0,
          reference=False):
    """Rotates q and k (head counts may differ) by RoPE at each token's position.

    q, k:          NumPy arrays (float32, float16, bfloat16 from ml_dtypes, float64), any
                   non-negative strides, in `layout` ("bshd", "bhsd", "sbhd", or "thd" with
                   cu_seqlens). k may be None to rotate q only.
    positions:     integer positions, one per token in (batch, seq) order (M-RoPE / vision:
                   [streams, batch, seq]); or None with `offsets` (one per sequence: position =
                   offset + index) or neither (0, 1, 2, ... per sequence).
    spec_or_table: a rotary.Spec (its shared table of `precision`) or a rotary.Table.
    style:         'neox' / 'gptj' to override the spec's pairing.
    inplace:       write into q and k (returned); else new C-contiguous arrays are returned.
    direction:     'forward', or 'backward' (the transpose: the gradient).
    reference:     run the float64 reference instead of the SIMD kernels (float64 arrays always do).
    Returns (q_out, k_out) (k_out None when k is None).
    """
    if spec_or_table is None:
        raise RotaryError("spec_or_table is required: a rotary.Spec or rotary.Table (got None)")
    check_layout(layout)
    check_direction(direction)
    table = resolve_table(spec_or_table, style, precision)
    q_view = numpy_view(q, "q", layout)
    k_view = None if k is None else numpy_view(k, "k", layout)
    if inplace:
        for name, array in (("q", q), ("k", k)):
            if array is not None and not array.flags.writeable:
                raise RotaryError(f"{name} must be writable for inplace=True (got a read-only array)")
        q_out, k_out = q, k
    else:
        q_out = np.empty(q.shape, dtype=q.dtype)
        k_out = None if k is None else np.empty(k.shape, dtype=k.dtype)
    per_token = None if positions is None else int64_positions(positions, "positions")
    seq_offsets = None if offsets is None else int64_positions(offsets, "offsets")
    cu = None if cu_seqlens is None else int64_positions(cu_seqlens, "cu_seqlens")
    if cu is not None and cu.size == 0:
        raise RotaryError("cu_seqlens must hold num_sequences + 1 offsets (got an empty array)")
    use_reference = bool(reference) or q.dtype == np.float64 or (k is not None and k.dtype == np.float64)
    _rotary.apply(
        q_view,
        k_view,
        numpy_view(q_out, "q_out", layout),
        None if k_out is None else numpy_view(k_out, "k_out", layout),
        ints_descriptor(per_token),
        ints_descriptor(seq_offsets),
        ints_descriptor(cu),
        table._native,
        direction,
        int(rotary_offset),
        int(xpos_length),
        use_reference,
    )
    return q_out, k_out


def cos_sin_descriptor(array, name: str, batch_axis: bool):
    """cos / sin [batch, seq, rotary_dim] or [seq, rotary_dim] as the kernel's bshd (b, s, 1, r)."""
    if not isinstance(array, np.ndarray):
        raise RotaryError(f"{name} must be a numpy.ndarray (got {type(array).__name__})")
    if array.ndim == 2:
        array = array[None]
    if array.ndim != 3:
        raise RotaryError(f"{name} must have shape [batch, seq, rotary_dim] or [seq, rotary_dim] (got shape {array.shape})")
    address, dtype, _, shape, strides = numpy_view(array, name, "bshd")
    return (address, dtype, "bshd", (shape[0], shape[1], 1, shape[2]), (strides[0], strides[1], 0, strides[2]))


def apply_cos_sin(x, cos, sin, *, layout="bhsd", style="neox", direction="forward", rounding="once", out=None):
    """x * cos + rotate(x) * sin with explicit cos/sin (Hugging Face's apply_rotary_pos_emb for one
    tensor). cos/sin: [batch or 1, seq, rotary_dim] or [seq, rotary_dim]; the first rotary_dim
    elements of each head are rotated. rounding 'once' (float64 math, one rounding) or
    'like_torch' (bit-identical to eager PyTorch in x's dtype). out: an array to write into
    (x itself for in place); default a new array."""
    check_layout(layout)
    check_direction(direction)
    if out is None:
        out = np.empty(np.shape(x), dtype=getattr(x, "dtype", None))
    _rotary.apply_cos_sin(
        numpy_view(x, "x", layout),
        numpy_view(out, "x_out", layout),
        cos_sin_descriptor(cos, "cos", True),
        cos_sin_descriptor(sin, "sin", True),
        style,
        direction,
        rounding,
        "x",
    )
    return out
