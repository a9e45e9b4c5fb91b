"""attn_implementation="rotary_fused": the attention function of a model prepared by fuse_rope,
and the forward hooks that hand it each call's cos/sin, positions and cache offsets. It rotates
the un-rotated q and k inside rotary's attention kernel, at positions it derives from the cache
slots and checks against position_ids. How and why: python/rotary/_torch_fused.py.
"""
from __future__ import annotations

import inspect
import sys
import weakref
from typing import Optional

import numpy as np
import torch

from . import _rotary
from ._attention import prepare
from ._rotary import RotaryError
from ._spec import Spec
from ._table import Table
from ._hf_rotary_embedding import hf_inv_freq
from ._torch_attention import _descriptor, _mask_plans, _RowPlan, backend_terms
from ._torch_fused_wrapper import _ACTIVE
from ._views import ints_descriptor

FUSED_NAME = "rotary_fused"

# The cache classes whose slot arithmetic (get_query_offset, get_mask_sizes) fused RoPE relies on,
# and their layer classes. Others (MTP / DFlash caches shift queries against keys; quantized and
# offloaded caches were not checked) are refused by name.
_CACHES = ("DynamicCache", "StaticCache")
_CACHE_LAYERS = ("DynamicLayer", "DynamicSlidingWindowLayer", "StaticLayer", "StaticSlidingWindowLayer")

# cache -> {layer_idx: [d_b per batch row, or None while the row has seen no key]}
_ROW_DELTAS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


class _LayerRope:
    """What the fused attention modules of one layer type rotate with: the type's spec and table.
    precision 'hf': the table is built from the model's inv_freq buffer (source: its module and
    attribute) and rebuilt when the buffer changes (model.to(dtype) after fuse_rope rounds it, and
    transformers then computes with the rounded values)."""

    def __init__(self, spec: Spec, layer_type: Optional[str], precision: str, source):
        self.spec = spec
        self.layer_type = layer_type
        self.precision = precision
        self.source = source  # (module, attribute) of the inv_freq buffer, or None
        self.key = None
        self.table = None
        self.checked = False  # the one-time cos/sin comparison with the model's position_embeddings
        self.current()

    def current(self) -> Table:
        """The table for this call: rebuilt (and checked again) if the model's buffer changed."""
        if self.precision == "exact":
            if self.table is None:
                self.table = Table(self.spec, "exact")
            return self.table
        buffer = None if self.source is None else getattr(*self.source, None)
        if isinstance(buffer, torch.Tensor):
            key = (buffer.data_ptr(), buffer.dtype, buffer._version)
            inv = buffer.detach().float().cpu()
        else:
            key, inv = "config", hf_inv_freq(self.spec)  # transformers' float32 chain from the config
        if key != self.key:
            self.table = Table(self.spec, "hf", hf_inv_freq=inv.numpy())
            self.key = key
            self.checked = False
        return self.table


class _Call:
    """One forward of a fused attention module: what the pre-hook read, and the two counts."""
    __slots__ = ("module", "rope", "cos", "sin", "position_ids", "cache", "q_offset", "kv_offset", "applied",
                 "attended", "token")

    def __init__(self, module, rope, cos, sin, position_ids, cache, q_offset, kv_offset):
        self.module = module
        self.rope = rope
        self.cos = cos
        self.sin = sin
        self.position_ids = position_ids
        self.cache = cache
        self.q_offset = q_offset
        self.kv_offset = kv_offset
        self.applied = 0
        self.attended = 0
        self.token = None



# ---- hooks ------------------------------------------------------------------------------------------
_SIGNATURES: dict = {}  # attention class -> inspect.Signature of its forward (bound method: no self)


def _bound(module, args, kwargs) -> dict:
    signature = _SIGNATURES.get(type(module))
    if signature is None:
        signature = _SIGNATURES[type(module)] = inspect.signature(module.forward)
    try:
        return signature.bind_partial(*args, **kwargs).arguments
    except TypeError as error:
        raise RotaryError(f"fuse_rope: {type(module).__name__}.forward was called with arguments it does not take "
                          f"({error})") from None


