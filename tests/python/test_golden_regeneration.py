"""scripts/golden/regenerate.py reproduces the carried golden vectors from the installed
transformers: a few representative cases are regenerated into a temporary directory and compared
with tests/golden.

- exact_f64 (mpmath, 60 digits, rounded once): bit-identical to the carried files.
- hf_f32 (transformers' own code, float32, CPU): inv_freq, attention scaling and the inputs
  identical; cos/sin within 2 float32 ulps (the carried files were made with torch 1.13, whose
  float32 cos/sin differ from torch 2.x's by up to 1 ulp); q/k embeds are HF's float32 rotation of
  the new cos/sin, bit for bit (README "The hf_f32 numerics", step 4).
- the written files parse as JSON, and every tensor's data length is the product of its shape.
"""
import importlib.util
import json
import math

import numpy as np
import pytest

from conftest import GOLDEN_DIR, ROOT, load_case, tensor

CASES = [
    "default_llama2_7b",
    "yarn_deepseek_v3",
    "longrope_phi3_mini_128k_long",
    "dynamic_factor2_below_max_after_growth",
    "neg_longrope_wrong_length",
]


def load_regenerate():
    path = ROOT / "scripts" / "golden" / "regenerate.py"
    spec = importlib.util.spec_from_file_location("golden_regenerate", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory):
    regen = load_regenerate()
    out = tmp_path_factory.mktemp("golden")
    assert regen.main(["--out", str(out), "--cases", *CASES]) == 0
    return regen, out


def tensors(node, prefix=""):
    """Every {dtype, shape, data} entry of a case, by dotted name."""
    if isinstance(node, dict):
        if set(node) == {"dtype", "shape", "data"}:
            yield prefix, node
            return
        for key, value in node.items():
            yield from tensors(value, f"{prefix}.{key}" if prefix else key)


def f32_ulps(a, b):
    def ordinal(x):
        i = np.asarray(x, dtype=np.float32).view(np.int32).astype(np.int64)
        return np.where(i < 0, -(i & 0x7FFFFFFF), i)

    return int(np.max(np.abs(ordinal(a) - ordinal(b))))


@pytest.mark.parametrize("name", CASES)
def test_format_round_trips(regenerated, name):
    _, out = regenerated
    text = (out / f"{name}.json").read_text(encoding="utf-8")
    assert "NaN" not in text and "Infinity" not in text
    doc = json.loads(text)
    assert doc["format"] == "rotary-golden/1" and doc["case"] == name
    old = load_case(GOLDEN_DIR / f"{name}.json")
    assert list(doc) == list(old), "top-level fields and their order as in the carried file"
    entries = dict(tensors(doc))
    assert set(entries) == set(dict(tensors(old)))
    for key, entry in entries.items():
        assert entry["dtype"] in ("float32", "float64"), key
        assert len(entry["data"]) == math.prod(entry["shape"]), key
        values = tensor(entry)
        assert np.all(np.isfinite(values)), key
        if entry["dtype"] == "float32":
            # shortest repr of the double equal to the float32 value: parsing gives it back exactly
            assert all(repr(float(np.float32(x))) == repr(float(x)) for x in entry["data"]), key
    # no partial or temporary files left behind
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize("name", [c for c in CASES if not c.startswith("neg_")])
def test_positive_case_matches_carried(regenerated, name):
    regen, out = regenerated
    new = load_case(out / f"{name}.json")
    old = load_case(GOLDEN_DIR / f"{name}.json")
    for key in ("config", "positions", "seq_len", "head_dim", "rotary_dim", "rope_type", "hf_rope_parameters"):
        assert new[key] == old[key], key
    for key in ("q", "k"):
        assert np.array_equal(tensor(new["inputs"][key]), tensor(old["inputs"][key])), key
    # exact_f64: bit for bit
    for key, value in old["exact_f64"].items():
        if isinstance(value, dict):
            a, b = tensor(value), tensor(new["exact_f64"][key])
            assert np.array_equal(a.view(np.int64), b.view(np.int64)), f"exact_f64.{key}"
        else:
            assert new["exact_f64"][key] == value, f"exact_f64.{key}"
    hf_new, hf_old = new["hf_f32"], old["hf_f32"]
    assert np.array_equal(tensor(hf_new["inv_freq"]), tensor(hf_old["inv_freq"]))
    assert hf_new["attention_scaling"] == hf_old["attention_scaling"]
    for key in ("cos", "sin"):
        assert f32_ulps(tensor(hf_new[key]), tensor(hf_old[key])) <= regen.TOL_ULP[key], key
    cos, sin = tensor(hf_new["cos"]), tensor(hf_new["sin"])
    for key, inp in (("q_embed", "q"), ("k_embed", "k")):
        recipe = regen.recipe_embed(tensor(new["inputs"][inp]), cos, sin)
        assert np.array_equal(recipe, tensor(hf_new[key])), key
        diff = np.max(np.abs(tensor(hf_new[key]).astype(np.float64) - tensor(hf_old[key])))
        assert diff <= regen.TOL_EMBED_ABS, key
    # the comparison the CLI's --check makes agrees
    ok, lines = regen.compare(new, old)
    assert ok, "\n".join(lines)


def test_negative_case_matches_carried(regenerated):
    regen, out = regenerated
    new = load_case(out / "neg_longrope_wrong_length.json")
    old = load_case(GOLDEN_DIR / "neg_longrope_wrong_length.json")
    assert new["hf_outcome"] == old["hf_outcome"] == "exception"
    assert new["hf_validation"]["exception"] == old["hf_validation"]["exception"]
    assert new["hf_validation_generic_mixin"]["exception"] is None
    assert new["hf_validation_generic_mixin"]["log_messages"] == old["hf_validation_generic_mixin"]["log_messages"]
    assert new["hf_compute"]["exception"]["type"] == old["hf_compute"]["exception"]["type"] == "RuntimeError"
    ok, lines = regen.compare(new, old)
    assert ok, "\n".join(lines)
