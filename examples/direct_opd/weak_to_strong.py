"""Direct-OPD weak-to-strong on the embedded default: RL a small tiny model, transfer its shift to a larger one.

Per seed:
  1. teacher before RL (pi_Tref): tiny-xs, supervised warm start on 2-digit sums, stopped early;
  2. teacher after RL (pi_T): GRPO on it;
  3. student start (pi_S): tiny-s (4x the parameters, same tokenizer), warm-started the same way;
  4. three arms from pi_S at equal student steps (same prompts per step, group size, lr):
     direct GRPO on the student, plain OPD from pi_T (reverse KL), Direct-OPD with (pi_T, pi_Tref);
  5. a control: the same Direct-OPD into pi_Tref itself, where the shift is exactly what RL did to it.
Held-out pass@1 is greedy on held-out sums that training never sees. Finished stages are reused
when the script is run again with the same --out.

    python examples/direct_opd/weak_to_strong.py --seeds 0 1 2 --out runs/direct_opd --results docs/results
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics as st
import sys
import time
from pathlib import Path

import torch

from tempering.config import build
from tempering.experiments import Arm, claims_table, judge
from tempering.methods.pretrain import PretrainConfig, pretrain
from tempering.recipes.runner import run
from tempering.runlog import atomic_write_text

TASK = {"family": "arithmetic", "args": {"min_value": 10, "max_value": 99}, "train_size": 5000, "heldout_size": 500}
ROLLOUT = {"group_size": 8, "prompts_per_step": 16, "max_new_tokens": 4, "temperature": 1.0}
ARMS = ("grpo", "opd", "direct_opd", "direct_opd_self")
LABELS = {
    "teacher_pre": "teacher before RL (tiny-xs)",
    "teacher_rl": "teacher after RL (tiny-xs)",
    "student_pre": "student start (tiny-s)",
    "grpo": "student: direct GRPO",
    "opd": "student: OPD from the post-RL teacher",
    "direct_opd": "student: Direct-OPD (teacher pair)",
    "direct_opd_self": "control: Direct-OPD into the teacher's own pre-RL model (tiny-xs)",
}


def _run(out: Path, steps: int, seed: int) -> dict:
    return {
        "steps": steps,
        "seed": seed,
        "out_dir": str(out),
        "eval_every": 0,
        "eval_k": 4,
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


def warm_start(size: str, out: Path, seed: int, stop: float) -> dict:
    cfg = build(
        PretrainConfig,
        {
            "model": {"name": size},
            "task": TASK,
            "run": {
                "steps": 3000,
                "eval_every": 25,
                "eval_size": 200,
                "seed": seed,
                "out_dir": str(out),
                "progress": False,
                "threads": 1,
                "stop_at_pass": stop,
            },
            "rollout": {"prompts_per_step": 64, "max_new_tokens": 4},
            "optim": {"lr": 1e-3},
        },
    )
    r = pretrain(cfg)
    return {"model": r["model"], "pass@1": r["heldout_pass@1"], "steps": r["steps"]}


def final(h: dict) -> dict:
    f = h["final"]
    return {"pass@1": f["eval/pass@1"], "pass@1_sampled": f["eval/pass@1_sampled"]}


def one_seed(root: Path, seed: int, a) -> dict:
    tref = cached(root / "teacher_pre", lambda: warm_start("tiny-xs", root / "teacher_pre", seed, a.stop))
    teacher = cached(
        root / "teacher_rl",
        lambda: {
            "model": str(root / "teacher_rl" / "final"),
            **final(
                run(
                    "train",
                    {
                        "model": {"name": tref["model"]},
                        "task": TASK,
                        "rollout": ROLLOUT,
                        "optim": {"lr": a.lr},
                        "run": _run(root / "teacher_rl", a.teacher_steps, seed),
                    },
                )
            ),
        },
    )
    student = {}
    if set(a.arms) - {"direct_opd_self"}:  # the student arms start from the student's warm start
        student = cached(root / "student_pre", lambda: warm_start("tiny-s", root / "student_pre", seed + 100, a.stop))
    common = {"model": {"name": student.get("model")}, "task": TASK, "rollout": ROLLOUT, "optim": {"lr": a.lr}}
    arms = {
        "grpo": lambda out: final(run("train", {**common, "run": _run(out, a.steps, seed)})),
        "opd": lambda out: final(
            run("distill", {**common, "teacher": {"path": teacher["model"]}, "run": _run(out, a.steps, seed)})
        ),
        "direct_opd": lambda out: final(
            run(
                "direct-opd",
                {
                    **common,
                    "loss": {"clip_low": 0.2, "clip_high": 0.2, "dual_clip": 3.0},
                    "direct_opd": {
                        "pairs": [{"teacher": {"path": teacher["model"]}, "reference": {"path": tref["model"]}}],
                        "top_k": 16,
                    },
                    "run": _run(out, a.steps, seed),
                },
            )
        ),
    }
    # control: the same transfer into the teacher's own pre-RL model, where the shift is exactly what RL did
    arms["direct_opd_self"] = lambda out: final(
        run(
            "direct-opd",
            {
                **common,
                "model": {"name": tref["model"]},
                "loss": {"clip_low": 0.2, "clip_high": 0.2, "dual_clip": 3.0},
                "direct_opd": {
                    "pairs": [{"teacher": {"path": teacher["model"]}, "reference": {"path": tref["model"]}}],
                    "top_k": 16,
                },
                "run": _run(out, a.steps, seed),
            },
        )
    )
    res = {name: cached(root / name, lambda name=name: arms[name](root / name)) for name in a.arms}
    return {
        "seed": seed,
        "teacher_pre": tref,
        "teacher_rl": teacher,
        **({"student_pre": student} if student else {}),
        **res,
    }


def spread(vals: list[float]) -> dict:
    return {"mean": st.mean(vals), "std": st.stdev(vals) if len(vals) > 1 else 0.0, "values": vals}


MARGIN = 3.0
"""Points of held-out pass@1 by which the Direct-OPD student may trail step-matched GRPO and still be 'at least
as good' (ours; the paper states no margin)."""


