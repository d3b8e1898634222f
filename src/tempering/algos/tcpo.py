"""TCPO: turn-level credit for verifier-guided multi-turn refinement (score-to-credit conversion).

Pure functions over a (N groups, G episodes, K turns) score tensor with a validity mask (episodes
end at different turns). Scores are verifier scores in [0, 1]; `tau` is the success threshold.
"""

from __future__ import annotations

import torch

from tempering.algos.advantages import grpo_advantage

NEG = -1e9


def best_prior(scores_NGK: torch.Tensor, valid_NGK: torch.Tensor) -> torch.Tensor:
    """m_{i,k} = max_{t<k} r_{i,t}; 0 before the first turn."""
    s = torch.where(valid_NGK > 0, scores_NGK.float(), torch.full_like(scores_NGK.float(), NEG))
    run = torch.cummax(s, dim=-1).values
    m = torch.cat([torch.full_like(run[..., :1], NEG), run[..., :-1]], dim=-1)
    return m.clamp(min=0.0)


def future_best(scores_NGK: torch.Tensor, valid_NGK: torch.Tensor) -> torch.Tensor:
    """F_{i,k} = max_{t>=k} r_{i,t} over the episode's own turns."""
    s = torch.where(valid_NGK > 0, scores_NGK.float(), torch.full_like(scores_NGK.float(), NEG))
    f = torch.flip(torch.cummax(torch.flip(s, [-1]), dim=-1).values, [-1])
    return torch.where(valid_NGK > 0, f, torch.zeros_like(f))


def retrospective_credit(
    scores_NGK: torch.Tensor,
    valid_NGK: torch.Tensor,
    tau: float = 1.0,
    w_p: float = 1.0,
    w_r: float = 1.0,
    w_s: float = 0.1,
) -> torch.Tensor:
    """Progress over the best prior state, a regression penalty once success was reached, and a small
    preservation credit for keeping it: w_p*Delta - w_r*max(m - r, 0)*[m >= tau] + w_s*[m >= tau, r >= m]."""
    r = scores_NGK.float()
    m = best_prior(scores_NGK, valid_NGK)
    delta = (r - m).clamp(min=0)
    reached = (m >= tau).float()
    c = w_p * delta - w_r * (m - r).clamp(min=0) * reached + w_s * reached * (r >= m).float()
    return c * valid_NGK


def hindsight_credit(scores_NGK: torch.Tensor, valid_NGK: torch.Tensor, tau: float = 1.0) -> torch.Tensor:
    """For a non-improving turn before success: F_{i,k} minus the leave-one-out mean of F_{j,k} over the
    group's other episodes that reached turn k (0 when none did). No extra verifier calls."""
    v = valid_NGK.float()
    r = scores_NGK.float()
    m = best_prior(scores_NGK, valid_NGK)
    F = future_best(scores_NGK, valid_NGK)
    others = v.sum(-2, keepdim=True) - v
    loo = ((F * v).sum(-2, keepdim=True) - F * v) / others.clamp(min=1)
    eligible = (r <= m) & (m < tau) & (others > 0) & (v > 0)
    return torch.where(eligible, F - loo, torch.zeros_like(F))


def counterfactual_credit(
    scores_NGK: torch.Tensor, cf_mean_NGK: torch.Tensor, cf_mask_NGK: torch.Tensor
) -> torch.Tensor:
    """c_cf = r_{i,k} - mean of the M resampled alternatives' scores, at the selected turns only."""
    return (scores_NGK.float() - cf_mean_NGK.float()) * cf_mask_NGK.float()


