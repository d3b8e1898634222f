"""The policy loss: PPO-clip per token, KL estimators, and loss aggregation.

Aggregation divides by a normaliser fixed for the whole optimizer step (`LossNorm`), so gradient
accumulation over micro-batches (and data-parallel ranks) gives the same gradient as one big batch.
The modes are verl's (`actor.loss_agg_mode`), over the whole step:
- `token-mean`: every token weighs the same (DAPO; TRL's `loss_type=dapo`);
- `token-sum`: the plain sum over tokens (no normalisation: the gradient grows with the batch);
- `seq-mean-token-mean`: mean per sequence, then over sequences (GRPO's original; TRL's `grpo`);
- `seq-mean-token-sum`: sum per sequence, then the mean over sequences;
- `seq-mean-token-sum-norm`: sum per sequence divided by a constant (the maximum response length),
  then the mean over sequences (Dr. GRPO; TRL's `dr_grpo`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

AGG_MODES = ("token-mean", "token-sum", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")
KL_ESTIMATORS = ("k1", "k2", "k3", "abs")
KL_ALIASES = {"kl": "k1", "mse": "k2", "low_var_kl": "k3"}
"""verl's names (`kl_loss_type`) for the same estimators."""


@dataclass
class LossNorm:
    """Denominators of one optimizer step, counted over all of its micro-batches (and ranks)."""

    tokens: float
    """Number of loss tokens in the step."""
    seqs: float
    """Number of sequences with at least one loss token in the step."""
    max_len: float = 1.0
    """The constant of `seq-mean-token-sum-norm` (Dr. GRPO): the maximum response length."""
    world: float = 1.0
    """Data-parallel ranks whose gradients are averaged: `token-sum` multiplies by it, so the average
    of the ranks' sums is the sum over the whole step (the counts above are already divided by it)."""

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
    if mode == "token-sum":
        return (loss_BT * mask).sum() * norm.world
    if mode == "seq-mean-token-mean":
        per_seq = (loss_BT * mask).sum(-1) / mask.sum(-1).clamp(min=1)
        return per_seq.sum() / norm.seqs
    if mode == "seq-mean-token-sum":
        return (loss_BT * mask).sum() / norm.seqs
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
    """Clipped surrogate with asymmetric clip (DAPO clip-higher) and dual clip for negative advantages.

    Statistics (token shares): `clip_frac_low` / `clip_frac_high` where the ratio left the clip range on
    the side that stops the gradient, `dual_clip_frac` where the dual clip capped a negative advantage's
    loss at c * |A| (verl's `pg_clipfrac_lower`), and `approx_kl`."""
    log_ratio = (logp_BT - old_logp_BT).clamp(-20.0, 20.0)
    ratio = log_ratio.exp()
    unclipped = -adv_BT * ratio
    clipped = -adv_BT * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    loss = torch.maximum(unclipped, clipped)
    m = mask_BT.bool()
    with torch.no_grad():
        n = m.sum().clamp(min=1)
        stats = {
            "clip_frac_low": ((ratio < 1.0 - clip_low) & (adv_BT < 0) & m).sum() / n,
            "clip_frac_high": ((ratio > 1.0 + clip_high) & (adv_BT > 0) & m).sum() / n,
            "approx_kl": ((ratio - 1.0 - log_ratio) * m).sum() / n,  # k3 estimate of KL(old || new)
        }
    if dual_clip is not None:
        cap = -dual_clip * adv_BT
        with torch.no_grad():
            stats["dual_clip_frac"] = ((adv_BT < 0) & (loss > cap) & m).sum() / n
        loss = torch.where(adv_BT < 0, torch.minimum(loss, cap), loss)
    return aggregate(loss, mask_BT, agg, norm), stats


def kl_estimate(logp_BT: torch.Tensor, ref_logp_BT: torch.Tensor, kind: str = "k3") -> torch.Tensor:
    """Per-token estimate of KL(pi || ref) on the sampled token; d = log ref - log pi.

    k1 = -d (unbiased), k2 = d^2 / 2 (verl's `mse`), k3 = e^d - d - 1 (unbiased and >= 0; verl's
    `low_var_kl`, clamped to [-10, 10] as there), abs = |d| (verl's `abs`)."""
    kind = KL_ALIASES.get(kind, kind)
    d = ref_logp_BT - logp_BT
    if kind == "k1":
        return -d
    if kind == "k2":
        return 0.5 * d * d
    if kind == "k3":
        return (d.clamp(-20.0, 20.0).exp() - d - 1.0).clamp(-10.0, 10.0)
    if kind == "abs":
        return d.abs()
    raise ValueError(f"unknown KL estimator {kind!r}; use one of {KL_ESTIMATORS} or {sorted(KL_ALIASES)}")


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    logp = logits.float().log_softmax(-1)
    return -(logp.exp() * logp).sum(-1)
