"""Agent mode: a tool-calling policy edits a workspace and calls compile / verify / profile itself.

As in CUDA Agent, the workspace holds the reference `model.py` (read-only), the candidate
`model_new.py` and a SKILL document stating the rules; each turn is one tool call written as JSON,
`{"tool": "write_file", "args": {"path": "model_new.py", "content": "..."}}`, and the feedback is the
tool's output. `submit` profiles the candidate and ends the episode; its reward is the episode's.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, replace
from importlib import resources

from tempering.envs.base import Env, StepResult
from tempering.envs.kernels.env import (
    KernelFamily,
    SketchFamily,
    failure_value,
    result_info,
    warm_start_sketch,
)
from tempering.envs.kernels.feedback import feedback
from tempering.envs.kernels.problems import Problem
from tempering.envs.kernels.sketch import orders, spec_for
from tempering.envs.kernels.verifier import KernelResult
from tempering.types import Task

TOOLS = ("read_file", "write_file", "compile", "verify", "profile", "submit")
WRITABLE = "model_new.py"


def skill_document() -> str:
    return resources.files("tempering.envs.kernels").joinpath("SKILL.md").read_text()


def parse_tool_call(text: str) -> tuple[str, dict]:
    """(tool, args) from the first JSON object in `text`; ValueError with what is wrong."""
    start = text.find("{")
    if start < 0:
        raise ValueError('no tool call: write one JSON object like {"tool": "verify", "args": {}}')
    try:
        obj, _ = json.JSONDecoder().raw_decode(text[start:])
    except json.JSONDecodeError as e:
        raise ValueError(f"the tool call is not valid JSON: {e.msg} at char {e.pos}") from None
    tool, args = (
        obj.get("tool") if isinstance(obj, dict) else None,
        obj.get("args", {}) if isinstance(obj, dict) else {},
    )
    if tool not in TOOLS:
        raise ValueError(f"unknown tool {tool!r}: use one of {', '.join(TOOLS)}")
    if not isinstance(args, dict):
        raise ValueError("args must be a JSON object")
    return tool, args


class KernelWorkspace:
    """The files of one agent episode."""

    def __init__(self, problem: Problem):
        self.files = {"model.py": problem.source, "SKILL.md": skill_document(), WRITABLE: ""}

    def read(self, path: str) -> str:
        if path not in self.files:
            raise ValueError(f"no file {path!r} (files: {', '.join(self.files)})")
        return self.files[path] or "(empty)"

    def write(self, path: str, content: object) -> str:
        """`content` as the tool call gave it: anything but a string is refused."""
        if path != WRITABLE:
            raise ValueError(f"{path} is read-only: only {WRITABLE} can be written")
        if not isinstance(content, str):
            raise ValueError("content must be a string")
        self.files[WRITABLE] = content
        return f"wrote {len(content)} characters to {WRITABLE}"


class KernelAgentEnv(Env):
    """One agent episode: each step runs one tool call."""

    def __init__(self, task: Task, family: KernelFamily):
        super().__init__(task)
        self.family = family
        self.problem: Problem = task.meta["problem"]
        self.workspace = KernelWorkspace(self.problem)
        self.last_score = failure_value(family.reward)

    async def step(self, action: str) -> StepResult:
        fam = self.family
        try:
            tool, args = parse_tool_call(action)
            if tool == "read_file":
                return self._plain(self.workspace.read(str(args.get("path", ""))), "tool:read_file")
            if tool == "write_file":
                return self._plain(
                    self.workspace.write(str(args.get("path", "")), args.get("content")), "tool:write_file"
                )
        except ValueError as e:
            return self._plain(f"Tool error: {e}", "tool_error")
        code = self.workspace.files[WRITABLE]
        if not code.strip():
            return self._plain(f"Tool error: {WRITABLE} is empty; write it first", "tool_error")
        mode = {"compile": "compile", "verify": "verify"}.get(tool, "profile")
        res = await fam.verifier.verify(self.problem, code, mode=mode)
        text = feedback(res) if tool != "compile" or not res.compiled else f"Compiled.\n{res.compile_log}".strip()
        if tool in ("profile", "submit"):
            self.last_score = res.score if fam.reward == "score" else res.reward(fam.reward)
        done = tool == "submit"
        success = done and res.correct and res.cuda_agent_reward >= fam.success_reward
        return StepResult(
            score=self.last_score,
            success=success,
            done=done,
            feedback=text,
            status=res.status,
            info=result_info(res, {"tool": tool}),
        )

    def _plain(self, text: str, status: str) -> StepResult:
        return StepResult(score=self.last_score, success=False, done=False, feedback=text, status=status)


@dataclass
class KernelAgentFamily(KernelFamily):
    """KernelFamily in agent mode: the prompt is the SKILL document plus the problem; answers are tool calls."""

    name: str = "kernel_agent"

    def make_task(self, problem: Problem, rng=None) -> Task:
        prompt = (
            f"{skill_document()}\n\n## model.py\n```python\n{problem.source.rstrip()}\n```\n\n"
            'Answer with one tool call per turn, e.g. {"tool": "write_file", "args": {"path": "model_new.py", '
            '"content": "..."}}.'
        )
        return Task(
            id=f"{self.name}:{problem.name}",
            prompt=prompt,
            answer=problem.name,
            family=self.name,
            meta={"problem": problem},
        )

    def make_env(self, task: Task) -> Env:
        return KernelAgentEnv(task, self)


SKETCH_TOOLS = ("verify", "profile", "submit")


def _first_line(text: str, limit: int = 80) -> str:
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return line[:limit]


def tool_feedback(tool: str, res: KernelResult) -> str:
    """Short tool output for a tiny model's context: correctness, or the speedups and the reward."""
    if not res.correct:
        return f"{res.status}: {_first_line(res.message)}".rstrip(": ")
    if tool == "verify":
        return "verified"
    sp = lambda x: f"{x:.2f}x" if x else "?"
    return f"{sp(res.speedup_eager)} eager {sp(res.speedup_compile)} compile reward {res.cuda_agent_reward}"


