"""rotary.torch.attention (the torch custom op ``rotary::attention``) and the transformers attention
backend ``attn_implementation="rotary"`` (register_attention). Re-exported by rotary.torch.

Both run include/rotary/attention.hpp's kernels on CPU tensors through the descriptors of
rotary/_views.py (no copy): float32 / bfloat16 / float16 on the SIMD fast path, float64 on the
float64 reference. Gradients: the dense attention backward recomputed in torch (float32, float64
for float64 tensors; O(q_len x kv_len) memory per head), through rotary's backward rotation for
fused RoPE (docs/python-torch.md, "Attention").

torch.compile: the ops have fake implementations (the output's shape and dtype), so a compiled
graph keeps them as single nodes (fullgraph=True works); everything that reads values (positions,
lengths, the transformers mask) runs inside the op, eagerly.

The transformers backend (docs/attention.md, "The transformers backend"): transformers builds a
boolean mask (its own sdpa_mask, registered for "rotary" too) and calls the attention function with
rotated q and k (models apply RoPE before their KV cache). The backend reads the mask into rotary's
terms (per sequence: the visible key range, the causal offset, the module's sliding window), checks
that those terms reproduce the mask element for element, and refuses with RotaryError when they do
not; a mask is never dropped.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from . import _handles, _rotary
from ._attention import (
    FusedRope,
    check_causal,
    floats_descriptor,
    fused_rope_terms,
    optional_scale,
    output_shape,
    prepare,
    table_descriptor,
)
from ._rotary import RotaryError
from ._backends import check_on_cpu, register_backend, select_backend
from ._table import PRECISIONS, check_source
from ._torch_ops import _DTYPES, eager_tensors
from ._views import check_implementation, check_layout, int_arg, ints_descriptor
# The transformers mask as rotary's per-row terms (read here by the fused backend and the tests).
from ._attention_masks import _RowPlan, _boolean_mask, _mask_plans, _plan_rows  # noqa: F401
from ._attention_masks import top_left_for_missing_mask

_OP_NAME = "rotary::attention"


def _descriptor(tensor: torch.Tensor, name: str, layout: str):
    dtype = _DTYPES.get(tensor.dtype)
    if dtype is None:
        raise RotaryError(f"{name} dtype must be float32, bfloat16, float16 or float64 (got {tensor.dtype})")
    return (tensor.data_ptr(), dtype, layout, tuple(tensor.shape), tuple(tensor.stride()))


def _host(tensor: Optional[torch.Tensor]) -> Optional[np.ndarray]:
    return None if tensor is None else tensor.detach().to("cpu").numpy()


def _run(q, k, v, out, *args) -> None:  # the backend of q's device writes out (_backends.py); args: as below
    select_backend(q, "reference" if args[17] == "reference" else None, op="attention").attention(q, k, v, out, *args)


def _attention_native(q, k, v, out, query_offsets, kv_lengths, cu_seqlens_q, cu_seqlens_k, q_positions, k_positions,
                      alibi_slopes, absolute, source, precision, scale, causal, window, query_offset, layout,
                      rotary_offset, seq_len, implementation, kv_starts=None) -> None:
    """The CPU backend: checks the call (Python buffers here, the rest in C++) and writes out."""
    spec_or_table = _handles.lookup(source) if source else None
    prepared = prepare(tuple(q.shape), tuple(k.shape), layout, query_offset=query_offset,
                       query_offsets=_host(query_offsets), kv_lengths=_host(kv_lengths),
                       cu_seqlens_q=_host(cu_seqlens_q), cu_seqlens_k=_host(cu_seqlens_k),
                       spec_or_table=spec_or_table, q_positions=_host(q_positions), k_positions=_host(k_positions),
                       precision=precision or None, seq_len=None if seq_len < 0 else seq_len,
                       alibi_slopes=_host(alibi_slopes), absolute=_host(absolute), kv_starts=_host(kv_starts))
    f64 = torch.float64 in (q.dtype, k.dtype, v.dtype, out.dtype)
    _rotary.attention(_descriptor(q, "q", layout), _descriptor(k, "k", layout), _descriptor(v, "v", layout),
                      _descriptor(out, "out", layout), scale, causal, query_offset,
                      ints_descriptor(prepared.query_offsets), window, ints_descriptor(prepared.kv_lengths),
                      ints_descriptor(prepared.cu_seqlens_q), ints_descriptor(prepared.cu_seqlens_k),
                      prepared.native_table, ints_descriptor(prepared.q_positions),
                      ints_descriptor(prepared.k_positions), rotary_offset, prepared.seq_len,
                      "reference" if f64 or implementation == "reference" else "kernels",
                      floats_descriptor(prepared.alibi_slopes), table_descriptor(prepared.absolute),
                      ints_descriptor(prepared.kv_starts))


register_backend("native", {"cpu"}, attention=_attention_native, default_for=("cpu",))
register_backend("reference", {"cpu"}, attention=_attention_native)  # chosen by, and runs, implementation="reference"


# ---- the custom op ----------------------------------------------------------------------------------
# source: a Spec's or Table's handle, "" = no fused RoPE; precision "" = the default; seq_len -1 =
# the call's largest position + 1. kv_starts comes last (it came last), with a default.
@torch.library.custom_op(_OP_NAME, mutates_args=())
def _attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, query_offsets: Optional[torch.Tensor],
                  kv_lengths: Optional[torch.Tensor], cu_seqlens_q: Optional[torch.Tensor],
                  cu_seqlens_k: Optional[torch.Tensor], q_positions: Optional[torch.Tensor],
                  k_positions: Optional[torch.Tensor], alibi_slopes: Optional[torch.Tensor],
                  absolute: Optional[torch.Tensor], source: str, precision: str, scale: Optional[float],
                  causal: bool, window: int, query_offset: int, layout: str, rotary_offset: int, seq_len: int,
                  implementation: str, kv_starts: Optional[torch.Tensor] = None) -> torch.Tensor:
    out = torch.empty(output_shape(q.shape, v.shape), dtype=q.dtype, device=q.device)
    _run(q, k, v, out, query_offsets, kv_lengths, cu_seqlens_q, cu_seqlens_k, q_positions, k_positions, alibi_slopes,
         absolute, source, precision, scale, causal, window, query_offset, layout, rotary_offset, seq_len,
         implementation, kv_starts)
    return out


@_attention_op.register_fake
def _(q, k, v, query_offsets, kv_lengths, cu_seqlens_q, cu_seqlens_k, q_positions, k_positions, alibi_slopes,
      absolute, source, precision, scale, causal, window, query_offset, layout, rotary_offset, seq_len,
      implementation, kv_starts=None):
    return q.new_empty(output_shape(q.shape, v.shape))


# ---- backward ---------------------------------------------------------------------------------------
# The gradient of o = softmax(scale q k^T + mask) v (FlashAttention-2, Dao 2023, Algorithm 2, in its
# dense form): with P the softmax weights (0 where masked; a row that sees no key has P = 0 and
# o = 0, so its gradient is 0),
#   dV = P^T dO,   dP = dO V^T,   dS = P * (dP - rowsum(dO * O)),   dQ = scale dS K,   dK = scale dS^T Q
# summed over the q heads of each kv head (GQA). P is recomputed in torch from q, k and the mask
# (O(q_len x kv_len) memory per head: a backward for training-sized sequences, not a kernel), in
# float32 (float64 for float64 tensors). With fused RoPE the forward is o(R_q q, R_k k): the
# gradients above are for the rotated q and k, and rotary's backward rotation (the transpose of
# R, apply_rotary(direction="backward"), same table and seq_len) carries them to q and k.
# ALiBi adds a constant bias b to the scores (s = scale q k^T + b): the formulas are unchanged with
# b in the recomputed P. An absolute table: the forward is o(q + P[pos_q], k + P[pos_k]), so dq and
# dk pass through the add unchanged, and the table's gradient is their scatter-add by position
# (dP[r] = sum over q tokens at r of dq + sum over k tokens at r of dk, over every head).
# Scores formed at a time in the backward, as elements of [batch, heads, query block, keys]: the
# query axis is cut into blocks of at most this many scores, so the backward's memory grows with
# the sequence, not with its square (a 4,096-token Llama-3-8B prefill's full float32 weights are
# 2 GiB; a block here is 64 MiB, and four temporaries of that size are live at once). Each query
# row's softmax needs only its own row of scores, so a block is exact; dk and dv are sums over the
# blocks in the compute dtype (only their summation order changes: in float64, blocks of 1-3 rows
# equal one block to 1e-12 relative, test_backward_in_query_blocks_equals_one_block; docs/attention.md,
# "Python, torch and the transformers backend").
_BACKWARD_BLOCK_SCORES = 1 << 24


def _dense_grads(q, k, v, grad_out, visible, scale, bias=None):
    """q [b, h, s_q, d], k [b, g, s_k, d], v [b, g, s_k, d_v], grad_out [b, h, s_q, d_v] (compute
    dtype), visible bool broadcastable to [b, h, s_q, s_k], bias (ALiBi) None or broadcastable to
    it: (dq, dk, dv) in the compute dtype. The softmax is recomputed per block of query rows
    (_BACKWARD_BLOCK_SCORES)."""
    group = q.shape[1] // k.shape[1]
    k_rep = k.repeat_interleave(group, dim=1)  # head h reads kv head h // group (repeat_kv)
    v_rep = v.repeat_interleave(group, dim=1)
    batch, heads, q_len = q.shape[0], q.shape[1], q.shape[2]
    kv_len = k.shape[2]
    block = max(1, _BACKWARD_BLOCK_SCORES // max(1, batch * heads * kv_len))
    dq = torch.empty(q.shape, dtype=q.dtype)
    dk_rep = torch.zeros(k_rep.shape, dtype=q.dtype)
    dv_rep = torch.zeros(v_rep.shape, dtype=q.dtype)

    def rows(t, i0, i1):  # a mask / bias term's rows i0..i1 (it may broadcast over queries)
        return t if t.shape[2] == 1 else t[:, :, i0:i1]

    for i0 in range(0, q_len, block):
        i1 = min(q_len, i0 + block)
        q_b, g_b = q[:, :, i0:i1], grad_out[:, :, i0:i1]
        scores = scale * (q_b @ k_rep.transpose(-1, -2))
        if bias is not None:
            scores = scores + rows(bias, i0, i1)
        scores = scores.masked_fill(~rows(visible, i0, i1), float("-inf"))
        weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # fully masked rows: 0
        del scores
        out = weights @ v_rep
        dv_rep += weights.transpose(-1, -2) @ g_b
        d_weights = g_b @ v_rep.transpose(-1, -2)
        d_scores = weights * (d_weights - (g_b * out).sum(-1, keepdim=True))
        del weights, d_weights
        dq[:, :, i0:i1] = scale * (d_scores @ k_rep)
        dk_rep += scale * (d_scores.transpose(-1, -2) @ q_b)
    fold = lambda t: t.reshape(t.shape[0], k.shape[1], group, *t.shape[2:]).sum(2)  # noqa: E731
    return dq, fold(dk_rep), fold(dv_rep)


def _to_bhsd(t, layout):
    return {"bhsd": t, "bshd": t.transpose(1, 2), "sbhd": t.permute(1, 2, 0, 3)}[layout]


def _from_bhsd(t, layout):
    return {"bhsd": t, "bshd": t.transpose(1, 2), "sbhd": t.permute(2, 0, 1, 3)}[layout]


def _visible(batch, q_len, kv_len, causal, window, offsets, kv_starts, kv_lengths, device):
    """attention.hpp's mask, [batch, 1, q_len, kv_len]: kv_start(b) <= key j < kv_length(b); j <= p
    if causal; p - j < window if window > 0; p = offset_b + i."""
    i = torch.arange(q_len, device=device).view(1, 1, q_len, 1)
    j = torch.arange(kv_len, device=device).view(1, 1, 1, kv_len)
    p = i + offsets.view(batch, 1, 1, 1)
    visible = (j >= kv_starts.view(batch, 1, 1, 1)) & (j < kv_lengths.view(batch, 1, 1, 1))
    if causal:
        visible = visible & (j <= p)
    if window > 0:
        visible = visible & (p - j < window)
    return visible


def _attention_setup(ctx, inputs, output):
    (q, k, v, query_offsets, kv_lengths, cu_seqlens_q, cu_seqlens_k, q_positions, k_positions, alibi_slopes, absolute,
     source, precision, scale, causal, window, query_offset, layout, rotary_offset, seq_len, implementation,
     kv_starts) = inputs
    ctx.save_for_backward(q, k, v, query_offsets, kv_lengths, cu_seqlens_q, cu_seqlens_k, q_positions, k_positions,
                          alibi_slopes, absolute, kv_starts)
    ctx.source = _handles.lookup(source) if source else None  # alive until backward
    ctx.args = (source, precision, scale, causal, window, query_offset, layout, rotary_offset, seq_len)


def _rope_positions(positions, batch, seq, offsets):
    """Per-token positions [batch, seq] of one call: given ([batch, seq], [1, seq], [seq]), or the
    mask's (offset_b + i)."""
    if positions is not None:
        return positions.reshape(-1, seq).expand(batch, seq).to(torch.int64)
    return torch.arange(seq, dtype=torch.int64).view(1, seq) + offsets.view(batch, 1)


