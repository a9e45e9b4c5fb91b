"""rotary.torch.fuse_rope / unfuse_rope: a transformers model whose attention layers hand
un-rotated q and k to rotary's attention, which rotates them inside its kernel (fused RoPE).
Re-exported by rotary.torch. docs/attention.md, "Fused RoPE in the transformers backend".
This module plans and installs; the wrapper of step 1 is _torch_fused_wrapper.py, the hooks and
the backend of steps 2 to 4 _torch_fused_backend.py.

How (transformers 5.16: LlamaAttention.forward and its kin, modeling_llama.py):

    cos, sin = position_embeddings
    q, k = apply_rotary_pos_emb(q, k, cos, sin)              # module-level function
    k, v = past_key_values.update(k, v, self.layer_idx)       # the cache stores what it gets
    out, _ = attention_interface(self, q, k, v, attention_mask, ..., position_ids=...)

1. fuse_rope wraps the modeling module's apply_rotary_pos_emb once (looked up through
   sys.modules[type(attention).__module__]). The wrapper returns q and k unchanged only inside a
   forward of a fused attention module, for the cos and sin tensors that module received
   (a forward pre-hook puts the call in a ContextVar: other models, other threads and any other
   call see transformers' function). So the cache holds un-rotated keys.
2. The model runs attn_implementation="rotary_fused" (rotary's fused backend). It refuses to run
   unless the wrapper intercepted exactly one call in this forward, reads the mask as the
   unfused backend does (_mask_plans, checked element for element), derives every query's and
   every visible key's position, and calls rotary's attention kernel with the layer's table.
3. Positions, exactly or refused. The cache and the mask place query i of a call at cache slot
   q_offset + i (Cache.get_query_offset) and cache index j at slot kv_offset + j
   (Cache.get_mask_sizes). transformers gives every token of a row the position slot + d_b for a
   constant d_b (generate: cumsum(attention_mask) - 1 = slot - left padding; a plain forward:
   slot). Every query that sees a key must have position q_offset + i + d_b in position_ids, with
   the same d_b as every earlier call on that cache layer (kept per cache and layer); keys then
   have kv_offset + j + d_b. Anything else (custom position_ids, a cache filled by another model)
   is a RotaryError naming position_ids and the values: each cached key was checked when it was
   a query, so no key is ever rotated at a position transformers would not have used.
4. The table: the spec of the layer's type (Spec.from_hf_config, _layer_spec: Gemma 3's sliding
   and full layers differ) in Hugging Face's float32 chain with the model's own inv_freq buffer
   (precision="hf", the default; "exact" for correctly rounded cos/sin). At its first call with a
   position > 0 each attention module compares the table's cos/sin with the model's
   position_embeddings (attention_scaling included) and refuses a mismatch.
"""
from __future__ import annotations

import copy
import inspect
import sys
from typing import Optional

import torch

from ._rotary import RotaryError
from ._spec import Spec
from ._hf_apply_variants import _pick_function
from ._hf_rotary_embedding import RotaryEmbedding, _layer_spec
from ._torch_fused_backend import FUSED_NAME, _LayerRope, attach_hooks, rotary_fused_attention_forward
from ._torch_fused_wrapper import _FusedRecord, _install_wrapper, _release_wrapper, _transformers_function

PRECISIONS = ("hf", "exact")


# ---- fuse_rope / unfuse_rope ------------------------------------------------------------------------------
def _attention_modules(model) -> list:
    """The attention modules that receive position_embeddings and rotate through their modeling
    module's apply_rotary_pos_emb: [(module, modeling module)]."""
    found = []
    for module in model.modules():
        if not type(module).__name__.endswith("Attention") or not hasattr(module, "layer_idx"):
            continue
        try:
            parameters = inspect.signature(type(module).forward).parameters
        except (TypeError, ValueError):
            continue
        if "position_embeddings" not in parameters:
            continue
        found.append((module, sys.modules[type(module).__module__]))
    return found


