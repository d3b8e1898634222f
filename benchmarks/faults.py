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
   `--bad-inputs-only` reruns just this part into an existing reliability.json.
5. The sandbox's adversarial suite per backend (`tempering sandbox attacks --json`); `--sandbox-only`
   reruns just this part into an existing reliability.json (after a change to the sandbox).
6. Faults across processes and weight-sync checks (`--processes-only`; `--sync-only` reruns just the
   sync checks into an existing reliability.json).
Each part records the load average and a matmul peak (`tempering.experiments.conditions`) at its start
and end, so that its timings can be read against how busy the machine was.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tempering.experiments import conditions, conditions_text, machine, write_results

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
    if (work / "pretrain" / "final" / "model.safetensors").is_file():  # kept in --work from an earlier run
        return str(work / "pretrain" / "final")
    r = cli(
        "pretrain",
        "model.name=tiny-xs",
        "task.args.min_value=0",
        "task.args.max_value=30",
        "task.train_size=800",
        "task.heldout_size=40",
        "optim.lr=3e-3",
        "rollout.prompts_per_step=32",
        "rollout.max_new_tokens=4",
        "run.steps=250",
        "run.eval_every=0",
        "run.progress=false",
        f"run.out_dir={work / 'pretrain'}",
    )
    if r.returncode:
        raise SystemExit(r.stderr)
    return str(work / "pretrain" / "final")


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


def _user_files(scratch: Path) -> None:
    """What TRL and verl users bring, damaged: data files, reward files, configs."""
    verl = ROOT / "tests" / "envs" / "data" / "verl"
    row = json.loads((verl / "gsm8k_train.jsonl").read_text().splitlines()[0])
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(
            pa.Table.from_pylist([{k: v for k, v in row.items() if k != "prompt"}]), scratch / "no_prompt.parquet"
        )
    except ImportError:  # the data extra: the case is left out
        pass
    (scratch / "latin1.jsonl").write_bytes('{"prompt": "caf\xe9", "answer": "1"}\n'.encode("latin-1"))
    (scratch / "scalars.json").write_text("[1, 2, 3]\n")
    (scratch / "no_prompt.csv").write_text("question,answer\nwhat is 1+1?,2\n")
    (scratch / "broken.jsonl").write_text('{"prompt": "1+1?", "answer": "2"}\n{"prompt": "2+2?", "answer": \n')
    (scratch / "ok.jsonl").write_text('{"prompt": "1+1?", "answer": "2"}\n' * 20)
    (scratch / "reward.py").write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 1.0\n"
    )
    (scratch / "not_yaml.yaml").write_text("algorithm: [unclosed\n")
    (scratch / "not_verl.yaml").write_text("model: {name: x}\n")
    (scratch / "no_overrides.sh").write_text("echo hello\n")
    (scratch / "trl_unknown.yaml").write_text("learning_rate: 1.0e-6\nnot_a_trl_key: 3\n")
    (scratch / "trl_script_reward.yaml").write_text("model_name_or_path: x/y\nreward_funcs: accuracy_reward\n")
    (scratch / "trl_batch.yaml").write_text("per_device_train_batch_size: 0\nnum_generations: 4\n")
    failed = scratch / "failed_start"  # a run that stopped before training, and a file of the user's beside it
    failed.mkdir()
    (failed / "config.yaml").write_text("model: {name: tiny-xs}\n")
    (failed / "notes.txt").write_text("mine\n")
    gone = scratch / "gone_data"  # a run whose dataset was moved away since
    gone.mkdir()
    cfg = {"model": {"name": "tiny-xs"}, "task": {"family": "dataset", "args": {"train": str(scratch / "gone.jsonl")}}}
    (gone / "config.yaml").write_text(json.dumps(cfg))
    (gone / "checkpoints" / "step_1").mkdir(parents=True)
    final_only = scratch / "final_only"  # a finished run that kept only its final model
    (final_only / "final").mkdir(parents=True)
    (final_only / "config.yaml").write_text(json.dumps({"model": {"name": "tiny-xs"}, "run": {"keep_checkpoints": 0}}))
    (final_only / "final" / "config.json").write_text("{}\n")
    (scratch / "one_row.jsonl").write_text('{"prompt": "1+1?", "answer": "2"}\n')


