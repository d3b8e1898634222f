"""TCPO vs multi-turn GRPO and the LEAP rank reward, plus TCPO's ablation ladder.

Verifier scores are partial credit in [0, 1] (digit accuracy for arithmetic, character accuracy for
strings); success means a perfect answer. Same warm start, prompts, group size and steps for every
arm; several RL seeds. Writes docs/results/tcpo.md and docs/results/tcpo.json.

    python examples/tcpo/run_tcpo.py --seeds 0 1 2 --steps 60 --families arithmetic strings
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from tempering.algos.tcpo import TURN_DECAY
from tempering.config import build
from tempering.experiments import Arm, claims_table, fmt, judge, machine, mean_sd, run_arm, write_results
from tempering.methods.pretrain import PretrainConfig, pretrain
from tempering.recipes.demo import REAL_GRPO

K = 3
PROMPTS, GROUP = 16, 8
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
FAMILIES["smollm2_sums"] = {  # SmolLM2 as it ships (no warm start): the real-model demo's sums, digit credit
    "family": "arithmetic",
    "args": {**REAL_GRPO["task"]["args"], "partial_credit": True},
    "model": "smollm2-135m-instruct",
    "max_new_tokens": 24,
    "prompts_per_step": 8,
    "group_size": 8,
    "steps": 40,
    "lr": 1e-5,
    "train_size": 700,
    "heldout_size": 100,
    "arms": ["grpo", "mt_grpo", "tcpo_full"],
}
CF = {"counterfactual_turns": 10, "counterfactual_samples": 4}
ARMS = {
    "grpo": {"rollout": {"max_turns": 1}, "loss": {"advantage": "grpo"}},  # single-turn (feedback turns at test)
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
    reused when its folder exists. A family that names a pretrained model starts from it."""
    if "model" in spec:
        return spec["model"]
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
        "task": {
            "family": spec["family"],
            "args": spec["args"],
            "train_size": spec.get("train_size", 20000),
            "heldout_size": spec.get("heldout_size", 300),
        },
        "rollout": {
            "group_size": spec.get("group_size", GROUP),
            "prompts_per_step": spec.get("prompts_per_step", PROMPTS),
            "max_new_tokens": spec["max_new_tokens"],
            "max_turns": K,
            "score_range": [0.0, 1.0],
            **arm["rollout"],
        },
        "loss": arm["loss"],
        "optim": {"lr": spec.get("lr", 3e-4)},
        "run": {
            "steps": spec.get("steps", steps) if steps else 0,
            "seed": seed,
            "out_dir": str(out),
            "eval_every": 0,
            "eval_on_start": False,
            "eval_k": 8,
            "eval_max_turns": K,
            "checkpoint_every": 0,
            "log_samples": 0,
            "tensorboard": False,
            "progress": False,
        },
    }


EVALUATED = ("pass@1_sampled", "pass@8", "turns_per_pass_sampled", "improve_rate_sampled", "regress_rate_sampled")
LADDER = ("tcpo_trajectory", "tcpo_turn_reward", "tcpo_score_diff", "tcpo_retrospective", "tcpo_hindsight", "tcpo_full")


def claims(data: dict) -> dict[str, dict]:
    """The paper's claims per family, judged by the shared rule on the stored per-seed evaluations."""
    out: dict[str, dict] = {}
    for fam, arms in data["families"].items():
        sp = FAMILIES[fam]
        rollouts = sp.get("steps", data["steps"]) * sp.get("prompts_per_step", PROMPTS) * sp.get("group_size", GROUP)
        heldout = lambda runs: f"{fam}: {sorted({r['n'] for r in runs})} held-out prompts"

        def arm(name: str, key: str = "pass@1_sampled", per: str | None = None) -> Arm:
            runs = arms[name]["per_seed"]
            base = arms[per]["per_seed"] if per else None  # a share of `per`'s value, seed by seed
            vals = {
                s: r[key] / (base[i][key] if base else 1.0) for i, (s, r) in enumerate(zip(arms[name]["seeds"], runs))
            }
            return Arm(name, vals, heldout(runs), rollouts)

        def one(name: str, per: str) -> Arm:  # the baseline of a relative claim
            return Arm(per, dict.fromkeys(arms[per]["seeds"], 1.0), heldout(arms[per]["per_seed"]), rollouts)

        def claim(text: str, a: Arm, b: Arm, **kw) -> None:
            out[f"{fam}: {text}"] = judge(a, b, **kw)

        have = lambda *names: all(n in arms for n in names)
        if have("tcpo_full", "grpo"):
            claim("TCPO beats single-turn GRPO on best-turn pass@1", arm("tcpo_full"), arm("grpo"))
        if have("tcpo_full", "mt_grpo"):
            claim("TCPO beats multi-turn GRPO on best-turn pass@1", arm("tcpo_full"), arm("mt_grpo"))
            claim(
                "TCPO beats multi-turn GRPO on best-turn pass@8", arm("tcpo_full", "pass@8"), arm("mt_grpo", "pass@8")
            )
            claim(
                "TCPO needs fewer turns to success than multi-turn GRPO (as a share of its turns)",
                arm("tcpo_full", "turns_per_pass_sampled", per="mt_grpo"),
                one("tcpo_full", "mt_grpo"),
                higher_is_better=False,
            )
        for lower, upper in zip(LADDER, LADDER[1:]):
            if have(lower, upper):
                claim(
                    f"the ablation ladder rises: `{upper}` beats `{lower}` on best-turn pass@1", arm(upper), arm(lower)
                )
        if have("tcpo_full", "tcpo_full_random_cf"):
            claim("selective counterfactual turns beat random ones", arm("tcpo_full"), arm("tcpo_full_random_cf"))
        if have("tcpo_full", "tcpo_full_no_decay"):
            claim(
                f"earlier turns weighted more (turn_decay {TURN_DECAY}) beat every turn alike on best-turn pass@1",
                arm("tcpo_full"),
                arm("tcpo_full_no_decay"),
            )
        if "tcpo_full" in arms:
            start = data["warm_start"][fam]["pass@1_sampled"]
            runs = arms["tcpo_full"]["per_seed"]
            fixed = Arm("warm start", dict.fromkeys(arms["tcpo_full"]["seeds"], start), heldout(runs), None)
            claim("TCPO improves best-turn pass@1 on the warm start", arm("tcpo_full"), fixed)
    return out


