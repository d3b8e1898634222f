"""Learning through `tempering serve tinker`: tinker-cookbook's rl_loop reward and on-policy distillation's
teacher KL, the first steps against the last, one fresh service per seed.

    .venv/bin/python benchmarks/tinker_learning.py [--part rl|opd|both]
        [--rl-steps 12] [--opd-steps 9] [--seeds 0 1 2]

- `rl`: `rl_loop.py` as it ships on the tiny model warm-started by `cookbook.warm_start` on `SMALL_SUMS`
  (served as meta-llama/Llama-3.2-1B; cached under .tempering-cache/), the nine sums x `RL_GROUP` samples a
  step, for `--rl-steps` steps; each seed is the service's sampling seed and the order of the sums.
- `opd`: `distillation/on_policy_distillation.py` as it ships: the student the random tiny model under the
  cookbook's name, the teacher that warm-started model, DeepMath-format prompts on the sums, for `--opd-steps`.
Per seed: the mean of the logged metric over the first and the last `WINDOW` steps; the per-seed differences
(last - first) go through the shared rule (`tempering.experiments.interval` / `verdict`: reward higher is
better, in points; KL lower is better, in nats). Writes docs/results/tinker_learning.md and .json (a part run
alone keeps the stored other part). It times nothing, so it runs outside the timing lock.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics as st
import sys
import tempfile
import time
from pathlib import Path

from tempering.experiments import RULE, interval, verdict
from tempering.progress import conditions, conditions_text
from tempering.serve.tinker import cookbook as local

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".tempering-cache" / "tinker"
NAME, TEACHER = "meta-llama/Llama-3.2-1B", "meta-llama/Llama-3.1-8B-Instruct"
WINDOW = 3
"""Steps averaged at each end of a run."""
RL_GROUP, RL_TOKENS, RL_RANK, RL_LR = 4, 16, 8, 5e-3
"""rl_loop's settings (its learning rate, 4e-5 by default, is for billions of weights); its batch is the nine
`SMALL_SUMS`, each step one shuffled pass over them, so the first and the last steps ask the same questions."""
OPD_GROUPS, OPD_GROUP, OPD_TOKENS, OPD_RANK, OPD_LR = 4, 4, 16, 8, 1e-2


def first_last(rows: list[dict], key: str) -> tuple[float, float, list[float]]:
    values = [r[key] for r in rows]
    if len(values) < 2 * WINDOW:
        raise RuntimeError(f"{len(values)} logged steps of {key}; the first and last {WINDOW} need {2 * WINDOW}")
    return st.mean(values[:WINDOW]), st.mean(values[-WINDOW:]), values


def judged(per_seed: dict[int, tuple[float, float, list[float]]], scale: float, higher_is_better: bool) -> dict:
    """first, last, their difference per seed (times `scale`), its interval and the rule's verdict."""
    seeds = sorted(per_seed)
    diffs = [scale * (per_seed[s][1] - per_seed[s][0]) for s in seeds]
    iv = interval(diffs)
    word, why = verdict(iv, higher_is_better=higher_is_better)
    return {
        "seeds": seeds,
        "first": [per_seed[s][0] for s in seeds],
        "last": [per_seed[s][1] for s in seeds],
        "diff": diffs,
        "mean_diff": iv.mean,
        "interval": list(iv.ci95) if iv.n > 1 else None,
        "verdict": word,
        "why": why,
        "curves": [per_seed[s][2] for s in seeds],
    }


def per_seed(work: Path, seeds: list[int], models: dict[str, str], recipe: str, key: str, *args: str, **data) -> dict:
    """`recipe` run once per seed on a fresh service (its sampling seed) and folder (`prepare(**data)`, seeded
    too): the first and last `WINDOW` means of its logged `key`, and its curve."""
    runs = {}
    for seed in seeds:
        state = work / f"{recipe}{seed}"
        with local.serving(state, models, "threads=2", f"seed={seed}") as url:
            folder = local.prepare(work / f"{recipe}{seed}-run", state, NAME, seed=seed, **data)
            runs[seed] = first_last(local.run_loop(recipe, folder, url, NAME, *args, log="log"), key)
    return runs


def rl(work: Path, steps: int, seeds: list[int]) -> dict:
    model = local.warm_start(CACHE, NAME, local.SMALL_SUMS, **local.SMALL_WARM_START)
    made = json.loads((model / "warm_start.json").read_text())
    runs = per_seed(
        work, seeds, {NAME: str(model)}, "rl_loop", "reward/total", f"batch_size={len(local.SMALL_SUMS)}",
        f"group_size={RL_GROUP}", f"max_tokens={RL_TOKENS}", f"max_steps={steps}", "loss_fn=importance_sampling",
        f"lora_rank={RL_RANK}", f"learning_rate={RL_LR}", repeats=steps, sums=local.SMALL_SUMS,
    )  # fmt: skip
    return {
        **judged(runs, 100.0, True),
        "steps": steps,
        "metric": "reward/total (share of samples rl_loop's grader marks right), difference in points",
        "settings": {
            "prompts": len(local.SMALL_SUMS),
            "group": RL_GROUP,
            "max_tokens": RL_TOKENS,
            "lora_rank": RL_RANK,
            "learning_rate": RL_LR,
            "loss_fn": "importance_sampling",
        },
        "warm_start": {k: made[k] for k in ("heldout_pass@1", "steps", "seconds", "settings")},
    }


