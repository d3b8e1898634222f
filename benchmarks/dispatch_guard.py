"""What the dispatch guard (harness/dispatch_guard.cpp) costs an extension call, beside the same call unguarded.

    flock /tmp/tempering-timing.lock python benchmarks/dispatch_guard.py

A `torch_ext` call runs armed: the guard is armed and disarmed around it, and checked after it (four
ctypes calls), and every ATen op inside passes a RecordFunction callback. Two processes alternate, round
by round: one with the guard installed (the candidate's process as the judge runs it), one without (the
harness before the guard). Each times a stand-in extension call that allocates its output and views it
(`empty_like`, `view`: what an honest extension asks of torch) and nothing else, so the difference is the
guard's cost per call. Writes docs/results/dispatch_guard.md and dispatch_guard.json (same numbers), with
the machine's load average and matmul peak at the start and the end.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CALLS = 2000
"""Calls per round and process."""

_CHILD = r"""
import ctypes, json, sys, time, torch
from tempering.envs.kernels.harness.policy import ALLOCATION_OPS, ALLOWED_OPS
guard_path, calls = sys.argv[1], int(sys.argv[2])
torch.set_num_threads(1)
x = torch.randn(256, 1024)
if guard_path:
    lib = ctypes.CDLL(guard_path)
    lib.guard_install("\n".join(sorted(ALLOWED_OPS | ALLOCATION_OPS)).encode())
    buf = ctypes.create_string_buffer(256)
    def call():
        lib.guard_arm(1)
        try:
            out = torch.empty_like(x).view(-1)
        finally:
            lib.guard_arm(0)
            refused = not lib.guard_intact() or lib.guard_take(buf, 256)
        assert not refused, buf.value
        return out
else:
    def call():
        return torch.empty_like(x).view(-1)
for line in sys.stdin:  # one round per line: the parent alternates the two processes
    t = time.perf_counter()
    for _ in range(calls):
        call()
    print(json.dumps((time.perf_counter() - t) / calls * 1e6), flush=True)
"""


def build(out: Path) -> Path:
    """The guard, built as the verifier builds it (verifier.dispatch_guard_cmd)."""
    from importlib import resources

    from tempering.envs.kernels.verifier import dispatch_guard_cmd

    src = resources.files("tempering.envs.kernels.harness").joinpath("dispatch_guard.cpp").read_text()
    (out / "dispatch_guard.cpp").write_text(src)
    subprocess.run(dispatch_guard_cmd(), cwd=out, check=True)
    return out / "dispatch_guard.so"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "results")
    args = ap.parse_args()
    from tempering.progress import conditions, conditions_text

    start = conditions()
    with tempfile.TemporaryDirectory() as tmp:
        guard = build(Path(tmp))
        procs = {
            name: subprocess.Popen(
                [sys.executable, "-c", _CHILD, path, str(CALLS)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env={**os.environ, "OMP_NUM_THREADS": "1"},
            )
            for name, path in (("guarded", str(guard)), ("unguarded", ""))
        }
        times: dict[str, list[float]] = {name: [] for name in procs}
        for r in range(args.rounds):
            for name in sorted(procs, reverse=r % 2 == 1):  # rotated order
                p = procs[name]
                assert p.stdin is not None and p.stdout is not None
                p.stdin.write("go\n")
                p.stdin.flush()
                times[name].append(float(p.stdout.readline()))
        for p in procs.values():
            assert p.stdin is not None
            p.stdin.close()
            p.wait()
    end = conditions()
    median = {name: statistics.median(v) for name, v in times.items()}
    overhead = median["guarded"] - median["unguarded"]
    data = {
        "command": "flock /tmp/tempering-timing.lock python benchmarks/dispatch_guard.py",
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()},
        "conditions_start": start,
        "conditions_end": end,
        "rounds": args.rounds,
        "calls_per_round": CALLS,
        "call_us": {name: [round(t, 3) for t in v] for name, v in times.items()},
        "median_call_us": {name: round(t, 3) for name, t in median.items()},
        "overhead_us_per_call": round(overhead, 3),
        "overhead_share_of_2ms": round(overhead / 2000.0, 5),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "dispatch_guard.json").write_text(json.dumps(data, indent=1) + "\n")
    page = [
        "# The dispatch guard's cost per extension call",
        "",
        f"`{data['command']}`. {conditions_text(start, end)}; other people's jobs share the machine, so",
        "only the difference within this run means anything. A stand-in extension call (allocate the output",
        "and view it, what an honest extension asks of torch) timed in two processes that alternate round by",
        f"round ({args.rounds} rounds of {CALLS} calls, medians of the per-round means):",
        "",
        "| process | median µs per call |",
        "| --- | --- |",
        *(f"| {name} | {t:.2f} |" for name, t in median.items()),
        "",
        f"The guard adds {overhead:.2f} µs per extension call: {100 * overhead / 2000.0:.3f}% of a 2 ms call.",
        "",
    ]
    (args.out / "dispatch_guard.md").write_text("\n".join(page))
    print("\n".join(page))


if __name__ == "__main__":
    main()
