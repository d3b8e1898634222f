"""Answers that try to pass without solving the problem; the judge must fail every one.

Used by the tests and by benchmarks/code_tasks.py (docs/results/code.md). `cheats(problem)` adapts
each to the problem (its entry point, function or program); `lookup_policy` is the multi-turn
strategy of reading expected values off the feedback and hard-coding them next turn.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable

from tempering.envs.code.problems import CodeProblem

FUNCTION_CHEATS = {
    "equal-to-anything": "class Any:\n    def __eq__(self, other):\n        return True\n    __lt__ = __gt__ = __eq__\n"
    "    def __sub__(self, other):\n        return self\n    __abs__ = __sub__\nENTRY = lambda *a, **k: Any()\n",
    "int-subclass-eq": "class Yes(int):\n    def __eq__(self, other):\n        return True\n    __lt__ = __eq__\n"
    "ENTRY = lambda *a, **k: Yes(0)\n",
    "exit-before-tests": "import sys\nsys.exit(0)\n",
    "os-exit-before-tests": "import os\nos._exit(0)\n",
    "patch-assert": "import builtins\nbuiltins.AssertionError = Exception\nENTRY = lambda *a, **k: 0\n",
    "forge-report-print": 'print(\'{"load_status": null, "load_error": null, "results": [{"passed": true}]}\')\n'
    "import os\nos._exit(0)\n",
    "forge-report-fd": 'import os\nos.write(1, b\'{"load_status": null, "results": []}\')\nENTRY = lambda *a, **k: 0\n',
    "kill-the-judge": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n",
    "shadow-builtins": "abs = lambda *a: 0\nlen = lambda *a: 0\nset = lambda *a: 0\nisinstance = lambda *a: True\n"
    "ENTRY = lambda *a, **k: 0\n",
    "steal-from-frames": "import sys\ndef ENTRY(*args, **kwargs):\n    found = []\n    f = sys._getframe(1)\n"
    "    while f:\n        found += [c for c in f.f_code.co_consts if isinstance(c, (int, float)) and not isinstance(c, bool)]\n"
    "        found += [v for v in f.f_locals.values() if isinstance(v, (int, float, str))]\n        f = f.f_back\n"
    "    return found[-1] if found else None\n",
    "raise-keyboard-interrupt": "def ENTRY(*a, **k):\n    raise KeyboardInterrupt\n",
    "raise-stop-iteration": "def ENTRY(*a, **k):\n    raise StopIteration\n",  # ends all(map(f, xs)) early
    "read-the-judge": "import os\nseen = []\nfor p in ('cmdline', 'environ', 'fd/0', 'mem'):\n    try:\n"
    "        seen.append(open(f'/proc/{os.getppid()}/' + p, 'rb').read(1 << 16))\n    except OSError:\n        pass\n"
    "ENTRY = lambda *a, **k: seen\n",
}
"""Function problems: `ENTRY` stands for the entry point."""

PROGRAM_CHEATS = {
    "print-nothing": "pass\n",
    "kill-the-judge": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n",
    "forge-report": 'print(\'{"load_status": null, "load_error": null, "results": [{"passed": true}]}\')\n',
    "read-the-judge": "import os\nfor p in (f'/proc/{os.getppid()}/fd/0', f'/proc/{os.getppid()}/environ', 'judge.py'):\n"
    "    try:\n        print(open(p).read()[-200:])\n    except OSError:\n        pass\n",
}


def cheats(problem: CodeProblem) -> dict[str, str]:
    """Each cheat as an answer to `problem` (a fenced block, as a policy would reply)."""
    table = PROGRAM_CHEATS if problem.kind == "program" else FUNCTION_CHEATS
    return {name: f"```python\n{code.replace('ENTRY', problem.entry_point)}```" for name, code in table.items()}


def lookup_policy(problem: CodeProblem) -> Callable[[str], str]:
    """The strategy multi-turn feedback must not reward: answer nothing useful, then hard-code every
    expected value the feedback has shown (per call for functions, per input for programs)."""
    seen: dict[str, str] = {}

    def answer(feedback: str) -> str:
        for call, value in re.findall(r"^assert (.+?) == (.+)$", feedback, re.M):
            try:
                seen[ast.unparse(ast.parse(call, mode="eval"))] = value
            except SyntaxError:
                pass
        for stdin, stdout in re.findall(r"Input:\n(.*?)\nExpected output:\n(.*?)(?:\n[A-Z]|\Z)", feedback, re.S):
            seen[stdin.strip()] = stdout
        if problem.kind == "program":
            return f"```python\nimport sys\nprint({seen!r}.get(sys.stdin.read().strip(), ''))\n```"
        entry = problem.entry_point
        table = "{" + ", ".join(f"{k!r}: {v}" for k, v in seen.items()) + "}"
        return (
            f"```python\ndef {entry}(*args):\n    call = {entry!r} + '(' + ', '.join(map(repr, args)) + ')'\n"
            f"    return {table}.get(call)\n```"
        )

    return answer


ROBUSTNESS = {
    "huge_int_returned": ("add_two", "def add_two(a, b):\n    return 10**5000\n", "incorrect", "5001 digits"),
    "huge_int_in_a_list": ("add_two", "def add_two(a, b):\n    return [10**5000, 1]\n", "incorrect", "5001 digits"),
    "huge_int_in_an_error": (
        "add_two",
        "def add_two(a, b):\n    raise ValueError(10**5000)\n",
        "runtime_error",
        "ValueError",
    ),
    "infinite_recursion": (
        "add_two",
        "def add_two(a, b):\n    return add_two(a, b)\n",
        "runtime_error",
        "RecursionError",
    ),
    "deeply_nested_value": (
        "add_two",
        "def add_two(a, b):\n    x = []\n    for _ in range(10**5):\n        x = [x]\n    return x\n",
        "runtime_error",
        "nested more than 100 levels",
    ),
    "self_containing_list": (
        "add_two",
        "def add_two(a, b):\n    x = []\n    x.append(x)\n    return x\n",
        "runtime_error",
        "nested more than 100 levels",
    ),
    "huge_string": (
        "add_two",
        "def add_two(a, b):\n    return 'x' * (10 << 20)\n",
        "runtime_error",
        "larger than 4 MiB",
    ),
    "flooded_channel": (
        "add_two",
        "import os\ndef add_two(a, b):\n    for fd in range(3, 12):\n        try:\n"
        "            os.write(fd, b'[' * (6 << 20))\n        except OSError:\n            pass\n",
        "runtime_error",
        "more than 4 MiB in one reply",
    ),
    "flooded_with_lines": (
        "add_two",
        "import os\ndef add_two(a, b):\n    while True:\n        for fd in range(3, 12):\n            try:\n"
        "                os.write(fd, b'{}\\n' * (1 << 16))\n            except OSError:\n                pass\n",
        "runtime_error",
        "broke the judge's protocol",
    ),
    "huge_program_output": ("lcb_sum", "print('x' * (10 << 20))\n", "runtime_error", "more than 4 MiB"),
    "nan_returned": ("add_two", "def add_two(a, b):\n    return float('nan')\n", "incorrect", "got nan"),
    "repr_raises": (
        "add_two",
        "class Odd:\n    def __repr__(self):\n        raise RuntimeError('no repr')\n"
        "def add_two(a, b):\n    return Odd()\n",
        "incorrect",
        "got <an object of the solution>",
    ),
    "eq_raises": (
        "add_two",
        "class Odd:\n    def __eq__(self, other):\n        raise RuntimeError('no eq')\n"
        "def add_two(a, b):\n    return Odd()\n",
        "incorrect",
        "got <an object of the solution>",
    ),
    "bool_raises": (
        "sorted_unique",
        "class Odd:\n    def __bool__(self):\n        raise RuntimeError('no truth')\n"
        "def is_sorted_unique(xs):\n    return Odd()\n",
        "runtime_error",
        "RuntimeError: no truth",
    ),
    "error_message_raises": (
        "add_two",
        "class Odd(Exception):\n    def __str__(self):\n        raise RuntimeError('no str')\n"
        "def add_two(a, b):\n    raise Odd()\n",
        "runtime_error",
        "str() failed",
    ),
    "container_iteration_raises": (
        "add_two",
        "class Odd(list):\n    def __iter__(self):\n        raise RuntimeError('no iter')\n"
        "def add_two(a, b):\n    return Odd([a + b])\n",
        "runtime_error",
        "cannot be judged: reading it raised RuntimeError: no iter",
    ),
}
"""Answers that strain the judge: (problem, code, status, words in the detail). Each must be judged and
reported as what it is (the problem names a role of `robustness_problems`)."""


def robustness_problems() -> dict[str, CodeProblem]:
    from tempering.envs.code import load_problems
    from tempering.envs.code.problems import SAMPLES

    native = {p.id: p for p in load_problems()}
    lcb = {p.id: p for p in load_problems(SAMPLES / "livecodebench.jsonl")}
    he = {p.id: p for p in load_problems(SAMPLES / "humaneval.jsonl")}
    return {"add_two": native["add_two"], "lcb_sum": lcb["sample_sum"], "sorted_unique": he["Sample/2"]}


def slow_reference(problem: CodeProblem, seconds: float) -> CodeProblem:
    """`problem` with a reference solution that sleeps `seconds` per call (a slow machine, in effect)."""
    from dataclasses import replace

    slow = f"import time\ndef {problem.entry_point}(a, b):\n    time.sleep({seconds})\n    return a + b\n"
    return replace(problem, solution=slow)