def _inv_freq_source(model, layer_type: Optional[str]):
    """(module, attribute) of the inv_freq buffer the model's rotary embedding computes with, or
    None when there is no single text one (the table then follows transformers' chain from the
    config)."""
    embeddings = [m for m in model.modules() if type(m).__name__.endswith("RotaryEmbedding")
                  and (isinstance(m, RotaryEmbedding) or getattr(m, "config", None) is not None)]
    if len(embeddings) != 1:
        return None
    module = embeddings[0]
    if isinstance(module, RotaryEmbedding):  # patch_model's
        if module.layers is not None:
            if layer_type not in module.layers:
                return None
            module = module.layers[layer_type]
        return module, "inv_freq"
    name = f"{layer_type}_inv_freq" if layer_type is not None and hasattr(module, f"{layer_type}_inv_freq") \
        else "inv_freq"
    return (module, name) if isinstance(getattr(module, name, None), torch.Tensor) else None


def _refuse_spec(where, spec: Spec, layer_type) -> None:
    what = f" (layer type {layer_type!r})" if layer_type else ""
    if spec.sequence_dependent:
        raise RotaryError(f"{where}: rope_type {spec.rope_type!r}{what} changes its frequencies with the sequence "
                          "length; transformers rotated each cached key with the table of its own forward, so one "
                          "table for the whole cache would not be exact; refused (use the unfused backend)")
    if spec.position_streams != 1:
        raise RotaryError(f"{where}: {spec.axes} RoPE{what} takes {spec.position_streams} position streams "
                          "(M-RoPE / 2-D); fused RoPE derives one position per token; refused")
    if spec.xpos_scale_base:
        raise RotaryError(f"{where}: xPos scaling{what} is not served by fused RoPE; refused")


def own_config(model) -> None:
    """Gives the model its own copy of its config (and of the sub-configs its modules hold).
    transformers' from_config(config) keeps the config object it is given, and every model built
    from it shares that object; its attention modules read config._attn_implementation at each
    forward. Setting the attention implementation on a shared config would switch every model
    built from it (and one model cannot tell whether another holds its config: it always copies).
    The copy is the config's state at this call; later edits of the caller's config object no
    longer reach this model."""
    memo: dict = {}
    copy.deepcopy(model.config, memo)  # memo: id of each config object reached -> its copy
    for module in model.modules():
        held = module.__dict__.get("config")
        if held is not None and type(memo.get(id(held))) is type(held):
            module.__dict__["config"] = memo[id(held)]


