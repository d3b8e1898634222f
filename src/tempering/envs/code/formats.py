"""Reading code problems from local files: `load_problems`, for the project's own format (problems.py)
and the benchmarks' own formats, read with their own semantics (no rewriting of their tests).

- HumanEval (`task_id, prompt, entry_point, test, canonical_solution`): the answer is appended to the
  prompt, as HumanEval's harness does; the reward test is the benchmark's `check(candidate)` as
  written (its loops, tolerances and helpers included). Public tests: the prompt's `>>>` examples.
- MBPP (`task_id, text | prompt, code, test_list, test_setup_code`, the sanitized release's
  `test_imports`): the answer alone is the program; `test_setup_code` and the imports run before
  the tests, in the judge (MBPP 367 and 927 build trees of the answer's `Node` class there, through
  calls to the answer's job), then each line of `test_list` is one reward test. The entry point is the first
  function the first test calls that the reference solution defines, a builtin's name included
  (MBPP 126 defines `sum`); without a reference, the first call of a name that is not a builtin.
  The prompt shows the first test (as EvalPlus does), which is also the public test.
  `challenge_test_list` is kept but not run.

A record whose fields are well formed but that cannot be judged (a test that calls no function,
an entry point its prompt does not define, no test cases) raises Unjudgeable: the loader skips it
with a warning. A field of the wrong type or a missing one is an error (the file is not in that format).
- LiveCodeBench (`question_id, question_content, starter_code, public_test_cases,
  private_test_cases, metadata, difficulty`): stdin tests make a program problem (output compared
  line by line, numbers as decimals); functional (LeetCode) tests call `Solution().<func_name>`.
  The reward runs the public and the private tests, feedback shows only the public ones. Private
  tests may be JSON or the lite release's base64(zlib(pickle(JSON))), read without running code.
"""

from __future__ import annotations

import ast
import base64
import builtins
import gzip
import io
import json
import pickle
import zlib
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from tempering import syntax
from tempering.envs.code.problems import (
    BUILTIN,
    FORMATS,
    FUNCTION_INSTRUCTION,
    REL_TOL,
    CodeProblem,
    Record,
    Skipped,
    Test,
    Unjudgeable,
    bound_names,
    check_statements,
    defines,
    doctest_tests,
)
from tempering.errors import UserError

MBPP_INSTRUCTION = "Write a Python function for the task below. Reply with the code in a ```python code block.\n\n"
PROGRAM_INSTRUCTION = (
    "Read the input from stdin, solve the problem and write the answer to stdout. "
    "Reply with the whole program in a ```python code block."
)
CLASS_INSTRUCTION = "Complete the starter code below. Reply with the whole class in a ```python code block."
LCB_PRELUDE = (
    "from string import *\nfrom re import *\nfrom datetime import *\nfrom collections import *\n"
    "from heapq import *\nfrom bisect import *\nfrom copy import *\nfrom math import *\nfrom random import *\n"
    "from statistics import *\nfrom itertools import *\nfrom functools import *\nfrom operator import *\n"
    "from typing import *\nfrom builtins import *\n"
    "import string, re, datetime, collections, heapq, bisect, copy, math, random, statistics, itertools\n"
    "import functools, operator, io, sys, json\nsys.setrecursionlimit(50000)\n"
)
"""LiveCodeBench's harness runs every answer after these imports, so answers may rely on them."""
LCB_DIFFICULTY = {"easy": 2, "medium": 3, "hard": 4}


def parse_humaneval(data: object, where: str) -> CodeProblem:
    r = Record(data, where, ("task_id", "prompt", "entry_point", "test"))
    pid, prompt, entry, test = (r.get(k, str) for k in ("task_id", "prompt", "entry_point", "test"))
    if not entry.isidentifier():
        raise r.unjudgeable(f"field 'entry_point' {entry!r} is not a Python name.")
    if not defines(prompt, entry):
        raise r.unjudgeable(f"field 'prompt' does not define `def {entry}(...)` (the entry_point).")
    if not defines(test, "check"):
        raise r.unjudgeable("field 'test' does not define `def check(candidate)`.")
    return CodeProblem(
        id=pid,
        prompt=FUNCTION_INSTRUCTION + prompt,
        tests=(Test(text="check(candidate)", source=f"{test}\n\ncheck({entry})\n"),),
        public_tests=doctest_tests(prompt, entry),
        entry_point=entry,
        prefix=prompt,
        solution=r.get("canonical_solution", str, ""),
        difficulty=3,
        test_timeout_s=3.0,
        extra=r.extra(),
    )


