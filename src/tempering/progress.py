"""Progress bars and result tables (rich), and the machine's conditions that timings are read beside."""

from __future__ import annotations

import contextlib
import os
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

console = Console(stderr=True)


class _Bar:
    def __init__(self, progress: Progress | None, task_id: Any):
        self.progress, self.task_id = progress, task_id

    def update(self, live: dict[str, float] | None = None, advance: int = 1, eta: str = "") -> None:
        if self.progress is None:
            return
        text = "  ".join(f"{k} {v:.3f}" for k, v in (live or {}).items())
        self.progress.update(self.task_id, advance=advance, live=text, eta=eta)


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
        TextColumn("{task.fields[eta]}"),  # the Reporter's estimate: steps and the evaluations still due
        TextColumn("{task.fields[live]}"),
    ]
    with Progress(*cols, console=console, transient=False) as p:
        tid = p.add_task(label, total=total, completed=start, live="", eta="")
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
        t.add_row(k, *(_cell(history[ph][k]) if k in history[ph] else "" for ph in phases))
    Console().print(t)


def warn(message: str) -> None:
    """A warning on stderr (above a live progress bar, which shares this console)."""
    console.print(f"warning: {message}", markup=False, highlight=False, soft_wrap=True)


def _cell(v: Any) -> str:
    return str(v) if isinstance(v, int) else f"{v:.3f}"


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3f}" if abs(v) < 1000 else f"{v:.4g}"
    return str(v)


def _duration(seconds: float) -> str:
    s = int(round(seconds))
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s" if m else f"{s}s"


def count_parameters(model: Any) -> tuple[int, int]:
    """(all, trainable) parameter counts of a torch module."""
    params = list(model.parameters())
    return sum(p.numel() for p in params), sum(p.numel() for p in params if p.requires_grad)


def human(n: float) -> str:
    """1234567 -> '1.23M'."""
    for div, unit in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= div:
            return f"{n / div:.3g}{unit}"
    return str(int(n))


LINE_KEYS = ("reward", "success", "loss", "entropy", "kl_ref", "grad_norm")
"""What a plain progress line shows when a step logged it (besides the method's own objective)."""


class Watch:
    """Flags a run that has stopped learning: `patience` steps in a row where every group's advantages
    were zero (all samples of each prompt scored alike) or the gradient norm was zero. Each kind of
    warning is given once."""

    def __init__(self, patience: int = 5):
        self.patience = patience
        self.streak = {"zero_adv": 0, "zero_grad": 0}
        self.warned: set[str] = set()

    def check(self, m: dict[str, Any]) -> list[str]:
        zero_adv = m.get("frac_zero_adv_groups") == 1.0 or m.get("update_skipped") == 1.0
        hits = {"zero_adv": zero_adv, "zero_grad": m.get("grad_norm") == 0.0 and not zero_adv}
        out = []
        for kind, hit in hits.items():
            self.streak[kind] = self.streak[kind] + 1 if hit else 0
            if self.streak[kind] >= self.patience and kind not in self.warned:
                self.warned.add(kind)
                out.append(self._message(kind, m))
        return out

    def _message(self, kind: str, m: dict[str, Any]) -> str:
        n = self.patience
        if kind == "zero_grad":
            return f"the gradient norm has been 0 for {n} steps: the policy is not changing"
        reward = m.get("reward")
        why = (
            "every sample fails: the task is too hard for this policy (warm-start it with `tempering pretrain`, "
            "or use an easier task or a larger rollout.group_size)"
            if m.get("success") == 0.0
            else "every sample succeeds: the task is too easy for this policy"
            if m.get("success") == 1.0
            else "all samples of each prompt get the same reward"
        )
        got = f" (reward {reward:.3f})" if isinstance(reward, float) else ""
        return f"no learning signal for {n} steps: every group's advantages are zero{got}; {why}"


