"""rotary.viz: every plot draws data, has a title and axis labels, and renders to a PNG that is
not blank."""
import io

import numpy as np
import pytest

import matplotlib  # required: a missing dependency fails, never skips
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import rotary  # noqa: E402
import rotary.viz as viz  # noqa: E402

LLAMA = rotary.Spec.preset("llama-3.1-8b")
YARN = rotary.Spec.preset("qwen2.5-7b-yarn")

PLOTS = {
    "frequencies": lambda: viz.frequencies(LLAMA),
    "angles": lambda: viz.angles(LLAMA),
    "similarity": lambda: viz.similarity(LLAMA, positions=64),
    "decay": lambda: viz.decay(LLAMA, max_distance=4096, samples=4),
    "scaling_llama3": lambda: viz.scaling(LLAMA),
    "scaling_yarn": lambda: viz.scaling(YARN),
    "extrapolation": lambda: viz.extrapolation(rotary.Spec.preset("llama-2-7b"), 16384),
    "compare": lambda: viz.compare([LLAMA, YARN, rotary.Spec.preset("phi-3-mini-128k")]),
}


@pytest.mark.parametrize("name", list(PLOTS))
def test_plot_draws_data_with_labels(name):
    ax = PLOTS[name]()
    try:
        assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel()
        drawn = [line for line in ax.get_lines() if len(line.get_xdata()) > 1] + list(ax.get_images())
        assert drawn, "nothing drawn"
        for line in ax.get_lines():
            y = np.asarray(line.get_ydata(), dtype=float)
            assert np.all(np.isfinite(y)), f"non-finite values in {line.get_label()}"
        buffer = io.BytesIO()
        ax.figure.savefig(buffer, format="png", dpi=60)
        image = plt.imread(io.BytesIO(buffer.getvalue()))
        assert image.std() > 0.05, "blank image"  # a white page has std 0
    finally:
        plt.close(ax.figure)


def test_scaling_shows_the_three_llama3_regimes():
    ax = viz.scaling(LLAMA)
    try:
        labels = {line.get_label() for line in ax.get_lines()}
        assert {"extrapolated", "interpolated", "blended"} <= labels
    finally:
        plt.close(ax.figure)


def test_similarity_depends_on_distance_only():
    ax = viz.similarity(LLAMA, positions=32)
    try:
        score = ax.get_images()[0].get_array()
        for offset in range(-5, 6):
            diagonal = np.diagonal(score, offset)
            # float64 cos of the same angle set: identical up to rounding of (m - n) * theta.
            assert np.ptp(diagonal) < 1e-12
    finally:
        plt.close(ax.figure)


def test_compare_takes_preset_names_and_refuses_other_values():
    ax = viz.compare(["llama-2-7b", "llama-3.1-8b"])  # raised AttributeError: 'str' has no 'frequencies'
    try:
        labels = [line.get_label() for line in ax.get_lines()]
        assert labels == ["llama-2-7b (default)", "llama-3.1-8b (llama3)"]
        wavelengths = ax.get_lines()[0].get_ydata()
        assert wavelengths[0] == pytest.approx(2 * np.pi)  # pair 0 of llama-2-7b: theta_0 = 1 rad/token
    finally:
        plt.close(ax.figure)
    with pytest.raises(rotary.RotaryError, match=r"specs\[1\] must be a rotary.Spec or a preset name \(got int 7\)"):
        viz.compare(["llama-2-7b", 7])
    with pytest.raises(rotary.RotaryError, match=r"specs must be a list of rotary.Specs or preset names \(got one str"):
        viz.compare("llama-2-7b")
    with pytest.raises(rotary.RotaryError, match="no-such-model"):
        viz.compare(["no-such-model"])


def _report_legend(spec) -> dict:
    """label -> colour of every legend entry of rotary's HTML report of one spec."""
    import re

    page = rotary._rotary.render_report([spec._native], "colours")
    return dict((label, colour) for colour, label in re.findall(
        r'(?:fill|stroke)="(#[0-9a-fA-F]{6})"[^<]*/><text class="legend"[^>]*>([^<]*)</text>', page))


def test_extrapolation_defaults_to_the_report_and_check_contexts():
    """llama-3.1-8b: trained 8,192 (Llama 3's original context), target 131,072
    (max_position_embeddings), as `rotary check` and the report; it drew 32,768 (4 x trained)."""
    for name, trained, target in (("llama-3.1-8b", 8192, 131072), ("qwen2.5-7b-yarn", 32768, 131072)):
        spec = rotary.Spec.preset(name)
        assert (spec.default_trained_context, spec.default_target_context) == (trained, target)
        legend = _report_legend(spec)
        assert f"trained ({trained} tokens)" in legend and f"target ({target} tokens)" in legend
        ax = viz.extrapolation(name)
        try:
            assert ax.get_title() == f"{name}: extrapolation from {trained:,} to {target:,} tokens"
            lines = {line.get_label(): line for line in ax.get_lines()}
            assert lines[f"target ({target:,} tokens)"].get_color() == legend[f"target ({target} tokens)"]
            assert lines[f"trained ({trained:,} tokens)"].get_color() == legend[f"trained ({trained} tokens)"]
        finally:
            plt.close(ax.figure)
    # Llama 2 at 4 x its context: pairs out of distribution, marked in the report's colour.
    ax = viz.extrapolation("llama-2-7b", 16384)
    try:
        ood = [line for line in ax.get_lines() if line.get_label().startswith("out of distribution")]
        assert ood and ood[0].get_color() == _report_legend(LLAMA)["out of distribution"] == "#d62728"
    finally:
        plt.close(ax.figure)


@pytest.mark.parametrize("name", ["llama-3.1-8b", "qwen2.5-7b-yarn", "phi-3-mini-128k"])
def test_scaling_regimes_have_the_reports_colours(name):
    """Each regime's markers in the colour the HTML report gives it (read back from the report)."""
    spec = rotary.Spec.preset(name)
    legend = _report_legend(spec)
    ax = viz.scaling(spec)
    try:
        drawn = {line.get_label(): line.get_color() for line in ax.get_lines() if not line.get_label().startswith("_")}
        assert drawn and set(drawn) <= set(legend), (drawn, legend)
        for regime, colour in drawn.items():
            assert colour == legend[regime] == viz.REGIME_COLORS[regime]
    finally:
        plt.close(ax.figure)