def zscore(c_NGK: torch.Tensor, valid_NGK: torch.Tensor, over: str = "turn", eps: float = 1e-6) -> torch.Tensor:
    """Normalise credit within each (prompt, turn index) (`turn`) or over all turns of a prompt (`group`);
    cells with fewer than two entries or zero spread get 0."""
    v = valid_NGK.float()
    dims = (-2,) if over == "turn" else (-2, -1)
    n = v.sum(dims, keepdim=True)
    mean = (c_NGK * v).sum(dims, keepdim=True) / n.clamp(min=1)
    var = (((c_NGK - mean) * v) ** 2).sum(dims, keepdim=True) / (n - 1).clamp(min=1)
    std = var.sqrt()
    z = (c_NGK - mean) / (std + eps)
    return torch.where((n >= 2) & (std > 0) & (v > 0), z, torch.zeros_like(z))


LADDER = ("trajectory", "turn_reward", "score_diff", "retrospective", "hindsight", "full")
TURN_DECAY = 0.8
"""Earlier turns get more turn credit than later ones (the paper rewards fast repair): turn k's
normalised credit is weighted turn_decay^(k-1); 1.0 treats every turn alike."""


def tcpo_advantage(
    scores_NGK: torch.Tensor,
    valid_NGK: torch.Tensor,
    mode: str = "full",
    lam: float = 1.0,
    tau: float = 1.0,
    w_p: float = 1.0,
    w_r: float = 1.0,
    w_s: float = 0.1,
    traj_score: str = "final",
    norm: str = "turn",
    turn_decay: float = TURN_DECAY,
    cf_mean_NGK: torch.Tensor | None = None,
    cf_mask_NGK: torch.Tensor | None = None,
    traj_shaping_NG: torch.Tensor | None = None,
) -> torch.Tensor:
    """A_{i,k} = A_traj_i + lam * turn_decay^(k-1) * z(c_{i,k}); turn_decay < 1 favours earlier turns.

    z normalises within each (prompt, turn index) cell (`norm=turn`): it keeps a turn's standing among its
    peers, not the size of its credit, so a cell of two episodes always becomes +-1/sqrt(2) = +-0.707 (a
    counterfactual credit of 0.05 and one of 0.9 weigh the same); `norm=group` pools a prompt's turns.

    `traj_shaping_NG` (reward shaping summed over the episode) is added to the trajectory score before
    its group normalisation; the turn components see verifier scores only.

    `mode` walks the ablation ladder: trajectory (c = 0), turn_reward (c = r_k), score_diff
    (c = r_k - r_{k-1}), retrospective, hindsight (retrospective + hindsight), full (+ the
    counterfactual, which replaces the other components at the selected turns).
    """
    if mode not in LADDER:
        raise ValueError(f"unknown TCPO mode {mode!r}; use one of {LADDER}")
    v = valid_NGK.float()
    r = scores_NGK.float() * v
    last = (v.cumsum(-1) == v.sum(-1, keepdim=True)) & (v > 0)
    final = (r * last).sum(-1)
    best = torch.where(v > 0, r, torch.full_like(r, NEG)).max(-1).values.clamp(min=0)
    traj = final if traj_score == "final" else best
    if traj_shaping_NG is not None:
        traj = traj + traj_shaping_NG.float()
    a_traj = grpo_advantage(traj)[..., None] * v
    if mode == "trajectory":
        return a_traj
    if mode == "turn_reward":
        c = r
    elif mode == "score_diff":
        prev = torch.cat([torch.zeros_like(r[..., :1]), r[..., :-1]], dim=-1)
        c = (r - prev) * v
    else:
        c = retrospective_credit(scores_NGK, valid_NGK, tau, w_p, w_r, w_s)
        if mode in ("hindsight", "full"):
            c = c + hindsight_credit(scores_NGK, valid_NGK, tau)
        if mode == "full" and cf_mean_NGK is not None and cf_mask_NGK is not None:
            m = cf_mask_NGK.float() * v
            c = torch.where(m > 0, counterfactual_credit(scores_NGK, cf_mean_NGK, m), c)
    decay = turn_decay ** torch.arange(r.shape[-1], dtype=torch.float32)
    return a_traj + lam * decay * zscore(c, valid_NGK, norm)
