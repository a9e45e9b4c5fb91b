"""rotary.torch's Hugging Face drop-in: apply_rotary_pos_emb and its kin over explicit cos/sin,
transformers' float32 inv_freq chain (hf_inv_freq), RotaryEmbedding and patch_model. The public
names are re-exported by rotary.torch (python/rotary/torch.py). Sources: transformers
modeling_rope_utils.py (ROPE_INIT_FUNCTIONS, dynamic_rope_update) and modeling_llama.py
(LlamaRotaryEmbedding, apply_rotary_pos_emb, rotate_half)."""
from __future__ import annotations

import math
from typing import Optional

import torch

from . import _rotary
from ._rotary import RotaryError
from ._spec import Spec
from ._table import Table, _expand, native_rows, int64_positions
from ._torch_ops import _DTYPES, _kernel_ok, _view

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
        # Every pair at each given position (M-RoPE: per stream; the apply function picks sections).
        # The table RopeCache chose serves this call (its history, as transformers'): read at its seq_len.
        positions = int64_positions(position_ids.detach().cpu().numpy(), "position_ids")
        cos, sin = native_rows(self._current, positions, seq_len=self._current.seq_len)
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
