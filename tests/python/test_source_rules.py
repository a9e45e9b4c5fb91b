"""The source tree's own rules (docs/design.md, "Conventions"), checked so that they stay true:

- no file under src/, include/ or python/ longer than 700 lines (data tables aside: the preset
  data and the golden vectors are generated lists, not code);
- no comment that cites a file outside the repository (the design documents that informed the
  project are not shipped with it);
- no dates or issue numbers in comments: history belongs in git. A date inside a path to a dated
  results file (docs/results/performance/2026-...) is a file name, not a date in prose.
"""

from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
SOURCE_DIRS = ("src", "include", "python")
SUFFIXES = {".cpp", ".hpp", ".h", ".py", ".pyi"}
MAX_LINES = 700
# Generated data, not code: the presets' records and the built-in golden vectors.
DATA_FILES = {"src/core/preset_data.cpp", "src/golden/golden.cpp"}

OUTSIDE_FILES = re.compile(r"STYLE\.md|ARCHITECTURE\.md|ANCHORS\.md|NUMERICS\.md|\.\./shared/")
DATE = re.compile(r"(?<![\w/-])20\d\d-\d\d-\d\d(?![\w-]*\.(md|json|txt))")
ISSUE = re.compile(r"\b[Ii]ssue #?\d+\b|\(#\d+\)")


def source_files():
    for folder in SOURCE_DIRS:
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix in SUFFIXES and path.is_file() and "__pycache__" not in path.parts:
                yield path


def comment_text(path: pathlib.Path, line: str) -> str:
    """The comment part of a line (roughly: after // or #; strings holding those are rare)."""
    marker = "#" if path.suffix in {".py", ".pyi"} else "//"
    index = line.find(marker)
    return line[index:] if index >= 0 else ""


def test_the_rules_see_the_tree():
    files = list(source_files())
    assert len(files) > 150, len(files)  # the walk found the sources, so the checks below are not vacuous


def test_no_source_file_over_700_lines():
    long = []
    for path in source_files():
        relative = path.relative_to(ROOT).as_posix()
        lines = path.read_text(encoding="utf-8").count("\n")
        if lines > MAX_LINES and relative not in DATA_FILES:
            long.append(f"{relative}: {lines} lines")
    assert long == [], "files over 700 lines (split them by job):\n" + "\n".join(long)


def test_no_comment_cites_a_file_outside_the_repository_or_carries_history():
    found = []
    for path in source_files():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            comment = comment_text(path, line)
            for rule, pattern in (("outside file", OUTSIDE_FILES), ("date", DATE), ("issue number", ISSUE)):
                if pattern.search(comment):
                    found.append(f"{path.relative_to(ROOT)}:{number}: {rule}: {line.strip()}")
    assert found == [], "\n".join(found)


def test_the_patterns_catch_what_they_are_for():
    # Each pattern fires on the case it exists for and not on a dated results file's path.
    assert DATE.search("// measured on the EPYC (2026-11-25)")
    assert not DATE.search("// docs/results/performance/2026-11-25-decode-paced-prefetch.md")
    assert ISSUE.search("# the drop-in's path, issue 21")
    assert OUTSIDE_FILES.search("// STYLE.md section 4")
