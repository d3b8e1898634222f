"""MiniWoB++ through the rollout engine: does a text-only oracle solve every task it covers, and how many
episodes per minute does the family serve with the browser pool and without it?

    python benchmarks/gui_env.py [--rounds 3] [--episodes 1] [--seed 0] [--browsers 1] [--isolation-episodes 3]

The oracle (`tempering.envs.gui.miniwob_oracle`) reads only the decoded context the engine builds (the
first observation from `reset()`, then its own answers and each step's feedback, with the GUI feedback
template); it stands in for a model, so the times are the environment's. One round is one `rollout`
call over every oracle task kind (`--episodes` episodes each, all live at once, as in training).
Throughput is measured twice on the same rounds: with the pool (`--browsers` Chromium processes shared by
all episodes, each episode a window in a browser context of its own) and without it (`browsers=0`: each
episode starts and quits its own Chromium). Isolation (`pool_vs_no_pool`): the autocomplete and form tasks,
`--isolation-episodes` of each live at once in one Chromium, round after round, against a Chromium per
episode on the same seeds. Writes docs/results/gui_env.md and .json (same numbers).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from tempering.envs.gui.env import FEEDBACK_TEMPLATE
from tempering.envs.gui.miniwob import MiniWoBFamily
from tempering.envs.gui.miniwob_oracle import ORACLE_TASKS, answer
from tempering.experiments import conditions, conditions_text
from tempering.models.chat import ChatFormat
from tempering.rollout.engine import RolloutOptions, RolloutStats, rollout
from tempering.rollout.sampler import Sample, SamplingParams

ROOT = Path(__file__).resolve().parents[1]
MAX_TURNS = 10


class ByteTokenizer:
    """Lossless byte-level tokenizer: the oracle reads exactly the text the engine built."""

    eos_token_id = 256
    eos_token = None

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return list(text.encode())

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return bytes(i for i in ids if i < 256).decode()


class OracleSampler:
    """A sampler whose answer to each context is the oracle's output for its decoded text."""

    def __init__(self):
        self.tokenizer = ByteTokenizer()

    def sample(self, contexts: list[list[int]], params: SamplingParams) -> list[Sample]:
        out = []
        for ctx in contexts:
            ids = self.tokenizer.encode(answer(self.tokenizer.decode(ctx))) + [ByteTokenizer.eos_token_id]
            out.append(Sample(ids, [0.0] * len(ids), False))
        return out


def run_round(fam: MiniWoBFamily, episodes: int, seed: int) -> tuple[list, RolloutStats, float]:
    sampler = OracleSampler()
    fmt = ChatFormat(sampler.tokenizer, use_chat_template=False, feedback_template=FEEDBACK_TEMPLATE)
    opts = RolloutOptions(
        sampling=SamplingParams(max_new_tokens=256), max_turns=MAX_TURNS, max_context_tokens=65536, score_range=(0, 1)
    )
    tasks = fam.tasks("train", len(fam.names) * episodes, seed)
    stats = RolloutStats()
    t0 = time.perf_counter()
    groups = asyncio.run(rollout(sampler, fmt, tasks, fam.make_env, 1, opts, stats))
    return [e for g in groups for e in g.episodes], stats, time.perf_counter() - t0


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


FORM_TASKS = ("use-autocomplete", "login-user", "enter-password", "enter-text", "enter-text-2", "enter-text-dynamic")
"""The autocomplete and text-entry form tasks of the isolation check (`pool_vs_no_pool`)."""


