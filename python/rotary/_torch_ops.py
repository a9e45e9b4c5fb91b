"""rotary.torch's custom ops: apply_rotary (table + positions) with autograd, in place and into
given outputs, and its pure-torch implementation for tensors the kernels cannot take.
The public names are re-exported by rotary.torch (python/rotary/torch.py).

One contract for every backend: apply_rotary checks its Python arguments (types, devices,
out= / inplace / autograd rules), and every call, whichever computes it, then passes through the
same C++ checks (check_apply_arguments: shapes, strides, overlap, positions, seq_len) before a
byte is written. The pure-torch path runs those checks too (_rotary.apply with implementation "checks").

torch.compile: the Python wrapper creates and registers nothing. A spec or table crosses into the
ops as its handle (rotary/_handles.py, given when it was made), and the table a call needs is
found or made inside the op, which runs outside the traced graph.
"""
from __future__ import annotations

import weakref
from typing import NamedTuple, Optional

import numpy as np
import torch

from . import _handles, _rotary
from ._backends import backends, register_backend, register_backend_loader, select_backend
from ._apply import check_direction, prepare_positions, source_spec
from ._rotary import RotaryError
from ._spec import Spec
from ._table import PRECISIONS, STYLES, Table, check_source, native_rows, resolve, shared_native
from ._views import call_seq_len, check_layout, int_arg, ints_descriptor

_DTYPES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float64: "float64"}


# ---- descriptors ----------------------------------------------------------------------------------
def _view(tensor: Optional[torch.Tensor], name: str, layout: str):
    if tensor is None:
        return None  # k = None: q only
    dtype = _DTYPES.get(tensor.dtype)
    if dtype is None:
        raise RotaryError(f"{name} dtype must be float32, bfloat16, float16 or float64 (got {tensor.dtype})")
    described = (tensor.data_ptr(), dtype, layout, tuple(tensor.shape), tuple(tensor.stride()))
    # The device crosses for CUDA, which C++ knows (docs/backends.md): its checks then compare devices, and
    # a kernel call on it is refused. Other types cross as cpu: only the checks, which read no data, see them.
    return described + (str(tensor.device),) if tensor.device.type == "cuda" else described


def _kernel_ok(*tensors: Optional[torch.Tensor]) -> bool:
    return all(t.device.type == "cpu" and t.dtype in _DTYPES for t in tensors if t is not None)


def _host_ints(tensor: Optional[torch.Tensor], name: str, device: torch.device) -> Optional[np.ndarray]:
    """An integer tensor's values as a NumPy array on the host (checked like NumPy positions)."""
    if tensor is None:
        return None
    if tensor.device.type == "meta":
        raise RotaryError(f"{name} must hold values, not be on the meta device (got {name} on meta, q on {device})")
    return tensor.detach().to("cpu").numpy()


class _Call(NamedTuple):
    """A checked call: the spec it rotates by, its native table, and the arguments of _rotary.apply."""
    spec: object
    native: object
    per_token: Optional[np.ndarray]
    offsets: Optional[np.ndarray]
    cu_seqlens: Optional[np.ndarray]
    batch: int
    seq: int
    args: tuple


def _prepare(q, k, q_out, k_out, positions, offsets, cu_seqlens, source, precision, style, seq_len, layout, direction,
             rotary_offset, xpos_length) -> _Call:
    """Resolves the table and checks the whole call in C++, whichever backend computes it."""
    spec_or_table = _handles.lookup(source)
    spec = source_spec(spec_or_table)
    per_token, seq_offsets, cu, batch, seq = prepare_positions(
        _host_ints(positions, "positions", q.device), _host_ints(offsets, "offsets", q.device),
        _host_ints(cu_seqlens, "cu_seqlens", q.device), layout, q.shape, spec.position_streams)
    styled, native = resolve(spec_or_table, precision or None, style or None, lambda: seq_len if seq_len >= 0 else
                             call_seq_len(per_token, seq_offsets, cu, batch, seq, layout == "thd"))
    args = (_view(q, "q", layout), _view(k, "k", layout), _view(q_out, "q_out", layout), _view(k_out, "k_out", layout),
            ints_descriptor(per_token), ints_descriptor(seq_offsets), ints_descriptor(cu), native, direction,
            rotary_offset, xpos_length, seq_len)
    return _Call(styled, native, per_token, seq_offsets, cu, batch, seq, args)


