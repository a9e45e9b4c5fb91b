"""rotary.torch's rotation over explicit cos/sin, the Hugging Face drop-in's apply functions:
apply_rotary_pos_emb, apply_rotary_pos_emb_interleave, apply_multimodal_rotary_pos_emb and
rotate_half, through the torch custom op rotary::apply_cos_sin (autograd; a fake implementation
for torch.compile). The public names are re-exported by rotary.torch (python/rotary/torch.py).
Sources: transformers modeling_llama.py (apply_rotary_pos_emb, rotate_half), modeling_deepseek_v3.py
(apply_rotary_pos_emb_interleave), modeling_qwen2_vl.py (apply_multimodal_rotary_pos_emb).
"""
from __future__ import annotations

import torch

from . import _rotary
from ._rotary import RotaryError
from ._torch_ops import _DTYPES, _current_dispatch_mode, _is_compiling, _kernel_ok, _view, eager_tensors

ROUNDINGS = ("like_torch", "once")


# ---- the rotation over explicit cos/sin ------------------------------------------------------------
def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """Hugging Face's rotate_half: cat(-x2, x1)."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _rotate_pairs(y: torch.Tensor, style: str) -> torch.Tensor:
    """rotate_half (neox) or GPT-J's rotate_every_two (gptj)."""
    if style == "neox":
        return rotate_half(y)
    return torch.stack((-y[..., 1::2], y[..., 0::2]), -1).flatten(-2)


def _rotate_pairs_transposed(y: torch.Tensor, style: str) -> torch.Tensor:
    """The transpose of _rotate_pairs (exact: a permutation with sign changes)."""
    if style == "neox":
        h = y.shape[-1] // 2
        return torch.cat((y[..., h:], -y[..., :h]), -1)
    return torch.stack((y[..., 1::2], -y[..., 0::2]), -1).flatten(-2)


