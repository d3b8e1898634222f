"""Dynamic sampling (DAPO): groups whose advantages under the method's own credit are all zero are dropped
and replaced by the groups of further rollouts, up to `Method.resample_rounds` more rounds.

A step between scoring and credit: each collected batch is scored once, by the scorers the credit reads
(`Method.filter_scorers`: with the KL in the reward, the reference too), the method's credit says which
groups have a signal, and the kept groups' scores are taken from their batches' (`Scores.select`,
`Scores.join`); the update runs only the rest of the scorers on them. A refill is sampled where the step's
groups were (the loop, or the rollout pipeline's thread: the same weights), so the step is handed the
collector's `more`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from itertools import groupby

from tempering.train.batch import TrainBatch, collate
from tempering.train.method import Method, zero_signal_groups
from tempering.train.scoring import Scores, score
from tempering.types import Group


@dataclass(frozen=True)
class Scored:
    """One collected batch, scored by the scorers the credit reads."""

    groups: list[Group]
    batch: TrainBatch
    scores: Scores
    signal: list[bool]
    """Per group: some advantage is not zero."""

    def select(self, keep: list[int]) -> Scores:
        return self.scores.select(keep, self.groups, self.batch)


@dataclass(frozen=True)
class Selection:
    """The scored batches of one step and the (batch, group) pairs kept, in order."""

    batches: list[Scored]
    picks: list[tuple[int, int]]

    def group(self, pick: tuple[int, int]) -> Group:
        return self.batches[pick[0]].groups[pick[1]]

    def scores(self) -> Scores:
        """The kept groups' scores from their batches'; metrics other than the verifier's, the group reward's and
        the shaping terms' are over every collected episode (what was scored)."""
        runs = [(s, [i for _, i in run]) for s, run in groupby(self.picks, key=lambda p: p[0])]  # picks in order
        parts = [([self.batches[s].groups[i] for i in keep], self.batches[s].select(keep)) for s, keep in runs]
        out = Scores.join(parts)
        weight = [float(len(b.scores.task_ids)) for b in self.batches]
        own = {f"shaping/{name}" for name in out.terms} | {"group_reward_abs"}  # the kept groups'; the rest: all scored
        others = dict.fromkeys(k for b in self.batches for k in b.scores.metrics if k not in own)
        mean = {
            k: sum(w * b.scores.metrics.get(k, 0.0) for w, b in zip(weight, self.batches)) / sum(weight) for k in others
        }
        return out.with_metrics(**mean)


@dataclass(frozen=True)
class DynamicSampling:
    method: Method
    group_size: int
    pad_id: int
    mask_truncated: bool = False
    """`loss.mask_truncated`: the signal is read under the loss mask the update will use."""

    def scored(self, groups: list[Group], state: dict[str, float]) -> Scored:
        """A batch scored by the scorers the credit reads, and which of its groups have a signal under the
        method's credit (in `state`)."""
        batch = collate([e for g in groups for e in g.episodes], self.pad_id, self.mask_truncated)
        scores = score(groups, batch, self.method.filter_scorers)
        credit = self.method.credit(scores, batch, state)
        zero = zero_signal_groups(credit.adv_BT, batch, self.group_size)
        return Scored(groups, batch, scores, [not z for z in zero.tolist()])

    @staticmethod
    def signal(batches: Sequence[Scored]) -> list[tuple[int, int]]:
        """The (batch, group) pairs with a signal, in order."""
        return [(s, i) for s, b in enumerate(batches) for i, ok in enumerate(b.signal) if ok]

    async def __call__(
        self, groups: list[Group], more: Callable[[], Awaitable[list[Group]]], state: dict[str, float]
    ) -> tuple[Selection, dict[str, float]]:
        """As many groups with a signal as were collected, refilled from `more()` up to the method's rounds,
        and the step's metrics: the share of the first groups without a signal, the rounds sampled."""
        rounds = self.method.resample_rounds or 0
        batches = [self.scored(groups, state)]
        info = {"frac_zero_adv_groups": 1 - sum(batches[0].signal) / len(groups)}  # before refilling
        while len(self.signal(batches)) < len(groups) and len(batches) <= rounds:
            batches.append(self.scored(await more(), state))
        info["resample_rounds"] = len(batches) - 1
        return Selection(batches, self.signal(batches)[: len(groups)]), info
