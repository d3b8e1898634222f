"""Collecting one step's groups: draw prompts, roll out, refill zero-signal groups, drop failed ones.

A `Collector` holds everything a collection reads, so the loop and the asynchronous rollout pipeline's
thread call the same function on explicit parts (never back into the Trainer). Only one of them calls
it in a run: the pipeline when `rollout.async_steps > 0` (it then owns the prompt cursor), else the loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tempering.envs.base import TaskFamily
from tempering.models.chat import ChatFormat
from tempering.rollout.engine import RolloutOptions, RolloutStats, rollout
from tempering.train.batch import collate
from tempering.train.cursor import PromptCursor
from tempering.train.method import Method, group_stats, zero_signal_groups
from tempering.train.scoring import Scores, score
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

    async def rollout(self, sampler, stats: RolloutStats) -> list[Group]:
        tasks = [self.tasks[i] for i in self.cursor.next(self.prompts_per_step)]
        if self.method.supervised is not None:
            return [Group(t, [self.method.supervised(t)]) for t in tasks]
        return await rollout(sampler, self.fmt, tasks, self.family.make_env, self.group_size, self.opts, stats)

    def with_signal(self, groups: list[Group], state: dict[str, float]) -> list[Group]:
        """The groups whose advantages are not all zero under the method's credit (in `state`)."""
        batch = collate([e for g in groups for e in g.episodes], self.pad_id)
        m = self.method
        scorers = m.scorers if m.signal_scorers is None else m.signal_scorers
        credit = m.credit(score(groups, batch, scorers), batch, state)
        zero = zero_signal_groups(credit.adv_BT, batch, self.group_size)
        return [g for g, z in zip(groups, zero.tolist()) if not z]

    async def __call__(
        self, sampler, state: dict[str, float], stats: RolloutStats
    ) -> tuple[list[Group], bool, dict[str, float]]:
        """This rank's groups for one step (dynamic sampling when the method asks for it, groups with an
        env_error dropped when `on_env_error=drop`), and whether they are to be trained on: a rank left
        with none keeps one group with an empty loss mask, so its collectives stay in step."""
        groups = await self.rollout(sampler, stats)
        info = group_stats(Scores.of(groups))
        kept = groups
        rounds = self.method.resample_rounds
        if rounds is not None:
            need = len(groups)
            kept = self.with_signal(groups, state)
            info["frac_zero_adv_groups"] = 1 - len(kept) / need  # before refilling: what was dropped
            done = 0
            while len(kept) < need and done < rounds:
                done += 1
                kept += self.with_signal(await self.rollout(sampler, stats), state)
            info["resample_rounds"] = done
            kept = kept[:need]
        if self.on_env_error == "drop":
            ok = [g for g in kept if not any(e.stop_reason == "env_error" for e in g.episodes)]
            info["groups_dropped_env_error"] = len(kept) - len(ok)
            kept = ok
        return (kept, True, info) if kept else (groups[:1], False, info)
