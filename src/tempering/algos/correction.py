"""Rollout correction: the sampler that produced a batch is not exactly the policy being trained.

vLLM's kernels, an asynchronous sampler one update behind, or a different precision give log-probs
pi_sampler that differ from the trainer's pi_trainer on the same tokens. The PPO ratio then takes the
trainer's log-probs as the behaviour policy, and each token is reweighted by truncated importance
sampling (tis) or its sequence is dropped when the ratio leaves a band (mask), as the GRPO note describes.
"""

from __future__ import annotations

import torch

CORRECTIONS = ("none", "tis", "mask")


def mismatch_kl(trainer_logp_BT: torch.Tensor, sample_logp_BT: torch.Tensor, mask_BT: torch.Tensor) -> torch.Tensor:
    """Mean k3 estimate of KL(sampler || trainer) over the loss tokens: exp(d) - d - 1 with
    d = log pi_trainer - log pi_sampler (0 when the engines agree)."""
    d = (trainer_logp_BT - sample_logp_BT).clamp(-20.0, 20.0)
    m = mask_BT.float()
    return ((d.exp() - d - 1.0) * m).sum() / m.sum().clamp(min=1)


def rollout_correction(
    trainer_logp_BT: torch.Tensor,
    sample_logp_BT: torch.Tensor,
    mask_BT: torch.Tensor,
    mode: str = "tis",
    cap: float = 2.0,
) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
    """Per-token weights and the loss mask that correct for the sampler/trainer mismatch.

    tis:  w_t = min(pi_trainer / pi_sampler, C) per token (truncated importance sampling), mask unchanged.
    mask: sequences whose ratio prod_t pi_trainer / pi_sampler leaves [1/C, C] are dropped from the loss.
    none: w = 1. Returns (w_BT, mask_BT, stats); w is 0 off the mask. Scaling a token's advantage by
    w > 0 scales its clipped loss by w, so the weights apply to advantages.
    """
    if mode not in CORRECTIONS:
        raise ValueError(f"unknown rollout correction {mode!r}; use one of {', '.join(CORRECTIONS)}")
    if cap <= 1.0:
        raise ValueError(f"the rollout correction cap C must be > 1, got {cap}")
    m = mask_BT.float()
    log_ratio = (trainer_logp_BT - sample_logp_BT).clamp(-20.0, 20.0) * m
    stats = {"mismatch_kl": float(mismatch_kl(trainer_logp_BT, sample_logp_BT, mask_BT))}
    n_tok = m.sum().clamp(min=1)
    if mode == "tis":
        ratio = log_ratio.exp()
        w = ratio.clamp(max=cap) * m
        stats["tis_truncated_frac"] = float(((ratio > cap) & (m > 0)).sum() / n_tok)
        stats["tis_mean_weight"] = float(w.sum() / n_tok)
        return w, mask_BT, stats
    if mode == "mask":
        seq = log_ratio.sum(-1)
        has = m.sum(-1) > 0
        keep = (seq.abs() <= torch.log(torch.tensor(cap))) | ~has
        stats["masked_seq_frac"] = float((~keep & has).sum() / has.sum().clamp(min=1))
        new_mask = mask_BT * keep[:, None].to(mask_BT.dtype)
        return new_mask.float(), new_mask, stats
    return m, mask_BT, stats
