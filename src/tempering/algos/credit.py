"""Credit assignment: from scored groups to one advantage per (episode, turn).

`turn_tensors` turns groups into padded (N groups, G, K turns) tensors; each method in `CREDIT` is a
pure function of those tensors plus its own keyword arguments (`loss.credit_args` in the config).
The loop broadcasts each turn's advantage to that turn's tokens.

Shaping terms (DAPO's overlong penalty, a KL penalty in the reward) arrive per turn in `shaping_NGK`,
kept apart from the verifier's scores, and each credit says how it uses them:
- outcome credits (grpo, dr_grpo, rloo, reinforce_pp, grpo_passk, ...): the episode's reward plus the sum of
  its turns' terms; remax subtracts the greedy episode's verifier reward from that (verl's baseline is unshaped);
- kevin, trloo: each turn's score plus its own term, inside the discounted returns;
- tcpo: the trajectory score plus the sum of the terms (the turn components compare verifier scores
  with each other and with tau, so a penalty there would read as a regression);
- leap: none; its credit is the group reward alone (`group_NG`, LEAP's rank tournament by default), passed
  back over the turns, so shaping is refused.

A group-level reward (`group_NG`, one value per episode from its group's finished episodes) is added to the
episode's reward: every credit but leap reads it as a shaping term on the episode's last turn.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass

import torch

from tempering.algos.advantages import (
    OUTCOME_ESTIMATORS,
    gdpo_advantage,
    grpo_passk_advantage,
    reinforce_pp_advantage,
    reinforce_pp_baseline_advantage,
    remax_advantage,
)
from tempering.algos.leap import rank_turn_credit
from tempering.algos.multiturn import kevin_turn_advantage, trloo_turn_advantage
from tempering.algos.tcpo import tcpo_advantage
from tempering.errors import ConfigError
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
    cf_mean_NGK: torch.Tensor
    """Mean score of the counterfactual alternatives of a turn (where resampled)."""
    cf_mask_NGK: torch.Tensor
    """1 where a turn was resampled."""
    shaping_NGK: torch.Tensor | None = None
    """Sum of the shaping terms of each turn (None: no shaping)."""
    components_NGC: torch.Tensor | None = None
    """Each reward function's value for the episode's last turn (`Turn.info["rewards"]`, environments with
    several reward functions), in the order of `component_names`; None when the episodes have none, or name different ones."""
    component_names: tuple[str, ...] = ()
    greedy_N: torch.Tensor | None = None
    """The reward of each group's greedy episode (`Group.greedy`, ReMax's baseline); None when the rollout
    made none."""
    group_NG: torch.Tensor | None = None
    """The group-level reward of each episode (the family's `group_reward`, computed per group by the scoring
    step); None: no group reward."""

    @property
    def shaping(self) -> torch.Tensor:
        """The shaping terms of each turn, and the group reward on each episode's last turn."""
        s = self.shaping_NGK if self.shaping_NGK is not None else torch.zeros_like(self.scores_NGK)
        if self.group_NG is None:
            return s
        last = (self.valid_NGK.sum(-1, keepdim=True).long() - 1).clamp(min=0)
        return s.scatter_add(-1, last, self.group_NG[..., None].float())

    @property
    def success_NG(self) -> torch.Tensor:
        return self.success_NGK.amax(-1)

    @property
    def first_success_NG(self) -> torch.Tensor:
        """1-based turn of the first success; K + 1 for failures."""
        K = self.success_NGK.shape[-1]
        hit = self.success_NGK > 0
        first = hit.float().argmax(-1) + 1
        return torch.where(hit.any(-1), first, torch.full_like(first, K + 1))


def turn_tensors(groups: list[Group]) -> TurnTensors:
    N, G = len(groups), len(groups[0].episodes)
    K = max(len(e.turns) for g in groups for e in g.episodes)
    scores, success, valid, tokens, cf_mean, cf_mask = (torch.zeros(N, G, K) for _ in range(6))
    rewards = torch.zeros(N, G)
    for n, g in enumerate(groups):
        if len(g.episodes) != G:
            raise ValueError("all groups of a batch must have the same size")
        for i, e in enumerate(g.episodes):
            rewards[n, i] = e.reward
            for k, t in enumerate(e.turns):
                scores[n, i, k], success[n, i, k], valid[n, i, k], tokens[n, i, k] = (
                    t.score,
                    float(t.success),
                    1.0,
                    len(t.action_ids),
                )
                alt = t.info.get("cf_scores")
                if alt:
                    cf_mean[n, i, k], cf_mask[n, i, k] = sum(alt) / len(alt), 1.0
    parts: list[dict[str, float]] = [
        (e.turns[-1].info.get("rewards") or {}) if e.turns else {} for g in groups for e in g.episodes
    ]
    components, names = None, tuple(dict.fromkeys(k for p in parts for k in p))
    if names and all(set(p) == set(names) for p in parts):  # else only gdpo, which needs them, refuses
        components = torch.tensor([[float(p[k]) for k in names] for p in parts]).view(N, G, len(names))
    greedy = None
    if any(g.greedy is not None for g in groups):
        if not all(g.greedy is not None for g in groups):
            raise ValueError("either every group of a batch has its greedy episode or none has")
        greedy = torch.tensor([g.greedy.reward for g in groups if g.greedy is not None])
    return TurnTensors(scores, success, valid, tokens, rewards, cf_mean, cf_mask, None, components, names, greedy)


