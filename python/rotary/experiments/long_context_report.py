"""The long-context experiment's markdown tables and plot (matplotlib, SVG as plots.py writes it)."""
from __future__ import annotations


def _k(tokens: int) -> str:
    return f"{tokens // 1024}k" if tokens % 1024 == 0 and tokens >= 1024 else str(tokens)


def _bucket(row) -> str:
    return f"[{_k(row['lo'])}, {_k(row['hi'])})"


def _loads(loads) -> str:
    return "unknown" if loads is None else " / ".join(f"{load:.1f}" for load in loads)


def markdown(results: dict) -> str:
    """The perplexity table (rows: the unpatched reference and each treatment; columns: the coarse
    buckets), the passkey table (rows: treatments; columns: length and depth) and the run's
    provenance."""
    treatments = results["treatments"]
    reference = results["reference"]["buckets"]
    lines = ["Perplexity by position bucket (one forward over "
             f"{_k(results['config']['length'])} tokens; reference: the unpatched model on the same tokens "
             f"in windows of {_k(results['config']['trained'])}):", "",
             "| treatment | " + " | ".join(_bucket(r) for r in reference) + " | spec |",
             "|---|" + "---:|" * len(reference) + "---|",
             "| reference (within trained context) | " + " | ".join(f"{r['perplexity']:.2f}" for r in reference)
             + " | unpatched |"]
    for name, entry in treatments.items():
        lines.append(f"| {name} | " + " | ".join(f"{r['perplexity']:.2f}" for r in entry["buckets"])
                     + f" | `{entry['spec']}` |")
    cells = sorted({(c["length"], c["depth"]) for c in results["passkey"]})
    if cells:
        lines += ["", "Passkey (5 digits; ✓ every digit token is the argmax, so greedy decoding repeats it; "
                  "in brackets the log-probability of the answer's tokens, nats):", "",
                  "| treatment | " + " | ".join(f"{_k(n)}, depth {d:.0%}" for n, d in cells) + " |",
                  "|---|" + "---|" * len(cells)]
        for name in treatments:
            row = {(c["length"], c["depth"]): c for c in results["passkey"] if c["treatment"] == name}
            lines.append(f"| {name} | " + " | ".join(
                (f"{'✓' if row[cell]['retrieved'] else '✗'} ({row[cell]['logprob']:.1f})" if cell in row else "")
                for cell in cells) + " |")
    environment = results["environment"]
    lines += ["", f"Run: {results['seconds']['total'] / 60:.1f} min wall, {environment['torch_threads']} torch "
              f"threads, {environment['cpu']}, load average at start {_loads(environment['load_average'])}, at end "
              f"{_loads(environment.get('load_average_end'))}; torch {environment['torch']}, transformers "
              f"{environment['transformers']}, attention {results['model']['attn_implementation']}, "
              f"{results['model']['dtype']}.", ""]
    return "\n".join(lines)


def plot_svg(results: dict) -> bytes:
    """Perplexity by fine position bucket, one line per treatment and the reference dashed; the
    trained context as a dotted vertical line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .plots import _svg

    fig, ax = plt.subplots(figsize=(7.5, 4.2), layout="constrained")
    reference = results["reference"]["fine"]
    ax.plot([(r["lo"] + r["hi"]) / 2 for r in reference], [r["perplexity"] for r in reference], "k--",
            label="reference (unpatched, within trained context)")
    for name, entry in results["treatments"].items():
        rows = entry["fine"]
        ax.plot([(r["lo"] + r["hi"]) / 2 for r in rows], [r["perplexity"] for r in rows], marker=".", label=name)
    ax.axvline(results["config"]["trained"], color="gray", linestyle=":", label="trained context")
    ax.set_yscale("log")
    ax.set_xlabel("token position")
    ax.set_ylabel(f"perplexity per {results['config']['fine']}-token bucket")
    ax.set_title("SmolLM2-135M past its trained context, per RoPE treatment (no fine-tuning)", fontsize=10)
    ax.legend(fontsize=7, frameon=False)
    return _svg(fig)
