"""rotary.experiments length-generalization: its tasks, encodings, scaling specs, measurements and
outputs; that the --quick run (the one make test runs) learns at the training length; that runs
are deterministic for a seed and a thread count; that bad input is refused."""
import importlib.util
import io
import json
import math
import os
import re
import shutil
import subprocess
import time

import numpy as np
import pytest
import torch

import rotary
from rotary import RotaryError
from rotary.experiments import length_generalization as lg
from rotary.experiments import plots
from rotary.experiments.__main__ import main

TINY = lg.Config(train_len=8, vocab=16, d_model=16, heads=4, kv_heads=2, layers=1, steps=3, batch=4,
                 eval_batches=1, eval_batch=2, copy_offset=2, seeds=(0,), eval_lengths=(8, 16))
CHAIN = lg.markov_chain(16)
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """One TINY run into a directory, shared by the tests that read its outputs (training is the
    slow part); returns (results, directory, the progress text)."""
    out = tmp_path_factory.mktemp("tiny")
    stream = io.StringIO()
    results = lg.run(TINY, str(out), stream=stream, command="python -m rotary.experiments test")
    return results, out, stream.getvalue()


def without_timings(results):
    return [{k: v for k, v in r.items() if not k.endswith("seconds")} for r in results["runs"]]


def test_alibi_slopes_are_the_papers():
    """Press et al., section 3: 2^(-8/n), 2^(-16/n), ... for n a power of two; for 12 heads the 8
    slopes of 8 heads, then every other slope of 16 heads."""
    assert lg.alibi_slopes(8).tolist() == [2.0 ** -k for k in range(1, 9)]
    assert lg.alibi_slopes(16).tolist() == pytest.approx([2.0 ** (-k / 2) for k in range(1, 17)], rel=1e-6)
    twelve = lg.alibi_slopes(12).tolist()
    assert twelve[:8] == [2.0 ** -k for k in range(1, 9)]
    assert twelve[8:] == pytest.approx([2.0 ** -0.5, 2.0 ** -1.5, 2.0 ** -2.5, 2.0 ** -3.5], rel=1e-6)


def test_tasks_have_the_targets_they_claim():
    g = torch.Generator().manual_seed(1)
    tokens, targets = lg.make_batch("copy", TINY, 20, 3, g, CHAIN)
    k = TINY.copy_offset
    for t in range(k - 1, 19):
        assert torch.equal(targets[:, t], tokens[:, t - k + 1])
    assert (targets[:, : k - 1] == -100).all() and (targets[:, -1] == -100).all()
    tokens, targets = lg.make_batch("local", TINY, 200, 2, g, CHAIN)
    follows = (tokens[:, 2:] == CHAIN[tokens[:, :-2], tokens[:, 1:-1]]).float().mean()
    assert 0.85 < float(follows) <= 1.0  # 90% of tokens follow the chain, the rest are random
    assert torch.equal(targets[:, :-1], tokens[:, 1:])
    tokens, targets = lg.make_batch("recall", TINY, 64, 4, g, CHAIN)
    scored = (targets != -100).nonzero().tolist()
    assert len(scored) > 8, "recall asks about earlier keys"
    half = TINY.vocab // 2
    assert (tokens[:, 0::2] < half).all() and (tokens[:, 1::2] >= half).all()  # keys, then values
    for b, t in scored:
        assert t % 2 == 0 and t >= 8  # a key position, from the fifth pair on
        key = int(tokens[b, t])
        earlier = [int(tokens[b, s + 1]) for s in range(0, t - 1, 2) if int(tokens[b, s]) == key]
        assert earlier and int(targets[b, t]) == earlier[0]  # the value the key was first given


def test_rope_specs_scale_by_the_length_ratio():
    assert lg.rope_spec(TINY, "rope", 64).rope_type == "default"
    linear = lg.rope_spec(TINY, "linear", 64)
    assert (linear.rope_type, linear.factor) == ("linear", 8.0)
    yarn = lg.rope_spec(TINY, "yarn", 32)
    assert (yarn.rope_type, yarn.factor, yarn.original_max_position_embeddings) == ("yarn", 4.0, 8)
    ntk = lg.rope_spec(TINY, "ntk", 16)
    # ntk_alpha: base * alpha^(d / (d - 2)) with alpha = 2, head_dim 4.
    assert ntk.rope_type == "ntk_alpha"
    assert ntk.frequencies().inv_freq[1] == pytest.approx(1 / (1e4 * 2 ** 2) ** 0.5, rel=1e-12)
    assert lg.rope_spec(TINY, "linear", 8).rope_type == "default"  # factor 1 at the trained length
    fixed = lg.Config(**{**TINY.__dict__, "scaling_factor": 3.0})
    assert lg.rope_spec(fixed, "linear", 16).factor == 3.0 and lg.rope_spec(fixed, "linear", 8).factor == 3.0


