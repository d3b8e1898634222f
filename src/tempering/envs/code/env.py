"""The code-task environment: the sandbox runs a problem's tests against the policy's code.

`grade` runs one answer in the sandbox (through `judge.py`, which keeps the tests away from the
candidate) and `CodeEnv` wraps it as a multi-turn episode. The reward comes from the problem's
tests, which the policy never sees; feedback for the next turn comes only from its public tests
(examples the prompt already shows), so a policy cannot read expected values off the feedback and
hard-code them. `name_hidden_failure` adds the number and kind of the first failing hidden test
(wrong answer, error type, timeout), never its input or expected value.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from dataclasses import dataclass, field
from pathlib import Path

from tempering.envs.base import Env, StepResult, TaskFamily
from tempering.envs.code.formats import load_problems
from tempering.envs.code.problems import BUILTIN, FORMATS, CodeProblem
from tempering.errors import UserError
from tempering.sandbox import Job, Limits, Result, Sandbox
from tempering.types import Task

JUDGE = (Path(__file__).with_name("judge.py")).read_text()
_FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)```", re.S | re.I)
NO_CODE = "No code found: reply with the code in a ```python block."
SPLITS = ("train", "heldout", "all")
_HIDDEN_KIND = {"incorrect": "wrong answer", "timeout": "time limit exceeded", "not_run": "not run"}


def extract_code(answer: str) -> str:
    """The code of an answer: its last fenced block, else the whole text ("" when there is none)."""
    blocks = _FENCE.findall(answer)
    code = blocks[-1] if blocks else answer
    return code if code.strip() else ""


@dataclass
class Grade:
    """How one answer did on one problem."""

    passed: int
    """Tests passed (of the tests that decide the reward)."""
    total: int
    """Tests that decide the reward."""
    status: str
    """correct, incorrect, runtime_error, parse_error, timeout, problem_error or sandbox_error."""
    feedback: str
    """Text for the next turn, built from the public tests only."""
    results: list[dict] = field(default_factory=list)
    """Per reward test: passed, status, got, expected, error, error_type (for people, never the policy)."""
    public_results: list[dict] | None = None
    """Per public test, when they were run (for feedback)."""
    sandbox: Result | None = None
    """The judge job's raw result."""

    @property
    def fraction(self) -> float:
        return self.passed / self.total if self.total else 0.0

    @property
    def detail(self) -> str:
        """The first failure in words, expected value included (for reports, never for the policy)."""
        for i, r in enumerate(self.results):
            if not r.get("passed"):
                what = r.get("error") or f"got {r.get('got', '')}, expected {r.get('expected', '')}"
                return f"test {i + 1}: {r.get('status')}: {what}"
        return "" if self.status == "correct" else self.feedback


def _clip(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 15] + "\n...(truncated)"


def judge_job(problem: CodeProblem, program: str, run_public: bool = False, stop_at_timeout: bool = True) -> Job:
    """The sandbox job that tests `program`: the judge reads the tests from stdin, never from disk."""
    spec = {
        "kind": problem.kind,
        "entry_point": problem.entry_point,
        "prefix": problem.prefix,
        "setup": problem.setup,
        "tests": [t.spec() for t in problem.tests],
        "public": [t.spec() for t in problem.public_tests],
        "run_public": run_public,
        "test_timeout_s": problem.test_timeout_s,
        "time_budget_s": problem.time_budget_s,
        "stop_at_timeout": stop_at_timeout,
    }
    wall = problem.time_budget_s * (2 if run_public else 1) + 15.0
    return Job(
        cmd=["python3", "-I", "judge.py"],
        files={"solution.py": program},
        readonly_files={"judge.py": JUDGE},
        stdin=json.dumps(spec),
        env={"OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"},
        limits=Limits(wall_s=wall, cpu_s=wall, memory_mb=1024, nproc=32, output_bytes=1 << 21),
    )


def _describe(result: dict, kind: str) -> str:
    """What went wrong in one public test, for the policy."""
    if result["status"] == "incorrect" and (result.get("got") or not result.get("error")):
        return ("Your program printed:\n" if kind == "program" else "Your code gave: ") + result.get("got", "")
    return result.get("error", "")


