# Types of the compiled module rotary._rotary (src/python/) as far as the public API
# re-exports it; the rest is internal to the package.
from typing import Any, Optional

__version__: str

class RotaryError(ValueError): ...

def set_num_threads(n: int) -> None: ...
def num_threads() -> int: ...
def cpu_targets() -> list[str]: ...
def force_cpu_target(name: str) -> None: ...
def current_cpu_target() -> str: ...
def attention(
    q: tuple[int, str, str, tuple[int, ...], tuple[int, ...]],
    k: tuple[int, str, str, tuple[int, ...], tuple[int, ...]],
    v: tuple[int, str, str, tuple[int, ...], tuple[int, ...]],
    out: tuple[int, str, str, tuple[int, ...], tuple[int, ...]],
    scale: Optional[float],
    causal: bool,
    query_offset: int,
    query_offsets: Optional[tuple[int, int]],
    window: int,
    kv_lengths: Optional[tuple[int, int]],
    cu_seqlens_q: Optional[tuple[int, int]],
    cu_seqlens_k: Optional[tuple[int, int]],
    table: Any,
    q_positions: Optional[tuple[int, int]],
    k_positions: Optional[tuple[int, int]],
    rotary_offset: int,
    seq_len: int,
    implementation: str,
    alibi_slopes: Optional[tuple[int, int]] = None,
    absolute: Optional[tuple[int, int, int, int]] = None,
    kv_starts: Optional[tuple[int, int]] = None,
) -> None: ...
def alibi_slopes(num_heads: int) -> bytes: ...
def sinusoidal_table(rows: int, d_model: int, base: float = 10000.0) -> bytes: ...
def attention_scale(spec: Any, qk_head_dim: int) -> float: ...
def __getattr__(name: str) -> Any: ...
