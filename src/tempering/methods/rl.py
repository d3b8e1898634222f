"""RL with verifiable rewards: outcome credit (GRPO, Dr. GRPO, RLOO, REINFORCE++, ReMax, ...) and turn-level
credit (LEAP, Kevin, TRLOO, TCPO), with DAPO's extras (clip-higher, dual clip, dynamic sampling, overlong shaping) and a KL
to the starting policy as a loss term or in the reward.

Scorers: the reference's log-probs (when `loss.kl_coef > 0`), the KL penalty in the reward, the overlong
penalty. Credit: `loss.advantage` from `algos/credit.py` (how each uses shaping is documented there).
Loss: `loss.policy_loss` (PPO-clip by default). LEAP's pruning, TCPO's counterfactual resampling and ReMax's
greedy episodes are rollout options the method sets.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import replace
from typing import Any, Literal, get_args

import torch
from pydantic import Field, model_validator

from tempering.algos.advantages import OUTCOME_ESTIMATORS
from tempering.algos.credit import CREDIT, GREEDY_BASELINE, credit_params, resolve_credit
from tempering.algos.leap import dcp_expand
from tempering.algos.losses import KL_ALIASES, KL_ESTIMATORS, POLICY_LOSSES
from tempering.config import ignored_unless
from tempering.errors import UserError
from tempering.rollout.engine import CounterfactualOptions
from tempering.train.batch import TrainBatch
from tempering.train.config import LoopConfig, PolicyLossSection, RolloutSection
from tempering.train.method import Context, Credit, CreditFn, Method, MethodSpec, turn_credit
from tempering.train.rules import Linearity
from tempering.train.scoring import GroupRewards, KLPenalty, OverlongPenalty, ReferenceLogprobs, Scores
from tempering.train.update import Loss, UpdateSettings, policy_loss_of
from tempering.types import Group

KLEstimator = Literal["k1", "k2", "k3", "abs", "kl", "mse", "low_var_kl"]
assert set(get_args(KLEstimator)) == {*KL_ESTIMATORS, *KL_ALIASES}, "KLEstimator lists every estimator and alias"


class RLRolloutSection(RolloutSection):
    """Rollout options of RL credit methods: LEAP's pruning and TCPO's counterfactual resampling."""

    prune: Literal["none", "dcp"] = Field(
        "none", description="Which groups get turns 2..K: all (none) or LEAP's Difficulty-Conditioned Pruning (dcp)."
    )
    dcp_min_fail: float = Field(
        0.5, ge=0, le=1, description="DCP: expand when first-turn failures >= ceil(this * G) (ours: G/2)."
    )
    dcp_max_fail: float | None = Field(
        None,
        ge=0,
        le=1,
        description="DCP: ... and <= floor(this * G); null = G - 1, so all-fail groups are pruned (ours).",
    )
    counterfactual_turns: int = Field(
        0, ge=0, description="TCPO: L turns of the batch resampled from fixed history (0 = off)."
    )
    counterfactual_samples: int = Field(4, ge=1, description="TCPO: M alternatives per selected turn (ours: 4).")
    counterfactual_select: Literal["surprisal", "random"] = Field(
        "surprisal", description="TCPO: pick the most surprising turns, or random ones (ablation)."
    )

    @model_validator(mode="after")
    def _check_rl(self):
        dcp = self.prune == "dcp"
        ignored_unless(self, "rollout", ["dcp_min_fail", "dcp_max_fail"], dcp, "rollout.prune=dcp")
        ignored_unless(self, "rollout", ["prune"], self.max_turns > 1, "rollout.max_turns > 1")
        cf = self.counterfactual_turns > 0
        ignored_unless(
            self, "rollout", ["counterfactual_samples", "counterfactual_select"], cf, "rollout.counterfactual_turns > 0"
        )
        if self.dcp_max_fail is not None and self.dcp_max_fail < self.dcp_min_fail:
            raise ValueError("rollout.dcp_max_fail must be >= rollout.dcp_min_fail")
        return self


class RLLossSection(PolicyLossSection):
    """The policy loss (PPO-clip by default, or one of the registry), plus credit and the RL extras."""

    advantage: str = Field(
        "grpo",
        description="Credit: grpo, dr_grpo, rloo, reinforce_pp, reinforce_pp_baseline, remax (reward less a greedy "
        "answer's), grpo_passk, gdpo, leap, kevin, trloo, tcpo.",
    )
    credit_args: dict[str, Any] = Field(
        default_factory=dict, description="Keyword arguments of the credit function (e.g. gamma, mode)."
    )
    singleton_group: Literal["zero", "raw"] = Field(
        "zero",
        description="grpo, dr_grpo, rloo with rollout.group_size=1: a group of one gets 0 (ours) or its raw score "
        "(verl's, to reproduce its runs).",
    )
    kl_coef: float = Field(0.0, ge=0, description="KL-to-reference coefficient beta (0: no reference model is loaded).")
    kl_estimator: KLEstimator = Field(
        "k3",
        description="KL estimator of the loss term: k1, k2, k3, abs, or verl's names kl (k1), mse (k2), low_var_kl (k3).",
    )
    kl_bias_correction: bool = Field(
        False,
        description="Weight the KL term of each token by the current/old policy ratio (TRL's use_bias_correction_kl).",
    )
    kl_in_reward: bool = Field(
        False, description="Subtract beta * each turn's summed k1 KL from its reward instead of adding a loss term."
    )
    dynamic_sampling: bool = Field(
        False, description="DAPO: drop groups whose advantages are all zero (no signal) and refill the batch."
    )
    max_resample_rounds: int = Field(3, ge=0, description="Extra generation rounds allowed to refill the batch.")
    group_reward: str | None = Field(
        None,
        description="A group-level reward the task family defines (a function of each group's finished episodes), "
        "added to each episode's reward before credit: rank or rank_tokens (LEAP's tournament, every family), or "
        "the family's own. loss.advantage=leap passes it back over turns alone (default rank).",
    )
    overlong_cache: int = Field(
        0, ge=0, description="DAPO overlong shaping: ramp length before rollout.max_new_tokens, per answer (0 = off)."
    )

    @model_validator(mode="after")
    def _check_rl(self):
        if self.advantage == "leap" and "token_efficiency" in self.credit_args:
            raise ValueError(
                "loss.credit_args.token_efficiency is now LEAP's group reward: remove it and set "
                "loss.group_reward=rank_tokens (the token tie-break) or rank"
            )
        if self.advantage not in CREDIT:
            raise ValueError(f"loss.advantage={self.advantage!r} is unknown; choose one of {', '.join(sorted(CREDIT))}")
        bad = sorted(set(self.credit_args) - set(credit_params(self.advantage)))
        if bad:
            raise ValueError(
                f"loss.credit_args {bad} not accepted by loss.advantage={self.advantage}; "
                f"allowed: {', '.join(credit_params(self.advantage)) or 'none'}"
            )
        if self.kl_in_reward and self.kl_coef == 0:
            raise ValueError("loss.kl_in_reward=true has no effect unless loss.kl_coef > 0; set loss.kl_coef")
        ignored_unless(
            self,
            "loss",
            ["kl_estimator", "kl_bias_correction"],
            self.kl_coef > 0 and not self.kl_in_reward,
            "loss.kl_coef > 0 (as a loss term)",
        )
        ignored_unless(self, "loss", ["max_resample_rounds"], self.dynamic_sampling, "loss.dynamic_sampling=true")
        outcome = self.advantage in OUTCOME_ESTIMATORS
        ignored_unless(self, "loss", ["singleton_group"], outcome, "loss.advantage=" + "|".join(OUTCOME_ESTIMATORS))
        if self.advantage == "leap":
            for key, on in (("overlong_cache", self.overlong_cache > 0), ("kl_in_reward", self.kl_in_reward)):
                if on:
                    raise ValueError(
                        f"loss.{key} shapes rewards, and loss.advantage=leap ranks episodes by (success, turn, tokens) "
                        "without them; drop the shaping (use loss.group_reward=rank_tokens for length)"
                    )
        return self

    def update_settings(self, temperature: float, max_response_len: int) -> UpdateSettings:
        s = super().update_settings(temperature, max_response_len)
        if not self.kl_in_reward:
            s.kl_coef, s.kl_estimator, s.kl_bias_correction = self.kl_coef, self.kl_estimator, self.kl_bias_correction
        return s


def group_reward_name(loss: RLLossSection) -> str | None:
    """The group reward the config asks for: `loss.group_reward`, else LEAP's tournament for its credit."""
    return loss.group_reward or ("rank" if loss.advantage == "leap" else None)


