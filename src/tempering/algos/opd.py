"""On-policy distillation (OPD): the student samples, a teacher scores the same tokens.

Two forms:
- Sampled-token reverse KL as a per-token advantage, A_t = log pi_T(y_t) - log pi_S(y_t), used in the
  ordinary policy-gradient loss with no discount (as in the Thinking Machines recipe).
- The generalised Jensen-Shannon divergence of GKD as a direct loss on whole distributions (the full
  vocabulary, or the teacher's top-k plus a rest bucket): beta = 0 is forward KL(T || S), beta = 1 is reverse
  KL(S || T), and in between beta * KL(T || M) + (1 - beta) * KL(S || M) with M = beta T + (1 - beta) S.
"""

from __future__ import annotations

import math

import torch


def reverse_kl_advantage(
    student_logp_BT: torch.Tensor, teacher_logp_BT: torch.Tensor, mask_BT: torch.Tensor
) -> torch.Tensor:
    """A_t = -(log pi_S(y_t) - log pi_T(y_t)) on the sampled tokens, 0 off the mask."""
    return (teacher_logp_BT - student_logp_BT) * mask_BT


def _kl(p_logp: torch.Tensor, q_logp: torch.Tensor) -> torch.Tensor:
    """KL(p || q) over the last axis; terms with p = 0 contribute 0."""
    p = p_logp.exp()
    return torch.where(p > 0, p * (p_logp - q_logp), torch.zeros_like(p)).sum(-1)


def generalized_jsd(student_logp: torch.Tensor, teacher_logp: torch.Tensor, beta: float) -> torch.Tensor:
    """Per-position JSD_beta between two distributions given as log-probs over the last axis."""
    if not 0.0 <= beta <= 1.0:
        raise ValueError(f"beta must be in [0, 1], got {beta}")
    if beta == 0.0:
        return _kl(teacher_logp, student_logp)
    if beta == 1.0:
        return _kl(student_logp, teacher_logp)
    mix = torch.logsumexp(torch.stack([teacher_logp + math.log(beta), student_logp + math.log(1.0 - beta)]), dim=0)
    return beta * _kl(teacher_logp, mix) + (1.0 - beta) * _kl(student_logp, mix)


def renormalize(logp_K: torch.Tensor) -> torch.Tensor:
    """Log-probs restricted to a support set (last axis) and renormalised to sum to one."""
    return logp_K - torch.logsumexp(logp_K, dim=-1, keepdim=True)


def with_rest(logp_K: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Full-vocabulary log-probs of k ids, plus one last entry for the mass of every other token."""
    mass = torch.logsumexp(logp_K, dim=-1, keepdim=True).exp().clamp(max=1.0 - eps)
    return torch.cat([logp_K, torch.log1p(-mass)], dim=-1)


def topk_jsd(student_logp_BTK: torch.Tensor, teacher_logp_BTK: torch.Tensor, beta: float) -> torch.Tensor:
    """JSD_beta on the teacher's top-k ids plus a bucket for the rest of the vocabulary.

    Inputs are full-vocabulary log-probs at the same k ids. Both distributions are exact on these
    k + 1 outcomes, so this is a coarse-grained (lower-bound) version of the full divergence that
    still moves the student's mass into the teacher's top-k.
    """
    return generalized_jsd(with_rest(student_logp_BTK), with_rest(teacher_logp_BTK), beta)
