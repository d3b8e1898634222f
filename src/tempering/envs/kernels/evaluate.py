"""KernelBench-style evaluation of a folder of submissions against a folder of problems.

Metrics (over all problems; a missing or failing submission counts as not correct):
compile rate (over the submissions that had a kernel source to compile), correctness rate, fast_p for p in (0, 1, 1.2) against eager and against torch.compile
(correct AND speedup > p), geometric-mean speedup over correct submissions and with failures counted
as 1.0. Per-problem rows go to a JSONL file.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import tempfile
import time
from pathlib import Path

from tempering.envs.kernels.problems import Problem
from tempering.envs.kernels.verifier import KernelResult, KernelVerifier

FAST_P = (0.0, 1.0, 1.2)


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def summarize(results: list[KernelResult]) -> dict:
    """The table's numbers (pure function of the per-problem results)."""
    n = len(results)
    if n == 0:
        return {"problems": 0}
    with_source = [r for r in results if r.kernel_source]
    out: dict = {
        "problems": n,
        # over the submissions that had something to compile: a pure-torch answer, a missing file or
        # one without ModelNew is not a compile failure, and is counted apart
        "compile_rate": sum(r.compiled for r in with_source) / len(with_source) if with_source else None,
        "nothing_to_compile": n - len(with_source),
        "correct_rate": sum(r.correct for r in results) / n,
        "flagged": sum(r.flagged for r in results),
        "compile_baselines_refused": sum(bool(r.baseline_note) for r in results),
    }
    for base in ("eager", "compile"):
        sp = [getattr(r, f"speedup_{base}") if r.correct else None for r in results]
        for p in FAST_P:
            out[f"fast_{p:g}_{base}"] = sum(1 for s, r in zip(sp, results) if r.correct and (s or 0.0) > p) / n
        timed = [s for s in sp if s]
        out[f"geomean_{base}_correct"] = geomean(timed)
        out[f"geomean_{base}_all"] = geomean([s if s else 1.0 for s in sp])
        out[f"timed_{base}"] = len(timed)
    statuses: dict[str, int] = {}
    for r in results:
        statuses[r.status] = statuses.get(r.status, 0) + 1
    out["statuses"] = statuses
    return out


def find_submission(problem: Problem, folder: Path) -> Path | None:
    """`<folder>/<name>.py`, or `<folder>/<level>/<name>.py` (KernelBench layout)."""
    for cand in (folder / f"{problem.name}.py", folder / problem.level / f"{problem.name}.py"):
        if cand.is_file():
            return cand
    return None


async def evaluate(
    verifier: KernelVerifier, pairs: list[tuple[Problem, str | None]], progress=None
) -> list[KernelResult]:
    """Verify every (problem, submission text) pair concurrently (the sandbox pool bounds it);
    `progress(result, seconds)` is called as each one finishes."""

    async def one(problem: Problem, text: str | None) -> KernelResult:
        t0 = time.perf_counter()
        if text is None:
            res = KernelResult(problem=problem.name, backend="", status="missing", message="no submission file")
        else:
            try:
                res = await verifier.verify(problem, text)
            except Exception as e:  # a verifier bug must not lose the other results
                res = KernelResult(
                    problem=problem.name, backend="", status="sandbox_error", message=f"{type(e).__name__}: {e}"
                )
        if progress is not None:
            progress(res, time.perf_counter() - t0)
        return res

    return list(await asyncio.gather(*(one(p, t) for p, t in pairs)))


def write_jsonl(path: str | Path, rows: list[dict]) -> None:
    """Atomically write one JSON object per line."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as f:
        for row in rows:
            f.write(json.dumps(row, default=str) + "\n")
    os.replace(tmp, path)


def format_table(summary: dict) -> str:
    """The summary as a plain-text KernelBench-style table."""

    def pct(x):
        return f"{100 * x:5.1f}%" if x is not None else "    -"

    def sp(x):
        return f"{x:.2f}x" if x else "-"

    compiled = (
        f"compile rate        {pct(summary['compile_rate'])}"
        + (
            f"  (of {summary['problems'] - summary['nothing_to_compile']} with a kernel source)"
            if summary.get("nothing_to_compile")
            else ""
        )
        if summary.get("compile_rate") is not None
        else "compile rate        -  (no submission had a kernel source to compile)"
    )
    lines = [
        f"problems            {summary['problems']}",
        compiled,
        f"correctness rate    {pct(summary['correct_rate'])}",
        "",
        f"{'':20}{'vs eager':>12}{'vs compile':>12}",
    ]
    for p in FAST_P:
        lines.append(
            f"{'fast_' + format(p, 'g'):20}{pct(summary[f'fast_{p:g}_eager']):>12}"
            f"{pct(summary[f'fast_{p:g}_compile']):>12}"
        )
    lines.append(
        f"{'geomean (correct)':20}{sp(summary['geomean_eager_correct']):>12}"
        f"{sp(summary['geomean_compile_correct']):>12}"
    )
    lines.append(
        f"{'geomean (fail=1.0)':20}{sp(summary['geomean_eager_all']):>12}{sp(summary['geomean_compile_all']):>12}"
    )
    lines.append(f"flagged (> bound)   {summary['flagged']}")
    if summary.get("compile_baselines_refused"):
        lines.append(f"compile baselines   {summary['compile_baselines_refused']} refused (slower than eager)")
    lines.append("statuses            " + ", ".join(f"{k} {v}" for k, v in sorted(summary["statuses"].items())))
    return "\n".join(lines)
