"""The same few training steps of every method on two versions of the code (before and after the one loop).

    PYTHONPATH=src python examples/composition/same_steps.py setup MODELS          # the shared starting models
    PYTHONPATH=<checkout>/src python examples/composition/same_steps.py CASE OUT MODELS

A case runs a few steps of one method from the same warm start with the same seed, one torch thread,
through whichever tempering is on PYTHONPATH, and writes OUT/case.json: the logged metrics of every
step and a hash of the final weights. Configs are written for both the current schemas and those of
commit 2fac51a (the code before the training core moved onto train/loop.py); `reruns.py --old DIR`
runs every case on both and compares. Equal hashes mean the two versions trained the same weights.
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file

from tempering.config import build
from tempering.methods.pretrain import PretrainConfig, pretrain
from tempering.recipes import runner
from tempering.recipes.rgrpo import rgrpo

try:
    CURRENT = True
except ImportError:  # before the one loop, RL lived in recipes/rl.py
    CURRENT = False

TASK = {"family": "arithmetic", "args": {"min_value": 0, "max_value": 30}, "train_size": 400, "heldout_size": 20}
PARTIAL = {**TASK, "args": {**TASK["args"], "partial_credit": True}}
ROLLOUT = {"group_size": 8, "prompts_per_step": 8, "max_new_tokens": 4}
STEPS = 3
MT = {"max_turns": 3}
CF = {"max_turns": 3, "score_range": [0.0, 1.0], "counterfactual_turns": 10, "counterfactual_samples": 4}
TCPO_MODES = ("trajectory", "turn_reward", "score_diff", "retrospective", "hindsight", "full")


def setup(models: Path) -> None:
    """A warm start (tiny-xs on sums 0..30), a second untrained tiny-xs (teacher / reference) and
    made-up pass rates of two teachers on TU-OPD's 48 training examples."""
    from tempering.envs.registry import make_family
    from tempering.models import char_tokenizer, save_policy, tiny_model

    cfg = {
        "model": {"name": "tiny-xs"},
        "task": {**TASK, "train_size": 800, "heldout_size": 60},
        "rollout": {"prompts_per_step": 32, "max_new_tokens": 4},
        "optim": {"lr": 3e-3},
        "run": {"steps": 700, "eval_every": 0, "out_dir": str(models / "warm"), "progress": False},
    }
    pretrain(build(PretrainConfig, cfg))
    save_policy(tiny_model("tiny-xs", seed=7), char_tokenizer(), models / "other")
    rng = random.Random(0)
    tasks = make_family("arithmetic", min_value=0, max_value=30).tasks("train", 48, seed=0)
    table = {t.id: {"a": rng.choice([0, 0.25, 0.5, 1]), "b": rng.choice([0, 0.25, 0.5, 1])} for t in tasks}
    (models / "pass_rates.json").write_text(json.dumps({"teachers": ["a", "b"], "tasks": table}))


