"""The Python package's module structure, read from the source with ast (nothing is imported):
the imports between rotary's own modules form no cycle, and no module is over 700 lines.

Every import statement counts, also those inside functions: an import placed in a function to
dodge a cycle is still a cycle (the two modules then depend on each other, and which one works
depends on which was imported first). Edges go to the module an import names: `from . import x`
to the submodule x, `from .m import name` to m (and to m.name when that is a submodule), `import
rotary.torch` to rotary.torch. The compiled extension (_rotary, known by its .pyi stub) is a node
without imports."""
import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "python" / "rotary"
MAX_LINES = 700


def module_files(package: pathlib.Path) -> dict:
    """{dotted module name: (path, is_package)} for every .py under package, and every .pyi stub
    without a .py beside it (a compiled module)."""
    top = package.name
    modules = {}
    for path in sorted(package.rglob("*.py*")):
        if path.suffix not in (".py", ".pyi") or (path.suffix == ".pyi" and path.with_suffix(".py").exists()):
            continue
        parts = list(path.relative_to(package).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        modules[".".join([top] + parts)] = (path, is_package)
    return modules


def import_edges(modules: dict) -> dict:
    """{importer: {imported: line of the first such import}} between the modules of `modules`."""
    top = next(iter(modules)).split(".")[0]
    edges = {}
    for name, (path, is_package) in modules.items():
        found = edges.setdefault(name, {})
        if path.suffix == ".pyi":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = name if is_package else name.rpartition(".")[0]
                    for _ in range(node.level - 1):
                        base = base.rpartition(".")[0]
                    base = f"{base}.{node.module}" if node.module else base
                else:
                    base = node.module or ""
                for alias in node.names:
                    submodule = f"{base}.{alias.name}"
                    targets.append(submodule if submodule in modules else base)
            for target in targets:
                if target.split(".")[0] == top and target in modules and target != name:
                    found.setdefault(target, node.lineno)
    return edges


def find_cycle(edges: dict):
    """One cycle as [a, b, ..., a], or None (depth-first search, white / grey / black)."""
    state = {}
    stack = []

    def visit(node):
        state[node] = "grey"
        stack.append(node)
        for target in sorted(edges.get(node, ())):
            if state.get(target) == "grey":
                return stack[stack.index(target):] + [target]
            if target not in state:
                cycle = visit(target)
                if cycle:
                    return cycle
        stack.pop()
        state[node] = "black"
        return None

    for node in sorted(edges):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


def describe(cycle, edges, modules) -> str:
    """The cycle, and where each of its imports is (file and line)."""
    def where(name):
        path = modules[name][0]
        return path.relative_to(ROOT) if path.is_relative_to(ROOT) else name

    steps = [f"{a} imports {b} ({where(a)}:{edges[a][b]})" for a, b in zip(cycle, cycle[1:])]
    return "import cycle: " + " -> ".join(cycle) + "\n  " + "\n  ".join(steps)


def test_the_package_has_its_modules():
    modules = module_files(PACKAGE)
    # The walk sees the package (a moved tree would make the other tests pass on nothing).
    for name in ("rotary", "rotary.torch", "rotary._rotary", "rotary.experiments", "rotary.experiments.plots"):
        assert name in modules, name
    edges = import_edges(modules)
    assert 1 <= edges["rotary.torch"]["rotary._torch_ops"]  # `from ._torch_ops import apply_rotary`
    assert "rotary.viz" in edges["rotary.experiments.plots"]  # `from .. import viz`


def test_the_intra_package_import_graph_is_acyclic():
    modules = module_files(PACKAGE)
    edges = import_edges(modules)
    # Every cycle, not only the first: each found cycle's last edge is set aside and the search runs again.
    cycles, rest = [], {name: dict(targets) for name, targets in edges.items()}
    while (cycle := find_cycle(rest)) is not None:
        cycles.append(describe(cycle, edges, modules))
        del rest[cycle[-2]][cycle[-1]]
    assert cycles == [], "\n".join(cycles)


def test_no_module_is_over_700_lines():
    long = {str(path.relative_to(ROOT)): n for path, _ in module_files(PACKAGE).values() if path.suffix == ".py"
            for n in [len(path.read_text(encoding="utf-8").splitlines())] if n > MAX_LINES}
    assert long == {}, f"modules over {MAX_LINES} lines: {long}"


def test_a_cycle_through_a_function_level_import_is_found(tmp_path):
    """The checker itself: a cycle closed by an import inside a function, and a package-relative
    `from .. import` edge, are seen and reported with their lines."""
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("from .a import f\n")
    (package / "a.py").write_text("from . import b\n\ndef f():\n    return b.g()\n")
    (package / "b.py").write_text("def g():\n    from .sub import c\n    return c\n")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "c.py").write_text("import os\n\n\ndef h():\n    from .. import a\n    return a\n")
    modules = module_files(package)
    edges = import_edges(modules)
    assert edges["pkg.b"] == {"pkg.sub.c": 2}
    assert edges["pkg.sub.c"] == {"pkg.a": 5}
    cycle = find_cycle(edges)
    assert cycle == ["pkg.a", "pkg.b", "pkg.sub.c", "pkg.a"]
    assert "pkg.sub.c imports pkg.a (pkg.sub.c:5)" in describe(cycle, edges, modules)
    (package / "sub" / "c.py").write_text("import os\n")
    assert find_cycle(import_edges(module_files(package))) is None