def _promoted(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.dtype:
    """The dtype of Hugging Face's eager x * cos + rotate(x) * sin: torch's type promotion."""
    return torch.promote_types(torch.promote_types(x.dtype, cos.dtype), sin.dtype)


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
    """x * cos + rotate(x) * sin (and its transpose) in torch ops, with torch's type promotion:
    tensors the kernel cannot take (other devices), and cos, sin of two different dtypes."""
    cos = cos.unsqueeze(unsqueeze_dim) if cos.dim() == 3 else cos
    sin = sin.unsqueeze(unsqueeze_dim) if sin.dim() == 3 else sin
    r = cos.shape[-1]
    x_rot, x_pass = x[..., :r], x[..., r:]
    if direction == "forward":
        out = x_rot * cos + _rotate_pairs(x_rot, style) * sin
    else:
        out = x_rot * cos + _rotate_pairs_transposed(x_rot * sin, style)
    return torch.cat((out, x_pass), -1)


# Type promotion (rounding="like_torch" is bit-identical to eager torch for every dtype pair):
# the result has the promoted dtype P of x, cos and sin, as HF's expression does (a bfloat16 q with
# float32 cos/sin gives float32). Widening x, cos and sin to P is exact and torch computes a mixed
# product in P, so the kernel runs in P on the widened values. cos and sin of two different dtypes
# make the two products round differently: that case runs HF's expression in torch ops.
def _apply_cos_sin_impl(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, style: str, direction: str,
                        rounding: str, unsqueeze_dim: int) -> torch.Tensor:
    out_dtype = _promoted(x, cos, sin)
    if not _kernel_ok(x, cos, sin) or (cos.dtype != sin.dtype and rounding == "like_torch"):
        return _rotate_explicit_torch(x, cos, sin, style, direction, unsqueeze_dim).contiguous()
    x, cos, sin = x.to(out_dtype), cos.to(out_dtype), sin.to(out_dtype)
    layout = "bhsd" if unsqueeze_dim == 1 else "bshd"
    out = torch.empty(x.shape, dtype=out_dtype)
    _rotary.apply_cos_sin(_view(x, "q", layout), _view(out, "q_out", layout),
                          _cos_sin_view(cos, "cos", unsqueeze_dim), _cos_sin_view(sin, "sin", unsqueeze_dim),
                          style, direction, rounding, "q")
    return out


@torch.library.custom_op("rotary::apply_cos_sin", mutates_args=())
def _apply_cos_sin_op(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, style: str, direction: str,
                      rounding: str, unsqueeze_dim: int) -> torch.Tensor:
    return _apply_cos_sin_impl(x, cos, sin, style, direction, rounding, unsqueeze_dim)


def _apply_cos_sin(x, cos, sin, style, direction, rounding, unsqueeze_dim):
    """The op, or its body directly for a plain eager CPU call that records no gradient: the
    custom op's dispatch costs more than a decode step's rotation (docs/python-performance.md). Same bits.
    The common eager case (x, cos, sin of one dtype) is one binding call (module.cpp,
    torch_cos_sin_eager), which returns None for everything else and every error."""
    if not _is_compiling() and _current_dispatch_mode() is None:
        out = _rotary.torch_cos_sin_eager(x, cos, sin, style, direction, rounding, unsqueeze_dim, "q")
        if out is not None:
            return out
    if eager_tensors((x, cos, sin)):
        return _apply_cos_sin_impl(x, cos, sin, style, direction, rounding, unsqueeze_dim)
    return _apply_cos_sin_op(x, cos, sin, style, direction, rounding, unsqueeze_dim)


@_apply_cos_sin_op.register_fake
def _(x, cos, sin, style, direction, rounding, unsqueeze_dim):
    return x.new_empty(x.shape, dtype=_promoted(x, cos, sin))


def _apply_cos_sin_setup(ctx, inputs, output):
    x, cos, sin, style, direction, rounding, unsqueeze_dim = inputs
    ctx.save_for_backward(x, cos, sin)
    ctx.args = (style, direction, rounding, unsqueeze_dim)


def _grad_x_widened(grad, x_dtype, cos, sin, style, unsqueeze_dim):
    """The gradient with respect to x when x is narrower than the result (bfloat16 q, float32
    cos/sin), as autograd computes HF's expression: the sum's gradient reaches each product in that
    product's dtype (x*cos: promote(x, cos); rotate(x)*sin: promote(x, sin)), each product's
    gradient, grad * cos and grad * sin, is formed in it and rounded to x's dtype where it reaches
    x's branch, then the two branches are summed in x's dtype. The pass-through part is rounded once."""
    c4 = cos.unsqueeze(unsqueeze_dim) if cos.dim() == 3 else cos
    s4 = sin.unsqueeze(unsqueeze_dim) if sin.dim() == 3 else sin
    r = cos.shape[-1]
    g_rot, g_pass = grad[..., :r], grad[..., r:]
    through_cos = (g_rot.to(torch.promote_types(x_dtype, cos.dtype)) * c4).to(x_dtype)
    through_sin = (g_rot.to(torch.promote_types(x_dtype, sin.dtype)) * s4).to(x_dtype)
    return torch.cat((through_cos + _rotate_pairs_transposed(through_sin, style), g_pass.to(x_dtype)), -1)


def _apply_cos_sin_backward(ctx, grad):
    x, cos, sin = ctx.saved_tensors
    style, direction, rounding, unsqueeze_dim = ctx.args
    reverse = "backward" if direction == "forward" else "forward"
    grad_x = grad_cos = grad_sin = None
    if ctx.needs_input_grad[0]:
        if x.dtype == grad.dtype:
            # The transposed rotation, by the same kernel (like_torch rounds g*cos, g*sin and the sum).
            grad_x = _apply_cos_sin_op(grad, cos, sin, style, reverse, rounding, unsqueeze_dim)
        elif direction == "forward":
            grad_x = _grad_x_widened(grad, x.dtype, cos, sin, style, unsqueeze_dim)
        else:
            raise RotaryError(f"apply_cos_sin: direction='backward' needs x, cos and sin of one dtype for its gradient "
                              f"(got x {x.dtype}, cos {cos.dtype}, sin {sin.dtype})")
    if ctx.needs_input_grad[1] or ctx.needs_input_grad[2]:
        # d/dcos of x*cos + rotate(x)*sin is x (summed over the broadcast head axis); d/dsin is rotate(x).
        r = cos.shape[-1]
        xr = x[..., :r]
        g = grad[..., :r]
        if direction == "forward":
            dc, ds = g * xr, g * _rotate_pairs(xr, style)
        else:  # the forward was x*cos + rot^T(x*sin): d/dsin = x * rot(g)
            dc, ds = g * xr, xr * _rotate_pairs(g, style)
        reduce_dims = [unsqueeze_dim] + ([0] if cos.dim() >= 3 and cos.shape[0] == 1 and g.shape[0] != 1 else [])
        if ctx.needs_input_grad[1]:
            grad_cos = dc.sum(dim=reduce_dims, keepdim=True).reshape(cos.shape).to(cos.dtype)
        if ctx.needs_input_grad[2]:
            grad_sin = ds.sum(dim=reduce_dims, keepdim=True).reshape(sin.shape).to(sin.dtype)
    return grad_x, grad_cos, grad_sin, None, None, None, None


_apply_cos_sin_op.register_autograd(_apply_cos_sin_backward, setup_context=_apply_cos_sin_setup)


def _check_apply_args(tensors, unsqueeze_dim, rounding, style):
    if unsqueeze_dim not in (1, 2):
        raise RotaryError(f"unsqueeze_dim must be 1 (q [batch, heads, seq, dim]) or 2 (q [batch, seq, heads, dim]) "
                          f"(got {unsqueeze_dim})")
    if rounding not in ROUNDINGS:
        raise RotaryError(f"rounding must be 'like_torch' or 'once' (got {rounding!r})")
    if style not in ("neox", "gptj"):
        raise RotaryError(f"style must be 'neox' or 'gptj' (got {style!r})")
    for name, tensor in tensors:
        if not isinstance(tensor, torch.Tensor):
            raise RotaryError(f"{name} must be a torch.Tensor (got {type(tensor).__name__})")


def apply_rotary_pos_emb(q, k, cos, sin, position_ids=None, unsqueeze_dim: int = 1, *, rounding: str = "like_torch",
                         style: str = "neox"):
    """Hugging Face's apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1) through rotary's kernel.

    q, k: [batch, heads, seq, head_dim] (unsqueeze_dim=1) or [batch, seq, heads, head_dim]
    (unsqueeze_dim=2); cos, sin: [batch, seq, rotary_dim] as the rotary-embedding module returns
    them (rotary_dim <= head_dim: the rest of each head passes through, as in Phi-3 / GPT-NeoX).
    The result has torch's promoted dtype of q (k) and cos, sin, as HF's eager expression (a
    bfloat16 q with float32 cos/sin gives float32). rounding="like_torch" (default) is
    bit-identical to that expression for every dtype combination, and so is the gradient with
    respect to q and k; "once" computes in float64 and rounds once. style="gptj" for interleaved
    models. position_ids is accepted and ignored, as in transformers."""
    _check_apply_args((("q", q), ("k", k), ("cos", cos), ("sin", sin)), unsqueeze_dim, rounding, style)
    return (_apply_cos_sin(q, cos, sin, style, "forward", rounding, unsqueeze_dim),
            _apply_cos_sin(k, cos, sin, style, "forward", rounding, unsqueeze_dim))


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
