"""Reruns of the committed experiments on the one training loop, beside the committed tables.

    nice python examples/composition/reruns.py --jobs 4 --seeds 0 --old OLD   # run what has not finished
    python examples/composition/reruns.py --report                            # compare, write the results

The training core was rewritten (every method on `train/loop.py`); this checks that the methods still
learn what they learned. Each experiment runs in shortened form (fewer families, arms or seeds, never
fewer steps, so that its numbers stay comparable) with the experiment's own script, one job per seed,
into a scratch folder (WORK, default runs/reruns); the committed tables (docs/results/X.json) are only
read. Per arm and metric, the rerun mean is set beside the committed mean and spread over seeds:

    agree  <=>  |rerun mean - committed mean| <= 2 * sqrt(sd_c^2 / n_c + sd_r^2 / n_r)

(two standard errors of the difference of two means; a single rerun seed borrows the committed sd).
A rerun is a fresh draw from the same distribution, not a replay (one torch thread, and the rewrite
may reorder float operations), so with about 40 comparisons one or two may disagree by chance.

OLD is a checkout of the code before the one loop (`git worktree add OLD 2fac51a`): with --old, the
first steps of each method (--cases) also run on both versions (same_steps.py) and are compared bit
for bit. --report writes docs/results/composition_reruns.md and .json from whatever has finished.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics as st
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from tempering.runlog import atomic_write_text

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
SEEDS = (0, 1, 2)
"""The committed tables' seeds; a rerun uses some of them."""
LEAP_ARMS = ("leap",)
TCPO_ARMS = ("tcpo_full",)
DOPD_ARMS = ("direct_opd_self",)
EC_ARMS = ("tu_opd",)


@dataclass
class Job:
    name: str
    argv: list[str]
    done: Path
    """Exists once the job has finished (a finished job is not run again)."""
    after: tuple[str, ...] = ()
    src: Path = ROOT / "src"
    """The tempering it imports (PYTHONPATH)."""


@dataclass
class Experiment:
    name: str
    shortened: str
    job: Callable[[Path, int, int], Job]
    """(WORK, seed, first seed of this invocation) -> the job that runs that seed"""


def _seeded(name: str, script: str, args: list[str], result: str) -> Callable[[Path, int, int], Job]:
    """LEAP and TCPO: one warm start per family, shared by the seeds: the first seed makes it."""
    return lambda w, s, first: Job(
        f"{name}_s{s}",
        [PY, script, "--seeds", str(s), *args, "--work", str(w / name / "work"), "--out", str(w / name / f"s{s}")],
        w / name / f"s{s}" / result,
        () if s == first else (f"{name}_s{first}",),
    )


EXPERIMENTS = {
    e.name: e
    for e in (
        Experiment(
            "quickstart",
            "not shortened (700+ warm-start steps, 800 GRPO steps); one process per seed, 1 torch thread "
            "(the committed run: 2 threads)",
            lambda w, s, first: Job(
                f"quickstart_s{s}",
                [PY, "-m", "tempering.cli", "demo", "--seed", str(s), "--out", str(w / "quickstart" / f"seed{s}")]
                + ["--no-progress", "pretrain.run.threads=1", "train.run.threads=1"],
                w / "quickstart" / f"seed{s}" / "summary.json",
            ),
        ),
        Experiment(
            "leap",
            f"family strings only (not arithmetic); arms {', '.join(LEAP_ARMS)} (of grpo, mt_grpo, leap, kevin, trloo); "
            "all 60 steps",
            _seeded(
                "leap",
                "examples/leap/run_leap.py",
                ["--steps", "60", "--families", "strings", "--arms", *LEAP_ARMS],
                "leap.json",
            ),
        ),
        Experiment(
            "tcpo",
            f"family strings only (not arithmetic); arms {', '.join(TCPO_ARMS)} (of 9 arms); all 60 steps",
            _seeded(
                "tcpo",
                "examples/tcpo/run_tcpo.py",
                ["--steps", "60", "--families", "strings", "--arms", *TCPO_ARMS],
                "tcpo.json",
            ),
        ),
        Experiment(
            "direct_opd",
            f"arms {', '.join(DOPD_ARMS)} (of grpo, opd, direct_opd, direct_opd_self), after the teacher's warm start "
            "and RL; every stage at its committed length",
            lambda w, s, first: Job(
                f"direct_opd_s{s}",
                [PY, "examples/direct_opd/weak_to_strong.py", "--seeds", str(s), "--arms", *DOPD_ARMS]
                + ["--out", str(w / "direct_opd")],
                w / "direct_opd" / f"seed{s}" / DOPD_ARMS[-1] / "summary.json",
            ),
        ),
        Experiment(
            "expand_compress",
            f"students {', '.join(EC_ARMS)} (not tu_opd_crd, uniform_opd, best_teacher_opd); the warm start, "
            "3 RGRPO rounds of 100 steps and 100 student steps as committed",
            lambda w, s, first: Job(
                f"expand_compress_s{s}",
                [PY, "examples/expand_compress/experiment.py", "--seeds", str(s), "--arms", *EC_ARMS]
                + ["--out", str(w / "expand_compress")],
                w / "expand_compress" / f"seed{s}" / EC_ARMS[-1] / "summary.json",
            ),
        ),
    )
}

