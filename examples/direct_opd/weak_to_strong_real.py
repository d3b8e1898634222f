"""Direct-OPD weak-to-strong into a pretrained student: SmolLM2-135M-Instruct, taught by a tiny model
that shares its tokenizer.

Per seed:
  1. teacher before RL (pi_Tref): tiny-s with SmolLM2's tokenizer and chat template
     (`model.tokenizer=smollm2-135m-instruct`), warm-started on the task until greedy pass@1 >= --stop;
  2. teacher after RL (pi_T): GRPO on it;
  3. arms on the student (SmolLM2-135M-Instruct, about 20x the teacher's parameters), each with the same
     student rollouts (steps x prompts x samples): direct GRPO, OPD from pi_T (reverse KL), Direct-OPD
     with (pi_T, pi_Tref) and the official adaptive alpha, and Direct-OPD with alpha fixed.
The task is the real-model quickstart's (sums of 1..30 asked in words, the last number of the first line
read as the answer): the student starts imperfect (its answers are sentences that often end on another
number), and a tiny model learns to answer it from scratch, so RL has a clear gain to transfer.
Held-out pass@1 is greedy on held-out sums training never sees. Finished stages are reused when the
script is run again with the same --out.

    python examples/direct_opd/weak_to_strong_real.py --seeds 0 1 2 --out runs/direct_opd_real --results docs/results
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import shlex
import statistics as st
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

STUDENT = "smollm2-135m-instruct"
TEACHER = "tiny-s"
TASK = {
    "family": "arithmetic",
    "args": {
        "min_value": 1,
        "max_value": 30,
        "prompt_template": "What is {a} {op} {b}? Answer with just the number.",
        "read": "last_number",
        "heldout_share": 0.2,
    },
    "train_size": 700,
    "heldout_size": 100,
}
STUDENT_ROLLOUT = {"group_size": 8, "prompts_per_step": 8, "max_new_tokens": 12, "temperature": 1.0}
TEACHER_ROLLOUT = {"group_size": 8, "prompts_per_step": 16, "max_new_tokens": 6, "temperature": 1.0}
ARMS = ("grpo", "opd", "direct_opd", "direct_opd_fixed_alpha")
LABELS = {
    "grpo": "direct GRPO on the student",
    "opd": "OPD from the post-RL teacher (reverse KL)",
    "direct_opd": "Direct-OPD, teacher pair, adaptive alpha (official)",
    "direct_opd_fixed_alpha": "Direct-OPD, teacher pair, alpha fixed",
}
MARGIN = 3.0
"""Points of held-out pass@1 by which the Direct-OPD student may trail step-matched GRPO and still be 'at least
as good' (ours; the paper states no margin)."""


def task(a) -> dict:
    return {**TASK, "heldout_size": a.heldout_size}


def _run(out: Path, steps: int, seed: int, eval_k: int = 1) -> dict:
    return {
        "steps": steps,
        "seed": seed,
        "out_dir": str(out),
        "eval_every": 0,
        "eval_k": eval_k,
        "checkpoint_every": 5,
        "keep_checkpoints": 1,
        "log_samples": 0,
        "tensorboard": False,
        "progress": False,
        "threads": 1,
    }


def resumable(out: Path) -> dict:
    """How to start a stage's run in `out`: continue from its last checkpoint, or start again over a run that
    stopped before its first one (a stage takes hours on a CPU; a stopped script loses at most 5 steps)."""
    if any((out / "checkpoints").glob("step_*")):
        return {"resume": True}
    return {"overwrite": True} if (out / "config.yaml").is_file() else {}


def cached(out: Path, fn, *args, settings: dict | None = None) -> dict:
    """Run a stage once: its summary.json marks it finished. With `settings`, a finished stage run with other
    settings is refused rather than reused."""
    done = out / "summary.json"
    settings = json.loads(json.dumps(settings))  # as the summary stores them (tuples become lists)
    if done.is_file():
        res = json.loads(done.read_text())
        if settings is not None and res.get("settings") != settings:
            raise SystemExit(
                f"{out} ran with {res.get('settings')}, not {settings}: use another --out, or delete {out} to run it again"
            )
        return res
    from tempering.runlog import atomic_write_text

    t0 = time.perf_counter()
    res = fn(*args)
    res["seconds"] = time.perf_counter() - t0
    if settings is not None:
        res["settings"] = settings
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(done, json.dumps(res, indent=2) + "\n")
    return res


def _final(h: dict) -> dict:
    return {
        "pass@1": h["final"]["eval/pass@1"],
        "pass@1_start": h["start"]["eval/pass@1"],
    }