def cases(out: Path, models: Path) -> dict:
    warm, other = str(models / "warm" / "final"), str(models / "other")

    def run(steps: int = STEPS) -> dict:
        return {
            "steps": steps,
            "seed": 3,
            "out_dir": str(out),
            "eval_every": 0,
            "eval_k": 2,
            "checkpoint_every": 0,
            "log_samples": 0,
            "tensorboard": False,
            "progress": False,
            "threads": 1,
        }

    def rl(task=TASK, rollout=None, loss=None) -> dict:
        return {
            "model": {"name": warm},
            "task": task,
            "rollout": {**ROLLOUT, **(rollout or {})},
            "loss": loss or {"advantage": "grpo"},
            "optim": {"lr": 3e-4},
            "run": run(),
        }

    def student(lr: float = 1e-4, task=TASK, steps: int = STEPS) -> dict:
        return {"model": {"name": warm}, "task": task, "rollout": ROLLOUT, "optim": {"lr": lr}, "run": run(steps)}

    tu = {"teachers": {"a": {"path": warm}, "b": {"path": other}}, "pass_rates": str(models / "pass_rates.json")}
    small = {**TASK, "train_size": 48}

    def pretrain_case():
        cfg = {"model": {"name": "tiny-xs"}, "task": TASK}
        r = {"steps": 60, "eval_every": 30, "eval_size": 20, "out_dir": str(out), "seed": 3, "progress": False}
        if CURRENT:
            cfg.update(rollout={"prompts_per_step": 32, "max_new_tokens": 4}, optim={"lr": 3e-3}, run=r)
        else:  # optimisation, length and checks lived in the train section, the folder and seed at the top
            cfg["train"] = {"lr": 3e-3, "batch_size": 32, "max_new_tokens": 4}
            cfg.update({k: r[k] for k in ("out_dir", "seed", "progress")})
            cfg["train"].update({k: r[k] for k in ("steps", "eval_every", "eval_size")})
        return pretrain(build(PretrainConfig, cfg))

    pair = {"teacher": {"path": other}, "reference": {"path": warm}}
    return {
        "pretrain": pretrain_case,
        "grpo": lambda: runner.run("train", rl()),
        "mt_grpo": lambda: runner.run("train", rl(rollout=MT)),
        "leap": lambda: runner.run("train", rl(rollout={**MT, "prune": "dcp"}, loss={"advantage": "leap"})),
        "kevin": lambda: runner.run("train", rl(rollout=MT, loss={"advantage": "kevin"})),
        "trloo": lambda: runner.run("train", rl(rollout=MT, loss={"advantage": "trloo"})),
        **{
            f"tcpo_{m}": (
                lambda m=m: runner.run(
                    "train",
                    rl(
                        PARTIAL,
                        rollout=CF if m == "full" else {**MT, "score_range": [0.0, 1.0]},
                        loss={"advantage": "tcpo", "credit_args": {"mode": m}},
                    ),
                )
            )
            for m in TCPO_MODES
        },
        "opd": lambda: runner.run("distill", {**student(), "teacher": {"path": other}}),
        "opd_jsd_topk": lambda: runner.run(
            "distill", {**student(), "teacher": {"path": other}, "distill": {"loss": "jsd_topk", "top_k": 8}}
        ),
        "direct_opd": lambda: runner.run(
            "direct-opd",
            {
                **student(steps=STEPS + 2),
                "loss": {"clip_low": 0.2, "clip_high": 0.2, "dual_clip": 3.0},
                # the code before the one loop moved alpha after each update; today's default moves it before
                "direct_opd": {"pairs": [pair], "top_k": 16, **({"alpha_order": "after_update"} if CURRENT else {})},
            },
        ),
        "direct_opd_alpha_before": lambda: runner.run(
            "direct-opd",
            {
                **student(steps=STEPS + 2),
                "loss": {"clip_low": 0.2, "clip_high": 0.2, "dual_clip": 3.0},
                "direct_opd": {"pairs": [pair], "top_k": 16},
            },
        ),
        "tu_opd": lambda: runner.run("tu-opd", {**student(task=small), "tu_opd": {**tu, "rho": 0.25}}),
        "tu_opd_crd": lambda: runner.run(
            "tu-opd", {**student(task=small), "tu_opd": {**tu, "rho": 0.25, "residual": True}}
        ),
        "rgrpo": lambda: rgrpo({**rl(small), "rgrpo": {"rounds": 2, "kappa": 0.5, "pass_samples": 4}, "run": run(2)}),
    }


def main(argv: list[str]) -> None:
    torch.set_num_threads(1)
    if argv[0] == "setup":
        setup(Path(argv[1]))
        return
    case, out, models = argv[0], Path(argv[1]), Path(argv[2])
    cases(out, models)[case]()
    run_dir = out / "round_2" if case == "rgrpo" else out
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    if case == "rgrpo":  # the teachers' pass rates on the pool decide what round 2 trains on
        rows.append({"pass_rates": json.loads((out / "pass_rates.json").read_text())["tasks"]})
    weights = load_file(run_dir / ("model" if case == "pretrain" else "final") / "model.safetensors")
    digest = hashlib.sha256(b"".join(weights[k].numpy().tobytes() for k in sorted(weights))).hexdigest()
    tmp = out / "case.json.tmp"  # case.json marks the case finished: written whole or not at all
    tmp.write_text(json.dumps({"rows": rows, "weights_sha256": digest}, indent=1) + "\n")
    tmp.replace(out / "case.json")


if __name__ == "__main__":
    main(sys.argv[1:])
