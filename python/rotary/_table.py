"""rotary.Table, rotary.table(), and the one cache of cos/sin tables that each Spec shares.

Exact precision (default): every value is the float32 nearest to attention_scaling * cos(p * theta_i)
at any position. "hf": Hugging Face's float32 chain (docs/numerics.md).

seq_len (docs/python-arguments.md, "The seq_len rule"): dynamic NTK and LongRoPE change their frequencies
with the sequence length. Every call that takes positions follows Hugging Face's rule: seq_len is
the call's largest position + 1, unless the caller names one. A Spec picks the table of that
seq_len from its shared cache (shared_native, keyed by frequency_seq_len: one table per distinct
set of frequencies); a Table serves only the seq_lens whose frequencies are its own, and any
other call is an error (checked in C++, CosSinTable::serves_seq_len), never a silent answer.
"""
from __future__ import annotations

import threading
import weakref
from collections import OrderedDict

from typing import Optional, Union

import numpy as np
from numpy.typing import ArrayLike

from . import _handles, _rotary
from ._rotary import RotaryError
from ._spec import Spec
from ._views import int64_positions, int_arg, ints_descriptor

PRECISIONS = ("exact", "hf")
STYLES = ("neox", "gptj")
DEFAULT_MAX_BYTES = 8 << 30  # TableOptions::max_bytes

# ---- the shared tables ------------------------------------------------------------------------------
# Spec -> OrderedDict[(precision, style, frequency_seq_len)] -> (restyled spec or None, native table).
# The one owner of shared tables, with one key. Weak in the spec, and no value refers back to
# its Spec (a native table holds a C++ copy of the spec; a restyled Spec is a new object): a
# discarded Spec frees its tables at once, with no reference cycle waiting for the cyclic GC.
_SHARED = weakref.WeakKeyDictionary()
# One lookup or insertion at a time: a lookup's get-then-move_to_end and a grown table's eviction
# (which iterates the entries) are several steps, and threads calling with dynamic NTK at
# different seq_lens interleave them (KeyError, "OrderedDict mutated during iteration").
_SHARED_LOCK = threading.Lock()
# Dynamic NTK past max_position_embeddings has one table per seq_len; the last few are kept (a
# forward and its backward, q and k of one step, share one), computed on the fly, not stored.
_GROWN_TABLES_KEPT = 8


def check_precision(precision) -> str:
    if precision not in PRECISIONS:
        raise RotaryError(f"precision must be 'exact' or 'hf' (got {precision!r})")
    return precision


def check_style(style) -> str:
    if style not in STYLES:
        raise RotaryError(f"style must be 'neox' or 'gptj' (got {style!r})")
    return style


def shared_native(spec: Spec, precision: str, style: str, seq_len: int):
    """(spec in `style`, the native table) that serves seq_len, from the spec's shared cache."""
    key = spec._native.frequency_seq_len(seq_len)
    with _SHARED_LOCK:
        return _shared_native_locked(spec, precision, style, key)


def _shared_native_locked(spec: Spec, precision: str, style: str, key: int):
    entries = _SHARED.get(spec)
    if entries is None:
        entries = _SHARED.setdefault(spec, OrderedDict())
    slot = (precision, style, key)
    hit = entries.get(slot)
    if hit is not None:
        entries.move_to_end(slot)
        restyled, native = hit
        return (restyled or spec), native
    restyled = None if style == spec.style else spec.replace(style=style)
    grown = key != 0 and spec.rope_type == "dynamic"
    native = _rotary.CosSinTable((restyled or spec)._native, precision, "on_the_fly" if grown else "stored", key, 0,
                                 [], DEFAULT_MAX_BYTES)
    entries[slot] = (restyled, native)
    if grown:
        grown_slots = [s for s in entries if s[2] != 0 and s[:2] == slot[:2]]
        for old in grown_slots[:-_GROWN_TABLES_KEPT]:
            del entries[old]
    return (restyled or spec), native


def resolve(source, precision, style, seq_len_of_call):
    """The (spec, native table) a call uses. source: a Spec (its shared table for the call's
    seq_len) or a Table (itself: C++ then checks that it serves the call). seq_len_of_call: a
    function giving the call's seq_len, asked only when a Spec's scheme depends on it."""
    if isinstance(source, Table):
        if precision is not None and precision != source.precision:
            raise RotaryError(f"precision must match the table's precision {source.precision!r} (got {precision!r}); "
                              "pass a Spec to choose the precision")
        if style is not None and style != source.spec.style:
            raise RotaryError(f"style must match the table's style {source.spec.style!r} (got {style!r}); "
                              "pass a Spec to choose the style")
        return source.spec, source._native
    if isinstance(source, Spec):
        precision = check_precision("exact" if precision is None else precision)
        style = source.style if style is None else check_style(style)
        seq_len = seq_len_of_call() if source.sequence_dependent else 0
        return shared_native(source, precision, style, seq_len)
    raise RotaryError(f"spec_or_table must be a rotary.Spec or rotary.Table (got {type(source).__name__})")