def _cache_offsets(module, cache, q_len: int) -> tuple:
    """(q_offset, kv_offset): the cache slots of query 0 and of cache index 0 for this layer, before
    this forward's update (transformers' create_causal_mask reads the same two numbers)."""
    if cache is None:
        return 0, 0
    name = type(cache).__name__
    if name not in _CACHES:
        raise RotaryError(f"fuse_rope: past_key_values must be a DynamicCache or StaticCache (got {name}); fused RoPE "
                          "relies on their slot arithmetic, other caches are refused")
    layer_idx = module.layer_idx
    layers = getattr(cache, "layers", ())
    if layer_idx < len(layers):
        layer_name = type(layers[layer_idx]).__name__
        if layer_name not in _CACHE_LAYERS:
            raise RotaryError(f"fuse_rope: cache layer {layer_idx} must be one of {', '.join(_CACHE_LAYERS)} (got "
                              f"{layer_name})")
        if getattr(layers[layer_idx], "record_past", False):
            raise RotaryError(f"fuse_rope: cache layer {layer_idx} records its past (activate_past_recording): its "
                              "update returns keys beyond the mask's; refused")
    q_offset = int(cache.get_query_offset(layer_idx))
    _, kv_offset = cache.get_mask_sizes(q_len, layer_idx)
    return q_offset, int(kv_offset)


def _pre_hook(module, args, kwargs):
    rope = module._rotary_fused_rope
    where = f"fuse_rope: {type(module).__name__} (layer {module.layer_idx})"
    if torch.compiler.is_compiling():
        raise RotaryError(f"{where}: fused RoPE runs eagerly (its position checks read values); torch.compile of a "
                          "fused model is not supported: compile the unfused backend (attn_implementation='rotary')")
    if _ACTIVE.get() is not None:
        raise RotaryError(f"{where}: called inside the forward of another fused attention module "
                          f"({type(_ACTIVE.get().module).__name__}); fused attention forwards do not nest")
    implementation = module.config._attn_implementation
    if implementation != FUSED_NAME:
        raise RotaryError(f"{where}: the model's attn_implementation must stay {FUSED_NAME!r} while RoPE is fused "
                          f"(got {implementation!r}); call rotary.torch.unfuse_rope(model) first")
    arguments = _bound(module, args, kwargs)
    embeddings = arguments.get("position_embeddings")
    if not (isinstance(embeddings, (tuple, list)) and len(embeddings) == 2 and
            all(isinstance(t, torch.Tensor) for t in embeddings)):
        raise RotaryError(f"{where}: position_embeddings must be the (cos, sin) pair of the model's rotary embedding "
                          f"(got {type(embeddings).__name__})")
    extra = arguments.get("kwargs", {})
    position_ids = arguments.get("position_ids", extra.get("position_ids"))
    if not isinstance(position_ids, torch.Tensor):
        raise RotaryError(f"{where}: position_ids must reach the attention module (got {position_ids!r}); fused "
                          "RoPE rotates at these positions")
    hidden = arguments.get("hidden_states", args[0] if args else None)
    q_len = hidden.shape[1] if isinstance(hidden, torch.Tensor) and hidden.dim() == 3 else position_ids.shape[-1]
    cache = arguments.get("past_key_values", extra.get("past_key_values"))
    q_offset, kv_offset = _cache_offsets(module, cache, q_len)
    cos, sin = embeddings
    rope.current()
    if not rope.checked:
        _check_cos_sin(where, rope, cos, sin, position_ids)
    call = _Call(module, rope, cos, sin, position_ids, cache, q_offset, kv_offset)
    call.token = _ACTIVE.set(call)  # last: nothing below can raise with the call set
    return None


def _post_hook(module, args, kwargs, output):
    call = _ACTIVE.get()
    if call is None or call.module is not module:
        return None
    _ACTIVE.reset(call.token)
    if sys.exc_info()[1] is not None:
        return None  # the forward raised: its exception is the one to see
    if call.attended != 1:
        raise RotaryError(f"fuse_rope: {type(module).__name__} (layer {module.layer_idx}) did not call rotary's fused "
                          f"attention exactly once (got {call.attended} calls): its q and k were not rotated; "
                          "the output is refused")
    return None


