"""`tempering tu-opd`: Teacher-Union On-Policy Distillation (the "compress" step).

Each teacher's pass rate p_j(x) on every training example is read from a file (e.g. RGRPO's
pass_rates.json) or measured at start-up from n samples. On the student's own samples only reliable
teachers (p_j(x) >= rho) count, weighted by quality q_j(x) = p_j / sum of the reliable p's:
    A_t = sum_j q_j (log pi_j(y_t) - log pi_S(y_t)),
or, with `residual`, the Consensus-Residual target (the winner's excess over the consensus kept).
Examples without a reliable teacher are skipped, or trained with GRPO on the task reward.
`weighting=uniform, gating=false` is the plain uniform-average multi-teacher OPD baseline.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

import torch
from pydantic import Field

from tempering.algos.expand_compress import consensus_residual_advantage, teacher_weights, tu_opd_advantage
from tempering.config import Schema
from tempering.envs.base import TaskFamily
from tempering.errors import UserError
from tempering.recipes.distill import TeacherTrainer, as_config, cli_main
from tempering.recipes.rgrpo import pass_rates
from tempering.recipes.rl import TrainConfig
from tempering.rollout.sampler import HFSampler
from tempering.runlog import atomic_write_text
from tempering.teachers import HFTeacher, Teacher, TeacherSection, load_builder
from tempering.train.batch import TrainBatch
from tempering.types import Group


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


class TUOPDConfig(TrainConfig):
    """TU-OPD with optional Consensus-Residual Decomposition (`tempering tu-opd`)."""

    tu_opd: TUOPDSection = Field(
        default_factory=TUOPDSection, description="Teachers, pass rates, gating and weighting."
    )


class TUOPDTrainer(TeacherTrainer):
    def __init__(
        self,
        cfg: TUOPDConfig,
        family: TaskFamily | None = None,
        resume: bool = False,
        teachers: dict[str, Teacher] | None = None,
    ):
        t = cfg.tu_opd
        super().__init__(cfg, family=family, resume=resume, student_prompt=t.student_prompt)
        if not t.teachers and not teachers:
            raise UserError("tu-opd needs teachers: give tu_opd.teachers (name -> {path: ...} or {server: ...})")
        self.teachers = self.teachers_from(t.teachers, teachers)
        self.names = list(self.teachers)
        self.prompts = {n: load_builder(t.teachers[n].prompt if n in t.teachers else None) for n in self.names}
        p = self._pass_rates(resume)
        self.q = {tid: teacher_weights(torch.tensor(row), t.rho, t.weighting, t.gating) for tid, row in p.items()}
        """Teacher weights per training example (all 0: nothing to distil there)."""
        empty = sum(float(q.sum()) == 0 for q in self.q.values())
        if empty == len(self.q) and t.empty == "skip":
            raise UserError(
                f"nothing to distil: no teacher reaches rho={t.rho} on any of the {len(self.q)} training examples; "
                "lower tu_opd.rho, set tu_opd.empty=grpo, or train stronger teachers"
            )
        self.empty_share = empty / len(self.q)

    def _pass_rates(self, resume: bool) -> dict[str, list[float]]:
        """task id -> pass rate of each teacher (in `self.names` order), read or measured (and saved)."""
        t = self.cfg.tu_opd
        here = Path(self.cfg.run.out_dir) / "pass_rates.json"
        src = Path(t.pass_rates) if t.pass_rates else (here if resume and here.is_file() else None)
        if src is not None:
            if not src.is_file():
                raise UserError(
                    f"tu_opd.pass_rates: {src} does not exist; give the pass_rates.json an rgrpo run wrote, or null to measure"
                )
            table = json.loads(src.read_text()).get("tasks", {})
            out = {}
            for task in self.train_tasks:
                row = table.get(task.id)
                if row is None:
                    raise UserError(
                        f"{src} has no pass rates for training example {task.id}; use the same task section as the run that wrote it"
                    )
                missing = [n for n in self.names if n not in row]
                if missing:
                    raise UserError(f"{src} has no pass rates for teacher(s) {missing}; its teachers are {sorted(row)}")
                out[task.id] = [float(row[n]) for n in self.names]
            return out
        cols = {}
        for n, teacher in self.teachers.items():
            if not isinstance(teacher, HFTeacher):
                raise UserError(
                    f"teacher {n!r} is a server teacher: its pass rates cannot be measured here; give tu_opd.pass_rates"
                )
            tasks = [replace(task, prompt=self.prompts[n](self.raw[task.id])) for task in self.train_tasks]
            sampler = HFSampler(teacher.model, teacher.tokenizer, seed=self.cfg.run.seed)
            cols[n] = asyncio.run(pass_rates(sampler, self.fmt, self.family, tasks, t.pass_samples, self.opts))
        out = {task.id: [cols[n][i] for n in self.names] for i, task in enumerate(self.train_tasks)}
        here.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(
            here,
            json.dumps(
                {"teachers": self.names, "tasks": {k: dict(zip(self.names, v)) for k, v in out.items()}}, indent=1
            )
            + "\n",
        )
        return out

    def credit(self, groups: list[Group], batch: TrainBatch) -> torch.Tensor:
        t = self.cfg.tu_opd
        episodes = [e for g in groups for e in g.episodes]
        logp_BTJ = torch.stack(
            [self.score(self.teachers[n], episodes, batch, self.prompts[n]).token_logp_BC for n in self.names], -1
        )
        q_BJ = torch.stack([self.q[e.task.id] for e in episodes])
        m = batch.mask_BT
        if t.residual:
            adv = consensus_residual_advantage(logp_BTJ, batch.sample_logp_BT, q_BJ, m, t.eta)
        else:
            adv = tu_opd_advantage(logp_BTJ, batch.sample_logp_BT, q_BJ, m)
        empty_B = q_BJ.sum(-1) == 0
        if bool(empty_B.any()):
            if t.empty == "grpo":
                adv[empty_B] = super().credit(groups, batch)[empty_B]
            else:
                batch.mask_BT = m * (~empty_B).float()[:, None]
        has = ~empty_B
        metrics = {
            "tu_opd/skipped" if t.empty == "skip" else "tu_opd/grpo_fallback": float(empty_B.float().mean()),
            "tu_opd/reliable_teachers": float((q_BJ > 0).sum(-1).float().mean()),
        }
        if bool(has.any()):
            mh = m[has]
            metrics["tu_opd/advantage"] = float((adv[has] * mh).sum() / mh.sum().clamp(min=1))
            for j, n in enumerate(self.names):
                metrics[f"tu_opd/weight/{n}"] = float(q_BJ[has, j].mean())
        self.log_credit(metrics)
        return adv


def tu_opd(
    cfg: TUOPDConfig | dict,
    family: TaskFamily | None = None,
    resume: bool = False,
    teachers: dict[str, Teacher] | None = None,
) -> dict[str, Any]:
    """Run TU-OPD from Python; `teachers` (name -> Teacher) overrides the config's."""
    cfg = as_config(TUOPDConfig, cfg)
    return asyncio.run(TUOPDTrainer(cfg, family, resume, teachers).run())


def main(argv: list[str]) -> int:
    return cli_main(
        argv,
        "tu-opd",
        "Teacher-Union OPD: distil several teachers, gated and weighted by their pass rates.",
        TUOPDConfig,
        lambda cfg, resume: tu_opd(cfg, resume=resume),
    )
