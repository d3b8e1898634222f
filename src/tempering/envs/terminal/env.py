"""Terminal tasks over Harbor bundles: the policy issues shell commands, sees their output, and the
bundle's tests decide the reward.

Each turn the policy answers with one shell command (a ```bash block, or the whole answer); the command
runs in the task's working folder (/app) inside the sandbox, and its output and exit code come back as
feedback. The answer `submit` (or reaching `max_commands`) runs the tests: the reward they write is the
score. State (files, folders, modes) carries over between commands; a command that hits its time limit
is stopped and its changes up to then are kept. A multi-step task goes on with the next step's
instruction after each step's tests (unless the step's `min_reward` is missed); the episode's score is
the mean of the steps' scores, or the last one's (`multi_step_reward_strategy = "final"`).

Each command is one sandbox job, so what it starts in the background ends with it. `keep_services=True`
runs a step's commands in one job that stays up (`session.Session`): a server the agent starts still
answers the next commands and, on the ports the image declares (Dockerfile EXPOSE), the tests, as in
Harbor's container (needs bwrap or unshare on a root host). The tests reach those ports from a network of their own,
one way: the solution can neither connect to what the tests run nor take a port they bind. Either way the tests run in a job of their own (`Workspace.run_tests`).

The verdict rests on the host's evidence: the reward the tests wrote, or none, which is `incorrect`
whatever the solution did to cause it; `env_error` only when a job could not be set up before anything
of the solution's ran in it (the sandbox's own failure).
"""

from __future__ import annotations

import hashlib
import re
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tempering.envs.base import Env, StepResult, TaskFamily
from tempering.envs.terminal.bundle import Bundle, load_bundles
from tempering.envs.terminal.workspace import NeedsDocker, NeedsNetwork, Workspace
from tempering.errors import UserError
from tempering.types import Task

if TYPE_CHECKING:
    from tempering.envs.terminal.session import Session
    from tempering.sandbox import Sandbox

SAMPLES = Path(__file__).parent / "samples"
"""The built-in bundles: small tasks in Harbor's layout (one step, several steps, reward.json,
a Terminal-Bench 1 folder), all runnable in the local sandbox."""
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
    levels: dict[Any, float] = {"easy": 1.0, "medium": 2.0, "hard": 3.0}  # any metadata value may be looked up
    return Task(
        id=f"terminal:{bundle.name}",
        prompt=bundle.steps[0].instruction.strip() + PROTOCOL,
        answer=None,
        family="terminal",
        difficulty=levels.get(bundle.metadata.get("difficulty"), 0.0),
        meta={"bundle": bundle, "skills": sorted(bundle.skills)},
    )


def local_problem(bundle: Bundle) -> str | None:
    """Why the bundle cannot run in the local sandbox, or None."""
    try:
        Workspace.for_bundle(None, bundle)
    except NeedsNetwork as e:
        return f"needs network: {e}"
    except NeedsDocker as e:
        return f"needs Docker: {e}"
    except UserError as e:
        return str(e)
    return None


def _meets(gate, rewards: dict[str, float] | None) -> bool:
    """Harbor's min_reward: a number gates `reward`, a table gates each named reward (missing = fail)."""
    if gate is None:
        return True
    got = rewards or {}
    gates = {"reward": gate} if isinstance(gate, (int, float)) else gate
    return all(got.get(k, float("-inf")) >= v for k, v in gates.items())


