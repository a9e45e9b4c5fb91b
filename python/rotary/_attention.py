"""rotary.attention() on NumPy arrays (include/rotary/attention.hpp; docs/attention.md), and the
call preparation rotary.torch.attention shares with it.

Arrays cross as descriptors (rotary/_views.py: no copy). What crosses as a plain (address, count)
buffer, the per-sequence values and the positions, is checked by shape here, because the C++ side
can only check its count; everything else (shapes, strides, dtypes, masks, the table serving the
call) is checked once in C++ (check_attention_arguments), before anything is written.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, NamedTuple, Optional, Union

import numpy as np
from numpy.typing import ArrayLike

from . import _rotary
from ._rotary import RotaryError
from ._spec import Spec
from ._table import Table, check_source, resolve
from ._views import (
    check_implementation,
    check_layout,
    float_arg,
    int64_positions,
    int_arg,
    ints_descriptor,
    numpy_view,
    token_axes,
    token_positions,
)


@dataclass(frozen=True, eq=False)
class FusedRope:
    """RoPE fused into attention's loads: attention(q, k, v, rope=rotary.FusedRope(spec, ...)).
    Mirrors C++'s AttentionRope (include/rotary/attention.hpp), which attention takes apart from
    its AttentionOptions. q and k are given un-rotated, and each q and k row is rotated at its
    position as it is loaded (never written to memory).

    source: a rotary.Spec (its shared table of `precision`) or a rotary.Table.
    q_positions / k_positions: per-token positions, [batch, seq_q] / [batch, seq_k] ([1, seq] and
        [seq] broadcast; layout "thd": [tokens]); NumPy arrays for rotary.attention, integer
        tensors for rotary.torch.attention. None: the mask's positions (offset + i for queries, j
        for keys).
    rotary_offset: where the rotated block starts in the head (DeepSeek's q = [nope | rope]).
    precision: the Spec's table precision ("exact" or "hf"; None: the default).
    seq_len: the frequencies' seq_len (None: the call's largest position + 1).

    The values are checked by the attention call that receives them, with errors naming the
    argument. Frozen (eq=False: fields may be arrays, which have no single truth value).

    >>> rope = rotary.FusedRope(rotary.Spec.preset("llama-3.1-8b"), q_positions=np.arange(4, 7))
    >>> rope.rotary_offset, rope.k_positions
    (0, None)
    """
    source: Any
    q_positions: Any = None
    k_positions: Any = None
    rotary_offset: Any = 0
    precision: Optional[str] = None
    seq_len: Optional[int] = None


_FLAT_ROPE = ("spec_or_table", "q_positions", "k_positions", "rotary_offset", "precision", "seq_len")


def _flat_given(name: str, value) -> bool:
    if name == "rotary_offset":
        return not (type(value) is int and value == 0)
    return value is not None


def fused_rope_terms(where: str, rope, spec_or_table, q_positions, k_positions, rotary_offset, precision, seq_len,
                     *, absolute=None) -> tuple:
    """(spec_or_table, q_positions, k_positions, rotary_offset, precision, seq_len) of a call: rope's
    fields, or the deprecated flat keywords (one DeprecationWarning a call; rotary_offset, precision
    or seq_len without spec_or_table is refused here, for every entry point). With absolute= and no
    rope, q_positions / k_positions are the absolute table's positions, not deprecated."""
    flat = dict(zip(_FLAT_ROPE, (spec_or_table, q_positions, k_positions, rotary_offset, precision, seq_len)))
    given = [name for name, value in flat.items() if _flat_given(name, value)]
    if rope is None:
        deprecated = [name for name in given if absolute is None or name not in ("q_positions", "k_positions")]
        if deprecated:
            warnings.warn(f"{where}: the fused-RoPE keywords {', '.join(deprecated)} are deprecated; pass "
                          f"rope=rotary.FusedRope(spec_or_table, q_positions=..., k_positions=..., rotary_offset=..., "
                          f"precision=..., seq_len=...) instead", DeprecationWarning, stacklevel=3)
        if spec_or_table is None:  # terms that only fused RoPE reads (positions may serve an absolute table)
            for name in ("rotary_offset", "precision", "seq_len"):
                if name in given:
                    raise RotaryError(f"{name} is for fused RoPE and needs spec_or_table (got {name} {flat[name]!r})")
        return tuple(flat.values())
    if not isinstance(rope, FusedRope):
        raise RotaryError(f"rope must be a rotary.FusedRope or None (got {type(rope).__name__})")
    if given:
        raise RotaryError(f"rope and {', '.join(given)} are exclusive: fused RoPE's terms go inside "
                          f"rope=rotary.FusedRope(...) (got rope and {', '.join(given)})")
    if not isinstance(rope.source, (Spec, Table)):
        raise RotaryError(f"rope.source must be a rotary.Spec or rotary.Table (got {type(rope.source).__name__})")
    return rope.source, rope.q_positions, rope.k_positions, rope.rotary_offset, rope.precision, rope.seq_len


