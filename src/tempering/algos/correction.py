"""Rollout correction: the policy that sampled a batch is not exactly the policy being trained.

Two policies, in AReaL's terms: the **behaviour** policy pi_behav sampled the tokens (vLLM's kernels, an
asynchronous sampler some updates behind, another precision; its log-probs travel with the batch), and
the **proximal** policy pi_prox is the trainer's own recomputation on the same tokens just before the
update. The PPO ratio is taken against pi_prox (inside the clip); the correction below turns
rho = pi_prox / pi_behav into a weight on each token's advantage (outside the clip) and, for the
rejection modes, into a smaller loss mask. Scaling a token's advantage by w >= 0 scales its clipped
(and dual-clipped) loss by w, so weights on advantages are weights on the loss.

| mode | anchor | weight of a loss token |
| --- | --- | --- |
| `tis` | TRL `token_truncate`, verl `rollout_is=token` | clamp(rho_t, floor, cap) |
| `sequence_truncate` | TRL `sequence_truncate`, verl `rollout_is=sequence` | clamp(rho_seq, floor, cap) |
| `token_mask` | TRL `token_mask` | rho_t inside [floor, cap], else 0 |
| `sequence_mask` | TRL `sequence_mask` (its default) | rho_seq inside [floor, cap], else 0 |
| `icepop` | verl `rollout_is=token` with a `lower_upper` threshold | rho_t inside [floor, cap], else 0 |
| `seq_sum_k1` | verl `rollout_rs=seq_sum_k1` | 1, and the episode leaves the mask unless sum_t k1 is inside [log floor, log cap] |
| `seq_mean_k1` | verl `rollout_rs=seq_mean_k1` (geo_rs) | 1, the same with the mean of k1 (a geometric mean) |
| `decoupled` | AReaL's decoupled PPO (`rejection_sampling`: token, mask, ratio) | rho_t inside [floor, cap], else 0 |

rho_seq = prod_t rho_t over every row of an episode (an episode split into rows is one sequence), and
verl's k1 = log pi_behav - log pi_prox. The weighting modes keep a zero-weight token in the loss
normaliser (TRL, AReaL and verl's IS divide by the original token count); the rejection modes take it
out of the mask (verl's rejection changes the response mask), so the normaliser counts kept tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

SAFETY = 20.0
"""|log rho| is clamped here before exp, as verl does (exp(20) ~ 5e8)."""


@dataclass(frozen=True)
class Mode:
    level: str
    """token | sequence (sum of log rho over the episode) | mean (its per-token mean)"""
    rule: str
    """truncate | mask (weight 0 outside the band, token kept in the normaliser) | reject (mask shrinks)"""
    cap: float | None
    """the anchor's default upper bound"""
    floor: float | None
    """the anchor's default lower bound"""
    reweights: bool
    """weights by rho, which corrects the staleness of asynchronous rollouts; rejection alone does not"""


MODES: dict[str, Mode] = {
    "tis": Mode("token", "truncate", 2.0, None, True),  # verl's default 2 (TRL's is 3)
    "sequence_truncate": Mode("sequence", "truncate", 2.0, None, True),
    "token_mask": Mode("token", "mask", 3.0, None, True),  # TRL's vllm_importance_sampling_clip_max
    "sequence_mask": Mode("sequence", "mask", 3.0, None, True),
    "icepop": Mode("token", "mask", 5.0, 0.5, True),  # verl's decoupled_token_icepop
    "seq_sum_k1": Mode("sequence", "reject", 2.0, 0.5, False),  # verl's decoupled_seq_is_rs
    "seq_mean_k1": Mode("mean", "reject", 1.001, 0.999, False),  # verl's decoupled_geo_rs
    "decoupled": Mode("token", "mask", 5.0, None, True),  # AReaL's RejectionSamplingConfig: token, mask, 5
}
CORRECTIONS = ("none", *MODES)
RENAMED = {
    "mask": "loss.rollout_correction=mask dropped sequences and gave the kept ones weight 1; use sequence_mask "
    "(TRL's: the sequence ratio is the weight, 0 outside the band) or seq_sum_k1 (verl's rejection, the old rule)",
}


