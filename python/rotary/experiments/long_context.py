"""Long context on a real model: SmolLM2-135M-Instruct (trained context 8192, rope_theta 100000)
run past its trained context with each RoPE treatment, without fine-tuning.

    python -m rotary.experiments long-context [--quick] [--out DIR]

Treatments (each a rotary.Spec read from the model's own config with the scaling in its
rope_parameters, installed as the model's rotary-embedding module: rotary.torch.RotaryEmbedding
with precision "hf", a new one before every forward, after rotary.torch.patch_model replaced the
model's RoPE functions):

    none      plain RoPE past 8192
    linear    position interpolation, factor 2
    ntk       NTK-aware with a fixed factor: rotary's ntk_alpha, alpha 2: theta x 2^(d/(d-2))
    dynamic   dynamic NTK (transformers' rule, factor 2): plain up to 8192, then the base grows
              with the sequence's length, for every position of the forward
    yarn      YaRN, factor 2, original_max_position_embeddings 8192

Measured on real text (Debian's license texts, TEXTS): per-token loss by position bucket over one
forward of `length` tokens, against the unpatched model on the same tokens within its trained
window (REFERENCE); and passkey retrieval (a 5-digit number hidden at a depth in the same text,
scored teacher-forced: the log-probability of its digit tokens, and whether every digit token is
the argmax, which is exactly whether greedy decoding repeats the number).
docs/experiments.md, "Long context on a real model", has the results of the full run.
"""
from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
import pathlib
import platform
import random
import sys
import time

import torch

from .._rotary import RotaryError

LICENSES = pathlib.Path("/usr/share/common-licenses")
# Distinct texts only: GPL-2, LGPL-2.1, GFDL-1.2 and MPL-1.1 repeat much of GPL-3, GFDL-1.3 and
# MPL-2.0, and text repeated from earlier in the context would be copied, not predicted.
TEXTS = ("GPL-3", "GFDL-1.3", "Apache-2.0", "MPL-2.0", "Artistic", "CC0-1.0")
TRAINED = 8192  # SmolLM2-135M's max_position_embeddings: its trained context
FACTOR = 2.0
TREATMENTS = {
    "none": {"rope_type": "default"},
    "linear": {"rope_type": "linear", "factor": FACTOR},
    "ntk": {"rope_type": "ntk_alpha", "alpha": FACTOR},
    "dynamic": {"rope_type": "dynamic", "factor": FACTOR},
    "yarn": {"rope_type": "yarn", "factor": FACTOR, "original_max_position_embeddings": TRAINED},
}
# The passkey prompt of Mohtashami and Jaggi, "Landmark Attention" (2023), section 4.2, with real
# text as the filler instead of their repeated sentences.
PASSKEY_HEAD = ("There is an important info hidden inside a lot of irrelevant text. Find it and memorize it. "
                "I will quiz you about the important info there.\n\n")
PASSKEY_KEY = "\n\nThe pass key is {key}. Remember it. {key} is the pass key.\n\n"
PASSKEY_QUESTION = "\n\nWhat is the pass key? The pass key is"
PASSKEY_ANSWER = " {key}"


@dataclasses.dataclass(frozen=True)
class Config:
    """length: tokens of the perplexity forward; buckets: its coarse bucket edges (the trained
    context and 1.5x), fine: the width of the fine buckets; passkey_lengths x passkey_depths: the
    passkey grid (depth: the share of the filler before the key); trained: the context the
    REFERENCE windows stay within."""
    length: int = 16384
    buckets: tuple = (0, 8192, 12288, 16384)
    fine: int = 1024
    passkey_lengths: tuple = (8192, 12288, 16384)
    passkey_depths: tuple = (0.5,)
    treatments: tuple = tuple(TREATMENTS)
    trained: int = TRAINED
    threads: int = 2
    seed: int = 0

    @classmethod
    def quick(cls) -> "Config":
        """The test's run: the same code on 512 tokens (windows of 256 for the reference, so
        that it has two windows as the full run has), one passkey cell of 256 tokens."""
        return cls(length=512, buckets=(0, 256, 384, 512), fine=128, passkey_lengths=(256,),
                   passkey_depths=(0.5,), trained=256)

    def __post_init__(self):
        unknown = [name for name in self.treatments if name not in TREATMENTS]
        if unknown:
            raise RotaryError(f"long-context: treatments {unknown} are unknown; known: {', '.join(TREATMENTS)}")
        if tuple(sorted(self.buckets)) != self.buckets or self.buckets[0] != 0 or self.buckets[-1] != self.length:
            raise RotaryError(f"long-context: buckets {self.buckets} must rise from 0 to length {self.length}")
        if self.length % self.trained:
            raise RotaryError(f"long-context: length {self.length} must be a multiple of trained {self.trained}")
        for depth in self.passkey_depths:
            if not 0.0 <= depth <= 1.0:
                raise RotaryError(f"long-context: passkey depth {depth} is outside [0, 1]")