def measure(browsers: int, rounds: int, episodes: int, seed: int, names: tuple[str, ...] = ORACLE_TASKS) -> dict:
    load_before = load()
    fam = MiniWoBFamily(names=names, browsers=browsers, max_steps=MAX_TURNS)
    eps, walls, steps, env_s, started = [], [], 0, 0.0, 0
    try:
        for r in range(rounds):
            got, stats, wall = run_round(fam, episodes, seed + r)
            eps += got
            walls.append(wall)
            steps += stats.env_calls
            env_s += stats.env_seconds
    finally:
        started = fam.pool.started
        fam.close()
    by_kind: dict[str, list[bool]] = {}
    for e in eps:
        by_kind.setdefault(e.task.meta["name"], []).append(e.stop_reason == "success")
    return {
        "browsers": browsers,
        "load_before": load_before,
        "load_after": load(),
        "episodes": len(eps),
        "steps": steps,
        "round_seconds": [round(w, 2) for w in walls],
        "episodes_per_minute": round(60 * len(eps) / sum(walls), 1),
        "seconds_per_step": round(env_s / steps, 3),
        "browsers_started": started,
        "success_rate": sum(e.stop_reason == "success" for e in eps) / len(eps),
        "success_by_task": {k: f"{sum(v)}/{len(v)}" for k, v in sorted(by_kind.items())},
        "stop_reasons": dict(Counter(e.stop_reason for e in eps)),
        "first_prompt_empty": any(not e.prompt.strip() for e in eps),
        "first_prompts_show_task": all(e.prompt.startswith("Task: ") and "\n#" in e.prompt for e in eps),
        "mean_turns": round(sum(len(e.turns) for e in eps) / len(eps), 2),
    }


