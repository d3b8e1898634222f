"""Reliability under faults: SIGKILLs at random moments, damaged checkpoints, a full disk, bad input,
and the sandbox's adversarial suite.

    python benchmarks/faults.py                     # docs/results/reliability.{md,json}
    python benchmarks/faults.py --kills 2 --results /tmp/faults   # a short check

1. Kill trials: an RL run (tiny-xs warm start, 8 steps, a checkpoint every step) is SIGKILLed at a random
   moment, a third of the time while a checkpoint is being written, then resumed (or, killed before its
   first checkpoint, started again) until it finishes; every step's deterministic metrics and the final
   weights must equal an uninterrupted run's.
2. Corruption trials: each file kind of the newest checkpoint is truncated or has bytes flipped; the
   resume must fall back to the newest intact checkpoint, name the damage, and finish like the reference.
3. A disk that fills during a checkpoint (a small tmpfs, root only): a clear error, the previous
   checkpoint intact, and the run resumable once there is space.
4. Bad input: each a one-line error (exit 2, no traceback), nothing written.
5. The sandbox's adversarial suite per backend (`tempering sandbox attacks --json`); `--sandbox-only`
   reruns just this part into an existing reliability.json (after a change to the sandbox).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tempering.experiments import machine, write_results

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
STEPS = 8
KEYS = ("reward", "success", "policy_loss", "entropy", "grad_norm", "response_len", "approx_kl")


def cli(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "tempering.cli", *args], capture_output=True, text=True, timeout=timeout)


def overrides(model: str) -> list[str]:
    return [
        f"model.name={model}",
        "task.args.min_value=0",
        "task.args.max_value=30",
        "task.train_size=400",
        "task.heldout_size=8",
        "rollout.group_size=4",
        "rollout.prompts_per_step=8",
        "rollout.max_new_tokens=4",
        "optim.lr=1e-3",
        "loss.ppo_epochs=2",
        "loss.mini_batches=2",
        f"run.steps={STEPS}",
        "run.eval_every=0",
        "run.eval_k=2",
        "run.checkpoint_every=1",
        "run.keep_checkpoints=3",
        "run.progress=false",
        "run.threads=1",
        "run.tensorboard=false",
    ]


def warm_start(work: Path) -> str:
    r = cli(
        "pretrain",
        "model.name=tiny-xs",
        "task.args.min_value=0",
        "task.args.max_value=30",
        "task.train_size=800",
        "task.heldout_size=40",
        "train.lr=3e-3",
        "train.batch_size=32",
        "train.max_new_tokens=4",
        "run.steps=250",
        "run.eval_every=250",
        "run.eval_size=20",
        "run.progress=false",
        f"run.out_dir={work / 'pretrain'}",
    )
    if r.returncode:
        raise SystemExit(r.stderr)
    return str(work / "pretrain" / "model")


def metrics(run: Path) -> dict[int, dict]:
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return {r["step"]: r for r in rows if "reward" in r}


def weights_digest(run: Path) -> str:
    return hashlib.sha256((run / "final" / "model.safetensors").read_bytes()).hexdigest()


def same_run(run: Path, ref: Path) -> bool:
    a, b = metrics(ref), metrics(run)
    if sorted(b) != list(range(1, STEPS + 1)):
        return False
    ok = all(abs(a[s][k] - b[s][k]) <= 1e-6 * max(1.0, abs(a[s][k])) for s in a for k in KEYS if k in a[s])
    return ok and weights_digest(run) == weights_digest(ref)


def finish(run: Path, model: str) -> int:
    """Resume until the run is finished (a run killed before its first checkpoint starts over)."""
    launches = 0
    while not (run / "final" / "model.safetensors").is_file():
        launches += 1
        has = any((run / "checkpoints").glob("step_*")) if (run / "checkpoints").is_dir() else False
        args = ["--resume", str(run)] if has else [*overrides(model), f"run.out_dir={run}", "--overwrite"]
        r = cli("train", *args)
        if r.returncode:
            raise RuntimeError(f"resume failed: {r.stderr[-2000:]}")
        if launches > 3:
            raise RuntimeError("the run did not finish")
    return launches


def kill_trial(i: int, model: str, work: Path, duration: float, rng: random.Random) -> dict:
    run = work / f"kill_{i}"
    during_save = i % 3 == 0
    p = subprocess.Popen(
        [PY, "-m", "tempering.cli", "train", *overrides(model), f"run.out_dir={run}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.time() + (duration * 1.5 if during_save else rng.uniform(0.2, duration))
    moment = "random"
    while p.poll() is None and time.time() < deadline:
        if (
            during_save
            and (run / "checkpoints").is_dir()
            and any(q.name.startswith(".step_") for q in (run / "checkpoints").iterdir())
        ):
            moment = "checkpoint write"
            break
        time.sleep(0.005)
    killed = p.poll() is None
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    before = sorted(q.name for q in (run / "checkpoints").glob("step_*")) if (run / "checkpoints").is_dir() else []
    launches = finish(run, model)
    return {
        "trial": i,
        "killed": killed,
        "moment": moment,
        "checkpoints_at_kill": before,
        "launches": launches,
        "resumed_exactly": same_run(run, work / "reference"),
    }


def damage(path: Path, how: str) -> None:
    data = bytearray(path.read_bytes())
    if how == "truncate":
        path.write_bytes(bytes(data[: len(data) // 2]))
    else:
        for j in range(0, len(data), max(1, len(data) // 16)):
            data[j] ^= 0xFF
        path.write_bytes(bytes(data))


def corruption_trial(model: str, work: Path, k: int, kind: str, how: str) -> dict:
    run = work / f"corrupt_{k}_{how}"
    r = cli("train", *overrides(model), f"run.out_dir={run}", f"run.steps={STEPS // 2}")
    assert r.returncode == 0, r.stderr
    newest = sorted((run / "checkpoints").glob("step_*"), key=lambda q: int(q.name[5:]))[-1]
    damage(newest / kind, how)
    r = cli("train", "--resume", str(run), f"run.steps={STEPS}")
    named = newest.name in r.stderr and "damaged checkpoint" in r.stderr
    return {"file": kind, "damage": how, "recovered": r.returncode == 0 and named and same_run(run, work / "reference")}


def corruption_trials(model: str, work: Path, jobs: int) -> list[dict]:
    kinds = [
        "model/model.safetensors",
        "model/config.json",
        "model/tokenizer.json",
        "trainer_state.pt",
        "manifest.json",
    ]
    trials = [(k, kind, how) for k, kind in enumerate(kinds) for how in ("truncate", "flip")]
    with ThreadPoolExecutor(jobs) as pool:
        return list(pool.map(lambda t: corruption_trial(model, work, *t), trials))


def disk_full(model: str, work: Path) -> dict:
    """A tmpfs with room for the first checkpoints but not for every one."""
    mnt = work / "small_disk"
    mnt.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", str(mnt)]).returncode:
        return {"skipped": "needs root to mount a small tmpfs"}
    try:
        run = mnt / "run"
        r = cli("train", *overrides(model), f"run.out_dir={run}")
        clear = r.returncode == 2 and "Traceback" not in r.stderr and "writing checkpoint" in r.stderr
        kept = sorted((run / "checkpoints").glob("step_*"), key=lambda q: int(q.name[5:]))
        from tempering.train.checkpoint import damage as check

        intact = bool(kept) and check(kept[-1]) is None
        # with room again, the run resumes and finishes like the reference
        dest = work / "disk_full_moved"
        shutil.copytree(run, dest)
        finish(dest, model)
        return {
            "clear_error": clear,
            "previous_checkpoint_intact": intact,
            "error": r.stderr.strip().splitlines()[-1:],
            "resumed_exactly": same_run(dest, work / "reference"),
            "recovered": clear and intact,
        }
    finally:
        subprocess.run(["umount", str(mnt)])


def bad_inputs(model: str, work: Path) -> list[dict]:
    scratch = work / "bad"
    scratch.mkdir()
    (scratch / "bad.yaml").write_text("rollout: [unclosed\n")
    (scratch / "list.yaml").write_text("- 1\n- 2\n")
    (scratch / "a_file").write_text("x")
    run = work / "reference"
    cases = [
        ["train", "rollout.group_sise=3"],
        ["train", "rollout.group_size=0"],
        ["train", "--resume", str(scratch / "nowhere")],
        ["train", f"model.name={scratch / 'missing'}", f"run.out_dir={scratch / 'o1'}"],
        ["nonsense"],
        ["train", str(scratch / "missing.yaml")],
        ["train", str(scratch / "bad.yaml")],
        ["train", str(scratch / "list.yaml")],
        ["train", "loss.kl_in_reward=true"],
        ["train", "loss.advantage=ppo2"],
        ["train", "rollout.counterfactual_turns=4"],
        ["train", f"run.out_dir={scratch / 'a_file'}"],
        ["train", f"run.out_dir={run}", f"model.name={model}"],
        ["distill", f"run.out_dir={scratch / 'o2'}"],
        ["distill", f"teacher.path={scratch / 'missing'}", f"run.out_dir={scratch / 'o3'}"],
        ["direct-opd", f"run.out_dir={scratch / 'o4'}"],
        ["tu-opd", f"run.out_dir={scratch / 'o5'}", "task.train_size=20", "task.heldout_size=4"],
        ["train", "task.family=nope", f"run.out_dir={scratch / 'o6'}"],
        ["train", "rollout.max_context_tokens=4096", f"run.out_dir={scratch / 'o7'}"],
        ["train", "--resume", str(run), "--overwrite"],
        ["eval", str(scratch / "missing")],
        ["pretrain", "train.lr=-1"],
        ["train", "loss.credit_args.gama=0.5"],
        ["expand-compress", "compress.task.family=strings"],
        [
            "train",
            "task.family=dataset",
            f"task.args.train={scratch / 'missing.jsonl'}",
            f"run.out_dir={scratch / 'o8'}",
        ],
        ["train", "rollout.prune=dcp"],
    ]
    before = {p: p.stat().st_mtime_ns for p in [*scratch.rglob("*"), *run.rglob("*")]}
    out = []
    for argv in cases:
        r = cli(*argv, timeout=300)
        err = r.stderr.strip().splitlines()
        lines = [ln for ln in err if ln.strip() and not ln.startswith("warning:")]
        one_line = len(lines) == 1 and lines[0].startswith("tempering")
        out.append(
            {
                "argv": " ".join(a.replace(str(work), "WORK") for a in argv),
                "exit": r.returncode,
                "error": lines[-1].replace(str(work), "WORK") if lines else "",
                "clear": r.returncode == 2 and one_line and "Traceback" not in r.stderr,
            }
        )
    after = {p: p.stat().st_mtime_ns for p in [*scratch.rglob("*"), *run.rglob("*")]}
    written = sorted(str(p.relative_to(work)) for p in after if p not in before or after[p] != before[p])
    for row in out:
        row["nothing_written"] = not written
    return out, written


def sandbox_attacks() -> dict:
    r = cli("sandbox", "attacks", "--json", timeout=3600)
    if r.returncode not in (0, 1):
        return {"error": r.stderr.strip().splitlines()[-1:] or ["no output"]}
    return json.loads(r.stdout)


def render(data: dict) -> str:
    md = [
        "# Reliability under faults",
        "",
        f"Command: `{data['command']}`\\",
        f"Machine: {data['machine']}; load average at start {' '.join(data['load_at_start'])}; {data['seconds']:.0f} s;"
        f" code at commit {data.get('commit', '?')}.",
        "",
        "| check | result |",
        "| --- | --- |",
        f"| SIGKILL at a random moment, then resume: same metrics and weights as an uninterrupted run | {data['kill_resumed_exactly']} / {data['kill_trials']} ({data['kills_during_checkpoint_write']} during a checkpoint write) |",
        f"| a checkpoint file truncated or corrupted: fall back to the newest intact one, finish exactly | {data['corruption_recovered']} / {data['corruption_trials']} |",
        f"| the disk fills during a checkpoint: clear error, previous checkpoint intact, resumable | {data['disk_full_recovered']} |",
        f"| bad input: one-line error, exit 2, no traceback, nothing written | {data['bad_inputs_clear']} / {data['bad_inputs_total']} |",
        f"| data lost | {data['data_lost']} |",
        "",
        "## Sandbox adversarial suite",
        "",
        "| backend | attacks | contained |",
        "| --- | --- | --- |",
    ]
    md += [
        f"| {b} | {v.get('total')} | {v.get('contained')} |"
        for b, v in data["sandbox_attacks"].items()
        if isinstance(v, dict)
    ]
    md += ["", "## Bad inputs", "", "| command | exit | error |", "| --- | --- | --- |"]
    md += [f"| `tempering {b['argv']}` | {b['exit']} | {b['error'].replace('|', '/')} |" for b in data["bad_inputs"]]
    md += ["", "## Corruption", "", "| file | damage | recovered |", "| --- | --- | --- |"]
    md += [f"| {c['file']} | {c['damage']} | {c['recovered']} |" for c in data["corruption"]]
    if "sandbox_command" in data:
        md.insert(md.index("## Sandbox adversarial suite") + 2, f"Command: `{data['sandbox_command']}`\n")
    return "\n".join(md) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Reliability under faults.")
    p.add_argument("--kills", type=int, default=50)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--jobs", type=int, default=2, help="trials run at once")
    p.add_argument("--results", default=str(ROOT / "docs" / "results"))
    p.add_argument("--work", default=None, help="working folder (default: a temporary one)")
    p.add_argument("--no-sandbox", action="store_true", help="skip the adversarial suite")
    p.add_argument("--sandbox-only", action="store_true", help="rerun only the adversarial suite into reliability.json")
    a = p.parse_args(argv)
    if a.sandbox_only:
        data = json.loads((Path(a.results) / "reliability.json").read_text())
        data["sandbox_attacks"] = sandbox_attacks()
        data["sandbox_command"] = "python benchmarks/faults.py --sandbox-only"
        write_results(a.results, "reliability", render(data), data)
        print(json.dumps(data["sandbox_attacks"], indent=1))
        return 0
    t0 = time.time()
    load = Path("/proc/loadavg").read_text().split()[:3]
    work = Path(a.work or tempfile.mkdtemp(prefix="faults_"))
    model = warm_start(work)
    start = time.time()
    r = cli("train", *overrides(model), f"run.out_dir={work / 'reference'}")
    assert r.returncode == 0, r.stderr
    duration = time.time() - start
    with ThreadPoolExecutor(a.jobs) as pool:  # trials are independent runs in their own folders
        kills = list(
            pool.map(
                lambda i: kill_trial(i, model, work, duration, random.Random(a.seed * 100_003 + i)), range(a.kills)
            )
        )
    for k in kills:
        print("kill", k["trial"], k["moment"], k["checkpoints_at_kill"][-1:], k["resumed_exactly"], flush=True)
    corrupt = corruption_trials(model, work, a.jobs)
    full = disk_full(model, work)
    bad, written = bad_inputs(model, work)
    attacks = {} if a.no_sandbox else sandbox_attacks()
    lost = sum(not k["resumed_exactly"] for k in kills) + sum(not c["recovered"] for c in corrupt)
    data = {
        "kill_trials": len(kills),
        "kill_resumed_exactly": sum(k["resumed_exactly"] for k in kills),
        "kills_during_checkpoint_write": sum(k["moment"] == "checkpoint write" for k in kills),
        "corruption_trials": len(corrupt),
        "corruption_recovered": sum(c["recovered"] for c in corrupt),
        "disk_full_recovered": bool(full.get("recovered")),
        "bad_inputs_total": len(bad),
        "bad_inputs_clear": sum(b["clear"] and b["nothing_written"] for b in bad),
        "data_lost": lost,
        "sandbox_attacks": attacks,
        "kills": kills,
        "corruption": corrupt,
        "disk_full": full,
        "bad_inputs": bad,
        "written_by_bad_inputs": written,
        "command": " ".join(["python benchmarks/faults.py", *(sys.argv[1:] if argv is None else argv)]),
        "machine": machine(),
        "commit": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip(),
        "load_at_start": load,
        "seconds": time.time() - t0,
        "reference_run_seconds": duration,
    }
    write_results(a.results, "reliability", render(data), data)
    print(json.dumps({k: v for k, v in data.items() if not isinstance(v, (list, dict))}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