def teacher_pre(root: Path, seed: int, a) -> dict:
    from tempering.config import build
    from tempering.methods.pretrain import PretrainConfig, pretrain
    from tempering.models import load_policy
    from tempering.progress import count_parameters

    out = root / "teacher_pre"
    cfg = build(
        PretrainConfig,
        {
            "model": {"name": TEACHER, "tokenizer": STUDENT},
            "task": task(a),
            "run": {
                "steps": 3000,
                "eval_every": 25,
                "eval_size": 100,
                "seed": seed,
                "out_dir": str(out),
                "progress": False,
                "threads": 1,
                "stop_at_pass": a.stop,
            },
            "rollout": {"prompts_per_step": 64, "max_new_tokens": 6},
            "optim": {"lr": 1e-3},
        },
    )
    r = pretrain(cfg)
    params = count_parameters(load_policy(r["model"])[0])[0]
    return {"model": r["model"], "pass@1": r["heldout_pass@1"], "steps": r["steps"], "parameters": params}


def teacher_rl(root: Path, seed: int, a, tref: dict) -> dict:
    from tempering.recipes.runner import run

    out = root / "teacher_rl"
    cfg = {
        "model": {"name": tref["model"]},
        "task": task(a),
        "rollout": TEACHER_ROLLOUT,
        "optim": {"lr": a.teacher_lr},
        "run": _run(out, a.teacher_steps, seed),
    }
    return {"model": str(out / "final"), **_final(run("train", cfg, **resumable(out)))}


def arm(name: str, root: Path, seed: int, a, teacher: dict, tref: dict) -> dict:
    from tempering.recipes.runner import run

    out = root / name
    common = {
        "model": {"name": STUDENT},
        "task": task(a),
        "rollout": STUDENT_ROLLOUT,
        "optim": {"lr": a.lr},
        "run": _run(out, a.steps, seed),
    }
    pair = {"pairs": [{"teacher": {"path": teacher["model"]}, "reference": {"path": tref["model"]}}], "top_k": 16}
    clip = {"clip_low": 0.2, "clip_high": 0.2, "dual_clip": 3.0}
    if name == "grpo":
        return _final(run("train", {**common, "loss": {"advantage": "grpo"}}, **resumable(out)))
    if name == "opd":
        return _final(run("distill", {**common, "teacher": {"path": teacher["model"]}}, **resumable(out)))
    if name == "direct_opd":
        return _final(run("direct-opd", {**common, "loss": clip, "direct_opd": pair}, **resumable(out)))
    if name == "direct_opd_fixed_alpha":
        return _final(
            run("direct-opd", {**common, "loss": clip, "direct_opd": {**pair, "alpha_rate": 0.0}}, **resumable(out))
        )
    raise ValueError(name)


def teachers(root: Path, seed: int, a) -> tuple[dict, dict]:
    tref = cached(root / "teacher_pre", teacher_pre, root, seed, a)
    return tref, cached(root / "teacher_rl", teacher_rl, root, seed, a, tref)


def run_arm(name: str, root: Path, seed: int, a) -> dict:
    tref, teacher = teachers(root, seed, a)
    return cached(root / name, arm, name, root, seed, a, teacher, tref)


def spread(vals: list[float]) -> dict:
    return {"mean": st.mean(vals), "std": st.stdev(vals) if len(vals) > 1 else 0.0, "values": vals}


def machine_line(start: dict, end: dict) -> str:
    """The page's machine line, from `machine()` at the start and at the end of the run."""
    return (
        f"Machine: {start['cpu']}, torch {start['torch']}, Python {start['python']}; 1024^3 float32 matmul on 2 threads "
        f"{start['matmul_gflops_2_threads']} GFLOP/s at the start, {end['matmul_gflops_2_threads']} at the end; load "
        f"{' '.join(start['load'])} / {' '.join(end['load'])}."
    )


def render(p: argparse.ArgumentParser, a, name: str, write_results) -> None:
    """--render: the page and claims of RESULTS/NAME.json written again from its stored runs, with the settings
    its stored command ran with."""
    if not a.results:
        p.error("--render rewrites the page in --results: name it")
    doc = json.loads((Path(a.results) / f"{name}.json").read_text())
    ran = p.parse_args(shlex.split(doc["command"])[2:])
    ran.results, ran.notes = a.results, a.notes
    m = doc["machine"]
    write_results(doc["runs"], ran, doc["command"], m["start"], m["end"], rendered="python " + " ".join(sys.argv))


def machine() -> dict:
    import torch

    a = torch.randn(1024, 1024)
    torch.set_num_threads(2)
    a @ a
    t0 = time.perf_counter()
    for _ in range(5):
        a @ a
    gflops = 5 * 2 * 1024**3 / (time.perf_counter() - t0) / 1e9
    return {
        "cpu": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "torch": torch.__version__,
        "python": platform.python_version(),
        "matmul_gflops_2_threads": round(gflops, 1),
        "load": open("/proc/loadavg").read().split()[:3],
    }


