"""rotary.torch's custom ops: apply_rotary (table + positions) with autograd, in place and into
given outputs, and its pure-torch implementation for tensors the kernels cannot take.
The public names are re-exported by rotary.torch (python/rotary/torch.py)."""
from __future__ import annotations

import math
from typing import Optional

import numpy as np
import torch

from . import _rotary
from ._apply import check_direction, resolve_table
from ._rotary import RotaryError
from ._spec import Spec
from ._table import Table, _expand, table_by_id
from ._views import check_layout


_DTYPES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float64: "float64"}

# ---- tables by id ---------------------------------------------------------------------------------
# A custom op's arguments are tensors and plain values, so a table crosses as its int id
# (rotary._table keeps a weak id -> Table map; autograd keeps a strong reference for backward).
def _table(table_id: int) -> Table:
    return table_by_id(table_id)


# ---- descriptors ----------------------------------------------------------------------------------
def _view(tensor: torch.Tensor, name: str, layout: str):
    dtype = _DTYPES.get(tensor.dtype)
    if dtype is None:
        raise RotaryError(f"{name} dtype must be float32, bfloat16, float16 or float64 (got {tensor.dtype})")
    return (tensor.data_ptr(), dtype, layout, tuple(tensor.shape), tuple(tensor.stride()))


def _int64(tensor: Optional[torch.Tensor], name: str) -> Optional[torch.Tensor]:
    if tensor is None:
        return None
    if tensor.is_floating_point() or tensor.is_complex() or tensor.dtype == torch.bool:
        raise RotaryError(f"{name} must hold integers (got dtype {tensor.dtype})")
    return tensor.detach().to(device="cpu", dtype=torch.int64).contiguous()


def _ints(tensor: Optional[torch.Tensor]):
    return None if tensor is None else (tensor.data_ptr(), tensor.numel())


def _kernel_ok(*tensors: torch.Tensor) -> bool:
    return all(t.device.type == "cpu" and t.dtype in _DTYPES for t in tensors)


def _run(q, k, q_out, k_out, positions, offsets, cu_seqlens, table_id, layout, direction, rotary_offset,
         xpos_length) -> None:
    """Rotates q, k into q_out, k_out (which may be q, k): the kernel for CPU tensors, else torch."""
    table = _table(table_id)
    if not _kernel_ok(q, k, q_out, k_out):
        rq, rk = _apply_torch(q, k, positions, offsets, cu_seqlens, table, layout, direction, rotary_offset,
                              xpos_length)
        q_out.copy_(rq)
        k_out.copy_(rk)
        return
    per_token = _int64(positions, "positions")
    seq_offsets = _int64(offsets, "offsets")
    cu = _int64(cu_seqlens, "cu_seqlens")
    if cu is not None and cu.numel() == 0:
        raise RotaryError("cu_seqlens must hold num_sequences + 1 offsets (got an empty tensor)")
    _rotary.apply(
        _view(q, "q", layout),
        _view(k, "k", layout),
        _view(q_out, "q_out", layout),
        _view(k_out, "k_out", layout),
        _ints(per_token),
        _ints(seq_offsets),
        _ints(cu),
        table._native,
        direction,
        rotary_offset,
        xpos_length,
        q.dtype == torch.float64 or k.dtype == torch.float64,
    )


# ---- the custom ops -------------------------------------------------------------------------------
@torch.library.custom_op("rotary::apply_rotary", mutates_args=())
def _apply_rotary_op(q: torch.Tensor, k: torch.Tensor, positions: Optional[torch.Tensor],
                     offsets: Optional[torch.Tensor], cu_seqlens: Optional[torch.Tensor], table_id: int,
                     layout: str, direction: str, rotary_offset: int,
                     xpos_length: int) -> tuple[torch.Tensor, torch.Tensor]:
    q_out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    k_out = torch.empty(k.shape, dtype=k.dtype, device=k.device)
    _run(q, k, q_out, k_out, positions, offsets, cu_seqlens, table_id, layout, direction, rotary_offset, xpos_length)
    return q_out, k_out


@_apply_rotary_op.register_fake
def _(q, k, positions, offsets, cu_seqlens, table_id, layout, direction, rotary_offset, xpos_length):
    return q.new_empty(q.shape), k.new_empty(k.shape)


