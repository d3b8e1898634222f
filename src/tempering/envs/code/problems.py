"""Python function-completion problems: the JSONL format and its loader.

One problem per line, in the spirit of HumanEval (prompt = signature + docstring, entry point) and
MBPP (tests are `assert` lines):

    {"id": "sum_list", "difficulty": 1, "entry_point": "sum_list",
     "prompt": "def sum_list(xs):\\n    \\"\\"\\"Return the sum of xs.\\"\\"\\"\\n",
     "tests": ["assert sum_list([1, 2]) == 3", "assert sum_list([]) == 0"],
     "solution": "def sum_list(xs):\\n    return sum(xs)\\n"}

Fields: `id` (unique), `prompt`, `entry_point` (a function the prompt defines), `tests` (each
`assert <expression> == <literal>`: the expression may call anything the solution defines, the right
side must be a plain Python literal), and optionally `difficulty` (1 easiest .. 5), `solution` (a
reference, never shown to the policy), `float_tol` (tolerance for float results, default 1e-6) and
`test_timeout_s` (per test, default 2). A malformed file is an error naming the line and the field.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from tempering.errors import UserError

BUILTIN = Path(__file__).with_name("problems.jsonl")


@dataclass(frozen=True)
class Test:
    """One `assert <expr> == <expected>` line, split so that the judge alone knows the expected value."""

    text: str
    """The assert line as written (shown in feedback)."""
    expr: str
    """Left-hand side: evaluated next to the candidate's code."""
    expected: str
    """Right-hand side: a Python literal, evaluated by the judge only."""


@dataclass(frozen=True)
class CodeProblem:
    """One function to write, with its tests."""

    id: str
    """Unique name."""
    prompt: str
    """Signature and docstring the policy completes."""
    entry_point: str
    """Name of the function under test."""
    tests: tuple[Test, ...]
    """Unit tests, in order; feedback reports the first failing one."""
    difficulty: int = 1
    """1 (one-liner) .. 5 (a real algorithm)."""
    solution: str = ""
    """Reference solution (for checking the problem set; never shown to the policy)."""
    float_tol: float = 1e-6
    """Absolute and relative tolerance when a test expects a float."""
    test_timeout_s: float = 2.0
    """Seconds one test may take."""
    extra: dict = field(default_factory=dict, hash=False, compare=False)
    """Unknown fields of the record, kept as they are."""


def parse_test(text: str) -> Test:
    """Split `assert <expr> == <literal>`; ValueError with the reason otherwise."""
    try:
        tree = ast.parse(text.strip())
    except SyntaxError as e:
        raise ValueError(f"is not valid Python ({e.msg})") from None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Assert):
        raise ValueError("must be a single `assert <expression> == <literal>` statement")
    cmp = tree.body[0].test
    if not (isinstance(cmp, ast.Compare) and len(cmp.ops) == 1 and isinstance(cmp.ops[0], ast.Eq)):
        raise ValueError("must compare with a single `==`")
    expected = ast.unparse(cmp.comparators[0])
    try:
        ast.literal_eval(expected)
    except (ValueError, SyntaxError, TypeError):
        raise ValueError(f"must have a plain literal on the right of `==`, got {expected!r}") from None
    return Test(text=text.strip(), expr=ast.unparse(cmp.left), expected=expected)


_TYPES = {
    "id": str,
    "prompt": str,
    "entry_point": str,
    "tests": list,
    "difficulty": int,
    "solution": str,
    "float_tol": (int, float),
    "test_timeout_s": (int, float),
}
_REQUIRED = ("id", "prompt", "entry_point", "tests")


def parse_problem(record: object, where: str) -> CodeProblem:
    """One JSONL record as a CodeProblem; `where` (file:line) starts every error message."""
    if not isinstance(record, dict):
        raise UserError(f"{where}: expected a JSON object with fields {', '.join(_REQUIRED)}.")
    for name in _REQUIRED:
        if name not in record:
            raise UserError(f"{where}: missing field {name!r} (required: {', '.join(_REQUIRED)}).")
    for name, kind in _TYPES.items():
        if name in record and (not isinstance(record[name], kind) or isinstance(record[name], bool)):
            raise UserError(f"{where}: field {name!r} has the wrong type ({type(record[name]).__name__}).")
    entry = record["entry_point"]
    if not entry.isidentifier():
        raise UserError(f"{where}: field 'entry_point' {entry!r} is not a Python name.")
    if not re.search(rf"^\s*def\s+{re.escape(entry)}\s*\(", record["prompt"], re.M):
        raise UserError(f"{where}: field 'prompt' does not define `def {entry}(...)` (the entry_point).")
    if not record["tests"]:
        raise UserError(f"{where}: field 'tests' is empty: give at least one assert line.")
    tests = []
    for i, text in enumerate(record["tests"]):
        if not isinstance(text, str):
            raise UserError(f"{where}: field 'tests'[{i}] must be a string.")
        try:
            tests.append(parse_test(text))
        except ValueError as e:
            raise UserError(f"{where}: field 'tests'[{i}] {text!r} {e}.") from None
    difficulty = record.get("difficulty", 1)
    if not 1 <= difficulty <= 5:
        raise UserError(f"{where}: field 'difficulty' must be 1..5, got {difficulty}.")
    for name in ("float_tol", "test_timeout_s"):
        if name in record and not record[name] > 0:
            raise UserError(f"{where}: field {name!r} must be positive, got {record[name]}.")
    return CodeProblem(
        id=record["id"],
        prompt=record["prompt"],
        entry_point=entry,
        tests=tuple(tests),
        difficulty=difficulty,
        solution=record.get("solution", ""),
        float_tol=float(record.get("float_tol", 1e-6)),
        test_timeout_s=float(record.get("test_timeout_s", 2.0)),
        extra={k: v for k, v in record.items() if k not in _TYPES},
    )


def load_problems(path: str | Path = BUILTIN) -> list[CodeProblem]:
    """All problems of a JSONL file (blank lines skipped); UserError naming the line and field."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"cannot read code problems from {path}: {e}") from e
    problems, seen = [], {}
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise UserError(f"{path}:{n}: not valid JSON ({e.msg} at column {e.colno}).") from None
        problem = parse_problem(record, f"{path}:{n}")
        if problem.id in seen:
            raise UserError(f"{path}:{n}: field 'id' {problem.id!r} is also used on line {seen[problem.id]}.")
        seen[problem.id] = n
        problems.append(problem)
    if not problems:
        raise UserError(f"{path} holds no problems: add one JSON object per line.")
    return problems