def _outcome(estimator: Callable[[torch.Tensor], torch.Tensor]) -> Callable[..., torch.Tensor]:
    def credit(t: TurnTensors) -> torch.Tensor:
        return estimator(t.rewards_NG + t.shaping.sum(-1))[:, :, None] * t.valid_NGK

    name = getattr(estimator, "func", estimator).__name__  # a functools.partial names its function
    credit.__doc__ = f"{name} on the episode's (shaped) reward, for every turn of the episode."
    return credit


def leap_credit(t: TurnTensors, gamma: float = 0.5) -> torch.Tensor:
    """LEAP's group reward (its rank tournament over success, first-success turn and tokens: the group
    reward `rank`), passed back to earlier turns."""
    if t.shaping_NGK is not None and bool(t.shaping_NGK.any()):
        raise ValueError("LEAP ranks episodes by (success, turn, tokens) and has no use for reward shaping")
    if t.group_NG is None:
        raise ValueError("LEAP's credit passes its group reward back over the turns, and these scores have none")
    return rank_turn_credit(t.group_NG, t.valid_NGK.sum(-1), t.valid_NGK.shape[-1], gamma)


def kevin_credit(t: TurnTensors, gamma: float = 0.4) -> torch.Tensor:
    """Discounted turn returns (gamma 0.4, as in Kevin), normalised over the group's turns."""
    return kevin_turn_advantage(t.scores_NGK + t.shaping, t.valid_NGK, gamma)


def trloo_credit(t: TurnTensors, gamma: float = 1.0) -> torch.Tensor:
    """Turn-level leave-one-out on turn returns (TRLOO)."""
    return trloo_turn_advantage(t.scores_NGK + t.shaping, t.valid_NGK, gamma)


def tcpo_credit(t: TurnTensors, **kw) -> torch.Tensor:
    """TCPO: trajectory advantage + normalised turn credit (see algos/tcpo.py for the arguments)."""
    return tcpo_advantage(
        t.scores_NGK,
        t.valid_NGK,
        cf_mean_NGK=t.cf_mean_NGK,
        cf_mask_NGK=t.cf_mask_NGK,
        traj_shaping_NG=t.shaping.sum(-1),
        **kw,
    )


tcpo_credit.__signature__ = inspect.signature(tcpo_advantage).replace(  # type: ignore[attr-defined]
    parameters=[
        p
        for p in inspect.signature(tcpo_advantage).parameters.values()
        if p.name not in ("scores_NGK", "valid_NGK", "cf_mean_NGK", "cf_mask_NGK", "traj_shaping_NG")
    ]
)


def _per_episode(adv_NG: torch.Tensor, t: TurnTensors) -> torch.Tensor:
    return adv_NG[:, :, None] * t.valid_NGK


def reinforce_pp_credit(t: TurnTensors) -> torch.Tensor:
    """REINFORCE++: the (shaped) reward whitened over the batch's tokens (verl's reinforce_plus_plus, gamma 1)."""
    return _per_episode(reinforce_pp_advantage(t.rewards_NG + t.shaping.sum(-1), t.tokens_NGK.sum(-1)), t)


def reinforce_pp_baseline_credit(t: TurnTensors) -> torch.Tensor:
    """REINFORCE++-baseline: the (shaped) reward less its group's mean, whitened over the batch's tokens."""
    r = t.rewards_NG + t.shaping.sum(-1)
    return _per_episode(reinforce_pp_baseline_advantage(r, t.tokens_NGK.sum(-1)), t)