def _run(q, k, q_out, k_out, *args) -> None:
    """Rotates q, k into q_out, k_out (which may be q, k) with the backend of q's device
    (_backends.py: native on the CPU, shapes only on meta, pure torch elsewhere)."""
    select_backend(q, op="apply").apply(q, k, q_out, k_out, *args)


# ---- the backends of apply (_backends.py): each takes _run's arguments --------------------------
def _apply_native(q, k, q_out, k_out, positions, offsets, cu_seqlens, source, precision, style, seq_len, layout,
                  direction, rotary_offset, xpos_length) -> None:
    """The CPU kernels (float64: the float64 reference), checked and run in one binding call."""
    if not _kernel_ok(q, k, q_out, k_out):  # an output on another device (a direct op call): torch copies across
        _apply_pure_torch(q, k, q_out, k_out, positions, offsets, cu_seqlens, source, precision, style, seq_len,
                          layout, direction, rotary_offset, xpos_length)
        return
    call = _prepare(q, k, q_out, k_out, positions, offsets, cu_seqlens, source, precision, style, seq_len, layout,
                    direction, rotary_offset, xpos_length)
    f64 = q.dtype == torch.float64 or (k is not None and k.dtype == torch.float64)
    _rotary.apply(*call.args, "reference" if f64 else "kernels")


def _apply_reference(q, k, q_out, k_out, positions, offsets, cu_seqlens, source, precision, style, seq_len, layout,
                     direction, rotary_offset, xpos_length) -> None:
    """The float64 reference on the CPU (backend "reference"), checked and run in one binding call."""
    call = _prepare(q, k, q_out, k_out, positions, offsets, cu_seqlens, source, precision, style, seq_len, layout,
                    direction, rotary_offset, xpos_length)
    _rotary.apply(*call.args, "reference")


def _apply_shapes(q, k, q_out, k_out, *args) -> None:
    """meta tensors: shapes only; the outputs are already the right empty tensors."""


def _apply_pure_torch(q, k, q_out, k_out, positions, offsets, cu_seqlens, source, precision, style, seq_len, layout,
                      direction, rotary_offset, xpos_length) -> None:
    """Any device holding values: the C++ checks, then _apply_torch."""
    call = _prepare(q, k, q_out, k_out, positions, offsets, cu_seqlens, source, precision, style, seq_len, layout,
                    direction, rotary_offset, xpos_length)
    _rotary.apply(*call.args, "checks")
    rq, rk = _apply_torch(q, k, call, layout, direction, rotary_offset, xpos_length)
    q_out.copy_(rq)
    if k is not None:
        k_out.copy_(rk)


def _apply_triton(q, k, q_out, k_out, positions, offsets, cu_seqlens, source, precision, style, seq_len, layout,
                  direction, rotary_offset, xpos_length) -> None:
    """backend "triton" (by name only; registered on its first use): the C++ checks, then one launch."""
    from . import _triton_rope
    call = _prepare(q, k, q_out, k_out, positions, offsets, cu_seqlens, source, precision, style, seq_len, layout,
                    direction, rotary_offset, xpos_length)
    _rotary.apply(*call.args, "checks")
    _triton_rope.check_call(q, k, call.spec)
    views = [None if t is None else _to_bshd(t, layout) for t in (q, k, q_out, k_out)]
    # 0, 1, ..., seq - 1 in every sequence (no positions, offsets or cu_seqlens): the kernel
    # computes the rows, and no positions are copied to the device.
    arange = call.per_token is None and call.offsets is None and layout != "thd"
    _triton_rope.launch(*views, call.native, call.spec.style, None if arange else _token_positions(call, layout, 1)[0],
                        direction, rotary_offset)


