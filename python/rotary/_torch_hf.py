"""rotary.torch's Hugging Face drop-in: apply_rotary_pos_emb and its kin over explicit cos/sin,
transformers' float32 inv_freq chain (hf_inv_freq), RotaryEmbedding and patch_model. The public
names are re-exported by rotary.torch (python/rotary/torch.py). Sources: transformers
modeling_rope_utils.py (ROPE_INIT_FUNCTIONS, dynamic_rope_update) and modeling_llama.py
(LlamaRotaryEmbedding, apply_rotary_pos_emb, rotate_half); the other modeling_*.py files named
where their variant is handled.

torch.compile: nothing here creates or registers a Python object inside traced code. What must
run eagerly (reading rotary's tables, dynamic NTK's and LongRoPE's per-call choice of frequencies)
runs inside torch custom ops with fake implementations: rotary::apply_cos_sin,
rotary::embedding_inv_freq and rotary::embedding_cos_sin. A RotaryEmbedding crosses into its ops
as an integer id given once, at construction.
"""
from __future__ import annotations

import copy
import gc
import inspect
import itertools
import math
import sys
import weakref
from typing import Optional

import torch

from . import _rotary
from ._rotary import RotaryError
from ._spec import Spec
from ._table import expand, native_rows
from ._views import int64_positions
from ._torch_ops import _DTYPES, _current_dispatch_mode, _is_compiling, _kernel_ok, _view, eager_tensors

ROUNDINGS = ("like_torch", "once")
COS_SIN_LAYOUTS = ("neox", "gptj", "half")


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


# ---- the variants patch_model installs --------------------------------------------------------------
# transformers' modeling files hold several apply functions that differ in their call signature,
# in where they round and in the cos/sin layout they take (a survey of transformers 5.16):
#   compute "promote":   x * cos + rotate(x) * sin in torch's promoted dtype (LLaMA and most).
#   compute "float32":   x widened to float32 first, the result rounded back to x's dtype
#                        (Cohere, Cohere 2, ESM, ModernBERT).
#   compute "cast_back": the promoted expression rounded back to x's dtype (OLMo, OLMo 2, OLMo 3).
#   half=True:           cos/sin hold each pair's value once, [..., head_dim / 2], and the two
#                        halves of x rotate together (gpt-oss: first * cos - second * sin, which is
#                        first * cos + (-second) * sin exactly).
#   signatures:          (q, k, cos, sin[, position_ids], unsqueeze_dim=1) most; (x, cos, sin,
#                        unsqueeze_dim=1), one tensor (Gemma 3n, Gemma 4); (tensor, sin, cos), one
#                        tensor and half-width sin/cos in GPT-J's layout (GPT-J, CodeGen).
# patch_model picks, for each function, the variant that gives its bits on a probe (_pick_function).
def _rotate_one(x, cos, sin, unsqueeze_dim, style, rounding, compute, half):
    if half:  # each pair's value once: the neox layout is the value twice, halves side by side
        cos, sin = torch.cat((cos, cos), dim=-1), torch.cat((sin, sin), dim=-1)
    dtype = x.dtype
    if compute == "float32":
        x = x.float()
    out = _apply_cos_sin(x, cos, sin, style, "forward", rounding, unsqueeze_dim)
    return out if compute == "promote" else out.to(dtype)


def _make_pairs_function(style, rounding, compute, half, with_position_ids):
    def check(q, k, cos, sin, unsqueeze_dim):
        _check_apply_args((("q", q), ("k", k), ("cos", cos), ("sin", sin)), unsqueeze_dim, rounding, style)
        return (_rotate_one(q, cos, sin, unsqueeze_dim, style, rounding, compute, half),
                _rotate_one(k, cos, sin, unsqueeze_dim, style, rounding, compute, half))

    if with_position_ids:
        def apply_rotary_pos_emb(q, k, cos, sin, position_ids=None, unsqueeze_dim=1):
            return check(q, k, cos, sin, unsqueeze_dim)
    else:
        def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
            return check(q, k, cos, sin, unsqueeze_dim)
    return apply_rotary_pos_emb


def _make_single_function(style, rounding, compute, half):
    def apply_rotary_pos_emb(x, cos, sin, unsqueeze_dim=1):
        _check_apply_args((("x", x), ("cos", cos), ("sin", sin)), unsqueeze_dim, rounding, style)
        return _rotate_one(x, cos, sin, unsqueeze_dim, style, rounding, compute, half)
    return apply_rotary_pos_emb


def _make_gptj_tensor_function(rounding):
    # modeling_gptj.apply_rotary_pos_emb(tensor [b, s, h, d], sin, cos [b, s, d/2]):
    # repeat_interleave(sin[:, :, None, :], 2, 3), then tensor * cos + rotate_every_two(tensor) * sin.
    def apply_rotary_pos_emb(tensor, sin, cos):
        _check_apply_args((("tensor", tensor), ("sin", sin), ("cos", cos)), 2, rounding, "gptj")
        cos = torch.repeat_interleave(cos, 2, dim=-1)
        sin = torch.repeat_interleave(sin, 2, dim=-1)
        return _rotate_one(tensor, cos, sin, 2, "gptj", rounding, "promote", False)
    return apply_rotary_pos_emb


def _make_interleave_function(rounding):
    public = apply_rotary_pos_emb_interleave

    def apply_rotary_pos_emb_interleave_(q, k, cos, sin, position_ids=None, unsqueeze_dim=1):
        return public(q, k, cos, sin, unsqueeze_dim=unsqueeze_dim, rounding=rounding)
    apply_rotary_pos_emb_interleave_.__name__ = "apply_rotary_pos_emb_interleave"
    return apply_rotary_pos_emb_interleave_


