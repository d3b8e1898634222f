"""Teacher-Union OPD into a pretrained student: two small teachers, each RL-trained on one half of a task
(sums, differences), compressed into SmolLM2-135M-Instruct by TU-OPD, against the best single teacher
through the same method; 3 seeds, the same student rollouts in every arm.

    python examples/expand_compress/union_real.py --seeds 0 1 2 --results docs/results

Per seed: a tiny-s teacher on SmolLM2's tokenizer is warm-started on the whole task (sums and differences
of 1..30 asked in words, through the chat template) until greedy pass@1 >= --stop, then two GRPO runs from
it, one on sums and one on differences, make the teacher pair. Each teacher is evaluated on the student's
task (held-out pass@1); the better one is the single-teacher arm. Both student arms run `tempering
tu-opd` with its defaults (quality weighting, gating at rho 0.5, examples without a reliable teacher left
out of the loss, pass rates measured at the start). Stages are cached in --out (a finished stage's
summary.json).

Writes tu_opd_real.md / tu_opd_real.json: `teacher` (`parameters`, `pass_at_1_before_rl`,
`pass_at_1_after_rl` per sub-task teacher on the whole task), `student_start`, `arms` (arm ->
{`pass_at_1_mean`, `pass_at_1_std`, `per_seed`, `student_rollouts`, `seconds`}), `claims` (claim -> the
shared rule's record: `difference_points` {`mean`, `ci95`, `per_seed`}, `verdict`).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "direct_opd"))
from weak_to_strong_real import (
    STUDENT,
    STUDENT_ROLLOUT,
    TEACHER,
    TEACHER_ROLLOUT,
    _final,
    _run,
    arm_summaries,
    cached,
    machine,
    machine_line,
    render,
    spread,
)

TASK = {
    "family": "arithmetic",
    "args": {
        "min_value": 1,
        "max_value": 30,
        "ops": "+-",
        "prompt_template": "What is {a} {op} {b}? Answer with just the number.",
        "read": "last_number",
        "heldout_share": 0.2,
    },
    "train_size": 1400,
    "heldout_size": 100,
}
HALVES = {"sums": "+", "differences": "-"}
ARMS = ("tu_opd", "best_single")
LABELS = {
    "tu_opd": "TU-OPD from both sub-task teachers",
    "best_single": "TU-OPD from the better single teacher",
}


def task(a, ops: str = "+-") -> dict:
    """The whole task, or one half of it (half as many training problems exist)."""
    size = TASK["train_size"] // (3 - len(ops))
    return {**TASK, "args": {**TASK["args"], "ops": ops}, "train_size": size, "heldout_size": a.heldout_size}


def teacher_pre(root: Path, seed: int, a) -> dict:
    from tempering.config import build
    from tempering.methods.pretrain import PretrainConfig, pretrain
    from tempering.models import load_policy
    from tempering.progress import count_parameters

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
                "out_dir": str(root / "teacher_pre"),
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


def on_whole_task(run_dir: Path, a) -> float:
    """A teacher's greedy held-out pass@1 on the student's task (sums and differences)."""
    out = run_dir / "whole_task.json"
    cmd = [sys.executable, "-m", "tempering.cli", "eval", str(run_dir), "--arg", "ops=+-", "--k", "1"]
    subprocess.run([*cmd, "--n", str(a.heldout_size), "--json", str(out)], check=True, capture_output=True)
    return json.loads(out.read_text())["pass@1"]


def teacher_rl(root: Path, seed: int, a, tref: dict, half: str) -> dict:
    from tempering.recipes.runner import run

    out = root / f"teacher_{half}"
    cfg = {
        "model": {"name": tref["model"]},
        "task": task(a, HALVES[half]),
        "rollout": TEACHER_ROLLOUT,
        "optim": {"lr": a.teacher_lr},
        "run": _run(out, a.teacher_steps, seed),
    }
    own = _final(run("train", cfg))
    return {"model": str(out / "final"), "own_half": own["pass@1"], "pass@1": on_whole_task(out, a)}


def teachers(root: Path, seed: int, a) -> tuple[dict, dict[str, dict]]:
    tref = cached(root / "teacher_pre", teacher_pre, root, seed, a)
    return tref, {h: cached(root / f"teacher_{h}", teacher_rl, root, seed, a, tref, h) for h in HALVES}


def arm(name: str, root: Path, seed: int, a, pair: dict[str, dict]) -> dict:
    from tempering.recipes.runner import run

    if name == "tu_opd":
        chosen = pair
    else:
        best = max(pair, key=lambda h: pair[h]["pass@1"])
        chosen = {best: pair[best]}
    cfg = {
        "model": {"name": STUDENT},
        "task": task(a),
        "rollout": STUDENT_ROLLOUT,
        "optim": {"lr": a.lr},
        "run": _run(root / name, a.steps, seed),
        "tu_opd": {"teachers": {h: {"path": t["model"]} for h, t in chosen.items()}},
    }
    return {**_final(run("tu-opd", cfg)), "teachers": sorted(chosen)}


def run_arm(name: str, root: Path, seed: int, a) -> dict:
    _, pair = teachers(root, seed, a)
    return cached(root / name, arm, name, root, seed, a, pair)


def claims(rows: list[dict], rollouts: int, heldout_size: int) -> dict[str, dict]:
    """The union against the better single teacher through the same method, and the union's student against
    that teacher and its own start (fixed models), paired by seed."""
    from tempering.experiments import Arm, judge

    heldout = f"sums and differences of 1..30: {heldout_size} held-out problems"
    arm = lambda k: Arm(k, {r["seed"]: r[k]["pass@1"] for r in rows}, heldout, rollouts)
    fixed = lambda name, pick: Arm(name, {r["seed"]: pick(r) for r in rows}, heldout, None)
    best = fixed("better single teacher", lambda r: max(t["pass@1"] for t in r["pair"].values()))
    return {
        "TU-OPD from both sub-task teachers beats TU-OPD from the better one": judge(arm("tu_opd"), arm("best_single")),
        "the TU-OPD student beats the better single teacher": judge(arm("tu_opd"), best),
        "TU-OPD improves the student on its start": judge(
            arm("tu_opd"), fixed("student start", lambda r: r["tu_opd"]["pass@1_start"])
        ),
    }


def write_results(rows: list[dict], a, command: str, start: dict, end: dict, rendered: str | None = None) -> None:
    from tempering.experiments import claims_table
    from tempering.runlog import atomic_write_text

    n, seeds = len(rows), [r["seed"] for r in rows]
    rollouts = a.steps * STUDENT_ROLLOUT["prompts_per_step"] * STUDENT_ROLLOUT["group_size"]
    arms = arm_summaries(rows, ARMS, rollouts)
    for k in ARMS:
        arms[k]["teachers_per_seed"] = [r[k]["teachers"] for r in rows]
    judged = claims(rows, rollouts, a.heldout_size)
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
            "pass_at_1_after_rl": {h: spread([r["pair"][h]["pass@1"] for r in rows]) for h in HALVES},
            "own_half_after_rl": {h: spread([r["pair"][h]["own_half"] for r in rows]) for h in HALVES},
            "warm_start_steps": [r["teacher_pre"]["steps"] for r in rows],
            "rl_steps": a.teacher_steps,
            "rl_lr": a.teacher_lr,
        },
        "student_start": spread([r["tu_opd"]["pass@1_start"] for r in rows]),
        "arms": arms,
        "claims": judged,
        "runs": rows,
        **({"rendered": rendered} if rendered else {}),
    }
    t = doc["teacher"]
    after = ", ".join(
        f"{h} {t['pass_at_1_after_rl'][h]['mean']:.3f} ± {t['pass_at_1_after_rl'][h]['std']:.3f} "
        f"(on its own half {t['own_half_after_rl'][h]['mean']:.3f})"
        for h in HALVES
    )
    lines = [
        "# Teacher-Union OPD into a pretrained student (SmolLM2-135M-Instruct)",
        "",
        f"Command: `{command}`  ",
        *([f"Page and claims rewritten from the stored numbers: `{rendered}`  "] if rendered else []),
        f"Seeds: {', '.join(map(str, seeds))}  ",
        machine_line(start, end) + " Two runs at a time, one torch thread each.",
        "",
        'Task: sums and differences of 1..30 asked as "What is a + b? Answer with just the number." through '
        "SmolLM2's chat template, the last number of the first line read as the answer; greedy pass@1 on "
        f"{a.heldout_size} held-out problems.",
        "",
        f"Teachers: {TEACHER} with SmolLM2's tokenizer ({t['parameters']:,} parameters), warm-started on the whole task "
        f"until greedy pass@1 >= {a.stop} (pass@1 {t['pass_at_1_before_rl']['mean']:.3f} ± "
        f"{t['pass_at_1_before_rl']['std']:.3f}), then {a.teacher_steps} GRPO steps of "
        f"{TEACHER_ROLLOUT['prompts_per_step']} prompts x {TEACHER_ROLLOUT['group_size']} at lr {a.teacher_lr} on one "
        f"half each; held-out pass@1 on the whole task after RL: {after}.",
        "",
        f"Student arms: `tempering tu-opd` (defaults: quality weights, gating at rho 0.5, examples with no reliable "
        f"teacher left out), {a.steps} steps of {STUDENT_ROLLOUT['prompts_per_step']} prompts x "
        f"{STUDENT_ROLLOUT['group_size']} samples ({rollouts} student rollouts each), lr {a.lr}, full fine-tuning; "
        f"the student starts at pass@1 {doc['student_start']['mean']:.3f}.",
        "",
        f"| arm | held-out pass@1, mean | std over {n} seeds | per seed | teachers per seed | seconds per run |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    lines += [
        f"| {LABELS[k]} | {v['pass_at_1_mean']:.3f} | {v['pass_at_1_std']:.3f} | "
        f"{', '.join(f'{x:.3f}' for x in v['per_seed'])} | "
        f"{'; '.join('+'.join(ts) for ts in v['teachers_per_seed'])} | {v['seconds']:.0f} |"
        for k, v in arms.items()
    ]
    lines += ["", "The claims, paired by seed, in points of held-out pass@1:", "", *claims_table(judged)]
    if a.notes:
        lines += ["", Path(a.notes).read_text().strip()]
    out = Path(a.results)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "tu_opd_real.json", json.dumps(doc, indent=2) + "\n")
    atomic_write_text(out / "tu_opd_real.md", "\n".join(lines) + "\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=12, help="student steps per arm")
    p.add_argument("--lr", type=float, default=1e-5, help="the student's learning rate")
    p.add_argument("--teacher-steps", type=int, default=60, help="GRPO steps of each sub-task teacher")
    p.add_argument("--teacher-lr", type=float, default=1e-4)
    p.add_argument("--stop", type=float, default=0.3, help="the teachers' warm start stops at this greedy pass@1")
    p.add_argument("--heldout-size", type=int, default=100)
    p.add_argument("--lanes", type=int, default=2, help="runs at a time (one torch thread each)")
    p.add_argument("--out", default="runs/tu_opd_real")
    p.add_argument("--results", help="write tu_opd_real.md / .json into this folder")
    p.add_argument("--notes", help="a markdown file appended to the results page (the reading of the numbers)")
    p.add_argument(
        "--render",
        action="store_true",
        help="no training: rewrite RESULTS/tu_opd_real.md and the claims from the runs in its JSON",
    )
    a = p.parse_args()
    if a.render:
        return render(p, a, "tu_opd_real", write_results)
    start = machine()
    roots = {s: Path(a.out) / f"seed{s}" for s in a.seeds}
    with ProcessPoolExecutor(a.lanes, mp_context=multiprocessing.get_context("spawn")) as pool:
        for f in [pool.submit(teachers, roots[s], s, a) for s in a.seeds]:
            f.result()
        jobs = {(s, k): pool.submit(run_arm, k, roots[s], s, a) for s in a.seeds for k in ARMS}
        done = {key: f.result() for key, f in jobs.items()}
    rows = []
    for s in a.seeds:
        tref, pair = teachers(roots[s], s, a)
        rows.append({"seed": s, "teacher_pre": tref, "pair": pair, **{k: done[s, k] for k in ARMS}})
        print(s, {k: round(done[s, k]["pass@1"], 3) for k in ARMS}, flush=True)
    if a.results:
        write_results(rows, a, "python " + " ".join(sys.argv), start, machine())


if __name__ == "__main__":
    main()
