"""What a training method is: scorers + a credit function + a loss, with small explicit state.

The one loop (`train/loop.py`) runs every method the same way:

    rollout -> score (verifier, then the method's scorers) -> credit -> next state -> policy update
            -> updates of the method's own modules (`Trainable`, e.g. PPO's critic)

A method is data, built once from the run's context by a builder `(Context) -> Method`. Its module
exports a `MethodSpec` (name, config schema, builder, what it supports): the registry
(`tempering.methods`) turns each spec into a CLI verb, and any spec (yours included) can be given to
`Trainer` or `tempering.run` directly. Credit is a pure function of the scores, the batch and the
state: it returns advantages, extra per-token tensors for the loss and metrics, and mutates nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import torch

from tempering.algos.advantages import zero_std_groups
from tempering.algos.credit import TurnTensors
from tempering.envs.base import TaskFamily
from tempering.errors import UserError
from tempering.models.chat import ChatFormat
from tempering.rollout.engine import RolloutOptions
from tempering.rollout.sampler import Sampler
from tempering.teachers.prompts import PromptBuilder
from tempering.train.batch import TrainBatch, broadcast_turn_adv
from tempering.train.config import LoopConfig
from tempering.train.parallel import DataParallel, Solo
from tempering.train.scoring import Scorer, Scores
from tempering.train.stages import Stage
from tempering.train.update import PPO_LOSS, Loss
from tempering.types import Episode, Task

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

State = Mapping[str, float]
C = TypeVar("C", bound=LoopConfig)
"""A verb's config class: a method's `Context`, builder and `MethodSpec` share it."""


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
class Trainable:
    """A module a method trains besides the policy (PPO's critic), with its own optimizer and update.

    The loop gives it an AdamW optimizer (`lr`, `weight_decay`, `betas`) and, under torchrun, wraps it in
    DDP as it wraps the policy; before the policy's update of every step (also while the policy is frozen)
    it calls `update(module, optimizer, batch, settings, generator)` with the wrapped module and the batch
    the policy trained on (credit's `extra` included) and logs the returned metrics as `NAME/...`. Module,
    optimizer and generator are saved in checkpoints and resumed exactly; the module's weights are
    exported next to the policy as `final/NAME.safetensors`.
    """

    module: torch.nn.Module
    update: Callable[..., dict[str, float]]
    """`(module, optimizer, batch, settings, generator) -> metrics`; under data parallelism `settings`
    carries the ranks (`UpdateSettings.data_parallel`) as in the policy's update."""
    lr: float
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)


@dataclass(frozen=True)
class Method:
    """A training method as data."""

    name: str
    credit: CreditFn
    scorers: Sequence[Scorer] = ()
    """Run after the verifier's scores, in order (teachers, reference, shaping)."""
    loss: Loss = PPO_LOSS
    """The policy loss `(model, mb, norm, settings, state)` and the statistics that are its terms."""
    state: dict[str, float] = field(default_factory=dict)
    """Initial method state (e.g. Direct-OPD's alpha); saved in checkpoints."""
    next_state: Callable[[State, Mapping[str, float]], dict[str, float]] | None = None
    """The state for this step's update, from the previous state and this step's credit metrics
    (reduced over ranks)."""
    after_update: Callable[[State, Mapping[str, float]], dict[str, float]] | None = None
    """The state after the policy's update, from the state and the update's metrics (reduced over ranks),
    e.g. an adaptive entropy coefficient. None: the update leaves the state as it is."""
    rollout: dict[str, Any] = field(default_factory=dict)
    """Rollout options the method sets (LEAP's pruning, TCPO's counterfactual resampling, ReMax's greedy
    baseline)."""
    resample_rounds: int | None = None
    """Dynamic sampling: groups whose advantages are all zero are dropped and replaced by up to this
    many extra generation rounds (None: off)."""
    signal_scorers: Sequence[Scorer] | None = None
    """The scorers dynamic sampling runs to find the zero-signal groups, when fewer than `scorers` decide
    the credit (a KL reference only the loss reads then runs on the kept groups only). None: all of them."""
    student_prompt: PromptBuilder | None = None
    """The student's prompt from each raw example (distillation with privileged teacher context)."""
    plots: tuple[str, ...] = ()
    """The method's own metrics, plotted beside the common ones."""
    trainables: dict[str, Trainable] = field(default_factory=dict)
    """Modules the method trains besides the policy, by name (a critic)."""
    freeze_policy: Callable[[State, int], bool] | None = None
    """`(state, run step) -> bool`: True while the policy is not updated, e.g. value pre-training (the
    trainables still train). The run step counts from 1, skipped updates included. None: the policy
    always trains."""
    supervised: Callable[[Task], Episode] | None = None
    """Supervised data in place of the policy's samples: a drawn task's episode made from a given answer
    (`methods/pretrain.py`), one per group. None: the policy's rollouts."""

    @property
    def filter_scorers(self) -> Sequence[Scorer]:
        """What dynamic sampling runs on each collected batch before it filters; the update runs the
        rest of the run's scorers on the kept groups."""
        return self.scorers if self.signal_scorers is None else self.signal_scorers


def _no_start() -> torch.nn.Module:
    raise ValueError(
        "this Context was made without load_start: give it one to build a method that needs the starting policy"
    )


@dataclass
class Context(Generic[C]):
    """What a method builder may use: the run's config (its verb's config class), policy, data and helpers."""

    cfg: C
    model: PreTrainedModel
    """The policy (unwrapped: the module the sampler reads; a Hugging Face causal LM)."""
    tokenizer: PreTrainedTokenizerBase
    fmt: ChatFormat
    family: TaskFamily
    train_tasks: list[Task]
    heldout_tasks: list[Task]
    raw: dict[str, Task]
    """Examples by id, before the student's prompt is applied (teacher prompts are built from these)."""
    sampler: Sampler
    opts: RolloutOptions
    ranks: Solo | DataParallel
    """`Solo` or `DataParallel`: `once(fn)` runs work on rank 0 and shares the result."""
    resume: bool = False
    parts: Mapping[str, Any] = field(default_factory=dict)
    """Objects a Python caller gave in place of the config's (`MethodSpec.parts`, e.g. a ready teacher)."""
    load_start: Callable[[], torch.nn.Module] = _no_start
    """A frozen copy of the starting policy (`model.name`), e.g. a KL reference or anchor."""

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device


MethodBuilder = Callable[[Context[C]], Method]


StageTrain = Callable[[Mapping[str, Any], C, bool, bool], Any]
"""`(parts, cfg, resume, overwrite) -> history`: one run of a method's loop as its stage trains it, with
the method's parts the stage adds (Direct-OPD's `pair`)."""


@dataclass(frozen=True)
class MethodSpec(Generic[C]):
    """A training method as the registry, the CLI and `tempering config` know it: each `methods/X.py`
    exports one as `SPEC`. What its loss supports is its config's to say (`LoopConfig.linearity`, checked by
    `train/rules.py` when the config is read) or, where the config does not decide it, the built loss's."""

    name: str
    config: type[C]
    """Its verb's config schema (a `train.config.LoopConfig`)."""
    build: MethodBuilder[C]
    parts: tuple[str, ...] = ()
    """Keyword objects a Python caller may give in place of the config's (`Context.parts`)."""
    stages: Callable[[C, StageTrain[C]], list[Stage[C]]] | None = None
    """The verb's stages, when it is more than one run of the loop (`(cfg, train) -> stages`, each
    training with `train`: one run of this method), run by `train/stages.py`; no
    stages (None, or an empty list for this config): one run in `run.out_dir`."""

    def check(self, cfg: C, parts: Mapping[str, Any] = {}) -> None:
        """Refuse objects this method does not take, before any model loads."""
        unknown = sorted(set(parts) - set(self.parts))
        if unknown:
            raise UserError(
                f"the {self.name} method takes no {', '.join(unknown)}; it accepts "
                f"{', '.join(self.parts) or 'no objects'} besides the config"
            )


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
