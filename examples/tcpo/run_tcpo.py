"""TCPO vs multi-turn GRPO and the LEAP rank reward, plus TCPO's ablation ladder.

Verifier scores are partial credit in [0, 1] (digit accuracy for arithmetic, character accuracy for
strings); success means a perfect answer. Same warm start, prompts, group size and steps for every
arm; several RL seeds. Writes docs/results/tcpo.md and docs/results/tcpo.json.

    python examples/tcpo/run_tcpo.py --seeds 0 1 2 --steps 60 --families arithmetic strings
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from tempering.algos.tcpo import TURN_DECAY
from tempering.config import build
from tempering.experiments import fmt, machine, mean_sd, run_arm, write_results
from tempering.methods.pretrain import PretrainConfig, pretrain

K = 3
FAMILIES = {
    "arithmetic": {
        "family": "arithmetic",
        "args": {"min_value": 10, "max_value": 999, "partial_credit": True},
        "max_new_tokens": 6,
    },
    "strings": {
        "family": "strings",
        "args": {"min_len": 3, "max_len": 6, "partial_credit": True},
        "max_new_tokens": 8,
        "pass_target": 0.5,
    },
}
CF = {"counterfactual_turns": 10, "counterfactual_samples": 4}
ARMS = {
    "mt_grpo": {"rollout": {}, "loss": {"advantage": "grpo"}},
    "leap_rank": {"rollout": {}, "loss": {"advantage": "leap"}},
    **{
        f"tcpo_{mode}": {
            "rollout": CF if mode == "full" else {},
            "loss": {"advantage": "tcpo", "credit_args": {"mode": mode}},
        }
        for mode in ("trajectory", "turn_reward", "score_diff", "retrospective", "hindsight", "full")
    },
    "tcpo_full_random_cf": {
        "rollout": {**CF, "counterfactual_select": "random"},
        "loss": {"advantage": "tcpo", "credit_args": {"mode": "full"}},
    },
    "tcpo_full_no_decay": {  # every turn's credit weighted alike (the default until turn_decay = 0.8)
        "rollout": CF,
        "loss": {"advantage": "tcpo", "credit_args": {"mode": "full", "turn_decay": 1.0}},
    },
}


def warm_start(name: str, spec: dict, out: Path, pass_target: float) -> str:
    """A tiny-s policy pre-trained (with two-turn repair examples) until greedy pass@1 reaches the target;
    reused when its folder exists."""
    if (out / f"pretrain_{name}" / "final" / "config.json").is_file():
        return str(out / f"pretrain_{name}" / "final")
    task = {"family": spec["family"], "args": spec["args"], "train_size": 20000, "heldout_size": 300}
    cfg = build(
        PretrainConfig,
        {
            "model": {"name": "tiny-s"},
            "task": task,
            "run": {
                "steps": 3000,
                "eval_every": 50,
                "eval_size": 200,
                "out_dir": str(out / f"pretrain_{name}"),
                "progress": False,
                "stop_at_pass": spec.get("pass_target", pass_target),
            },
            "rollout": {"max_new_tokens": spec["max_new_tokens"]},
            "optim": {"lr": 1e-3},
            "pretrain": {"repair_share": 0.3},
        },
    )
    return pretrain(cfg)["model"]


def arm_config(model: str, spec: dict, arm: dict, seed: int, steps: int, out: Path) -> dict:
    """One arm's run. None evaluates before its first step: an evaluation draws from the sampler's random
    stream, so it would change that run's training; the warm start is evaluated once, by a run of 0 steps."""
    return {
        "model": {"name": model},
        "task": {"family": spec["family"], "args": spec["args"], "train_size": 20000, "heldout_size": 300},
        "rollout": {
            "group_size": 8,
            "prompts_per_step": 16,
            "max_new_tokens": spec["max_new_tokens"],
            "max_turns": K,
            "score_range": [0.0, 1.0],
            **arm["rollout"],
        },
        "loss": arm["loss"],
        "optim": {"lr": 3e-4},
        "run": {
            "steps": steps,
            "seed": seed,
            "out_dir": str(out),
            "eval_every": 0,
            "eval_on_start": False,
            "eval_k": 8,
            "checkpoint_every": 0,
            "log_samples": 0,
            "tensorboard": False,
            "progress": False,
        },
    }


