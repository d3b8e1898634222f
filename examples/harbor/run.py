"""Which Harbor tasks tempering loads, verifies in the local sandbox, or leaves to Docker.

    nice .venv/bin/python examples/harbor/run.py [FOLDER ...] --results docs/results \
        [--suites DIR --mirrors /work/.mirror --baseline COMMIT]

Over the built-in samples (src/tempering/envs/terminal/samples), examples/harbor/bundles (tasks
written for Docker: an ubuntu image with a package install, a prebuilt image; and three that are wrong
on purpose) and any folder of tasks given: each task is loaded
(Harbor's rules; Terminal-Bench 1 folders converted), written and read again (the round trip must give
the same task), and checked as `tempering synth check` checks it: static checks, then whether the sandbox
can emulate its environment (else the Dockerfile line that forces Docker, or what its scripts download
when they run), then gold verification (tests before the oracle must fail, the oracle runs, tests after
it must pass). The `public_tasks` section does the same over tests/envs/data/harbor_public, tasks in
the shapes of public Terminal-Bench tasks. With `--suites DIR` the `public_suites` section does it over the
public suites of `public_suites.json` (extracted into DIR from their git folders under `--mirrors`; see
suites.py), verifying every task that passes the static checks and runs here, and counts their
`tamper_warnings`; `--baseline COMMIT` adds the same pass by tempering at that commit. Writes
docs/results/harbor.json and harbor.md with the same numbers.
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

from tempering.envs.terminal import (
    SAMPLES,
    Bundle,
    NeedsDocker,
    NeedsNetwork,
    load_bundles,
    local_image,
    read_bundle,
    write_bundle,
)
from tempering.experiments import conditions, conditions_text
from tempering.runlog import atomic_write_text
from tempering.sandbox import Sandbox
from tempering.synth.verify import SandboxVerifier, check_one, short_reason

sys.path.insert(0, str(Path(__file__).resolve().parent))
import suites  # beside this script

HERE = Path(__file__).resolve().parent
PUBLIC = HERE.parents[1] / "tests" / "envs" / "data" / "harbor_public"
"""Tasks written in the shapes of public Terminal-Bench tasks (the `public_tasks` section)."""


def round_trip_identical(bundle, tmp: Path) -> bool:
    again = read_bundle(write_bundle(bundle, tmp / bundle.name))
    return (again.instruction, again.files, again.config.to_toml()) == (
        bundle.instruction,
        bundle.files,
        bundle.config.to_toml(),
    )


async def assess(folder: Path, verifier) -> tuple[list[dict], list[Bundle]]:
    """One row per task folder, with the steps and words of `tempering synth check` (`check_one`)."""
    rows = []
    loaded, refused = load_bundles(folder)
    for name, why in sorted(refused.items()):
        rows.append(
            {"folder": str(folder), "bundle": name, "result": "not loaded", "stage": why.split(":", 1)[0], "why": why}
        )
    checked = await asyncio.gather(*(check_one(b, verifier) for b in loaded))
    for b, (verdict, stage, why) in zip(loaded, checked):
        result = {"accepted": "verified"}.get(verdict, verdict)
        if stage == "static":  # the first failed check's code: `[reward] tests/test.sh never writes 0 ...`
            stage = "static: " + why[1 : why.index("]")] if why.startswith("[") else "static"
        row = {"folder": str(folder), "bundle": b.name, "result": result, "stage": stage, "why": short_reason(why)}
        try:
            local_image(b)
        except NeedsNetwork as e:
            row["downloads"] = e.names
        except NeedsDocker as e:
            row["forcing_line"] = e.line or str(e)
        rows.append(row)
    return rows, loaded


async def survey(folders: list[Path], sandbox: Sandbox) -> tuple[dict, list[dict]]:
    verifier = SandboxVerifier(sandbox)
    rows, loaded_all = [], []
    for folder in folders:
        got, loaded = await assess(folder, verifier)
        rows += got
        loaded_all += loaded
    with tempfile.TemporaryDirectory() as tmp:
        identical = [round_trip_identical(b, Path(tmp) / str(i)) for i, b in enumerate(loaded_all)]
    rejected = Counter(
        r["stage"] if r["result"] in ("not loaded",) or r["stage"].startswith("static") else f"gold: {r['stage']}"
        for r in rows
        if r["result"] in ("not loaded", "rejected")
    )
    count = lambda result: sum(r["result"] == result for r in rows)
    summary = {
        "bundles_total": len(rows),
        "loaded": len(loaded_all),
        "verified_locally": count("verified"),
        "needs_docker": count("needs docker"),
        "needs_network": count("needs network"),
        "rejected": dict(sorted(rejected.items())),
        "roundtrip_identical": all(identical),
    }
    return summary, rows


async def public_tasks(folder: Path, sandbox: Sandbox) -> dict:
    """Tasks in the shapes of public Terminal-Bench tasks (the project's test data): which load, which
    verify in the sandbox, which need Docker (the Dockerfile line that forces it) or the network (what
    their scripts download), and whether the task whose solution leaves a web server running verified."""
    rows, loaded = await assess(folder, SandboxVerifier(sandbox))
    service = [b.name for b in loaded if "background-service" in b.metadata.get("tags", [])]
    verified = sorted(r["bundle"] for r in rows if r["result"] == "verified")
    return {
        "loaded": sorted(b.name for b in loaded),
        "verified_locally": verified,
        "needs_docker": {r["bundle"]: r["forcing_line"] for r in rows if r["result"] == "needs docker"},
        "needs_network": {r["bundle"]: r["downloads"] for r in rows if r["result"] == "needs network"},
        "rejected": {
            r["bundle"]: f"{r['stage']}: {r['why']}" for r in rows if r["result"] in ("rejected", "not loaded")
        },
        "background_service_tasks": service,
        "background_service_verified": bool(service) and all(n in verified for n in service),
        "tasks": [{k: v for k, v in r.items() if k != "folder"} for r in sorted(rows, key=lambda r: r["bundle"])],
    }


def public_suites(root: Path, args) -> dict:
    """`public_suites` (suite -> tasks, loaded, verified_as_shipped, refusals, and the baseline's) and
    `tamper_warnings` (tasks whose tests run what the solution can change, per suite)."""
    root.mkdir(parents=True, exist_ok=True)
    if args.mirrors:
        suites.extract(Path(args.mirrors), root)
    rows = asyncio.run(suites.suite_pass(root, root / ".verdicts-current.json", args.workers))
    summary = suites.summarize(rows)
    if args.baseline:
        before = suites.summarize(suites.baseline(args.baseline, root, args.workers))
        for suite, s in summary.items():
            s["before"] = {k: before[suite][k] for k in ("loaded", "verified_as_shipped", "refusals")}
            s["before"]["commit"] = args.baseline
    tamper = suites.tamper_rows(root)
    return {
        "public_suites": {
            suite: {**s, "source": spec} for (suite, s), spec in zip(summary.items(), suites.manifest().values())
        },
        "tamper_warnings": {
            "total": sum(map(len, tamper.values())),
            "by_suite": {suite: len(tamper.get(suite, [])) for suite in summary},
            "examples": {suite: found[:3] for suite, found in tamper.items()},
        },
    }


def suites_markdown(out: dict) -> list[str]:
    pub, tamper = out["public_suites"], out["tamper_warnings"]
    commit = next(iter(pub.values())).get("before", {}).get("commit", "none")
    lines = [
        "",
        "## Public suites",
        "",
        "Each task as shipped: loaded (Harbor's rules; Terminal-Bench 1 converted as Harbor's mapper converts "
        "it), the static checks, whether the sandbox emulates its environment, then gold verification (the tests "
        "fail on the untouched state, which is what `true` as the solution leaves, and pass after the reference "
        "solution). Verified as shipped: the last step passed. Sources: `examples/harbor/public_suites.json`. "
        "Verdicts of gold verification are cached in the suites' folder by task content and code, so a rerun reads "
        "them (the wall time above is then this run's, not the verifications').",
        "",
        f"| suite | tasks | loaded | verified as shipped | before ({commit}) | tasks with tamper warnings |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for suite, s in pub.items():
        before = s.get("before", {}).get("verified_as_shipped", "")
        lines.append(
            f"| {suite} | {s['tasks']} | {s['loaded']} | {s['verified_as_shipped']} | {before} | "
            f"{tamper['by_suite'][suite]} |"
        )
    total = lambda key, part=None: sum((s.get(part, {}) if part else s).get(key, 0) for s in pub.values())
    lines.append(
        f"| all | {total('tasks')} | {total('loaded')} | {total('verified_as_shipped')} | "
        f"{total('verified_as_shipped', 'before') if commit != 'none' else ''} | {tamper['total']} |"
    )
    lines += [
        "",
        f"Refusals by reason, with the baseline's beside them (tempering at {commit} labels only `needs docker` and "
        "`needs network`, without the reason).",
        "",
        "| suite | refusal | tasks | before |",
        "| --- | --- | --- | --- |",
    ]
    for suite, s in pub.items():
        prev = s.get("before", {}).get("refusals", {})
        for reason in list(s["refusals"]) + [r for r in prev if r not in s["refusals"]]:
            lines.append(f"| {suite} | {reason} | {s['refusals'].get(reason, 0)} | {prev.get(reason, 0)} |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folders", nargs="*", help="more folders of tasks (Harbor or Terminal-Bench 1)")
    ap.add_argument("--results", default="docs/results", help="where harbor.json and harbor.md go")
    ap.add_argument("--sandbox", default="auto", help="sandbox backend (Harbor's paths need bwrap or unshare)")
    ap.add_argument("--suites", help="folder of the extracted public suites (public_suites.json)")
    ap.add_argument("--mirrors", help="folder of the suites' git folders, to extract the suites missing from --suites")
    ap.add_argument("--baseline", help="a commit of tempering whose pass over the suites is shown beside this one")
    ap.add_argument("--workers", type=int, default=1, help="sandbox jobs at once in the suites' pass")
    args = ap.parse_args()
    folders = [SAMPLES, HERE / "bundles", *map(Path, args.folders)]
    sandbox = Sandbox(backend=args.sandbox, concurrency=2)
    start, t0 = conditions(), time.time()
    summary, rows = asyncio.run(survey(folders, sandbox))
    public = asyncio.run(public_tasks(PUBLIC, sandbox))
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
        "conditions": [start, conditions()],
        "bundles": sorted(rows, key=lambda r: (r["folder"], r["bundle"])),
        "public_tasks": {"folder": str(PUBLIC.relative_to(root)), **public},
    }
    if args.suites:
        out |= public_suites(Path(args.suites), args)
    public_rows = out["public_tasks"]["tasks"]
    for r in public_rows:
        r["why"] = r["why"].replace(str(root) + "/", "")
    res = Path(args.results)
    res.mkdir(parents=True, exist_ok=True)
    atomic_write_text(res / "harbor.json", json.dumps(out, indent=1) + "\n")
    lines = [
        "# Harbor tasks in tempering",
        "",
        f"Command: `{out['command']}` (sandbox `{out['sandbox_backend']}`; {out['machine']['platform']}, "
        f"{out['machine']['cpus']} CPUs, {conditions_text(*out['conditions'])}; {out['wall_s']} s). Folders: "
        + ", ".join(f"`{f}`" for f in shown)
        + ".",
        "",
        "| bundles | loaded | verified locally | need Docker | need network | rejected | round trip identical |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        f"| {out['bundles_total']} | {out['loaded']} | {out['verified_locally']} | {out['needs_docker']} | "
        f"{out['needs_network']} | "
        + (", ".join(f"{k}: {v}" for k, v in out["rejected"].items()) or "0")
        + f" | {out['roundtrip_identical']} |",
        "",
        "| folder | bundle | result | stage | why |",
        "| --- | --- | --- | --- | --- |",
    ]
    cell = lambda text: text.replace("|", "\\|").replace("\n", " ")
    lines += [
        f"| {r['folder']} | {r['bundle']} | {r['result']} | {r['stage']} | {cell(r['why'])} |" for r in out["bundles"]
    ]
    pub = out["public_tasks"]
    lines += [
        "",
        "## Tasks in the shapes of public Terminal-Bench tasks",
        "",
        f"Written into the project's test data (`{pub['folder']}`; nothing is fetched): a solution that leaves a "
        "web server running for the tests, an `ubuntu:24.04` task, a t-bench `python-3-13` task, a "
        "t-bench `ubuntu-24-04` task that installs packages, a test.sh that installs uv from the network.",
        "",
        "| loaded | verified locally | need Docker | need network | background service verified |",
        "| --- | --- | --- | --- | --- |",
        f"| {len(pub['loaded'])} | {len(pub['verified_locally'])} | {len(pub['needs_docker'])} | "
        f"{len(pub['needs_network'])} | {pub['background_service_verified']} |",
        "",
        "| task | result | the line that forces Docker, or what the scripts download |",
        "| --- | --- | --- |",
    ]
    for name in pub["loaded"]:
        row = next(r for r in public_rows if r["bundle"] == name)
        what = f"`{pub['needs_docker'][name]}`" if name in pub["needs_docker"] else row["why"]
        lines.append(f"| {name} | {row['result']} | {cell(what)} |")
    if args.suites:
        lines += suites_markdown(out)
    atomic_write_text(res / "harbor.md", "\n".join(lines) + "\n")
    print("\n".join(lines[4:7]))
    print(
        f"public task shapes: {len(pub['loaded'])} loaded, {len(pub['verified_locally'])} verified locally, "
        f"{len(pub['needs_docker'])} need Docker, {len(pub['needs_network'])} need network, "
        f"background service verified: {pub['background_service_verified']}"
    )


if __name__ == "__main__":
    main()