def _apply_rotary_setup(ctx, inputs, output):
    _, _, positions, offsets, cu_seqlens, table_id, layout, direction, rotary_offset, xpos_length = inputs
    ctx.save_for_backward(positions, offsets, cu_seqlens)
    ctx.table = _table(table_id)  # alive until backward
    ctx.args = (table_id, layout, "backward" if direction == "forward" else "forward", rotary_offset, xpos_length)
    ctx.shapes = (inputs[0], inputs[1])


def _apply_rotary_backward(ctx, grad_q, grad_k):
    positions, offsets, cu_seqlens = ctx.saved_tensors
    table_id, layout, reverse, rotary_offset, xpos_length = ctx.args
    q, k = ctx.shapes
    if grad_q is None:
        grad_q = torch.zeros_like(q)
    if grad_k is None:
        grad_k = torch.zeros_like(k)
    # The rotation is linear in q and k: the gradient is the transposed rotation of the gradient.
    gq, gk = _apply_rotary_op(grad_q, grad_k, positions, offsets, cu_seqlens, table_id, layout, reverse,
                              rotary_offset, xpos_length)
    return gq, gk, None, None, None, None, None, None, None, None


_apply_rotary_op.register_autograd(_apply_rotary_backward, setup_context=_apply_rotary_setup)


@torch.library.custom_op("rotary::apply_rotary_", mutates_args=("q", "k"))
def _apply_rotary_inplace_op(q: torch.Tensor, k: torch.Tensor, positions: Optional[torch.Tensor],
                             offsets: Optional[torch.Tensor], cu_seqlens: Optional[torch.Tensor], table_id: int,
                             layout: str, direction: str, rotary_offset: int, xpos_length: int) -> None:
    _run(q, k, q, k, positions, offsets, cu_seqlens, table_id, layout, direction, rotary_offset, xpos_length)


@_apply_rotary_inplace_op.register_fake
def _(q, k, positions, offsets, cu_seqlens, table_id, layout, direction, rotary_offset, xpos_length):
    return None


@torch.library.custom_op("rotary::apply_rotary_out", mutates_args=("q_out", "k_out"))
def _apply_rotary_out_op(q: torch.Tensor, k: torch.Tensor, q_out: torch.Tensor, k_out: torch.Tensor,
                         positions: Optional[torch.Tensor], offsets: Optional[torch.Tensor],
                         cu_seqlens: Optional[torch.Tensor], table_id: int, layout: str, direction: str,
                         rotary_offset: int, xpos_length: int) -> None:
    _run(q, k, q_out, k_out, positions, offsets, cu_seqlens, table_id, layout, direction, rotary_offset, xpos_length)


@_apply_rotary_out_op.register_fake
def _(q, k, q_out, k_out, positions, offsets, cu_seqlens, table_id, layout, direction, rotary_offset, xpos_length):
    return None


