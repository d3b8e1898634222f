"""Metrics over trajectory records (the dataset's JSONL rows, see docs/gui.md)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

Record = dict[str, Any]


def _steps(records: Iterable[Record]) -> list[Record]:
    return [s for r in records for s in r["steps"]]


def step_success(records: list[Record]) -> float:
    """Share of steps whose action was valid at its state (one step fewer left afterwards)."""
    steps = _steps(records)
    return sum(bool(s["valid"]) for s in steps) / len(steps) if steps else 0.0


def task_success(records: list[Record]) -> float:
    """Share of episodes that finished their task."""
    return sum(bool(r["success"]) for r in records) / len(records) if records else 0.0


def format_rate(records: list[Record]) -> float:
    """Share of steps whose output was well-formed."""
    steps = _steps(records)
    return sum(bool(s["format_ok"]) for s in steps) / len(steps) if steps else 0.0


def multi_solution_step_success(records: list[Record]) -> float:
    """Step success over the steps whose state had several valid actions."""
    steps = [s for s in _steps(records) if len(s["valid_actions"]) > 1]
    return sum(bool(s["valid"]) for s in steps) / len(steps) if steps else 0.0


def summarize(records: list[Record]) -> dict[str, float]:
    """The three headline metrics plus counts (multi-solution steps have more than one valid action)."""
    steps = _steps(records)
    return {
        "episodes": len(records),
        "steps": len(steps),
        "multi_solution_steps": sum(len(s["valid_actions"]) > 1 for s in steps),
        "step_success": step_success(records),
        "task_success": task_success(records),
        "format_rate": format_rate(records),
        "multi_solution_step_success": multi_solution_step_success(records),
    }
