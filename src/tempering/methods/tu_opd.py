"""Teacher-Union On-Policy Distillation (the "compress" step of expand-then-compress).

Each teacher's pass rate p_j(x) on every training example is read from a file (e.g. RGRPO's
pass_rates.json) or measured when the run starts. Scorers: every teacher's log-probs of the student's
own tokens. Credit: only reliable teachers (p_j(x) >= rho) count, weighted by quality
q_j(x) = p_j / sum of the reliable p's:  A_t = sum_j q_j (log pi_j(y_t) - log pi_S(y_t)), or with
`residual` the Consensus-Residual target (the winner's excess over the consensus kept). Examples
without a reliable teacher are left out of the loss, or trained with GRPO on the task reward.
`weighting=uniform, gating=false` is the plain uniform-average multi-teacher OPD baseline.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path
from typing import Literal

import torch
from pydantic import Field, model_validator
from typing_extensions import Self

from tempering.algos.credit import CREDIT
from tempering.algos.expand_compress import consensus_residual_advantage, teacher_weights, tu_opd_advantage
from tempering.config import Schema, ignored_unless
from tempering.errors import UserError
from tempering.evaluation import pass_rates
from tempering.methods.opd import check_sampling, teacher_formats, teachers_of
from tempering.models.chat import ChatFormat
from tempering.rollout.sampler import HFSampler
from tempering.runlog import atomic_write_text
from tempering.teachers import HFTeacher, Teacher, TeacherSection, load_builder
from tempering.teachers.prompts import PromptBuilder
from tempering.train.batch import TrainBatch
from tempering.train.config import ClippedUpdateSection, LoopConfig
from tempering.train.method import Context, Credit, Method, MethodSpec, State, turn_credit
from tempering.train.scoring import Scores, TeacherLogprobs
from tempering.types import Task


class TUOPDSection(Schema):
    teachers: dict[str, TeacherSection] = Field(
        default_factory=dict, description="Teachers by name (names match the pass-rate file's)."
    )
    pass_rates: str | None = Field(
        None,
        description="JSON with per-example pass rates ({tasks: {task_id: {teacher: p}}}, as rgrpo writes); null: measure them.",
    )
    pass_samples: int = Field(8, ge=1, description="Samples per example and teacher when measuring pass rates.")
    rho: float = Field(0.5, ge=0, le=1, description="Reliability threshold: teacher j counts on x when p_j(x) >= rho.")
    weighting: Literal["quality", "uniform"] = Field(
        "quality", description="Teacher weights: pass-rate proportional (quality) or equal (uniform)."
    )
    gating: bool = Field(
        True, description="Only reliable teachers count (false: every teacher, the plain multi-teacher average)."
    )
    residual: bool = Field(
        False, description="Consensus-Residual Decomposition: keep the winner's excess over the reliable consensus."
    )
    eta: float = Field(1.0, ge=0, description="Weight of the winner's residual.")
    empty: Literal["skip", "grpo"] = Field(
        "skip", description="Examples with no reliable teacher: left out of the loss, or GRPO on the task reward."
    )
    student_prompt: str = Field(
        "{prompt}", description="The student's prompt: a template over the example, or pkg.module:function."
    )

    @model_validator(mode="after")
    def _check(self) -> Self:
        ignored_unless(self, "tu_opd", ["eta"], self.residual, "tu_opd.residual=true")
        ignored_unless(self, "tu_opd", ["pass_samples"], self.pass_rates is None, "tu_opd.pass_rates=null (measured)")
        return self


def _read_pass_rates(src: Path, tasks: list[Task], names: list[str]) -> dict[str, list[float]]:
    if not src.is_file():
        raise UserError(
            f"tu_opd.pass_rates: {src} does not exist; give the pass_rates.json an rgrpo run wrote, or null to measure"
        )
    table = json.loads(src.read_text()).get("tasks", {})
    out = {}
    for task in tasks:
        row = table.get(task.id)
        if row is None:
            raise UserError(
                f"{src} has no pass rates for training example {task.id}; use the same task section as the run that wrote it"
            )
        missing = [n for n in names if n not in row]
        if missing:
            raise UserError(f"{src} has no pass rates for teacher(s) {missing}; its teachers are {sorted(row)}")
        out[task.id] = [float(row[n]) for n in names]
    return out


def _measure(
    ctx: Context[TUOPDConfig],
    teachers: dict[str, Teacher],
    prompts: dict[str, PromptBuilder],
    formats: dict[str, ChatFormat | None],
    samples: int,
) -> dict[str, list[float]]:
    cols = {}
    for n, teacher in teachers.items():
        if not isinstance(teacher, HFTeacher):
            raise UserError(
                f"teacher {n!r} is a server teacher: its pass rates cannot be measured here; give tu_opd.pass_rates"
            )
        tasks = [replace(task, prompt=prompts[n](ctx.raw[task.id])) for task in ctx.train_tasks]
        sampler = HFSampler(teacher.model, teacher.tokenizer, seed=ctx.cfg.run.seed)
        fmt = formats[n] or ctx.fmt  # a teacher with another tokenizer answers in its own format
        cols[n] = asyncio.run(pass_rates(sampler, fmt, ctx.family.make_env, tasks, samples, ctx.opts))
    out = {task.id: [cols[n][i] for n in teachers] for i, task in enumerate(ctx.train_tasks)}
    here = Path(ctx.cfg.run.out_dir) / "pass_rates.json"
    here.parent.mkdir(parents=True, exist_ok=True)
    table = {"teachers": list(teachers), "tasks": {k: dict(zip(teachers, v)) for k, v in out.items()}}
    atomic_write_text(here, json.dumps(table, indent=1) + "\n")
    return out


def build(ctx: Context[TUOPDConfig]) -> Method:
    """TU-OPD over `tu_opd.teachers`; the part `teachers` (name -> Teacher) overrides the config's."""
    t: TUOPDSection = ctx.cfg.tu_opd
    teachers: dict[str, Teacher] | None = ctx.parts.get("teachers")
    if not t.teachers and not teachers:
        raise UserError("tu-opd needs teachers: give tu_opd.teachers (name -> {path: ...} or {server: ...})")
    loaded = teachers_of(ctx, t.teachers, teachers, aligned=True)
    names = list(loaded)
    prompts = {n: load_builder(t.teachers[n].prompt if n in t.teachers else None) for n in names}
    formats = teacher_formats(ctx, loaded, prompts)
    here = Path(ctx.cfg.run.out_dir) / "pass_rates.json"
    if t.pass_rates:
        table = _read_pass_rates(Path(t.pass_rates), ctx.train_tasks, names)
    elif ctx.resume and here.is_file():  # measured when the run started
        table = _read_pass_rates(here, ctx.train_tasks, names)
    else:
        table = ctx.ranks.once(lambda: _measure(ctx, loaded, prompts, formats, t.pass_samples))
    q = {tid: teacher_weights(torch.tensor(row), t.rho, t.weighting, t.gating) for tid, row in table.items()}
    """Teacher weights per training example (all 0: nothing to distil there)."""
    empty = sum(float(w.sum()) == 0 for w in q.values())
    if empty == len(q) and t.empty == "skip":
        raise UserError(
            f"nothing to distil: no teacher reaches rho={t.rho} on any of the {len(q)} training examples; "
            "lower tu_opd.rho, set tu_opd.empty=grpo, or train stronger teachers"
        )
    scorers = [TeacherLogprobs(n, loaded[n], ctx.fmt, prompts[n], ctx.raw, teacher_fmt=formats[n]) for n in names]
    grpo = turn_credit(CREDIT["grpo"])

    def credit(scores: Scores, batch: TrainBatch, state: State) -> Credit:
        logp_BTJ = torch.stack([scores.teachers[n].token_logp_BC for n in names], -1)
        q_EJ = torch.stack([q[tid] for tid in scores.task_ids])
        q_BJ = q_EJ[batch.episode_B]
        m = batch.mask_BT
        if t.residual:
            adv = consensus_residual_advantage(logp_BTJ, batch.sample_logp_BT, q_BJ, m, t.eta)
        else:
            adv = tu_opd_advantage(logp_BTJ, batch.sample_logp_BT, q_BJ, m)
        empty_B = q_BJ.sum(-1) == 0
        mask = m
        if bool(empty_B.any()):
            if t.empty == "grpo":
                adv = torch.where(empty_B[:, None], grpo(scores, batch, state).adv_BT, adv)
            else:
                mask = m * (~empty_B).float()[:, None]
        has = ~empty_B
        key = "tu_opd/skipped" if t.empty == "skip" else "tu_opd/grpo_fallback"
        metrics = {
            key: float(empty_B.float().mean()),
            "tu_opd/reliable_teachers": float((q_BJ > 0).sum(-1).float().mean()),
        }
        if bool(has.any()):
            mh = m[has]
            metrics["tu_opd/advantage"] = float((adv[has] * mh).sum() / mh.sum().clamp(min=1))
            for j, n in enumerate(names):
                metrics[f"tu_opd/weight/{n}"] = float(q_BJ[has, j].mean())
        return Credit(adv, mask_BT=mask, metrics=metrics)

    return Method(
        name="tu-opd",
        credit=credit,
        scorers=scorers,
        student_prompt=load_builder(t.student_prompt),
        plots=("tu_opd/advantage", "tu_opd/reliable_teachers"),
    )


class TUOPDConfig(LoopConfig):
    """TU-OPD with optional Consensus-Residual Decomposition (`tempering tu-opd`)."""

    loss: ClippedUpdateSection = Field(
        default_factory=ClippedUpdateSection, description="The PPO-clip update of the distillation advantage."
    )
    tu_opd: TUOPDSection = Field(
        default_factory=TUOPDSection, description="Teachers, pass rates, gating and weighting."
    )

    @model_validator(mode="after")
    def _check(self) -> Self:
        check_sampling(self.rollout)
        return self


SPEC = MethodSpec(name="tu-opd", config=TUOPDConfig, build=build, parts=("teachers",))
