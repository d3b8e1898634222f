"""The long-completion regime and the distance to the machine's limit: the part of `grpo_vs_trl.py` that
measures them (run through it; this module holds the regime, its arms and its table).

Long regime: `tiny-xl` (14M parameters) on the `chain` task (sums worked step by step, answers of up to
~110 tokens), 8 completions per prompt, at most 128 new tokens. It measures throughput only: the model
starts from its seeded random initialisation (a supervised warm start of 14M parameters costs more than
this benchmark's whole budget on 2 cores), so it samples until EOS or the limit and every arm generates and
trains on completions of the same length distribution. Three arms, alternated within each pair and seeded
alike: tempering synchronous, tempering asynchronous (`rollout.async_steps=1`, `loss.rollout_correction=tis`,
the cores split between the update and the sampler), and TRL's GRPOTrainer, all on the same prompt order.

The limit: the fp32 matmul peak of this machine with the run's threads, measured in the same run, and each
arm's model FLOP/s: the minimum arithmetic of its steps (each prompt once per group, each completion token
once: 2 x parameters FLOPs per token for generation and 6 x for the update, plus attention), divided by
its time. Every arm is charged the same work for the same tokens, so the fraction compares arms and says
how far a step is from what the matrix units could do.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics as st
import subprocess
import sys
import time
from pathlib import Path

LONG = {
    "model": "tiny-xl",
    "task": {"family": "chain", "args": {"partial_credit": True}, "train_size": 20000, "heldout_size": 200},
    "prompts_per_step": 1,  # sized for 2 shared cores: one group, ~8 x 100 sampled and trained tokens of a 14M model
    "group_size": 8,
    "max_new_tokens": 128,
    "lr": 2e-4,
}
LONG_ARMS = ("long-tempering", "long-tempering-async", "long-trl")
WARMUP_STEPS = 1  # excluded from the timed window in every long arm (the asynchronous pipeline fills in it)


# ---- the limit ---------------------------------------------------------------------------------------
def peak_matmul_flops(threads: int, n: int = 1024, seconds: float = 3.0) -> float:
    """The best fp32 FLOP/s of an n x n x n matmul over `seconds`, with `threads` torch threads."""
    import torch

    torch.set_num_threads(threads)
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    best, end = 0.0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        a @ b
        best = max(best, 2 * n**3 / (time.perf_counter() - t0))
    return best


def model_shape(model_dir: str) -> dict[str, int]:
    from transformers import AutoConfig

    c = AutoConfig.from_pretrained(model_dir)
    return {
        "hidden": c.hidden_size,
        "layers": c.num_hidden_layers,
        "intermediate": c.intermediate_size,
        "vocab": c.vocab_size,
        "kv_hidden": c.hidden_size * c.num_key_value_heads // c.num_attention_heads,
    }


def step_flops(shape: dict[str, int], groups: int, group_size: int, prompt_len: float, completion_len: float) -> float:
    """The minimum model FLOPs of one GRPO step: generation (each prompt prefilled once per group) and one
    forward + backward over the same tokens, with matmul and attention terms."""
    h, L, i, v, kv = shape["hidden"], shape["layers"], shape["intermediate"], shape["vocab"], shape["kv_hidden"]
    matmul = L * (2 * h * h + 2 * h * kv + 3 * h * i) + h * v  # weights a token meets, LM head included
    p, n = prompt_len, completion_len
    tokens = groups * (p + group_size * n)
    # attention: 4 * h FLOPs per layer for each (query, earlier key) pair
    pairs = groups * (p * p / 2 + group_size * (p * n + n * n / 2))
    forward = 2 * matmul * tokens + 4 * h * L * pairs
    return forward + 3 * forward  # generation + the update's forward and backward


def flops_utilisation(
    shape: dict[str, int], peak: float, groups: int, group_size: int, prompt_len: float, warmup: int, res: dict
) -> float:
    """An arm's model FLOP/s over the timed steps (after `warmup`), as a fraction of the measured peak."""
    timed = slice(warmup, None)
    work = sum(step_flops(shape, groups, group_size, prompt_len, n) for n in res["completion_len"][timed])
    return work / sum(res["step_seconds"][timed]) / peak