def claims(rows: list[dict], steps: int) -> dict[str, dict]:
    """The paper's claims in held-out pass@1, paired by seed; warm starts and teachers are fixed models."""
    heldout = f"2-digit sums: {TASK['heldout_size']} held-out sums"
    rollouts = steps * ROLLOUT["prompts_per_step"] * ROLLOUT["group_size"]
    arm = lambda key, budget: Arm(key, {r["seed"]: r[key]["pass@1"] for r in rows}, heldout, budget)
    have = lambda *keys: all(k in rows[0] for k in keys)
    out = {}
    if have("direct_opd", "grpo"):
        out[f"the Direct-OPD student is at least as good as step-matched GRPO (within {MARGIN:g} points)"] = judge(
            arm("direct_opd", rollouts), arm("grpo", rollouts), margin=MARGIN
        )
    if have("direct_opd", "opd"):
        out["Direct-OPD beats OPD from the post-RL teacher"] = judge(arm("direct_opd", rollouts), arm("opd", rollouts))
    if have("direct_opd", "teacher_rl"):
        out["the Direct-OPD student beats its post-RL teacher"] = judge(
            arm("direct_opd", rollouts), arm("teacher_rl", None)
        )
    if have("direct_opd", "student_pre"):
        out["Direct-OPD improves the student on its start"] = judge(
            arm("direct_opd", rollouts), arm("student_pre", None)
        )
    if have("direct_opd_self", "teacher_pre"):
        out["control: Direct-OPD into the teacher's own pre-RL model improves on it"] = judge(
            arm("direct_opd_self", rollouts), arm("teacher_pre", None)
        )
    return out


