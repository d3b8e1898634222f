"""Policy losses: a registry of per-token surrogate objectives, KL estimators, and loss aggregation.

Every policy loss has one signature (`PolicyLossFn`): the current and old per-token log-probs, the
advantages, the loss mask, the loss settings (`LossSettings`) and, optionally, the sampler's log-probs;
it returns the per-token loss and named statistics, and the update aggregates it. A loss registers with
`register_policy_loss(name, linear=..., params=...)`: `linear` says the per-token loss scales with a
token's advantage (loss(w A) = w loss(A) for w >= 0), which is what lets the rollout correction weight the
advantages and asynchronous rollouts train on it; `params` are its own settings and their defaults
(`loss.<param>` keys). `POLICY_LOSSES` is read by the config, the docs and `tempering config`.

Aggregation divides by a normaliser fixed for the whole optimizer step (`LossNorm`), so gradient
accumulation over micro-batches (and data-parallel ranks) gives the same gradient as one big batch.
The modes are verl's (`actor.loss_agg_mode`), over the whole step:
- `token-mean`: every token weighs the same (DAPO; TRL's `loss_type=dapo`);
- `token-sum`: the plain sum over tokens (no normalisation: the gradient grows with the batch);
- `seq-mean-token-mean`: mean per sequence, then over sequences (GRPO's original; TRL's `grpo`);
- `seq-mean-token-sum`: sum per sequence, then the mean over sequences (TRL's `luspo`);
- `seq-mean-token-sum-norm`: sum per sequence divided by a constant (the maximum response length),
  then the mean over sequences (Dr. GRPO; TRL's `dr_grpo`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

import torch
from torch import Tensor

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


@dataclass(frozen=True)
class LossSettings:
    """What a policy loss reads besides its tensors: the clip keys and its own registered parameters."""

    clip_low: float = 0.2
    clip_high: float = 0.28
    dual_clip: float | None = 3.0
    params: Mapping[str, float] = field(default_factory=dict)
    """The loss's own settings by name (`PolicyLoss.params`, each filled in)."""


LossTerms = tuple[Tensor, dict[str, Tensor]]
"""A policy loss's per-token loss and its token-mean statistics."""
PolicyLossFn = Callable[[Tensor, Tensor, Tensor, Tensor, LossSettings, "Tensor | None"], LossTerms]
"""`(logp_BT, old_logp_BT, adv_BT, mask_BT, settings, rollout_logp_BT) -> (loss_BT, statistics)`: the per-token
loss (the update aggregates it, `aggregate`) and token-mean statistics (no gradient)."""


@dataclass(frozen=True)
class PolicyLoss:
    """A registered policy loss and what it declares."""

    fn: PolicyLossFn
    linear: bool
    """The per-token loss scales with its token's advantage: rollout correction and asynchronous rollouts
    apply (they weight the advantages)."""
    clips: tuple[str, ...]
    """Which of `loss.clip_low`, `loss.clip_high`, `loss.dual_clip` it reads."""
    params: dict[str, float]
    """Its own settings and their defaults (each a `loss.<name>` key)."""


POLICY_LOSSES: dict[str, PolicyLoss] = {}
CLIP_KEYS = ("clip_low", "clip_high", "dual_clip")


def register_policy_loss(
    name: str, *, linear: bool, clips: tuple[str, ...] = (), params: Mapping[str, float] | None = None
) -> Callable[[PolicyLossFn], PolicyLossFn]:
    """Register `fn` as the policy loss `name` (`loss.policy_loss=name`)."""
    if not set(clips) <= set(CLIP_KEYS):
        raise ValueError(f"clips names keys of {CLIP_KEYS}, got {clips}")

    def add(fn: PolicyLossFn) -> PolicyLossFn:
        if name in POLICY_LOSSES:
            raise ValueError(f"a policy loss is already registered as {name!r}")
        POLICY_LOSSES[name] = PolicyLoss(fn, linear, tuple(clips), dict(params or {}))
        return fn

    return add


def policy_loss(name: str) -> PolicyLoss:
    if name not in POLICY_LOSSES:
        raise ValueError(f"loss.policy_loss={name!r} is unknown; choose one of {', '.join(POLICY_LOSSES)}")
    return POLICY_LOSSES[name]


def masked_mean(x: torch.Tensor, mask_BT: torch.Tensor) -> torch.Tensor:
    m = mask_BT.to(x.dtype)
    return (x * m).sum() / m.sum().clamp(min=1)


