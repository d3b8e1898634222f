"""Agent mode: a tool-calling policy edits a workspace and calls compile / verify / profile itself.

As in CUDA Agent, the workspace holds the reference `model.py` (read-only), the candidate
`model_new.py` and a SKILL document stating the rules; each turn is one tool call written as JSON,
`{"tool": "write_file", "args": {"path": "model_new.py", "content": "..."}}`, and the feedback is the
tool's output. `submit` profiles the candidate and ends the episode; its reward is the episode's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources

from tempering.envs.base import Env, StepResult
from tempering.envs.kernels.env import KernelFamily, failure_value, result_info
from tempering.envs.kernels.feedback import feedback
from tempering.envs.kernels.problems import Problem
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

    def write(self, path: str, content: str) -> str:
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
