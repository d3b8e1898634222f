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
from tempering.train.stages import Stage, Stages
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
    return rounds(Stages(Path(cfg.run.out_dir), cfg, resume, overwrite, world), cfg, base, world, strategy)[0]


def rounds(
    stages: Stages, cfg: RGRPOConfig, base: TaskFamily, world: World | None, strategy: str
) -> tuple[dict[str, Any], Stage]:
    """The rounds on `base`'s training pool, as stages in cfg.run.out_dir (each after the one before it,
    whose pass rates decide what it trains on); returns rgrpo's result and the last round's stage."""
    g = cfg.rgrpo
    pool = base.tasks("train", cfg.task.train_size, seed=cfg.task.data_seed)
    root = Path(cfg.run.out_dir)
    saved_path = root / "pass_rates.json"
    saved: dict[str, Any] = {"teachers": {}, "tasks": {}, "heldout": {}, "train_examples": {}}
    names: list[str] = []
    rows: list[torch.Tensor] = []
    last: Stage | None = None
    for r in range(1, g.rounds + 1):
        name = f"round_{r}"
        weights = torch.ones(len(pool))
        if rows:
            weights = residual_weights(torch.stack(rows), g.kappa, g.upweight if g.mode == "upweight" else None)
            if float(weights.sum()) == 0 or (g.mode == "upweight" and bool((weights == 1).all())):
                saved["stopped"] = f"every training example was covered after {names[-1]}"
                break
        stage = cfg.model_copy(deep=True)
        stage.run.out_dir = str(root / name)
        stage.run.seed = cfg.run.seed + r - 1

        def train(c: RGRPOConfig, resume: bool, overwrite: bool, weights=weights) -> dict[str, Any]:
            fam = PoolFamily(base, weighted_pool(pool, weights, c.run.seed))
            trainer = Trainer(c, rl.SPEC, fam, resume, world, strategy, overwrite)
            hist = trainer.run()
            p = trainer.ranks.once(
                lambda: asyncio.run(
                    pass_rates(trainer.sampler, trainer.fmt, base.make_env, pool, g.pass_samples, trainer.opts)
                )
            )
            return {"heldout": hist["final"], "pass_rates": p}

        last = stages.run(name, stage, train, after=last.digest if last else "")
        p = last.result["pass_rates"]
        names.append(name)
        rows.append(torch.tensor(p))
        saved["teachers"][name] = str(root / name / "final")
        saved["heldout"][name] = last.result["heldout"]
        for t, v in zip(pool, p):
            saved["tasks"].setdefault(t.id, {})[name] = v
        saved["train_examples"][name] = int((weights > 0).sum())
        rep = coverage_tables(names, torch.stack(rows), pool, g.kappa)
        if stages.main:
            atomic_write_text(saved_path, json.dumps(saved, indent=1) + "\n")
            atomic_write_text(root / "coverage.json", json.dumps(rep, indent=2) + "\n")
            atomic_write_text(root / "coverage.md", coverage_markdown(rep))
    if stages.main:
        atomic_write_text(saved_path, json.dumps(saved, indent=1) + "\n")
    assert last is not None  # the first round always runs
    rep = coverage_tables(names, torch.stack(rows), pool, g.kappa)
    return {"teachers": saved["teachers"], "coverage": rep, "pass_rates": str(saved_path), **saved["heldout"]}, last
