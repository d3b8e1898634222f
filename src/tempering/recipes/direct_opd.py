"""`tempering direct-opd`: transfer a small model's RL shift (teacher after RL vs before RL) to a student.

One step: the student samples -> it scores its own top-k tokens at every response position (k = 16)
-> the teacher pair scores those same candidates -> A(v) = pbar(v) (log pi_T(v) - log pi_Tref(v)) ->
PPO-clip per candidate plus alpha * k3-KL to the student's own starting checkpoint, with adaptive alpha.
Several teacher pairs compose sequentially: each stage starts from the previous one's end, anchors the
KL there, and resets alpha.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import torch
from pydantic import Field

from tempering.algos.direct_opd import adaptive_alpha, direct_opd_advantage, mean_shift, topk_ppo_loss
from tempering.algos.losses import aggregate, kl_estimate
from tempering.config import Schema
from tempering.envs.base import TaskFamily
from tempering.errors import UserError
from tempering.models import load_policy
from tempering.recipes.distill import TeacherTrainer, as_config, cli_main, student_logits_logp
from tempering.recipes.rl import TrainConfig
from tempering.teachers import HFTeacher, TeacherSection, load_builder
from tempering.train.batch import TrainBatch
from tempering.types import Group


class TeacherPair(Schema):
    teacher: TeacherSection = Field(..., description="The small model after RL (pi_T).")
    reference: TeacherSection = Field(..., description="The same small model before RL (pi_Tref).")


class DirectOPDSection(Schema):
    pairs: list[TeacherPair] = Field(
        ..., min_length=1, description="Teacher pairs, applied one after another (each stage runs run.steps steps)."
    )
    top_k: int = Field(16, ge=1, description="The student's top-k candidates scored at every position.")
    alpha: float = Field(
        2.5, gt=0, description="Initial coefficient of the k3 KL to the student's starting checkpoint."
    )
    alpha_min: float = Field(0.5, gt=0, description="Lower clip of adaptive alpha.")
    alpha_max: float = Field(2.5, gt=0, description="Upper clip of adaptive alpha.")
    alpha_rate: float = Field(
        0.01, ge=0, description="Relative change of alpha per step, in the direction of sign(rbar) (0 = fixed alpha)."
    )
    student_prompt: str = Field(
        "{prompt}", description="The student's prompt: a template over the example, or pkg.module:function."
    )


class DirectOPDConfig(TrainConfig):
    """Direct-OPD: weak-to-strong transfer of an RL policy shift (`tempering direct-opd`)."""

    direct_opd: DirectOPDSection = Field(..., description="Teacher pairs, top-k and the KL anchor.")


class DirectOPDTrainer(TeacherTrainer):
    """One stage: one teacher pair, the KL anchored at the student's own start (`model.name`)."""

    def __init__(self, cfg: DirectOPDConfig, pair: int = 0, family: TaskFamily | None = None, resume: bool = False):
        d = cfg.direct_opd
        self.alpha = d.alpha  # set first: resuming restores it through load_extra_state
        super().__init__(cfg, family=family, resume=resume, student_prompt=d.student_prompt)
        p = d.pairs[pair]
        ts = self.teachers_from({"teacher": p.teacher, "reference": p.reference})
        self.teacher, self.reference = ts["teacher"], ts["reference"]
        self.teacher_prompt, self.reference_prompt = load_builder(p.teacher.prompt), load_builder(p.reference.prompt)
        vocab = self.model.get_output_embeddings().weight.shape[0]
        if d.top_k > vocab:
            raise UserError(
                f"direct_opd.top_k={d.top_k} is larger than the vocabulary ({vocab} tokens); use a smaller k"
            )
        # pi_S: the start (also after a resume), where the policy lives
        anchor, _ = load_policy(cfg.model.name, seed=cfg.run.seed, dtype=cfg.model.dtype, device=self.model.device)
        self.anchor = HFTeacher(anchor.eval().requires_grad_(False), self.tokenizer, name="student start")
        self.self_scorer = HFTeacher(self.model, self.tokenizer, name="student")
        self.step_alpha = self.alpha
        self.loss_fn = self.direct_opd_loss

    def extra_state(self) -> dict[str, Any]:
        return {"alpha": self.alpha}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.alpha = state.get("alpha", self.alpha)

    def credit(self, groups: list[Group], batch: TrainBatch) -> torch.Tensor:
        d = self.cfg.direct_opd
        episodes = [e for g in groups for e in g.episodes]
        mine = self.score(self.self_scorer, episodes, batch, top_k=d.top_k)
        cand = mine.top_ids_BCK
        t = self.score(self.teacher, episodes, batch, self.teacher_prompt, candidates_BTK=cand)
        tr = self.score(self.reference, episodes, batch, self.reference_prompt, candidates_BTK=cand)
        m = batch.mask_BT
        adv_BTK, r_BTK = direct_opd_advantage(mine.top_logp_BCK, t.cand_logp_BCK, tr.cand_logp_BCK, m)
        batch.ref_logp_BT = self.score(self.anchor, episodes, batch).token_logp_BC
        batch.extra = {"cand_ids": cand, "cand_old_logp": mine.top_logp_BCK, "cand_adv": adv_BTK}
        rbar = mean_shift(adv_BTK, m)
        n = m.sum().clamp(min=1)
        found = (t.cand_found_BCK * tr.cand_found_BCK * m[..., None]).sum() / (n * cand.shape[-1])
        self.log_credit(
            {
                "direct_opd/rbar": rbar,
                "direct_opd/shift_sampled": float(((t.token_logp_BC - tr.token_logp_BC) * m).sum() / n),
                "direct_opd/shift_abs": float((r_BTK.abs().mean(-1) * m).sum() / n),
                "direct_opd/alpha": self.alpha,
                "direct_opd/candidates_exact": float(found),
            }
        )
        self.step_alpha = self.alpha
        self.alpha = adaptive_alpha(self.alpha, rbar, d.alpha_rate, d.alpha_min, d.alpha_max)
        return adv_BTK.sum(-1)

    def direct_opd_loss(self, model, mb: TrainBatch, norm, s) -> tuple[torch.Tensor, dict]:
        logp_BTV = student_logits_logp(model, mb, s.temperature)
        cand_logp = logp_BTV.gather(-1, mb.extra["cand_ids"])
        pg, stats = topk_ppo_loss(
            cand_logp,
            mb.extra["cand_old_logp"],
            mb.extra["cand_adv"],
            mb.mask_BT,
            s.clip_low,
            s.clip_high,
            s.dual_clip,
            s.loss_agg,
            norm,
        )
        logp = logp_BTV.gather(-1, mb.input_ids_BT[..., None]).squeeze(-1)
        kl = aggregate(kl_estimate(logp, mb.ref_logp_BT, "k3"), mb.mask_BT, s.loss_agg, norm)
        stats.update(policy_loss=pg.detach(), kl_start=kl.detach())
        return pg + self.step_alpha * kl, stats


