"""`tempering expand-compress`: RGRPO teachers, then TU-OPD of all of them into one student.

RUN/expand is the RGRPO run (its rounds are the teachers, its pass_rates.json their measured pass rates
on the training pool); RUN/compress is the TU-OPD run on the same pool. The student starts from the
teachers' common initialisation unless `student` names another model. The values this verb derives
(the compress stage's task, model, folder, teachers and pass rates; the expand stage's folder) are
refused when set, rather than silently replaced.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from tempering.config import Schema, as_config
from tempering.envs.base import TaskFamily
from tempering.envs.registry import make_family
from tempering.methods import tu_opd as method
from tempering.methods.tu_opd import TUOPDConfig
from tempering.recipes.rgrpo import RGRPOConfig, Rounds
from tempering.teachers import TeacherSection
from tempering.train.config import ModelSection, RunSection, TaskSection
from tempering.train.loop import Trainer
from tempering.train.stages import Done, Stage, Stages
from tempering.train.world import World


class PipelineRun(Schema):
    out_dir: str = Field("runs/expand_compress", description="Run folder: expand/ and compress/ go inside.")


DERIVED = [
    ("compress.task", lambda c: c.compress.task != TaskSection(), "expand.task (the shared training pool)"),
    ("compress.model.name", lambda c: c.compress.model.name != ModelSection().name, "student"),
    ("compress.run.out_dir", lambda c: c.compress.run.out_dir != RunSection().out_dir, "run.out_dir"),
    ("expand.run.out_dir", lambda c: c.expand.run.out_dir != RunSection().out_dir, "run.out_dir"),
    ("compress.tu_opd.teachers", lambda c: bool(c.compress.tu_opd.teachers), "the expand stage's rounds"),
    ("compress.tu_opd.pass_rates", lambda c: c.compress.tu_opd.pass_rates is not None, "the expand stage's pass rates"),
]
"""(key, is it set, what the verb derives it from)."""


class ExpandCompressConfig(Schema):
    """Expand (RGRPO) then compress (TU-OPD) (`tempering expand-compress`)."""

    run: PipelineRun = Field(default_factory=PipelineRun, description="The pipeline's run folder.")
    student: str | None = Field(
        None,
        description="The compressed student's starting model (default: the teachers' initialisation, expand.model.name).",
    )
    expand: RGRPOConfig = Field(
        default_factory=RGRPOConfig, description="The RGRPO run (its task section is the shared training pool)."
    )
    compress: TUOPDConfig = Field(
        default_factory=TUOPDConfig,
        description="The TU-OPD run; its task, model name, folder, teachers and pass rates come from expand.",
    )

    @model_validator(mode="after")
    def _no_derived_values(self):
        for key, is_set, source in DERIVED:
            if is_set(self):
                raise ValueError(f"{key} is derived from {source} by expand-compress; remove {key} from the config")
        return self


def compress_config(cfg: ExpandCompressConfig, teachers: dict[str, str], pass_rates: str) -> TUOPDConfig:
    """The TU-OPD stage: same pool as the expansion, its rounds as teachers, their measured pass rates."""
    c = cfg.compress.model_copy(deep=True)
    c.task = cfg.expand.task.model_copy(deep=True)
    c.model.name = cfg.student or cfg.expand.model.name
    c.run.out_dir = str(Path(cfg.run.out_dir) / "compress")
    c.tu_opd.teachers = {n: TeacherSection(path=p) for n, p in teachers.items()}
    c.tu_opd.pass_rates = pass_rates
    return c


def expand_compress(
    cfg: ExpandCompressConfig | dict,
    family: TaskFamily | None = None,
    resume: bool = False,
    world: World | None = None,
    strategy: str = "ddp",
    overwrite: bool = False,
) -> dict[str, Any]:
    """The RGRPO rounds (in RUN/expand), then the compress stage after the last of them."""
    cfg = as_config(ExpandCompressConfig, cfg)
    root = Path(cfg.run.out_dir)
    stages = Stages(root, cfg, resume, overwrite, world)
    ex = cfg.expand.model_copy(deep=True)
    ex.run.out_dir = str(root / "expand")
    base = family or make_family(ex.task.family, **ex.task.args)
    rounds = Rounds(ex, base, world, strategy, stages.main)

    def compress(last: Done | None) -> TUOPDConfig:
        rounds.write()  # with why the rounds stopped early
        return compress_config(cfg, rounds.saved["teachers"], str(rounds.pass_rates_path))

    def train(tu: TUOPDConfig, resume: bool, overwrite: bool) -> dict[str, Any]:
        return Trainer(tu, method.SPEC, family, resume, world, strategy, overwrite).run()

    done = stages.run([*rounds.stages(), Stage("compress", compress, train)])
    hist = done[-1].result
    expanded = rounds.result()
    return {
        **{f"teacher {n}": expanded[n] for n in expanded["teachers"]},
        "student start": hist.get("start"),
        "student final": hist["final"],
        "coverage": expanded["coverage"],
    }