register_backend("native", {"cpu"}, apply=_apply_native, default_for=("cpu",))
register_backend("reference", {"cpu"}, apply=_apply_reference)
register_backend("shapes", {"meta"}, apply=_apply_shapes, default_for=("meta",))
register_backend("torch", None, apply=_apply_pure_torch, default_for=("*",))


# ---- the custom ops -------------------------------------------------------------------------------
# k may be None (q only): the fresh op then returns an empty k_out, which apply_rotary turns back
# into None. Arguments after the tensors: source (a Spec's or Table's handle), precision ("" = exact, or the
# table's), style ("" = the spec's), seq_len (-1 = the largest position + 1), layout, direction,
# rotary_offset, xpos_length.
@torch.library.custom_op("rotary::apply_rotary", mutates_args=())
def _apply_rotary_op(q: torch.Tensor, k: Optional[torch.Tensor], positions: Optional[torch.Tensor],
                     offsets: Optional[torch.Tensor], cu_seqlens: Optional[torch.Tensor], source: str, precision: str,
                     style: str, seq_len: int, layout: str, direction: str, rotary_offset: int,
                     xpos_length: int) -> tuple[torch.Tensor, torch.Tensor]:
    q_out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    k_out = None if k is None else torch.empty(k.shape, dtype=k.dtype, device=k.device)
    _run(q, k, q_out, k_out, positions, offsets, cu_seqlens, source, precision, style, seq_len, layout, direction,
         rotary_offset, xpos_length)
    return q_out, (q.new_empty(0) if k_out is None else k_out)


@_apply_rotary_op.register_fake
def _(q, k, positions, offsets, cu_seqlens, source, precision, style, seq_len, layout, direction, rotary_offset,
      xpos_length):
    return q.new_empty(q.shape), (q.new_empty(0) if k is None else k.new_empty(k.shape))


def _apply_rotary_setup(ctx, inputs, output):
    _, _, positions, offsets, cu_seqlens, source, precision, style, seq_len, layout, direction, rotary_offset, \
        xpos_length = inputs
    ctx.save_for_backward(positions, offsets, cu_seqlens)
    ctx.source = _handles.lookup(source)  # alive until backward
    reverse = "backward" if direction == "forward" else "forward"
    ctx.args = (source, precision, style, seq_len, layout, reverse, rotary_offset, xpos_length)
    ctx.shapes = (inputs[0], inputs[1])


def _apply_rotary_backward(ctx, grad_q, grad_k):
    positions, offsets, cu_seqlens = ctx.saved_tensors
    q, k = ctx.shapes
    if grad_q is None:
        grad_q = torch.zeros_like(q)
    if k is None:
        grad_k = None
    elif grad_k is None:
        grad_k = torch.zeros_like(k)
    # The rotation is linear in q and k: the gradient is the transposed rotation of the gradient,
    # at the same positions, so with the same table (the same seq_len).
    gq, gk = _apply_rotary_op(grad_q, grad_k, positions, offsets, cu_seqlens, *ctx.args)
    return (gq, None if k is None else gk) + (None,) * 11


_apply_rotary_op.register_autograd(_apply_rotary_backward, setup_context=_apply_rotary_setup)


@torch.library.custom_op("rotary::apply_rotary_", mutates_args=("q", "k"))
def _apply_rotary_inplace_op(q: torch.Tensor, k: Optional[torch.Tensor], positions: Optional[torch.Tensor],
                             offsets: Optional[torch.Tensor], cu_seqlens: Optional[torch.Tensor], source: str,
                             precision: str, style: str, seq_len: int, layout: str, direction: str, rotary_offset: int,
                             xpos_length: int) -> None:
    _run(q, k, q, k, positions, offsets, cu_seqlens, source, precision, style, seq_len, layout, direction,
         rotary_offset, xpos_length)


@_apply_rotary_inplace_op.register_fake
def _(q, k, positions, offsets, cu_seqlens, source, precision, style, seq_len, layout, direction, rotary_offset,
      xpos_length):
    return None


