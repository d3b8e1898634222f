"""Learning curves of the policy-loss family on the real quickstart's task: GRPO (PPO-clip, token-mean: TRL's
`dapo`), GSPO, CISPO, DPPO-TV and REINFORCE++ on SmolLM2-135M-Instruct, sums of 1..30 asked in words
(`tempering demo --model smollm2-135m-instruct`'s GRPO stage), each for the same rollout budget.

    python examples/losses/curves.py [--work DIR] [--results docs/results] [--seeds 0 1 2] [--max-runs N]

Runs one training at a time with one torch thread, seed by seed (every loss's seed 0, then seed 1, ...), each
in its own folder under --work; run again, it skips finished runs and resumes an interrupted one from its
last checkpoint, so it can be stopped at any time (--max-runs stops it after N trainings). Writes the `curves`
part of docs/results/losses.{json,md} from whatever has finished: per loss, the final greedy pass@1 on the
100 held-out prompts per seed, its mean and 95% t-interval, and each loss against GRPO by the shared rule
(`tempering.experiments.judge`).
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).parent))

from page import update  # noqa: E402

ARMS: dict[str, dict] = {
    "grpo": {"advantage": "grpo", "policy_loss": "ppo_clip", "loss_agg": "token-mean"},
    # GSPO's paper setting: sequence ratios clipped to [1 - 3e-4, 1 + 4e-4], the mean over sequences
    "gspo": {
        "policy_loss": "gspo",
        "loss_agg": "seq-mean-token-mean",
        "clip_low": 3e-4,
        "clip_high": 4e-4,
        "dual_clip": None,
    },
    # CISPO as TRL runs it (epsilon_high 5, no lower bound): the ratio weight in [0, 5]
    "cispo": {"policy_loss": "cispo", "clip_low": 1.0, "clip_high": 4.0},
    "dppo_tv": {"policy_loss": "dppo_tv"},
    "reinforce_pp": {"advantage": "reinforce_pp"},
}
"""Each arm's loss keys over the quickstart's GRPO config (everything else is the quickstart's)."""


def config(arm: str, seed: int, out: Path) -> dict:
    from tempering.recipes.demo import REAL_GRPO

    cfg = copy.deepcopy(REAL_GRPO)
    cfg["model"] = {"name": "smollm2-135m-instruct"}
    cfg["loss"] = {**cfg["loss"], **ARMS[arm]}
    cfg["run"].update(
        seed=seed, out_dir=str(out), threads=1, progress=False, checkpoint_every=5, keep_checkpoints=1, log_every=5
    )
    return cfg


def train(arm: str, seed: int, work: Path) -> dict | None:
    """One training (resumed if interrupted); its final held-out pass@1, or None if it already finished."""
    from tempering.experiments import summarize_run
    from tempering.recipes.runner import run
    from tempering.train.checkpoint import list_checkpoints

    out = work / arm / f"seed{seed}"
    if (out / "final" / "config.json").is_file():
        return summarize_run(out)
    resume = out.is_dir() and bool(list_checkpoints(out))
    run("train", config(arm, seed, out), resume=resume, overwrite=out.is_dir() and not resume)
    return summarize_run(out)


def collect(work: Path, seeds: list[int]) -> dict:
    """The finished runs' final pass@1, per loss and seed, with each loss's interval and its claim against GRPO."""
    from tempering.experiments import Arm, interval, judge, summarize_run

    cfg = config("grpo", 0, work)
    rollouts = cfg["run"]["steps"] * cfg["rollout"]["prompts_per_step"] * cfg["rollout"]["group_size"]
    heldout = json.dumps({"task": cfg["task"], "greedy": True}, sort_keys=True)
    curves: dict = {}
    arms: dict[str, Arm] = {}
    for arm in ARMS:
        per_seed = {}
        for s in seeds:
            out = work / arm / f"seed{s}"
            if (out / "final" / "config.json").is_file():
                per_seed[s] = summarize_run(out)["pass@1"]
        if not per_seed:
            continue
        iv = interval([100 * v for v in per_seed.values()])
        curves[arm] = {
            "loss": ARMS[arm],
            "per_seed": {str(s): v for s, v in per_seed.items()},
            "mean": iv.mean / 100,
            "ci95": [x / 100 for x in iv.ci95] if iv.n > 1 else None,
        }
        arms[arm] = Arm(arm, per_seed, heldout, rollouts)
    claims = {}
    for arm, a in arms.items():
        if arm != "grpo" and "grpo" in arms and set(a.per_seed) == set(arms["grpo"].per_seed):
            claims[f"{arm} vs grpo"] = judge(a, arms["grpo"])
    return {"arms": curves, "claims": claims, "rollouts_per_run": rollouts}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", default="runs/losses", help="where the runs live (resumed from there)")
    ap.add_argument("--results", default=str(ROOT / "docs" / "results"))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--max-runs", type=int, default=None, help="stop after this many trainings (resume later)")
    a = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    work = Path(a.work)
    done = 0
    for seed in a.seeds:
        for arm in ARMS:
            if a.max_runs is not None and done >= a.max_runs:
                break
            if (work / arm / f"seed{seed}" / "final" / "config.json").is_file():
                continue
            t0 = time.perf_counter()
            train(arm, seed, work)
            done += 1
            print(f"{arm} seed {seed}: {time.perf_counter() - t0:.0f} s", flush=True)
            write(a, work)  # after every run: a stopped script leaves its table
    write(a, work)
    return 0


def write(a: argparse.Namespace, work: Path) -> None:
    from tempering.experiments import machine

    part = collect(work, a.seeds)
    values = {
        "curves": part["arms"],
        "curve_claims": part["claims"],
        "curve_setup": {"rollouts_per_run": part["rollouts_per_run"], "seeds": a.seeds, "arms": ARMS},
    }
    command = "python examples/losses/curves.py " + " ".join(sys.argv[1:])
    update(Path(a.results), "curves", values, command, machine())


if __name__ == "__main__":
    raise SystemExit(main())
