"""Direct-OPD: transfer a small model's RL shift (teacher after RL vs before RL) to a student.

Scorers: the student's own top-k tokens at every response position (k = 16), the teacher pair's
log-probs of those same candidates, and the student's starting checkpoint (the KL anchor). Credit:
A(v) = pbar(v) (log pi_T(v) - log pi_Tref(v)) per candidate. Loss: PPO-clip per candidate plus
alpha * k3-KL to the start. State: the adaptive alpha, updated from this step's weighted reward mean
rbar before the update (as the official implementation does; `alpha_order=after_update` keeps the
one-step lag of our first version). All log-probs here are of the untempered policy, as the teachers'
are, so the first on-policy ratio is 1 at any sampling temperature.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Literal

import torch
from pydantic import Field, model_validator
from typing_extensions import Self

from tempering.algos.direct_opd import adaptive_alpha, direct_opd_advantage, mean_shift, topk_ppo_loss, topk_weights
from tempering.algos.losses import LossNorm, aggregate, kl_estimate
from tempering.config import Schema
from tempering.errors import UserError
from tempering.methods.opd import teachers_of
from tempering.teachers import HFTeacher, TeacherSection, load_builder
from tempering.train.batch import TrainBatch
from tempering.train.config import ClippedUpdateSection, LoopConfig
from tempering.train.method import Context, Credit, Method, MethodSpec, StageTrain, State
from tempering.train.rules import Linearity
from tempering.train.scoring import Scores, TeacherLogprobs
from tempering.train.stages import Done, Stage
from tempering.train.update import Loss, UpdateSettings, vocab_logprobs


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
    alpha_order: Literal["before_update", "after_update"] = Field(
        "before_update",
        description="When this step's rbar moves alpha: before this step's update (the official order) or after it (a one-step lag).",
    )
    student_prompt: str = Field(
        "{prompt}", description="The student's prompt: a template over the example, or pkg.module:function."
    )

    @model_validator(mode="after")
    def _check(self) -> Self:
        if not self.alpha_min <= self.alpha <= self.alpha_max:
            raise ValueError(
                f"direct_opd.alpha={self.alpha} lies outside [alpha_min, alpha_max] = [{self.alpha_min}, {self.alpha_max}]"
            )
        return self


def next_alpha(d: DirectOPDSection, state: Mapping[str, float], metrics: Mapping[str, float]) -> dict[str, float]:
    """The alpha of this step's update. `before_update`: moved by this step's rbar; `after_update`:
    the previous step's move (state keeps the pending value)."""
    rbar = metrics["delta_opd/weighted_reward_mean"]
    moved = adaptive_alpha(state["pending"], rbar, d.alpha_rate, d.alpha_min, d.alpha_max)
    if d.alpha_order == "before_update":
        return {"alpha": moved, "pending": moved}
    return {"alpha": state["pending"], "pending": moved}