def _data_cases(scratch: Path) -> list[list[str]]:
    data = ["train", "task.family=dataset"]
    cases = [
        [*data, f"task.args.train={scratch / 'latin1.jsonl'}", f"run.out_dir={scratch / 'd1'}"],
        [*data, f"task.args.train={scratch / 'scalars.json'}", f"run.out_dir={scratch / 'd2'}"],
        [*data, f"task.args.train={scratch / 'no_prompt.csv'}", f"run.out_dir={scratch / 'd3'}"],
        [*data, f"task.args.train={scratch / 'broken.jsonl'}", f"run.out_dir={scratch / 'd4'}"],
        [*data, f"run.out_dir={scratch / 'd5'}"],
        [
            *data,
            f"task.args.train={scratch / 'ok.jsonl'}",
            f"task.args.reward={scratch / 'reward.py'}:nope",
            f"run.out_dir={scratch / 'd6'}",
        ],
        [
            *data,
            f"task.args.train={scratch / 'ok.jsonl'}",
            f"task.args.reward={scratch / 'missing.py'}",
            f"run.out_dir={scratch / 'd7'}",
        ],
        ["train", "task.family=openreward", f"run.out_dir={scratch / 'd8'}"],
        [
            "train",
            "task.family=openreward",
            "task.args.url=http://127.0.0.1:9",
            "task.args.timeout=5",
            f"run.out_dir={scratch / 'd9'}",
        ],
        ["config", "--from-verl", str(scratch / "not_yaml.yaml")],
        ["config", "--from-verl", str(scratch / "not_verl.yaml")],
        ["config", "--from-verl", str(scratch / "no_overrides.sh")],
        ["config", "--from-verl", str(scratch / "missing.yaml")],
        ["config", "--from-trl", str(scratch / "trl_unknown.yaml")],
        ["config", "--from-trl", str(scratch / "trl_script_reward.yaml")],
        ["config", "--from-trl", str(scratch / "trl_batch.yaml")],
        ["train", "model.name=someorg/not-in-the-cache", f"run.out_dir={scratch / 'd11'}"],
        ["train", "model.name=tiny-xs", f"run.out_dir={scratch / 'failed_start'}"],
        ["train", "--resume", str(scratch / "gone_data")],
        ["train", "--resume", str(scratch / "final_only"), "run.steps=600"],
        [*data, f"task.args.train={scratch / 'one_row.jsonl'}", f"run.out_dir={scratch / 'd12'}"],
        ["view", str(scratch / "final_only"), "--smooth", "1.5"],
    ]
    if (scratch / "no_prompt.parquet").exists():
        cases.append([*data, f"task.args.train={scratch / 'no_prompt.parquet'}", f"run.out_dir={scratch / 'd10'}"])
    return cases


def bad_inputs(model: str, work: Path, jobs: int = 1) -> tuple[list[dict], list[str]]:
    scratch = work / "bad"
    scratch.mkdir()
    (scratch / "bad.yaml").write_text("rollout: [unclosed\n")
    (scratch / "list.yaml").write_text("- 1\n- 2\n")
    (scratch / "a_file").write_text("x")
    _user_files(scratch)
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
        ["pretrain", "optim.lr=-1"],
        ["train", "loss.credit_args.gama=0.5"],
        ["expand-compress", "compress.task.family=strings"],
        [
            "train",
            "task.family=dataset",
            f"task.args.train={scratch / 'missing.jsonl'}",
            f"run.out_dir={scratch / 'o8'}",
        ],
        ["train", "rollout.prune=dcp"],
        *_data_cases(scratch),
    ]
    before = {p: p.stat().st_mtime_ns for p in [*scratch.rglob("*"), *run.rglob("*")]}

    def one(argv: list[str]) -> dict:
        r = cli(*argv, timeout=600)
        err = r.stderr.strip().splitlines()
        lines = [ln for ln in err if ln.strip() and not ln.startswith("warning:")]
        one_line = len(lines) == 1 and lines[0].startswith("tempering")
        return {
            "argv": " ".join(a.replace(str(work), "WORK") for a in argv),
            "exit": r.returncode,
            "error": lines[-1].replace(str(work), "WORK") if lines else "",
            "clear": r.returncode == 2 and one_line and "Traceback" not in r.stderr,
        }

    with ThreadPoolExecutor(jobs) as pool:  # each case is a process of its own, in a folder of its own
        out = list(pool.map(one, cases))
    after = {p: p.stat().st_mtime_ns for p in [*scratch.rglob("*"), *run.rglob("*")]}
    written = sorted(str(p.relative_to(work)) for p in after if p not in before or after[p] != before[p])
    for row in out:
        row["nothing_written"] = not written
    return out, written


# ---- faults across processes ---------------------------------------------------------------------
FAULT_STEPS = 4
"""Steps of a fault trial's run (a checkpoint after each; the fault strikes during step 3)."""
BASE = [
    "task.args.min_value=0",
    "task.args.max_value=30",
    "task.train_size=200",
    "task.heldout_size=4",
    "rollout.group_size=4",
    "rollout.prompts_per_step=4",
    "rollout.max_new_tokens=4",
    "optim.lr=1e-3",
    f"run.steps={FAULT_STEPS}",
    "run.eval_every=0",
    "run.eval_k=1",
    "run.checkpoint_every=1",
    "run.keep_checkpoints=5",
    "run.progress=false",
    "run.threads=1",
    "run.tensorboard=false",
]
FAULT_KEYS = ("reward", "success", "policy_loss", "entropy", "grad_norm", "response_len")
SERVERS = Path(__file__).with_name("fault_servers.py")


