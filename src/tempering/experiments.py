"""Helpers for experiment scripts: run one arm of a comparison, aggregate seeds, write tables.

An arm is a TrainConfig (as a dict); its result is the final held-out evaluation plus totals summed
over the run's metrics (environment calls, seconds). Tables and their JSON twin are written together
from the same numbers.
"""

from __future__ import annotations

import json
import os
import platform
import statistics as st
from pathlib import Path
from typing import Any

import torch

from tempering.progress import conditions as conditions
from tempering.progress import conditions_text as conditions_text
from tempering.progress import matmul_gflops as matmul_gflops
from tempering.recipes.runner import run
from tempering.runlog import atomic_write_text

TOTALS = (
    "env_calls",
    "env_seconds",
    "gen_seconds",
    "update_seconds",
    "step_seconds",
    "cf_env_calls",
    "episodes_pruned",
)


def run_arm(cfg: dict[str, Any], family=None) -> dict[str, Any]:
    """Train one arm (unless its run folder already holds a finished run) and summarise it."""
    run_dir = Path(cfg["run"]["out_dir"])
    if not (run_dir / "final" / "config.json").is_file():
        run("train", cfg, family=family)
    return summarize_run(run_dir)


def summarize_run(run_dir: str | Path) -> dict[str, Any]:
    """Final and starting held-out metrics (without the `eval/` prefix) and totals over the run's steps."""
    rows = [json.loads(ln) for ln in (Path(run_dir) / "metrics.jsonl").read_text().splitlines() if ln.strip()]
    evals = [r for r in rows if "eval/pass@1" in r]
    steps = [r for r in rows if "reward" in r]
    strip = lambda r: {k.removeprefix("eval/"): v for k, v in r.items() if k.startswith("eval/")}
    out: dict[str, Any] = strip(evals[-1])
    out["start"] = strip(evals[0]) if evals and evals[0]["step"] == 0 else {}
    for key in TOTALS:
        out[f"total_{key}"] = float(sum(r.get(key, 0.0) for r in steps))
    for key in ("groups_expanded_share", "cf_overhead_calls", "cf_overhead_seconds"):
        vals = [r[key] for r in steps if key in r]
        if vals:
            out[key] = sum(vals) / len(vals)
    out["wall_seconds"] = out["total_step_seconds"]  # training steps only; evaluations excluded
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
