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
from tempering.recipes.common import as_config
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
) -> Trainer:
    """The trainer of one stage (teacher pair `pair`)."""
    cfg = as_config(DirectOPDConfig, cfg)
    return Trainer(cfg, partial(method.build, pair=pair), family, resume=resume, world=world, strategy=strategy)


def direct_opd(
    cfg: DirectOPDConfig | dict,
    family: TaskFamily | None = None,
    resume: bool = False,
    world: World | None = None,
    strategy: str = "ddp",
) -> dict[str, Any]:
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
        h = asyncio.run(trainer(stage, i, family, resume=again, world=world, strategy=strategy).run())
        if i == 0 and "start" in h:
            history["start"] = h["start"]
        history[f"after pair {i + 1}" if len(pairs) > 1 else "final"] = h["final"]
        start = str(out / "final")
    return history