# ---- the long regime -----------------------------------------------------------------------------------
def long_model(out: Path, seed: int) -> str:
    """tiny-xl at its seeded random initialisation, saved where every arm loads it."""
    from tempering.models import char_tokenizer, save_policy, tiny_model

    save_policy(tiny_model(LONG["model"], seed=seed), char_tokenizer(), str(out))
    return str(out)


def long_family():
    from tempering.envs.registry import make_family

    return make_family(LONG["task"]["family"], **LONG["task"]["args"])


def long_order(steps: int, seed: int):
    """The prompts of every step, in order: the same for every arm."""
    from tempering.train.cursor import PromptCursor

    fam = long_family()
    tasks = fam.tasks("train", LONG["task"]["train_size"], seed=0)
    cur = PromptCursor(len(tasks), seed)
    return fam, [[tasks[i] for i in cur.next(LONG["prompts_per_step"])] for _ in range(steps)]


def prompt_len(model_dir: str, family, n: int = 2000) -> float:
    """Mean prompt length in tokens over the first `n` training tasks (what every arm prefills)."""
    from tempering.models import load_policy
    from tempering.models.chat import ChatFormat

    fmt = ChatFormat(load_policy(model_dir)[1])
    return st.mean(len(fmt.prompt_ids(t.prompt)) for t in family.tasks("train", n, seed=0))


def tempering_arm(
    model_dir: str,
    fam,
    order: list,
    regime: dict,
    *,
    steps: int,
    seed: int,
    threads: int,
    async_steps: int,
    name: str,
    rollout: dict | None = None,
    loss: dict | None = None,
    eval_every: int = 0,
    after_step=None,
) -> dict:
    """tempering's GRPO arm on `regime` with the prompt order `order` fed in, timed step by step.
    `async_steps=1` generates the next batch during this one's update (one-step off-policy, corrected by
    truncated importance sampling), with the torch threads split between the update and the sampler.
    `after_step(step, trainer)` runs outside the timed step (held-out evaluations)."""
    from tempering.config import build
    from tempering.methods.rl import TrainConfig
    from tempering.recipes.runner import trainer

    group, prompts = regime["group_size"], regime["prompts_per_step"]
    rollout = {
        "group_size": group,
        "prompts_per_step": prompts,
        "max_new_tokens": regime["max_new_tokens"],
        "temperature": 1.0,
        **(rollout or {}),
    }
    loss = {
        "advantage": "grpo",
        "clip_low": 0.2,
        "clip_high": 0.28,
        "loss_agg": "token-mean",
        "micro_batch_size": prompts * group,
        "max_grad_norm": 1.0,
        **(loss or {}),
    }
    run_threads = threads
    if async_steps:  # the update and the sampler run at once: split the cores between them
        run_threads = max(1, threads // 2)
        rollout.update(async_steps=async_steps, async_threads=max(1, threads - run_threads))
        loss["rollout_correction"] = "tis"
    cfg = build(
        TrainConfig,
        {
            "model": {"name": model_dir},
            "task": regime["task"],
            "rollout": rollout,
            "loss": loss,
            "optim": {"lr": regime["lr"], "betas": [0.9, 0.999], "weight_decay": 0.0, "schedule": "constant"},
            "run": {
                "steps": steps,
                "seed": seed,
                "out_dir": f"/tmp/bench_{name}_{os.getpid()}",
                # the steps are driven here, so this sets only where asynchronous rollouts drain
                "eval_every": eval_every,
                "checkpoint_every": 0,
                "log_samples": 0,
                "tensorboard": False,
                "progress": False,
                "threads": run_threads,
            },
        },
    )
    tr = trainer("train", cfg, family=fam, overwrite=True)
    index = {t.id: i for i, t in enumerate(tr.train_tasks)}
    it = iter(order)
    tr.cursor.next = lambda n: [index[t.id] for t in next(it)]  # type: ignore[method-assign]
    keys = ("reward", "response_len", "gen_seconds", "update_seconds", "async/wait_seconds", "async/staleness")
    out: dict = {"step_seconds": [], **{k: [] for k in keys}}
    for step in range(1, steps + 1):
        t0 = time.perf_counter()
        r = asyncio.run(tr.step())
        out["step_seconds"].append(time.perf_counter() - t0)
        for k in keys:
            out[k].append(r.metrics.get(k, 0.0))
        if after_step:
            after_step(step, tr, r)
    tr.close()
    out["rewards"], out["completion_len"] = out.pop("reward"), out.pop("response_len")
    out["wait_seconds"], out["staleness"] = out.pop("async/wait_seconds"), out.pop("async/staleness")
    return out


def arm_long_tempering(model_dir: str, steps: int, seed: int, threads: int, async_steps: int) -> dict:
    fam, order = long_order(steps, seed)
    return tempering_arm(
        model_dir,
        fam,
        order,
        LONG,
        steps=steps,
        seed=seed,
        threads=threads,
        async_steps=async_steps,
        name="long_tempering",
        rollout={"max_context_tokens": 256},
    )


def trl_config(output_dir: str, prompts: int, group: int, max_new: int, lr: float, steps: int, seed: int):
    """TRL's GRPOConfig with every value tempering's arm uses set explicitly (both regimes)."""
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=output_dir,
        per_device_train_batch_size=prompts * group,
        gradient_accumulation_steps=1,
        num_generations=group,
        max_completion_length=max_new,
        learning_rate=lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        adam_beta1=0.9,
        adam_beta2=0.999,
        adam_epsilon=1e-8,
        beta=0.0,
        num_iterations=1,
        epsilon=0.2,
        epsilon_high=0.28,
        loss_type="dapo",
        scale_rewards="group",
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        max_steps=steps,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        gradient_checkpointing=False,  # GRPOConfig turns it on by default; it recomputes the forward
        bf16=False,
        seed=seed,
        shuffle_dataset=False,
        dataloader_num_workers=0,
        max_grad_norm=1.0,
        weight_decay=0.0,
    )


