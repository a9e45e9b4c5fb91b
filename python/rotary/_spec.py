"""rotary.Spec: what a model's RoPE is (include/rotary/spec.hpp), read from Hugging Face configs
or presets, and its frequencies (include/rotary/frequencies.hpp)."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Optional, Union

import numpy as np

from . import _handles, _rotary
from ._rotary import RotaryError
from ._views import float_arg, int_arg


@dataclass(frozen=True)
class Frequencies:
    """frequencies(spec, seq_len): inv_freq per pair (float64, computed in binary128 and rounded
    once), the attention scaling that multiplies cos and sin, and per-pair diagnostics."""

    inv_freq: np.ndarray
    attention_scaling: float
    attention_scaling_source: str
    effective_theta_base: float
    effective_factor: float
    seq_len: int
    wavelength_tokens: np.ndarray
    factor_applied: np.ndarray
    blend: np.ndarray
    regime: tuple
    longrope_factor_set: str


def _doubles(raw: bytes) -> np.ndarray:
    values = np.frombuffer(raw, dtype=np.float64).copy()
    values.flags.writeable = False
    return values


def _str_arg(name: str, value) -> str:
    if not isinstance(value, str):
        raise RotaryError(f"{name} must be a str (got {value!r})")
    return value


# Fields Spec.replace() may change, and how each value is checked (no silent coercion: head_dim=130.7
# is an error, not 130; the spec's own validate() then checks the combination).
_REPLACEABLE = {
    "name": _str_arg,
    "head_dim": lambda name, value: int_arg(name, value, minimum=0),
    "rotary_dim": lambda name, value: int_arg(name, value, minimum=0),
    "theta_base": float_arg,
    "style": _str_arg,
    "max_position_embeddings": lambda name, value: int_arg(name, value, minimum=0),
    # The geometry apply() checks tensors' heads axes against (0 = unknown: no check).
    "num_attention_heads": lambda name, value: int_arg(name, value, minimum=0),
    "num_key_value_heads": lambda name, value: int_arg(name, value, minimum=0),
}


class Spec:
    """A model's RoPE: head and rotary dims, base, style (neox / gptj), scaling scheme.

    Build one with Spec.preset(name), Spec.from_hf_config(dict | path | transformers config) or
    Spec.from_json(text). Specs are immutable; replace() makes a changed copy.
    """

    __slots__ = ("_native", "warnings", "model_type", "layer_types", "_layer_specs", "_handle", "__weakref__")

    def __init__(self, native, *, warnings=(), model_type="", layer_types=(), layer_specs=()):
        if not isinstance(native, _rotary.RopeSpec):
            raise RotaryError(
                "Spec: use Spec.preset(name), Spec.from_hf_config(config) or Spec.from_json(text) "
                f"(got {type(native).__name__})"
            )
        self._native = native
        self.warnings = tuple(warnings)
        self.model_type = model_type
        self.layer_types = tuple(layer_types)
        self._layer_specs = dict(layer_specs)
        self._handle = _handles.register(self)  # how rotary.torch's ops name this spec

    # ---- construction ---------------------------------------------------------------------------
    @classmethod
    def _from_parsed(cls, parsed: dict) -> "Spec":
        layer_specs = {
            name: cls(native, model_type=parsed["model_type"]) for name, native in parsed["layer_type_specs"]
        }
        return cls(
            parsed["spec"],
            warnings=parsed["warnings"],
            model_type=parsed["model_type"],
            layer_types=parsed["layer_types"],
            layer_specs=layer_specs,
        )

    @classmethod
    def from_json(cls, text: str, source: str = "config.json") -> "Spec":
        """A Hugging Face config.json's text (old rope_scaling or new rope_parameters form).

        >>> rotary.Spec.from_json('{"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, '
        ...                       '"rope_theta": 500000.0}')
        Spec(name='config.json', head_dim=128, rotary_dim=128, theta=500000, style='neox', scaling='default')
        """
        if not isinstance(text, str):
            raise RotaryError(f"Spec.from_json: text must be a str (got {type(text).__name__})")
        return cls._from_parsed(_rotary.parse_hf_config(text, source))

    @classmethod
    def from_hf_config(cls, config: Union[dict, str, "os.PathLike[str]", object], *,
                       layer_type: str | None = None) -> "Spec":
        """From a config dict, a path to config.json (or its folder), or a transformers config
        object (PretrainedConfig). layer_type picks a per-layer-type spec (Gemma 3: 'sliding_attention').

        >>> rotary.Spec.from_hf_config({"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
        ...                             "max_position_embeddings": 8192, "rope_theta": 500000.0})
        Spec(name='config', head_dim=128, rotary_dim=128, theta=500000, style='neox', scaling='default')
        """
        if isinstance(config, dict):
            spec = cls.from_json(json.dumps(config, allow_nan=True, default=str), "config")
        elif isinstance(config, (str, os.PathLike)):
            path = os.fspath(config)
            if os.path.isdir(path):
                path = os.path.join(path, "config.json")
            spec = cls._from_parsed(_rotary.load_hf_config(path))
        elif hasattr(config, "to_dict"):
            source = type(config).__name__
            spec = cls.from_json(json.dumps(config.to_dict(), allow_nan=True, default=str), source)
        else:
            raise RotaryError(
                "Spec.from_hf_config: config must be a dict, a path or a transformers config "
                f"(got {type(config).__name__})"
            )
        return spec.for_layer_type(layer_type) if layer_type is not None else spec

    @classmethod
    def preset(cls, name: str) -> "Spec":
        """A built-in preset of a real model (rotary.presets() lists them).

        ``name`` is a preset's name in any case, or the Hugging Face repository id whose config.json
        the preset is ("meta-llama/Llama-3.1-8B"), as the CLI's --preset takes; any other name is a
        RotaryError with the CLI's short "did you mean".

        >>> rotary.Spec.preset("llama-3.1-8b")
        Spec(name='llama-3.1-8b', head_dim=128, rotary_dim=128, theta=500000, style='neox', scaling='llama3 x8')
        """
        if not isinstance(name, str):
            raise RotaryError(f"Spec.preset: name must be a str (got {type(name).__name__})")
        return cls._from_parsed(_rotary.preset(name))

    @property
    def layer_type_names(self) -> tuple[str, ...]:
        """The layer types with their own RoPE parameters (Gemma 3: full_attention, sliding_attention)."""
        return tuple(sorted(self._layer_specs))

    def for_layer_type(self, layer_type: str) -> "Spec":
        """The spec of one layer type of a model with per-layer-type RoPE (Gemma 3, Gemma 4).

        >>> gemma = rotary.Spec.from_hf_config({
        ...     "model_type": "gemma3_text", "hidden_size": 64, "head_dim": 16, "num_attention_heads": 4,
        ...     "layer_types": ["sliding_attention", "full_attention"],
        ...     "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        ...                         "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6}}})
        >>> gemma.layer_type_names
        ('full_attention', 'sliding_attention')
        >>> gemma.for_layer_type("full_attention")
        Spec(name='config', head_dim=16, rotary_dim=16, theta=1e+06, style='neox', scaling='linear x8')
        """
        if layer_type not in self._layer_specs:
            known = ", ".join(sorted(self._layer_specs)) or "none"
            raise RotaryError(f"layer_type must be one of the config's layer types ({known}) (got {layer_type!r})")
        return self._layer_specs[layer_type]

    def replace(self, **changes: object) -> "Spec":
        """A copy with some fields changed (name, head_dim, rotary_dim, theta_base, style,
        max_position_embeddings, num_attention_heads, num_key_value_heads), validated.

        >>> rotary.Spec.preset("llama-3.1-8b").replace(rotary_dim=64)
        Spec(name='llama-3.1-8b', head_dim=128, rotary_dim=64, theta=500000, style='neox', scaling='llama3 x8')
        """
        native = _rotary.RopeSpec(self._native)
        for field, value in changes.items():
            if field not in _REPLACEABLE:
                raise RotaryError(
                    f"Spec.replace: {field} is not a replaceable field ({', '.join(_REPLACEABLE)}) (got {field}={value!r})"
                )
            setattr(native, field, _REPLACEABLE[field](f"Spec.replace: {field}", value))
        native.validate()
        return Spec(native, model_type=self.model_type)

    # ---- fields (read-only) ------------------------------------------------------------------
    @property
    def name(self) -> str:
        """The spec's name (a preset's, or the config's source)."""
        return self._native.name

    @property
    def head_dim(self) -> int:
        """Elements per attention head."""
        return self._native.head_dim

    @property
    def rotary_dim(self) -> int:
        """Rotated elements per head (partial rotary: < head_dim)."""
        return self._native.rotary_dim

    @property
    def num_pairs(self) -> int:
        """Rotary_dim // 2: one frequency per pair."""
        return self._native.num_pairs

    @property
    def theta_base(self) -> float:
        """The RoPE base theta (rope_theta)."""
        return self._native.theta_base

    @property
    def style(self) -> str:
        """'neox' (rotate_half: pairs (i, i + rotary_dim/2)) or 'gptj' (interleaved: (2i, 2i+1))."""
        return self._native.style

    @property
    def rope_type(self) -> str:
        """Hugging Face's rope_type: 'default', 'linear', 'dynamic', 'yarn', 'longrope', 'llama3', ...."""
        return self._native.rope_type

    @property
    def factor(self) -> Optional[float]:
        """The scaling factor, None for unscaled RoPE."""
        return self._native.factor

    @property
    def max_position_embeddings(self) -> int:
        """The context the model is configured for."""
        return self._native.max_position_embeddings

    @property
    def original_max_position_embeddings(self) -> int:
        """The pre-extension context (YaRN, LongRoPE, llama3); 0 if none."""
        return self._native.original_max_position_embeddings

    @property
    def original_context(self) -> int:
        """The context the frequencies were trained for."""
        return self._native.original_context

    @property
    def partial_rotary_factor(self) -> float:
        """Rotary_dim / head_dim as configured."""
        return self._native.partial_rotary_factor

    @property
    def axes(self) -> str:
        """'single', 'mrope' (Qwen2-VL t/h/w streams) or 'vision2d'."""
        return self._native.axes

    @property
    def mrope_section(self) -> tuple:
        """M-RoPE's pairs per stream (t, h, w); empty otherwise."""
        return tuple(self._native.mrope_section)

    @property
    def xpos_scale_base(self) -> Optional[float]:
        """XPos's scale_base, None without xPos."""
        return self._native.xpos_scale_base

    @property
    def num_attention_heads(self) -> int:
        """The model's query heads (0 = unknown)."""
        return self._native.num_attention_heads

    @property
    def num_key_value_heads(self) -> int:
        """The model's key/value heads (0 = unknown)."""
        return self._native.num_key_value_heads

    @property
    def position_streams(self) -> int:
        """Positions per token: 1, 3 (M-RoPE t/h/w) or 2 (2-D vision row/column)."""
        return self._native.position_streams()

    @property
    def pair_streams(self) -> tuple[int, ...]:
        """Which position stream each pair reads (all 0 for single-stream specs)."""
        return tuple(self._native.pair_streams())

    @property
    def sequence_dependent(self) -> bool:
        """True for schemes whose frequencies change with seq_len (dynamic NTK, LongRoPE)."""
        return self._native.sequence_dependent

    def frequencies(self, seq_len: int | None = None) -> Frequencies:
        """inv_freq (float64) and attention_scaling at seq_len (None: the construction-time values;
        dynamic NTK and LongRoPE change with seq_len).

        >>> f = rotary.Spec.preset("llama-3.1-8b").frequencies()
        >>> f.inv_freq.shape, round(float(f.inv_freq[1]), 6), f.attention_scaling
        ((64,), 0.814617, 1.0)
        """
        raw = self._native.frequencies(0 if seq_len is None else int_arg("seq_len", seq_len, minimum=0))
        return Frequencies(
            inv_freq=_doubles(raw["inv_freq"]),
            attention_scaling=raw["attention_scaling"],
            attention_scaling_source=raw["attention_scaling_source"],
            effective_theta_base=raw["effective_theta_base"],
            effective_factor=raw["effective_factor"],
            seq_len=raw["seq_len"],
            wavelength_tokens=_doubles(raw["wavelength_tokens"]),
            factor_applied=_doubles(raw["factor_applied"]),
            blend=_doubles(raw["blend"]),
            regime=tuple(raw["regime"]),
            longrope_factor_set=raw["longrope_factor_set"],
        )

    @property
    def default_trained_context(self) -> int:
        """The context the model was trained on, as `rotary check`, `explain` and the report read
        it (include/rotary/analysis.hpp, default_trained_context)."""
        return self._native.default_trained_context

    @property
    def default_target_context(self) -> int:
        """The context the config extends the model to: the default target of `rotary check`,
        `explain`, the report and rotary.viz.extrapolation (analysis.hpp, default_target_context)."""
        return self._native.default_target_context

    # ---- copies -------------------------------------------------------------------------------
    # A Spec is immutable: a copy is the same object (a model holding one, deep-copied, shares it).
    # Pickling rebuilds it from its native spec's fields (RopeSpec's pickle, src/python/bind_spec.cpp)
    # with a handle of its own.
    def __copy__(self) -> "Spec":
        return self

    def __deepcopy__(self, memo) -> "Spec":
        return self

    def __reduce__(self):
        return (_unpickle, (self._native, self.warnings, self.model_type, self.layer_types, self._layer_specs))

    def __repr__(self) -> str:
        scaling = self.rope_type if self.factor is None else f"{self.rope_type} x{self.factor:g}"
        return (
            f"Spec(name={self.name!r}, head_dim={self.head_dim}, rotary_dim={self.rotary_dim}, "
            f"theta={self.theta_base:g}, style={self.style!r}, scaling={scaling!r})"
        )


def _unpickle(native, warnings, model_type, layer_types, layer_specs) -> Spec:
    return Spec(native, warnings=warnings, model_type=model_type, layer_types=layer_types, layer_specs=layer_specs)


def presets() -> list[tuple[str, str, str]]:
    """The built-in presets: (name, summary, source) for each.

    >>> rotary.presets()[0][0], len(rotary.presets()) >= 26
    ('llama-2-7b', True)
    """
    return [tuple(row) for row in _rotary.list_presets()]

