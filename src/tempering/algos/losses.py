"""The policy loss: PPO-clip per token, KL estimators, and loss aggregation.

Aggregation divides by a normaliser fixed for the whole optimizer step (`LossNorm`), so gradient
accumulation over micro-batches (and data-parallel ranks) gives the same gradient as one big batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")
KL_ESTIMATORS = ("k1", "k2", "k3")


@dataclass
class LossNorm:
    """Denominators of one optimizer step, counted over all of its micro-batches (and ranks)."""

    tokens: float
    """Number of loss tokens in the step."""
    seqs: float
    """Number of sequences with at least one loss token in the step."""
    max_len: float = 1.0
    """The constant of `seq-mean-token-sum-norm` (Dr. GRPO): the maximum response length."""

    @classmethod
    def of(cls, mask_BT: torch.Tensor, max_len: float | None = None) -> LossNorm:
        tokens = float(mask_BT.sum())
        seqs = float((mask_BT.sum(-1) > 0).sum())
        return cls(tokens=max(tokens, 1.0), seqs=max(seqs, 1.0), max_len=float(max_len or mask_BT.shape[-1]))


def aggregate(loss_BT: torch.Tensor, mask_BT: torch.Tensor, mode: str, norm: LossNorm | None = None) -> torch.Tensor:
    """Reduce a per-token loss to a scalar; `norm` defaults to this batch alone."""
    mask = mask_BT.to(loss_BT.dtype)
    norm = norm or LossNorm.of(mask_BT)
    if mode == "token-mean":
        return (loss_BT * mask).sum() / norm.tokens
    if mode == "seq-mean-token-mean":
        per_seq = (loss_BT * mask).sum(-1) / mask.sum(-1).clamp(min=1)
        return per_seq.sum() / norm.seqs
    if mode == "seq-mean-token-sum-norm":
        return ((loss_BT * mask).sum(-1) / norm.max_len).sum() / norm.seqs
    raise ValueError(f"unknown loss aggregation {mode!r}; use one of {AGG_MODES}")


def ppo_clip_loss(
    logp_BT: torch.Tensor,
    old_logp_BT: torch.Tensor,
    adv_BT: torch.Tensor,
    mask_BT: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    dual_clip: float | None = 3.0,
    agg: str = "token-mean",
    norm: LossNorm | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped surrogate with asymmetric clip (DAPO clip-higher) and dual clip for negative advantages."""
    log_ratio = (logp_BT - old_logp_BT).clamp(-20.0, 20.0)
    ratio = log_ratio.exp()
    unclipped = -adv_BT * ratio
    clipped = -adv_BT * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    loss = torch.maximum(unclipped, clipped)
    if dual_clip is not None:
        loss = torch.where(adv_BT < 0, torch.minimum(loss, -dual_clip * adv_BT), loss)
    m = mask_BT.bool()
    with torch.no_grad():
        n = m.sum().clamp(min=1)
        stats = {
            "clip_frac_low": ((ratio < 1.0 - clip_low) & (adv_BT < 0) & m).sum() / n,
            "clip_frac_high": ((ratio > 1.0 + clip_high) & (adv_BT > 0) & m).sum() / n,
            "approx_kl": ((ratio - 1.0 - log_ratio) * m).sum() / n,  # k3 estimate of KL(old || new)
        }
    return aggregate(loss, mask_BT, agg, norm), stats


def kl_estimate(logp_BT: torch.Tensor, ref_logp_BT: torch.Tensor, kind: str = "k3") -> torch.Tensor:
    """Per-token estimate of KL(pi || ref) on the sampled token; d = log ref - log pi."""
    d = ref_logp_BT - logp_BT
    if kind == "k1":
        return -d
    if kind == "k2":
        return 0.5 * d * d
    if kind == "k3":
        return (d.clamp(-20.0, 20.0).exp() - d - 1.0).clamp(-10.0, 10.0)
    raise ValueError(f"unknown KL estimator {kind!r}; use one of {KL_ESTIMATORS}")


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    logp = logits.float().log_softmax(-1)
    return -(logp.exp() * logp).sum(-1)
