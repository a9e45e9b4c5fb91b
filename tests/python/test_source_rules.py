"""The source tree's own rules (docs/design.md, "Conventions"), checked so that they stay true:

- no file under src/, include/ or python/ longer than 700 lines (data tables aside: the preset
  data and the golden vectors are generated lists, not code);
- no function longer than 150 lines in src/, include/ or python/rotary (the preset data is one
  generated table, not code);
- no comment that cites a file outside the repository (the design documents that informed the
  project are not shipped with it);
- no dates or issue numbers in comments: history belongs in git. A date inside a path to a dated
  results file (docs/results/performance/2026-...) is a file name, not a date in prose.
"""

from __future__ import annotations

import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
SOURCE_DIRS = ("src", "include", "python")
SUFFIXES = {".cpp", ".hpp", ".h", ".py", ".pyi"}
MAX_LINES = 700
# Generated data, not code: the presets' records and the built-in golden vectors.
DATA_FILES = {"src/core/preset_data.cpp", "src/golden/golden.cpp"}

MAX_FUNCTION_LINES = 150
# The one function that is a data table: the presets' records, generated.
DATA_FUNCTION_FILES = {"src/core/preset_data.cpp"}
CPP_SUFFIXES = {".cpp", ".hpp", ".h"}
# Functions over the limit that are not split yet, at their lengths then: each may shrink but not
# grow, and any other function over 150 lines fails. None is left.
LONG_FUNCTIONS_LEFT: dict = {}
FUNCTION_NAME = re.compile(r"([A-Za-z_~][\w:~]*)\s*\(")
# The end of a function signature: `)` then any of const, noexcept, override, final, `-> type`.
SIGNATURE_END = re.compile(r"\)(\s*(const|noexcept|override|final|->\s*[\w:<>,*&\s]+?))*\s*$")
# A comment after the code (one that holds no quote: `//` inside a string literal is not one).
TRAILING_COMMENT = re.compile(r'\s*//[^"]*$')
NOT_A_FUNCTION = re.compile(r"^(template\s*<.*>\s*)?(namespace|struct|class|enum|union)\b|^extern\b")

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


def cpp_functions(text: str):
    """(first line, line number, length in lines) of each function in C++ source written in the
    project's style: the signature starts at column 0 and may span lines; its last line ends with
    `)` and qualifiers (const, noexcept, override, final, `-> type`) then `{` (or `{` stands alone
    on the next line); the body ends at the next line that is exactly `}`. The length runs from the
    line holding `{` to that `}`. Namespace, struct, class and enum bodies are not functions."""
    lines = [TRAILING_COMMENT.sub("", line).rstrip() for line in text.splitlines()]
    index = 0
    while index < len(lines):
        line = lines[index]
        if line[:1] in ("", " ", "\t", "}", "#", "/", "*") or NOT_A_FUNCTION.search(line):
            index += 1
            continue
        # The signature runs to the first line that ends with `{`, `;` (a declaration) or `}`.
        last = index
        while last < len(lines) and last - index < 12 and not lines[last].endswith(("{", ";", "}")):
            last += 1
        if last == len(lines) or not lines[last].endswith("{"):
            index += 1
            continue
        head = lines[last][:-1].rstrip()
        if not head and last > index:
            head = lines[last - 1]  # `{` alone: the signature ends on the line before
        if not SIGNATURE_END.search(head):
            index += 1
            continue
        end = last + 1
        while end < len(lines) and lines[end] != "}":
            end += 1
        yield line.strip(), last + 1, end - last + 1
        index = end + 1


def python_functions(text: str):
    """(name, first line number, length in lines) of each function and method, nested ones included."""
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            yield node.name, first, node.end_lineno - first + 1


def long_functions(root: pathlib.Path = ROOT):
    found = []
    for folder in ("src", "include", "python/rotary"):
        for path in sorted((root / folder).rglob("*")):
            relative = path.relative_to(root).as_posix()
            if not path.is_file() or "__pycache__" in path.parts or relative in DATA_FUNCTION_FILES:
                continue
            if path.suffix in CPP_SUFFIXES:
                functions = cpp_functions(path.read_text(encoding="utf-8"))
            elif path.suffix == ".py":
                functions = python_functions(path.read_text(encoding="utf-8"))
            else:
                continue
            for signature, line, length in functions:
                match = FUNCTION_NAME.search(signature)
                name = match.group(1) if match else signature
                if length > LONG_FUNCTIONS_LEFT.get((relative, name), MAX_FUNCTION_LINES):
                    found.append(f"{relative}:{line} {name} ({length} lines)")
    return found


def test_no_function_over_150_lines():
    long = long_functions()
    assert long == [], "functions over 150 lines (split them into named steps):\n" + "\n".join(long)


def test_the_function_scan_sees_functions_and_their_lengths():
    # The scan finds a function whose signature spans lines and ends with a qualifier, measures it
    # from `{` to the closing `}`, skips namespace and struct bodies, and counts Python by its ast.
    source = (
        "namespace rotary {\n"
        "struct Row {\n"
        "  int x;\n"
        "};\n"
        "int Row::width(int a,\n"
        "               int b) const noexcept {\n" + "  ++a;\n" * 151 + "}\n"
        "auto short_one() -> int {\n"
        "  return 1;\n"
        "}\n"
        "}  // namespace rotary\n"
    )
    assert [(length, line) for _, line, length in cpp_functions(source)] == [(153, 6), (3, 159)]
    python = "def f():\n" + "    x = 1\n" * 150 + "\n\nclass C:\n    def g(self):\n        return 2\n"
    assert [(name, length) for name, _, length in python_functions(python)] == [("f", 151), ("g", 2)]
    assert len(list(cpp_functions((ROOT / "src/cli/diagnose_command.cpp").read_text(encoding="utf-8")))) > 5
