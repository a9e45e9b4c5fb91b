"""rotary.torch's backend="triton": RoPE for q and k in one Triton kernel launch (docs/gpu.md).

The call is checked before anything here runs: apply_rotary's Python checks, then the C++ checks
(_rotary.apply with implementation "checks", in _torch_ops._apply_triton, the function this
backend registers in _backends.py). What this module adds is the device rule, the cos/sin rows
on the device, the kernel and its custom ops (autograd: the backward is the same kernel with the
direction reversed, as rotary::apply_rotary's).

The kernel reads q, k, q_out and k_out through their strides (any layout, any view), gathers
each token's cos/sin row from rotary's own float32 table (the rows the C++ kernels read, with
attention_scaling already in them: _table.native_rows), and computes x*cos - y*sin, y*cos + x*sin
in float32 for float32, bfloat16 and float16 storage (backward: sin negated, the rotation by
-angle). Elements outside the rotated block are copied (out of place) or left (in place).

triton is imported on the first launch only: importing rotary, rotary.torch or this module never
loads it. On the CPU the kernel runs only under Triton's interpreter (TRITON_INTERPRET=1, read
when the kernel is first built), which is how the tests run it without a GPU.
"""
from __future__ import annotations

import collections
import os
import threading
import weakref
from typing import Optional

import numpy as np
import torch

from ._backends import select_backend
from ._rotary import RotaryError
from ._table import native_rows

DEVICE_TYPES = ("cuda", "cpu")  # the CPU under TRITON_INTERPRET=1 only (check_device)
_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
# The device copy of a table's rows [0, n) is kept while it stays under this size; a call whose
# positions need more gets the rows of its own distinct positions instead (a stored table's far
# positions, such as 2^31 - 1, would otherwise cost gigabytes of device memory).
_CACHED_TABLE_BYTES = 256 << 20
_FIRST_ROWS = 256  # a table's first device copy: the C++ table's page of rows


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def check_device(q: torch.Tensor, what: str = "backend 'triton'",
                 on_cpu: str = "backend 'auto' runs rotary's CPU kernels") -> None:
    """The Triton kernels (`what`) run on CUDA, and on the CPU only under Triton's interpreter;
    on_cpu: what to use instead on the CPU, for the message."""
    if q.device.type == "cuda" or (q.device.type == "cpu" and interpreting()):
        return
    if q.device.type == "cpu":
        raise RotaryError(f"{what} runs on cpu tensors only under Triton's interpreter: set TRITON_INTERPRET=1 "
                          f"before the first triton call (got q on cpu without it); {on_cpu}")
    raise RotaryError(f"{what} runs on cuda tensors (and cpu ones under TRITON_INTERPRET=1) (got q on {q.device})")


def check_call(q, k, spec) -> None:
    """What the kernel does not compute (yet), refused by name before the launch."""
    for name, tensor in (("q", q), ("k", k)):
        if tensor is not None and tensor.dtype not in _DTYPES:
            raise RotaryError(f"backend 'triton' takes float32, bfloat16 or float16 tensors (got {name} of dtype "
                              f"{tensor.dtype}); backend 'auto' runs float64 through the float64 reference")
    check_spec(spec, "backend 'triton'", "; use backend 'auto' or 'torch'")


def check_spec(spec, what: str, instead: str = "") -> None:
    """What the Triton kernels (`what`: the apply and the attention kernel) do not rotate: more
    than one position stream (M-RoPE) and xPos; `instead` ends the message."""
    if spec.position_streams != 1:
        raise RotaryError(f"{what} rotates by one position per token (got spec {spec.name!r} with "
                          f"{spec.position_streams} position streams){instead}")
    if spec.xpos_scale_base is not None:
        raise RotaryError(f"{what} has no xPos scaling (got spec {spec.name!r} with xpos_scale_base "
                          f"{spec.xpos_scale_base}){instead}")


