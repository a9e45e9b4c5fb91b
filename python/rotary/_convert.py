"""rotary.convert_weights: a safetensors checkpoint's q and k rows reordered between interleaved
and half-split RoPE pairing (C++: include/rotary/convert.hpp, the same code as `rotary
convert-weights`; docs/interop.md, "Converting checkpoints between pairing conventions")."""
from __future__ import annotations

import json
import os
from typing import Any, Iterable, Mapping, Union

from . import _rotary

_MAX_CONFIG_BYTES = 64 << 20
_ConfigArg = Union[str, "os.PathLike[str]", Mapping[str, Any]]


def _config_text(config: _ConfigArg) -> tuple[str, str]:
    """(JSON text, name for messages) of a config given as a dict, a file or a model folder."""
    if isinstance(config, Mapping):
        # allow_nan: a NaN reaches the config reader, which names the field (json.dumps' default).
        return json.dumps(dict(config)), "config"
    if not isinstance(config, (str, os.PathLike)):
        raise _rotary.RotaryError(
            f"convert_weights: config must be a dict, a config.json / params.json path or a model folder "
            f"(got {type(config).__name__})")
    path = os.fspath(config)
    if os.path.isdir(path):
        inner = os.path.join(path, "config.json")
        if not os.path.isfile(inner):
            raise _rotary.RotaryError(
                f"convert_weights: config must be a config.json or a model folder holding one "
                f"(got the folder {path}, which has no {inner})")
        path = inner
    try:
        size = os.path.getsize(path)
        if size > _MAX_CONFIG_BYTES:  # the C++ reader's limit (core/json.hpp, ParseOptions::max_bytes)
            raise _rotary.RotaryError(
                f"convert_weights: config {path} is {size} bytes, more than a config.json can be "
                f"({_MAX_CONFIG_BYTES}); is it a weights file?")
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as error:
        raise _rotary.RotaryError(f"convert_weights: cannot read config {path}: {error.strerror}") from None
    return data.decode("utf-8", errors="replace"), path


def _modules(name: str, modules: Iterable[str] | str | None) -> list[str]:
    if modules is None:
        return []
    if isinstance(modules, str):
        modules = [modules]
    out = [str(m) for m in modules]
    if any(not m for m in out):
        raise _rotary.RotaryError(f"convert_weights: {name} must be non-empty module paths (got {out!r})")
    return out


def convert_weights(in_path: Union[str, "os.PathLike[str]"], out_path: Union[str, "os.PathLike[str]"],
                    config: _ConfigArg, to: str = "interleaved", *,
                    q_modules: Iterable[str] | str | None = None, k_modules: Iterable[str] | str | None = None,
                    dry_run: bool = False) -> dict[str, Any]:
    """Reorders the q and k projection rows of the safetensors file `in_path` within each head's
    rotary block and writes the result to `out_path` (a temporary file, then a rename). `in_path`
    may be a model folder holding model.safetensors or a sharded checkpoint
    (model.safetensors.index.json and its shards), or that index: `out_path` is then a new folder
    holding each converted file under its name, the index unchanged and the folder's other files
    (config.json, the tokenizer's) copied; sub-folders and weights in other files are left out
    (docs/interop.md, "Sharded checkpoints and model folders").

    to: "interleaved" or "gptj" (pairs (2i, 2i+1): Meta, GGUF), "half-split" or "neox" (pairs
    (i, i + rotary_dim/2): Hugging Face), the names the style arguments take. config: a config.json path, a model folder, Meta's params.json, or a dict.
    q_modules / k_modules: module paths that name the q and k tensors (defaults: Llama family
    self_attn.q_proj / k_proj / q_norm / k_norm and Meta's attention.wq / wk; DeepSeek MLA
    q_proj / q_b_proj and kv_a_proj_with_mqa). dry_run: check and plan, write nothing.

    Returns {"permuted": [{name, role, dtype, shape, heads, head_rows, offset, rotary_rows}],
    "copied": n, "file_bytes": n, "files": [...], "copied_files": [...], "left_out": [...],
    "geometry": {...}} (files, copied_files, left_out: a folder's; empty for a file). Raises rotary.RotaryError naming the tensor
    and the value for a malformed file, a tensor that does not fit the config, a quantized or fused
    projection, or out_path naming in_path.

    One head of 8 rows, half-split (Hugging Face) to interleaved: row r of the output is row
    [0, 4, 1, 5, 2, 6, 3, 7][r] of the input (docs/interop.md's worked example):

    >>> import os, tempfile
    >>> from safetensors.numpy import load_file, save_file
    >>> folder = tempfile.mkdtemp()
    >>> q = np.arange(16, dtype=np.float32).reshape(8, 2)  # row r holds 2r, 2r + 1
    >>> save_file({"model.layers.0.self_attn.q_proj.weight": q}, os.path.join(folder, "hf.safetensors"))
    >>> result = rotary.convert_weights(os.path.join(folder, "hf.safetensors"),
    ...                                 os.path.join(folder, "interleaved.safetensors"),
    ...                                 {"num_attention_heads": 1, "head_dim": 8}, to="interleaved")
    >>> [(t["name"], t["heads"], t["rotary_rows"]) for t in result["permuted"]]
    [('model.layers.0.self_attn.q_proj.weight', 1, 8)]
    >>> load_file(os.path.join(folder, "interleaved.safetensors"))["model.layers.0.self_attn.q_proj.weight"][:, 0]
    array([ 0.,  8.,  2., 10.,  4., 12.,  6., 14.], dtype=float32)
    """
    text, source = _config_text(config)
    return _rotary.convert_weights(os.fspath(in_path), os.fspath(out_path), text, source, to,
                                   _modules("q_modules", q_modules), _modules("k_modules", k_modules), bool(dry_run))
