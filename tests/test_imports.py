"""No import circles among the suite's own modules (runners/, analysis/, benchmarks/).

Every import counts: at module level, inside functions and under `if TYPE_CHECKING:`. A circle
hidden inside a function still ties the modules together (neither can be read, tested or moved
without the other), so the graph is read from the source with `ast`, not from what Python
happens to execute.
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("runners", "analysis", "benchmarks")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def suite_modules() -> dict:
    """Module name -> its source file, for every module of the three packages."""
    return {module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def imported(node, module: str, is_package: bool, known: dict) -> list:
    """The suite modules one import statement of `module` names."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            parent = module.split(".") if is_package else module.split(".")[:-1]
            parent = parent[: len(parent) - (node.level - 1)]
            base = ".".join(parent + ([base] if base else []))
        # `from runners.records import rank_rows` imports the module runners.records.rank_rows;
        # `from runners.records.rank_rows import X` the module runners.records.rank_rows
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
    found = []
    for name in names:
        # `import runners.adapters.pyg` depends on runners.adapters.pyg, or the longest known prefix
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name and name != module:
            found.append(name)
    return found


def module_imports(tree, name: str, is_package: bool, known: dict) -> set:
    """The suite modules a parsed module imports anywhere in its source."""
    deps = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            deps.update(imported(node, name, is_package, known))
    return deps


def import_graph() -> dict:
    """Module -> the set of suite modules it imports anywhere in its source."""
    known = suite_modules()
    return {name: module_imports(ast.parse(path.read_text(), filename=str(path)), name, path.name == "__init__.py",
                                 known)
            for name, path in known.items()}


def cycles(graph: dict) -> list:
    """Every strongly connected group of more than one module (Tarjan), each with one circle
    through it spelled out."""
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def visit(v):
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
            group = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(group)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [circle_through(graph, g) for g in groups]


def circle_through(graph: dict, group: set) -> list:
    """One circle inside `group`: from its first module along imports back to it (shortest)."""
    start = min(group)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & group):
                if w == start:
                    return paths[v] + [start]
                if w not in paths:
                    paths[w] = paths[v] + [w]
                    nxt.append(w)
        frontier = nxt
    return sorted(group)


def test_the_graph_sees_function_level_and_type_checking_imports():
    # runners.memory.model imports the frameworks' memory traits inside a function, and
    # runners.run imports RunConfig at module level: every kind of edge must be found, or a
    # hidden circle would pass.
    graph = import_graph()
    assert "runners.adapters" in graph["runners.memory.model"]
    assert "runners.config" in graph["runners.run"]
    source = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from runners.config import RunConfig\n"
              "def f():\n    from runners.records import rank_rows\n    from . import stacks\n")
    found = module_imports(ast.parse(source), "runners.watch.supervisor", False, suite_modules())
    assert found == {"runners.config", "runners.records.rank_rows", "runners.watch.stacks"}


def test_the_finder_names_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c", "a"]]


def test_no_import_circles():
    found = cycles(import_graph())
    assert not found, "import circles: " + "; ".join(" -> ".join(c) for c in found)
