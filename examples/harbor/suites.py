"""The public suites of Harbor / Terminal-Bench tasks, as tempering runs them: which load, which verify as
shipped (the reference solution passes and the tests fail on the untouched state, which is what `true` as
the solution leaves), why the others do not, and which tests the solution could tamper with.

The suites are public repositories (`public_suites.json`: repository, commit, folders), brought onto the
machine beforehand and extracted here from their git folders (`extract`); nothing is fetched at run time.
A file the stored snapshot lacks (too large to store) is listed, and the tasks it belongs to are counted
under `files missing from the snapshot` instead of being verified.

Used by run.py (`--suites`); run with `--suites-pass OUT` it writes only the rows of one pass, which is how
run.py measures a baseline commit of tempering in a subprocess (`--baseline`): that pass uses only what
older versions also have (load_bundles, check_one, SandboxVerifier).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import tempering
from tempering.envs.terminal import NeedsDocker, load_bundles, local_image
from tempering.runlog import atomic_write_text
from tempering.synth.verify import SandboxVerifier, check_one, short_reason

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "public_suites.json"


def manifest() -> dict:
    return json.loads(MANIFEST.read_text())


def extract(mirrors: Path, root: Path) -> None:
    """Write each suite's folders from its git folder (`mirrors/<owner>+<name>/repo`, as the fetch tool
    lays them out) at the manifest's commit into root/<suite>/, and the files the snapshot lacks into
    root/<suite>/MISSING. Suites already extracted are kept."""
    for suite, spec in manifest().items():
        out = root / suite
        if out.exists():
            continue
        git = mirrors / spec["repo"].replace("/", "+") / "repo"
        if not git.is_dir():
            raise SystemExit(f"{git} is missing: bring {spec['repo']} onto this machine first")
        tmp = root / f".{suite}.tmp"
        missing = []
        top = os.path.commonpath(spec["folders"]) if len(spec["folders"]) > 1 else spec["folders"][0]
        for folder in spec["folders"]:
            listing = subprocess.run(
                ["git", "-C", str(git), "ls-tree", "-r", "-z", spec["commit"], "--", folder],
                capture_output=True,
                check=True,
            ).stdout
            cat = subprocess.Popen(
                ["git", "-C", str(git), "cat-file", "--batch"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
            )
            assert cat.stdin is not None and cat.stdout is not None
            for entry in filter(None, listing.split(b"\0")):
                meta, path = entry.split(b"\t", 1)
                mode, kind, sha = meta.split()
                if kind != b"blob":
                    continue
                cat.stdin.write(sha + b"\n")
                cat.stdin.flush()
                head = cat.stdout.readline().split()
                rel = os.path.relpath(path.decode(), top)
                if head[1] == b"missing":
                    missing.append(rel)
                    continue
                data = cat.stdout.read(int(head[2]))
                cat.stdout.read(1)
                dest = tmp / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                if mode == b"120000":
                    dest.symlink_to(data.decode())
                else:
                    dest.write_bytes(data)
                    dest.chmod(0o755 if mode == b"100755" else 0o644)
            cat.stdin.close()
            cat.wait()
        (tmp / "MISSING").write_text("".join(f"{m}\n" for m in sorted(missing)))
        tmp.rename(out)


def folders(root: Path, suite: str) -> list[Path]:
    """The task folders' parents of one extracted suite (a folder of folders of tasks, or one of tasks)."""
    base = root / suite
    subs = sorted(d for d in base.iterdir() if d.is_dir() and not d.name.startswith("."))
    holds_tasks = any((d / "task.toml").is_file() or (d / "task.yaml").is_file() for d in subs)
    return [base] if holds_tasks else [d for d in subs if any(d.iterdir())]


def _code_key() -> str:
    """The tempering code a verification depends on (the cache of verdicts is keyed by it)."""
    pkg = Path(tempering.__file__).parent
    h = hashlib.sha256()
    for f in sorted([*(pkg / "envs/terminal").glob("*.py"), pkg / "synth/verify.py", *(pkg / "sandbox").glob("*.py")]):
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


class CachedVerifier:
    """A verifier whose verdicts are kept in a file, by the task's content and tempering's code: a pass
    that stops resumes where it was."""

    def __init__(self, verifier, path: Path):
        self.verifier, self.path, self.backend = verifier, path, verifier.backend
        key = _code_key()
        cache = json.loads(path.read_text()) if path.exists() else {}
        self.cache = cache if cache.get("code") == key else {"code": key, "verdicts": {}}
        self.new = 0

    async def verify(self, bundle):
        from tempering.synth.verify import Verdict

        key = bundle.digest()
        if key not in self.cache["verdicts"]:
            v = await self.verifier.verify(bundle)
            self.cache["verdicts"][key] = [v.accepted, v.stage, v.summary]
            self.new += 1
            if self.new % 10 == 0:
                self.save()
        accepted, stage, summary = self.cache["verdicts"][key]
        return Verdict(accepted, stage, summary)

    def save(self) -> None:
        atomic_write_text(self.path, json.dumps(self.cache))


