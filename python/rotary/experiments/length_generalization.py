"""Does it extrapolate? Tiny causal transformers trained at one length with each position
encoding, evaluated at 1, 2, 4, 8 and 16 times that length, and RoPE with each test-time scaling
scheme of rotary's specs.

    python -m rotary.experiments length-generalization [--quick] [--seed S] [--seeds N] [--out DIR]

What runs (docs/experiments.md gives the results and their caveats):
  tasks      made here, no data to download:
               recall  associative recall: key/value pairs, then a key; predict its value
               copy    every token repeats the one `copy_offset` tokens back
               local   a fixed random order-2 Markov chain: next-token prediction, local structure
  model      token embedding, `layers` pre-norm blocks of causal multi-head attention (GQA) and a
             GELU MLP, tied output. The attention is torch's scaled_dot_product_attention (SDPA:
             training needs gradients), with rotary's RoPE (rotary.torch.apply_rotary, a
             differentiable custom op) on q and k; at evaluation the attention weights are also
             computed explicitly from the same q, k and mask, to be measured.
  encodings  none (NoPE), sinusoidal (added to the embeddings), learned absolute (a table of
             train_len rows; past it, position p uses row min(p, train_len - 1): the rule says so),
             ALiBi (Press et al.'s slopes, 2^(-8 i / heads)), RoPE (theta 10000).
  scaling    RoPE at test time with rotary specs whose factor s is eval_len / train_len (or a fixed
             scaling_factor): linear (PI), static NTK-aware (ntk_alpha, alpha = s), YaRN, and
             dynamic NTK (transformers' rule: its factor grows with the sequence's own length);
             plain RoPE as trained.
  measures   per-token loss and accuracy by eval length and position bucket; per layer, the
             attention's mass by distance and its row entropy by query position (log2 buckets).

Determinism: every random draw comes from a torch.Generator (or torch.manual_seed) seeded from the
run's seed alone, each (task, encoding, seed) model is trained and evaluated on its own, and torch
runs `threads` intra-op threads (default 1). The same seed and thread count give bit-identical
results, whatever the other seeds and whatever `jobs` (the number of worker processes).
"""
from __future__ import annotations

import json
import math
import os
import platform
import queue
import sys
import tempfile
import threading
import time
from dataclasses import asdict

import numpy as np
import torch
import torch.nn.functional as F

import rotary
import rotary.torch as rt
from rotary import RotaryError

# The configuration and the RoPE specs live in config.py (plots.py reads them too); re-exported here.
from .config import ENCODINGS, MULTIPLIERS, SCALINGS, TASKS, Config, rope_spec, scheme_factor  # noqa: F401

IGNORE = -100  # a target that is not scored


def chance_accuracy(task: str, vocab: int) -> float:
    """The accuracy of guessing uniformly among the tokens a target can be: recall's values are the
    upper half of the vocabulary, copy's and local's targets any token."""
    return 2.0 / vocab if task == "recall" else 1.0 / vocab


# ---- tasks -------------------------------------------------------------------------------------------
def markov_chain(vocab: int) -> torch.Tensor:
    """The `local` task's order-2 chain: the token after (a, b) is chain[a, b]; fixed for every seed."""
    return torch.randint(0, vocab, (vocab, vocab), generator=torch.Generator().manual_seed(7))


