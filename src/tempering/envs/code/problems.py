"""Code problems: the data model, and `load_problems` for the project's own JSONL format and the
benchmarks' formats (HumanEval, MBPP, LiveCodeBench; see formats.py), read from local files.

The project's own format, one problem per line (prompt = signature + docstring, as in HumanEval;
tests = MBPP-style assert lines):

    {"id": "sum_list", "difficulty": 1, "entry_point": "sum_list",
     "prompt": "def sum_list(xs):\\n    \\"\\"\\"Return the sum of xs.\\"\\"\\"\\n",
     "tests": ["assert sum_list([1, 2]) == 3", "assert sum_list([]) == 0"],
     "solution": "def sum_list(xs):\\n    return sum(xs)\\n"}

Required: `id` (unique), `prompt` (defines the entry point), `entry_point`, `tests` (Python assert
statements; they decide the reward and are never shown to the policy). Optional: `public_tests`
(asserts shown in multi-turn feedback; default: the `>>>` examples of the prompt), `difficulty`
(1 easiest .. 5), `solution` (a reference, never shown), `float_tol` (`assert a == b` tests match
floats within it, default 1e-6), `test_timeout_s` (per test, default 2), `time_budget_s` (the
whole problem, default 60). A malformed file is an error naming the line and the field.

A benchmark record that is well formed but cannot be judged (its test calls no function, its
entry point is not defined, it has no tests; see formats.py) is skipped with a warning naming its
id and the reason, so that one such record never blocks the rest of its file; a file none of whose
records can be judged is an error.
"""

from __future__ import annotations

import ast
import doctest
import gzip
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from tempering.errors import UserError

BUILTIN = Path(__file__).with_name("problems.jsonl")
SAMPLES = Path(__file__).with_name("samples")
"""A handful of problems written for this project in each benchmark's format (tests and examples)."""
FORMATS = ("auto", "native", "humaneval", "mbpp", "livecodebench")

FUNCTION_INSTRUCTION = (
    "Complete the Python function below so that it does what its docstring says. "
    "Reply with the whole function in a ```python code block.\n\n"
)


@dataclass(frozen=True)
class Test:
    """One test. Function problems: Python statements the judge runs against the solution's names
    (an assert line, or HumanEval's `check(candidate)`). Program problems: an input and its output."""

    text: str
    """How the test reads in feedback (only public tests are ever shown)."""
    source: str = ""
    """Function problems: the statements run by the judge."""
    stdin: str = ""
    """Program problems: the input."""
    stdout: str = ""
    """Program problems: the expected output (compared line by line, numbers as decimals)."""
    float_tol: float | None = None
    """For a test `assert a == b`: floats (also inside lists and tuples) match within it; None: Python's ==."""

    def spec(self) -> dict:
        """What the judge receives."""
        if self.source:
            return {"source": self.source, "float_tol": self.float_tol}
        return {"stdin": self.stdin, "stdout": self.stdout}


@dataclass(frozen=True)
class CodeProblem:
    """One problem: what the policy reads, how its answer is assembled, and the tests."""

    id: str
    """Unique name (the benchmark's task id)."""
    prompt: str
    """Everything the policy reads (instruction included)."""
    tests: tuple[Test, ...]
    """The tests that decide the reward, in order; never shown to the policy."""
    public_tests: tuple[Test, ...] = ()
    """Tests the policy may see in multi-turn feedback (examples the prompt already shows)."""
    kind: str = "function"
    """`function`: the tests call the solution's `entry_point`. `program`: stdin in, stdout out."""
    entry_point: str = ""
    """The name the tests call (function problems)."""
    prefix: str = ""
    """Code placed before the answer, as the benchmark's harness does (HumanEval: the prompt)."""
    setup: str = ""
    """Code run after the answer and before the tests, in the answer's namespace (MBPP's test_setup_code:
    it may build objects of the answer's classes); the tests see the names it defines."""
    solution: str = ""
    """Reference answer, assembled like any answer (for checking the problem set; never shown)."""
    difficulty: int = 1
    """1 (one-liner) .. 5 (a real algorithm)."""
    test_timeout_s: float = 2.0
    """Seconds one test may take."""
    time_budget_s: float = 60.0
    """Seconds all the tests of one answer may take together."""
    format: str = "native"
    """The file format it was read from."""
    extra: dict = field(default_factory=dict, hash=False, compare=False)
    """Fields of the record that grading does not use, kept as they are."""

    def program(self, code: str) -> str:
        """The file the judge runs: the prefix, then the answer's code, as the benchmark's harness joins them."""
        if self.prefix and not self.prefix.endswith("\n") and code[:1] not in (" ", "\t"):
            return self.prefix + "\n" + code
        return self.prefix + code


