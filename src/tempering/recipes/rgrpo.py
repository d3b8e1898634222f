"""`tempering rgrpo`: Residual GRPO, a sequence of complementary GRPO teachers (the "expand" step).

Every round trains a GRPO teacher from the same initialisation (`model.name`) for `run.steps` steps.
After each round, each teacher's pass rate p_j(x) on every training example is measured from n
samples; round r+1 trains only on the examples that no earlier teacher covers (max_j p_j(x) < kappa),
or up-weights them by (1 + beta). The run folder holds round_r/ (a full RL run each),
pass_rates.json (per example and teacher), coverage.json and coverage.md (per round and per family).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, Literal

import torch
from pydantic import Field, model_validator

from tempering.algos.expand_compress import coverage_report, residual_weights
from tempering.config import Schema, as_config, ignored_unless
from tempering.envs.base import TaskFamily
from tempering.envs.pool import PoolFamily, weighted_pool
from tempering.envs.registry import make_family
from tempering.evaluation import pass_rates
from tempering.methods import rl
from tempering.methods.rl import TrainConfig
from tempering.runlog import atomic_write_text
from tempering.train.loop import Trainer
from tempering.train.stages import Done, Stage, Stages
from tempering.train.world import World
from tempering.types import Task


class RGRPOSection(Schema):
    rounds: int = Field(3, ge=1, description="Number of teachers R (each trained for run.steps GRPO steps).")
    kappa: float = Field(
        0.5, gt=0, le=1, description="An example is covered once some teacher's pass rate reaches kappa."
    )
    pass_samples: int = Field(8, ge=1, description="Samples per example (and teacher) behind each pass rate.")
    mode: Literal["residual", "upweight"] = Field(
        "residual", description="Later rounds train on uncovered examples only, or up-weight them."
    )
    upweight: float = Field(
        1.0, ge=0, description="beta of mode=upweight: uncovered examples are drawn (1 + beta) times as often."
    )

    @model_validator(mode="after")
    def _check(self):
        ignored_unless(self, "rgrpo", ["upweight"], self.mode == "upweight", "rgrpo.mode=upweight")
        return self


class RGRPOConfig(TrainConfig):
    """Residual GRPO (`tempering rgrpo`); task.train_size is the pool whose coverage is tracked."""

    rgrpo: RGRPOSection = Field(default_factory=RGRPOSection, description="Rounds, coverage threshold and redirection.")


def coverage_tables(names: list[str], pass_JN: torch.Tensor, tasks: list[Task], kappa: float) -> dict[str, Any]:
    """The coverage report over all examples and per task family."""
    out = {"all": coverage_report(pass_JN, kappa)}
    fams = sorted({t.family for t in tasks})
    if len(fams) > 1:
        for f in fams:
            idx = torch.tensor([i for i, t in enumerate(tasks) if t.family == f])
            out[f] = coverage_report(pass_JN[:, idx], kappa)
    return {"teachers": names, "kappa": kappa, "examples": len(tasks), **out}


def coverage_markdown(rep: dict[str, Any]) -> str:
    names = rep["teachers"]
    lines = [f"# RGRPO coverage (kappa = {rep['kappa']}, {rep['examples']} training examples)", ""]
    for part in [k for k in rep if k not in ("teachers", "kappa", "examples")]:
        r = rep[part]
        lines += [
            f"## {part}",
            "",
            "| round | teacher coverage | union coverage | added |",
            "| --- | --- | --- | --- |",
        ]
        lines += [
            f"| {n} | {t:.3f} | {u:.3f} | {a:+.3f} |" for n, t, u, a in zip(names, r["teacher"], r["union"], r["added"])
        ]
        lines += [
            "",
            "Overlap (Jaccard of covered sets):",
            "",
            "| | " + " | ".join(names) + " |",
            "| --- " * (len(names) + 1) + "|",
        ]
        lines += [f"| {n} | " + " | ".join(f"{x:.2f}" for x in row) + " |" for n, row in zip(names, r["overlap"])]
        lines.append("")
    return "\n".join(lines)


class Rounds:
    """RGRPO's rounds on `base`'s training pool as stages (in cfg.run.out_dir), each after the one before
    it, whose pass rates decide what it trains on; what they measured is written after each round."""

    def __init__(self, cfg: RGRPOConfig, base: TaskFamily, world: World | None, strategy: str, main: bool):
        self.cfg, self.base, self.world, self.strategy, self.main = cfg, base, world, strategy, main
        self.pool = base.tasks("train", cfg.task.train_size, seed=cfg.task.data_seed)
        self.root = Path(cfg.run.out_dir)
        self.saved: dict[str, Any] = {"teachers": {}, "tasks": {}, "heldout": {}, "train_examples": {}}
        self.names: list[str] = []
        self.rows: list[torch.Tensor] = []

    @property
    def pass_rates_path(self) -> Path:
        return self.root / "pass_rates.json"

    def stages(self) -> list[Stage[RGRPOConfig]]:
        return [Stage(f"round_{r}", self.config, self.train, self.record) for r in range(1, self.cfg.rgrpo.rounds + 1)]

    def weights(self) -> torch.Tensor:
        """Of the pool's examples in the next round, from the rounds before it."""
        g = self.cfg.rgrpo
        if not self.rows:
            return torch.ones(len(self.pool))
        return residual_weights(torch.stack(self.rows), g.kappa, g.upweight if g.mode == "upweight" else None)

    def config(self, last: Done | None) -> RGRPOConfig | None:
        """The next round's config (its seed the run's plus the rounds before it); None once every
        training example is covered."""
        w = self.weights()
        if self.rows and (float(w.sum()) == 0 or (self.cfg.rgrpo.mode == "upweight" and bool((w == 1).all()))):
            self.saved["stopped"] = f"every training example was covered after {self.names[-1]}"
            return None
        c = self.cfg.model_copy(deep=True)
        c.run.out_dir = str(self.root / f"round_{len(self.rows) + 1}")
        c.run.seed = self.cfg.run.seed + len(self.rows)
        return c

    def train(self, c: RGRPOConfig, resume: bool, overwrite: bool) -> dict[str, Any]:
        fam = PoolFamily(self.base, weighted_pool(self.pool, self.weights(), c.run.seed))
        trainer = Trainer(c, rl.SPEC, fam, resume, self.world, self.strategy, overwrite)
        hist = trainer.run()
        samples = self.cfg.rgrpo.pass_samples
        p = trainer.ranks.once(
            lambda: asyncio.run(
                pass_rates(trainer.sampler, trainer.fmt, self.base.make_env, self.pool, samples, trainer.opts)
            )
        )
        return {"heldout": hist["final"], "pass_rates": p}

    def record(self, done: Done) -> None:
        """The round's teacher, pass rates and coverage, written with the rounds before it."""
        p = done.result["pass_rates"]
        self.saved["train_examples"][done.name] = int((self.weights() > 0).sum())
        self.names.append(done.name)
        self.rows.append(torch.tensor(p))
        self.saved["teachers"][done.name] = done.final
        self.saved["heldout"][done.name] = done.result["heldout"]
        for t, v in zip(self.pool, p):
            self.saved["tasks"].setdefault(t.id, {})[done.name] = v
        if self.main:
            atomic_write_text(self.root / "coverage.json", json.dumps(self.coverage(), indent=2) + "\n")
            atomic_write_text(self.root / "coverage.md", coverage_markdown(self.coverage()))
            self.write()

    def coverage(self) -> dict[str, Any]:
        return coverage_tables(self.names, torch.stack(self.rows), self.pool, self.cfg.rgrpo.kappa)

    def write(self) -> None:
        if self.main:
            atomic_write_text(self.pass_rates_path, json.dumps(self.saved, indent=1) + "\n")

    def result(self) -> dict[str, Any]:
        return {
            "teachers": self.saved["teachers"],
            "coverage": self.coverage(),
            "pass_rates": str(self.pass_rates_path),
            **self.saved["heldout"],
        }


def rgrpo(
    cfg: RGRPOConfig | dict,
    family: TaskFamily | None = None,
    resume: bool = False,
    world: World | None = None,
    strategy: str = "ddp",
    overwrite: bool = False,
) -> dict[str, Any]:
    """Train the rounds in turn, each a stage of the run folder (a finished round is reused when resuming)."""
    cfg = as_config(RGRPOConfig, cfg)
    base = family or make_family(cfg.task.family, **cfg.task.args)
    stages = Stages(Path(cfg.run.out_dir), cfg, resume, overwrite, world)
    rounds = Rounds(cfg, base, world, strategy, stages.main)
    stages.run(rounds.stages())
    rounds.write()  # with why the rounds stopped early
    return rounds.result()
