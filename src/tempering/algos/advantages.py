"""Outcome advantage estimators: one scalar reward per episode -> one advantage per episode.

All take `rewards_NG` (N groups of G episodes of the same prompt) and return `adv_NG`; the policy
update broadcasts an episode's advantage to every one of its tokens. A group whose rewards are all
equal gets zero advantage. A group of one has no baseline: `singleton="zero"` (ours) gives it 0,
`singleton="raw"` its raw score, as verl does (mean 0 and std 1 for a group of one, so GRPO's is
r / (1 + eps)), to reproduce verl runs with one sample per prompt.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

SINGLETON = ("zero", "raw")


def _singleton(r: torch.Tensor, singleton: str, scale: float = 1.0) -> torch.Tensor:
    if singleton not in SINGLETON:
        raise ValueError(f"singleton={singleton!r} is unknown; use zero (0 advantage) or raw (verl's raw score)")
    return torch.zeros_like(r) if singleton == "zero" else r / scale


def grpo_advantage(
    rewards_NG: torch.Tensor, eps: float = 1e-6, scale_by_std: bool = True, singleton: str = "zero"
) -> torch.Tensor:
    """GRPO: (r - mean) / (std + eps) within each group (unbiased std, as in DeepSeekMath and verl)."""
    r = rewards_NG.float()
    if r.shape[-1] < 2:
        return _singleton(r, singleton, 1.0 + eps if scale_by_std else 1.0)
    centred = r - r.mean(dim=-1, keepdim=True)
    if not scale_by_std:
        return centred
    std = r.std(dim=-1, keepdim=True)
    return centred / (std + eps)


def dr_grpo_advantage(rewards_NG: torch.Tensor, singleton: str = "zero") -> torch.Tensor:
    """Dr. GRPO: r - mean (no std division, which over-weights easy and hard prompts)."""
    return grpo_advantage(rewards_NG, scale_by_std=False, singleton=singleton)


def rloo_advantage(rewards_NG: torch.Tensor, singleton: str = "zero") -> torch.Tensor:
    """RLOO: r_i - mean of the other G-1 rewards."""
    r = rewards_NG.float()
    G = r.shape[-1]
    if G < 2:
        return _singleton(r, singleton)
    return r - (r.sum(dim=-1, keepdim=True) - r) / (G - 1)


def zero_std_groups(rewards_NG: torch.Tensor) -> torch.Tensor:
    """Boolean per group: every reward equal (no learning signal under group-relative credit)."""
    r = rewards_NG.float()
    return (r.max(dim=-1).values - r.min(dim=-1).values) == 0


OUTCOME_ESTIMATORS: dict[str, Callable[..., torch.Tensor]] = {
    "grpo": grpo_advantage,
    "dr_grpo": dr_grpo_advantage,
    "rloo": rloo_advantage,
}


def whiten(values_NG: torch.Tensor, tokens_NG: torch.Tensor) -> torch.Tensor:
    """(v - mean) / sqrt(var + 1e-8) with each episode weighing as many times as it has tokens: verl's
    `masked_whiten` of a per-episode value broadcast to its tokens (unbiased variance over the tokens)."""
    w = tokens_NG.float()
    n = w.sum()
    if n < 2:
        raise ValueError("whitening over the batch's tokens needs at least two loss tokens")
    mean = (values_NG * w).sum() / (n + 1e-8)
    var = ((values_NG - mean) ** 2 * w).sum() / (n + 1e-8) * (n / (n - 1))
    return (values_NG - mean) * torch.rsqrt(var + 1e-8)


def reinforce_pp_advantage(rewards_NG: torch.Tensor, tokens_NG: torch.Tensor) -> torch.Tensor:
    """REINFORCE++: the outcome reward (undiscounted, so every token's return) whitened over the batch's tokens."""
    return whiten(rewards_NG.float(), tokens_NG)


def reinforce_pp_baseline_advantage(rewards_NG: torch.Tensor, tokens_NG: torch.Tensor) -> torch.Tensor:
    """REINFORCE++-baseline: the reward less its group's mean (a group of one keeps its reward, as in verl),
    whitened over the batch's tokens."""
    r = rewards_NG.float()
    centred = r - r.mean(-1, keepdim=True) if r.shape[-1] > 1 else r
    return whiten(centred, tokens_NG)


def remax_advantage(rewards_NG: torch.Tensor, greedy_N: torch.Tensor) -> torch.Tensor:
    """ReMax (Li et al. 2023): each reward less the reward of one greedy (temperature 0) answer to the same
    prompt; no normalisation."""
    return rewards_NG.float() - greedy_N.float()[:, None]


def grpo_passk_advantage(rewards_NG: torch.Tensor, eps: float = 1e-6, scale_by_std: bool = True) -> torch.Tensor:
    """GRPO for pass@k (Chen et al. 2025): only each group's best episode gets an advantage, the gap between
    the best and second-best reward (over the group's std when `scale_by_std`); ties go to the first."""
    r = rewards_NG.float()
    if r.shape[-1] < 2:
        raise ValueError("grpo_passk needs at least 2 episodes per group (rollout.group_size >= 2)")
    top, idx = torch.topk(r, 2, dim=-1)
    gap = top[:, 0] - top[:, 1]
    if scale_by_std:
        gap = gap / (r.std(-1) + eps)
    return torch.zeros_like(r).scatter(-1, idx[:, :1], gap[:, None])


def gdpo_advantage(
    components_NGC: torch.Tensor,
    tokens_NG: torch.Tensor,
    weights_C: torch.Tensor | None = None,
    eps: float = 1e-6,
    batch_norm: str = "tokens",
) -> torch.Tensor:
    """GDPO: each reward component normalised within its group (GRPO, std + eps) before the weighted sum,
    then the sum normalised over the batch: over its tokens (`tokens`, verl's `gdpo`) or its episodes
    (`episodes`: (x - mean) / (std + eps), TRL's `multi_objective_aggregation=normalize_then_sum`)."""
    c = components_NGC.float()
    w = torch.ones(c.shape[-1]) if weights_C is None else weights_C.float()
    per = (c - c.mean(1, keepdim=True)) / (c.std(1, keepdim=True) + eps) if c.shape[1] > 1 else c / (1 + eps)
    total = (per * w).sum(-1)
    if batch_norm == "tokens":
        return whiten(total, tokens_NG)
    if batch_norm == "episodes":
        return (total - total.mean()) / (total.std() + eps)
    raise ValueError(f"batch_norm={batch_norm!r} is unknown; use tokens (verl) or episodes (TRL)")