def real_text_ids(tokenizer, count: int) -> torch.Tensor:
    """The first `count` tokens of TEXTS joined by blank lines, as a [1, count] tensor."""
    paths = [LICENSES / name for name in TEXTS]
    missing = [str(path) for path in paths if not path.is_file()]
    if missing:
        raise FileNotFoundError(f"long-context reads Debian's license texts (package base-files): {missing} missing")
    text = "\n\n".join(path.read_text(encoding="utf-8") for path in paths)
    ids = tokenizer(text, return_tensors="pt").input_ids
    if ids.shape[1] < count:
        raise RotaryError(f"long-context: the texts {TEXTS} have {ids.shape[1]} tokens, fewer than {count}")
    return ids[:, :count]


def hf_config_dict(model) -> dict:
    """The model's config as a config.json dict (what rotary.Spec.from_hf_config reads)."""
    return model.config.to_dict()


def treatment_spec(model, name: str):
    """The rotary spec of a treatment: the model's config with the scaling put into its
    rope_parameters (beside its rope_theta)."""
    import rotary

    config = hf_config_dict(model)
    theta = config["rope_parameters"]["rope_theta"]
    config["rope_parameters"] = {"rope_theta": theta, **TREATMENTS[name]}
    spec = rotary.Spec.from_hf_config(config)
    if spec.theta_base != theta:
        raise RotaryError(f"long-context: the {name} spec has theta {spec.theta_base}, the model {theta}")
    return spec


def transformers_reference_module(model, name: str):
    """transformers' own rotary-embedding module for a treatment, to check rotary's against:
    LlamaRotaryEmbedding from the model's config with the scaling. transformers has no fixed NTK
    rope_type, so `ntk` is checked against plain RoPE with theta x 2^(d/(d-2))."""
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    config = copy.deepcopy(model.config)
    theta = config.rope_parameters["rope_theta"]
    if name == "ntk":
        head_dim = config.head_dim
        config.rope_parameters = {"rope_type": "default",
                                  "rope_theta": theta * FACTOR ** (head_dim / (head_dim - 2))}
    else:
        config.rope_parameters = {"rope_theta": theta, **TREATMENTS[name]}
    return LlamaRotaryEmbedding(config)


def install(model, name: str):
    """Makes the model run treatment `name`: a new rotary.torch.RotaryEmbedding of its spec as the
    model's rotary-embedding module. New for every forward: dynamic NTK's module keeps the base it
    grew to (transformers' dynamic_rope_update resets it only below the trained context), so after
    a 16384-token forward a reused module would run an 8192- or 12288-token prompt with the
    16384-token base. Returns the spec."""
    import rotary.torch as rt

    spec = treatment_spec(model, name)
    model.model.rotary_emb = rt.RotaryEmbedding(spec, dtype=torch.float32, precision="hf")
    return spec


def check_against_transformers(model, name: str) -> dict:
    """How far the treatment's rotary module (one of its own, not the installed one) is from
    transformers' own module for the same scaling: cos/sin at positions 0 .. 16383 in one call
    (one sequence's length, which is what dynamic NTK reads)."""
    import rotary.torch as rt

    spec = treatment_spec(model, name)
    module = rt.RotaryEmbedding(spec, dtype=torch.float32, precision="hf")
    reference = transformers_reference_module(model, name)
    probe = torch.zeros(1, 1, model.config.head_dim)
    positions = torch.arange(16384).unsqueeze(0)
    with torch.inference_mode():
        cos, sin = module(probe, positions)
        ref_cos, ref_sin = reference(probe, positions)
    return {"spec": str(spec), "rope_parameters": dict(TREATMENTS[name]),
            "max_abs_cos_sin_vs_transformers": max((cos - ref_cos).abs().max().item(),
                                                   (sin - ref_sin).abs().max().item())}


def token_losses(model, ids: torch.Tensor, rows: int = 1024) -> torch.Tensor:
    """Per-token cross entropy (nats, float64) of ids[1:] given the tokens before, from one forward;
    the logits are made `rows` at a time (all 16384 x 49152 of them at once would be 3 GB)."""
    with torch.inference_mode():
        hidden = model.model(ids).last_hidden_state[0]
        losses = []
        for start in range(0, ids.shape[1] - 1, rows):
            logits = model.lm_head(hidden[start:min(start + rows, ids.shape[1] - 1)]).double()
            targets = ids[0, start + 1:start + 1 + logits.shape[0]]
            losses.append(torch.nn.functional.cross_entropy(logits, targets, reduction="none"))
    return torch.cat(losses)