def apply_rotary(q: torch.Tensor, k: torch.Tensor, positions: Optional[torch.Tensor] = None, spec_or_table=None, *,
                 offsets: Optional[torch.Tensor] = None, cu_seqlens: Optional[torch.Tensor] = None,
                 layout: str = "bshd", style: Optional[str] = None, precision: str = "exact",
                 direction: str = "forward", inplace: bool = False, rotary_offset: int = 0, xpos_length: int = 0,
                 out: Optional[tuple] = None, backend: str = "auto"):
    """Rotates q and k (head counts may differ) by RoPE; returns (q_out, k_out).

    positions: per-token int tensor ([batch, seq], or [tokens] for thd; M-RoPE [3, batch, seq]),
    or offsets (one per sequence: position = offset + index), or neither (0, 1, 2, ...).
    cu_seqlens: [num_sequences + 1] token offsets for layout "thd". spec_or_table: rotary.Spec
    (its shared table of `precision`) or rotary.Table. layout: "bshd", "bhsd", "sbhd", "thd".
    inplace=True rotates q and k in place; out=(q_out, k_out) writes into preallocated tensors of
    q's and k's shapes and dtypes (both without autograd; fresh outputs cost page faults that can
    exceed the kernel's own time, docs/python.md). backend: "auto" (the kernel for CPU tensors,
    pure torch elsewhere) or "torch" (always pure torch).
    """
    if spec_or_table is None:
        raise RotaryError("spec_or_table is required: a rotary.Spec or rotary.Table (got None)")
    check_layout(layout)
    check_direction(direction)
    if backend not in ("auto", "torch"):
        raise RotaryError(f"backend must be 'auto' or 'torch' (got {backend!r})")
    for name, tensor in (("q", q), ("k", k)):
        if not isinstance(tensor, torch.Tensor):
            raise RotaryError(f"{name} must be a torch.Tensor (got {type(tensor).__name__})")
        if tensor.dtype not in _DTYPES and (tensor.device.type == "cpu" or not tensor.is_floating_point()):
            raise RotaryError(f"{name} dtype must be float32, bfloat16, float16 or float64 (got {tensor.dtype})")
    for name, tensor in (("positions", positions), ("offsets", offsets), ("cu_seqlens", cu_seqlens)):
        if tensor is not None and not isinstance(tensor, torch.Tensor):
            raise RotaryError(f"{name} must be a torch.Tensor or None (got {type(tensor).__name__})")
        if tensor is not None and (tensor.is_floating_point() or tensor.is_complex() or tensor.dtype == torch.bool):
            raise RotaryError(f"{name} must hold integers (got dtype {tensor.dtype})")
    if q.device != k.device:
        raise RotaryError(f"q and k must be on one device (got q on {q.device}, k on {k.device})")
    table = resolve_table(spec_or_table, style, precision)
    table_id = table._id
    if backend == "torch":
        rq, rk = _apply_torch(q, k, positions, offsets, cu_seqlens, table, layout, direction, rotary_offset,
                              xpos_length)
        if inplace:
            with torch.no_grad():
                q.copy_(rq)
                k.copy_(rk)
            return q, k
        return rq, rk
    if out is not None:
        if inplace:
            raise RotaryError("out= and inplace=True exclude each other (got both)")
        if not (isinstance(out, (tuple, list)) and len(out) == 2 and all(isinstance(t, torch.Tensor) for t in out)):
            raise RotaryError(f"out must be a pair of tensors (q_out, k_out) (got {type(out).__name__})")
        if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad):
            raise RotaryError("out= does not record gradients (got q or k with requires_grad=True)")
        for name, given, like in (("q_out", out[0], q), ("k_out", out[1], k)):
            if given.dtype != like.dtype or given.device != like.device:
                raise RotaryError(f"{name} must have dtype {like.dtype} on {like.device} "
                                  f"(got {given.dtype} on {given.device})")
        if backend == "torch":
            rq, rk = _apply_torch(q, k, positions, offsets, cu_seqlens, table, layout, direction, rotary_offset,
                                  xpos_length)
            out[0].copy_(rq)
            out[1].copy_(rk)
        else:
            _apply_rotary_out_op(q, k, out[0], out[1], positions, offsets, cu_seqlens, table_id, layout, direction,
                                 int(rotary_offset), int(xpos_length))
        return out[0], out[1]
    if inplace:
        if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad):
            raise RotaryError("inplace=True does not record gradients (got q or k with requires_grad=True); "
                              "use inplace=False for training")
        _apply_rotary_inplace_op(q, k, positions, offsets, cu_seqlens, table_id, layout, direction,
                                 int(rotary_offset), int(xpos_length))
        return q, k
    return _apply_rotary_op(q, k, positions, offsets, cu_seqlens, table_id, layout, direction, int(rotary_offset),
                            int(xpos_length))


# ---- the pure-torch implementation of the same contract -------------------------------------------
def _token_positions(batch: int, seq: int, positions, offsets, cu_seqlens, layout: str, streams: int):
    """Positions [streams, batch, seq] (thd: batch 1, seq = tokens) as int64 on the CPU, following
    apply.hpp's Positions rules (the kernel checks the same rules; errors come from there)."""
    if positions is not None:
        pos = positions.detach().to("cpu", torch.int64).reshape(streams, batch, seq)
        return pos
    if layout == "thd":
        if cu_seqlens is None:
            raise RotaryError("positions.cu_seqlens is required for the thd layout (got None)")
        cu = cu_seqlens.detach().to("cpu", torch.int64)
        index = torch.empty(seq, dtype=torch.int64)
        for n in range(cu.numel() - 1):
            start, end = int(cu[n]), int(cu[n + 1])
            base = 0 if offsets is None else int(offsets[n])
            index[start:end] = torch.arange(end - start) + base
        return index.reshape(1, 1, seq).expand(streams, 1, seq)
    index = torch.arange(seq, dtype=torch.int64).reshape(1, seq).expand(batch, seq)
    if offsets is not None:
        index = index + offsets.detach().to("cpu", torch.int64).reshape(batch, 1)
    return index.reshape(1, batch, seq).expand(streams, batch, seq)


