"""`tempering expand-compress`: RGRPO teachers, then TU-OPD of all of them into one student.

OUT_DIR/expand is the RGRPO run (its rounds are the teachers, its pass_rates.json their measured
pass rates on the training pool); OUT_DIR/compress is the TU-OPD run on the same pool. The student
starts from the teachers' common initialisation unless `student` names another model.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field

from tempering.config import Schema
from tempering.envs.base import TaskFamily
from tempering.recipes.distill import as_config, cli_main
from tempering.recipes.rgrpo import RGRPOConfig, rgrpo
from tempering.recipes.tu_opd import TUOPDConfig, TUOPDTrainer
from tempering.runlog import atomic_write_text
from tempering.teachers import TeacherSection


class ExpandCompressConfig(Schema):
    """Expand (RGRPO) then compress (TU-OPD) (`tempering expand-compress`)."""

    out_dir: str = Field("runs/expand_compress", description="Run folder: expand/ and compress/ go inside.")
    student: str | None = Field(
        None,
        description="The compressed student's starting model (default: the teachers' initialisation, expand.model.name).",
    )
    expand: RGRPOConfig = Field(
        default_factory=RGRPOConfig, description="The RGRPO run (its task section is the shared training pool)."
    )
    compress: TUOPDConfig = Field(
        default_factory=TUOPDConfig,
        description="The TU-OPD run (teachers, pass rates and task are filled in from expand).",
    )


def compress_config(cfg: ExpandCompressConfig, teachers: dict[str, str], pass_rates: str) -> TUOPDConfig:
    """The TU-OPD stage: same pool as the expansion, its rounds as teachers, their measured pass rates."""
    c = cfg.compress.model_copy(deep=True)
    c.task = cfg.expand.task.model_copy(deep=True)
    c.model.name = cfg.student or cfg.expand.model.name
    c.run.out_dir = str(Path(cfg.out_dir) / "compress")
    c.tu_opd.teachers = {n: TeacherSection(path=p) for n, p in teachers.items()}
    c.tu_opd.pass_rates = pass_rates
    return c


def expand_compress(
    cfg: ExpandCompressConfig | dict, family: TaskFamily | None = None, resume: bool = False
) -> dict[str, Any]:
    cfg = as_config(ExpandCompressConfig, cfg)
    root = Path(cfg.out_dir)
    root.mkdir(parents=True, exist_ok=True)
    atomic_write_text(root / "config.yaml", yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
    ex = cfg.expand.model_copy(deep=True)
    ex.run.out_dir = str(root / "expand")
    expanded = rgrpo(ex, family=family, resume=resume)
    c = compress_config(cfg, expanded["teachers"], expanded["pass_rates"])
    again = resume and any((Path(c.run.out_dir) / "checkpoints").glob("step_*"))
    hist = asyncio.run(TUOPDTrainer(c, family=family, resume=again).run())
    return {
        **{f"teacher {n}": expanded[n] for n in expanded["teachers"]},
        "student start": hist.get("start"),
        "student final": hist["final"],
        "coverage": expanded["coverage"],
    }


def main(argv: list[str]) -> int:
    def run(cfg: ExpandCompressConfig, resume: bool) -> dict[str, Any]:
        return expand_compress(cfg, resume=resume)

    return cli_main(
        argv,
        "expand-compress",
        "Expand then compress: RGRPO teachers distilled into one student with TU-OPD.",
        ExpandCompressConfig,
        run,
        out_key="out_dir",
    )