SAME_STEPS_CASES = (
    "pretrain",
    "grpo",
    "mt_grpo",
    "leap",
    "kevin",
    "trloo",
    *(f"tcpo_{m}" for m in ("trajectory", "turn_reward", "score_diff", "retrospective", "hindsight", "full")),
    "opd",
    "opd_jsd_topk",
    "direct_opd",
    "direct_opd_alpha_before",
    "tu_opd",
    "tu_opd_crd",
    "rgrpo",
)
INTENDED = {
    "direct_opd_alpha_before": "Direct-OPD's alpha now moves before each update by default (the official order); "
    "the old code moved it after (`alpha_order=after_update`, which the `direct_opd` case sets)",
}
"""Cases whose difference between the versions is an intended change."""


def same_steps_jobs(w: Path, old: Path, cases: list[str]) -> list[Job]:
    """Each case of same_steps.py on the current code and on the checkout `old`, from shared models."""
    script, models = "examples/composition/same_steps.py", w / "same_steps" / "models"
    jobs = [Job("same_steps_setup", [PY, script, "setup", str(models)], models / "pass_rates.json")]
    for case in cases:
        for version, src in (("old", old / "src"), ("new", ROOT / "src")):
            out = w / "same_steps" / version / case
            jobs.append(
                Job(
                    f"same_{version}_{case}",
                    [PY, script, case, str(out), str(models)],
                    out / "case.json",
                    (jobs[0].name,),
                    src,
                )
            )
    return jobs


