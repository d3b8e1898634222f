"""TU-OPD, uniform multi-teacher OPD and OPD from the best teacher into SmolLM2-135M-Instruct, from specialist
teachers that are SmolLM2 copies RL'd on complementary sub-tasks, against whole-task GRPO at equal student
rollouts; the student compared with each teacher, as the paper does.

    # the cheap check first: do the specialists complement each other? (per-example best >= single best + 5)
    python examples/expand_compress/specialists_real.py --seeds 0 --upto check --out runs/specialists
    # everything, then the page
    python examples/expand_compress/specialists_real.py --seeds 0 1 2 --out runs/specialists --results docs/results

Per seed: one GRPO run of SmolLM2 per sub-task (`--subtasks`: sums / differences, or two reasoning-gym
generators when the arithmetic halves do not complement each other). The check: on the whole task's held-out
examples, the share a per-example best teacher solves (any teacher right) against the best single teacher's
pass@1; with less than `--min-gain` points between them there is nothing for a union to add, the page says
so and no student runs. Then, from SmolLM2, at equal student rollouts: TU-OPD (quality weights, gating),
TU-OPD with Consensus-Residual Decomposition, uniform-average multi-teacher OPD, OPD from the best teacher
(on held-out), and GRPO on the whole task. Every stage is cached in --out (its summary.json): a stopped run
resumes where it stopped. Writes tu_opd_real.md / tu_opd_real.json with `claims`, `gate`, `seeds`,
`command`, `machine`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from tempering.recipes.demo import REAL_GRPO

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "direct_opd"))
from weak_to_strong_real import (
    STUDENT,
    STUDENT_ROLLOUT,
    _final,
    _run,
    arm_summaries,
    cached,
    machine,
    machine_line,
    resumable,
)

ARITHMETIC = REAL_GRPO["task"]["args"]  # the real-model demo's sums in words
SUBTASKS = {
    "arithmetic": {
        "whole": {"family": "arithmetic", "args": {**ARITHMETIC, "ops": "+-"}},
        "parts": {
            "sums": {"family": "arithmetic", "args": {**ARITHMETIC, "ops": "+"}},
            "differences": {"family": "arithmetic", "args": {**ARITHMETIC, "ops": "-"}},
        },
        "max_new_tokens": 12,
    },
    "reasoning_gym": {  # two skills that share little: counting letters and sorting words
        "whole": {"family": "reasoning_gym", "args": {"name": ["letter_counting", "word_sorting"]}},
        "parts": {
            "letter_counting": {"family": "reasoning_gym", "args": {"name": "letter_counting"}},
            "word_sorting": {"family": "reasoning_gym", "args": {"name": "word_sorting"}},
        },
        "max_new_tokens": 48,
    },
}
ARMS = ("tu_opd", "tu_opd_crd", "uniform_opd", "best_teacher_opd", "grpo")
LABELS = {
    "tu_opd": "TU-OPD (quality weights, gating)",
    "tu_opd_crd": "TU-OPD + Consensus-Residual",
    "uniform_opd": "uniform-average multi-teacher OPD",
    "best_teacher_opd": "OPD from the best teacher",
    "grpo": "GRPO on the whole task",
}
STAGES = ("teachers", "check", "students")


def section(spec: dict, a, train_size: int = 1400) -> dict:
    return {**spec, "train_size": train_size, "heldout_size": a.heldout_size}


def rollout_of(a) -> dict:
    return {**STUDENT_ROLLOUT, "max_new_tokens": SUBTASKS[a.subtasks]["max_new_tokens"]}


def teacher(root: Path, seed: int, a, part: str) -> dict:
    """A specialist: GRPO of SmolLM2 on one sub-task."""
    from tempering.recipes.runner import run

    out = root / f"seed{seed}" / f"teacher_{part}"
    cfg = {
        "model": {"name": STUDENT},
        "task": section(SUBTASKS[a.subtasks]["parts"][part], a, 700),
        "rollout": rollout_of(a),
        "optim": {"lr": a.teacher_lr},
        "run": _run(out, a.teacher_steps, seed),
    }
    return {"model": str(out / "final"), "own_part": _final(run("train", cfg, **resumable(out)))["pass@1"]}


def whole_task_answers(model: str, a) -> list[bool]:
    """A model's greedy success on each held-out example of the whole task, in a fixed order."""
    from tempering.experiments import greedy_answers

    answers = greedy_answers(
        model, section(SUBTASKS[a.subtasks]["whole"], a), a.heldout_size, rollout_of(a)["max_new_tokens"]
    )
    return [x["success"] for x in answers]


