"""Attention with fused RoPE in one Triton kernel launch: the prefill forward (docs/gpu.md,
"Attention"). The kernel is python/rotary/_triton_attention_kernel.py.

attention(q, k, v, ...) computes softmax(s) v per (batch row, q head), s = q_i . k_j * scale
(optionally soft-capped) over the keys the mask leaves visible, with q and k rotated by a rotary
Spec's (or Table's) float32 table rows as the kernel loads them. The masks are
rotary.torch.attention's (docs/attention.md, "Masks"): query i sits at position
p = query_offset + i, key j at j; key j is visible iff j <= p (causal) and p - j < window
(window > 0). A query that sees no key gets zeros (and log-sum-exp -inf).

What it does not do is refused by name before the launch (RotaryError naming the argument and the
value): no autograd, no varlen (cu_seqlens), no per-sequence offsets or kv_lengths, no ALiBi, no
absolute tables, no float64, no M-RoPE / xPos specs. CUDA tensors, and CPU tensors only under
Triton's interpreter (TRITON_INTERPRET=1), which is how tests/python/test_triton_attention.py runs
it without a GPU. triton is imported on the first launch only.
"""
from __future__ import annotations

import functools
import math
from typing import Optional

import numpy as np
import torch

from ._attention import FusedRope, check_causal, fused_rope_terms, optional_scale
from ._rotary import RotaryError
from ._table import Table, check_source, resolve
from ._triton_rope import check_device, check_spec, device_rows, jitted_kernel, next_power_of_two
from ._views import float_arg, int_arg

_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
LAYOUTS = ("bhsd", "bshd")

# The launch: tile sizes, warps, pipeline stages and the key splits (None: chosen by the program
# count, _splits). tl.dot needs every dimension >= 16; the interpreter runs one program at a time in
# NumPy, where small tiles keep the masked work small. scripts/gpu_check.py sweeps the GPU's.
# On the H200 (docs/gpu.md) 64 x 32 tiles, 4 warps and 2 stages were the fastest tf32x3 prefill
# launch in bfloat16 and within 10% in float32, and fit its shared memory in every dot precision
# with fused RoPE (tests/python/test_triton_attention.py compiles them for sm_90). A GPU with less
# shared memory gets smaller launches (_SMALLER_LAUNCHES) instead of the error.
LAUNCH = {"block_m": 64, "block_n": 32, "num_warps": 4, "num_stages": 2, "splits": None}
INTERPRETER_LAUNCH = {"block_m": 16, "block_n": 16, "splits": None}
# The dot products' input precision per dtype (_triton_attention_kernel's docstring, docs/gpu.md):
# "ieee" (exact float32 products), "tf32x3" (float32 within a few units, on tensor cores) or
# "storage" (operands rounded to bfloat16 / float16, as flash-attention does; float32 gets "ieee").
DOT = {torch.float32: "tf32x3", torch.bfloat16: "tf32x3", torch.float16: "tf32x3"}
DOT_CODES = {"ieee": 0, "tf32x3": 1, "storage": 2}


