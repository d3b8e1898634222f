"""Expand then compress: coverage for Residual GRPO, and the multi-teacher credit of TU-OPD.

Pass rates p_j(x) of teacher j on example x come from n samples each.
- Expansion (RGRPO): example x is covered after round r when max_{j<=r} p_j(x) >= kappa; the next
  round trains on the uncovered examples only, or up-weights them by (1 + beta).
- Compression (TU-OPD): only reliable teachers R(x) = {j : p_j(x) >= rho} count, weighted by
  q_j(x) = p_j(x) / sum_{k in R(x)} p_k(x); on the student's sampled token y_t
      A_t = sum_j q_j (log pi_j(y_t) - log pi_S(y_t)).
- Consensus-Residual Decomposition keeps the winner's distinctive preference: with the log-linear
  consensus l_C = sum_j q_j log pi_j and the winner w = argmax_j q_j,
      A_t = l_C + eta * max(log pi_w - l_C, 0) - log pi_S.
"""

from __future__ import annotations

from typing import Any

import torch


def covered(pass_JN: torch.Tensor, kappa: float = 0.5) -> torch.Tensor:
    """Per example: some teacher's pass rate reaches kappa."""
    return (pass_JN >= kappa).any(0)


def coverage_report(pass_JN: torch.Tensor, kappa: float = 0.5) -> dict[str, Any]:
    """Coverage of each teacher, of the union after each round, what each round added, and the
    pairwise overlap (Jaccard index of the covered sets)."""
    cov_JN = pass_JN >= kappa
    J = cov_JN.shape[0]
    union = torch.cumsum(cov_JN.int(), 0) > 0
    overlap = [[0.0] * J for _ in range(J)]
    for i in range(J):
        for j in range(J):
            inter = float((cov_JN[i] & cov_JN[j]).sum())
            uni = float((cov_JN[i] | cov_JN[j]).sum())
            overlap[i][j] = inter / uni if uni else 1.0
    return {
        "teacher": cov_JN.float().mean(-1).tolist(),
        "union": union.float().mean(-1).tolist(),
        "added": [float(union[0].float().mean())] + (union[1:].float().mean(-1) - union[:-1].float().mean(-1)).tolist(),
        "overlap": overlap,
    }


def residual_weights(pass_JN: torch.Tensor, kappa: float = 0.5, upweight: float | None = None) -> torch.Tensor:
    """Sampling weight of each example in the next round: 1 on the uncovered and 0 on the covered
    (train on the residual only), or 1 + upweight on the uncovered and 1 on the covered."""
    unc = (~covered(pass_JN, kappa)).float()
    if upweight is None:
        return unc
    return 1.0 + upweight * unc


def reliability_weights(pass_BJ: torch.Tensor, rho: float = 0.5) -> torch.Tensor:
    """q_BJ: pass rates of the reliable teachers (p >= rho), normalised per example; a row is all 0
    when no teacher is reliable on that example (nothing to distil there)."""
    return teacher_weights(pass_BJ, rho, "quality", gating=True)


def teacher_weights(
    pass_BJ: torch.Tensor, rho: float = 0.5, weighting: str = "quality", gating: bool = True
) -> torch.Tensor:
    """q_BJ for TU-OPD and its ablations: `quality` weights by pass rate, `uniform` equally; with
    `gating` only teachers with p >= rho count. Uniform without gating is plain multi-teacher averaging."""
    p = pass_BJ.float()
    keep = (p >= rho).float() if gating else torch.ones_like(p)
    if weighting == "quality":
        w = p * keep
    elif weighting == "uniform":
        w = keep
    else:
        raise ValueError(f"unknown weighting {weighting!r}; use quality or uniform")
    total = w.sum(-1, keepdim=True)
    return torch.where(total > 0, w / total.clamp(min=1e-12), torch.zeros_like(w))


def tu_opd_advantage(
    teacher_logp_BTJ: torch.Tensor, student_logp_BT: torch.Tensor, q_BJ: torch.Tensor, mask_BT: torch.Tensor
) -> torch.Tensor:
    """Quality-weighted OPD over the reliable teachers; rows whose q is all 0 get 0."""
    gap = teacher_logp_BTJ - student_logp_BT[..., None]
    return (gap * q_BJ[:, None, :]).sum(-1) * mask_BT


def consensus_residual_advantage(
    teacher_logp_BTJ: torch.Tensor,
    student_logp_BT: torch.Tensor,
    q_BJ: torch.Tensor,
    mask_BT: torch.Tensor,
    eta: float = 1.0,
) -> torch.Tensor:
    """Target l* = l_C + eta * max(log pi_w - l_C, 0) against the student's log-prob; 0 for rows without a reliable teacher."""
    l_c = (teacher_logp_BTJ * q_BJ[:, None, :]).sum(-1)
    w = q_BJ.argmax(-1)
    l_w = teacher_logp_BTJ.gather(-1, w[:, None, None].expand(-1, teacher_logp_BTJ.shape[1], 1)).squeeze(-1)
    target = l_c + eta * (l_w - l_c).clamp(min=0.0)
    has = (q_BJ.sum(-1) > 0).float()[:, None]
    return (target - student_logp_BT) * mask_BT * has