# ---- cos/sin rows on the device -------------------------------------------------------------------
# native table -> {device: (cos, sin)}, rows [0, n) as float32 [n, num_pairs] tensors. Weak in the
# table: a dropped table (a grown dynamic-NTK one) frees its device copy with it.
_DEVICE_ROWS = weakref.WeakKeyDictionary()
_DEVICE_ROWS_LOCK = threading.Lock()


# Token positions -> their device copy, for the calls that pass positions (or offsets): the
# layers of one forward step pass the same positions, and each would otherwise copy them to the
# device (a synchronous copy from pageable host memory) before its launch. Keyed by the values'
# bytes (compared in full on a hit: no hash collision can pick another call's positions).
_POSITIONS = collections.OrderedDict()
_POSITIONS_KEPT = 16
_POSITIONS_BYTES = 1 << 20  # larger position arrays are copied each call, not kept


def device_rows(native, positions: Optional[np.ndarray], seq: int, device: torch.device):
    """(cos, sin, row per token or None): the table rows on `device` and the row each token
    reads. positions None: every sequence at 0, 1, ..., seq - 1 (the kernel's row is the token's
    index in its sequence: nothing to copy)."""
    needed = seq if positions is None else (int(positions.max()) + 1 if positions.size else 1)
    pairs = native.num_pairs
    with _DEVICE_ROWS_LOCK:
        per_device = _DEVICE_ROWS.get(native)
        if per_device is None:
            per_device = _DEVICE_ROWS.setdefault(native, {})
        have = per_device.get(device)
        if have is None or have[0].shape[0] < needed:
            # Grown geometrically (so a decode loop copies O(log n) times), never past the table's
            # last position, whose rows past it do not exist (a fixed table).
            size = max(needed, _FIRST_ROWS, 0 if have is None else 2 * have[0].shape[0])
            size = min(size, native.max_position + 1)
            if size * pairs * 8 > _CACHED_TABLE_BYTES:
                if positions is None:
                    positions = np.broadcast_to(np.arange(seq, dtype=np.int64), (1, seq))
                distinct, row = np.unique(positions, return_inverse=True)
                cos, sin = native_rows(native, distinct.astype(np.int64), seq_len=native.seq_len)
                return (torch.from_numpy(cos).to(device), torch.from_numpy(sin).to(device),
                        _device_positions(row.reshape(positions.shape).astype(np.int64), device))
            cos, sin = native_rows(native, np.arange(size, dtype=np.int64), seq_len=native.seq_len)
            have = (torch.from_numpy(cos).to(device), torch.from_numpy(sin).to(device))
            per_device[device] = have
    rows = None if positions is None else _device_positions(positions, device)
    return have[0], have[1], rows


def _device_positions(positions: np.ndarray, device: torch.device) -> torch.Tensor:
    """int64 positions [tokens] on the device: a kept copy when these values were copied before."""
    values = np.ascontiguousarray(positions, dtype=np.int64).reshape(-1)
    if values.nbytes > _POSITIONS_BYTES:
        return torch.from_numpy(values).to(device)
    key = (str(device), values.tobytes())
    with _DEVICE_ROWS_LOCK:
        kept = _POSITIONS.get(key)
        if kept is not None:
            _POSITIONS.move_to_end(key)
            return kept
        kept = torch.from_numpy(values).to(device)
        _POSITIONS[key] = kept
        if len(_POSITIONS) > _POSITIONS_KEPT:
            _POSITIONS.popitem(last=False)
        return kept


# ---- the kernel -------------------------------------------------------------------------------------
def _triton_rope_kernel_module():
    from . import _triton_rope_kernel  # imports triton
    return _triton_rope_kernel