def check(root: Path, seed: int, a, teachers: dict[str, dict]) -> dict:
    """Whether the specialists complement each other: the per-example best against the best single one."""
    solved = {part: whole_task_answers(t["model"], a) for part, t in teachers.items()}
    solved["student"] = whole_task_answers(STUDENT, a)
    rate = {k: sum(v) / len(v) for k, v in solved.items()}
    parts = list(teachers)
    best = max(parts, key=rate.get)
    union = sum(any(solved[p][i] for p in parts) for i in range(len(solved[best]))) / len(solved[best])
    gain = 100 * (union - rate[best])
    return {
        "pass@1": rate,
        "best_teacher": best,
        "per_example_best": union,
        "gain_points": gain,
        "min_gain_points": a.min_gain,
        "passed": gain >= a.min_gain,
    }


def arm(name: str, root: Path, seed: int, a, teachers: dict[str, dict], best: str) -> dict:
    from tempering.recipes.runner import run

    out = root / f"seed{seed}" / name
    common = {
        "model": {"name": STUDENT},
        "task": section(SUBTASKS[a.subtasks]["whole"], a),
        "rollout": rollout_of(a),
        "optim": {"lr": a.lr},
        "run": _run(out, a.steps, seed),
    }
    specs = {part: {"path": t["model"]} for part, t in teachers.items()}
    tu = {"teachers": specs, "rho": a.rho}
    configs = {
        "tu_opd": ("tu-opd", {**common, "tu_opd": tu}),
        "tu_opd_crd": ("tu-opd", {**common, "tu_opd": {**tu, "residual": True}}),
        "uniform_opd": ("tu-opd", {**common, "tu_opd": {**tu, "weighting": "uniform", "gating": False}}),
        "best_teacher_opd": ("distill", {**common, "teacher": specs[best]}),
        "grpo": ("train", {**common, "loss": {"advantage": "grpo"}}),
    }
    verb, cfg = configs[name]
    return _final(run(verb, cfg, **resumable(out)))


def stages(root: Path, seed: int, a) -> dict:
    """Every stage of one seed up to --upto, each cached with the settings it ran with."""
    keys = lambda *names: {n: getattr(a, n) for n in names}
    made = keys("subtasks", "teacher_steps", "teacher_lr")
    parts = SUBTASKS[a.subtasks]["parts"]
    teachers = {
        p: cached(root / f"seed{seed}" / f"teacher_{p}", teacher, root, seed, a, p, settings=made) for p in parts
    }
    row: dict = {"seed": seed, "teachers": teachers}
    if STAGES.index(a.upto) < 1:
        return row
    checked = {**made, **keys("heldout_size", "min_gain")}
    row["check"] = cached(root / f"seed{seed}" / "check", check, root, seed, a, teachers, settings=checked)
    if STAGES.index(a.upto) < 2 or not row["check"]["passed"]:
        return row
    trained = {**checked, **keys("steps", "lr", "rho")}
    best = row["check"]["best_teacher"]
    for name in a.arms:
        out = root / f"seed{seed}" / name
        row[name] = cached(out, arm, name, root, seed, a, teachers, best, settings=trained)
    return row


def claims(rows: list[dict], arms, rollouts: int, a) -> dict[str, dict]:
    """The paper's claims, paired by seed: the TU-OPD student against each teacher (fixed models) and the other
    student arms (the same student rollouts)."""
    from tempering.experiments import Arm, judge

    heldout = f"{a.subtasks}: {a.heldout_size} held-out examples of the whole task"
    arm_ = lambda k: Arm(k, {r["seed"]: r[k]["pass@1"] for r in rows}, heldout, rollouts)
    out = {}
    if "tu_opd" not in arms:
        return out
    for part in SUBTASKS[a.subtasks]["parts"]:
        teacher_ = Arm(f"{part} teacher", {r["seed"]: r["check"]["pass@1"][part] for r in rows}, heldout, None)
        out[f"the TU-OPD student beats the {part} teacher"] = judge(arm_("tu_opd"), teacher_)
    for other, text in (
        ("uniform_opd", "TU-OPD beats uniform-average multi-teacher OPD"),
        ("best_teacher_opd", "TU-OPD beats OPD from the best teacher"),
        ("grpo", "TU-OPD beats whole-task GRPO at equal student rollouts"),
    ):
        if other in arms:
            out[text] = judge(arm_("tu_opd"), arm_(other))
    if "tu_opd_crd" in arms:
        out["Consensus-Residual Decomposition adds to TU-OPD"] = judge(arm_("tu_opd_crd"), arm_("tu_opd"))
    return out


