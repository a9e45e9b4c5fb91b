"""rotary.torch: RoPE for PyTorch tensors, and a Hugging Face drop-in.

    q_out, k_out = rotary.torch.apply_rotary(q, k, positions, spec, layout="bhsd")

apply_rotary is the torch custom op ``rotary::apply_rotary`` (torch.library): autograd (the
gradient is the transposed rotation, computed by the same kernel), a fake implementation for
torch.compile (no graph break), CPU float32 / bfloat16 / float16 through rotary's SIMD kernels
and float64 through the float64 reference (for gradcheck), any strides. Tensors on other devices
go through a pure-torch implementation of the same contract (``_apply_torch`` below; also
selectable with backend="torch", which is how it is tested here, on CPU tensors).

Hugging Face drop-in, two lines in a model:
    model.model.rotary_emb = rotary.torch.RotaryEmbedding(model.config)
    modeling_llama.apply_rotary_pos_emb = rotary.torch.apply_rotary_pos_emb
(or rotary.torch.patch_model(model)). precision="hf" reproduces transformers' cos/sin and its
arithmetic bit for bit; precision="exact" gives correctly rounded cos/sin and one rounding per
output. Sources: transformers modeling_rope_utils.py (ROPE_INIT_FUNCTIONS, dynamic_rope_update)
and modeling_llama.py (LlamaRotaryEmbedding, apply_rotary_pos_emb, rotate_half).
"""
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

__all__ = [
    "apply_rotary",
    "apply_rotary_pos_emb",
    "apply_rotary_pos_emb_interleave",
    "apply_multimodal_rotary_pos_emb",
    "rotate_half",
    "RotaryEmbedding",
    "patch_model",
    "hf_inv_freq",
]

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


# ---- the Hugging Face drop-in ---------------------------------------------------------------------
def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """Hugging Face's rotate_half: cat(-x2, x1)."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _cos_sin_view(t: torch.Tensor, name: str, unsqueeze_dim: int):
    """HF's cos/sin ([batch, seq, dim] or [seq, dim]; already unsqueezed is accepted) as the
    kernel's bshd (b, s, 1, r) view."""
    if t.dim() == 4:
        t = t.squeeze(unsqueeze_dim)
    if t.dim() == 2:
        t = t.unsqueeze(0)
    if t.dim() != 3:
        raise RotaryError(f"{name} must have shape [batch, seq, dim] (got shape {tuple(t.shape)})")
    dtype = _DTYPES.get(t.dtype)
    if dtype is None:
        raise RotaryError(f"{name} dtype must be float32, bfloat16, float16 or float64 (got {t.dtype})")
    st = t.stride()
    return (t.data_ptr(), dtype, "bshd", (t.shape[0], t.shape[1], 1, t.shape[2]), (st[0], st[1], 0, st[2]))


def _rotate_explicit_torch(x, cos, sin, style, direction, unsqueeze_dim):
    """x * cos + rotate(x) * sin (and its transpose) in torch ops: the non-CPU path."""
    cos = cos.unsqueeze(unsqueeze_dim) if cos.dim() == 3 else cos
    sin = sin.unsqueeze(unsqueeze_dim) if sin.dim() == 3 else sin
    r = cos.shape[-1]
    x_rot, x_pass = x[..., :r], x[..., r:]

    def rot(y):
        if style == "neox":
            return rotate_half(y)
        return torch.stack((-y[..., 1::2], y[..., 0::2]), -1).flatten(-2)

    def rot_t(y):  # the transpose of rot
        if style == "neox":
            h = y.shape[-1] // 2
            return torch.cat((y[..., h:], -y[..., :h]), -1)
        return torch.stack((y[..., 1::2], -y[..., 0::2]), -1).flatten(-2)

    if direction == "forward":
        out = x_rot * cos + rot(x_rot) * sin
    else:
        out = x_rot * cos + rot_t(x_rot * sin)
    return torch.cat((out, x_pass), -1)


