"""The length-generalization plots as SVG (matplotlib through rotary.viz) and the page that holds
them: rotary's HTML report (the C++ render_report, the page of `rotary report`) of the RoPE spec
the models were trained with, with the experiment's plots, its table and its provenance added as
the first section. The page is self-contained: inline SVG, no scripts, no URL.

    accuracy_by_length.svg       accuracy against eval length, one line per encoding (per task)
    rope_scaling.svg             RoPE's test-time scaling schemes side by side (per task)
    loss_by_position.svg         loss by position bucket at the longest eval length (per task)
    attention_by_distance.svg    last layer's attention mass by distance at the longest length
    attention_entropy.svg        last layer's attention entropy by query position, same length
"""
from __future__ import annotations

import html
import io
import re

from .. import viz

CAPTIONS = {
    "accuracy_by_length.svg": "Accuracy against eval length per encoding: mean over seeds, error bars one sample "
                              "standard deviation; the dotted line is the trained length, the dashed one chance.",
    "rope_scaling.svg": "The same RoPE models evaluated with each test-time scaling scheme (no fine-tuning): "
                        "linear, NTK-aware and YaRN with factor eval length / trained length, dynamic NTK "
                        "growing with the sequence's length.",
    "loss_by_position.svg": "Per-token loss in each position bucket ([0, L), [L, 2L), ...) at the longest eval "
                            "length; dashed lines are RoPE with a scaling scheme.",
    "attention_by_distance.svg": "Share of the last layer's attention weight on keys at each distance (log2 "
                                 "buckets) at the longest eval length: how each encoding uses distance.",
    "attention_entropy.svg": "Entropy of the last layer's attention rows by query position at the longest eval "
                             "length; the dotted gray curve is uniform attention over the visible keys.",
}


def _figure(tasks):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(tasks), figsize=(4.2 * len(tasks) + 2.2, 3.9), layout="constrained",
                             squeeze=False)
    return fig, axes[0]


def _one_legend_and_title(fig, axes, tasks) -> None:
    """One legend for the figure, outside the panels at the right (a legend inside a panel covers
    its lines), and the plot's title once above the panels with each panel titled by its task
    (the full title in every narrow panel ran past the figure's edge and was clipped)."""
    entries = {}
    for ax in axes:
        handles, labels = ax.get_legend_handles_labels()
        for handle, label in zip(handles, labels):
            entries.setdefault(label, handle)
        if ax.get_legend() is not None:
            ax.get_legend().remove()
    if entries:
        fig.legend(list(entries.values()), list(entries), loc="outside right upper", fontsize=7, frameon=False)
    title = axes[0].get_title()
    common = title.split(": ", 1)[1] if ": " in title else title
    fig.suptitle(common, fontsize=11)
    for task, ax in zip(tasks, axes):
        ax.set_title(task, fontsize=10)


def _svg(fig) -> bytes:
    """The figure as SVG text with text kept as <text> (no glyph definitions, whose ids would
    collide between plots inlined in one page) and fixed ids and no date (the same results give
    the same bytes)."""
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    with plt.rc_context({"svg.fonttype": "none", "svg.hashsalt": "rotary-experiments"}):
        fig.savefig(buffer, format="svg", metadata={"Date": None})
    plt.close(fig)
    return buffer.getvalue()


def render(results: dict) -> dict:
    """{file name: SVG bytes} of every plot, one panel per task."""
    tasks = results["config"]["tasks"]
    encodings = results["config"]["encodings"]
    plots = {"accuracy_by_length.svg": lambda task, ax: viz.experiment_accuracy(results, task, ax=ax),
             "loss_by_position.svg": lambda task, ax: viz.experiment_loss_by_position(results, task, ax=ax),
             "attention_by_distance.svg": lambda task, ax: viz.experiment_attention(results, task, ax=ax),
             "attention_entropy.svg": lambda task, ax: viz.experiment_attention(results, task, measure="entropy",
                                                                                 ax=ax)}
    if "rope" in encodings:
        plots["rope_scaling.svg"] = lambda task, ax: viz.experiment_scaling(results, task, ax=ax)
    out = {}
    for name in CAPTIONS:
        if name in plots:
            fig, axes = _figure(tasks)
            for task, ax in zip(tasks, axes):
                plots[name](task, ax)
            _one_legend_and_title(fig, axes, tasks)
            out[name] = _svg(fig)
    return out


def inline_svg(svg: bytes) -> str:
    """matplotlib's SVG file as an element for an HTML5 page: no XML prolog, no DOCTYPE, no
    namespace URLs (HTML parses inline SVG, xlink:href included, without them) and no RDF
    metadata, class "plot" for the report's style."""
    text = svg.decode()
    start = text.index("<svg")
    text = text[start:]
    text = re.sub(r'\s+xmlns(:xlink)?="[^"]*"', "", text, count=2)
    text = re.sub(r"<metadata>.*?</metadata>\s*", "", text, count=1, flags=re.S)  # RDF with namespace URLs
    return text.replace("<svg ", '<svg class="plot" ', 1)