def findings(fam: dict, start: float) -> list[str]:
    """Facts read from the table's numbers (`start`: the warm start's best-turn pass@1); claims are judged
    in the claims table."""
    out = []
    below = [arm for arm in fam if fam[arm]["best_turn_pass_at_1"] < start]
    if below:
        out.append(
            f"Below the warm start ({start:.3f}) after RL: "
            + ", ".join(f"`{a}` ({fam[a]['best_turn_pass_at_1']:.3f})" for a in below)
            + f" ({len(below)} of {len(fam)} arms)."
        )
    best = max(fam, key=lambda k: fam[k]["best_turn_pass_at_1"])
    out.append(f"Highest best-turn pass@1: `{best}` ({fam[best]['best_turn_pass_at_1']:.3f}).")
    if "tcpo_trajectory" in fam and "mt_grpo" in fam:
        evaluation = lambda arm: [{k: r[k] for k in EVALUATED} for r in fam[arm]["per_seed"]]
        same = evaluation("tcpo_trajectory") == evaluation("mt_grpo")
        out.append(
            "The ladder's first rung (trajectory reward) and multi-turn GRPO give "
            + ("the same evaluation in every seed" if same else "different evaluations")
            + ": by definition they are the same update."
        )
    return ["Findings: " + " ".join(out), ""]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--families", nargs="+", default=["arithmetic", "strings"], choices=sorted(FAMILIES))
    p.add_argument("--arms", nargs="+", choices=list(ARMS), help="default: the family's arms (tiny: all but grpo)")
    p.add_argument("--pass-target", type=float, default=0.2)
    p.add_argument("--work", default="runs/tcpo")
    p.add_argument("--out", default="docs/results")
    p.add_argument("--page", default="tcpo", help="writes OUT/PAGE.md and .json (SmolLM2's family: tcpo_real)")
    p.add_argument(
        "--render", action="store_true", help="no training: rewrite OUT/PAGE.md and the claims from OUT/PAGE.json"
    )
    a = p.parse_args()
    if a.render:
        data = json.loads((Path(a.out) / f"{a.page}.json").read_text())
        data["rendered"] = "python examples/tcpo/run_tcpo.py " + " ".join(sys.argv[1:])
    else:
        data = collect(a)
    markdown = page(data)
    write_results(a.out, a.page, markdown, data)
    print(markdown)


def collect(a: argparse.Namespace) -> dict:
    """Train (or read the finished runs of) every arm and seed: the per-seed evaluations by family and arm."""
    torch.set_num_threads(1)
    work = Path(a.work)
    data: dict = {
        "K": K,
        "seeds": a.seeds,
        "steps": a.steps,
        "prompts_per_step": PROMPTS,
        "group_size": GROUP,
        "machine": machine(),
        "command": "python examples/tcpo/run_tcpo.py " + " ".join(sys.argv[1:]),
        "families": {},
        "warm_start": {},
    }
    for fam in a.families:
        spec = FAMILIES[fam]
        model = warm_start(fam, spec, work, a.pass_target)
        start = run_arm(arm_config(model, spec, ARMS["mt_grpo"], a.seeds[0], 0, work / fam / "warm_start"))
        data["warm_start"][fam] = {k: v for k, v in start.items() if k in ("pass@1_sampled", "pass@8")}
        for arm in a.arms or spec.get("arms", [k for k in ARMS if k != "grpo"]):
            runs = []
            for seed in a.seeds:
                r = run_arm(arm_config(model, spec, ARMS[arm], seed, a.steps, work / fam / f"{arm}_s{seed}"))
                runs.append({k: v for k, v in r.items() if k != "start"})
                print(fam, arm, seed, {k: round(r.get(k, 0), 3) for k in EVALUATED[:3]}, flush=True)
            data["families"].setdefault(fam, {})[arm] = summary(runs, a.seeds)
    overheads = [
        f["tcpo_full"]["counterfactual_overhead_calls"]
        for f in data["families"].values()
        if "counterfactual_overhead_calls" in f.get("tcpo_full", {})
    ]
    if overheads:
        data["counterfactual_overhead_ratio"] = sum(overheads) / len(overheads)
    return data