def opd(work: Path, steps: int, seeds: list[int]) -> dict:
    teacher = local.warm_start(CACHE, NAME, local.SMALL_SUMS, **local.SMALL_WARM_START)
    runs = per_seed(
        work, seeds, {NAME: "tiny-s", TEACHER: str(teacher)}, "distillation.on_policy_distillation", "teacher_kl",
        f"teacher_model={TEACHER}", "dataset=deepmath", f"groups_per_batch={OPD_GROUPS}", f"group_size={OPD_GROUP}",
        f"max_tokens={OPD_TOKENS}", f"lora_rank={OPD_RANK}", f"learning_rate={OPD_LR}", f"max_steps={steps}",
        "eval_every=0",
    )  # fmt: skip
    return {
        **judged(runs, 1.0, False),
        "steps": steps,
        "metric": "teacher_kl (the student's samples' per-token reverse KL to the teacher, nats)",
        "settings": {
            "groups": OPD_GROUPS,
            "group": OPD_GROUP,
            "max_tokens": OPD_TOKENS,
            "lora_rank": OPD_RANK,
            "learning_rate": OPD_LR,
            "student": "tiny-s (random)",
            "teacher": "warm_start's model",
        },
    }


def page(res: dict) -> str:
    lines = [
        "# Learning through the Tinker API: rl_loop's reward, on-policy distillation's teacher KL",
        "",
        "tinker-cookbook's recipes, unchanged, against `tempering serve tinker` on tiny models (one fresh service",
        f"per seed); per seed the mean of the first (b) and of the last (a) {WINDOW} steps. Written by",
        "`benchmarks/tinker_learning.py`; " + RULE,
        "",
        "| recipe | metric | steps | seeds | first (per seed) | last (per seed) | last - first | 95% interval | verdict |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for part, r in res.items():
        iv = "-" if r["interval"] is None else f"[{r['interval'][0]:+.2f}, {r['interval'][1]:+.2f}]"
        lines.append(
            f"| {part} | {r['metric']} | {r['steps']} | {len(r['seeds'])} | "
            f"{', '.join(f'{x:.3f}' for x in r['first'])} | {', '.join(f'{x:.3f}' for x in r['last'])} | "
            f"{r['mean_diff']:+.2f} | {iv} | {r['verdict']} ({r['why']}) |"
        )
    for part, r in res.items():
        lines += ["", f"## {part}", "", f"Settings: {json.dumps(r['settings'])}."]
        if "warm_start" in r:
            w = r["warm_start"]
            lines.append(
                f"Warm start: `tempering pretrain` {w['steps']} steps ({w['seconds']:.0f} s), greedy accuracy "
                f"{w['heldout_pass@1']:.3f} on its sums; settings {json.dumps(w['settings']['optim'])}, "
                f"{json.dumps(w['settings']['rollout'])}."
            )
        for s, curve in zip(r["seeds"], r["curves"]):
            lines.append(f"- seed {s}: {' '.join(f'{x:.3f}' for x in curve)}")
        m = r["machine"]
        lines += [
            "",
            f"Command: `{r['command']}`; {m['platform']}, {m['cpus']} cores, "
            f"{conditions_text(m['start'], m['end'])} (a shared machine: other work ran beside it).",
        ]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--part", choices=["rl", "opd", "both"], default="both")
    ap.add_argument("--rl-steps", type=int, default=12)
    ap.add_argument("--opd-steps", type=int, default=9)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--out", default=str(ROOT / "docs" / "results"))
    a = ap.parse_args()
    os.environ.setdefault("TINKER_API_KEY", local.OFFLINE["TINKER_API_KEY"])  # the SDK wants one; none is checked
    command = ".venv/bin/python benchmarks/tinker_learning.py " + " ".join(sys.argv[1:])
    stored = Path(a.out) / "tinker_learning.json"
    res = json.loads(stored.read_text()) if stored.is_file() and a.part != "both" else {}
    for part, fn, steps in (("rl_loop", rl, a.rl_steps), ("on_policy_distillation", opd, a.opd_steps)):
        if a.part not in ("both", part[:2] if part == "rl_loop" else "opd"):
            continue
        start = conditions()
        with tempfile.TemporaryDirectory(prefix="tinker-learning-") as tmp:
            r = fn(Path(tmp), steps, a.seeds)
        r["machine"] = {"platform": platform.platform(), "cpus": os.cpu_count(), "start": start, "end": conditions()}
        r["command"] = command
        r["date"] = time.strftime("%Y-%m-%d")
        res[part] = r
    stored.parent.mkdir(parents=True, exist_ok=True)
    stored.write_text(json.dumps(res, indent=1) + "\n")
    stored.with_suffix(".md").write_text(page(res))


if __name__ == "__main__":
    main()
