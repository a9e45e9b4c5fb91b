"""The length-generalization plots (matplotlib, SVG): accuracy against eval length per encoding,
loss by position at the longest length, and RoPE's test-time scaling schemes side by side."""
from __future__ import annotations

import io

import numpy as np

LABELS = {"none": "NoPE", "sinusoidal": "sinusoidal", "learned": "learned (last row past L)", "alibi": "ALiBi",
          "rope": "RoPE", "linear": "RoPE + linear (PI)", "ntk": "RoPE + NTK-aware", "dynamic": "RoPE + dynamic NTK",
          "yarn": "RoPE + YaRN"}


def _figure(tasks, title):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(tasks), figsize=(4.2 * len(tasks), 3.6), layout="constrained", squeeze=False)
    fig.suptitle(title)
    return fig, axes[0]


def _svg(fig) -> bytes:
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.savefig(buffer, format="svg")
    plt.close(fig)
    return buffer.getvalue()


def _mean_std(runs, task, variant, multiplier, key="mean_accuracy"):
    values = [r[key] for r in runs if r["task"] == task and r["variant"] == variant and r["multiplier"] == multiplier]
    return (float(np.mean(values)), float(np.std(values))) if values else (np.nan, np.nan)


def render(results: dict) -> dict:
    runs = results["runs"]
    config = results["config"]
    tasks = config["tasks"]
    multipliers = config["multipliers"]
    train_len = config["train_len"]
    out = {}

    def accuracy_plot(variants, title, name):
        fig, axes = _figure(tasks, title)
        for ax, task in zip(axes, tasks):
            for variant in variants:
                stats = [_mean_std(runs, task, variant, m) for m in multipliers]
                means = np.array([s[0] for s in stats])
                spread = np.array([s[1] for s in stats])
                lengths = np.array(multipliers) * train_len
                ax.errorbar(lengths, means, yerr=spread, marker="o", capsize=3, label=LABELS[variant])
            ax.set_xscale("log", base=2)
            ax.axvline(train_len, color="#999999", linestyle=":", label=f"trained length {train_len}")
            ax.set_title(task)
            ax.set_xlabel("eval length (tokens)")
            ax.set_ylabel("accuracy (mean over seeds)")
            ax.set_ylim(-0.02, 1.02)
        axes[-1].legend(fontsize=7, loc="best")
        out[name] = _svg(fig)

    variants = [e for e in config["encodings"]]
    accuracy_plot(variants, "Accuracy against eval length, by encoding (error bars: spread over seeds)",
                  "accuracy_by_length.svg")
    if "rope" in config["encodings"]:
        accuracy_plot(["rope", "linear", "ntk", "dynamic", "yarn"],
                      "RoPE with test-time scaling, factor = eval length / trained length", "rope_scaling.svg")

    longest = max(multipliers)
    fig, axes = _figure(tasks, f"Loss by position at {longest * train_len} tokens (trained at {train_len})")
    for ax, task in zip(axes, tasks):
        for variant in variants:
            rows = [r for r in runs if r["task"] == task and r["variant"] == variant and r["multiplier"] == longest]
            if not rows:
                continue
            starts = [b[0] for b in rows[0]["buckets"]]
            loss = np.mean([r["loss"] for r in rows], axis=0)
            ax.plot(np.maximum(starts, 1), loss, marker="o", label=LABELS[variant])
        ax.set_xscale("log", base=2)
        ax.axvline(train_len, color="#999999", linestyle=":")
        ax.set_title(task)
        ax.set_xlabel("position bucket start (tokens)")
        ax.set_ylabel("loss (nats per token)")
    axes[-1].legend(fontsize=7, loc="best")
    out["loss_by_position.svg"] = _svg(fig)
    return out
