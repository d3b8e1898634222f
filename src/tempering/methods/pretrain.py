"""`tempering pretrain`: supervised warm start on a task family's (prompt, answer) pairs, on the one loop.

Gives RL a policy with non-zero reward. Each step draws `rollout.prompts_per_step` tasks and trains the
negative log-likelihood of their given answers (a supervised batch, not the policy's samples), with
`optim.*`, checkpoints, resume, evaluations and torchrun like every verb. `run.stop_at_pass` finishes it
early once greedy held-out pass@1 reaches a target, which leaves room for RL to show what it adds;
`pretrain.repair_share` turns a share of the examples into repairs (a wrong answer, the verifier's
feedback, then the right answer), so the policy learns to use feedback.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from pydantic import Field, model_validator
from typing_extensions import Self

from tempering.algos.losses import LossNorm, aggregate
from tempering.config import Schema, as_config, ignored_unless
from tempering.envs.base import StepResult, TaskFamily
from tempering.errors import UserError
from tempering.models.chat import ChatFormat
from tempering.rollout.engine import format_feedback
from tempering.train.batch import TrainBatch
from tempering.train.config import LoopConfig, OptimSection, RolloutSection, RunSection, UpdateSection
from tempering.train.method import Context, Credit, Method, MethodSpec, State
from tempering.train.rules import Linearity
from tempering.train.scoring import Scores
from tempering.train.update import Loss, UpdateSettings, policy_logprobs
from tempering.types import Episode, StopReason, Task, Turn


class PretrainSection(Schema):
    repair_share: float = Field(
        0.0,
        ge=0,
        lt=1,
        description="Share of the examples that are repairs: a corrupted answer, the verifier's feedback, then the right answer (teaches the policy to use feedback).",
    )


class PretrainRollout(RolloutSection):
    prompts_per_step: int = Field(64, ge=1, description="Examples per step (the batch size).")
    max_new_tokens: int = Field(16, ge=1, description="Answer token limit of the held-out evaluations.")
    group_size: int = Field(1, ge=1, le=1, description="One episode per example: its given answer.")


class PretrainOptim(OptimSection):
    lr: float = Field(1e-3, gt=0, description="Peak learning rate (AdamW).")
    warmup_steps: int = Field(50, ge=0, description="Linear warm-up steps.")


class PretrainRun(RunSection):
    steps: int = Field(1500, ge=1, description="Maximum optimizer steps.")
    out_dir: str = Field("runs/pretrain", description="Run folder; the model is exported to OUT_DIR/final.")
    eval_every: int = Field(100, ge=0, description="Greedy held-out pass@1 every N steps (0 = only at the end).")
    eval_size: int | None = Field(200, ge=1, description="Held-out prompts per periodic evaluation (default: all).")
    eval_k: int = Field(1, ge=1, description="Samples per held-out prompt for pass@k (1: greedy pass@1 only).")
    eval_on_start: bool = Field(False, description="Evaluate the whole held-out set before the first step.")
    checkpoint_every: int = Field(250, ge=0, description="Checkpoint every N steps (0 = only at the end).")
    log_samples: int = Field(0, ge=0, description="Episodes written to samples.jsonl per step.")
    collapse_entropy: float = Field(
        0.0,
        ge=0,
        description="Warn when the answers' mean token entropy stays below this for run.collapse_patience steps "
        "(0 = never: given answers are meant to become certain).",
    )


class PretrainConfig(LoopConfig):
    """Supervised warm start (`tempering pretrain`): the loop's sections, its batch being given answers."""

    rollout: PretrainRollout = Field(
        default_factory=PretrainRollout, description="Batch size, and the held-out evaluations' answers."
    )
    loss: UpdateSection = Field(default_factory=UpdateSection, description="The update (the answers' NLL).")
    optim: PretrainOptim = Field(default_factory=PretrainOptim, description="Optimizer and schedule.")
    run: PretrainRun = Field(default_factory=PretrainRun, description="Length, evaluations, early finish, folder.")
    pretrain: PretrainSection = Field(default_factory=PretrainSection, description="Repair examples.")

    def linearity(self) -> Linearity:
        return Linearity(LOSS.linear, "the pretrain loss (an NLL)")

    @model_validator(mode="after")
    def _check(self) -> Self:
        given = "a sampled batch (pretrain trains on given answers)"
        ignored_unless(self.rollout, "rollout", ["async_steps"], False, given)
        ignored_unless(self.loss, "loss", ["share_prefix", "mask_truncated"], False, given)
        return self


