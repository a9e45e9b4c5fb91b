"""Does it extrapolate? Tiny causal transformers trained at one length with each position
encoding, evaluated at 1, 2, 4, 8 and 16 times that length, and RoPE with each test-time scaling
scheme of rotary's specs.

    python -m rotary.experiments length-generalization [--quick] [--seed S] [--seeds N] [--out DIR]

What runs (docs/experiments.md gives the results and their caveats):
  tasks      made here, no data to download:
               recall  associative recall: key/value pairs, then a key; predict its value
               copy    every token repeats the one `offset` tokens back (loss after `offset`)
               local   a fixed random order-2 Markov chain: next-token prediction, local structure
  model      token embedding, `layers` pre-norm blocks of causal multi-head attention (GQA
             optional) and a GELU MLP, tied output; attention computed in torch (softmax(QK^T/sqrt d)V,
             causal) so that its weights are measured, with rotary's RoPE (rotary.torch.apply_rotary,
             differentiable) on q and k. rotary's C++ attention has no torch binding yet.
  encodings  none (NoPE), sinusoidal (added to the embeddings), learned absolute (a table of
             train_len rows; past it, position p uses row min(p, train_len - 1): the rule says so),
             ALiBi (Press et al.'s slopes, 2^(-8 i / heads)), RoPE (theta 10000).
  scaling    RoPE at test time with rotary specs whose factor is eval_len / train_len: linear (PI),
             static NTK-aware (ntk_alpha, alpha = factor), YaRN; dynamic NTK (factor 2, growing with
             the length as transformers' does); plain RoPE as trained.
  measures   per-token loss and accuracy by eval length and position bucket; the attention's
             entropy and its mass by distance (log2 buckets) at each eval length.
"""
from __future__ import annotations

import json
import math
import os
import platform
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

import rotary
import rotary.torch as rt

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
    copy_offset: int = 8
    seeds: tuple = (0, 1, 2)
    multipliers: tuple = MULTIPLIERS
    tasks: tuple = TASKS
    encodings: tuple = ENCODINGS
    threads: int = 1  # tiny ops: one intra-op thread (two pay a barrier per op on a shared machine)

    @classmethod
    def quick(cls, seeds=(0,)) -> "Config":
        """A smoke run in seconds: the same pipeline, too short to learn much."""
        return cls(train_len=16, vocab=32, d_model=32, layers=1, steps=20, batch=8, eval_batches=1,
                   eval_batch=4, copy_offset=4, seeds=tuple(seeds), multipliers=(1, 2, 4))

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads


