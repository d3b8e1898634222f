"""The benchmarks' own formats, read with their own semantics (no rewriting of their tests).

- HumanEval (`task_id, prompt, entry_point, test, canonical_solution`): the answer is appended to the
  prompt, as HumanEval's harness does; the reward test is the benchmark's `check(candidate)` as
  written (its loops, tolerances and helpers included). Public tests: the prompt's `>>>` examples.
- MBPP (`task_id, text | prompt, code, test_list, test_setup_code`, the sanitized release's
  `test_imports`): the answer alone is the program, `test_setup_code` and the imports run before
  the tests, each line of `test_list` is one reward test. The prompt shows the first test (as
  EvalPlus does), which is also the public test. `challenge_test_list` is kept but not run.
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
import io
import json
import pickle
import zlib

from tempering.envs.code.problems import (
    FUNCTION_INSTRUCTION,
    CodeProblem,
    Record,
    Test,
    check_statements,
    defines,
    doctest_tests,
)

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
        raise r.fail(f"field 'entry_point' {entry!r} is not a Python name.")
    if not defines(prompt, entry):
        raise r.fail(f"field 'prompt' does not define `def {entry}(...)` (the entry_point).")
    if not defines(test, "check"):
        raise r.fail("field 'test' does not define `def check(candidate)`.")
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


def _called_function(test: str) -> str:
    """The first function a test line calls that is not a builtin: MBPP's entry point."""
    for node in ast.walk(ast.parse(test)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not hasattr(builtins, node.func.id):
            return node.func.id
    return ""


def parse_mbpp(data: object, where: str) -> CodeProblem:
    r = Record(data, where, ("task_id", "test_list"))
    pid = r.get("task_id", (int, str))
    text = r.get("text", str) or r.get("prompt", str)
    if not text:
        raise r.fail("missing field 'text' (the original release) or 'prompt' (the sanitized one).")
    tests = r.get("test_list", list)
    if not tests or not all(isinstance(t, str) for t in tests):
        raise r.fail("field 'test_list' must be a non-empty list of assert lines.")
    for i, t in enumerate(tests):
        check_statements(t, f"{where}: field 'test_list'[{i}]")
    imports = r.get("test_imports", list, [])
    setup = "\n".join([r.get("test_setup_code", str, ""), *map(str, imports)]).strip()
    entry = _called_function(tests[0])
    if not entry:
        raise r.fail(f"the first test {tests[0]!r} calls no function of the solution.")
    cases = tuple(Test(text=t.strip(), source=t.strip()) for t in tests)
    return CodeProblem(
        id=str(pid),
        prompt=f"{MBPP_INSTRUCTION}{text.strip()}\nYour code should pass this test:\n{cases[0].text}\n",
        tests=cases,
        public_tests=cases[:1],
        entry_point=entry,
        setup=setup + "\n" if setup else "",
        solution=r.get("code", str, ""),
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
        raise r.fail("has no test cases (public_test_cases and private_test_cases are empty).")
    kinds = {c.get("testtype", "stdin") for c in public + private}
    if len(kinds) != 1 or not kinds <= {"stdin", "functional"}:
        raise r.fail(f"test cases must all be 'stdin' or all 'functional', got {sorted(map(str, kinds))}.")
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
        raise r.fail("functional test cases need metadata.func_name, the method of `Solution` under test.")
    cases = []
    for c in public + private:
        try:
            args = [json.loads(line) for line in c["input"].split("\n") if line.strip()]
            expected = json.loads(c["output"])
        except json.JSONDecodeError:
            raise r.fail("a functional test case's input lines and output must each be JSON.") from None
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
