"""rotary.viz: the report's plots with matplotlib, for notebooks.

Each function draws one plot on `ax` (a new figure when None) and returns the Axes; every plot
has a title, axis labels with units and, where several series share it, a legend. The numbers
come from the same C++ analysis module as `rotary report` and `rotary check`
(include/rotary/analysis.hpp; the formulas are in docs/analysis.md):

    frequencies(spec)          inv_freq and wavelength per pair (log scale), context marked
    angles(spec, positions)    the angle p * theta_i mod 2 pi per pair at chosen positions
    similarity(spec)           <R_m 1, R_n 1> / |1|^2 over positions m, n: the relative-position
                               structure (constant along diagonals)
    decay(spec)                RoFormer's long-term decay bound and measured scores vs distance
    scaling(spec)              the factor a scheme (YaRN, Llama 3, LongRoPE, ...) divides each
                               pair's frequency by, with the regime of each pair
    extrapolation(spec, n)     the largest angle per pair in training vs at a target context
                               (default: the context of `rotary check` and the report)
    compare(specs)             wavelengths of several specs on one plot

  spec: a rotary.Spec or a preset name ("llama-3.1-8b"). Colours of the scheme regimes and of the
  extrapolation plot are the HTML report's (src/analysis/report.cpp), so a notebook plot and
  `rotary report` read alike.

  and the plots of a length-generalization results dict (rotary.experiments, the results.json of
  `python -m rotary.experiments length-generalization`; docs/experiments.md):

    experiment_accuracy(results, task)          accuracy against eval length per encoding, mean
                                                over seeds with the spread as error bars
    experiment_scaling(results, task)           RoPE's test-time scaling schemes side by side
    experiment_loss_by_position(results, task)  loss per position bucket at one eval length
    experiment_attention(results, task)         attention mass by distance (or entropy by query
                                                position) per encoding at one eval length

    import rotary, rotary.viz
    rotary.viz.decay(rotary.Spec.preset("llama-3.1-8b"))
"""
from __future__ import annotations

import math

import numpy as np

from . import _rotary
from ._rotary import RotaryError
from ._spec import Spec

__all__ = ["frequencies", "angles", "similarity", "decay", "scaling", "extrapolation", "compare",
           "experiment_accuracy", "experiment_scaling", "experiment_loss_by_position", "experiment_attention"]


# The report's colours (regime_color in src/analysis/report_chart.cpp, the extrapolation chart in
# src/analysis/report.cpp);
# tests/python/test_viz.py reads them back from a rendered report and compares.
REGIME_COLORS = {"unscaled": "#7f7f7f", "extrapolated": "#0072b2", "interpolated": "#d55e00",
                 "blended": "#009e73", "rescaled": "#cc79a7", "unrotated": "#000000"}
EXTRAPOLATION_COLORS = {"trained": "#7f7f7f", "target": "#0072b2", "out of distribution": "#d62728"}


def _spec(spec, name: str = "spec") -> Spec:
    """A Spec, or the preset of that name."""
    if isinstance(spec, Spec):
        return spec
    if isinstance(spec, str):
        return Spec.preset(spec)
    raise RotaryError(f"{name} must be a rotary.Spec or a preset name (got {type(spec).__name__} {spec!r})")


def _axes(ax, figsize=(7.0, 4.2)):
    if ax is not None:
        return ax
    import matplotlib.pyplot as plt

    _, ax = plt.subplots(figsize=figsize, layout="constrained")
    return ax


def _context(spec: Spec) -> int:
    return spec.max_position_embeddings or spec.original_context or 4096