def _ratio_stats(log_ratio: torch.Tensor, mask_BT: torch.Tensor) -> dict[str, torch.Tensor]:
    """`approx_kl`: the k3 estimate of KL(old || new) over the loss tokens."""
    with torch.no_grad():
        return {"approx_kl": masked_mean(log_ratio.exp() - 1.0 - log_ratio, mask_BT)}


def _clipped(
    ratio: torch.Tensor, adv: torch.Tensor, mask_BT: torch.Tensor, s: LossSettings
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """max(-A r, -A clip(r, 1 - low, 1 + high)), then for A < 0 at most c |A| (the dual clip)."""
    unclipped = -adv * ratio
    clipped = -adv * ratio.clamp(1.0 - s.clip_low, 1.0 + s.clip_high)
    loss = torch.maximum(unclipped, clipped)
    m = mask_BT.bool()
    with torch.no_grad():
        stats = {
            "clip_frac_low": masked_mean(((ratio < 1.0 - s.clip_low) & (adv < 0)).float(), m),
            "clip_frac_high": masked_mean(((ratio > 1.0 + s.clip_high) & (adv > 0)).float(), m),
        }
    if s.dual_clip is not None:
        cap = -s.dual_clip * adv
        with torch.no_grad():
            stats["dual_clip_frac"] = masked_mean(((adv < 0) & (loss > cap)).float(), m)
        loss = torch.where(adv < 0, torch.minimum(loss, cap), loss)
    return loss, stats


def sequence_log_ratio(log_ratio_BT: torch.Tensor, mask_BT: torch.Tensor) -> torch.Tensor:
    """Each row's mean log-ratio over its loss tokens, shaped (B, 1) (GSPO's log s_i)."""
    m = mask_BT.to(log_ratio_BT.dtype)
    return ((log_ratio_BT * m).sum(-1) / m.sum(-1).clamp(min=1))[:, None]


@register_policy_loss("ppo_clip", linear=True, clips=CLIP_KEYS)
def ppo_clip(
    logp_BT: Tensor,
    old_logp_BT: Tensor,
    adv_BT: Tensor,
    mask_BT: Tensor,
    s: LossSettings,
    rollout_logp_BT: Tensor | None = None,
) -> LossTerms:
    """PPO-clip per token with clip-higher and the dual clip (verl's `vanilla`; TRL's grpo, dapo, bnpo,
    dr_grpo, whose `delta` is this dual clip)."""
    log_ratio = (logp_BT - old_logp_BT).clamp(-20.0, 20.0)
    loss, stats = _clipped(log_ratio.exp(), adv_BT, mask_BT, s)
    return loss, {**stats, **_ratio_stats(log_ratio, mask_BT)}


@register_policy_loss("gspo", linear=True, clips=CLIP_KEYS)
def gspo(
    logp_BT: Tensor,
    old_logp_BT: Tensor,
    adv_BT: Tensor,
    mask_BT: Tensor,
    s: LossSettings,
    rollout_logp_BT: Tensor | None = None,
) -> LossTerms:
    """GSPO: one ratio per sequence, s_i = exp(mean_t log r_t), clipped (TRL's
    `importance_sampling_level=sequence`; its gradient reaches every token through the mean)."""
    log_ratio = logp_BT - old_logp_BT
    seq = sequence_log_ratio(log_ratio, mask_BT)
    loss, stats = _clipped(seq.exp().expand_as(adv_BT), adv_BT, mask_BT, s)
    return loss, {**stats, **_ratio_stats(log_ratio.clamp(-20.0, 20.0), mask_BT)}


@register_policy_loss("gspo_token", linear=True, clips=("clip_low", "clip_high"))
def gspo_token(
    logp_BT: Tensor,
    old_logp_BT: Tensor,
    adv_BT: Tensor,
    mask_BT: Tensor,
    s: LossSettings,
    rollout_logp_BT: Tensor | None = None,
) -> LossTerms:
    """GSPO-token: s_it = sg(s_i) pi_t / sg(pi_t), the sequence ratio's value with each token's own gradient,
    so per-token advantages may differ (verl's `gspo`; log s_it capped at 10 as there)."""
    log_ratio = logp_BT - old_logp_BT
    seq = sequence_log_ratio(log_ratio, mask_BT).detach()
    ratio = (logp_BT - logp_BT.detach() + seq).clamp(max=10.0).exp()
    loss, stats = _clipped(ratio, adv_BT, mask_BT, replace(s, dual_clip=None))
    return loss, {**stats, **_ratio_stats(log_ratio.clamp(-20.0, 20.0), mask_BT)}


@register_policy_loss("cispo", linear=True, clips=("clip_low", "clip_high"))
def cispo(
    logp_BT: Tensor,
    old_logp_BT: Tensor,
    adv_BT: Tensor,
    mask_BT: Tensor,
    s: LossSettings,
    rollout_logp_BT: Tensor | None = None,
) -> LossTerms:
    """CISPO: -sg(clip(r, 1 - low, 1 + high)) A log pi (MiniMax-M1; verl's `cispo`; TRL's `cispo` bounds r
    above only, at epsilon_high: clip_low=1 and clip_high=epsilon_high - 1 here)."""
    log_ratio = (logp_BT - old_logp_BT).clamp(-20.0, 20.0)
    ratio = log_ratio.exp()
    weight = ratio.clamp(1.0 - s.clip_low, 1.0 + s.clip_high).detach()
    with torch.no_grad():
        stats = {"clip_frac": masked_mean((weight != ratio).float(), mask_BT)}
    return -weight * adv_BT * logp_BT, {**stats, **_ratio_stats(log_ratio, mask_BT)}


@register_policy_loss("sapo", linear=True, params={"sapo_tau_pos": 1.0, "sapo_tau_neg": 1.05})
def sapo(
    logp_BT: Tensor,
    old_logp_BT: Tensor,
    adv_BT: Tensor,
    mask_BT: Tensor,
    s: LossSettings,
    rollout_logp_BT: Tensor | None = None,
) -> LossTerms:
    """SAPO: a soft gate instead of the clip, -(4 / tau) sigmoid(tau (r - 1)) A, tau by the advantage's sign
    (verl's and TRL's `sapo`)."""
    log_ratio = (logp_BT - old_logp_BT).clamp(-20.0, 20.0)
    pos, neg = s.params["sapo_tau_pos"], s.params["sapo_tau_neg"]
    tau = torch.where(adv_BT > 0, torch.full_like(adv_BT, pos), torch.full_like(adv_BT, neg))
    gate = torch.sigmoid(tau * (log_ratio.exp() - 1.0)) * (4.0 / tau)
    return -gate * adv_BT, _ratio_stats(log_ratio, mask_BT)


@register_policy_loss("gmpo", linear=False, clips=("clip_low", "clip_high"))
def gmpo(
    logp_BT: Tensor,
    old_logp_BT: Tensor,
    adv_BT: Tensor,
    mask_BT: Tensor,
    s: LossSettings,
    rollout_logp_BT: Tensor | None = None,
) -> LossTerms:
    """GMPO: the geometric mean of the token ratios per sequence, each log-ratio clipped to
    [-clip_low, clip_high] on the side its advantage's sign makes pessimistic, times the sequence's mean
    advantage (verl's `geo_mean`). Every token of a sequence carries the sequence's loss, so
    `seq-mean-token-mean` is the paper's mean over sequences."""
    log_ratio = logp_BT - old_logp_BT
    sign = torch.sign(adv_BT)
    bounded = log_ratio.clamp(-s.clip_low, s.clip_high)
    pessimistic = sign * torch.minimum(sign * log_ratio, sign * bounded)
    seq_ratio = sequence_log_ratio(pessimistic, mask_BT).exp()
    seq_adv = sequence_log_ratio(adv_BT, mask_BT)
    with torch.no_grad():
        clipped = (log_ratio != bounded).float()
        stats = {
            "clip_frac_high": masked_mean(clipped * (adv_BT > 0), mask_BT),
            "clip_frac_low": masked_mean(clipped * (adv_BT < 0), mask_BT),
        }
    loss = (-seq_adv * seq_ratio).expand_as(adv_BT)
    return loss, {**stats, **_ratio_stats(log_ratio.clamp(-20.0, 20.0), mask_BT)}


def _dppo(
    valid: Tensor, logp_BT: Tensor, old_logp_BT: Tensor, adv_BT: Tensor, mask_BT: Tensor, s: LossSettings
) -> LossTerms:
    """DPPO's shared part: -A sg(min(r, c)) log pi on the tokens whose divergence stays in the trust region."""
    log_ratio = (logp_BT - old_logp_BT).clamp(-20.0, 20.0)
    ratio = log_ratio.exp()
    weight = (ratio if s.dual_clip is None else ratio.clamp(max=s.dual_clip)).detach()
    valid = valid.detach().float()
    with torch.no_grad():
        stats = {
            "clip_frac": masked_mean(1.0 - valid, mask_BT),
            "truncated_frac": masked_mean((weight != ratio).float() * valid, mask_BT),
        }
    return -adv_BT * weight * logp_BT * valid, {**stats, **_ratio_stats(log_ratio, mask_BT)}


@register_policy_loss("dppo_tv", linear=True, clips=CLIP_KEYS)
def dppo_tv(
    logp_BT: Tensor,
    old_logp_BT: Tensor,
    adv_BT: Tensor,
    mask_BT: Tensor,
    s: LossSettings,
    rollout_logp_BT: Tensor | None = None,
) -> LossTerms:
    """DPPO with the binary total variation: a token leaves the loss once pi - pi_old passes clip_high
    (A > 0) or -clip_low (A <= 0); the ratio weight is truncated at dual_clip (verl's `dppo_tv`, whose
    clip_ratio_c it is)."""
    diff = logp_BT.exp() - old_logp_BT.exp()
    valid = torch.where(adv_BT > 0, diff <= s.clip_high, diff >= -s.clip_low)
    return _dppo(valid, logp_BT, old_logp_BT, adv_BT, mask_BT, s)


@register_policy_loss("dppo_kl", linear=True, clips=CLIP_KEYS)
def dppo_kl(
    logp_BT: Tensor,
    old_logp_BT: Tensor,
    adv_BT: Tensor,
    mask_BT: Tensor,
    s: LossSettings,
    rollout_logp_BT: Tensor | None = None,
) -> LossTerms:
    """DPPO with the binary KL between Bernoulli(pi_old) and Bernoulli(pi) of the sampled token, bounded by
    clip_high (A > 0, while pi grows) or clip_low (A <= 0, while pi shrinks) (verl's `dppo_kl`)."""
    p, p_old = logp_BT.exp(), old_logp_BT.exp()
    kl = p_old * (old_logp_BT - logp_BT) + (1 - p_old) * torch.log((1.0 - p_old + 1e-8) / (1.0 - p + 1e-8))
    valid = torch.where(adv_BT > 0, (kl <= s.clip_high) | (p <= p_old), (kl <= s.clip_low) | (p >= p_old))
    return _dppo(valid, logp_BT, old_logp_BT, adv_BT, mask_BT, s)


@register_policy_loss(
    "clip_cov",
    linear=False,
    clips=("clip_low", "clip_high"),
    params={"clip_cov_ratio": 0.0002, "clip_cov_lb": 1.0, "clip_cov_ub": 5.0},
)
def clip_cov(
    logp_BT: Tensor,
    old_logp_BT: Tensor,
    adv_BT: Tensor,
    mask_BT: Tensor,
    s: LossSettings,
    rollout_logp_BT: Tensor | None = None,
) -> LossTerms:
    """Clip-Cov: PPO-clip, and a random clip_cov_ratio share of the unclipped tokens whose centred
    advantage x log-prob covariance lies in (lb, ub) leave the gradient (verl's `clip_cov`; the draw uses
    torch's global generator, as there)."""
    log_ratio = logp_BT - old_logp_BT
    ratio = log_ratio.exp()
    m = mask_BT > 0
    unclipped = -adv_BT * ratio
    clipped = -adv_BT * ratio.clamp(1.0 - s.clip_low, 1.0 + s.clip_high)
    by_clip = (clipped > unclipped) & m
    with torch.no_grad():
        cov = (adv_BT - masked_mean(adv_BT, mask_BT)) * (logp_BT - masked_mean(logp_BT, mask_BT))
        cov = cov.masked_fill(~m | by_clip, -math.inf)
        lb, ub = s.params["clip_cov_lb"], s.params["clip_cov_ub"]
        idx = torch.nonzero((cov < ub) & (cov > lb) & m)
        n = max(int(s.params["clip_cov_ratio"] * float(mask_BT.sum())), 1)
        if len(idx):
            idx = idx[torch.randperm(len(idx))[: min(n, len(idx))]]
        keep = torch.ones_like(adv_BT)
        keep[idx[:, 0], idx[:, 1]] = 0.0
        stats = {"cov_clip_frac": masked_mean((keep == 0).float(), mask_BT)}
    return torch.maximum(unclipped, clipped) * keep, {**stats, **_ratio_stats(log_ratio.clamp(-20.0, 20.0), mask_BT)}


@register_policy_loss("kl_cov", linear=False, params={"kl_cov_ratio": 0.0002, "kl_cov_coef": 0.1})
def kl_cov(
    logp_BT: Tensor,
    old_logp_BT: Tensor,
    adv_BT: Tensor,
    mask_BT: Tensor,
    s: LossSettings,
    rollout_logp_BT: Tensor | None = None,
) -> LossTerms:
    """KL-Cov: -A r, plus kl_cov_coef |log r| on the kl_cov_ratio share of loss tokens with the largest
    centred advantage x log-prob covariance (verl's `kl_cov`)."""
    log_ratio = logp_BT - old_logp_BT
    loss = -adv_BT * log_ratio.exp()
    m = mask_BT > 0
    with torch.no_grad():
        flat = torch.nonzero(m.reshape(-1), as_tuple=True)[0]
        a, lp = adv_BT[m].reshape(-1), logp_BT[m].reshape(-1)
        pick = torch.zeros(adv_BT.numel(), dtype=torch.bool)
        if len(a):
            cov = (a - a.mean()) * (lp - lp.mean())
            k = max(1, int(len(cov) * s.params["kl_cov_ratio"]))
            pick[flat[torch.topk(cov, k, largest=True).indices]] = True
        pick = pick.view_as(m)
    loss = torch.where(pick, loss + s.params["kl_cov_coef"] * log_ratio.abs(), loss)
    with torch.no_grad():
        stats = {"kl_cov_frac": masked_mean(pick.float(), mask_BT)}
    return loss, {**stats, **_ratio_stats(log_ratio.clamp(-20.0, 20.0), mask_BT)}


@register_policy_loss("dro", linear=False, params={"dro_beta": 1.0})
def dro(
    logp_BT: Tensor,
    old_logp_BT: Tensor,
    adv_BT: Tensor,
    mask_BT: Tensor,
    s: LossSettings,
    rollout_logp_BT: Tensor | None = None,
) -> LossTerms:
    """DRO: -(A log pi - beta / 2 (log r)^2), a policy gradient with a quadratic log-ratio penalty (verl's `dro`)."""
    log_ratio = logp_BT - old_logp_BT
    loss = -(logp_BT * adv_BT - 0.5 * s.params["dro_beta"] * log_ratio.square())
    return loss, _ratio_stats(log_ratio.clamp(-20.0, 20.0), mask_BT)


@register_policy_loss(
    "vespo",
    linear=True,
    params={"vespo_k_pos": 2.0, "vespo_lambda_pos": 3.0, "vespo_k_neg": 3.0, "vespo_lambda_neg": 2.0},
)
def vespo(
    logp_BT: Tensor,
    old_logp_BT: Tensor,
    adv_BT: Tensor,
    mask_BT: Tensor,
    s: LossSettings,
    rollout_logp_BT: Tensor | None = None,
) -> LossTerms:
    """VESPO: -sg(phi(w)) A log pi, with w the sequence ratio (the summed log-ratio) and the gamma weight
    phi(w) = e^lambda w^k e^(-lambda w) (phi(1) = 1), k and lambda by the advantage's sign (TRL's `vespo`)."""
    log_ratio = logp_BT - old_logp_BT
    floor = math.log(1e-8)
    with torch.no_grad():
        log_w = (log_ratio.clamp(-20.0, 20.0) * mask_BT).sum(-1, keepdim=True).clamp(floor, 20.0)
        p = s.params
        pos = adv_BT >= 0
        k = torch.where(pos, torch.full_like(adv_BT, p["vespo_k_pos"]), torch.full_like(adv_BT, p["vespo_k_neg"]))
        lam = torch.where(
            pos, torch.full_like(adv_BT, p["vespo_lambda_pos"]), torch.full_like(adv_BT, p["vespo_lambda_neg"])
        )
        lam = lam.clamp(min=1e-4)
        phi = (lam + k * log_w - lam * log_w.exp()).exp().nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)
        stats = {"vespo_phi": masked_mean(phi.expand_as(adv_BT), mask_BT)}
    return -phi * adv_BT * logp_BT, {**stats, **_ratio_stats(log_ratio.clamp(-20.0, 20.0), mask_BT)}