class Prepared(NamedTuple):
    """A call's buffers (C-contiguous, kept alive by the caller for the call) and its table."""
    query_offsets: Optional[np.ndarray]
    kv_lengths: Optional[np.ndarray]
    cu_seqlens_q: Optional[np.ndarray]
    cu_seqlens_k: Optional[np.ndarray]
    native_table: object  # _rotary.CosSinTable or None (no fused RoPE)
    q_positions: Optional[np.ndarray]  # fused RoPE's or the absolute table's
    k_positions: Optional[np.ndarray]
    seq_len: int  # -1: the call's largest position + 1 (Hugging Face's rule)
    alibi_slopes: Optional[np.ndarray] = None  # float32 [q_heads]
    absolute: Optional[np.ndarray] = None  # float32 [rows, head_dim], C-contiguous
    kv_starts: Optional[np.ndarray] = None


def alibi_slopes(num_heads: int) -> np.ndarray:
    """ALiBi's head slopes (Press et al. 2021; include/rotary/encodings.hpp alibi_slopes), float64
    [num_heads]: 2^(-8 (h + 1) / n) for n a power of two, the authors' interleaving otherwise.
    attention(alibi_slopes=...) rounds them to float32, as flash-attention takes them.

    >>> rotary.alibi_slopes(8)[:3]
    array([0.5  , 0.25 , 0.125])
    """
    n = int_arg("num_heads", num_heads)
    return np.frombuffer(_rotary.alibi_slopes(n), dtype=np.float64).copy()


def sinusoidal_table(rows: int, dim: int, base: float = 10000.0) -> np.ndarray:
    """Vaswani et al.'s sinusoidal position table (include/rotary/encodings.hpp sinusoidal_table),
    float32 [rows, dim]: row p = (sin(p / base^(2i/dim)), cos(p / base^(2i/dim)))_i interleaved,
    computed in double and rounded once. The `absolute=` table of attention().

    >>> rotary.sinusoidal_table(2, 4)[1].round(4)
    array([0.8415, 0.5403, 0.01  , 1.    ], dtype=float32)
    """
    r = int_arg("rows", rows)
    d = int_arg("dim", dim)
    b = float_arg("base", base)
    flat = np.frombuffer(_rotary.sinusoidal_table(r, d, b), dtype=np.float32)
    return flat.reshape(max(r, 0), d).copy()