@torch.library.custom_op("rotary::apply_rotary_out", mutates_args=("q_out", "k_out"))
def _apply_rotary_out_op(q: torch.Tensor, k: Optional[torch.Tensor], q_out: torch.Tensor,
                         k_out: Optional[torch.Tensor],
                         positions: Optional[torch.Tensor], offsets: Optional[torch.Tensor],
                         cu_seqlens: Optional[torch.Tensor], source: str, precision: str, style: str, seq_len: int,
                         layout: str, direction: str, rotary_offset: int, xpos_length: int) -> None:
    _run(q, k, q_out, k_out, positions, offsets, cu_seqlens, source, precision, style, seq_len, layout, direction,
         rotary_offset, xpos_length)


@_apply_rotary_out_op.register_fake
def _(q, k, q_out, k_out, positions, offsets, cu_seqlens, source, precision, style, seq_len, layout, direction,
      rotary_offset, xpos_length):
    return None


def _check_tensor_args(q, k, positions, offsets, cu_seqlens):
    for name, tensor in (("q", q), ("k", k)):
        if tensor is None and name == "k":
            continue
        if not isinstance(tensor, torch.Tensor):
            raise RotaryError(f"{name} must be a torch.Tensor (got {type(tensor).__name__})")
        if tensor.dtype not in _DTYPES:
            raise RotaryError(f"{name} dtype must be float32, bfloat16, float16 or float64 (got {tensor.dtype})")
    if k is not None and q.device != k.device:
        raise RotaryError(f"q and k must be on one device (got q on {q.device}, k on {k.device})")
    for name, tensor in (("positions", positions), ("offsets", offsets), ("cu_seqlens", cu_seqlens)):
        if tensor is None:
            continue
        if not isinstance(tensor, torch.Tensor):
            raise RotaryError(f"{name} must be a torch.Tensor or None (got {type(tensor).__name__})")
        if tensor.is_floating_point() or tensor.is_complex() or tensor.dtype == torch.bool:
            raise RotaryError(f"{name} must hold integers (got dtype {tensor.dtype})")
        if tensor.device.type == "meta" and q.device.type != "meta":
            raise RotaryError(f"{name} must hold values, not be on the meta device (got {name} on meta, q on {q.device})")
        if tensor.device.type not in ("cpu", "meta") and tensor.device != q.device:
            raise RotaryError(f"{name} must be on the CPU or on q's device {q.device} (got {tensor.device})")


def apply_rotary(q: torch.Tensor, k: Optional[torch.Tensor], positions: Optional[torch.Tensor], spec_or_table, *,
                 offsets: Optional[torch.Tensor] = None, cu_seqlens: Optional[torch.Tensor] = None,
                 layout: str = "bhsd", style: Optional[str] = None, precision: Optional[str] = None,
                 direction: str = "forward", inplace: bool = False, rotary_offset: int = 0, xpos_length: int = 0,
                 seq_len: Optional[int] = None, out: Optional[tuple] = None, backend: str = "auto"):
    """Rotates q and k (head counts may differ) by RoPE; returns (q_out, k_out). Every positional
    argument is required (k and positions may be None; k=None rotates q only and returns
    (q_out, None)).

    layout: "bhsd" by default, Hugging Face's [batch, heads, seq, head_dim] (the same default as
    rotary.apply); "bshd", "sbhd", "thd" otherwise.

    positions: per-token int tensor [batch, seq] ([1, seq] and [seq] broadcast over the batch;
    [tokens] for thd; M-RoPE [3, batch, seq]), or offsets ([batch]: position = offset + index),
    or neither (0, 1, 2, ...). cu_seqlens: [num_sequences + 1] token offsets for layout "thd".
    spec_or_table: rotary.Spec (its shared table of `precision`, default "exact") or rotary.Table.
    seq_len: the seq_len of the frequencies (dynamic NTK,
    LongRoPE); None for the call's largest position + 1, Hugging Face's rule.
    inplace=True rotates q and k in place; out=(q_out, k_out) writes into preallocated tensors of
    q's and k's shapes and dtypes (both without autograd; fresh outputs cost page faults that can
    exceed the kernel's own time, docs/python-performance.md). backend: "auto" (the kernel for CPU tensors,
    pure torch elsewhere), "torch" (always pure torch) or "triton" (one Triton kernel launch: CUDA
    tensors, or CPU ones under TRITON_INTERPRET=1; docs/gpu.md). Every backend checks the same things.
    backend= picks the code and device that compute the call, not the numerics that rotary.apply's and
    the attention functions' implementation= ("kernels" or "reference") picks.
    """
    if backend == "auto" and offsets is None and cu_seqlens is None and not _is_compiling() \
            and _current_dispatch_mode() is None:
        # A plain eager CPU call in one binding call (module.cpp, torch_apply_eager), or None
        # where this function's full path must run: anything else, and every error.
        native = _eager_table(spec_or_table, precision, style)
        if native is not None:
            done = _rotary.torch_apply_eager(q, k, positions, native, layout, direction, inplace, out, rotary_offset,
                                             xpos_length, seq_len)
            if done is not None:
                return done
    return _apply_rotary_checked(q, k, positions, spec_or_table, offsets, cu_seqlens, layout, style, precision,
                                 direction, inplace, rotary_offset, xpos_length, seq_len, out, backend)


