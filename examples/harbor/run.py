"""Which Harbor tasks tempering loads, verifies in the local sandbox, or leaves to Docker.

    nice .venv/bin/python examples/harbor/run.py [FOLDER ...] --results docs/results

Over the built-in samples (src/tempering/envs/terminal/samples), examples/harbor/bundles (tasks that
need Docker, and three that are wrong on purpose) and any folder of tasks given: each task is loaded
(Harbor's rules; Terminal-Bench 1 folders converted), written and read again (the round trip must give
the same task), and gold-verified in the sandbox when its environment can be emulated (tests before the
oracle must fail, the oracle runs, tests after it must pass). Writes docs/results/harbor.json and
harbor.md with the same numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from tempering.envs.terminal import SAMPLES, load_bundles, local_problem, read_bundle, write_bundle
from tempering.runlog import atomic_write_text
from tempering.sandbox import Sandbox
from tempering.synth.verify import SandboxVerifier

HERE = Path(__file__).resolve().parent


def round_trip_identical(bundle, tmp: Path) -> bool:
    again = read_bundle(write_bundle(bundle, tmp / bundle.name))
    return (again.instruction, again.files, again.config.to_toml()) == (
        bundle.instruction,
        bundle.files,
        bundle.config.to_toml(),
    )


async def survey(folders: list[Path], sandbox: Sandbox) -> tuple[dict, list[dict]]:
    rows, rejected = [], Counter()
    verifier = SandboxVerifier(sandbox)
    loaded_all = []
    for folder in folders:
        loaded, refused = load_bundles(folder)
        for name, why in sorted(refused.items()):
            rejected[why.split(":", 1)[0]] += 1
            rows.append({"folder": str(folder), "bundle": name, "result": "not loaded", "why": why})
        loaded_all += [(folder, b) for b in loaded]
    with tempfile.TemporaryDirectory() as tmp:
        identical = [round_trip_identical(b, Path(tmp) / str(i)) for i, (_, b) in enumerate(loaded_all)]
    local = [(f, b) for f, b in loaded_all if not local_problem(b)]
    verdicts = await asyncio.gather(*(verifier.verify(b) for _, b in local))
    by_name = {b.name: v for (_, b), v in zip(local, verdicts)}
    needs_docker = 0
    for folder, b in loaded_all:
        if b.name not in by_name:
            needs_docker += 1
            rows.append({"folder": str(folder), "bundle": b.name, "result": "needs docker", "why": local_problem(b)})
            continue
        v = by_name[b.name]
        if not v.accepted:
            rejected[f"gold: {v.stage}"] += 1
        why = v.summary.splitlines()[0] if v.summary else ""
        rows.append(
            {"folder": str(folder), "bundle": b.name, "result": "verified" if v.accepted else "rejected", "why": why}
        )
    summary = {
        "bundles_total": len(rows),
        "loaded": len(loaded_all),
        "verified_locally": sum(v.accepted for v in verdicts),
        "needs_docker": needs_docker,
        "rejected": dict(sorted(rejected.items())),
        "roundtrip_identical": all(identical),
    }
    return summary, rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folders", nargs="*", help="more folders of tasks (Harbor or Terminal-Bench 1)")
    ap.add_argument("--results", default="docs/results", help="where harbor.json and harbor.md go")
    ap.add_argument("--sandbox", default="auto", help="sandbox backend (Harbor's paths need bwrap or unshare)")
    args = ap.parse_args()
    folders = [SAMPLES, HERE / "bundles", *map(Path, args.folders)]
    sandbox = Sandbox(backend=args.sandbox, concurrency=2)
    t0 = time.time()
    summary, rows = asyncio.run(survey(folders, sandbox))
    root = Path(__file__).resolve().parents[2]
    shown = [str(f.resolve().relative_to(root)) if f.resolve().is_relative_to(root) else str(f) for f in folders]
    for r in rows:
        r["folder"] = shown[[str(f) for f in folders].index(r["folder"])]
        r["why"] = (r["why"] or "").replace(str(root) + "/", "")
    out = {
        **summary,
        "command": " ".join(["python examples/harbor/run.py", *sys.argv[1:]]),
        "folders": shown,
        "sandbox_backend": sandbox.backend,
        "machine": {"platform": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count()},
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "wall_s": round(time.time() - t0, 1),
        "bundles": sorted(rows, key=lambda r: (r["folder"], r["bundle"])),
    }
    res = Path(args.results)
    res.mkdir(parents=True, exist_ok=True)
    atomic_write_text(res / "harbor.json", json.dumps(out, indent=1) + "\n")
    lines = [
        "# Harbor tasks in tempering",
        "",
        f"Command: `{out['command']}` (sandbox `{out['sandbox_backend']}`; {out['machine']['platform']}, "
        f"{out['machine']['cpus']} CPUs, load {out['load_avg_1m']}; {out['wall_s']} s). Folders: "
        + ", ".join(f"`{f}`" for f in shown)
        + ".",
        "",
        "| bundles | loaded | verified locally | need Docker | rejected | round trip identical |",
        "| --- | --- | --- | --- | --- | --- |",
        f"| {out['bundles_total']} | {out['loaded']} | {out['verified_locally']} | {out['needs_docker']} | "
        + (", ".join(f"{k}: {v}" for k, v in out["rejected"].items()) or "0")
        + f" | {out['roundtrip_identical']} |",
        "",
        "| folder | bundle | result | why |",
        "| --- | --- | --- | --- |",
    ]
    lines += [
        f"| {r['folder']} | {r['bundle']} | {r['result']} | {r['why'].replace('|', '/')[:160]} |"
        for r in out["bundles"]
    ]
    atomic_write_text(res / "harbor.md", "\n".join(lines) + "\n")
    print("\n".join(lines[6:9]))


if __name__ == "__main__":
    main()
