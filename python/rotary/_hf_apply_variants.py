"""The apply-function variants patch_model installs and fuse_rope checks, and the probe that picks,
for one of transformers' apply functions, the variant that gives its bits (_pick_function).
_Refusal, _describe and _same are the bit-for-bit comparison both probes use (this one and
patch_model's probe of rotary-embedding modules, _hf_patch.py).
"""
from __future__ import annotations

import inspect
import itertools

import torch

from ._rotary import RotaryError
from ._torch_cos_sin import _apply_cos_sin, _check_apply_args, apply_rotary_pos_emb_interleave


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


# ---- bit-for-bit comparison with transformers ------------------------------------------------------
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


# ---- picking the variant of one apply function --------------------------------------------------
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
