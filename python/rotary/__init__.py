"""rotary: Rotary Position Embedding (RoPE), every variant, exact tables and fast CPU kernels.

NumPy API (this module):
    spec = rotary.Spec.preset("llama-3.1-8b")            # or Spec.from_hf_config(dict | path | config)
    freqs = spec.frequencies()                            # inv_freq (float64), attention_scaling
    cos, sin = rotary.table(spec, positions)              # Hugging Face's cos/sin layout, float32
    q_out, k_out = rotary.apply(q, k, positions, spec)    # q, k [batch, heads, seq, head_dim] (HF's)
    cache = rotary.KvCache(spec, batch=1, kv_heads=8, capacity=4096)  # keys stored rotated; context shift
    rotary.convert_weights("hf.safetensors", "meta.safetensors", "config.json", to="interleaved")
    out = rotary.attention(q, k, v, causal=True, rope=rotary.FusedRope(spec))  # GQA, masks, fused RoPE
    out = rotary.attention(q, k, v, causal=True, alibi_slopes=rotary.alibi_slopes(q.shape[1]))  # or absolute=

PyTorch API: rotary.torch (custom op with autograd and torch.compile support, a Hugging Face
drop-in). Plots: rotary.viz (matplotlib). Every bad argument raises rotary.RotaryError, a
ValueError whose message names the argument and its value.
"""
from ._rotary import (
    RotaryError,
    __version__,
    cpu_targets,
    current_cpu_target,
    force_cpu_target,
    num_threads,
    set_num_threads,
)
from ._spec import Frequencies, Spec, presets
from ._table import Table, table
from ._apply import apply, apply_cos_sin
from ._diagnose import diagnose
from ._export import export_table
from ._kv_cache import KvCache
from ._convert import convert_weights
from ._attention import FusedRope, alibi_slopes, attention, attention_scale, sinusoidal_table

__all__ = [
    "RotaryError",
    "Spec",
    "Frequencies",
    "Table",
    "presets",
    "table",
    "apply",
    "apply_cos_sin",
    "diagnose",
    "export_table",
    "KvCache",
    "convert_weights",
    "attention",
    "FusedRope",
    "attention_scale",
    "alibi_slopes",
    "sinusoidal_table",
    "set_num_threads",
    "num_threads",
    "cpu_targets",
    "force_cpu_target",
    "current_cpu_target",
    "__version__",
]
