"""tempering's credit functions and policy loss in verl's registries, under `tempering_*` names.

verl imports this module in every process (driver and Ray workers) through the `verl.plugins` entry
point that `pip install 'tempering[verl]'` declares; `register()` is idempotent. Then in a verl config:

    algorithm.adv_estimator=tempering_leap                        # or tempering_tcpo, tempering_rloo, ...
    actor_rollout_ref.actor.policy_loss.loss_mode=tempering_ppo_clip

How verl's batch maps onto tempering's (N groups, G episodes, K turns) tensors:
- rows with the same `uid` form a group (all groups of a batch must have the same size G);
- each run of 1s in `response_mask` is one turn (env/tool tokens between turns are 0);
- a turn's score is the sum of `token_level_rewards` from its first token up to the next turn (place a
  per-turn score on the turn's last token; verl's default, one score on the last token, is an outcome);
- a turn succeeds when its score >= `success_threshold` (default 1.0); an episode's reward is its last
  turn's score, as in tempering's own rollouts.

Every entry of `tempering.algos.credit.CREDIT` is registered (adding a credit function there adds it
here), except `gdpo`: it normalises each reward function on its own, and verl's `token_level_rewards`
carry one summed reward (use verl's own `gdpo` estimator); and `remax`, whose greedy baseline verl's trainer
makes for its own `remax` estimator. Keyword arguments per estimator come from `register(credit_args=...)` or the environment
variable TEMPERING_VERL_CREDIT_ARGS (JSON, e.g. '{"tempering_leap": {"gamma": 0.5}}'); tempering_leap ranks
the group from verl's tensors (LEAP's group reward `rank`; `token_efficiency: true` for `rank_tokens`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch

from tempering.algos.credit import CREDIT, TurnTensors
from tempering.algos.leap import rank_scores
from tempering.algos.losses import AGG_MODES, LossNorm, ppo_clip_loss
from tempering.errors import UserError

PREFIX = "tempering_"
VERL_CREDIT = {name: fn for name, fn in CREDIT.items() if name not in ("gdpo", "remax")}
SUCCESS_THRESHOLD = 1.0
PENDING: dict[str, str] = {
    "tempering_direct_opd_topk": "verl's policy-loss signature passes the sampled token's log-prob only; the "
    "Direct-OPD top-k loss needs the student's top-k log-probs (B, T, k) and the teacher pair's on the same "
    "candidates, which verl's actor does not compute",
}
"""tempering methods that verl's registries cannot carry yet, and why."""


