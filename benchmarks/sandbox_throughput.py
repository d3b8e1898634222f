"""The sandbox's numbers: per-job overhead of each backend, the adversarial suite through every path that
judges, the seccomp allow-list's families.

    python benchmarks/sandbox_throughput.py [--n 40] [--seed 0] [--part timings|attacks|image|all]
    python benchmarks/sandbox_throughput.py --add-round '{"round": 1, "written": 15, "escaped_before_fix": 2}'
    (optional keys: "credited_before_fix", "credited_after_fix", "what")

Timings (inside flock /tmp/tempering-timing.lock, which the script takes itself, with the load and the
matmul peak measured in the same run), interleaved so that load on the machine hits every method alike:
- a trivial Python job (`python -c pass`) and a C compile-and-run job (gcc -O2, then the binary): latency
  median / p95 per backend and for the peer (a plain `subprocess.run`), overhead = backend minus peer,
  jobs/s with `concurrency` = CPU cores;
- a terminal task verified (the csv-revenue sample: its oracle in one job, its tests in their own) and a
  kernel build (nvcc, where a CUDA toolkit is installed) on each isolating backend, against bwrap;
- the build cache: a cold build (miss) against the same build again (hit).
Image (`--part image`, in the same lock): the RAM image's size and a cold build's time, and the latency of
the Python and C jobs on each isolating backend with the host's files (`image="host"`) against the RAM image.
Attacks: every case of `tempering sandbox attacks` on every isolating backend (class -> backend -> path).
Each part rewrites its own keys of docs/results/sandbox.json (the others are kept, `rounds` always: the
hacker-fixer rounds, recorded with --add-round) and docs/results/sandbox.md from the whole.
"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import json
import os
import platform
import random
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tempering.envs.terminal import SAMPLES, read_bundle
from tempering.envs.terminal.workspace import Workspace
from tempering.experiments import conditions, conditions_text
from tempering.sandbox import BuildCache, Job, Limits, Sandbox, seccomp
from tempering.sandbox import image as ram_image
from tempering.sandbox.attacks import PATHS, isolated_backends, matrix, run_suite
from tempering.sandbox.backends import ISOLATED
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


def terminal_task(sandboxes: dict[str, Sandbox], n: int, seed: int) -> dict[str, list[float]]:
    """Seconds to verify the csv-revenue sample (its oracle, then its tests in a job of their own) on each
    isolating backend, interleaved."""
    bundle = read_bundle(SAMPLES / "csv-revenue")
    times: dict[str, list[float]] = {b: [] for b in sandboxes if b in ISOLATED}
    rng = random.Random(seed)

    async def once(sb: Sandbox) -> float:
        ws, step = Workspace.for_bundle(sb, bundle), bundle.steps[0]
        t0 = time.perf_counter()
        run = await ws.solve(step)
        rewards, _ = await ws.run_tests(step)
        if run.exit_code != 0 or rewards.score != 1.0:
            raise RuntimeError(f"{sb.backend}: csv-revenue did not verify: {run.output[-300:]} {rewards.error}")
        return time.perf_counter() - t0

    for _ in range(n):
        order = list(times)
        rng.shuffle(order)
        for b in order:
            times[b].append(asyncio.run(once(sandboxes[b])))
    return times


def kernel_build(sandboxes: dict[str, Sandbox], n: int, seed: int) -> dict[str, list[float]]:
    """Seconds of an nvcc build of a small CUDA kernel (no GPU needed) on each isolating backend, interleaved;
    empty without a CUDA toolkit."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        return {}
    root = str(Path(os.path.realpath(nvcc)).parents[1])
    job = Job(
        cmd=["sh", "-c", f"{root}/bin/nvcc -O2 -c k.cu -o k.o && test -s k.o"],
        files={"k.cu": "__global__ void add(float *x) { x[threadIdx.x] += 1.0f; }\n"},
        ro_binds=[root],
        limits=Limits(wall_s=600, cpu_s=600, memory_mb=8192, disk_mb=1024),
    )
    times: dict[str, list[float]] = {b: [] for b in sandboxes if b in ISOLATED}
    rng = random.Random(seed)
    for _ in range(n):
        order = list(times)
        rng.shuffle(order)
        for b in order:
            t0 = time.perf_counter()
            res = sandboxes[b].run_sync(job)
            if not res.ok:
                raise RuntimeError(f"{b}: the nvcc build failed: {res.status} {res.stderr[-300:]}")
            times[b].append(time.perf_counter() - t0)
    return times