def _make_multimodal_function(rounding, compute):
    def apply_multimodal_rotary_pos_emb(q, k, cos, sin, mrope_section, unsqueeze_dim=1):
        sections = list(mrope_section) * 2
        cos = torch.cat([m[i % 3] for i, m in enumerate(cos.split(sections, dim=-1))], dim=-1)
        sin = torch.cat([m[i % 3] for i, m in enumerate(sin.split(sections, dim=-1))], dim=-1)
        _check_apply_args((("q", q), ("k", k), ("cos", cos), ("sin", sin)), unsqueeze_dim, rounding, "neox")
        return (_rotate_one(q, cos, sin, unsqueeze_dim, "neox", rounding, compute, False),
                _rotate_one(k, cos, sin, unsqueeze_dim, "neox", rounding, compute, False))
    return apply_multimodal_rotary_pos_emb


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


def _hf_sinusoidal_positions(spec: Spec, num_positions: int) -> torch.Tensor:
    """GPT-J's and CodeGen's position table, create_sinusoidal_positions (modeling_gptj), operation
    for operation: [num_positions, rotary_dim] float32, sin of every pair then cos of every pair."""
    dim = spec.rotary_dim
    inv_freq = 1.0 / (spec.theta_base ** (torch.arange(0, dim, 2, dtype=torch.int64) / dim))
    angles = torch.einsum("i , j -> i j", torch.arange(num_positions, dtype=torch.int64).float(), inv_freq).float()
    return torch.cat((torch.sin(angles), torch.cos(angles)), dim=1)


def _exact_sinusoidal_positions(spec: Spec, num_positions: int) -> torch.Tensor:
    """The same table from rotary's exact table: correctly rounded float32 sin | cos."""
    table = _rotary.RopeCache(spec._native, "exact").table_for(0)
    cos, sin = native_rows(table, int64_positions(torch.arange(num_positions).numpy(), "positions"))
    return torch.cat((torch.from_numpy(sin), torch.from_numpy(cos)), dim=1)


# ---- RotaryEmbedding ----------------------------------------------------------------------------------
# Live RotaryEmbedding modules by id: how the custom ops below find theirs (weak: a module lives as
# long as its model keeps it). Ids are given in __init__, never in forward.
_EMBEDDINGS = weakref.WeakValueDictionary()
_NEXT_EMBEDDING = itertools.count(1)


def _embedding(embedding_id: int) -> "RotaryEmbedding":
    module = _EMBEDDINGS.get(embedding_id)
    if module is None:
        raise RotaryError(f"RotaryEmbedding {embedding_id} is gone (got the id of a released module)")
    return module


@torch.library.custom_op("rotary::embedding_inv_freq", mutates_args=())
def _embedding_inv_freq_op(position_ids: torch.Tensor, embedding: int, num_pairs: int) -> torch.Tensor:
    """precision="hf", dynamic NTK / LongRoPE: transformers' dynamic_rope_update for this call (the
    module's state moves as transformers' does), then the float32 inv_freq the call uses."""
    module = _embedding(embedding)
    module._update(position_ids)
    return module.inv_freq.to(device=position_ids.device, dtype=torch.float32, copy=True)


@_embedding_inv_freq_op.register_fake
def _(position_ids, embedding, num_pairs):
    return position_ids.new_empty((num_pairs,), dtype=torch.float32)


