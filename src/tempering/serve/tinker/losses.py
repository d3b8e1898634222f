"""Tinker's built-in losses (`forward_backward(data, loss_fn=...)`) as tempering's registered policy losses.

Tinker sums every loss over a datum's positions and over the batch (its `loss:sum`); each position's
term is the registered loss's per-token term with Tinker's inputs: `logprobs` (the sampler's) are the
old log-probs, `advantages` the advantages. The clip thresholds are ratio bounds (`clip_low_threshold`
0.8 is tempering's `clip_low` 0.2). `cross_entropy` is the weighted NLL, -weights * log p.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from tempering.algos.losses import LossSettings, policy_loss
from tempering.serve.tinker.wire import BadRequest, Datum

CLIP_THRESHOLDS: dict[str, float | None] = {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}
"""Ratio bounds of the clipped losses: Tinker's documented PPO default (epsilon 0.2 each side), ours for the others."""


@dataclass(frozen=True)
class TinkerLoss:
    registered: str | None
    """Tempering's policy loss (`algos/losses.py: POLICY_LOSSES`); None: the weighted NLL."""
    inputs: tuple[str, ...]
    """`loss_fn_inputs` it reads besides `target_tokens`."""
    config: dict[str, float | None] = field(default_factory=dict)
    """`loss_fn_config` keys it reads and their defaults (None: required)."""


LOSSES: dict[str, TinkerLoss] = {
    "cross_entropy": TinkerLoss(None, ("weights",)),
    "importance_sampling": TinkerLoss("ppo_clip", ("logprobs", "advantages")),
    "ppo": TinkerLoss("ppo_clip", ("logprobs", "advantages"), CLIP_THRESHOLDS),
    "cispo": TinkerLoss("cispo", ("logprobs", "advantages"), CLIP_THRESHOLDS),
    "gspo": TinkerLoss("gspo_token", ("logprobs", "advantages", "sequence_ratio_mask"), CLIP_THRESHOLDS),
    "dro": TinkerLoss("dro", ("logprobs", "advantages"), {"beta": None}),
}

REFUSED = {
    "stable_reinforce": "its objective is Thinking Machines' own and unpublished; use importance_sampling, ppo, "
    "cispo, gspo or dro",
    "custom": "losses stored on the server (ServiceClient.create_custom_loss) are not supported here; "
    "forward_backward_custom with a Python function (computed client-side) is",
}


def lookup(name: str) -> TinkerLoss:
    if name in REFUSED:
        raise BadRequest(f"loss_fn={name!r} is not supported by this service: {REFUSED[name]}")
    if name not in LOSSES:
        raise BadRequest(f"unknown loss_fn {name!r}; this service supports: {', '.join(LOSSES)}")
    return LOSSES[name]


def settings(name: str, config: dict[str, float | str]) -> LossSettings:
    """The registered loss's settings from a request's `loss_fn_config` (checked: known keys, numbers)."""
    loss = lookup(name)
    unknown = sorted(set(config) - set(loss.config))
    if unknown:
        allowed = ", ".join(loss.config) or "none"
        raise BadRequest(f"loss_fn_config {unknown} has no effect on loss_fn={name!r}; it reads: {allowed}")
    values: dict[str, float] = {}
    for key, default in loss.config.items():
        v = config.get(key, default)
        if v is None:
            raise BadRequest(f"loss_fn={name!r} needs loss_fn_config[{key!r}]")
        if isinstance(v, str):
            raise BadRequest(f"loss_fn_config[{key!r}] must be a number, got {v!r}")
        values[key] = float(v)
    if loss.registered is None:
        return LossSettings()
    if name == "importance_sampling":  # PPO-clip with an unbounded band: -A r
        return LossSettings(math.inf, math.inf, None)
    if name == "dro":
        return LossSettings(params={"dro_beta": values["beta"]})
    low, high = values["clip_low_threshold"], values["clip_high_threshold"]
    if not 0 <= low <= 1 <= high:
        raise BadRequest(f"loss_fn_config needs 0 <= clip_low_threshold <= 1 <= clip_high_threshold, got {low}, {high}")
    return LossSettings(1.0 - low, high - 1.0, None)


def check(name: str, data: list[Datum], vocab: int, max_tokens: int) -> None:
    """Refuse data the loss cannot read: missing or unread inputs, lengths that differ from the input's,
    token ids outside the vocabulary."""
    loss = lookup(name)
    needed = {"target_tokens", *loss.inputs}
    for i, d in enumerate(data):
        n = len(d.tokens)
        if n == 0:
            raise BadRequest(f"data[{i}]: empty model_input")
        if n > max_tokens:
            raise BadRequest(f"data[{i}]: {n} tokens, more than this model takes ({max_tokens})", status=413)
        missing, extra = sorted(needed - set(d.inputs)), sorted(set(d.inputs) - needed)
        if missing:
            raise BadRequest(f"data[{i}]: loss_fn={name!r} needs loss_fn_inputs {missing}")
        if extra:
            raise BadRequest(
                f"data[{i}]: loss_fn_inputs {extra} have no effect on loss_fn={name!r}; it reads {sorted(needed)}"
            )
        bad = d.tokens[(d.tokens < 0) | (d.tokens >= vocab)]
        if len(bad):
            raise BadRequest(f"data[{i}].model_input: token id {int(bad[0])} is outside the vocabulary [0, {vocab})")
        targets = d.inputs["target_tokens"]
        two_d = name == "cross_entropy" and targets.ndim == 2
        for key, t in d.inputs.items():
            if t.shape[0] != n or t.ndim > (2 if two_d else 1) or (two_d and t.shape != targets.shape):
                want = f"({n},)" + (f" or {targets.shape}" if two_d else "")
                raise BadRequest(
                    f"data[{i}].loss_fn_inputs[{key!r}] has shape {tuple(t.shape)}; model_input has {n} tokens: want {want}"
                )
        if not np.issubdtype(targets.dtype, np.integer):
            raise BadRequest(f"data[{i}].loss_fn_inputs['target_tokens'] must be int64, got {targets.dtype}")
        bad = targets[(targets < 0) | (targets >= vocab)]
        if len(bad):
            raise BadRequest(
                f"data[{i}].loss_fn_inputs['target_tokens']: id {int(bad[0])} is outside the vocabulary [0, {vocab})"
            )


def per_token(
    name: str, s: LossSettings, logp: torch.Tensor, inputs: dict[str, torch.Tensor], valid: torch.Tensor
) -> torch.Tensor:
    """Each position's loss term (B, T[, K]); padding positions are the caller's to drop."""
    loss = lookup(name)
    if loss.registered is None:
        return -inputs["weights"] * logp
    mask = valid * inputs["sequence_ratio_mask"].ne(0) if name == "gspo" else valid
    registered = policy_loss(loss.registered)
    s = LossSettings(s.clip_low, s.clip_high, s.dual_clip, {**registered.params, **s.params})
    out, _ = registered.fn(logp, inputs["logprobs"], inputs["advantages"], mask.to(logp.dtype), s, None)
    return out
