"""`tempering demo`: the quickstart on the embedded default, on a CPU.

Pre-trains the tiny model on arithmetic until it solves some held-out sums, runs GRPO, and prints
held-out pass@1 before and after. With `--results DIR` it also writes quickstart.md / quickstart.json.
With `--model smollm2-135m-instruct` it starts from that pretrained instruct model instead (no
pre-training): GRPO on sums asked in words, through the model's chat template.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

from tempering.config import apply_overrides, build
from tempering.errors import UserError
from tempering.progress import conditions, conditions_text, print_eval_table, warn
from tempering.runlog import atomic_write_text
from tempering.train.stages import Done, Stage, Stages

TASK = {"family": "arithmetic", "args": {"min_value": 10, "max_value": 999}, "train_size": 20000, "heldout_size": 500}

PRETRAIN: dict[str, Any] = {
    "model": {"name": "tiny-s"},
    "task": TASK,
    "rollout": {"prompts_per_step": 64, "max_new_tokens": 6},
    "optim": {"lr": 1e-3, "warmup_steps": 50},
    "run": {"steps": 4000, "eval_every": 50, "eval_size": 200, "stop_at_pass": 0.2, "stop_checks": 2},
}

GRPO = {
    "task": TASK,
    "rollout": {"group_size": 8, "prompts_per_step": 32, "max_new_tokens": 6, "temperature": 1.0},
    "loss": {"advantage": "grpo"},
    "optim": {"lr": 2e-4},
    "run": {"steps": 800, "eval_every": 50, "eval_size": 200, "eval_k": 8, "checkpoint_every": 100},
}


REAL_MODELS = ("smollm2-135m-instruct",)
"""Pretrained models the demo knows a recipe for (`--model`)."""

REAL_GRPO = {
    # 1..30 sums asked in words: the instruct model knows most of them but answers in sentences that
    # often end on another number, so greedy pass@1 starts near 25% and RL has something to fix
    "task": {
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
    },
    "rollout": {"group_size": 8, "prompts_per_step": 8, "max_new_tokens": 12, "temperature": 1.0},
    "loss": {"advantage": "grpo"},
    "optim": {"lr": 1e-5},
    # evaluations before and after only: one of 100 prompts x (greedy + 4 samples) costs about 3 steps
    "run": {"steps": 20, "eval_every": 0, "eval_k": 4, "checkpoint_every": 10},
}


def grpo(cfg: Any, resume: bool, overwrite: bool) -> dict[str, Any]:
    """The demo's GRPO stage: `tempering train`."""
    from tempering.recipes.runner import run

    return run("train", cfg, resume=resume, overwrite=overwrite)


def run_real_demo(model: str, out: Path, seed: int, overrides: list[str], progress: bool = True) -> dict:
    """GRPO from a pretrained instruct model (no pre-training stage)."""
    import torch

    from tempering.methods.rl import TrainConfig

    if any(o.startswith("pretrain.") for o in overrides):
        raise UserError(f"--model {model} has no pre-training stage; drop the pretrain.* overrides")
    t0 = time.perf_counter()
    rl = apply_overrides(json.loads(json.dumps(REAL_GRPO)), [o.removeprefix("train.") for o in overrides])
    rl.setdefault("model", {})["name"] = model
    rl["run"].update(seed=seed, out_dir=str(out / "grpo"), progress=progress)
    cfg = build(TrainConfig, rl)
    if not cfg.run.eval_on_start:
        raise UserError("the demo compares pass@1 before and after RL; leave train.run.eval_on_start true")
    # a demo run again continues (or only reports) its stage
    hist = Stages(out, None, resume=True, overwrite=False).run([Stage("grpo", lambda _: cfg, grpo)])[0].result
    return {
        "model": model,
        "pass_at_1_before": hist["start"]["eval/pass@1"],
        "pass_at_1_after": hist["final"]["eval/pass@1"],
        "pass_at_1_sampled_before": hist["start"]["eval/pass@1_sampled"],
        "pass_at_1_sampled_after": hist["final"]["eval/pass@1_sampled"],
        "k": cfg.run.eval_k,
        "pass_at_k_before": hist["start"][f"eval/pass@{cfg.run.eval_k}"],
        "pass_at_k_after": hist["final"][f"eval/pass@{cfg.run.eval_k}"],
        "heldout_prompts": cfg.task.heldout_size,
        "grpo_steps": cfg.run.steps,
        "lora_rank": cfg.model.lora_rank,
        "seconds_total": time.perf_counter() - t0,
        "seed": seed,
        "threads": torch.get_num_threads(),
        "run_dir": str(out),
    }