def arm_long_trl(model_dir: str, steps: int, seed: int, threads: int) -> dict:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOTrainer

    from tempering.envs.synthetic import answer_text

    fam, order = long_order(steps, seed)
    by_prompt = {t.prompt: t for step in order for t in step}
    rows = [{"prompt": t.prompt} for step in order for t in step]
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    tok = AutoTokenizer.from_pretrained(model_dir)
    tok.padding_side = "left"

    def reward(prompts, completions, **_):  # the chain family's own verifier, as tempering's episodes use it
        return [fam.check(by_prompt[p], answer_text(c))[0] for p, c in zip(prompts, completions)]

    ends: list[float] = []

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            ends.append(time.perf_counter())

    args = trl_config(
        f"/tmp/bench_long_trl_{os.getpid()}",
        LONG["prompts_per_step"],
        LONG["group_size"],
        LONG["max_new_tokens"],
        LONG["lr"],
        steps,
        seed,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward,
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=tok,
        callbacks=[Clock()],
    )
    t0 = time.perf_counter()
    trainer.train()
    stamps = [t0] + ends
    logs = [h for h in trainer.state.log_history if "reward" in h]
    return {
        "step_seconds": [b - a for a, b in zip(stamps, stamps[1:])],
        "rewards": [h["reward"] for h in logs],
        # TRL counts the EOS token in a completion's length, as tempering does
        "completion_len": [h["completions/mean_length"] for h in logs],
        "torch_threads": torch.get_num_threads(),
    }


def run_arm(arm: str, model_dir: str, steps: int, seed: int, threads: int) -> dict:
    """One arm in its own process (so its peak RSS is its own), with `threads` torch threads."""
    out = Path(f"/tmp/bench_arm_{arm}_{os.getpid()}.json")
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    cmd = [sys.executable, __file__, arm, model_dir, str(steps), str(seed), str(threads), str(out)]
    load_before = os.getloadavg()[0]
    subprocess.run(cmd, check=True, env=env)
    res = json.loads(out.read_text())
    out.unlink()
    res["load_1min"] = [load_before, os.getloadavg()[0]]
    return res


