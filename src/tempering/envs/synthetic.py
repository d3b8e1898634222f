"""Shared machinery of the built-in synthetic task families.

A family maps a random draw to a canonical key (e.g. `(a, "+", b)`); a key belongs to the held-out
split when its hash lands in the held-out share, so the two splits never share a task, whatever the
seeds used to draw them.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable

from tempering.envs.base import Env, StepResult, TaskFamily
from tempering.errors import UserError
from tempering.types import Task

SPLITS = ("train", "heldout")


def in_heldout(key: str, share: float) -> bool:
    h = int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big")
    return (h % 10_000) < share * 10_000


def draw_tasks(
    family: str, split: str, n: int, seed: int, share: float, draw: Callable[[random.Random], Task]
) -> list[Task]:
    """`n` distinct tasks of `split`, drawn by `draw` with a seeded RNG."""
    if split not in SPLITS:
        raise UserError(f"unknown split {split!r}; use one of {SPLITS}")
    rng = random.Random(f"{family}/{split}/{seed}")
    out: dict[str, Task] = {}
    tries = 0
    while len(out) < n:
        tries += 1
        if tries > 200 * n + 10_000:
            raise UserError(
                f"{family}: only {len(out)} distinct {split} tasks exist at this difficulty (asked for {n}); "
                "ask for fewer or raise the difficulty"
            )
        task = draw(rng)
        if (split == "heldout") == in_heldout(task.id, share) and task.id not in out:
            out[task.id] = task
    return list(out.values())


def answer_text(action: str) -> str:
    """The answer part of a completion: up to the first newline, stripped."""
    return action.split("\n", 1)[0].strip()


class CheckEnv(Env):
    """An env whose verifier is a function `check(task, answer) -> (score, success, feedback, status)`."""

    def __init__(self, task: Task, check: Callable[[Task, str], tuple[float, bool, str, str]]):
        super().__init__(task)
        self.check = check

    async def step(self, action: str) -> StepResult:
        score, success, feedback, status = self.check(self.task, answer_text(action))
        return StepResult(score=score, success=success, done=success, feedback=feedback, status=status)


class SyntheticFamily(TaskFamily):
    """Base for families defined by `draw(rng) -> Task` and `check(task, answer)`."""

    heldout_share: float = 0.1

    def draw(self, rng: random.Random) -> Task:
        raise NotImplementedError

    def check(self, task: Task, answer: str) -> tuple[float, bool, str, str]:
        raise NotImplementedError

    def tasks(self, split: str, n: int, seed: int = 0) -> list[Task]:
        return draw_tasks(self.name, split, n, seed, self.heldout_share, self.draw)

    def make_env(self, task: Task) -> Env:
        return CheckEnv(task, self.check)