def run_demo(out: Path, seed: int, overrides: list[str], progress: bool = True) -> dict:
    import torch

    from tempering.methods.pretrain import PretrainConfig, pretrain
    from tempering.methods.rl import TrainConfig

    pre_over = [o[len("pretrain.") :] for o in overrides if o.startswith("pretrain.")]
    rl_over = [o[len("train.") :] for o in overrides if o.startswith("train.")]
    pcfg = build(
        PretrainConfig,
        apply_overrides(
            {
                **PRETRAIN,
                "run": {**PRETRAIN["run"], "seed": seed, "out_dir": str(out / "pretrain"), "progress": progress},
            },
            pre_over,
        ),
    )
    rl = apply_overrides(json.loads(json.dumps(GRPO)), rl_over)
    rl.setdefault("model", {})["name"] = str(Path(pcfg.run.out_dir) / "final")  # where pretrain exports it
    rl["run"].update(seed=seed, out_dir=str(out / "grpo"), progress=progress)
    cfg = build(TrainConfig, rl)  # before pre-training: a bad override fails in a second, not after it
    if not cfg.run.eval_on_start:
        raise UserError("the demo compares pass@1 before and after RL; leave train.run.eval_on_start true")
    times = [time.perf_counter()]

    def warm(pre: Done) -> None:
        target = pcfg.run.stop_at_pass
        if target is not None and pre.result["heldout_pass@1"] < target:
            warn(
                f"the warm start ended at held-out pass@1 {pre.result['heldout_pass@1']:.3f}, below its target "
                f"pretrain.run.stop_at_pass={target} after {pre.result['steps']} steps: GRPO starts from a weaker "
                "model (more pretrain.run.steps reach it)"
            )
        times.append(time.perf_counter())

    def after_warm_start(pre: Done | None) -> TrainConfig:
        assert pre is not None
        c = cfg.model_copy(deep=True)
        c.model.name = pre.result["model"]
        return c

    # a demo run again continues (or only reports) its stages
    pre, rl_stage = Stages(out, None, resume=True, overwrite=False).run(
        [Stage("pretrain", lambda _: pcfg, pretrain, warm), Stage("grpo", after_warm_start, grpo)]
    )
    hist = rl_stage.result
    t0, t1, t2 = times[0], times[1], time.perf_counter()
    return {
        "pass_at_1_before": hist["start"]["eval/pass@1"],
        "pass_at_1_after": hist["final"]["eval/pass@1"],
        "pass_at_1_sampled_before": hist["start"]["eval/pass@1_sampled"],
        "pass_at_1_sampled_after": hist["final"]["eval/pass@1_sampled"],
        "k": cfg.run.eval_k,
        "pass_at_k_before": hist["start"][f"eval/pass@{cfg.run.eval_k}"],
        "pass_at_k_after": hist["final"][f"eval/pass@{cfg.run.eval_k}"],
        "heldout_prompts": cfg.task.heldout_size,
        "pretrain_steps": pre.result["steps"],
        "grpo_steps": cfg.run.steps,
        "seconds_pretrain": t1 - t0,
        "seconds_grpo": t2 - t1,
        "seconds_total": t2 - t0,
        "seed": seed,
        "threads": torch.get_num_threads(),
        "run_dir": str(out),
    }


