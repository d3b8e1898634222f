"""`tempering distill`: on-policy distillation (OPD) from one teacher.

One step: the student samples groups -> the teacher scores the student's own tokens (optionally seeing
privileged context in its prompt) -> credit -> the one policy update. Losses:
- `reverse_kl`: A_t = log pi_T(y_t) - log pi_S(y_t) as a per-token advantage in the PPO loss;
- `jsd_topk` / `jsd_full`: the generalised JSD (beta = 0 forward KL, 1 reverse KL) on the teacher's
  top-k plus one bucket for the rest of the vocabulary, or on the whole vocabulary, as a direct loss.
The task reward is only logged. `TeacherTrainer` is the base of every teacher-driven recipe.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

import torch
from pydantic import Field

from tempering.algos.losses import aggregate
from tempering.algos.opd import generalized_jsd, reverse_kl_advantage, topk_jsd
from tempering.config import Schema, build, load_config
from tempering.envs.base import TaskFamily
from tempering.errors import UserError
from tempering.recipes.rl import RLTrainer, TrainConfig
from tempering.teachers import Teacher, TeacherSection, load_builder, load_teachers, score_episodes
from tempering.teachers.prompts import PromptBuilder
from tempering.teachers.vocab import check_vocab
from tempering.train.batch import TrainBatch
from tempering.types import Episode, Group


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


class DistillConfig(TrainConfig):
    """On-policy distillation from one teacher (`tempering distill`)."""

    teacher: TeacherSection = Field(..., description="The teacher (in-process path or vLLM server) and its prompt.")
    distill: DistillSection = Field(default_factory=DistillSection, description="Distillation loss.")


def student_logits_logp(model, mb: TrainBatch, temperature: float) -> torch.Tensor:
    """(B, T, V) log-probs of the student's next-token distribution at every position, aligned with
    the batch: position t predicts token t (position 0 is all zeros)."""
    logits = model(input_ids=mb.input_ids_BT, attention_mask=mb.attention_BT).logits[:, :-1].float()
    logp = (logits / temperature).log_softmax(-1)
    return torch.cat([torch.zeros_like(logp[:, :1]), logp], dim=1)


class TeacherTrainer(RLTrainer):
    """An RL trainer whose credit comes from teachers scoring the student's own samples.

    It applies the student's prompt builder to every task, keeps the original examples for the
    teachers' prompt builders, and checks that all models share the student's vocabulary.
    """

    def __init__(
        self,
        cfg,
        family: TaskFamily | None = None,
        resume: bool = False,
        student_prompt: str | PromptBuilder = "{prompt}",
    ):
        super().__init__(cfg, family=family, resume=resume)
        student = load_builder(student_prompt) if isinstance(student_prompt, str) else student_prompt
        self.raw = {t.id: t for t in self.train_tasks + self.heldout_tasks}
        """The examples as the family made them: teacher prompts are built from these."""
        self.train_tasks = [replace(t, prompt=student(t)) for t in self.train_tasks]
        self.heldout_tasks = [replace(t, prompt=student(t)) for t in self.heldout_tasks]

    def teachers_from(
        self, specs: dict[str, TeacherSection], given: dict[str, Teacher] | None = None
    ) -> dict[str, Teacher]:
        """Load teachers from config (or take ready ones) and check their vocabularies against the student's."""
        if given:
            check_vocab(self.tokenizer, {f"teacher {n!r}": t.tokenizer for n, t in given.items()})
            return dict(given)
        return load_teachers(specs, self.tokenizer, device=str(self.model.device), dtype=self.cfg.model.dtype)

    def score(
        self, teacher: Teacher, episodes: list[Episode], batch: TrainBatch, build: PromptBuilder | None = None, **kw
    ):
        """A teacher's scores aligned with the batch (see `score_episodes`)."""
        if batch.size != len(episodes):
            raise UserError(
                "distillation needs one row per episode; set rollout.drop_old_turns=false for multi-turn tasks"
            )
        return score_episodes(teacher, episodes, self.fmt, batch.input_ids_BT.shape[1], build=build, raw=self.raw, **kw)

    def log_credit(self, metrics: dict[str, float]) -> None:
        """Credit statistics of the step being taken (logged beside the step's own metrics)."""
        self.log.log(self.step_no + 1, metrics)