def test_dynamic_ntk_follows_the_sequence_length():
    """Plain RoPE up to the trained length, then transformers' base * (f n / L - (f - 1))^(d/(d-2))."""
    spec = lg.rope_spec(TINY, "dynamic", 32)
    plain = lg.rope_spec(TINY, "rope", 8).frequencies().inv_freq
    assert np.array_equal(spec.frequencies(8).inv_freq, plain)
    d, f = TINY.head_dim, TINY.dynamic_factor
    base = 1e4 * (f * 32 / 8 - (f - 1)) ** (d / (d - 2))
    assert spec.frequencies(32).inv_freq[1] == pytest.approx(base ** -0.5, rel=1e-12)


def test_sdpa_attention_equals_the_measured_weights():
    """The model's attention is torch's SDPA; the probe's weights, computed again from the same q, k
    and mask, must be the ones SDPA used: weights @ v reproduces SDPA's output (ALiBi and causal)."""
    torch.manual_seed(3)
    for encoding in ("alibi", "rope"):
        model = lg.TinyTransformer(TINY, encoding).eval()
        block = model.blocks[0]
        captured = {}

        class Capture(lg.AttentionProbe):
            def add(self, layer, weights):
                captured["weights"] = weights
                super().add(layer, weights)

        x = torch.randn(2, 12, TINY.d_model)
        spec = lg.rope_spec(TINY, "rope", 12)
        i = torch.arange(12)
        distance = (i[:, None] - i[None, :]).float()
        bias = torch.where(distance >= 0, -model.slopes[:, None, None] * distance, float("-inf")) \
            if encoding == "alibi" else None
        probe = Capture(1, 12)
        with torch.no_grad():
            out = block(x, encoding, spec, bias, probe, 0)
            h = block.norm1(x)
            v = block.kv(h).view(2, 12, 2, TINY.kv_heads, TINY.head_dim).unbind(2)[1].transpose(1, 2)
            v = v.repeat_interleave(TINY.heads // TINY.kv_heads, 1)[: TINY.probe_sequences]
            attn = (captured["weights"] @ v).transpose(1, 2).reshape(2, 12, -1)
            x2 = x + block.proj(attn)
            expected = x2 + block.mlp(block.norm2(x2))
        assert torch.allclose(out, expected, atol=1e-5), encoding
        assert torch.all(captured["weights"].triu(1) == 0)


def test_attention_probe_buckets_mass_and_entropy():
    """Uniform causal attention: the entropy of row p is log(p + 1); the mass at distance d is
    (length - d) / length / length summed over the rows."""
    length = 8
    weights = torch.ones(length, length).tril()
    weights = (weights / weights.sum(-1, keepdim=True))[None, None].expand(2, 3, length, length)
    probe = lg.AttentionProbe(1, length)
    probe.add(0, weights)
    result = probe.result()
    assert result["edges"] == [0, 1, 2, 4, 8]
    per_row = np.array([1.0 / (p + 1) for p in range(length)])
    mass_by_distance = [sum(per_row[d:]) / length for d in range(length)]
    expected = [mass_by_distance[0], mass_by_distance[1], sum(mass_by_distance[2:4]), sum(mass_by_distance[4:])]
    # float32 weights (eps 6e-8) summed over 6 rows in float32: 1e-6 relative covers it.
    assert result["mass"][0] == pytest.approx(expected, rel=1e-6)
    entropy = [math.log(p + 1) for p in range(length)]
    assert result["entropy"][0] == pytest.approx([entropy[0], entropy[1], np.mean(entropy[2:4]),
                                                  np.mean(entropy[4:])], rel=1e-6)


def test_the_quick_run_learns_at_the_training_length(tmp_path):
    """The run of make test (--quick): every (task, encoding) model at the training length beats a
    threshold derived from the task's chance level: chance + 4 binomial standard deviations of a
    chance-level guesser over the scored tokens (one-sided, a guesser passes with probability
    about 3e-5). The run is deterministic, so this passes or fails the same way every time."""
    started = time.monotonic()
    assert main(["length-generalization", "--quick", "--out", str(tmp_path)]) == 0
    elapsed = time.monotonic() - started
    results = json.loads((tmp_path / "results.json").read_text())
    config = results["config"]
    assert config["train_len"] == 16 and results["seeds"] == [0]
    checked = 0
    for run in results["runs"]:
        if run["length"] != config["train_len"]:
            continue
        chance = lg.chance_accuracy(run["task"], config["vocab"])
        assert results["chance_accuracy"][run["task"]] == chance
        n = sum(run["scored_tokens"])
        assert n >= 40, (run["task"], n)
        threshold = chance + 4 * math.sqrt(chance * (1 - chance) / n)
        assert run["mean_accuracy"] > threshold, (run["task"], run["variant"], run["mean_accuracy"], threshold)
        checked += 1
    assert checked == 3 * 9
    for name in ("accuracy_by_length.svg", "rope_scaling.svg", "loss_by_position.svg",
                 "attention_by_distance.svg", "attention_entropy.svg", "report.html"):
        assert (tmp_path / name).stat().st_size > 1000, name
    print(f"quick run: {elapsed:.1f} s (load average {os.getloadavg()[0]:.1f})")


def test_a_run_writes_results_and_plots(tiny_run):
    results, tmp_path, progress = tiny_run
    written = json.loads((tmp_path / "results.json").read_text())
    assert written["config"]["train_len"] == 8 and written["versions"]["rotary"] == rotary.__version__
    assert written["command"] == "python -m rotary.experiments test" and written["seeds"] == [0]
    assert written["machine"]["torch_threads"] == 1 and written["machine"]["cpu"]
    assert "scaled_dot_product_attention" in written["attention"]
    variants = {(r["encoding"], r["variant"]) for r in written["runs"]}
    assert ("rope", "yarn") in variants and ("alibi", "alibi") in variants and ("none", "none") in variants
    assert len(written["runs"]) == 3 * (4 + 5) * 2  # tasks x (4 encodings + RoPE's 5 variants) x lengths
    for run in written["runs"]:
        assert 0.0 <= run["mean_accuracy"] <= 1.0 and math.isfinite(run["mean_loss"])
        assert run["train_seconds"] > 0 and run["eval_seconds"] > 0
        for layer in run["attention_mass_by_distance"]["mass"]:
            assert sum(layer) == pytest.approx(1.0, abs=1e-6)
        assert len(run["attention_entropy_by_position"]["entropy"]) == TINY.layers
    for name in plots.CAPTIONS:
        assert (tmp_path / name).read_bytes().startswith(b"<?xml"), name
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]
    assert "step 45/45" in progress and "eta" in progress  # 3 tasks x 5 encodings x 3 steps
    assert len(results["summary"]) == 3 * 9 * 2
    row = results["summary"][0]
    assert {"accuracy_mean", "accuracy_std", "accuracy_min", "accuracy_max", "loss_mean", "loss_std"} <= set(row)