class TerminalEnv(Env):
    """One episode of one bundle."""

    def __init__(
        self,
        task: Task,
        sandbox,
        max_commands: int = 10,
        command_timeout_s: float = 30.0,
        feedback_chars: int = 2000,
        keep_services: bool = False,
        session_wall_s: float = 3600.0,
    ):
        super().__init__(task)
        self.bundle: Bundle = task.meta["bundle"]
        try:
            self.ws = Workspace.for_bundle(sandbox, self.bundle)
        except NeedsDocker as e:
            raise UserError(f"bundle {self.bundle.name} cannot run in the local sandbox: {e}") from None
        self.steps = self.bundle.steps
        self.max_commands = max_commands
        self.command_timeout_s = command_timeout_s
        self.feedback_chars = feedback_chars
        self.current = 0
        """Index of the step being worked on."""
        self.commands = 0
        """Commands in the current step."""
        self.step_scores: list[float] = []
        self.step_rewards: list[dict[str, float] | None] = []
        if keep_services and not self.ws.keeps_services:
            raise UserError(
                f"bundle {self.bundle.name}: keep_services needs jobs that share a network namespace (the bwrap "
                "or unshare backend on a root host); run with keep_services=False, where each command is a job of its own"
            )
        self.keep_services = keep_services
        self.session_wall_s = session_wall_s
        self.session: Session | None = None
        """The step's sandbox job while commands run in one (keep_services)."""

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
            return await self._finish_step()
        self.commands += 1
        if self.keep_services:
            if self.session is None:
                from tempering.envs.terminal.session import Session

                self.session = Session(self.ws, self.steps[self.current], self.session_wall_s)
            run = await self.session.run(cmd + "\n", self.command_timeout_s)
        else:
            run = await self.ws.run(cmd + "\n", self.command_timeout_s)
        out = run.output
        if len(out) > self.feedback_chars:
            out = out[: self.feedback_chars // 2] + "\n[...]\n" + out[-self.feedback_chars // 2 :]
        code = "timed out" if run.exit_code == 124 else f"exit {run.exit_code}"
        feedback = f"{out.rstrip()}\n[{code}]" if out.strip() else f"[{code}]"
        if run.exit_code is None and run.status == "sandbox_error":  # the sandbox failed before the command ran
            return StepResult(
                0.0, False, True, f"[the sandbox could not run the command: {out.strip()[-300:]}]", "env_error"
            )
        if run.exit_code is None:
            feedback = f"[the command could not run: {run.status}]"
        if self.commands >= self.max_commands:
            result = await self._finish_step()
            tail = f"\n\n{result.feedback}" if result.feedback else ""
            result.feedback = feedback + "\n[command limit reached; tests ran]" + tail
            return result
        return StepResult(
            0.0, False, False, feedback, "timeout" if run.exit_code == 124 else "ok", {"exit_code": run.exit_code}
        )

    async def _finish_step(self) -> StepResult:
        step = self.steps[self.current]
        if self.session is not None:
            session, self.session = self.session, None
            rewards, _ = await session.finish()
        else:
            rewards, _ = await self.ws.run_tests(step)
        score = 0.0 if rewards.score is None else rewards.score  # read_rewards keeps only [0, 1]
        self.step_scores.append(score)
        self.step_rewards.append(rewards.values)
        self.current += 1
        self.commands = 0
        if self.current < len(self.steps) and _meets(step.min_reward, rewards.values):
            nxt = self.steps[self.current]
            feedback = f"[step {step.name} done; reward {score:g}]\n\nNext step:\n{nxt.instruction.strip()}"
            return StepResult(0.0, False, False, feedback, "next_step", {"rewards": rewards.values})
        final = self.bundle.config.multi_step_reward_strategy == "final"
        total = self.step_scores[-1] if final else sum(self.step_scores) / len(self.step_scores)
        status = "correct" if total >= 1 else ("env_error" if rewards.host_fault else "incorrect")
        info = {"rewards": self.step_rewards, "steps_run": self.current, "reward_error": rewards.error}
        return StepResult(total, total >= 1, True, "", status, info)

    async def close(self) -> None:
        if self.session is not None:
            session, self.session = self.session, None
            await session.close()


class TerminalFamily(TaskFamily):
    """Bundles from a folder (or the built-in samples) as terminal tasks; ~20% held out by name hash.

    Bundles that cannot run in the local sandbox (unreadable, refused by Harbor's rules, or needing
    Docker) are left out when the family is made, with a warning that names each and why. The tasks
    handed out for training are first screened (`screen.pays_for_nothing`, once per bundle): a task whose
    tests give a full reward before any command ran, or to the reference's output emptied or made a
    comment line, is refused with one line naming it (`screen=False` skips this, for tasks `synth check`
    accepted)."""

    name = "terminal"

    def __init__(
        self,
        bundles: str | list[Bundle] = "builtin",
        heldout_share: float = 0.2,
        max_commands: int = 10,
        command_timeout_s: float = 30.0,
        sandbox_backend: str = "auto",
        keep_services: bool = False,
        screen: bool = True,
    ):
        skipped: dict[str, str]
        if isinstance(bundles, list):
            candidates, skipped = bundles, {}
        else:
            candidates, skipped = load_bundles(SAMPLES if bundles == "builtin" else Path(bundles))
        self.bundles: list[Bundle] = []
        self.skipped: dict[str, str] = dict(skipped)
        """{bundle: why it was left out}."""
        for b in candidates:
            if why := local_problem(b):
                self.skipped[b.name] = why
            else:
                self.bundles.append(b)
        if not self.bundles:
            why = "; ".join(f"{k}: {v}" for k, v in self.skipped.items())
            raise UserError(f"terminal: no bundle of {bundles} can run in the local sandbox ({why})")
        if keep_services and (
            silent := sorted(b.name for b in self.bundles if not Workspace.for_bundle(None, b).ports)
        ):
            warnings.warn(
                f"terminal: keep_services: {len(silent)} bundle(s) declare no service port (EXPOSE in "
                f"environment/Dockerfile), so their tests reach none of the solution's services: {', '.join(silent)}",
                stacklevel=2,
            )
        if self.skipped:
            warnings.warn(
                f"terminal: left out {len(self.skipped)} bundle(s): "
                + "; ".join(f"{k} ({v})" for k, v in sorted(self.skipped.items())),
                stacklevel=2,
            )
        self.heldout_share = heldout_share
        self.max_commands = max_commands
        self.command_timeout_s = command_timeout_s
        self.sandbox_backend = sandbox_backend
        self.keep_services = keep_services
        self.screen = screen
        self._screened: dict[str, str] = {}
        """{bundle: why it pays for nothing, or ''}."""
        self._sandbox: Sandbox | None = None

    def _heldout(self, b: Bundle) -> bool:
        h = int.from_bytes(hashlib.blake2b(b.name.encode(), digest_size=8).digest(), "big")
        return (h % 10_000) < self.heldout_share * 10_000

    def tasks(self, split: str, n: int, seed: int = 0) -> list[Task]:
        if split not in ("train", "heldout"):
            raise UserError(f"unknown split {split!r}; use train or heldout")
        pool = [b for b in self.bundles if self._heldout(b) == (split == "heldout")]
        if len(pool) < n:
            raise UserError(f"terminal: only {len(pool)} {split} bundles (asked for {n}); add bundles or ask for fewer")
        if split == "train" and self.screen:
            self._screen(pool[:n])
        return [bundle_task(b) for b in pool[:n]]

    def _screen(self, bundles: list[Bundle]) -> None:
        """Refuse the first of `bundles` whose tests pay for no work (each bundle screened once)."""
        import asyncio
        import concurrent.futures

        from tempering.envs.terminal.screen import pays_for_nothing

        todo = [b for b in bundles if b.name not in self._screened]

        async def screen_all() -> list[str]:
            sandbox = self._pool()
            return await asyncio.gather(*(pays_for_nothing(Workspace.for_bundle(sandbox, b), b) for b in todo))

        if todo:
            with concurrent.futures.ThreadPoolExecutor(1) as pool:  # callers inside an event loop too
                found = pool.submit(asyncio.run, screen_all()).result()
            self._screened.update({b.name: why for b, why in zip(todo, found)})
        for b in bundles:
            if why := self._screened[b.name]:
                raise UserError(
                    f"terminal: task {b.name} pays for no work ({why}): make its tests check the answer "
                    "(`tempering synth check` runs every stage), leave it out, or pass screen=False if it is meant so."
                )

    def _pool(self) -> Sandbox:
        if self._sandbox is None:
            from tempering.sandbox import Sandbox

            self._sandbox = Sandbox(backend=self.sandbox_backend)
        return self._sandbox

    def make_env(self, task: Task) -> TerminalEnv:
        return TerminalEnv(
            task, self._pool(), self.max_commands, self.command_timeout_s, keep_services=self.keep_services
        )
