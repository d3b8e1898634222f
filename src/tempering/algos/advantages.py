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
