"""Shared fixtures of the Python tests: the golden vectors and a seeded random generator.

The golden files are the project's tests/golden (or $ROTARY_GOLDEN_DIR); their absence is an
error, not a skip."""
import json
import os
import pathlib

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
GOLDEN_DIR = pathlib.Path(os.environ.get("ROTARY_GOLDEN_DIR", ROOT / "tests" / "golden"))


def golden_cases(kind: str):
    if not GOLDEN_DIR.is_dir():
        raise FileNotFoundError(f"golden vectors not found at {GOLDEN_DIR} (set ROTARY_GOLDEN_DIR)")
    cases = []
    for path in sorted(GOLDEN_DIR.glob("*.json")):
        negative = path.name.startswith("neg_")
        if (kind == "negative") == negative:
            cases.append(path)
    assert cases, f"no {kind} golden cases in {GOLDEN_DIR}"
    return cases


def load_case(path):
    with open(path) as f:
        return json.load(f)


def tensor(entry):
    """A golden {dtype, shape, data} entry as a NumPy array."""
    return np.asarray(entry["data"], dtype=entry["dtype"]).reshape(entry["shape"])


@pytest.fixture
def rng():
    return np.random.default_rng(20261122)