def feedback(problem: CodeProblem, grade: Grade, name_hidden_failure: bool = False) -> str:
    """Feedback on a failed answer: the first failing public test, or that the hidden tests fail."""
    public = problem.public_tests
    if grade.public_results is None:
        text = "The answer is not accepted."
    elif not public:
        text = "Your code does not pass the hidden tests (this problem shows no example tests)."
    else:
        failing = [(t, r) for t, r in zip(public, grade.public_results) if not r["passed"]]
        if failing:
            test, res = failing[0]
            text = (
                f"{len(public) - len(failing)}/{len(public)} example tests pass. First failing example:\n"
                f"{test.text}\n{_describe(res, problem.kind)}"
            )
        else:
            text = f"Your code passes the {len(public)} example tests, but not the hidden tests."
    if name_hidden_failure:
        k, res = next((i, r) for i, r in enumerate(grade.results) if not r["passed"])
        kind = _HIDDEN_KIND.get(res["status"], res["status"].replace("_", " "))
        if res["status"] == "runtime_error" and res.get("error_type"):
            kind += f" ({res['error_type']})"
        text += f"\nHidden test {k + 1} of {grade.total} fails: {kind}."
    return text


async def grade(
    sandbox: Sandbox,
    problem: CodeProblem,
    answer: str,
    *,
    public: bool = False,
    name_hidden_failure: bool = False,
    stop_at_timeout: bool = True,
    max_feedback_chars: int = 800,
) -> Grade:
    """Run `answer`'s code against `problem`'s tests; never raises for a bad answer. `public`: also
    run the public tests, for feedback (needed only when the policy gets another turn)."""
    total = len(problem.tests)
    code = extract_code(answer)
    if not code:
        return Grade(0, total, "parse_error", NO_CODE)
    res = await sandbox.run(judge_job(problem, problem.program(code), public, stop_at_timeout))
    try:
        report = json.loads(res.stdout) if res.status == "ok" else None
        results = report["results"] if report and len(report["results"]) == total else None
    except (ValueError, KeyError, TypeError):
        results = None
    if results is None:
        if res.status in ("timeout", "sandbox_error"):
            return Grade(0, total, res.status, f"The tests did not finish ({res.status}: {res.message}).", sandbox=res)
        # the judge died or said nothing: the candidate's code killed or starved it
        why = f"The test judge ended without a report ({res.status}: {res.message}); do not kill or flood it."
        return Grade(0, total, "runtime_error", why, sandbox=res)
    assert report is not None  # the results came from it
    passed = sum(bool(r.get("passed")) for r in results)
    if report.get("load_status"):
        what = "The problem's own code" if report["load_status"] == "problem_error" else "Your code"
        text = f"{what} failed to load:\n" + str(report.get("load_error", ""))
        return Grade(0, total, report["load_status"], _clip(text, max_feedback_chars), results, None, res)
    public_results = report.get("public") if public else None
    if passed == total:
        return Grade(passed, total, "correct", f"All {total} tests passed.", results, public_results, res)
    status = next(r["status"] for r in results if not r["passed"])
    g = Grade(passed, total, status, "", results, public_results, res)
    g.feedback = _clip(feedback(problem, g, name_hidden_failure), max_feedback_chars)
    return g


def problem_task(problem: CodeProblem) -> Task:
    """The task a policy sees for one problem (its answer field holds the problem)."""
    return Task(
        id=f"code/{problem.id}",
        prompt=problem.prompt,
        answer=problem,
        family="code",
        difficulty=float(problem.difficulty),
        meta={"entry_point": problem.entry_point, "num_tests": len(problem.tests), "format": problem.format},
    )