WHITENED = ("reinforce_pp", "reinforce_pp_baseline", "gdpo")
"""Credits normalised over the whole batch: a group with equal rewards still gets advantages."""


def check(cfg) -> None:
    """Checks across sections of an RL config (raise ValueError inside a validator)."""
    r, loss = cfg.rollout, cfg.loss
    if loss.dynamic_sampling and loss.advantage in WHITENED:
        raise ValueError(
            f"loss.dynamic_sampling drops groups whose advantages are all zero, and loss.advantage={loss.advantage} "
            "normalises over the whole batch, so no group's are; use loss.advantage=grpo|rloo or unset loss.dynamic_sampling"
        )
    if loss.advantage == "grpo_passk" and r.group_size < 2:
        raise ValueError(
            "loss.advantage=grpo_passk compares each group's two best answers; set rollout.group_size >= 2"
        )
    if loss.singleton_group != "zero" and r.group_size != 1:
        raise ValueError(
            f"loss.singleton_group={loss.singleton_group} has no effect unless rollout.group_size=1; "
            "remove it, or set rollout.group_size=1"
        )
    if r.group_size == 1 and loss.singleton_group == "zero" and loss.advantage not in (*WHITENED, *GREEDY_BASELINE):
        within = loss.advantage == "kevin" or (loss.advantage == "tcpo" and loss.credit_args.get("norm") == "group")
        warnings.warn(
            "rollout.group_size=1: every group-relative advantage is 0 with one episode per prompt, so "
            + (
                f"only the within-episode part of loss.advantage={loss.advantage} trains"
                if within
                else f"loss.advantage={loss.advantage} gives no update a signal"
            )
            + "; use rollout.group_size >= 2",
            stacklevel=2,
        )
    if r.counterfactual_turns > 0 and loss.advantage != "tcpo":
        raise ValueError(
            f"rollout.counterfactual_turns={r.counterfactual_turns} resamples turns for TCPO's counterfactual credit, "
            f"which loss.advantage={loss.advantage} never reads; set loss.advantage=tcpo or rollout.counterfactual_turns=0"
        )


