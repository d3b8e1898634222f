"""The README's commands, run as written, in order, from a fresh folder; and how fast `tempering config` answers.

    python benchmarks/ux.py [--out docs/results/ux] [--bad-inputs-only | --findings-only | --memory-only]

Each line of the README's command-line block runs in a scratch folder holding a copy of `examples/`,
so one command's output (runs/pt, runs/train, ...) feeds the next as it would for a user. To keep the
run short, arguments that shrink the work are appended (later overrides win): a few steps, small
held-out sets, small evaluations. A command counts as ran when it exits 0. Bad-input figures are the
ones benchmarks/faults.py measured (docs/results/reliability.json). Also: Ctrl-C in the middle of a run,
then `--resume`; and the new-user trial's findings, each checked as the user met it (`findings`).
Writes ux.md and ux.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
TRAIN_SHRINK = [
    "run.steps=2",
    "run.eval_every=0",
    "run.progress=false",
    "run.tensorboard=false",
    "task.heldout_size=8",
    "task.train_size=64",
    "rollout.prompts_per_step=2",
    "rollout.group_size=2",
]
SHRINK = {
    "pretrain": ["run.steps=20", "run.eval_every=20", "run.eval_size=8", "task.heldout_size=8", "run.progress=false"],
    "train": TRAIN_SHRINK,
    "distill": TRAIN_SHRINK,
    "resume": ["run.steps=3", "run.progress=false"],
    "eval": ["--n", "8", "--k", "2"],
    "kernels eval": ["--scale", "0.25", "seeds=1", "timed_runs=1", "compile_baseline=off", "--no-progress"],
    "synth run": ["target=2", "--no-progress"],
}


SLOW = {
    "tempering kernels eval": "every built-in problem compiled and timed (minutes); "
    "tests/envs/kernels/test_kernels_sandboxed.py runs the reference submissions",
    "tempering sandbox attacks": "the whole adversarial suite; tests/sandbox/ runs it",
    "tempering synth run": "measures the policy on every built-in configuration; tests/synth/ runs the loop",
}
"""Lines the test suite leaves to this benchmark (`skip_slow`), each with where the suite covers it."""


def readme_commands(readme: Path = ROOT / "README.md") -> list[str]:
    """The lines of the bash block under the README's `## Command line`, comments removed."""
    text = readme.read_text()
    block = text.split("## Command line", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    return [ln.split("  #", 1)[0].strip() for ln in block.splitlines() if ln.strip()]


def shrunk(argv: list[str]) -> list[str]:
    """argv (after `tempering`) with the arguments that keep the run small appended."""
    verb = argv[0]
    if verb == "launch":  # the launched verb's own shrink
        i = next(i for i, a in enumerate(argv) if a in SHRINK)
        return [*argv, *SHRINK[argv[i]]]
    if verb == "train" and "--resume" in argv:
        return [*argv, *SHRINK["resume"]]
    key = " ".join(argv[:2]) if " ".join(argv[:2]) in SHRINK else verb
    return [*argv, *SHRINK.get(key, [])]


def run_readme(work: Path, timeout: float = 900, skip_slow: bool = False) -> list[dict]:
    shutil.copytree(ROOT / "examples", work / "examples")
    rows = []
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for line in readme_commands():
        if skip_slow and any(line == k or line.startswith(k + " ") for k in SLOW):
            continue
        argv = shlex.split(line)
        assert argv[0] == "tempering", line
        cmd = shrunk(argv[1:])
        t0 = time.perf_counter()
        r = subprocess.run(
            [PY, "-m", "tempering.cli", *cmd], cwd=work, capture_output=True, text=True, timeout=timeout, env=env
        )
        tail = [ln for ln in (r.stderr.strip() or r.stdout.strip()).splitlines() if ln.strip()][-3:]
        rows.append(
            {
                "command": line,
                "ran_as": "tempering " + shlex.join(cmd),
                "exit": r.returncode,
                "seconds": round(time.perf_counter() - t0, 1),
                "stderr_tail": tail if r.returncode else [],
            }
        )
        print(f"{r.returncode:>3} {rows[-1]['seconds']:>6.1f}s  {line}", file=sys.stderr)
    return rows


def cli_seconds(args: list[str], exit_code: int = 0, repeats: int = 3) -> float:
    """Median wall time of `tempering ARGS` (the import chain, mostly), which must exit with `exit_code`."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        r = subprocess.run([PY, "-m", "tempering.cli", *args], capture_output=True, text=True)
        times.append(time.perf_counter() - t0)
        if r.returncode != exit_code:
            raise SystemExit(f"tempering {' '.join(args)} exited {r.returncode}, not {exit_code}: {r.stderr[-500:]}")
    return sorted(times)[len(times) // 2]


def sigint_checkpoint(work: Path) -> dict:
    """Ctrl-C in the middle of a run (no checkpoint due for 1000 steps), then `--resume`: the interrupt must
    write a checkpoint at the step's end, exit 130, and the resumed run must end with the metrics and
    weights of an uninterrupted one (benchmarks/faults.py's comparison)."""
    import signal

    import faults

    model = faults.warm_start(work)
    args = [*faults.overrides(model), "run.checkpoint_every=1000"]
    ref = work / "reference"
    r = subprocess.run(
        [PY, "-m", "tempering.cli", "train", *args, f"run.out_dir={ref}"], capture_output=True, text=True
    )
    if r.returncode:
        raise SystemExit(r.stderr)
    run = work / "interrupted"
    proc = subprocess.Popen(
        [PY, "-m", "tempering.cli", "train", *args, f"run.out_dir={run}"], stderr=subprocess.PIPE, text=True
    )
    log, deadline = run / "metrics.jsonl", time.time() + 300
    while time.time() < deadline and not (log.is_file() and len(faults.metrics(run)) >= 2):
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    written = sorted(p.name for p in (run / "checkpoints").glob("step_*")) if (run / "checkpoints").is_dir() else []
    resumed = subprocess.run([PY, "-m", "tempering.cli", "train", "--resume", str(run)], capture_output=True, text=True)
    exact = resumed.returncode == 0 and faults.same_run(run, ref)
    return {
        "exit": proc.returncode,
        "checkpoints_written": written,
        "last_line": err.strip().splitlines()[-1] if err.strip() else "",
        "resumed_exactly": exact,
        "ok": proc.returncode == 130 and len(written) == 1 and exact,
    }


TINY = [
    "model.name=tiny-xs",
    "run.steps=1",
    "run.eval_every=0",
    "run.progress=false",
    "run.tensorboard=false",
    "task.heldout_size=4",
    "task.train_size=40",
    "rollout.prompts_per_step=2",
    "rollout.group_size=2",
]
TRL_SCRIPT = {
    "model_name_or_path": "HuggingFaceTB/SmolLM2-135M-Instruct",
    "dataset_name": "trl-lib/DeepMath-103K",
    "reward_funcs": ["accuracy_reward", "think_format_reward"],
    "use_peft": True,
    "lora_r": 8,
    "per_device_train_batch_size": 8,
    "gradient_accumulation_steps": 2,
    "num_generations": 4,
    "learning_rate": 1e-5,
    "warmup_ratio": 0.1,
    "max_steps": 100,
    "lr_scheduler_type": "linear",
}
"""A `trl grpo --config` file as TRL's docs write them (script arguments beside GRPOConfig's)."""


def findings(work: Path) -> dict[str, dict]:
    """The new-user trial's findings, each checked as the user met it: {name: {ok, detail}}."""
    import yaml

    def cli(*args: str, cwd: Path = work) -> subprocess.CompletedProcess:
        return subprocess.run([PY, "-m", "tempering.cli", *args], cwd=cwd, capture_output=True, text=True)

    out: dict[str, dict] = {}
    # a run that failed at start (its reward raises) leaves a folder the next run reuses without --overwrite
    (work / "rows.jsonl").write_text(
        "".join(json.dumps({"prompt": f"{i}+1=", "answer": str(i + 1)}) + "\n" for i in range(40))
    )
    (work / "bad_reward.py").write_text("def reward(completions, **kw):\n    raise ValueError('a bug')\n")
    data = ["task.family=dataset", "task.args.train=rows.jsonl", "run.out_dir=failed"]
    first = cli("train", *TINY, *data, "task.args.reward=./bad_reward.py:reward")
    again = cli("train", *TINY, *data, "task.args.reward=exact")
    out["failed_start_reused"] = {
        "ok": first.returncode != 0 and (work / "failed" / "config.yaml").is_file() and again.returncode == 0,
        "detail": f"first run exit {first.returncode}, the same folder again without --overwrite: exit {again.returncode}",
    }
    # the README's `tempering.trainer(verb, cfg).run(callbacks)` trains
    cfg = {
        "model": {"name": "tiny-xs"},
        "run": {"steps": 1, "out_dir": "readme_call", "eval_every": 0, "progress": False},
        "task": {"train_size": 40, "heldout_size": 4},
        "rollout": {"prompts_per_step": 2, "group_size": 2},
    }
    code = f"import tempering; h = tempering.trainer('train', {cfg!r}).run([]); print(sorted(h))"
    r = subprocess.run([PY, "-c", code], cwd=work, capture_output=True, text=True)
    out["readme_trainer_call_trains"] = {
        "ok": r.returncode == 0 and "final" in r.stdout and (work / "readme_call" / "final").is_dir(),
        "detail": (r.stdout.strip() or r.stderr.strip()[-200:]),
    }
    # the packaged model's Hub id is the packaged model
    code = "from tempering.models import gguf; print(gguf.resolve('HuggingFaceTB/SmolLM2-135M-Instruct') == gguf.resolve('smollm2-135m-instruct'))"
    r = subprocess.run([PY, "-c", code], capture_output=True, text=True)
    out["hub_id_is_the_packaged_model"] = {
        "ok": r.stdout.strip() == "True",
        "detail": (r.stdout.strip() or r.stderr.strip()[-200:]),
    }
    # a `trl grpo --config` file converts, script arguments, batch keys, warmup_ratio and linear decay included
    (work / "trl_grpo.yaml").write_text(yaml.safe_dump(TRL_SCRIPT))
    r = cli("config", "--from-trl", "trl_grpo.yaml")
    got = yaml.safe_load(r.stdout) if r.returncode == 0 else {}
    want = {
        "model": {"name": TRL_SCRIPT["model_name_or_path"], "lora_rank": 8, "lora_alpha": 32},
        "prompts_per_step": 4,
        "optim": {"lr": 1e-5, "schedule": "linear", "min_lr_ratio": 0.0, "warmup_steps": 10},
        "task": {
            "family": "dataset",
            "args": {
                "train": "trl-lib/DeepMath-103K",
                "reward": ["trl.rewards:accuracy_reward", "trl.rewards:think_format_reward"],
            },
        },
    }
    seen = {
        "model": got.get("model"),
        "prompts_per_step": got.get("rollout", {}).get("prompts_per_step"),
        "optim": got.get("optim"),
        "task": got.get("task"),
    }
    out["trl_script_config_converts"] = {"ok": seen == want, "detail": r.stderr.strip()[-300:]}
    # the README's TRL example converts to what runs here, and starts
    r = cli("config", "--from-trl", str(ROOT / "examples" / "trl_grpo_config.json"))
    (work / "from_trl.yaml").write_text(r.stdout)
    ran = cli(
        "train", "from_trl.yaml", *TINY, "rollout.max_new_tokens=4", "rollout.group_size=2", "run.out_dir=from_trl"
    )
    out["trl_example_runs_here"] = {
        "ok": r.returncode == 0 and ran.returncode == 0,
        "detail": (ran.stderr.strip() or r.stderr.strip())[-300:],
    }
    # what a user checks after a conversion: lr, KL coefficient and reference in the run's summary
    r = cli("train", *TINY, "loss.kl_coef=0.04", "run.out_dir=summary")
    out["summary_names_lr_and_kl"] = {
        "ok": r.returncode == 0 and "AdamW, lr 1e-06" in r.stdout and "loss.kl_coef 0.04" in r.stdout,
        "detail": " / ".join(ln.strip() for ln in r.stdout.splitlines() if ln.strip().startswith(("optimizer", "KL"))),
    }
    # the warm start's lines leave out the given answers' reward (the model's is in its evaluations)
    r = cli(
        "pretrain",
        "model.name=tiny-xs",
        "run.steps=2",
        "run.log_every=1",
        "run.eval_every=0",
        "task.heldout_size=4",
        "run.progress=false",
        "run.out_dir=pt",
    )
    steps = [ln for ln in r.stdout.splitlines() if ln.startswith("step ")]
    out["pretrain_lines_score_the_model"] = {
        "ok": r.returncode == 0 and bool(steps) and not any("reward" in ln or "success" in ln for ln in steps),
        "detail": steps[-1] if steps else r.stderr.strip()[-200:],
    }
    # a run started with relative paths, its folder copied elsewhere, resumes from a third folder
    project, other = work / "project", work / "other"
    project.mkdir()
    other.mkdir()
    shutil.copy(work / "rows.jsonl", project / "rows.jsonl")
    rel = ["task.family=dataset", "task.args.train=rows.jsonl", "task.args.reward=exact", "run.checkpoint_every=1"]
    first = cli("train", *TINY, *rel, "run.out_dir=runs/rel", cwd=project)
    shutil.copytree(project / "runs" / "rel", work / "copied")
    again = cli("train", "--resume", str(work / "copied"), "run.steps=2", "run.progress=false", cwd=other)
    out["resume_from_another_folder"] = {
        "ok": first.returncode == 0 and again.returncode == 0 and (work / "copied" / "checkpoints" / "step_2").is_dir(),
        "detail": f"started in project/ exit {first.returncode}, the copy resumed from other/ exit {again.returncode}",
    }
    # run.keep_checkpoints=0 leaves only the final model
    r = cli("train", *TINY, "run.keep_checkpoints=0", "run.out_dir=final_only")
    kept = sorted(p.name for p in (work / "final_only").iterdir()) if (work / "final_only").is_dir() else []
    out["keep_only_the_final_model"] = {
        "ok": r.returncode == 0 and "final" in kept and "checkpoints" not in kept,
        "detail": f"exit {r.returncode}; the run folder holds {', '.join(kept)}",
    }
    # a dataset too small to hold a prompt out is refused in one line; a small one says how many it holds out
    (work / "one_row.jsonl").write_text('{"prompt": "1+1=", "answer": "2"}\n')
    one = cli("train", *TINY, "task.family=dataset", "task.args.train=one_row.jsonl", "run.out_dir=one_row")
    small = cli(
        "train", *TINY, "task.family=dataset", "task.args.train=rows.jsonl", "task.heldout_size=8", "run.out_dir=small"
    )
    said = [ln.strip() for ln in small.stdout.splitlines() if ln.strip().startswith("task")]
    out["tiny_dataset_heldout_rule"] = {
        "ok": one.returncode == 2
        and len(one.stderr.strip().splitlines()) == 1
        and small.returncode == 0
        and any("(all it holds out; task.heldout_size=8)" in ln for ln in said),
        "detail": f"1 row: {one.stderr.strip()[-120:]} / 40 rows: {said[0] if said else small.stderr.strip()[-120:]}",
    }
    # the view page smooths per-step curves on request
    r = cli("view", "small", "--smooth", "0.6", "--out", "smooth.html")
    out["view_smoothing"] = {
        "ok": r.returncode == 0 and "data:image/png;base64," in (work / "smooth.html").read_text(),
        "detail": (r.stdout.strip() or r.stderr.strip())[-200:],
    }
    return out


QUICKSTART = [
    "demo",
    "--model",
    "smollm2-135m-instruct",
    "--no-progress",
    "train.run.steps=3",
    "train.task.heldout_size=16",
]
"""The README's real quickstart (`make demo-real`: 8 prompts x 8 samples x 12 new tokens per step), shortened to
3 steps and evaluations on 16 prompts: the steps are the ones measured, the run's length and evaluations smaller."""
MEMORY_SETTINGS = {"as_written": [], "loss.pack=true": ["train.loss.pack=true"]}
"""The quickstart as written, and with the packed, chunked output layer (`loss.pack`)."""


def quickstart_memory(work: Path) -> dict[str, dict]:
    """Peak resident memory of the real quickstart's process (GNU time's maximum RSS), one setting at a time."""
    out = {}
    for name, extra in MEMORY_SETTINGS.items():
        run = work / name.replace("=", "_")
        cmd = ["/usr/bin/time", "-v", PY, "-m", "tempering.cli", *QUICKSTART, "--out", str(run), *extra]
        r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "2"})
        kb = next(int(ln.split(":")[1]) for ln in r.stderr.splitlines() if "Maximum resident set size" in ln)
        out[name] = {
            "command": "tempering " + shlex.join([*QUICKSTART, *extra]),
            "exit": r.returncode,
            "peak_rss_gb": round(kb * 1024 / 1e9, 2),
        }
        print(json.dumps({name: out[name]}), file=sys.stderr)
        shutil.rmtree(run, ignore_errors=True)
    return out


