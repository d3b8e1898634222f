"""PPO with a learned critic: GAE over the policy's action tokens, a clipped value loss, value pre-training.

Scorer: the critic's value of every sampled token's prefix (`train/scoring.py: Values`). Credit: each
episode's reward on its last action token (plus each turn's shaping on the turn's last token), GAE(gamma,
lambda) along the episode's action tokens only (feedback tokens are not actions), advantages whitened over
the whole batch (all ranks), and the returns handed to the critic's update. Loss: PPO-clip. The critic is
a module the method owns (`train/method.py: Trainable`): its own optimizer and learning rate, updated
before the policy every step (as verl does: a value head then trains on the features its values came from), checkpointed and data-parallel like the policy. With `critic.pretrain_steps`
the first steps train the critic alone (the policy frozen): CUDA Agent's value pre-training.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Literal

import torch
from pydantic import Field, model_validator
from typing_extensions import Self

from tempering.algos.gae import clipped_value_loss, episode_gae, masked_moments, unbiased_var, whiten
from tempering.algos.losses import LossNorm
from tempering.config import Schema, ignored_unless
from tempering.models import load_module, load_policy
from tempering.models.packing import check_packing
from tempering.models.value import ValueModel
from tempering.train.batch import TrainBatch
from tempering.train.config import ClippedUpdateSection, LoopConfig, LossAgg
from tempering.train.method import Context, Credit, CreditFn, Method, MethodSpec, State, Trainable
from tempering.train.parallel import DataParallel, Solo
from tempering.train.prefix import packed_values
from tempering.train.scoring import Scores, Values
from tempering.train.update import Loss, UpdateSettings, optimizer_steps


class PPOLossSection(ClippedUpdateSection):
    """The PPO update plus GAE's keys."""

    gamma: float = Field(1.0, ge=0, le=1, description="GAE discount over action tokens (CUDA Agent: 1).")
    lam: float = Field(0.95, ge=0, le=1, description="GAE lambda (CUDA Agent: 0.95).")
    whiten_advantages: bool = Field(
        True, description="Whiten the advantages over the whole batch (all ranks), as verl does."
    )


class CriticSection(Schema):
    """The value model (PPO's critic)."""

    kind: Literal["model", "head"] = Field(
        "model",
        description="A separate value model (a causal LM's decoder + value head, all trained) or a value head on "
        "the policy's hidden states (only the head trains; the value loss never moves the policy).",
    )
    model: str | None = Field(
        None, description="Starting weights of a separate critic (a tiny size or a model folder; default model.name)."
    )
    init: str | None = Field(
        None, description="Critic weights exported by an earlier run (RUN/final/critic.safetensors), e.g. pre-trained."
    )
    lr: float = Field(5e-4, gt=0, description="The critic's learning rate (its own AdamW).")
    weight_decay: float = Field(0.0, ge=0, description="The critic's AdamW weight decay.")
    epochs: int = Field(1, ge=1, description="Passes of the critic over each batch.")
    value_clip: float | None = Field(
        0.5, gt=0, description="Clip the new value within this of the rollout's value in the loss (null: plain MSE)."
    )
    max_grad_norm: float = Field(1.0, gt=0, description="The critic's gradient clipping norm.")
    loss_agg: LossAgg = Field(
        "token-mean",
        description="The value loss's aggregation, its own (verl's critic.loss_agg_mode; default token-mean).",
    )
    pretrain_steps: int = Field(
        0,
        ge=0,
        description="Value pre-training: the first N run steps (skipped updates counted) train the critic alone, the "
        "policy frozen (N = run.steps: a value pre-training run).",
    )

    @model_validator(mode="after")
    def _check(self) -> Self:
        ignored_unless(self, "critic", ["model"], self.kind == "model", "critic.kind=model")
        return self


def check(cfg: PPOConfig) -> None:
    """Checks across sections of a PPO config."""
    if cfg.critic.pretrain_steps > cfg.run.steps:
        raise ValueError(
            f"critic.pretrain_steps={cfg.critic.pretrain_steps} exceeds run.steps={cfg.run.steps}; "
            "set it to at most run.steps (equal: the whole run pre-trains the critic)"
        )


def turn_end_rewards(scores: Scores, batch: TrainBatch) -> torch.Tensor:
    """(B, T) rewards: each turn's summed shaping terms on that turn's last action token."""
    turn, on = batch.turn_BT, batch.mask_BT > 0
    K = scores.turns.scores_NGK.shape[-1]
    last = on & (torch.cat([turn[:, 1:], torch.full_like(turn[:, :1], -1)], 1) != turn)
    assert batch.episode_B is not None
    rows = batch.episode_B[:, None].expand_as(turn)
    out = torch.zeros_like(batch.mask_BT)
    out[last] = scores.turns.shaping.reshape(-1, K)[rows[last], turn[last]]
    return out