def _check_tensors(q, k, v, layout):
    """[batch, heads, len, dim] views of q, k, v (layout "bhsd" or "bshd"), checked."""
    if layout not in LAYOUTS:
        raise RotaryError(f"layout must be 'bhsd' or 'bshd' for the triton attention (got {layout!r})")
    for name, tensor in (("q", q), ("k", k), ("v", v)):
        if not isinstance(tensor, torch.Tensor):
            raise RotaryError(f"{name} must be a torch.Tensor (got {type(tensor).__name__})")
        if tensor.dtype not in _DTYPES:
            raise RotaryError(f"{name} dtype must be float32, bfloat16 or float16 for the triton attention (got "
                              f"{tensor.dtype}); rotary.torch.attention runs float64 on the CPU")
        if tensor.dim() != 4:
            raise RotaryError(f"{name} must be 4-D [{', '.join(layout)}] (got shape {tuple(tensor.shape)})")
        if tensor.dtype != q.dtype:
            raise RotaryError(f"{name} dtype must be q's dtype {q.dtype} (got {tensor.dtype})")
        if tensor.device != q.device:
            raise RotaryError(f"{name} must be on q's device {q.device} (got {tensor.device})")
    check_device(q, "the triton attention", "rotary.torch.attention runs rotary's CPU kernels")
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
        raise RotaryError("the triton attention has no backward yet (got q, k or v with requires_grad=True); "
                          "rotary.torch.attention records gradients on the CPU")
    views = [t if layout == "bhsd" else t.transpose(1, 2) for t in (q, k, v)]
    (batch, q_heads, _, dim), (kb, kv_heads, kv_len, kd), (vb, vh, vl, _) = (tuple(t.shape) for t in views)
    if (kb, vb) != (batch, batch) or vh != kv_heads or vl != kv_len:
        raise RotaryError(f"k and v must have q's batch and each other's heads and length (got q "
                          f"{tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}, layout {layout!r})")
    if kd != dim:
        raise RotaryError(f"k's head dim must be q's {dim} (got {kd})")
    if dim == 0:
        raise RotaryError("q's head dim must be >= 1 (got 0)")
    if kv_heads == 0 or q_heads % kv_heads:
        raise RotaryError(f"q heads must be a multiple of k heads (GQA) (got {q_heads} and {kv_heads})")
    return views


def _positions(name, positions, batch, length, device):
    """int64 [batch, length] NumPy positions of a tensor argument (or None), checked."""
    if positions is None:
        return None
    if not isinstance(positions, torch.Tensor) or positions.is_floating_point() or positions.is_complex() \
            or positions.dtype == torch.bool:
        what = type(positions).__name__ if not isinstance(positions, torch.Tensor) else f"dtype {positions.dtype}"
        raise RotaryError(f"{name} must be an integer torch.Tensor or None (got {what})")
    if tuple(positions.shape) != (batch, length):
        raise RotaryError(f"{name} must have shape [{batch}, {length}] (got {tuple(positions.shape)})")
    values = positions.detach().to("cpu").numpy().astype(np.int64)
    if values.size and values.min() < 0:
        raise RotaryError(f"{name} must be >= 0 (got {int(values.min())})")
    return values


