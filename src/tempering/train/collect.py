"""Collecting one step's groups: draw prompts, roll out, refill zero-signal groups, drop failed ones.

A `Collector` holds everything a collection reads, so the loop and the asynchronous rollout pipeline's
thread call the same function on explicit parts (never back into the Trainer). Only one of them calls
it in a run: the pipeline when `rollout.async_steps > 0` (it then owns the prompt cursor), else the loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tempering.envs.base import TaskFamily
from tempering.models.chat import ChatFormat
from tempering.rollout.engine import RolloutOptions, RolloutStats, rollout
from tempering.train.batch import TrainBatch, collate
from tempering.train.cursor import PromptCursor
from tempering.train.method import Method, group_stats, zero_signal_groups
from tempering.train.scoring import Scores, regroup, score
from tempering.types import Group, Task


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
    """What the method's filter scorers made of the groups (dynamic sampling); the update runs the rest.
    None: the update scores them."""


@dataclass
class Scored:
    """One collected batch, scored by the scorers dynamic sampling filters on."""

    groups: list[Group]
    batch: TrainBatch
    scores: Scores
    signal: list[bool]
    """Per group: some advantage is not zero."""


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
    pad_id: int
    on_env_error: str
    """`drop`: groups with an env_error leave the batch; `train`: they stay (`rollout.on_env_error`)."""
    mask_truncated: bool = False
    """`loss.mask_truncated`: the filter sees the loss mask the update will use."""

    async def rollout(self, sampler, stats: RolloutStats) -> list[Group]:
        tasks = [self.tasks[i] for i in self.cursor.next(self.prompts_per_step)]
        if self.method.supervised is not None:
            return [Group(t, [self.method.supervised(t)]) for t in tasks]
        return await rollout(sampler, self.fmt, tasks, self.family.make_env, self.group_size, self.opts, stats)

    def scored(self, groups: list[Group], state: dict[str, float]) -> Scored:
        """A batch scored by the method's filter scorers, and which of its groups have a signal under
        the method's credit (in `state`)."""
        batch = collate([e for g in groups for e in g.episodes], self.pad_id, self.mask_truncated)
        scores = score(groups, batch, self.method.filter_scorers)
        credit = self.method.credit(scores, batch, state)
        zero = zero_signal_groups(credit.adv_BT, batch, self.group_size)
        return Scored(groups, batch, scores, [not z for z in zero.tolist()])

    @staticmethod
    def signal(batches: list[Scored]) -> list[tuple[int, int]]:
        """The (batch, group) pairs with a signal, in order."""
        return [(s, i) for s, b in enumerate(batches) for i, ok in enumerate(b.signal) if ok]

    @staticmethod
    def picked(batches: list[Scored], picks: list[tuple[int, int]]) -> tuple[list[Group], Scores]:
        """The picked groups and their scores, as their batches' scores have them."""
        groups = [batches[s].groups[i] for s, i in picks]
        return groups, regroup([(b.groups, b.batch, b.scores) for b in batches], picks)

    async def __call__(self, sampler, state: dict[str, float], stats: RolloutStats) -> Rollouts:
        """This rank's groups for one step (dynamic sampling when the method asks for it, groups with an
        env_error dropped when `on_env_error=drop`), and whether they are to be trained on: a rank left
        with none keeps one group with an empty loss mask, so its collectives stay in step."""
        groups = await self.rollout(sampler, stats)
        info = group_stats(Scores.of(groups))
        rounds = self.method.resample_rounds
        batches: list[Scored] = []  # dynamic sampling's scored batches: each is scored once
        pools = [groups]  # where the picks point: (pool, group index)
        picks = [(0, i) for i in range(len(groups))]
        if rounds is not None:
            batches = [self.scored(groups, state)]
            info["frac_zero_adv_groups"] = 1 - sum(batches[0].signal) / len(groups)  # before refilling
            while len(self.signal(batches)) < len(groups) and len(batches) <= rounds:
                batches.append(self.scored(await self.rollout(sampler, stats), state))
            info["resample_rounds"] = len(batches) - 1
            pools = [b.groups for b in batches]
            picks = self.signal(batches)[: len(groups)]
        if self.on_env_error == "drop":
            ok = [(s, i) for s, i in picks if not any(e.stop_reason == "env_error" for e in pools[s][i].episodes)]
            info["groups_dropped_env_error"] = len(picks) - len(ok)
            picks = ok
        if not picks:
            return Rollouts(groups[:1], False, info, stats)
        if not batches:
            return Rollouts([pools[s][i] for s, i in picks], True, info, stats)
        kept, scores = self.picked(batches, picks)
        return Rollouts(kept, True, info, stats, scores=scores)