def check_source(source):
    if not isinstance(source, (Spec, Table)):
        raise RotaryError(f"spec_or_table must be a rotary.Spec or rotary.Table (got {type(source).__name__})")
    return source


# ---- Table --------------------------------------------------------------------------------------------
class Table:
    """A cos/sin table for one spec and one seq_len: stored rows that grow on demand
    (thread-safe, memory bounded by max_bytes), a fixed table of fixed_positions rows (positions
    past it are errors), or rows computed on the fly (storage="on_the_fly").

    >>> table = rotary.Table(rotary.Spec.preset("llama-3.1-8b"))
    >>> cos, sin = table.rows([0, 1])      # pair order: [positions, rotary_dim // 2]
    >>> cos.shape, cos.dtype, float(cos[1, 0])
    ((2, 64), dtype('float32'), 0.5403022766113281)
    """

    __slots__ = ("_native", "_spec", "_handle", "__weakref__")

    def __init__(self, spec: Spec, precision: str = "exact", *, storage: str = "stored", seq_len: int = 0,
                 fixed_positions: int = 0, hf_inv_freq: Optional[ArrayLike] = None,
                 max_bytes: int = DEFAULT_MAX_BYTES):
        if not isinstance(spec, Spec):
            raise RotaryError(f"Table: spec must be a rotary.Spec (got {type(spec).__name__})")
        inv = [] if hf_inv_freq is None else [float(v) for v in np.asarray(hf_inv_freq, dtype=np.float32).ravel()]
        self._spec = spec
        self._native = _rotary.CosSinTable(spec._native, precision, storage, int_arg("seq_len", seq_len, minimum=0),
                                           int_arg("fixed_positions", fixed_positions, minimum=0), inv,
                                           int_arg("max_bytes", max_bytes, minimum=1))
        self._handle = _handles.register(self)

    @classmethod
    def shared(cls, spec: Spec, precision: str = "exact", *, seq_len: int = 0) -> "Table":
        """The spec's shared table for seq_len (the one rotary.apply and rotary.table use)."""
        if not isinstance(spec, Spec):
            raise RotaryError(f"Table.shared: spec must be a rotary.Spec (got {type(spec).__name__})")
        styled, native = shared_native(spec, check_precision(precision), spec.style,
                                       int_arg("seq_len", seq_len, minimum=0))
        return cls._wrap(native, styled)

    @classmethod
    def _wrap(cls, native, spec) -> "Table":
        table = cls.__new__(cls)
        table._native = native
        table._spec = spec
        table._handle = _handles.register(table)
        return table

    # A table's values never change (rows are only added, thread-safe): a copy shares it, as a
    # deep-copied model holding one (fuse_rope's layers) shares it.
    def __copy__(self) -> "Table":
        return self

    def __deepcopy__(self, memo) -> "Table":
        return self

    @property
    def spec(self) -> Spec:
        """The spec the table is for."""
        return self._spec

    @property
    def precision(self) -> str:
        """'exact' (correctly rounded float32 cos/sin) or 'hf' (Hugging Face's float32 chain)."""
        return self._native.precision

    @property
    def storage(self) -> str:
        """'stored' (rows kept, grown on demand) or 'on_the_fly' (computed per call)."""
        return self._native.storage

    @property
    def seq_len(self) -> int:
        """The seq_len its frequencies are for (dynamic NTK, LongRoPE)."""
        return self._native.seq_len

    @property
    def num_pairs(self) -> int:
        """Rotary_dim // 2."""
        return self._native.num_pairs

    @property
    def rotary_dim(self) -> int:
        """Rotated elements per head."""
        return 2 * self._native.num_pairs

    @property
    def attention_scaling(self) -> float:
        """The factor already multiplied into cos and sin."""
        return self._native.attention_scaling

    @property
    def max_position(self) -> int:
        """The largest position accepted."""
        return self._native.max_position

    @property
    def size(self) -> int:
        """Rows [0, size) are all stored (a prefix)."""
        return self._native.size

    @property
    def stored_bytes(self) -> int:
        """Memory of the stored rows: pages of 256 rows, stored where calls used them."""
        return self._native.stored_bytes

    @property
    def inv_freq(self) -> np.ndarray:
        """inv_freq per pair, float64 (the exact values the table's rows come from)."""
        return np.frombuffer(self._native.inv_freq, dtype=np.float64).copy()

    @property
    def inv_freq_f32(self) -> np.ndarray:
        """inv_freq per pair as float32 (Hugging Face's buffer for precision 'hf')."""
        return np.asarray(self._native.inv_freq_f32, dtype=np.float32)

    def reserve(self, positions: int) -> None:
        """Store rows for positions [0, positions) now (a stored table otherwise grows on demand)."""
        self._native.reserve_positions(int_arg("positions", positions, minimum=0))

    def rows(self, positions: ArrayLike, *, float64: bool = False,
             seq_len: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(cos, sin), each [*positions.shape, num_pairs], in pair order, attention_scaling
        included: float32 (the table's values), or float64 (exact values before rounding).
        seq_len: None for the largest position + 1; the table must serve it."""
        pos = int64_positions(positions, "positions")
        return native_rows(self._native, pos, float64=float64,
                           seq_len=-1 if seq_len is None else int_arg("seq_len", seq_len, minimum=0))

    def cos_sin(self, positions: ArrayLike, *, float64: bool = False,
                seq_len: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(cos, sin) as Hugging Face's rotary-embedding modules return them: [..., rotary_dim],
        cat(f, f) for the neox style and each value twice in a row for gptj.

        Single-stream specs: positions of any shape. M-RoPE / 2-D vision: positions [streams, ...]
        (Hugging Face's position_ids [3, batch, seq] for M-RoPE); each pair reads its stream.
        seq_len: None for the largest position + 1 (all streams); the table must serve it.

        >>> cos, sin = rotary.Table(rotary.Spec.preset("qwen3-8b")).cos_sin([[0, 1, 2]])
        >>> cos.shape                           # position_ids [1, 3] -> [1, 3, rotary_dim]
        (1, 3, 128)
        """
        pos = int64_positions(positions, "positions")
        seq_len = -1 if seq_len is None else int_arg("seq_len", seq_len, minimum=0)
        cos, sin = stream_rows(self._native, self._spec, pos, float64=float64, seq_len=seq_len)
        return expand(cos, self._spec.style), expand(sin, self._spec.style)

    def __repr__(self) -> str:
        return (f"Table({self._spec.name!r}, precision={self.precision!r}, storage={self.storage!r}, "
                f"seq_len={self.seq_len}, size={self.size})")


def native_rows(native, pos: np.ndarray, *, float64: bool = False, seq_len: int = -1):
    """(cos, sin) [*pos.shape, num_pairs] from a native table; pos: int64 C-contiguous."""
    dtype = np.float64 if float64 else np.float32
    cos = np.empty(pos.shape + (native.num_pairs,), dtype=dtype)
    sin = np.empty_like(cos)
    native.rows(ints_descriptor(pos), cos.__array_interface__["data"][0], sin.__array_interface__["data"][0],
                float64, seq_len)
    return cos, sin


def stream_rows(native, spec: Spec, pos: np.ndarray, *, float64: bool = False, seq_len: int = -1):
    """Pair-order (cos, sin) for single-stream positions of any shape, or [streams, ...] positions of
    an M-RoPE / vision spec (each pair reads its stream's position)."""
    streams = spec.position_streams
    if streams == 1:
        return native_rows(native, pos, float64=float64, seq_len=seq_len)
    if pos.ndim < 1 or pos.shape[0] != streams:
        raise RotaryError(f"positions must have shape [{streams}, ...] for {spec.axes} specs (got shape {pos.shape})")
    if seq_len < 0:  # one seq_len for the call: every stream's positions count
        seq_len = int(pos.max()) + 1 if pos.size else 0
    per_stream = [native_rows(native, np.ascontiguousarray(pos[s]), float64=float64, seq_len=seq_len)
                  for s in range(streams)]
    pick = np.asarray(spec.pair_streams)
    cos = np.empty_like(per_stream[0][0])
    sin = np.empty_like(cos)
    for s in range(streams):
        cos[..., pick == s] = per_stream[s][0][..., pick == s]
        sin[..., pick == s] = per_stream[s][1][..., pick == s]
    return cos, sin


def expand(pair_values: np.ndarray, style: str) -> np.ndarray:
    """Pair-order values in Hugging Face's layout: cat(v, v) (neox) or each value twice (gptj)."""
    if style == "neox":
        return np.concatenate([pair_values, pair_values], axis=-1)
    return np.repeat(pair_values, 2, axis=-1)



def table(spec: Union[Spec, "Table"], positions: ArrayLike, precision: str | None = None, *,
          seq_len: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(cos, sin) for `positions` in Hugging Face's layout ([..., rotary_dim], float32), from the
    spec's shared table for the call's seq_len (None: the largest position + 1, Hugging Face's
    rule), or from a given Table (which must serve that seq_len).

    >>> cos, sin = rotary.table(rotary.Spec.preset("llama-3.1-8b"), np.arange(4096))
    >>> cos.shape, cos.dtype
    ((4096, 128), dtype('float32'))
    """
    check_source(spec)
    pos = int64_positions(positions, "positions")
    named = None if seq_len is None else int_arg("seq_len", seq_len, minimum=0)

    def call_seq_len():
        return named if named is not None else (int(pos.max()) + 1 if pos.size else 0)

    styled, native = resolve(spec, precision, None, call_seq_len)
    cos, sin = stream_rows(native, styled, pos, seq_len=-1 if named is None else named)
    return expand(cos, styled.style), expand(sin, styled.style)