def _called_function(test: str, solution: str) -> str:
    """MBPP's entry point: the first name the test calls (in reading order) that the solution
    defines, builtins' names included; without such a name, the first that is not a builtin."""
    calls = [
        (n.lineno, n.col_offset, n.func.id)
        for n in ast.walk(syntax.parse(test))
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
    ]
    names = [name for _, _, name in sorted(calls)]
    defined = bound_names(solution)
    return next((n for n in names if n in defined), "") or next((n for n in names if not hasattr(builtins, n)), "")


def parse_mbpp(data: object, where: str) -> CodeProblem:
    r = Record(data, where, ("task_id", "test_list"))
    pid = r.get("task_id", (int, str))
    text = r.get("text", str) or r.get("prompt", str)
    if not text:
        raise r.fail("missing field 'text' (the original release) or 'prompt' (the sanitized one).")
    tests = r.get("test_list", list)
    if not all(isinstance(t, str) for t in tests):
        raise r.fail("field 'test_list' must be a list of assert lines (strings).")
    if not tests:
        raise r.unjudgeable("field 'test_list' is empty: there is nothing to judge.")
    for i, t in enumerate(tests):
        try:
            check_statements(t, f"field 'test_list'[{i}]")
        except UserError as e:
            raise r.unjudgeable(str(e)) from None
    imports = r.get("test_imports", list, [])
    setup = "\n".join([r.get("test_setup_code", str, ""), *map(str, imports)]).strip()
    solution = r.get("code", str, "")
    entry = _called_function(tests[0], solution)
    if not entry:
        raise r.unjudgeable(f"the first test {tests[0]!r} calls no function of the solution.")
    cases = tuple(Test(text=t.strip(), source=t.strip()) for t in tests)
    return CodeProblem(
        id=str(pid),
        prompt=f"{MBPP_INSTRUCTION}{text.strip()}\nYour code should pass this test:\n{cases[0].text}\n",
        tests=cases,
        public_tests=cases[:1],
        entry_point=entry,
        setup=setup + "\n" if setup else "",
        solution=solution,
        difficulty=3,
        test_timeout_s=3.0,
        extra=r.extra(),
    )


