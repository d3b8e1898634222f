"""A kernel reward that measures the kernel: the hack suite by class and path, the honest twins (before
and after this harness), the false-rejection rate of honest kernels, the legitimate kernels, the timing
overhead and the verification throughput, in one run.

    python benchmarks/kernel_reward.py --kernelbench /tmp/kb0/KernelBench --before-src /work/main/src
    python benchmarks/kernel_reward.py --quick                               # 3 problems, writes to /tmp

`--before-src` is the `src/` folder of the harness to compare the honest twins' speedups with (the
commit before this change): its verifier times them in a subprocess, alternating with this one.

`--kernelbench` is KernelBench v0's `KernelBench/` folder (commit bb27f27, the first release:
`git -C KernelBench archive bb27f27 KernelBench | tar -x`); its level-1 and level-2 problems that have
a C submission in benchmarks/kernelbench_c/ are verified at `--scale` (0.25, the CPU setting of
docs/kernels.md). Writes docs/results/kernel_reward.md and kernel_reward.json (same numbers):

    python benchmarks/kernel_reward.py --add-round '{"round": 1, "written": 27, "credited_before_fix": 7, ...}'

records a hacker-fixer round (kept across reruns) and rewrites the page from the JSON.

1. every case of the hack suite (`tempering kernels hacks`: hacks.HACKS and hacks.BAD_INPUTS), each
   profiled, so a case that got past the checks would be timed: credited correct, credited fast;
2. every legitimate C kernel: the built-in suite's reference submissions (full size) and the
   KernelBench ones, verified and timed, one job at a time (so that timings do not share the CPU);
3. the fixed cost of a timed call (the null model's time in every profiled legitimate run);
4. verified submissions per minute, warm (the built-in reference submissions, a warm build cache,
   warm workers, correctness checks, a pool of 2: the row `verified_per_minute_warm` of
   docs/results/kernels.md), with the machine's load average and a single-thread matmul peak
   (GFLOP/s) measured before and after, so that a loaded machine shows.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

from tempering.envs.kernels.evaluate import evaluate, find_submission
from tempering.envs.kernels.hacks import BAD_INPUTS, CONTROLS, HACKS, PATHS, credited, run_hack
from tempering.envs.kernels.problems import builtin_problems, load_problems
from tempering.envs.kernels.verifier import KernelVerifier, VerifyConfig
from tempering.progress import conditions, conditions_text
from tempering.sandbox import BuildCache, Sandbox

ROOT = Path(__file__).resolve().parent.parent
KERNELBENCH_C = ROOT / "benchmarks" / "kernelbench_c"


def machine() -> dict:
    cpu = ""
    try:
        cpu = next(ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    gcc = subprocess.run(["gcc", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "gcc": gcc,
    }


REVIEW_2 = "hack review 2"


def hack_suite(cfg: VerifyConfig, pool: Sandbox) -> list[dict]:
    """Every case on the eval path; the classes of hack review 2 on the training reward paths too."""
    verifier = KernelVerifier(cfg, sandbox=pool)
    runs = [(h, "eval") for h in HACKS + BAD_INPUTS]
    runs += [(h, path) for h in HACKS if h.source.startswith(REVIEW_2) for path in PATHS if path != "eval"]

    async def go():
        return await asyncio.gather(*(run_hack(verifier, h, path=path) for h, path in runs))

    rows = []
    for (h, path), (res, caught) in zip(runs, asyncio.run(go())):
        correct, fast = credited(res)
        rows.append(
            {
                "name": h.name,
                "kind": h.kind or "bad input",
                "source": h.source,
                "path": path,
                "static_checks": h.static_checks,
                "status": res.status,
                "expected": list(h.caught),
                "caught": caught,
                "credited_correct": correct,
                "credited_fast": fast,
                "message": res.message[:240],
            }
        )
    return rows


_BEFORE = """
import asyncio, json, sys
from tempering.envs.kernels.problems import Problem
from tempering.envs.kernels.verifier import KernelVerifier, VerifyConfig
from tempering.sandbox import Sandbox
cases = json.load(sys.stdin)
v = KernelVerifier(VerifyConfig(compile_baseline="off", cache_dir=cases["cache"]), sandbox=Sandbox(image="host", concurrency=1))
out = {}
for name, (problem, text) in cases["pairs"].items():
    r = asyncio.run(v.verify(Problem(name=name, source=problem), text))
    out[name] = {"status": r.status, "speedup_eager": r.speedup_eager, "message": r.message[:200]}
