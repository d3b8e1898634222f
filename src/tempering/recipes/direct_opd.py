"""`tempering direct-opd`: transfer a small model's RL shift to a student (`tempering.methods.direct_opd`).

Several teacher pairs compose sequentially: each stage starts from the previous one's end, anchors the
KL there, and resets alpha.
"""

from __future__ import annotations

import asyncio
from functools import partial
from pathlib import Path
from typing import Any

from pydantic import Field

from tempering.envs.base import TaskFamily
from tempering.methods import direct_opd as method
from tempering.recipes.common import as_config, begin_pipeline, stage_start
from tempering.train.config import LoopConfig
from tempering.train.loop import Trainer
from tempering.train.world import World


class DirectOPDConfig(LoopConfig):
    """Direct-OPD: weak-to-strong transfer of an RL policy shift (`tempering direct-opd`)."""

    direct_opd: method.DirectOPDSection = Field(..., description="Teacher pairs, top-k and the KL anchor.")


def trainer(
    cfg: DirectOPDConfig | dict,
    pair: int = 0,
    family: TaskFamily | None = None,
    resume: bool = False,
    world: World | None = None,
    strategy: str = "ddp",
    overwrite: bool = False,
) -> Trainer:
    """The trainer of one stage (teacher pair `pair`)."""
    cfg = as_config(DirectOPDConfig, cfg)
    return Trainer(cfg, partial(method.build, pair=pair), family, resume, world, strategy, overwrite)


def direct_opd(
    cfg: DirectOPDConfig | dict,
    family: TaskFamily | None = None,
    resume: bool = False,
    world: World | None = None,
    strategy: str = "ddp",
    overwrite: bool = False,
) -> dict[str, Any]:
    """Run every teacher pair in turn; with several pairs, stage i writes to OUT_DIR/pair_i."""
    cfg = as_config(DirectOPDConfig, cfg)
    pairs = cfg.direct_opd.pairs
    root = Path(cfg.run.out_dir)
    if len(pairs) == 1:
        return asyncio.run(trainer(cfg, 0, family, resume, world, strategy, overwrite).run())
    begin_pipeline(root, cfg, resume, overwrite, world)
    history: dict[str, Any] = {}
    start = cfg.model.name
    for i in range(len(pairs)):
        out = root / f"pair_{i + 1}"
        stage = cfg.model_copy(deep=True)
        stage.model.name, stage.run.out_dir = start, str(out)
        again, fresh = stage_start(out, resume)  # a finished stage only reports
        h = asyncio.run(trainer(stage, i, family, again, world, strategy, fresh).run())
        if i == 0 and "start" in h:
            history["start"] = h["start"]
        history[f"after pair {i + 1}"] = h["final"]
        start = str(out / "final")
    return history
