"""Do packed micro-batches and bf16 autocast move the quickstart's curves? Three arms of `tempering demo`
(the tiny model's warm start, then 800 GRPO steps), each seed in every arm:

    python benchmarks/speed_curves.py [--seeds 0 1 2] [--threads 2] [--work runs/speed_curves] [--results docs/results]

- `padded`: `loss.pack=false`, float32 (the update as before packing);
- `packed`: `loss.pack=true`, float32;
- `packed_bf16`: `loss.pack=true loss.autocast=bf16` (only where the CPU has bf16 instructions).

Both stages take the arm's keys. Per seed and arm: held-out greedy pass@1 every 50 GRPO steps, the
warm start's steps and pass@1, and the stages' seconds. Each arm against `padded`, judged by the shared
rule (`tempering.experiments.judge`): its held-out pass@1 no worse by more than `MARGIN` points, at the
end and averaged over the curve (one greedy evaluation of a run moves by several points between
evaluations, so the curve's average is the better comparison). Runs of one seed are not bit-identical
across arms (float rounding differs, and runs diverge from there), so the comparison is statistical. A
finished run folder is reused.

Writes speed_curves.md / speed_curves.json (`arms`, `runs`, `claims`, `against_padded`: each arm's claims
and its seconds per GRPO step against `padded`'s).
"""

from __future__ import annotations

import argparse
import json
import statistics as st
import subprocess
import sys
import time
from pathlib import Path

import torch

from tempering.experiments import Arm, claims_table, conditions, conditions_text, judge, machine, write_results

ARMS = {
    "padded": ["loss.pack=false"],
    "packed": ["loss.pack=true"],
    "packed_bf16": ["loss.pack=true", "loss.autocast=bf16"],
}
MARGIN = 3.0
"""Points of held-out pass@1 an arm may lose to `padded` and still leave the curves where they were."""
HELDOUT = "the quickstart's arithmetic held-out set (200 prompts, greedy)"


def demo(out: Path, seed: int, keys: list[str], threads: int) -> dict:
    """One quickstart (`tempering demo`) with `keys` in both stages; its curve read from the run folder."""
    if not (out / "grpo" / "final" / "config.json").is_file():
        over = [f"{stage}.{k}" for stage in ("pretrain", "train") for k in [*keys, f"run.threads={threads}"]]
        cmd = [sys.executable, "-m", "tempering.cli", "demo", "--seed", str(seed), "--out", str(out), "--no-progress"]
        r = subprocess.run(cmd + over, capture_output=True, text=True)
        if r.returncode:
            raise SystemExit(f"the quickstart failed ({out}):\n{r.stderr[-3000:]}")
    rows = lambda stage: [json.loads(x) for x in (out / stage / "metrics.jsonl").read_text().splitlines() if x]
    grpo, pre = rows("grpo"), rows("pretrain")
    evals = {r["step"]: r["eval/pass@1"] for r in grpo if "eval/pass@1" in r}
    seconds = lambda rs: sum(r.get("step_seconds", 0.0) for r in rs)
    return {
        "curve": {str(k): v for k, v in sorted(evals.items())},
        "pretrain_steps": max(r["step"] for r in pre if "step" in r),
        "pretrain_pass_at_1": [r["eval/pass@1"] for r in pre if "eval/pass@1" in r][-1],
        "pretrain_step_seconds": seconds(pre) / max(1, sum("step_seconds" in r for r in pre)),
        "grpo_rollouts": sum(r.get("env_calls", 0) for r in grpo),
        "grpo_step_seconds": seconds(grpo) / max(1, sum("step_seconds" in r for r in grpo)),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--threads", type=int, default=2, help="torch threads of every run")
    p.add_argument("--work", default="runs/speed_curves")
    p.add_argument("--results", default="docs/results")
    a = p.parse_args(argv)
    arms = (
        dict(ARMS)
        if torch.ops.mkldnn._is_mkldnn_bf16_supported()
        else {k: v for k, v in ARMS.items() if "bf16" not in k}
    )
    start, t0 = conditions(), time.time()
    runs: dict[str, dict[str, dict]] = {arm: {} for arm in arms}
    for i, seed in enumerate(a.seeds):
        order = list(arms) if i % 2 == 0 else list(reversed(arms))
        for arm in order:
            runs[arm][str(seed)] = demo(Path(a.work) / arm / f"seed{seed}", seed, arms[arm], a.threads)
            print(f"seed {seed} {arm}: {runs[arm][str(seed)]['curve']}", flush=True)
    claims, against = {}, {}
    for arm in arms:
        if arm == "padded":
            continue
        mine: dict[str, dict] = {}
        for what, of in (("at the end", lambda c: c[-1]), ("averaged over the curve", st.mean)):
            side = lambda name: Arm(
                name,
                {s: of(list(runs[name][str(s)]["curve"].values())) for s in a.seeds},
                HELDOUT,
                runs[name][str(a.seeds[0])]["grpo_rollouts"],
            )
            text = f"`{arm}`'s held-out pass@1 {what} is no worse than `padded`'s (within {MARGIN:g} points)"
            mine[text] = claims[text] = judge(side(arm), side("padded"), margin=MARGIN)
        grpo_s = lambda name: st.mean(runs[name][str(s)]["grpo_step_seconds"] for s in a.seeds)
        against[arm] = {"claims": list(mine), "grpo_step_seconds_ratio": grpo_s(arm) / grpo_s("padded")}
    data = {
        "command": " ".join(["python benchmarks/speed_curves.py", *(sys.argv[1:] if argv is None else argv)]),
        "machine": machine(),
        "conditions": [start, conditions()],
        "seconds": time.time() - t0,
        "seeds": a.seeds,
        "arms": arms,
        "runs": runs,
        "claims": claims,
        "against_padded": against,
    }
    write_results(a.results, "speed_curves", render(data), data)
    return 0


def render(d: dict) -> str:
    seeds = [str(s) for s in d["seeds"]]
    lines = [
        "# The quickstart's curves on packed micro-batches and under bf16 autocast",
        "",
        f"Command: `{d['command']}`; {d['machine']}; {conditions_text(*d['conditions'])}; {d['seconds'] / 60:.0f} min.",
        "",
        "`tempering demo` (tiny-s warm start on sums, then 800 GRPO steps, held-out greedy pass@1 on 200 prompts "
        "every 50 steps) with each arm's keys in both stages: "
        + "; ".join(f"`{arm}`: {' '.join(keys)}" for arm, keys in d["arms"].items())
        + ".",
        "",
        "| arm | seed | warm-start steps | warm-start pass@1 | GRPO pass@1 at 0 / 400 / 800 | curve average | s per GRPO step |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for arm, per in d["runs"].items():
        for s in seeds:
            r = per[s]
            c = r["curve"]
            at = " / ".join(f"{c[k]:.3f}" if k in c else "-" for k in ("0", "400", "800"))
            lines.append(
                f"| {arm} | {s} | {r['pretrain_steps']} | {r['pretrain_pass_at_1']:.3f} | {at} | "
                f"{st.mean(c.values()):.3f} | {r['grpo_step_seconds']:.3f} |"
            )
    lines += ["", "Against `padded`, paired by seed (points of held-out pass@1):", "", *claims_table(d["claims"]), ""]
    for arm, x in d["against_padded"].items():
        lines.append(
            f"- `{arm}`: seconds per GRPO step {x['grpo_step_seconds_ratio']:.2f}x `padded`'s (the machine was "
            "shared: see the load above)."
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