def loadavg() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def run_jobs(jobs: list[Job], work: Path, parallel: int) -> list[str]:
    """Run the jobs that have not finished, `parallel` at a time in the order given, each after the jobs it
    follows. Each job's command, seconds and load go to WORK/jobs.jsonl. A failed job is reported, and the jobs
    that follow it are not run; the others go on. Returns the failures."""
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    pending = [j for j in jobs if not j.done.is_file()]
    unfinished = {j.name for j in pending}
    running: dict[str, tuple[Job, subprocess.Popen, float, list[float]]] = {}
    failed: list[str] = []
    while pending or running:
        for j in list(pending):
            if any(d in failed for d in j.after):
                pending.remove(j)
                failed.append(j.name)
                print(f"skipped {j.name}: it follows a failed job", flush=True)
            if j not in pending or len(running) >= parallel or any(d in unfinished for d in j.after):
                continue
            pending.remove(j)
            env = {**os.environ, "PYTHONPATH": str(j.src)}
            with open(logs / f"{j.name}.log", "w") as log:
                p = subprocess.Popen(j.argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
            running[j.name] = (j, p, time.time(), loadavg())
            print(f"started {j.name}: {' '.join(j.argv)}", flush=True)
        time.sleep(5)
        for name, (j, p, t0, load0) in list(running.items()):
            if p.poll() is None:
                continue
            del running[name]
            unfinished.discard(name)
            row = {"job": name, "command": " ".join(j.argv), "rc": p.returncode, "seconds": time.time() - t0}
            row.update(load_at_start=load0, load_at_end=loadavg())
            with open(work / "jobs.jsonl", "a") as f:
                f.write(json.dumps(row) + "\n")
            print(f"finished {name} (rc {p.returncode}, {row['seconds']:.0f} s)", flush=True)
            if p.returncode != 0 or not j.done.is_file():
                failed.append(name)
                print(f"FAILED {name}: see {logs / f'{name}.log'}", flush=True)
    return failed


# ---- comparison -------------------------------------------------------------------------------------


def spread(xs: list[float]) -> dict:
    return {"mean": st.mean(xs), "sd": st.stdev(xs) if len(xs) > 1 else 0.0, "min": min(xs), "max": max(xs)} | {
        "n": len(xs),
        "values": xs,
    }


def compare(arm: str, metric: str, committed: dict[int, float], rerun: dict[int, float]) -> dict:
    """One metric of one arm; values by seed. `same_seed_equal`: the rerun repeats the committed value of each
    of its seeds exactly (the committed runs used 1 torch thread too, except the quickstart)."""
    c, r = spread(list(committed.values())), spread(list(rerun.values()))
    sd_r = r["sd"] if r["n"] > 1 else c["sd"]
    se = math.sqrt(c["sd"] ** 2 / c["n"] + sd_r**2 / r["n"])
    diff = r["mean"] - c["mean"]
    agree = abs(diff) <= 2 * se if se > 0 else diff == 0
    inside = c["min"] <= r["mean"] <= c["max"]
    same = all(committed.get(s) == v for s, v in rerun.items())
    row = {"arm": arm, "metric": metric, "committed": c, "rerun": r, "rerun_seeds": list(rerun), "diff": diff}
    return row | {"se": se, "agree": agree, "in_committed_range": inside, "same_seed_equal": same}


def _json(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.is_file() else None


def _seeds_done(w: Path, pattern: str) -> dict[int, dict]:
    """The finished reruns of one experiment by seed: `pattern` (with {s}) names a seed's result file in WORK."""
    found = {s: w / pattern.format(s=s) for s in SEEDS}
    return {s: json.loads(p.read_text()) for s, p in found.items() if p.is_file()}


def quickstart_rows(committed: dict, w: Path) -> tuple[list[dict], dict]:
    reruns = list(_seeds_done(w, "quickstart/seed{s}/summary.json").values())
    if not reruns:
        return [], {}
    gain = lambda r: 100 * (r["pass_at_1_after"] - r["pass_at_1_before"])
    metrics = {
        "pass@1 before GRPO (greedy)": lambda r: r["pass_at_1_before"],
        "pass@1 after GRPO (greedy)": lambda r: r["pass_at_1_after"],
        "gain (points)": gain,
    }
    by_seed = lambda runs, f: {r["seed"]: f(r) for r in runs}
    rows = [compare("demo", k, by_seed(committed["runs"], f), by_seed(reruns, f)) for k, f in metrics.items()]
    extra = {
        "gain_per_seed": {r["seed"]: gain(r) for r in reruns},
        "every_seed_gains_20_points": all(gain(r) >= 20 for r in reruns),
        "pretrain_steps": {
            "committed": {r["seed"]: r["pretrain_steps"] for r in committed["runs"]},
            "rerun": {r["seed"]: r["pretrain_steps"] for r in reruns},
        },
    }
    return rows, extra


def per_seed_rows(committed: dict, reruns: dict[int, dict], family: str, metrics: dict[str, str]) -> list[dict]:
    """LEAP / TCPO: each rerun seed wrote its own table; its arms' per_seed lists hold one run each."""
    if not reruns:
        return []
    arms = [a for a, d in next(iter(reruns.values()))["families"][family].items() if isinstance(d, dict)]
    rows = []
    for arm in arms:
        c = dict(zip(committed["seeds"], committed["families"][family][arm]["per_seed"], strict=True))
        r = {s: d["families"][family][arm]["per_seed"][0] for s, d in reruns.items()}
        for k, label in metrics.items():
            rows.append(compare(arm, label, {s: x[k] for s, x in c.items()}, {s: x[k] for s, x in r.items()}))
    return rows


LEAP_METRICS = {
    "acc@1_sampled": "Acc@1 (sampled)",
    "acc@3_sampled": "Acc@3 (sampled)",
    "acc@1": "Acc@1 (greedy)",
    "acc@3": "Acc@3 (greedy)",
    "total_env_calls": "env calls (training)",
}
TCPO_METRICS = {
    "pass@1_sampled": "best-turn pass@1 (sampled)",
    "pass@8": "best-turn pass@8",
    "turns_per_pass_sampled": "turns to success",
    "total_env_calls": "env calls (training)",
}
DOPD_STAGES = ("teacher_pre", "teacher_rl", "student_pre", "grpo", "opd", "direct_opd", "direct_opd_self")


def direct_opd_rows(committed: dict, w: Path) -> tuple[list[dict], dict]:
    """Every stage's held-out greedy pass@1 (its summary.json), the warm starts included."""
    rows, steps = [], {}
    for k in DOPD_STAGES:
        reruns = _seeds_done(w, f"direct_opd/seed{{s}}/{k}/summary.json")
        if not reruns:
            continue
        c = {r["seed"]: r[k]["pass@1"] for r in committed["runs"]}
        rows.append(compare(k, "held-out pass@1 (greedy)", c, {s: r["pass@1"] for s, r in reruns.items()}))
        if "steps" in committed["runs"][0][k]:  # a warm start runs until it reaches a pass@1
            c_steps = {r["seed"]: r[k]["steps"] for r in committed["runs"]}
            steps[k] = {"committed": c_steps, "rerun": {s: r["steps"] for s, r in reruns.items()}}
    return rows, {"warm_start_steps": steps}


def expand_compress_rows(committed: dict, w: Path) -> tuple[list[dict], dict]:
    """Held-out greedy pass@1 over the mixture: the warm start, each RGRPO round's teacher, the students."""
    runs = committed["runs"]
    stages = {"init": (lambda r: r["init"]["heldout"], "init/eval/summary.json")}
    for n in runs[0]["teachers"]:
        stages[f"teacher {n}"] = (lambda r, n=n: r["teachers"][n]["heldout"], f"expand/{n}/eval/summary.json")
    for n in runs[0]["students"]:
        stages[n] = (lambda r, n=n: r["students"][n]["heldout"], f"{n}/summary.json")
    rows = []
    for k, (heldout, path) in stages.items():
        reruns = _seeds_done(w, "expand_compress/seed{s}/" + path)
        if reruns:
            c = {r["seed"]: heldout(r)["all"] for r in runs}
            rows.append(
                compare(k, "held-out pass@1 (greedy)", c, {s: d.get("heldout", d)["all"] for s, d in reruns.items()})
            )
    return rows, {}


def fmt_spread(s: dict) -> str:
    return f"{s['mean']:.3f} ± {s['sd']:.3f} [{s['min']:.3f}, {s['max']:.3f}]"


TIMING = ("seconds", "lr")
"""Logged values that are not outcomes of training (wall-clock times, the schedule's lr)."""


def by_step(rows: list[dict]) -> dict:
    """Numeric metrics per (step, evaluation or not): the old code logged some credit statistics on a line
    of their own."""
    out: dict = {}
    for r in rows:
        if "step" in r:
            out.setdefault((r["step"], "eval/pass@1" in r), {}).update(
                {k: v for k, v in r.items() if isinstance(v, (int, float)) and not any(t in k for t in TIMING)}
            )
    return out


def same_steps_rows(w: Path) -> list[dict]:
    rows = []
    for case in SAME_STEPS_CASES:
        a, b = (_json(w / "same_steps" / v / case / "case.json") for v in ("old", "new"))
        if a is None or b is None:
            continue
        old, new = by_step(a["rows"]), by_step(b["rows"])
        worst, where, only_old, only_new = 0.0, "", set(), set()
        for key in sorted(set(old) | set(new)):
            x, y = old.get(key, {}), new.get(key, {})
            only_old |= set(x) - set(y)
            only_new |= set(y) - set(x)
            for k in set(x) & set(y):
                d = abs(x[k] - y[k]) / max(1e-12, abs(x[k]), abs(y[k]))
                if d > worst:
                    worst, where = d, f"{k} at step {key[0]}: {x[k]:.6g} vs {y[k]:.6g}"
        pass_rates = [[r["pass_rates"] for r in c["rows"] if "pass_rates" in r] for c in (a, b)]
        rows.append(
            {
                "case": case,
                "weights_equal": a["weights_sha256"] == b["weights_sha256"],
                "metrics_max_rel_diff": worst,
                "where": where,
                "steps": max((k[0] for k in new), default=0),
                "metrics_compared": len(set().union(*new.values())) if new else 0,
                "only_old": sorted(only_old),
                "only_new": sorted(only_new),
                **({"pass_rates_equal": pass_rates[0] == pass_rates[1]} if any(pass_rates) else {}),
                **({"intended_change": INTENDED[case]} if case in INTENDED else {}),
            }
        )
    return rows


COMMITTED = {
    "quickstart": ("quickstart", quickstart_rows),
    "expand_compress": ("expand_compress", expand_compress_rows),
    "direct_opd": ("direct_opd", direct_opd_rows),
    "leap": (
        "leap",
        lambda c, w: (per_seed_rows(c, _seeds_done(w, "leap/s{s}/leap.json"), "strings", LEAP_METRICS), {}),
    ),
    "tcpo": (
        "tcpo",
        lambda c, w: (per_seed_rows(c, _seeds_done(w, "tcpo/s{s}/tcpo.json"), "strings", TCPO_METRICS), {}),
    ),
}
"""Experiment -> (its committed docs/results/<name>.json, (committed table, WORK) -> (rows, extra facts))."""


def report(w: Path, results: Path, notes: Path | None) -> None:
    jobs_log = [json.loads(x) for x in (w / "jobs.jsonl").read_text().splitlines()]
    invocations = [json.loads(x) for x in (w / "invocations.jsonl").read_text().splitlines()]
    out: dict = {
        "criterion": "agree when |rerun mean - committed mean| <= 2 * sqrt(sd_c^2/n_c + sd_r^2/n_r) (two standard "
        "errors of the difference; one rerun seed borrows the committed sd)",
        "machine": f"{platform.machine()}, {os.cpu_count()} cores (shared with other jobs), Python "
        f"{platform.python_version()}, torch {torch.__version__}, 1 torch thread per process",
        "commands": [
            "python examples/composition/reruns.py " + " ".join(i["argv"]).replace(str(w), "WORK") for i in invocations
        ]
        + ["python examples/composition/reruns.py --report --notes examples/composition/reruns_notes.md"],
        "invocations": invocations,
        "work": str(w.relative_to(ROOT) if w.is_relative_to(ROOT) else w),
        "work_abs": str(w),
        "experiments": {},
    }
    for name, e in EXPERIMENTS.items():
        committed_name, rows_of = COMMITTED[name]
        committed = json.loads((ROOT / "docs" / "results" / f"{committed_name}.json").read_text())
        rows, extra = rows_of(committed, w)
        ran = [r for r in jobs_log if r["job"].startswith(f"{name}_s") and r["rc"] == 0]
        out["experiments"][name] = {
            "committed_file": f"docs/results/{committed_name}.json",
            "committed_command": committed.get("command"),
            "shortened": e.shortened,
            "seeds": sorted(int(r["job"].rsplit("_s", 1)[1]) for r in ran),
            "commands": [r["command"] for r in ran] or [" ".join(e.job(w, SEEDS[0], SEEDS[0]).argv)],
            "jobs": ran,
            "rows": rows,
            "comparisons": len(rows),
            "agree": sum(r["agree"] for r in rows),
            **extra,
        }
    rows = [r for e in out["experiments"].values() for r in e["rows"]]
    out["comparisons_total"], out["comparisons_agree"] = len(rows), sum(r["agree"] for r in rows)
    out["disagree"] = [f"{n}: {r['arm']}, {r['metric']}" for n, e in out["experiments"].items() for r in e["rows"]]
    out["disagree"] = [d for d, r in zip(out["disagree"], rows) if not r["agree"]]
    same = same_steps_rows(w)
    out["same_steps"] = {
        "old_commit": "2fac51a",
        "cases_run": len(same),
        "weights_bit_identical": sum(r["weights_equal"] for r in same),
        "rows": same,
        "failed": sorted({r["job"] for r in jobs_log if r["job"].startswith("same_") and r["rc"] != 0}),
        "jobs": [r for r in jobs_log if r["job"].startswith("same_")],
    }
    atomic_write_text(results / "composition_reruns.json", json.dumps(out, indent=2) + "\n")
    md = markdown(out) + ("\n\n" + notes.read_text().strip() if notes else "")
    atomic_write_text(results / "composition_reruns.md", md + "\n")


def markdown(out: dict) -> str:
    same = out["same_steps"]
    intended = [r["case"] for r in same["rows"] if not r["weights_equal"] and "intended_change" in r]
    lines = [
        "# Reruns of the committed experiments on the one training loop",
        "",
        "Commands (WORK: the scratch folder; OLD: `git worktree add OLD 2fac51a`, the code before the one loop):",
        "",
        *[f"    {c}" for c in out["commands"]],
        "",
        f"Machine: {out['machine']}; the load average at each job's start and end is listed below.",
        "",
        f"1. **The committed experiments rerun** with their own scripts, shortened to fewer families, arms or seeds "
        f"(never fewer steps, so the numbers stay comparable): **{out['comparisons_agree']} of "
        f"{out['comparisons_total']} comparisons agree** with the committed tables.",
        f"2. **The same steps on the code before and after** (`same_steps.py`): {same['weights_bit_identical']} of "
        f"{same['cases_run']} cases trained bit-identical weights"
        + (f"; differing by an intended change: {', '.join(intended)}" if intended else "")
        + (f"; failed: {', '.join(same['failed'])}" if same["failed"] else "")
        + ".",
        "",
        "## 1. The committed experiments rerun",
        "",
        f"Committed numbers are read from the committed JSON. Each cell: mean ± sd [min, max] over seeds. "
        f"Criterion: {out['criterion']}. Where the committed run used one torch thread too, a rerun of one of its "
        "seeds is expected to repeat it (last column); otherwise it is a fresh draw, and with many comparisons one "
        "or two may fall outside by chance.",
        "",
    ]
    for name, e in out["experiments"].items():
        lines += [f"### {name}", "", f"Committed: `{e['committed_command']}` ({e['committed_file']})  "]
        lines += [f"Shortened: {e['shortened']}; rerun seeds {e['seeds']}  "]
        lines += ["Rerun jobs:" if e["seeds"] else "Its job for seed 0 (not finished here):", ""]
        lines += [f"    {c.replace(PY, 'python').replace(out['work_abs'], 'WORK')}" for c in e["commands"]]
        lines.append("")
        if not e["rows"]:
            lines += ["Not rerun (no finished results).", ""]
            continue
        lines += [
            "| arm | metric | committed | rerun | diff | agree | in committed range | same seed, same value |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        lines += [
            f"| {r['arm']} | {r['metric']} | {fmt_spread(r['committed'])} | {fmt_spread(r['rerun'])} | "
            f"{r['diff']:+.3f} | {'yes' if r['agree'] else '**no**'} | {'yes' if r['in_committed_range'] else 'no'} | "
            f"{'yes' if r['same_seed_equal'] else 'no'} |"
            for r in e["rows"]
        ]
        lines.append("")
        if "gain_per_seed" in e:
            g = ", ".join(f"seed {s}: {v:+.1f}" for s, v in e["gain_per_seed"].items())
            lines += [
                f"Held-out pass@1 gain per rerun seed: {g} (every seed at least 20 points: "
                f"{'yes' if e['every_seed_gains_20_points'] else '**no**'}). Warm-start steps per seed: committed "
                f"{e['pretrain_steps']['committed']}, rerun {e['pretrain_steps']['rerun']}.",
                "",
            ]
        for k, v in e.get("warm_start_steps", {}).items():
            lines += [f"Warm start `{k}`: steps per seed committed {v['committed']}, rerun {v['rerun']}.", ""]
        lines += ["| job | seconds | load average at start / end |", "| --- | --- | --- |"]
        lines += [
            f"| {j['job']} | {j['seconds']:.0f} | {j['load_at_start'][0]:.1f} / {j['load_at_end'][0]:.1f} |"
            for j in e["jobs"]
        ]
        lines.append("")
    lines += [
        "## 2. The same steps before and after",
        "",
        "Each case runs a few steps of one method from the same warm start (tiny-xs on sums 0..30), the same seed and "
        "one torch thread, on the code before the rewrite (commit 2fac51a) and after it, and compares the final weights "
        "(a hash of every tensor) and every logged metric of every step (times and the learning rate left out).",
        "",
        "| case | steps | weights bit-identical | largest relative metric difference | metrics logged by one version only |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in same["rows"]:
        only = [f"old: {', '.join(r['only_old'])}"] if r["only_old"] else []
        only += [f"new: {', '.join(r['only_new'])}"] if r["only_new"] else []
        diff = f"{r['metrics_max_rel_diff']:.1e}" + (f" ({r['where']})" if r["where"] else "")
        same_w = "yes" if r["weights_equal"] else ("no (intended)" if "intended_change" in r else "**no**")
        lines.append(f"| {r['case']} | {r['steps']} | {same_w} | {diff} | {'; '.join(only) or '-'} |")
    notes = [f"- `{r['case']}`: {r['intended_change']}." for r in same["rows"] if "intended_change" in r]
    notes += [
        f"- `{r['case']}`: the teachers' pass rates on the pool equal: {r['pass_rates_equal']}."
        for r in same["rows"]
        if "pass_rates_equal" in r
    ]
    lines += ["", *notes] if notes else []
    if same["jobs"]:
        lines += ["", "| job | seconds | load average at start / end |", "| --- | --- | --- |"]
        lines += [
            f"| {j['job']} | {j['seconds']:.0f} | {j['load_at_start'][0]:.1f} / {j['load_at_end'][0]:.1f} |"
            for j in same["jobs"]
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", default=str(ROOT / "runs" / "reruns"), help="scratch folder for the reruns")
    p.add_argument("--results", default=str(ROOT / "docs" / "results"))
    p.add_argument("--jobs", type=int, default=1, help="jobs run at once")
    p.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS), choices=SEEDS)
    p.add_argument("--only", nargs="*", choices=list(EXPERIMENTS), help="these experiments (none: only --old)")
    p.add_argument("--old", help="a checkout of the code before the one loop: run same_steps.py on it and on this one")
    p.add_argument("--cases", nargs="+", default=list(SAME_STEPS_CASES), choices=SAME_STEPS_CASES)
    p.add_argument("--report", action="store_true", help="run nothing: compare what has finished, write the results")
    p.add_argument("--notes", help="with --report: a markdown file appended to the results page (the reading)")
    a = p.parse_args(argv)
    w = Path(a.work).resolve()
    if a.report:
        report(w, Path(a.results), Path(a.notes) if a.notes else None)
        return 0
    exps = [e for e in EXPERIMENTS.values() if a.only is None or e.name in a.only]
    jobs = [e.job(w, s, a.seeds[0]) for s in a.seeds for e in exps]
    if a.old:  # the cheapest check with the most to say: after the first experiment's first seed
        jobs[1:1] = same_steps_jobs(w, Path(a.old).resolve(), a.cases)
    w.mkdir(parents=True, exist_ok=True)
    with open(w / "invocations.jsonl", "a") as f:
        f.write(json.dumps({"argv": sys.argv[1:], "started": time.strftime("%Y-%m-%d %H:%M:%S"), "load": loadavg()}))
        f.write("\n")
    failed = run_jobs(jobs, w, a.jobs)
    print(f"failed: {', '.join(failed)}" if failed else "all finished", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
