"""On-policy distillation (OPD) from one teacher: the student samples, the teacher scores the same tokens.

Scorers: the teacher's log-probs of the student's tokens (its prompt may carry privileged context the
student never sees). Credit / loss:
- `reverse_kl`: A_t = log pi_T(y_t) - log pi_S(y_t) as a per-token advantage in the PPO loss;
- `jsd_topk` / `jsd_full`: the generalised JSD (beta = 0 forward KL, 1 reverse KL) on the teacher's
  top-k plus one bucket for the rest of the vocabulary, or on the whole vocabulary, as a direct loss.
The task reward is only logged. Sampling is plain (temperature 1, no top-k / top-p; `check_sampling`), so
the student's sampling log-probs and the teacher's refer to the same distribution.
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field, model_validator
from typing_extensions import Self

from tempering.algos.losses import LossNorm, aggregate
from tempering.algos.opd import generalized_jsd, reverse_kl_advantage, topk_jsd
from tempering.config import Schema, ignored_unless
from tempering.errors import UserError
from tempering.models.chat import ChatFormat
from tempering.teachers import Teacher, TeacherSection, check_vocab, load_builder, load_teachers
from tempering.teachers.align import check_teacher_prompt, teacher_format
from tempering.teachers.prompts import PromptBuilder
from tempering.train.batch import TrainBatch
from tempering.train.config import ClippedUpdateSection, LoopConfig, RolloutSection
from tempering.train.method import C, Context, Credit, Method, MethodSpec, State
from tempering.train.rules import Linearity
from tempering.train.scoring import Scores, TeacherLogprobs
from tempering.train.update import PPO_LOSS, Loss, UpdateSettings, vocab_logprobs


class DistillSection(Schema):
    loss: Literal["reverse_kl", "jsd_topk", "jsd_full"] = Field(
        "reverse_kl",
        description="reverse_kl: sampled-token advantage in the PPO loss; jsd_topk / jsd_full: generalised JSD as a direct loss.",
    )
    beta: float = Field(0.5, ge=0, le=1, description="JSD interpolation: 0 = forward KL(T||S), 1 = reverse KL(S||T).")
    top_k: int = Field(
        16, ge=1, description="Support of jsd_topk: the teacher's k most likely tokens at each position."
    )
    student_prompt: str = Field(
        "{prompt}", description="The student's prompt: a template over the example, or pkg.module:function."
    )

    @model_validator(mode="after")
    def _check(self) -> Self:
        ignored_unless(self, "distill", ["beta"], self.loss != "reverse_kl", "distill.loss=jsd_topk|jsd_full")
        ignored_unless(self, "distill", ["top_k"], self.loss == "jsd_topk", "distill.loss=jsd_topk")
        return self


def check_sampling(rollout: RolloutSection) -> None:
    """The reverse-KL advantage (and TU-OPD's) subtracts the student's sampling log-probs from the
    teacher's, and teachers score at temperature 1 over the whole vocabulary (a server's top-N cannot be
    re-tempered or re-filtered): sampling from a tempered or truncated student would compare two different
    distributions. Raises ValueError (inside a validator) naming the keys."""
    off = [
        f"rollout.{key}={value}"
        for key, value, plain in (
            ("temperature", rollout.temperature, 1.0),
            ("top_k", rollout.top_k, 0),
            ("top_p", rollout.top_p, 1.0),
        )
        if value != plain
    ]
    if off:
        raise ValueError(
            f"{', '.join(off)}: on-policy distillation compares the student's sampling log-probs with the "
            "teacher's at temperature 1 over the whole vocabulary, so both must be the same distribution; "
            "sample with rollout.temperature=1, rollout.top_k=0, rollout.top_p=1"
        )


def teachers_of(
    ctx: Context[C], specs: dict[str, TeacherSection], given: dict[str, Teacher] | None = None, aligned: bool = False
) -> dict[str, Teacher]:
    """Teachers from config (or ready ones), checked against the student's vocabulary unless `aligned`
    (a teacher with another tokenizer is then scored through text spans, `teachers.align`)."""
    if given:
        if not aligned:
            check_vocab(ctx.tokenizer, {f"teacher {n!r}": t.tokenizer for n, t in given.items()})
        return dict(given)
    student = None if aligned else ctx.tokenizer
    return load_teachers(specs, student, device=str(ctx.device), dtype=ctx.cfg.model.dtype, pack=ctx.cfg.loss.pack)


def teacher_formats(
    ctx: Context[C], teachers: dict[str, Teacher], prompts: dict[str, PromptBuilder]
) -> dict[str, ChatFormat | None]:
    """Each teacher's own format where its tokenizer differs from the student's (None where it is the
    same), its prompt for the first training example rendered once at start-up, so a teacher that cannot
    read the prompts stops the run before any sampling."""
    formats = {n: teacher_format(n, t, ctx.fmt) for n, t in teachers.items()}
    first = ctx.train_tasks[0]
    for n, f in formats.items():
        if f is not None and not getattr(prompts[n], "sees_sample", False):
            check_teacher_prompt(n, f, prompts[n](ctx.raw.get(first.id, first)))
    return formats


def build(ctx: Context[DistillConfig]) -> Method:
    """OPD from `cfg.teacher`; the parts `teacher` (a `Teacher`) and `teacher_prompt` (`Task -> str`)
    override the config's (Python callers)."""
    d: DistillSection = ctx.cfg.distill
    teacher: Teacher | None = ctx.parts.get("teacher")
    teacher_prompt: PromptBuilder | None = ctx.parts.get("teacher_prompt")
    t = teachers_of(ctx, {"teacher": ctx.cfg.teacher}, {"teacher": teacher} if teacher else None, aligned=True)[
        "teacher"
    ]
    build_prompt = teacher_prompt or load_builder(ctx.cfg.teacher.prompt)
    own = teacher_formats(ctx, {"teacher": t}, {"teacher": build_prompt})["teacher"]
    if own is not None and d.loss != "reverse_kl":
        raise UserError(
            f"distill.loss={d.loss} compares next-token distributions over one vocabulary, and the teacher's "
            "tokenizer differs from the student's; use distill.loss=reverse_kl (aligned by text spans), or a "
            "teacher on the student's tokenizer"
        )
    vocab = ctx.model.get_output_embeddings().weight.shape[0]
    if d.loss == "jsd_topk" and d.top_k > vocab:
        raise UserError(f"distill.top_k={d.top_k} is larger than the vocabulary ({vocab} tokens); use a smaller k")
    if d.loss == "jsd_full" and not t.supports_full:
        raise UserError(
            "distill.loss=jsd_full needs the teacher's whole distribution, which only an in-process teacher "
            "(teacher.path) gives; use distill.loss=jsd_topk with a server teacher"
        )
    scorer = TeacherLogprobs(
        "teacher",
        t,
        ctx.fmt,
        build=build_prompt,
        raw=ctx.raw,
        top_k=d.top_k if d.loss == "jsd_topk" else 0,
        full=d.loss == "jsd_full",
        teacher_fmt=own,
    )

    def credit(scores: Scores, batch: TrainBatch, state: State) -> Credit:
        s = scores.teachers["teacher"]
        m = batch.mask_BT
        n = m.sum().clamp(min=1)
        metrics = {
            "distill/teacher_logp": float((s.token_logp_BC * m).sum() / n),
            "distill/reverse_kl": float(((batch.sample_logp_BT - s.token_logp_BC) * m).sum() / n),
        }
        extra: dict[str, torch.Tensor] = {}
        if d.loss == "jsd_topk":
            assert s.top_ids_BCK is not None and s.top_logp_BCK is not None
            extra = {"teacher_ids": s.top_ids_BCK, "teacher_logp": s.top_logp_BCK}
        elif d.loss == "jsd_full":
            assert s.full_logp_BCV is not None
            extra = {"teacher_logp": s.full_logp_BCV}
        return Credit(reverse_kl_advantage(batch.sample_logp_BT, s.token_logp_BC, m), extra, metrics=metrics)

    def jsd_loss(
        model: torch.nn.Module, mb: TrainBatch, norm: LossNorm, s: UpdateSettings, state: State
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        logp = vocab_logprobs(model, mb, s.temperature, share_prefix=s.share_prefix, pack=s.pack)
        if d.loss == "jsd_topk":
            per_tok = topk_jsd(logp.gather(-1, mb.extra["teacher_ids"]), mb.extra["teacher_logp"], d.beta)
        else:
            per_tok = generalized_jsd(logp, mb.extra["teacher_logp"], d.beta)
        loss = aggregate(per_tok, mb.mask_BT, s.loss_agg, norm)
        return loss, {"jsd": loss.detach(), "policy_loss": loss.detach()}

    return Method(
        name="distill",
        credit=credit,
        scorers=[scorer],
        loss=PPO_LOSS if d.loss == "reverse_kl" else Loss(jsd_loss, ("jsd", "policy_loss"), linear=False),
        student_prompt=load_builder(d.student_prompt),
        plots=("distill/reverse_kl", "distill/teacher_logp", *(("jsd",) if d.loss != "reverse_kl" else ())),
    )


class DistillConfig(LoopConfig):
    """On-policy distillation from one teacher (`tempering distill`)."""

    teacher: TeacherSection = Field(..., description="The teacher (in-process path or vLLM server) and its prompt.")
    loss: ClippedUpdateSection = Field(
        default_factory=ClippedUpdateSection,
        description="The policy update (the clip keys: distill.loss=reverse_kl, a PPO-clip loss).",
    )
    distill: DistillSection = Field(default_factory=DistillSection, description="Distillation loss.")

    @model_validator(mode="after")
    def _check(self) -> Self:
        check_sampling(self.rollout)
        direct = self.distill.loss != "reverse_kl"
        ignored_unless(self.loss, "loss", ["clip_low", "clip_high", "dual_clip"], not direct, "distill.loss=reverse_kl")
        return self

    def linearity(self) -> Linearity:
        """A direct loss on whole distributions has nothing on the sampled tokens to reweight."""
        what = f"distill.loss={self.distill.loss} (a direct loss on whole distributions)"
        return Linearity(self.distill.loss == "reverse_kl", what, "use distill.loss=reverse_kl")


SPEC = MethodSpec(name="distill", config=DistillConfig, build=build, parts=("teacher", "teacher_prompt"))
