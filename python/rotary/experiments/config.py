"""The length-generalization experiment's configuration (Config: sizes, steps, tasks, encodings,
scaling schemes, seeds, lengths; validated on construction) and the RoPE spec of its models at each
eval length and test-time scaling scheme (rope_spec). Both the run (length_generalization.py) and
its plots (plots.py) read them; they are re-exported by length_generalization.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import rotary
from rotary import RotaryError

ENCODINGS = ("none", "sinusoidal", "learned", "alibi", "rope")
SCALINGS = ("rope", "linear", "ntk", "dynamic", "yarn")  # RoPE variants at test time ("rope": as trained)
TASKS = ("recall", "copy", "local")
MULTIPLIERS = (1, 2, 4, 8, 16)


@dataclass
class Config:
    train_len: int = 64
    vocab: int = 64
    d_model: int = 64
    heads: int = 4
    kv_heads: int = 2
    layers: int = 2
    steps: int = 400
    batch: int = 32
    lr: float = 3e-3
    eval_batches: int = 2
    eval_batch: int = 8
    probe_sequences: int = 2  # sequences of each eval batch whose attention weights are measured
    copy_offset: int = 8
    seeds: tuple = (0, 1, 2)
    eval_lengths: tuple = ()  # tokens; () = train_len x (1, 2, 4, 8, 16)
    tasks: tuple = TASKS
    encodings: tuple = ENCODINGS
    scalings: tuple = SCALINGS
    scaling_factor: float | None = None  # None: eval_len / train_len at each eval length
    dynamic_factor: float = 2.0  # the `factor` of the dynamic NTK spec (its growth rule, not a length ratio)
    threads: int = 1  # tiny ops: one intra-op thread (two pay a barrier per op on a shared machine)
    jobs: int = 1  # worker processes (one model each at a time); results do not depend on it

    def __post_init__(self):
        for name in ("seeds", "eval_lengths", "tasks", "encodings", "scalings"):
            setattr(self, name, tuple(getattr(self, name)))
        if not self.eval_lengths:
            self.eval_lengths = tuple(self.train_len * m for m in MULTIPLIERS)
        self.validate()

    @classmethod
    def quick(cls, seeds=(0,), **overrides) -> "Config":
        """A run in seconds (the one make test runs): long enough for copy and local to be learnt
        at the training length, evaluated to 4x it."""
        values = dict(train_len=16, vocab=16, d_model=32, layers=2, steps=120, batch=16, lr=1e-2,
                      eval_batches=2, eval_batch=16, copy_offset=2, seeds=tuple(seeds), eval_lengths=(16, 32, 64))
        if "train_len" in overrides and "eval_lengths" not in overrides:
            values["eval_lengths"] = tuple(overrides["train_len"] * m for m in (1, 2, 4))
        values.update(overrides)
        return cls(**values)

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads

    def validate(self) -> None:
        """Raises rotary.RotaryError naming the argument and its value for a config the experiment
        cannot run as asked."""
        def known(name, values, allowed):
            for value in values:
                if value not in allowed:
                    raise RotaryError(f"unknown {name} {value!r} (known: {', '.join(allowed)})")
            if not values:
                raise RotaryError(f"{name}s is empty: name at least one of {', '.join(allowed)}")
        known("encoding", self.encodings, ENCODINGS)
        known("task", self.tasks, TASKS)
        known("scaling", self.scalings, SCALINGS)
        for name in ("train_len", "vocab", "d_model", "heads", "kv_heads", "layers", "steps", "batch",
                     "eval_batches", "eval_batch", "probe_sequences", "threads", "jobs"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise RotaryError(f"{name} must be an integer >= 1 (got {value!r})")
        if self.d_model % self.heads or self.head_dim % 2:
            raise RotaryError(f"d_model {self.d_model} must split into {self.heads} heads of an even head_dim")
        if self.heads % self.kv_heads:
            raise RotaryError(f"heads {self.heads} must be a multiple of kv_heads {self.kv_heads}")
        if self.vocab < 4 or self.vocab % 2:
            raise RotaryError(f"vocab must be even and >= 4 (recall splits it into keys and values; got {self.vocab})")
        if not 1 <= self.copy_offset < self.train_len:
            raise RotaryError(f"copy_offset must be in [1, train_len) = [1, {self.train_len}) (got {self.copy_offset})")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise RotaryError(f"seeds must be distinct and at least one (got {list(self.seeds)})")
        for length in self.eval_lengths:
            if not isinstance(length, int) or isinstance(length, bool):
                raise RotaryError(f"eval length must be an integer number of tokens (got {length!r})")
            if length < self.train_len:
                raise RotaryError(f"eval length {length} is under the training length {self.train_len}: "
                                  "the experiment measures at and past the trained length")
        if len(set(self.eval_lengths)) != len(self.eval_lengths):
            raise RotaryError(f"eval lengths must be distinct (got {list(self.eval_lengths)})")
        for name in ("scaling_factor", "dynamic_factor"):
            value = getattr(self, name)
            if value is None and name == "scaling_factor":
                continue
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 1:
                raise RotaryError(f"{name} must be a finite number >= 1 (got {value!r}): a factor under 1 "
                                  "would shrink the positions' range instead of stretching it")
        if not 0 < self.lr < 1:
            raise RotaryError(f"lr must be in (0, 1) (got {self.lr!r})")


def scheme_factor(config: Config, eval_len: int) -> float:
    """The factor a scaling scheme is given at eval_len: scaling_factor when fixed, else the ratio
    eval_len / train_len. Refuses an eval length under the training length."""
    if eval_len < config.train_len:
        raise RotaryError(f"eval length {eval_len} is under the training length {config.train_len}: "
                          "a scaling factor under 1 makes no sense here")
    return float(config.scaling_factor) if config.scaling_factor is not None else eval_len / config.train_len


def rope_spec(config: Config, scaling: str, eval_len: int) -> rotary.Spec:
    """The RoPE spec of the model (theta 1e4, head_dim) with a test-time scaling scheme at eval_len.
    linear, ntk (ntk_alpha) and yarn get the factor of scheme_factor; at factor 1 they are plain
    RoPE. dynamic gets its own `factor` (dynamic_factor) and max_position_embeddings = train_len:
    it stays plain RoPE up to the trained length and grows with the call's length past it
    (transformers' rule, base * (f * n / L - (f - 1))^(d / (d - 2))), so the eval length sets it."""
    if scaling not in SCALINGS:
        raise RotaryError(f"unknown scaling {scaling!r} (known: {', '.join(SCALINGS)})")
    factor = scheme_factor(config, eval_len)
    rope = {"rope_type": "default"}
    if scaling == "dynamic":
        rope = {"rope_type": "dynamic", "factor": float(config.dynamic_factor)}
    elif scaling != "rope" and factor > 1:
        rope = {"linear": {"rope_type": "linear", "factor": factor},
                "ntk": {"rope_type": "ntk_alpha", "alpha": factor},
                "yarn": {"rope_type": "yarn", "factor": factor,
                         "original_max_position_embeddings": config.train_len}}[scaling]
    context = config.train_len if scaling in ("rope", "dynamic") else max(eval_len, round(factor * config.train_len))
    return rotary.Spec.from_hf_config({
        "model_type": "llama", "hidden_size": config.d_model, "num_attention_heads": config.heads,
        "num_key_value_heads": config.kv_heads, "head_dim": config.head_dim,
        "max_position_embeddings": context, "rope_theta": 10000.0, "rope_scaling": rope})
