"""Ecosystem task families: reasoning-gym's generators as they ship, through task.family=reasoning_gym.

    python benchmarks/ecosystem.py [--train-tasks 10] [--heldout-tasks 3] [--steps 3]

For every generator the package registers (its `composite` combinator aside):
- loaded: the family builds it with its default config and draws train and held-out tasks;
- score agreement: for each drawn task, the right answer (the entry's, or the package's example for
  questions with many right answers), other tasks' answers, mutations of the right one and a
  completion with no answer tag, scored by the family's env (the completion with the answer inside
  `<answer>` tags) and by the package's `score_answer` on the answer itself (None without a tag;
  answers are stripped, as the tag's text is read stripped);
- overlap: train questions that are also held-out questions (must be 0).
Then `tempering train` runs a few steps on the tiny model for a single generator and a composite.
Writes docs/results/ecosystem.md and ecosystem.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from tempering.envs.reasoning_gym import generator_names
from tempering.envs.registry import make_family

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "results"
TRAIN_RUNS = {"basic_arithmetic": "basic_arithmetic", "chain_sum+spell_backward": {"chain_sum": 2, "spell_backward": 1}}


def machine() -> dict:
    torch.set_num_threads(2)
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    a @ b
    t, reps = time.perf_counter(), 20
    for _ in range(reps):
        a @ b
    gflops = 2 * 1024**3 * reps / (time.perf_counter() - t) / 1e9
    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "matmul_gflops_2_threads": round(gflops, 1),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def _right(entry: dict):
    meta = entry["metadata"]
    return entry["answer"] if entry["answer"] is not None else meta.get("example_answer", meta.get("possible_answer"))


def check_generator(name: str, n_train: int, n_held: int, rng: random.Random) -> dict:
    t0 = time.perf_counter()
    try:
        fam = make_family("reasoning_gym", name=name)
        train = fam.tasks("train", n_train, seed=0)
        held = fam.tasks("heldout", n_held, seed=0)
    except Exception as e:
        return {"loaded": False, "error": f"{type(e).__name__}: {str(e)[:300]}", "seconds": time.perf_counter() - t0}
    overlap = len({t.meta["entry"]["question"] for t in train} & {t.meta["entry"]["question"] for t in held})
    right = [_right(t.meta["entry"]) for t in train]
    answers = equal = raised = full = 0
    disagree = []
    for t, a in zip(train, right):
        a = "" if a is None else str(a)
        others = [str(x) for x in right if x is not None]
        made = [a, rng.choice(others) if others else "0", f"{a} {a}", f"x {a}", a[:-1], a[::-1]]
        for cand in [*(c.strip() for c in made), None]:  # the tag's text is read stripped
            completion = "no answer given" if cand is None else f"Thinking.\n<answer>{cand}</answer>"
            try:
                want = float(fam.scorer.score_answer(cand, t.meta["entry"]))
            except Exception:
                raised += 1
                continue
            got = asyncio.run(fam.make_env(t).step(completion)).score
            answers += 1
            equal += got == want
            full += want == 1.0
            if got != want and len(disagree) < 3:
                disagree.append({"answer": cand, "family": got, "package": want})
    return {
        "loaded": True,
        "answers": answers,
        "equal": equal,
        "package_scorer_raised": raised,
        "full_marks": full,
        "disagreements": disagree,
        "heldout_overlap": overlap,
        "seconds": round(time.perf_counter() - t0, 2),
    }


def train_run(label: str, name, steps: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        cmd = [
            sys.executable,
            "-m",
            "tempering.cli",
            "train",
            "model.name=tiny-xs",
            "task.family=reasoning_gym",
            f"task.args.name={json.dumps(name)}",
            "task.train_size=32",
            "task.heldout_size=4",
            "rollout.group_size=2",
            "rollout.prompts_per_step=4",
            "rollout.max_new_tokens=8",
            "rollout.max_turns=2",
            f"run.steps={steps}",
            f"run.out_dir={out}",
            "run.eval_every=0",
            "run.checkpoint_every=0",
            "run.progress=false",
            "run.threads=2",
        ]
        t0 = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        wall = time.perf_counter() - t0
        if r.returncode != 0:
            return {"generator": label, "ok": False, "error": r.stderr[-600:], "seconds": round(wall, 1)}
        rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
        rows = [x for x in rows if "reward" in x]
        return {
            "generator": label,
            "ok": len(rows) == steps,
            "steps": len(rows),
            "reward": [round(x["reward"], 4) for x in rows],
            "seconds": round(wall, 1),
        }


def render(report: dict, command: str) -> str:
    rg, m = report["reasoning_gym"], report["machine"]
    gens = report["generators"]
    failed = [f"- {n}: {g['error']}" for n, g in gens.items() if not g["loaded"]]
    disagree = [f"- {n}: {g['disagreements']}" for n, g in gens.items() if g.get("disagreements")]
    raised = [f"{n} ({g['package_scorer_raised']})" for n, g in gens.items() if g.get("package_scorer_raised")]
    runs = [
        f"| {r['generator']} | {r.get('steps', 0)} | {r.get('reward', '-')} | {r['seconds']} |" for r in report["train"]
    ]
    slowest = sorted(((g["seconds"], n) for n, g in gens.items()), reverse=True)[:5]
    lines = [
        "# Ecosystem task families",
        "",
        f"Generated by `{command}`; numbers come from that run (docs/results/ecosystem.json).",
        "",
        f"Machine: {m['platform']}, Python {m['python']}, {m['cpus']} CPUs, a 1024^3 float32 matmul at "
        f"{m['matmul_gflops_2_threads']} GFLOP/s on 2 threads, load average {m['load_average']} at the start.",
        "",
        f"## reasoning_gym (reasoning-gym {report['package_version']})",
        "",
        f"- generators loaded: {rg['generators_loaded']} of {rg['generators_total']} registered (the package's "
        "`composite` combinator aside; it is what `name: {generator: weight}` builds)",
        f"- score agreement: {rg['score_agreement']:.4f} of {rg['answers_scored']} answers, the family's score "
        "equal to the package's `score_answer` (right answers, other tasks' answers, mutations, no tag)",
        f"- answers with full marks among them: {rg['full_marks']}",
        f"- train questions also in the held-out split: {rg['heldout_overlap']}",
        f"- trained a few steps: {', '.join(rg['trained']) or 'none'}",
        f"- answers the package's own scorer raised on (left out of the agreement): {', '.join(raised) or 'none'}",
        f"- slowest generators to build and draw: {', '.join(f'{n} ({s:.1f} s)' for s, n in slowest)}",
        "",
        "Generators that did not load:",
        "",
        *(failed or ["- none"]),
        "",
        "Disagreements (first few per generator):",
        "",
        *(disagree or ["- none"]),
        "",
        "## Training through `tempering train` (tiny-xs, two turns, feedback from the verdict)",
        "",
        "| generator | steps | reward per step | seconds |",
        "|---|---|---|---|",
        *runs,
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--train-tasks", type=int, default=10)
    p.add_argument("--heldout-tasks", type=int, default=3)
    p.add_argument("--steps", type=int, default=3)
    args = p.parse_args(argv)
    command = "python benchmarks/ecosystem.py" + "".join(f" {a}" for a in (argv or sys.argv[1:]))
    import importlib.metadata

    report: dict = {"machine": machine(), "package_version": importlib.metadata.version("reasoning-gym")}
    rng = random.Random(0)
    names = generator_names()
    gens = {}
    for n in names:
        gens[n] = check_generator(n, args.train_tasks, args.heldout_tasks, rng)
        print(n, gens[n].get("equal"), "/", gens[n].get("answers"), gens[n].get("error", ""), flush=True)
    report["generators"] = gens
    report["train"] = [train_run(label, name, args.steps) for label, name in TRAIN_RUNS.items()]
    loaded = [g for g in gens.values() if g["loaded"]]
    answers = sum(g["answers"] for g in loaded)
    report["reasoning_gym"] = {
        "generators_loaded": len(loaded),
        "generators_total": len(names),
        "score_agreement": sum(g["equal"] for g in loaded) / answers if answers else 0.0,
        "answers_scored": answers,
        "full_marks": sum(g["full_marks"] for g in loaded),
        "heldout_overlap": sum(g["heldout_overlap"] for g in loaded),
        "trained": [r["generator"] for r in report["train"] if r["ok"]],
    }
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "ecosystem.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    (OUT / "ecosystem.md").write_text(render(report, command))
    print(json.dumps(report["reasoning_gym"], indent=1))


if __name__ == "__main__":
    main()