def check_alibi_slopes(slopes) -> Optional[np.ndarray]:
    """None or a 1-D array of real numbers, as float32 (the count and values are checked in C++)."""
    if slopes is None:
        return None
    array = np.asarray(slopes)
    if array.dtype.kind not in "fiu" or array.ndim != 1:
        raise RotaryError(f"alibi_slopes must be a 1-D array of real numbers, one per q head (got dtype {array.dtype}, "
                          f"shape {array.shape})")
    wide = array.astype(np.float64)
    overflow = np.flatnonzero(np.isfinite(wide) & (np.abs(wide) > np.finfo(np.float32).max))
    if overflow.size:  # float32 would turn it into inf, and the C++ message would show inf, not this value
        i = int(overflow[0])
        raise RotaryError(f"alibi_slopes[{i}] must fit in float32 (got {float(wide[i])!r})")
    return np.ascontiguousarray(array, dtype=np.float32)


def check_absolute_table(table) -> Optional[np.ndarray]:
    """None or a float32 array [rows, head_dim] (its dim and the positions are checked in C++).
    Other dtypes are refused rather than rounded: the kernels add the table's float32 values."""
    if table is None:
        return None
    array = np.asarray(table)
    if array.dtype != np.float32 or array.ndim != 2:
        raise RotaryError(f"absolute must be a float32 array [rows, head_dim] (got dtype {array.dtype}, shape "
                          f"{array.shape})")
    return np.ascontiguousarray(array)


def check_causal(causal) -> bool:
    if not isinstance(causal, (bool, np.bool_)):
        raise RotaryError(f"causal must be True or False (got {causal!r})")
    return bool(causal)


def optional_scale(scale) -> Optional[float]:
    """None (1/sqrt(head_dim)) or a number; C++ checks that it is finite and positive."""
    return None if scale is None else float_arg("scale", scale)


def _sequence_ints(values, name: str) -> Optional[np.ndarray]:
    """kv_lengths / kv_starts / query offsets / cu_seqlens: 1-D integers (their count is checked in
    C++)."""
    if values is None:
        return None
    array = int64_positions(values, name)
    if array.ndim != 1:
        raise RotaryError(f"{name} must be 1-D (got shape {array.shape})")
    return array


def _k_positions(array: np.ndarray, layout: str, k_shape) -> np.ndarray:
    """k's per-token positions, by shape like q's (token_positions), for k's own tokens."""
    axes = token_axes(tuple(k_shape), layout)
    if axes is None:
        return np.ascontiguousarray(array, dtype=np.int64)  # k's rank is wrong: C++ names it
    batch, seq = axes
    shape = tuple(array.shape)
    forms = [(seq,), (1, seq)] if layout == "thd" else [(batch, seq), (1, seq), (seq,)]
    if shape not in forms:
        what = f"k has {seq} tokens (layout thd)" if layout == "thd" else \
            f"k has {batch * seq} tokens (batch {batch} x seq {seq}, layout {layout})"
        raise RotaryError(f"k_positions has shape {shape}; {what}: expected "
                          f"{' or '.join(str(f) for f in forms)} ([batch, seq]; batch 1 or no batch axis broadcasts)")
    if layout != "thd" and shape != (batch, seq):
        array = np.broadcast_to(array.reshape(1, seq), (batch, seq))
    return np.ascontiguousarray(array, dtype=np.int64)


def _default_positions(layout: str, shape, cu: Optional[np.ndarray], offsets: Optional[np.ndarray],
                       offset: int) -> Optional[np.ndarray]:
    """Positions by the mask's rule: query i of sequence b at offset_b + i, key j at j (THD: counted
    from each cu_seqlens segment's start). None when the shape or cu_seqlens are wrong: C++ names it."""
    axes = token_axes(tuple(shape), layout)
    if axes is None:
        return None
    batch, seq = axes
    if layout == "thd":
        if cu is None or cu.size < 1 or cu[0] != 0 or cu[-1] != seq or np.any(np.diff(cu) < 0):
            return None
        out = np.empty(seq, dtype=np.int64)
        for n in range(cu.size - 1):
            start, end = int(cu[n]), int(cu[n + 1])
            base = offset if offsets is None or offsets.size != cu.size - 1 else int(offsets[n])
            out[start:end] = np.arange(end - start) + base
        return out
    base = np.full((batch, 1), offset, dtype=np.int64)
    if offsets is not None and offsets.size == batch:
        base = offsets.reshape(batch, 1)
    return np.ascontiguousarray(np.arange(seq, dtype=np.int64)[None, :] + base)


