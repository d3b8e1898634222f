"""Code problems: the data model (`load_problems` in formats.py reads them from local files in the
project's own JSONL format or a benchmark's).

The project's own format, one problem per line (prompt = signature + docstring, as in HumanEval;
tests = MBPP-style assert lines):

    {"id": "sum_list", "difficulty": 1, "entry_point": "sum_list",
     "prompt": "def sum_list(xs):\\n    \\"\\"\\"Return the sum of xs.\\"\\"\\"\\n",
     "tests": ["assert sum_list([1, 2]) == 3", "assert sum_list([]) == 0"],
     "solution": "def sum_list(xs):\\n    return sum(xs)\\n"}

Required: `id` (unique), `prompt` (defines the entry point), `entry_point`, `tests` (Python assert
statements; they decide the reward and are never shown to the policy). Optional: `public_tests`
(asserts shown in multi-turn feedback; default: the `>>>` examples of the prompt), `difficulty`
(1 easiest .. 5), `solution` (a reference, never shown), `rel_tol` and `abs_tol` (how
`assert a == b` tests match floats, default 1e-9 and 0: see `judge.same`), `test_timeout_s` (per
test, default 2), `time_budget_s` (the whole problem, default 60). A malformed file is an error naming the line and the field.

A benchmark record that is well formed but cannot be judged (its test calls no function, its
entry point is not defined, it has no tests; see formats.py) is skipped with a warning naming its
id and the reason, so that one such record never blocks the rest of its file; a file none of whose
records can be judged is an error.
"""

from __future__ import annotations

import ast
import doctest
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tempering import syntax
from tempering.envs.code import judge
from tempering.errors import UserError

BUILTIN = Path(__file__).with_name("problems.jsonl")
SAMPLES = Path(__file__).with_name("samples")
"""A handful of problems written for this project in each benchmark's format (tests and examples)."""
FORMATS = ("auto", "native", "humaneval", "mbpp", "livecodebench")