def topk_loss(
    model: torch.nn.Module, mb: TrainBatch, norm: LossNorm, s: UpdateSettings, state: State
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Top-k PPO on the candidates plus alpha (the state) times the k3 KL to the starting policy."""
    logp_BTV = vocab_logprobs(model, mb, 1.0, share_prefix=s.share_prefix, pack=s.pack)  # untempered, as the credit's
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
    kl = aggregate(kl_estimate(logp, mb.extra["anchor_logp"], "k3"), mb.mask_BT, s.loss_agg, norm)
    stats.update(policy_loss=pg.detach(), kl_start=kl.detach())
    return pg + state["alpha"] * kl, stats


LOSS = Loss(topk_loss, ("policy_loss", "kl_start"), linear=False)
"""Not linear in the sampled tokens' advantages: its advantages are the candidates'."""


def build(ctx: Context[DirectOPDConfig]) -> Method:
    """One stage: teacher pair `pair` (a part; default the first), the KL anchored at the student's own
    start (`model.name`)."""
    d: DirectOPDSection = ctx.cfg.direct_opd
    pair = ctx.parts.get("pair", 0)
    if not 0 <= pair < len(d.pairs):
        raise UserError(f"pair={pair} is not a teacher pair of direct_opd.pairs (0..{len(d.pairs) - 1})")
    p = d.pairs[pair]
    ts = teachers_of(ctx, {"teacher": p.teacher, "reference": p.reference})
    vocab = ctx.model.get_output_embeddings().weight.shape[0]
    if d.top_k > vocab:
        raise UserError(f"direct_opd.top_k={d.top_k} is larger than the vocabulary ({vocab} tokens); use a smaller k")
    anchor = HFTeacher(ctx.load_start(), ctx.tokenizer, name="student start", pack=ctx.cfg.loss.pack)
    student = HFTeacher(ctx.model, ctx.tokenizer, name="student", pack=ctx.cfg.loss.pack)

    def candidates(scores: Scores) -> torch.Tensor:
        ids = scores.teachers["student"].top_ids_BCK
        assert ids is not None
        return ids

    scorers = [
        TeacherLogprobs("student", student, ctx.fmt, top_k=d.top_k),
        TeacherLogprobs(
            "teacher", ts["teacher"], ctx.fmt, load_builder(p.teacher.prompt), ctx.raw, candidates=candidates
        ),
        TeacherLogprobs(
            "reference", ts["reference"], ctx.fmt, load_builder(p.reference.prompt), ctx.raw, candidates=candidates
        ),
        TeacherLogprobs("anchor", anchor, ctx.fmt),
    ]

    def credit(scores: Scores, batch: TrainBatch, state: State) -> Credit:
        mine, t, tr = scores.teachers["student"], scores.teachers["teacher"], scores.teachers["reference"]
        assert mine.top_logp_BCK is not None and mine.top_ids_BCK is not None
        assert t.cand_logp_BCK is not None and tr.cand_logp_BCK is not None
        assert t.cand_found_BCK is not None and tr.cand_found_BCK is not None
        m = batch.mask_BT
        adv_BTK, r_BTK = direct_opd_advantage(mine.top_logp_BCK, t.cand_logp_BCK, tr.cand_logp_BCK, m)
        n = m.sum().clamp(min=1)
        found = (t.cand_found_BCK * tr.cand_found_BCK * m[..., None]).sum() / (n * mine.top_ids_BCK.shape[-1])
        pbar = topk_weights(mine.top_logp_BCK)
        metrics = {
            # the official implementation's names: the weighted reward mean drives alpha
            "delta_opd/weighted_reward_mean": mean_shift(adv_BTK, m),
            "delta_opd/student_weighted_teacher_logprob": float(((pbar * t.cand_logp_BCK).sum(-1) * m).sum() / n),
            "delta_opd/student_weighted_teacher_ref_logprob": float(((pbar * tr.cand_logp_BCK).sum(-1) * m).sum() / n),
            "direct_opd/shift_sampled": float(((t.token_logp_BC - tr.token_logp_BC) * m).sum() / n),
            "direct_opd/shift_abs": float((r_BTK.abs().mean(-1) * m).sum() / n),
            "direct_opd/candidates_exact": float(found),
        }
        extra = {
            "cand_ids": mine.top_ids_BCK,
            "cand_old_logp": mine.top_logp_BCK,
            "cand_adv": adv_BTK,
            "anchor_logp": scores.teachers["anchor"].token_logp_BC,
        }
        return Credit(adv_BTK.sum(-1), extra, metrics=metrics)

    return Method(
        name="direct-opd",
        credit=credit,
        scorers=scorers,
        loss=LOSS,
        state={"alpha": d.alpha, "pending": d.alpha},
        next_state=lambda state, metrics: next_alpha(d, state, metrics),
        student_prompt=load_builder(d.student_prompt),
        plots=("delta_opd/weighted_reward_mean", "state/alpha", "kl_start", "direct_opd/shift_sampled"),
    )


class DirectOPDConfig(LoopConfig):
    """Direct-OPD: weak-to-strong transfer of an RL policy shift (`tempering direct-opd`)."""

    loss: ClippedUpdateSection = Field(
        default_factory=ClippedUpdateSection, description="The top-k PPO-clip update (per candidate)."
    )
    direct_opd: DirectOPDSection = Field(..., description="Teacher pairs, top-k and the KL anchor.")

    def linearity(self) -> Linearity:
        return Linearity(LOSS.linear, "the direct-opd loss (a top-k PPO over candidates)")


def pair_stages(cfg: DirectOPDConfig, train: StageTrain[DirectOPDConfig]) -> list[Stage[DirectOPDConfig]]:
    """Several teacher pairs: one stage each, in OUT_DIR/pair_i, starting from the stage before it (which
    anchors the KL there; alpha starts again). One pair: no stages (one run in OUT_DIR)."""
    root = Path(cfg.run.out_dir)

    def config(i: int) -> Callable[[Done | None], DirectOPDConfig]:
        def stage(last: Done | None) -> DirectOPDConfig:
            c = cfg.model_copy(deep=True)
            c.run.out_dir = str(root / f"pair_{i + 1}")
            if last is not None:
                c.model.name = last.final
            return c

        return stage

    pairs = range(len(cfg.direct_opd.pairs))
    return [Stage(f"pair_{i + 1}", config(i), partial(train, {"pair": i})) for i in pairs] if len(pairs) > 1 else []


SPEC = MethodSpec(name="direct-opd", config=DirectOPDConfig, build=build, parts=("pair",), stages=pair_stages)