def summary(runs: list[dict], seeds: list[int]) -> dict:
    """An arm's means and spreads over seeds, beside the per-seed evaluations they come from."""
    col = lambda k: [r.get(k, float("nan")) for r in runs]
    out = {
        "best_turn_pass_at_1": mean_sd(col("pass@1_sampled"))[0],
        "best_turn_pass_at_1_sd": mean_sd(col("pass@1_sampled"))[1],
        "best_turn_pass_at_8": mean_sd(col("pass@8"))[0],
        "best_turn_pass_at_8_sd": mean_sd(col("pass@8"))[1],
        "turns_to_success": mean_sd(col("turns_per_pass_sampled"))[0],
        "turns_to_success_sd": mean_sd(col("turns_per_pass_sampled"))[1],
        "improve_rate": mean_sd(col("improve_rate_sampled"))[0],
        "regress_rate": mean_sd(col("regress_rate_sampled"))[0],
        "env_calls": mean_sd(col("total_env_calls"))[0],
        "seeds": seeds,
        "per_seed": runs,
    }
    if all(x == x for x in col("cf_overhead_calls")):
        out["counterfactual_overhead_calls"] = mean_sd(col("cf_overhead_calls"))[0]
        out["counterfactual_overhead_seconds"] = mean_sd(col("cf_overhead_seconds"))[0]
    return out


def page(data: dict) -> str:
    """tcpo.md from the JSON's numbers alone; sets data["claims"]."""
    data["claims"] = claims(data)
    lines = [
        "# TCPO: turn-level credit vs multi-turn GRPO and the LEAP rank reward",
        "",
        f"Command: `{data['command']}`  ",
        *([f"Page and claims rewritten from the stored numbers: `{data['rendered']}`  "] if "rendered" in data else []),
        f"Machine: {data['machine']}  ",
        f"Seeds: {data['seeds']} (RL seeds; one warm start per family; each family's sizes below). K = {data['K']} "
        "turns, every group expanded; verifier scores are partial credit in [0, 1]. Evaluation on held-out "
        "prompts, 8 samples per prompt at temperature 1: best-turn pass@k (solved if any turn of any of k samples is "
        "perfect), turns to success, and how often a further turn raises or lowers the score. TCPO arms normalise turn "
        "credit per (prompt, turn index) over the episodes that reached that turn (`credit_args.norm=turn`, the default) "
        f"and weight turn k's normalised credit by turn_decay^(k-1) = {TURN_DECAY}^(k-1) (the default; "
        "`tcpo_full_no_decay` weights every turn alike). The warm start is evaluated once per family, by a run of 0 "
        "steps, and no arm evaluates before its first step (`run.eval_on_start=false`).",
        "",
    ]
    for fam, fam_data in data["families"].items():
        sp = FAMILIES[fam]
        steps, prompts, group = (
            sp.get("steps", data["steps"]),
            sp.get("prompts_per_step", PROMPTS),
            sp.get("group_size", GROUP),
        )
        lines += [
            f"## {fam}",
            "",
            f"Model: {sp.get('model', 'tiny-s (warm-started)')}; {steps} steps of {prompts} prompts x {group} samples per "
            f"arm ({steps * prompts * group} training episodes), lr {sp.get('lr', 3e-4)}; "
            f"{sp.get('heldout_size', 300)} held-out prompts.",
            "",
            "| arm | best-turn pass@1 | best-turn pass@8 | turns to success | improve rate | regress rate | env calls | counterfactual overhead (calls / seconds) |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for arm, d in fam_data.items():
            col = lambda k: [r[k] for r in d["per_seed"]]
            has_cf = "counterfactual_overhead_calls" in d
            lines.append(
                f"| {arm} | {fmt(col('pass@1_sampled'))} | {fmt(col('pass@8'))} | {fmt(col('turns_per_pass_sampled'), 2)} | "
                f"{fmt(col('improve_rate_sampled'))} | {fmt(col('regress_rate_sampled'))} | {fmt(col('total_env_calls'), 0)} | "
                + (
                    f"{d['counterfactual_overhead_calls']:.2f}x / {d['counterfactual_overhead_seconds']:.2f}x |"
                    if has_cf
                    else "- |"
                )
            )
        start = data["warm_start"][fam]
        lines += [
            "",
            f"Warm start (before RL): best-turn pass@1 {start['pass@1_sampled']:.3f}, pass@8 {start['pass@8']:.3f}.",
            "",
            *findings(fam_data, start["pass@1_sampled"]),
            *claims_table({c: v for c, v in data["claims"].items() if c.startswith(f"{fam}: ")}),
            "",
        ]
    lines += [
        "Claims are paired by RL seed, on samples at temperature 1; the counterfactual arms "
        "also spend the overhead column's extra environment calls, which the training-episode budget does not count.",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