def _to_bshd(x: torch.Tensor, layout: str) -> torch.Tensor:
    if layout == "bshd":
        return x
    if layout == "bhsd":
        return x.transpose(1, 2)
    if layout == "sbhd":
        return x.transpose(0, 1)
    return x.unsqueeze(0)  # thd


def _from_bshd(x: torch.Tensor, layout: str) -> torch.Tensor:
    if layout == "bshd":
        return x
    if layout == "bhsd":
        return x.transpose(1, 2)
    if layout == "sbhd":
        return x.transpose(0, 1)
    return x.squeeze(0)


def _apply_torch(q, k, positions, offsets, cu_seqlens, table: Table, layout: str, direction: str,
                 rotary_offset: int, xpos_length: int):
    """apply.hpp's contract in plain torch ops (any device): the table's float32 rows gathered at
    each token's positions, then the pairwise rotation in float32 (float64 for float64 tensors)."""
    spec = table.spec
    streams = spec.position_streams
    qb = _to_bshd(q, layout)
    batch, seq = qb.shape[0], qb.shape[1]
    pos = _token_positions(batch, seq, positions, offsets, cu_seqlens, layout, streams)
    if pos.numel() and (int(pos.min()) < 0 or int(pos.max()) > table.max_position):
        raise RotaryError(f"positions must be in [0, {table.max_position}] (got {int(pos.min())}..{int(pos.max())})")
    pick = torch.tensor(spec.pair_streams, dtype=torch.int64)
    rows = [table.rows(pos[s].numpy()) for s in range(streams)]
    cos = torch.stack([torch.from_numpy(r[0]) for r in rows])  # [streams, batch, seq, pairs]
    sin = torch.stack([torch.from_numpy(r[1]) for r in rows])
    pairs = torch.arange(table.num_pairs)
    cos = cos[pick, :, :, pairs].permute(1, 2, 0)  # [batch, seq, pairs]
    sin = sin[pick, :, :, pairs].permute(1, 2, 0)
    scale_q = scale_k = None
    if spec.xpos_scale_base is not None:
        d = table.rotary_dim
        zeta = (torch.arange(0, d, 2, dtype=torch.float64) + 0.4 * d) / (1.4 * d)
        length = xpos_length or spec.max_position_embeddings
        p = pos[0].to(torch.float64)
        power = (p - (length // 2)) / spec.xpos_scale_base if length else p / spec.xpos_scale_base
        scale_q = zeta ** power.unsqueeze(-1)
        scale_k = 1.0 / scale_q
    results = []
    for x, scale in ((q, scale_q), (k, scale_k)):
        compute = torch.float64 if x.dtype == torch.float64 else torch.float32
        c = cos.to(compute)
        s = sin.to(compute)
        if scale is not None:
            c = (c.double() * scale).to(compute)
            s = (s.double() * scale).to(compute)
        c = c.unsqueeze(2).to(x.device)  # broadcast over heads
        s = s.unsqueeze(2).to(x.device)
        xb = _to_bshd(x, layout).to(compute)
        d = table.rotary_dim
        o = rotary_offset
        block = xb[..., o:o + d]
        if spec.style == "neox":
            a, b = block[..., : d // 2], block[..., d // 2:]
        else:
            a, b = block[..., 0::2], block[..., 1::2]
        if direction == "forward":
            a2, b2 = a * c - b * s, b * c + a * s
        else:
            a2, b2 = a * c + b * s, b * c - a * s
        rotated = torch.cat([a2, b2], -1) if spec.style == "neox" else torch.stack([a2, b2], -1).flatten(-2)
        out = torch.cat([xb[..., :o], rotated, xb[..., o + d:]], -1).to(x.dtype)
        results.append(_from_bshd(out, layout).contiguous())
    return results[0], results[1]