def write_results(rows: list[dict], a, command: str, rendered: str | None = None) -> None:
    out = Path(a.results)
    out.mkdir(parents=True, exist_ok=True)
    table = {label: spread([r[key]["pass@1"] for r in rows]) for key, label in LABELS.items() if key in rows[0]}
    seconds = {arm: spread([r[arm]["seconds"] for r in rows]) for arm in a.arms}
    machine = f"{platform.machine()}, {platform.processor() or 'cpu'}, 1 torch thread per process, python {platform.python_version()}, torch {torch.__version__}"
    doc = {
        "command": command,
        "seeds": [r["seed"] for r in rows],
        "machine": machine,
        "task": TASK,
        "rollout": ROLLOUT,
        "student_steps": a.steps,
        "teacher_rl_steps": a.teacher_steps,
        "lr": a.lr,
        "warm_start_stop_at_pass": a.stop,
        "arms": {
            k: {"heldout_pass@1_mean": v["mean"], "heldout_pass@1_std": v["std"], "per_seed": v["values"]}
            for k, v in table.items()
        },
        "arm_seconds": {k: {"mean": v["mean"], "std": v["std"]} for k, v in seconds.items()},
        "sampled_pass@1": {arm: spread([r[arm]["pass@1_sampled"] for r in rows]) for arm in a.arms},
        "runs": rows,
    }
    n = len(rows)
    lines = [
        "# Direct-OPD: weak-to-strong transfer on the embedded default",
        "",
        f"Command: `{command}`  ",
        *([f"Page and claims rewritten from the stored numbers: `{rendered}`  "] if rendered else []),
        f"Seeds: {', '.join(str(r['seed']) for r in rows)}  ",
        f"Machine: {machine}",
        "",
        f"Task: 2-digit sums (`a+b=`, a, b in 10..99), held-out pass@1 greedy on {TASK['heldout_size']} held-out sums. "
        f"Teacher: tiny-xs warm-started until greedy pass@1 >= {a.stop}, then {a.teacher_steps} GRPO steps. Student: tiny-s "
        f"(about 4x the parameters, same character tokenizer) warm-started with the same stopping rule (checked every 25 steps on "
        f"200 held-out sums; the table's numbers are on all {TASK['heldout_size']}). Every student arm runs "
        f"{a.steps} steps of {ROLLOUT['prompts_per_step']} prompts x {ROLLOUT['group_size']} samples at lr {a.lr}.",
        "",
        f"| model / arm | held-out pass@1, mean | std over {n} seeds | per seed |",
        "| --- | --- | --- | --- |",
    ]
    lines += [
        f"| {k} | {v['mean']:.3f} | {v['std']:.3f} | {', '.join(f'{x:.3f}' for x in v['values'])} |"
        for k, v in table.items()
    ]
    lines += ["", "| student arm | wall seconds, mean | std |", "| --- | --- | --- |"]
    lines += [f"| {k} | {v['mean']:.0f} | {v['std']:.0f} |" for k, v in seconds.items()]
    for x, y in (
        ("direct_opd", "grpo"),
        ("direct_opd", "opd"),
        ("opd", "grpo"),
        ("direct_opd", "student_pre"),
        ("direct_opd_self", "teacher_pre"),
    ):
        if x in rows[0] and y in rows[0]:
            doc.setdefault("paired_points", {})[f"{x} - {y}"] = spread(
                [100 * (r[x]["pass@1"] - r[y]["pass@1"]) for r in rows]
            )
    doc["claims"] = claims(rows, a.steps)
    lines += [
        "",
        "The paper's claims, paired by seed (same warm starts), in points of held-out pass@1:",
        "",
        *claims_table(doc["claims"]),
    ]
    if rendered:
        doc["rendered"] = rendered
    if a.notes:
        lines += ["", Path(a.notes).read_text().strip()]
    atomic_write_text(out / "direct_opd.json", json.dumps(doc, indent=2) + "\n")
    atomic_write_text(out / "direct_opd.md", "\n".join(lines) + "\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=100, help="student steps per arm")
    p.add_argument("--teacher-steps", type=int, default=150, help="GRPO steps of the small teacher")
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--stop", type=float, default=0.35, help="warm starts stop at this greedy held-out pass@1")
    p.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS, help="the arms to run (default: all)")
    p.add_argument("--out", default="runs/direct_opd")
    p.add_argument("--results", help="write direct_opd.md / .json into this folder")
    p.add_argument("--notes", help="a markdown file appended to the results page (the reading of the numbers)")
    p.add_argument(
        "--render",
        action="store_true",
        help="no training: rewrite RESULTS/direct_opd.md and the claims from the runs in its JSON",
    )
    a = p.parse_args()
    if a.render:
        if not a.results:
            p.error("--render rewrites the page in --results: name it")
        doc = json.loads((Path(a.results) / "direct_opd.json").read_text())
        a.steps, a.teacher_steps, a.lr = doc["student_steps"], doc["teacher_rl_steps"], doc["lr"]
        a.stop, a.arms = doc["warm_start_stop_at_pass"], [k for k in ARMS if k in doc["runs"][0]]
        write_results(doc["runs"], a, doc["command"], rendered="python " + " ".join(sys.argv))
        return
    torch.set_num_threads(1)
    rows = [one_seed(Path(a.out) / f"seed{s}", s, a) for s in a.seeds]
    for r in rows:
        print(r["seed"], {k: r[k]["pass@1"] for k in LABELS if k in r}, flush=True)
    if a.results:
        write_results(rows, a, "python " + " ".join(sys.argv))


if __name__ == "__main__":
    main()