def _attention_backward(ctx, grad_out):
    (q, k, v, query_offsets, kv_lengths, cu_seqlens_q, cu_seqlens_k, q_positions, k_positions, alibi_slopes,
     absolute, kv_starts) = ctx.saved_tensors
    dq, dk, dv, d_table = _attention_backward_op(q, k, v, grad_out.contiguous(), query_offsets, kv_lengths,
                                                 cu_seqlens_q, cu_seqlens_k, q_positions, k_positions, alibi_slopes,
                                                 absolute, *ctx.args, kv_starts)
    # Inputs: q, k, v, 4 sequence tensors, 2 positions, alibi_slopes (no gradient: the wrapper
    # refuses slopes that require one), absolute, then 10 non-tensor arguments and kv_starts.
    return (dq, dk, dv) + (None,) * 7 + (d_table if absolute is not None else None,) + (None,) * 11


# The backward runs as an op of its own: it reads values (cu_seqlens, positions, the table), which
# torch.compile's traced backward graph cannot; as an op with a fake implementation it stays one
# node there, as the forward does.
@torch.library.custom_op("rotary::attention_backward", mutates_args=())
def _attention_backward_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, grad_out: torch.Tensor,
                           query_offsets: Optional[torch.Tensor], kv_lengths: Optional[torch.Tensor],
                           cu_seqlens_q: Optional[torch.Tensor], cu_seqlens_k: Optional[torch.Tensor],
                           q_positions: Optional[torch.Tensor], k_positions: Optional[torch.Tensor],
                           alibi_slopes: Optional[torch.Tensor], absolute: Optional[torch.Tensor], source: str,
                           precision: str, scale: Optional[float], causal: bool, window: int, query_offset: int,
                           layout: str, rotary_offset: int, seq_len: int, kv_starts: Optional[torch.Tensor] = None,
                           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv, d_table); d_table is empty [0] without an absolute table."""
    compute = torch.float64 if torch.float64 in (q.dtype, k.dtype, v.dtype) else torch.float32
    if layout == "thd":
        segments = []  # (q slice, k slice, offset, q positions, k positions) per cu_seqlens segment
        cu_q, cu_k = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
        for n in range(len(cu_q) - 1):
            offset = int(query_offsets[n]) if query_offsets is not None else query_offset
            qs, ks = slice(cu_q[n], cu_q[n + 1]), slice(cu_k[n], cu_k[n + 1])
            segments.append((qs, ks, offset, None if q_positions is None else q_positions.reshape(-1)[qs],
                             None if k_positions is None else k_positions.reshape(-1)[ks]))
        views = [(t.unsqueeze(0), "bshd") for t in (q, k, v, grad_out)]
    else:
        segments = [(slice(None), slice(None), None, q_positions, k_positions)]
        views = [(t, layout) for t in (q, k, v, grad_out)]
    dq = torch.zeros(q.shape, dtype=compute)
    dk = torch.zeros(k.shape, dtype=compute)
    dv = torch.zeros(v.shape, dtype=compute)
    grads = [(dq.unsqueeze(0), "bshd"), (dk.unsqueeze(0), "bshd"), (dv.unsqueeze(0), "bshd")] if layout == "thd" \
        else [(dq, layout), (dk, layout), (dv, layout)]
    spec_or_table = _handles.lookup(source) if source else None
    # Each segment's tensors in BHSD, its mask terms and (fused RoPE) its positions; the seq_len of
    # the rotation is the whole call's (its largest position + 1, as the forward's), not a segment's.
    parts = []
    for qs, ks, offset, q_pos, k_pos in segments:
        sel_q = (slice(None), qs) if layout == "thd" else (slice(None),)
        sel_k = (slice(None), ks) if layout == "thd" else (slice(None),)
        tq, tk, tv, tg = (_to_bhsd(t[sel], lay).to(compute) for (t, lay), sel in
                          zip(views, (sel_q, sel_k, sel_k, sel_q)))
        batch, q_len, kv_len = tq.shape[0], tq.shape[2], tk.shape[2]
        if layout == "thd":  # (kv_starts are refused with thd)
            offsets = torch.tensor([offset])
            starts = torch.tensor([0])
            lengths = torch.tensor([kv_len])
        else:
            offsets = query_offsets.to(torch.int64) if query_offsets is not None else \
                torch.full((batch,), query_offset, dtype=torch.int64)
            starts = kv_starts.to(torch.int64) if kv_starts is not None else torch.zeros(batch, dtype=torch.int64)
            lengths = kv_lengths.to(torch.int64) if kv_lengths is not None else torch.full((batch,), kv_len)
        pq = pk = None
        if spec_or_table is not None or absolute is not None:
            pq = _rope_positions(q_pos, batch, q_len, offsets)
            pk = _rope_positions(k_pos, batch, kv_len, torch.zeros(batch, dtype=torch.int64))
        parts.append((sel_q, sel_k, tq, tk, tv, tg, offsets, starts, lengths, pq, pk))
    call_seq_len = seq_len
    if spec_or_table is not None and seq_len < 0:
        call_seq_len = 1 + max([int(p.max()) for part in parts for p in part[9:] if p.numel()] or [-1])
    from ._torch_ops import apply_rotary

    rope = dict(layout="bhsd", precision=precision or None, rotary_offset=rotary_offset, seq_len=call_seq_len)
    table = None if absolute is None else absolute.to(compute)  # float32 values widened, as the reference
    d_table = torch.zeros(table.shape if table is not None else (0,), dtype=compute)
    slopes = None if alibi_slopes is None else alibi_slopes.to(torch.float32).to(compute)
    for sel_q, sel_k, tq, tk, tv, tg, offsets, starts, lengths, pq, pk in parts:
        if spec_or_table is not None:
            tq = apply_rotary(tq, None, pq, spec_or_table, **rope)[0]
            tk = apply_rotary(tk, None, pk, spec_or_table, **rope)[0]
        if table is not None:
            tq = tq + table[pq].unsqueeze(1)  # [batch, 1, seq, d]: every head adds its token's row
            tk = tk + table[pk].unsqueeze(1)
        batch, heads, q_len, head_dim = tq.shape
        kv_len = tk.shape[2]
        visible = _visible(batch, q_len, kv_len, causal, window, offsets, starts, lengths, tq.device)
        bias = None
        if slopes is not None:  # -slope_h |p_i - j|, p_i = offset_b + i (attention.hpp)
            p = torch.arange(q_len).view(1, 1, q_len, 1) + offsets.view(batch, 1, 1, 1)
            distance = (p - torch.arange(kv_len).view(1, 1, 1, kv_len)).abs().to(compute)
            bias = -slopes.view(1, heads, 1, 1) * distance
        used_scale = scale if scale is not None else 1.0 / (head_dim ** 0.5)
        gq, gk, gv = _dense_grads(tq, tk, tv, tg, visible, used_scale, bias)
        if spec_or_table is not None:
            gq = apply_rotary(gq, None, pq, spec_or_table, direction="backward", **rope)[0]
            gk = apply_rotary(gk, None, pk, spec_or_table, direction="backward", **rope)[0]
        if table is not None:
            d_table.index_add_(0, pq.reshape(-1), gq.sum(1).reshape(-1, head_dim))
            d_table.index_add_(0, pk.reshape(-1), gk.sum(1).reshape(-1, head_dim))
        for (target, lay), g, sel in zip(grads, (gq, gk, gv), (sel_q, sel_k, sel_k)):
            target[sel].copy_(_from_bhsd(g, lay))
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), d_table.to(torch.float32)


@_attention_backward_op.register_fake
def _(q, k, v, grad_out, query_offsets, kv_lengths, cu_seqlens_q, cu_seqlens_k, q_positions, k_positions,
      alibi_slopes, absolute, source, precision, scale, causal, window, query_offset, layout, rotary_offset, seq_len,
      kv_starts=None):
    d_table = absolute.new_empty(absolute.shape) if absolute is not None else q.new_empty((0,), dtype=torch.float32)
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape), d_table


_attention_op.register_autograd(_attention_backward, setup_context=_attention_setup)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
              scale: Optional[float] = None, window: int = 0, query_offset: int = 0,
              query_offsets: Optional[torch.Tensor] = None, kv_lengths: Optional[torch.Tensor] = None,
              kv_starts: Optional[torch.Tensor] = None, cu_seqlens_q: Optional[torch.Tensor] = None,
              cu_seqlens_k: Optional[torch.Tensor] = None, layout: str = "bhsd", rope: Optional[FusedRope] = None,
              spec_or_table=None, q_positions: Optional[torch.Tensor] = None,
              k_positions: Optional[torch.Tensor] = None, rotary_offset: int = 0, precision: Optional[str] = None,
              seq_len: Optional[int] = None, alibi_slopes: Optional[torch.Tensor] = None,
              absolute: Optional[torch.Tensor] = None, out: Optional[torch.Tensor] = None,
              implementation: str = "kernels") -> torch.Tensor:
    """rotary.attention for torch CPU tensors: the custom op ``rotary::attention`` (torch.compile
    keeps it as one node; fake implementation for the shapes). Same arguments and rules as
    rotary.attention (the NumPy function); the integer arguments (query_offsets, kv_lengths,
    kv_starts, cu_seqlens_*, positions) are integer tensors. Fused RoPE: rope=rotary.FusedRope(spec,
    q_positions=, k_positions=, rotary_offset=, precision=, seq_len=), positions as integer tensors
    (the six as flat keywords are deprecated: they warn, and work as before). float32 / bfloat16 /
    float16 run the SIMD kernels, float64 the float64 reference. out: a tensor of q's shape with v's head dim and q's
    dtype to write into (no autograd). Gradients: the dense attention backward recomputed in torch
    (O(q_len x kv_len) memory per head), through rotary's backward rotation for fused RoPE.
    alibi_slopes: a floating tensor [q_heads] (rounded to float32; no gradient: a slopes tensor
    that requires one is refused). absolute: a float32 tensor [rows, head_dim], positions as for
    fused RoPE; it may require a gradient (the scatter-add of dq and dk by position).
    implementation: "kernels" (the SIMD fast path) or "reference" (the float64 definition): which
    numerics run, a different axis from the device backend (apply_rotary's backend=), which q's
    device picks here."""
    spec_or_table, q_positions, k_positions, rotary_offset, precision, seq_len = fused_rope_terms(
        "rotary.torch.attention", rope, spec_or_table, q_positions, k_positions, rotary_offset, precision, seq_len,
        absolute=absolute)
    check_layout(layout)
    check_implementation(implementation)
    causal = check_causal(causal)
    scale = optional_scale(scale)
    window = int_arg("window", window)
    query_offset = int_arg("query_offset", query_offset)
    rotary_offset = int_arg("rotary_offset", rotary_offset)
    named_seq_len = -1 if seq_len is None else int_arg("seq_len", seq_len, minimum=0)
    if precision is not None and precision not in PRECISIONS:
        raise RotaryError(f"precision must be 'exact' or 'hf' (got {precision!r})")
    for name, tensor in (("q", q), ("k", k), ("v", v)):
        if not isinstance(tensor, torch.Tensor):
            raise RotaryError(f"{name} must be a torch.Tensor (got {type(tensor).__name__})")
        if tensor.dtype not in _DTYPES:
            raise RotaryError(f"{name} dtype must be float32, bfloat16, float16 or float64 (got {tensor.dtype})")
    ints = (("query_offsets", query_offsets), ("kv_lengths", kv_lengths), ("kv_starts", kv_starts),
            ("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k), ("q_positions", q_positions),
            ("k_positions", k_positions))
    for name, tensor in ints:
        if tensor is not None and (not isinstance(tensor, torch.Tensor) or tensor.is_floating_point()
                                   or tensor.is_complex() or tensor.dtype == torch.bool):
            what = type(tensor).__name__ if not isinstance(tensor, torch.Tensor) else f"dtype {tensor.dtype}"
            raise RotaryError(f"{name} must be an integer torch.Tensor or None (got {what})")
    if alibi_slopes is not None:
        if not isinstance(alibi_slopes, torch.Tensor) or not alibi_slopes.is_floating_point() \
                or alibi_slopes.dim() != 1:
            what = type(alibi_slopes).__name__ if not isinstance(alibi_slopes, torch.Tensor) else \
                f"dtype {alibi_slopes.dtype}, shape {tuple(alibi_slopes.shape)}"
            raise RotaryError(f"alibi_slopes must be a 1-D floating torch.Tensor, one slope per q head (got {what})")
        if torch.is_grad_enabled() and alibi_slopes.requires_grad:
            raise RotaryError("alibi_slopes must not require a gradient (got requires_grad=True): rotary's attention "
                              "backward gives none for the slopes; pass alibi_slopes.detach()")
    if absolute is not None:
        if not isinstance(absolute, torch.Tensor) or absolute.dtype != torch.float32 or absolute.dim() != 2:
            what = type(absolute).__name__ if not isinstance(absolute, torch.Tensor) else \
                f"dtype {absolute.dtype}, shape {tuple(absolute.shape)}"
            raise RotaryError(f"absolute must be a float32 torch.Tensor [rows, head_dim] (got {what})")
    encodings = (("alibi_slopes", alibi_slopes), ("absolute", absolute))
    if q.device.type == "cuda":  # the Triton kernel (docs/gpu.md, "Attention"); what it lacks is refused by name
        from ._triton_attention import from_torch_attention
        fused = None if spec_or_table is None else FusedRope(spec_or_table, q_positions, k_positions, rotary_offset,
                                                               precision, seq_len)
        return from_torch_attention(q, k, v, dict(ints + encodings, out=out), causal=causal, scale=scale,
                                    window=window, query_offset=query_offset, layout=layout, rope=fused,
                                    implementation=implementation)
    if q.device.type != "meta":
        select_backend(q, "reference" if implementation == "reference" else None, op="attention")  # its named error
        check_on_cpu((("q", q), ("k", k), ("v", v)) + ints + encodings)
    source = "" if spec_or_table is None else check_source(spec_or_table)._handle
    args = (query_offsets, kv_lengths, cu_seqlens_q, cu_seqlens_k, q_positions, k_positions, alibi_slopes, absolute,
            source, precision or "", scale, causal, window, query_offset, layout, rotary_offset, named_seq_len,
            implementation, kv_starts)
    if out is not None:
        if not isinstance(out, torch.Tensor):
            raise RotaryError(f"out must be a torch.Tensor (got {type(out).__name__})")
        want = output_shape(q.shape, v.shape)
        if tuple(out.shape) != want or out.dtype != q.dtype:
            raise RotaryError(f"out must have shape {want} and dtype {q.dtype} (got shape {tuple(out.shape)}, "
                              f"{out.dtype})")
        if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (q, k, v, absolute)):
            raise RotaryError("out= does not record gradients (got q, k, v or absolute with requires_grad=True)")
        check_on_cpu((("out", out),))
        _run(q, k, v, out, *args)
        torch.autograd.graph.increment_version(out)
        return out
    table_grad = absolute is not None and torch.is_grad_enabled() and absolute.requires_grad
    if eager_tensors((q, k, v), tuple(t for _, t in ints + encodings)) and not table_grad:
        # Plain eager CPU call that records no gradient: the body without the op's dispatch (same checks, bits).
        result = torch.empty(output_shape(q.shape, v.shape), dtype=q.dtype)
        _run(q, k, v, result, *args)
        return result
    return _attention_op(q, k, v, *args)


# ---- the transformers backend -----------------------------------------------------------------------
def _hf_attention_impl(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Optional[torch.Tensor],
                       causal: bool, window: int, scale: Optional[float]) -> torch.Tensor:
    """q [b, h, q, d], k / v [b, kv_h, kv, d] (transformers' layout); returns [b, q, h, d_v]."""
    batch, heads, q_len, _ = q.shape
    kv_len = k.shape[2]
    out = torch.empty((batch, q_len, heads, v.shape[-1]), dtype=q.dtype)
    out_bhsd = out.transpose(1, 2)  # written in place through a strided view: no copy
    views = [_descriptor(t, name, "bhsd") for t, name in ((q, "q"), (k, "k"), (v, "v"), (out_bhsd, "out"))]
    f64 = q.dtype == torch.float64
    implementation = "reference" if f64 else "kernels"
    if mask is None:
        top_left = top_left_for_missing_mask(causal, window, q_len, kv_len)
        _rotary.attention(*views, scale, top_left, 0, None, 0, None, None, None, None, None, None, 0, -1,
                          implementation)
        return out
    plans = _mask_plans(mask, batch, q_len, kv_len, causal, window)
    if all(p is None or p.offset >= 0 for p in plans):
        # One call for the batch: left padding (keys before key_start hidden) through kv_starts; a
        # row whose queries see no key gets no visible key (zeros).
        starts = np.array([0 if p is None else p.key_start for p in plans], dtype=np.int64)
        lengths = np.array([0 if p is None else p.key_end for p in plans], dtype=np.int64)
        offsets = np.array([0 if p is None else p.offset for p in plans], dtype=np.int64)
        _rotary.attention(*views, scale, causal, 0, ints_descriptor(offsets), window, ints_descriptor(lengths), None,
                          None, None, None, None, 0, -1, implementation, kv_starts=ints_descriptor(starts))
        return out
    # Queries before every key of their row (a negative causal offset): one call per row on views
    # that start at the row's first visible key and query.
    for b, plan in enumerate(plans):
        if plan is None:
            out[b].zero_()
            continue
        offset = plan.offset - plan.key_start  # in the sliced key index space
        first_query = min(max(0, -offset), q_len) if causal else 0
        out[b, :first_query].zero_()
        if first_query == q_len:
            continue
        sub = lambda t, start, end: t[b:b + 1, :, start:end]  # noqa: E731
        row_views = [_descriptor(sub(q, first_query, q_len), "q", "bhsd"),
                     _descriptor(sub(k, plan.key_start, plan.key_end), "k", "bhsd"),
                     _descriptor(sub(v, plan.key_start, plan.key_end), "v", "bhsd"),
                     _descriptor(sub(out_bhsd, first_query, q_len), "out", "bhsd")]
        _rotary.attention(*row_views, scale, causal, offset + first_query, None, window, None, None, None, None, None,
                          None, 0, -1, implementation)
    return out


@torch.library.custom_op("rotary::hf_attention", mutates_args=())
def _hf_attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Optional[torch.Tensor], causal: bool,
                     window: int, scale: Optional[float]) -> torch.Tensor:
    return _hf_attention_impl(q, k, v, mask, causal, window, scale)


@_hf_attention_op.register_fake
def _(q, k, v, mask, causal, window, scale):
    return q.new_empty((q.shape[0], q.shape[2], q.shape[1], v.shape[-1]))


def _hf_attention_setup(ctx, inputs, output):
    q, k, v, mask, causal, window, scale = inputs
    ctx.save_for_backward(q, k, v, mask)
    ctx.args = (causal, scale)


def _hf_attention_backward(ctx, grad_out):
    q, k, v, mask = ctx.saved_tensors
    causal, scale = ctx.args
    dq, dk, dv = _hf_attention_backward_op(q, k, v, mask, grad_out.contiguous(), causal, scale)
    return dq, dk, dv, None, None, None, None


@torch.library.custom_op("rotary::hf_attention_backward", mutates_args=())
def _hf_attention_backward_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Optional[torch.Tensor],
                              grad_out: torch.Tensor, causal: bool,
                              scale: Optional[float]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The dense gradient of _dense_grads with the mask the forward computed: the model's mask
    (the forward checked that rotary's mask equals it), or SDPA's reading of None."""
    compute = torch.float64 if q.dtype == torch.float64 else torch.float32
    batch, heads, q_len, head_dim = q.shape
    kv_len = k.shape[2]
    if mask is not None:
        visible = _boolean_mask(mask, batch, q_len, kv_len).unsqueeze(1)
    elif causal and q_len > 1:
        visible = torch.ones(q_len, kv_len, dtype=torch.bool).tril().view(1, 1, q_len, kv_len)
    else:
        visible = torch.ones(1, 1, q_len, kv_len, dtype=torch.bool)
    used_scale = scale if scale is not None else 1.0 / (head_dim ** 0.5)
    dq, dk, dv = _dense_grads(q.to(compute), k.to(compute), v.to(compute), grad_out.transpose(1, 2).to(compute),
                              visible, used_scale)
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


@_hf_attention_backward_op.register_fake
def _(q, k, v, mask, grad_out, causal, scale):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


_hf_attention_op.register_autograd(_hf_attention_backward, setup_context=_hf_attention_setup)

# Keyword arguments of transformers' attention functions that change the result and that rotary
# cannot compute: refused when set, never ignored.
_REFUSED_KWARGS = {
    "softcap": "logit soft-capping (Gemma 2's attn_logit_softcapping)",
    "position_bias": "an additive position bias (T5-style relative attention)",
    "s_aux": "attention sinks (gpt-oss)",
    "sinks": "attention sinks",
    "head_mask": "a head mask",
}


def rotary_attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                             attention_mask: Optional[torch.Tensor], dropout: float = 0.0,
                             scaling: Optional[float] = None, is_causal: Optional[bool] = None,
                             sliding_window: Optional[int] = None, **kwargs):
    """transformers' attention-function signature (integrations/sdpa_attention.py): q [batch,
    heads, q_len, d], k / v [batch, kv_heads, kv_len, d] (rotated by the model already), the
    model's 4-D mask or None; returns (out [batch, q_len, heads, d_v], None)."""
    where = f"attn_implementation='rotary' ({type(module).__name__})"
    causal, window, scale = backend_terms(where, module, query, key, value, attention_mask, dropout, scaling,
                                          is_causal, sliding_window, kwargs)
    if query.device.type == "cuda":  # the Triton kernel (docs/gpu.md, "Attention"); forward only
        from ._triton_attention import hf_attention
        return hf_attention(query, key, value, attention_mask, causal, window, scale), None
    if eager_tensors((query, key, value), (attention_mask,)):
        out = _hf_attention_impl(query, key, value, attention_mask, causal, window, scale)
    else:
        out = _hf_attention_op(query, key, value, attention_mask, causal, window, scale)
    return out, None


def backend_terms(where: str, module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                  attention_mask, dropout, scaling, is_causal, sliding_window, kwargs) -> tuple:
    """The checks every transformers backend call passes (the refused arguments, devices, the
    mask's type) and its terms in rotary's words: (causal, window, scale)."""
    if dropout:
        raise RotaryError(f"{where}: dropout must be 0 (got {dropout}); rotary's attention has no dropout; "
                          "use model.eval() or attention_dropout=0.0")
    for name, what in _REFUSED_KWARGS.items():
        if kwargs.get(name) is not None:
            value = kwargs[name]
            shown = f"a tensor of shape {tuple(value.shape)}" if isinstance(value, torch.Tensor) else repr(value)
            raise RotaryError(f"{where}: {name} must be None (got {shown}): {what} is not computed by rotary")
    if kwargs.get("output_attentions"):
        raise RotaryError(f"{where}: output_attentions must be False (got True): rotary's attention never forms "
                          "the attention weights")
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    window = sliding_window if sliding_window is not None else getattr(module, "sliding_window", None)
    window = int(window) if window else 0
    if not causal and window:
        raise RotaryError(f"{where}: a sliding window on non-causal attention (got window {window}, is_causal False) "
                          "bounds both sides in transformers; rotary's window bounds the past only")
    for name, tensor in (("query", query), ("key", key), ("value", value)):
        if tensor.device.type not in ("cpu", "cuda") or tensor.device != query.device:
            raise RotaryError(f"{where}: {name} must be a CPU tensor, or a CUDA tensor on query's device (got "
                              f"{tensor.device}, query on {query.device})")
    if attention_mask is not None and not isinstance(attention_mask, torch.Tensor):
        raise RotaryError(f"{where}: attention_mask must be a tensor or None (got {type(attention_mask).__name__})")
    scale = None if scaling is None else float(scaling)
    return bool(causal), window, scale


def register_attention(name: str = "rotary") -> str:
    """Registers rotary's attention with transformers under `name` (AttentionInterface for the
    attention function, AttentionMaskInterface with transformers' own sdpa_mask, so that models
    build the same boolean masks they build for "sdpa"). Then
    AutoModelForCausalLM.from_config(config, attn_implementation=name) or
    model.set_attn_implementation(name) runs the model's attention on rotary. Returns name."""
    if not isinstance(name, str) or not name:
        raise RotaryError(f"name must be a non-empty string (got {name!r})")
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(name, rotary_attention_forward)
    AttentionMaskInterface.register(name, sdpa_mask)
    return name
