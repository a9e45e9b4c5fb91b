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
