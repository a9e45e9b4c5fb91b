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
          "export_table", "KvCache", "convert_weights", "attention", "FusedRope", "attention_scale", "alibi_slopes",
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


# ---- the Python docs pages (docs/python*.md) ----
DOCS = __import__("pathlib").Path(__file__).resolve().parents[2] / "docs"
START_PAGE = DOCS / "python.md"


def python_blocks(page):
    import re

    return re.findall(r"^```python\n(.*?)^```$", page.read_text(), re.S | re.M)


def test_the_start_page_has_its_three_examples():
    blocks = python_blocks(START_PAGE)
    assert len(blocks) == 3
    assert "rotary.apply(" in blocks[0] and "rotary.table(" in blocks[0]
    assert "rt.apply_rotary(" in blocks[1]
    assert "rt.patch_model(" in blocks[2]


@pytest.mark.parametrize("index", range(3), ids=["numpy", "torch", "patch_model"])
def test_start_page_example_runs_and_prints_what_it_says(index, tmp_path):
    """Each example of docs/python.md runs as it is, in a fresh interpreter (patch_model and
    torch.compile change process state), and every print(...) followed by a '# ...' comment
    prints that comment."""
    import subprocess
    import sys

    code = python_blocks(START_PAGE)[index]
    if "transformers" in code:
        pytest.importorskip("transformers")
    if "torch" in code:
        pytest.importorskip("torch")
    script = tmp_path / "example.py"
    script.write_text(code)
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    printed = run.stdout.splitlines()
    prints = [line for line in code.splitlines() if line.startswith("print(")]
    assert len(printed) == len(prints), run.stdout
    said = [(line.split("  # ", 1)[1].strip(), out) for line, out in zip(prints, printed) if "  # " in line]
    assert said, "the example says nothing it prints"
    for expected, out in said:
        assert out == expected


def github_anchors(page):
    """The anchors GitHub gives a page's headings: lower case, punctuation other than '-' and '_'
    dropped, spaces to '-'."""
    import re

    anchors, in_code = set(), False
    for line in page.read_text().splitlines():
        in_code ^= line.startswith("```")
        match = re.match(r"#{1,6} (.*)", line)
        if match and not in_code:
            anchors.add(re.sub(r"[^\w\- ]", "", match.group(1).lower()).replace(" ", "-"))
    return anchors


def test_links_to_and_between_the_python_pages_resolve():
    """Every markdown link in the python pages, and every link elsewhere in the docs to one of
    them, names a file that exists and, with '#', a heading of that file."""
    import re

    root = DOCS.parent
    pages = [root / "README.md"] + sorted(DOCS.glob("*.md"))
    checked = 0
    for page in pages:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            path, _, anchor = target.partition("#")
            if "://" in target or not path:
                continue
            is_python_page = re.fullmatch(r"(docs/)?python(-[a-z]+)?\.md", path)
            if not (page.name.startswith("python") or is_python_page):
                continue
            resolved = (page.parent / path).resolve()
            assert resolved.is_file(), f"{page.name}: {target} names no file"
            if anchor:
                assert anchor in github_anchors(resolved), f"{page.name}: {target} names no heading"
            checked += 1
    assert checked >= 20
