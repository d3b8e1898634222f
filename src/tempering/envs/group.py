"""Group-level rewards: a pure function of one group's finished episodes (one task, in order) giving one
value per episode, which the scoring step adds to each episode's reward (tinker-cookbook's
`EnvGroupBuilder.compute_group_rewards`, whose group reward is also added to the episode's own).

A task family offers its own by name (`TaskFamily.group_rewards`); the ones here every family has.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tempering.types import Episode

GroupReward = Callable[[Sequence[Episode]], list[float]]


def rank(token_efficiency: bool = False) -> GroupReward:
    """LEAP's tournament: each episode's mean sign against the others of its group, by (success, earlier
    first success, and with `token_efficiency` fewer tokens between two successes), in [-1, 1], zero-sum."""

    def tournament(episodes: Sequence[Episode]) -> list[float]:
        import torch  # here: every family's module imports this one, and help comes before torch

        from tempering.algos.leap import rank_scores

        K = max((len(e.turns) for e in episodes), default=0)
        success = torch.tensor([float(e.success) for e in episodes])
        first = torch.tensor([e.first_success_turn or K + 1 for e in episodes])
        tokens = torch.tensor([float(e.num_action_tokens) for e in episodes])
        return rank_scores(success, first, tokens, token_efficiency).tolist()

    tournament.__doc__ = rank.__doc__
    return tournament


GROUP_REWARDS: dict[str, GroupReward] = {"rank": rank(), "rank_tokens": rank(token_efficiency=True)}
"""The group rewards of every family: LEAP's tournament, without and with the token tie-break."""
