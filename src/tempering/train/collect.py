"""Collecting one step's groups: draw prompts, roll out, select (dynamic sampling), drop failed ones.

A `Collector` holds everything a collection reads, so the loop and the asynchronous rollout pipeline's
thread call the same function on explicit parts (never back into the Trainer). Only one of them calls
it in a run: the pipeline when `rollout.async_steps > 0` (it then owns the prompt cursor), else the loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from tempering.envs.base import TaskFamily
from tempering.models.chat import ChatFormat
from tempering.rollout.engine import RolloutOptions, RolloutStats, rollout
from tempering.rollout.sampler import Sampler
from tempering.train.cursor import PromptCursor
from tempering.train.dynamic import DynamicSampling
from tempering.train.method import Method, group_stats
from tempering.train.scoring import Scores
from tempering.types import Group, StopReason, Task


class RankCursor:
    """A shared `PromptCursor` of which this rank keeps every `size`-th prompt: every rank draws the
    same global order, so groups stay whole on one rank and rank 0's saved cursor resumes all."""

    def __init__(self, inner: PromptCursor, rank: int, size: int):
        self.inner, self.rank, self.size = inner, rank, size

    def next(self, n: int) -> list[int]:
        return self.inner.next(n)[self.rank :: self.size]

    def state_dict(self) -> dict[str, Any]:
        return self.inner.state_dict()

    def load_state_dict(self, s: dict[str, Any]) -> None:
        self.inner.load_state_dict(s)


@dataclass
class Rollouts:
    """One step's groups, as the rollout stage hands them to the update."""

    groups: list[Group]
    trainable: bool
    """False: the groups only keep this rank's collectives in step (see `Collector`)."""
    info: dict[str, float]
    stats: RolloutStats = field(default_factory=RolloutStats)
    version: int = 0
    """The update after which the weights that sampled these groups were taken (0: the starting weights)."""
    scores: Scores | None = None
    """What dynamic sampling's scorers made of the groups (`Method.filter_scorers`); the update runs the
    rest. None: the update scores them."""


@dataclass
class Collector:
    tasks: list[Task]
    cursor: PromptCursor | RankCursor
    family: TaskFamily
    fmt: ChatFormat
    opts: RolloutOptions
    method: Method
    prompts_per_step: int
    group_size: int
    on_env_error: str
    """`drop`: groups with an env_error leave the batch; `train`: they stay (`rollout.on_env_error`)."""
    select: DynamicSampling | None = None
    """Dynamic sampling (`train/dynamic.py`), when the method asks for it."""

    async def rollout(self, sampler: Sampler, stats: RolloutStats) -> list[Group]:
        tasks = [self.tasks[i] for i in self.cursor.next(self.prompts_per_step)]
        if self.method.supervised is not None:
            return [Group(t, [self.method.supervised(t)]) for t in tasks]
        return await rollout(sampler, self.fmt, tasks, self.family.make_env, self.group_size, self.opts, stats)

    async def __call__(self, sampler: Sampler, state: dict[str, float], stats: RolloutStats) -> Rollouts:
        """This rank's groups for one step, and whether they are to be trained on: collected, then, with
        dynamic sampling (`select`), the groups with a signal of as many batches as it takes (refills sampled
        by the same sampler), then those with an env_error dropped when `on_env_error=drop`. A rank left with
        none keeps one group with an empty loss mask, so its collectives stay in step."""
        groups = await self.rollout(sampler, stats)
        info = group_stats(Scores.of(groups))
        chosen = None
        if self.select is not None:
            chosen, found = await self.select(groups, lambda: self.rollout(sampler, stats), state)
            info |= found
        picks = chosen.picks if chosen is not None else [(0, i) for i in range(len(groups))]
        group = chosen.group if chosen is not None else lambda pick: groups[pick[1]]
        if self.on_env_error == "drop":
            ok = [p for p in picks if not any(e.stop_reason == StopReason.ENV_ERROR for e in group(p).episodes)]
            info["groups_dropped_env_error"] = len(picks) - len(ok)
            picks = ok
        if not picks:
            return Rollouts(groups[:1], False, info, stats)
        kept = [group(p) for p in picks]
        if chosen is None:
            return Rollouts(kept, True, info, stats)
        return Rollouts(kept, True, info, stats, scores=replace(chosen, picks=picks).scores())
