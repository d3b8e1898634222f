"""Sandbox throughput: per-job overhead and jobs/s of each backend against a plain `subprocess.run`.

    python benchmarks/sandbox_throughput.py [--n 40] [--seed 0] [--skip-attacks]

Measures, in one run and interleaved (so that load on the machine hits every method alike):
- a trivial Python job (`python -c pass`): latency median / p95 per backend and for the peer,
  overhead = backend minus peer (the isolation cost), and jobs/s with `concurrency` = CPU cores;
- a C compile-and-run job (gcc -O2, then run the binary) the same way;
- the build cache: a cold build (miss) against the same build again (hit);
- the adversarial suite: attacks contained / attacks, over the isolating backends (never the host's).
Writes docs/results/sandbox.md and docs/results/sandbox.json (same numbers).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tempering.experiments import conditions, conditions_text
from tempering.sandbox import BuildCache, Job, Sandbox
from tempering.sandbox.attacks import isolated_backends, run_suite
from tempering.sandbox.sandbox import default_root_parent

ROOT = Path(__file__).resolve().parents[1]
C_SRC = '#include <stdio.h>\nint main(void) { long s = 0; for (int i = 0; i < 1000; i++) s += i; printf("%ld\\n", s); return 0; }\n'
C_CMD = ["sh", "-c", "gcc -O2 main.c -o main && ./main"]


def plain_run(cmd: list[str], files: dict[str, str]) -> float:
    """The peer: write the files to a fresh folder (where the sandbox makes its own), `subprocess.run`,
    remove the folder."""
    t0 = time.perf_counter()
    d = tempfile.mkdtemp(dir=default_root_parent())
    for name, text in files.items():
        Path(d, name).write_text(text)
    subprocess.run(cmd, cwd=d, capture_output=True, check=True)
    shutil.rmtree(d)
    return time.perf_counter() - t0


def sandbox_run(sb: Sandbox, cmd: list[str], files: dict[str, str]) -> float:
    t0 = time.perf_counter()
    res = sb.run_sync(Job(cmd=cmd, files=files))
    if not res.ok:
        raise RuntimeError(f"{sb.backend}: {res.status} {res.message} {res.stderr[-300:]}")
    return time.perf_counter() - t0


def p95(xs: list[float]) -> float:
    return statistics.quantiles(xs, n=20, method="inclusive")[-1]


def latency(sandboxes: dict[str, Sandbox], cmd: list[str], files: dict[str, str], n: int, seed: int) -> dict:
    """Per-job wall seconds of every method, interleaved in a shuffled order each round."""
    times: dict[str, list[float]] = {m: [] for m in ["subprocess.run", *sandboxes]}
    rng = random.Random(seed)
    for _ in range(n):
        order = list(times)
        rng.shuffle(order)
        for m in order:
            times[m].append(plain_run(cmd, files) if m == "subprocess.run" else sandbox_run(sandboxes[m], cmd, files))
    return times


async def throughput(sb: Sandbox | None, cmd: list[str], files: dict[str, str], jobs: int, concurrency: int) -> float:
    """Jobs per second with `concurrency` jobs in flight (sb None: plain subprocesses, same pool size)."""
    gate = asyncio.Semaphore(concurrency)

    async def one() -> None:
        if sb is not None:
            res = await sb.run(Job(cmd=cmd, files=files))
            assert res.ok, res.message
            return
        async with gate:
            await asyncio.to_thread(plain_run, cmd, files)

    t0 = time.perf_counter()
    await asyncio.gather(*[one() for _ in range(jobs)])
    return jobs / (time.perf_counter() - t0)


async def cache_speedup(sb: Sandbox, n: int) -> dict:
    """Median seconds of a cold build vs. the same build from the cache."""
    with tempfile.TemporaryDirectory() as d:
        cache = BuildCache(d)
        miss, hit = [], []
        for i in range(n):
            files = {"k.c": C_SRC.replace("1000", str(1000 + i))}
            cmd = ["gcc", "-O2", "-shared", "-fPIC", "k.c", "-o", "k.so"]
            t0 = time.perf_counter()
            first = await cache.build(sb, files, cmd, artifact="k.so")
            t1 = time.perf_counter()
            second = await cache.build(sb, files, cmd, artifact="k.so")
            t2 = time.perf_counter()
            assert first.result.ok and not first.cached and second.cached
            miss.append(t1 - t0)
            hit.append(t2 - t1)
    return {
        "miss_ms_median": 1e3 * statistics.median(miss),
        "hit_ms_median": 1e3 * statistics.median(hit),
        "build_cache_speedup": statistics.median(miss) / statistics.median(hit),
    }


def summarise(times: dict[str, list[float]]) -> dict:
    base_med, base_p95 = statistics.median(times["subprocess.run"]), p95(times["subprocess.run"])
    out = {}
    base_min = min(times["subprocess.run"])
    for m, xs in times.items():
        out[m] = {"median_ms": 1e3 * statistics.median(xs), "p95_ms": 1e3 * p95(xs), "min_ms": 1e3 * min(xs)}
        if m != "subprocess.run":
            out[m]["overhead_ms_median"] = 1e3 * (statistics.median(xs) - base_med)
            out[m]["overhead_ms_p95"] = 1e3 * (p95(xs) - base_p95)
            out[m]["overhead_ms_min"] = 1e3 * (min(xs) - base_min)
    return out


def machine() -> dict:
    bwrap = shutil.which("bwrap")
    return {
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "bwrap": subprocess.run([bwrap, "--version"], capture_output=True, text=True).stdout.strip() if bwrap else "",
        "gcc": subprocess.run(["gcc", "-dumpfullversion"], capture_output=True, text=True).stdout.strip(),
        "user": "root" if os.geteuid() == 0 else "non-root",
    }


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def render(report: dict, command: str) -> str:
    m = report["machine"]
    lines = [
        "# Sandbox throughput",
        "",
        f"Command: `{command}` (seed {report['seed']}, {report['n']} jobs per method, interleaved).",
        f"Machine: {m['platform']}, {m['cpus']} CPUs, Python {m['python']}, {m['bwrap'] or 'no bwrap'}, "
        f"gcc {m['gcc']}, running as {m['user']}. The machine is shared with other work (load average "
        f"{report['load_before']} before, {report['load_after']} after, on {m['cpus']} CPUs; around the timings: "
        f"{conditions_text(report['conditions_start'], report['conditions_after_timings'])}): every process",
        "start waits for a CPU, and a sandboxed job starts several processes, so under load the overhead grows.",
        "Methods are interleaved so that the load hits all of them alike; `min` is the best of the runs, the",
        "closest this machine came to idle.",
        "",
        f"Peer: `subprocess.run` in a fresh folder under {report['root']} (where the sandbox makes its job folders),",
        "no isolation, no limits. Overhead = backend minus peer.",
        "Goal: isolation costs at most 20 ms per job at the median.",
        "",
    ]
    for kind, title in (("python", "Trivial Python job (`python -c pass`)"), ("c", "C compile-and-run job")):
        lines += [
            f"## {title}",
            "",
            "| method | median ms | p95 ms | min ms | overhead median ms | overhead p95 ms | overhead min ms | jobs/s |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for meth, s in report[kind].items():
            over = (
                f"{s['overhead_ms_median']:.1f} | {s['overhead_ms_p95']:.1f} | {s['overhead_ms_min']:.1f}"
                if "overhead_ms_median" in s
                else "- | - | -"
            )
            lines.append(
                f"| {meth} | {s['median_ms']:.1f} | {s['p95_ms']:.1f} | {s['min_ms']:.1f} | {over} "
                f"| {s['jobs_per_s']:.1f} |"
            )
        lines.append("")
    c = report["cache"]
    lines += [
        "## Build cache",
        "",
        f"gcc -O2 -shared of a small C file: cold build {c['miss_ms_median']:.1f} ms, "
        f"cache hit {c['hit_ms_median']:.2f} ms (median): **{c['build_cache_speedup']:.0f}x** faster.",
        "",
    ]
    a = report["attacks"]
    lines += [
        "## Adversarial suite",
        "",
        f"{report['attacks_contained']} of {report['attacks_total']} attacks contained over the isolating "
        "backends (the host's `subprocess` backend is never attacked; see docs/sandbox.md).",
    ]
    for backend, s in a.items():
        bad = {**s["failed"], **s["not_run"]}
        lines.append(
            f"- {backend}: {s['contained']}/{s['total']} contained" + (f"; not contained: {bad}" if bad else "")
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=40, help="jobs per method for the latency tables")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--skip-attacks", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "docs" / "results" / "sandbox"))
    args = ap.parse_args()
    backends = Sandbox.available_backends()
    cores = os.cpu_count() or 1
    sandboxes = {b: Sandbox(backend=b, concurrency=cores) for b in backends}
    report: dict = {
        "seed": args.seed,
        "n": args.n,
        "machine": machine(),
        "root": default_root_parent(),
        "load_before": " ".join(f"{x:.1f}" for x in os.getloadavg()),
        "conditions_start": conditions(),
    }
    py = ([sys.executable, "-c", "pass"], {})
    c = (C_CMD, {"main.c": C_SRC})
    for kind, (cmd, files), n in (("python", py, args.n), ("c", c, max(5, args.n // 3))):
        print(f"latency: {kind}", file=sys.stderr)
        report[kind] = summarise(latency(sandboxes, cmd, files, n, args.seed))
        for meth in report[kind]:
            sb = sandboxes.get(meth)
            report[kind][meth]["jobs_per_s"] = asyncio.run(
                throughput(sb, cmd, files, 4 * n if kind == "python" else n, cores)
            )
    print("build cache", file=sys.stderr)
    report["cache"] = asyncio.run(cache_speedup(sandboxes[backends[0]], 5))
    report["conditions_after_timings"] = conditions()
    report["attacks"] = {}
    if not args.skip_attacks:
        for b in isolated_backends():
            print(f"attacks: {b}", file=sys.stderr)
            report["attacks"][b] = asyncio.run(run_suite(b))
    report["attacks_contained"] = sum(s["contained"] for s in report["attacks"].values())
    report["attacks_total"] = sum(s["total"] for s in report["attacks"].values())
    report["load_after"] = " ".join(f"{x:.1f}" for x in os.getloadavg())
    # headline figures
    iso = list(backends)
    report["overhead_ms_median"] = {b: report["python"][b]["overhead_ms_median"] for b in iso}
    report["overhead_ms_p95"] = {b: report["python"][b]["overhead_ms_p95"] for b in iso}
    report["overhead_ms_min"] = {b: report["python"][b]["overhead_ms_min"] for b in iso}
    report["jobs_per_s"] = {m: report["python"][m]["jobs_per_s"] for m in report["python"]}
    report["build_cache_speedup"] = report["cache"]["build_cache_speedup"]
    command = "python benchmarks/sandbox_throughput.py " + " ".join(sys.argv[1:])
    out = Path(args.out)
    write_atomic(out.with_suffix(".json"), json.dumps(report, indent=2) + "\n")
    write_atomic(out.with_suffix(".md"), render(report, command.strip()))
    print(render(report, command.strip()))


if __name__ == "__main__":
    main()
