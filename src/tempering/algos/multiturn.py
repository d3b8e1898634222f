"""Multi-turn baselines: turn rewards from discounted returns (Kevin-style) and turn-level
leave-one-out (TRLOO, as in Dr. Kernel). Pure functions over (N groups, G, K turns) tensors."""

from __future__ import annotations

import torch


def discounted_returns(scores_NGK: torch.Tensor, valid_NGK: torch.Tensor, gamma: float) -> torch.Tensor:
    """R_t = sum_{t' >= t} gamma^(t' - t) * score_t' over the episode's own turns."""
    s = scores_NGK.float() * valid_NGK
    out = torch.zeros_like(s)
    running = torch.zeros_like(s[..., 0])
    for k in range(s.shape[-1] - 1, -1, -1):
        running = s[..., k] + gamma * running
        out[..., k] = running
    return out * valid_NGK


def kevin_turn_advantage(
    scores_NGK: torch.Tensor, valid_NGK: torch.Tensor, gamma: float = 0.4, eps: float = 1e-6
) -> torch.Tensor:
    """Discounted turn returns, normalised over all turns of all episodes of the group."""
    R = discounted_returns(scores_NGK, valid_NGK, gamma)
    v = valid_NGK.float()
    n = v.sum((-1, -2), keepdim=True).clamp(min=1)
    mean = (R * v).sum((-1, -2), keepdim=True) / n
    var = (((R - mean) * v) ** 2).sum((-1, -2), keepdim=True) / (n - 1).clamp(min=1)
    return (R - mean) / (var.sqrt() + eps) * v


def trloo_turn_advantage(scores_NGK: torch.Tensor, valid_NGK: torch.Tensor, gamma: float = 1.0) -> torch.Tensor:
    """A_{i,t} = R_{i,t} - mean of R_{j,t} over the other episodes that reached turn t (0 if none)."""
    R = discounted_returns(scores_NGK, valid_NGK, gamma)
    v = valid_NGK.float()
    total = (R * v).sum(-2, keepdim=True)
    count = v.sum(-2, keepdim=True)
    others = count - v
    baseline = torch.where(others > 0, (total - R * v) / others.clamp(min=1), R)
    return (R - baseline) * v
