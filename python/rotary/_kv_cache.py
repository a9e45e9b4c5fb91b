"""rotary.KvCache on NumPy arrays (include/rotary/kv_cache.hpp; docs/attention.md, "The KV cache")."""
from __future__ import annotations

from typing import Optional, Union

import numpy as np
from numpy.typing import ArrayLike

from . import _rotary
from ._rotary import RotaryError
from ._spec import Spec
from ._table import Table, check_source, resolve
from ._views import check_layout, float_arg, int64_positions, int_arg, ints_descriptor, numpy_view

_DTYPES = {"float32": np.float32, "float16": np.float16}


def _numpy_dtype(name: str):
    if name in _DTYPES:
        return np.dtype(_DTYPES[name])
    if name == "bfloat16":
        try:
            import ml_dtypes  # the bfloat16 NumPy dtype rotary.apply also reads
        except ImportError:
            raise RotaryError("dtype bfloat16 needs the ml_dtypes package (got it missing)") from None
        return np.dtype(ml_dtypes.bfloat16)
    raise RotaryError(f"dtype must be 'float32', 'bfloat16' or 'float16' (got {name!r})")


class KvCache:
    """A KV cache: keys stored rotated at their positions, values beside them, per sequence.

    Layout (owned by the C++ object): keys [batch, kv_heads, capacity, head_dim], values
    [batch, kv_heads, capacity, v_head_dim], in `dtype`; sequence b uses slots [0, length(b)).

    >>> spec = rotary.Spec.preset("llama-3.1-8b")
    >>> cache = rotary.KvCache(spec, batch=1, kv_heads=8, capacity=64)
    >>> k = np.ones((1, 5, 8, 128), np.float32); v = np.ones((1, 5, 8, 128), np.float32)
    >>> cache.append(k, v)                       # prefill: positions 0..4
    >>> out = cache.attend(np.ones((1, 5, 32, 128), np.float32))   # the 5 tokens' queries
    >>> cache.append(k[:, :1], v[:, :1]); cache.lengths
    [6]
    >>> cache.shift(n_keep=1, n_discard=2); cache.lengths, cache.last_position(0)
    ([4], 3)

    spec_or_table: a rotary.Spec (its table of `precision`, default "exact"; sequence-dependent
    schemes use the frequencies of `seq_len`, 0 = the short / original ones) or a rotary.Table.
    The cache keeps one frequency set: an append or shift that would change it (LongRoPE across
    original_max_position_embeddings, dynamic NTK past max_position_embeddings) raises
    RotaryError saying why.
    """

    __slots__ = ("_native", "_table", "_spec", "_dtype", "_shape")

    def __init__(self, spec_or_table: Union[Spec, Table], *, batch: int, kv_heads: int, capacity: int,
                 head_dim: Optional[int] = None, v_head_dim: Optional[int] = None, dtype: str = "float32",
                 precision: Optional[str] = None, seq_len: int = 0, rotary_offset: int = 0):
        check_source(spec_or_table)
        seq_len = int_arg("seq_len", seq_len, minimum=0)
        spec, native_table = resolve(spec_or_table, precision, None, lambda: seq_len)
        self._spec = spec
        self._table = native_table  # kept alive with the cache (the C++ side also keeps it)
        self._dtype = _numpy_dtype(dtype)
        head_dim = spec.head_dim if head_dim is None else int_arg("head_dim", head_dim, minimum=1)
        v_head_dim = head_dim if v_head_dim is None else int_arg("v_head_dim", v_head_dim, minimum=1)
        self._shape = (int_arg("batch", batch, minimum=1), int_arg("kv_heads", kv_heads, minimum=1), head_dim, v_head_dim,
                       int_arg("capacity", capacity, minimum=0))
        self._native = _rotary.KvCache(native_table, self._shape[0], self._shape[1], head_dim, v_head_dim, self._shape[4],
                                       dtype, int_arg("rotary_offset", rotary_offset, minimum=0))

    @property
    def spec(self) -> Spec:
        return self._spec

    @property
    def dtype(self) -> np.dtype:
        return self._dtype

    @property
    def capacity(self) -> int:
        return self._shape[4]

    @property
    def lengths(self) -> list[int]:
        return [self._native.length(b) for b in range(self._shape[0])]

    def length(self, sequence: int) -> int:
        return self._native.length(int_arg("sequence", sequence))

    def last_position(self, sequence: int) -> int:
        """The position of the sequence's last token, -1 when it is empty."""
        return self._native.last_position(int_arg("sequence", sequence))

    def positions(self, sequence: int) -> np.ndarray:
        sequence = int_arg("sequence", sequence)
        return np.array([self._native.position(sequence, j) for j in range(self._native.length(sequence))], np.int64)

    @property
    def keys(self) -> np.ndarray:
        """A copy of the key storage [batch, kv_heads, capacity, head_dim] (rotated keys; slots
        past a sequence's length are stale)."""
        b, h, d, _, c = self._shape
        return np.frombuffer(self._native.keys_bytes(), dtype=self._dtype).reshape(b, h, c, d).copy()

    @property
    def values(self) -> np.ndarray:
        b, h, _, dv, c = self._shape
        return np.frombuffer(self._native.values_bytes(), dtype=self._dtype).reshape(b, h, c, dv).copy()

    def append(self, k: np.ndarray, v: np.ndarray, positions: Optional[ArrayLike] = None, *,
               layout: str = "bshd") -> None:
        """Appends the same number of tokens to every sequence: k [batch, n, kv_heads, head_dim],
        v [.., v_head_dim] (layout "bshd", "bhsd" or "sbhd"), the cache's dtype. positions:
        [batch, n] integers, each sequence's increasing and above its last position; None = the
        next positions."""
        check_layout(layout)
        k_view = numpy_view(k, "k", layout)
        v_view = numpy_view(v, "v", layout)
        per_token = None
        if positions is not None:
            per_token = int64_positions(positions, "positions")
            if per_token.ndim != 2 or per_token.shape[0] != self._shape[0]:
                raise RotaryError(f"positions must have shape [batch, new tokens] with batch {self._shape[0]} "
                                  f"(got shape {per_token.shape})")
        self._native.append(k_view, v_view, ints_descriptor(per_token) if per_token is not None else None)

    def attend(self, q: np.ndarray, *, layout: str = "bshd", scale: Optional[float] = None, causal: bool = True,
               window: int = 0, out: Optional[np.ndarray] = None) -> np.ndarray:
        """Attention of the queries of each sequence's last q_len tokens (q [batch, q_len,
        q_heads, head_dim], un-rotated) over the cache. Returns out [batch, q_len, q_heads,
        v_head_dim] (in q's layout), a new array unless `out` is given."""
        check_layout(layout)
        q_view = numpy_view(q, "q", layout)
        if out is None:
            shape = list(q.shape)
            shape[-1] = self._shape[3]
            out = np.empty(tuple(shape), dtype=q.dtype)
        out_view = numpy_view(out, "out", layout, writable=True)
        self._native.attend(q_view, out_view, None if scale is None else float_arg("scale", scale), bool(causal),
                            int_arg("window", window))
        return out

    def shift(self, n_keep: int, n_discard: int, *, sequence: Optional[int] = None) -> None:
        """llama.cpp's context shift: keep the first n_keep tokens, drop the next n_discard, and
        move the rest down, re-rotating their keys by -n_discard (every sequence, or one)."""
        n_keep = int_arg("n_keep", n_keep)
        n_discard = int_arg("n_discard", n_discard)
        if sequence is None:
            self._native.shift(n_keep, n_discard)
        else:
            self._native.shift_sequence(int_arg("sequence", sequence), n_keep, n_discard)

    def clear(self) -> None:
        self._native.clear()
