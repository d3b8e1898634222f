"""The code-task environment: the sandbox runs a problem's tests against the policy's code.

`grade` judges one answer (the judge in a sandbox job of its own, the candidate in others: see
judge.py and channel.py) and `CodeEnv` wraps it as a multi-turn episode. The reward comes from the
problem's tests, which the policy never sees; feedback for the next turn comes only from its public
tests (examples the prompt already shows), run before any hidden test, so a policy cannot read
expected values or hidden inputs off the feedback. `name_hidden_failure` adds the number and kind of
the first failing hidden test (wrong answer, error type, timeout), never its input or expected value.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import re
from dataclasses import dataclass, field
from typing import ClassVar

from tempering.envs.base import Env, StepResult, TaskFamily
from tempering.envs.code import channel
from tempering.envs.code.channel import Verdict
from tempering.envs.code.formats import load_problems
from tempering.envs.code.problems import BUILTIN, FORMATS, CodeProblem, Test
from tempering.errors import UserError
from tempering.sandbox import Result, Sandbox
from tempering.types import Task

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
    public_status: str = ""
    """The status the public tests give (their load error, the first failing one's, `incorrect` when
    they pass): all a policy may be told on a turn that continues."""

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


def judge_spec(
    problem: CodeProblem, program: str, run_public: bool, stop_at_timeout: bool, limits: TimeLimits | None = None
) -> dict:
    """What the judge reads: the tests (never on disk, never in a candidate's job) and the limits."""
    limits = limits or TimeLimits.of(problem)
    timeout = {_key(t): s for t, s in zip(problem.tests, limits.test_s)}

    def spec(test: Test) -> dict:
        return {**test.spec(), "timeout_s": timeout.get(_key(test), problem.test_timeout_s)}

    return {
        "kind": problem.kind,
        "entry_point": problem.entry_point,
        "supplied": problem.supplied_names() if problem.kind == "function" else [],
        "prefix": problem.prefix,
        "setup": problem.setup,
        "public_setup": problem.public_setup()[0],
        "reference": problem.program(problem.solution) if problem.solution else "",
        "helpers": problem.reference_helpers() if problem.kind == "function" else "",
        "solution": program,
        "tests": [spec(t) for t in problem.tests],
        "public": [spec(t) for t in problem.public_tests],
        "run_public": run_public,
        "time_budget_s": limits.budget_s,
        "stop_at_timeout": stop_at_timeout,
    }


def _key(test: Test) -> tuple:
    return test.source, test.stdin, test.stdout


@dataclass(frozen=True)
class TimeLimits:
    """The time limits of one problem's tests on this machine."""

    test_s: tuple[float, ...]
    """Seconds per reward test."""
    budget_s: float
    """Seconds for the tests of one phase (public, hidden) together."""

    @staticmethod
    def of(problem: CodeProblem) -> TimeLimits:
        return TimeLimits(tuple(problem.test_timeout_s for _ in problem.tests), problem.time_budget_s)


REFERENCE_SCALE = 3.0
"""A test may take this many times what the reference solution took on it, on this machine."""
REFERENCE_CAP_S = 120.0
"""Seconds per test the reference may take while its times are measured."""
REFERENCE_BUDGETS = 4
"""Times the problem's `time_budget_s` all the reference's tests may take while they are measured."""
_REFERENCE_LIMITS: dict[tuple, TimeLimits | None] = {}
_MEASURING: dict[tuple, asyncio.Future] = {}


async def reference_limits(sandbox: Sandbox, problem: CodeProblem) -> TimeLimits | None:
    """The problem's limits scaled from its reference solution's own time on each test here (the
    problem's own limits are the floor); None when there is no reference or it does not pass. Measured
    once per process and problem (the reference is graded with generous limits)."""
    if not problem.solution:
        return None
    key = (problem.id, problem.solution, tuple(map(_key, problem.tests)), problem.test_timeout_s)
    if key not in _REFERENCE_LIMITS:
        loop = asyncio.get_running_loop()
        pending = _MEASURING.get(key)
        if pending is None or pending.get_loop() is not loop:  # one measurement, however many answers wait
            pending = _MEASURING[key] = asyncio.ensure_future(_measure(sandbox, problem))
        limits = await asyncio.shield(pending)
        _REFERENCE_LIMITS[key] = limits
        _MEASURING.pop(key, None)
    return _REFERENCE_LIMITS[key]


async def _measure(sandbox: Sandbox, problem: CodeProblem) -> TimeLimits | None:
    # generous, and bounded: a reference that hangs costs one test's cap, and the whole run a few budgets
    generous = TimeLimits((REFERENCE_CAP_S,) * len(problem.tests), REFERENCE_BUDGETS * problem.time_budget_s)
    report = (await _judge(sandbox, problem, problem.program(problem.solution), False, True, generous)).report
    if report is None or not all(r.get("passed") for r in report["results"]):
        return None
    test_s = tuple(max(problem.test_timeout_s, REFERENCE_SCALE * r["seconds"]) for r in report["results"])
    return TimeLimits(test_s, max(problem.time_budget_s, sum(test_s)))


async def _judge(
    sandbox: Sandbox, problem: CodeProblem, program: str, public: bool, stop_at_timeout: bool, limits: TimeLimits | None
) -> Verdict:
    spec = judge_spec(problem, program, public, stop_at_timeout, limits)
    wall = spec["time_budget_s"] * (2 if public else 1) + 60.0
    return await channel.judge(sandbox, spec, program, wall)


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
    if name_hidden_failure and grade.results:  # (none when the judge gave no verdict)
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
    run the public tests first, for feedback (needed only when the policy gets another turn). A
    timeout stands only where the reference solution, timed here, does not need the time too: the
    answer is then judged again with limits scaled from the reference's (`reference_limits`)."""
    code = extract_code(answer)
    if not code:
        return Grade(0, len(problem.tests), "parse_error", NO_CODE, public_status="parse_error")
    program = problem.program(code)
    g = _grade_of(problem, await _judge(sandbox, problem, program, public, stop_at_timeout, None), public)
    if g.status == "timeout":
        scaled = await reference_limits(sandbox, problem)
        if scaled is not None and max(scaled.test_s) > problem.test_timeout_s:
            g = _grade_of(problem, await _judge(sandbox, problem, program, public, stop_at_timeout, scaled), public)
    if g.status != "correct":
        g.feedback = _clip(g.feedback or feedback(problem, g, name_hidden_failure), max_feedback_chars)
    return g


def _grade_of(problem: CodeProblem, verdict: Verdict, public: bool) -> Grade:
    """The grade a verdict gives; its feedback comes from the public phase only."""
    total = len(problem.tests)
    report, res = verdict.report, verdict.judge
    shown = verdict.public if public else None
    public_results = shown["results"] if shown else None
    public_status = _public_status(shown)
    loaded = shown or {}
    if loaded.get("load_status"):
        what = "The problem's own code" if loaded["load_status"] == "problem_error" else "Your code"
        said = f"{what} failed to load:\n{loaded.get('load_error', '')}"
    else:
        said = ""
    if report is None or len(report.get("results", ())) != total:
        # no verdict: the judge's job ended first (the candidate's jobs cannot reach it)
        status = res.status if res.status in ("timeout", "sandbox_error") else "judge_error"
        if not said and public_results is None:
            said = f"The judge stopped without a verdict ({res.status}: {res.message})."
        g = Grade(0, total, status, said, [], public_results, res, public_status or status)
        return g
    results = report["results"]
    passed = sum(bool(r.get("passed")) for r in results)
    if passed == total:
        return Grade(passed, total, "correct", f"All {total} tests passed.", results, public_results, res, "correct")
    status = report.get("load_status") or next(r["status"] for r in results if not r["passed"])
    if not public and report.get("load_status"):  # no turn follows: the reward run's own load error, for people
        what = "The problem's own code" if report["load_status"] == "problem_error" else "Your code"
        said = f"{what} failed to load:\n" + str(report.get("load_error", ""))
    return Grade(passed, total, status, said, results, public_results, res, public_status or status)


def _public_status(shown: dict | None) -> str:
    """The status the public tests give (what a policy may be told): their load status, the first
    failing one's, or `incorrect` when they all pass (the hidden tests decide)."""
    if not shown:
        return ""
    if shown.get("load_status"):
        return shown["load_status"]
    return next((r["status"] for r in shown["results"] if not r["passed"]), "incorrect")


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
        # a turn that continues tells only what the public tests give: the hidden run's kind of
        # failure would reach the policy through the feedback templates
        status = g.status if success or last else g.public_status or g.status
        score = g.fraction if self.reward == "fraction" else float(success)
        return StepResult(
            score=score,
            success=success,
            done=success or last,
            feedback=g.feedback,
            status=status,
            info={"passed": g.passed, "total": g.total},
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
    feedback_keys: ClassVar[frozenset[str] | None] = frozenset({"passed", "total"})
    """What feedback templates may show: the reward tests' counts (a summary of the hidden run the
    docs allow). Nothing else about the hidden run reaches the policy: not its time, which an answer
    controls per hidden input."""

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
