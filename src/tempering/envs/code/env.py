"""The code-task environment: write a Python function, the sandbox runs its unit tests.

`grade` runs a candidate against a problem's tests in the sandbox (through `judge.py`, which keeps
the expected values away from the candidate) and `CodeEnv` wraps it as a multi-turn episode: after a
failing answer the policy sees the first failing test, what its code returned or the last lines of
the error, and may try again until `max_turns`.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from dataclasses import dataclass, field
from pathlib import Path

from tempering.envs.base import Env, StepResult, TaskFamily
from tempering.envs.code.problems import BUILTIN, CodeProblem, load_problems
from tempering.errors import UserError
from tempering.sandbox import Job, Limits, Result, Sandbox
from tempering.types import Task

JUDGE = (Path(__file__).with_name("judge.py")).read_text()
INSTRUCTION = (
    "Complete the Python function below so that it does what its docstring says. "
    "Reply with the whole function in a ```python code block.\n\n"
)
_FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)```", re.S | re.I)


def extract_code(answer: str, problem: CodeProblem) -> str:
    """The code in an answer: the last fenced block, else the whole text. A body without the
    function's `def` line is read as a completion of the prompt (HumanEval style)."""
    blocks = _FENCE.findall(answer)
    code = blocks[-1] if blocks else answer
    if not code.strip():
        return ""
    if not re.search(rf"^\s*def\s+{re.escape(problem.entry_point)}\s*\(", code, re.M):
        code = problem.prompt + code
    return code


@dataclass
class Grade:
    """How one candidate did on one problem."""

    passed: int
    """Tests passed."""
    total: int
    """Tests run."""
    status: str
    """correct, incorrect, runtime_error, parse_error, timeout or sandbox_error."""
    feedback: str
    """Text for the next turn: the first failing test and what went wrong."""
    results: list[dict] = field(default_factory=list)
    """Per test: passed, got (repr of the value), error (last lines of the traceback)."""
    sandbox: Result | None = None
    """The judge job's raw result."""

    @property
    def fraction(self) -> float:
        return self.passed / self.total if self.total else 0.0


def _clip(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 15] + "\n...(truncated)"


def judge_job(problem: CodeProblem, code: str) -> Job:
    """The sandbox job that tests `code`: the judge reads the tests from stdin, never from disk."""
    spec = {
        "entry_point": problem.entry_point,
        "test_timeout_s": problem.test_timeout_s,
        "float_tol": problem.float_tol,
        "tests": [{"expr": t.expr, "expected": t.expected} for t in problem.tests],
    }
    wall = 10.0 + problem.test_timeout_s * (len(problem.tests) + 2)
    return Job(
        cmd=["python3", "-I", "judge.py"],
        files={"solution.py": code},
        readonly_files={"judge.py": JUDGE},
        stdin=json.dumps(spec),
        env={"OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"},
        limits=Limits(wall_s=wall, cpu_s=wall, memory_mb=1024, nproc=32, output_bytes=256 * 1024),
    )


async def grade(sandbox: Sandbox, problem: CodeProblem, answer: str, max_feedback_chars: int = 800) -> Grade:
    """Run `answer`'s code against every test of `problem`; never raises for a bad answer."""
    total = len(problem.tests)
    code = extract_code(answer, problem)
    if not code:
        return Grade(0, total, "parse_error", "No code found: reply with the function in a ```python block.")
    res = await sandbox.run(judge_job(problem, code))
    try:
        report = json.loads(res.stdout) if res.status == "ok" else None
        results = report["results"] if report else None
    except (ValueError, KeyError, TypeError):
        results = None
    if results is None:
        if res.status in ("timeout", "sandbox_error"):
            return Grade(0, total, res.status, f"The tests did not finish ({res.status}: {res.message}).", sandbox=res)
        # the judge died or said nothing: the candidate's code killed or starved it
        why = f"The test judge ended without a report ({res.status}: {res.message}); do not kill or flood it."
        return Grade(0, total, "runtime_error", why, sandbox=res)
    passed = sum(bool(r.get("passed")) for r in results)
    if report.get("load_error"):
        err = report["load_error"]
        status = "parse_error" if "SyntaxError" in err or "IndentationError" in err else "runtime_error"
        feedback = "Your code failed to load:\n" + _clip(err, max_feedback_chars)
        return Grade(0, total, status, feedback, results, res)
    if passed == total:
        return Grade(passed, total, "correct", f"All {total} tests passed.", results, res)
    k = next(i for i, r in enumerate(results) if not r.get("passed"))
    first = results[k]
    head = f"{passed}/{total} tests passed. First failing test:\n{problem.tests[k].text}\n"
    if first.get("error"):
        status = "timeout" if first["error"].startswith("no answer within") else "runtime_error"
        feedback = head + "Error:\n" + first["error"]
    else:
        status = "incorrect"
        feedback = head + f"Your function returned: {first.get('got', '')}"
    return Grade(passed, total, status, _clip(feedback, max_feedback_chars), results, res)