@torch.library.custom_op("rotary::apply_cos_sin", mutates_args=())
def _apply_cos_sin_op(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, style: str, direction: str,
                      rounding: str, unsqueeze_dim: int) -> torch.Tensor:
    if not _kernel_ok(x, cos, sin):
        return _rotate_explicit_torch(x, cos, sin, style, direction, unsqueeze_dim).contiguous()
    layout = "bhsd" if unsqueeze_dim == 1 else "bshd"
    out = torch.empty(x.shape, dtype=x.dtype)
    _rotary.apply_cos_sin(_view(x, "q", layout), _view(out, "q_out", layout),
                          _cos_sin_view(cos, "cos", unsqueeze_dim), _cos_sin_view(sin, "sin", unsqueeze_dim),
                          style, direction, rounding, "q")
    return out


@_apply_cos_sin_op.register_fake
def _(x, cos, sin, style, direction, rounding, unsqueeze_dim):
    return x.new_empty(x.shape)


def _apply_cos_sin_setup(ctx, inputs, output):
    x, cos, sin, style, direction, rounding, unsqueeze_dim = inputs
    ctx.save_for_backward(x, cos, sin)
    ctx.args = (style, "backward" if direction == "forward" else "forward", rounding, unsqueeze_dim)


def _apply_cos_sin_backward(ctx, grad):
    x, cos, sin = ctx.saved_tensors
    style, reverse, rounding, unsqueeze_dim = ctx.args
    grad_x = grad_cos = grad_sin = None
    if ctx.needs_input_grad[0]:
        grad_x = _apply_cos_sin_op(grad, cos, sin, style, reverse, rounding, unsqueeze_dim)
    if ctx.needs_input_grad[1] or ctx.needs_input_grad[2]:
        # d/dcos of x*cos + rotate(x)*sin is x (summed over the broadcast head axis); d/dsin is rotate(x).
        r = cos.shape[-1]
        c4 = cos.unsqueeze(unsqueeze_dim) if cos.dim() == 3 else cos
        xr = x[..., :r]
        g = grad[..., :r]
        if reverse == "backward":  # the forward was x*cos + rot(x)*sin
            rx = _rotate_explicit_torch(xr, torch.zeros_like(c4), torch.ones_like(c4), style, "forward", unsqueeze_dim)
            dc, ds = g * xr, g * rx
        else:  # the forward was x*cos + rot^T(x*sin): d/dsin = x * rot(g)
            rg = _rotate_explicit_torch(g, torch.zeros_like(c4), torch.ones_like(c4), style, "forward", unsqueeze_dim)
            dc, ds = g * xr, xr * rg
        reduce_dims = [unsqueeze_dim] + ([0] if cos.dim() >= 3 and cos.shape[0] == 1 and g.shape[0] != 1 else [])
        if ctx.needs_input_grad[1]:
            grad_cos = dc.sum(dim=reduce_dims, keepdim=True).reshape(cos.shape).to(cos.dtype)
        if ctx.needs_input_grad[2]:
            grad_sin = ds.sum(dim=reduce_dims, keepdim=True).reshape(sin.shape).to(sin.dtype)
    return grad_x, grad_cos, grad_sin, None, None, None, None


_apply_cos_sin_op.register_autograd(_apply_cos_sin_backward, setup_context=_apply_cos_sin_setup)


def apply_rotary_pos_emb(q, k, cos, sin, position_ids=None, unsqueeze_dim: int = 1, *, rounding: str = "like_torch",
                         style: str = "neox"):
    """Hugging Face's apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1) through rotary's kernel.

    q, k: [batch, heads, seq, head_dim] (unsqueeze_dim=1) or [batch, seq, heads, head_dim]
    (unsqueeze_dim=2); cos, sin: [batch, seq, rotary_dim] as the rotary-embedding module returns
    them (rotary_dim <= head_dim: the rest of each head passes through, as in Phi-3 / GPT-NeoX).
    rounding="like_torch" (default) is bit-identical to HF's eager expression in q's dtype;
    "once" computes in float64 and rounds once. style="gptj" for interleaved models.
    position_ids is accepted and ignored, as in transformers."""
    if unsqueeze_dim not in (1, 2):
        raise RotaryError(f"unsqueeze_dim must be 1 (q [batch, heads, seq, dim]) or 2 (q [batch, seq, heads, dim]) "
                          f"(got {unsqueeze_dim})")
    if rounding not in ("like_torch", "once"):
        raise RotaryError(f"rounding must be 'like_torch' or 'once' (got {rounding!r})")
    if style not in ("neox", "gptj"):
        raise RotaryError(f"style must be 'neox' or 'gptj' (got {style!r})")
    for name, tensor in (("q", q), ("k", k), ("cos", cos), ("sin", sin)):
        if not isinstance(tensor, torch.Tensor):
            raise RotaryError(f"{name} must be a torch.Tensor (got {type(tensor).__name__})")
    return (_apply_cos_sin_op(q, cos, sin, style, "forward", rounding, unsqueeze_dim),
            _apply_cos_sin_op(k, cos, sin, style, "forward", rounding, unsqueeze_dim))


