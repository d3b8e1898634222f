"""Kernel problems in KernelBench's format, loaded without running them.

A problem is a Python file with `class Model(nn.Module)`, `get_inputs()` and `get_init_inputs()`;
KernelBench's level folders load unchanged. Files are only parsed here (the AST), never imported:
they run inside the verification job. `scale_sizes` shrinks a problem's module-level size constants
(KernelBench's current sizes need more than 24 GiB for about half of level 1).
"""

from __future__ import annotations

import ast
import hashlib
import math
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from tempering import syntax
from tempering.errors import UserError

REQUIRED = ("Model", "get_inputs", "get_init_inputs")


@dataclass(frozen=True)
class Problem:
    """One reference model and its input generators."""

    name: str
    """File stem, e.g. `19_ReLU` or `01_relu`."""
    source: str
    """The problem file's text (possibly with scaled sizes)."""
    path: str = ""
    """Where it was read from (empty for generated problems)."""
    level: str = ""
    """Folder name it came from (`level1`, `builtin`, ...)."""
    solution: str | None = None
    """A known-correct submission (built-in problems ship one)."""
    meta: dict = field(default_factory=dict, compare=False, hash=False)
    """Extra facts (synthesis recipe, size scale)."""

    @property
    def digest(self) -> str:
        """Content hash: keys cached baselines and build artefacts."""
        return hashlib.sha256(self.source.encode()).hexdigest()[:16]

    @property
    def doc(self) -> str:
        """The reference model's docstring (first line), or the name."""
        for node in syntax.parse(self.source).body:
            if isinstance(node, ast.ClassDef) and node.name == "Model":
                text = ast.get_docstring(node) or ""
                return text.strip().splitlines()[0] if text.strip() else self.name
        return self.name


def problem_errors(source: str) -> list[str]:
    """What keeps `source` from being a problem file (empty if it is one)."""
    try:
        tree = syntax.parse(source)
    except SyntaxError as e:
        return [f"syntax error on line {e.lineno}: {e.msg}"]
    defined = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    return [f"defines no {name}" for name in REQUIRED if name not in defined]


def load_problem(path: str | Path, level: str = "", scale: float = 1.0) -> Problem:
    """Read one problem file; UserError if it lacks Model / get_inputs / get_init_inputs."""
    path = Path(path)
    try:
        source = path.read_text()
    except OSError as e:
        raise UserError(f"cannot read problem file {path}: {e.strerror}") from None
    errors = problem_errors(source)
    if errors:
        raise UserError(
            f"{path} is not a KernelBench problem file ({'; '.join(errors)}): it needs "
            "class Model(nn.Module), get_inputs() and get_init_inputs()."
        )
    if scale != 1.0:
        source = scale_sizes(source, scale)
    return Problem(
        name=path.stem, source=source, path=str(path), level=level or path.parent.name, meta={"scale": scale}
    )


def load_problems(directory: str | Path, scale: float = 1.0, strict: bool = False) -> tuple[list[Problem], dict]:
    """All problem files under `directory` (recursively, sorted), and {path: why} for skipped files.

    `strict` turns a skipped file into a UserError instead.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise UserError(f"problem directory {directory} does not exist: pass a folder of problem files.")
    problems, skipped = [], {}
    for path in sorted(directory.rglob("*.py")):
        if path.name.startswith("_"):
            continue
        try:
            problems.append(load_problem(path, level=path.parent.name, scale=scale))
        except UserError as e:
            if strict:
                raise
            skipped[str(path)] = str(e)
    if not problems:
        raise UserError(
            f"no problem files in {directory}: expected *.py files defining Model, get_inputs and get_init_inputs."
        )
    return problems, skipped


def builtin_problems(scale: float = 1.0) -> list[Problem]:
    """The built-in CPU-sized suite, each with its reference submission."""
    suite = resources.files("tempering.envs.kernels.suite")
    out = []
    for entry in sorted(suite.joinpath("problems").iterdir(), key=lambda p: p.name):
        if not entry.name.endswith(".py") or entry.name.startswith("_"):
            continue
        source = entry.read_text()
        solution = suite.joinpath("solutions").joinpath(entry.name).read_text()  # one part a call (Python 3.10)
        if scale != 1.0:
            source, solution = scale_sizes(source, scale), scale_sizes(solution, scale)
        out.append(
            Problem(name=entry.name[:-3], source=source, level="builtin", solution=solution, meta={"scale": scale})
        )
    return out


def find_problem(problems: list[Problem], name: str) -> Problem:
    """The problem called `name` (or whose name ends with `_name`)."""
    for p in problems:
        if p.name == name or p.name.split("_", 1)[-1] == name:
            return p
    raise UserError(f"no problem named {name!r}: `tempering kernels list` shows the names.")


def module_constants(source: str) -> str:
    """The problem's module-level numeric constants (`dim = 4093`), as source lines.

    A submission that builds the same modules as the reference (`nn.Linear(in_features, ...)`) needs them.
    """
    lines = []
    for node in syntax.parse(source).body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Constant)
            and type(node.value.value) in (int, float)
        ):
            lines.append(ast.unparse(node))
    return "\n".join(lines)


def scale_sizes(source: str, factor: float) -> str:
    """Multiply the module-level integer size constants (`batch_size = 16`, `dim = 16384`) by `factor`.

    Only plain `NAME = <int>` assignments at module level change; each stays >= 1. Dimensions that
    must match (a LayerNorm's width and its input's) share a constant, so they stay consistent.
    """
    if factor <= 0:
        raise UserError(f"size scale must be positive, got {factor}")
    tree = syntax.parse(source)
    lines = source.splitlines(keepends=True)
    edits = []
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Constant)
            and type(node.value.value) is int
            and node.value.value > 1
        ):
            new = max(1, int(math.floor(node.value.value * factor + 0.5)))
            edits.append((node.value.lineno - 1, node.value.col_offset, node.value.end_col_offset, str(new)))
    for line, start, end, text in sorted(edits, reverse=True):
        lines[line] = lines[line][:start] + text + lines[line][end:]
    return "".join(lines)