def make_batch(task: str, config: Config, length: int, batch: int, generator: torch.Generator,
               chain: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(tokens [batch, length], targets [batch, length]); target -100 is not scored. The target at t
    is the token the model should predict after reading tokens 0..t."""
    vocab = config.vocab
    if task == "copy":
        tokens = torch.randint(0, vocab, (batch, length), generator=generator)
        targets = torch.full_like(tokens, IGNORE)
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
        targets = torch.full_like(tokens, IGNORE)
        targets[:, :-1] = tokens[:, 1:]
        return tokens, targets
    # recall: keys from the lower half of the vocabulary, values from the upper half, one random
    # key -> value table per sequence; the sequence is key, value pairs. From the fifth pair on,
    # with probability 0.3 a pair is a query: it repeats the key of a uniformly chosen earlier pair,
    # and the model, reading that key, must predict its value (the only scored tokens).
    half = vocab // 2
    pairs = length // 2
    table = torch.randint(half, vocab, (batch, half), generator=generator)
    keys = torch.randint(0, half, (batch, pairs), generator=generator)
    is_query = torch.rand((batch, pairs), generator=generator) < 0.3
    is_query[:, :4] = False
    earlier = (torch.rand((batch, pairs), generator=generator) * torch.arange(pairs)).long()
    rows = torch.arange(batch)
    for j in range(4, pairs):  # in order: a query may repeat an earlier query's key
        keys[:, j] = torch.where(is_query[:, j], keys[rows, earlier[:, j]], keys[:, j])
    values = table.gather(1, keys)
    tokens = torch.empty((batch, length), dtype=torch.int64)
    tokens[:, 0:2 * pairs:2] = keys
    tokens[:, 1:2 * pairs:2] = values
    if length % 2:
        tokens[:, -1] = torch.randint(0, half, (batch,), generator=generator)
    targets = torch.full((batch, length), IGNORE, dtype=torch.int64)
    targets[:, 0:2 * pairs:2] = torch.where(is_query, values, IGNORE)
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


class AttentionProbe:
    """Per layer, the attention weights' mass by distance (log2 buckets of query - key) and their
    row entropy (nats) by query position (the same buckets), summed over the rows it saw."""

    def __init__(self, layers: int, length: int):
        self.edges = distance_edges(length)
        buckets = len(self.edges) - 1
        self.mass = np.zeros((layers, buckets))
        self.entropy = np.zeros((layers, buckets))
        self.rows = np.zeros((layers, buckets))
        position = torch.arange(length)
        self.distance = (position[:, None] - position[None, :]).clamp(min=0)
        self.bucket_of = torch.bucketize(torch.arange(length), torch.tensor(self.edges[1:]), right=True)

    def add(self, layer: int, weights: torch.Tensor) -> None:
        """weights [batch, heads, q, k] (float32), rows summing to 1, zero above the diagonal.
        Sums over a row, then over batch and heads, accumulate in float64."""
        rows = weights.shape[0] * weights.shape[1]
        buckets = len(self.edges) - 1
        summed = weights.sum((0, 1)).double()  # [q, k]
        by_distance = torch.bincount(self.distance.flatten(), weights=summed.flatten(), minlength=summed.shape[0])
        self.mass[layer] += torch.zeros(buckets, dtype=torch.float64).index_add_(
            0, self.bucket_of, by_distance).numpy()
        entropy = torch.special.entr(weights).sum(-1, dtype=torch.float64).sum((0, 1))  # per query position
        self.entropy[layer] += torch.zeros(buckets, dtype=torch.float64).index_add_(
            0, self.bucket_of, entropy).numpy()
        self.rows[layer] += np.bincount(self.bucket_of.numpy(), minlength=buckets) * rows

    def result(self) -> dict:
        rows = np.maximum(self.rows, 1)
        return {"edges": self.edges, "mass": (self.mass / rows.sum(1, keepdims=True)).tolist(),
                "entropy": (self.entropy / rows).tolist()}


def distance_edges(length: int) -> list:
    """[0, 1, 2, 4, ..., length]: bucket n holds distances (or query positions) [edges[n], edges[n+1])."""
    edges = [0, 1]
    while edges[-1] * 2 < length:
        edges.append(edges[-1] * 2)
    return edges + [length]


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

    def forward(self, x, encoding, spec, bias, probe, layer):
        c = self.config
        batch, length, _ = x.shape
        h = self.norm1(x)
        q = self.q(h).view(batch, length, c.heads, c.head_dim).transpose(1, 2)
        k, v = self.kv(h).view(batch, length, 2, c.kv_heads, c.head_dim).unbind(2)
        k, v = k.transpose(1, 2), v.transpose(1, 2)
        if encoding == "rope":
            # rotary's custom op, [batch, heads, seq, head_dim] as Hugging Face passes it; dynamic
            # NTK takes its length from the largest position + 1 (Hugging Face's rule).
            q, k = rt.apply_rotary(q, k, torch.arange(length)[None], spec)
        if bias is None:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, enable_gqa=True)
        if probe is not None:
            # The weights SDPA used, computed again from the same q, k and mask (SDPA does not
            # return them), only to be measured.
            # The first probe_sequences sequences of the batch are measured (enough rows, and the
            # O(length^2) weights are the evaluation's largest cost).
            n, group = c.probe_sequences, c.heads // c.kv_heads
            scores = q[:n] @ k[:n].repeat_interleave(group, 1).transpose(-1, -2) / math.sqrt(c.head_dim)
            causal = torch.ones(length, length, dtype=torch.bool).tril()
            scores = scores.masked_fill(~causal, float("-inf")) if bias is None else scores + bias
            probe.add(layer, scores.softmax(-1))
        out = out.transpose(1, 2).reshape(batch, length, -1)
        x = x + self.proj(out)
        return x + self.mlp(self.norm2(x))


class TinyTransformer(torch.nn.Module):
    def __init__(self, config: Config, encoding: str):
        super().__init__()
        if encoding not in ENCODINGS:
            raise RotaryError(f"unknown encoding {encoding!r} (known: {', '.join(ENCODINGS)})")
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

    def forward(self, tokens, spec=None, probe=None):
        c = self.config
        length = tokens.shape[1]
        x = self.embed(tokens)
        if self.encoding == "sinusoidal":
            x = x + 0.02 * sinusoidal(length, c.d_model)  # at the embeddings' scale
        elif self.encoding == "learned":
            # Past the trained length there is no row: the last row is reused (the rule, stated).
            x = x + self.positions(torch.arange(length).clamp(max=c.train_len - 1))
        bias = None  # causal only: SDPA's is_causal
        if self.encoding == "alibi":
            i = torch.arange(length)
            distance = (i[:, None] - i[None, :]).float()
            bias = torch.where(distance >= 0, -self.slopes[:, None, None] * distance, float("-inf"))
        for layer, block in enumerate(self.blocks):
            x = block(x, self.encoding, spec, bias, probe, layer)
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
        loss = F.cross_entropy(logits.reshape(-1, config.vocab), targets.reshape(-1), ignore_index=IGNORE)
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
    probe = AttentionProbe(config.layers, length)
    for _ in range(config.eval_batches):
        tokens, targets = make_batch(task, config, length, config.eval_batch, generator, chain)
        logits = model(tokens, spec, probe)
        token_loss = F.cross_entropy(logits.reshape(-1, config.vocab), targets.reshape(-1), ignore_index=IGNORE,
                                     reduction="none").view_as(targets)
        hit = logits.argmax(-1) == targets
        scored = targets != IGNORE
        for n, (start, end) in enumerate(buckets):
            m = scored[:, start:end]
            loss_sum[n] += float(token_loss[:, start:end][m].double().sum())
            correct[n] += float(hit[:, start:end][m].sum())
            count[n] += float(m.sum())
    attention = probe.result()
    # A bucket without scored tokens (recall's first pairs) has no loss or accuracy: None.
    per_bucket = lambda sums: [float(a / n) if n else None for a, n in zip(sums, count)]  # noqa: E731
    return {
        "length": length,
        "buckets": [list(b) for b in buckets],
        "loss": per_bucket(loss_sum),
        "accuracy": per_bucket(correct),
        "scored_tokens": count.astype(int).tolist(),
        "mean_loss": float(loss_sum.sum() / max(count.sum(), 1)),
        "mean_accuracy": float(correct.sum() / max(count.sum(), 1)),
        "attention_mass_by_distance": {"edges": attention["edges"], "mass": attention["mass"]},
        "attention_entropy_by_position": {"edges": attention["edges"], "entropy": attention["entropy"]},
    }


class Progress:
    """steps done / total, the last loss, elapsed time and the time left, on one line of the stream.
    The time left is elapsed / steps done x steps left: it includes the evaluations done so far."""

    def __init__(self, total: int, stream=sys.stderr, every: int = 20):
        self.total = total
        self.done = 0
        self.start = time.monotonic()
        self.stream = stream
        self.every = every
        self.label = ""
        self.loss = float("nan")

    def step(self, loss: float, count: int = 1) -> None:
        before = self.done
        self.done += count
        self.loss = loss
        if self.done // self.every == before // self.every and self.done != self.total:
            return
        elapsed = time.monotonic() - self.start
        eta = elapsed / self.done * (self.total - self.done)
        self.stream.write(f"\r{self.label:28s} step {self.done}/{self.total}  loss {loss:6.3f}  "
                          f"elapsed {elapsed:5.0f} s  eta {eta:5.0f} s")
        self.stream.flush()


class _QueueProgress:
    """A worker's progress: every `every` steps, (steps, last loss, label) onto the parent's queue."""

    def __init__(self, channel, label, every=20):
        self.channel, self.label, self.every, self.pending = channel, label, every, 0

    def step(self, loss: float) -> None:
        self.pending += 1
        if self.pending == self.every:
            self.flush(loss)

    def flush(self, loss: float) -> None:
        if self.pending:
            self.channel.put((self.pending, loss, self.label))
            self.pending = 0


def run_job(config: Config, task: str, encoding: str, seed: int, progress) -> list:
    """One (task, encoding, seed): trains the model, evaluates it at every eval length (RoPE with
    every scaling scheme); returns one record per (variant, length)."""
    chain = markov_chain(config.vocab)
    t0 = time.monotonic()
    model = train(config, task, encoding, seed, chain, progress)
    trained = time.monotonic() - t0
    records = []
    for variant in (config.scalings if encoding == "rope" else (encoding,)):
        for length in config.eval_lengths:
            spec = rope_spec(config, variant, length) if encoding == "rope" else None
            t1 = time.monotonic()
            result = evaluate(model, config, task, spec, length, seed, chain)
            records.append({"task": task, "encoding": encoding, "variant": variant, "seed": seed,
                            "factor": length / config.train_len,
                            "scheme_factor": scheme_factor(config, length) if variant in ("linear", "ntk", "yarn") else None,
                            "train_seconds": trained, "eval_seconds": time.monotonic() - t1, **result})
    return records


_worker_channel = None


def _worker_init(channel, threads):
    global _worker_channel
    _worker_channel = channel
    torch.set_num_threads(threads)
    rotary.set_num_threads(1)


def _worker_job(args):
    config, task, encoding, seed = args
    progress = _QueueProgress(_worker_channel, f"{task}/{encoding}/seed {seed}")
    records = run_job(config, task, encoding, seed, progress)
    progress.flush(float("nan"))
    return records


def run(config: Config, out_dir: str | None = None, stream=sys.stderr, command: str | None = None) -> dict:
    """Trains and evaluates every (task, encoding, seed); returns the results (and writes
    results.json, the plots and the HTML page into out_dir when given, each by a temporary file
    and a rename)."""
    config.validate()
    torch.set_num_threads(config.threads)
    rotary.set_num_threads(1)
    started = time.monotonic()
    load_before = _load_average()
    jobs = [(task, encoding, seed) for task in config.tasks for encoding in config.encodings for seed in config.seeds]
    progress = Progress(len(jobs) * config.steps, stream)
    records = {}
    if config.jobs == 1:
        for job in jobs:
            progress.label = "{}/{}/seed {}".format(*job)
            records[job] = run_job(config, *job, progress)
    else:
        records = _run_parallel(config, jobs, progress)
    stream.write("\n")
    runs = [r for job in jobs for r in records[job]]  # in job order, whatever finished first
    results = {
        "experiment": "length-generalization",
        "command": command,
        "config": {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(config).items()},
        "seeds": list(config.seeds),
        "chance_accuracy": {task: chance_accuracy(task, config.vocab) for task in config.tasks},
        "versions": {"rotary": rotary.__version__, "torch": torch.__version__, "numpy": np.__version__,
                     "python": platform.python_version()},
        "machine": {"cpu": _cpu_model(), "logical_cpus": os.cpu_count(), "torch_threads": config.threads,
                    "processes": config.jobs, "platform": platform.platform(),
                    "load_average_start": load_before, "load_average_end": _load_average()},
        "attention": "torch.nn.functional.scaled_dot_product_attention (is_causal, or the ALiBi bias as a float "
                     "mask; GQA by enable_gqa); RoPE by rotary.torch.apply_rotary on q and k; the measured "
                     "weights are softmax(QK^T / sqrt(d) + mask) from the same q and k",
        "seconds": time.monotonic() - started,
        "runs": runs,
        "summary": summarize(runs),
    }
    if out_dir is not None:
        write_results(results, out_dir)
    return results


def _run_parallel(config: Config, jobs: list, progress: Progress) -> dict:
    """config.jobs spawned worker processes, each with config.threads torch threads; the parent
    draws the progress from their queue. Results are keyed by job, so their order is fixed."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")  # not fork: torch's thread pools do not survive it
    channel = context.Queue()
    done = threading.Event()

    def drain():
        while not done.is_set() or not channel.empty():
            try:
                steps, loss, label = channel.get(timeout=0.2)
            except queue.Empty:
                continue
            progress.label = label
            progress.step(loss if math.isfinite(loss) else progress.loss, steps)

    drawer = threading.Thread(target=drain, daemon=True)
    drawer.start()
    try:
        with context.Pool(config.jobs, initializer=_worker_init, initargs=(channel, config.threads)) as pool:
            outputs = pool.map(_worker_job, [(config, *job) for job in jobs], chunksize=1)
    finally:
        done.set()
        drawer.join()
    return dict(zip(jobs, outputs))