REL_TOL = 1e-9
"""The native format's default relative float tolerance (`math.isclose`'s own): what float rounding
moves an honest answer by (docs/code.md, "Floats")."""

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
    rel_tol: float | None = None
    """For a test `assert a == b`: floats (also inside lists and tuples) match within this relative
    tolerance (and `abs_tol`), see `judge.same`; None: Python's ==."""
    abs_tol: float = 0.0

    def spec(self) -> dict:
        """What the judge receives."""
        if self.source:
            return {"source": self.source, "rel_tol": self.rel_tol, "abs_tol": self.abs_tol}
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
    """Code run before the tests, in the judge's namespace (MBPP's test_setup_code: it may build objects
    of the answer's classes, through calls to the answer's job); the tests see the names it defines."""
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

    def supplied_names(self) -> list[str]:
        """The names the candidate's code supplies: its entry points, which the problem asks for. The
        entry point, and the classes the reference solution defines that the setup code or the tests
        use (MBPP 927's setup builds trees of the answer's `Node`). Everything else a test or the setup
        uses is the judge's: the prompt's code, the setup's, the reference's helpers
        (`reference_helpers`), the builtins and the real modules."""
        used = _loads(self.setup) | {n for t in (*self.tests, *self.public_tests) for n in _loads(t.source)}
        classes = {s.name for s in self._reference_body() if isinstance(s, ast.ClassDef)}
        own = bound_names(self.prefix) | bound_names(self.setup)
        return sorted(({self.entry_point} | (classes & used - own)) - {""})

    def reference_helpers(self) -> str:
        """The statements of the reference solution the judge runs in its own namespace: those that
        bind a name the tests or the setup use that is neither the candidate's nor the problem's own
        (`is_prime` on a test's expected side), with what they use in turn; imports left out (the judge
        runs them on their own)."""
        body = self._reference_body()
        if not body:
            return ""
        supplied = set(self.supplied_names())
        need = _loads(self.setup) | {n for t in (*self.tests, *self.public_tests) for n in _loads(t.source)}
        need -= supplied | bound_names(self.prefix) | bound_names(self.setup)
        kept: list[ast.stmt] = []
        for stmt in reversed(body):
            binds = _binds(stmt)
            if isinstance(stmt, (ast.Import, ast.ImportFrom)) or not binds & need or binds & supplied:
                continue
            kept.append(stmt)
            need |= {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)} - supplied
        return "".join(ast.unparse(s) + "\n" for s in reversed(kept))

    def expected_from_answer(self) -> str:
        """Where a test's expected side uses an object of the answer's (a class it supplies besides the
        entry point, or a setup name bound from one): that side is then computed by the answer's code
        ('' when no test does). The side of a comparison that calls the entry point is the answer's to
        compute; the other is the expected side."""
        answers = set(self.supplied_names()) - {self.entry_point}
        if not answers:
            return ""
        try:
            setup = syntax.parse(self.setup).body if self.setup.strip() else []
        except SyntaxError:
            setup = []
        for stmt in setup:
            if _names_in(stmt) & answers:
                answers |= _binds(stmt)
        for test in (*self.public_tests, *self.tests):
            try:
                tree = syntax.parse(test.source)
            except SyntaxError:
                continue
            for node in ast.walk(tree):
                if not isinstance(node, ast.Compare):
                    continue
                for side in (node.left, *node.comparators):
                    calls = any(isinstance(n, ast.Call) and _name(n.func) == self.entry_point for n in ast.walk(side))
                    used = sorted(_names_in(side) & answers)
                    if used and not calls:
                        return f"test {test.text!r}: its expected side `{ast.unparse(side)}` uses {', '.join(used)}, the answer's"
        return ""

    def _reference_body(self) -> list[ast.stmt]:
        """The module-level statements of the reference solution (after the prefix), [] when none parse."""
        if not self.solution:
            return []
        try:
            return syntax.parse(self.program(self.solution)).body
        except (SyntaxError, ValueError):
            return []

    def public_setup(self) -> tuple[str, str]:
        """The part of the setup code the public run executes (in the judge), and why hidden inputs may
        still reach that run's candidate ('' when they cannot): see `setup_for`."""
        hidden = [t for t in self.tests if t not in self.public_tests]
        return setup_for(self.setup, self.public_tests, hidden, set(self.supplied_names()))

    def calls_follow_results(self) -> str:
        """Where a test would decide its calls to the candidate from the answer's results ('' when no
        test does): the judge refuses such a test (see judge.calls_follow_results)."""
        if self.kind != "function":
            return ""
        own = bound_names(self.prefix) | bound_names(self.reference_helpers())
        candidate = (set(self.supplied_names()) - own) | {self.entry_point}
        for test in (*self.public_tests, *self.tests):
            try:
                why = judge.calls_follow_results(syntax.parse(test.source), candidate, own - candidate)
            except SyntaxError:
                continue
            if why:
                return f"test {test.text!r}: {why}"
        return ""

    def program(self, code: str) -> str:
        """The file the judge runs: the prefix, then the answer's code, as the benchmark's harness joins them."""
        if self.prefix and not self.prefix.endswith("\n") and code[:1] not in (" ", "\t"):
            return self.prefix + "\n" + code
        return self.prefix + code


def bound_names(code: str, imports: bool = True) -> set[str]:
    """The names a program binds at module level (def, class, assignment, and with `imports` the
    imports, also under if / try / with / for); empty when it does not parse."""
    try:
        todo: list[ast.AST] = list(syntax.parse(code).body)
    except (SyntaxError, ValueError):
        return set()
    names: set[str] = set()
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            if imports:
                names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        else:
            for name in ("body", "orelse", "finalbody", "handlers"):
                todo.extend(x for x in getattr(node, name, []) if isinstance(x, ast.AST))
    return names


_DYNAMIC = {"globals", "locals", "vars", "exec", "eval", "setattr", "__import__", "compile"}
"""Calls that bind names a reading of the code cannot follow."""


