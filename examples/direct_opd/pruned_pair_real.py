"""Direct-OPD weak-to-strong on SmolLM2-135M-Instruct with a teacher pair made from SmolLM2 itself.

The weak reference (pi_Tref) is the student with a few middle decoder blocks removed (`--drop`), so it
shares the student's tokenizer, chat template and phrasing while answering worse; `--heal-steps` > 0
first distills it briefly (on-policy, reverse KL) from the full model. The weak teacher (pi_T) is that
reference after GRPO on the task. Before any student run, a gate: on the student's own sampled answers to
training prompts, the pair's log-ratio summed over each answer (log pi_T - log pi_Tref, the shift
Direct-OPD transfers) must rank the correct answers above the incorrect ones of the same prompt (the AUC
over such pairs, `--gate-auc`); when it does not, the page says so and no student arm runs.

Student arms, each with the same student rollouts: direct GRPO; OPD from the weak teacher (reverse KL);
Direct-OPD with the official adaptive alpha and with alpha fixed; and a zero-shift control, Direct-OPD
with the reference as both members of the pair (no shift: only the KL anchor acts).

    # the cheap part: which blocks to drop (`sweep`), the pair of seed 0 and its gate
    python examples/direct_opd/pruned_pair_real.py --seeds 0 --upto gate --out runs/pruned_pair
    # everything, then the page
    python examples/direct_opd/pruned_pair_real.py --seeds 0 1 2 --out runs/pruned_pair --results docs/results

Every stage is cached in --out (its summary.json), so a run stopped anywhere resumes where it stopped.
Writes direct_opd_real.md / direct_opd_real.json with `claims`, `gate`, `seeds`, `command`, `machine`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from weak_to_strong_real import (
    STUDENT,
    STUDENT_ROLLOUT,
    TASK,
    _final,
    _run,
    arm_summaries,
    cached,
    machine,
    machine_line,
    resumable,
    spread,
)

TEACHER_ROLLOUT = {**STUDENT_ROLLOUT, "prompts_per_step": 16}
CANDIDATES = [(), (14,), (14, 15), (13, 14, 15), (12, 13), (16, 17), (10, 11)]
"""Block sets the sweep measures (0-based indices of SmolLM2's 30 decoder blocks)."""
ARMS = ("grpo", "opd", "direct_opd", "direct_opd_fixed_alpha", "direct_opd_zero_shift")
LABELS = {
    "grpo": "direct GRPO on the student",
    "opd": "OPD from the weak teacher (reverse KL)",
    "direct_opd": "Direct-OPD, adaptive alpha (official)",
    "direct_opd_fixed_alpha": "Direct-OPD, alpha fixed",
    "direct_opd_zero_shift": "control: Direct-OPD with no shift (reference as both members)",
}
MARGIN = 3.0
"""Points of held-out pass@1 by which the Direct-OPD student may trail step-matched GRPO and still be 'at least
as good' (ours; the paper states no margin)."""
STAGES = ("sweep", "teacher", "gate", "students")


def task(a) -> dict:
    return {**TASK, "heldout_size": a.heldout_size}


def prune(blocks: tuple[int, ...], out: Path) -> str:
    """The student without `blocks`, saved as a model folder (the remaining blocks renumbered)."""
    from torch import nn

    from tempering.models import load_policy
    from tempering.models.io import save_policy

    model, tok = load_policy(STUDENT)
    layers = model.model.layers
    if any(not 0 <= b < len(layers) for b in blocks):
        raise SystemExit(f"--drop {blocks}: SmolLM2 has blocks 0..{len(layers) - 1}")
    kept = [layer for i, layer in enumerate(layers) if i not in blocks]
    for i, layer in enumerate(kept):
        layer.self_attn.layer_idx = i  # the KV cache is indexed by it
    model.model.layers = nn.ModuleList(kept)
    model.config.num_hidden_layers = len(kept)
    if getattr(model.config, "layer_types", None):
        model.config.layer_types = [t for i, t in enumerate(model.config.layer_types) if i not in blocks]
    return str(save_policy(model, tok, out))


def greedy(model_dir: str, a, student: list[dict] | None = None) -> dict:
    """Greedy held-out pass@1, and how well the model speaks the student's phrasing: the mean log-prob it gives
    each token of the full student's greedy answers (`student`, from `greedy_answers`)."""
    import torch

    from tempering.experiments import greedy_answers
    from tempering.teachers.hf import HFTeacher

    torch.set_num_threads(1)
    answers = greedy_answers(model_dir, task(a), a.heldout_size, STUDENT_ROLLOUT["max_new_tokens"])
    student = student or answers
    s = HFTeacher.from_path(model_dir).score([x["prompt_ids"] for x in student], [x["answer_ids"] for x in student])
    return {
        "pass@1": sum(x["success"] for x in answers) / len(answers),
        "logp_of_student_answers": float((s.token_logp_BC * s.mask_BC).sum() / s.mask_BC.sum()),
        "example": answers[0]["answer"],
    }


def student_answers(a) -> list[dict]:
    from tempering.experiments import greedy_answers

    return greedy_answers(STUDENT, task(a), a.heldout_size, STUDENT_ROLLOUT["max_new_tokens"])


def sweep(root: Path, a) -> dict:
    """Each candidate block set's greedy answers and its log-prob of the full student's, beside the student's."""
    out, student = {}, student_answers(a)
    for blocks in CANDIDATES:
        name = "-".join(map(str, blocks)) or "none"
        folder = STUDENT if not blocks else prune(blocks, root / f"drop_{name}")
        out[name] = {"blocks": list(blocks), **greedy(folder, a, student)}
        if blocks:
            import shutil

            shutil.rmtree(root / f"drop_{name}")  # 0.5 GB each; the chosen one is built again by `reference`
        print("sweep", name, out[name], flush=True)
    return {"candidates": out}


def reference(root: Path, a) -> dict:
    """The weak reference: the student without --drop, healed by --heal-steps of OPD from the full student."""
    from tempering.models import gguf
    from tempering.recipes.runner import run

    pruned = prune(tuple(a.drop), root / "pruned")
    student = student_answers(a)
    res = {"blocks": a.drop, "pruned": {"model": pruned, **greedy(pruned, a, student)}}
    model = pruned
    if a.heal_steps:
        out = root / "healed"
        cfg = {
            "model": {"name": pruned},
            "task": task(a),
            "rollout": STUDENT_ROLLOUT,
            "teacher": {"path": gguf.resolve(STUDENT)},
            "optim": {"lr": a.heal_lr},
            "run": _run(out, a.heal_steps, 0),
        }
        run("distill", cfg, **resumable(out))
        model = str(out / "final")
        res["healed"] = {"model": model, "steps": a.heal_steps, **greedy(model, a, student)}
    return {**res, "model": model, "pass@1": res.get("healed", res["pruned"])["pass@1"]}


def teacher_rl(root: Path, seed: int, a, ref: dict) -> dict:
    """The weak teacher: GRPO on the weak reference."""
    from tempering.recipes.runner import run

    out = root / f"seed{seed}" / "teacher_rl"
    cfg = {
        "model": {"name": ref["model"]},
        "task": task(a),
        "rollout": TEACHER_ROLLOUT,
        "optim": {"lr": a.teacher_lr},
        "run": _run(out, a.teacher_steps, seed),
    }
    return {"model": str(out / "final"), **_final(run("train", cfg, **resumable(out)))}


def auc(pos: list[float], neg: list[float]) -> float:
    """P(a positive scores above a negative), ties counting one half (the Mann-Whitney AUC)."""
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def gate(root: Path, seed: int, a, ref: dict, teacher: dict) -> dict:
    """The pair's log-ratio on the student's own sampled answers: does it rank correct above incorrect?"""
    import torch

    from tempering.envs.registry import make_family
    from tempering.models import load_policy
    from tempering.models.chat import ChatFormat
    from tempering.rollout.engine import RolloutOptions, rollout
    from tempering.rollout.sampler import HFSampler, SamplingParams
    from tempering.teachers.hf import HFTeacher

    torch.set_num_threads(1)
    model, tok = load_policy(STUDENT, seed=seed)
    family = make_family(TASK["family"], **TASK["args"])
    tasks = family.tasks("train", a.gate_prompts, seed=seed + 1000)  # not the teacher's or the arms' first prompts
    opts = RolloutOptions(SamplingParams(STUDENT_ROLLOUT["max_new_tokens"], 1.0))
    sampler = HFSampler(model, tok, seed=seed)
    groups = asyncio.run(rollout(sampler, ChatFormat(tok), tasks, family.make_env, a.gate_samples, opts))
    del model, sampler
    eps = [e for g in groups for e in g.episodes]
    prompts, answers = [e.prompt_ids for e in eps], [e.turns[0].action_ids for e in eps]
    shift = []
    for path, sign in ((teacher["model"], 1.0), (ref["model"], -1.0)):
        s = HFTeacher.from_path(path).score(prompts, answers)
        shift.append(sign * (s.token_logp_BC * s.mask_BC).sum(-1))
    ratio = (shift[0] + shift[1]).tolist()
    ok = [e.turns[0].success for e in eps]
    within_pos, within_neg, pairs = [], [], 0
    per_prompt = []
    for g in range(len(groups)):
        idx = range(g * a.gate_samples, (g + 1) * a.gate_samples)
        pos, neg = [ratio[i] for i in idx if ok[i]], [ratio[i] for i in idx if not ok[i]]
        if pos and neg:
            per_prompt.append((auc(pos, neg), len(pos) * len(neg)))
            pairs += len(pos) * len(neg)
            within_pos += pos
            within_neg += neg
    within = sum(x * w for x, w in per_prompt) / pairs if pairs else float("nan")
    pooled_pos = [r for r, o in zip(ratio, ok) if o]
    pooled_neg = [r for r, o in zip(ratio, ok) if not o]
    return {
        "answers": len(eps),
        "correct": sum(ok),
        "prompts_with_both": len(per_prompt),
        "pairs": pairs,
        "auc_within_prompt": within,
        "auc_pooled": auc(pooled_pos, pooled_neg) if pooled_pos and pooled_neg else float("nan"),
        "mean_shift_correct": sum(pooled_pos) / max(1, len(pooled_pos)),
        "mean_shift_incorrect": sum(pooled_neg) / max(1, len(pooled_neg)),
        "threshold": a.gate_auc,
        "passed": pairs > 0 and within >= a.gate_auc,
    }


def arm(name: str, root: Path, seed: int, a, ref: dict, teacher: dict) -> dict:
    from tempering.recipes.runner import run

    out = root / f"seed{seed}" / name
    common = {
        "model": {"name": STUDENT},
        "task": task(a),
        "rollout": STUDENT_ROLLOUT,
        "optim": {"lr": a.lr},
        "run": _run(out, a.steps, seed),
    }
    pair = lambda t: {"pairs": [{"teacher": {"path": t}, "reference": {"path": ref["model"]}}], "top_k": 16}
    clip = {"clip_low": 0.2, "clip_high": 0.2, "dual_clip": 3.0}
    configs = {
        "grpo": ("train", {**common, "loss": {"advantage": "grpo"}}),
        "opd": ("distill", {**common, "teacher": {"path": teacher["model"]}}),
        "direct_opd": ("direct-opd", {**common, "loss": clip, "direct_opd": pair(teacher["model"])}),
        "direct_opd_fixed_alpha": (
            "direct-opd",
            {**common, "loss": clip, "direct_opd": {**pair(teacher["model"]), "alpha_rate": 0.0}},
        ),
        "direct_opd_zero_shift": ("direct-opd", {**common, "loss": clip, "direct_opd": pair(ref["model"])}),
    }
    verb, cfg = configs[name]
    return _final(run(verb, cfg, **resumable(out)))


def stages(root: Path, seed: int, a) -> dict:
    """Every stage of one seed up to --upto, each cached with the settings it ran with."""
    keys = lambda *names: {n: getattr(a, n) for n in names}
    held = keys("heldout_size")
    row: dict = {
        "seed": seed,
        "sweep": cached(root / "sweep", sweep, root / "sweep", a, settings={**held, "candidates": CANDIDATES}),
    }
    if STAGES.index(a.upto) < 1:
        return row
    made = {**held, **keys("drop", "heal_steps", "heal_lr")}
    ref = cached(root / "reference", reference, root / "reference", a, settings=made)
    made |= keys("teacher_steps", "teacher_lr")
    teacher = cached(root / f"seed{seed}" / "teacher_rl", teacher_rl, root, seed, a, ref, settings=made)
    row.update(reference=ref, teacher_rl=teacher)
    if STAGES.index(a.upto) < 2:
        return row
    gated = {**made, **keys("gate_prompts", "gate_samples", "gate_auc")}
    row["gate"] = cached(root / f"seed{seed}" / "gate", gate, root, seed, a, ref, teacher, settings=gated)
    if STAGES.index(a.upto) < 3 or not row["gate"]["passed"]:
        return row
    for name in a.arms:
        out = root / f"seed{seed}" / name
        row[name] = cached(out, arm, name, root, seed, a, ref, teacher, settings={**made, **keys("steps", "lr")})
    return row


def claims(rows: list[dict], arms, rollouts: int, heldout_size: int) -> dict[str, dict]:
    """The paper's claims, paired by seed: student arms against each other, the Direct-OPD student against the
    weak teacher (a fixed model)."""
    from tempering.experiments import Arm, judge

    heldout = f"sums 1..30: {heldout_size} held-out sums"
    arm_ = lambda k: Arm(k, {r["seed"]: r[k]["pass@1"] for r in rows}, heldout, rollouts)
    have = lambda *ks: set(ks) <= set(arms)
    out = {}
    if have("direct_opd"):
        teacher = Arm("weak teacher", {r["seed"]: r["teacher_rl"]["pass@1"] for r in rows}, heldout, None)
        out["the Direct-OPD student beats its weak teacher"] = judge(arm_("direct_opd"), teacher)
    if have("direct_opd", "grpo"):
        out[f"Direct-OPD is at least as good as step-matched GRPO (within {MARGIN:g} points)"] = judge(
            arm_("direct_opd"), arm_("grpo"), margin=MARGIN
        )
    if have("direct_opd", "opd"):
        out["Direct-OPD beats OPD from the weak teacher"] = judge(arm_("direct_opd"), arm_("opd"))
    if have("direct_opd", "direct_opd_zero_shift"):
        out["the shift matters: Direct-OPD beats the zero-shift control"] = judge(
            arm_("direct_opd"), arm_("direct_opd_zero_shift")
        )
    if have("direct_opd", "direct_opd_fixed_alpha"):
        out["adaptive alpha beats fixed alpha"] = judge(arm_("direct_opd"), arm_("direct_opd_fixed_alpha"))
    return out


def write_results(rows: list[dict], a, command: str, start: dict, end: dict) -> None:
    from tempering.experiments import claims_table
    from tempering.runlog import atomic_write_text

    seeds = [r["seed"] for r in rows]
    rollouts = a.steps * STUDENT_ROLLOUT["prompts_per_step"] * STUDENT_ROLLOUT["group_size"]
    sw, ref = rows[0]["sweep"]["candidates"], rows[0]["reference"]
    gates = {r["seed"]: r["gate"] for r in rows}
    ran = [k for k in a.arms if all(k in r for r in rows)]
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
        "sweep": sw,
        "reference": ref,
        "teacher": {
            "pass_at_1_after_rl": spread([r["teacher_rl"]["pass@1"] for r in rows]),
            "rl_steps": a.teacher_steps,
            "rl_lr": a.teacher_lr,
        },
        "gate": gates,
        "arms": arm_summaries(rows, ran, rollouts) if ran else {},
        "claims": claims(rows, ran, rollouts, a.heldout_size),
        "runs": rows,
    }
    lines = [
        "# Direct-OPD weak-to-strong into SmolLM2-135M-Instruct, with a teacher pair made from SmolLM2",
        "",
        f"Command: `{command}`  ",
        f"Seeds: {', '.join(map(str, seeds))}  ",
        machine_line(start, end),
        "",
        'Task: sums of 1..30 asked as "What is a + b? Answer with just the number." through SmolLM2\'s chat '
        f"template, the last number of the answer read; greedy pass@1 on {a.heldout_size} held-out sums.",
        "",
        "Which blocks to drop: greedy answers of SmolLM2 without each candidate block set (0-based of 30):",
        "",
        "| blocks removed | held-out pass@1 | mean log-prob of the student's answer tokens | first held-out answer |",
        "| --- | --- | --- | --- |",
        *[
            f"| {k} | {v['pass@1']:.3f} | {v['logp_of_student_answers']:.3f} | `{v['example'].strip()[:60]}` |"
            for k, v in sw.items()
        ],
        "",
        f"Weak reference: SmolLM2 without blocks {', '.join(map(str, ref['blocks']))} (pass@1 "
        f"{ref['pruned']['pass@1']:.3f}, log-prob of the student's answer tokens {ref['pruned']['logp_of_student_answers']:.3f})"
        + (
            f", healed by {ref['healed']['steps']} steps of OPD from the full model (pass@1 {ref['healed']['pass@1']:.3f}, "
            f"log-prob of the student's answer tokens {ref['healed']['logp_of_student_answers']:.3f})"
            if "healed" in ref
            else ", not healed"
        )
        + f". Weak teacher: it after {a.teacher_steps} GRPO steps of {TEACHER_ROLLOUT['prompts_per_step']} prompts x "
        f"{TEACHER_ROLLOUT['group_size']} at lr {a.teacher_lr}: pass@1 "
        + ", ".join(f"{r['teacher_rl']['pass@1']:.3f}" for r in rows)
        + " per seed.",
        "",
        f"Gate: on {a.gate_prompts} training prompts x {a.gate_samples} answers sampled from the student at "
        "temperature 1, the AUC with which the pair's summed log-ratio ranks a correct answer above an incorrect "
        f"one of the same prompt (pass at >= {a.gate_auc}, ours):",
        "",
        "| seed | answers (correct) | prompts with both | AUC within prompts | AUC pooled | mean shift, correct / incorrect | passed |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        *[
            f"| {s} | {g['answers']} ({g['correct']}) | {g['prompts_with_both']} | {g['auc_within_prompt']:.3f} | "
            f"{g['auc_pooled']:.3f} | {g['mean_shift_correct']:+.2f} / {g['mean_shift_incorrect']:+.2f} | "
            f"{'yes' if g['passed'] else 'no'} |"
            for s, g in gates.items()
        ],
        "",
    ]
    if not ran:
        passed = all(g["passed"] for g in gates.values())
        lines += ["No student arm ran: " + ("not run yet." if passed else "the gate did not pass."), ""]
    else:
        arms = doc["arms"]
        lines += [
            f"Student arms: {a.steps} steps of {STUDENT_ROLLOUT['prompts_per_step']} prompts x "
            f"{STUDENT_ROLLOUT['group_size']} samples ({rollouts} student rollouts each), lr {a.lr}. Direct-OPD: top-16, "
            "clip 0.2 / 0.2, dual clip 3, alpha from 2.5 (adaptive: 1% a step toward sign(rbar) within [0.5, 2.5]).",
            "",
            "| arm | held-out pass@1, mean | std | per seed | seconds per run |",
            "| --- | --- | --- | --- | --- |",
            *[
                f"| {LABELS[k]} | {v['pass_at_1_mean']:.3f} | {v['pass_at_1_std']:.3f} | "
                f"{', '.join(f'{x:.3f}' for x in v['per_seed'])} | {v['seconds']:.0f} |"
                for k, v in arms.items()
            ],
            "",
            "The paper's claims, paired by seed, in points of held-out pass@1 (the weak teacher is about the "
            "student's size here, so the paper's lower cost is not at stake: its RL costs about what GRPO on the "
            "student does):",
            "",
            *claims_table(doc["claims"]),
        ]
    out = Path(a.results)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "direct_opd_real.json", json.dumps(doc, indent=2) + "\n")
    atomic_write_text(out / "direct_opd_real.md", "\n".join(lines) + "\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--upto", choices=STAGES, default="students", help="the last stage to run")
    # block 14: the sweep's mildest cut (held-out pass@1 0.25 -> 0.10, the student's answers least unlikely);
    # without blocks 14-15 the reference answers 2% right, and 87-100% of its first GRPO groups had no signal
    p.add_argument("--drop", type=int, nargs="+", default=[14], help="the blocks the weak reference lacks")
    p.add_argument("--heal-steps", type=int, default=0, help="OPD steps from the full model healing the reference")
    p.add_argument("--heal-lr", type=float, default=1e-5)
    p.add_argument("--teacher-steps", type=int, default=40, help="GRPO steps making the weak teacher")
    p.add_argument("--teacher-lr", type=float, default=1e-5)
    p.add_argument("--gate-prompts", type=int, default=64)
    p.add_argument("--gate-samples", type=int, default=8)
    p.add_argument("--gate-auc", type=float, default=0.6, help="the within-prompt AUC the gate needs (ours)")
    p.add_argument("--steps", type=int, default=100, help="student steps per arm (alpha moves at most 1%% a step)")
    p.add_argument("--lr", type=float, default=1e-5, help="the student's learning rate")
    p.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS)
    p.add_argument("--heldout-size", type=int, default=100)
    p.add_argument("--out", default="runs/pruned_pair")
    p.add_argument("--results", help="write direct_opd_real.md / .json into this folder")
    a = p.parse_args()
    start = machine()
    t0 = time.perf_counter()
    rows = [stages(Path(a.out), s, a) for s in a.seeds]
    for r in rows:
        print(json.dumps({k: v for k, v in r.items() if k not in ("sweep", "reference")}), flush=True)
    print(f"{time.perf_counter() - t0:.0f} s", flush=True)
    if a.results:
        if STAGES.index(a.upto) < 2:
            p.error("--results needs the gate at least: --upto gate or students")
        write_results(rows, a, "python " + " ".join(sys.argv), start, machine())


if __name__ == "__main__":
    main()