def jitted_kernel(module, name: str):
    """Kernel `name` of a kernel module (which imports triton; the RoPE and the attention kernels'
    modules), in the interpreter mode its import settled: triton.jit picks the interpreter when the
    kernel is defined, so a later change of TRITON_INTERPRET is an error naming both values."""
    built_interpreted = bool(getattr(module.INTERPRETED, "value", module.INTERPRETED))  # a bool or tl.constexpr
    if built_interpreted != interpreting():
        raise RotaryError(f"TRITON_INTERPRET must keep the value it had when the triton kernel was first used "
                          f"(got {os.environ.get('TRITON_INTERPRET', 'unset')!r} now, the kernel was built "
                          f"{'with' if built_interpreted else 'without'} the interpreter)")
    return getattr(module, name)


def next_power_of_two(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


# The launch shape: heads per program (at most; a power of two) and warps per program. The GPU
# check (scripts/gpu_check.py) sweeps them; on an H100 at 8 x 4096 tokens of Llama-3-8B's heads,
# 16 heads and 4 warps was the fastest in float32 and within 1% of the fastest in bfloat16
# (docs/gpu.md). One head per program ran at a third of that speed.
LAUNCH = {"block_h": 16, "num_warps": 4}


def prepared_launch(q, k, q_out, k_out, native, style: str, positions: Optional[np.ndarray], direction: str,
                    rotary_offset: int):
    """The launch of one call, as a function of no arguments (None: nothing to launch). The rows
    and the launch shape are settled here, once; calling the result launches the kernel alone
    (what the GPU check times). Arguments as launch's."""
    batch, seq, heads_q, dim_q = q.shape
    heads_k, dim_k = (0, dim_q) if k is None else (k.shape[2], k.shape[3])
    tokens = batch * seq
    if tokens == 0 or heads_q + heads_k == 0:
        return None
    cos, sin, rows = device_rows(native, positions, seq, q.device)
    k, k_out = (q, q_out) if k is None else (k, k_out)  # unread when heads_k is 0
    pairs = native.num_pairs
    copy_rest = q_out.data_ptr() != q.data_ptr() and 2 * pairs < max(dim_q, dim_k)
    block_h = min(next_power_of_two(max(heads_q, heads_k)), LAUNCH["block_h"])
    blocks = -(-heads_q // block_h) + -(-heads_k // block_h)
    kernel = jitted_kernel(_triton_rope_kernel_module(), "rope_kernel")
    args = (q, k, q_out, k_out, cos if rows is None else rows, cos, sin, *q.stride(), *k.stride(), *q_out.stride(),
            *k_out.stride(), seq, heads_q, heads_k, dim_q, dim_k, rotary_offset, pairs)
    constants = dict(NEOX=style == "neox", BACKWARD=direction == "backward", COPY_REST=copy_rest,
                     BLOCK_P=next_power_of_two(pairs), BLOCK_D=next_power_of_two(max(dim_q, dim_k)),
                     BLOCK_H=block_h, ARANGE=rows is None, num_warps=LAUNCH["num_warps"])
    return lambda: kernel[(tokens, blocks)](*args, **constants)


def launch(q, k, q_out, k_out, native, style: str, positions: Optional[np.ndarray], direction: str,
           rotary_offset: int) -> None:
    """One launch over q's and k's heads. q, k, q_out, k_out: [batch, seq, heads, head_dim] views
    (any strides; k, k_out may be None); positions: int64 [batch, seq] (checked by the caller), or
    None for 0, 1, ..., seq - 1 in every sequence."""
    run = prepared_launch(q, k, q_out, k_out, native, style, positions, direction, rotary_offset)
    if run is not None:
        run()


# ---- the custom ops (as rotary::apply_rotary's in _torch_ops.py) -------------------------------------
def _run(q, k, q_out, k_out, *args) -> None:
    check_device(q)
    # By name: registered on first use through its loader (_backends.register_backend_loader),
    # also when the first call was traced by torch.compile and the op now runs first.
    select_backend(q, "triton", op="apply").apply(q, k, q_out, k_out, *args)


@torch.library.custom_op("rotary::apply_rotary_triton", mutates_args=())
def _triton_op(q: torch.Tensor, k: Optional[torch.Tensor], positions: Optional[torch.Tensor],
               offsets: Optional[torch.Tensor], cu_seqlens: Optional[torch.Tensor], source: str, precision: str,
               style: str, seq_len: int, layout: str, direction: str, rotary_offset: int,
               xpos_length: int) -> tuple[torch.Tensor, torch.Tensor]:
    q_out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    k_out = None if k is None else torch.empty(k.shape, dtype=k.dtype, device=k.device)
    _run(q, k, q_out, k_out, positions, offsets, cu_seqlens, source, precision, style, seq_len, layout, direction,
         rotary_offset, xpos_length)
    return q_out, (q.new_empty(0) if k_out is None else k_out)


@_triton_op.register_fake
def _(q, k, *args):
    return q.new_empty(q.shape), (q.new_empty(0) if k is None else k.new_empty(k.shape))


def _setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs[2:5])  # positions, offsets, cu_seqlens
    args = list(inputs[5:])
    args[5] = "backward" if args[5] == "forward" else "forward"  # direction
    ctx.args = tuple(args)
    ctx.shapes = (inputs[0], inputs[1])


def _backward(ctx, grad_q, grad_k):
    # The rotation is linear: the gradient is the transposed rotation (by -angle) of the gradient,
    # at the same positions and with the same table, by the same kernel.
    q, k = ctx.shapes
    grad_q = torch.zeros_like(q) if grad_q is None else grad_q
    if k is not None and grad_k is None:
        grad_k = torch.zeros_like(k)
    gq, gk = _triton_op(grad_q, None if k is None else grad_k, *ctx.saved_tensors, *ctx.args)
    return (gq, None if k is None else gk) + (None,) * 11


_triton_op.register_autograd(_backward, setup_context=_setup)


@torch.library.custom_op("rotary::apply_rotary_triton_", mutates_args=("q", "k"))
def _triton_inplace_op(q: torch.Tensor, k: Optional[torch.Tensor], positions: Optional[torch.Tensor],
                       offsets: Optional[torch.Tensor], cu_seqlens: Optional[torch.Tensor], source: str,
                       precision: str, style: str, seq_len: int, layout: str, direction: str, rotary_offset: int,
                       xpos_length: int) -> None:
    _run(q, k, q, k, positions, offsets, cu_seqlens, source, precision, style, seq_len, layout, direction,
         rotary_offset, xpos_length)


@_triton_inplace_op.register_fake
def _(*args):
    return None


@torch.library.custom_op("rotary::apply_rotary_triton_out", mutates_args=("q_out", "k_out"))
def _triton_out_op(q: torch.Tensor, k: Optional[torch.Tensor], q_out: torch.Tensor, k_out: Optional[torch.Tensor],
                   positions: Optional[torch.Tensor], offsets: Optional[torch.Tensor],
                   cu_seqlens: Optional[torch.Tensor], source: str, precision: str, style: str, seq_len: int,
                   layout: str, direction: str, rotary_offset: int, xpos_length: int) -> None:
    _run(q, k, q_out, k_out, positions, offsets, cu_seqlens, source, precision, style, seq_len, layout, direction,
         rotary_offset, xpos_length)


@_triton_out_op.register_fake
def _(*args):
    return None


def apply_rotary(q, k, positions, offsets, cu_seqlens, source, precision, style, seq_len, layout, direction,
                 rotary_offset, xpos_length, inplace, out):
    """apply_rotary(backend="triton") after its Python checks: the op for the output mode."""
    check_device(q)
    rest = (positions, offsets, cu_seqlens, source, precision, style, seq_len, layout, direction, rotary_offset,
            xpos_length)
    if out is not None:
        _triton_out_op(q, k, out[0], out[1], *rest)
        return out[0], out[1]
    if inplace:
        _triton_inplace_op(q, k, *rest)
        return q, k
    q_out, k_out = _triton_op(q, k, *rest)
    return q_out, (None if k is None else k_out)
