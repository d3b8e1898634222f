"""Expand then compress on the embedded default: RGRPO teachers on a task mixture, distilled into one student.

Per seed:
  1. init: tiny-s, supervised warm start on a mixture of 2-digit sums, string reversal and string sorting;
  2. expand: RGRPO, three GRPO teachers from init, rounds 2 and 3 on the examples no earlier teacher covers;
  3. compress, from init, at equal student steps: TU-OPD, TU-OPD with Consensus-Residual Decomposition,
     uniform-average multi-teacher OPD (no gating), and OPD from the best teacher (best mean pass rate on
     the training pool);
  4. greedy held-out pass@1 per task family for the init, every teacher and every student.
The "best single teacher" in the comparison is the teacher with the best held-out pass@1 overall (the
strongest one, chosen with hindsight). Finished stages are reused when run again with the same --out.

    python examples/expand_compress/experiment.py --seeds 0 1 2 --out runs/expand_compress --results docs/results
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics as st
import sys
import time
from pathlib import Path

import torch

from tempering.config import build
from tempering.envs.registry import make_family
from tempering.evaluation import evaluate
from tempering.experiments import Arm, claims_table, judge
from tempering.methods.pretrain import PretrainConfig, pretrain
from tempering.models import load_policy
from tempering.models.chat import ChatFormat
from tempering.recipes.rgrpo import rgrpo
from tempering.recipes.runner import run
from tempering.rollout.engine import RolloutOptions
from tempering.rollout.sampler import HFSampler, SamplingParams
from tempering.runlog import atomic_write_text

MEMBERS = {
    "add": {"family": "arithmetic", "args": {"min_value": 10, "max_value": 99}},
    "rev": {"family": "strings", "args": {"ops": ["rev"], "min_len": 3, "max_len": 6}},
    "sort": {"family": "strings", "args": {"ops": ["sort"], "min_len": 3, "max_len": 6}},
}
TASK = {"family": "mixture", "args": {"members": MEMBERS}, "train_size": 480, "heldout_size": 450}
ROLLOUT = {"group_size": 8, "prompts_per_step": 16, "max_new_tokens": 8, "temperature": 1.0}
STUDENTS = ("tu_opd", "tu_opd_crd", "uniform_opd", "best_teacher_opd")
LABELS = {
    "tu_opd": "student: TU-OPD (gated, quality-weighted)",
    "tu_opd_crd": "student: TU-OPD + Consensus-Residual",
    "uniform_opd": "student: uniform-average multi-teacher OPD",
    "best_teacher_opd": "student: OPD from the best teacher",
}


def _run(out: Path, steps: int, seed: int) -> dict:
    return {
        "steps": steps,
        "seed": seed,
        "out_dir": str(out),
        "eval_every": 0,
        "eval_k": 2,
        "checkpoint_every": 0,
        "log_samples": 0,
        "tensorboard": False,
        "progress": False,
        "threads": 1,
    }


def cached(out: Path, fn) -> dict:
    """Run a stage once: its summary.json marks it finished."""
    done = out / "summary.json"
    if done.is_file():
        return json.loads(done.read_text())
    t0 = time.perf_counter()
    res = fn()
    res["seconds"] = time.perf_counter() - t0
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(done, json.dumps(res, indent=2) + "\n")
    return res


def per_family(model_dir: str) -> dict[str, float]:
    """Greedy held-out pass@1 of a model on each member family, and over all of them."""
    fam = make_family("mixture", members=MEMBERS)
    tasks = fam.tasks("heldout", TASK["heldout_size"], seed=0)
    model, tok = load_policy(model_dir)
    sampler, fmt = HFSampler(model, tok, seed=0), ChatFormat(tok)
    opts = RolloutOptions(sampling=SamplingParams(ROLLOUT["max_new_tokens"], 0.0))
    out = {
        m: asyncio.run(evaluate(sampler, fmt, fam, [t for t in tasks if t.family == m], opts, k=1, sampled=False))[
            "pass@1"
        ]
        for m in MEMBERS
    }
    out["all"] = sum(out[m] * sum(t.family == m for t in tasks) for m in MEMBERS) / len(tasks)
    return out


def trained(run, out: Path) -> dict:
    run(out)
    return {"heldout": per_family(str(out / "final"))}


def one_seed(root: Path, seed: int, a) -> dict:
    init = cached(
        root / "init",
        lambda: {
            "model": pretrain(
                build(
                    PretrainConfig,
                    {
                        "model": {"name": "tiny-s"},
                        "task": {**TASK, "train_size": 6000},
                        "run": {
                            "steps": 4000,
                            "eval_every": 25,
                            "eval_size": 150,
                            "seed": seed,
                            "out_dir": str(root / "init"),
                            "progress": False,
                            "threads": 1,
                            "stop_at_pass": a.stop,
                        },
                        "rollout": {"prompts_per_step": 64, "max_new_tokens": ROLLOUT["max_new_tokens"]},
                        "optim": {"lr": 1e-3},
                    },
                )
            )["model"]
        },
    )
    init["heldout"] = cached(root / "init" / "eval", lambda: per_family(init["model"]))
    common = {"model": {"name": init["model"]}, "task": TASK, "rollout": ROLLOUT, "optim": {"lr": a.lr}}
    ex = cached(
        root / "expand",
        lambda: rgrpo(
            {
                **common,
                "run": _run(root / "expand", a.steps, seed),
                "rgrpo": {"rounds": a.rounds, "kappa": a.kappa, "pass_samples": 8},
            }
        ),
    )
    teachers = {
        n: {"path": p, "heldout": cached(Path(p).parent / "eval", lambda p=p: per_family(p))}
        for n, p in ex["teachers"].items()
    }
    pool = json.loads(Path(ex["pass_rates"]).read_text())["tasks"]
    pool_mean = {n: st.mean(row[n] for row in pool.values()) for n in teachers}
    best_pool = max(pool_mean, key=pool_mean.get)
    specs = {n: {"path": t["path"]} for n, t in teachers.items()}
    tu = {"teachers": specs, "pass_rates": ex["pass_rates"], "rho": a.rho}
    arms = {
        "tu_opd": lambda out: run("tu-opd", {**common, "tu_opd": tu, "run": _run(out, a.steps, seed)}),
        "tu_opd_crd": lambda out: run(
            "tu-opd", {**common, "tu_opd": {**tu, "residual": True}, "run": _run(out, a.steps, seed)}
        ),
        "uniform_opd": lambda out: run(
            "tu-opd",
            {**common, "tu_opd": {**tu, "weighting": "uniform", "gating": False}, "run": _run(out, a.steps, seed)},
        ),
        "best_teacher_opd": lambda out: run(
            "distill", {**common, "teacher": specs[best_pool], "run": _run(out, a.steps, seed)}
        ),
    }
    students = {
        name: cached(root / name, lambda fn=fn, out=root / name: trained(fn, out))
        for name, fn in arms.items()
        if name in a.arms
    }
    cov = json.loads((root / "expand" / "coverage.json").read_text())
    return {
        "seed": seed,
        "init": init,
        "teachers": teachers,
        "pool_pass_mean": pool_mean,
        "best_pool_teacher": best_pool,
        "coverage": cov,
        "students": students,
    }


def spread(vals: list[float]) -> dict:
    return {"mean": st.mean(vals), "std": st.stdev(vals) if len(vals) > 1 else 0.0, "values": vals}


def claims(rows: list[dict], steps: int) -> dict[str, dict]:
    """The paper's claims on all held-out examples, paired by seed (the best teacher is a fixed model)."""
    heldout = f"mixture: {TASK['heldout_size']} held-out examples"
    rollouts = steps * ROLLOUT["prompts_per_step"] * ROLLOUT["group_size"]
    student = lambda s: Arm(s, {r["seed"]: r["students"][s]["heldout"]["all"] for r in rows}, heldout, rollouts)
    best = {r["seed"]: max(t["heldout"]["all"] for t in r["teachers"].values()) for r in rows}
    teacher = Arm("best single teacher", best, heldout, None)
    out = {}
    for s, name in (("tu_opd", "TU-OPD"), ("tu_opd_crd", "TU-OPD + Consensus-Residual")):
        out[f"the {name} student beats the best single teacher"] = judge(student(s), teacher)
        out[f"{name} beats uniform-average multi-teacher OPD"] = judge(student(s), student("uniform_opd"))
        out[f"{name} beats OPD from the best teacher"] = judge(student(s), student("best_teacher_opd"))
    out["Consensus-Residual Decomposition adds to TU-OPD"] = judge(student("tu_opd_crd"), student("tu_opd"))
    return out