def bounds(mode: str, cap: float | None = None, floor: float | None = None) -> tuple[float | None, float | None]:
    """The (cap, floor) a mode runs with: the given ones, else the anchor's defaults. Raises ValueError
    for an unknown mode or a band that is not floor < 1 < cap."""
    if mode in RENAMED:
        raise ValueError(RENAMED[mode])
    if mode == "none":
        return None, None
    if mode not in MODES:
        raise ValueError(f"unknown rollout correction {mode!r}; use one of {', '.join(CORRECTIONS)}")
    m = MODES[mode]
    cap = m.cap if cap is None else cap
    floor = m.floor if floor is None else floor
    if cap is not None and cap <= 1.0:
        raise ValueError(f"the rollout correction cap must be > 1, got {cap}")
    if floor is not None and not 0.0 < floor < 1.0:
        raise ValueError(f"the rollout correction floor must be in (0, 1), got {floor}")
    if m.rule == "reject" and (cap is None or floor is None):
        raise ValueError(f"rollout correction {mode} rejects outside [floor, cap] and needs both")
    return cap, floor


def mismatch_kl(prox_logp_BT: torch.Tensor, behav_logp_BT: torch.Tensor, mask_BT: torch.Tensor) -> torch.Tensor:
    """Mean k3 estimate of KL(behaviour || proximal) over the loss tokens: exp(d) - d - 1 with
    d = log pi_prox - log pi_behav (0 when the two agree)."""
    d = (prox_logp_BT - behav_logp_BT).clamp(-SAFETY, SAFETY)
    m = mask_BT.float()
    return ((d.exp() - d - 1.0) * m).sum() / m.sum().clamp(min=1)


def episode_log_ratio(log_rho_BT: torch.Tensor, mask_BT: torch.Tensor, episode_B: torch.Tensor | None, mean: bool):
    """Each row's episode total (or per-token mean) of log rho over its loss tokens, shaped (B,): the rows
    of one episode share it."""
    m = mask_BT.float()
    ep = torch.arange(m.shape[0], device=m.device) if episode_B is None else episode_B.long().to(m.device)
    n_ep = int(ep.max()) + 1 if ep.numel() else 0
    total = log_rho_BT.new_zeros(n_ep).index_add_(0, ep, (log_rho_BT * m).sum(-1))
    if mean:
        count = m.new_zeros(n_ep).index_add_(0, ep, m.sum(-1))
        total = total / count.clamp(min=1)
    return total[ep]


def rollout_correction(
    prox_logp_BT: torch.Tensor,
    behav_logp_BT: torch.Tensor,
    mask_BT: torch.Tensor,
    mode: str = "tis",
    cap: float | None = None,
    floor: float | None = None,
    episode_B: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
    """Per-token weights on the advantages and the loss mask for `mode` (table above).

    cap / floor: the band (None: the anchor's default, `bounds`). episode_B: the episode of each row
    (None: one row each). Returns (w_BT, mask_BT, stats); w is 0 off the returned mask, and equals the
    mask where pi_prox = pi_behav (every mode then reduces to the on-policy update)."""
    cap, floor = bounds(mode, cap, floor)
    m = mask_BT.float()
    if mode == "none":
        return m, mask_BT, {"mismatch_kl": float(mismatch_kl(prox_logp_BT, behav_logp_BT, mask_BT))}
    m_mode = MODES[mode]
    log_rho = (prox_logp_BT - behav_logp_BT).clamp(-SAFETY, SAFETY) * m
    n_tok = m.sum().clamp(min=1)
    stats = {"mismatch_kl": float(mismatch_kl(prox_logp_BT, behav_logp_BT, mask_BT))}
    if m_mode.level == "token":
        level = log_rho
    else:
        level = episode_log_ratio(log_rho, mask_BT, episode_B, mean=m_mode.level == "mean")[:, None].expand_as(m)
    if m_mode.rule == "reject":
        k1 = -level
        assert cap is not None and floor is not None
        keep = ((k1 >= math.log(floor)) & (k1 <= math.log(cap))).float()
        new_mask = mask_BT * keep.to(mask_BT.dtype)
        stats["masked_token_share"] = float(((1 - keep) * m).sum() / n_tok)
        stats["mean_weight"] = float((keep * m).sum() / n_tok)
        return new_mask.float(), new_mask, stats
    rho = level.clamp(-SAFETY, SAFETY).exp()
    if m_mode.rule == "truncate":
        w = rho.clamp(min=floor, max=cap)
        stats["clipped_token_share"] = float(((w != rho).float() * m).sum() / n_tok)
    else:
        keep = torch.ones_like(rho, dtype=torch.bool)
        if cap is not None:
            keep &= rho <= cap
        if floor is not None:
            keep &= rho >= floor
        w = torch.where(keep, rho, torch.zeros_like(rho))
        stats["masked_token_share"] = float(((~keep).float() * m).sum() / n_tok)
    w = w * m
    stats["mean_weight"] = float(w.sum() / n_tok)
    return w, mask_BT, stats