def machine() -> dict:
    bwrap, runsc = shutil.which("bwrap"), shutil.which("runsc")
    return {
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "bwrap": subprocess.run([bwrap, "--version"], capture_output=True, text=True).stdout.strip() if bwrap else "",
        "runsc": subprocess.run([runsc, "--version"], capture_output=True, text=True).stdout.split("\n")[0]
        if runsc
        else "",
        "gcc": subprocess.run(["gcc", "-dumpfullversion"], capture_output=True, text=True).stdout.strip(),
        "user": "root" if os.geteuid() == 0 else "non-root",
    }


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


WORKLOADS = (
    ("python", "trivial Python job (`python -c pass`)"),
    ("c", "C compile-and-run job"),
    ("terminal", "terminal task verified (csv-revenue: oracle job + tests job)"),
    ("kernel_build", "kernel build (nvcc -O2 -c of a small CUDA kernel, no GPU)"),
)


def overhead_table(report: dict) -> dict:
    """{backend: {workload: {median_ms, vs_bwrap_ms}}}: a job's median wall time, and what it costs more than
    on bwrap in the same run."""
    out: dict = {}
    for kind, _ in WORKLOADS:
        rows = report.get(kind, {})
        base = rows.get("bwrap", {}).get("median_ms")
        for b, row in rows.items():
            if b in ISOLATED:
                cell = {"median_ms": round(row["median_ms"], 1)}
                if base is not None:
                    cell["vs_bwrap_ms"] = round(row["median_ms"] - base, 1)
                out.setdefault(b, {})[kind] = cell
    return out