# Spec -> {(precision, style): native table} for specs whose table does not depend on the call's
# seq_len: the shared table (_table.shared_native) found once, so that an eager call looks it up
# in two dictionary reads. Weak in the spec, as the shared cache; the values are the shared
# cache's own tables (never evicted for such specs), so both name the same object.
_EAGER_TABLES = weakref.WeakKeyDictionary()


def _eager_table(source, precision, style):
    """The native table an eager call of `source` uses, or None (the full path decides)."""
    kind = type(source)
    if kind is Table:
        return source._native if precision is None and style is None else None
    if kind is not Spec:
        return None
    tables = _EAGER_TABLES.get(source)
    if tables is None:
        if source.sequence_dependent:
            return None
        tables = _EAGER_TABLES.setdefault(source, {})
    native = tables.get((precision, style))
    if native is None:
        if precision not in (None, *PRECISIONS) or style not in (None, *STYLES):
            return None
        native = shared_native(source, precision or "exact", style or source.style, 0)[1]
        tables[(precision, style)] = native
    return native


def _apply_rotary_checked(q, k, positions, spec_or_table, offsets, cu_seqlens, layout, style, precision, direction,
                          inplace, rotary_offset, xpos_length, seq_len, out, backend):
    """apply_rotary's full path: every check in Python and C++, then the custom op, the eager
    kernel call or the pure-torch backend."""
    if spec_or_table is None:
        raise RotaryError("spec_or_table is required: a rotary.Spec or rotary.Table (got None)")
    check_source(spec_or_table)
    check_layout(layout)
    check_direction(direction)
    if backend not in ("auto", "torch", "triton"):
        raise RotaryError(f"backend must be 'auto', 'torch' or 'triton' (got {backend!r})")
    if precision is not None and precision not in PRECISIONS:
        raise RotaryError(f"precision must be 'exact' or 'hf' (got {precision!r})")
    if style is not None and style not in STYLES:
        raise RotaryError(f"style must be 'neox' or 'gptj' (got {style!r})")
    rotary_offset = int_arg("rotary_offset", rotary_offset, minimum=0)
    xpos_length = int_arg("xpos_length", xpos_length, minimum=0)
    seq_len = -1 if seq_len is None else int_arg("seq_len", seq_len, minimum=0)
    _check_tensor_args(q, k, positions, offsets, cu_seqlens)
    if out is not None:
        if inplace:
            raise RotaryError("out= and inplace=True exclude each other (got both)")
        if not (isinstance(out, (tuple, list)) and len(out) == 2 and isinstance(out[0], torch.Tensor)
                and (isinstance(out[1], torch.Tensor) if k is not None else out[1] is None)):
            want = "(q_out, k_out)" if k is not None else "(q_out, None) when k is None"
            raise RotaryError(f"out must be a pair of tensors {want} (got {_describe_out(out)})")
        for name, given, like in (("q_out", out[0], q), ("k_out", out[1], k)):
            if like is None:
                continue
            if given.dtype != like.dtype or given.device != like.device or given.shape != like.shape:
                raise RotaryError(f"{name} must have shape {tuple(like.shape)} and dtype {like.dtype} on {like.device} "
                                  f"(got shape {tuple(given.shape)}, {given.dtype} on {given.device})")
    if (out is not None or inplace) and torch.is_grad_enabled() and (
            q.requires_grad or (k is not None and k.requires_grad)):
        what = "out=" if out is not None else "inplace=True"
        raise RotaryError(f"{what} does not record gradients (got q or k with requires_grad=True); "
                          "use a fresh output (neither out= nor inplace=True) for training")
    source = spec_or_table._handle
    precision = precision or ""
    style = style or ""
    if backend == "auto" and _eager_call(q, k, positions, offsets, cu_seqlens, out, inplace):
        # Plain eager CPU call that records no gradient: the kernel directly, without the custom
        # op's dispatch (~100 us of torch.library bookkeeping per call against a decode step's few
        # us of work). Same checks, same kernel, same bits; written tensors get their version
        # bumped as the mutating op would, so autograd still refuses a tensor saved for backward
        # that was changed in place.
        if out is not None:
            q_out, k_out = out
        elif inplace:
            q_out, k_out = q, k
        else:
            q_out = torch.empty(q.shape, dtype=q.dtype)
            k_out = None if k is None else torch.empty(k.shape, dtype=k.dtype)
        _run(q, k, q_out, k_out, positions, offsets, cu_seqlens, source, precision, style, seq_len, layout, direction,
             rotary_offset, xpos_length)
        if out is not None or inplace:
            _increment_version(q_out)
            if k_out is not None:
                _increment_version(k_out)
        return q_out, k_out
    if backend == "auto" and q.device.type == "cuda" and triton_serves(q, k, spec_or_table):
        backend = "triton"  # CUDA's automatic choice where the kernel computes the call (docs/gpu.md)
    if backend == "triton":  # python/rotary/_triton_rope.py, loaded on first use (triton on its first launch)
        from . import _triton_rope
        register_triton()
        if _eager_call(q, k, positions, offsets, cu_seqlens, out, inplace, device_type=q.device.type):
            # As the CPU kernels' eager path above: the launch without the custom op's dispatch,
            # which costs more host time than the kernel takes at decode sizes on a GPU.
            _triton_rope.check_device(q)
            if out is not None:
                q_out, k_out = out
            elif inplace:
                q_out, k_out = q, k
            else:
                q_out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
                k_out = None if k is None else torch.empty(k.shape, dtype=k.dtype, device=k.device)
            _apply_triton(q, k, q_out, k_out, positions, offsets, cu_seqlens, source, precision, style, seq_len,
                          layout, direction, rotary_offset, xpos_length)
            if out is not None or inplace:
                _increment_version(q_out)
                if k_out is not None:
                    _increment_version(k_out)
            return q_out, k_out
        return _triton_rope.apply_rotary(q, k, positions, offsets, cu_seqlens, source, precision, style, seq_len,
                                         layout, direction, rotary_offset, xpos_length, inplace, out)
    if backend == "torch":
        return _apply_rotary_torch_backend(q, k, positions, offsets, cu_seqlens, source, precision, style, seq_len,
                                           layout, direction, rotary_offset, xpos_length, inplace, out)
    if out is not None:
        _apply_rotary_out_op(q, k, out[0], out[1], positions, offsets, cu_seqlens, source, precision, style, seq_len,
                             layout, direction, rotary_offset, xpos_length)
        return out[0], out[1]
    if inplace:
        _apply_rotary_inplace_op(q, k, positions, offsets, cu_seqlens, source, precision, style, seq_len, layout,
                                 direction, rotary_offset, xpos_length)
        return q, k
    q_out, k_out = _apply_rotary_op(q, k, positions, offsets, cu_seqlens, source, precision, style, seq_len, layout,
                                    direction, rotary_offset, xpos_length)
    return q_out, (None if k is None else k_out)