@torch.library.custom_op("rotary::embedding_cos_sin", mutates_args=())
def _embedding_cos_sin_op(position_ids: torch.Tensor, embedding: int,
                          width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """precision="exact": the float32 cos/sin rows [*position_ids.shape, width] (attention scaling
    included) from the table the module's RopeCache chose for this call, in the module's layout."""
    module = _embedding(embedding)
    module._update(position_ids)
    positions = int64_positions(position_ids.detach().cpu().numpy(), "position_ids")
    # The table RopeCache chose serves this call (its history, as transformers'): read at its seq_len.
    cos, sin = native_rows(module._current, positions, seq_len=module._current.seq_len)
    if module.cos_sin_layout != "half":
        cos, sin = expand(cos, module.cos_sin_layout), expand(sin, module.cos_sin_layout)
    return torch.from_numpy(cos).to(position_ids.device), torch.from_numpy(sin).to(position_ids.device)


@_embedding_cos_sin_op.register_fake
def _(position_ids, embedding, width):
    shape = tuple(position_ids.shape) + (width,)
    return position_ids.new_empty(shape, dtype=torch.float32), position_ids.new_empty(shape, dtype=torch.float32)


def _layer_spec(config, spec: Spec, layer_type: str) -> Spec:
    """The spec of one layer type of a transformers config. A heterogeneous config (Gemma 4: the
    full-attention layers' head_dim is global_head_dim) gives each type's own view through
    per_layer_config[layer_type], which is what transformers' module builds that type from."""
    view = getattr(config, "per_layer_config", None)
    if view is not None and layer_type in (getattr(config, "layer_types", None) or ()):
        return Spec.from_hf_config(view[layer_type], layer_type=layer_type)
    return spec.for_layer_type(layer_type)


class RotaryEmbedding(torch.nn.Module):
    """Hugging Face's rotary-embedding module (LlamaRotaryEmbedding and its kin), by rotary.

    forward(x, position_ids, layer_type=None) -> (cos, sin), each [batch, seq, rotary_dim] in x's
    dtype (M-RoPE: position_ids [3, batch, seq] give [3, batch, seq, rotary_dim], one row per
    stream, as Qwen2VLRotaryEmbedding), with the attention scaling applied, dynamic NTK growing and
    resetting and LongRoPE switching factor sets exactly as transformers' dynamic_rope_update does.
      precision="hf":    transformers' float32 chain (hf_inv_freq, float32 matmul, cos, sin):
                         bit-identical to transformers.
      precision="exact": correctly rounded float32 cos/sin from rotary's exact table.
    config: a transformers config, a config dict or path, or a rotary.Spec.
    Per-layer RoPE (Gemma 3 and its kin: rope_parameters per layer type): with layer_type=None and
    a config whose layer types have their own parameters, the module holds one RotaryEmbedding per
    layer type (self.layers) and forward needs layer_type, as Gemma3RotaryEmbedding's. layer_type=
    "sliding_attention" builds the module of that one type.
    dtype: the dtype of the inv_freq buffers, as transformers' module has them: model.to(dtype)
    casts them (and transformers then computes with the rounded frequencies), from_pretrained(...,
    dtype=...) does not. Pass the dtype of the inv_freq buffer of the module being replaced, or
    replace before casting the model (this module's buffers are cast with it). None: float32.
    cos_sin_layout: how each pair's value is laid out along the last axis: "neox" cat(f, f),
    "gptj" each value twice in a row, "half" each value once (gpt-oss); None: the spec's style.
    DeepSeek-V3 rotates interleaved pairs but its module returns cat(f, f): "neox" there.
    cos_sin_dtype: the dtype of cos/sin; None: x's dtype (OLMo 3's module returns float32).
    """

    def __init__(self, config=None, device=None, dtype=None, *, precision: str = "hf",
                 layer_type: Optional[str] = None, cos_sin_layout: Optional[str] = None,
                 cos_sin_dtype: Optional[torch.dtype] = None):
        super().__init__()
        if precision not in ("hf", "exact"):
            raise RotaryError(f"precision must be 'hf' or 'exact' (got {precision!r})")
        if cos_sin_layout not in (None,) + COS_SIN_LAYOUTS:
            raise RotaryError(f"cos_sin_layout must be None, 'neox', 'gptj' or 'half' (got {cos_sin_layout!r})")
        for name, value in (("dtype", dtype), ("cos_sin_dtype", cos_sin_dtype)):
            if value is not None and not (isinstance(value, torch.dtype) and value.is_floating_point):
                raise RotaryError(f"{name} must be None or a floating-point torch.dtype (got {value!r})")
        if isinstance(config, Spec):
            spec = config if layer_type is None else config.for_layer_type(layer_type)
        elif layer_type is not None:
            spec = _layer_spec(config, Spec.from_hf_config(config), layer_type)
        else:
            spec = Spec.from_hf_config(config)
        self.spec = spec
        self.precision = precision
        self.cos_sin_layout = cos_sin_layout or spec.style
        self.cos_sin_dtype = cos_sin_dtype
        self.layer_types = spec.layer_type_names if layer_type is None else ()
        if self.layer_types:
            self.layers = torch.nn.ModuleDict({
                name: RotaryEmbedding(spec.for_layer_type(name) if isinstance(config, Spec) else
                                      _layer_spec(config, spec, name), device, dtype, precision=precision,
                                      cos_sin_layout=cos_sin_layout, cos_sin_dtype=cos_sin_dtype)
                for name in self.layer_types})
            return
        self.layers = None
        self.rope_type = spec.rope_type
        self.max_seq_len_cached = spec.max_position_embeddings
        self.original_max_seq_len = spec.original_context
        self._cache = _rotary.RopeCache(spec._native, precision)
        self._current = self._cache.table_for(0)
        if precision == "hf":
            inv_freq = hf_inv_freq(spec)
        else:
            inv_freq = torch.tensor(self._current.inv_freq_f32, dtype=torch.float32)
        inv_freq = inv_freq.to(device=device, dtype=dtype)
        # Both are buffers, as transformers' (model.to(dtype) casts both; dynamic NTK's reset and
        # LongRoPE's short factors come back as original_inv_freq, in that dtype).
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.register_buffer("original_inv_freq", inv_freq.clone(), persistent=False)
        self.attention_scaling = self._current.attention_scaling
        self._id = next(_NEXT_EMBEDDING)
        _EMBEDDINGS[self._id] = self

    @torch.no_grad()
    def forward(self, x: torch.Tensor, position_ids: torch.Tensor, layer_type: Optional[str] = None):
        if self.layers is not None:
            if layer_type not in self.layer_types:
                raise RotaryError(f"layer_type must be one of this module's layer types "
                                  f"({', '.join(self.layer_types)}) (got {layer_type!r})")
            return self.layers[layer_type]._cos_sin(x, position_ids)
        if layer_type is not None:
            raise RotaryError(f"layer_type must be None: this module has one RoPE, not one per layer type "
                              f"(got {layer_type!r})")
        return self._cos_sin(x, position_ids)

    def _cos_sin(self, x: torch.Tensor, position_ids: torch.Tensor):
        if position_ids.is_floating_point():
            raise RotaryError(f"position_ids must hold integers (got dtype {position_ids.dtype})")
        out_dtype = self.cos_sin_dtype or x.dtype
        if self.precision == "exact":
            # Every pair at each given position (M-RoPE: per stream; the apply function picks sections).
            width = self.spec.num_pairs * (1 if self.cos_sin_layout == "half" else 2)
            cos, sin = _embedding_cos_sin_op(position_ids, self._id, width)
            return cos.to(device=x.device, dtype=out_dtype), sin.to(device=x.device, dtype=out_dtype)
        if self.spec.sequence_dependent:
            inv_freq = _embedding_inv_freq_op(position_ids, self._id, self.spec.num_pairs)
        else:
            inv_freq = self.inv_freq
        # transformers' LlamaRotaryEmbedding.forward, operation for operation (M-RoPE's
        # [3, batch, seq] position_ids: Qwen2VLRotaryEmbedding's, one more leading axis).
        lead = tuple(position_ids.shape[:-1])
        inv_freq_expanded = inv_freq.float().reshape((1,) * len(lead) + (-1, 1)).expand(*lead, -1, 1)
        inv_freq_expanded = inv_freq_expanded.to(x.device)
        position_ids_expanded = position_ids.unsqueeze(-2).float()
        device_type = x.device.type if isinstance(x.device.type, str) and x.device.type != "mps" else "cpu"
        with torch.autocast(device_type=device_type, enabled=False):
            freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(-1, -2)
            if self.cos_sin_layout == "neox":
                emb = torch.cat((freqs, freqs), dim=-1)
            elif self.cos_sin_layout == "gptj":
                emb = freqs.repeat_interleave(2, -1)
            else:
                emb = freqs
            cos = emb.cos() * self.attention_scaling
            sin = emb.sin() * self.attention_scaling
        return cos.to(dtype=out_dtype), sin.to(dtype=out_dtype)

    def _update(self, position_ids: torch.Tensor) -> None:
        """dynamic_rope_update: the table for this call's largest position (RopeCache keeps
        transformers' grow / reset / long-short rules). Runs eagerly, inside the custom ops."""
        if not self.spec.sequence_dependent:
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
            # cast it to.
            if (self.rope_type == "dynamic" and seq_len <= self.spec.max_position_embeddings) or (
                    self.rope_type == "longrope" and seq_len <= self.spec.original_context):
                inv = self.original_inv_freq
            else:
                inv = hf_inv_freq(self.spec, seq_len)
        else:
            inv = torch.tensor(table.inv_freq_f32, dtype=torch.float32)
        self.register_buffer("inv_freq", inv.to(self.inv_freq.device), persistent=False)
        self.attention_scaling = table.attention_scaling

    def __deepcopy__(self, memo):
        """A copy with its own id and its own RopeCache in the same state (the table this one
        serves: dynamic NTK grown to the same seq_len, LongRoPE on the same factor set), so that a
        copied model (copy.deepcopy, as for an EMA model) never reads or moves this one's state."""
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        for key, value in self.__dict__.items():
            if key == "spec":
                new.spec = value  # immutable: shared
            elif key not in ("_cache", "_current", "_id"):
                new.__dict__[key] = copy.deepcopy(value, memo)
        if self.layers is None:
            new._cache = _rotary.RopeCache(self.spec._native, self.precision)
            new._current = new._cache.table_for(0)
            if new._current.seq_len != self._current.seq_len:
                new._current = new._cache.table_for(self._current.seq_len - 1)
            if new._current.seq_len != self._current.seq_len or \
                    list(new._current.inv_freq_f32) != list(self._current.inv_freq_f32):
                raise RotaryError(f"RotaryEmbedding: cannot copy the state of a module serving seq_len "
                                  f"{self._current.seq_len} (got seq_len {new._current.seq_len} on replay)")
            new._id = next(_NEXT_EMBEDDING)
            _EMBEDDINGS[new._id] = new
        return new

    def extra_repr(self) -> str:
        types = f", layer_types={self.layer_types}" if self.layer_types else ""
        return f"spec={self.spec!r}, precision={self.precision!r}, cos_sin_layout={self.cos_sin_layout!r}{types}"


# ---- patch_model ------------------------------------------------------------------------------------------
_APPLY_NAMES = ("apply_rotary_pos_emb", "apply_rotary_pos_emb_interleave", "apply_multimodal_rotary_pos_emb")
# Probe positions: short, past every context a test or real model trains at (dynamic NTK grows,
# LongRoPE takes its long factors), short again (dynamic NTK resets, LongRoPE back to short).
_PROBE_STARTS = (0, 100_000, 3)
_PROBE_SEQ = 9
_PROBE_X_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


class _Refusal(Exception):
    """Why one candidate replacement does not reproduce transformers' piece (collected, then reported)."""


def _describe(value) -> str:
    if isinstance(value, torch.Tensor):
        return f"one {value.dtype} tensor {tuple(value.shape)}"
    if isinstance(value, (tuple, list)):
        return f"{len(value)} values"
    return type(value).__name__


def _same(expected, got, what):
    """expected and got: a tensor or a tuple of tensors; raises _Refusal unless bit-identical."""
    def parts(value):
        return (value,) if isinstance(value, torch.Tensor) else tuple(value) if isinstance(value, (tuple, list)) \
            else None

    expected_parts, got_parts = parts(expected), parts(got)
    if expected_parts is None or got_parts is None or len(expected_parts) != len(got_parts):
        raise _Refusal(f"{what}: transformers returns {_describe(expected)}, rotary {_describe(got)}")
    expected, got = expected_parts, got_parts
    for e, g in zip(expected, got):
        if not isinstance(e, torch.Tensor):
            raise _Refusal(f"{what}: transformers returns a {type(e).__name__}, not tensors")
        if e.dtype != g.dtype or e.shape != g.shape:
            raise _Refusal(f"{what}: transformers gives {e.dtype} {tuple(e.shape)}, rotary {g.dtype} {tuple(g.shape)}")
        if not torch.equal(e, g):
            diff = (e.double() - g.double()).abs().max().item()
            raise _Refusal(f"{what}: values differ from transformers' (max |diff| {diff:.3g})")


def _forward_parameters(module) -> tuple:
    """The names of forward's parameters after self (decorators followed through __wrapped__)."""
    try:
        parameters = inspect.signature(type(module).forward).parameters
    except (TypeError, ValueError):
        return ()
    return tuple(name for name in parameters if name != "self")


def _hf_layer_types(module) -> tuple:
    """The layer types a per-layer-type module (Gemma3RotaryEmbedding and its kin) serves: those
    with their own rope_parameters (transformers keeps a rope_type for each)."""
    rope_type = getattr(module, "rope_type", None)
    return tuple(sorted(rope_type)) if isinstance(rope_type, dict) else ()


def _probe_positions(spec: Spec, start: int) -> torch.Tensor:
    """[2, seq] positions from start (row 1 three later), [3, 2, seq] for M-RoPE (h, w ahead of t)."""
    base = torch.arange(_PROBE_SEQ, dtype=torch.int64) + start
    rows = torch.stack((base, base + 3))
    if spec.axes == "mrope":
        return torch.stack((rows, rows + 1, rows + 2))
    return rows


def _carry_buffers(new: RotaryEmbedding, old, prefix: str) -> None:
    """new's inv_freq buffers in the dtype and on the device of old's (prefix: Gemma 3's per-type names)."""
    for name in ("inv_freq", "original_inv_freq"):
        given = getattr(old, prefix + name, None)
        if isinstance(given, torch.Tensor):
            setattr(new, name, getattr(new, name).to(device=given.device, dtype=given.dtype))


def _build_embedding(source, layer_types, old, precision, layout, cos_sin_dtype):
    """source: transformers' config (per layer type: each type's spec as transformers reads it) or
    a single-RoPE spec. The inv_freq buffers take the dtype and device of old's."""
    new = RotaryEmbedding(source, precision=precision, cos_sin_layout=layout, cos_sin_dtype=cos_sin_dtype)
    if layer_types:
        for name in layer_types:
            _carry_buffers(new.layers[name], old, f"{name}_")
    else:
        _carry_buffers(new, old, "")
    return new


def _probe_embedding(source, probe_spec, layer_types, old, layout, cos_sin_dtype):
    """Runs a fresh copy of transformers' module and rotary's precision="hf" reproduction on the
    probe positions in every dtype, per layer type; raises _Refusal at the first difference."""
    theirs = copy.deepcopy(old)
    ours = _build_embedding(source, layer_types, old, "hf", layout, cos_sin_dtype)
    device = next((b.device for b in old.buffers()), torch.device("cpu"))
    for x_dtype in _PROBE_X_DTYPES:
        x = torch.zeros(1, dtype=x_dtype, device=device)
        for start in _PROBE_STARTS:
            position_ids = _probe_positions(probe_spec, start).to(device)
            for layer_type in layer_types or (None,):
                args = (x, position_ids) if layer_type is None else (x, position_ids, layer_type)
                what = f"cos/sin at positions {start}..{start + _PROBE_SEQ + 2} ({x_dtype}" + \
                       (f", layer type {layer_type!r})" if layer_type else ")")
                try:
                    expected = theirs(*args)
                except Exception as error:  # transformers' own module fails: nothing to reproduce
                    raise _Refusal(f"{what}: transformers' module raises {type(error).__name__}: {error}") from None
                try:
                    got = ours(*args)
                except Exception as error:
                    raise _Refusal(f"{what}: rotary raises {type(error).__name__}: {error}") from None
                _same(expected, got, what)


def _plan_embedding(model_name, path, module, precision):
    """The RotaryEmbedding replacing transformers' module at path and the specs it serves, or RotaryError."""
    where = f"patch_model: cannot serve {model_name} exactly: {path} ({type(module).__name__})"
    parameters = _forward_parameters(module)
    if parameters[:2] != ("x", "position_ids") or len(parameters) > 3 or (
            len(parameters) == 3 and parameters[2] != "layer_type"):
        raise RotaryError(f"{where} has forward({', '.join(parameters)}); rotary serves forward(x, position_ids) "
                          "and forward(x, position_ids, layer_type); nothing was patched")
    try:
        spec = Spec.from_hf_config(module.config)
    except RotaryError as error:
        raise RotaryError(f"{where}: rotary cannot read its config: {error}; nothing was patched") from None
    layer_types = _hf_layer_types(module) if len(parameters) == 3 else ()
    missing = [name for name in layer_types if name not in spec.layer_type_names]
    if missing:
        raise RotaryError(f"{where} has RoPE parameters for layer types {', '.join(layer_types)}, rotary's config "
                          f"reader finds {', '.join(spec.layer_type_names) or 'none'} (missing "
                          f"{', '.join(missing)}); nothing was patched")
    if layer_types:
        source = module.config  # each layer type's spec as transformers' module reads it (_layer_spec)
        try:
            probe_spec = _layer_spec(module.config, spec, layer_types[0])
        except (RotaryError, ValueError) as error:
            raise RotaryError(f"{where}: rotary cannot read layer type {layer_types[0]!r}: {error}; "
                              "nothing was patched") from None
    else:
        # One RoPE for every layer: the config's main parameters, without any per-type ones.
        source = probe_spec = spec.replace() if spec.layer_type_names else spec
    # Candidates: the layout of the spec's pair style first, then the others; cos/sin in x's dtype
    # first, then float32 (OLMo 3). The first that reproduces transformers' module bit for bit wins.
    layouts = [probe_spec.style] + [name for name in COS_SIN_LAYOUTS if name != probe_spec.style]
    reasons = []
    for layout, cos_sin_dtype in itertools.product(layouts, (None, torch.float32)):
        try:
            _probe_embedding(source, probe_spec, layer_types, module, layout, cos_sin_dtype)
        except _Refusal as refusal:
            reasons.append(f"as {layout!r}{'' if cos_sin_dtype is None else ' float32'}: {refusal}")
            continue
        except (RotaryError, ValueError) as error:
            reasons.append(f"as {layout!r}: {error}")
            continue
        new = _build_embedding(source, layer_types, module, precision, layout, cos_sin_dtype)
        return new, [new.layers[t].spec for t in layer_types] if layer_types else [new.spec]
    raise RotaryError(f"{where}: its cos/sin are not rotary's ({reasons[0]}); nothing was patched")


def _plan_position_tables(model_name, model, precision):
    """GPT-J and CodeGen keep a sin | cos table per attention layer (embed_positions, from
    create_sinusoidal_positions) instead of a rotary-embedding module: [(module, new table)], the
    spec, or ([], None) for models without one."""
    holders = [(path, m) for path, m in model.named_modules() if isinstance(getattr(m, "embed_positions", None),
                                                                           torch.Tensor)
               and hasattr(sys.modules[type(m).__module__], "create_sinusoidal_positions")]
    if not holders:
        return [], None
    config = getattr(model, "config", None)
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    where = f"patch_model: cannot serve {model_name} exactly"
    try:
        spec = Spec.from_hf_config(config)
    except RotaryError as error:
        raise RotaryError(f"{where}: rotary cannot read its config: {error}; nothing was patched") from None
    plans, mirrors = [], {}
    for path, holder in holders:
        table = holder.embed_positions
        rows = table.shape[0]
        if rows not in mirrors:
            mirrors[rows] = _hf_sinusoidal_positions(spec, rows)
        mirror = mirrors[rows].to(device=table.device, dtype=table.dtype)
        try:
            _same(table, mirror, f"{path}.embed_positions")
        except _Refusal as refusal:
            raise RotaryError(f"{where}: {refusal} (rotary's spec: {spec!r}); nothing was patched") from None
        if precision == "exact":
            key = ("exact", rows)
            if key not in mirrors:
                mirrors[key] = _exact_sinusoidal_positions(spec, rows)
            mirror = mirrors[key].to(device=table.device, dtype=table.dtype)
        plans.append((path, holder, mirror))
    return plans, spec


def _modeling_modules(model) -> list:
    """The transformers modeling_* modules that define the model's submodules (a composite model's
    language model may live in another file than the model class)."""
    seen = []
    for module in model.modules():
        name = type(module).__module__
        if name.startswith("transformers.models.") and sys.modules.get(name) not in seen:
            seen.append(sys.modules[name])
    return seen


def _function_candidates(name, parameters, rounding):
    """(description, function) pairs with the call signature of transformers' function, or None."""
    computes = ("promote", "float32", "cast_back")
    if name == "apply_rotary_pos_emb" and parameters in (("q", "k", "cos", "sin", "unsqueeze_dim"),
                                                         ("q", "k", "cos", "sin", "position_ids", "unsqueeze_dim")):
        with_ids = "position_ids" in parameters
        return [(f"{style} pairs{' (half-width cos/sin)' if half else ''}, {compute}",
                 _make_pairs_function(style, rounding, compute, half, with_ids))
                for half in (False, True) for style in ("neox", "gptj") for compute in computes
                if not (half and style == "gptj")]
    if name == "apply_rotary_pos_emb" and parameters == ("x", "cos", "sin", "unsqueeze_dim"):
        return [(f"{style} pairs, one tensor{' (half-width cos/sin)' if half else ''}, {compute}",
                 _make_single_function(style, rounding, compute, half))
                for half in (False, True) for style in ("neox", "gptj") for compute in computes
                if not (half and style == "gptj")]
    if name == "apply_rotary_pos_emb" and parameters == ("tensor", "sin", "cos"):
        return [("GPT-J's (tensor, sin, cos)", _make_gptj_tensor_function(rounding))]
    if name == "apply_rotary_pos_emb_interleave" and parameters == ("q", "k", "cos", "sin", "position_ids",
                                                                    "unsqueeze_dim"):
        return [("DeepSeek's interleave", _make_interleave_function(rounding))]
    if name == "apply_multimodal_rotary_pos_emb" and parameters == ("q", "k", "cos", "sin", "mrope_section",
                                                                    "unsqueeze_dim"):
        return [(f"M-RoPE, {compute}", _make_multimodal_function(rounding, compute)) for compute in ("promote",
                                                                                                     "float32")]
    return None


def _function_probes(name, parameters, specs):
    """Argument tuples for probing one apply function: random q, k, cos, sin (cos and sin need not
    be tables: the kernel reads them per element, so any values must give transformers' bits) in
    every dtype combination a model produces (cos/sin in q's dtype, or float32), both unsqueeze_dims,
    the rotary width and the whole head (partial rotary passes the rest through)."""
    g = torch.Generator().manual_seed(20261122)

    def rand(*shape, dtype):
        return (torch.randn(shape, generator=g) * 4).to(dtype)

    probes = []
    dtypes = [(torch.float32, torch.float32), (torch.bfloat16, torch.bfloat16), (torch.float16, torch.float16),
              (torch.bfloat16, torch.float32), (torch.float16, torch.float32)]
    shapes = sorted({(s.rotary_dim, s.head_dim, s.mrope_section) for s in specs})
    for rotary_dim, head_dim, sections in shapes:
        for (x_dtype, cos_dtype), unsqueeze_dim, width in itertools.product(dtypes, (1, 2),
                                                                            sorted({rotary_dim, head_dim})):
            b, s = 2, 5
            cos_batch = 1 if x_dtype == torch.bfloat16 else b  # cos broadcast over the batch, as for [1, seq] ids

            def x_of(heads):
                return rand(b, heads, s, width, dtype=x_dtype) if unsqueeze_dim == 1 else \
                    rand(b, s, heads, width, dtype=x_dtype)

            what = f"(q {x_dtype}, cos {cos_dtype}, width {width}, unsqueeze_dim {unsqueeze_dim})"
            if parameters == ("tensor", "sin", "cos"):
                if unsqueeze_dim == 1:
                    continue
                half = rotary_dim // 2
                probes.append((what, (x_of(3), rand(cos_batch, s, half, dtype=x_dtype),
                                      rand(cos_batch, s, half, dtype=x_dtype)), {}))
                continue
            if name == "apply_multimodal_rotary_pos_emb":
                if not sections:
                    continue
                cos = rand(3, cos_batch, s, rotary_dim, dtype=cos_dtype)
                sin = rand(3, cos_batch, s, rotary_dim, dtype=cos_dtype)
                probes.append((what, (x_of(3), x_of(2), cos, sin, list(sections)), {"unsqueeze_dim": unsqueeze_dim}))
                continue
            # Full cos/sin, or each pair's value once (gpt-oss; an odd half is no rotation width).
            for cos_width in (rotary_dim,) + ((rotary_dim // 2,) if rotary_dim % 4 == 0 else ()):
                cos = rand(cos_batch, s, cos_width, dtype=cos_dtype)
                sin = rand(cos_batch, s, cos_width, dtype=cos_dtype)
                label = what[:-1] + f", cos width {cos_width})"
                if parameters[0] == "x":
                    probes.append((label, (x_of(3), cos, sin), {"unsqueeze_dim": unsqueeze_dim}))
                else:
                    probes.append((label, (x_of(3), x_of(2), cos, sin), {"unsqueeze_dim": unsqueeze_dim}))
    return probes


def _pick_function(model_name, modeling, name, original, specs, rounding):
    """The rotary function that gives transformers' function's bits wherever it gives an answer on
    the probes, or RotaryError."""
    where = f"patch_model: cannot serve {model_name} exactly: {modeling.__name__}.{name}"
    try:
        parameters = tuple(inspect.signature(original).parameters)
    except (TypeError, ValueError):
        parameters = ()
    candidates = _function_candidates(name, parameters, "like_torch")
    if candidates is None:
        raise RotaryError(f"{where}({', '.join(parameters)}) is not a signature rotary serves; nothing was patched")
    answered = []
    for what, args, kwargs in _function_probes(name, parameters, specs):
        try:
            answered.append((what, args, kwargs, original(*args, **kwargs)))
        except Exception:  # a shape transformers' function does not take (the model never calls it so)
            continue
    if not answered:
        raise RotaryError(f"{where} takes none of rotary's probe shapes; nothing was patched")
    reasons = []
    for index, (description, candidate) in enumerate(candidates):
        try:
            for what, args, kwargs, expected in answered:
                try:
                    got = candidate(*args, **kwargs)
                except Exception as error:  # a shape transformers takes and this variant does not
                    raise _Refusal(f"{what}: rotary raises {type(error).__name__}: {error}") from None
                _same(expected, got, what)
        except _Refusal as refusal:
            reasons.append(f"as {description}: {refusal}")
            continue
        return description, _function_candidates(name, parameters, rounding)[index][1]
    raise RotaryError(f"{where} computes what no rotary variant reproduces bit for bit ({reasons[0]}); "
                      "nothing was patched")


def patch_model(model, *, precision: str = "hf", rounding: Optional[str] = None):
    """Replaces a transformers model's RoPE by rotary's: every rotary-embedding module (with its
    config) by a RotaryEmbedding, GPT-J's / CodeGen's position tables by rotary's, and the apply
    functions of the model's modeling_* modules (apply_rotary_pos_emb, apply_rotary_pos_emb_interleave,
    apply_multimodal_rotary_pos_emb) by rotary's kernel (rounding 'like_torch' for precision 'hf',
    'once' for 'exact'). Returns the list of what was replaced.

    Nothing is replaced on trust. Each piece is first run against rotary's precision="hf"
    reproduction on probe inputs (positions 0..., 100000... and back, float32 / bfloat16 /
    float16, every layer type; random q, k, cos, sin in every dtype combination) and must give
    transformers' bits; rotary picks, among its variants with the piece's call signature, the one
    that does. A piece that none reproduces is a RotaryError that names the model class, the module
    path or function and what differs, raised before anything is changed (nothing is patched).
    Per-layer RoPE (Gemma 3, forward(x, position_ids, layer_type)) becomes one RotaryEmbedding per
    layer type. The inv_freq buffers keep the dtype model.to(dtype) gave transformers' (dtype rule:
    RotaryEmbedding). Rotary-embedding modules without a config (vision towers' position embeddings,
    forward(seqlen)) are left as they are. The module-level functions are replaced in the modeling
    module, so every model of those classes in the process uses them, until unpatch_model (or the
    `patched` context manager) undoes the patch of the last model that uses them."""
    if precision not in ("hf", "exact"):
        raise RotaryError(f"precision must be 'hf' or 'exact' (got {precision!r})")
    if rounding is not None and rounding not in ROUNDINGS:
        raise RotaryError(f"rounding must be None, 'like_torch' or 'once' (got {rounding!r})")
    rounding = rounding or ("like_torch" if precision == "hf" else "once")
    model_name = type(model).__name__
    done = [path for path, m in model.named_modules() if isinstance(m, RotaryEmbedding)]
    if done:
        raise RotaryError(f"patch_model: {model_name} is already patched (rotary modules at "
                          f"{', '.join(p or '<model>' for p in done)}); patch a fresh model")
    # 1. Plan everything (probes, no change to the model or to any module).
    embeddings, specs = [], []
    for path, module in model.named_modules():
        if not type(module).__name__.endswith("RotaryEmbedding") or getattr(module, "config", None) is None:
            # Not a text rotary-embedding module built from a config: e.g. Qwen2-VL's
            # VisionRotaryEmbedding(dim, theta), forward(seqlen). Left as it is.
            continue
        new, new_specs = _plan_embedding(model_name, path, module, precision)
        embeddings.append((path, new))
        specs.extend(new_specs)
    tables, table_spec = _plan_position_tables(model_name, model, precision)
    if table_spec is not None:
        specs.append(table_spec)
    if not embeddings and not tables:
        raise RotaryError(f"patch_model: {model_name} has no rotary-embedding module built from a config and no "
                          "GPT-J position table: nothing rotary can serve; nothing was patched")
    functions = []
    for modeling in _modeling_modules(model):
        for name in _APPLY_NAMES:
            current = _function_slot(modeling, name)[1]
            if not callable(current):
                continue
            original = getattr(current, "rotary_original", current)  # patched before: probe transformers' own
            description, function = _pick_function(model_name, modeling, name, original, specs, rounding)
            function.rotary_original = original
            function.rotary_variant = description
            functions.append((modeling, name, function))
    # 2. Apply, keeping what unpatch_model needs to put everything back.
    replaced = []
    undo = _PatchRecord()
    for path, new in embeddings:
        parent_name, _, attr = path.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        undo.modules.append((parent_name, attr, getattr(parent, attr)))
        setattr(parent, attr, new)
        replaced.append(path)
    for path, holder, table in tables:
        undo.buffers.append((path, holder.embed_positions, "embed_positions" not in holder._non_persistent_buffers_set))
        holder.register_buffer("embed_positions", table, persistent=False)
        replaced.append(f"{path}.embed_positions")
    for modeling, name, function in functions:
        key = (modeling.__name__, name)
        original, users = _FUNCTION_USERS.setdefault(key, (function.rotary_original, weakref.WeakSet()))
        users.add(undo)
        undo.functions.append(key)
        holder, _ = _function_slot(modeling, name)
        setattr(holder, "rotary_fused_inner" if holder is not modeling else name, function)
        replaced.append(f"{modeling.__name__}.{name}")
    model._rotary_patch = undo
    return replaced


def _function_slot(modeling, name):
    """(holder, function): where the module-level function `name` lives. fuse_rope's wrapper
    (rotary/_torch_fused.py) stands in the module and calls its rotary_fused_inner: patching
    replaces that inner, so that the wrapper (and the fused models relying on it) stays."""
    current = getattr(modeling, name, None)
    inner = getattr(current, "rotary_fused_inner", None)
    if inner is not None and name == "apply_rotary_pos_emb":
        from ._torch_fused import drop_unused_wrapper  # here: _torch_fused imports this module

        if drop_unused_wrapper(modeling):
            return modeling, getattr(modeling, name, None)
    return (current, inner) if inner is not None else (modeling, current)


class _PatchRecord:
    """What patch_model replaced in one model: (parent path, attribute, old module), (holder path,
    old buffer, persistent) and the module-level functions' keys. Kept on the model as
    model._rotary_patch (a plain attribute: not a submodule, not in the state dict); paths, not
    modules, so that the record makes no reference cycle through the model."""

    def __init__(self):
        self.modules: list = []
        self.buffers: list = []
        self.functions: list = []

    def __deepcopy__(self, memo):
        """copy.deepcopy of a patched model copies its record: the copy counts as a user of the
        patched functions (unpatching the original does not take them from the copy)."""
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        new.__dict__.update(copy.deepcopy(self.__dict__, memo))
        for key in new.functions:
            entry = _FUNCTION_USERS.get(key)
            if entry is not None:
                entry[1].add(new)
        return new


# Module-level functions are process-wide: every patched model of a modeling module shares them.
# (module name, function name) -> (transformers' original, the _PatchRecords of the live patched
# models using it: each model holds its record);
# the original goes back when the last of those models is unpatched (a model that was dropped
# without unpatch_model stops counting once it is collected).
_FUNCTION_USERS: dict = {}


def unpatch_model(model) -> list:
    """Undoes patch_model(model): puts back the model's own rotary-embedding modules and position
    tables, and transformers' apply functions in the modeling modules once no other patched model
    uses rotary's (they are process-wide). Returns the list of what was restored. A model that
    patch_model did not patch is a RotaryError."""
    undo = getattr(model, "_rotary_patch", None)
    if not isinstance(undo, _PatchRecord):
        raise RotaryError(f"unpatch_model: {type(model).__name__} was not patched by rotary.torch.patch_model "
                          "(nothing to undo)")
    restored = []
    for parent_name, attr, old in undo.modules:
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, attr, old)
        restored.append(f"{parent_name}.{attr}" if parent_name else attr)
    for path, old, persistent in undo.buffers:
        model.get_submodule(path).register_buffer("embed_positions", old, persistent=persistent)
        restored.append(f"{path}.embed_positions")
    collected = False
    for key in undo.functions:
        entry = _FUNCTION_USERS.get(key)
        if entry is None:
            continue
        original, users = entry
        users.discard(undo)
        if users and not collected:
            gc.collect()  # patched models dropped in a reference cycle no longer count
            collected = True
        if users:
            continue
        module = sys.modules.get(key[0])
        holder, current = _function_slot(module, key[1]) if module is not None else (None, None)
        if module is not None and getattr(current, "rotary_original", None) is original:
            # only rotary's own replacement is taken back
            setattr(holder, "rotary_fused_inner" if holder is not module else key[1], original)
            restored.append(f"{key[0]}.{key[1]}")
        del _FUNCTION_USERS[key]
    del model._rotary_patch
    return restored


class patched:
    """patch_model as a context manager: ``with rotary.torch.patched(model): ...`` runs the block
    on rotary's RoPE and undoes the patch on exit (also when the block raises). Takes
    patch_model's arguments; `as` gives the list of what was replaced."""

    def __init__(self, model, **kwargs):
        self._model = model
        self._kwargs = kwargs

    def __enter__(self) -> list:
        return patch_model(self._model, **self._kwargs)

    def __exit__(self, *exc) -> None:
        unpatch_model(self._model)