def test_summary_spread_is_over_seeds():
    runs = [{"task": "copy", "encoding": "rope", "variant": "rope", "length": 8, "factor": 1.0, "seed": s,
             "mean_accuracy": a, "mean_loss": 1.0 + a, "accuracy": [a, None]} for s, a in enumerate((0.2, 0.4, 0.9))]
    (row,) = lg.summarize(runs)
    assert row["accuracy_mean"] == pytest.approx(0.5) and row["seeds"] == 3
    assert row["accuracy_std"] == pytest.approx(np.std([0.2, 0.4, 0.9], ddof=1))
    assert (row["accuracy_min"], row["accuracy_max"]) == (0.2, 0.9)
    assert row["bucket_accuracy_mean"] == [pytest.approx(0.5), None]


def test_runs_are_deterministic_for_a_seed_and_thread_count():
    """The same config twice, one seed alone against it among others, and two worker processes
    against one: bit-identical records (timings aside)."""
    config = lg.Config(**{**TINY.__dict__, "seeds": (0, 1), "tasks": ("copy", "recall"), "encodings": ("rope", "alibi")})
    first = lg.run(config, stream=io.StringIO())
    again = lg.run(config, stream=io.StringIO())
    assert without_timings(first) == without_timings(again)
    alone = lg.run(lg.Config(**{**config.__dict__, "seeds": (1,)}), stream=io.StringIO())
    assert without_timings(alone) == [r for r in without_timings(first) if r["seed"] == 1]
    parallel = lg.run(lg.Config(**{**config.__dict__, "jobs": 2}), stream=io.StringIO())
    assert without_timings(parallel) == without_timings(first)
    # A different seed gives a different model: the comparison above can fail.
    other = lg.run(lg.Config(**{**config.__dict__, "seeds": (5, 1)}), stream=io.StringIO())
    assert without_timings(other) != without_timings(first)