def attach_hooks(module, rope: _LayerRope) -> list:
    """Makes module a fused attention module rotating with rope: the forward pre-hook that hands
    each call to the backend and the forward hook that checks the backend ran (always_call=True:
    it also resets the call when the forward raises). Returns their handles."""
    module._rotary_fused_rope = rope
    return [module.register_forward_pre_hook(_pre_hook, with_kwargs=True),
            module.register_forward_hook(_post_hook, with_kwargs=True, always_call=True)]


def _check_cos_sin(where, rope: _LayerRope, cos, sin, position_ids) -> None:
    """The layer's table against the model's own position_embeddings, at this call's positions:
    equal within float32 rounding (precision 'hf': both compute cos/sin of the same float32 angle;
    'exact': plus transformers' float32 angle error, 2^-23 |angle|). A wrong spec mapping (theta,
    scaling, attention_scaling, layout) is off by far more. Marked done at the first call that
    has a position > 0 (position 0 alone cannot tell theta)."""
    pos = position_ids.detach().cpu().to(torch.int64)
    if cos.dim() != 3 or cos.shape != sin.shape or cos.shape[-2] != pos.shape[-1]:
        raise RotaryError(f"{where}: position_embeddings must be cos, sin [batch, seq, rotary_dim] (got "
                          f"{tuple(cos.shape)}, {tuple(sin.shape)} for position_ids {tuple(pos.shape)})")
    pos = pos.expand(cos.shape[0], -1) if pos.shape[0] == 1 else pos
    want_cos, want_sin = rope.table.cos_sin(pos.numpy())
    if want_cos.shape[-1] != cos.shape[-1]:
        raise RotaryError(f"{where}: the model's cos/sin have width {cos.shape[-1]}, rotary's spec for this layer "
                          f"{want_cos.shape[-1]} (rotary_dim {rope.spec.rotary_dim}): a wrong spec mapping; refused")
    dtype = cos.dtype
    scaling = float(np.abs(want_cos).max()) if want_cos.size else 1.0
    tolerance = 2 * torch.finfo(dtype).eps * max(1.0, scaling)
    if rope.precision == "exact":
        angle = float(pos.max()) * float(np.max(rope.table.inv_freq, initial=0.0))
        tolerance += 4 * 2.0**-24 * max(1.0, scaling) * (1.0 + angle)
    for name, ours, theirs in (("cos", want_cos, cos), ("sin", want_sin, sin)):
        ours_t = torch.from_numpy(ours).to(dtype).double()
        diff = (ours_t - theirs.detach().cpu().double()).abs()
        worst = float(diff.max()) if diff.numel() else 0.0
        if not worst <= tolerance:
            at = np.unravel_index(int(diff.argmax()), tuple(diff.shape))
            raise RotaryError(f"{where}: rotary's {name} for this layer ({rope.spec!r}, layer type "
                              f"{rope.layer_type!r}) differs from the model's position_embeddings by {worst:.3g} at "
                              f"position {int(pos[at[0], at[1]])} (allowed {tolerance:.3g}): a wrong spec mapping; "
                              "refused")
    if int(pos.max()) > 0:
        rope.checked = True


# ---- the backend ------------------------------------------------------------------------------------
def _seeing_rows(plan: _RowPlan, q_len: int, window: int) -> np.ndarray:
    """Which queries of a row see at least one key (query i: keys j <= i + offset, within the window,
    in [key_start, key_end))."""
    edge = np.arange(q_len) + plan.offset
    low = np.full(q_len, plan.key_start)
    if window > 0:
        low = np.maximum(low, edge - window + 1)
    high = np.minimum(edge, plan.key_end - 1)
    return low <= high