def prepare(q_shape, k_shape, layout: str, *, query_offset: int, query_offsets, kv_lengths, cu_seqlens_q,
            cu_seqlens_k, spec_or_table, q_positions, k_positions, precision, seq_len, alibi_slopes=None,
            absolute=None, kv_starts=None) -> Prepared:
    """Checks and converts everything that crosses as a plain buffer; resolves the table. The
    positions serve fused RoPE or the absolute table (C++ refuses the two together)."""
    offsets = _sequence_ints(query_offsets, "query_offsets")
    lengths = _sequence_ints(kv_lengths, "kv_lengths")
    starts = _sequence_ints(kv_starts, "kv_starts")
    cu_q = _sequence_ints(cu_seqlens_q, "cu_seqlens_q")
    cu_k = _sequence_ints(cu_seqlens_k, "cu_seqlens_k")
    slopes = check_alibi_slopes(alibi_slopes)
    table = check_absolute_table(absolute)
    if spec_or_table is None:  # (precision, seq_len and rotary_offset without it: fused_rope_terms)
        if table is None:
            for name, value in (("q_positions", q_positions), ("k_positions", k_positions)):
                if value is not None:
                    raise RotaryError(f"{name} is for fused RoPE or an absolute table and needs spec_or_table or "
                                      f"absolute (got {name} without either)")
            return Prepared(offsets, lengths, cu_q, cu_k, None, None, None, -1, slopes, None, starts)
        q_pos, k_pos = _call_positions(layout, q_shape, k_shape, cu_q, cu_k, offsets, query_offset, q_positions,
                                       k_positions)
        empty = np.empty(0, dtype=np.int64)
        return Prepared(offsets, lengths, cu_q, cu_k, None, empty if q_pos is None else q_pos,
                        empty if k_pos is None else k_pos, -1, slopes, table, starts)
    check_source(spec_or_table)
    named_seq_len = None if seq_len is None else int_arg("seq_len", seq_len, minimum=0)
    q_pos, k_pos = _call_positions(layout, q_shape, k_shape, cu_q, cu_k, offsets, query_offset, q_positions,
                                   k_positions)

    def call_seq_len() -> int:
        if named_seq_len is not None:
            return named_seq_len
        largest = max([int(p.max()) for p in (q_pos, k_pos) if p is not None and p.size] or [-1])
        return largest + 1

    _, native = resolve(spec_or_table, precision, None, call_seq_len)
    empty = np.empty(0, dtype=np.int64)
    return Prepared(offsets, lengths, cu_q, cu_k, native, empty if q_pos is None else q_pos,
                    empty if k_pos is None else k_pos, -1 if named_seq_len is None else named_seq_len, slopes, table,
                    starts)


def _call_positions(layout, q_shape, k_shape, cu_q, cu_k, offsets, query_offset, q_positions, k_positions):
    """Per-token q and k positions: given (by shape, as apply's), or the mask's."""
    if q_positions is None:
        q_pos = _default_positions(layout, q_shape, cu_q, offsets, query_offset)
    else:
        q_pos = int64_positions(q_positions, "q_positions")
        axes = token_axes(tuple(q_shape), layout)
        if axes is not None:
            q_pos = token_positions(q_pos, "q_positions", layout, axes[0], axes[1], 1)
    if k_positions is None:
        k_pos = _default_positions(layout, k_shape, cu_k, None, 0)
    else:
        k_pos = _k_positions(int64_positions(k_positions, "k_positions"), layout, k_shape)
    return q_pos, k_pos