_increment_version = torch.autograd.graph.increment_version


def eager_tensors(tensors, others=(), *, records_grad: bool = True, device_type: str = "cpu") -> bool:
    """True when a call on these tensors can skip its custom op: eager (not traced by
    torch.compile, no TorchDispatchMode such as FakeTensorMode active), every tensor a plain
    torch.Tensor on `device_type` (no subclass, no functorch wrapper: vmap / grad transforms go
    through the op) of a kernel dtype (`others`, such as positions, of any dtype, on the CPU or
    that device), and, when the op would record a gradient (records_grad), none to record: its
    autograd formula is what a gradient needs."""
    if torch.compiler.is_compiling() or _current_dispatch_mode() is not None:
        return False
    for t in tensors:
        if type(t) is not torch.Tensor or t.device.type != device_type or t.dtype not in _DTYPES or _is_wrapped(t):
            return False
    for t in others:
        if t is not None and (type(t) is not torch.Tensor or t.device.type not in ("cpu", device_type)
                              or _is_wrapped(t)):
            return False
    return not (records_grad and torch.is_grad_enabled() and any(t.requires_grad for t in tensors))


def _eager_call(q, k, positions, offsets, cu_seqlens, out, inplace, device_type: str = "cpu") -> bool:
    tensors = [q] if k is None else [q, k]
    if out is not None:
        tensors.extend(t for t in out if t is not None)
    return eager_tensors(tensors, (positions, offsets, cu_seqlens), records_grad=out is None and not inplace,
                         device_type=device_type)


