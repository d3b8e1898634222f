"""GRPO throughput and learning curve: tempering vs TRL's GRPOTrainer on the same workload.

Both arms start from the same warm-started tiny model and tokenizer, see the same prompts in the same
order, and use the same group size, batch, completion length, learning rate, clip range, beta = 0 and
number of steps. Each arm runs in its own subprocess (so peak RSS is its own), alternating A B A B.

    python benchmarks/grpo_vs_trl.py --steps 40 --pairs 3 --out docs/results

Needs the `bench` extra (`pip install -e '.[bench]'`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import resource
import statistics as st
import subprocess
import sys
import time
from pathlib import Path

TASK = {"family": "arithmetic", "args": {"min_value": 10, "max_value": 999}, "train_size": 20000, "heldout_size": 500}
PROMPTS, GROUP, MAX_NEW, LR = 32, 8, 6, 3e-4
SHARE_PREFIX = True  # tempering's default; the prompt shared by a group runs through the model once
WARMUP_STEPS = 2  # excluded from the timed window in both arms


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def prepare_model(out: Path, seed: int) -> str:
    from tempering.config import build
    from tempering.recipes.demo import PRETRAIN
    from tempering.recipes.pretrain import PretrainConfig, pretrain

    run = {**PRETRAIN["run"], "seed": seed, "out_dir": str(out), "progress": False}
    cfg = build(PretrainConfig, {**PRETRAIN, "run": run})
    return pretrain(cfg)["model"]


def train_order(n_steps: int, seed: int):
    """The prompts of every step, in order: the same for both arms."""
    from tempering.envs.registry import make_family
    from tempering.train.cursor import PromptCursor

    fam = make_family(TASK["family"], **TASK["args"])
    tasks = fam.tasks("train", TASK["train_size"], seed=0)
    cur = PromptCursor(len(tasks), seed)
    return fam, [[tasks[i] for i in cur.next(PROMPTS)] for _ in range(n_steps)]


def heldout_pass(model, tok) -> float:
    from tempering.envs.registry import make_family
    from tempering.evaluation import evaluate
    from tempering.models.chat import ChatFormat
    from tempering.rollout.engine import RolloutOptions
    from tempering.rollout.sampler import HFSampler, SamplingParams

    fam = make_family(TASK["family"], **TASK["args"])
    tasks = fam.tasks("heldout", TASK["heldout_size"], seed=0)
    opts = RolloutOptions(sampling=SamplingParams(MAX_NEW, 1.0))
    m = asyncio.run(evaluate(HFSampler(model, tok, seed=0), ChatFormat(tok), fam, tasks, opts, k=1, sampled=False))
    return m["pass@1"]


def arm_tempering(model_dir: str, steps: int, seed: int) -> dict:
    from tempering.config import build
    from tempering.recipes.train import TrainConfig, trainer

    fam, order = train_order(steps, seed)
    cfg = build(
        TrainConfig,
        {
            "model": {"name": model_dir},
            "task": TASK,
            "rollout": {
                "group_size": GROUP,
                "prompts_per_step": PROMPTS,
                "max_new_tokens": MAX_NEW,
                "temperature": 1.0,
            },
            "loss": {
                "advantage": "grpo",
                "clip_low": 0.2,
                "clip_high": 0.28,
                "loss_agg": "token-mean",
                "micro_batch_size": PROMPTS * GROUP,
                "share_prefix": SHARE_PREFIX,
            },
            "optim": {"lr": LR},
            "run": {
                "steps": steps,
                "seed": seed,
                "out_dir": f"/tmp/bench_tempering_{os.getpid()}",
                "eval_every": 0,
                "checkpoint_every": 0,
                "log_samples": 0,
                "tensorboard": False,
                "progress": False,
            },
        },
    )
    tr = trainer(cfg, family=fam)
    # feed the shared prompt order
    index = {t.id: i for i, t in enumerate(tr.train_tasks)}
    it2 = iter(order)
    tr.cursor.next = lambda n: [index[t.id] for t in next(it2)]  # type: ignore[method-assign]
    times, rewards, gen, upd = [], [], [], []
    for _ in range(steps):
        t0 = time.perf_counter()
        r = asyncio.run(tr.step())
        times.append(time.perf_counter() - t0)
        rewards.append(r.metrics["reward"])
        gen.append(r.metrics["gen_seconds"])
        upd.append(r.metrics["update_seconds"])
    return {
        "step_seconds": times,
        "rewards": rewards,
        "gen_seconds": gen,
        "update_seconds": upd,
        "heldout_pass_at_1": heldout_pass(tr.model, tr.tokenizer),
    }


def arm_trl(model_dir: str, steps: int, seed: int) -> dict:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    _, order = train_order(steps, seed)
    rows = [{"prompt": t.prompt, "answer": t.answer} for step in order for t in step]
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    tok = AutoTokenizer.from_pretrained(model_dir)
    tok.padding_side = "left"

    def exact(prompts, completions, answer, **_):
        return [float(c.split("\n", 1)[0].strip() == a) for c, a in zip(completions, answer)]

    times: list[float] = []

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            times.append(time.perf_counter())

    args = GRPOConfig(
        output_dir=f"/tmp/bench_trl_{os.getpid()}",
        per_device_train_batch_size=PROMPTS * GROUP,
        gradient_accumulation_steps=1,
        num_generations=GROUP,
        max_completion_length=MAX_NEW,
        learning_rate=LR,
        lr_scheduler_type="constant",
        warmup_steps=0,
        beta=0.0,
        num_iterations=1,
        epsilon=0.2,
        epsilon_high=0.28,
        loss_type="dapo",
        scale_rewards="group",
        temperature=1.0,
        max_steps=steps,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        bf16=False,
        seed=seed,
        shuffle_dataset=False,
        dataloader_num_workers=0,
        max_grad_norm=1.0,
        weight_decay=0.0,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=exact,
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=tok,
        callbacks=[Clock()],
    )
    t0 = time.perf_counter()
    trainer.train()
    stamps = [t0] + times
    rewards = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    return {
        "step_seconds": [b - a for a, b in zip(stamps, stamps[1:])],
        "rewards": rewards,
        "heldout_pass_at_1": heldout_pass(trainer.model.eval(), tok),
        "torch_threads": torch.get_num_threads(),
    }


def run_arm(arm: str, model_dir: str, steps: int, seed: int, threads: int) -> dict:
    out = Path(f"/tmp/bench_arm_{arm}_{os.getpid()}.json")
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    cmd = [
        sys.executable,
        __file__,
        "--arm",
        arm,
        "--model",
        model_dir,
        "--steps",
        str(steps),
        "--seed",
        str(seed),
        "--threads",
        str(threads),
        "--arm-out",
        str(out),
    ]
    subprocess.run(cmd, check=True, env=env)
    res = json.loads(out.read_text())
    out.unlink()
    return res


def summarize(res: dict) -> dict:
    timed = res["step_seconds"][WARMUP_STEPS:]
    steps_per_s = len(timed) / sum(timed)
    return {
        "steps_per_s": steps_per_s,
        "completions_per_s": steps_per_s * PROMPTS * GROUP,
        "peak_rss_mb": res["peak_rss_mb"],
        "reward_last10": st.mean(res["rewards"][-10:]),
        "heldout_pass_at_1": res["heldout_pass_at_1"],
    }


def render(head: dict) -> str:
    """The results table, from the JSON's numbers only."""
    f = lambda xs: ", ".join(f"{x:.3f}" for x in xs)
    return f"""# GRPO throughput: tempering vs TRL

Command: `{head["command"]}`\\
Machine: {head["machine"]}; torch threads per run: {head["threads"]}; TRL {head["trl_version"]}, transformers {head["transformers_version"]}.

Workload (both arms): warm-started `tiny-s` (0.54M parameters, character tokenizer), arithmetic `a+b=` (10..999),
{PROMPTS} prompts x {GROUP} completions per step, at most {MAX_NEW} new tokens, temperature 1, lr {LR} constant,
beta = 0, one on-policy update per batch, clip 0.2 / 0.28, token-mean loss, {head["steps"]} steps, the same prompt order.
Each arm runs in its own process; runs alternate tempering, TRL, tempering, TRL ({head["pairs"]} pairs, seeds {head["seed"]}..{head["seed"] + head["pairs"] - 1}).
The first {WARMUP_STEPS} steps of each run are excluded from timing.

| | tempering | TRL GRPOTrainer | ratio |
| --- | --- | --- | --- |
| steps/s (median) | {head["tempering_steps_per_s"]:.3f} | {head["trl_steps_per_s"]:.3f} | {head["throughput_ratio"]:.2f}x (median of paired ratios: {f(head["throughput_ratios"])}) |
| completions/s (median) | {head["tempering_completions_per_s"]:.0f} | {head["trl_completions_per_s"]:.0f} | |
| peak RSS, MB (median) | {head["tempering_peak_rss_mb"]:.0f} | {head["trl_peak_rss_mb"]:.0f} | |
| mean reward, last 10 steps (per run) | {f(head["tempering_reward_last10"])} | {f(head["trl_reward_last10"])} | |
| held-out pass@1 after the run (greedy, 500 prompts) | {f(head["tempering_heldout_pass_at_1"])} | {f(head["trl_heldout_pass_at_1"])} | |

Where tempering's step time goes (median share over runs): generation {100 * head["tempering_generation_share"]:.0f}%, policy update
{100 * head["tempering_update_share"]:.0f}%, the rest (verification, collation, logging) {100 * (1 - head["tempering_generation_share"] - head["tempering_update_share"]):.0f}%.

Both arms run the same Hugging Face model, and at this size its forward and backward are most of a step.
Most of each sequence is the prompt, shared by a group's {GROUP} samples: {share_note(head)}

Goal: at least 2x TRL's steps/s with an equal learning curve. Measured: {head["throughput_ratio"]:.2f}x, so the
goal is {"met" if head["throughput_ratio"] >= 2 else "not met"}. {curve_note(head)}
"""