def render(report: dict, command: str) -> str:
    m = report["machine"]
    lines = [
        "# Sandbox: overhead, the adversarial suite, the seccomp allow-list",
        "",
        f"Command: `{command}` (seed {report['seed']}). Machine: {m['platform']}, {m['cpus']} CPUs, Python {m['python']}, "
        f"{m['bwrap'] or 'no bwrap'}, {m.get('runsc') or 'no runsc'}, gcc {m['gcc']}, running as {m['user']}.",
        "",
    ]
    if "python" in report:
        lines += [
            "## Per-job overhead",
            "",
            f"{report['n']} jobs per method, interleaved, inside the timing lock. The machine is shared with other work "
            f"(around the timings: {conditions_text(report['conditions_start'], report['conditions_after_timings'])}):",
            "every process start waits for a CPU, and a sandboxed job starts several processes, so under load the",
            "overhead grows; compare ratios within this run only. `min` is the best of the runs, the closest this machine",
            "came to idle.",
            "",
            f"Peer of the Python and C jobs: `subprocess.run` in a fresh folder under {report['root']} (where the sandbox makes",
            "its job folders), no isolation, no limits; overhead = backend minus peer. The terminal task runs only on",
            "isolating backends: its peer is bwrap.",
            "",
        ]
        for kind, title in WORKLOADS:
            lines += [f"### {title[0].upper() + title[1:]}", ""]
            if kind in ("terminal", "kernel_build"):
                if not report.get(kind):
                    lines += [
                        "Not measured in this run" + (" (no CUDA toolkit here)." if kind == "kernel_build" else "."),
                        "",
                    ]
                    continue
                lines += ["| backend | median ms | p95 ms | min ms | vs bwrap median ms |", "|---|---|---|---|---|"]
                base = report[kind].get("bwrap", {}).get("median_ms")
                for meth, r in report[kind].items():
                    vs = f"{r['median_ms'] - base:.0f}" if base is not None else "-"
                    lines.append(f"| {meth} | {r['median_ms']:.0f} | {r['p95_ms']:.0f} | {r['min_ms']:.0f} | {vs} |")
                lines.append("")
                continue
            lines += [
                "| method | median ms | p95 ms | min ms | overhead median ms | overhead p95 ms | overhead min ms | jobs/s |",
                "|---|---|---|---|---|---|---|---|",
            ]
            for meth, r in report[kind].items():
                over = (
                    f"{r['overhead_ms_median']:.1f} | {r['overhead_ms_p95']:.1f} | {r['overhead_ms_min']:.1f}"
                    if "overhead_ms_median" in r
                    else "- | - | -"
                )
                lines.append(
                    f"| {meth} | {r['median_ms']:.1f} | {r['p95_ms']:.1f} | {r['min_ms']:.1f} | {over} | {r['jobs_per_s']:.1f} |"
                )
            lines.append("")
        c = report["cache"]
        lines += [
            "### Build cache",
            "",
            f"gcc -O2 -shared of a small C file: cold build {c['miss_ms_median']:.1f} ms, "
            f"cache hit {c['hit_ms_median']:.2f} ms (median): {c['build_cache_speedup']:.0f}x faster.",
            "",
        ]
    if "image" in report:
        im = report["image"]
        lines += [
            "## The RAM image",
            "",
            f"What jobs see of the system and the Python installation, copied onto a RAM disk: {im['files']} files, "
            f"{im['bytes'] / 2**20:.0f} MiB (Debian's required packages and {', '.join(im['packages'])} with their "
            f"dependencies, no documentation; /etc; the interpreter without its tests; the virtualenv with "
            f"{', '.join(im['distributions'])}); a cold build took {im['build_s']:.1f} s, once per host and contents.",
        ]
        if "images" in im:
            lines += [
                "",
                "Each path's image (terminal: the csv-revenue sample's; kernel: with torch), its cold build, and a "
                f"fresh process's first job on {im['first_job_backend']} with the image built against the host's "
                "files (median of 3, interleaved):",
                "",
                "| image | files | MiB | cold build s | first job s (host files) | first job s (image) | distributions |",
                "|---|---|---|---|---|---|---|",
            ]
            for name, r in im["images"].items():
                fj = r["first_job_s"]
                lines.append(
                    f"| {name} | {r['files']} | {r['bytes'] / 2**20:.0f} | {r['build_s']:.1f} | {fj['host']:.2f} | "
                    f"{fj['image']:.2f} | {', '.join(r['distributions'])} |"
                )
        lines += [
            "",
            f"Per-job latency with the host's files against the image, interleaved ({im.get('n', report.get('n', '?'))} Python jobs, "
            f"a third as many C compile-and-run jobs per backend; {conditions_text(im['conditions_start'], im['conditions_end'])}):",
            "",
            "| backend | job | host files median ms | RAM image median ms | host files min ms | RAM image min ms |",
            "|---|---|---|---|---|---|",
        ]
        for b, kinds in im["jobs"].items():
            for kind, r in kinds.items():
                h, ram = r["host"], r["ram"]
                lines.append(
                    f"| {b} | {kind} | {h['median_ms']:.0f} | {ram['median_ms']:.0f} | {h['min_ms']:.0f} | {ram['min_ms']:.0f} |"
                )
        lines.append("")
    if "attacks" in report:
        ctl = report["controls"]
        lines += [
            "## The adversarial suite",
            "",
            f"`tempering sandbox attacks` on every isolating backend here, through every path that judges ({report['attacks_when']}). "
            f"Attacks that got out: **{report['escaped']}**. Controls: the right answer passed {ctl['honest_right_passed']}, "
            f"a wrong answer was scored 0 {ctl['honest_wrong_rejected']}. A cell is `contained` when every variant of the "
            "class that ran there was; `not run` names what that backend lacks for it (docs/sandbox.md).",
            "",
        ]
        backends = sorted({b for row in report["attacks"].values() for b in row})
        paths = [p for p in PATHS if any(p in cell for row in report["attacks"].values() for cell in row.values())]
        notes: dict[str, int] = {}

        def cell(text: str) -> str:
            if text.startswith("not run: "):
                n = notes.setdefault(text[len("not run: ") :], len(notes) + 1)
                return f"not run ({n})"
            return text.replace("|", "/")

        for path in paths:
            lines += [f"### {path}", "", "| class | " + " | ".join(backends) + " |", "|---" * (len(backends) + 1) + "|"]
            for cls, row in report["attacks"].items():
                if any(path in row.get(b, {}) for b in backends):
                    lines.append(
                        f"| {cls} | " + " | ".join(cell(row.get(b, {}).get(path, "-")) for b in backends) + " |"
                    )
            lines.append("")
        lines += ["Not run:", ""] + [f"({n}) {why}" for why, n in notes.items()] + [""]
    if "seccomp" in report:
        sc = report["seccomp"]
        lines += ["## The seccomp allow-list", "", "| family | verdict | system calls |", "|---|---|---|"]
        for fam, names in sc["allowed"].items():
            lines.append(f"| {fam} | allowed | {' '.join(names)} |")
        for fam, rule in sc["read_by_argument"].items():
            lines.append(f"| {fam} | by argument | {' '.join(rule)} |")
        for fam, rule in sc["refused"].items():
            lines.append(f"| {fam} | {rule['errno']} (named in the result) | {' '.join(rule['calls'])} |")
        lines += ["", "Any other call: ENOSYS. Calls through a 32-bit or x32 ABI: ENOSYS.", ""]
    lines += ["## Hacker-fixer rounds", ""]
    if report.get("rounds"):
        lines += [
            "Escaped: crossed the sandbox (another job, the host). Credited: a wrong solution the judge scored "
            "right without leaving its job; after the fix, the same attacks rerun on the fixed code.",
            "",
            "| round | attacks written | escaped before the fix | credited before the fix | credited after the fix | what |",
            "|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {r.get('round', i + 1)} | {r.get('written', '-')} | {r.get('escaped_before_fix', '-')} | "
            f"{r.get('credited_before_fix', '-')} | {r.get('credited_after_fix', '-')} | {r.get('what', '')} |"
            for i, r in enumerate(report["rounds"])
        ]
    else:
        lines.append("None recorded yet (`--add-round` records one).")
    return "\n".join(lines) + "\n"


