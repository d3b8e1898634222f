"""PPO with a learned value function: GAE over tokens, advantage whitening and the clipped value loss.

All three are pure tensor functions over right-padded (B, T) rows whose `mask_BT` marks the policy's
action tokens. Tokens off the mask (prompt, a multi-turn episode's feedback, padding) are not actions:
GAE skips them in both the bootstrap and the advantage chain, so the chain of a multi-turn row runs
from action token to action token across the feedback in between (as verl's
`compute_gae_advantage_return` does on observation tokens).
"""

from __future__ import annotations

import torch

from tempering.algos.losses import LossNorm, aggregate


def gae(
    rewards_BT: torch.Tensor, values_BT: torch.Tensor, mask_BT: torch.Tensor, gamma: float = 1.0, lam: float = 0.95
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over each row's action tokens: (advantages, returns), 0 off the mask.

    For the action tokens a_1..a_n of a row (in order, whatever lies between them),
    delta_i = r_i + gamma * V_{i+1} - V_i with V_{n+1} = 0, and A_i = delta_i + gamma * lam * A_{i+1};
    the return target of the value function is A_i + V_i. Rewards off the mask are ignored.
    """
    B, T = rewards_BT.shape
    m = mask_BT.to(rewards_BT.dtype)
    adv = torch.zeros_like(rewards_BT)
    next_value = rewards_BT.new_zeros(B)
    running = rewards_BT.new_zeros(B)
    for t in reversed(range(T)):
        on = m[:, t] > 0
        a = rewards_BT[:, t] + gamma * next_value - values_BT[:, t] + gamma * lam * running
        running = torch.where(on, a, running)
        next_value = torch.where(on, values_BT[:, t], next_value)
        adv[:, t] = torch.where(on, a, torch.zeros_like(a))
    return adv, (adv + values_BT) * m


def whiten(x_BT: torch.Tensor, mask_BT: torch.Tensor, mean: float, var: float, eps: float = 1e-8) -> torch.Tensor:
    """(x - mean) / sqrt(var + eps) on the mask, 0 off it (statistics given, e.g. over all ranks)."""
    return (x_BT - mean) * torch.rsqrt(torch.tensor(var + eps, dtype=x_BT.dtype)) * mask_BT


def masked_moments(x_BT: torch.Tensor, mask_BT: torch.Tensor) -> tuple[float, float, float]:
    """(count, mean, mean of squares) of x over the mask: what ranks combine before whitening."""
    m = mask_BT.to(x_BT.dtype)
    n = float(m.sum())
    if n == 0:
        return 0.0, 0.0, 0.0
    return n, float((x_BT * m).sum()) / n, float((x_BT * x_BT * m).sum()) / n


def unbiased_var(n: float, mean: float, mean_sq: float) -> float:
    """The Bessel-corrected variance from (count, mean, mean of squares); 0 for fewer than 2 values."""
    return max(mean_sq - mean * mean, 0.0) * n / (n - 1) if n > 1 else 0.0


def clipped_value_loss(
    values_BT: torch.Tensor,
    old_values_BT: torch.Tensor,
    returns_BT: torch.Tensor,
    mask_BT: torch.Tensor,
    clip: float | None = 0.5,
    agg: str = "token-mean",
    norm: LossNorm | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """0.5 * max((V - R)^2, (clip(V, V_old - c, V_old + c) - R)^2), aggregated over the mask.

    The clip keeps the new prediction within `clip` of the value the rollout was scored with, so one
    batch cannot move the critic far (None: the plain squared error)."""
    err = (values_BT - returns_BT) ** 2
    if clip is None:
        loss_BT = err
        frac = torch.zeros(())
    else:
        clipped = old_values_BT + (values_BT - old_values_BT).clamp(-clip, clip)
        err_clipped = (clipped - returns_BT) ** 2
        loss_BT = torch.maximum(err, err_clipped)
        m = mask_BT.bool()
        with torch.no_grad():
            frac = ((err_clipped > err) & m).sum() / m.sum().clamp(min=1)
    with torch.no_grad():
        m = mask_BT.to(values_BT.dtype)
        n = m.sum().clamp(min=1)
        stats = {
            "value_clip_frac": frac,
            "value_mean": (values_BT.detach() * m).sum() / n,
            "value_error": ((values_BT.detach() - returns_BT).abs() * m).sum() / n,
        }
    return 0.5 * aggregate(loss_BT, mask_BT, agg, norm), stats


def episode_gae(
    rewards_BT: torch.Tensor,
    values_BT: torch.Tensor,
    mask_BT: torch.Tensor,
    episode_B: torch.Tensor,
    outcome_E: torch.Tensor,
    gamma: float = 1.0,
    lam: float = 0.95,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`gae` along each episode's action tokens, in order across all of its rows (an episode whose older
    turns were dropped from the context spans several rows), with `outcome_E[e]` added to the reward of
    episode e's last action token. Rows of one episode must come in order (as `collate` makes them)."""
    coords = mask_BT.nonzero()  # (n, 2), by row then position
    E = outcome_E.shape[0]
    adv_BT, ret_BT = torch.zeros_like(rewards_BT), torch.zeros_like(rewards_BT)
    if coords.shape[0] == 0:
        return adv_BT, ret_BT
    ep = episode_B[coords[:, 0]]
    order = torch.sort(ep, stable=True).indices
    ep, coords = ep[order], coords[order]
    counts = torch.bincount(ep, minlength=E)
    j = torch.arange(ep.shape[0]) - (torch.cumsum(counts, 0) - counts)[ep]
    L = int(counts.max())
    r, v, m = (torch.zeros(E, L, dtype=rewards_BT.dtype) for _ in range(3))
    b, t = coords[:, 0], coords[:, 1]
    r[ep, j], v[ep, j], m[ep, j] = rewards_BT[b, t], values_BT[b, t], 1.0
    has = counts > 0
    r[has, counts[has] - 1] += outcome_E[has].to(r.dtype)
    adv, ret = gae(r, v, m, gamma, lam)
    adv_BT[b, t], ret_BT[b, t] = adv[ep, j], ret[ep, j]
    return adv_BT, ret_BT
