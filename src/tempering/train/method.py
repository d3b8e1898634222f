"""What a training method is: scorers + a credit function + a loss, with small explicit state.

The one loop (`train/loop.py`) runs every method the same way:

    rollout -> score (verifier, then the method's scorers) -> credit -> next state -> policy update

A method is data, built once from the run's context by a builder `(Context) -> Method`; the package's
builders are registered in `tempering.methods.METHODS`, and any builder (yours included) can be given
to `Trainer` directly. Credit is a pure function of the scores, the batch and the state: it returns
advantages, extra per-token tensors for the loss and metrics, and mutates nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from tempering.algos.advantages import zero_std_groups
from tempering.algos.credit import TurnTensors
from tempering.envs.base import TaskFamily
from tempering.models.chat import ChatFormat
from tempering.rollout.engine import RolloutOptions
from tempering.teachers.prompts import PromptBuilder
from tempering.train.batch import TrainBatch, broadcast_turn_adv
from tempering.train.scoring import Scorer, Scores
from tempering.train.update import LossFn, ppo_loss
from tempering.types import Task

State = Mapping[str, float]


@dataclass(frozen=True)
class Credit:
    """What credit hands to the update."""

    adv_BT: torch.Tensor
    """One advantage per token (0 off the loss mask)."""
    extra: dict[str, torch.Tensor] = field(default_factory=dict)
    """Per-token tensors shaped (B, T, ...) that the method's loss reads (`mb.extra`)."""
    mask_BT: torch.Tensor | None = None
    """A narrower loss mask (e.g. rows with nothing to learn from); None keeps the batch's."""
    metrics: dict[str, float] = field(default_factory=dict)
    """Token means over this batch (reduced over ranks by loss tokens)."""
    per_episode: dict[str, torch.Tensor] = field(default_factory=dict)
    """One value per episode of the batch, in its order (e.g. LEAP's tournament score): written into
    each episode's sample row, with its group's values as a list."""


CreditFn = Callable[[Scores, TrainBatch, State], Credit]


@dataclass(frozen=True)
class Method:
    """A training method as data."""

    name: str
    credit: CreditFn
    scorers: Sequence[Scorer] = ()
    """Run after the verifier's scores, in order (teachers, reference, shaping)."""
    loss: LossFn | Callable[..., tuple[torch.Tensor, dict]] = ppo_loss
    """The policy loss `(model, mb, norm, settings)`; a loss that reads the state also takes `state=`
    (bound by the loop)."""
    state: dict[str, float] = field(default_factory=dict)
    """Initial method state (e.g. Direct-OPD's alpha); saved in checkpoints."""
    next_state: Callable[[State, Mapping[str, float]], dict[str, float]] | None = None
    """The state for this step's update, from the previous state and this step's credit metrics
    (reduced over ranks)."""
    rollout: dict[str, Any] = field(default_factory=dict)
    """Rollout options the method sets (LEAP's pruning, TCPO's counterfactual resampling)."""
    resample_rounds: int | None = None
    """Dynamic sampling: groups whose advantages are all zero are dropped and replaced by up to this
    many extra generation rounds (None: off)."""
    student_prompt: PromptBuilder | None = None
    """The student's prompt from each raw example (distillation with privileged teacher context)."""
    corrects: bool = True
    """Whether rollout correction applies (the loss is linear in `adv_BT`); other losses refuse it."""
    plots: tuple[str, ...] = ()
    """The method's own metrics, plotted beside the common ones."""


@dataclass
class Context:
    """What a method builder may use: the run's config, policy, data and helpers."""

    cfg: Any
    model: Any
    """The policy (unwrapped: the module the sampler reads; a Hugging Face causal LM)."""
    tokenizer: Any
    fmt: ChatFormat
    family: TaskFamily
    train_tasks: list[Task]
    heldout_tasks: list[Task]
    raw: dict[str, Task]
    """Examples by id, before the student's prompt is applied (teacher prompts are built from these)."""
    sampler: Any
    opts: RolloutOptions
    ranks: Any
    """`Solo` or `DataParallel`: `once(fn)` runs work on rank 0 and shares the result."""
    resume: bool = False
    load_start: Callable[[], Any] = lambda: None
    """A frozen copy of the starting policy (`model.name`), e.g. a KL reference or anchor."""

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device


MethodBuilder = Callable[[Context], Method]


def turn_credit(fn: Callable[[TurnTensors], torch.Tensor]) -> CreditFn:
    """A `CreditFn` from a function of (N, G, K) turn tensors: each turn's advantage on its tokens."""

    def credit(scores: Scores, batch: TrainBatch, state: State) -> Credit:
        adv_NGK = fn(scores.turns)
        adv_BT = broadcast_turn_adv(adv_NGK.reshape(-1, adv_NGK.shape[-1]), batch)
        return Credit(adv_BT)

    credit.__doc__ = fn.__doc__
    return credit


def zero_signal_groups(adv_BT: torch.Tensor, batch: TrainBatch, group_size: int) -> torch.Tensor:
    """Boolean per group: every advantage of every episode is zero (nothing to learn from it)."""
    assert batch.episode_B is not None
    owner = batch.episode_B // group_size
    active = torch.zeros(int(owner.max()) + 1 if batch.size else 0, dtype=torch.bool)
    nonzero_B = (adv_BT.abs() * batch.mask_BT).sum(-1) > 0
    active.index_put_((owner,), nonzero_B, accumulate=True)
    return ~active


def group_stats(scores: Scores) -> dict[str, float]:
    """Share of groups whose outcome rewards are all equal (no signal for outcome credit)."""
    return {"frac_zero_std_groups": float(zero_std_groups(scores.turns.rewards_NG).float().mean())}