def seccomp_families() -> dict:
    allowed, by_argument, refused = {}, {}, {}
    for fam, (verdict, names) in seccomp.FAMILIES.items():
        if verdict == seccomp.ALLOWED:
            allowed[fam] = list(names)
        elif verdict.isupper():
            refused[fam] = {"errno": verdict, "calls": list(names)}
        else:
            by_argument[fam] = list(names)
    return {"allowed": allowed, "read_by_argument": by_argument, "refused": refused}


def timings(report: dict, n: int, seed: int) -> None:
    backends = Sandbox.available_backends()
    cores = os.cpu_count() or 1
    sandboxes = {b: Sandbox(backend=b, concurrency=cores) for b in backends}
    report.update(n=n, root=default_root_parent(), conditions_start=conditions())
    py = ([sys.executable, "-c", "pass"], {})
    c = (C_CMD, {"main.c": C_SRC})
    for kind, (cmd, files), count in (("python", py, n), ("c", c, max(5, n // 3))):
        print(f"latency: {kind}", file=sys.stderr)
        report[kind] = summarise(latency(sandboxes, cmd, files, count, seed))
        for meth in report[kind]:
            report[kind][meth]["jobs_per_s"] = asyncio.run(
                throughput(sandboxes.get(meth), cmd, files, 4 * count if kind == "python" else count, cores)
            )
    print("latency: terminal", file=sys.stderr)
    term = terminal_task(sandboxes, max(3, n // 8), seed)
    stats = lambda xs: {"median_ms": 1e3 * statistics.median(xs), "p95_ms": 1e3 * p95(xs), "min_ms": 1e3 * min(xs)}
    report["terminal"] = {b: stats(xs) for b, xs in term.items()}
    print("latency: kernel build", file=sys.stderr)
    report["kernel_build"] = {b: stats(xs) for b, xs in kernel_build(sandboxes, 3, seed).items()}
    print("build cache", file=sys.stderr)
    report["cache"] = asyncio.run(cache_speedup(sandboxes[backends[0]], 5))
    report["conditions_after_timings"] = conditions()
    report["overhead_ms"] = overhead_table(report)
    report["build_cache_speedup"] = report["cache"]["build_cache_speedup"]


FIRST_JOB = """import json, sys, time
t0 = time.perf_counter()
from tempering.sandbox import Job, Sandbox
from tempering.sandbox.image import Spec
spec = json.loads(sys.argv[2])
sb = Sandbox(backend=sys.argv[1], image=Spec(*map(tuple, spec)) if spec else "host")
res = sb.run_sync(Job(cmd=[sys.executable, "-c", "pass"]))
assert res.status == "ok", res.stderr
print(time.perf_counter() - t0)
"""
"""A fresh process's first job on a sandbox showing an image already built (or the host's files): the
image's lookup (its hash of the package database, /etc and the virtualenv), its lock, and the job."""


def image_specs() -> dict[str, ram_image.Spec]:
    """The images the paths use: the default (code judge, job API), a terminal task's (csv-revenue), kernel jobs'."""
    from tempering.envs.kernels.verifier import KERNEL_IMAGE
    from tempering.envs.terminal.image import image_spec, local_image

    bundle = read_bundle(SAMPLES / "csv-revenue")
    return {"default": ram_image.Spec(), "terminal": image_spec(bundle, local_image(bundle)), "kernel": KERNEL_IMAGE}


def image(report: dict, n: int, seed: int) -> None:
    """The RAM images: each one's cold build (in a folder of its own, removed after) and a fresh process's
    first job on it against the host's files (interleaved, on the first isolating backend); per-job latency
    with and without the default image, interleaved per backend."""
    start = conditions()
    out: dict = {"images": {}, "jobs": {}, "n": n}
    first = isolated_backends()[0]
    for name, spec in image_specs().items():
        print(f"image: build {name}", file=sys.stderr)
        with tempfile.TemporaryDirectory(dir="/dev/shm") as parent:
            t0 = time.perf_counter()
            path = ram_image.build.__wrapped__(parent, spec)
            build_s = time.perf_counter() - t0
            about = json.loads(Path(path, ".tempering-image.json").read_text())
        row = {k: about[k] for k in ("files", "bytes", "packages", "distributions")} | {"build_s": build_s}
        Sandbox(backend=first, image=spec)  # built once where jobs find it, before the first-job timings
        starts: dict[str, list[float]] = {"host": [], "image": []}
        for _ in range(3):
            for which, arg in (("host", []), ("image", [list(spec.packages), list(spec.distributions)])):
                got = subprocess.run(
                    [sys.executable, "-c", FIRST_JOB, first, json.dumps(arg)], capture_output=True, text=True
                )
                if got.returncode != 0:
                    raise SystemExit(f"first job on {name} ({which}) failed: {got.stderr[-500:]}")
                starts[which].append(float(got.stdout.split()[-1]))
        row["first_job_s"] = {k: statistics.median(v) for k, v in starts.items()}
        out["images"][name] = row
    out["first_job_backend"] = first
    default = out["images"]["default"]
    out |= {k: default[k] for k in ("files", "bytes", "build_s", "packages", "distributions")}
    py = ([sys.executable, "-c", "pass"], {})
    for b in isolated_backends():
        sandboxes = {img: Sandbox(backend=b, image=img) for img in ("host", "ram")}
        for kind, (cmd, files), count in (("python", py, n), ("c", (C_CMD, {"main.c": C_SRC}), max(5, n // 3))):
            print(f"image: {b} {kind}", file=sys.stderr)
            times = latency(sandboxes, cmd, files, count, seed)
            out["jobs"].setdefault(b, {})[kind] = {
                m: {"median_ms": 1e3 * statistics.median(xs), "min_ms": 1e3 * min(xs)}
                for m, xs in times.items()
                if m != "subprocess.run"
            }
    out["conditions_start"], out["conditions_end"] = start, conditions()
    report["image"] = out


def attack_runs(report: dict, old: dict, classes: list[str]) -> None:
    """The suite on every isolating backend; with `classes`, only those are run again and their rows
    replace the stored run's (`old`), the rest kept as measured."""
    runs = {}
    for b in isolated_backends():
        print(f"attacks: {b}", file=sys.stderr)
        s = asyncio.run(run_suite(b, only=classes))
        if classes:
            if b not in old.get("attack_runs", {}):
                raise SystemExit(f"--classes reruns classes of a stored run, and none is stored for {b}")
            rows = [r for r in old["attack_runs"][b]["cases"] if r["class"] not in classes] + s["cases"]
            ids = {f"{r['path']} / {r['class']} / {r['name']}": r["verdict"] for r in rows}
            not_run = {k: v.removeprefix("not run: ") for k, v in ids.items() if v.startswith("not run")}
            failed = {k: v for k, v in ids.items() if v != "contained" and k not in not_run}
            s = {"total": len(rows), "contained": len(rows) - len(failed) - len(not_run), "failed": failed,
                 "not_run": not_run, "cases": rows}  # fmt: skip
        runs[b] = s
    report["attack_runs"] = runs
    report.update(matrix(runs))
    report["attacks_when"] = time.strftime("%Y-%m-%d") + ", load " + " ".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=40, help="jobs per method for the latency tables")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--part", choices=["all", "timings", "attacks", "image"], default="all")
    ap.add_argument(
        "--add-round", help='record a hacker-fixer round: {"round": k, "written": n, "escaped_before_fix": m}'
    )
    ap.add_argument("--out", default=str(ROOT / "docs" / "results" / "sandbox"))
    ap.add_argument("--classes", nargs="+", default=[], help="attack classes to run again (the rest kept as stored)")
    args = ap.parse_args()
    out = Path(args.out)
    old = json.loads(out.with_suffix(".json").read_text()) if out.with_suffix(".json").exists() else {}
    report: dict = {k: old[k] for k in ("rounds", "command") if k in old}
    report.setdefault("rounds", [])
    if args.add_round:
        report = old | {"rounds": report["rounds"] + [json.loads(args.add_round)]}
    else:
        report |= {"seed": args.seed, "machine": machine(), "seccomp": seccomp_families()}
        timed = (
            "n",
            "root",
            "python",
            "c",
            "terminal",
            "cache",
            "conditions_start",
            "conditions_after_timings",
            "kernel_build",
            "overhead_ms",
            "build_cache_speedup",
        )
        attacked = ("attacks", "attack_runs", "escaped", "controls", "attacks_when")
        keep = {
            "timings": attacked + ("image",),
            "image": timed + attacked,
            "attacks": timed + ("image",),
            "all": (),
        }[args.part]
        report |= {k: old[k] for k in keep if k in old}
        if args.part in ("all", "timings", "image"):
            with open("/tmp/tempering-timing.lock", "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)  # no two timing runs on this machine overlap
                if args.part != "image":
                    timings(report, args.n, args.seed)
                if args.part in ("all", "image"):
                    image(report, args.n, args.seed)
        if args.part in ("all", "attacks"):
            attack_runs(report, old, args.classes)
        command = " ".join(["python benchmarks/sandbox_throughput.py", *map(shlex.quote, sys.argv[1:])]).strip()
        report["command"] = (
            f"{old['command']}, then {command}"
            if (args.classes or args.part == "image") and "command" in old
            else command
        )
    write_atomic(out.with_suffix(".json"), json.dumps(report, indent=2) + "\n")
    text = render(report, report.get("command", "python benchmarks/sandbox_throughput.py"))
    write_atomic(out.with_suffix(".md"), text)
    print(text)


if __name__ == "__main__":
    main()
