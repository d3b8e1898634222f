"""The one policy update every method shares.

Given a collated batch with per-token advantages, run `ppo_epochs` passes over `mini_batches`
optimizer steps, each accumulated over micro-batches with a loss normaliser fixed for the whole step.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from dataclasses import dataclass, field, fields, replace
from typing import Any

import torch

from tempering.algos.losses import (
    LossNorm,
    LossSettings,
    PolicyObjective,
    aggregate,
    entropy_from_logits,
    kl_estimate,
    policy_loss,
    policy_objective,
)
from tempering.errors import UserError
from tempering.train.batch import TrainBatch
from tempering.train.prefix import (
    packed_logprobs,
    packed_vocab_logprobs,
    shared_prefix_logprobs,
    shared_prefix_vocab_logprobs,
)


@dataclass
class UpdateSettings:
    """What the update needs from a recipe's config (recipes build it from their schema)."""

    ppo_epochs: int = 1
    mini_batches: int = 1
    micro_batch_size: int = 256
    clip_low: float = 0.2
    clip_high: float = 0.28
    dual_clip: float | None = 3.0
    policy_loss: str = "ppo_clip"
    """The registered policy loss (`algos/losses.py: POLICY_LOSSES`)."""
    loss_params: dict[str, float] = field(default_factory=dict)
    """The policy loss's own settings (its registered `params`; the defaults fill the rest)."""
    entropy_coef: float = 0.0
    """Entropy bonus: the loss minus this times the aggregated entropy of the policy's tokens; with
    `entropy_target` set, the starting coefficient of the adaptive controller (the method's state then holds it)."""
    entropy_target: float | None = None
    """Adaptive entropy (TRL's `use_adaptive_entropy`): the bonus applies while the previous update's entropy
    is at or below this target."""
    entropy_top_quantile: float = 1.0
    """Only the loss tokens in this top share of entropies train (TRL's `top_entropy_quantile`; 1 = all)."""
    off_policy_mask_threshold: float | None = None
    """DeepSeek-V3.2's off-policy sequence mask (TRL's): negative-advantage sequences whose mean KL from the
    sampler's policy passes this leave the loss."""
    loss_agg: str = "token-mean"
    kl_coef: float = 0.0
    kl_estimator: str = "k3"
    kl_bias_correction: bool = False
    """Weight each token's KL estimate by the current/old policy ratio (TRL's `use_bias_correction_kl`):
    the tokens were sampled from the old policy, the KL is of the current one."""
    max_grad_norm: float = 1.0
    temperature: float = 1.0
    max_response_len: int | None = None
    share_prefix: bool = True
    """Compute a prompt shared by several rows once (`tempering.train.prefix`); same numbers, less compute."""
    norm_scope: str = "step"
    """`step`: one loss normaliser over the whole optimizer step; `micro_batch`: each micro-batch's own
    mean, weighted by its share of the step's rows (verl's aggregation)."""
    autocast: str = "none"
    """`bf16`: the loss's forward (and so its backward) under bf16 autocast; `none`: float32."""
    pack: bool = False
    """Micro-batches packed without padding, the output layer in chunks (`tempering.train.prefix.packed_logprobs`);
    the same numbers up to float rounding, less compute and memory."""
    data_parallel: Any = None
    """Data-parallel training (`tempering.train.parallel.DataParallel`): the loss normaliser is counted over
    all ranks, and every rank runs the same micro-batches so that their collectives stay in step.
    None: one process."""


