"""The import graph of `generator/`: no cycles, none hidden inside a function.

Every module under generator/ is parsed with `ast` (nothing is imported). An import
statement gives edges from its module to each `generator` module it loads:

- `import generator.a.b` and `from generator.a import b` load `generator.a.b` when that is a
  module (a file or a package), and `from generator.a import name` loads `generator.a`;
  relative imports are resolved the same way;
- every package above the target is loaded too (its `__init__.py` runs first), except the
  packages above the importing module itself: Python has started those before the importer
  runs, so such an edge never closes a cycle at run time.

An import is *module-level* when it runs while its module is imported: anywhere outside a
function body (class bodies, `try`, `if` and `if TYPE_CHECKING:` blocks included: a cycle of
type-only imports is a cycle of the design). The others are *function-level*.

Rule 1: the graph of module-level imports has no cycle.
Rule 2: the graph of all imports, function-level ones included, has no cycle either. So no
function-level import of a `generator` module closes a cycle: moving any of them to the top
of its module would keep the graph acyclic. Function-level imports remain for what they are
for: loading TVM, optional packages (serial, cmake) and the heavy parts of the tool (the
exporter, the tuner) only on the paths that use them, so that `microtvm-gen --help`, the
Project API server and the firmware tools start without them.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "generator"
ROOT = Path(__file__).resolve().parent.parent / PACKAGE


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    line: int
    module_level: bool


def module_files(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its own name)."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _is_package(name: str, modules: dict[str, Path]) -> bool:
    return modules[name].name == "__init__.py"


def _ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _absolute(node: ast.ImportFrom, importer: str, modules: dict[str, Path]) -> str:
    """The module a `from X import ...` names, relative imports resolved."""
    if node.level == 0:
        return node.module or ""
    base = importer.split(".")
    if not _is_package(importer, modules):
        base = base[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def _targets(node: ast.Import | ast.ImportFrom, importer: str,
             modules: dict[str, Path]) -> set[str]:
    """The modules of the package an import statement loads (not counting ancestors)."""
    found: set[str] = set()
    if isinstance(node, ast.Import):
        for alias in node.names:
            name = alias.name
            while name and name not in modules:  # `import generator.x.y` of a missing y
                name = name.rpartition(".")[0]
            if name:
                found.add(name)
        return found
    base = _absolute(node, importer, modules)
    if base not in modules and base.split(".")[0] != PACKAGE:
        return found
    for alias in node.names:
        sub = f"{base}.{alias.name}"
        found.add(sub if sub in modules else base)
    return {name for name in found if name in modules}


def _imports(tree: ast.AST) -> list[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement with whether it runs at module level."""
    out: list[tuple[ast.Import | ast.ImportFrom, bool]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import | ast.ImportFrom):
                out.append((child, not in_function))
            visit(child, in_function or isinstance(
                child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda))

    visit(tree, False)
    return out


def import_edges(root: Path = ROOT) -> list[Edge]:
    modules = module_files(root)
    edges = []
    for importer, path in modules.items():
        own = set(_ancestors(importer))
        for node, module_level in _imports(ast.parse(path.read_text(), str(path))):
            for target in _targets(node, importer, modules):
                for name in (*_ancestors(target), target):
                    if name in modules and name != importer and name not in own:
                        edges.append(Edge(importer, name, node.lineno, module_level))
    return edges


def cycles(edges: list[Edge]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), sorted."""
    graph: dict[str, set[str]] = {}
    for e in edges:
        graph.setdefault(e.source, set()).add(e.target)
        graph.setdefault(e.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return sorted(found)


def describe(component: list[str], edges: list[Edge]) -> str:
    members = set(component)
    inside = sorted({(e.source, e.target, e.line, e.module_level) for e in edges
                     if e.source in members and e.target in members})
    return "; ".join(f"{s} -> {t} (line {n}{'' if top else ', in a function'})"
                     for s, t, n, top in inside)


def test_no_import_cycle_at_module_level():
    edges = [e for e in import_edges() if e.module_level]
    assert len({e.source for e in edges}) > 50  # the walk found the package
    found = cycles(edges)
    assert not found, "import cycles: " + " | ".join(describe(c, edges) for c in found)


def test_no_function_level_import_closes_a_cycle():
    edges = import_edges()
    found = cycles(edges)
    assert not found, "function-level imports that dodge a cycle: " + " | ".join(
        describe(c, edges) for c in found)


def test_the_walk_sees_the_cycles_it_forbids(tmp_path):
    """The rules on a package made for them: a type-only cycle, a cycle closed inside a
    function, a relative import and an import of a parent package's name."""
    pkg = tmp_path / PACKAGE
    (pkg / "sub").mkdir(parents=True)
    files = {
        "__init__.py": "",
        "a.py": "import typing\nif typing.TYPE_CHECKING:\n    from generator.b import B\n",
        "b.py": "from generator import a\n",
        "c.py": "def f():\n    from .sub import d\n    return d\n",
        "sub/__init__.py": "from generator.sub.d import D\n",
        "sub/d.py": "import generator.c\nD = 1\n",
        "e.py": "from generator.sub import D\n",
    }
    for name, text in files.items():
        (pkg / name).write_text(text)
    edges = import_edges(pkg)
    assert cycles([e for e in edges if e.module_level]) == [["generator.a", "generator.b"]]
    assert cycles(edges) == [["generator.a", "generator.b"],
                             ["generator.c", "generator.sub", "generator.sub.d"]]
    # generator.sub.d's parent package is never an edge of its own; e's is.
    assert ("generator.sub.d", "generator.sub") not in {(e.source, e.target) for e in edges}
    assert ("generator.e", "generator.sub") in {(e.source, e.target) for e in edges}


# What generating a project may not depend on: building it, running it, the devices.
PROJECT_PACKAGE = "generator.project"
ABOVE_PROJECT = ("generator.build", "generator.run", "generator.device", "generator.rpc")


def test_project_imports_nothing_that_builds_or_runs():
    """generator/project/ (rendering, records, template back-ends) imports neither the build
    nor the run, the devices or RPC: those import it."""
    wrong = sorted({f"{e.source} -> {e.target} (line {e.line})" for e in import_edges()
                    if e.source.startswith(PROJECT_PACKAGE + ".")
                    and any(e.target == m or e.target.startswith(m + ".")
                            for m in ABOVE_PROJECT)})
    assert not wrong, "; ".join(wrong)


# What the CLI loads before it knows the command, what `serve` runs on, and what a generated
# project's Project API server loads to build, flash and open its link: every `run`, `build`
# and `serve` starts these, so each heavy package here costs its import time on every call
# (numpy alone is about 0.15 s of CPU).
SERVER_PATH_MODULES = ("generator.cli", "generator.rpc.serve", "generator.project_api.handler",
                       "generator.build", "generator.device.flash", "generator.device.links",
                       "generator.project.record")
NOT_ON_THE_SERVER_PATH = ("numpy", "jinja2", "tvm", "onnx", "serial")


def test_the_project_server_path_loads_no_heavy_package():
    import subprocess
    import sys

    code = (f"import sys\nfor m in {SERVER_PATH_MODULES!r}: __import__(m)\n"
            f"print(sorted(m for m in {NOT_ON_THE_SERVER_PATH!r} if m in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", code], cwd=ROOT.parent, capture_output=True,
                            text=True, check=True).stdout.strip()
    assert loaded == "[]", f"the CLI, serve or the Project API server imports {loaded}"