def _rope(spec_or_table, precision, seq_len, rotary_offset, dim, q_positions, k_positions, batch, q_len, kv_len,
          query_offset):
    """The native table, its style, and the positions (None: query_offset + i and j)."""
    source = check_source(spec_or_table)
    spec = source.spec if isinstance(source, Table) else source
    check_spec(spec, "the triton attention")
    if not isinstance(source, Table) and spec.sequence_dependent and seq_len is None:
        raise RotaryError(f"seq_len must be given for spec {spec.name!r}, whose table depends on the sequence "
                          f"length (got seq_len None)")
    styled, native = resolve(source, precision, None, lambda: seq_len)
    pairs = native.num_pairs
    if rotary_offset + 2 * pairs > dim:
        raise RotaryError(f"rotary_offset + rotary_dim must be <= head_dim {dim} (got rotary_offset {rotary_offset}, "
                          f"rotary_dim {2 * pairs})")
    qp = _positions("q_positions", q_positions, batch, q_len, None)
    kp = _positions("k_positions", k_positions, batch, kv_len, None)
    if (qp is None) != (kp is None):
        raise RotaryError("q_positions and k_positions go together (got only "
                          f"{'q_positions' if kp is None else 'k_positions'})")
    last = max(query_offset + q_len, kv_len) - 1 if qp is None else \
        max(int(qp.max()) if qp.size else 0, int(kp.max()) if kp.size else 0)
    if last > native.max_position:
        raise RotaryError(f"positions must be <= the table's last position {native.max_position} (got {last})")
    return styled.style, native, qp, kp


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False, window: int = 0,
              scale: Optional[float] = None, rope: Optional[FusedRope] = None, spec_or_table=None,
              q_positions: Optional[torch.Tensor] = None,
              k_positions: Optional[torch.Tensor] = None, query_offset: int = 0, softcap: Optional[float] = None,
              precision: Optional[str] = None, seq_len: Optional[int] = None, rotary_offset: int = 0,
              layout: str = "bhsd", return_lse: bool = False):
    """Attention with fused RoPE in one Triton launch (forward only). q [batch, q_heads, q_len, d],
    k [batch, kv_heads, kv_len, d], v [batch, kv_heads, kv_len, dv] ("bhsd"; "bshd" swaps heads and
    length), q_heads a multiple of kv_heads; float32, bfloat16 or float16, all alike. Returns the
    output in q's dtype and layout [.., q_len, dv], and with return_lse=True also the float32
    log-sum-exp of each query's scaled (soft-capped) scores, [batch, q_heads, q_len].

    causal / window / query_offset: rotary.torch.attention's masks. scale: default 1/sqrt(d).
    rope: a rotary.FusedRope (None: plain attention); its q_positions / k_positions are int
    [batch, len] tensors (default query_offset + i and j), both or neither; precision / seq_len /
    rotary_offset as rotary.torch.attention's (the six as flat keywords are deprecated).
    softcap: Gemma 2's logit soft-capping, s = cap * tanh(s / cap)."""
    spec_or_table, q_positions, k_positions, rotary_offset, precision, seq_len = fused_rope_terms(
        "the triton attention", rope, spec_or_table, q_positions, k_positions, rotary_offset, precision, seq_len)
    return _attention(q, k, v, causal=causal, window=window, scale=scale, spec_or_table=spec_or_table,
                      q_positions=q_positions, k_positions=k_positions, query_offset=query_offset, softcap=softcap,
                      precision=precision, seq_len=seq_len, rotary_offset=rotary_offset, layout=layout,
                      return_lse=return_lse)


def _attention(q, k, v, *, causal, window, scale, spec_or_table, q_positions, k_positions, query_offset, softcap,
               precision, seq_len, rotary_offset, layout, return_lse):
    """attention() with fused RoPE's terms as plain values (rope unpacked)."""
    causal = check_causal(causal)
    window = int_arg("window", window, minimum=0)
    query_offset = int_arg("query_offset", query_offset, minimum=0)
    rotary_offset = int_arg("rotary_offset", rotary_offset, minimum=0)
    if seq_len is not None:
        seq_len = int_arg("seq_len", seq_len, minimum=0)
    scale = optional_scale(scale)
    if scale is not None and not (math.isfinite(scale) and scale > 0):
        raise RotaryError(f"scale must be finite and positive (got {scale})")
    if softcap is not None:
        softcap = float_arg("softcap", softcap)
        if not (math.isfinite(softcap) and softcap > 0):
            raise RotaryError(f"softcap must be finite and positive, or None (got {softcap})")
    if not isinstance(return_lse, (bool, np.bool_)):
        raise RotaryError(f"return_lse must be True or False (got {return_lse!r})")
    qv, kv, vv = _check_tensors(q, k, v, layout)
    batch, q_heads, q_len, dim = qv.shape
    kv_heads, kv_len, v_dim = kv.shape[1], kv.shape[2], vv.shape[3]
    if spec_or_table is None:  # (rotary_offset, precision and seq_len without it: fused_rope_terms)
        for name, value in (("q_positions", q_positions), ("k_positions", k_positions)):
            if value is not None:
                raise RotaryError(f"{name} is for fused RoPE and needs spec_or_table (got {name} {value!r})")
    out_shape = (batch, q_heads, q_len, v_dim) if layout == "bhsd" else (batch, q_len, q_heads, v_dim)
    out = torch.empty(out_shape, dtype=q.dtype, device=q.device)
    lse = torch.empty((batch, q_heads, q_len), dtype=torch.float32, device=q.device)
    ov = out if layout == "bhsd" else out.transpose(1, 2)
    rope = None
    if spec_or_table is not None:
        rope = _rope(spec_or_table, precision, seq_len, rotary_offset, dim, q_positions, k_positions, batch, q_len,
                     kv_len, query_offset)
    if batch * q_heads * q_len == 0 or v_dim == 0:
        return (out, lse.fill_(float("-inf"))) if return_lse else out
    _launch(qv, kv, vv, ov, lse, rope, q_heads // kv_heads, causal, window,
            1.0 / math.sqrt(dim) if scale is None else scale, softcap, query_offset, rotary_offset)
    return (out, lse) if return_lse else out


