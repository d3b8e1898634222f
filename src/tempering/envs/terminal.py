"""Terminal tasks over Harbor bundles: the policy issues shell commands, sees their output, and the
bundle's tests decide the reward at the end.

Each turn the policy answers with one shell command (a ```bash block, or the whole answer); the command
runs in the task's working directory inside the sandbox, and its output and exit code come back as
feedback. The answer `submit` (or reaching `max_commands`) runs tests/test.sh: the reward it writes is
the episode's score. State (files, folders, modes) carries over between commands; a command that hits
its time limit is stopped and its changes up to then are kept.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from tempering.envs.base import Env, StepResult, TaskFamily
from tempering.errors import UserError
from tempering.synth.bundle import Bundle
from tempering.synth.workspace import NeedsDocker, Workspace, local_image
from tempering.types import Task

PROTOCOL = (
    "\n\nYou work in a Linux shell, in the task's working directory. Answer each turn with exactly one shell "
    "command in a ```bash block; you will see its output. Answer `submit` when you are done: the tests then run."
)
_FENCE = re.compile(r"```(?:bash|sh|shell)?\s*\n(.*?)```", re.S)


def parse_command(text: str) -> str | None:
    """The command in an answer: the first fenced block, else the whole answer; None when empty."""
    m = _FENCE.search(text)
    cmd = (m.group(1) if m else text).strip()
    return cmd or None


def bundle_task(bundle: Bundle) -> Task:
    return Task(
        id=f"terminal:{bundle.name}",
        prompt=bundle.instruction.strip() + PROTOCOL,
        answer=None,
        family="terminal",
        difficulty={"easy": 1.0, "medium": 2.0, "hard": 3.0}.get(bundle.metadata.get("difficulty"), 0.0),
        meta={"bundle": bundle, "skills": sorted(bundle.skills)},
    )


class TerminalEnv(Env):
    """One episode of one bundle."""

    def __init__(
        self, task: Task, sandbox, max_commands: int = 10, command_timeout_s: float = 30.0, feedback_chars: int = 2000
    ):
        super().__init__(task)
        self.bundle: Bundle = task.meta["bundle"]
        try:
            image = local_image(self.bundle)
        except NeedsDocker as e:
            raise UserError(f"bundle {self.bundle.name} cannot run in the local sandbox: {e}") from None
        self.ws = Workspace(sandbox, image, memory_mb=self.bundle.config.environment.memory_mb)
        self.max_commands = max_commands
        self.command_timeout_s = command_timeout_s
        self.feedback_chars = feedback_chars
        self.commands = 0

    async def step(self, action: str) -> StepResult:
        cmd = parse_command(action)
        if cmd is None:
            return StepResult(
                0.0,
                False,
                False,
                "No command found: answer with one shell command in a ```bash block, or `submit`.",
                "parse_error",
            )
        if cmd.lower() == "submit":
            return await self._finish()
        self.commands += 1
        run = await self.ws.run(cmd + "\n", self.command_timeout_s)
        out = run.output
        if len(out) > self.feedback_chars:
            out = out[: self.feedback_chars // 2] + "\n[...]\n" + out[-self.feedback_chars // 2 :]
        code = "timed out" if run.exit_code == 124 else f"exit {run.exit_code}"
        feedback = f"{out.rstrip()}\n[{code}]" if out.strip() else f"[{code}]"
        if run.exit_code is None:
            feedback = f"[the command could not run: {run.status}]"
        if self.commands >= self.max_commands:
            result = await self._finish()
            result.feedback = feedback + "\n[command limit reached; tests ran]"
            return result
        return StepResult(
            0.0, False, False, feedback, "timeout" if run.exit_code == 124 else "ok", {"exit_code": run.exit_code}
        )

    async def _finish(self) -> StepResult:
        reward, run = await self.ws.run_tests(self.bundle)
        score = 0.0 if reward is None else max(0.0, min(1.0, reward))
        status = "correct" if score >= 1 else ("env_error" if reward is None else "incorrect")
        return StepResult(score, score >= 1, True, "", status, {"reward": reward, "commands": self.commands})


class TerminalFamily(TaskFamily):
    """Bundles from a folder (or the built-in seeds) as terminal tasks; ~20% held out by name hash."""

    name = "terminal"

    def __init__(
        self,
        bundles: str = "builtin",
        heldout_share: float = 0.2,
        max_commands: int = 10,
        command_timeout_s: float = 30.0,
        sandbox_backend: str = "auto",
    ):
        from tempering.synth.seeds import load_seeds

        self.bundles = [s.bundle for s in load_seeds(bundles if bundles == "builtin" else Path(bundles))]
        self.heldout_share = heldout_share
        self.max_commands = max_commands
        self.command_timeout_s = command_timeout_s
        self.sandbox_backend = sandbox_backend
        self._sandbox = None

    def _heldout(self, b: Bundle) -> bool:
        h = int.from_bytes(hashlib.blake2b(b.name.encode(), digest_size=8).digest(), "big")
        return (h % 10_000) < self.heldout_share * 10_000

    def tasks(self, split: str, n: int, seed: int = 0) -> list[Task]:
        if split not in ("train", "heldout"):
            raise UserError(f"unknown split {split!r}; use train or heldout")
        pool = [b for b in self.bundles if self._heldout(b) == (split == "heldout")]
        if len(pool) < n:
            raise UserError(f"terminal: only {len(pool)} {split} bundles (asked for {n}); add bundles or ask for fewer")
        return [bundle_task(b) for b in pool[:n]]

    def make_env(self, task: Task) -> TerminalEnv:
        if self._sandbox is None:
            from tempering.sandbox import Sandbox

            self._sandbox = Sandbox(backend=self.sandbox_backend)
        return TerminalEnv(task, self._sandbox, self.max_commands, self.command_timeout_s)