class _DataOnly(pickle.Unpickler):
    """Unpickles plain data only: any class or function in the stream is refused."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}: test cases are plain data")


def _lcb_cases(r: Record, name: str) -> list[dict]:
    value = r.get(name, (str, list), [])
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            try:
                value = json.loads(_DataOnly(io.BytesIO(zlib.decompress(base64.b64decode(value)))).load())
            except (ValueError, zlib.error, pickle.UnpicklingError, EOFError, TypeError) as e:
                raise r.fail(f"field {name!r} is neither JSON nor base64(zlib(pickle(JSON))) ({e}).") from None
    if not isinstance(value, list) or not all(
        isinstance(c, dict) and isinstance(c.get("input"), str) and isinstance(c.get("output"), str) for c in value
    ):
        raise r.fail(f"field {name!r} must be a list of {{input, output, testtype}} objects with string fields.")
    return value


def _clip(text: str, limit: int = 400) -> str:
    return text if len(text) <= limit else text[:limit] + "...(truncated)"


def parse_livecodebench(data: object, where: str) -> CodeProblem:
    r = Record(data, where, ("question_id", "question_content", "public_test_cases"))
    pid, question = str(r.get("question_id", (str, int))), r.get("question_content", str)
    starter = r.get("starter_code", str, "")
    public, private = _lcb_cases(r, "public_test_cases"), _lcb_cases(r, "private_test_cases")
    if not public + private:
        raise r.unjudgeable("has no test cases (public_test_cases and private_test_cases are empty).")
    kinds = {c.get("testtype", "stdin") for c in public + private}
    if len(kinds) != 1 or not kinds <= {"stdin", "functional"}:
        raise r.unjudgeable(f"test cases must all be 'stdin' or all 'functional', got {sorted(map(str, kinds))}.")
    metadata = r.get("metadata", (str, dict), {})
    if isinstance(metadata, str):
        try:
            metadata = json.loads(metadata or "{}")
        except json.JSONDecodeError:
            raise r.fail("field 'metadata' is not valid JSON.") from None
    level = r.get("difficulty", str, "")
    common = dict(
        id=pid,
        prefix=LCB_PRELUDE,
        solution=r.get("solution", str, ""),
        difficulty=LCB_DIFFICULTY.get(level, 3),
        test_timeout_s=6.0,
        extra=r.extra(),
    )
    if kinds == {"stdin"}:
        cases = [
            Test(
                text=f"Input:\n{_clip(c['input'])}\nExpected output:\n{_clip(c['output'])}",
                stdin=c["input"],
                stdout=c["output"],
            )
            for c in public + private
        ]
        prompt = f"{question.strip()}\n\n{PROGRAM_INSTRUCTION}\n"
        return CodeProblem(
            prompt=prompt, tests=tuple(cases), public_tests=tuple(cases[: len(public)]), kind="program", **common
        )
    func = metadata.get("func_name") if isinstance(metadata, dict) else None
    if not isinstance(func, str) or not func.isidentifier():
        raise r.unjudgeable("functional test cases need metadata.func_name, the method of `Solution` under test.")
    cases = []
    for c in public + private:
        try:
            args = [json.loads(line) for line in c["input"].split("\n") if line.strip()]
            expected = json.loads(c["output"])
        except json.JSONDecodeError:
            raise r.unjudgeable("a functional test case's input lines and output must each be JSON.") from None
        call = f"Solution().{func}({', '.join(map(repr, args))})"
        # LiveCodeBench compares with ==, after turning a returned tuple into a list
        source = f"assert (lambda r: list(r) if isinstance(r, tuple) else r)({call}) == {expected!r}"
        cases.append(Test(text=f"assert {call} == {expected!r}", source=source))
    prompt = f"{question.strip()}\n\n{CLASS_INSTRUCTION}\n```python\n{starter.strip()}\n```\n"
    return CodeProblem(
        prompt=prompt,
        tests=tuple(cases),
        public_tests=tuple(cases[: len(public)]),
        entry_point="Solution",
        **common,
    )


def parse_native(data: object, where: str) -> CodeProblem:
    """One record of the project's own format."""
    r = Record(data, where, ("id", "prompt", "entry_point", "tests"))
    pid, prompt, entry = r.get("id", str), r.get("prompt", str), r.get("entry_point", str)
    if not entry.isidentifier():
        raise r.fail(f"field 'entry_point' {entry!r} is not a Python name.")
    if not defines(prompt, entry):
        raise r.fail(f"field 'prompt' does not define `def {entry}(...)` (the entry_point).")
    if "float_tol" in r.data:
        raise r.fail("field 'float_tol' is now two: 'rel_tol' (relative, default 1e-9) and 'abs_tol' (default 0).")
    rel_tol, abs_tol = r.positive("rel_tol", REL_TOL), r.non_negative("abs_tol", 0.0)
    tests = []
    for name in ("tests", "public_tests"):
        lines = r.get(name, list, [])
        for i, text in enumerate(lines):
            if not isinstance(text, str):
                raise r.fail(f"field {name!r}[{i}] must be a string.")
            check_statements(text, f"{where}: field {name!r}[{i}]")
        tests.append(tuple(Test(text=t.strip(), source=t.strip(), rel_tol=rel_tol, abs_tol=abs_tol) for t in lines))
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


PARSERS: dict[str, Callable[[object, str], CodeProblem]] = {
    "native": parse_native,
    "humaneval": parse_humaneval,
    "mbpp": parse_mbpp,
    "livecodebench": parse_livecodebench,
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
    parse = PARSERS[format]
    problems: list[CodeProblem] = []
    seen: dict[str, str] = {}
    left_out: list[Skipped] = []
    for where, record in records:
        try:
            problem = parse(record, where)
            why = problem.calls_follow_results()
            if why and format == "native":
                raise UserError(f"{where}: {why}: write each check as an assert of its own.")
            if why:
                raise Unjudgeable(f"{where}: {why}, which would tell an answer its verdicts.")
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
        limits: dict[str, Any] = {"test_timeout_s": test_timeout_s, "time_budget_s": time_budget_s}
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