def _accuracy_cell(row: dict) -> str:
    """Mean ± sample sd; one seed has no spread, so its accuracy alone (a "± 0.000" would read as
    a measured spread of zero)."""
    if row["seeds"] > 1:
        return f"{row['accuracy_mean']:.3f} ± {row['accuracy_std']:.3f}"
    return f"{row['accuracy_mean']:.3f}"


def _summary_table(results: dict) -> str:
    config = results["config"]
    lengths = config["eval_lengths"]
    seeds = len(results["seeds"])
    head = "".join(f"<th>{n}</th>" for n in lengths)
    rows = []
    for task in config["tasks"]:
        for variant in list(config["encodings"]) + [s for s in config.get("scalings", []) if s != "rope"]:
            cells = []
            for length in lengths:
                row = next((r for r in results["summary"] if r["task"] == task and r["variant"] == variant
                            and r["length"] == length), None)
                cells.append("<td class=\"num\"></td>" if row is None else
                             f"<td class=\"num\">{_accuracy_cell(row)}</td>")
            if any(c != "<td class=\"num\"></td>" for c in cells):
                label = viz.EXPERIMENT_LABELS.get(variant, variant)
                rows.append(f"<tr><td>{html.escape(task)}</td><td>{html.escape(label)}</td>{''.join(cells)}</tr>")
    what = f"mean ± sample sd over {seeds} seeds" if seeds > 1 else "one seed (no spread)"
    return (f"<table class=\"checks\"><caption>Accuracy, {what}, by eval length (tokens)"
            f"</caption>\n<tr><th>task</th><th>encoding / scheme</th>{head}</tr>\n" + "\n".join(rows) + "\n</table>\n")


def experiment_section(results: dict, svgs: dict) -> str:
    config = results["config"]
    machine = results.get("machine", {})
    load = machine.get("load_average_start")
    parts = [
        '<section class="experiment">\n<h2>Does it extrapolate? Length generalization</h2>\n',
        f"<p class=\"provenance\">Made by <code>{html.escape(results.get('command') or 'rotary.experiments')}</code>"
        f" with rotary {html.escape(results['versions']['rotary'])}, torch {html.escape(results['versions']['torch'])}"
        f" on {html.escape(machine.get('cpu', '?'))} ({machine.get('processes', 1)} processes x "
        f"{machine.get('torch_threads', 1)} thread; load average at start "
        f"{'?' if load is None else ', '.join(f'{v:.1f}' for v in load)}) in {results['seconds']:.0f} s.</p>\n",
        f"<p>Tiny causal transformers ({config['layers']} layers, d_model {config['d_model']}, {config['heads']} "
        f"heads, {config['kv_heads']} key/value heads) trained for {config['steps']} steps at "
        f"{config['train_len']} tokens on each task with each encoding, seeds {', '.join(map(str, results['seeds']))},"
        " then evaluated at longer lengths. Attention: torch's scaled_dot_product_attention, RoPE by "
        "rotary.torch.apply_rotary. What each task is and the caveats: docs/experiments.md. After the "
        "experiment, rotary's analysis of the RoPE spec the models were trained with.</p>\n",
        # One figure per row: each holds a panel per task.
        '<div class="plots" style="grid-template-columns:1fr">\n',
    ]
    for name, svg in svgs.items():
        parts.append(f"<figure>\n{inline_svg(svg)}<figcaption>{html.escape(CAPTIONS[name])}</figcaption>\n</figure>\n")
    parts.append("</div>\n" + _summary_table(results) + "</section>\n")
    return "".join(parts)


def html_page(results: dict, svgs: dict) -> str:
    """rotary's report of the trained RoPE spec with the experiment's section first."""
    from .. import _rotary
    from .config import Config, rope_spec

    known = {k: v for k, v in results["config"].items() if k in Config.__dataclass_fields__}
    config = Config(**known)
    spec = rope_spec(config, "rope", config.train_len).replace(
        name=f"the experiment's RoPE (trained at {config.train_len} tokens)")
    page = _rotary.render_report([spec._native], "rotary report: length generalization")
    # The report's opening paragraph introduces the spec's analysis ("RoPE analysis of 1 model:
    # frequencies, ..."): it goes after the experiment, at the head of the analysis it describes.
    blurb = re.search(r"<p>RoPE analysis of 1 model: (.*?)</p>\n", page, flags=re.S)
    at = page.find("<section")
    if blurb is None or at < 0 or blurb.end() > at:
        raise RuntimeError("rotary's report has no opening paragraph before a <section>: the experiment's section "
                           "has no place in it")
    analysis = f"<p>Rotary's analysis of the RoPE spec the models were trained with: {blurb.group(1)}</p>\n"
    return page[:blurb.start()] + experiment_section(results, svgs) + analysis + page[at:]
