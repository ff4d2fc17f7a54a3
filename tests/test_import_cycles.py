"""No import cycles in src/dpemb or experiments/: the module-level import graph, read with
``ast`` (no module is imported), has no cycle.

An edge goes from a module to every module it imports at module level (outside function
and class bodies; inside ``if``/``try``/``with`` blocks, ``if TYPE_CHECKING:`` included):
``import a.b`` to ``a.b``; ``from x import y`` to ``x`` (also when ``y`` is a submodule:
``x``'s ``__init__`` runs first), relative imports resolved; and, as experiments/ import
each other, ``importlib.import_module("name")`` with a constant name. Only modules of the
two trees count (experiments/ by file name, as they import each other)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def module_names(src: Path, experiments: Path) -> dict[str, Path]:
    """Dotted name -> file: ``dpemb.x.y`` under ``src``, the file stem under ``experiments``."""
    mods = {}
    for p in sorted(src.rglob("*.py")):
        mods[".".join(p.relative_to(src).with_suffix("").parts).removesuffix(".__init__")] = p
    for p in sorted(experiments.glob("*.py")):
        mods[p.stem] = p
    return mods


def _module_level(body: list[ast.stmt]):
    """The statements of a module outside function and class bodies."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        yield node
        for field in ("body", "orelse", "finalbody"):
            yield from _module_level(getattr(node, field, []) or [])
        for handler in getattr(node, "handlers", []) or []:
            yield from _module_level(handler.body)


def _resolve(name: str, path: Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    package = package[: len(package) - (node.level - 1)]
    return ".".join(package + ([node.module] if node.module else []))


def import_graph(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the modules (of ``mods``) it imports at module level."""
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        targets: set[str] = set()
        for stmt in _module_level(ast.parse(path.read_text(), str(path)).body):
            if isinstance(stmt, ast.Import):
                targets.update(a.name for a in stmt.names)
            elif isinstance(stmt, ast.ImportFrom):
                targets.add(_resolve(name, path, stmt))
            for call in ast.walk(stmt):  # x = importlib.import_module("name") at module level
                if isinstance(call, ast.Call) and isinstance(call.func, (ast.Attribute, ast.Name)) \
                        and (getattr(call.func, "attr", None) or getattr(call.func, "id", None)) == "import_module" \
                        and call.args and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str):
                    targets.add(call.args[0].value)
        graph[name] = {t for t in targets if t in mods and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
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
            visit(v)
    return found


def _path(graph: dict[str, set[str]], component: list[str]) -> str:
    """One cycle through the component's first module, for the failure message (a -> b -> a)."""
    members, start = set(component), component[0]
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:  # breadth first, within the component, back to the start
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & members):
                if w == start:
                    trail = [v]
                    while trail[-1] != start:
                        trail.append(previous[trail[-1]])
                    return " -> ".join([*reversed(trail), start])
                if w not in previous and w != start:
                    previous[w] = v
                    nxt.append(w)
        frontier = nxt
    return " -> ".join(component)


def test_no_import_cycles():
    graph = import_graph(module_names(ROOT / "src", ROOT / "experiments"))
    assert len(graph) > 100 and graph["dpemb.training.federated"]  # the graph was read
    found = cycles(graph)
    assert not found, "import cycles:\n" + "\n".join(_path(graph, c) for c in found)


def test_the_checker_finds_cycles_through_every_kind_of_import(tmp_path):
    src, exp = tmp_path / "src", tmp_path / "experiments"
    (src / "pkg").mkdir(parents=True)
    exp.mkdir()
    (src / "pkg" / "__init__.py").write_text("from pkg.a import A\n")
    (src / "pkg" / "a.py").write_text("from . import b\nA = 1\n")  # to the package: pkg.__init__ runs first
    (src / "pkg" / "b.py").write_text("import os\n")
    (src / "pkg" / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.d import D\n")
    (src / "pkg" / "d.py").write_text("try:\n    import pkg.c\nexcept ImportError:\n    pass\nD = 1\n")
    (src / "pkg" / "e.py").write_text("def f():\n    import pkg.f\n")  # function-local: not module level
    (src / "pkg" / "f.py").write_text("import pkg.e\n")
    (exp / "one.py").write_text("import importlib\ntwo = importlib.import_module('two')\n")
    (exp / "two.py").write_text("import importlib\nONE = importlib.import_module('one')\n")
    graph = import_graph(module_names(src, exp))
    assert graph["pkg.a"] == {"pkg"} and graph["pkg.e"] == set() and graph["pkg.f"] == {"pkg.e"}
    assert sorted(cycles(graph)) == [["one", "two"], ["pkg", "pkg.a"], ["pkg.c", "pkg.d"]]
    assert _path(graph, ["one", "two"]) == "one -> two -> one"