class Reporter:
    """What a run shows the person watching it.

    On a terminal, a live bar (stderr) with the step's headline numbers. When stdout is a file or a
    pipe (nohup, Slurm, `| tee`), one plain flushed line every `log_every` steps instead: step, the
    `LINE_KEYS` and `objective` the step logged, seconds per step and the time left. Either way: a
    start-up summary, a line per evaluation, and warnings (`Watch`) for a run that stopped learning.

    The time left counts the steps and the evaluations still due (every `eval_every` steps and the
    final one), each at its measured cost: a start-up evaluation prices them from the first step.
    """

    def __init__(
        self,
        total: int,
        label: str,
        start: int = 0,
        log_every: int = 10,
        bar: bool = True,
        objective: str | None = None,
        lines: bool | None = None,
        out: Any = None,
        quiet: bool = False,
        eval_every: int = 0,
        eval_prompts: int = 0,
        final_eval_prompts: int = 0,
        hide: tuple[str, ...] = (),
        log_seconds: float = 60.0,
    ):
        import sys
        import time

        self.total, self.label, self.start, self.step_no = total, label, start, start
        self.log_every, self.objective = log_every, objective
        self.hide = hide
        """Step metrics that do not describe the model (a supervised method's reward scores the given answers)."""
        self.log_seconds = log_seconds
        """A plain line is also due when the last one is this old (steps of many minutes)."""
        self._last_line: float | None = None
        self.out = out if out is not None else sys.stdout
        self.lines = (not _isatty(self.out)) if lines is None else lines
        self.bar_on = bar and console.is_terminal and not quiet
        self.quiet = quiet
        """Say nothing (ranks other than 0 of a data-parallel run)."""
        self.watch = Watch()
        self.eval_every, self.eval_prompts, self.final_eval_prompts = eval_every, eval_prompts, final_eval_prompts
        self.eval_cost: list[tuple[float, int]] = []
        """(seconds, prompts) of each evaluation so far."""
        self._stepping = False
        self._eval_in_steps = 0.0
        """Evaluation time since the steps' clock started (not a step's cost)."""
        self.t0 = time.perf_counter()
        self._clock = time.perf_counter
        self._stack = contextlib.ExitStack()
        self._bar = _Bar(None, None)

    def __enter__(self) -> Reporter:
        self.t0 = self._clock()  # steps are timed from here (a start-up evaluation is not a step)
        self._stepping = True
        if self.bar_on:
            self._bar = self._stack.enter_context(progress_bar(self.total, self.label, True, self.start))
        return self

    def __exit__(self, *exc) -> None:
        self._stack.close()

    def say(self, text: str) -> None:
        """One line for the person watching: above the live bar, or on stdout."""
        if self.quiet:
            return
        if self._bar.progress is not None and not self.lines:
            self._bar.progress.console.print(text, markup=False, highlight=False)
        else:
            print(text, file=self.out, flush=True)

    def summary(self, rows: dict[str, Any]) -> None:
        """The start-up summary: `key value` pairs on one line each, under the run's label."""
        width = max(map(len, rows), default=0)
        self.say("\n".join([f"{self.label}:"] + [f"  {k:<{width}}  {v}" for k, v in rows.items()]))

    def seconds_per_step(self, step: int) -> float:
        return (self._clock() - self.t0 - self._eval_in_steps) / max(step - self.start, 1)

    def seconds_left(self, step: int) -> float:
        """The remaining steps at this run's pace, plus the evaluations still due at the measured cost
        per prompt."""
        due = sum(1 for k in range(step + 1, self.total) if self.eval_every and k % self.eval_every == 0)
        prompts = due * self.eval_prompts + self.final_eval_prompts
        seconds, n = map(sum, zip(*self.eval_cost)) if self.eval_cost else (0.0, 0)
        return self.seconds_per_step(step) * (self.total - step) + (seconds / n * prompts if n else 0.0)

    def step(self, step: int, m: dict[str, Any]) -> None:
        self.step_no = step
        named = [k for k in (*LINE_KEYS, self.objective) if k is not None]
        shown = [k for k in named if k not in self.hide and isinstance(m.get(k), (int, float))]
        keys = list(dict.fromkeys(shown))
        live = [k for k in (self.objective, "reward", "success") if k in shown]
        eta = _duration(self.seconds_left(step))
        self._bar.update({k: m[k] for k in live or keys[:2]}, eta=f"ETA {eta}")
        now = self._clock()
        if self._last_line is None:
            self._last_line = self.t0
        if (
            self.lines
            and self.log_every
            and (step % self.log_every == 0 or step == self.total or now - self._last_line >= self.log_seconds)
        ):
            self._last_line = now
            per = self.seconds_per_step(step)
            fields = "  ".join(f"{k} {_fmt(m[k])}" for k in dict.fromkeys(keys))
            self.say(f"step {step}/{self.total}  {fields}  {per:.2f} s/step  ETA {eta}")
        for w in self.watch.check(m):
            self.warn(w)

    def evaluation(
        self, step: int, m: dict[str, Any], n: int | None = None, what: str = "eval", seconds: float | None = None
    ) -> None:
        """One line per evaluation; `seconds` (its cost) prices the evaluations still due."""
        if seconds is not None and n:
            self.eval_cost.append((seconds, n))
            if self._stepping:
                self._eval_in_steps += seconds
        shown = "  ".join(f"{k.removeprefix('eval/')} {_fmt(v)}" for k, v in m.items() if k != "eval/n")
        size = f" ({n} prompts)" if n else ""
        self.say(f"{what} at step {step}{size}: {shown}")

    def warn(self, text: str) -> None:
        self.say(f"warning: {text}")


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def matmul_gflops(threads: int = 2, n: int = 1024, reps: int = 10) -> float:
    """The best of `reps` float32 n^3 matmuls on `threads` threads, in GFLOP/s: how fast this machine ran
    at that moment (a loaded one shows a lower peak), to read timings beside."""
    import time

    import torch

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