def summarize(runs: list) -> list:
    """Per (task, variant, eval length), over seeds: the accuracy's and the loss's mean, sample
    standard deviation (ddof 1; 0 for one seed), min and max, and the accuracy per position bucket."""
    groups = {}
    for r in runs:
        groups.setdefault((r["task"], r["encoding"], r["variant"], r["length"]), []).append(r)
    rows = []
    for (task, encoding, variant, length), group in sorted(groups.items()):
        accuracy = np.array([r["mean_accuracy"] for r in group])
        loss = np.array([r["mean_loss"] for r in group])
        ddof = 1 if len(group) > 1 else 0
        rows.append({"task": task, "encoding": encoding, "variant": variant, "length": length,
                     "factor": group[0]["factor"], "seeds": len(group),
                     "accuracy_mean": float(accuracy.mean()), "accuracy_std": float(accuracy.std(ddof=ddof)),
                     "accuracy_min": float(accuracy.min()), "accuracy_max": float(accuracy.max()),
                     "loss_mean": float(loss.mean()), "loss_std": float(loss.std(ddof=ddof)),
                     "bucket_accuracy_mean": [None if math.isnan(v) else float(v) for v in _nanmean(
                         [r["accuracy"] for r in group])]})
    return rows


def _nanmean(rows: list) -> np.ndarray:
    """The column means of rows holding None (no scored tokens), NaN where a column has none."""
    values = np.array(rows, dtype=float)
    counts = np.sum(~np.isnan(values), axis=0)
    return np.where(counts > 0, np.nansum(values, axis=0) / np.maximum(counts, 1), np.nan)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _load_average():
    try:
        return list(os.getloadavg())
    except OSError:
        return None


def _write_atomically(path: str, data: bytes) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=".tmp-")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)  # mkstemp makes 0600; a results file is for everyone to read
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def write_results(results: dict, out_dir: str) -> None:
    """results.json, the SVG plots and report.html (the plots on one self-contained page)."""
    os.makedirs(out_dir, exist_ok=True)
    _write_atomically(os.path.join(out_dir, "results.json"), json.dumps(results, indent=1).encode())
    write_plots(results, out_dir)


def write_plots(results: dict, out_dir: str) -> None:
    """The SVG plots and report.html of a results dict (python -m rotary.experiments plot)."""
    os.makedirs(out_dir, exist_ok=True)
    from . import plots

    svgs = plots.render(results)
    for name, svg in svgs.items():
        _write_atomically(os.path.join(out_dir, name), svg)
    _write_atomically(os.path.join(out_dir, "report.html"), plots.html_page(results, svgs).encode())