def apply_rotary_pos_emb_interleave(q, k, cos, sin, position_ids=None, unsqueeze_dim: int = 1, *,
                                    rounding: str = "like_torch"):
    """DeepSeek-V3's apply_rotary_pos_emb_interleave (modeling_deepseek_v3) through rotary's kernel.

    q, k hold interleaved pairs (x0, x1), (x2, x3), ...; cos, sin are cat(f, f) ([batch, seq, dim],
    as DeepseekV3RotaryEmbedding returns them). The result is de-interleaved as transformers returns
    it: cat(x_even * cos - x_odd * sin, x_odd * cos + x_even * sin), bit-identical with
    rounding="like_torch"."""
    half = cos.shape[-1] // 2
    cos = cos[..., :half].repeat_interleave(2, dim=-1)  # the gptj layout: each pair's value twice
    sin = sin[..., :half].repeat_interleave(2, dim=-1)
    q_out, k_out = apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=unsqueeze_dim, rounding=rounding,
                                        style="gptj")
    return (torch.cat((q_out[..., 0::2], q_out[..., 1::2]), dim=-1),
            torch.cat((k_out[..., 0::2], k_out[..., 1::2]), dim=-1))


def apply_multimodal_rotary_pos_emb(q, k, cos, sin, mrope_section, unsqueeze_dim: int = 1, *,
                                    rounding: str = "like_torch"):
    """Qwen2-VL's apply_multimodal_rotary_pos_emb (M-RoPE) through rotary's kernel.

    cos, sin: [3, batch, seq, dim] (one row per position stream t, h, w, as Qwen2VLRotaryEmbedding
    returns them); section i of mrope_section * 2 reads stream i % 3 (an exact selection), then the
    rotation is apply_rotary_pos_emb's."""
    sections = list(mrope_section) * 2
    cos = torch.cat([m[i % 3] for i, m in enumerate(cos.split(sections, dim=-1))], dim=-1)
    sin = torch.cat([m[i % 3] for i, m in enumerate(sin.split(sections, dim=-1))], dim=-1)
    return apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=unsqueeze_dim, rounding=rounding)