def write_results(results_dir: Path, rows: list[dict], command: str, start: dict, end: dict) -> None:
    """quickstart.md and quickstart.json with the same numbers (the first seed is the headline); `start` and
    `end`, the machine's conditions (`progress.conditions`) before and after the runs."""
    import statistics as st

    import torch

    head = dict(rows[0])
    if len(rows) > 1:
        for k in ("pass_at_1_before", "pass_at_1_after", "seconds_total"):
            vals = [r[k] for r in rows]
            head[f"{k}_mean"], head[f"{k}_stdev"] = st.mean(vals), st.stdev(vals)
    head["runs"] = rows
    head["machine"] = (
        f"{platform.machine()}, {torch.get_num_threads()} threads, {platform.python_version()}, torch {torch.__version__}"
    )
    head["command"] = command
    head["conditions"] = {"start": start, "end": end}
    results_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(results_dir / "quickstart.json", json.dumps(head, indent=2) + "\n")
    lines = [
        "# Quickstart: GRPO on the embedded default",
        "",
        f"Command: `{command}`  ",
        f"Machine: {head['machine']}; {conditions_text(start, end)}",
        "",
        "Tiny Llama (`tiny-s`, 0.54M parameters, character tokenizer), arithmetic `a+b=` with a, b in 10..999. "
        "Supervised warm start until greedy held-out pass@1 reaches 20% on 200 prompts at two checks in a row "
        "(a warm start stopped mid-jump, on one lucky check, is unstable under RL), then GRPO "
        f"(32 prompts x 8 samples per step, {rows[0]['grpo_steps']} steps). pass@1 is greedy, on "
        f"{rows[0]['heldout_prompts']} held-out prompts that training never sees.",
        "",
        f"| seed | pass@1 before | pass@1 after | gain (points) | sampled pass@1 before / after | pass@{rows[0]['k']} before / after | pretrain s | GRPO s | total s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['seed']} | {r['pass_at_1_before']:.3f} | {r['pass_at_1_after']:.3f} | "
            f"{100 * (r['pass_at_1_after'] - r['pass_at_1_before']):+.1f} | "
            f"{r['pass_at_1_sampled_before']:.3f} / {r['pass_at_1_sampled_after']:.3f} | "
            f"{r['pass_at_k_before']:.3f} / {r['pass_at_k_after']:.3f} | "
            f"{r['seconds_pretrain']:.0f} | {r['seconds_grpo']:.0f} | {r['seconds_total']:.0f} |"
        )
    lines += [
        "",
        "Caveat: on this task more supervised training also raises pass@1 (the warm start is stopped early on "
        "purpose). The demo shows that the RL pipeline learns from its own samples and a verifier; it is not "
        "evidence that RL beats supervised training here.",
        "",
        "Why two checks in a row: the warm-start loss sits on a plateau for a seed-dependent number of steps, "
        "then held-out pass@1 jumps within a few hundred steps. Stopped at the first check over 20% (and with "
        "GRPO at lr 3e-4), one seed's warm start was caught mid-jump and regressed under RL, and another never "
        "left the plateau within 2000 steps; requiring two checks, allowing 4000 steps and lr 2e-4 fixed both. "
        "With 500 GRPO steps, one seed's gain fell below 20 points in a rerun that differed from a passing run only "
        "at float rounding (runs of one seed are not bit-identical across code changes), so the demo runs 800.",
        "",
    ]
    atomic_write_text(results_dir / "quickstart.md", "\n".join(lines))


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="tempering demo", description="Pre-train a tiny model, GRPO on arithmetic, before/after table."
    )
    p.add_argument("overrides", nargs="*", help="pretrain.KEY=VALUE / train.KEY=VALUE overrides")
    p.add_argument("--out", default=None, help="run folder (default runs/demo, or runs/demo-MODEL)")
    p.add_argument(
        "--model",
        choices=REAL_MODELS,
        help="start from this pretrained model (GRPO through its chat template) instead of pre-training tiny-s",
    )
    p.add_argument("--seed", type=int, nargs="+", default=[0], help="seed(s); several give a spread")
    p.add_argument("--results", metavar="DIR", help="write quickstart.md / quickstart.json into DIR")
    p.add_argument("--no-progress", action="store_true")
    a = p.parse_args(argv)
    if a.model and a.results:
        raise UserError(
            "--results writes the tiny quickstart's table; benchmarks/real_model.py writes the real model's"
        )
    base = Path(a.out or ("runs/demo" if not a.model else f"runs/demo-{a.model}"))
    start = conditions() if a.results else {}
    try:
        rows = _demos(a, base)
    except KeyboardInterrupt:
        warn(
            "tempering demo continues where it stopped when run again with the same arguments (it has no --resume; "
            "the line above names a stage's own run)"
        )
        raise
    if a.results:
        write_results(
            Path(a.results),
            rows,
            "tempering " + " ".join(["demo", *sys.argv[2:]] if sys.argv[1:2] == ["demo"] else ["demo", *argv]),
            start,
            conditions(),
        )
    return 0


def _demos(a: argparse.Namespace, base: Path) -> list[dict]:
    """Each seed's demo, its table, and where its runs are."""
    rows = []
    for s in a.seed:
        out = base if len(a.seed) == 1 else base / f"seed{s}"
        if a.model:
            r = run_real_demo(a.model, out, s, a.overrides, progress=not a.no_progress)
        else:
            r = run_demo(out, s, a.overrides, progress=not a.no_progress)
        rows.append(r)
        print_eval_table(
            {
                "before GRPO": {
                    "held-out pass@1 (greedy)": r["pass_at_1_before"],
                    "pass@1 (sampled)": r["pass_at_1_sampled_before"],
                    f"pass@{r['k']}": r["pass_at_k_before"],
                },
                "after GRPO": {
                    "held-out pass@1 (greedy)": r["pass_at_1_after"],
                    "pass@1 (sampled)": r["pass_at_1_sampled_after"],
                    f"pass@{r['k']}": r["pass_at_k_after"],
                },
            },
            title=f"quickstart, seed {s}: {r['heldout_prompts']} held-out prompts, {r['seconds_total']:.0f}s",
        )
        atomic_write_text(out / "summary.json", json.dumps(r, indent=2) + "\n")
        grpo_dir = out / "grpo"
        print(
            f"runs: {', '.join(str(d) for d in sorted(out.iterdir()) if (d / 'config.yaml').is_file())}\n"
            f"next: tempering view {grpo_dir}  (curves and samples)  |  tempering eval {grpo_dir}  (held-out table)"
        )
    return rows