def write_results(rows: list[dict], a, command: str, start: dict, end: dict) -> None:
    from tempering.experiments import claims_table
    from tempering.runlog import atomic_write_text

    seeds = [r["seed"] for r in rows]
    ro = rollout_of(a)
    rollouts = a.steps * ro["prompts_per_step"] * ro["group_size"]
    ran = [k for k in a.arms if all(k in r for r in rows)]
    parts = list(SUBTASKS[a.subtasks]["parts"])
    doc = {
        "command": command,
        "seeds": seeds,
        "machine": {"start": start, "end": end},
        "student": STUDENT,
        "subtasks": SUBTASKS[a.subtasks],
        "student_rollout": ro,
        "student_steps": a.steps,
        "lr": a.lr,
        "teachers": {"rl_steps": a.teacher_steps, "rl_lr": a.teacher_lr},
        "gate": {r["seed"]: r["check"] for r in rows},
        "arms": arm_summaries(rows, ran, rollouts) if ran else {},
        "claims": claims(rows, ran, rollouts, a),
        "runs": rows,
    }
    lines = [
        "# Teacher-Union OPD into SmolLM2-135M-Instruct from SmolLM2 specialists",
        "",
        f"Command: `{command}`  ",
        f"Seeds: {', '.join(map(str, seeds))}  ",
        machine_line(start, end),
        "",
        f"Sub-tasks ({a.subtasks}): {', '.join(parts)}; each specialist is SmolLM2 after {a.teacher_steps} GRPO steps "
        f"on its sub-task at lr {a.teacher_lr}. Held-out: greedy pass@1 on {a.heldout_size} examples of the whole task.",
        "",
        "Check before any student: the per-example best teacher (any specialist right) against the best single "
        f"one, on the whole task's held-out examples; students run when it is ahead by >= {a.min_gain:g} points (ours).",
        "",
        "| seed | student start | "
        + " | ".join(f"{p} teacher" for p in parts)
        + " | per-example best | gain (points) | passed |",
        "| --- |" + " --- |" * (len(parts) + 4),
        *[
            f"| {r['seed']} | {r['check']['pass@1']['student']:.3f} | "
            + " | ".join(f"{r['check']['pass@1'][p]:.3f}" for p in parts)
            + f" | {r['check']['per_example_best']:.3f} | {r['check']['gain_points']:+.1f} | "
            f"{'yes' if r['check']['passed'] else 'no'} |"
            for r in rows
        ],
        "",
    ]
    if not ran:
        passed = all(r["check"]["passed"] for r in rows)
        lines += [
            "No student arm ran: " + ("not run yet." if passed else "the specialists do not complement each other."),
            "",
        ]
    else:
        lines += [
            f"Student arms from SmolLM2: {a.steps} steps of {ro['prompts_per_step']} prompts x {ro['group_size']} samples "
            f"({rollouts} student rollouts each), lr {a.lr}; TU-OPD gates at rho {a.rho}.",
            "",
            "| arm | held-out pass@1, mean | std | per seed | seconds per run |",
            "| --- | --- | --- | --- | --- |",
            *[
                f"| {LABELS[k]} | {v['pass_at_1_mean']:.3f} | {v['pass_at_1_std']:.3f} | "
                f"{', '.join(f'{x:.3f}' for x in v['per_seed'])} | {v['seconds']:.0f} |"
                for k, v in doc["arms"].items()
            ],
            "",
            "The paper's claims, paired by seed, in points of held-out pass@1:",
            "",
            *claims_table(doc["claims"]),
        ]
    out = Path(a.results)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "tu_opd_real.json", json.dumps(doc, indent=2) + "\n")
    atomic_write_text(out / "tu_opd_real.md", "\n".join(lines) + "\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--subtasks", choices=sorted(SUBTASKS), default="arithmetic")
    p.add_argument("--upto", choices=STAGES, default="students", help="the last stage to run")
    p.add_argument("--teacher-steps", type=int, default=40, help="GRPO steps of each specialist")
    p.add_argument("--teacher-lr", type=float, default=1e-5)
    p.add_argument("--min-gain", type=float, default=5.0, help="points the per-example best must add (ours)")
    p.add_argument("--steps", type=int, default=40, help="student steps per arm")
    p.add_argument("--lr", type=float, default=1e-5)
    p.add_argument("--rho", type=float, default=0.5)
    p.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS)
    p.add_argument("--heldout-size", type=int, default=100)
    p.add_argument("--out", default="runs/specialists")
    p.add_argument("--results", help="write tu_opd_real.md / .json into this folder")
    a = p.parse_args()
    start, t0 = machine(), time.perf_counter()
    rows = [stages(Path(a.out), s, a) for s in a.seeds]
    for r in rows:
        print(json.dumps({k: v for k, v in r.items() if k != "teachers"}), flush=True)
    print(f"{time.perf_counter() - t0:.0f} s", flush=True)
    if a.results:
        if STAGES.index(a.upto) < 1:
            p.error("--results needs the check at least: --upto check or students")
        write_results(rows, a, "python " + " ".join(sys.argv), start, machine())


if __name__ == "__main__":
    main()