# ---- verl batch -> tempering tensors ----------------------------------------------------------
def turn_index(response_mask_BT: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(turn of every position, counting env tokens with the turn before them, -1 before the first turn;
    number of turns per row). A turn is a run of 1s in the response mask."""
    m = response_mask_BT.bool()
    prev = torch.cat([torch.zeros_like(m[:, :1]), m[:, :-1]], dim=1)
    starts = m & ~prev
    turn = starts.long().cumsum(-1) - 1
    return turn, starts.sum(-1)


def verl_to_turns(
    token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index, success_threshold: float = SUCCESS_THRESHOLD
) -> tuple[TurnTensors, torch.Tensor, torch.Tensor]:
    """(TurnTensors, group of each row, position of each row in its group)."""
    uids = [str(u) for u in index]
    order: dict[str, list[int]] = {}
    for b, u in enumerate(uids):
        order.setdefault(u, []).append(b)
    sizes = {len(v) for v in order.values()}
    if len(sizes) != 1:
        raise ValueError(
            f"tempering credit needs groups of equal size; got sizes {sorted(sizes)} "
            "(set the same rollout.n for every prompt and keep whole groups in a batch)"
        )
    N, G = len(order), sizes.pop()
    turn_BT, n_turns_B = turn_index(response_mask)
    K = max(int(n_turns_B.max()), 1)
    B = response_mask.shape[0]
    group_B, slot_B = torch.empty(B, dtype=torch.long), torch.empty(B, dtype=torch.long)
    for n, rows in enumerate(order.values()):
        for g, b in enumerate(rows):
            group_B[b], slot_B[b] = n, g
    idx = turn_BT.clamp(min=0)
    inside = (turn_BT >= 0).float()
    scores_BK = torch.zeros(B, K).scatter_add_(1, idx, token_level_rewards.float() * inside)
    tokens_BK = torch.zeros(B, K).scatter_add_(1, idx, response_mask.float() * inside)
    valid_BK = (torch.arange(K)[None, :] < n_turns_B[:, None]).float()
    scores_BK *= valid_BK
    last = (n_turns_B - 1).clamp(min=0)
    rewards_B = scores_BK.gather(1, last[:, None]).squeeze(1) * (n_turns_B > 0)

    def to_NG(x: torch.Tensor) -> torch.Tensor:
        out = torch.zeros((N, G, *x.shape[1:]), dtype=x.dtype)
        out[group_B, slot_B] = x
        return out

    scores = to_NG(scores_BK)
    valid = to_NG(valid_BK)
    tt = TurnTensors(
        scores_NGK=scores,
        success_NGK=(scores >= success_threshold).float() * valid,
        valid_NGK=valid,
        tokens_NGK=to_NG(tokens_BK),
        rewards_NG=to_NG(rewards_B),
        cf_mean_NGK=torch.zeros_like(scores),
        cf_mask_NGK=torch.zeros_like(scores),
    )
    return tt, group_B, slot_B


def credit_estimator(name: str, **credit_args) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    """tempering credit function `name` with verl's advantage-estimator signature."""
    fn = VERL_CREDIT[name]
    args = dict(credit_args)
    tokens = bool(args.pop("token_efficiency", False)) if name == "leap" else False

    def estimator(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index=None, config=None, **_):
        if index is None:
            raise ValueError(f"{PREFIX}{name} needs the group ids (non_tensor_batch['uid'])")
        tt, group_B, slot_B = verl_to_turns(token_level_rewards.cpu(), response_mask.cpu(), index)
        if name == "leap":  # verl hands tensors, not episodes: LEAP's group reward from them
            tt = replace(tt, group_NG=rank_scores(tt.success_NG, tt.first_success_NG, tt.tokens_NGK.sum(-1), tokens))
        adv_NGK = fn(tt, **args)
        turn_BT = turn_index(response_mask.cpu())[0]  # `_` already holds the ignored keyword arguments
        adv = adv_NGK[group_B, slot_B].gather(1, turn_BT.clamp(min=0)) * response_mask.cpu().float()
        adv = adv.to(token_level_rewards.device)
        return adv, adv

    estimator.__name__ = f"{PREFIX}{name}"
    estimator.__doc__ = f"tempering credit {name!r} ({fn.__doc__ or ''}) as a verl advantage estimator."
    return estimator


# ---- losses ----------------------------------------------------------------------------------
def _get(config, key: str, default=None):
    if config is None:
        return default
    value = config.get(key, default) if hasattr(config, "get") else getattr(config, key, default)
    return default if value is None else value


def verl_loss_norm(response_mask: torch.Tensor, config) -> LossNorm:
    """tempering's LossNorm from verl's global batch info: verl averages gradients over dp ranks too,
    so the global counts are divided by dp_size (tempering.distributed does the same)."""
    info = _get(config, "global_batch_info", {}) or {}
    dp = float(info.get("dp_size") or 1)
    local = LossNorm.of(response_mask)
    tokens = info.get("batch_num_tokens")
    seqs = info.get("global_batch_size")
    return LossNorm(
        tokens=float(tokens) / dp if tokens is not None else local.tokens,
        seqs=float(seqs) / dp if seqs is not None else local.seqs,
        max_len=float(info.get("loss_scale_factor") or response_mask.shape[-1]),
        world=dp,
    )


def ppo_clip_policy_loss(
    old_log_prob,
    log_prob,
    advantages,
    response_mask,
    loss_agg_mode: str = "token-mean",
    config=None,
    rollout_is_weights=None,
):
    """tempering's PPO-clip (clip-higher, dual clip) with verl's policy-loss signature. Rollout
    importance weights scale the advantages (the same as scaling each token's loss: they are > 0)."""
    if loss_agg_mode not in AGG_MODES:
        raise ValueError(f"tempering_ppo_clip supports loss_agg_mode {AGG_MODES}, not {loss_agg_mode!r}")
    clip = _get(config, "clip_ratio", 0.2)
    adv = advantages if rollout_is_weights is None else advantages * rollout_is_weights
    loss, stats = ppo_clip_loss(
        log_prob,
        old_log_prob,
        adv,
        response_mask.float(),
        _get(config, "clip_ratio_low", clip),
        _get(config, "clip_ratio_high", clip),
        _get(config, "clip_ratio_c", 3.0),
        loss_agg_mode,
        verl_loss_norm(response_mask, config),
    )
    return loss, {f"actor/{PREFIX}{k}": float(v) for k, v in stats.items()}


LOSSES: dict[str, Callable] = {f"{PREFIX}ppo_clip": ppo_clip_policy_loss}
"""verl policy-loss name -> function (one line per loss)."""


# ---- registration ----------------------------------------------------------------------------
def _env_args() -> dict[str, dict[str, Any]]:
    raw = os.environ.get("TEMPERING_VERL_CREDIT_ARGS", "")
    if not raw:
        return {}
    try:
        args = json.loads(raw)
    except json.JSONDecodeError as e:
        raise UserError(
            f'TEMPERING_VERL_CREDIT_ARGS is not JSON ({e}); give e.g. \'{{"tempering_leap": {{"gamma": 0.5}}}}\''
        ) from e
    if not isinstance(args, dict) or not all(isinstance(v, dict) for v in args.values()):
        raise UserError("TEMPERING_VERL_CREDIT_ARGS must map estimator names to keyword dicts")
    return args


def register(credit_args: dict[str, dict[str, Any]] | None = None) -> list[str]:
    """Put every tempering credit function and loss into verl's registries; returns the names."""
    try:
        from verl.trainer.ppo import core_algos
    except ImportError as e:
        raise UserError("the verl adapter needs verl: pip install 'tempering[verl]'") from e
    args = {**_env_args(), **(credit_args or {})}
    unknown = sorted(set(args) - {PREFIX + n for n in VERL_CREDIT})
    if unknown:
        raise UserError(
            f"credit arguments for unknown estimators {unknown}; known: {sorted(PREFIX + n for n in VERL_CREDIT)}"
        )
    names = []
    for name in VERL_CREDIT:
        key = PREFIX + name
        # re-registration replaces ours (verl refuses a different function under a taken name)
        core_algos.ADV_ESTIMATOR_REGISTRY.pop(key, None)
        core_algos.register_adv_est(key)(credit_estimator(name, **args.get(key, {})))
        names.append(key)
    for key, fn in LOSSES.items():
        core_algos.register_policy_loss(key)(fn)
        names.append(key)
    return names


try:  # loaded as verl's plugin: register at import; imported without verl: the functions stay usable
    import verl.trainer.ppo.core_algos  # noqa: F401
except ImportError:
    pass
else:
    register()
