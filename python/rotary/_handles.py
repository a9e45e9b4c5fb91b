"""Small integer handles for Specs and Tables.

A torch custom op takes tensors and plain values only, so a Spec or a Table crosses into
rotary.torch's ops as its handle, given once when the object is made. Handles are weak: an
object lives as long as its owner keeps it (autograd keeps a strong reference until backward).
Nothing is registered when a handle is used, so traced code (torch.compile) only reads a
constant. Handles are strings, not ints: torch.compile turns an int argument that changes between
calls into a symbolic integer (automatic dynamic shapes), which cannot name an object; a string
is always a constant of the graph.
"""
from __future__ import annotations

import itertools
import weakref

from ._rotary import RotaryError

_LIVE = weakref.WeakValueDictionary()
_NEXT = itertools.count(1)


def register(obj) -> str:
    """A new handle for obj (a Spec or a Table)."""
    handle = f"rotary-{next(_NEXT)}"
    _LIVE[handle] = obj
    return handle


def lookup(handle: str):
    """The Spec or Table of a handle, or RotaryError if it is gone."""
    obj = _LIVE.get(handle)
    if obj is None:
        raise RotaryError(f"handle {handle} is not a live rotary.Spec or rotary.Table (got a released handle)")
    return obj