@pytest.mark.parametrize("change, message", [
    ({"encodings": ("rope", "xpos")}, "unknown encoding 'xpos' (known: none, sinusoidal, learned, alibi, rope)"),
    ({"tasks": ("sort",)}, "unknown task 'sort'"),
    ({"scalings": ("longrope",)}, "unknown scaling 'longrope'"),
    ({"eval_lengths": (8, 4)}, "eval length 4 is under the training length 8"),
    ({"scaling_factor": 0.5}, "scaling_factor must be a finite number >= 1 (got 0.5)"),
    ({"scaling_factor": float("nan")}, "scaling_factor must be a finite number >= 1 (got nan)"),
    ({"dynamic_factor": 0.0}, "dynamic_factor must be a finite number >= 1 (got 0.0)"),
    ({"heads": 4, "kv_heads": 3}, "heads 4 must be a multiple of kv_heads 3"),
    ({"copy_offset": 8}, "copy_offset must be in [1, train_len) = [1, 8) (got 8)"),
    ({"seeds": (1, 1)}, "seeds must be distinct"),
    ({"steps": 0}, "steps must be an integer >= 1 (got 0)"),
])
def test_bad_configs_are_refused(change, message):
    with pytest.raises(RotaryError) as error:
        lg.Config(**{**TINY.__dict__, **change})
    assert message in str(error.value)


def test_a_scheme_is_refused_a_length_under_training():
    with pytest.raises(RotaryError, match="eval length 4 is under the training length 8"):
        lg.rope_spec(TINY, "yarn", 4)
    with pytest.raises(RotaryError, match="unknown scaling 'pi'"):
        lg.rope_spec(TINY, "pi", 16)
    with pytest.raises(RotaryError, match="unknown encoding 'abs'"):
        lg.TinyTransformer(TINY, "abs")


@pytest.mark.parametrize("argv, message", [
    (["--seeds", "0"], "--seeds must be >= 1 (got 0)"),
    (["--encodings", "rope,t5"], "unknown encoding 't5'"),
    (["--train-len", "64", "--eval-lengths", "64,32"], "eval length 32 is under the training length 64"),
    (["--factor", "0.25"], "scaling_factor must be a finite number >= 1 (got 0.25)"),
    (["--factor", "big"], "expected 'auto' or a number (got 'big')"),
    (["--eval-lengths", "64,x"], "expected comma-separated token counts"),
])
def test_the_command_refuses_bad_arguments(capsys, tmp_path, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        main(["length-generalization", "--out", str(tmp_path / "never"), *argv])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "never").exists()


def test_plot_command_redraws_from_results(tiny_run, tmp_path, capsys):
    results, source, _ = tiny_run
    shutil.copy(source / "results.json", tmp_path / "results.json")
    assert main(["plot", str(tmp_path / "results.json")]) == 0
    assert (tmp_path / "report.html").exists() and (tmp_path / "rope_scaling.svg").exists()
    (tmp_path / "bad.json").write_text(json.dumps({"experiment": "other"}))
    with pytest.raises(SystemExit):
        main(["plot", str(tmp_path / "bad.json")])
    assert "is not a length-generalization results.json" in capsys.readouterr().err
    assert results["runs"]


def test_the_page_is_rotarys_report_with_the_experiment_and_no_urls(tiny_run):
    results, tmp_path, _ = tiny_run
    page = (tmp_path / "report.html").read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert page.index("Does it extrapolate?") < page.index('<section class="model">')  # rotary's own section follows
    assert page.count('<svg class="plot"') >= len(plots.CAPTIONS)
    assert "http" not in page and "<script" not in page and "<?xml" not in page
    assert "python -m rotary.experiments test" in page
    # Every summary row is in the page's table; one seed has no spread, so no "± 0.000".
    assert results["seeds"] == [0] and "±" not in page.split("<table")[1].split("</table>")[0]
    assert "<caption>Accuracy, one seed (no spread), by eval length (tokens)</caption>" in page
    for row in results["summary"]:
        assert f"<td class=\"num\">{row['accuracy_mean']:.3f}</td>" in page
    # The report's opening paragraph ("RoPE analysis of 1 model") introduces the spec's analysis:
    # after the experiment, not above it.
    assert "RoPE analysis of 1 model" not in page
    assert (page.index("</section>") < page.index("Rotary's analysis of the RoPE spec the models were trained with: "
                                                  "frequencies") < page.index('<section class="model">'))