def descendants(root: int) -> dict[int, str]:
    """pid -> command line of every live process below `root` (zombies left out)."""
    procs: dict[int, tuple[int, str]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state, ppid = stat.read_text().rsplit(")", 1)[1].split()[:2]
            cmd = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if state not in "ZX":
            procs[int(stat.parent.name)] = (int(ppid), cmd)
    out, frontier = {}, [root]
    while frontier:
        parent = frontier.pop()
        for pid, (ppid, cmd) in procs.items():
            if ppid == parent and pid not in out:
                out[pid] = cmd
                frontier.append(pid)
    return out


def environ_has(pid: int, entry: str) -> bool:
    try:
        return entry.encode() in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False


def fault_metrics(run: Path) -> dict[int, dict]:
    if not (run / "metrics.jsonl").is_file():
        return {}
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return {r["step"]: r for r in rows if "reward" in r}


def same_fault_run(run: Path, ref: Path) -> bool:
    a, b = fault_metrics(ref), fault_metrics(run)
    if sorted(b) != list(range(1, FAULT_STEPS + 1)) or sorted(a) != sorted(b):
        return False
    ok = all(abs(a[s][k] - b[s][k]) <= 1e-6 * max(1.0, abs(a[s][k])) for s in a for k in FAULT_KEYS if k in a[s])
    return ok and weights_digest(run) == weights_digest(ref)


def newest_intact(run: Path) -> str | None:
    from tempering.train.checkpoint import damage as check

    kept = sorted((run / "checkpoints").glob("step_*"), key=lambda q: int(q.name[5:]))
    return kept[-1].name if kept and check(kept[-1]) is None else None


class Server:
    """A stand-in vLLM or teacher server (benchmarks/fault_servers.py) on a port of its own."""

    def __init__(self, model: str, port: int, log: Path):
        self.model, self.port, self.log = model, port, log
        self.url = f"http://127.0.0.1:{port}"
        self.p: subprocess.Popen | None = None

    def start(self) -> Server:
        self.log.write_text("")
        self.p = subprocess.Popen(
            [PY, str(SERVERS), self.model, str(self.port), str(self.log)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        import urllib.request

        for _ in range(600):
            try:
                urllib.request.urlopen(self.url + "/v1/models", timeout=1).read()
                return self
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"the stand-in server on port {self.port} did not start")

    def requests(self) -> int:
        return sum(1 for ln in self.log.read_text().splitlines() if ln.endswith("/v1/completions"))

    def stop(self) -> None:
        if self.p is not None and self.p.poll() is None:
            os.killpg(self.p.pid, signal.SIGKILL)
            self.p.wait()


def fault_kinds(model: str, work: Path) -> dict[str, dict]:
    """Each fault: how a run is launched and resumed, what kills what, and the line that must name it."""
    launch = [PY, "-m", "tempering.cli", "launch", "--standalone", "--nproc-per-node=2"]
    train = [PY, "-m", "tempering.cli", "train"]
    arith = [f"model.name={model}", *BASE]

    def vllm(url: str, extra=()) -> list[str]:
        return [
            *arith,
            "rollout.backend=vllm",
            "rollout.vllm.mode=server",
            f"rollout.vllm.url={url}",
            "rollout.vllm.timeout_s=5",
            *extra,
        ]

    def teacher(url: str) -> list[str]:
        return [
            *arith,
            f"teacher.server={url}",
            "teacher.served_model=teacher",
            f"teacher.tokenizer={model}",
            "teacher.top_n=4",
            "teacher.timeout_s=5",
        ]

    miniwob = [
        "model.name=tiny-xs",
        "task.family=miniwob",
        "task.args={names: [click-test, click-button], max_steps: 2}",
        "task.train_size=20",
        "task.heldout_size=2",
        "rollout.group_size=2",
        "rollout.prompts_per_step=2",
        "rollout.max_new_tokens=8",
        "rollout.max_turns=2",
        "rollout.truncate_prompts=true",
        "rollout.max_context_tokens=512",
        *[x for x in BASE if x.startswith("run.")],
    ]

    def kill_rank(p, server):
        rank1 = [
            pid
            for pid, cmd in descendants(p.pid).items()
            if "tempering.distributed" in cmd and environ_has(pid, "RANK=1")
        ]
        if not rank1:
            return None
        os.kill(rank1[0], signal.SIGKILL)
        return f"rank 1 (pid {rank1[0]})"

    # batches long enough to be caught mid-sample by a poll of /proc (a 4-token batch lasts a few ms)
    slow_batches = [a for a in arith if not a.startswith("rollout.max_new_tokens=")] + ["rollout.max_new_tokens=48"]

    def kill_ray_worker(p, server):
        deadline = time.time() + 60
        while time.time() < deadline:  # the worker's process title while it samples a batch
            busy = [pid for pid, cmd in descendants(p.pid).items() if cmd.startswith("ray::_RolloutWorker.sample")]
            if busy:
                os.kill(busy[0], signal.SIGKILL)
                return f"Ray worker pid {busy[0]} mid-batch"
            time.sleep(0.01)
        return None  # not injected: the trial is run again

    def in_request(server, how):
        seen = server.requests()
        deadline = time.time() + 60
        while server.requests() == seen and time.time() < deadline:
            time.sleep(0.01)
        os.killpg(server.p.pid, how)  # the request is in flight: the server answers after DELAY_S
        return f"server pid {server.p.pid} ({signal.Signals(how).name} mid-request)"

    def kill_server(p, server):
        return in_request(server, signal.SIGKILL)

    def hang_server(p, server):
        return in_request(server, signal.SIGSTOP)

    def kill_browser(p, server):
        drivers = [pid for pid, cmd in descendants(p.pid).items() if "chromedriver" in cmd.split(" ")[0]]
        if not drivers:
            return None
        os.kill(drivers[0], signal.SIGKILL)
        return f"chromedriver pid {drivers[0]}"

    return {
        "torchrun_rank": {
            "start": lambda out, url: [*launch, "train", *arith, f"run.out_dir={out}"],
            "resume": lambda out, url: [*launch, "train", "--resume", str(out)],
            "kill": kill_rank,
            "names": r"error: rank 1 \(pid \d+\) died \(killed by SIGKILL\)",
        },
        "ray_worker": {
            "start": lambda out, url: [
                *train,
                *slow_batches,
                "rollout.backend=ray",
                "rollout.ray.num_workers=2",
                "rollout.ray.num_cpus_per_worker=0.5",
                f"run.out_dir={out}",
            ],
            "kill": kill_ray_worker,
            "names": r"error: Ray rollout worker [12] of 2 died mid-batch",
        },
        "vllm_server_killed": {
            "server": True,
            "start": lambda out, url: [*train, *vllm(url), f"run.out_dir={out}"],
            "kill": kill_server,
            "names": r"error: cannot reach the vLLM server at http://127\.0\.0\.1:\d+",
        },
        "vllm_server_hung": {
            "server": True,
            "start": lambda out, url: [*train, *vllm(url), f"run.out_dir={out}"],
            "kill": hang_server,
            "names": r"error: the vLLM server at http://127\.0\.0\.1:\d+ did not answer /v1/completions within",
        },
        "async_producer_sampler": {
            "server": True,
            "start": lambda out, url: [
                *train,
                *vllm(url, ["rollout.async_steps=1", "loss.rollout_correction=tis"]),
                f"run.out_dir={out}",
            ],
            "kill": kill_server,
            "names": r"error: cannot reach the vLLM server at http://127\.0\.0\.1:\d+",
        },
        "teacher_server_killed": {
            "server": True,
            "start": lambda out, url: [PY, "-m", "tempering.cli", "distill", *teacher(url), f"run.out_dir={out}"],
            "resume": lambda out, url: [PY, "-m", "tempering.cli", "distill", "--resume", str(out)],
            "kill": kill_server,
            "names": r"error: could not reach the teacher server at http://127\.0\.0\.1:\d+",
        },
        "teacher_server_hung": {
            "server": True,
            "start": lambda out, url: [PY, "-m", "tempering.cli", "distill", *teacher(url), f"run.out_dir={out}"],
            "resume": lambda out, url: [PY, "-m", "tempering.cli", "distill", "--resume", str(out)],
            "kill": hang_server,
            "names": r"error: the teacher server at http://127\.0\.0\.1:\d+\S* did not answer within",
        },
        "browser_death": {
            "start": lambda out, url: [*train, *miniwob, f"run.out_dir={out}"],
            "kill": kill_browser,
            "names": r"error: .*BrowserDied: the browser serving this window died \(Chromium \(chromedriver pid \d+\): "
            r"connection (refused|reset by peer)\)",
        },
    }


def run_fault(name: str, kind: dict, model: str, work: Path, trial: int, port: int, attempts: int = 3) -> dict:
    """A trial of `kind`, run again (in a fresh folder) while its fault could not be injected, e.g. the
    run ended before a Ray worker was seen mid-batch; `attempts` says how many runs it took."""
    for attempt in range(1, attempts + 1):
        row = fault_attempt(name, kind, model, work, trial, port, attempt)
        if trial < 0 or row["injected"]:
            break
    return {**row, "attempts": attempt}


def fault_attempt(name: str, kind: dict, model: str, work: Path, trial: int, port: int, attempt: int) -> dict:
    """One run of `kind` (trial < 0: the uninterrupted reference), killed by its fault during step 3, then
    resumed; the stop must be one line naming the dead part, the newest checkpoint intact, the resumed run
    equal to the reference."""
    out = work / (f"fault_{name}_{trial}_{attempt}" if trial >= 0 else f"fault_{name}_reference")
    server = Server(model, port, work / f"server_{name}_{trial}.log") if kind.get("server") else None
    url = server.start().url if server else ""
    resume = kind.get("resume") or (lambda o, u: [*kind["start"](o, u)[:4], "--resume", str(o)])
    try:
        if trial < 0:
            if (out / "final" / "model.safetensors").is_file():  # kept in --work from an earlier run
                return {"seconds": 0}
            r = subprocess.run(kind["start"](out, url), capture_output=True, text=True, timeout=900)
            if r.returncode:
                raise RuntimeError(f"{name}: the reference run failed: {r.stderr[-3000:]}")
            return {"seconds": 0}
        p = subprocess.Popen(
            kind["start"](out, url),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        deadline = time.time() + 600
        while not (out / "checkpoints" / "step_2").is_dir() and p.poll() is None and time.time() < deadline:
            time.sleep(0.02)
        what = kind["kill"](p, server) if p.poll() is None else None
        try:
            _, err = p.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            _, err = p.communicate()
        lines = [ln for ln in err.strip().splitlines() if ln.strip() and not ln.startswith("warning:")]
        last = lines[-1] if lines else ""
        recovered = p.returncode == 0 and (out / "final" / "model.safetensors").is_file()
        clear_stop = p.returncode != 0 and bool(re.search(kind["names"], last)) and last.startswith("tempering")
        intact = newest_intact(out)
        if server is not None:  # a fresh server for the resumed run, on the same address
            server.stop()
            server.start()
        resumed = None
        ref = work / f"fault_{name}_reference"
        if clear_stop:
            r = subprocess.run(resume(out, url), capture_output=True, text=True, timeout=900)
            resumed = r.returncode == 0 and same_fault_run(out, ref)
        elif recovered:  # it went on by itself (e.g. a new browser): it must still end as the reference did
            resumed = same_fault_run(out, ref)
        return {
            "trial": trial,
            "injected": what is not None,
            "fault": what or "nothing: the run ended first",
            "exit": p.returncode,
            "last_line": last.replace(str(work), "WORK")[:400],
            "recovered": recovered,
            "clear_stop": clear_stop,
            "checkpoint_intact": intact,
            "resumed_exactly": bool(resumed) if resumed is not None else None,
        }
    finally:
        if server is not None:
            server.stop()


def faults(model: str, work: Path, trials: int, jobs: int, only: list[str] | None = None) -> dict[str, dict]:
    """Every fault's reference run, then all trials of all faults, `jobs` at a time."""
    kinds = {k: v for k, v in fault_kinds(model, work).items() if not only or k in only}
    ports = {name: 18100 + 20 * n for n, name in enumerate(fault_kinds(model, work))}
    t0 = time.time()
    for name, kind in kinds.items():
        run_fault(name, kind, model, work, -1, ports[name])
    todo = [(name, i) for i in range(trials) for name in kinds]
    with ThreadPoolExecutor(jobs) as pool:
        rows = list(pool.map(lambda t: run_fault(t[0], kinds[t[0]], model, work, t[1], ports[t[0]] + 1 + t[1]), todo))
    out: dict[str, dict] = {}
    for name in kinds:
        mine = [r for (n, _), r in zip(todo, rows) if n == name]
        out[name] = {
            "trials": len(mine),
            "injected": sum(r["injected"] for r in mine),
            "clear_stop_or_recovered": sum(r["injected"] and (r["clear_stop"] or r["recovered"]) for r in mine),
            "resumed_exactly": sum(bool(r["resumed_exactly"]) for r in mine),
            "checkpoint_intact": sum(r["checkpoint_intact"] is not None for r in mine),
            "runs": mine,
        }
        print(name, {k: v for k, v in out[name].items() if k != "runs"}, flush=True)
    print(f"faults: {time.time() - t0:.0f} s", flush=True)
    return out


def policy_versions(model: str, n: int) -> list[dict]:
    """The warm-start weights and those after each of `n` small updates (AdamW, lr 1e-3, as in the runs)."""
    import torch

    from tempering.models import load_policy

    m, tok = load_policy(model)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    batch = torch.tensor([tok.encode(f"{a}+{b}={a + b}", add_special_tokens=False)[:6] for a, b in [(13, 4), (12, 9)]])
    out = [{k: v.detach().clone() for k, v in m.state_dict().items()}]
    for _ in range(n):
        loss = m(input_ids=batch, labels=batch).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        out.append({k: v.detach().clone() for k, v in m.state_dict().items()})
    return out


def sync_checks(model: str, work: Path, trials: int) -> dict:
    """Silent sync failures injected into each kind of separate sampler: the sampler acknowledges the sync
    and keeps the weights of the version before (one update behind, the hardest case to see). Each must
    be caught, naming both versions, and every sync that did happen must pass."""
    import copy

    from tempering.models import load_policy
    from tempering.rollout.sampler import HFSampler
    from tempering.rollout.sync import SyncError
    from tempering.rollout.vllm_sampler import VLLMSampler, VLLMSection

    versions = policy_versions(model, trials)
    base, tok = load_policy(model)
    rows = []

    def trial(kind: str, sampler, sync, break_sync) -> None:
        for v in range(1, trials + 1):
            sync(sampler, v - 1)  # a sync that happens: it must pass
            undo = break_sync(sampler)
            try:
                sync(sampler, v)
                caught, message = False, ""
            except SyncError as e:
                caught, message = True, str(e)
            finally:
                undo()
            named = f"update {v - 1}" in message and f"update {v}" in message
            rows.append({"sampler": kind, "version": v, "caught": caught, "names_both": named, "error": message[:300]})

    def model_at(v: int):
        m = copy.deepcopy(base)
        m.load_state_dict(versions[v])
        return m

    def skip(obj, attr: str, fake):
        real = getattr(obj, attr)
        setattr(obj, attr, fake)
        return lambda: setattr(obj, attr, real)

    # the asynchronous producer's own copy
    trial(
        "async_producer",
        HFSampler(copy.deepcopy(base), tok),
        lambda s, v: s.load_weights(versions[v], version=v),
        lambda s: skip(s.model, "load_state_dict", lambda weights: None),
    )
    # a vLLM server (the stand-in: the engine's probe log-probs from a tiny model on the CPU)
    server = Server(model, 18090, work / "server_sync.log").start()
    try:
        options = VLLMSection(mode="server", url=server.url, sync_dir=str(work / "sync_vllm"))
        trial(
            "vllm_server",
            VLLMSampler(model, tok, options=options),
            lambda s, v: s.sync_weights(model_at(v), version=v),
            lambda s: skip(s.engine, "load", lambda weights: None),
        )
    finally:
        server.stop()
    # Ray rollout workers: the second of two misses the weights
    import ray

    from tempering.rollout.ray_workers import RaySampler

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        pool = RaySampler(copy.deepcopy(base), tok, num_workers=2, num_cpus_per_worker=0.5)

        def first_only(s):
            def push(ref):
                ray.get(s.workers[0].load_weights.remote(ref))

            return skip(s, "_push", push)

        trial("ray_workers", pool, lambda s, v: s.sync_weights(model_at(v), version=v), first_only)
        pool.shutdown()
    finally:
        ray.shutdown()
    by = {k: [r for r in rows if r["sampler"] == k] for k in ("async_producer", "vllm_server", "ray_workers")}
    from tempering.rollout.sync import SUM_RTOL, weight_sums

    sums = [weight_sums(w, "float32") for w in versions]  # the stand-in server holds float32 weights
    margins = [abs(a.sq_total - b.sq_total) / (SUM_RTOL * (a.sq_total + b.sq_total)) for a, b in zip(sums, sums[1:])]
    return {
        "injected_mismatches": len(rows),
        "caught": sum(r["caught"] for r in rows),
        "named_both_versions": sum(r["names_both"] for r in rows),
        "clean_syncs_passed": len(rows),  # each trial's first sync raised nothing, or the trial would have failed
        "per_sampler": {k: {"injected": len(v), "caught": sum(r["caught"] for r in v)} for k, v in by.items()},
        "vllm_sum_of_squares_change_over_tolerance_min": min(margins),
        "runs": rows,
    }


def kernel_worker(work: Path, trials: int) -> dict:
    """The warm kernel verification worker SIGKILLed while a candidate runs in it: the verifier must charge
    that candidate (crashed, naming the worker) and verify the next on a fresh worker (a recovery inside
    the run: no training state is lost, so there is nothing to resume)."""
    import asyncio
    from dataclasses import replace

    from tempering.envs.kernels import KernelVerifier, VerifyConfig
    from tempering.envs.kernels.hacks import RELU_PROBLEM, _sub, slow_relu
    from tempering.envs.kernels.problems import Problem
    from tempering.sandbox import Sandbox

    relu = _sub("        y = torch.empty_like(x)\n        self.lib.relu(x, y, x.numel())\n        return y")
    slow = slow_relu(4.0)  # a submission's Python cannot sleep (no time module): its kernel spins
    cfg = VerifyConfig(seeds=1, signed_trials=1, warmup=1, timed_runs=3, compile_baseline="off", memory_mb=8192)
    v = KernelVerifier(
        replace(cfg, static_checks=False, cache_dir=str(work / "kernel-cache")), sandbox=Sandbox(image="host")
    )
    problem = Problem(name="rand_relu", source=RELU_PROBLEM)
    me = os.getpid()

    def workers() -> list[int]:
        found = {pid: cmd for pid, cmd in descendants(me).items() if "worker.py" in cmd}
        parents = {pid: int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]) for pid in found}
        return [pid for pid in found if parents[pid] not in found]  # the warm worker, not its candidate

    async def killer() -> str:
        for _ in range(600):
            await asyncio.sleep(0.05)
            if workers() and any("worker.py" in c for p, c in descendants(workers()[0]).items()):
                pid = workers()[0]
                os.kill(pid, signal.SIGKILL)
                return f"warm worker pid {pid} mid-candidate"
        return "no candidate was seen running"

    rows = []
    for i in range(trials):

        async def go():
            first = await v.verify(problem, relu, mode="verify")  # a warm worker is up
            victim = asyncio.ensure_future(v.verify(problem, slow, mode="verify"))
            what = await killer()
            charged = await victim
            after = await v.verify(problem, relu, mode="verify")
            return first, what, charged, after

        first, what, charged, after = asyncio.run(go())
        named = charged.status == "crashed" and "worker died" in (charged.message or "")
        rows.append(
            {
                "trial": i,
                "fault": what,
                "last_line": f"{charged.status}: {charged.message}"[:400],
                "recovered": bool(first.correct and named and after.correct),
                "clear_stop": False,
                "checkpoint_intact": None,
                "resumed_exactly": None,
            }
        )
    return {
        "trials": len(rows),
        "clear_stop_or_recovered": sum(r["recovered"] for r in rows),
        "resumed_exactly": None,
        "checkpoint_intact": None,
        "note": "recovered inside the run (the candidate charged, the next one on a fresh worker): nothing to resume",
        "runs": rows,
    }


def reward_timeouts(work: Path, trials: int) -> dict | None:
    """A reward function that hangs, under `task.reward_timeout` (None: this version has no such key)."""
    r = cli("config", "train")
    if "task.reward_timeout" not in r.stdout:
        return None
    folder = work / "reward_timeouts"
    folder.mkdir(exist_ok=True)
    (folder / "data.jsonl").write_text(
        "".join(json.dumps({"prompt": f"{a}+{b}=", "answer": str(a + b)}) + "\n" for a in range(8) for b in range(5))
    )
    (folder / "hang.py").write_text(
        "import time\n\n\n"
        "def always(prompts, completions, **kw):\n    time.sleep(3600)\n\n\n"
        "def on_sevens(prompts, completions, **kw):\n"
        "    if any(p.startswith('7+') for p in prompts):\n        time.sleep(3600)\n"
        "    return [0.0 for _ in completions]\n"
    )
    rows = []
    for i in range(trials):  # even: every call hangs (the run stops); odd: a few hang (the run goes on)
        fn = "always" if i % 2 == 0 else "on_sevens"
        argv = [
            "train",
            "model.name=tiny-xs",
            "task.family=dataset",
            f"task.args.train={folder / 'data.jsonl'}",
            f"task.args.reward={folder / 'hang.py'}:{fn}",
            "task.reward_timeout=1",
            f"task.max_error_rate={0.02 if fn == 'always' else 1.0}",
            "task.train_size=40",
            "task.heldout_size=4",
            "rollout.group_size=2",
            "rollout.prompts_per_step=4",
            "rollout.max_new_tokens=3",
            "run.steps=3",
            "run.eval_every=0",
            "run.checkpoint_every=0",
            "run.progress=false",
            "run.tensorboard=false",
            "run.threads=1",
            f"run.out_dir={folder / f'run_{i}'}",
        ]
        t0 = time.time()
        r = cli(*argv, timeout=600)
        lines = [ln for ln in r.stderr.strip().splitlines() if ln.strip() and not ln.startswith("warning:")]
        last = lines[-1] if lines else ""
        named = fn in r.stderr and "reward_timeout" in r.stderr
        if fn == "always":
            handled = r.returncode == 2 and named and last.startswith("tempering") and "Traceback" not in r.stderr
        else:
            handled = r.returncode == 0 and named and (folder / f"run_{i}" / "final" / "model.safetensors").is_file()
        rows.append(
            {
                "trial": i,
                "reward": fn,
                "exit": r.returncode,
                "seconds": time.time() - t0,
                "handled": handled,
                "last_line": last.replace(str(work), "WORK")[:400],
            }
        )
    return {"trials": len(rows), "handled": sum(r["handled"] for r in rows), "runs": rows}


def processes(model: str, work: Path, a) -> dict:
    """The faults across processes, the weight-sync checks (and reward timeouts, where the key exists)."""
    load = [f"{x:.2f}" for x in os.getloadavg()]
    only = [x for x in a.faults.split(",") if x] or None
    out = {
        "faults_load_at_start": load,
        "faults": faults(model, work, a.fault_trials, a.jobs, only),
    }
    if not only or "kernel_worker" in only:
        t0 = time.time()
        out["faults"]["kernel_worker"] = kernel_worker(work, a.fault_trials) | {"seconds": time.time() - t0}
    out |= {
        "sync_checks": sync_checks(model, work, a.sync_trials),
    }
    timeouts = reward_timeouts(work, a.fault_trials)
    if timeouts is not None:
        out["reward_timeouts"] = timeouts
    return out


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
        f"Machine: {data['machine']}; "
        + (
            conditions_text(data["conditions_start"], data["conditions_end"])
            if "conditions_start" in data
            else f"load average at start {' '.join(data['load_at_start'])} (no matmul peak recorded: that run predates it)"
        )
        + f"; {data['seconds']:.0f} s; code at commit {data.get('commit', '?')}.",
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
    if "faults" in data:
        md += [
            "",
            "## Faults across processes",
            "",
            f"Command: `{data.get('faults_command', data['command'])}`; {data.get('faults_note', '')}",
            "",
            "Each trial kills (or freezes) one part during step 3 of a 4-step run that checkpoints every step; the"
            " run must stop with one line naming the dead part (or recover), its newest checkpoint intact, and"
            " `--resume` must then finish with the metrics and final weights of an uninterrupted run. A trial"
            " whose fault could not be injected (the run ended before its part was seen at work) is run again in"
            " a fresh folder: runs counts them all.",
            "",
            "| fault | trials | runs | clear stop or recovered | checkpoint intact | resumed exactly |"
            " the stop, as printed (first trial) |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        for name, f in data["faults"].items():
            r0 = f["runs"][0] if f.get("runs") else {}
            first = r0.get("last_line", "").replace("|", "/")
            if not first and r0.get("recovered"):
                first = "(none: it recovered and finished)"
            runs = sum(r.get("attempts", 1) for r in f.get("runs", [])) or f["trials"]
            md.append(
                f"| {name} | {f['trials']} | {runs} | {f['clear_stop_or_recovered']} |"
                f" {f.get('checkpoint_intact', '')} | {f['resumed_exactly']} | `{first}` |"
            )
    if "sync_checks" in data:
        sc = data["sync_checks"]
        md += [
            "",
            "## Weight-sync checks",
            "",
            "A sync that silently did nothing (the sampler kept the weights one update before, one AdamW step at"
            " lr 1e-3) injected into each kind of separate sampler; the check after the sync must stop the run"
            " naming both versions. The vLLM server compares the engine's weight sums with the trainer's; the"
            f" smallest change of the sum of squares between two versions was {sc.get('vllm_sum_of_squares_change_over_tolerance_min', float('nan')):.3g}"
            " times its tolerance.",
            "",
            *([f"Command: `{data['sync_command']}`; {data['sync_note']}", ""] if "sync_command" in data else []),
            "| sampler | injected mismatches | caught |",
            "| --- | --- | --- |",
        ]
        md += [f"| {k} | {v['injected']} | {v['caught']} |" for k, v in sc["per_sampler"].items()]
        md.append(
            f"| all | {sc['injected_mismatches']} | {sc['caught']} ({sc['named_both_versions']} naming both versions) |"
        )
    if "reward_timeouts" in data:
        rt = data["reward_timeouts"]
        md += [
            "",
            "## Reward functions that hang",
            "",
            "`task.reward_timeout=1`: a reward function that never returns (every call: the run must stop in one"
            " line naming it; on a few prompts, with `task.max_error_rate=1`: the run must finish, naming it).",
            "",
            f"Handled: {rt['handled']} / {rt['trials']}",
            "",
            "| reward | exit | seconds | handled | last line |",
            "| --- | --- | --- | --- | --- |",
        ]
        md += [
            f"| {r['reward']} | {r['exit']} | {r['seconds']:.0f} | {r['handled']} | `{r['last_line'].replace('|', '/')}` |"
            for r in rt["runs"]
        ]
    md += ["", "## Bad inputs", ""]
    if "bad_inputs_command" in data:
        md += [f"Command: `{data['bad_inputs_command']}`", ""]
    md += ["| command | exit | error |", "| --- | --- | --- |"]
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
    p.add_argument(
        "--processes-only",
        action="store_true",
        help="rerun only the faults across processes, the weight-sync checks and the adversarial suite into "
        "reliability.json (keeping the single-process figures)",
    )
    p.add_argument("--fault-trials", type=int, default=5, help="trials per fault across processes")
    p.add_argument("--sync-trials", type=int, default=5, help="injected sync failures per kind of sampler")
    p.add_argument("--sync-only", action="store_true", help="rerun only the weight-sync checks into reliability.json")
    p.add_argument("--faults", default="", help="comma-separated faults to run (default: all)")
    p.add_argument("--bad-inputs-only", action="store_true", help="rerun only the bad inputs into reliability.json")
    a = p.parse_args(argv)
    if a.bad_inputs_only:
        data = json.loads((Path(a.results) / "reliability.json").read_text())
        work = Path(a.work or tempfile.mkdtemp(prefix="faults_"))
        model = "tiny-xs"  # a run folder with checkpoints is all these cases need of it
        r = cli("train", *overrides(model), "run.steps=2", f"run.out_dir={work / 'reference'}")
        assert r.returncode == 0, r.stderr
        bad, written = bad_inputs(model, work, a.jobs)
        data |= {
            "bad_inputs_total": len(bad),
            "bad_inputs_clear": sum(b["clear"] and b["nothing_written"] for b in bad),
            "bad_inputs": bad,
            "written_by_bad_inputs": written,
            "bad_inputs_command": "python benchmarks/faults.py --bad-inputs-only",
        }
        write_results(a.results, "reliability", render(data), data)
        print(json.dumps({k: data[k] for k in ("bad_inputs_total", "bad_inputs_clear", "written_by_bad_inputs")}))
        return 0
    if a.sync_only:
        start, t0 = conditions(), time.time()
        data = json.loads((Path(a.results) / "reliability.json").read_text())
        work = Path(a.work or tempfile.mkdtemp(prefix="faults_"))
        data["sync_checks"] = sync_checks(warm_start(work), work, a.sync_trials)
        data["sync_command"] = " ".join(["python benchmarks/faults.py", *(sys.argv[1:] if argv is None else argv)])
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
        data["sync_conditions"] = [start, conditions()]
        data["sync_note"] = (
            f"{machine()}; {conditions_text(*data['sync_conditions'])}; {time.time() - t0:.0f} s; code at commit "
            f"{commit.stdout.strip()}"
        )
        write_results(a.results, "reliability", render(data), data)
        print(json.dumps({k: v for k, v in data["sync_checks"].items() if k != "runs"}, indent=1))
        return 0
    if a.processes_only:
        start, t0 = conditions(), time.time()
        data = json.loads((Path(a.results) / "reliability.json").read_text())
        work = Path(a.work or tempfile.mkdtemp(prefix="faults_"))
        model = warm_start(work)
        data |= processes(model, work, a)
        for k in ("sync_command", "sync_note", "sync_conditions"):  # measured again just now
            data.pop(k, None)
        data["faults_command"] = " ".join(["python benchmarks/faults.py", *(sys.argv[1:] if argv is None else argv)])
        data["faults_seconds"] = time.time() - t0
        data["faults_commit"] = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
        data["faults_conditions"] = [start, conditions()]
        data["faults_note"] = (
            f"{conditions_text(*data['faults_conditions'])}; {data['faults_seconds']:.0f} s; "
            f"code at commit {data['faults_commit']}"
        )
        if not a.no_sandbox:
            data["sandbox_attacks"] = sandbox_attacks()
            data["sandbox_command"] = data["faults_command"]
        write_results(a.results, "reliability", render(data), data)
        print(json.dumps({k: {kk: vv for kk, vv in v.items() if kk != "runs"} for k, v in data["faults"].items()}))
        return 0
    if a.sandbox_only:
        data = json.loads((Path(a.results) / "reliability.json").read_text())
        data["sandbox_attacks"] = sandbox_attacks()
        data["sandbox_command"] = "python benchmarks/faults.py --sandbox-only"
        write_results(a.results, "reliability", render(data), data)
        print(json.dumps(data["sandbox_attacks"], indent=1))
        return 0
    start, t0 = conditions(), time.time()
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
    data_processes = processes(model, work, a)
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
        "conditions_start": start,
        "conditions_end": conditions(),
        "seconds": time.time() - t0,
        "reference_run_seconds": duration,
        **data_processes,
    }
    write_results(a.results, "reliability", render(data), data)
    print(json.dumps({k: v for k, v in data.items() if not isinstance(v, (list, dict))}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
