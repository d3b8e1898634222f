"""A family whose training split is a fixed list of tasks (e.g. a Residual-GRPO round's residual pool)."""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from tempering.envs.base import Env, TaskFamily
from tempering.envs.group import GroupReward
from tempering.types import Task


@dataclass
class PoolFamily(TaskFamily):
    """The training split is `pool`; the held-out split and the verifiers are those of `base`."""

    base: TaskFamily
    pool: list[Task]

    def __post_init__(self):
        self.name = self.base.name

    def tasks(self, split: str, n: int, seed: int = 0) -> list[Task]:
        return list(self.pool) if split == "train" else self.base.tasks(split, n, seed)

    def make_env(self, task: Task) -> Env:
        return self.base.make_env(task)

    def group_reward(self, name: str) -> GroupReward | None:
        return self.base.group_reward(name)

    def template_keys(self) -> frozenset[str] | None:
        return self.base.template_keys()


def weighted_pool(tasks: list[Task], weights: torch.Tensor, seed: int) -> list[Task]:
    """Each task repeated by its weight (the fractional part drawn with a seeded coin); weight 0 drops it."""
    rng = random.Random(seed)
    out = []
    for t, w in zip(tasks, weights.tolist()):
        copies = int(w) + (rng.random() < w - int(w))
        out += [t] * copies
    return out
