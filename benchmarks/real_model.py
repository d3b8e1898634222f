"""The real-model path: every training verb through the CLI on a Qwen2 model folder with a subword
tokenizer and a chat template (instead of the character-level tiny models).

    python benchmarks/real_model.py [--work DIR] [--results docs/results]

Builds a random-initialised Qwen2 (`tempering.models.toy_qwen`: byte-level BPE trained here, Qwen's
chat template, `<|im_end|>` ending answers), then runs through `tempering.cli.main`:
train (single-turn, the math verifier plus a format reward on examples/math/gsm8k_style.jsonl),
--resume, train multi-turn (arithmetic with feedback), LoRA, distill (the model as its own teacher)
and eval of a run with the run's own settings. Checks what each leaves in its run folder. Writes
docs/results/real_model.json and real_model.md (the path works end to end; the model is untrained,
so the rewards are not the point).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from tempering.cli import main as cli
from tempering.runlog import atomic_write_text

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "examples" / "math" / "gsm8k_style.jsonl"

COMMON = [
    "rollout.group_size=2",
    "rollout.prompts_per_step=2",
    "rollout.max_new_tokens=8",
    "run.eval_every=0",
    "run.eval_k=2",
    "run.checkpoint_every=1",
    "run.progress=false",
    "run.tensorboard=false",
    "run.log_every=1",
    "optim.lr=1e-3",
]
MATH = [
    "task.family=dataset",
    f"task.args.train={DATA}",
    "task.args.reward=[math, boxed]",
    "task.args.reward_weights=[1.0, 0.1]",
    "task.args.heldout_share=0.25",
    "task.heldout_size=4",
]
ARITHMETIC = [
    "task.family=arithmetic",
    "task.args.min_value=0",
    "task.args.max_value=20",
    "task.train_size=200",
    "task.heldout_size=4",
]


def corpus() -> list[str]:
    """What the tokenizer is trained on: the math problems and sums like the arithmetic tasks."""
    rows = [json.loads(ln) for ln in DATA.read_text().splitlines() if ln.strip()]
    return [r["prompt"] + " " + str(r["answer"]) for r in rows] + [
        f"{a}+{b}={a + b}" for a in range(0, 60, 3) for b in range(0, 60, 7)
    ]


def _metrics(run: Path) -> list[dict[str, Any]]:
    return [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines() if ln.strip()]


def _check(ok: bool, what: str) -> None:
    if not ok:
        raise SystemExit(f"real-model path: {what}")


def run_path(work: Path) -> dict[str, Any]:
    """Build the model, run every verb on it through the CLI, check each run folder; returns what ran."""
    from tempering.models import load_policy
    from tempering.models.toy_qwen import toy_qwen2

    work.mkdir(parents=True, exist_ok=True)
    seconds: dict[str, float] = {}

    def timed(name: str, argv: list[str]) -> None:
        t0 = time.perf_counter()
        code = cli(argv)
        seconds[name] = round(time.perf_counter() - t0, 2)
        _check(code == 0, f"`tempering {' '.join(argv)}` exited {code}")

    t0 = time.perf_counter()
    model_dir = toy_qwen2(work / "qwen2-toy", corpus(), vocab_size=512)
    seconds["build"] = round(time.perf_counter() - t0, 2)
    model, tok = load_policy(str(model_dir))
    arch = type(model).__name__
    n_params = sum(p.numel() for p in model.parameters())
    m = f"model.name={model_dir}"

    single = work / "train"
    timed("train", ["train", m, *MATH, *COMMON, "run.steps=2", f"run.out_dir={single}"])
    rows = _metrics(single)
    _check(
        any("reward/math" in r and "reward/boxed" in r for r in rows),
        "the math run logged no reward/math, reward/boxed",
    )
    _check((single / "final" / "config.json").is_file(), "train wrote no final model")

    timed("resume", ["train", "--resume", str(single), "run.steps=3"])
    _check([r["step"] for r in _metrics(single) if "reward" in r] == [1, 2, 3], "resume did not continue at step 3")

    multi = work / "multiturn"
    timed(
        "train_multiturn",
        ["train", m, *ARITHMETIC, *COMMON, "rollout.max_turns=2", "run.steps=1", f"run.out_dir={multi}"],
    )
    _check("turns" in _metrics(multi)[1], "the multi-turn run logged no turns")

    lora = work / "lora"
    timed("lora", ["train", m, *ARITHMETIC, *COMMON, "model.lora_rank=4", "run.steps=1", f"run.out_dir={lora}"])
    _check((lora / "final" / "adapter" / "adapter_config.json").is_file(), "the LoRA run saved no adapter")

    distill = work / "distill"
    timed(
        "distill",
        ["distill", m, *ARITHMETIC, *COMMON, f"teacher.path={model_dir}", "run.steps=1", f"run.out_dir={distill}"],
    )
    _check("distill/reverse_kl" in _metrics(distill)[1], "distill logged no reverse KL")

    timed("eval", ["eval", str(single), "--json", str(work / "eval.json")])
    got = json.loads((work / "eval.json").read_text())
    final = [r for r in _metrics(single) if "eval/pass@1" in r][-1]
    _check(got["pass@1"] == final["eval/pass@1"], "eval of the run disagrees with the run's final evaluation")
    cfg = yaml.safe_load((single / "config.yaml").read_text())
    return {
        "arch": arch,
        "tokenizer": "bpe",
        "chat_template": bool(tok.chat_template),
        "verbs": ["train", "resume", "train_multiturn", "lora", "distill", "eval"],
        "seconds": round(sum(seconds.values()), 2),
        "seconds_by_step": seconds,
        "vocab_size": len(tok),
        "parameters": n_params,
        "eos_token": tok.eos_token,
        "reward_functions": cfg["task"]["args"]["reward"],
        "eval_pass_at_1_equals_run_final": True,
    }


def write(results: Path, out: dict[str, Any]) -> None:
    results.mkdir(parents=True, exist_ok=True)
    atomic_write_text(results / "real_model.json", json.dumps(out, indent=2) + "\n")
    steps = "\n".join(f"| {k} | {v:.1f} |" for k, v in out["seconds_by_step"].items())
    atomic_write_text(
        results / "real_model.md",
        f"""# The real-model path