def compare(a: dict, b: dict, key: str = "best_turn_pass_at_1") -> str:
    """`a` against `b` on `key`: the difference and whether it exceeds the larger seed spread."""
    diff, noise = a[key] - b[key], max(a[f"{key}_sd"], b[f"{key}_sd"])
    verdict = "within one seed standard deviation" if abs(diff) <= noise else ("higher" if diff > 0 else "lower")
    return f"{diff:+.3f} ({verdict}; larger sd {noise:.3f})"


def findings(fam: dict, start: float) -> list[str]:
    """A findings paragraph computed from the table's numbers (`start`: the warm start's best-turn pass@1)."""
    out = []
    below = [arm for arm in fam if fam[arm]["best_turn_pass_at_1"] < start]
    if below:
        out.append(
            f"Below the warm start ({start:.3f}) after RL: "
            + ", ".join(f"`{a}` ({fam[a]['best_turn_pass_at_1']:.3f})" for a in below)
            + "."
        )
    best = max(fam, key=lambda k: fam[k]["best_turn_pass_at_1"])
    out.append(f"Highest best-turn pass@1: `{best}` ({fam[best]['best_turn_pass_at_1']:.3f}).")
    for arm in ("tcpo_full", "tcpo_retrospective", "tcpo_hindsight"):
        for base in ("mt_grpo", "leap_rank"):
            if arm in fam and base in fam:
                out.append(f"`{arm}` vs `{base}`: {compare(fam[arm], fam[base])}.")
    if "tcpo_full" in fam and "tcpo_full_random_cf" in fam:
        out.append(
            f"Selective vs random counterfactual turns: {compare(fam['tcpo_full'], fam['tcpo_full_random_cf'])}."
        )
    if "tcpo_full" in fam and "tcpo_full_no_decay" in fam:
        out.append(
            f"Earlier turns weighted more (turn_decay {TURN_DECAY}) vs every turn alike: "
            f"{compare(fam['tcpo_full'], fam['tcpo_full_no_decay'])} on best-turn pass@1, "
            f"{compare(fam['tcpo_full'], fam['tcpo_full_no_decay'], 'turns_to_success')} on turns to success."
        )
    if "tcpo_trajectory" in fam and "mt_grpo" in fam:
        same = abs(fam["tcpo_trajectory"]["best_turn_pass_at_1"] - fam["mt_grpo"]["best_turn_pass_at_1"]) < 1e-9
        out.append(
            "The ladder's first rung (trajectory reward) "
            + ("reproduces" if same else "differs from")
            + " multi-turn GRPO exactly, as its definition says it should."
        )
    return ["Findings: " + " ".join(out), ""]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--families", nargs="+", default=["arithmetic", "strings"], choices=sorted(FAMILIES))
    p.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    p.add_argument("--pass-target", type=float, default=0.2)
    p.add_argument("--work", default="runs/tcpo")
    p.add_argument("--out", default="docs/results")
    a = p.parse_args()
    torch.set_num_threads(1)
    work = Path(a.work)
    results: dict = {}
    starts: dict = {}  # family -> the warm start's evaluation (a run of 0 steps)
    for fam in a.families:
        spec = FAMILIES[fam]
        model = warm_start(fam, spec, work, a.pass_target)
        starts[fam] = run_arm(arm_config(model, spec, ARMS["mt_grpo"], a.seeds[0], 0, work / fam / "warm_start"))
        for arm in a.arms:
            for seed in a.seeds:
                r = run_arm(arm_config(model, spec, ARMS[arm], seed, a.steps, work / fam / f"{arm}_s{seed}"))
                results.setdefault(fam, {}).setdefault(arm, []).append(r)
                print(
                    fam,
                    arm,
                    seed,
                    {k: round(r.get(k, 0), 3) for k in ("pass@1_sampled", "pass@8", "turns_per_pass_sampled")},
                    flush=True,
                )

    data: dict = {
        "K": K,
        "seeds": a.seeds,
        "steps": a.steps,
        "machine": machine(),
        "command": "python examples/tcpo/run_tcpo.py " + " ".join(sys.argv[1:]),
        "families": {},
    }
    lines = [
        "# TCPO: turn-level credit vs multi-turn GRPO and the LEAP rank reward",
        "",
        f"Command: `{data['command']}`  ",
        f"Machine: {data['machine']}  ",
        f"Seeds: {a.seeds} (RL seeds; one warm start per family). {a.steps} steps of 16 prompts x 8 samples per arm, K = {K} "
        "turns, every group expanded, lr 3e-4; verifier scores are partial credit in [0, 1]. Evaluation on 300 held-out "
        "prompts, 8 samples per prompt at temperature 1: best-turn pass@k (solved if any turn of any of k samples is "
        "perfect), turns to success, and how often a further turn raises or lowers the score. TCPO arms normalise turn "
        "credit per (prompt, turn index) over the episodes that reached that turn (`credit_args.norm=turn`, the default) "
        f"and weight turn k's normalised credit by turn_decay^(k-1) = {TURN_DECAY}^(k-1) (the default; "
        "`tcpo_full_no_decay` weights every turn alike).",
        "",
        "What changed since the previous table: TCPO's `turn_decay` now defaults to "
        f"{TURN_DECAY} (it was 1.0), so earlier turns get more turn credit, as the paper's fast-repair preference "
        "asks; every TCPO arm except `tcpo_trajectory` (which has no turn credit) was rerun with it, and "
        "`tcpo_full_no_decay` is the old default beside it. Every arm was rerun on today's code, whose pre-training, "
        "sampler and evaluation changed since that table (the warm starts were trained again), so compare arms within "
        "this table rather than with the previous one. The warm start is evaluated once per family, by a run of 0 "
        "steps, and no arm evaluates before its first step (`run.eval_on_start=false`).",
        "",
    ]
    overheads = []
    for fam, arms in results.items():
        fam_data = {}
        lines += [
            f"## {fam}",
            "",
            "| arm | best-turn pass@1 | best-turn pass@8 | turns to success | improve rate | regress rate | env calls | counterfactual overhead (calls / seconds) |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for arm, runs in arms.items():
            col = lambda k: [r.get(k, float("nan")) for r in runs]
            oc, osec = col("cf_overhead_calls"), col("cf_overhead_seconds")
            has_cf = all(x == x for x in oc)
            if has_cf and arm == "tcpo_full":
                overheads.append(mean_sd(oc)[0])
            fam_data[arm] = {
                "best_turn_pass_at_1": mean_sd(col("pass@1_sampled"))[0],
                "best_turn_pass_at_1_sd": mean_sd(col("pass@1_sampled"))[1],
                "best_turn_pass_at_8": mean_sd(col("pass@8"))[0],
                "best_turn_pass_at_8_sd": mean_sd(col("pass@8"))[1],
                "turns_to_success": mean_sd(col("turns_per_pass_sampled"))[0],
                "turns_to_success_sd": mean_sd(col("turns_per_pass_sampled"))[1],
                "improve_rate": mean_sd(col("improve_rate_sampled"))[0],
                "regress_rate": mean_sd(col("regress_rate_sampled"))[0],
                "env_calls": mean_sd(col("total_env_calls"))[0],
                "seeds": a.seeds,
                "per_seed": [{k: v for k, v in r.items() if k != "start"} for r in runs],
            }
            if has_cf:
                fam_data[arm]["counterfactual_overhead_calls"] = mean_sd(oc)[0]
                fam_data[arm]["counterfactual_overhead_seconds"] = mean_sd(osec)[0]
            lines.append(
                f"| {arm} | {fmt(col('pass@1_sampled'))} | {fmt(col('pass@8'))} | {fmt(col('turns_per_pass_sampled'), 2)} | "
                f"{fmt(col('improve_rate_sampled'))} | {fmt(col('regress_rate_sampled'))} | {fmt(col('total_env_calls'), 0)} | "
                + (f"{mean_sd(oc)[0]:.2f}x / {mean_sd(osec)[0]:.2f}x |" if has_cf else "- |")
            )
        start = starts[fam]
        lines += [
            "",
            f"Warm start (before RL): best-turn pass@1 {start.get('pass@1_sampled', 0):.3f}, pass@8 {start.get('pass@8', 0):.3f}.",
            "",
        ]
        lines += findings(fam_data, start.get("pass@1_sampled", 0.0))
        data["families"][fam] = fam_data
        data.setdefault("warm_start", {})[fam] = {k: v for k, v in start.items() if k in ("pass@1_sampled", "pass@8")}
    if overheads:
        data["counterfactual_overhead_ratio"] = sum(overheads) / len(overheads)
    write_results(a.out, "tcpo", "\n".join(lines) + "\n", data)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