def frequencies(spec: Spec, *, ax=None, seq_len: int | None = None):
    """inv_freq (rad/token) and wavelength (tokens per turn) of each pair, log scale."""
    spec = _spec(spec)
    ax = _axes(ax)
    freqs = spec.frequencies(seq_len)
    pairs = np.arange(len(freqs.inv_freq))
    rotated = freqs.inv_freq > 0
    ax.semilogy(pairs[rotated], freqs.wavelength_tokens[rotated], "o-", ms=3, label="wavelength 2\u03c0/\u03b8\u1d62")
    ax.axhline(_context(spec), color="gray", ls="--", lw=1, label=f"context {_context(spec):,} tokens")
    ax.set_xlabel("pair index i")
    ax.set_ylabel("wavelength (tokens per turn)")
    twin = ax.twinx()
    twin.semilogy(pairs[rotated], freqs.inv_freq[rotated], color="C1", lw=1, label="\u03b8\u1d62")
    twin.set_ylabel("\u03b8\u1d62 (radians per token)")
    ax.set_title(f"{spec.name}: frequency and wavelength per pair")
    lines = ax.get_legend_handles_labels()
    twin_lines = twin.get_legend_handles_labels()
    ax.legend(lines[0] + twin_lines[0], lines[1] + twin_lines[1], loc="upper left", fontsize=8)
    return ax


def angles(spec: Spec, positions=(1, 16, 256, 4096), *, ax=None):
    """The rotation angle p * theta_i (mod 2 pi) of each pair at a few positions."""
    spec = _spec(spec)
    ax = _axes(ax)
    freqs = spec.frequencies()
    pairs = np.arange(len(freqs.inv_freq))
    for p in positions:
        ax.plot(pairs, np.mod(p * freqs.inv_freq, 2 * math.pi), ".-", ms=3, lw=0.8, label=f"p = {p:,}")
    ax.set_xlabel("pair index i")
    ax.set_ylabel("angle p\u00b7\u03b8\u1d62 mod 2\u03c0 (radians)")
    ax.set_ylim(0, 2 * math.pi)
    ax.set_title(f"{spec.name}: angle per pair at chosen positions")
    ax.legend(fontsize=8)
    return ax


def similarity(spec: Spec, positions: int = 256, *, ax=None):
    """cos-similarity of the all-ones vector rotated to positions m and n:
    (1/n_pairs) sum_i cos((m - n) theta_i). Depends on m - n only (relative position)."""
    spec = _spec(spec)
    ax = _axes(ax, figsize=(5.2, 4.4))
    inv_freq = spec.frequencies().inv_freq
    distance = np.arange(positions)[:, None] - np.arange(positions)[None, :]
    score = np.cos(distance[..., None] * inv_freq).mean(-1)
    image = ax.imshow(score, origin="lower", cmap="viridis", vmin=-1, vmax=1,
                      extent=(0, positions, 0, positions))
    ax.figure.colorbar(image, ax=ax, label="score (1 = same direction)")
    ax.set_xlabel("key position n (tokens)")
    ax.set_ylabel("query position m (tokens)")
    ax.set_title(f"{spec.name}: similarity of positions")
    return ax


def decay(spec: Spec, max_distance: int | None = None, *, samples: int = 32, ax=None):
    """RoFormer's upper bound on the attention score vs relative distance, and the measured score
    for identical (all-ones, random) and independent random vectors. Log-log."""
    spec = _spec(spec)
    ax = _axes(ax)
    distance = max_distance or max(_context(spec), 4096)
    data = _rotary.long_term_decay(spec._native, int(distance), int(samples))
    for key, label in (("bound", "bound (1/n)\u03a3|S\u2c7c| (RoFormer)"),
                       ("score_identical_ones", "score, q = k = ones"),
                       ("score_identical_random", "score, q = k random"),
                       ("score_independent_random", "|score|, q, k independent")):
        points = np.asarray(data[key])
        if len(points):
            y = np.abs(points[:, 1]) if key != "bound" else points[:, 1] / data["bound_at_zero"]
            ax.loglog(np.maximum(points[:, 0], 1), np.maximum(y, 1e-6), lw=1.2, label=label)
    ax.set_xlabel("relative distance (tokens)")
    ax.set_ylabel("normalized score")
    ax.set_title(f"{spec.name}: long-term decay (ratio near/far {data['decay_ratio']:.3g})")
    ax.legend(fontsize=8)
    return ax