Command: `{out["command"]}`

Machine: {out["machine"]}; load average before / after: {out["load"]}

A random-initialised `{out["arch"]}` ({out["parameters"]:,} parameters) with a byte-level BPE tokenizer
trained locally ({out["vocab_size"]} tokens), Qwen's chat template and `{out["eos_token"]}` ending
answers, run through the CLI: {", ".join(out["verbs"])}. The single-turn run trains on
examples/math/gsm8k_style.jsonl with the reward functions {out["reward_functions"]} (each logged as
`reward/NAME`); `tempering eval RUN` reproduces the run's final greedy pass@1 with the run's own
settings. The model is untrained: this checks the path, not the rewards.

| step | seconds |
| --- | --- |
{steps}
| total | {out["seconds"]:.1f} |
""",
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", default="runs/real_model", help="folder for the model and the runs")
    ap.add_argument("--results", default=str(ROOT / "docs" / "results"), help="where real_model.json/.md go")
    a = ap.parse_args()
    load0 = os.getloadavg()
    out = run_path(Path(a.work))
    load1 = os.getloadavg()
    import torch

    out["command"] = "python benchmarks/real_model.py " + " ".join(sys.argv[1:])
    out["machine"] = (
        f"{platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__} ({torch.get_num_threads()} threads), "
        f"Python {platform.python_version()}"
    )
    out["load"] = f"{load0[0]:.1f} / {load1[0]:.1f}"
    write(Path(a.results), out)
    print(json.dumps({k: out[k] for k in ("arch", "tokenizer", "chat_template", "verbs", "seconds")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