@dataclass(frozen=True)
class PolicyObjective:
    """What the update's policy term is made of: the registered loss and its settings, the aggregation, and
    the terms TRL adds around it."""

    loss: str = "ppo_clip"
    settings: LossSettings = field(default_factory=LossSettings)
    agg: str = "token-mean"
    entropy_coef: float = 0.0
    """The entropy bonus's coefficient for this update (0: none; the adaptive controller's current value)."""
    entropy_bonus: bool = False
    """The bonus is on (its coefficient may be 0 this update, as TRL's adaptive one below the target is)."""
    entropy_top_quantile: float = 1.0
    off_policy_mask_threshold: float | None = None


def policy_objective(
    logp_BT: torch.Tensor,
    old_logp_BT: torch.Tensor,
    adv_BT: torch.Tensor,
    mask_BT: torch.Tensor,
    entropy_BT: torch.Tensor,
    o: PolicyObjective,
    norm: LossNorm | None = None,
    rollout_logp_BT: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The aggregated policy term: the registered loss per token, TRL's token masks (top-entropy share, the
    off-policy sequence mask: they drop terms and keep the normaliser), and the entropy bonus (its gradient
    through `entropy_BT`)."""
    spec = policy_loss(o.loss)
    s = replace(o.settings, params={**spec.params, **o.settings.params})
    loss_BT, stats = spec.fn(logp_BT, old_logp_BT, adv_BT, mask_BT, s, rollout_logp_BT)
    keep = None
    if o.entropy_top_quantile < 1.0:
        keep = high_entropy_mask(entropy_BT.detach(), mask_BT, o.entropy_top_quantile)
    if o.off_policy_mask_threshold is not None:
        if rollout_logp_BT is None:
            raise ValueError("the off-policy sequence mask needs the sampler's log-probs")
        seqs = off_policy_mask(logp_BT, rollout_logp_BT, adv_BT, mask_BT, o.off_policy_mask_threshold)
        stats["off_policy_masked_frac"] = masked_mean((1 - seqs).expand_as(mask_BT), mask_BT)
        keep = seqs.expand_as(mask_BT) if keep is None else keep * seqs
    if keep is not None:
        loss_BT = loss_BT * keep
    loss = aggregate(loss_BT, mask_BT, o.agg, norm)
    stats["policy_loss"] = loss.detach()
    if o.entropy_bonus:
        entropy = aggregate(entropy_BT, mask_BT if keep is None else mask_BT * keep, o.agg, norm)
        stats["entropy_bonus"] = (o.entropy_coef * entropy).detach()
        loss = loss - o.entropy_coef * entropy
    return loss, stats


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
    """PPO-clip aggregated: clip-higher (DAPO) and the dual clip for negative advantages.

    Statistics (token shares): `clip_frac_low` / `clip_frac_high` where the ratio left the clip range on
    the side that stops the gradient, `dual_clip_frac` where the dual clip capped a negative advantage's
    loss at c * |A| (verl's `pg_clipfrac_lower`), and `approx_kl`."""
    settings = LossSettings(clip_low, clip_high, dual_clip)
    loss, stats = ppo_clip(logp_BT, old_logp_BT, adv_BT, mask_BT, settings, None)
    return aggregate(loss, mask_BT, agg, norm), stats


def off_policy_mask(
    logp_BT: torch.Tensor, behav_logp_BT: torch.Tensor, adv_BT: torch.Tensor, mask_BT: torch.Tensor, threshold: float
) -> torch.Tensor:
    """DeepSeek-V3.2's off-policy sequence mask (TRL's `off_policy_mask_threshold`): a sequence with a negative
    advantage leaves the loss when its mean k1 KL(behaviour || current) passes `threshold`; (B, 1), 0 or 1."""
    kl = (behav_logp_BT - logp_BT.detach()) * mask_BT
    mean = kl.sum(-1, keepdim=True) / mask_BT.sum(-1, keepdim=True).clamp(min=1.0)
    return ((adv_BT[:, :1] >= 0) | (mean <= threshold)).to(mask_BT.dtype)


def high_entropy_mask(entropy_BT: torch.Tensor, mask_BT: torch.Tensor, top_quantile: float) -> torch.Tensor:
    """1 on the loss tokens whose entropy is at or above the (1 - top_quantile) quantile of the loss tokens'
    entropies (TRL's `top_entropy_quantile`, the 80/20 rule's top 20%)."""
    m = mask_BT > 0
    if not bool(m.any()):
        return torch.zeros_like(mask_BT)
    threshold = torch.quantile(entropy_BT[m].float(), 1.0 - top_quantile)
    return ((entropy_BT >= threshold) & m).to(mask_BT.dtype)


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