# ---- tasks -------------------------------------------------------------------------------------------
def make_batch(task: str, config: Config, length: int, batch: int, generator: torch.Generator,
               chain: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(tokens [batch, length], targets [batch, length]); target -100 is not scored."""
    vocab = config.vocab
    if task == "copy":
        tokens = torch.randint(0, vocab, (batch, length), generator=generator)
        targets = torch.full_like(tokens, -100)
        k = config.copy_offset
        targets[:, k - 1:-1] = tokens[:, :length - k]  # the prediction at t is token t + 1 = token t + 1 - k
        return tokens, targets
    if task == "local":
        tokens = torch.empty((batch, length), dtype=torch.int64)
        tokens[:, :2] = torch.randint(0, vocab, (batch, 2), generator=generator)
        noise = torch.rand((batch, length), generator=generator)
        fresh = torch.randint(0, vocab, (batch, length), generator=generator)
        for t in range(2, length):
            follow = chain[tokens[:, t - 2], tokens[:, t - 1]]
            tokens[:, t] = torch.where(noise[:, t] < 0.9, follow, fresh[:, t])
        targets = torch.full_like(tokens, -100)
        targets[:, :-1] = tokens[:, 1:]
        return tokens, targets
    # recall: keys from the lower half of the vocabulary, values from the upper half; pairs fill the
    # sequence, and after each pair past the first few a query repeats an earlier key whose value
    # the model must produce.
    half = vocab // 2
    tokens = torch.empty((batch, length), dtype=torch.int64)
    targets = torch.full((batch, length), -100, dtype=torch.int64)
    for b in range(batch):
        table = torch.randint(half, vocab, (half,), generator=generator)
        t = 0
        seen = []
        while t + 1 < length:
            if len(seen) >= 4 and t + 2 < length and float(torch.rand((), generator=generator)) < 0.3:
                key = seen[int(torch.randint(0, len(seen), (), generator=generator))]
                tokens[b, t] = key
                tokens[b, t + 1] = table[key]
                targets[b, t] = table[key]  # predicting the token after the repeated key
            else:
                key = int(torch.randint(0, half, (), generator=generator))
                tokens[b, t] = key
                tokens[b, t + 1] = table[key]
                seen.append(key)
            t += 2
        if t < length:
            tokens[b, t] = int(torch.randint(0, half, (), generator=generator))
    return tokens, targets


# ---- the model -----------------------------------------------------------------------------------------
def alibi_slopes(heads: int) -> torch.Tensor:
    """Press et al. (ALiBi), section 3: 2^(-8 i / n) for i = 1..n when n is a power of two; otherwise
    the slopes of the nearest lower power of two, then every other slope of twice that."""
    def power_of_two(n):
        start = 2.0 ** (-8.0 / n)
        return [start ** (i + 1) for i in range(n)]
    if math.log2(heads).is_integer():
        return torch.tensor(power_of_two(heads))
    lower = 2 ** math.floor(math.log2(heads))
    return torch.tensor(power_of_two(lower) + power_of_two(2 * lower)[0::2][: heads - lower])


def sinusoidal(length: int, dim: int) -> torch.Tensor:
    """Vaswani et al.: sin on even, cos on odd dims, frequency 10000^(-2i/d)."""
    position = torch.arange(length, dtype=torch.float64)[:, None]
    rate = torch.exp(-math.log(10000.0) * torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    table = torch.zeros(length, dim, dtype=torch.float64)
    table[:, 0::2] = torch.sin(position * rate)
    table[:, 1::2] = torch.cos(position * rate)
    return table.float()


def rope_spec(config: Config, scaling: str, eval_len: int) -> rotary.Spec:
    """The RoPE spec of the model (theta 1e4, head_dim) with a test-time scaling scheme whose factor
    is eval_len / train_len (1: the trained RoPE). Dynamic NTK keeps the usual factor 2 and grows
    with the call's length by itself (transformers' rule), so it is not given the ratio again."""
    factor = max(1.0, eval_len / config.train_len)
    rope = {"rope_type": "default"}
    if scaling != "rope" and factor > 1:
        rope = {"linear": {"rope_type": "linear", "factor": factor},
                "ntk": {"rope_type": "ntk_alpha", "alpha": factor},
                "dynamic": {"rope_type": "dynamic", "factor": 2.0},
                "yarn": {"rope_type": "yarn", "factor": factor,
                         "original_max_position_embeddings": config.train_len}}[scaling]
    return rotary.Spec.from_hf_config({
        "model_type": "llama", "hidden_size": config.d_model, "num_attention_heads": config.heads,
        "num_key_value_heads": config.kv_heads, "head_dim": config.head_dim,
        "max_position_embeddings": config.train_len if scaling in ("rope", "dynamic") else eval_len,
        "rope_theta": 10000.0, "rope_scaling": rope})


class Block(torch.nn.Module):
    def __init__(self, config: Config):
        super().__init__()
        d = config.d_model
        self.config = config
        self.norm1 = torch.nn.LayerNorm(d)
        self.q = torch.nn.Linear(d, d, bias=False)
        self.kv = torch.nn.Linear(d, 2 * config.kv_heads * config.head_dim, bias=False)
        self.proj = torch.nn.Linear(d, d, bias=False)
        self.norm2 = torch.nn.LayerNorm(d)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d))

    def forward(self, x, encoding, spec, bias, record):
        c = self.config
        batch, length, _ = x.shape
        h = self.norm1(x)
        q = self.q(h).view(batch, length, c.heads, c.head_dim).transpose(1, 2)
        k, v = self.kv(h).view(batch, length, 2, c.kv_heads, c.head_dim).unbind(2)
        k, v = k.transpose(1, 2), v.transpose(1, 2)
        if encoding == "rope":
            # rotary's custom op, [batch, heads, seq, head_dim] as Hugging Face passes it.
            q, k = rt.apply_rotary(q, k, torch.arange(length)[None], spec)
        group = c.heads // c.kv_heads
        k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
        scores = q @ k.transpose(-1, -2) / math.sqrt(c.head_dim) + bias
        weights = scores.softmax(-1)
        if record is not None:
            record.append(weights.detach())
        out = (weights @ v).transpose(1, 2).reshape(batch, length, -1)
        x = x + self.proj(out)
        return x + self.mlp(self.norm2(x))


class TinyTransformer(torch.nn.Module):
    def __init__(self, config: Config, encoding: str):
        super().__init__()
        self.config = config
        self.encoding = encoding
        self.embed = torch.nn.Embedding(config.vocab, config.d_model)
        if encoding == "learned":
            self.positions = torch.nn.Embedding(config.train_len, config.d_model)
        self.blocks = torch.nn.ModuleList(Block(config) for _ in range(config.layers))
        self.norm = torch.nn.LayerNorm(config.d_model)
        self.register_buffer("slopes", alibi_slopes(config.heads), persistent=False)
        # GPT-2's initialisation: small embeddings (the output layer is tied to them).
        torch.nn.init.normal_(self.embed.weight, std=0.02)
        if encoding == "learned":
            torch.nn.init.normal_(self.positions.weight, std=0.02)

    def forward(self, tokens, spec=None, record=None):
        c = self.config
        length = tokens.shape[1]
        x = self.embed(tokens)
        if self.encoding == "sinusoidal":
            x = x + 0.02 * sinusoidal(length, c.d_model)  # at the embeddings' scale
        elif self.encoding == "learned":
            # Past the trained length there is no row: the last row is reused (the rule, stated).
            x = x + self.positions(torch.arange(length).clamp(max=c.train_len - 1))
        i = torch.arange(length)
        distance = (i[:, None] - i[None, :]).float()
        bias = torch.where(distance >= 0, 0.0, float("-inf"))
        if self.encoding == "alibi":
            bias = bias - self.slopes[:, None, None] * distance.clamp(min=0)
        for block in self.blocks:
            x = block(x, self.encoding, spec, bias, record)
        return self.norm(x) @ self.embed.weight.T


# ---- training and evaluation ----------------------------------------------------------------------------
def train(config: Config, task: str, encoding: str, seed: int, chain, progress) -> TinyTransformer:
    torch.manual_seed(seed)
    model = TinyTransformer(config, encoding)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=0.01)
    warmup = max(1, config.steps // 10)  # linear warmup, then cosine decay to 0 (any number of steps)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(
        (step + 1) / warmup, 0.5 * (1 + math.cos(math.pi * min(1.0, step / max(1, config.steps - 1))))))
    generator = torch.Generator().manual_seed(10_000 + seed)
    spec = rope_spec(config, "rope", config.train_len)
    for step in range(config.steps):
        tokens, targets = make_batch(task, config, config.train_len, config.batch, generator, chain)
        logits = model(tokens, spec)
        loss = F.cross_entropy(logits.reshape(-1, config.vocab), targets.reshape(-1), ignore_index=-100)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
        progress.step(float(loss.detach()))
    return model.eval()


def position_buckets(length: int, train_len: int) -> list[tuple[int, int]]:
    """[0, L), [L, 2L), [2L, 4L), ...: inside the trained length, then each doubling past it."""
    edges = [0, train_len]
    while edges[-1] < length:
        edges.append(min(length, 2 * edges[-1]))
    return list(zip(edges[:-1], edges[1:]))


@torch.no_grad()
def evaluate(model, config: Config, task: str, spec, length: int, seed: int, chain) -> dict:
    generator = torch.Generator().manual_seed(20_000 + seed)  # the same eval data for every encoding
    buckets = position_buckets(length, config.train_len)
    loss_sum = np.zeros(len(buckets))
    correct = np.zeros(len(buckets))
    count = np.zeros(len(buckets))
    distance_edges = [0] + [2 ** e for e in range(int(math.log2(length)) + 1)] + [length]
    mass = np.zeros(len(distance_edges) - 1)
    entropy = []
    for _ in range(config.eval_batches):
        tokens, targets = make_batch(task, config, length, config.eval_batch, generator, chain)
        record = []
        logits = model(tokens, spec, record)
        token_loss = F.cross_entropy(logits.reshape(-1, config.vocab), targets.reshape(-1), ignore_index=-100,
                                     reduction="none").view_as(targets)
        hit = (logits.argmax(-1) == targets)
        scored = targets != -100
        for n, (start, end) in enumerate(buckets):
            m = scored[:, start:end]
            loss_sum[n] += float(token_loss[:, start:end][m].sum())
            correct[n] += float(hit[:, start:end][m].sum())
            count[n] += float(m.sum())
        # Attention of the last layer: mass by distance (log2 buckets) and mean row entropy.
        weights = record[-1].double()  # [batch, heads, q, k]
        i = torch.arange(length)
        distance = (i[:, None] - i[None, :]).clamp(min=0)
        for n in range(len(distance_edges) - 1):
            mask = (distance >= distance_edges[n]) & (distance < max(distance_edges[n + 1], distance_edges[n] + 1))
            mask &= i[:, None] >= i[None, :]
            mass[n] += float((weights * mask).sum() / (weights.shape[0] * weights.shape[1] * length))
        p = weights.clamp(min=1e-30)
        entropy.append(float(-(p * p.log()).sum(-1).mean()))
    safe = np.maximum(count, 1)
    return {
        "length": length,
        "buckets": [list(b) for b in buckets],
        "loss": (loss_sum / safe).tolist(),
        "accuracy": (correct / safe).tolist(),
        "scored_tokens": count.astype(int).tolist(),
        "mean_loss": float(loss_sum.sum() / max(count.sum(), 1)),
        "mean_accuracy": float(correct.sum() / max(count.sum(), 1)),
        "attention_mass_by_distance": {"edges": distance_edges, "mass": (mass / config.eval_batches).tolist()},
        "attention_entropy": float(np.mean(entropy)),
    }


class Progress:
    """steps done / total, the last loss and the time left, on one line of stderr."""

    def __init__(self, total: int, stream=sys.stderr):
        self.total = total
        self.done = 0
        self.start = time.monotonic()
        self.stream = stream
        self.label = ""

    def step(self, loss: float) -> None:
        self.done += 1
        if self.done % 20 and self.done != self.total:
            return
        elapsed = time.monotonic() - self.start
        eta = elapsed / self.done * (self.total - self.done)
        self.stream.write(f"\r{self.label:28s} step {self.done}/{self.total}  loss {loss:6.3f}  "
                          f"elapsed {elapsed:5.0f} s  eta {eta:5.0f} s")
        self.stream.flush()


def run(config: Config, out_dir: str | None = None, stream=sys.stderr) -> dict:
    """Trains and evaluates every (task, encoding, seed); returns the results (and writes
    results.json and the plots into out_dir when given, each by a temporary file and a rename)."""
    torch.set_num_threads(config.threads)
    rotary.set_num_threads(1)
    started = time.monotonic()
    progress = Progress(len(config.tasks) * len(config.encodings) * len(config.seeds) * config.steps, stream)
    runs = []
    for task in config.tasks:
        chain = torch.randint(0, config.vocab, (config.vocab, config.vocab), generator=torch.Generator().manual_seed(7))
        for encoding in config.encodings:
            for seed in config.seeds:
                progress.label = f"{task}/{encoding}/seed {seed}"
                t0 = time.monotonic()
                model = train(config, task, encoding, seed, chain, progress)
                trained = time.monotonic() - t0
                variants = SCALINGS if encoding == "rope" else (encoding,)
                for variant in variants:
                    for multiplier in config.multipliers:
                        length = config.train_len * multiplier
                        spec = rope_spec(config, variant, length) if encoding == "rope" else None
                        result = evaluate(model, config, task, spec, length, seed, chain)
                        runs.append({"task": task, "encoding": encoding, "variant": variant, "seed": seed,
                                     "multiplier": multiplier, "train_seconds": trained, **result})
    stream.write("\n")
    results = {
        "experiment": "length-generalization",
        "config": {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(config).items()},
        "versions": {"rotary": rotary.__version__, "torch": torch.__version__, "numpy": np.__version__,
                     "python": platform.python_version()},
        "machine": {"cpu": _cpu_model(), "threads": config.threads, "platform": platform.platform()},
        "attention": "torch softmax(QK^T / sqrt(d)) V in the model (weights measured), rotary.torch.apply_rotary for RoPE",
        "seconds": time.monotonic() - started,
        "runs": runs,
        "summary": summarize(runs),
    }
    if out_dir is not None:
        write_results(results, out_dir)
    return results


def summarize(runs: list) -> list:
    """Mean and spread over seeds of the accuracy, per (task, variant, multiplier)."""
    groups = {}
    for r in runs:
        groups.setdefault((r["task"], r["variant"], r["multiplier"]), []).append(r["mean_accuracy"])
    return [{"task": t, "variant": v, "multiplier": m, "accuracy_mean": float(np.mean(a)),
             "accuracy_std": float(np.std(a)), "seeds": len(a)} for (t, v, m), a in sorted(groups.items())]


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _write_atomically(path: str, data: bytes) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=".tmp-")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def write_results(results: dict, out_dir: str) -> None:
    os.makedirs(out_dir, exist_ok=True)
    _write_atomically(os.path.join(out_dir, "results.json"), json.dumps(results, indent=1).encode())
    from . import plots

    for name, svg in plots.render(results).items():
        _write_atomically(os.path.join(out_dir, name), svg)