def fuse_rope(model, *, precision: str = "hf") -> list:
    """Runs a transformers model's attention on rotary with RoPE fused into the kernel: the model's
    attention modules stop rotating q and k (their KV cache then holds un-rotated keys), and
    attn_implementation="rotary_fused" rotates each q and k block as it loads it, at positions it
    derives from the cache slots and checks against position_ids on every call
    (docs/attention.md, "Fused RoPE in the transformers backend").

    precision: "hf" (default) uses Hugging Face's float32 cos/sin chain with the model's own
    inv_freq buffer (cos/sin within one float32 ulp of the model's); "exact" correctly rounded
    cos/sin. Refused (RotaryError, nothing changed): sequence-dependent RoPE (dynamic NTK,
    LongRoPE), M-RoPE, xPos, a modeling module without a module-level apply_rotary_pos_emb of the
    (q, k, cos, sin[, position_ids], unsqueeze_dim) form that rotates like the spec's pair style,
    a model already fused. Inference only, eager only; DynamicCache and StaticCache.
    Returns the names of the fused attention modules. unfuse_rope(model) undoes it."""
    if precision not in PRECISIONS:
        raise RotaryError(f"precision must be 'hf' or 'exact' (got {precision!r})")
    model_name = type(model).__name__
    where = f"fuse_rope: cannot fuse {model_name}"
    if getattr(model, "_rotary_fused", None) is not None:
        raise RotaryError(f"{where}: it is fused already (rotary.torch.unfuse_rope(model) first)")
    config = getattr(model, "config", None)
    if config is None or not hasattr(model, "set_attn_implementation"):
        raise RotaryError(f"{where}: not a transformers PreTrainedModel (got {model_name})")
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    modules = _attention_modules(model)
    if not modules:
        raise RotaryError(f"{where}: it has no attention module that takes position_embeddings (the "
                          "apply_rotary_pos_emb family); nothing was changed")
    try:
        spec = Spec.from_hf_config(text_config)
    except RotaryError as error:
        raise RotaryError(f"{where}: rotary cannot read its config: {error}; nothing was changed") from None
    # 1. Plan: a table per layer type, every modeling module's function probed. Nothing changes yet.
    ropes: dict = {}
    plan = []
    for module, modeling in modules:
        layer_type = getattr(module, "layer_type", None)
        if layer_type is None and spec.layer_type_names:
            types = getattr(text_config, "layer_types", None) or ()
            layer_type = types[module.layer_idx] if module.layer_idx < len(types) else None
        if layer_type not in spec.layer_type_names:
            layer_type = None  # one RoPE for every layer
        if layer_type not in ropes:
            layer_spec = _layer_spec(text_config, spec, layer_type) if layer_type else \
                (spec.replace() if spec.layer_type_names else spec)
            _refuse_spec(where, layer_spec, layer_type)
            source = _inv_freq_source(model, layer_type) if precision == "hf" else None
            ropes[layer_type] = _LayerRope(layer_spec, layer_type, precision, source)
        plan.append((module, modeling, ropes[layer_type]))
    probed = {}
    for module, modeling, rope in plan:
        if modeling.__name__ in probed:
            continue
        if not callable(getattr(modeling, "apply_rotary_pos_emb", None)):
            raise RotaryError(f"{where}: {modeling.__name__} has no module-level apply_rotary_pos_emb for rotary to "
                              "intercept; nothing was changed")
        try:
            description, _ = _pick_function(model_name, modeling, "apply_rotary_pos_emb",
                                             _transformers_function(modeling), [r.spec for r in ropes.values()],
                                             "like_torch")
        except RotaryError as error:  # patch_model's probe: its words, fuse_rope's verdict
            raise RotaryError(f"{where}: rotary's rotation does not reproduce {modeling.__name__}."
                              f"apply_rotary_pos_emb ({error}); nothing was changed") from None
        if not description.startswith(f"{rope.spec.style} pairs,"):
            raise RotaryError(f"{where}: {modeling.__name__}.apply_rotary_pos_emb rotates as {description}, rotary's "
                              f"spec as {rope.spec.style} pairs (full-width cos/sin); nothing was changed")
        probed[modeling.__name__] = modeling
    # 2. Apply.
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(FUSED_NAME, rotary_fused_attention_forward)
    AttentionMaskInterface.register(FUSED_NAME, sdpa_mask)
    previous = config._attn_implementation
    own_config(model)  # set_attn_implementation writes the config: this model's only
    handles = []
    for module, modeling, rope in plan:
        handles.extend(attach_hooks(module, rope))
    record = _FusedRecord(handles, previous, [m for m, _, _ in plan], list(probed))
    for modeling in probed.values():
        _install_wrapper(modeling, record)
    model.set_attn_implementation(FUSED_NAME)
    model._rotary_fused = record
    return [name for name, m in model.named_modules() if getattr(m, "_rotary_fused_rope", None) is not None]


def unfuse_rope(model) -> None:
    """Undoes fuse_rope(model): removes its hooks and puts back the attn_implementation the model
    had, and transformers' apply_rotary_pos_emb in each modeling module no other fused model uses
    (until then the wrapper calls transformers' function for every call that is not a fused
    module's). A cache the fused model filled holds un-rotated keys: do not continue it with the
    unfused model."""
    record = getattr(model, "_rotary_fused", None)
    if record is None:
        raise RotaryError(f"unfuse_rope: {type(model).__name__} was not fused by rotary.torch.fuse_rope (nothing to "
                          "undo)")
    for handle in record.handles:
        handle.remove()
    for module in record.modules:
        del module._rotary_fused_rope
    model.set_attn_implementation(record.previous)
    for name in record.modeling_names:
        _release_wrapper(name, record)
    del model._rotary_fused
