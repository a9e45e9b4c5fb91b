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
    compare(specs)             wavelengths of several specs on one plot

    import rotary, rotary.viz
    rotary.viz.decay(rotary.Spec.preset("llama-3.1-8b"))
"""
from __future__ import annotations

import math

import numpy as np

from . import _rotary
from ._spec import Spec

__all__ = ["frequencies", "angles", "similarity", "decay", "scaling", "extrapolation", "compare"]


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
    """The factor each pair's frequency is divided by (1 = unchanged), colored by regime."""
    ax = _axes(ax)
    data = _rotary.scheme_scaling(spec._native, int(seq_len))
    factor = np.asarray(data["factor_applied"])
    regimes = np.asarray(data["regime"])
    pairs = np.arange(len(factor))
    ax.plot(pairs, factor, color="gray", lw=0.8)
    for regime in sorted(set(regimes)):
        mask = regimes == regime
        ax.plot(pairs[mask], factor[mask], "o", ms=4, label=regime)
    ax.set_xlabel("pair index i")
    ax.set_ylabel("default \u03b8\u1d62 / scaled \u03b8\u1d62 (factor)")
    ax.set_title(f"{spec.name}: {spec.rope_type} scaling per pair (attention scaling {data['attention_scaling']:.4g})")
    ax.legend(fontsize=8)
    return ax


def extrapolation(spec: Spec, target_context: int | None = None, *, trained_context: int | None = None, ax=None):
    """The largest angle each pair reached in training vs at a target context (log scale);
    pairs past their trained angle without a full turn in training are out of distribution."""
    ax = _axes(ax)
    trained = trained_context or spec.original_context or _context(spec)
    target = target_context or 4 * trained
    data = _rotary.extrapolation(spec._native, int(trained), int(target))
    pairs = np.arange(len(data["max_angle_trained_rad"]))
    ax.semilogy(pairs, np.maximum(data["max_angle_trained_rad"], 1e-12), label=f"trained ({trained:,} tokens)")
    ax.semilogy(pairs, np.maximum(data["max_angle_target_rad"], 1e-12), label=f"target ({target:,} tokens)")
    ood = np.asarray(data["out_of_distribution"], dtype=bool)
    if ood.any():
        ax.semilogy(pairs[ood], np.asarray(data["max_angle_target_rad"])[ood], "rx",
                    label=f"out of distribution ({int(ood.sum())} pairs)")
    ax.axhline(2 * math.pi, color="gray", ls="--", lw=1, label="one full turn (2\u03c0)")
    ax.set_xlabel("pair index i")
    ax.set_ylabel("largest angle (radians)")
    ax.set_title(f"{spec.name}: extrapolation from {trained:,} to {target:,} tokens")
    ax.legend(fontsize=8)
    return ax


def compare(specs, *, ax=None):
    """Wavelength per pair of several specs (x: pair index as a fraction of the rotated pairs)."""
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
