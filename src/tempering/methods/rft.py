"""Rejection fine-tuning (RFT): plain NLL on the policy's own good trajectories.

Each step samples trajectories with the current policy (the loop's rollout); a scorer keeps those whose
reward is above `rft.min_reward` and that are free of loops (the same action twice in a row), invalid tool
calls or schema errors (turn statuses such as `tool_error`, `parse_error`), truncated answers and
environment errors, and drops duplicates (the same actions for the same task) within the batch. The loss
is the negative log-likelihood of the kept episodes' action tokens; feedback tokens are never trained on.
"""

from __future__ import annotations

import torch
from pydantic import Field

from tempering.algos.losses import LossNorm, aggregate
from tempering.config import Schema
from tempering.train.batch import TrainBatch
from tempering.train.config import LoopConfig, UpdateSection
from tempering.train.method import Context, Credit, Method, MethodSpec, State
from tempering.train.rules import Linearity
from tempering.train.scoring import Scorer, Scores
from tempering.train.update import Loss, UpdateSettings, policy_logprobs
from tempering.types import Episode, Group, StopReason

REASONS = ("reward", "invalid_call", "loop", "truncated")


class RFTSection(Schema):
    min_reward: float = Field(0.0, description="Keep episodes whose reward is above this (CUDA Agent: > 0).")
    reject_statuses: list[str] = Field(
        default_factory=lambda: ["tool_error", "parse_error", "env_error"],
        description="A turn with one of these verifier statuses (invalid tool call, schema error) rejects its episode.",
    )
    reject_loops: bool = Field(True, description="Reject episodes that repeat an action in consecutive turns.")
    reject_truncated: bool = Field(
        True,
        description="Reject episodes with an answer cut off at the token limit (ours; not in CUDA Agent's filter).",
    )
    dedupe: bool = Field(
        True,
        description="Keep one copy of identical episodes (same task, same actions) per batch (ours; not in CUDA Agent's filter).",
    )


def rejection(e: Episode, r: RFTSection) -> str | None:
    """Why RFT rejects an episode (one of REASONS), or None to keep it."""
    if e.reward <= r.min_reward:
        return "reward"
    if e.stop_reason == StopReason.ENV_ERROR or any(t.status in r.reject_statuses for t in e.turns):
        return "invalid_call"
    if r.reject_loops and any(a.action_ids == b.action_ids for a, b in zip(e.turns, e.turns[1:])):
        return "loop"
    if r.reject_truncated and any(t.truncated for t in e.turns):
        return "truncated"
    return None


def rejection_filter(r: RFTSection) -> Scorer:
    """Scorer: `Scores.extras["keep"]` (per episode, 1 = train on it) and why the others were rejected (`rft/*`, per episode)."""

    def scorer(groups: list[Group], batch: TrainBatch, scores: Scores) -> Scores:
        keep = torch.zeros(scores.turns.rewards_NG.shape)
        counts = dict.fromkeys(REASONS, 0) | {"duplicate": 0}
        seen: set[tuple[str, tuple[tuple[int, ...], ...]]] = set()
        for n, g in enumerate(groups):
            for i, e in enumerate(g.episodes):
                why = rejection(e, r)
                key = (e.task.id, tuple(tuple(t.action_ids) for t in e.turns))
                if why is None and r.dedupe and key in seen:
                    why = "duplicate"
                if why is None:
                    seen.add(key)
                    keep[n, i] = 1.0
                else:
                    counts[why] += 1
        total = max(keep.numel(), 1)
        m = {"rft/kept": float(keep.sum()) / total, **{f"rft/rejected_{k}": v / total for k, v in counts.items()}}
        return scores.with_extra(keep=keep).with_metrics(**m)

    return scorer


def kept_credit(scores: Scores, batch: TrainBatch, state: State) -> Credit:
    """Weight 1 on the kept episodes' action tokens; the others leave the loss mask."""
    assert batch.episode_B is not None
    mask = batch.mask_BT * scores.extras["keep"].reshape(-1)[batch.episode_B][:, None]
    return Credit(mask.clone(), mask_BT=mask)


def nll_loss(
    model: torch.nn.Module, mb: TrainBatch, norm: LossNorm, s: UpdateSettings, state: State
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Negative log-likelihood of the kept action tokens (the policy at temperature 1)."""
    logp, ent = policy_logprobs(model, mb, 1.0, entropy=True, share_prefix=s.share_prefix, pack=s.pack)
    assert ent is not None  # asked for
    loss = aggregate(-logp, mb.mask_BT, s.loss_agg, norm)
    m = mb.mask_BT
    return loss, {"nll": loss.detach(), "entropy": (ent * m).sum() / m.sum().clamp(min=1)}


LOSS = Loss(nll_loss, ("nll",), linear=False)
"""A supervised NLL: no advantages to weight."""


def build(ctx: Context[RFTConfig]) -> Method:
    return Method(
        name="rft",
        credit=kept_credit,
        scorers=[rejection_filter(ctx.cfg.rft)],
        loss=LOSS,
        plots=("success", "rft/kept", "nll"),
    )


class RFTConfig(LoopConfig):
    """Rejection fine-tuning (`tempering rft`)."""

    loss: UpdateSection = Field(default_factory=UpdateSection, description="The NLL update (no clip: plain NLL).")
    rft: RFTSection = Field(default_factory=RFTSection, description="Which trajectories are kept.")

    def linearity(self) -> Linearity:
        return Linearity(LOSS.linear, "the rft loss (an NLL)")


SPEC = MethodSpec(name="rft", config=RFTConfig, build=build)