def scaling(spec: Spec, *, seq_len: int = 0, ax=None):
    """The factor each pair's frequency is divided by (1 = unchanged), colored by regime (the
    report's colours, REGIME_COLORS)."""
    spec = _spec(spec)
    ax = _axes(ax)
    data = _rotary.scheme_scaling(spec._native, int(seq_len))
    factor = np.asarray(data["factor_applied"])
    regimes = np.asarray(data["regime"])
    pairs = np.arange(len(factor))
    ax.plot(pairs, factor, color="gray", lw=0.8)
    for regime in sorted(set(regimes)):
        mask = regimes == regime
        ax.plot(pairs[mask], factor[mask], "o", ms=4, color=REGIME_COLORS.get(regime, "#7f7f7f"), label=regime)
    ax.set_xlabel("pair index i")
    ax.set_ylabel("default \u03b8\u1d62 / scaled \u03b8\u1d62 (factor)")
    ax.set_title(f"{spec.name}: {spec.rope_type} scaling per pair (attention scaling {data['attention_scaling']:.4g})")
    ax.legend(fontsize=8)
    return ax


def extrapolation(spec: Spec, target_context: int | None = None, *, trained_context: int | None = None, ax=None):
    """The largest angle each pair reached in training vs at a target context (log scale);
    pairs past their trained angle without a full turn in training are out of distribution.

    The defaults are `rotary check`'s and the report's: trained_context spec.default_trained_context
    (the original context of YaRN, LongRoPE and Llama 3), target_context spec.default_target_context
    (max_position_embeddings: 131,072 tokens for llama-3.1-8b)."""
    spec = _spec(spec)
    ax = _axes(ax)
    trained = spec.default_trained_context if trained_context is None else trained_context
    target = spec.default_target_context if target_context is None else target_context
    data = _rotary.extrapolation(spec._native, int(trained), int(target))
    pairs = np.arange(len(data["max_angle_trained_rad"]))
    ax.semilogy(pairs, np.maximum(data["max_angle_trained_rad"], 1e-12), color=EXTRAPOLATION_COLORS["trained"],
                label=f"trained ({trained:,} tokens)")
    ax.semilogy(pairs, np.maximum(data["max_angle_target_rad"], 1e-12), color=EXTRAPOLATION_COLORS["target"],
                label=f"target ({target:,} tokens)")
    ood = np.asarray(data["out_of_distribution"], dtype=bool)
    if ood.any():
        ax.semilogy(pairs[ood], np.asarray(data["max_angle_target_rad"])[ood], "x",
                    color=EXTRAPOLATION_COLORS["out of distribution"],
                    label=f"out of distribution ({int(ood.sum())} pairs)")
    ax.axhline(2 * math.pi, color="gray", ls="--", lw=1, label="one full turn (2\u03c0)")
    ax.set_xlabel("pair index i")
    ax.set_ylabel("largest angle (radians)")
    ax.set_title(f"{spec.name}: extrapolation from {trained:,} to {target:,} tokens")
    ax.legend(fontsize=8)
    return ax


def compare(specs, *, ax=None):
    """Wavelength per pair of several specs (x: pair index as a fraction of the rotated pairs).
    specs: rotary.Specs or preset names, e.g. compare(["llama-2-7b", "llama-3.1-8b"])."""
    if isinstance(specs, (str, Spec)):
        raise RotaryError(f"specs must be a list of rotary.Specs or preset names (got one {type(specs).__name__}: "
                          f"{specs!r}; wrap it in a list)")
    specs = [_spec(spec, f"specs[{i}]") for i, spec in enumerate(specs)]
    ax = _axes(ax)
    for spec in specs:
        freqs = spec.frequencies()
        n = len(freqs.inv_freq)
        rotated = freqs.inv_freq > 0
        x = (np.arange(n) / max(n - 1, 1))[rotated]
        ax.semilogy(x, freqs.wavelength_tokens[rotated], lw=1.2, label=f"{spec.name} ({spec.rope_type})")
    ax.set_xlabel("pair index / (pairs - 1)")
    ax.set_ylabel("wavelength (tokens per turn)")
    ax.set_title("wavelength per pair, side by side")
    ax.legend(fontsize=8)
    return ax