def arm_summaries(rows: list[dict], arms, rollouts: int) -> dict:
    """Each arm's held-out pass@1 over the seeds' runs, its rollouts and seconds."""
    return {
        k: {
            "pass_at_1_mean": spread([r[k]["pass@1"] for r in rows])["mean"],
            "pass_at_1_std": spread([r[k]["pass@1"] for r in rows])["std"],
            "per_seed": [r[k]["pass@1"] for r in rows],
            "student_rollouts": rollouts,
            "seconds": st.mean(r[k]["seconds"] for r in rows),
        }
        for k in arms
    }


def claims(rows: list[dict], arms, rollouts: int, heldout_size: int) -> dict[str, dict]:
    """The paper's claims, paired by seed: student arms against each other (same student rollouts), and the
    Direct-OPD student against its post-RL teacher and its own start (fixed models)."""
    from tempering.experiments import Arm, judge

    heldout = f"sums 1..30: {heldout_size} held-out sums"
    arm = lambda k: Arm(k, {r["seed"]: r[k]["pass@1"] for r in rows}, heldout, rollouts)
    fixed = lambda name, pick: Arm(name, {r["seed"]: pick(r) for r in rows}, heldout, None)
    out = {}
    if {"direct_opd", "grpo"} <= set(arms):
        out[f"Direct-OPD is at least as good as step-matched GRPO (within {MARGIN:g} points)"] = judge(
            arm("direct_opd"), arm("grpo"), margin=MARGIN
        )
    if {"direct_opd", "opd"} <= set(arms):
        out["Direct-OPD beats OPD from the post-RL teacher"] = judge(arm("direct_opd"), arm("opd"))
    if {"direct_opd", "direct_opd_fixed_alpha"} <= set(arms):
        out["adaptive alpha beats fixed alpha"] = judge(arm("direct_opd"), arm("direct_opd_fixed_alpha"))
    if "direct_opd" in arms:
        out["the Direct-OPD student beats its post-RL teacher"] = judge(
            arm("direct_opd"), fixed("post-RL teacher", lambda r: r["teacher_rl"]["pass@1"])
        )
        out["Direct-OPD improves the student on its start"] = judge(
            arm("direct_opd"), fixed("student start", lambda r: r["direct_opd"]["pass@1_start"])
        )
    return out