def _row_delta(where, b, seeing, q_pos_row, q_offset) -> Optional[int]:
    """d_b: every query that sees a key sits at position q_offset + i + d_b; None if none sees one."""
    rows = np.flatnonzero(seeing)
    if rows.size == 0:
        return None
    deltas = q_pos_row[rows] - (q_offset + rows)
    d = int(deltas[0])
    bad = np.flatnonzero(deltas != d)
    if bad.size:
        i = int(rows[bad[0]])
        raise RotaryError(f"{where}: position_ids of batch row {b} are not consecutive over the row's tokens (got "
                          f"position_ids[{b}, {i}] = {int(q_pos_row[i])}, expected {q_offset + i + d} after "
                          f"position_ids[{b}, {int(rows[0])}] = {int(q_pos_row[rows[0]])}); fused RoPE derives the "
                          "cached keys' positions from the cache slots and refuses positions it cannot derive")
    return d


def _recorded_deltas(where, call: _Call, batch: int, deltas: list) -> list:
    """Checks this call's d_b against those of the earlier calls on this cache layer and records them."""
    if call.cache is None:
        return deltas
    per_layer = _ROW_DELTAS.setdefault(call.cache, {})
    layer = call.module.layer_idx
    known = per_layer.get(layer)
    if call.q_offset == 0:  # an empty cache layer (new, or reset): this call defines the rows
        per_layer[layer] = list(deltas)
        return deltas
    if known is None or len(known) != batch:
        what = "no fused call wrote it" if known is None else f"its rows were written with batch {len(known)}"
        raise RotaryError(f"{where}: past_key_values holds {call.q_offset} tokens for layer {layer} but {what} (got "
                          f"batch {batch}); fused RoPE needs a cache whose un-rotated keys and positions it wrote "
                          "itself (reordering or reusing a cache across models is refused)")
    for b, (old, new) in enumerate(zip(known, deltas)):
        if new is None:
            continue
        if old is None:
            known[b] = new
        elif old != new:
            raise RotaryError(f"{where}: position_ids of batch row {b} do not continue the cached keys' positions (got "
                              f"position_ids[{b}, ...] = cache slot + {new}, the cached keys were at slot + {old}); "
                              "fused RoPE refuses positions it cannot derive")
    return [k if n is None else n for k, n in zip(known, deltas)]