def machine() -> dict:
    chromium = subprocess.run(["/usr/bin/chromium", "--version"], capture_output=True, text=True).stdout.strip()
    return {
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "chromium": chromium,
    }


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def render(report: dict) -> str:
    m, pool, nopool = report["machine"], report["pool"], report["no_pool"]
    iso = report["isolation_runs"]
    lines = [
        "# GUI environments: MiniWoB++ through the rollout engine",
        "",
        f"Command: `{report['command']}` (seeds {report['seed']}..{report['seed'] + report['rounds'] - 1}, one per round).",
        f"Machine: {m['platform']}, {m['cpus']} CPUs, Python {m['python']}, {m['chromium']}; "
        f"{conditions_text(*report['conditions'])}. The machine is shared "
        f"with other work: load average (1, 5, 15 min) {pool['load_before']} before the pool run, "
        f"{pool['load_after']} after it; {nopool['load_before']} before the run without the pool, "
        f"{nopool['load_after']} after it (that run keeps one Chromium per live episode, {len(report['miniwob_tasks'])} "
        "at a time, each several processes, on 2 cores).",
        "",
        f"A scripted oracle that reads only the decoded policy context (`tempering.envs.gui.miniwob_oracle`) plays "
        f"{len(report['miniwob_tasks'])} MiniWoB++ task kinds through `tempering.rollout.engine.rollout` (turn "
        f"limit {MAX_TURNS}, the GUI feedback template `{FEEDBACK_TEMPLATE!r}`, scores checked against [0, 1]). "
        f"One round is one rollout over every kind ({report['episodes_per_task']} episode(s) each, all live at once).",
        "",
        "## Oracle",
        "",
        f"- success: **{report['oracle_success_rate']:.3f}** over {pool['episodes'] + nopool['episodes']} episodes "
        f"({pool['episodes']} with the pool, {nopool['episodes']} without), mean {pool['mean_turns']} turns",
        f"- first prompt empty: {report['first_prompt_empty']} (every first prompt is `Task: ...` and the page's "
        f"targets: {pool['first_prompts_show_task'] and nopool['first_prompts_show_task']})",
        "",
        "| task | with pool | without pool |",
        "|---|---|---|",
    ]
    for k in report["miniwob_tasks"]:
        lines.append(f"| {k} | {pool['success_by_task'].get(k, '-')} | {nopool['success_by_task'].get(k, '-')} |")
    lines += [
        "",
        "## Throughput",
        "",
        "| | browsers started | episodes | steps | seconds per round | episodes per minute | seconds per step |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in ((f"pool (`browsers={pool['browsers']}`)", pool), ("no pool (`browsers=0`)", nopool)):
        rounds = ", ".join(f"{s:.1f}" for s in r["round_seconds"])
        lines.append(
            f"| {name} | {r['browsers_started']} | {r['episodes']} | {r['steps']} | {rounds} | "
            f"**{r['episodes_per_minute']}** | {r['seconds_per_step']} |"
        )
    lines += [
        "",
        "Seconds per step is the environment's time per `step` (action, settle wait, reading the page), with",
        f"all {len(report['miniwob_tasks'])} episodes of a round stepping at once on 2 cores (so mostly waiting for a CPU",
        "and for the shared browser); the pool does not change it. The difference is in `reset`: with the pool an",
        "episode opens a window in a new browser context of the running Chromium and loads its page there (no",
        "new browser), without it every episode starts Chromium and holds it for the whole rollout. The first",
        "pool round includes starting the browser.",
        "",
        "## Isolation: the pool against a browser per episode, on the same seeds",
        "",
        f"The autocomplete and form tasks, {iso['pool']['episodes'] // len(report['pool_vs_no_pool'])} episodes of "
        f"each per task over {report['rounds']} rounds ({report['isolation_episodes_per_task']} of each task live "
        "at once in every round): with the pool all of them share one Chromium, each in a browser context of its "
        "own (a window, its storage, focus and input state; disposed when the episode ends, so the next round "
        "starts clean); without it each has its own Chromium.",
        "",
        "| task | with pool | without pool |",
        "|---|---|---|",
    ]
    for task, r in report["pool_vs_no_pool"].items():
        lines.append(f"| {task} | {r['pool']} | {r['no_pool']} |")
    lines += [
        "",
        f"Load average before and after: {iso['pool']['load_before']} / {iso['pool']['load_after']} with the pool, "
        f"{iso['no_pool']['load_before']} / {iso['no_pool']['load_after']} without it.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3, help="rollouts per mode (one seed each)")
    ap.add_argument("--episodes", type=int, default=1, help="episodes per task kind in one rollout")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--browsers", type=int, default=1, help="pool size of the pooled run")
    ap.add_argument(
        "--isolation-episodes", type=int, default=3, help="episodes per form task in one rollout of the isolation check"
    )
    ap.add_argument("--out", default=str(ROOT / "docs/results/gui_env"), help="writes OUT.md and OUT.json")
    args = ap.parse_args(argv)
    command = " ".join(["python benchmarks/gui_env.py", *(argv if argv is not None else sys.argv[1:])])
    start = conditions()
    pool = measure(args.browsers, args.rounds, args.episodes, args.seed)
    nopool = measure(0, args.rounds, args.episodes, args.seed)
    # isolation: many episodes of the form tasks live at once in one browser, round after round (the next
    # round's episodes in the windows' browser after the last ones), against a browser per episode
    iso_pool = measure(1, args.rounds, args.isolation_episodes, args.seed, FORM_TASKS)
    iso_nopool = measure(0, args.rounds, args.isolation_episodes, args.seed, FORM_TASKS)
    n = pool["episodes"] + nopool["episodes"]
    report = {
        "command": command,
        "seed": args.seed,
        "rounds": args.rounds,
        "episodes_per_task": args.episodes,
        "isolation_episodes_per_task": args.isolation_episodes,
        "miniwob_tasks": list(ORACLE_TASKS),
        "oracle_success_rate": (pool["success_rate"] * pool["episodes"] + nopool["success_rate"] * nopool["episodes"])
        / n,
        "episodes_per_minute": pool["episodes_per_minute"],
        "episodes_per_minute_no_pool": nopool["episodes_per_minute"],
        "seconds_per_step": pool["seconds_per_step"],
        "seconds_per_step_no_pool": nopool["seconds_per_step"],
        "first_prompt_empty": pool["first_prompt_empty"] or nopool["first_prompt_empty"],
        "pool": pool,
        "no_pool": nopool,
        "pool_vs_no_pool": {
            task: {"pool": iso_pool["success_by_task"][task], "no_pool": iso_nopool["success_by_task"][task]}
            for task in FORM_TASKS
        },
        "isolation_runs": {"pool": iso_pool, "no_pool": iso_nopool},
        "machine": machine(),
        "conditions": [start, conditions()],
    }
    out = Path(args.out)
    write_atomic(out.with_suffix(".json"), json.dumps(report, indent=2) + "\n")
    write_atomic(out.with_suffix(".md"), render(report))
    keys = ("oracle_success_rate", "episodes_per_minute", "episodes_per_minute_no_pool", "pool_vs_no_pool")
    print(json.dumps({k: report[k] for k in keys}))


if __name__ == "__main__":
    main()
