"""rotary.torch: RoPE for PyTorch tensors, and a Hugging Face drop-in.

    q_out, k_out = rotary.torch.apply_rotary(q, k, position_ids, spec)   # HF's [batch, heads, seq, dim]

apply_rotary is the torch custom op ``rotary::apply_rotary`` (torch.library): autograd (the
gradient is the transposed rotation, computed by the same kernel), a fake implementation for
torch.compile (no graph break), CPU float32 / bfloat16 / float16 through rotary's SIMD kernels
and float64 through the float64 reference (for gradcheck), any strides. Tensors on other devices
go through a pure-torch implementation of the same contract (``_apply_torch`` in _torch_ops.py; also
selectable with backend="torch", which is how it is tested here, on CPU tensors).

Attention: rotary.torch.attention(q, k, v, causal=True, rope=rotary.FusedRope(spec)) is the custom op
``rotary::attention`` (MHA / GQA / MQA, causal / window / padding / varlen masks, fused RoPE; CPU;
forward only). register_attention() makes attn_implementation="rotary" a transformers attention
backend (docs/attention.md, "The transformers backend"); fuse_rope(model) runs a model on
attn_implementation="rotary_fused", with RoPE fused into that attention (un-rotated KV cache).

Hugging Face drop-in, two lines in a model:
    model.model.rotary_emb = rotary.torch.RotaryEmbedding(
        model.config, dtype=model.model.rotary_emb.inv_freq.dtype)  # model.to(bf16) casts HF's buffer
    modeling_llama.apply_rotary_pos_emb = rotary.torch.apply_rotary_pos_emb
(or rotary.torch.patch_model(model); unpatch_model(model) or `with rotary.torch.patched(model):`
undoes it; the module-level functions are replaced process-wide while any model is patched).
precision="hf" reproduces transformers' cos/sin and its
arithmetic bit for bit; precision="exact" gives correctly rounded cos/sin and one rounding per
output. Sources: transformers modeling_rope_utils.py (ROPE_INIT_FUNCTIONS, dynamic_rope_update)
and modeling_llama.py (LlamaRotaryEmbedding, apply_rotary_pos_emb, rotate_half).
"""
from ._torch_cos_sin import (
    apply_multimodal_rotary_pos_emb,
    apply_rotary_pos_emb,
    apply_rotary_pos_emb_interleave,
    rotate_half,
)
from ._hf_rotary_embedding import RotaryEmbedding, hf_inv_freq
from ._hf_patch import patch_model, patched, unpatch_model
from ._torch_ops import apply_rotary
from ._attention import FusedRope
from ._torch_attention import attention, register_attention, rotary_attention_forward
from ._torch_fused import fuse_rope, rotary_fused_attention_forward, unfuse_rope

__all__ = [
    "apply_rotary",
    "attention",
    "FusedRope",
    "register_attention",
    "rotary_attention_forward",
    "fuse_rope",
    "unfuse_rope",
    "rotary_fused_attention_forward",
    "apply_rotary_pos_emb",
    "apply_rotary_pos_emb_interleave",
    "apply_multimodal_rotary_pos_emb",
    "rotate_half",
    "RotaryEmbedding",
    "patch_model",
    "unpatch_model",
    "patched",
    "hf_inv_freq",
]
