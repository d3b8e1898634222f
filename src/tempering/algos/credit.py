"""Credit assignment: from scored groups to one advantage per (episode, turn).

`turn_tensors` turns groups into padded (N groups, G, K turns) tensors; each method in `CREDIT` is a
pure function of those tensors. The recipe broadcasts each turn's advantage to that turn's tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from tempering.algos.advantages import OUTCOME_ESTIMATORS
from tempering.types import Group


@dataclass
class TurnTensors:
    scores_NGK: torch.Tensor
    """Verifier score after each turn (0 past an episode's end)."""
    success_NGK: torch.Tensor
    """1 where that turn was accepted."""
    valid_NGK: torch.Tensor
    """1 for turns that happened."""
    tokens_NGK: torch.Tensor
    """Number of policy tokens in each turn."""
    rewards_NG: torch.Tensor
    """The episode's outcome reward (after shaping)."""


def turn_tensors(groups: list[Group]) -> TurnTensors:
    N, G = len(groups), len(groups[0].episodes)
    K = max(len(e.turns) for g in groups for e in g.episodes)
    scores, success, valid, tokens = (torch.zeros(N, G, K) for _ in range(4))
    rewards = torch.zeros(N, G)
    for n, g in enumerate(groups):
        if len(g.episodes) != G:
            raise ValueError("all groups of a batch must have the same size")
        for i, e in enumerate(g.episodes):
            rewards[n, i] = e.reward
            for k, t in enumerate(e.turns):
                scores[n, i, k], success[n, i, k], valid[n, i, k], tokens[n, i, k] = t.score, float(t.success), 1.0, len(t.action_ids)
    return TurnTensors(scores, success, valid, tokens, rewards)


CreditFn = Callable[..., torch.Tensor]
"""(TurnTensors, **params) -> adv_NGK."""


def outcome_credit(estimator: Callable[[torch.Tensor], torch.Tensor]) -> CreditFn:
    def credit(t: TurnTensors, **_) -> torch.Tensor:
        return estimator(t.rewards_NG)[:, :, None] * t.valid_NGK

    credit.__doc__ = f"{estimator.__name__} on the episode reward, for every turn of the episode."
    return credit


CREDIT: dict[str, CreditFn] = {name: outcome_credit(fn) for name, fn in OUTCOME_ESTIMATORS.items()}