def remax_credit(t: TurnTensors) -> torch.Tensor:
    """ReMax: the (shaped) reward less the reward of a greedy answer to the same prompt (verl's remax)."""
    if t.greedy_N is None:
        raise ValueError(
            "loss.advantage=remax needs one greedy episode per group; the rollout makes it when the method asks "
            "(RolloutOptions.greedy_baseline, set for the credits in GREEDY_BASELINE)"
        )
    return _per_episode(remax_advantage(t.rewards_NG + t.shaping.sum(-1), t.greedy_N), t)


def grpo_passk_credit(t: TurnTensors, scale_by_std: bool = True, eps: float = 1e-6) -> torch.Tensor:
    """GRPO for pass@k: each group's best episode gets best - second best (over the group's std)."""
    return _per_episode(grpo_passk_advantage(t.rewards_NG + t.shaping.sum(-1), eps, scale_by_std), t)


def gdpo_credit(
    t: TurnTensors, weights: dict[str, float] | None = None, eps: float = 1e-6, batch_norm: str = "tokens"
) -> torch.Tensor:
    """GDPO: each reward function's values normalised within the group, then summed with `weights` (by
    function name; default 1 each) and normalised over the batch (`tokens`: verl; `episodes`: TRL). The
    shaping terms are one more component."""
    if t.components_NGC is None and t.component_names:
        raise ValueError(
            f"loss.advantage=gdpo needs every episode to report the same reward functions; these report "
            f"{', '.join(t.component_names)} only in part (an environment that names its parts per outcome "
            "cannot be normalised per function); use loss.advantage=grpo"
        )
    if t.components_NGC is None:
        raise ValueError(
            "loss.advantage=gdpo normalises each reward function on its own, and these episodes report one reward; "
            "use a task family with several reward functions (task.args.reward as a list), or loss.advantage=grpo"
        )
    names = list(t.component_names)
    unknown = sorted(set(weights or {}) - set(names))
    if unknown:
        raise ValueError(f"loss.credit_args.weights names {unknown}, which are not reward functions: {names}")
    comps, w = t.components_NGC, [float((weights or {}).get(n, 1.0)) for n in names]
    if t.shaping_NGK is not None or t.group_NG is not None:
        comps, w = torch.cat([comps, t.shaping.sum(-1, keepdim=True)], -1), [*w, 1.0]
    return _per_episode(gdpo_advantage(comps, t.tokens_NGK.sum(-1), torch.tensor(w), eps, batch_norm), t)


CREDIT: dict[str, Callable[..., torch.Tensor]] = {
    **{name: _outcome(fn) for name, fn in OUTCOME_ESTIMATORS.items()},
    "reinforce_pp": reinforce_pp_credit,
    "reinforce_pp_baseline": reinforce_pp_baseline_credit,
    "remax": remax_credit,
    "grpo_passk": grpo_passk_credit,
    "gdpo": gdpo_credit,
    "leap": leap_credit,
    "kevin": kevin_credit,
    "trloo": trloo_credit,
    "tcpo": tcpo_credit,
}


GREEDY_BASELINE = frozenset({"remax"})
"""Credits that read a greedy episode per group (`TurnTensors.greedy_N`): the method asks the rollout for
one (`RolloutOptions.greedy_baseline`), which is scored and never trained on."""


def credit_params(name: str) -> list[str]:
    """The keyword arguments credit `name` accepts (`loss.credit_args`)."""
    return [p for p in inspect.signature(CREDIT[name]).parameters if p != "t"]


def resolve_credit(name: str, args: dict, singleton_group: str = "zero") -> Callable[[TurnTensors], torch.Tensor]:
    """The credit function `name` with its keyword arguments checked against its signature;
    `singleton_group` is the outcome estimators' convention for a group of one (`algos/advantages.py`)."""
    if name not in CREDIT:
        raise ConfigError(f"loss.advantage={name!r} is unknown; choose one of {sorted(CREDIT)}")
    fn = CREDIT[name]
    if singleton_group != "zero":
        if name not in OUTCOME_ESTIMATORS:
            raise ConfigError(
                f"loss.singleton_group={singleton_group} is read by the outcome credits only; "
                f"use loss.advantage={'|'.join(OUTCOME_ESTIMATORS)}, or loss.singleton_group=zero"
            )
        fn = _outcome(functools.partial(OUTCOME_ESTIMATORS[name], singleton=singleton_group))
    params = credit_params(name)
    bad = sorted(set(args) - set(params))
    if bad:
        raise ConfigError(f"loss.credit_args {bad} not accepted by {name!r}; allowed: {params or 'none'}")

    def credit(t: TurnTensors) -> torch.Tensor:
        return fn(t, **args)

    credit.__doc__ = fn.__doc__
    return credit