class SketchAgentEnv(Env):
    """One agent episode over a kernel sketch: each turn is `TOOL SKETCH`; `submit` ends it."""

    def __init__(self, task: Task, family: SketchAgentFamily):
        super().__init__(task)
        self.family = family

    async def step(self, action: str) -> StepResult:
        fam = self.family
        fail = failure_value(fam.reward)
        tool, _, sketch = _first_line(action, 400).partition(" ")
        if tool not in SKETCH_TOOLS:
            msg = f"unknown tool {tool!r}: write verify, profile or submit, then a sketch"
            return StepResult(score=fail, success=False, done=False, feedback=msg, status="tool_error")
        problem: Problem = self.task.meta["problem"]
        text, error, extra = fam.to_submission(problem, sketch)
        if text is None:
            return StepResult(score=fail, success=False, done=False, feedback=error, status="parse_error", info=extra)
        res = await fam.verify_submission(problem, text)
        info = result_info(res, {**extra, "tool": tool})
        if tool != "submit":
            return StepResult(fail, False, False, tool_feedback(tool, res), res.status, info)
        value = res.score if fam.reward == "score" else res.reward(fam.reward)
        success = res.correct and res.cuda_agent_reward >= fam.success_reward
        return StepResult(value, success, True, tool_feedback(tool, res), res.status, info)


@dataclass
class SketchAgentFamily(SketchFamily):
    """The kernel-sketch family in agent mode, for the built-in tiny models (CUDA Agent's loop in small).

    Each turn is one tool call on one line, `TOOL SKETCH`: `verify` checks correctness, `profile` also
    times the kernel against eager PyTorch and torch.compile and reports the CUDA Agent reward, `submit`
    profiles it and ends the episode with that reward. Only a submission is rewarded: an episode that
    never submits gets the failure value. An unknown tool is an invalid tool call (`tool_error`), a bad
    sketch a schema error (`parse_error`); feedback is one short line.
    """

    reward: str = "cuda_agent"
    name: str = "kernel_sketch_agent"

    def make_task(self, problem: Problem, rng=None) -> Task:
        task = super().make_task(problem, rng)
        spec = spec_for(problem.name)
        assert spec is not None  # the family accepts only problems with a sketch spec
        short = problem.name.split("_", 1)[1]
        rng = rng or random.Random(0)
        tool = rng.choice(("profile", "submit"))
        return replace(
            task,
            prompt=f"agent {short} {spec.kind} loops={'|'.join(orders(spec.kind))} tools={'|'.join(SKETCH_TOOLS)}:",
            answer=f"{tool} {warm_start_sketch(spec.kind, rng, self.answer_keys)}",
        )

    def make_env(self, task: Task) -> Env:
        return SketchAgentEnv(task, self)
