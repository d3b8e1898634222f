"""`tempering ppo`: PPO with a learned critic (`tempering.methods.ppo`), single- or multi-turn.

GAE(gamma, lambda) over the policy's action tokens, a clipped value loss with the critic's own learning
rate, and optional value pre-training (`critic.pretrain_steps`: the policy frozen while the critic learns).
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import Field, model_validator

from tempering.envs.base import TaskFamily
from tempering.methods import ppo
from tempering.recipes.common import as_config
from tempering.train.config import LoopConfig
from tempering.train.loop import Trainer
from tempering.train.world import World


class PPOConfig(LoopConfig):
    """PPO with a critic (`tempering ppo`)."""

    loss: ppo.PPOLossSection = Field(default_factory=ppo.PPOLossSection, description="GAE and the policy update.")
    critic: ppo.CriticSection = Field(default_factory=ppo.CriticSection, description="The value model.")

    @model_validator(mode="after")
    def _check(self):
        ppo.check(self)
        return self


def trainer(
    cfg: PPOConfig | dict,
    family: TaskFamily | None = None,
    resume: bool = False,
    world: World | None = None,
    strategy: str = "ddp",
    overwrite: bool = False,
) -> Trainer:
    """The trainer of a PPO run (step it yourself, or `run()` it); `family` overrides `cfg.task`."""
    cfg = as_config(PPOConfig, cfg)
    return Trainer(cfg, ppo.build, family, resume, world, strategy, overwrite)


def run_ppo(cfg: PPOConfig | dict, **kwargs: Any) -> dict[str, Any]:
    """Run PPO from Python (the arguments of `trainer`); returns the start and final held-out metrics. The
    critic is exported as RUN/final/critic.safetensors (give it to a later run as `critic.init`)."""
    return asyncio.run(trainer(cfg, **kwargs).run())