def write_results(rows: list[dict], a, command: str, start: dict, end: dict, rendered: str | None = None) -> None:
    from tempering.experiments import claims_table
    from tempering.runlog import atomic_write_text

    out = Path(a.results)
    n, seeds = len(rows), [r["seed"] for r in rows]
    rollouts = a.steps * STUDENT_ROLLOUT["prompts_per_step"] * STUDENT_ROLLOUT["group_size"]
    arms = arm_summaries(rows, a.arms, rollouts)
    judged = claims(rows, a.arms, rollouts, a.heldout_size)
    starts = [r[a.arms[0]]["pass@1_start"] for r in rows]
    doc = {
        "command": command,
        "seeds": seeds,
        "machine": {"start": start, "end": end},
        "student": STUDENT,
        "task": task(a),
        "student_rollout": STUDENT_ROLLOUT,
        "teacher_rollout": TEACHER_ROLLOUT,
        "student_steps": a.steps,
        "lr": a.lr,
        "teacher": {
            "model": TEACHER,
            "parameters": rows[0]["teacher_pre"]["parameters"],
            "pass_at_1_before_rl": spread([r["teacher_pre"]["pass@1"] for r in rows]),
            "pass_at_1_after_rl": spread([r["teacher_rl"]["pass@1"] for r in rows]),
            "warm_start_steps": [r["teacher_pre"]["steps"] for r in rows],
            "rl_steps": a.teacher_steps,
            "rl_lr": a.teacher_lr,
            "seconds": st.mean(r["teacher_pre"]["seconds"] + r["teacher_rl"]["seconds"] for r in rows),
        },
        "student_start": spread(starts),
        "arms": arms,
        "claims": judged,
        "runs": rows,
        **({"rendered": rendered} if rendered else {}),
    }
    t = doc["teacher"]
    lines = [
        "# Direct-OPD weak-to-strong into a pretrained student (SmolLM2-135M-Instruct)",
        "",
        f"Command: `{command}`  ",
        *([f"Page and claims rewritten from the stored numbers: `{rendered}`  "] if rendered else []),
        f"Seeds: {', '.join(map(str, seeds))}  ",
        machine_line(start, end) + " Two runs at a time, one torch thread each.",
        "",
        'Task: sums of 1..30 asked as "What is a + b? Answer with just the number." through SmolLM2\'s chat '
        f"template, the last number of the first line read as the answer; greedy pass@1 on {a.heldout_size} "
        "held-out sums training never sees.",
        "",
        f"Teacher pair: {TEACHER} with SmolLM2's tokenizer ({t['parameters']:,} parameters, about "
        f"{134_515_008 / t['parameters']:.0f}x fewer than the student), warm-started until greedy pass@1 >= {a.stop} "
        f"(steps per seed: {', '.join(map(str, t['warm_start_steps']))}), then {a.teacher_steps} GRPO steps of "
        f"{TEACHER_ROLLOUT['prompts_per_step']} prompts x {TEACHER_ROLLOUT['group_size']} at lr {a.teacher_lr}: "
        f"pass@1 {t['pass_at_1_before_rl']['mean']:.3f} ± {t['pass_at_1_before_rl']['std']:.3f} before RL, "
        f"{t['pass_at_1_after_rl']['mean']:.3f} ± {t['pass_at_1_after_rl']['std']:.3f} after "
        f"({t['seconds']:.0f} s per seed for both).",
        "",
        f"Student arms: {a.steps} steps of {STUDENT_ROLLOUT['prompts_per_step']} prompts x "
        f"{STUDENT_ROLLOUT['group_size']} samples ({rollouts} student rollouts each), lr {a.lr}, full fine-tuning; "
        f"the student starts at pass@1 {doc['student_start']['mean']:.3f}. Direct-OPD: top-16 candidates, "
        "clip 0.2 / 0.2, dual clip 3, alpha 2.5 (adaptive: 1% per step toward sign(rbar) within [0.5, 2.5]; "
        "fixed: alpha_rate 0).",
        "",
        f"| arm | held-out pass@1, mean | std over {n} seeds | per seed | student rollouts | seconds per run |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    lines += [
        f"| {LABELS[k]} | {v['pass_at_1_mean']:.3f} | {v['pass_at_1_std']:.3f} | "
        f"{', '.join(f'{x:.3f}' for x in v['per_seed'])} | {v['student_rollouts']} | {v['seconds']:.0f} |"
        for k, v in arms.items()
    ]
    lines += [
        "",
        "The paper's claims, paired by seed (same teacher pair), in points of held-out pass@1:",
        "",
        *claims_table(judged),
    ]
    if a.notes:
        lines += ["", Path(a.notes).read_text().strip()]
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "direct_opd_real.json", json.dumps(doc, indent=2) + "\n")
    atomic_write_text(out / "direct_opd_real.md", "\n".join(lines) + "\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=20, help="student steps per arm")
    p.add_argument("--lr", type=float, default=1e-5, help="the student's learning rate")
    p.add_argument("--teacher-steps", type=int, default=100, help="GRPO steps of the small teacher")
    p.add_argument("--teacher-lr", type=float, default=1e-4)
    p.add_argument("--stop", type=float, default=0.3, help="the teacher's warm start stops at this greedy pass@1")
    p.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS)
    p.add_argument("--heldout-size", type=int, default=100, help="held-out sums evaluated")
    p.add_argument("--lanes", type=int, default=2, help="runs at a time (one torch thread each)")
    p.add_argument("--out", default="runs/direct_opd_real")
    p.add_argument("--results", help="write direct_opd_real.md / .json into this folder")
    p.add_argument("--notes", help="a markdown file appended to the results page (the reading of the numbers)")
    p.add_argument(
        "--render",
        action="store_true",
        help="no training: rewrite RESULTS/direct_opd_real.md and the claims from the runs in its JSON",
    )
    a = p.parse_args()
    if a.render:
        return render(p, a, "direct_opd_real", write_results)
    start = machine()
    roots = {s: Path(a.out) / f"seed{s}" for s in a.seeds}
    # spawned, not forked: the parent has started torch's thread pool
    with ProcessPoolExecutor(
        a.lanes, mp_context=multiprocessing.get_context("spawn")
    ) as pool:  # each run in a process of its own: one torch thread each
        for f in [pool.submit(teachers, roots[s], s, a) for s in a.seeds]:
            f.result()
        jobs = {(s, k): pool.submit(run_arm, k, roots[s], s, a) for s in a.seeds for k in a.arms}
        done = {key: f.result() for key, f in jobs.items()}
    rows = []
    for s in a.seeds:
        tref, teacher = teachers(roots[s], s, a)
        rows.append({"seed": s, "teacher_pre": tref, "teacher_rl": teacher, **{k: done[s, k] for k in a.arms}})
        print(s, {k: round(done[s, k]["pass@1"], 3) for k in a.arms}, flush=True)
    if a.results:
        write_results(rows, a, "python " + " ".join(sys.argv), start, machine())


if __name__ == "__main__":
    main()