def problem_task(problem: CodeProblem) -> Task:
    return Task(
        id=f"code/{problem.id}",
        prompt=INSTRUCTION + problem.prompt,
        answer=problem,
        family="code",
        difficulty=float(problem.difficulty),
        meta={"entry_point": problem.entry_point, "num_tests": len(problem.tests)},
    )


class CodeEnv(Env):
    """One episode of one code problem; each `step` grades an answer in the sandbox."""

    def __init__(
        self, task: Task, sandbox: Sandbox, reward: str = "all", max_turns: int = 1, max_feedback_chars: int = 800
    ):
        super().__init__(task)
        if not isinstance(task.answer, CodeProblem):
            raise UserError(f"task {task.id!r} is not a code problem (its answer must be a CodeProblem).")
        self.sandbox, self.reward, self.max_turns = sandbox, reward, max_turns
        self.max_feedback_chars = max_feedback_chars
        self.turn = 0

    async def step(self, action: str) -> StepResult:
        self.turn += 1
        g = await grade(self.sandbox, self.task.answer, action, self.max_feedback_chars)
        success = g.status == "correct"
        score = g.fraction if self.reward == "fraction" else float(success)
        return StepResult(
            score=score,
            success=success,
            done=success or self.turn >= self.max_turns,
            feedback=g.feedback,
            status=g.status,
            info={"passed": g.passed, "total": g.total, "wall_s": g.sandbox.wall_s if g.sandbox else 0.0},
        )


@dataclass
class CodeTaskFamily(TaskFamily):
    """Python function-completion problems with unit tests (the built-in set or a JSONL file)."""

    problems_path: str = ""
    """JSONL file of problems (see tempering.envs.code.problems); empty: the built-in set."""
    reward: str = "all"
    """`all`: 1 when every test passes, else 0. `fraction`: the share of tests passed."""
    max_turns: int = 1
    """Answers per episode; after a failure the policy sees the first failing test."""
    heldout_share: float = 0.2
    """Share of problems reserved for the held-out split (chosen by a hash of the id)."""
    max_difficulty: int = 5
    """Leave out problems harder than this."""
    backend: str = "auto"
    """Sandbox backend (see tempering.sandbox.Sandbox)."""
    concurrency: int | None = None
    """Test runs at once (default: CPU cores)."""
    name: str = "code"

    def __post_init__(self) -> None:
        if self.reward not in ("all", "fraction"):
            raise UserError(f"code: reward must be 'all' or 'fraction', got {self.reward!r}.")
        if not isinstance(self.max_turns, int) or self.max_turns < 1:
            raise UserError(f"code: max_turns must be a positive integer, got {self.max_turns!r}.")
        if not 0.0 < self.heldout_share < 1.0:
            raise UserError(f"code: heldout_share must be in (0, 1), got {self.heldout_share!r}.")
        self.problems = [p for p in load_problems(self.problems_path or BUILTIN) if p.difficulty <= self.max_difficulty]
        if not self.problems:
            raise UserError(f"code: no problem has difficulty <= {self.max_difficulty}.")
        self._sandbox: Sandbox | None = None

    @property
    def sandbox(self) -> Sandbox:
        """One sandbox shared by every episode of the family (made on first use)."""
        if self._sandbox is None:
            self._sandbox = Sandbox(backend=self.backend, concurrency=self.concurrency)
        return self._sandbox

    def split_of(self, problem: CodeProblem) -> str:
        h = int(hashlib.sha256(problem.id.encode()).hexdigest()[:8], 16) / 16**8
        return "heldout" if h < self.heldout_share else "train"

    def tasks(self, split: str, n: int, seed: int = 0) -> list[Task]:
        """`n` tasks of `split`, shuffled by `seed`, cycling through the split when n exceeds it."""
        if split not in ("train", "heldout"):
            raise UserError(f"code: split must be 'train' or 'heldout', got {split!r}.")
        pool = sorted((p for p in self.problems if self.split_of(p) == split), key=lambda p: p.id)
        if not pool:
            raise UserError(f"code: the {split} split is empty; change heldout_share or add problems.")
        random.Random(seed).shuffle(pool)
        return [problem_task(pool[i % len(pool)]) for i in range(n)]

    def make_env(self, task: Task) -> CodeEnv:
        return CodeEnv(task, self.sandbox, reward=self.reward, max_turns=self.max_turns)