@functools.lru_cache(maxsize=None)
def _multiprocessors(device: torch.device) -> int:
    """The GPU's multiprocessor count, asked once per device (a decode step launches per layer)."""
    return torch.cuda.get_device_properties(device).multi_processor_count


def _splits(programs: int, kv_len: int, block_n: int, device: torch.device) -> int:
    """Key splits per program (Flash-Decoding): enough programs for two per multiprocessor when
    the rows alone give fewer, each split at least 4 key tiles long."""
    setting = (INTERPRETER_LAUNCH if device.type == "cpu" else LAUNCH)["splits"]
    if setting is not None:
        return max(1, min(int(setting), -(-kv_len // block_n)))
    if device.type != "cuda":
        return 1
    target = 2 * _multiprocessors(device)
    if programs >= target:
        return 1
    return max(1, min(-(-target // programs), kv_len // (4 * block_n)))


# (device, dtype, constants, tiles, options) -> the launch that fit: a GPU whose shared memory is
# smaller than the launch needs gets the first smaller one that fits, found once per kernel variant.
_FITTED = {}


def _smaller_launches(block_m, block_n, options):
    """The launches to try after (block_m, block_n, options) ran out of shared memory: fewer
    pipeline stages, then narrower key tiles, then fewer query rows (tl.dot needs 16)."""
    stages = options.get("num_stages", 1)
    for next_stages in range(stages - 1, 0, -1):
        yield block_m, block_n, dict(options, num_stages=next_stages)
    options = dict(options, num_stages=1) if options else options
    while block_n > 16:
        block_n //= 2
        yield block_m, block_n, options
    while block_m > 16:
        block_m //= 2
        yield block_m, block_n, options


def _launch_fitting(key, launch, block_m, block_n, options):
    fitted = _FITTED.get(key)
    if fitted is not None:
        return launch(*fitted)
    try:
        launch(block_m, block_n, options)
        _FITTED[key] = (block_m, block_n, options)
        return
    except Exception as error:  # noqa: BLE001 (triton's OutOfResources, by name: triton is imported lazily)
        if type(error).__name__ != "OutOfResources":
            raise
        last = error
    for smaller in _smaller_launches(block_m, block_n, options):
        try:
            launch(*smaller)
        except Exception as error:  # noqa: BLE001
            if type(error).__name__ != "OutOfResources":
                raise
            last = error
            continue
        _FITTED[key] = smaller
        return
    raise RotaryError(f"the triton attention does not fit this GPU's shared memory even at 16 x 16 tiles with one "
                      f"stage (got {last})")


def _launch(qv, kv, vv, ov, lse, rope, group, causal, window, scale, softcap, query_offset, rotary_offset):
    batch, q_heads, q_len, dim = qv.shape
    kv_heads, kv_len, v_dim = kv.shape[1], kv.shape[2], vv.shape[3]
    device = qv.device
    if rope is None:
        cos = sin = q_rows = k_rows = torch.zeros(1, dtype=torch.float32, device=device)  # unread
        style, pairs, arange = "neox", 0, True
    else:
        style, native, qp, kp = rope
        pairs = native.num_pairs
        if qp is None and query_offset > 2 * (q_len + kv_len) + 256:
            # Queries far past the keys: the rows of their own positions, not rows [0, query_offset + q_len).
            qp = (query_offset + np.arange(q_len, dtype=np.int64))[None, :].repeat(batch, 0)
            kp = np.arange(kv_len, dtype=np.int64)[None, :].repeat(batch, 0)
        if qp is None:
            # Rows [0, n) with row p at position p (a call past the device cache's size gets the
            # rows of positions 0..n-1 as distinct rows: again row p at position p).
            cos, sin, _ = device_rows(native, None, max(query_offset + q_len, kv_len), device)
            q_rows = k_rows = cos
            arange = True
        else:
            both = np.concatenate([qp, kp], axis=1)
            cos, sin, rows = device_rows(native, both, both.shape[1], device)
            rows = torch.from_numpy(both.reshape(-1)).to(device) if rows is None else rows
            rows = rows.reshape(batch, q_len + kv_len)
            q_rows, k_rows = rows[:, :q_len].contiguous(), rows[:, q_len:].contiguous()
            arange = False
    tiles = INTERPRETER_LAUNCH if device.type == "cpu" else LAUNCH
    rows_per_kv_head = group * q_len
    block_m = max(16, min(tiles["block_m"], next_power_of_two(rows_per_kv_head)))
    block_n = tiles["block_n"]
    extra = {} if device.type == "cpu" else {"num_warps": LAUNCH["num_warps"], "num_stages": LAUNCH["num_stages"]}
    splits = _splits(-(-rows_per_kv_head // block_m) * batch * kv_heads, kv_len, block_n, device)
    split_len = kv_len if splits == 1 else -(-kv_len // (splits * block_n)) * block_n
    splits = -(-kv_len // split_len) if kv_len else 1
    if splits > 1:
        part_acc = torch.empty((splits, batch * q_heads, q_len, v_dim), dtype=torch.float32, device=device)
        part_m = torch.empty((splits, batch * q_heads, q_len), dtype=torch.float32, device=device)
        part_l = torch.empty_like(part_m)
    else:
        part_acc = part_m = part_l = lse  # unwritten
    dot = DOT[qv.dtype]
    if dot not in DOT_CODES:
        raise RotaryError(f"_triton_attention.DOT[{qv.dtype}] must be one of {sorted(DOT_CODES)} (got {dot!r})")
    if dot == "storage" and qv.dtype == torch.float32:
        dot = "ieee"  # float32 storage: exact float32 products
    rotary_dim = 2 * pairs
    from . import _triton_attention_kernel as kernels  # imports triton
    constants = dict(CAUSAL=causal, WINDOW=window > 0, ROPE=rope is not None, NEOX=style == "neox", ARANGE=arange,
                     SOFTCAP=softcap is not None,
                     HAS_REST=rope is None or rotary_offset > 0 or rotary_offset + rotary_dim < dim,
                     SPLIT=splits > 1, DOT=DOT_CODES[dot], BLOCK_D=max(16, next_power_of_two(dim)),
                     BLOCK_P=max(16, next_power_of_two(pairs)), BLOCK_DV=max(16, next_power_of_two(v_dim)))
    key = (device, qv.dtype, tuple(sorted(constants.items())), block_m, block_n, tuple(sorted(extra.items())))

    def launch(tile_m, tile_n, options):
        jitted_kernel(kernels, "attention_kernel")[(-(-rows_per_kv_head // tile_m), batch * kv_heads, splits)](
            qv, kv, vv, ov, lse, part_acc, part_m, part_l, cos, sin, q_rows, k_rows, *qv.stride(), *kv.stride(),
            *vv.stride(), *ov.stride(), *lse.stride(), q_len, kv_len, kv_heads, group, dim, v_dim, scale,
            1.0 if softcap is None else softcap, query_offset, window, pairs, rotary_offset, split_len,
            BLOCK_M=tile_m, BLOCK_N=tile_n, **constants, **options)

    # split_len stays a multiple of every smaller block_n (powers of two), so a smaller launch
    # covers the same key splits.
    _launch_fitting(key, launch, block_m, block_n, extra)
    if splits > 1:
        block = min(64, max(16, next_power_of_two(q_len)))
        jitted_kernel(kernels, "combine_kernel")[(-(-q_len // block), batch * q_heads)](
            ov, lse, part_acc, part_m, part_l, *ov.stride(), *lse.stride(), q_len, q_heads, v_dim, splits,
            BLOCK_M=block, BLOCK_DV=max(16, next_power_of_two(v_dim)))


def from_torch_attention(q, k, v, others: dict, *, causal, scale, window, query_offset, layout,
                         rope: Optional[FusedRope], implementation):
    """rotary.torch.attention on CUDA tensors, after its argument checks: the Triton kernel
    (attention above). What the kernel does not compute is refused by name, never sent to the
    host: the per-sequence and varlen arguments, ALiBi and absolute tables, out=, the float64
    reference, layouts other than bhsd / bshd, and gradients."""
    if implementation != "kernels":
        raise RotaryError(f"implementation must be 'kernels' for CUDA tensors: the float64 reference runs on the CPU "
                          f"(got {implementation!r})")
    for name in ("query_offsets", "kv_lengths", "kv_starts", "cu_seqlens_q", "cu_seqlens_k", "alibi_slopes",
                 "absolute", "out"):
        if others.get(name) is not None:
            raise RotaryError(f"{name} is not supported on CUDA tensors yet (the Triton attention kernel, docs/gpu.md: "
                              f"got {name}); move q, k and v to the CPU for it")
    if rope is not None:
        return attention(q, k, v, causal=causal, window=window, scale=scale, rope=rope, query_offset=query_offset,
                         layout=layout)
    # No source: positions alone are refused by name there (the flat values: no second warning).
    return _attention(q, k, v, causal=causal, window=window, scale=scale, spec_or_table=None,
                      q_positions=others.get("q_positions"), k_positions=others.get("k_positions"),
                      query_offset=query_offset, softcap=None, precision=None, seq_len=None, rotary_offset=0,
                      layout=layout, return_lse=False)


def hf_attention(q, k, v, mask, causal: bool, window: int, scale: Optional[float]) -> torch.Tensor:
    """attn_implementation="rotary" on CUDA tensors (_torch_attention.rotary_attention_forward):
    transformers' layout, q [b, h, q, d], k / v [b, kv_h, kv, d] already rotated by the model, its
    4-D mask or None; returns [b, q, h, d_v]. The mask is read as the CPU backend reads it
    (_attention_masks._mask_plans: each batch row's visible keys and its first query's position),
    then one launch for the batch when every row has all keys and the same offset, else one per
    row on views of the row's visible keys (left padding). A mask no plan describes is refused
    there, by name."""
    from ._attention_masks import _mask_plans, top_left_for_missing_mask
    batch, heads, q_len, _ = q.shape
    kv_len = k.shape[2]
    if mask is None:  # as the CPU backend reads it
        top_left = top_left_for_missing_mask(causal, window, q_len, kv_len)
        return attention(q, k, v, causal=top_left, window=window, scale=scale).transpose(1, 2)
    plans = _mask_plans(mask, batch, q_len, kv_len, causal, window)
    first = plans[0]
    if first is not None and first.key_start == 0 and first.key_end == kv_len and first.offset >= 0 and \
            all(p == first for p in plans):
        return attention(q, k, v, causal=causal, window=window, scale=scale,
                         query_offset=first.offset).transpose(1, 2)
    out = torch.zeros((batch, q_len, heads, v.shape[-1]), dtype=q.dtype, device=q.device)
    for b, plan in enumerate(plans):
        if plan is None:
            continue  # no query of the row sees a key: zeros
        offset = plan.offset - plan.key_start  # in the row's key index space from key_start
        first_query = min(max(0, -offset), q_len) if causal else 0
        if first_query == q_len:
            continue
        rows = attention(q[b:b + 1, :, first_query:], k[b:b + 1, :, plan.key_start:plan.key_end],
                         v[b:b + 1, :, plan.key_start:plan.key_end], causal=causal, window=window, scale=scale,
                         query_offset=offset + first_query)
        out[b, first_query:] = rows[0].transpose(0, 1)
    return out
