"""Dependencies point one way: a module imports only from its own package or from lower layers.

Every `import` counts, including those inside functions (lazy imports still tie the layers together).
"""

from __future__ import annotations

import ast
import graphlib
import sys
from pathlib import Path

from tempering import syntax

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "tempering"
sys.path.insert(0, str(ROOT / "benchmarks"))
import architecture  # noqa: E402  (the benchmark's import graph, so test and figure read one graph)

LAYERS: list[tuple[str, ...]] = [
    ("errors", "syntax"),  # the error types; thread-safe parsing of Python source
    (
        "types",
        "config",
        "runlog",
        "progress",
        "cluster",
        "trl_names",
        "verl_names",
        "http",
    ),  # the data model, typed configs (and TRL's and verl's names for their keys), the run folder, progress bars, HTTP
    ("algos", "metrics"),  # pure functions
    ("models",),
    ("sandbox",),
    ("envs",),
    ("teachers",),
    ("rollout",),
    ("evaluation",),  # held-out metrics and pass rates, through the rollout engine
    ("train",),  # scoring, credit, the update, the one loop, data parallelism
    ("methods",),  # one module per training method
    ("synth",),
    ("recipes", "serve"),  # the verbs' runners and tools; services over HTTP
    ("cli", "distributed", "integrations", "experiments", "__init__", "__main__"),
]
"""Lowest first. `tempering.X` may import `tempering.Y` when Y's layer is at or below X's, and two
different packages of one layer do not import each other."""

RANK = {name: i for i, names in enumerate(LAYERS) for name in names}


def top(module: str) -> str:
    return module.split(".")[1] if module.startswith("tempering.") else module


def imports(path: Path) -> list[tuple[int, str]]:
    tree = syntax.parse(path.read_text())
    pkg = ".".join(["tempering", *path.relative_to(SRC).with_suffix("").parts])
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.startswith("tempering")]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this module's package
                base = pkg.split(".")[: -node.level]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            if name.startswith("tempering"):
                out.append((node.lineno, name))
    return out


def upward_imports() -> list[str]:
    bad = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC)
        here = rel.parts[0].removesuffix(".py")
        if here not in RANK:
            bad.append(f"{rel}: package {here!r} has no layer in tests/test_layers.py")
            continue
        for line, mod in imports(path):
            there = top(mod)
            if there == "tempering" or there == here:
                continue
            if there not in RANK:
                bad.append(f"{rel}:{line} imports {mod} (no layer)")
            elif RANK[there] > RANK[here] or (RANK[there] == RANK[here] and there != here):
                bad.append(f"{rel}:{line} imports {mod} ({here} is below {there})")
    return bad


def test_imports_point_down_the_layers():
    assert upward_imports() == []


def test_no_two_modules_import_each_other():
    """No circle of imports, however long (a circle ties its modules into one: neither can be read, tested or
    moved alone). The graph is the one `benchmarks/architecture.py` counts circles in."""
    files = architecture.py_files()
    modules = {architecture.module_name(p) for p in files}
    graph = {architecture.module_name(p): architecture.imports(p, modules) for p in files}
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as e:
        raise AssertionError(f"import circle: {' -> '.join(e.args[1])}") from None