def register_triton() -> None:
    """Registers backend "triton" in the device seam (_backends.py): on its first use, by the loader
    below, also where the op runs (a first call traced by torch.compile registers nothing while
    tracing, and the op then runs before any eager call has)."""
    if "triton" not in backends():
        from . import _triton_rope
        register_backend("triton", _triton_rope.DEVICE_TYPES, apply=_apply_triton)


register_backend_loader("triton", register_triton)
_TRITON_IMPORTABLE = []  # [bool] once looked up: whether triton is installed (not imported here)


def triton_serves(q, k, spec_or_table) -> bool:
    """Whether backend "triton" computes this call (CUDA's automatic choice): triton installed,
    float32 / bfloat16 / float16 tensors, one position stream and no xPos (what the kernel
    refuses by name, _triton_rope.check_call). Otherwise "auto" keeps the pure-torch backend."""
    if not _TRITON_IMPORTABLE:
        import importlib.util
        _TRITON_IMPORTABLE.append(importlib.util.find_spec("triton") is not None)
    spec = spec_or_table if isinstance(spec_or_table, Spec) else spec_or_table.spec
    kernel_dtypes = (torch.float32, torch.bfloat16, torch.float16)
    return (_TRITON_IMPORTABLE[0] and q.dtype in kernel_dtypes and (k is None or k.dtype in kernel_dtypes)
            and spec.position_streams == 1 and spec.xpos_scale_base is None)


_current_dispatch_mode = torch.utils._python_dispatch._get_current_dispatch_mode
_is_wrapped = torch._C._functorch.is_functorch_wrapped_tensor
_is_compiling = torch.compiler.is_compiling
_rotary.register_torch(torch.Tensor, (torch.float32, torch.bfloat16, torch.float16, torch.float64), torch.int64,
                       torch.empty_like, torch.empty, torch._C._increment_version, _is_wrapped, torch.is_grad_enabled)


def _describe_out(out) -> str:
    if isinstance(out, (tuple, list)):
        return "(" + ", ".join("None" if t is None else type(t).__name__ for t in out) + ")"
    return type(out).__name__


def _apply_rotary_torch_backend(q, k, positions, offsets, cu_seqlens, source, precision, style, seq_len, layout,
                                direction, rotary_offset, xpos_length, inplace, out):
    """backend="torch": the same checks, then torch ops (differentiable through torch itself)."""
    q_out, k_out = (q, k) if inplace else out if out is not None else (q, k)
    call = _prepare(q, k, q_out, k_out, positions, offsets, cu_seqlens, source, precision, style, seq_len, layout,
                    direction, rotary_offset, xpos_length)
    _rotary.apply(*call.args, "checks")
    rq, rk = _apply_torch(q, k, call, layout, direction, rotary_offset, xpos_length)
    if inplace or out is not None:
        with torch.no_grad():
            q_out.copy_(rq)
            if k is not None:
                k_out.copy_(rk)
        return q_out, k_out
    return rq, rk