def bucket_rows(losses: torch.Tensor, edges) -> list:
    """Mean loss and perplexity of the predicted tokens whose positions fall in [edges[i],
    edges[i + 1]) (the token at position p is predicted from positions < p; position 0 is not
    predicted)."""
    rows = []
    for lo, hi in zip(edges[:-1], edges[1:]):
        chunk = losses[max(lo, 1) - 1:hi - 1]
        mean = chunk.mean().item()
        rows.append({"lo": lo, "hi": hi, "tokens": chunk.numel(), "loss": mean,
                     "perplexity": math.exp(mean) if math.isfinite(mean) else float("inf")})
    return rows


def fine_edges(config: Config) -> list:
    return list(range(0, config.length, config.fine)) + [config.length]


def perplexity(model, name: str, ids: torch.Tensor, config: Config) -> dict:
    install(model, name)
    losses = token_losses(model, ids)
    return {"buckets": bucket_rows(losses, list(config.buckets)),
            "fine": bucket_rows(losses, fine_edges(config)),
            "overall": bucket_rows(losses, [0, config.length])[0]}


def reference_losses(model, ids: torch.Tensor, config: Config) -> torch.Tensor:
    """The unpatched model's per-token loss on the same tokens, in windows of `trained` tokens
    (each window a forward of its own, so every token is predicted within the trained context).
    The first token of each window after the first has no context and is left out (NaN)."""
    losses = []
    for start in range(0, config.length, config.trained):
        window = token_losses(model, ids[:, start:start + config.trained])
        losses.append(torch.cat([torch.tensor([math.nan], dtype=window.dtype), window]) if start else window)
    return torch.cat(losses)


def reference_rows(losses: torch.Tensor, edges) -> list:
    rows = []
    for lo, hi in zip(edges[:-1], edges[1:]):
        chunk = losses[max(lo, 1) - 1:hi - 1]
        chunk = chunk[~chunk.isnan()]
        mean = chunk.mean().item()
        rows.append({"lo": lo, "hi": hi, "tokens": chunk.numel(), "loss": mean, "perplexity": math.exp(mean)})
    return rows


def passkey_prompt(tokenizer, filler: torch.Tensor, length: int, depth: float, key: str):
    """The prompt of `length` tokens (answer included) and the answer's token count: the head,
    filler tokens, the key sentence at `depth` of the filler, more filler, the question, the answer."""
    def encode(text):
        return tokenizer(text, add_special_tokens=False, return_tensors="pt").input_ids[0]

    head, key_sentence = encode(PASSKEY_HEAD), encode(PASSKEY_KEY.format(key=key))
    question, answer = encode(PASSKEY_QUESTION), encode(PASSKEY_ANSWER.format(key=key))
    room = length - head.numel() - key_sentence.numel() - question.numel() - answer.numel()
    if room < 1 or room > filler.numel():
        raise RotaryError(f"long-context: a passkey prompt of {length} tokens needs {room} filler tokens "
                          f"(have {filler.numel()})")
    before = round(room * depth)
    ids = torch.cat([head, filler[:before], key_sentence, filler[before:room], question, answer])
    return ids.unsqueeze(0), answer.numel()


def passkey(model, name: str, tokenizer, filler: torch.Tensor, length: int, depth: float, key: str) -> dict:
    """Treatment `name`'s passkey cell, teacher-forced: the log-probability of the answer's
    tokens, and whether each is the argmax (all of them argmax: greedy decoding would write
    exactly the key)."""
    install(model, name)
    ids, count = passkey_prompt(tokenizer, filler, length, depth, key)
    with torch.inference_mode():
        hidden = model.model(ids).last_hidden_state[0, -count - 1:-1]
        logprobs = torch.log_softmax(model.lm_head(hidden).double(), dim=-1)
    targets = ids[0, -count:]
    chosen = logprobs.argmax(dim=-1)
    return {"length": length, "depth": depth, "key": key, "answer_tokens": count,
            "logprob": logprobs.gather(1, targets.unsqueeze(1)).sum().item(),
            "tokens_right": int((chosen == targets).sum()),
            "retrieved": bool((chosen == targets).all()),
            "greedy": tokenizer.decode(chosen)}


