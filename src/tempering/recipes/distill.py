"""`tempering distill`: on-policy distillation (OPD) from one teacher (`tempering.methods.opd`)."""

from __future__ import annotations

import asyncio
from functools import partial
from typing import Any

from pydantic import Field, model_validator

from tempering.envs.base import TaskFamily
from tempering.methods import opd
from tempering.recipes.common import as_config
from tempering.teachers import Teacher, TeacherSection
from tempering.teachers.prompts import PromptBuilder
from tempering.train.config import LoopConfig
from tempering.train.loop import Trainer
from tempering.train.world import World


class DistillConfig(LoopConfig):
    """On-policy distillation from one teacher (`tempering distill`)."""

    teacher: TeacherSection = Field(..., description="The teacher (in-process path or vLLM server) and its prompt.")
    distill: opd.DistillSection = Field(default_factory=opd.DistillSection, description="Distillation loss.")

    @model_validator(mode="after")
    def _check(self):
        opd.check_sampling(self.rollout)
        return self


def trainer(
    cfg: DistillConfig | dict,
    family: TaskFamily | None = None,
    resume: bool = False,
    teacher: Teacher | None = None,
    teacher_prompt: PromptBuilder | None = None,
    world: World | None = None,
    strategy: str = "ddp",
    overwrite: bool = False,
) -> Trainer:
    """The trainer of a distillation run (step it yourself, or `run()` it)."""
    cfg = as_config(DistillConfig, cfg)
    method = partial(opd.build, teacher=teacher, teacher_prompt=teacher_prompt)
    return Trainer(cfg, method, family, resume, world, strategy, overwrite)


def distill(cfg: DistillConfig | dict, **kwargs: Any) -> dict[str, Any]:
    """Run OPD from Python (the arguments of `trainer`: `teacher` and `teacher_prompt` override the
    config's, any `Teacher` and any `Task -> str`); returns the start and final held-out metrics."""
    return asyncio.run(trainer(cfg, **kwargs).run())
