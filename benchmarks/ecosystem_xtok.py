"""The `cross_tokenizer` part of benchmarks/ecosystem.py: on-policy distillation from a teacher whose
tokenizer differs from the student's (scores aligned by text spans, `tempering.teachers.align`), against
the same distillation from a teacher on the student's own tokenizer.

Two tokenizers: the built-in character tokenizer (`char`) and SmolLM2-135M-Instruct's byte-level BPE
(`smollm2`: 49,152 tokens and its chat template, through `model.tokenizer`); the task is the built-in
string transformations (sort or reverse 3-5 letters), which that BPE writes in multi-letter tokens, so
the two tokenizations part inside answers. Per seed:

- a teacher on each tokenizer: tiny-s, warm-started on the task's reference answers until its greedy
  held-out pass@1 reaches `--teacher-pass` (checked every 25 steps on 100 held-out prompts);
- a student on each tokenizer: tiny-xs, warm-started the same way until `--student-pass` (checked
  every 10 steps);
- each student distilled (`tempering distill`, reverse KL) from the teacher on its own tokenizer
  (`same`) and from the one on the other (`cross`), with the same steps, prompts, samples and learning
  rate. Greedy held-out pass@1 on the same held-out prompts before and after.

Each pair's claim, judged by `tempering.experiments.judge`: cross-tokenizer OPD ends no worse than
same-tokenizer OPD by more than `--margin` points. The teachers differ in more than their tokenizer
(each was trained on its own), so the teachers' own pass@1 is shown beside the students'.
"""

from __future__ import annotations

import json
import statistics as st
from pathlib import Path
from typing import Any

from tempering.config import build
from tempering.experiments import Arm, cached_stage, claims_table, fmt, judge
from tempering.methods.pretrain import PretrainConfig, pretrain
from tempering.recipes.runner import run

TASK = {
    "family": "strings",
    "args": {"ops": ["sort", "rev"], "min_len": 3, "max_len": 5},
    "train_size": 5000,
    "heldout_size": 300,
}
HELDOUT = "strings sort/rev of 3-5 letters, 300 held-out prompts, data seed 0"
TOKENIZERS = {"char": None, "smollm2": "smollm2-135m-instruct"}
PAIRS = {  # student tokenizer -> the teacher tokenizer of its cross arm
    "char": "smollm2",
    "smollm2": "char",
}
ROLLOUT = {"group_size": 8, "prompts_per_step": 8, "max_new_tokens": 8}


def _run_section(out: Path, steps: int, seed: int, **extra: Any) -> dict[str, Any]:
    return {
        "steps": steps,
        "seed": seed,
        "out_dir": str(out),
        "eval_every": 0,
        "eval_k": 1,
        "checkpoint_every": 0,
        "log_samples": 0,
        "tensorboard": False,
        "progress": False,
        "threads": 1,
        **extra,
    }


def warm_start(
    size: str, tokenizer: str | None, out: Path, seed: int, stop: float, steps: int, every: int
) -> dict[str, Any]:
    model = {"name": size, **({"tokenizer": tokenizer} if tokenizer else {})}
    cfg = build(
        PretrainConfig,
        {
            "model": model,
            "task": TASK,
            "run": _run_section(out, steps, seed, eval_every=every, eval_size=100, stop_at_pass=stop),
            "rollout": {"prompts_per_step": 32, "max_new_tokens": ROLLOUT["max_new_tokens"]},
            "optim": {"lr": 1e-3},
        },
    )
    r = pretrain(cfg)
    return {"model": r["model"], "steps": r["steps"], "pass@1": float(r["heldout_pass@1"])}


def one_seed(root: Path, seed: int, a) -> dict[str, Any]:
    models: dict[str, dict[str, Any]] = {}
    for tok_name, tok in TOKENIZERS.items():
        for role, size, stop, salt, every in (
            ("teacher", "tiny-s", a.teacher_pass, 0, 25),
            ("student", "tiny-xs", a.student_pass, 100, 10),
        ):
            key = f"{role}_{tok_name}"
            where = root / key
            models[key] = cached_stage(
                where, lambda: warm_start(size, tok, where, seed + salt, stop, a.warm_steps, every)
            )
    arms: dict[str, Any] = {}
    for student, cross in PAIRS.items():
        for arm, teacher in (("same", student), ("cross", cross)):
            key = f"{student}_from_{arm}"
            where = root / key

            def distill(where=where, teacher=teacher, student=student):
                h = run(
                    "distill",
                    {
                        "model": {"name": models[f"student_{student}"]["model"]},
                        "teacher": {"path": models[f"teacher_{teacher}"]["model"]},
                        "task": TASK,
                        "rollout": ROLLOUT,
                        "optim": {"lr": a.lr},
                        "run": _run_section(where, a.steps, seed),
                    },
                )
                rows = [json.loads(x) for x in (where / "metrics.jsonl").read_text().splitlines()]
                kl = [r["distill/reverse_kl"] for r in rows if "distill/reverse_kl" in r]
                return {
                    "pass@1": float(h["final"]["eval/pass@1"]),
                    "start_pass@1": float(h["start"]["eval/pass@1"]),
                    "reverse_kl_first10": st.mean(kl[:10]),
                    "reverse_kl_last10": st.mean(kl[-10:]),
                }

            arms[key] = cached_stage(where, distill)
    return {"seed": seed, "models": models, "arms": arms}