class CodeEnv(Env):
    """One episode of one code problem; each `step` grades an answer in the sandbox."""

    def __init__(
        self,
        task: Task,
        sandbox: Sandbox,
        reward: str = "all",
        max_turns: int = 1,
        max_feedback_chars: int = 800,
        name_hidden_failure: bool = False,
        stop_at_timeout: bool = True,
    ):
        super().__init__(task)
        if not isinstance(task.answer, CodeProblem):
            raise UserError(f"task {task.id!r} is not a code problem (its answer must be a CodeProblem).")
        self.sandbox, self.reward, self.max_turns = sandbox, reward, max_turns
        self.max_feedback_chars = max_feedback_chars
        self.name_hidden_failure, self.stop_at_timeout = name_hidden_failure, stop_at_timeout
        self.turn = 0

    async def step(self, action: str) -> StepResult:
        self.turn += 1
        last = self.turn >= self.max_turns
        g = await grade(
            self.sandbox,
            self.task.answer,
            action,
            public=not last,
            name_hidden_failure=self.name_hidden_failure,
            stop_at_timeout=self.stop_at_timeout,
            max_feedback_chars=self.max_feedback_chars,
        )
        success = g.status == "correct"
        score = g.fraction if self.reward == "fraction" else float(success)
        return StepResult(
            score=score,
            success=success,
            done=success or last,
            feedback=g.feedback,
            status=g.status,
            info={"passed": g.passed, "total": g.total, "wall_s": g.sandbox.wall_s if g.sandbox else 0.0},
        )


@dataclass
class CodeTaskFamily(TaskFamily):
    """Code problems with tests: the built-in set, or a local HumanEval, MBPP, LiveCodeBench or
    native file (see tempering.envs.code.problems)."""

    problems_path: str = ""
    """Problem file (JSONL, JSON array, or gzipped); empty: the built-in set."""
    format: str = "auto"
    """auto (told by the fields), native, humaneval, mbpp or livecodebench."""
    reward: str = "all"
    """`all`: 1 when every test passes, else 0. `fraction`: the share of tests passed."""
    max_turns: int = 1
    """Answers per episode; after a failure the policy sees the first failing public test."""
    name_hidden_failure: bool = False
    """Multi-turn feedback also names the first failing hidden test (number and kind, not its values)."""
    stop_at_timeout: bool = True
    """The first test that times out ends the answer's run (the rest count as failed)."""
    test_timeout_s: float | None = None
    """Seconds per test, for every problem (default: each problem's own)."""
    time_budget_s: float | None = None
    """Seconds for all the tests of one answer, for every problem (default: each problem's own)."""
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
        if self.name_hidden_failure and self.max_turns == 1:
            raise UserError("code: name_hidden_failure shapes multi-turn feedback; set max_turns > 1 or drop it.")
        if not 0.0 < self.heldout_share < 1.0:
            raise UserError(f"code: heldout_share must be in (0, 1), got {self.heldout_share!r}.")
        if self.format not in FORMATS:
            raise UserError(f"code: format must be one of {', '.join(FORMATS)}, got {self.format!r}.")
        problems = load_problems(self.problems_path or BUILTIN, self.format, self.test_timeout_s, self.time_budget_s)
        self.problems = [p for p in problems if p.difficulty <= self.max_difficulty]
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

    def pool(self, split: str) -> list[CodeProblem]:
        """The problems of `split` (`all`: every problem, for scoring a whole benchmark), by id."""
        if split not in SPLITS:
            raise UserError(f"code: split must be one of {', '.join(SPLITS)}, got {split!r}.")
        return sorted((p for p in self.problems if split == "all" or self.split_of(p) == split), key=lambda p: p.id)

    def split_size(self, split: str) -> int:
        return len(self.pool(split))

    def tasks(self, split: str, n: int, seed: int = 0) -> list[Task]:
        """`n` tasks of `split`, shuffled by `seed`. Training cycles through its split (epochs); the
        heldout and all splits give each problem at most once (fewer than `n` if the split is smaller)."""
        pool = self.pool(split)
        if not pool:
            raise UserError(f"code: the {split} split is empty; change heldout_share or add problems.")
        random.Random(seed).shuffle(pool)
        if split != "train":
            return [problem_task(p) for p in pool[:n]]
        return [problem_task(pool[i % len(pool)]) for i in range(n)]

    def make_env(self, task: Task) -> CodeEnv:
        return CodeEnv(
            task,
            self.sandbox,
            reward=self.reward,
            max_turns=self.max_turns,
            name_hidden_failure=self.name_hidden_failure,
            stop_at_timeout=self.stop_at_timeout,
        )
