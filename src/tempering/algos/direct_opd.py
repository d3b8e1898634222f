"""Direct-OPD: transfer what RL changed in a small teacher (the shift log pi_T - log pi_Tref) to a student.

At each student prefix s_t, over the student's top-k tokens S_t (k = 16):
    r_t(v)    = log pi_T(v | s_t) - log pi_Tref(v | s_t)              the teacher pair's policy shift
    pbar_t(v) = softmax of the student's log-probs over S_t           detached weights
    A_t(v)    = pbar_t(v) * r_t(v)                                    no baseline, no group normalisation
The loss is PPO-clip per top-k token, summed over k and aggregated over the response, plus
alpha * k3-KL(pi_theta || pi_S) on the sampled token, where pi_S is the student's own start. alpha adapts
every step: alpha <- clip(alpha * (1 + rate * sign(rbar)), lo, hi), rbar the batch mean of sum_v pbar r.
"""

from __future__ import annotations

import torch

from tempering.algos.losses import LossNorm, aggregate
from tempering.algos.opd import renormalize


def topk_weights(student_topk_logp_BTK: torch.Tensor) -> torch.Tensor:
    """pbar: the student's probabilities renormalised over its top-k set (detached)."""
    return renormalize(student_topk_logp_BTK.detach()).exp()


def direct_opd_advantage(
    student_topk_logp_BTK: torch.Tensor,
    teacher_logp_BTK: torch.Tensor,
    teacher_ref_logp_BTK: torch.Tensor,
    mask_BT: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(A_BTK, r_BTK): the per-candidate advantage pbar * r and the shift r, both 0 off the mask."""
    r = (teacher_logp_BTK - teacher_ref_logp_BTK) * mask_BT[..., None]
    return topk_weights(student_topk_logp_BTK) * r, r


def mean_shift(adv_BTK: torch.Tensor, mask_BT: torch.Tensor) -> float:
    """rbar: the student-weighted shift sum_v pbar(v) r(v), averaged over the batch's response tokens."""
    return float((adv_BTK.sum(-1) * mask_BT).sum() / mask_BT.sum().clamp(min=1))


def adaptive_alpha(alpha: float, rbar: float, rate: float = 0.01, lo: float = 0.5, hi: float = 2.5) -> float:
    """alpha <- clip(alpha * (1 + rate * sign(rbar)), lo, hi)."""
    sign = (rbar > 0) - (rbar < 0)
    return min(hi, max(lo, alpha * (1.0 + rate * sign)))


def topk_ppo_loss(
    logp_BTK: torch.Tensor,
    old_logp_BTK: torch.Tensor,
    adv_BTK: torch.Tensor,
    mask_BT: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float | None = 3.0,
    agg: str = "token-mean",
    norm: LossNorm | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO-clip for every top-k candidate, summed over k per position, then aggregated like the policy loss.

    With one on-policy epoch the ratio is 1 and the gradient is -sum_k A_k grad log pi(v_k).
    """
    log_ratio = (logp_BTK - old_logp_BTK).clamp(-20.0, 20.0)
    ratio = log_ratio.exp()
    loss = torch.maximum(-adv_BTK * ratio, -adv_BTK * ratio.clamp(1.0 - clip_low, 1.0 + clip_high))
    if dual_clip is not None:
        loss = torch.where(adv_BTK < 0, torch.minimum(loss, -dual_clip * adv_BTK), loss)
    m = mask_BT[..., None].bool().expand_as(ratio)
    with torch.no_grad():
        n = m.sum().clamp(min=1)
        stats = {
            "clip_frac_low": ((ratio < 1.0 - clip_low) & (adv_BTK < 0) & m).sum() / n,
            "clip_frac_high": ((ratio > 1.0 + clip_high) & (adv_BTK > 0) & m).sum() / n,
        }
    return aggregate(loss.sum(-1), mask_BT, agg, norm), stats
