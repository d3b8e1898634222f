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


def matmul_gflops(threads: int = 2, n: int = 1024, reps: int = 10) -> float:
    """The best of `reps` float32 n^3 matmuls on `threads` threads, in GFLOP/s: how fast this machine ran
    at that moment (a loaded one shows a lower peak), to read timings beside."""
    import time

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        a = torch.randn(n, n)
        a @ a
        best = float("inf")
        for _ in range(reps):
            t0 = time.perf_counter()
            a @ a
            best = min(best, time.perf_counter() - t0)
    finally:
        torch.set_num_threads(before)
    return round(2 * n**3 / best / 1e9, 1)


def conditions() -> dict[str, Any]:
    """The load average and the matmul peak now (record one at the start and one at the end of a run)."""
    return {"load_average": [round(x, 2) for x in os.getloadavg()], "matmul_gflops_2_threads": matmul_gflops()}


def conditions_text(start: dict[str, Any], end: dict[str, Any] | None = None) -> str:
    """`conditions()` in words: `load average 0.2 0.5 1.0, 1024^3 float32 matmul peak 61 GFLOP/s on 2 threads`."""

    def one(c: dict[str, Any]) -> str:
        load = " ".join(f"{x:.2f}" for x in c["load_average"])
        peak = c["matmul_gflops_2_threads"]
        return f"load average {load}, 1024^3 float32 matmul peak {peak:.0f} GFLOP/s on 2 threads"

    return one(start) + (f" at the start; {one(end)} at the end" if end else "")


def write_results(out_dir: str | Path, name: str, markdown: str, data: dict[str, Any]) -> None:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / f"{name}.json", json.dumps(data, indent=2) + "\n")
    atomic_write_text(out / f"{name}.md", markdown)