def setup_for(
    setup: str,
    tests: tuple[Test, ...] | list[Test],
    hidden: list[Test],
    supplied: set[str] | frozenset[str] = frozenset(),
) -> tuple[str, str]:
    """The statements of `setup` that `tests` depend on (the names they use, and transitively what
    those statements use; imports and statements that bind nothing are kept), in their order; and
    why the `hidden` tests' inputs may still reach the answer's job when that part runs ('' when they
    cannot). The setup runs in the judge, so the answer sees only what it is passed: hidden inputs reach
    it where a kept statement binds a name only hidden tests use and hands it on, to the answer's names
    (`supplied`, called while the setup runs) or to a later kept statement that a public test's input
    holds (the sample 9003's `leaf` inside `root`); or where a kept statement binds names in ways a
    reading cannot follow."""
    if not setup.strip() or not tests:
        return "", ""
    try:
        tree = syntax.parse(setup)
    except SyntaxError:
        return setup, "the setup code does not parse, so all of it runs"
    need = {n for t in tests for n in _loads(t.source)}
    only_hidden = {n for t in hidden for n in _loads(t.source)} - need
    kept = []
    for stmt in reversed(tree.body):
        binds = _binds(stmt)
        if isinstance(stmt, (ast.Import, ast.ImportFrom)) or not binds or binds & need or _dynamic(stmt):
            kept.append(stmt)
            need |= _names_in(stmt)
    kept.reverse()
    answers = set(supplied)
    for stmt in kept:  # the names bound from the answer's objects are the answer's too
        if _names_in(stmt) & answers:
            answers |= _binds(stmt)
    why = ""
    for i, stmt in enumerate(kept):
        leaked = _binds(stmt) & only_hidden
        handed = _names_in(stmt) & answers or any(_names_in(later) & leaked for later in kept[i + 1 :])
        if leaked and handed:
            why = (
                f"line {stmt.lineno} binds {', '.join(sorted(leaked))}, which only hidden tests use, "
                "and hands it on in the public run"
            )
        elif _dynamic(stmt):
            why = f"line {stmt.lineno} binds names in a way a reading of the code cannot follow"
        if why:
            break
    return "\n".join(ast.get_source_segment(setup, s) or "" for s in kept) + "\n", why


def _names_in(stmt: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)}


def _dynamic(stmt: ast.AST) -> bool:
    """Whether a statement binds names in ways a reading cannot follow (`globals()[...]`, `exec`)."""
    return any(isinstance(n, (ast.Global, ast.Nonlocal)) for n in ast.walk(stmt)) or any(
        isinstance(n, ast.Call) and _name(n.func) in _DYNAMIC for n in ast.walk(stmt)
    )


def _name(node: ast.AST) -> str:
    return node.id if isinstance(node, ast.Name) else ""


def _loads(code: str) -> set[str]:
    try:
        return {n.id for n in ast.walk(syntax.parse(code)) if isinstance(n, ast.Name)}
    except SyntaxError:
        return set()


def _binds(stmt: ast.stmt) -> set[str]:
    """The names a statement of the setup binds or changes: assignment targets (an attribute or item
    changes the object its name holds), definitions, imports, `x.method(...)` calls, loops' targets."""
    names: set[str] = set()
    todo: list[ast.AST] = [stmt]
    while todo:
        node = todo.pop()
        targets: Sequence[ast.AST] = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            continue  # what its body binds is its own
        todo.extend(ast.iter_child_nodes(node))
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For, ast.AsyncFor, ast.NamedExpr)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            targets = [node.optional_vars]
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            targets = [node.value.func.value] if isinstance(node.value.func, ast.Attribute) else []
        for target in targets:
            while isinstance(target, (ast.Attribute, ast.Subscript, ast.Starred)):
                target = target.value
            names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    return names


def defines(code: str, name: str) -> bool:
    return re.search(rf"^\s*(?:async\s+)?(?:def|class)\s+{re.escape(name)}\b", code, re.M) is not None


def doctest_tests(prompt: str, entry_point: str) -> tuple[Test, ...]:
    """The `>>> call` / `value` examples in the entry point's docstring whose value is a literal, as
    assert tests (with the native format's float tolerance)."""
    try:
        tree = syntax.parse(prompt)
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
            syntax.literal(want)
            if "#" in call:  # a comment would swallow the comparison: `assert f(x) # note == 1`
                call = ast.unparse(syntax.parse(call))
            compile(call, "<example>", "eval")
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        text = f"assert {call} == {want}"
        tests.append(Test(text=text, source=text, rel_tol=REL_TOL))
    return tuple(tests)


def check_statements(text: str, what: str) -> None:
    """A test must be valid Python with an assert in it (a bare comparison would never fail)."""
    try:
        tree = syntax.parse(text)
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

    def non_negative(self, name: str, default: float) -> float:
        value = self.get(name, (int, float), default)
        if not 0 <= value < math.inf:
            raise self.fail(f"field {name!r} must be a number >= 0, got {value}.")
        return float(value)