def write_results(rows: list[dict], a, command: str, rendered: str | None = None) -> None:
    out = Path(a.results)
    out.mkdir(parents=True, exist_ok=True)
    cols = [*MEMBERS, "all"]
    names = list(rows[0]["teachers"])
    best = [max(r["teachers"], key=lambda n: r["teachers"][n]["heldout"]["all"]) for r in rows]
    table: dict[str, list[dict]] = {"init (tiny-s warm start)": [r["init"]["heldout"] for r in rows]}
    for n in names:
        table[f"teacher {n}"] = [r["teachers"][n]["heldout"] for r in rows]
    table["best single teacher (held-out, per seed)"] = [r["teachers"][b]["heldout"] for r, b in zip(rows, best)]
    for s in STUDENTS:
        table[LABELS[s]] = [r["students"][s]["heldout"] for r in rows]
    stats = {k: {c: spread([v[c] for v in vs]) for c in cols} for k, vs in table.items()}
    n = len(rows)
    machine = f"{platform.machine()}, 1 torch thread per process, python {platform.python_version()}, torch {torch.__version__}"
    paired = {}
    for s in ("tu_opd", "tu_opd_crd"):
        for other, vals in (
            ("best single teacher", [r["teachers"][b]["heldout"]["all"] for r, b in zip(rows, best)]),
            ("uniform_opd", [r["students"]["uniform_opd"]["heldout"]["all"] for r in rows]),
            ("best_teacher_opd", [r["students"]["best_teacher_opd"]["heldout"]["all"] for r in rows]),
        ):
            d = [100 * (r["students"][s]["heldout"]["all"] - v) for r, v in zip(rows, vals)]
            paired[f"{s} - {other}"] = spread(d)
    cov = {n_: spread([r["coverage"]["all"]["union"][i] for r in rows]) for i, n_ in enumerate(names)}
    doc = {
        "command": command,
        "seeds": [r["seed"] for r in rows],
        "machine": machine,
        "task": TASK,
        "rollout": ROLLOUT,
        "steps": a.steps,
        "rounds": a.rounds,
        "kappa": a.kappa,
        "rho": a.rho,
        "lr": a.lr,
        "warm_start_stop_at_pass": a.stop,
        "arms": {
            k: {
                "heldout_pass@1_mean": v["all"]["mean"],
                "heldout_pass@1_std": v["all"]["std"],
                "per_family": {c: {"mean": v[c]["mean"], "std": v[c]["std"]} for c in MEMBERS},
            }
            for k, v in stats.items()
        },
        "paired_points": paired,
        "union_coverage_after_round": cov,
        "claims": claims(rows, a.steps),
        "runs": rows,
        **({"rendered": rendered} if rendered else {}),
    }
    lines = [
        "# Expand then compress: RGRPO teachers, TU-OPD student, on the embedded default",
        "",
        f"Command: `{command}`  ",
        *([f"Page and claims rewritten from the stored numbers: `{rendered}`  "] if rendered else []),
        f"Seeds: {', '.join(str(r['seed']) for r in rows)}  ",
        f"Machine: {machine}",
        "",
        "Task mixture (tiny character tokenizer): `add` 2-digit sums, `rev` reverse a 3-6 letter string, `sort` sort its letters. "
        f"init: tiny-s warm-started on the mixture until greedy pass@1 >= {a.stop}. Expand: RGRPO, {a.rounds} rounds of {a.steps} GRPO "
        f"steps from init on a pool of {TASK['train_size']} training examples, kappa = {a.kappa}, pass rates from 8 samples. Compress: "
        f"every student starts from init and runs {a.steps} steps of {ROLLOUT['prompts_per_step']} prompts x {ROLLOUT['group_size']} "
        f"samples at lr {a.lr}; TU-OPD uses rho = {a.rho}. Held-out: greedy pass@1 on {TASK['heldout_size']} held-out examples "
        f"({TASK['heldout_size'] // len(MEMBERS)} per family), mean +- std over {n} seeds.",
        "",
        "| model | " + " | ".join(cols) + " |",
        "| --- " * (len(cols) + 1) + "|",
    ]
    lines += [
        f"| {k} | " + " | ".join(f"{v[c]['mean']:.3f} +- {v[c]['std']:.3f}" for c in cols) + " |"
        for k, v in stats.items()
    ]
    lines += [
        "",
        "RGRPO union coverage of the training pool after each round (mean over seeds): "
        + ", ".join(f"{k} {v['mean']:.3f}" for k, v in cov.items())
        + ".",
        "",
        "The paper's claims, on all held-out examples, paired by seed (the best single teacher is the one with the "
        "best held-out pass@1 in each seed, chosen with hindsight):",
        "",
        *claims_table(doc["claims"]),
    ]
    if a.notes:
        lines += ["", Path(a.notes).read_text().strip()]
    atomic_write_text(out / "expand_compress.json", json.dumps(doc, indent=2) + "\n")
    atomic_write_text(out / "expand_compress.md", "\n".join(lines) + "\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=100, help="GRPO steps per RGRPO round, and student steps per arm")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--kappa", type=float, default=0.5)
    p.add_argument("--rho", type=float, default=0.5)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--stop", type=float, default=0.3, help="the warm start stops at this greedy held-out pass@1")
    p.add_argument("--arms", nargs="+", default=list(STUDENTS), choices=STUDENTS, help="the students to train")
    p.add_argument("--out", default="runs/expand_compress")
    p.add_argument("--results", help="write expand_compress.md / .json into this folder")
    p.add_argument("--notes", help="a markdown file appended to the results page (the reading of the numbers)")
    p.add_argument(
        "--render",
        action="store_true",
        help="no training: rewrite RESULTS/expand_compress.md and the claims from the runs in its JSON",
    )
    a = p.parse_args()
    if a.render:
        if not a.results:
            p.error("--render rewrites the page in --results: name it")
        doc = json.loads((Path(a.results) / "expand_compress.json").read_text())
        for key in ("steps", "rounds", "kappa", "rho", "lr"):
            setattr(a, key, doc[key])
        a.stop = doc["warm_start_stop_at_pass"]
        write_results(doc["runs"], a, doc["command"], rendered="python " + " ".join(sys.argv))
        return
    if a.results and set(a.arms) != set(STUDENTS):
        p.error("--results compares every student: leave out --arms")
    torch.set_num_threads(1)
    rows = [one_seed(Path(a.out) / f"seed{s}", s, a) for s in a.seeds]
    for r in rows:
        print(
            r["seed"],
            {k: round(v["heldout"]["all"], 3) for k, v in r["students"].items()},
            {k: round(v["heldout"]["all"], 3) for k, v in r["teachers"].items()},
            flush=True,
        )
    if a.results:
        write_results(rows, a, "python " + " ".join(sys.argv))


if __name__ == "__main__":
    main()
