"""The wrapper fuse_rope puts around a modeling module's apply_rotary_pos_emb, and who relies on
it: the wrapper returns q and k unchanged for the one call of a fused attention forward (the
call _ACTIVE holds) and calls the function it wraps for every other. patch_model (_hf_patch.py)
replaces the wrapped function, not the wrapper, and drops a wrapper no fused model uses.
How fused RoPE works as a whole: python/rotary/_torch_fused.py.
"""
from __future__ import annotations

import contextvars
import copy
import gc
import sys
import weakref

import torch

from ._rotary import RotaryError

# The fused attention forward running in this thread / task: set by the pre-hook of a fused
# module, reset by its forward hook (always_call=True: also when the forward raises).
_ACTIVE: contextvars.ContextVar = contextvars.ContextVar("rotary_fused_call", default=None)


# ---- the wrapped apply_rotary_pos_emb ------------------------------------------------------------------
def _make_wrapper(inner):
    """The module-level apply_rotary_pos_emb while a fused model may run. It calls whatever its
    rotary_fused_inner is (transformers' function, or patch_model's replacement: patch_model and
    unpatch_model swap the inner, not the wrapper)."""
    def apply_rotary_pos_emb(q, k, cos, sin, *args, **kwargs):
        if torch.compiler.is_compiling():
            # Dynamo cannot trace ContextVar.get; a fused module refuses compilation in its
            # pre-hook and backend, so a compiled call is never a fused one: transformers'.
            return apply_rotary_pos_emb.rotary_fused_inner(q, k, cos, sin, *args, **kwargs)
        call = _ACTIVE.get()
        if call is None or cos is not call.cos or sin is not call.sin:
            # not a fused module's call: transformers' (or patch_model's)
            return apply_rotary_pos_emb.rotary_fused_inner(q, k, cos, sin, *args, **kwargs)
        call.applied += 1
        if call.applied > 1:
            raise RotaryError(f"fuse_rope: {type(call.module).__name__} (layer {call.module.layer_idx}) called "
                              f"apply_rotary_pos_emb {call.applied} times in one forward; fused RoPE needs exactly "
                              "one call (the rotation it replaces)")
        return q, k

    apply_rotary_pos_emb.rotary_fused_inner = inner
    apply_rotary_pos_emb.__wrapped__ = inner  # inspect.signature: transformers' own
    return apply_rotary_pos_emb


# modeling module name -> the _FusedRecords (one per fused model, held by it) that rely on its
# wrapper (weak: a dropped model stops counting; a deep copy of a fused model adds its own record)
_WRAPPER_USERS: dict = {}


class _FusedRecord:
    """What fuse_rope changed in one model, kept on it as model._rotary_fused: the hook handles,
    the attn_implementation it had, the fused attention modules and the modeling modules whose
    wrapper it relies on. copy.deepcopy of the model copies the record with it (torch's
    RemovableHandle copies point at the copy's hook dicts) and the copy counts as a user of the
    wrappers, so that unfusing the original does not take a wrapper the copy still runs on."""

    def __init__(self, handles, previous, modules, modeling_names):
        self.handles = handles
        self.previous = previous
        self.modules = modules
        self.modeling_names = modeling_names

    def __deepcopy__(self, memo):
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        new.__dict__.update(copy.deepcopy(self.__dict__, memo))
        for name in new.modeling_names:
            _WRAPPER_USERS.setdefault(name, weakref.WeakSet()).add(new)
        return new


def _install_wrapper(modeling, record: _FusedRecord) -> None:
    current = modeling.apply_rotary_pos_emb
    if getattr(current, "rotary_fused_inner", None) is None:
        modeling.apply_rotary_pos_emb = _make_wrapper(current)
    _WRAPPER_USERS.setdefault(modeling.__name__, weakref.WeakSet()).add(record)


def _release_wrapper(modeling_name: str, record) -> bool:
    """Puts back the function the wrapper wrapped once no fused model uses it; True if it did."""
    users = _WRAPPER_USERS.get(modeling_name)
    if users is not None:
        if record is not None:
            users.discard(record)
        if users:
            return False
        del _WRAPPER_USERS[modeling_name]
    modeling = sys.modules.get(modeling_name)
    current = getattr(modeling, "apply_rotary_pos_emb", None)
    inner = getattr(current, "rotary_fused_inner", None)
    if inner is None:
        return False  # replaced since (patch_model, a test): not rotary's wrapper to take back
    modeling.apply_rotary_pos_emb = inner
    return True


def drop_unused_wrapper(modeling) -> bool:
    """Takes rotary's wrapper out of a modeling module when no live fused model relies on it
    (fused models dropped without unfuse_rope; a reference cycle is collected first). True if the
    module's apply_rotary_pos_emb is no longer the wrapper. patch_model calls it before patching."""
    users = _WRAPPER_USERS.get(modeling.__name__)
    if users:
        gc.collect()
    if users:
        return False
    return _release_wrapper(modeling.__name__, None)


def _transformers_function(modeling):
    """transformers' own apply_rotary_pos_emb behind rotary's wrapper and patch_model's replacement."""
    fn = modeling.apply_rotary_pos_emb
    fn = getattr(fn, "rotary_fused_inner", fn)
    return getattr(fn, "rotary_original", fn)
