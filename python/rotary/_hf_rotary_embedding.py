"""transformers' float32 inv_freq chain in torch ops (hf_inv_freq), GPT-J's sinusoidal position
table, and RotaryEmbedding, the drop-in for Hugging Face's rotary-embedding module. The public
names are re-exported by rotary.torch (python/rotary/torch.py). Sources: transformers
modeling_rope_utils.py (ROPE_INIT_FUNCTIONS, dynamic_rope_update), modeling_llama.py
(LlamaRotaryEmbedding) and modeling_gptj.py (create_sinusoidal_positions).

torch.compile: what must run eagerly (reading rotary's tables, dynamic NTK's and LongRoPE's
per-call choice of frequencies) runs inside the torch custom ops rotary::embedding_inv_freq and
rotary::embedding_cos_sin, which have fake implementations. A RotaryEmbedding crosses into its
ops as an integer id given once, at construction.
"""
from __future__ import annotations

import copy
import itertools
import math
import weakref
from typing import Optional

import torch

from . import _rotary
from ._rotary import RotaryError
from ._spec import Spec
from ._table import expand, native_rows
from ._views import int64_positions

COS_SIN_LAYOUTS = ("neox", "gptj", "half")


# ---- Hugging Face's float32 inv_freq, in torch ops ------------------------------------------------
# One function per scaling scheme, (spec, seq_len) -> float32 inv_freq, each the C++ scheme file's
# hf_inv_freq_f32 (src/core/scaling/) in torch ops. HF_INV_FREQ_CHAINS lists them by rope_type;
# tests/python/test_hf_scaling_schemes.py checks it covers every scheme the C++ registry has.
def _hf_exponent(dim: int) -> torch.Tensor:
    """`torch.arange(0, dim, 2, dtype=int64).float() / dim`, as ROPE_INIT_FUNCTIONS write it."""
    return torch.arange(0, dim, 2, dtype=torch.int64).to(dtype=torch.float) / dim


def _hf_default(spec: Spec, seq_len: Optional[int]) -> torch.Tensor:
    return 1.0 / (spec.theta_base ** _hf_exponent(spec.rotary_dim))


def _hf_ntk_alpha(spec: Spec, seq_len: Optional[int]) -> torch.Tensor:
    # Not an HF rope_type: vLLM's new base in float64, then the default chain.
    return 1.0 / (spec.frequencies().effective_theta_base ** _hf_exponent(spec.rotary_dim))


def _hf_linear(spec: Spec, seq_len: Optional[int]) -> torch.Tensor:
    return (1.0 / (spec.theta_base ** _hf_exponent(spec.rotary_dim))) / spec.factor


def _hf_dynamic(spec: Spec, seq_len: Optional[int]) -> torch.Tensor:
    dim = spec.rotary_dim
    base = spec.theta_base
    exponent = _hf_exponent(dim)
    limit = spec.max_position_embeddings
    factor = spec.factor
    if seq_len is None or seq_len <= limit:
        # transformers at construction (and reset): seq_len = max_position_embeddings, Python floats.
        base = base * ((factor * limit / limit) - (factor - 1)) ** (dim / (dim - 2))
        return 1.0 / (base ** exponent)
    seq = torch.tensor(seq_len, dtype=torch.int64)
    new_base = base * ((spec.factor * seq / limit) - (spec.factor - 1)) ** (dim / (dim - 2))
    return 1.0 / (new_base ** exponent)


def _hf_yarn(spec: Spec, seq_len: Optional[int]) -> torch.Tensor:
    dim = spec.rotary_dim
    base = spec.theta_base
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


def _hf_longrope(spec: Spec, seq_len: Optional[int]) -> torch.Tensor:
    dim = spec.rotary_dim
    use_long = seq_len is not None and seq_len > spec.original_context
    factors = spec._native.long_factor if use_long else spec._native.short_factor
    ext = torch.tensor(factors, dtype=torch.float32)
    shape = torch.arange(0, dim, 2, dtype=torch.int64).float() / dim
    return 1.0 / (ext * spec.theta_base**shape)


def _hf_llama3(spec: Spec, seq_len: Optional[int]) -> torch.Tensor:
    inv = 1.0 / (spec.theta_base ** _hf_exponent(spec.rotary_dim))
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


def _hf_proportional(spec: Spec, seq_len: Optional[int]) -> torch.Tensor:
    head_dim = spec.head_dim
    rope_angles = int(spec.partial_rotary_factor * head_dim // 2)
    inv_rot = 1.0 / (spec.theta_base ** (torch.arange(0, 2 * rope_angles, 2, dtype=torch.int64).to(dtype=torch.float) / head_dim))
    nope = head_dim // 2 - rope_angles
    inv = torch.cat((inv_rot, torch.zeros(nope, dtype=torch.float32))) if nope > 0 else inv_rot
    return inv / (spec.factor or 1.0)


HF_INV_FREQ_CHAINS = {
    "default": _hf_default,
    "linear": _hf_linear,
    "dynamic": _hf_dynamic,
    "ntk_alpha": _hf_ntk_alpha,
    "yarn": _hf_yarn,
    "longrope": _hf_longrope,
    "llama3": _hf_llama3,
    "proportional": _hf_proportional,
}


def hf_inv_freq(spec: Spec, seq_len: Optional[int] = None) -> torch.Tensor:
    """transformers' float32 inv_freq for the spec (at seq_len for dynamic NTK / LongRoPE), computed
    with the same torch operations in the same order as ROPE_INIT_FUNCTIONS, so that the values are
    bit-identical (torch's pow differs from glibc's in the last bit for ~1% of entries, which the
    C++ chain, detail::hf_inv_freq_f32, cannot reproduce)."""
    if spec.axes == "vision2d":
        dim = spec.rotary_dim
        half = torch.arange(0, dim // 2, 2, dtype=torch.float) / (dim // 2)
        inv = 1.0 / (spec.theta_base ** half)
        return torch.cat([inv, inv])
    chain = HF_INV_FREQ_CHAINS.get(spec.rope_type)
    if chain is None:
        raise RotaryError(f"hf_inv_freq: rope_type {spec.rope_type!r} has no Hugging Face float32 chain")
    return chain(spec, seq_len)


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