def rotary_fused_attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
                                   value: torch.Tensor, attention_mask: Optional[torch.Tensor], dropout: float = 0.0,
                                   scaling: Optional[float] = None, is_causal: Optional[bool] = None,
                                   sliding_window: Optional[int] = None, **kwargs):
    """transformers' attention-function signature; q and k un-rotated (fuse_rope), k / v straight
    from the cache. Returns (out [batch, q_len, heads, d_v], None)."""
    where = f"attn_implementation={FUSED_NAME!r} ({type(module).__name__}, layer {getattr(module, 'layer_idx', '?')})"
    if torch.compiler.is_compiling():
        raise RotaryError(f"{where}: fused RoPE runs eagerly (its position checks read values); torch.compile of a "
                          "fused model is not supported: compile the unfused backend (attn_implementation='rotary')")
    call = _ACTIVE.get()
    if call is None or call.module is not module:
        raise RotaryError(f"{where}: this backend takes un-rotated q and k and runs only in a model prepared by "
                          "rotary.torch.fuse_rope(model)")
    if call.applied != 1:
        raise RotaryError(f"{where}: the model's attention passed q and k through "
                          f"{type(module).__module__}.apply_rotary_pos_emb {call.applied} times (rotary's wrapper "
                          "must intercept exactly one call): q and k may have been rotated by other code; refused")
    call.attended += 1
    if call.attended > 1:
        raise RotaryError(f"{where}: called twice in one attention forward; refused")
    causal, window, scale = backend_terms(where, module, query, key, value, attention_mask, dropout, scaling, is_causal,
                                          sliding_window, kwargs)
    if query.device.type != "cpu":
        raise RotaryError(f"{where}: query must be a CPU tensor (got {query.device}): fused RoPE runs rotary's CPU "
                          "kernels; on CUDA use attn_implementation='rotary' without fuse_rope")
    if not causal:
        raise RotaryError(f"{where}: fused RoPE serves causal attention only (got is_causal False)")
    if torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value)):
        raise RotaryError(f"{where}: fused RoPE is inference-only (got q, k or v with requires_grad=True); run under "
                          "torch.no_grad() / model.eval(), or use the unfused backend (attn_implementation='rotary') "
                          "to train")
    batch, heads, q_len, _ = query.shape
    kv_len = key.shape[2]
    if attention_mask is None:
        # SDPA's reading of None (the unfused backend's rule): top-left causal for several queries,
        # every key for one. transformers gives None only where that is exact.
        farthest = (q_len - 1) if q_len > 1 else (kv_len - 1)
        if window and farthest >= window:
            raise RotaryError(f"{where}: attention_mask is None but the layer has sliding_window {window} and a query "
                              f"{farthest} keys past its farthest key (got q_len {q_len}, kv_len {kv_len})")
        plans = [_RowPlan(0, kv_len, 0 if q_len > 1 else kv_len - 1)] * batch
    else:
        plans = _mask_plans(attention_mask, batch, q_len, kv_len, causal, window)
    # This call's keys sit at cache indices q_offset - kv_offset + i: they must be in k (the
    # positions below come from this slot arithmetic, the mask only says who sees whom).
    first_new = call.q_offset - call.kv_offset
    if first_new < 0 or first_new + q_len > kv_len:
        raise RotaryError(f"{where}: the cache puts this call's {q_len} keys at indices {first_new}.."
                          f"{first_new + q_len - 1} (query offset {call.q_offset}, key offset {call.kv_offset}) but "
                          f"k has {kv_len} keys; fused RoPE cannot place the keys; refused")
    pos = call.position_ids.detach().cpu().to(torch.int64)
    if pos.dim() != 2 or pos.shape[-1] != q_len or pos.shape[0] not in (1, batch):
        raise RotaryError(f"{where}: position_ids must have shape [{batch}, {q_len}] or [1, {q_len}] (got "
                          f"{tuple(pos.shape)})")
    q_pos = pos.expand(batch, q_len).numpy()
    seeing, deltas = [], []
    for b, plan in enumerate(plans):
        if plan is None:
            seeing.append(None)
            deltas.append(None)
            continue
        rows = _seeing_rows(plan, q_len, window)
        seeing.append(rows)
        deltas.append(_row_delta(where, b, rows, q_pos[b], call.q_offset))
    deltas = _recorded_deltas(where, call, batch, deltas)
    return _fused_rows(where, query, key, value, plans, seeing, deltas, q_pos, call, scale, window), None


def _row_positions(where, b, plan: _RowPlan, seeing, d, q_pos_row, call: _Call, first_query: int, key_begin: int,
                   key_end: int):
    """Row b's query positions from first_query, and the positions of key indices [key_begin,
    key_end): the visible ones [plan.key_start, plan.key_end) at slot + d, the others (never
    visible) 0."""
    k_positions = np.zeros(key_end - key_begin, dtype=np.int64)
    if plan.key_end > plan.key_start:
        first_slot = plan.key_start + call.kv_offset
        if first_slot + d < 0:
            raise RotaryError(f"{where}: batch row {b}'s first visible key would sit at position {first_slot + d} "
                              f"(cache slot {first_slot}, position_ids = slot + {d}); refused")
        k_positions[plan.key_start - key_begin:plan.key_end - key_begin] = \
            np.arange(first_slot, plan.key_end + call.kv_offset, dtype=np.int64) + d
    # Queries that see no key keep their given position (clamped at 0): their output is 0.
    q_positions = np.maximum(np.where(seeing[first_query:], np.arange(first_query, len(q_pos_row)) + call.q_offset + d,
                                      q_pos_row[first_query:]), 0).astype(np.int64)
    return q_positions, k_positions