def with_tournament(credit: CreditFn) -> CreditFn:
    """LEAP's credit, with each episode's group reward (its tournament score) kept for its sample row and the
    share of groups the tournament ranks at all (some score != 0) as a metric."""

    def logged(scores: Scores, batch: TrainBatch, state) -> Credit:
        s_NG = scores.turns.group_NG
        assert s_NG is not None, "LEAP's scorers begin with its group reward"
        metrics = {"leap/groups_ranked": float((s_NG != 0).any(-1).float().mean())}
        out = credit(scores, batch, state)
        return replace(out, metrics={**out.metrics, **metrics}, per_episode={"rank_score": s_NG.flatten()})

    return logged


def adaptive_entropy(target: float, delta: float, low: float, high: float):
    """TRL's adaptive entropy controller: after each update, the coefficient moves up by `delta` if the update's
    entropy was at or below `target`, else down, within [low, high]; the next update applies it only while that
    entropy stays at or below the target (`train/update.py: ppo_loss`)."""

    def after(state, metrics) -> dict[str, float]:
        h = metrics["entropy"]
        coef = min(state["entropy_coef"] + delta, high) if h <= target else max(state["entropy_coef"] - delta, low)
        return {**state, "entropy_coef": coef, "entropy_last": h}

    return after


def build(ctx: Context) -> Method:
    c = ctx.cfg
    loss: RLLossSection = c.loss
    r: RLRolloutSection = c.rollout
    scorers: list = []
    name = group_reward_name(loss)
    if name is not None:  # first: a family's reward of the group's episodes, before any shaping
        fn = ctx.family.group_reward(name)
        if fn is None:
            asked = f"loss.group_reward={name}" if loss.group_reward else f"loss.advantage={loss.advantage}"
            raise UserError(
                f"{asked} asks for the group reward {name!r}, which task.family={c.task.family} does not define; "
                "give a family that defines it (TaskFamily.group_rewards) or another loss.group_reward"
            )
        scorers.append(GroupRewards(fn))
    if loss.kl_coef > 0:  # beta = 0 never loads or runs a reference model
        scorers.append(ReferenceLogprobs(ctx.load_start(), loss.micro_batch_size, r.temperature or 1.0, loss.pack))
        if loss.kl_in_reward:
            scorers.append(KLPenalty(loss.kl_coef))
    if loss.overlong_cache > 0:
        scorers.append(OverlongPenalty(r.max_new_tokens, loss.overlong_cache))
    rollout: dict[str, Any] = {}
    if r.prune == "dcp":

        def keep(g: Group) -> list[bool]:
            n_fail = sum(not e.success for e in g.episodes)
            ok = bool(dcp_expand(torch.tensor([n_fail]), len(g.episodes), r.dcp_min_fail, r.dcp_max_fail)[0])
            return [ok] * len(g.episodes)

        rollout["continue_after_turn1"] = keep
    if r.counterfactual_turns > 0:
        rollout["counterfactual"] = CounterfactualOptions(
            r.counterfactual_turns, r.counterfactual_samples, r.counterfactual_select, c.run.seed
        )
    if loss.advantage in GREEDY_BASELINE:
        rollout["greedy_baseline"] = True
    plots = ["success", "frac_zero_std_groups", "frac_zero_adv_groups"]
    if loss.advantage in GREEDY_BASELINE:
        plots.append("greedy_reward")
    if loss.kl_coef > 0:
        plots.append("kl_ref_in_reward" if loss.kl_in_reward else "kl_ref")
    if loss.overlong_cache > 0:
        plots.append("shaping/overlong")
    if r.max_turns > 1:
        plots += ["turns", "acc@1"]
    credit = turn_credit(resolve_credit(loss.advantage, loss.credit_args, loss.singleton_group))
    if loss.advantage == "leap":
        credit = with_tournament(credit)
        plots += ["leap/groups_ranked"]
    state, after_update = {}, None
    if loss.entropy_adaptive:
        state = {"entropy_coef": loss.entropy_coef, "entropy_last": math.inf}
        after_update = adaptive_entropy(
            loss.entropy_target, loss.entropy_coef_delta, loss.entropy_coef_min, loss.entropy_coef_max
        )
        plots.append("state/entropy_coef")
    return Method(
        name=loss.advantage,
        credit=credit,
        scorers=scorers,
        loss=rl_loss(c),
        state=state,
        after_update=after_update,
        rollout=rollout,
        resample_rounds=loss.max_resample_rounds if loss.dynamic_sampling else None,
        # the KL loss reads the reference, the credit does not: dynamic sampling skips its forward
        signal_scorers=None if loss.kl_in_reward else [x for x in scorers if not isinstance(x, ReferenceLogprobs)],
        plots=tuple(plots),
    )


class TrainConfig(LoopConfig):
    """The RL recipe (`tempering train`)."""

    rollout: RLRolloutSection = Field(default_factory=RLRolloutSection, description="Sampling and turns.")
    loss: RLLossSection = Field(default_factory=RLLossSection, description="Credit and policy loss.")

    def linearity(self) -> Linearity:
        linear = ", ".join(n for n, p in POLICY_LOSSES.items() if p.linear)
        name = self.loss.policy_loss
        return Linearity(POLICY_LOSSES[name].linear, f"loss.policy_loss={name}", f"use a linear loss ({linear})")

    @model_validator(mode="after")
    def _check(self):
        check(self)
        return self


def rl_loss(cfg: TrainConfig) -> Loss:
    """The registered policy loss `loss.policy_loss` names (`PPO_LOSS`, linear or not as it declares)."""
    return policy_loss_of(cfg.loss.policy_loss)


SPEC = MethodSpec(name="rl", config=TrainConfig, build=build)