def arm_main(argv: list[str]) -> None:
    """The subprocess side of `run_arm`."""
    import resource

    import torch

    arm, model_dir, steps, seed, threads, out = argv
    steps, seed, threads = int(steps), int(seed), int(threads)
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    if arm == "long-trl":
        res = arm_long_trl(model_dir, steps, seed, threads)
    else:
        res = arm_long_tempering(model_dir, steps, seed, threads, async_steps=int(arm.endswith("async")))
    res["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    Path(out).write_text(json.dumps(res))


# ---- the measurement -----------------------------------------------------------------------------------
def steps_per_s(res: dict) -> float:
    timed = res["step_seconds"][WARMUP_STEPS:]
    return len(timed) / sum(timed)


def measure_long(model_dir: str, steps: int, pairs: int, seed: int, threads: int) -> dict:
    """The long regime's pairs (arms alternated within each pair), summarised under `long_*` keys."""
    raw: dict[str, list[dict]] = {arm: [] for arm in LONG_ARMS}
    for i in range(pairs):
        for arm in LONG_ARMS:
            res = run_arm(arm, model_dir, steps, seed + i, threads)
            raw[arm].append(res)
            print(arm, i, round(steps_per_s(res), 4), res["load_1min"], flush=True)
    sps = {arm: [steps_per_s(r) for r in raw[arm]] for arm in LONG_ARMS}
    sync, asy, trl = (raw[a] for a in LONG_ARMS)
    share = lambda r, k: sum(r[k][WARMUP_STEPS:]) / sum(r["step_seconds"][WARMUP_STEPS:])
    ratios = [t / r for t, r in zip(sps["long-tempering"], sps["long-trl"])]
    speedups = [a / s for a, s in zip(sps["long-tempering-async"], sps["long-tempering"])]
    head = {
        "throughput_ratio_long": st.median(ratios),
        "throughput_ratios_long": ratios,
        "async_speedup_long": st.median(speedups),
        "async_speedups_long": speedups,
        "long_regime": LONG,
        "long_pairs": pairs,
        "long_steps": steps,
        "long_model_prompt_len": prompt_len(model_dir, long_family()),
    }
    for arm in LONG_ARMS:
        key = arm.replace("-", "_")
        head[f"{key}_steps_per_s"] = st.median(sps[arm])
        head[f"{key}_steps_per_s_runs"] = sps[arm]
        head[f"{key}_peak_rss_mb"] = st.median(r["peak_rss_mb"] for r in raw[arm])
        head[f"{key}_completion_len"] = st.median(st.mean(r["completion_len"]) for r in raw[arm])
    for arm, runs in (("long_tempering", sync), ("long_tempering_async", asy)):
        head[f"{arm}_generation_share"] = st.median(share(r, "gen_seconds") for r in runs)
        head[f"{arm}_update_share"] = st.median(share(r, "update_seconds") for r in runs)
    head["long_tempering_async_wait_share"] = st.median(share(r, "wait_seconds") for r in asy)
    head["long_tempering_async_staleness"] = st.mean(x for r in asy for x in r["staleness"][1:])
    head["long_curves"] = {arm: [r["rewards"] for r in raw[arm]] for arm in LONG_ARMS}
    head["long_load_1min"] = {arm: [r["load_1min"] for r in raw[arm]] for arm in LONG_ARMS}
    head["_long_raw"] = raw  # for the FLOP/s fractions; dropped before writing
    return head


FlopsArm = tuple[str, str, int, int, float, int, list[dict]]
"""(arm, model folder, prompts per step, group size, mean prompt length, warm-up steps, runs)."""


def add_flops(head: dict, peak: float, arms: list[FlopsArm]) -> None:
    """`peak_matmul_gflops` and `flops_utilisation` (arm -> median fraction of the peak)."""
    head["peak_matmul_gflops"] = peak / 1e9
    head["flops_utilisation"] = {
        arm: st.median(flops_utilisation(model_shape(model), peak, n, g, p, w, r) for r in runs)
        for arm, model, n, g, p, w, runs in arms
    }


def long_flops_arms(head: dict, model_dir: str) -> list[FlopsArm]:
    """The long regime's entries for `add_flops` (its raw runs leave the JSON here)."""
    raw = head.pop("_long_raw")
    n, g, p = LONG["prompts_per_step"], LONG["group_size"], head["long_model_prompt_len"]
    return [(arm, model_dir, n, g, p, WARMUP_STEPS, raw[arm]) for arm in LONG_ARMS]


def render(head: dict) -> str:
    """The long regime's and the limit's sections of grpo_vs_trl.md, from the JSON's numbers only."""
    out = []
    util = head.get("flops_utilisation", {})
    pct = lambda a: f"{100 * util[a]:.1f}%" if a in util else "n/a"
    if "throughput_ratio_long" in head:
        f = lambda xs: ", ".join(f"{x:.3f}" for x in xs)
        arms = ("long_tempering", "long_tempering_async", "long_trl")
        row = lambda k, spec: " | ".join(format(head[f"{a}_{k}"], spec) for a in arms)
        runs = " | ".join(f(head[f"{a}_steps_per_s_runs"]) for a in arms)
        share = lambda a, k: f"{100 * head[f'{a}_{k}_share']:.0f}%"
        wait = 100 * head["long_tempering_async_wait_share"]
        g = head["long_tempering_generation_share"]
        bound = 1 / max(g, 1 - g)
        beyond = (
            "; the measured speedup is beyond that: under this load, two single-threaded sides (sampler, update) ran "
            "faster than the same work on two threads, one side after the other"
            if head["async_speedup_long"] > bound
            else ""
        )
        out.append(f"""## The long-completion regime

Workload: `{LONG["model"]}` (14M parameters) at its seeded random initialisation on `chain` (sums worked step by
step), {LONG["prompts_per_step"]} prompts x {LONG["group_size"]} completions per step, at most {LONG["max_new_tokens"]} new tokens, temperature 1,
lr {LONG["lr"]} constant, the clip, loss and optimizer settings above, {head["long_steps"]} steps of which the first
{WARMUP_STEPS} is not timed, the same prompt order in every arm, {head["long_pairs"]} pairs (seeds {head["seed"]}..{head["seed"] + head["long_pairs"] - 1}), run before the short regime's pairs. It measures
throughput: an untrained model writes until EOS or the limit, so completions are long and their length is the
model's, the same distribution in every arm (mean tokens per completion below); the reward stays near 0 and
no arm learns in so few steps. Per pair the arms run in the order tempering, tempering asynchronous
(`rollout.async_steps=1`, `loss.rollout_correction=tis`, 1 torch thread for the update and 1 for the sampler), TRL.
Prompts are {head["long_model_prompt_len"]:.0f} tokens on average.

| | tempering | tempering async (k = 1) | TRL GRPOTrainer |
| --- | --- | --- | --- |
| steps/s (median) | {row("steps_per_s", ".4f")} |
| steps/s per run | {runs} |
| tokens per completion (median of run means) | {row("completion_len", ".0f")} |
| model FLOP/s, share of the measured peak | {pct("long-tempering")} | {pct("long-tempering-async")} | {pct("long-trl")} |
| peak RSS, MB (median) | {row("peak_rss_mb", ".0f")} |

- tempering / TRL: {head["throughput_ratio_long"]:.2f}x (paired ratios {f(head["throughput_ratios_long"])}); goal 2x:
  {"met" if head["throughput_ratio_long"] >= 2 else "not met"}.
- asynchronous / synchronous: {head["async_speedup_long"]:.2f}x (paired {f(head["async_speedups_long"])}); mean staleness
  {head["long_tempering_async_staleness"]:.2f} updates. Hiding generation ({share("long_tempering", "generation")} of a synchronous step) behind the
  update could give at most {bound:.2f}x{beyond}.
- Where the time goes (median share of the timed steps): synchronous: generation
  {share("long_tempering", "generation")}, update {share("long_tempering", "update")}; asynchronous: generation (in the
  producer, overlapping the update) {share("long_tempering_async", "generation")}, update
  {share("long_tempering_async", "update")}, the trainer waiting for its batch {wait:.0f}%.
""")
    if util:
        rows = "\n".join(f"| {arm} | {100 * v:.1f}% |" for arm, v in util.items())
        out.append(f"""## Distance to the machine's limit

fp32 matmul peak measured in this run (1024^3, {head["threads"]} threads, the best of 3 s, before and after the
runs): {head["peak_matmul_gflops"]:.0f} GFLOP/s, on a machine whose 1-minute load average had median
{head["load_1min_median"]:.1f} (range {head["load_1min_range"][0]:.1f} to {head["load_1min_range"][1]:.1f}) around the runs. Each arm's model FLOP/s is
the minimum arithmetic of its steps (generation with each prompt once per group, then one forward and backward
over the same tokens: 8 x parameters per token plus attention, from the completion lengths it sampled) over its
timed steps; every arm is charged the same work for the same tokens.

| arm | model FLOP/s / peak |
| --- | --- |
{rows}

""")
    return "\n".join(out)


if __name__ == "__main__":
    arm_main(sys.argv[1:])
