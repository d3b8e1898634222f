"""Progress bars and result tables (rich)."""

from __future__ import annotations

import contextlib
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

console = Console(stderr=True)


class _Bar:
    def __init__(self, progress: Progress | None, task_id: Any):
        self.progress, self.task_id = progress, task_id

    def update(self, live: dict[str, float] | None = None, advance: int = 1) -> None:
        if self.progress is None:
            return
        text = "  ".join(f"{k} {v:.3f}" for k, v in (live or {}).items())
        self.progress.update(self.task_id, advance=advance, live=text)


@contextlib.contextmanager
def progress_bar(total: int, label: str, enabled: bool = True, start: int = 0):
    if not enabled:
        yield _Bar(None, None)
        return
    cols = [
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        TextColumn("{task.fields[live]}"),
    ]
    with Progress(*cols, console=console, transient=False) as p:
        tid = p.add_task(label, total=total, completed=start, live="")
        yield _Bar(p, tid)


def print_eval_table(history: dict[str, dict[str, float]], title: str = "results") -> None:
    """Rows = metrics, columns = phases (e.g. start / final)."""
    phases = [k for k in history if isinstance(history[k], dict)]
    keys = sorted({k for ph in phases for k in history[ph]})
    t = Table(title=title)
    t.add_column("metric")
    for ph in phases:
        t.add_column(ph, justify="right")
    for k in keys:
        t.add_row(k, *(f"{history[ph][k]:.3f}" if k in history[ph] else "" for ph in phases))
    Console().print(t)


def warn(message: str) -> None:
    """A warning on stderr (above a live progress bar, which shares this console)."""
    console.print(f"warning: {message}", markup=False, highlight=False, soft_wrap=True)