def defines(code: str, name: str) -> bool:
    return re.search(rf"^\s*(?:async\s+)?(?:def|class)\s+{re.escape(name)}\b", code, re.M) is not None


def doctest_tests(prompt: str, entry_point: str) -> tuple[Test, ...]:
    """The `>>> call` / `value` examples in the entry point's docstring whose value is a literal, as
    assert tests (with a float tolerance: docstrings round their numbers)."""
    try:
        tree = ast.parse(prompt)
    except SyntaxError:
        return ()
    funcs = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    doc = next((ast.get_docstring(f) or "" for f in funcs if f.name == entry_point), "")
    try:
        examples = doctest.DocTestParser().get_examples(doc)
    except ValueError:  # inconsistent indentation: no usable examples
        return ()
    tests = []
    for ex in examples:
        call, want = ex.source.strip(), ex.want.strip()
        try:
            ast.literal_eval(want)
            compile(call, "<example>", "eval")
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        text = f"assert {call} == {want}"
        tests.append(Test(text=text, source=text, float_tol=1e-6))
    return tuple(tests)


def check_statements(text: str, what: str) -> None:
    """A test must be valid Python with an assert in it (a bare comparison would never fail)."""
    try:
        tree = ast.parse(text)
    except SyntaxError as e:
        raise UserError(f"{what} {text!r} is not valid Python ({e.msg}).") from None
    if not any(isinstance(node, ast.Assert) for node in ast.walk(tree)):
        raise UserError(f"{what} {text!r} has no assert, so it can never fail: write it as `assert ...`.")


class Unjudgeable(UserError):
    """A well-formed benchmark record that cannot be judged: skipped with a warning, never blocking its file."""


@dataclass(frozen=True)
class Skipped:
    """A record left out of a problem file, and why."""

    where: str
    """The file and line (or array index)."""
    id: str
    """The record's id, as the benchmark spells it ("" when it has none)."""
    reason: str


class Record:
    """One record of a problem file, with field checks that name the place and the field."""

    def __init__(self, data: object, where: str, required: tuple[str, ...]):
        if not isinstance(data, dict):
            raise UserError(f"{where}: expected a JSON object with fields {', '.join(required)}.")
        for name in required:
            if name not in data:
                raise UserError(f"{where}: missing field {name!r} (required: {', '.join(required)}).")
        self.data, self.where, self.used = data, where, set(required)

    def get(self, name: str, kind: type | tuple[type, ...], default: object = None):
        self.used.add(name)
        value = self.data.get(name, default)
        if name in self.data and (not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool)):
            raise UserError(f"{self.where}: field {name!r} has the wrong type ({type(value).__name__}).")
        return value

    def fail(self, message: str) -> UserError:
        return UserError(f"{self.where}: {message}")

    def unjudgeable(self, message: str) -> Unjudgeable:
        return Unjudgeable(f"{self.where}: {message}")

    def extra(self) -> dict:
        return {k: v for k, v in self.data.items() if k not in self.used}

    def positive(self, name: str, default: float) -> float:
        value = self.get(name, (int, float), default)
        if not value > 0:
            raise self.fail(f"field {name!r} must be positive, got {value}.")
        return float(value)


def parse_native(data: object, where: str) -> CodeProblem:
    """One record of the project's own format."""
    r = Record(data, where, ("id", "prompt", "entry_point", "tests"))
    pid, prompt, entry = r.get("id", str), r.get("prompt", str), r.get("entry_point", str)
    if not entry.isidentifier():
        raise r.fail(f"field 'entry_point' {entry!r} is not a Python name.")
    if not defines(prompt, entry):
        raise r.fail(f"field 'prompt' does not define `def {entry}(...)` (the entry_point).")
    tol = r.positive("float_tol", 1e-6)
    tests = []
    for name in ("tests", "public_tests"):
        lines = r.get(name, list, [])
        for i, text in enumerate(lines):
            if not isinstance(text, str):
                raise r.fail(f"field {name!r}[{i}] must be a string.")
            check_statements(text, f"{where}: field {name!r}[{i}]")
        tests.append(tuple(Test(text=t.strip(), source=t.strip(), float_tol=tol) for t in lines))
    if not tests[0]:
        raise r.fail("field 'tests' is empty: give at least one assert line.")
    difficulty = r.get("difficulty", int, 1)
    if not 1 <= difficulty <= 5:
        raise r.fail(f"field 'difficulty' must be 1..5, got {difficulty}.")
    return CodeProblem(
        id=pid,
        prompt=FUNCTION_INSTRUCTION + prompt,
        tests=tests[0],
        public_tests=tests[1] if "public_tests" in r.data else doctest_tests(prompt, entry),
        entry_point=entry,
        prefix=prompt,
        solution=r.get("solution", str, ""),
        difficulty=difficulty,
        test_timeout_s=r.positive("test_timeout_s", 2.0),
        time_budget_s=r.positive("time_budget_s", 60.0),
        extra=r.extra(),
    )