def _fused_rows(where, q, k, v, plans, seeing, deltas, q_pos, call: _Call, scale, window) -> torch.Tensor:
    """Rotary's attention kernel with the layer's table and every row's positions; [b, q, h, d_v]
    (zeros for queries that see no key). One call for the batch, left padding included (each row's
    keys from its first visible one: kv_starts), unless a row's queries sit before its keys
    (a negative causal offset): then one call per row on views that start at the row's first
    visible key and first seeing query (as the unfused backend)."""
    batch, heads, q_len, _ = q.shape
    kv_len = k.shape[2]
    out = torch.empty((batch, q_len, heads, v.shape[-1]), dtype=q.dtype)
    out_bhsd = out.transpose(1, 2)
    implementation = "reference" if q.dtype == torch.float64 else "kernels"
    table = call.rope.table
    if all(p is None or d is None or p.offset >= 0 for p, d in zip(plans, deltas)):
        blank = _RowPlan(0, 0, 0)  # a row whose queries see no key: no visible key, zeros out
        rows = [(blank, (np.zeros(q_len, dtype=np.int64), np.zeros(kv_len, dtype=np.int64))) if p is None or d is None
                else (p, _row_positions(where, b, p, seeing[b], d, q_pos[b], call, 0, 0, kv_len))
                for b, (p, d) in enumerate(zip(plans, deltas))]
        prepared = prepare(tuple(q.shape), tuple(k.shape), "bhsd", query_offset=0,
                           query_offsets=np.array([p.offset for p, _ in rows], dtype=np.int64),
                           kv_lengths=np.array([p.key_end for p, _ in rows], dtype=np.int64), cu_seqlens_q=None,
                           cu_seqlens_k=None, spec_or_table=table, q_positions=np.stack([r[0] for _, r in rows]),
                           k_positions=np.stack([r[1] for _, r in rows]), precision=None, seq_len=None,
                           kv_starts=np.array([p.key_start for p, _ in rows], dtype=np.int64))
        _rotary.attention(_descriptor(q, "q", "bhsd"), _descriptor(k, "k", "bhsd"), _descriptor(v, "v", "bhsd"),
                          _descriptor(out_bhsd, "out", "bhsd"), scale, True, 0,
                          ints_descriptor(prepared.query_offsets), window, ints_descriptor(prepared.kv_lengths), None,
                          None, prepared.native_table, ints_descriptor(prepared.q_positions),
                          ints_descriptor(prepared.k_positions), 0, prepared.seq_len, implementation,
                          kv_starts=ints_descriptor(prepared.kv_starts))
        return out
    for b, plan in enumerate(plans):
        if plan is None or deltas[b] is None:
            out[b].zero_()
            continue
        offset = plan.offset - plan.key_start  # the causal offset in the sliced key index space
        first_query = min(max(0, -offset), q_len)
        out[b, :first_query].zero_()
        if first_query == q_len:
            continue
        q_positions, k_positions = _row_positions(where, b, plan, seeing[b], deltas[b], q_pos[b], call, first_query,
                                                  plan.key_start, plan.key_end)
        sub = lambda t, start, end: t[b:b + 1, :, start:end]  # noqa: E731
        qs, ks = sub(q, first_query, q_len), sub(k, plan.key_start, plan.key_end)
        prepared = prepare(tuple(qs.shape), tuple(ks.shape), "bhsd", query_offset=offset + first_query,
                           query_offsets=None, kv_lengths=None, cu_seqlens_q=None, cu_seqlens_k=None,
                           spec_or_table=table, q_positions=q_positions.reshape(1, -1),
                           k_positions=k_positions.reshape(1, -1), precision=None, seq_len=None)
        _rotary.attention(_descriptor(qs, "q", "bhsd"), _descriptor(ks, "k", "bhsd"),
                          _descriptor(sub(v, plan.key_start, plan.key_end), "v", "bhsd"),
                          _descriptor(sub(out_bhsd, first_query, q_len), "out", "bhsd"), scale, True,
                          offset + first_query, None, window, None, None, None, prepared.native_table,
                          ints_descriptor(prepared.q_positions), ints_descriptor(prepared.k_positions), 0,
                          prepared.seq_len, implementation)
    return out
