"""`tempering train`: RL with verifiable rewards (GRPO and relatives), single- or multi-turn.

The method is `tempering.methods.rl` (credit from `loss.advantage`) on the one training loop
(`train/loop.py`); `method=` runs any other method builder with this config.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from pydantic import Field, model_validator

from tempering.envs.base import TaskFamily
from tempering.methods import rl
from tempering.recipes.common import as_config
from tempering.train.config import LoopConfig
from tempering.train.loop import Trainer
from tempering.train.method import MethodBuilder
from tempering.train.world import World


class TrainConfig(LoopConfig):
    """The RL recipe (`tempering train`)."""

    rollout: rl.RLRolloutSection = Field(default_factory=rl.RLRolloutSection, description="Sampling and turns.")
    loss: rl.RLLossSection = Field(default_factory=rl.RLLossSection, description="Credit and policy loss.")

    @model_validator(mode="after")
    def _check(self):
        rl.check(self)
        return self


def trainer(
    cfg: TrainConfig | dict,
    family: TaskFamily | None = None,
    resume: bool = False,
    world: World | None = None,
    strategy: str = "ddp",
    method: MethodBuilder | None = None,
    overwrite: bool = False,
) -> Trainer:
    """The trainer of an RL run (step it yourself, or `run()` it); `family` overrides `cfg.task` (e.g. a
    DatasetFamily with your reward) and `method` replaces the RL method with any builder `(Context) -> Method`."""
    cfg = as_config(TrainConfig, cfg)
    return Trainer(cfg, method or rl.build, family, resume, world, strategy, overwrite)


def train(cfg: TrainConfig | dict, callbacks: Sequence[Any] = (), **kwargs: Any) -> dict[str, Any]:
    """Run the RL recipe from Python (the arguments of `trainer`); returns the start and final held-out metrics.
    `callbacks` see every step's and evaluation's metrics and may stop the run (`Trainer.run`)."""
    return asyncio.run(trainer(cfg, **kwargs).run(callbacks))
