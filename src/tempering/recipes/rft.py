"""`tempering rft`: rejection fine-tuning (`tempering.methods.rft`): NLL on the policy's own trajectories
that pass a reward threshold and are free of loops, invalid tool calls and schema errors."""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import Field, model_validator

from tempering.config import ignored_unless
from tempering.envs.base import TaskFamily
from tempering.methods import rft as method
from tempering.recipes.common import as_config
from tempering.train.config import LoopConfig, UpdateSection
from tempering.train.loop import Trainer
from tempering.train.world import World


class RFTLossSection(UpdateSection):
    """The update of rejection fine-tuning: plain NLL, so the PPO clip keys do nothing."""

    @model_validator(mode="after")
    def _check_nll(self):
        ignored_unless(self, "loss", ["clip_low", "clip_high", "dual_clip"], False, "a clipped loss (RFT is plain NLL)")
        return self


class RFTConfig(LoopConfig):
    """Rejection fine-tuning (`tempering rft`)."""

    loss: RFTLossSection = Field(default_factory=RFTLossSection, description="The NLL update.")
    rft: method.RFTSection = Field(default_factory=method.RFTSection, description="Which trajectories are kept.")


def trainer(
    cfg: RFTConfig | dict,
    family: TaskFamily | None = None,
    resume: bool = False,
    world: World | None = None,
    strategy: str = "ddp",
    overwrite: bool = False,
) -> Trainer:
    """The trainer of an RFT run (step it yourself, or `run()` it); `family` overrides `cfg.task`."""
    cfg = as_config(RFTConfig, cfg)
    return Trainer(cfg, method.build, family, resume, world, strategy, overwrite)


def run_rft(cfg: RFTConfig | dict, **kwargs: Any) -> dict[str, Any]:
    """Run rejection fine-tuning from Python (the arguments of `trainer`); returns the start and final
    held-out metrics."""
    return asyncio.run(trainer(cfg, **kwargs).run())