def measure(a) -> dict[str, Any]:
    root = Path(a.out)
    rows = [one_seed(root / f"seed{s}", s, a) for s in a.seeds]
    rollouts = a.steps * ROLLOUT["prompts_per_step"] * ROLLOUT["group_size"]
    pairs, claims, points = [], {}, {}
    for student, cross in PAIRS.items():
        per = lambda key: {r["seed"]: r["arms"][key]["pass@1"] for r in rows}
        fixed = lambda key: {r["seed"]: r["models"][key]["pass@1"] for r in rows}
        same_arm = Arm(f"{student}_from_same", per(f"{student}_from_same"), HELDOUT, rollouts)
        cross_arm = Arm(f"{student}_from_cross", per(f"{student}_from_cross"), HELDOUT, rollouts)
        text = f"{student} student: OPD from the {cross} teacher no worse than from the {student} teacher by more than {a.margin:g} points"
        claims[text] = judge(cross_arm, same_arm, margin=a.margin)
        points[f"{student} student, {cross} teacher"] = claims[text]["difference_points"]["mean"]
        pairs.append(
            {
                "student": student,
                "cross_teacher": cross,
                "student_start": fixed(f"student_{student}"),
                "teacher_same": fixed(f"teacher_{student}"),
                "teacher_cross": fixed(f"teacher_{cross}"),
                "same": same_arm.per_seed,
                "cross": cross_arm.per_seed,
                "reverse_kl": {
                    arm: {
                        "first10": st.mean(r["arms"][f"{student}_from_{arm}"]["reverse_kl_first10"] for r in rows),
                        "last10": st.mean(r["arms"][f"{student}_from_{arm}"]["reverse_kl_last10"] for r in rows),
                    }
                    for arm in ("same", "cross")
                },
            }
        )
    return {
        "pairs": pairs,
        "opd_points_vs_same_tokenizer": points,
        "claims": claims,
        "seeds": list(a.seeds),
        "task": TASK,
        "rollout": ROLLOUT,
        "steps": a.steps,
        "lr": a.lr,
        "teacher_pass": a.teacher_pass,
        "student_pass": a.student_pass,
        "runs": rows,
    }


def _fmt(xs: dict) -> str:
    return fmt(list(xs.values()))


def render(d: dict[str, Any]) -> list[str]:
    lines = [
        "## cross_tokenizer (OPD from a teacher with another tokenizer)",
        "",
        f"Task: {HELDOUT}; greedy pass@1. Tokenizers: the built-in characters and SmolLM2-135M-Instruct's BPE "
        f"(with its chat template). Teachers: tiny-s warm-started until pass@1 >= {d['teacher_pass']}; students: "
        f"tiny-xs until >= {d['student_pass']} (each on its own tokenizer). Each student runs `tempering distill` "
        f"(reverse KL) for {d['steps']} steps of {d['rollout']['prompts_per_step']} prompts x "
        f"{d['rollout']['group_size']} samples at lr {d['lr']:g}, from the teacher on its own tokenizer (same) "
        f"and from the other (cross, aligned by text spans). Seeds {', '.join(map(str, d['seeds']))}; mean ± sd.",
        "",
        "| student | cross teacher | student start | teacher (same) | teacher (cross) | OPD same | OPD cross | cross - same (points) | reverse KL first/last 10 steps, same | cross |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for p in d["pairs"]:
        diff = d["opd_points_vs_same_tokenizer"][f"{p['student']} student, {p['cross_teacher']} teacher"]
        kl = p["reverse_kl"]
        lines.append(
            f"| {p['student']} | {p['cross_teacher']} | {_fmt(p['student_start'])} | {_fmt(p['teacher_same'])} | "
            f"{_fmt(p['teacher_cross'])} | {_fmt(p['same'])} | {_fmt(p['cross'])} | {diff:+.1f} | "
            f"{kl['same']['first10']:.3f} / {kl['same']['last10']:.3f} | {kl['cross']['first10']:.3f} / {kl['cross']['last10']:.3f} |"
        )
    return [*lines, "", *claims_table(d["claims"]), ""]