# ---- the pure-torch implementation of the same contract -------------------------------------------
def _token_positions(call: _Call, layout: str, streams: int) -> np.ndarray:
    """Positions [streams, batch, seq] (thd: batch 1, seq = tokens) of a checked call."""
    batch, seq = call.batch, call.seq
    if call.per_token is not None:
        return call.per_token.reshape(streams, batch, seq)
    if layout == "thd":
        index = np.empty(seq, dtype=np.int64)
        cu = call.cu_seqlens
        for n in range(cu.size - 1):
            start, end = int(cu[n]), int(cu[n + 1])
            base = 0 if call.offsets is None else int(call.offsets[n])
            index[start:end] = np.arange(end - start) + base
        return np.broadcast_to(index.reshape(1, 1, seq), (streams, 1, seq))
    index = np.broadcast_to(np.arange(seq, dtype=np.int64).reshape(1, seq), (batch, seq))
    if call.offsets is not None:
        index = index + call.offsets.reshape(batch, 1)
    return np.broadcast_to(index.reshape(1, batch, seq), (streams, batch, seq))


def _to_bshd(x: torch.Tensor, layout: str) -> torch.Tensor:
    if layout == "bshd":
        return x
    if layout == "bhsd":
        return x.transpose(1, 2)
    if layout == "sbhd":
        return x.transpose(0, 1)
    return x.unsqueeze(0)  # thd


def _from_bshd(x: torch.Tensor, layout: str) -> torch.Tensor:
    # The transposes are their own inverses; only thd's added batch axis goes back.
    return x.squeeze(0) if layout == "thd" else _to_bshd(x, layout)


def _apply_torch(q, k, call: _Call, layout: str, direction: str, rotary_offset: int, xpos_length: int):
    """apply.hpp's contract in plain torch ops (any device), for a call _prepare checked: the
    table's float32 rows gathered at each token's positions, then the pairwise rotation in float32
    (float64 for float64 tensors)."""
    spec = call.spec
    native = call.native
    streams = spec.position_streams
    pos = _token_positions(call, layout, streams)
    pick = torch.tensor(spec.pair_streams, dtype=torch.int64)
    # The call was checked: its table serves it, so the rows are read at the table's own seq_len.
    rows = [native_rows(native, np.ascontiguousarray(pos[s]), seq_len=native.seq_len) for s in range(streams)]
    cos = torch.stack([torch.from_numpy(r[0]) for r in rows])  # [streams, batch, seq, pairs]
    sin = torch.stack([torch.from_numpy(r[1]) for r in rows])
    pairs = torch.arange(native.num_pairs)
    cos = cos[pick, :, :, pairs].permute(1, 2, 0)  # [batch, seq, pairs]
    sin = sin[pick, :, :, pairs].permute(1, 2, 0)
    rotary_dim = 2 * native.num_pairs
    scale_q = scale_k = None
    if spec.xpos_scale_base is not None:
        d = rotary_dim
        zeta = (torch.arange(0, d, 2, dtype=torch.float64) + 0.4 * d) / (1.4 * d)
        length = xpos_length or spec.max_position_embeddings
        p = torch.from_numpy(np.ascontiguousarray(pos[0])).to(torch.float64)
        power = (p - (length // 2)) / spec.xpos_scale_base if length else p / spec.xpos_scale_base
        scale_q = zeta ** power.unsqueeze(-1)
        scale_k = 1.0 / scale_q
    results = []
    for x, scale in ((q, scale_q), (k, scale_k)):
        if x is None:
            results.append(None)
            continue
        compute = torch.float64 if x.dtype == torch.float64 else torch.float32
        c = cos.to(compute)
        s = sin.to(compute)
        if scale is not None:
            c = (c.double() * scale).to(compute)
            s = (s.double() * scale).to(compute)
        c = c.unsqueeze(2).to(x.device)  # broadcast over heads
        s = s.unsqueeze(2).to(x.device)
        xb = _to_bshd(x, layout).to(compute)
        d = rotary_dim
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
