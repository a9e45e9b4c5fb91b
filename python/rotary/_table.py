"""rotary.Table and rotary.table(): cos/sin rows (include/rotary/table.hpp).

Exact precision (default): every value is the float32 nearest to attention_scaling * cos(p * theta_i)
at any position. "hf": Hugging Face's float32 chain (docs/numerics.md)."""
from __future__ import annotations

import itertools
import weakref

import numpy as np

from . import _rotary
from ._rotary import RotaryError
from ._views import int64_positions, ints_descriptor


# Every Table has a small integer id: rotary.torch passes tables to its custom ops by id (op
# arguments are tensors and plain values). Weak: a table lives as long as its owner keeps it.
_BY_ID = weakref.WeakValueDictionary()
_NEXT_ID = itertools.count(1)


def _register(table) -> None:
    table._id = next(_NEXT_ID)
    _BY_ID[table._id] = table


def table_by_id(table_id: int) -> "Table":
    table = _BY_ID.get(table_id)
    if table is None:
        raise RotaryError(f"table_id {table_id} is not a live rotary.Table")
    return table


class Table:
    """A cos/sin table for one spec: stored rows that grow on demand (thread-safe), a fixed
    table of fixed_positions rows (positions past it are errors), or rows computed on the fly."""

    __slots__ = ("_native", "_spec", "_id", "__weakref__")

    def __init__(self, spec, precision: str = "exact", *, storage: str = "stored", seq_len: int = 0,
                 fixed_positions: int = 0, hf_inv_freq=None):
        from ._spec import Spec

        if not isinstance(spec, Spec):
            raise RotaryError(f"Table: spec must be a rotary.Spec (got {type(spec).__name__})")
        inv = [] if hf_inv_freq is None else [float(v) for v in np.asarray(hf_inv_freq, dtype=np.float32).ravel()]
        self._spec = spec
        self._native = _rotary.CosSinTable(spec._native, precision, storage, int(seq_len), int(fixed_positions), inv)
        _register(self)

    @classmethod
    def _wrap(cls, native, spec) -> "Table":
        table = cls.__new__(cls)
        table._native = native
        table._spec = spec
        _register(table)
        return table

    spec = property(lambda self: self._spec)
    precision = property(lambda self: self._native.precision, doc="'exact' or 'hf'")
    storage = property(lambda self: self._native.storage, doc="'stored' or 'on_the_fly'")
    num_pairs = property(lambda self: self._native.num_pairs)
    rotary_dim = property(lambda self: 2 * self._native.num_pairs)
    attention_scaling = property(lambda self: self._native.attention_scaling)
    max_position = property(lambda self: self._native.max_position, doc="the largest position accepted")
    size = property(lambda self: self._native.size, doc="rows stored so far")

    @property
    def inv_freq(self) -> np.ndarray:
        return np.frombuffer(self._native.inv_freq, dtype=np.float64).copy()

    @property
    def inv_freq_f32(self) -> np.ndarray:
        return np.asarray(self._native.inv_freq_f32, dtype=np.float32)

    def reserve(self, positions: int) -> None:
        """Store rows for positions [0, positions) now (a stored table otherwise grows on demand)."""
        self._native.reserve_positions(int(positions))

    def rows(self, positions, *, float64: bool = False):
        """(cos, sin), each [*positions.shape, num_pairs], in pair order, attention_scaling
        included: float32 (the table's values), or float64 (exact values before rounding)."""
        pos = int64_positions(positions, "positions")
        dtype = np.float64 if float64 else np.float32
        cos = np.empty(pos.shape + (self.num_pairs,), dtype=dtype)
        sin = np.empty_like(cos)
        self._native.rows(ints_descriptor(pos), cos.__array_interface__["data"][0],
                          sin.__array_interface__["data"][0], float64)
        return cos, sin

    def cos_sin(self, positions, *, float64: bool = False):
        """(cos, sin) as Hugging Face's rotary-embedding modules return them: [..., rotary_dim],
        cat(f, f) for the neox style and each value twice in a row for gptj.

        Single-stream specs: positions of any shape. M-RoPE / 2-D vision: positions [streams, ...]
        (Hugging Face's position_ids [3, batch, seq] for M-RoPE); each pair reads its stream."""
        pos = int64_positions(positions, "positions")
        streams = self._spec.position_streams
        if streams == 1:
            cos, sin = self.rows(pos, float64=float64)
        else:
            if pos.ndim < 1 or pos.shape[0] != streams:
                raise RotaryError(
                    f"positions must have shape [{streams}, ...] for {self._spec.axes} specs (got shape {pos.shape})"
                )
            per_stream = [self.rows(pos[s], float64=float64) for s in range(streams)]
            pick = np.asarray(self._spec.pair_streams)
            cos = np.empty_like(per_stream[0][0])
            sin = np.empty_like(cos)
            for s in range(streams):
                cos[..., pick == s] = per_stream[s][0][..., pick == s]
                sin[..., pick == s] = per_stream[s][1][..., pick == s]
        return _expand(cos, self._spec.style), _expand(sin, self._spec.style)

    def __repr__(self) -> str:
        return f"Table({self._spec.name!r}, precision={self.precision!r}, storage={self.storage!r}, size={self.size})"


def _expand(pair_values: np.ndarray, style: str) -> np.ndarray:
    if style == "neox":
        return np.concatenate([pair_values, pair_values], axis=-1)
    return np.repeat(pair_values, 2, axis=-1)


def table(spec, positions, precision: str = "exact"):
    """(cos, sin) for `positions` in Hugging Face's layout ([..., rotary_dim], float32), from the
    spec's shared table."""
    from ._spec import Spec

    if isinstance(spec, Table):
        return spec.cos_sin(positions)
    if not isinstance(spec, Spec):
        raise RotaryError(f"spec must be a rotary.Spec or rotary.Table (got {type(spec).__name__})")
    return spec.table(precision).cos_sin(positions)