# ---- length-generalization results (rotary.experiments) ---------------------------------------------
EXPERIMENT_LABELS = {"none": "NoPE", "sinusoidal": "sinusoidal", "learned": "learned (last row past L)",
                     "alibi": "ALiBi", "rope": "RoPE", "linear": "RoPE + linear (PI)", "ntk": "RoPE + NTK-aware",
                     "dynamic": "RoPE + dynamic NTK", "yarn": "RoPE + YaRN"}
ROPE_SCHEMES = ("rope", "linear", "ntk", "dynamic", "yarn")


def _runs(results: dict, task: str, variant: str, length: int | None = None) -> list:
    return [r for r in results["runs"] if r["task"] == task and r["variant"] == variant
            and (length is None or r["length"] == length)]


def _check_task(results: dict, task: str) -> None:
    tasks = results["config"]["tasks"]
    if task not in tasks:
        from ._rotary import RotaryError

        raise RotaryError(f"task {task!r} is not in these results (they have {', '.join(tasks)})")


def _accuracy_lines(results: dict, task: str, variants, ax, title: str):
    _check_task(results, task)
    config = results["config"]
    train_len = config["train_len"]
    seeds = len(results["seeds"])
    for variant in variants:
        lengths, means, spreads = [], [], []
        for length in config["eval_lengths"]:
            values = [r["mean_accuracy"] for r in _runs(results, task, variant, length)]
            if values:
                lengths.append(length)
                means.append(float(np.mean(values)))
                spreads.append(float(np.std(values, ddof=1)) if len(values) > 1 else 0.0)
        if lengths:  # one seed has no spread: no error bars (a bar of 0 would read as measured)
            ax.errorbar(lengths, means, yerr=spreads if seeds > 1 else None, marker="o", ms=4, capsize=3,
                        label=EXPERIMENT_LABELS.get(variant, variant))
    chance = results.get("chance_accuracy", {}).get(task)
    if chance is not None:
        ax.axhline(chance, color="gray", ls="--", lw=1, label=f"chance {chance:.3g}")
    ax.axvline(train_len, color="gray", ls=":", lw=1, label=f"trained length {train_len}")
    ax.set_xscale("log", base=2)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("eval length (tokens)")
    ax.set_ylabel(f"accuracy (mean of {seeds} seeds, bars: sd)" if seeds > 1 else "accuracy (one seed)")
    ax.set_title(title)
    ax.legend(fontsize=7)
    return ax


def experiment_accuracy(results: dict, task: str, *, variants=None, ax=None):
    """Accuracy against eval length (log2 axis), one line per encoding (RoPE as trained), mean over
    seeds with the sample standard deviation as error bars; chance and the trained length marked."""
    ax = _axes(ax)
    variants = variants or results["config"]["encodings"]
    return _accuracy_lines(results, task, variants, ax, f"{task}: accuracy by eval length, per encoding")


def experiment_scaling(results: dict, task: str, *, ax=None):
    """RoPE's test-time scaling schemes side by side: accuracy against eval length of the same RoPE
    models with each scheme (factor = eval length / trained length unless the run fixed it)."""
    ax = _axes(ax)
    schemes = [s for s in ROPE_SCHEMES if s in results["config"]["scalings"]]
    return _accuracy_lines(results, task, schemes, ax, f"{task}: RoPE with test-time scaling")