def read_records(path: Path) -> list[tuple[str, object]]:
    """(place, record) for each record of a JSONL file, a JSON array file, or either gzipped."""
    try:
        raw = path.read_bytes()
        text = (gzip.decompress(raw) if path.suffix == ".gz" else raw).decode("utf-8")
    except (OSError, UnicodeDecodeError, EOFError, gzip.BadGzipFile) as e:
        raise UserError(f"cannot read code problems from {path}: {e}") from e
    if text.lstrip().startswith("["):  # one JSON array (MBPP's sanitized release)
        try:
            items = json.loads(text)
        except json.JSONDecodeError as e:
            raise UserError(f"{path}: not valid JSON ({e.msg} at line {e.lineno}).") from None
        return [(f"{path}[{i}]", item) for i, item in enumerate(items)]
    out = []
    for n, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                out.append((f"{path}:{n}", json.loads(line)))
            except json.JSONDecodeError as e:
                raise UserError(f"{path}:{n}: not valid JSON ({e.msg} at column {e.colno}).") from None
    return out


def detect(record: object, where: str) -> str:
    """The format of a record, from its fields."""
    keys = set(record) if isinstance(record, dict) else set()
    if {"test", "entry_point"} <= keys or "canonical_solution" in keys:
        return "humaneval"
    if "test_list" in keys:
        return "mbpp"
    if keys & {"question_content", "public_test_cases", "private_test_cases"}:
        return "livecodebench"
    if "tests" in keys:
        return "native"
    raise UserError(
        f"{where}: cannot tell the format of this record (fields {sorted(keys)}): expected HumanEval "
        "(prompt, test, entry_point), MBPP (test_list), LiveCodeBench (question_content, "
        "public_test_cases) or the native format (id, prompt, entry_point, tests)."
    )


def parsers() -> dict[str, Callable[[object, str], CodeProblem]]:
    from tempering.envs.code import formats

    return {
        "native": parse_native,
        "humaneval": formats.parse_humaneval,
        "mbpp": formats.parse_mbpp,
        "livecodebench": formats.parse_livecodebench,
    }


def load_problems(
    path: str | Path = BUILTIN,
    format: str = "auto",
    test_timeout_s: float | None = None,
    time_budget_s: float | None = None,
    skipped: list[Skipped] | None = None,
) -> list[CodeProblem]:
    """Every problem of a local file (`format` auto: told by the first record's fields). The time
    limits, when given, replace each problem's own. UserError naming the place and the field.
    Records that cannot be judged are left out with one warning line naming them (appended to
    `skipped` when given); UserError when no record is left."""
    if format not in FORMATS:
        raise UserError(f"unknown code problem format {format!r}: use one of {', '.join(FORMATS)}.")
    for name, value in (("test_timeout_s", test_timeout_s), ("time_budget_s", time_budget_s)):
        if value is not None and not value > 0:
            raise UserError(f"{name} must be positive, got {value!r}.")
    path = Path(path)
    records = read_records(path)
    if not records:
        raise UserError(f"{path} holds no problems: add one JSON object per line.")
    if format == "auto":
        format = detect(records[0][1], records[0][0])
    parse = parsers()[format]
    problems: list[CodeProblem] = []
    seen: dict[str, str] = {}
    left_out: list[Skipped] = []
    for where, record in records:
        try:
            problem = parse(record, where)
        except Unjudgeable as e:
            rid = (
                record.get("task_id", record.get("question_id", record.get("id", "")))
                if isinstance(record, dict)
                else ""
            )
            left_out.append(Skipped(where, str(rid), str(e).removeprefix(f"{where}: ")))
            continue
        if problem.id in seen:
            raise UserError(f"{where}: problem id {problem.id!r} is also used at {seen[problem.id]}.")
        seen[problem.id] = where
        limits = {"test_timeout_s": test_timeout_s, "time_budget_s": time_budget_s}
        problems.append(replace(problem, format=format, **{k: v for k, v in limits.items() if v is not None}))
    if skipped is not None:
        skipped.extend(left_out)
    if left_out and not problems:
        reasons = "; ".join(f"{s.where}: {s.reason}" for s in left_out[:5])
        raise UserError(f"{path}: none of its {len(records)} records can be judged ({reasons}).")
    if left_out:
        from tempering.progress import warn

        warn(f"{path}: {describe_skipped(left_out, len(records))}")
    return problems


def describe_skipped(left_out: list[Skipped], records: int) -> str:
    """One line: how many records were left out, each id and why."""
    each = "; ".join(f"{s.id or s.where}: {s.reason}" for s in left_out)
    return f"skipped {len(left_out)} of {records} records that cannot be judged ({each})"