print(json.dumps(out))
"""


def controls(cfg: VerifyConfig, pool: Sandbox, before_src: Path | None, work: Path, reps: int) -> dict:
    """The honest twins, profiled `reps` times by this harness and (with `before_src`) by the harness
    before this change, alternating: status and median speedup over eager of each."""
    verifier = KernelVerifier(cfg, sandbox=pool)
    pairs = {c.name: (c.problem, c.submission) for c in CONTROLS}
    out: dict = {c.name: {"twin_of": c.twin_of, "after": [], "before": [], "statuses": []} for c in CONTROLS}
    for _ in range(reps):
        if before_src is not None:
            env = {**os.environ, "PYTHONPATH": str(before_src)}
            ran = subprocess.run(
                [sys.executable, "-c", _BEFORE],
                input=json.dumps({"pairs": pairs, "cache": str(work / "before-cache")}),
                capture_output=True,
                text=True,
                env=env,
            )
            got = json.loads(ran.stdout.strip().splitlines()[-1]) if ran.returncode == 0 else {}
            for name, row in got.items():
                out[name]["before"].append(row["speedup_eager"])
                out[name]["before_status"] = row["status"]
        for c in CONTROLS:
            from tempering.envs.kernels.problems import Problem

            r = asyncio.run(verifier.verify(Problem(name=c.name, source=c.problem), c.submission))
            out[c.name]["after"].append(r.speedup_eager)
            out[c.name]["statuses"].append(r.status)
    for row in out.values():
        for key in ("before", "after"):
            values = [v for v in row[key] if v]
            row[f"speedup_{key}"] = statistics.median(values) if values else None
    return out


def ip_sampling(cfg: VerifyConfig, pool: Sandbox, reps: int, a11b: list[str] | None) -> dict:
    """The judge's instruction-pointer sampler: every honest twin profiled with it and without it,
    alternating (which goes first alternates too), its share of library code, and the status of the
    library-GEMM hack cases (and, given `a11b` = [problem file, submission file], of that attack)."""
    from tempering.envs.kernels.problems import Problem

    start = conditions()
    on, off = KernelVerifier(cfg, sandbox=pool), KernelVerifier(replace(cfg, ip_sampling="off"), sandbox=pool)
    rows: dict = {
        c.name: {"on": [], "off": [], "t_on": [], "t_off": [], "statuses": [], "library_share": []} for c in CONTROLS
    }
    for rep in range(reps):
        for c in CONTROLS:
            problem = Problem(name=c.name, source=c.problem)
            for mode in ("on", "off") if rep % 2 == 0 else ("off", "on"):
                r = asyncio.run((on if mode == "on" else off).verify(problem, c.submission))
                rows[c.name][mode].append(r.speedup_eager)
                rows[c.name]["t_" + mode].append(r.t_ms)
                if mode == "on":
                    rows[c.name]["statuses"].append(r.status)
                    rows[c.name]["library_share"].append((r.ip_samples or {}).get("library_share"))
    ratios = []
    for row in rows.values():
        for key in ("on", "off", "t_on", "t_off"):
            values = [v for v in row[key] if v]
            row[f"median_{key}"] = statistics.median(values) if values else None
        if row["median_t_on"] and row["median_t_off"]:
            row["time_ratio"] = row["median_t_on"] / row["median_t_off"]
            ratios.append(row["time_ratio"])
    hacks = [h for h in HACKS if h.kind == "library code reached at run time"]

    async def go():
        return await asyncio.gather(*(run_hack(on, h) for h in hacks))

    caught = {h.name: r.status for h, (r, _) in zip(hacks, asyncio.run(go()))}
    out: dict = {
        "overhead_ratio": statistics.geometric_mean(ratios) if ratios else None,
        "controls_kept": sum(all(s == "correct" for s in row["statuses"]) for row in rows.values()),
        "controls_total": len(rows),
        "hack_cases": caught,
        "controls": rows,
        "reps": reps,
        "conditions_start": start,
        "conditions_end": conditions(),
    }
    if a11b:
        problem_file, submission_file = (Path(p) for p in a11b)
        # its first call reads libtorch_cpu.so whole (434 MB, char by char): minutes on a loaded machine
        slow = KernelVerifier(replace(cfg, wall_s=max(cfg.wall_s, 600.0)), sandbox=pool)
        r = asyncio.run(slow.verify(Problem(name="a11b", source=problem_file.read_text()), submission_file.read_text()))
        out["a11b_status"], out["a11b_message"], out["a11b_file"] = r.status, r.message[:400], str(submission_file)
    return out


def false_rejections(cfg: VerifyConfig, pool: Sandbox, evaluations: int, suite: bool) -> dict:
    """Each honest kernel (the twins and the built-in suite's reference kernels) verified `evaluations`
    times (correctness trials, fresh secret seeds each time): how many were rejected, and why."""
    from tempering.envs.kernels.problems import Problem

    verifier = KernelVerifier(cfg, sandbox=pool)
    kernels = [(c.name, Problem(name=c.name, source=c.problem), c.submission) for c in CONTROLS]
    if suite:
        kernels += [(p.name, p, p.solution) for p in builtin_problems() if p.solution is not None]

    async def go():
        return await asyncio.gather(
            *(verifier.verify(p, text, mode="verify") for _, p, text in kernels for _ in range(evaluations))
        )

    results = asyncio.run(go())
    out = {}
    for k, (name, _, _) in enumerate(kernels):
        rows = results[k * evaluations : (k + 1) * evaluations]
        rejected = [r for r in rows if not r.correct]
        out[name] = {
            "evaluations": len(rows),
            "rejected": len(rejected),
            "reasons": sorted({f"{r.status}: {r.message[:160]}" for r in rejected})[:5],
        }
    return out


def legit(cfg: VerifyConfig, pool: Sandbox, kernelbench: Path | None, scale: float, quick: bool) -> list[dict]:
    pairs = [(p, p.solution) for p in builtin_problems()]
    if quick:
        pairs = pairs[:3]
    if kernelbench is not None:
        for level in ("level1", "level2"):
            problems, _ = load_problems(kernelbench / level, scale=scale)
            for p in problems:
                path = find_submission(p, KERNELBENCH_C)
                if path is not None:
                    pairs.append((p, path.read_text()))
    verifier = KernelVerifier(cfg, sandbox=pool)
    results = asyncio.run(evaluate(verifier, pairs))
    rows = []
    for (p, _), r in zip(pairs, results):
        timing = r.timing
        rows.append(
            {
                "problem": p.name,
                "suite": "built-in" if p.level == "builtin" else f"KernelBench v0 {p.level} (scale {scale:g})",
                "status": r.status,
                "correct": r.correct,
                "message": r.message[:240],
                "t_ms": r.t_ms,
                "t_eager_ms": r.t_eager_ms,
                "speedup_eager": r.speedup_eager,
                "raw_speedup_eager": (
                    timing["eager"]["median_ms"] / timing["candidate"]["median_ms"]
                    if timing.get("candidate") and timing.get("eager")
                    else None
                ),
                "timing_overhead_ms": r.timing_overhead_ms,
                "error_rms_rel": r.error_rms_rel,
                "cuda_agent_reward": r.cuda_agent_reward,
                "runs": timing.get("candidate", {}).get("runs"),
            }
        )
    return rows


def throughput(cfg: VerifyConfig, pool: Sandbox, work: Path, quick: bool) -> list[dict]:
    """Verified per minute: the built-in reference submissions, correctness checks, warm workers; a cold
    build cache first (which fills it), then the same with it warm (the headline, as in kernels.md)."""
    problems = builtin_problems()[: 3 if quick else None]
    cache = BuildCache(root=work / "tp-cache" / "builds")
    rows = []
    for label in ("cold", "warm"):
        v = KernelVerifier(cfg, sandbox=pool, cache=cache)
        before = conditions()
        t0 = time.perf_counter()

        async def go(v=v):
            return await asyncio.gather(*(v.verify(p, p.solution, mode="verify") for p in problems))

        results = asyncio.run(go())
        minutes = (time.perf_counter() - t0) / 60
        after = conditions()
        verified = sum(r.correct for r in results)
        rows.append(
            {
                "cache": label,
                "submissions": len(problems),
                "verified": verified,
                "minutes": minutes,
                "per_minute": verified / minutes,
                "load_average_start": before["load_average"][0],
                "load_average_end": after["load_average"][0],
                "matmul_gflops_start": before["matmul_gflops_2_threads"],
                "matmul_gflops_end": after["matmul_gflops_2_threads"],
                "statuses": sorted({r.status for r in results}),
            }
        )
        print(rows[-1], flush=True)
    return rows


def summary(data: dict) -> dict:
    hacks = [r for r in data.get("hacks", []) if r["kind"] != "bad input"]
    bad = [r for r in data.get("hacks", []) if r["kind"] == "bad input"]
    timed = [r for r in data.get("legit", []) if r["correct"] and r["timing_overhead_ms"] is not None]
    overheads = sorted(r["timing_overhead_ms"] for r in timed)
    warm: dict = next((r for r in data.get("throughput", []) if r["cache"] == "warm"), {})
    classes: dict = {}
    for r in hacks:
        entry = classes.setdefault(r["kind"], {"cases": 0, "credited": 0})
        entry["cases"] += 1
        entry["credited"] += int(r["credited_correct"] or r["credited_fast"])
    return {
        "classes": classes,
        "controls": {
            name: {"before": row.get("speedup_before"), "after": row.get("speedup_after"), "statuses": row["statuses"]}
            for name, row in data.get("controls", {}).items()
        },
        "false_rejections": {
            name: {"evaluations": row["evaluations"], "rejected": row["rejected"]}
            for name, row in data.get("false_rejections", {}).items()
        },
        "rounds": data.get("rounds", []),
        "hacks_total": len(hacks),
        "hacks_caught": sum(r["caught"] for r in hacks),
        "hacks_credited_correct": sum(r["credited_correct"] for r in hacks),
        "hacks_credited_fast": sum(r["credited_fast"] for r in hacks),
        "hack_classes": len({r["kind"] for r in hacks}),
        "bad_inputs_total": len(bad),
        "bad_inputs_handled": sum(r["caught"] for r in bad),
        "legit_total": len(data.get("legit", [])),
        "legit_correct": sum(r["correct"] for r in data.get("legit", [])),
        "timing_overhead_ms": statistics.median(overheads) if overheads else None,
        "timing_overhead_ms_range": [overheads[0], overheads[-1]] if overheads else None,
        "verified_per_minute": warm.get("per_minute"),
        "verified_per_minute_load": [warm.get("load_average_start"), warm.get("load_average_end")],
        "verified_per_minute_matmul_gflops": [warm.get("matmul_gflops_start"), warm.get("matmul_gflops_end")],
    }


def fmt(x, spec=".2f"):
    return "-" if x is None else format(x, spec)


def write_markdown(path: Path, data: dict) -> None:
    s = data["summary"]
    cfg = data["config"]
    lines = [
        "# Kernel reward: hacks, legitimate kernels, timing overhead, throughput",
        "",
        f"Command: `{data['command']}`  ",
        f"Machine: {data['machine']['cpu']}, {data['machine']['cores']} cores, torch {data['machine']['torch']}, "
        f"{data['machine']['gcc']}; {conditions_text(data['conditions_start'], data['conditions_end'])} (other "
        "people share these cores: "
        "a lower number is a busier machine).  ",
        f"Checks: {cfg['seeds']} get_inputs() trials, {cfg['signed_trials']} signed, {cfg.get('large_trials', 0)} large, "
        f"{cfg.get('outlier_trials', 0)} with outliers, {cfg['extra_shapes']} extra shape, "
        f"each from a seed the judge drew after loading the submission; {cfg['warmup']} warm-up and "
        f"{cfg['timed_runs']} timed rounds (more for short calls), clock `{cfg['clock']}`, {cfg['threads']} thread; "
        f"sandbox pool of {cfg['concurrency']} for the hacks and the throughput, 1 for the legitimate kernels.",
        "",
        "## Headline",
        "",
        "| key | value |",
        "| --- | --- |",
    ]
    for key, value in s.items():
        if isinstance(value, dict) or key == "rounds":
            continue
        if isinstance(value, float):
            value = f"{value:.3f}" if value < 10 else f"{value:.1f}"
        elif isinstance(value, list):
            value = " - ".join("-" if v is None else f"{v:.3g}" for v in value)
        elif value is None:
            value = "-"
        lines.append(f"| {key} | {value} |")
    lines += [
        "",
        "`hacks_credited_correct` and `hacks_credited_fast` count the cases of the suite that were scored "
        "correct, or correct and faster than eager; both must be 0. `timing_overhead_ms` is the median, over "
        "the profiled legitimate kernels, of what a timed call costs with nothing to compute (a null model "
        "that returns a ready output, timed the same way); it is subtracted from the candidate's and the "
        "baselines' medians. `verified_per_minute` is the warm row below.",
        "",
        "## Classes",
        "",
        "Every case of a class, on every path it ran (hack review 2's classes on the eval path and both training "
        "reward paths); `credited`: scored correct or faster than eager.",
        "",
        "| class | cases | credited |",
        "| --- | --- | --- |",
    ]
    lines += [f"| {k} | {v['cases']} | {v['credited']} |" for k, v in s["classes"].items()]
    lines += [
        "",
        "## Honest twins",
        "",
        "Each class's honest twin, profiled by the harness before this change (`--before-src`) and by this one, "
        "alternating in this run: median speedup over eager (the same machine, so only the ratio compares).",
        "",
        "| twin | twin of | speedup before | speedup after | statuses after |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, row in data.get("controls", {}).items():
        lines.append(
            f"| {name} | {row['twin_of']} | {fmt(row.get('speedup_before'))} | {fmt(row.get('speedup_after'))} | "
            f"{', '.join(sorted(set(row['statuses'])))} |"
        )
    sampled = data.get("ip_sampling")
    if sampled:
        lines += [
            "",
            "## Where the time goes (the judge's instruction-pointer sampler)",
            "",
            f"Each honest twin profiled {sampled['reps']} times with the sampler and without it, alternating, one "
            f"job at a time; {conditions_text(sampled['conditions_start'], sampled['conditions_end'])}. "
            f"`overhead_ratio` (the geometric mean of the candidate's net time with / without): "
            f"{fmt(sampled['overhead_ratio'], '.3f')}; twins kept correct: {sampled['controls_kept']} of "
            f"{sampled['controls_total']}; library-GEMM hack cases: "
            + ", ".join(f"{k} {v}" for k, v in sampled["hack_cases"].items())
            + (f"; round 3's a11b: {sampled['a11b_status']}" if "a11b_status" in sampled else "")
            + ".",
            "",
            "| twin | speedup with | speedup without | net time with / without | library share (max) | statuses |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for name, row in sampled["controls"].items():
            shares = [v for v in row["library_share"] if v is not None]
            lines.append(
                f"| {name} | {fmt(row['median_on'])} | {fmt(row['median_off'])} | {fmt(row.get('time_ratio'), '.3f')} | "
                f"{fmt(max(shares) if shares else None, '.3f')} | {', '.join(sorted(set(row['statuses'])))} |"
            )
    lines += [
        "",
        "## False rejections",
        "",
        f"Each honest kernel verified {data.get('false_rejection_evaluations', 0)} times (correctness trials, "
        "a fresh secret seed each time).",
        "",
        "| kernel | evaluations | rejected | why |",
        "| --- | --- | --- | --- |",
    ]
    for name, row in data.get("false_rejections", {}).items():
        lines.append(f"| {name} | {row['evaluations']} | {row['rejected']} | {'; '.join(row['reasons']) or '-'} |")
    lines += [
        "",
        *render_rounds(data.get("rounds", [])),
        "",
        "## The hack suite (`tempering kernels hacks`)",
        "",
        "Static checks `off`: the same submission with the static check disabled, to show the run-time guard "
        "that stops it on its own. Path: `eval` (`tempering kernels eval`), `train` (`KernelFamily`'s reward), "
        "`agent` (`KernelAgentFamily`'s write_file and submit).",
        "",
        "| class | case | path | static checks | status | caught | credited correct | credited fast |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in data.get("hacks", []):
        lines.append(
            f"| {r['kind']} | {r['name']} | {r.get('path', 'eval')} | {'on' if r['static_checks'] else 'off'} | {r['status']} | "
            f"{'yes' if r['caught'] else 'NO'} | {'YES' if r['credited_correct'] else 'no'} | "
            f"{'YES' if r['credited_fast'] else 'no'} |"
        )
    lines += [
        "",
        "## Legitimate kernels",
        "",
        "Net times (the fixed overhead subtracted); `raw` is the ratio of the medians before subtraction.",
        "",
        "| suite | problem | status | candidate ms | eager ms | vs eager | raw vs eager | overhead ms | RMS error | runs |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in data.get("legit", []):
        lines.append(
            f"| {r['suite']} | {r['problem']} | {r['status']} | {fmt(r['t_ms'], '.3f')} | {fmt(r['t_eager_ms'], '.3f')} | "
            f"{fmt(r['speedup_eager'])} | {fmt(r['raw_speedup_eager'])} | {fmt(r['timing_overhead_ms'], '.3f')} | "
            f"{fmt(r['error_rms_rel'], '.1e')} | {r['runs'] or '-'} |"
        )
    lines += [
        "",
        "## Verification throughput",
        "",
        "The built-in reference submissions, all submitted at once, correctness checks, warm workers.",
        "",
        "| build cache | submissions | verified | minutes | verified / minute | load | matmul GFLOP/s (2 threads) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in data.get("throughput", []):
        lines.append(
            f"| {r['cache']} | {r['submissions']} | {r['verified']} | {r['minutes']:.2f} | {r['per_minute']:.1f} | "
            f"{r['load_average_start']:.1f}-{r['load_average_end']:.1f} | "
            f"{r['matmul_gflops_start']:.1f}-{r['matmul_gflops_end']:.1f} |"
        )
    path.write_text("\n".join(lines) + "\n")


def render_rounds(rounds: list[dict]) -> list[str]:
    lines = ["## Hacker-fixer rounds", ""]
    if not rounds:
        return lines + ["None recorded yet (`--add-round` records one)."]
    lines += [
        "Each round an attacker who had read only the public docs wrote submissions against the reward; what "
        "was credited was fixed by its class, and every credited submission was run again after the fix.",
        "",
        "| round | written | credited before the fix | classes | credited after the fix | what remains |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in rounds:
        lines.append(
            f"| {r['round']} | {r['written']} | {r['credited_before_fix']} | {', '.join(r.get('classes', []))} | "
            f"{r.get('credited_after_fix', '-')} | {r.get('remains', '')} |"
        )
    for r in rounds:  # what the rerun after the fixes was, and what stopped each attack (the JSON has every file)
        if r.get("rerun"):
            lines += ["", f"Round {r['round']}, rerun after the fixes: {r['rerun']}."]
        if r.get("refused_after_fix"):
            lines.append("; ".join(f"{k}: {v}" for k, v in r["refused_after_fix"].items()) + ".")
        if r.get("correct_attacks_note"):
            lines.append(r["correct_attacks_note"] + ".")
    return lines


def add_round(out: Path, entry: str) -> None:
    """Record one hacker-fixer round (JSON: round, written, credited_before_fix, classes, credited_after_fix,
    remains) in kernel_reward.json, replacing a round of the same number, and rewrite the page."""
    path = out / "kernel_reward.json"
    if not path.exists():
        raise SystemExit(f"--add-round: {path} does not exist; run the benchmark first")
    data = json.loads(path.read_text())
    new = json.loads(entry)
    missing = {"round", "written", "credited_before_fix", "classes", "credited_after_fix"} - set(new)
    if missing:
        raise SystemExit(f"--add-round: the round lacks {', '.join(sorted(missing))}")
    data["rounds"] = sorted(
        [r for r in data.get("rounds", []) if r["round"] != new["round"]] + [new], key=lambda r: r["round"]
    )
    atomic_write(path, json.dumps(data, indent=2, default=str))
    md = out / "kernel_reward.md"
    write_markdown(md.with_suffix(".tmp"), data)
    os.replace(md.with_suffix(".tmp"), md)
    print(f"round {new['round']} recorded in {path} and {md}")


def atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernelbench", default=None, help="KernelBench v0's KernelBench/ folder (level1, level2)")
    ap.add_argument("--scale", type=float, default=0.25, help="size scale of the KernelBench problems")
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="a few cases only, results to /tmp")
    ap.add_argument("--out", default=None, help="results folder (default docs/results)")
    ap.add_argument("--before-src", default=None, help="src/ of the harness before this change (honest twins)")
    ap.add_argument("--control-reps", type=int, default=3, help="profiles of each honest twin per harness")
    ap.add_argument("--false-rejections", type=int, default=200, help="verifications of each honest kernel")
    ap.add_argument("--sections", default="throughput,hacks,controls,false_rejections,legit")
    ap.add_argument("--twins-only", action="store_true", help="false rejections of the honest twins only")
    ap.add_argument("--add-round", default=None, help="record a hacker-fixer round (JSON) and rewrite the page")
    ap.add_argument("--sampling-reps", type=int, default=3, help="profiles of each twin with and without sampling")
    ap.add_argument("--a11b", nargs=2, default=None, metavar=("PROBLEM", "SUBMISSION"), help="round 3's a11b files")
    args = ap.parse_args()
    sections = set(args.sections.split(","))
    out = Path(args.out or ("/tmp/kernel-reward" if args.quick else ROOT / "docs" / "results"))
    if args.add_round:
        add_round(out, args.add_round)
        return
    work = Path(tempfile.mkdtemp(prefix="kernel-reward-"))
    pool = Sandbox(image="host", concurrency=args.concurrency)
    cfg = VerifyConfig(compile_baseline="off", cache_dir=str(work / "cache"))
    data: dict = {
        "command": "python " + " ".join([os.path.relpath(__file__, ROOT)] + sys.argv[1:]),
        "machine": machine(),
        "conditions_start": conditions(),
        "config": {
            "seeds": cfg.seeds,
            "signed_trials": cfg.signed_trials,
            "large_trials": cfg.large_trials,
            "outlier_trials": cfg.outlier_trials,
            "extra_shapes": cfg.extra_shapes,
            "warmup": cfg.warmup,
            "timed_runs": cfg.timed_runs,
            "threads": cfg.threads,
            "clock": "cpu" if cfg.clock == "auto" and cfg.threads == 1 else cfg.clock,
            "concurrency": args.concurrency,
            "kernelbench_scale": args.scale,
        },
    }
    previous = {}
    if (out / "kernel_reward.json").exists():  # sections not measured now are kept from the last run
        previous = json.loads((out / "kernel_reward.json").read_text())
    for key in (
        "throughput",
        "hacks",
        "controls",
        "false_rejections",
        "false_rejection_evaluations",
        "legit",
        "rounds",
        "ip_sampling",
    ):
        if key in previous:
            data[key] = previous[key]
    data.setdefault("rounds", [])
    if "throughput" in sections:
        data["throughput"] = throughput(replace(cfg, cache_dir=str(work / "tp")), pool, work, args.quick)
    if "hacks" in sections:
        data["hacks"] = hack_suite(cfg, pool)
        print(f"hacks: {sum(r['caught'] for r in data['hacks'])}/{len(data['hacks'])} caught", flush=True)
    # one job at a time: timings that do not share the CPU with another candidate (the suite's own rule)
    serial = Sandbox(image="host", concurrency=1)
    if "controls" in sections:
        before = Path(args.before_src) if args.before_src else None
        data["controls"] = controls(cfg, serial, before, work, 1 if args.quick else args.control_reps)
        print(json.dumps(data["controls"]), flush=True)
    if "false_rejections" in sections:
        n = 2 if args.quick else args.false_rejections
        data["false_rejections"] = false_rejections(cfg, pool, n, not args.twins_only)
        data["false_rejection_evaluations"] = n
    if "legit" in sections:
        data["legit"] = legit(cfg, serial, Path(args.kernelbench) if args.kernelbench else None, args.scale, args.quick)
        print(f"legit: {sum(r['correct'] for r in data['legit'])}/{len(data['legit'])} correct", flush=True)
    if "ip_sampling" in sections:  # not in the default sections: its own timing run
        data["ip_sampling"] = ip_sampling(cfg, serial, 1 if args.quick else args.sampling_reps, args.a11b)
        print(json.dumps({k: v for k, v in data["ip_sampling"].items() if k != "controls"}), flush=True)
    data["conditions_end"] = conditions()
    data["summary"] = summary(data)
    print(json.dumps(data["summary"], indent=1))
    atomic_write(out / "kernel_reward.json", json.dumps(data, indent=2, default=str))
    md = out / "kernel_reward.md"
    write_markdown(md.with_suffix(".tmp"), data)
    os.replace(md.with_suffix(".tmp"), md)
    shutil.rmtree(work, ignore_errors=True)
    print(f"wrote {out / 'kernel_reward.md'} and {out / 'kernel_reward.json'}")


if __name__ == "__main__":
    main()