def output_shape(q_shape, v_shape) -> tuple:
    """q's shape with v's head dim (out [.., q_heads, d_v]); q's shape when v's rank is wrong."""
    shape = list(q_shape)
    if shape and v_shape:
        shape[-1] = v_shape[-1]
    return tuple(shape)


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, *, causal: bool = False, scale: Optional[float] = None,
              window: int = 0, query_offset: int = 0, query_offsets: Optional[ArrayLike] = None,
              kv_lengths: Optional[ArrayLike] = None, kv_starts: Optional[ArrayLike] = None,
              cu_seqlens_q: Optional[ArrayLike] = None, cu_seqlens_k: Optional[ArrayLike] = None,
              layout: str = "bhsd", rope: Optional[FusedRope] = None,
              spec_or_table: Union[Spec, Table, None] = None, q_positions: Optional[ArrayLike] = None,
              k_positions: Optional[ArrayLike] = None, rotary_offset: int = 0, precision: Optional[str] = None,
              seq_len: Optional[int] = None, alibi_slopes: Optional[ArrayLike] = None,
              absolute: Optional[np.ndarray] = None, out: Optional[np.ndarray] = None,
              implementation: str = "kernels") -> np.ndarray:
    """Scaled dot-product attention softmax(scale q kᵀ + mask) v, MHA / GQA / MQA (k and v have
    kv_heads dividing q's heads), optionally with RoPE fused into the loads.

    q [batch, q_heads, seq_q, d], k [batch, kv_heads, seq_k, d], v [.., d_v] in `layout` (default
    "bhsd", Hugging Face's; also "bshd", "sbhd", and "thd" [tokens, heads, d] with cu_seqlens_q /
    cu_seqlens_k, flash-attn's varlen). float32, bfloat16 (ml_dtypes), float16 for the kernels;
    float64 runs the float64 reference. Any non-negative strides with a unit head-dim stride.

    Mask (by positions within a sequence: query i at offset + i, key j at j):
      causal:        key j visible only if j <= offset + i (query_offset = 0: top-left, torch's
                     is_causal; a KV cache passes kv_length - q_len: bottom-right);
      window:        > 0 limits a query to keys with offset + i - j < window (Mistral, Gemma's
                     sliding layers; the query's own position counts);
      query_offset / query_offsets: one offset for all sequences, or one per sequence;
      kv_lengths:    [batch] visible keys per sequence (keys past it are padding);
      kv_starts:     [batch] first visible key per sequence (keys before it are padding: a
                     left-padded batch in one call; positions are unchanged, key j stays at j);
      cu_seqlens_q / cu_seqlens_k: [sequences + 1] segment starts for layout "thd".
    A query that sees no key gets zeros. scale: None for 1/sqrt(d).

    Fused RoPE: rope=rotary.FusedRope(spec_or_table, q_positions=, k_positions=, rotary_offset=,
    precision=, seq_len=) (its docstring): q and k are un-rotated, and each is rotated at its
    position as it is loaded (never written). The same six as flat keywords (spec_or_table=, ...)
    are deprecated: they warn, and work as before.

    Other position encodings (one per call: RoPE, ALiBi and an absolute table are exclusive):
      alibi_slopes:  [q_heads] slopes (rounded to float32; rotary.alibi_slopes(q_heads) gives the
                     paper's): the score of query i at position p_i (offset + i) and key j gets
                     -slope_h * |p_i - j| after the scale (flash-attention's convention);
      absolute:      a float32 table [rows, head_dim] (rotary.sinusoidal_table(rows, head_dim), or
                     a learned one): q_i + P[q_positions[i]] and k_j + P[k_positions[j]] are
                     formed as they are loaded; q_positions= / k_positions= as FusedRope's
                     (default: the mask's), each in [0, rows).

    out: a writable array of q's shape with v's head dim and q's dtype; default a new array.
    implementation: "kernels" (the SIMD fast path) or "reference" (the float64 definition).

    >>> q = np.ones((1, 4, 3, 8), np.float32); k = v = np.ones((1, 2, 3, 8), np.float32)
    >>> rotary.attention(q, k, v, causal=True).shape
    (1, 4, 3, 8)
    >>> spec = rotary.Spec.preset("llama-3.1-8b").replace(head_dim=8, rotary_dim=8)
    >>> rotary.attention(q, k, v, causal=True, rope=rotary.FusedRope(spec)).shape
    (1, 4, 3, 8)
    """
    spec_or_table, q_positions, k_positions, rotary_offset, precision, seq_len = fused_rope_terms(
        "rotary.attention", rope, spec_or_table, q_positions, k_positions, rotary_offset, precision, seq_len,
        absolute=absolute)
    check_layout(layout)
    check_implementation(implementation)
    causal = check_causal(causal)
    scale = optional_scale(scale)
    window = int_arg("window", window)
    query_offset = int_arg("query_offset", query_offset)
    rotary_offset = int_arg("rotary_offset", rotary_offset)
    q_view = numpy_view(q, "q", layout)
    k_view = numpy_view(k, "k", layout)
    v_view = numpy_view(v, "v", layout)
    prepared = prepare(q.shape, k.shape, layout, query_offset=query_offset, query_offsets=query_offsets,
                       kv_lengths=kv_lengths, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                       spec_or_table=spec_or_table, q_positions=q_positions, k_positions=k_positions,
                       precision=precision, seq_len=seq_len, alibi_slopes=alibi_slopes, absolute=absolute,
                       kv_starts=kv_starts)
    if out is None:
        out = np.empty(output_shape(q.shape, v.shape), dtype=q.dtype)
    out_view = numpy_view(out, "out", layout, writable=True)
    use_reference = implementation == "reference" or np.float64 in (q.dtype, k.dtype, v.dtype, out.dtype)
    _call(q_view, k_view, v_view, out_view, scale, causal, window, query_offset, prepared, rotary_offset,
          "reference" if use_reference else "kernels")
    return out