def share_note(head: dict) -> str:
    """What each arm's update runs of the shared prompts."""
    if head.get("tempering_share_prefix"):
        return (
            "tempering's update runs each shared prompt through the model once (`loss.share_prefix`, on by "
            "default) and only the completions per sample; TRL's runs every prompt-plus-completion row in full."
        )
    return "both arms run every prompt-plus-completion row in full (tempering's `loss.share_prefix` was off)."


def curve_note(head: dict) -> str:
    """Held-out pass@1 differences per pair, against one measurement's binomial standard error."""
    diffs = [100 * (a - b) for a, b in zip(head["tempering_heldout_pass_at_1"], head["trl_heldout_pass_at_1"])]
    p = st.mean(head["tempering_heldout_pass_at_1"] + head["trl_heldout_pass_at_1"])
    se = 100 * (p * (1 - p) / TASK["heldout_size"]) ** 0.5
    ahead = sum(d > 0 for d in diffs)
    return (
        f"Learning curves: tempering minus TRL held-out pass@1 per pair is {', '.join(f'{d:+.1f}' for d in diffs)} points "
        f"(tempering ahead in {ahead} of {len(diffs)}); one measurement's standard error is about {se:.1f} points, "
        f"so {len(diffs)} pairs cannot settle whether the curves differ."
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="docs/results")
    p.add_argument("--model", help="warm-started model folder (default: pre-train one now)")
    p.add_argument("--arm", choices=["tempering", "trl"], help=argparse.SUPPRESS)
    p.add_argument("--arm-out", help=argparse.SUPPRESS)
    p.add_argument("--render", metavar="JSON", help="rewrite the table from an earlier run's JSON (no runs)")
    a = p.parse_args()
    if a.render:
        write(Path(a.out), json.loads(Path(a.render).read_text()))
        return
    if a.arm:
        import torch

        torch.set_num_threads(a.threads)
        torch.manual_seed(a.seed)
        res = (arm_tempering if a.arm == "tempering" else arm_trl)(a.model, a.steps, a.seed)
        res["peak_rss_mb"] = peak_rss_mb()
        Path(a.arm_out).write_text(json.dumps(res))
        return
    model_dir = a.model or prepare_model(Path("/tmp/bench_grpo_model"), a.seed)
    runs: dict[str, list[dict]] = {"tempering": [], "trl": []}
    raw: dict[str, list[dict]] = {"tempering": [], "trl": []}
    for i in range(a.pairs):
        for arm in ("tempering", "trl"):
            res = run_arm(arm, model_dir, a.steps, a.seed + i, a.threads)
            raw[arm].append(res)
            runs[arm].append(summarize(res))
            print(arm, i, {k: round(v, 3) for k, v in runs[arm][-1].items()}, flush=True)
    ratios = [t["steps_per_s"] / r["steps_per_s"] for t, r in zip(runs["tempering"], runs["trl"])]
    med = lambda arm, k: st.median(r[k] for r in runs[arm])
    gen_share = st.median(
        sum(r["gen_seconds"][WARMUP_STEPS:]) / sum(r["step_seconds"][WARMUP_STEPS:]) for r in raw["tempering"]
    )
    upd_share = st.median(
        sum(r["update_seconds"][WARMUP_STEPS:]) / sum(r["step_seconds"][WARMUP_STEPS:]) for r in raw["tempering"]
    )
    head = {
        "tempering_steps_per_s": med("tempering", "steps_per_s"),
        "trl_steps_per_s": med("trl", "steps_per_s"),
        "throughput_ratio": st.median(ratios),
        "throughput_ratios": ratios,
        "tempering_completions_per_s": med("tempering", "completions_per_s"),
        "trl_completions_per_s": med("trl", "completions_per_s"),
        "tempering_peak_rss_mb": med("tempering", "peak_rss_mb"),
        "trl_peak_rss_mb": med("trl", "peak_rss_mb"),
        "tempering_reward_last10": [r["reward_last10"] for r in runs["tempering"]],
        "trl_reward_last10": [r["reward_last10"] for r in runs["trl"]],
        "tempering_heldout_pass_at_1": [r["heldout_pass_at_1"] for r in runs["tempering"]],
        "trl_heldout_pass_at_1": [r["heldout_pass_at_1"] for r in runs["trl"]],
        "tempering_generation_share": gen_share,
        "tempering_update_share": upd_share,
        "steps": a.steps,
        "pairs": a.pairs,
        "threads": a.threads,
        "seed": a.seed,
        "tempering_share_prefix": SHARE_PREFIX,
        "prompts_per_step": PROMPTS,
        "group_size": GROUP,
        "max_completion_length": MAX_NEW,
        "lr": LR,
        "trl_version": __import__("trl").__version__,
        "transformers_version": __import__("transformers").__version__,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "command": "python benchmarks/grpo_vs_trl.py " + " ".join(sys.argv[1:]),
        "curves": {arm: [r["rewards"] for r in raw[arm]] for arm in raw},
    }
    write(Path(a.out), head)


def write(out: Path, head: dict) -> None:
    from tempering.runlog import atomic_write_text

    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "grpo_vs_trl.json", json.dumps(head, indent=2) + "\n")
    md = render(head)
    atomic_write_text(out / "grpo_vs_trl.md", md)
    print(md)


if __name__ == "__main__":
    main()