def reason_of(verdict: str, stage: str, why: str, exc: NeedsDocker | None) -> str | None:
    """A refusal's label for the tables (None: verified)."""
    if verdict == "accepted":
        return None
    if verdict == "not loaded":
        return f"not loaded: {stage}"
    if stage == "static":
        return "static: " + (why[1 : why.index("]")] if why.startswith("[") else "checks")
    if verdict == "needs docker":
        label = getattr(exc, "reason", None)  # older versions have no labels: the verdict alone
        return f"{verdict}: {label}" if label else verdict
    if verdict == "needs network":
        return verdict
    return f"verification: {stage}"


async def suite_pass(root: Path, cache_file: Path, workers: int = 1) -> list[dict]:
    """One row per task of every suite: suite, folder, task, result, reason, why (`check_one`, the steps
    of `tempering synth check`, with the verdicts of gold verification cached in `cache_file`)."""
    from tempering.sandbox import Sandbox

    verifier = CachedVerifier(SandboxVerifier(Sandbox(backend="auto", concurrency=workers)), cache_file)
    rows: list[dict] = []

    async def one(suite: str, folder: Path, b, missing: set[str]) -> dict:
        row = {"suite": suite, "folder": folder.name, "task": b.name}
        prefix = "" if folder == root / suite else f"{folder.name}/"
        lacks = sorted(m for m in missing if m.startswith(f"{prefix}{b.name}/"))
        if lacks:
            return {**row, "result": "incomplete", "reason": "files missing from the snapshot", "why": ", ".join(lacks)}
        exc = None
        try:
            local_image(b)
        except NeedsDocker as e:
            exc = e
        verdict, stage, why = await check_one(b, verifier)
        result = {"accepted": "verified"}.get(verdict, verdict)
        return {**row, "result": result, "reason": reason_of(verdict, stage, why, exc), "why": short_reason(why)}

    try:
        for suite in manifest():
            missing_file = root / suite / "MISSING"
            missing = set(missing_file.read_text().split()) if missing_file.exists() else set()
            for folder in folders(root, suite):
                loaded, refused = load_bundles(folder)
                for name, why in sorted(refused.items()):
                    reason = reason_of("not loaded", why.split(":", 1)[0], why, None)
                    rows.append(
                        {"suite": suite, "folder": folder.name, "task": name, "result": "not loaded", "reason": reason}
                        | {"why": why}
                    )
                rows += await asyncio.gather(*(one(suite, folder, b, missing) for b in loaded))
    finally:
        verifier.save()
    return rows


def tamper_rows(root: Path) -> dict[str, list[str]]:
    """Per suite, the tasks whose tests run or import what the solution can change, with the first warning."""
    from tempering.synth.checks import tamper_warnings

    out: dict[str, list[str]] = {}
    for suite in manifest():
        for folder in folders(root, suite):
            for b in load_bundles(folder)[0]:
                if warnings := tamper_warnings(b):
                    out.setdefault(suite, []).append(f"{folder.name}/{b.name}: {warnings[0].message}")
    return out


def summarize(rows: list[dict]) -> dict:
    """suite -> {tasks, loaded, verified_as_shipped, refusals {reason: count}}."""
    out = {}
    for suite in manifest():
        mine = [r for r in rows if r["suite"] == suite]
        out[suite] = {
            "tasks": len(mine),
            "loaded": sum(r["result"] != "not loaded" for r in mine),
            "verified_as_shipped": sum(r["result"] == "verified" for r in mine),
            "refusals": dict(Counter(r["reason"] for r in mine if r["reason"]).most_common()),
            "verified": sorted(f"{r['folder']}/{r['task']}" for r in mine if r["result"] == "verified"),
        }
    return out


def baseline(ref: str, root: Path, workers: int) -> list[dict]:
    """The suite pass of tempering at git commit `ref` (its src/ from this repository), in a subprocess."""
    import io
    import tarfile
    import tempfile

    repo = HERE.parents[1]
    with tempfile.TemporaryDirectory(prefix="tempering-baseline-") as tmp:
        archive = subprocess.run(["git", "-C", str(repo), "archive", ref, "src"], capture_output=True, check=True)
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as t:
            t.extractall(tmp, filter="data")
        out = Path(tmp) / "rows.json"
        env = {**os.environ, "PYTHONPATH": str(Path(tmp) / "src")}
        cmd = [sys.executable, __file__, str(root), "--rows", str(out), "--cache", str(root / f".verdicts-{ref}.json")]
        subprocess.run([*cmd, "--workers", str(workers)], env=env, check=True)
        return json.loads(out.read_text())


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser(description="one pass over the extracted public suites (see run.py --suites)")
    ap.add_argument("root")
    ap.add_argument("--rows", required=True, help="where the rows go (JSON)")
    ap.add_argument("--cache", required=True, help="the verdict cache (resumes a pass that stopped)")
    ap.add_argument("--workers", type=int, default=1)
    args = ap.parse_args()
    print(f"tempering from {Path(tempering.__file__).parent}", file=sys.stderr)
    rows = asyncio.run(suite_pass(Path(args.root), Path(args.cache), args.workers))
    Path(args.rows).write_text(json.dumps(rows))


if __name__ == "__main__":
    main()
