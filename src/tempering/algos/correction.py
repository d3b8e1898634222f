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
| `decoupled` | AReaL's decoupled PPO (`rejection_sampling`: token, mask, ratio) | rho_t inside [floor, cap], else 0 |
| `token_k1`, `seq_sum_k1`, `seq_mean_k1` | verl `rollout_rs` of the same name | 1; the token (or episode) leaves the mask unless its k1 (summed, or its mean) is inside [log floor, log cap] |
| `token_k2`, `token_k3`, `seq_{sum,mean,max}_k{2,3}` | verl `rollout_rs` of the same name | 1; the token (or episode) leaves the mask when its k2 or k3 (summed, mean, or the largest token's) passes cap |
| `bypass` | verl `bypass_mode` (its `bypass_ppo_clip` preset) | 1, and the sampler's log-probs are the PPO ratio's old ones: no recomputation pass |

verl's named presets are values too (`PRESETS`: each a list of the modes above, their weights and masks
multiplied). rho_seq = exp(sum_t log rho_t) over every row of an episode (an episode split into rows is one
sequence), the sum clamped to +-20 before exp as verl's weighting does (TRL does not clamp; the two agree
below e^20); the rejection statistics clamp each token's log rho to +-20 first, as verl's rejection does.
verl's k1 = log pi_behav - log pi_prox, k2 = (log rho)^2 / 2, k3 = rho - 1 - log rho. The weighting modes
keep a zero-weight token in the loss normaliser (TRL, AReaL and verl's IS divide by the original token
count); the rejection modes take it out of the mask (verl's rejection changes the response mask), so the
normaliser counts kept tokens. `batch_norm` divides the weights by their mean over the batch's loss tokens
(sequence levels: over its episodes), verl's `rollout_is_batch_normalize`. A cap of infinity is no upper
bound (TRL's `vllm_importance_sampling_clip_max=None`).

Statistics (`rollout/*`): `mismatch_kl`, the k3 estimate of KL(behaviour || proximal) (>= 0, verl's
`rollout_corr/kl` direction; the update's `mismatch_kl` is the same against the trained policy);
`mean_weight`, `weight_min`, `weight_max` over the loss tokens (TRL's importance_sampling_ratio
mean/min/max); `clipped_token_share` (truncation), `masked_token_share` (weight 0 or rejected);
`batch_norm_factor`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

SAFETY = 20.0
"""|log rho| (a token's, or an episode's sum) is clamped here before exp, as verl does (exp(20) ~ 5e8)."""


@dataclass(frozen=True)
class Mode:
    level: str
    """token | sequence (sum over the episode) | mean (its per-token mean) | max (its largest token)"""
    rule: str
    """truncate | mask (weight 0 outside the band, token kept in the normaliser) | reject (mask shrinks) | bypass"""
    cap: float | None
    """the anchor's default upper bound (of rho, or of the divergence for k2 and k3)"""
    floor: float | None
    """the anchor's default lower bound of rho"""
    reweights: bool
    """weights by rho, or bounds the ratio against the sampler (bypass), which corrects the staleness of
    asynchronous rollouts; rejection alone does not"""
    stat: str = "ratio"
    """what the band bounds: ratio (rho), or the divergence estimate k1 (as a ratio band), k2, k3"""


MODES: dict[str, Mode] = {
    "tis": Mode("token", "truncate", 2.0, None, True),  # verl's default 2 (TRL's is 3)
    "sequence_truncate": Mode("sequence", "truncate", 2.0, None, True),
    "token_mask": Mode("token", "mask", 3.0, None, True),  # TRL's vllm_importance_sampling_clip_max
    "sequence_mask": Mode("sequence", "mask", 3.0, None, True),
    "icepop": Mode("token", "mask", 5.0, 0.5, True),  # verl's decoupled_token_icepop
    "decoupled": Mode("token", "mask", 5.0, None, True),  # AReaL's RejectionSamplingConfig: token, mask, 5
    "token_k1": Mode("token", "reject", 2.0, 0.5, False, "k1"),
    "seq_sum_k1": Mode("sequence", "reject", 2.0, 0.5, False, "k1"),  # verl's decoupled_seq_is_rs
    "seq_mean_k1": Mode("mean", "reject", 1.001, 0.999, False, "k1"),  # verl's decoupled_geo_rs
    **{
        f"{name}_{k}": Mode(level, "reject", None, None, False, k)
        for k in ("k2", "k3")
        for name, level in (("token", "token"), ("seq_sum", "sequence"), ("seq_mean", "mean"), ("seq_max", "max"))
    },
    "bypass": Mode("token", "bypass", None, None, True),
}
PRESETS: dict[str, tuple[tuple[str, float | None, float | None], ...]] = {
    "decoupled_token_is": (("tis", 2.0, None),),
    "decoupled_seq_is": (("sequence_truncate", 2.0, None),),
    "decoupled_token_icepop": (("icepop", 5.0, 0.5),),
    "decoupled_seq_is_rs": (("sequence_truncate", 2.0, None), ("seq_sum_k1", 2.0, 0.5)),
    "decoupled_geo_rs": (("seq_mean_k1", 1.001, 0.999),),
    "decoupled_geo_rs_seq_tis": (("sequence_truncate", 2.0, None), ("seq_mean_k1", 1.001, 0.999)),
    "decoupled_geo_rs_token_tis": (("tis", 2.0, None), ("seq_mean_k1", 1.001, 0.999)),
    "bypass_ppo_clip": (("bypass", None, None),),
}
"""verl's `RolloutCorrectionConfig` presets, each the modes (with their bounds) it combines. Its bypass presets
with rejection or a REINFORCE loss (bypass_ppo_clip_geo_rs, bypass_ppo_clip_k3_rs, bypass_pg_*) reject against the
policy being trained inside the loss, which has no equivalent here."""
CORRECTIONS = ("none", *MODES, *PRESETS)
RENAMED = {
    "mask": "loss.rollout_correction=mask dropped sequences and gave the kept ones weight 1; use sequence_mask "
    "(TRL's: the sequence ratio is the weight, 0 outside the band) or seq_sum_k1 (verl's rejection, the old rule)",
}


def steps(
    mode: str, cap: float | None = None, floor: float | None = None
) -> list[tuple[str, float | None, float | None]]:
    """The (mode, cap, floor) steps a value runs, each band checked (`bounds`); a preset fixes its own bands."""
    if mode in PRESETS:
        if cap is not None or floor is not None:
            raise ValueError(
                f"loss.rollout_correction={mode} is verl's preset with its own bounds; remove "
                "loss.rollout_correction_cap and loss.rollout_correction_floor, or name the mode itself"
            )
        return [(m, *bounds(m, c, f)) for m, c, f in PRESETS[mode]]
    return [] if mode == "none" else [(mode, *bounds(mode, cap, floor))]


def bounds(mode: str, cap: float | None = None, floor: float | None = None) -> tuple[float | None, float | None]:
    """The (cap, floor) a mode runs with: the given ones, else the anchor's defaults. Raises ValueError
    for an unknown mode or a band the mode cannot use (a ratio band must be floor < 1 < cap)."""
    if mode in RENAMED:
        raise ValueError(RENAMED[mode])
    if mode == "none":
        return None, None
    if mode not in MODES:
        raise ValueError(f"unknown rollout correction {mode!r}; use one of {', '.join(CORRECTIONS)}")
    m = MODES[mode]
    cap = m.cap if cap is None else cap
    floor = m.floor if floor is None else floor
    if m.rule == "bypass" and (cap is not None or floor is not None):
        raise ValueError("loss.rollout_correction=bypass has no band: remove its cap and floor")
    if m.stat in ("k2", "k3"):
        if cap is None or cap <= 0:
            raise ValueError(f"rollout correction {mode} rejects above a divergence bound: set a cap > 0")
        if floor is not None:
            raise ValueError(f"rollout correction {mode} bounds the divergence from above only: remove the floor")
        return cap, None
    if cap is not None and cap <= 1.0:
        raise ValueError(f"the rollout correction cap must be > 1, got {cap}")
    if floor is not None and not 0.0 < floor < 1.0:
        raise ValueError(f"the rollout correction floor must be in (0, 1), got {floor}")
    if m.rule == "reject" and (cap is None or floor is None or math.isinf(cap)):
        raise ValueError(f"rollout correction {mode} rejects outside [floor, cap] and needs both, finite")
    return cap, floor


def reweights(mode: str) -> bool:
    """Whether a value (a mode or a preset) weights by rho (or bounds the ratio against the sampler)."""
    if mode in PRESETS:
        return any(MODES[m].reweights for m, _, _ in PRESETS[mode])
    return mode in MODES and MODES[mode].reweights


def bypasses(mode: str) -> bool:
    """Whether a value takes the sampler's log-probs as the old ones (no proximal recomputation)."""
    return any(MODES[m].rule == "bypass" for m, _, _ in steps(mode)) if mode != "none" else False


def mismatch_kl(prox_logp_BT: torch.Tensor, behav_logp_BT: torch.Tensor, mask_BT: torch.Tensor) -> torch.Tensor:
    """Mean k3 estimate of KL(behaviour || proximal) over the loss tokens: exp(d) - d - 1 with
    d = log pi_prox - log pi_behav (0 when the two agree)."""
    d = (prox_logp_BT - behav_logp_BT).clamp(-SAFETY, SAFETY)
    m = mask_BT.float()
    return ((d.exp() - d - 1.0) * m).sum() / m.sum().clamp(min=1)


def episode_reduce(
    values_BT: torch.Tensor, mask_BT: torch.Tensor, episode_B: torch.Tensor | None, how: str
) -> torch.Tensor:
    """Each row's episode sum, per-token mean or max of `values_BT` over its loss tokens, shaped (B,): the rows
    of one episode share it."""
    m = mask_BT.float()
    ep = torch.arange(m.shape[0], device=m.device) if episode_B is None else episode_B.long().to(m.device)
    n_ep = int(ep.max()) + 1 if ep.numel() else 0
    if how == "max":
        row = values_BT.masked_fill(m == 0, -math.inf).amax(-1) if values_BT.shape[-1] else m.new_zeros(m.shape[0])
        out = values_BT.new_full((n_ep,), -math.inf).scatter_reduce(0, ep, row, "amax")
        return torch.where(torch.isinf(out), torch.zeros_like(out), out)[ep]
    total = values_BT.new_zeros(n_ep).index_add_(0, ep, (values_BT * m).sum(-1))
    if how == "mean":
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
    batch_norm: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
    """Per-token weights on the advantages and the loss mask for `mode` (table above; a preset runs its modes
    and multiplies their weights and masks).

    cap / floor: the band (None: the anchor's default, `bounds`). episode_B: the episode of each row
    (None: one row each). batch_norm: weights divided by their mean over the batch. Returns (w_BT, mask_BT,
    stats); w is 0 off the returned mask, and equals the mask where pi_prox = pi_behav (every mode then
    reduces to the on-policy update)."""
    m = mask_BT.float()
    stats = {"mismatch_kl": float(mismatch_kl(prox_logp_BT, behav_logp_BT, mask_BT))}
    w, mask = m, mask_BT
    n_tok = m.sum().clamp(min=1)
    for name, c, f in steps(mode, cap, floor):
        w_i, mask_i, s_i = _one(prox_logp_BT, behav_logp_BT, mask_BT, MODES[name], c, f, episode_B, n_tok)
        w = w_i if w is m else w * w_i
        mask = mask_i if mask is mask_BT else mask * mask_i
        for k, v in s_i.items():
            stats[k] = stats.get(k, 0.0) + v if k.endswith("share") else v
    if batch_norm:
        if not any(MODES[n].rule in ("truncate", "mask") for n, _, _ in steps(mode)):
            raise ValueError(f"batch-normalised weights need a weighting mode, and {mode} does not weight")
        level = MODES[steps(mode)[0][0]].level
        if level == "token":
            factor = (w * m).sum() / n_tok
        else:  # verl: the mean of the episodes' weights
            per_row = (w * m).sum(-1) / m.sum(-1).clamp(min=1)
            rows = (m.sum(-1) > 0).float()
            factor = (per_row * rows).sum() / rows.sum().clamp(min=1e-8)
        if factor > 1e-8:
            w = w / factor
        stats["batch_norm_factor"] = float(factor) if factor > 1e-8 else 1.0
    w = w * mask.float()
    on = mask_BT > 0
    stats["mean_weight"] = float((w * m).sum() / n_tok)
    stats["weight_min"] = float(w[on].min()) if bool(on.any()) else 0.0
    stats["weight_max"] = float(w[on].max()) if bool(on.any()) else 0.0
    return w, mask, stats


def _one(
    prox_logp_BT: torch.Tensor,
    behav_logp_BT: torch.Tensor,
    mask_BT: torch.Tensor,
    mode: Mode,
    cap: float | None,
    floor: float | None,
    episode_B: torch.Tensor | None,
    n_tok: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
    m = mask_BT.float()
    stats: dict[str, float] = {}
    log_rho_raw = (prox_logp_BT - behav_logp_BT) * m
    if mode.rule == "bypass":
        return m, mask_BT, stats
    if mode.rule == "reject":
        log_rho = log_rho_raw.clamp(-SAFETY, SAFETY)  # verl's rejection clamps each token
        token = {"k1": -log_rho, "k2": 0.5 * log_rho**2, "k3": log_rho.exp() - 1.0 - log_rho}[mode.stat]
        if mode.level != "token":
            how = {"sequence": "sum", "mean": "mean", "max": "max"}[mode.level]
            token = episode_reduce(token, mask_BT, episode_B, how)[:, None].expand_as(m)
        if mode.stat == "k1":
            assert cap is not None and floor is not None
            keep = ((token >= math.log(floor)) & (token <= math.log(cap))).float()
        else:
            assert cap is not None  # `bounds` gives k2 and k3 a cap
            keep = (token <= cap).float()
        new_mask = mask_BT * keep.to(mask_BT.dtype)
        stats["masked_token_share"] = float(((1 - keep) * m).sum() / n_tok)
        return new_mask.float(), new_mask, stats
    if mode.level == "token":
        level = log_rho_raw.clamp(-SAFETY, SAFETY)
    else:  # verl's weighting sums the raw log-ratios and clamps the sum
        level = episode_reduce(log_rho_raw, mask_BT, episode_B, "sum")[:, None].expand_as(m).clamp(-SAFETY, SAFETY)
    rho = level.exp()
    if mode.rule == "truncate":
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
    return w * m, mask_BT, stats
