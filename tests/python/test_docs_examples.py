"""The examples in the public docstrings (what help() shows) run and print what they say:
doctest over the NumPy API's modules, and every public name has a docstring with an example."""
import doctest
import inspect

import numpy as np
import pytest

import rotary
import rotary._apply
import rotary._attention
import rotary._kv_cache
import rotary._spec
import rotary._table
import rotary._diagnose
import rotary._convert
import rotary._export

MODULES = [rotary._spec, rotary._table, rotary._apply, rotary._diagnose, rotary._export, rotary._kv_cache, rotary._convert, rotary._attention]


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_docstring_examples_run(module):
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    tests = [t for t in finder.find(module, globs={"rotary": rotary, "np": np}) if t.examples]
    assert tests, f"{module.__name__} has no examples"
    for test in tests:
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {module.__name__}"


PUBLIC = ["Spec.preset", "Spec.from_hf_config", "Spec.from_json", "Spec.for_layer_type", "Spec.replace",
          "Spec.frequencies", "presets", "Table", "Table.cos_sin", "table", "apply", "apply_cos_sin", "diagnose",
          "export_table", "KvCache", "convert_weights", "attention", "attention_scale", "alibi_slopes",
          "sinusoidal_table"]


@pytest.mark.parametrize("name", PUBLIC)
def test_help_shows_an_example(name):
    obj = rotary
    for part in name.split("."):
        obj = getattr(obj, part)
    doc = inspect.getdoc(obj) or ""
    assert ">>> " in doc, f"rotary.{name}'s docstring has no example"


def test_the_package_says_it_is_typed():
    import importlib.resources

    assert importlib.resources.files("rotary").joinpath("py.typed").is_file()
    hints = inspect.get_annotations(rotary.apply, eval_str=False)
    assert hints["return"] == "tuple[np.ndarray, Optional[np.ndarray]]"
    assert inspect.get_annotations(rotary.Spec.head_dim.fget)["return"] == "int"


USER_CODE = '''
import numpy as np
import rotary

spec = rotary.Spec.preset("llama-3.1-8b")
q = np.ones((1, 32, 4, 128), np.float32)
q_out, k_out = rotary.apply(q, None, np.arange(4), spec)
rotated: np.ndarray = q_out
maybe: "np.ndarray | None" = k_out
head_dim: int = spec.head_dim
scaling: float = rotary.Table(spec).attention_scaling
cos, sin = rotary.table(spec, [0, 1])
'''


def test_mypy_strict_reads_the_types(tmp_path):
    """A user's script type-checks under mypy --strict against the installed package, and a wrong
    use is caught (so the annotations are read, not ignored as Any)."""
    import subprocess
    import sys

    good = tmp_path / "good.py"
    good.write_text(USER_CODE)
    bad = tmp_path / "bad.py"
    bad.write_text(USER_CODE + "wrong: str = spec.head_dim\nk_dim: int = k_out.shape[0]\n")
    command = [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir", str(tmp_path / "cache")]
    run = subprocess.run(command + [str(good)], capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    run = subprocess.run(command + [str(bad)], capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 1
    assert 'Incompatible types in assignment (expression has type "int", variable has type "str")' in run.stdout
    assert 'Item "None" of "ndarray[tuple[Any, ...], dtype[Any]] | None" has no attribute "shape"' in run.stdout