def token_logprobs(
    model: torch.nn.Module,
    batch: TrainBatch,
    temperature: float = 1.0,
    entropy: bool = False,
    entropy_grad: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-prob of every token given its prefix (position 0 gets 0), and optionally the entropy (with its
    gradient when `entropy_grad`: an entropy bonus)."""
    logits = model(input_ids=batch.input_ids_BT, attention_mask=batch.attention_BT).logits[:, :-1].float()
    if temperature != 1.0:
        logits = logits / temperature
    logp = logits.log_softmax(-1).gather(-1, batch.input_ids_BT[:, 1:, None]).squeeze(-1)
    pad = logp.new_zeros((logp.shape[0], 1))  # position 0 (also for one-token padding rows)
    ent = None
    if entropy:
        with nullcontext() if entropy_grad else torch.no_grad():
            ent = torch.cat([pad, entropy_from_logits(logits)], dim=1)
    return torch.cat([pad, logp], dim=1), ent


def policy_logprobs(
    model: torch.nn.Module,
    batch: TrainBatch,
    temperature: float = 1.0,
    entropy: bool = False,
    share_prefix: bool = False,
    entropy_grad: bool = False,
    pack: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`token_logprobs`, with shared prompts computed once when `share_prefix` and some rows share one;
    `pack`: from each row's first trained token on, on the packed micro-batch."""
    if pack:
        return packed_logprobs(model, batch, temperature, entropy, share_prefix, entropy_grad)
    if share_prefix:
        out = shared_prefix_logprobs(model, batch, temperature, entropy, entropy_grad)
        if out is not None:
            return out
    return token_logprobs(model, batch, temperature, entropy, entropy_grad)


LossFn = Callable[
    [torch.nn.Module, TrainBatch, LossNorm, UpdateSettings, Mapping[str, float]],
    tuple[torch.Tensor, dict[str, torch.Tensor]],
]
"""`(model, micro_batch, norm, settings, state) -> (loss, statistics)`: every loss has this signature."""


@dataclass(frozen=True)
class Loss:
    """A loss and the statistics it logs that are terms of the aggregated loss: those are summed over
    micro-batches (and ranks), the others are token means."""

    fn: LossFn
    totals: tuple[str, ...] = ()
    linear: bool = True
    """The loss is linear in the advantages of the sampled tokens, so the rollout correction (weights on the
    advantages) and asynchronous rollouts apply; a loss on whole distributions or a supervised loss is not."""


def ppo_loss(
    model: torch.nn.Module, mb: TrainBatch, norm: LossNorm, s: UpdateSettings, state: Mapping[str, float] = {}
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The configured policy loss (`s.policy_loss`, PPO-clip by default) on the sampled tokens, with its
    token masks (top-entropy share, off-policy sequences), an entropy bonus and a KL-to-reference term."""
    coef = state.get("entropy_coef", s.entropy_coef)
    if s.entropy_target is not None and state.get("entropy_last", math.inf) > s.entropy_target:
        coef = 0.0  # adaptive: the bonus is on only while the last update's entropy is at or below the target
    bonus = s.entropy_coef > 0 or s.entropy_target is not None
    logp, ent = policy_logprobs(
        model, mb, s.temperature, entropy=True, share_prefix=s.share_prefix, entropy_grad=bonus, pack=s.pack
    )
    assert ent is not None  # asked for
    old = mb.old_logp_BT if mb.old_logp_BT is not None else logp.detach()
    assert mb.adv_BT is not None, "credit fills adv_BT before the update"
    m = mb.mask_BT
    objective = PolicyObjective(
        s.policy_loss,
        LossSettings(s.clip_low, s.clip_high, s.dual_clip, s.loss_params),
        s.loss_agg,
        coef,
        bonus,
        s.entropy_top_quantile,
        s.off_policy_mask_threshold,
    )
    loss, stats = policy_objective(logp, old, mb.adv_BT, m, ent, objective, norm, mb.sample_logp_BT)
    stats["entropy"] = (ent.detach() * m).sum() / m.sum().clamp(min=1)
    if s.kl_coef > 0:
        if mb.ref_logp_BT is None:
            raise ValueError("a KL-to-reference loss (kl_coef > 0) needs the reference's log-probs in the batch")
        kl_BT = kl_estimate(logp, mb.ref_logp_BT, s.kl_estimator)
        if s.kl_bias_correction:
            kl_BT = kl_BT * (logp - old).clamp(-20.0, 20.0).exp()
        kl = aggregate(kl_BT, m, s.loss_agg, norm)
        stats["kl_ref"] = kl.detach()
        loss = loss + s.kl_coef * kl
    # how far the sampler's log-probs are from the trainer's (non-zero with another inference engine): the k3
    # estimate of KL(sampler || trainer), as `rollout/mismatch_kl` and verl's rollout_corr/kl
    stats["mismatch_kl"] = (kl_estimate(mb.sample_logp_BT, logp.detach()) * m).sum() / m.sum().clamp(min=1)
    return loss, stats


PPO_LOSS = Loss(ppo_loss, ("policy_loss", "kl_ref", "entropy_bonus"))
"""The configured policy loss on the sampled tokens (+ KL to the reference): every method's loss unless it
brings its own. `policy_loss_of` says whether a registered loss is linear."""


def policy_loss_of(name: str) -> Loss:
    """`PPO_LOSS` as the registered policy loss `name` declares it (linear or not)."""
    return replace(PPO_LOSS, linear=policy_loss(name).linear)


def on_device(batch: TrainBatch, device: torch.device) -> TrainBatch:
    """The batch with its tensors on `device` (the model's; batches are collated on the CPU)."""
    if batch.input_ids_BT.device == device:
        return batch

    def move(v: Any) -> Any:
        if isinstance(v, dict):  # method-specific per-token tensors
            return {k: t.to(device) for k, t in v.items()}
        return v.to(device) if torch.is_tensor(v) else v

    return TrainBatch(**{f.name: move(getattr(batch, f.name)) for f in fields(batch)})


@torch.no_grad()
def batch_logprobs(
    model: torch.nn.Module,
    batch: TrainBatch,
    micro_batch_size: int,
    temperature: float = 1.0,
    share_prefix: bool = False,
    pack: bool = False,
) -> torch.Tensor:
    out = torch.zeros_like(batch.mask_BT)
    was = model.training
    model.eval()
    for i in range(0, batch.size, micro_batch_size):
        mb = on_device(batch.select(slice(i, i + micro_batch_size)), next(model.parameters()).device)
        out[i : i + micro_batch_size, : mb.input_ids_BT.shape[1]] = policy_logprobs(
            model, mb, temperature, share_prefix=share_prefix, pack=pack
        )[0].cpu()
    model.train(was)
    return out


def check_autocast(kind: str, device: torch.device) -> None:
    """bf16 autocast only where the hardware computes in bf16: elsewhere it converts and is slower."""
    if kind != "bf16":
        return
    if device.type == "cpu" and not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        raise UserError(
            "loss.autocast=bf16: this CPU has no bf16 instructions (AVX512-BF16 or AMX), where bf16 autocast is "
            "slower than float32; use loss.autocast=none"
        )
    if device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise UserError("loss.autocast=bf16: this GPU does not compute in bf16; use loss.autocast=none")


def policy_update(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    batch: TrainBatch,
    s: UpdateSettings,
    generator: torch.Generator | None = None,
    loss: Loss | None = None,
    state: Mapping[str, float] = {},
) -> dict[str, float]:
    """Train on `batch` (advantages already in `batch.adv_BT`) with `loss` (PPO-clip by default) in the
    method's `state`; returns averaged statistics."""
    assert batch.adv_BT is not None, "credit must fill batch.adv_BT before the update"
    dp = s.data_parallel
    if dp is not None:
        batch = dp.even_out(batch)
    if s.ppo_epochs * s.mini_batches > 1 and batch.old_logp_BT is None:
        # off-policy after the first optimizer step: freeze the proximal (old) log-probs now
        batch.old_logp_BT = batch_logprobs(model, batch, s.micro_batch_size, s.temperature, s.share_prefix, s.pack)
    out = optimizer_steps(model, optimizer, scheduler, batch, s, generator, loss or PPO_LOSS, state)
    out["lr"] = optimizer.param_groups[0]["lr"]
    return out


def optimizer_steps(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None,
    batch: TrainBatch,
    s: UpdateSettings,
    generator: torch.Generator | None,
    loss: Loss,
    state: Mapping[str, float] = {},
) -> dict[str, float]:
    """`s.ppo_epochs` passes of `s.mini_batches` optimizer steps over `batch` (every rank's batch already
    evened out), each accumulated over micro-batches with the step's loss normaliser; averaged statistics.
    The policy's update and a method's own modules (a critic) both train this way."""
    dp = s.data_parallel
    model.train()
    device = next(model.parameters()).device
    sums: dict[str, float] = defaultdict(float)
    n = skipped = 0
    for _ in range(s.ppo_epochs):
        order = torch.randperm(batch.size, generator=generator) if s.mini_batches > 1 else torch.arange(batch.size)
        for chunk in order.chunk(s.mini_batches):
            step_batch = batch.select(chunk)
            norm = (dp.loss_norm if dp is not None else LossNorm.of)(step_batch.mask_BT, s.max_response_len)
            optimizer.zero_grad(set_to_none=True)
            for i in range(0, step_batch.size, s.micro_batch_size):
                mb = on_device(step_batch.select(slice(i, i + s.micro_batch_size)), device)
                if mb.mask_BT.sum() == 0 and dp is None:
                    continue
                scale = 1.0
                with torch.autocast(device.type, torch.bfloat16, enabled=s.autocast == "bf16"):
                    if s.norm_scope == "micro_batch":  # verl: each micro-batch's own mean, weighted by its rows
                        value, stats = loss.fn(model, mb, LossNorm.of(mb.mask_BT, s.max_response_len), s, state)
                        scale = mb.size / step_batch.size
                        value = value * scale
                    else:
                        value, stats = loss.fn(model, mb, norm, s, state)
                torch.autograd.backward(value)
                # means are weighted by token share; with data parallelism norm.tokens is the global count
                # over the world size, so the ranks' average of these sums is the global token mean
                w = float(mb.mask_BT.sum()) / norm.tokens
                for k, v in stats.items():
                    # loss terms are already shares of the step's loss: they add up
                    sums[k] += float(v) * (scale if k in loss.totals else w)
            gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), s.max_grad_norm)
            if not torch.isfinite(gnorm):  # a NaN or inf must not reach the weights: skip this optimizer step
                optimizer.zero_grad(set_to_none=True)
                skipped += 1
                continue
            optimizer.step()
            if scheduler is not None:
                scheduler.step()
            sums["grad_norm"] += float(gnorm)
            n += 1
    out = {k: v / max(n, 1) for k, v in sums.items() if math.isfinite(v)}
    out["nonfinite_updates"] = float(skipped)
    return out


def vocab_logprobs(
    model: torch.nn.Module, mb: TrainBatch, temperature: float = 1.0, share_prefix: bool = False, pack: bool = False
) -> torch.Tensor:
    """(B, T, V) log-probs of the policy's next-token distribution at every position, aligned with the
    batch: position t predicts token t (position 0 is all zeros). For losses on whole distributions.
    `share_prefix`: shared prompts computed once, and positions inside a row's prompt left zeros; `pack`:
    the same on the packed micro-batch."""
    if pack:
        return packed_vocab_logprobs(model, mb, temperature, share_prefix)
    if share_prefix:
        shared = shared_prefix_vocab_logprobs(model, mb, temperature)
        if shared is not None:
            return shared
    logits = model(input_ids=mb.input_ids_BT, attention_mask=mb.attention_BT).logits[:, :-1].float()
    logp = (logits / temperature).log_softmax(-1)
    return torch.cat([logp.new_zeros((logp.shape[0], 1, logp.shape[-1])), logp], dim=1)