def direct_opd(cfg: DirectOPDConfig | dict, family: TaskFamily | None = None, resume: bool = False) -> dict[str, Any]:
    """Run every teacher pair in turn; with several pairs, stage i writes to OUT_DIR/pair_i."""
    cfg = as_config(DirectOPDConfig, cfg)
    pairs = cfg.direct_opd.pairs
    root = Path(cfg.run.out_dir)
    history: dict[str, Any] = {}
    start = cfg.model.name
    for i in range(len(pairs)):
        out = root if len(pairs) == 1 else root / f"pair_{i + 1}"
        stage = cfg.model_copy(deep=True)
        stage.model.name, stage.run.out_dir = start, str(out)
        again = resume and any((out / "checkpoints").glob("step_*"))  # a finished stage only re-evaluates
        h = asyncio.run(DirectOPDTrainer(stage, pair=i, family=family, resume=again).run())
        if i == 0 and "start" in h:
            history["start"] = h["start"]
        history[f"after pair {i + 1}" if len(pairs) > 1 else "final"] = h["final"]
        start = str(out / "final")
    return history


def main(argv: list[str]) -> int:
    return cli_main(
        argv,
        "direct-opd",
        "Direct-OPD: transfer a teacher pair's RL shift to a student (weak-to-strong).",
        DirectOPDConfig,
        lambda cfg, resume: direct_opd(cfg, resume=resume),
    )