def experiment_loss_by_position(results: dict, task: str, *, length: int | None = None, variants=None, ax=None):
    """Per-token loss (nats) per position bucket ([0, L), [L, 2L), ...) at one eval length (default
    the longest), mean over seeds, one line per encoding or scheme."""
    _check_task(results, task)
    ax = _axes(ax)
    config = results["config"]
    length = length or max(config["eval_lengths"])
    variants = variants or list(config["encodings"]) + [s for s in config["scalings"] if s != "rope"]
    for variant in variants:
        rows = _runs(results, task, variant, length)
        if not rows:
            continue
        middles = [(start + end) / 2 for start, end in rows[0]["buckets"]]
        loss = np.array([r["loss"] for r in rows], dtype=float)  # None (no scored token) -> NaN, not drawn
        seen = np.isfinite(loss).sum(axis=0)
        mean = np.where(seen > 0, np.nansum(loss, axis=0) / np.maximum(seen, 1), np.nan)
        ax.plot(middles, mean, marker="o", ms=4,
                ls="-" if variant in config["encodings"] else "--", label=EXPERIMENT_LABELS.get(variant, variant))
    ax.axvline(config["train_len"], color="gray", ls=":", lw=1, label=f"trained length {config['train_len']}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("position (tokens, middle of bucket)")
    ax.set_ylabel("loss (nats per scored token)")
    ax.set_title(f"{task}: loss by position at {length} tokens")
    ax.legend(fontsize=7)
    return ax


def experiment_attention(results: dict, task: str, *, length: int | None = None, layer: int = -1,
                         measure: str = "mass", variants=None, ax=None):
    """The attention of one layer at one eval length (default the longest), mean over seeds:
    measure="mass": the share of attention weight on keys at each distance (log2 buckets);
    measure="entropy": the rows' entropy (nats) by query position, against log(position + 1),
    the entropy of uniform attention."""
    _check_task(results, task)
    if measure not in ("mass", "entropy"):
        from ._rotary import RotaryError

        raise RotaryError(f"measure must be 'mass' or 'entropy' (got {measure!r})")
    ax = _axes(ax)
    config = results["config"]
    length = length or max(config["eval_lengths"])
    variants = variants or list(config["encodings"]) + [s for s in config["scalings"] if s != "rope"]
    key = "attention_mass_by_distance" if measure == "mass" else "attention_entropy_by_position"
    field = "mass" if measure == "mass" else "entropy"
    edges = None
    for variant in variants:
        rows = _runs(results, task, variant, length)
        if not rows:
            continue
        edges = rows[0][key]["edges"]
        values = np.mean([np.asarray(r[key][field])[layer] for r in rows], axis=0)
        x = np.maximum(edges[:-1], 0.5)
        ax.plot(x, values, marker="o", ms=4, ls="-" if variant in config["encodings"] else "--",
                label=EXPERIMENT_LABELS.get(variant, variant))
    if measure == "entropy" and edges is not None:
        x = np.maximum(edges[:-1], 0.5)
        ax.plot(x, np.log(np.asarray(edges[:-1]) + 1), color="gray", ls=":", lw=1, label="uniform: log(p + 1)")
    ax.axvline(config["train_len"], color="gray", ls=":", lw=1)
    ax.set_xscale("log", base=2)
    layer_name = config["layers"] + layer if layer < 0 else layer
    if measure == "mass":
        ax.set_xlabel("distance query - key (tokens, bucket start; 0 = itself)")
        ax.set_ylabel("share of attention weight")
        ax.set_title(f"{task}: attention by distance at {length} tokens (layer {layer_name})")
    else:
        ax.set_xlabel("query position (tokens, bucket start)")
        ax.set_ylabel("attention entropy (nats)")
        ax.set_title(f"{task}: attention entropy at {length} tokens (layer {layer_name})")
    ax.legend(fontsize=7)
    return ax