def matmul_gflops() -> float:
    import torch

    torch.set_num_threads(2)
    a = torch.randn(1024, 1024)
    a @ a
    t0 = time.perf_counter()
    for _ in range(10):
        a @ a
    return 10 * 2 * 1024**3 / (time.perf_counter() - t0) / 1e9


def faults_steps() -> int:
    import faults

    return faults.STEPS


def render(report: dict) -> str:
    rc, interrupt = report["readme_commands"], report["sigint"]
    rows = rc["rows"]
    gflops, load = report["machine"]["matmul_gflops_2_threads"], report["load_before"]
    md = [
        "# The README's commands, as a user runs them",
        "",
        f"Command: `{report['command']}`. Machine: {report['machine']['platform']}, {report['machine']['cpus']} CPUs, "
        f"1024^3 float32 matmul {gflops:.0f} GFLOP/s on 2 threads, load average {load} before, "
        f"{report['load_after']} after.",
        "",
        f"{rc['ran']} of {rc['total']} commands of the README's command-line block ran (exit 0), in order, from a "
        "fresh folder holding `examples/`, each with arguments appended that shrink the work (shown).",
        "",
        "| exit | seconds | README line | ran as |",
        "|---|---|---|---|",
        *[f"| {r['exit']} | {r['seconds']} | `{r['command']}` | `{r['ran_as']}` |" for r in rows],
        "",
        f"`tempering config train` answers in {report['config_seconds']:.2f} s, and a mistyped key "
        f"(`tempering train run.stepz=3`) is refused in {report['typo_seconds']:.2f} s (medians of 3).",
        f"Ctrl-C in the middle of a {faults_steps()}-step run with no checkpoint due: exit {interrupt['exit']}, "
        f"checkpoints written {', '.join(interrupt['checkpoints_written']) or 'none'}, "
        f"`--resume` ends with the metrics and weights of an uninterrupted run: {interrupt['resumed_exactly']}.",
        f"Bad inputs (benchmarks/faults.py): {report['bad_inputs_clear']} of {report['bad_inputs_total']} give a "
        "one-line error, exit 2, and write nothing.",
        "",
    ]
    for r in rows:
        if r["exit"]:
            md += [f"- `{r['command']}` failed: " + " / ".join(r["stderr_tail"])]
    if "quickstart_memory" in report:
        md += [
            "",
            "Peak resident memory of the real quickstart's process (GNU time), one setting at a time:",
            "",
            "| setting | command | exit | peak RSS (GB) |",
            "|---|---|---|---|",
            *[
                f"| {k} | `{v['command']}` | {v['exit']} | {v['peak_rss_gb']} |"
                for k, v in report["quickstart_memory"].items()
            ],
        ]
    if "findings" in report:
        md += [
            "",
            f"The new-user trial's findings, checked as the user met them: {report['findings_ok']} of "
            f"{len(report['findings'])} as the fix says.",
            "",
            "| finding | as fixed | what was seen |",
            "|---|---|---|",
            *[f"| {k} | {v['ok']} | {v['detail'].replace('|', '/')} |" for k, v in report["findings"].items()],
        ]
    return "\n".join(md) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "docs" / "results" / "ux"))
    ap.add_argument(
        "--findings-only", action="store_true", help="rerun only the new-user trial's findings into ux.json"
    )
    ap.add_argument(
        "--bad-inputs-only",
        action="store_true",
        help="take the bad-input figures of reliability.json (benchmarks/faults.py --bad-inputs-only) into ux.json",
    )
    ap.add_argument(
        "--memory-only",
        action="store_true",
        help="measure only the real quickstart's peak memory, as written and with loss.pack, into ux.json",
    )
    args = ap.parse_args()
    out = Path(args.out)
    from tempering.runlog import atomic_write_text

    if args.memory_only:
        report = json.loads(out.with_suffix(".json").read_text())
        with tempfile.TemporaryDirectory(prefix="memory_") as d:
            report["quickstart_memory"] = quickstart_memory(Path(d))
        atomic_write_text(out.with_suffix(".json"), json.dumps(report, indent=2) + "\n")
        atomic_write_text(out.with_suffix(".md"), render(report))
        return

    if args.findings_only:
        report = json.loads(out.with_suffix(".json").read_text())
        with tempfile.TemporaryDirectory(prefix="findings_") as d:
            report["findings"] = findings(Path(d))
        report["findings_ok"] = sum(f["ok"] for f in report["findings"].values())
        atomic_write_text(out.with_suffix(".json"), json.dumps(report, indent=2) + "\n")
        atomic_write_text(out.with_suffix(".md"), render(report))
        print(json.dumps({k: v["ok"] for k, v in report["findings"].items()}))
        return
    if args.bad_inputs_only:
        report = json.loads(out.with_suffix(".json").read_text())
        reliability = json.loads((ROOT / "docs" / "results" / "reliability.json").read_text())
        report |= {k: reliability[k] for k in ("bad_inputs_total", "bad_inputs_clear")}
        atomic_write_text(out.with_suffix(".json"), json.dumps(report, indent=2) + "\n")
        atomic_write_text(out.with_suffix(".md"), render(report))
        return
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    gflops = matmul_gflops()
    with tempfile.TemporaryDirectory(prefix="readme_") as d:
        rows = run_readme(Path(d))
    with tempfile.TemporaryDirectory(prefix="sigint_") as d:
        interrupt = sigint_checkpoint(Path(d))
    with tempfile.TemporaryDirectory(prefix="findings_") as d:
        found = findings(Path(d))
    reliability = json.loads((ROOT / "docs" / "results" / "reliability.json").read_text())
    report = {
        "command": "python benchmarks/ux.py",
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "matmul_gflops_2_threads": gflops},
        "load_before": load,
        "load_after": " ".join(f"{x:.1f}" for x in os.getloadavg()),
        "readme_commands": {"total": len(rows), "ran": sum(r["exit"] == 0 for r in rows), "rows": rows},
        "config_seconds": cli_seconds(["config", "train"]),
        "typo_seconds": cli_seconds(["train", "run.stepz=3"], exit_code=2),
        "sigint_checkpoint": interrupt["ok"],
        "sigint": interrupt,
        "bad_inputs_total": reliability["bad_inputs_total"],
        "bad_inputs_clear": reliability["bad_inputs_clear"],
        "findings": found,
        "findings_ok": sum(f["ok"] for f in found.values()),
    }
    atomic_write_text(out.with_suffix(".json"), json.dumps(report, indent=2) + "\n")
    atomic_write_text(out.with_suffix(".md"), render(report))
    rc = report["readme_commands"]
    if rc["ran"] != rc["total"]:
        raise SystemExit(f"{rc['total'] - rc['ran']} README command(s) failed; see {out.with_suffix('.md')}")


if __name__ == "__main__":
    main()