def passkey_keys(config: Config) -> dict:
    """One 5-digit key per (length, depth), from the seed alone: the same for every treatment."""
    draw = random.Random(config.seed)
    return {(length, depth): str(draw.randrange(10000, 100000))
            for length in config.passkey_lengths for depth in config.passkey_depths}


def _environment() -> dict:
    from .length_generalization import _cpu_model, _load_average

    import transformers

    return {"python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "cpu": _cpu_model(), "torch_threads": torch.get_num_threads(),
            "load_average": _load_average()}


def run(config: Config, out_dir: str | None = None, stream=sys.stderr, command: str | None = None,
        loaded=None) -> dict:
    """The experiment; writes results.json (after every treatment, so a cut-short run leaves what
    it measured), results.md and the plot into out_dir when given. `loaded`: a
    rotary.models.smollm2() result to use (its model is patched), else one is loaded with sdpa."""
    import rotary.models
    import rotary.torch as rt

    start = time.perf_counter()
    torch.set_num_threads(config.threads)
    if loaded is None:
        loaded = rotary.models.smollm2(attn_implementation="sdpa")
    model, tokenizer = loaded.model, loaded.tokenizer
    ids = real_text_ids(tokenizer, max(config.length, max(config.passkey_lengths)))
    text_ids = ids[:, :config.length]
    results = {"experiment": "long-context", "command": command, "config": dataclasses.asdict(config),
               "model": {"gguf_sha256": loaded.gguf_sha256, "attn_implementation": model.config._attn_implementation,
                         "dtype": str(model.dtype)},
               "texts": [str(LICENSES / name) for name in TEXTS], "environment": _environment(),
               "seconds": {}, "treatments": {}, "passkey": []}

    def log(text):
        print(f"[long-context {time.perf_counter() - start:6.0f} s] {text}", file=stream, flush=True)

    tick = time.perf_counter()
    reference = reference_losses(model, text_ids, config)
    results["reference"] = {"buckets": reference_rows(reference, list(config.buckets)),
                            "fine": reference_rows(reference, fine_edges(config))}
    results["seconds"]["reference"] = time.perf_counter() - tick
    log(f"reference (unpatched, windows of {config.trained}): "
        + ", ".join(f"[{r['lo']}, {r['hi']}) {r['perplexity']:.2f}" for r in results["reference"]["buckets"]))
    # Patched for the treatments only: the model (perhaps the caller's) and transformers' modeling
    # functions are given back as they were, whatever happens.
    rt.patch_model(model, precision="hf")
    try:
        keys = passkey_keys(config)
        for name in config.treatments:
            tick = time.perf_counter()
            entry = check_against_transformers(model, name)
            entry.update(perplexity(model, name, text_ids, config))
            entry["seconds_perplexity"] = time.perf_counter() - tick
            log(f"{name}: " + ", ".join(f"[{r['lo']}, {r['hi']}) {r['perplexity']:.2f}" for r in entry["buckets"])
                + f" ({entry['seconds_perplexity']:.0f} s)")
            results["treatments"][name] = entry
            for (length, depth), key in keys.items():
                tick = time.perf_counter()
                cell = passkey(model, name, tokenizer, ids[0], length, depth, key)
                cell.update(treatment=name, seconds=time.perf_counter() - tick)
                results["passkey"].append(cell)
                log(f"{name}: passkey {key} at {length} tokens, depth {depth:.0%}: "
                    f"{'retrieved' if cell['retrieved'] else 'missed'} ({cell['greedy']!r}, {cell['seconds']:.0f} s)")
            results["seconds"]["total"] = time.perf_counter() - start
            if out_dir is not None:
                write_results(results, out_dir)
    finally:
        rt.unpatch_model(model)
    results["environment"]["load_average_end"] = _environment()["load_average"]
    results["seconds"]["total"] = time.perf_counter() - start
    if out_dir is not None:
        write_results(results, out_dir)
        write_report(results, out_dir)
    return results


def write_results(results: dict, out_dir: str) -> None:
    from .length_generalization import _write_atomically

    os.makedirs(out_dir, exist_ok=True)
    _write_atomically(os.path.join(out_dir, "results.json"),
                      (json.dumps(results, indent=1, allow_nan=True) + "\n").encode())


def write_report(results: dict, out_dir: str) -> None:
    from .length_generalization import _write_atomically
    from .long_context_report import markdown, plot_svg

    os.makedirs(out_dir, exist_ok=True)
    _write_atomically(os.path.join(out_dir, "results.md"), markdown(results).encode())
    _write_atomically(os.path.join(out_dir, "perplexity_by_position.svg"), plot_svg(results))