class DistillTrainer(TeacherTrainer):
    """OPD from one teacher: reverse-KL advantage, or a top-k / full-vocabulary JSD loss."""

    def __init__(
        self,
        cfg: DistillConfig,
        family: TaskFamily | None = None,
        resume: bool = False,
        teacher: Teacher | None = None,
        teacher_prompt: PromptBuilder | None = None,
    ):
        super().__init__(cfg, family=family, resume=resume, student_prompt=cfg.distill.student_prompt)
        self.teacher = self.teachers_from({"teacher": cfg.teacher}, {"teacher": teacher} if teacher else None)[
            "teacher"
        ]
        self.teacher_prompt = teacher_prompt or load_builder(cfg.teacher.prompt)
        d = cfg.distill
        vocab = self.model.get_output_embeddings().weight.shape[0]
        if d.loss == "jsd_topk" and d.top_k > vocab:
            raise UserError(f"distill.top_k={d.top_k} is larger than the vocabulary ({vocab} tokens); use a smaller k")
        if d.loss == "jsd_full" and not self.teacher.supports_full:
            raise UserError(
                "distill.loss=jsd_full needs the teacher's whole distribution, which only an in-process teacher "
                "(teacher.path) gives; use distill.loss=jsd_topk with a server teacher"
            )
        if d.loss != "reverse_kl":
            self.loss_fn = self.jsd_loss

    def credit(self, groups: list[Group], batch: TrainBatch) -> torch.Tensor:
        d = self.cfg.distill
        episodes = [e for g in groups for e in g.episodes]
        s = self.score(
            self.teacher,
            episodes,
            batch,
            self.teacher_prompt,
            top_k=d.top_k if d.loss == "jsd_topk" else 0,
            full=d.loss == "jsd_full",
        )
        m = batch.mask_BT
        n = m.sum().clamp(min=1)
        metrics = {
            "distill/teacher_logp": float((s.token_logp_BC * m).sum() / n),
            "distill/reverse_kl": float(((batch.sample_logp_BT - s.token_logp_BC) * m).sum() / n),
        }
        self.log_credit(metrics)
        if d.loss == "jsd_topk":
            batch.extra = {"teacher_ids": s.top_ids_BCK, "teacher_logp": s.top_logp_BCK}
        elif d.loss == "jsd_full":
            batch.extra = {"teacher_logp": s.full_logp_BCV}
        return reverse_kl_advantage(batch.sample_logp_BT, s.token_logp_BC, m)

    def jsd_loss(self, model, mb: TrainBatch, norm, s) -> tuple[torch.Tensor, dict]:
        d = self.cfg.distill
        logp = student_logits_logp(model, mb, s.temperature)
        if d.loss == "jsd_topk":
            per_tok = topk_jsd(logp.gather(-1, mb.extra["teacher_ids"]), mb.extra["teacher_logp"], d.beta)
        else:
            per_tok = generalized_jsd(logp, mb.extra["teacher_logp"], d.beta)
        loss = aggregate(per_tok, mb.mask_BT, s.loss_agg, norm)
        return loss, {"jsd": loss.detach(), "policy_loss": loss.detach()}


def distill(
    cfg: DistillConfig | dict,
    family: TaskFamily | None = None,
    resume: bool = False,
    teacher: Teacher | None = None,
    teacher_prompt: PromptBuilder | None = None,
) -> dict[str, Any]:
    """Run OPD from Python; `teacher` and `teacher_prompt` override the config's (any `Teacher`, any `Task -> str`)."""
    cfg = as_config(DistillConfig, cfg)
    return asyncio.run(DistillTrainer(cfg, family, resume, teacher, teacher_prompt).run())


def as_config(schema: type[Schema], cfg: Schema | dict) -> Schema:
    """A validated config from a dict (Python callers), or the config itself."""
    return build(schema, cfg) if isinstance(cfg, dict) else cfg


def cli_main(
    argv: list[str],
    verb: str,
    description: str,
    schema: type[Schema],
    run: Callable[[Any, bool], dict],
    out_key: str = "run.out_dir",
) -> int:
    """The command line shared by the distillation verbs: CONFIG [key=value ...] [--resume RUN] [--print-config]."""
    p = argparse.ArgumentParser(prog=f"tempering {verb}", description=description)
    p.add_argument("config", nargs="?", help="YAML config (see examples/); omit for the defaults")
    p.add_argument("overrides", nargs="*", help="key.sub=value overrides")
    p.add_argument(
        "--resume", metavar="RUN_DIR", help="continue a run from its latest checkpoint (finished stages are kept)"
    )
    p.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    a = p.parse_args(argv)
    config, overrides = a.config, list(a.overrides)
    if config and "=" in config and not config.endswith((".yaml", ".yml")):
        config, overrides = None, [config] + overrides
    resume = a.resume
    if resume:
        run_dir = Path(resume)
        if not (run_dir / "config.yaml").is_file():
            raise UserError(f"{run_dir} is not a run folder (no config.yaml); give the folder a run wrote")
        cfg = load_config(schema, run_dir / "config.yaml", overrides + [f"{out_key}={run_dir}"])
    else:
        cfg = load_config(schema, config, overrides)
    if a.print_config:
        import yaml

        print(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
        return 0
    hist = run(cfg, bool(resume))
    from tempering.progress import print_eval_table

    print_eval_table(
        {k: v for k, v in hist.items() if isinstance(v, dict) and all(isinstance(x, (int, float)) for x in v.values())},
        title=f"held-out results ({verb})",
    )
    return 0


def main(argv: list[str]) -> int:
    return cli_main(
        argv,
        "distill",
        "On-policy distillation from one teacher (reverse KL, top-k or full JSD).",
        DistillConfig,
        lambda cfg, resume: distill(cfg, resume=resume),
    )