def _call(q_view, k_view, v_view, out_view, scale, causal, window, query_offset, prepared: Prepared, rotary_offset,
          implementation: str) -> None:
    p = prepared
    _rotary.attention(q_view, k_view, v_view, out_view, scale, causal, query_offset,
                      ints_descriptor(p.query_offsets), window, ints_descriptor(p.kv_lengths),
                      ints_descriptor(p.cu_seqlens_q), ints_descriptor(p.cu_seqlens_k), p.native_table,
                      ints_descriptor(p.q_positions), ints_descriptor(p.k_positions), rotary_offset, p.seq_len,
                      implementation, floats_descriptor(p.alibi_slopes), table_descriptor(p.absolute),
                      ints_descriptor(p.kv_starts))


def floats_descriptor(array: Optional[np.ndarray]):
    """(address, count) of a C-contiguous float32 array, or None."""
    return None if array is None else (array.__array_interface__["data"][0], int(array.size))


def table_descriptor(table: Optional[np.ndarray]):
    """(address, count, rows, dim) of a C-contiguous float32 [rows, dim] table, or None."""
    if table is None:
        return None
    return (table.__array_interface__["data"][0], int(table.size), int(table.shape[0]), int(table.shape[1]))


def attention_scale(spec: Spec, qk_head_dim: Optional[int] = None) -> float:
    """The softmax scale a model uses with this spec: qk_head_dim^-0.5, times mscale² for
    DeepSeek's YaRN with mscale_all_dim (attention.hpp attention_scale). qk_head_dim: default the
    spec's head_dim.

    >>> round(rotary.attention_scale(rotary.Spec.preset("llama-3.1-8b")), 6)   # 128 ** -0.5
    0.088388
    """
    if not isinstance(spec, Spec):
        raise RotaryError(f"spec must be a rotary.Spec (got {type(spec).__name__})")
    dim = spec.head_dim if qk_head_dim is None else int_arg("qk_head_dim", qk_head_dim)
    return _rotary.attention_scale(spec._native, dim)
