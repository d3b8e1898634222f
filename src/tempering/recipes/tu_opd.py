"""`tempering tu-opd`: Teacher-Union On-Policy Distillation (`tempering.methods.tu_opd`)."""

from __future__ import annotations

import asyncio
from functools import partial
from typing import Any

from pydantic import Field, model_validator

from tempering.envs.base import TaskFamily
from tempering.methods import tu_opd as method
from tempering.methods.opd import check_sampling
from tempering.recipes.common import as_config
from tempering.teachers import Teacher
from tempering.train.config import LoopConfig
from tempering.train.loop import Trainer
from tempering.train.world import World


class TUOPDConfig(LoopConfig):
    """TU-OPD with optional Consensus-Residual Decomposition (`tempering tu-opd`)."""

    tu_opd: method.TUOPDSection = Field(
        default_factory=method.TUOPDSection, description="Teachers, pass rates, gating and weighting."
    )

    @model_validator(mode="after")
    def _check(self):
        check_sampling(self.rollout)
        return self


def trainer(
    cfg: TUOPDConfig | dict,
    family: TaskFamily | None = None,
    resume: bool = False,
    teachers: dict[str, Teacher] | None = None,
    world: World | None = None,
    strategy: str = "ddp",
    overwrite: bool = False,
) -> Trainer:
    """The trainer of a TU-OPD run; `teachers` (name -> Teacher) overrides the config's."""
    cfg = as_config(TUOPDConfig, cfg)
    builder = partial(method.build, teachers=teachers)
    return Trainer(cfg, builder, family, resume, world, strategy, overwrite)


def tu_opd(cfg: TUOPDConfig | dict, **kwargs: Any) -> dict[str, Any]:
    """Run TU-OPD from Python (the arguments of `trainer`); returns the start and final held-out metrics."""
    return asyncio.run(trainer(cfg, **kwargs).run())