# ---- Hugging Face's float32 inv_freq, in torch ops ------------------------------------------------
def hf_inv_freq(spec: Spec, seq_len: Optional[int] = None) -> torch.Tensor:
    """transformers' float32 inv_freq for the spec (at seq_len for dynamic NTK / LongRoPE), computed
    with the same torch operations in the same order as ROPE_INIT_FUNCTIONS, so that the values are
    bit-identical (torch's pow differs from glibc's in the last bit for ~1% of entries, which the
    C++ chain, detail::hf_inv_freq_f32, cannot reproduce)."""
    dim = spec.rotary_dim
    base = spec.theta_base
    rope_type = spec.rope_type
    exponent = torch.arange(0, dim, 2, dtype=torch.int64).to(dtype=torch.float) / dim
    if spec.axes == "vision2d":
        half = torch.arange(0, dim // 2, 2, dtype=torch.float) / (dim // 2)
        inv = 1.0 / (base ** half)
        return torch.cat([inv, inv])
    if rope_type in ("default", "ntk_alpha"):
        if rope_type == "ntk_alpha":
            base = spec.frequencies().effective_theta_base
        return 1.0 / (base ** exponent)
    if rope_type == "linear":
        return (1.0 / (base ** exponent)) / spec.factor
    if rope_type == "dynamic":
        limit = spec.max_position_embeddings
        factor = spec.factor
        if seq_len is None or seq_len <= limit:
            # transformers at construction (and reset): seq_len = max_position_embeddings, Python floats.
            base = base * ((factor * limit / limit) - (factor - 1)) ** (dim / (dim - 2))
            return 1.0 / (base ** exponent)
        seq = torch.tensor(seq_len, dtype=torch.int64)
        new_base = base * ((spec.factor * seq / limit) - (spec.factor - 1)) ** (dim / (dim - 2))
        return 1.0 / (new_base ** exponent)
    if rope_type == "yarn":
        factor = spec.frequencies(seq_len).effective_factor
        low, high = spec._native.yarn_correction_range()
        if low == high:
            high += 0.001
        pos_freqs = base ** (torch.arange(0, dim, 2).to(dtype=torch.float) / dim)
        extrapolation = 1.0 / pos_freqs
        interpolation = 1.0 / (factor * pos_freqs)
        ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
        extrapolation_factor = 1 - ramp
        return interpolation * (1 - extrapolation_factor) + extrapolation * extrapolation_factor
    if rope_type == "longrope":
        use_long = seq_len is not None and seq_len > spec.original_context
        factors = spec._native.long_factor if use_long else spec._native.short_factor
        ext = torch.tensor(factors, dtype=torch.float32)
        shape = torch.arange(0, dim, 2, dtype=torch.int64).float() / dim
        return 1.0 / (ext * base**shape)
    if rope_type == "llama3":
        inv = 1.0 / (base ** exponent)
        factor = spec.factor
        low_ff, high_ff = spec._native.low_freq_factor, spec._native.high_freq_factor
        original = spec.original_max_position_embeddings
        low_wavelen = original / low_ff
        high_wavelen = original / high_ff
        wavelen = 2 * math.pi / inv
        inv_llama = torch.where(wavelen > low_wavelen, inv / factor, inv)
        smooth = (original / wavelen - low_ff) / (high_ff - low_ff)
        smoothed = (1 - smooth) * inv_llama / factor + smooth * inv_llama
        medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
        return torch.where(medium, smoothed, inv_llama)
    if rope_type == "proportional":
        head_dim = spec.head_dim
        rope_angles = int(spec.partial_rotary_factor * head_dim // 2)
        inv_rot = 1.0 / (base ** (torch.arange(0, 2 * rope_angles, 2, dtype=torch.int64).to(dtype=torch.float) / head_dim))
        nope = head_dim // 2 - rope_angles
        inv = torch.cat((inv_rot, torch.zeros(nope, dtype=torch.float32))) if nope > 0 else inv_rot
        return inv / (spec.factor or 1.0)
    raise RotaryError(f"hf_inv_freq: rope_type {rope_type!r} has no Hugging Face float32 chain")


class RotaryEmbedding(torch.nn.Module):
    """Hugging Face's rotary-embedding module (LlamaRotaryEmbedding and its kin), by rotary.

    forward(x, position_ids) -> (cos, sin), each [batch, seq, rotary_dim] in x's dtype (M-RoPE:
    position_ids [3, batch, seq] give [3, batch, seq, rotary_dim], one row per stream, as
    Qwen2VLRotaryEmbedding), with the attention scaling applied, dynamic NTK growing and
    resetting and LongRoPE switching factor sets exactly as transformers' dynamic_rope_update does.
      precision="hf":    transformers' float32 chain (hf_inv_freq, float32 matmul, cos, sin):
                         bit-identical to transformers.
      precision="exact": correctly rounded float32 cos/sin from rotary's exact table.
    config: a transformers config, a config dict or path, or a rotary.Spec.
    cos_sin_layout: how each pair's value is laid out along rotary_dim: "neox" cat(f, f), "gptj"
    each value twice in a row; None: the spec's style. DeepSeek-V3 rotates interleaved pairs but its
    module returns cat(f, f) (its apply function takes the first half): "neox" there.
    """

    def __init__(self, config=None, device=None, *, precision: str = "hf", layer_type: Optional[str] = None,
                 cos_sin_layout: Optional[str] = None):
        super().__init__()
        if precision not in ("hf", "exact"):
            raise RotaryError(f"precision must be 'hf' or 'exact' (got {precision!r})")
        if cos_sin_layout not in (None, "neox", "gptj"):
            raise RotaryError(f"cos_sin_layout must be None, 'neox' or 'gptj' (got {cos_sin_layout!r})")
        spec = config if isinstance(config, Spec) else Spec.from_hf_config(config, layer_type=layer_type)
        self.spec = spec
        self.cos_sin_layout = cos_sin_layout or spec.style
        self.precision = precision
        self.rope_type = spec.rope_type
        self.max_seq_len_cached = spec.max_position_embeddings
        self.original_max_seq_len = spec.original_context
        self._cache = _rotary.RopeCache(spec._native, precision)
        self._current = self._cache.table_for(0)
        inv_freq = hf_inv_freq(spec) if precision == "hf" else torch.from_numpy(Table._wrap(self._current, spec).inv_freq_f32)
        self.register_buffer("inv_freq", inv_freq.to(device) if device is not None else inv_freq, persistent=False)
        self.original_inv_freq = self.inv_freq
        self.attention_scaling = self._current.attention_scaling

    @torch.no_grad()
    def forward(self, x: torch.Tensor, position_ids: torch.Tensor):
        if position_ids.is_floating_point():
            raise RotaryError(f"position_ids must hold integers (got dtype {position_ids.dtype})")
        self._update(position_ids)
        if self.precision == "hf":
            # transformers' LlamaRotaryEmbedding.forward, operation for operation (M-RoPE's
            # [3, batch, seq] position_ids: Qwen2VLRotaryEmbedding's, one more leading axis).
            lead = tuple(position_ids.shape[:-1])
            inv_freq_expanded = self.inv_freq.float().reshape((1,) * len(lead) + (-1, 1)).expand(*lead, -1, 1)
            inv_freq_expanded = inv_freq_expanded.to(x.device)
            position_ids_expanded = position_ids.unsqueeze(-2).float()
            device_type = x.device.type if isinstance(x.device.type, str) and x.device.type != "mps" else "cpu"
            with torch.autocast(device_type=device_type, enabled=False):
                freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(-1, -2)
                if self.cos_sin_layout == "neox":
                    emb = torch.cat((freqs, freqs), dim=-1)
                else:
                    emb = freqs.repeat_interleave(2, -1)
                cos = emb.cos() * self.attention_scaling
                sin = emb.sin() * self.attention_scaling
            return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)
        table = Table._wrap(self._current, self.spec)
        # Every pair at each given position (M-RoPE: per stream; the apply function picks sections).
        cos, sin = table.rows(position_ids.detach().cpu().numpy())
        cos, sin = _expand(cos, self.cos_sin_layout), _expand(sin, self.cos_sin_layout)
        return (torch.from_numpy(cos).to(device=x.device, dtype=x.dtype),
                torch.from_numpy(sin).to(device=x.device, dtype=x.dtype))

    def _update(self, position_ids: torch.Tensor) -> None:
        """dynamic_rope_update: the table for this call's largest position (RopeCache keeps
        transformers' grow / reset / long-short rules)."""
        if self.rope_type not in ("dynamic", "longrope"):
            return
        max_position = int(position_ids.max())
        table = self._cache.table_for(max_position)
        if table is self._current:
            return
        self._current = table
        self.max_seq_len_cached = max(self._cache.max_seq_len_cached, self.spec.max_position_embeddings)
        if self.precision == "hf":
            seq_len = max_position + 1
            # Back to the original frequencies (dynamic NTK's reset, LongRoPE's short factors):
            # transformers re-registers its original_inv_freq buffer, in whatever dtype the model
            # cast it to (patch_model carries that dtype over).
            if (self.rope_type == "dynamic" and seq_len <= self.spec.max_position_embeddings) or (
                    self.rope_type == "longrope" and seq_len <= self.spec.original_context):
                inv = self.original_inv_freq
            else:
                inv = hf_inv_freq(self.spec, seq_len)
            self.register_buffer("inv_freq", inv.to(self.inv_freq.device), persistent=False)
        else:
            self.register_buffer("inv_freq", torch.from_numpy(Table._wrap(table, self.spec).inv_freq_f32),
                                 persistent=False)
        self.attention_scaling = table.attention_scaling


def patch_model(model, *, precision: str = "hf", rounding: Optional[str] = None):
    """Replaces a transformers model's rotary-embedding modules by RotaryEmbedding and its
    modeling module's apply functions by rotary's (rounding 'like_torch' for precision 'hf',
    'once' for 'exact'): apply_rotary_pos_emb (in the pair style of the model's cos/sin),
    apply_rotary_pos_emb_interleave (DeepSeek-V3 and its kin) and apply_multimodal_rotary_pos_emb
    (Qwen2-VL's M-RoPE). Rotary-embedding modules without a config (vision towers' position
    embeddings) are left alone. Returns the list of what was replaced. The module-level functions
    are replaced in the model's modeling_* module, so every model of that class in the process
    uses them."""
    import functools
    import sys

    rounding = rounding or ("like_torch" if precision == "hf" else "once")
    modeling = sys.modules[type(model).__module__]
    # DeepSeek-style modules return cat(f, f) although the pairs are interleaved (see RotaryEmbedding).
    layout = "neox" if hasattr(modeling, "apply_rotary_pos_emb_interleave") else None
    replacements = []
    for name, module in list(model.named_modules()):
        if not type(module).__name__.endswith("RotaryEmbedding") or isinstance(module, RotaryEmbedding):
            continue
        if getattr(module, "config", None) is None:
            # Not a text rotary-embedding module (forward(x, position_ids) built from a config):
            # e.g. Qwen2-VL's VisionRotaryEmbedding(dim, theta), forward(seqlen). Left as it is.
            continue
        new = RotaryEmbedding(module.config, precision=precision, cos_sin_layout=layout)
        old_inv_freq = getattr(module, "inv_freq", None)
        if isinstance(old_inv_freq, torch.Tensor):
            # The module being replaced may have been cast with the model (model.to(bfloat16)
            # casts buffers): carry its buffer's dtype and device over, as transformers would
            # compute with them.
            new.inv_freq = new.inv_freq.to(device=old_inv_freq.device, dtype=old_inv_freq.dtype)
        old_original = getattr(module, "original_inv_freq", None)
        if isinstance(old_original, torch.Tensor):  # a buffer too: cast alike (dynamic reset, LongRoPE short)
            new.original_inv_freq = new.original_inv_freq.to(device=old_original.device, dtype=old_original.dtype)
        replacements.append((name, new))
    styles = {new.cos_sin_layout for _, new in replacements}
    if len(styles) > 1:
        raise RotaryError(f"patch_model: the model's rotary embeddings mix pair styles {sorted(styles)}; "
                          "one module-level apply_rotary_pos_emb cannot serve both")
    replaced = []
    for name, new in replacements:
        parent_name, _, attr = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, attr, new)
        replaced.append(name)
    # apply_rotary_pos_emb rotates pairs as the model's cos/sin are laid out (Cohere: interleaved).
    style = styles.pop() if styles else "neox"
    functions = {"apply_rotary_pos_emb": functools.partial(apply_rotary_pos_emb, rounding=rounding, style=style),
                 "apply_rotary_pos_emb_interleave": functools.partial(apply_rotary_pos_emb_interleave,
                                                                      rounding=rounding),
                 "apply_multimodal_rotary_pos_emb": functools.partial(apply_multimodal_rotary_pos_emb,
                                                                      rounding=rounding)}
    for fn_name, fn in functions.items():
        if hasattr(modeling, fn_name):
            setattr(modeling, fn_name, fn)
            replaced.append(f"{modeling.__name__}.{fn_name}")
    return replaced