def gae_credit(gamma: float, lam: float, whiten_advantages: bool, ranks: Solo | DataParallel) -> CreditFn:
    """GAE credit; whitening statistics are combined over `ranks` (the same numbers as one process)."""

    def credit(scores: Scores, batch: TrainBatch, state: State) -> Credit:
        if "values" not in scores.extras:
            raise ValueError("GAE needs the critic's values: put the Values scorer in the method's scorers")
        values_BT = scores.extras["values"]
        assert batch.episode_B is not None
        outcome = scores.turns.rewards_NG.reshape(-1)  # on the last action token; shaping at each turn's end
        adv, ret = episode_gae(
            turn_end_rewards(scores, batch), values_BT, batch.mask_BT, batch.episode_B, outcome, gamma, lam
        )
        m = batch.mask_BT
        n_tok = m.sum().clamp(min=1)
        raw = {"gae/return_mean": float((ret * m).sum() / n_tok), "gae/adv_abs": float((adv.abs() * m).sum() / n_tok)}
        if whiten_advantages:
            n, m1, m2 = masked_moments(adv, m)
            g = ranks.reduce({"m1": m1, "m2": m2}, weight=n)
            total = ranks.reduce({"n": n})["n"] * ranks.size  # the mean count over ranks times their number
            adv = whiten(adv, m, g["m1"], unbiased_var(total, g["m1"], g["m2"]))
        return Credit(adv * m, extra={"returns": ret, "values": values_BT}, metrics=raw)

    return credit


def value_loss(
    model: torch.nn.Module, mb: TrainBatch, norm: LossNorm, s: UpdateSettings, state: State, clip: float | None
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The critic's clipped value loss on one micro-batch (targets: credit's returns)."""
    v = packed_values(model, mb) if s.pack else model(mb.input_ids_BT, mb.attention_BT)
    loss, stats = clipped_value_loss(v, mb.extra["values"], mb.extra["returns"], mb.mask_BT, clip, s.loss_agg, norm)
    stats["value_loss"] = loss.detach()
    return loss, stats


def critic_update(critic: CriticSection) -> Callable[..., dict[str, float]]:
    """The critic's update step: its own epochs and clipping over the batch the policy trained on."""

    def update(
        module: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        batch: TrainBatch,
        settings: UpdateSettings,
        generator: torch.Generator,
    ) -> dict[str, float]:
        s = replace(settings, ppo_epochs=critic.epochs, max_grad_norm=critic.max_grad_norm, loss_agg=critic.loss_agg)
        if s.data_parallel is not None:
            batch = s.data_parallel.even_out(batch)
        return optimizer_steps(
            module,
            optimizer,
            None,
            batch,
            s,
            generator,
            Loss(partial(value_loss, clip=critic.value_clip), ("value_loss",)),
        )

    return update


def make_critic(ctx: Context[PPOConfig], c: CriticSection) -> ValueModel:
    cfg = ctx.cfg
    if c.kind == "head":
        critic = ValueModel.on_policy(ctx.model)
    else:
        name = c.model or cfg.model.name
        tok = cfg.model.tokenizer if name == cfg.model.name else None  # a fresh tiny critic of the policy's vocabulary
        lm = load_policy(name, seed=cfg.run.seed, dtype=cfg.model.dtype, device=str(ctx.device), tokenizer=tok)[0]
        if cfg.loss.pack:
            check_packing(lm, "the critic")
        critic = ValueModel.separate(lm)
    critic.to(ctx.device)
    if c.init:
        load_module(critic, c.init)
    return critic


def build(ctx: Context[PPOConfig]) -> Method:
    cfg = ctx.cfg
    loss: PPOLossSection = cfg.loss
    c: CriticSection = cfg.critic
    critic = make_critic(ctx, c)
    return Method(
        name="ppo",
        credit=gae_credit(loss.gamma, loss.lam, loss.whiten_advantages, ctx.ranks),
        scorers=[Values(critic, loss.micro_batch_size, loss.pack)],
        trainables={"critic": Trainable(critic, critic_update(c), c.lr, c.weight_decay)},
        freeze_policy=(lambda state, step: step <= c.pretrain_steps) if c.pretrain_steps else None,
        plots=("success", "value_mean", "critic/value_loss", "critic/value_error", "gae/return_mean"),
    )


class PPOConfig(LoopConfig):
    """PPO with a critic (`tempering ppo`): GAE(gamma, lambda) over the policy's action tokens, a clipped
    value loss with the critic's own learning rate, and optional value pre-training (the policy frozen
    while the critic learns). The critic is exported as RUN/final/critic.safetensors (`critic.init` of a
    later run)."""

    loss: PPOLossSection = Field(default_factory=PPOLossSection, description="GAE and the policy update.")
    critic: CriticSection = Field(default_factory=CriticSection, description="The value model.")

    @model_validator(mode="after")
    def _check(self) -> Self:
        check(self)
        return self


SPEC = MethodSpec(name="ppo", config=PPOConfig, build=build)