def given_answer(
    fmt: ChatFormat,
    family: TaskFamily,
    tasks: list[Task],
    repair_share: float,
    seed: int,
    templates: dict[str, str] | None = None,
) -> Callable[[Task], Episode]:
    """`Method.supervised`: a task's episode is its prompt and its answer (the one turn trained on); for a
    `repair_share` of the tasks (drawn once per task from `seed`) the context also holds a corrupted answer
    (from the characters of `tasks`' answers) and the verifier's feedback on it, worded by `templates`
    (`rollout.feedback_templates`, as the rollout engine words it)."""
    eos = fmt.tokenizer.eos_token_id

    def encode(s: str) -> list[int]:
        return list(fmt.tokenizer.encode(s, add_special_tokens=False))

    if repair_share and not hasattr(family, "check"):
        raise UserError(
            f"pretrain.repair_share needs a family with a check() verifier; {type(family).__name__} has none"
        )
    alphabet = "".join(sorted({c for t in tasks for c in str(t.answer)}))

    made: dict[str, tuple[list[int], list[int]]] = {}

    def tokens(t: Task) -> tuple[list[int], list[int]]:
        """(context, answer) of a task, made once: the template, the corruption and its check run per task."""
        ids = fmt.prompt_ids(t.prompt)
        rng = random.Random(f"{seed}:{t.id}")
        if repair_share and rng.random() < repair_share:
            wrong = corrupt(str(t.answer), rng, alphabet)
            score, ok, feedback, status = family.check(t, wrong)  # type: ignore[attr-defined]
            if not ok:
                message = format_feedback(
                    templates or RolloutSection().feedback_templates, StepResult(score, ok, False, feedback, status)
                )
                ids = ids + encode(wrong) + [eos] + fmt.feedback_ids(message, t.prompt)
        return ids, encode(str(t.answer)) + [eos]

    def episode(t: Task) -> Episode:
        if t.id not in made:
            made[t.id] = tokens(t)
        ids, target = made[t.id]
        turn = Turn(list(target), [0.0] * len(target), score=1.0, success=True, status="given")
        return Episode(t, list(ids), [turn], stop_reason=StopReason.SUCCESS, reward=1.0, prompt=t.prompt)

    return episode


def corrupt(answer: str, rng: random.Random, alphabet: str) -> str:
    """`answer` with one to a third of its characters replaced."""
    chars = list(answer) or [rng.choice(alphabet)]
    for i in rng.sample(range(len(chars)), k=rng.randint(1, max(1, len(chars) // 3))):
        chars[i] = rng.choice([c for c in alphabet if c != chars[i]] or alphabet)
    return "".join(chars)


def every_token(scores: Scores, batch: TrainBatch, state: State) -> Credit:
    """Weight 1 on every answer token: the update is the answers' NLL."""
    return Credit(batch.mask_BT.clone())


def answer_nll(
    model: torch.nn.Module, mb: TrainBatch, norm: LossNorm, s: UpdateSettings, state: State
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """NLL of the answer tokens, the output layer applied only from the first answer on (with a real
    vocabulary it is most of the cost of a step); on packed rows from each row's own first answer token."""
    if s.pack:
        logp, ent = policy_logprobs(model, mb, 1.0, entropy=True, pack=True)
        assert ent is not None
        loss = aggregate(-logp, mb.mask_BT, s.loss_agg, norm)
        return loss, {"nll": loss.detach(), "entropy": (ent * mb.mask_BT).sum() / mb.mask_BT.sum().clamp(min=1)}
    T = mb.input_ids_BT.shape[1]
    answered = mb.mask_BT.sum(0).nonzero()
    first = int(answered[0]) if len(answered) else T - 1
    keep = torch.arange(first - 1, T - 1, device=mb.input_ids_BT.device)  # positions that predict an answer token
    logits = model(input_ids=mb.input_ids_BT, attention_mask=mb.attention_BT, logits_to_keep=keep).logits.float()
    every = logits.log_softmax(-1)
    logp = every.gather(-1, mb.input_ids_BT[:, first:, None]).squeeze(-1)
    m = mb.mask_BT[:, first:]
    loss = aggregate(-logp, m, s.loss_agg, norm)
    with torch.no_grad():
        ent = -(every.exp() * every).sum(-1)
    return loss, {"nll": loss.detach(), "entropy": (ent * m).sum() / m.sum().clamp(min=1)}


LOSS = Loss(answer_nll, ("nll",), linear=False)
"""A supervised NLL: no advantages to weight."""


def build(ctx: Context[PretrainConfig]) -> Method:
    c = ctx.cfg
    return Method(
        name="pretrain",
        credit=every_token,
        loss=LOSS,
        supervised=given_answer(
            ctx.fmt, ctx.family, ctx.train_tasks, c.pretrain.repair_share, c.run.seed, c.rollout.feedback_templates
        ),
        plots=("nll", "eval/pass@1"),
    )


SPEC = MethodSpec(name="pretrain", config=PretrainConfig, build=build)


def pretrain(
    cfg: PretrainConfig | dict[str, Any],
    resume: bool = False,
    overwrite: bool = False,
    family: TaskFamily | None = None,
) -> dict[str, Any]:
    """Run a warm start; returns its exported model, final greedy held-out pass@1 and steps. `family`
    overrides `cfg.task` (e.g. one shared with later stages); a finished run only reports."""
    from tempering.train.loop import Trainer

    cfg = as_config(PretrainConfig, cfg)
    t = Trainer(cfg, SPEC, family, resume=resume, overwrite=overwrite)
    hist = t.run()
    return {
        "model": str(Path(cfg.run.out_dir) / "final"),
        "heldout_pass@1": hist["final"]["eval/pass@1"],
        "steps": t.step_no,
        "seconds": t.progress["seconds"],
    }
