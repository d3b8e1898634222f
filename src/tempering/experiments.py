"""Helpers for experiment scripts: run one arm of a comparison, aggregate seeds, write tables.

An arm is a TrainConfig (as a dict); its result is the final held-out evaluation plus totals summed
over the run's metrics (environment calls, seconds). Tables and their JSON twin are written together
from the same numbers.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import statistics as st
import time
from pathlib import Path
from typing import Any

import torch

from tempering.config import build
from tempering.recipes.rl import RLTrainer, TrainConfig
from tempering.runlog import atomic_write_text

TOTALS = ("env_calls", "env_seconds", "gen_seconds", "update_seconds", "step_seconds", "cf_env_calls", "episodes_pruned")


def run_arm(cfg: dict[str, Any], family=None) -> dict[str, Any]:
    """Train one arm; returns final eval metrics (without the `eval/` prefix) and run totals."""
    t0 = time.perf_counter()
    trainer = RLTrainer(build(TrainConfig, cfg), family=family)
    hist = asyncio.run(trainer.run())
    rows = trainer.log.read_metrics()
    out: dict[str, Any] = {k.removeprefix("eval/"): v for k, v in hist["final"].items()}
    out["start"] = {k.removeprefix("eval/"): v for k, v in hist.get("start", {}).items()}
    for key in TOTALS:
        out[f"total_{key}"] = float(sum(r.get(key, 0.0) for r in rows if "reward" in r))
    shares = [r["groups_expanded_share"] for r in rows if "groups_expanded_share" in r]
    if shares:
        out["groups_expanded_share"] = sum(shares) / len(shares)
    overhead = [r["cf_overhead_calls"] for r in rows if "cf_overhead_calls" in r]
    if overhead:
        out["cf_overhead_calls"] = sum(overhead) / len(overhead)
        out["cf_overhead_seconds"] = sum(r["cf_overhead_seconds"] for r in rows if "cf_overhead_seconds" in r) / len(overhead)
    out["wall_seconds"] = time.perf_counter() - t0
    return out


def mean_sd(xs: list[float]) -> tuple[float, float]:
    xs = [float(x) for x in xs]
    return (st.mean(xs), st.stdev(xs)) if len(xs) > 1 else (xs[0], 0.0)


def fmt(xs: list[float], digits: int = 3) -> str:
    m, s = mean_sd(xs)
    return f"{m:.{digits}f} ± {s:.{digits}f}"


def machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, torch {torch.__version__}, {torch.get_num_threads()} threads"


def write_results(out_dir: str | Path, name: str, markdown: str, data: dict[str, Any]) -> None:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / f"{name}.json", json.dumps(data, indent=2) + "\n")
    atomic_write_text(out / f"{name}.md", markdown)
