"""LEAP: Difficulty-Conditioned Pruning (which groups get more turns) and the rank-based reward.

Both are pure functions over per-group tensors. See docs/methods.md for the provenance of each
default ([paper] / [secondary] / ours).
"""

from __future__ import annotations

import math

import torch


def dcp_thresholds(G: int, min_fail: float = 0.5, max_fail: float | None = None) -> tuple[int, int]:
    """(T_min, T_max) as failure counts: ceil(min_fail * G) and floor(max_fail * G) (default G - 1)."""
    t_min = math.ceil(min_fail * G - 1e-9)
    t_max = G - 1 if max_fail is None else math.floor(max_fail * G + 1e-9)
    return t_min, t_max


def dcp_expand(n_fail_N: torch.Tensor, G: int, min_fail: float = 0.5, max_fail: float | None = None) -> torch.Tensor:
    """Expand a group into more turns only when T_min <= N_fail <= T_max after the first turn."""
    t_min, t_max = dcp_thresholds(G, min_fail, max_fail)
    return (n_fail_N >= t_min) & (n_fail_N <= t_max)


def rank_scores(
    success_NG: torch.Tensor,
    first_turn_NG: torch.Tensor,
    tokens_NG: torch.Tensor | None = None,
    token_efficiency: bool = False,
) -> torch.Tensor:
    """Pairwise tournament: s_i = 1/(G-1) * sum_{j != i} sign(key_i - key_j), keys compared in order
    (success, earlier first success, fewer tokens when `token_efficiency`). Zero-sum and in [-1, 1].

    `first_turn_NG` is the 1-based turn of the first success (ignored for failures). The token
    tie-break applies only between two successes (a shorter failure is not better).
    """
    G = success_NG.shape[-1]
    if G < 2:
        return torch.zeros(success_NG.shape, dtype=torch.float32)
    s = success_NG.float()
    cmp = torch.sign(s[..., :, None] - s[..., None, :])
    both = (s[..., :, None] > 0) & (s[..., None, :] > 0)
    t = first_turn_NG.float()
    by_turn = torch.sign(t[..., None, :] - t[..., :, None])  # earlier success ranks higher
    cmp = torch.where((cmp == 0) & both, by_turn, cmp)
    if token_efficiency and tokens_NG is not None:
        n = tokens_NG.float()
        by_tokens = torch.sign(n[..., None, :] - n[..., :, None])
        cmp = torch.where((cmp == 0) & both, by_tokens, cmp)
    return cmp.sum(-1) / (G - 1)


def rank_turn_credit(scores_NG: torch.Tensor, num_turns_NG: torch.Tensor, K: int, gamma: float = 0.5) -> torch.Tensor:
    """Per-turn advantages: a positive score reaches earlier turns discounted, s * gamma^(k_i - t);
    a non-positive score applies to every turn. Turns past an episode's end get 0."""
    t = torch.arange(1, K + 1, dtype=torch.float32)
    k = num_turns_NG.float()[..., None]
    valid = t <= k
    s = scores_NG.float()[..., None]
    pos = s * gamma ** (k - t).clamp(min=0)
    return torch.where(s > 0, pos, s.expand_as(pos)) * valid