def test_the_table_shows_the_spread_over_several_seeds():
    summary = [{"task": "copy", "variant": "rope", "length": 8, "seeds": 3, "accuracy_mean": 0.5,
                "accuracy_std": 0.1234}]
    results = {"config": {"eval_lengths": [8], "tasks": ["copy"], "encodings": ["rope"], "scalings": []},
               "seeds": [0, 1, 2], "summary": summary}
    table = plots._summary_table(results)
    assert "<td class=\"num\">0.500 ± 0.123</td>" in table
    assert "<caption>Accuracy, mean ± sample sd over 3 seeds, by eval length (tokens)</caption>" in table


def test_each_figure_has_one_legend_outside_its_panels_and_short_panel_titles(tiny_run):
    """A legend inside a panel covered its lines, and the full title in each narrow panel ran past
    the figure's edge: one figure legend right of the panels, the title once above them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = tiny_run[0]
    tasks = results["config"]["tasks"]
    fig, axes = plots._figure(tasks)
    for task, ax in zip(tasks, axes):
        rotary.viz.experiment_accuracy(results, task, ax=ax)
    plots._one_legend_and_title(fig, axes, tasks)
    try:
        assert [ax.get_title() for ax in axes] == tasks and all(ax.get_legend() is None for ax in axes)
        assert fig._suptitle.get_text() == "accuracy by eval length, per encoding"
        assert len(fig.legends) == 1
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        legend = fig.legends[0].get_window_extent(renderer)
        figure = fig.bbox
        assert legend.x0 >= max(ax.get_window_extent(renderer).x1 for ax in axes)  # right of every panel
        for text in [fig._suptitle] + [ax.title for ax in axes]:
            box = text.get_window_extent(renderer)
            assert box.x0 >= figure.x0 and box.x1 <= figure.x1  # not clipped
        assert "one seed" in axes[0].get_ylabel()
    finally:
        plt.close(fig)


def _browser_harness():
    path = os.path.join(REPO, "tests", "analysis", "browser_test.py")
    spec = importlib.util.spec_from_file_location("browser_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium is not installed")
def test_the_page_renders_in_headless_chromium(tiny_run, tmp_path):
    """Chromium loads the page with no console error, builds every plot with drawn elements, and
    its screenshot is not blank (the harness of tests/analysis/browser_test.py)."""
    harness = _browser_harness()
    url = "file://" + str(tiny_run[1] / "report.html")
    dom = subprocess.run(["chromium", *harness.CHROMIUM_FLAGS, "--enable-logging=stderr", "--v=0",
                          "--virtual-time-budget=2000", "--dump-dom", url],
                         capture_output=True, text=True, timeout=300)
    assert dom.returncode == 0, dom.stderr[-500:]
    errors = [line for line in dom.stderr.splitlines() if "CONSOLE" in line and "ERROR" in line.upper()]
    assert not errors, errors
    svgs = re.findall(r"<svg\b.*?</svg>", dom.stdout, flags=re.S)
    experiment = [s for s in svgs if 'class="plot"' in s[:200] and "<path" in s]
    assert len(experiment) >= len(plots.CAPTIONS)
    shot = tmp_path / "page.png"
    run = subprocess.run(["chromium", *harness.CHROMIUM_FLAGS, "--window-size=1400,2400", f"--screenshot={shot}",
                          url], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and shot.exists(), run.stderr[-500:]
    width, height, channels, rows = harness.decode_png(str(shot))
    sampled = [row[x] for row in rows[::8] for x in range(0, width * channels, channels * 8)]
    assert sum(1 for v in sampled if v < 240) / len(sampled) > 0.05  # not a blank page


@pytest.mark.parametrize("draw", ["experiment_accuracy", "experiment_scaling", "experiment_loss_by_position",
                                  "experiment_attention"])
def test_viz_experiment_plots_draw_labelled_data(tiny_run, draw):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from rotary import viz

    ax = getattr(viz, draw)(tiny_run[0], "copy")
    try:
        assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel()
        drawn = [line for line in ax.get_lines() if len(line.get_xdata()) > 1]
        assert len(drawn) >= 4, [line.get_label() for line in ax.get_lines()]
        assert ax.get_legend() is not None
    finally:
        plt.close(ax.figure)
    with pytest.raises(RotaryError, match="task 'sort' is not in these results"):
        getattr(viz, draw)(tiny_run[0], "sort")
