"""tinker-cookbook's own loops against `tempering serve tinker`, and rl_loop's speed beside `tempering train`.

    flock /tmp/tempering-timing.lock .venv/bin/python benchmarks/tinker_service.py [--rl-steps 4] [--repeats 2]
        [--reward-steps 20] [--seeds 0 1 2] [--reward-only]

On the tiny model (`tiny-s`, seeded random weights, served under the cookbook's name meta-llama/Llama-3.2-1B)
and local data in the recipes' formats (`tempering.serve.tinker.cookbook`):
- `sl_loop.py` as it ships: its logged train_mean_nll at the first and the last step;
- `rl_loop.py` as it ships on a tiny model warm-started by `tempering pretrain` on the sums as rl_loop
  renders them (`cookbook.warm_start`, cached under .tempering-cache/), for `--reward-steps` steps, once per
  service seed (`--seeds`): its reward per step, the mean of the first and of the last `WINDOW` steps, and
  whether the last are higher by the shared statistics rule (`tempering.experiments.judge`);
- the sampler's log-probs against the trainer's, through the SDK on that model: a LoRA client takes a step,
  its sampling client samples, and the same tokens go through `forward` (the largest absolute difference);
- `rl_loop.py` as it ships (importance_sampling, 4 prompts x 4 samples, 16 new tokens): its reward per step
  and its own per-step time; alternated, `repeats` times, with `tempering train` on the same model, LoRA rank,
  batch and token limit (arithmetic prompts, much shorter than rl_loop's few-shot GSM8K prompt: the table
  gives both prompt lengths). Steps/s is 1 / the median step time after the first step;
- the cookbook's `rl/train.py` main loop on tempering's arithmetic family (`tempering.integrations.cookbook`,
  examples/tinker/cookbook_rl_arithmetic.py) beside `tempering train` on the same family, model, LoRA rank,
  batch, token limit and learning rate, alternated over `--seeds`: steps/s and the mean reward of each step.
Writes docs/results/tinker.md and tinker.json; the load average and matmul peak are measured in the run.
`--reward-only` measures only the warm-started rl_loop (and the log-probs) and keeps the stored JSON's other
measurements; the page gives each part's own command and machine conditions.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import runpy
import statistics as st
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

import numpy as np

from tempering.experiments import Arm, claims_table, judge
from tempering.progress import conditions, conditions_text
from tempering.serve.tinker import cookbook as local
from tempering.serve.tinker.app import NOT_IMPLEMENTED

ROOT = Path(__file__).resolve().parents[1]
MODEL, NAME = "tiny-s", "meta-llama/Llama-3.2-1B"
PROMPTS, GROUP, MAX_TOKENS, RANK = 4, 4, 16, 8
TESTS = ROOT / "tests" / "serve" / "test_tinker.py"
EXAMPLE = ROOT / "examples" / "tinker" / "cookbook_rl_arithmetic.py"
ENV_LR = 3e-4
"""Learning rate of both arms on the arithmetic family (tempering's advice for a tiny model from scratch)."""
CACHE = ROOT / ".tempering-cache" / "tinker"
REWARD_LR = 1e-3
"""rl_loop's learning rate on the warm-started tiny model (its default, 4e-5, is for billions of weights)."""
WINDOW = 3
"""Steps averaged at each end of a warm-started rl_loop run."""


def logprob_max_diff(url: str) -> float:
    import tinker
    from tinker import types

    tc = tinker.ServiceClient(base_url=url).create_lora_training_client(base_model=NAME, rank=RANK).result()
    tok = tc.get_tokenizer()
    ids = tok.encode("What is 3 + 4? 3 + 4 = 7.", add_special_tokens=False)
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(ids[:-1]),
        loss_fn_inputs={"target_tokens": ids[1:], "weights": [1.0] * (len(ids) - 1)},
    )
    tc.forward_backward([datum], "cross_entropy").result()
    tc.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    sampler = tc.save_weights_and_get_sampling_client().result()
    prompt = ids[:8]
    res = sampler.sample(
        types.ModelInput.from_ints(prompt),
        num_samples=GROUP,
        sampling_params=types.SamplingParams(max_tokens=MAX_TOKENS, seed=0),
    ).result()
    worst = 0.0
    for seq in res.sequences:
        full = prompt + seq.tokens
        d = types.Datum(
            model_input=types.ModelInput.from_ints(full[:-1]),
            loss_fn_inputs={"target_tokens": full[1:], "weights": [0.0] * (len(full) - 1)},
        )
        trainer = np.asarray(tc.forward([d], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].data)[
            len(prompt) - 1 :
        ]
        worst = max(worst, float(np.abs(np.asarray(seq.logprobs) - trainer).max()))
    return worst


def rl_loop(url: str, folder: Path, steps: int, tag: str, *args: str) -> dict:
    rows = local.run_loop(
        "rl_loop", folder, url, NAME, f"batch_size={PROMPTS}", f"group_size={GROUP}", f"max_tokens={MAX_TOKENS}",
        f"max_steps={steps}", "loss_fn=importance_sampling", f"lora_rank={RANK}", *args, log=tag,
    )  # fmt: skip
    return {"rewards": [r["reward/total"] for r in rows], "step_seconds": [r["time/total"] for r in rows]}


def rl_reward(work: Path, steps: int, seeds: list[int]) -> dict:
    """rl_loop.py on the warm-started tiny model, one fresh service per seed (the samplers' seed); the
    log-probs compared on the first."""
    model = local.warm_start(CACHE, NAME)
    made = json.loads((model / "warm_start.json").read_text())
    runs, diff = [], None
    for seed in seeds:
        with local.serving(work / f"warm{seed}", {NAME: str(model)}, "threads=2", f"seed={seed}") as url:
            folder = local.prepare(work / f"warm{seed}-run", work / f"warm{seed}", NAME)
            runs.append(rl_loop(url, folder, steps, "rl", f"learning_rate={REWARD_LR}"))
            if diff is None:
                diff = logprob_max_diff(url)
    first = {s: st.mean(r["rewards"][:WINDOW]) for s, r in zip(seeds, runs)}
    last = {s: st.mean(r["rewards"][-WINDOW:]) for s, r in zip(seeds, runs)}
    on = f"rl_loop's sums, {PROMPTS} prompts x {GROUP} samples per step"
    claim = judge(Arm(f"last {WINDOW} steps", last, on, None), Arm(f"first {WINDOW} steps", first, on, None))
    return {
        "steps": len(runs[0]["rewards"]),  # at most `steps`: rl_loop stops at the end of its dataset
        "steps_asked": steps,
        "window": WINDOW,
        "seeds": seeds,
        "learning_rate": REWARD_LR,
        "reward_first": st.mean(first.values()),
        "reward_last": st.mean(last.values()),
        "reward_first_per_seed": list(first.values()),
        "reward_last_per_seed": list(last.values()),
        "logprob_max_diff": diff,
        "warm_start": {k: made[k] for k in ("heldout_pass@1", "steps", "seconds", "settings")},
        "runs": runs,
        "claim": claim,
    }


def cookbook_train(url: str, folder: Path, steps: int, seed: int) -> dict:
    """The cookbook's rl/train.py main loop on the arithmetic family, through the service at `url`."""
    example = runpy.run_path(str(EXAMPLE))
    log = folder / f"cookbook{seed}"
    cfg = example["config"](
        log, url, steps, seed, family_args={}, batch_size=PROMPTS, group_size=GROUP, max_tokens=MAX_TOKENS,
        learning_rate=ENV_LR, lora_rank=RANK,
    )  # fmt: skip
    asyncio.run(example["train"].main(cfg))
    rows, _ = example["logged"](log)
    return {"rewards": [r["env/all/reward/total"] for r in rows], "step_seconds": [r["time/total"] for r in rows]}


def tempering_train(folder: Path, steps: int, *settings: str) -> dict:
    out = folder / "train"
    cmd = [
        sys.executable, "-m", "tempering.cli", "train", f"model.name={MODEL}", f"model.lora_rank={RANK}",
        f"rollout.prompts_per_step={PROMPTS}", f"rollout.group_size={GROUP}", f"rollout.max_new_tokens={MAX_TOKENS}",
        f"run.steps={steps}", "task.heldout_size=8", "run.eval_every=0", "run.progress=false",
        f"run.out_dir={out}", "--overwrite", *settings,
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if done.returncode:
        raise RuntimeError(f"tempering train failed:\n{done.stderr[-3000:]}")
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if "step_seconds" in r]
    return {"rewards": [r["reward"] for r in rows], "step_seconds": [r["step_seconds"] for r in rows]}


def steps_per_s(run: dict) -> float:
    return 1.0 / st.median(run["step_seconds"][1:] or run["step_seconds"])


def prompt_tokens(folder: Path) -> dict[str, float]:
    """Prompt lengths of the two arms, in the tiny model's tokens (characters)."""
    from tinker_cookbook import renderers
    from tinker_cookbook.tokenizer_utils import get_tokenizer

    from tempering.envs.arithmetic import ArithmeticFamily
    from tempering.models.tokenizer import char_tokenizer

    cwd = os.getcwd()
    os.chdir(folder)
    try:
        renderer = renderers.get_renderer("role_colon", get_tokenizer(NAME))
    finally:
        os.chdir(cwd)
    rl = len(local.rl_loop_prompt(renderer, local.question(3, 4)))
    tasks = ArithmeticFamily().tasks("train", 8, seed=0)
    ours = st.mean(len(char_tokenizer().encode(t.prompt)) for t in tasks)
    return {"rl_loop": float(rl), "tempering_train": float(ours)}


CALLS = [
    "ServiceClient.get_server_capabilities",
    "ServiceClient.create_lora_training_client",
    "ServiceClient.create_training_client_from_state",
    "ServiceClient.create_training_client_from_state_with_optimizer",
    "ServiceClient.create_sampling_client",
    "TrainingClient.get_info",
    "TrainingClient.get_tokenizer",
    "TrainingClient.forward",
    "TrainingClient.forward_backward",
    "TrainingClient.forward_backward_custom",
    "TrainingClient.optim_step",
    "TrainingClient.save_state",
    "TrainingClient.load_state",
    "TrainingClient.load_state_with_optimizer",
    "TrainingClient.save_weights_for_sampler",
    "TrainingClient.save_weights_and_get_sampling_client",
    "SamplingClient.sample",
    "SamplingClient.compute_logprobs",
]
"""The SDK calls the service answers (app.py: IMPLEMENTED lists the routes behind them)."""


def calls() -> dict[str, dict[str, bool]]:
    """Each SDK call: answered by the service, and called by name in its tests (tests/serve/test_tinker.py)."""
    source = TESTS.read_text()
    refused = [c.split(" ")[0] for c in NOT_IMPLEMENTED.values() if c.split(" ")[0].count(".") == 1]
    out = {c: {"implemented": True, "tested": f".{c.split('.')[1]}(" in source} for c in CALLS}
    out.update({c: {"implemented": False, "tested": f".{c.split('.')[1]}(" in source or c in source} for c in refused})
    return out


def rewrite(path: Path) -> None:
    """The calls and the page again from a stored JSON (after the tests changed; the measurements stay)."""
    res = json.loads(path.read_text())
    res["calls"] = calls()
    path.write_text(json.dumps(res, indent=1) + "\n")
    path.with_suffix(".md").write_text(table(res, conditions_text(res["machine"]["start"], res["machine"]["end"])))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rl-steps", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--env-steps", type=int, default=4, help="steps of each arm on the arithmetic family")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--out", default=str(ROOT / "docs" / "results"))
    ap.add_argument("--reward-steps", type=int, default=20, help="steps of rl_loop on the warm-started model")
    ap.add_argument("--calls-only", action="store_true", help="only rewrite the calls table of the stored JSON")
    ap.add_argument("--reward-only", action="store_true", help="only measure the warm-started rl_loop")
    a = ap.parse_args()
    if a.calls_only:
        return rewrite(Path(a.out) / "tinker.json")
    os.environ.setdefault("TINKER_API_KEY", local.OFFLINE["TINKER_API_KEY"])  # the SDK wants one; none is checked
    command = "flock /tmp/tempering-timing.lock .venv/bin/python benchmarks/tinker_service.py " + " ".join(sys.argv[1:])
    start = conditions()
    with tempfile.TemporaryDirectory(prefix="tinker-bench-") as tmp:
        reward = rl_reward(Path(tmp), a.reward_steps, a.seeds)
    reward["machine"] = {"start": start, "end": conditions()}
    reward["command"] = command
    if a.reward_only:
        res = json.loads((Path(a.out) / "tinker.json").read_text())
        t = res["throughput_vs_tempering_train"]
        t.setdefault("rl_loop_runs", res["rl_loop"].get("runs"))  # a JSON from before the warm start
        res["rl_loop"] = reward
        res["calls"] = calls()
        (Path(a.out) / "tinker.json").write_text(json.dumps(res, indent=1) + "\n")
        return rewrite(Path(a.out) / "tinker.json")
    with tempfile.TemporaryDirectory(prefix="tinker-bench-") as tmp:
        work = Path(tmp)
        with local.serving(work / "state", {NAME: MODEL}, "threads=2") as url:
            folder = local.prepare(work / "run", work / "state", NAME)
            sl = local.run_loop(
                "sl_loop", folder, url, NAME, "batch_size=8", "max_steps=4", f"lora_rank={RANK}", "learning_rate=3e-3"
            )
            rl_runs, ours = [], []
            for i in range(a.repeats):  # alternated: rl_loop on the service, then tempering train
                rl_runs.append(rl_loop(url, folder, a.rl_steps, f"rl{i}"))
                ours.append(tempering_train(work, a.rl_steps))
            lengths = prompt_tokens(folder)
            local.register_tokenizer(work / "state", NAME)
            cookbook_runs, env_ours = [], []
            for seed in a.seeds:  # alternated: the cookbook's loop on the family, then tempering train on it
                cookbook_runs.append(cookbook_train(url, work, a.env_steps, seed))
                env_ours.append(tempering_train(work, a.env_steps, f"run.seed={seed}", f"optim.lr={ENV_LR}"))
    end = conditions()
    rl_speed = [steps_per_s(r) for r in rl_runs]
    our_speed = [steps_per_s(r) for r in ours]
    res = {
        "sdk_version": version("tinker"),
        "cookbook_version": version("tinker-cookbook"),
        "calls": calls(),
        "rl_loop": reward,
        "sl_loop": {
            "loss_first": sl[0]["train_mean_nll"],
            "loss_last": sl[-1]["train_mean_nll"],
            "train_mean_nll": [r["train_mean_nll"] for r in sl],
        },
        "throughput_vs_tempering_train": {
            "rl_loop_steps_per_s": rl_speed,
            "tempering_train_steps_per_s": our_speed,
            "ratio_median": st.median(r / o for r, o in zip(rl_speed, our_speed)),
            "rl_loop_runs": rl_runs,
            "tempering_train_runs": ours,
            "prompt_tokens": lengths,
        },
        "environment_loop": {
            "family": "arithmetic",
            "steps": a.env_steps,
            "seeds": a.seeds,
            "learning_rate": ENV_LR,
            "cookbook_train": cookbook_runs,
            "tempering_train": env_ours,
            "cookbook_steps_per_s": [steps_per_s(r) for r in cookbook_runs],
            "tempering_train_steps_per_s": [steps_per_s(r) for r in env_ours],
            "ratio_median": st.median(steps_per_s(c) / steps_per_s(o) for c, o in zip(cookbook_runs, env_ours)),
            "reward_last_cookbook": [r["rewards"][-1] for r in cookbook_runs],
            "reward_last_tempering_train": [r["rewards"][-1] for r in env_ours],
        },
        "setup": {
            "model": MODEL,
            "served_as": NAME,
            "prompts": PROMPTS,
            "group": GROUP,
            "max_tokens": MAX_TOKENS,
            "lora_rank": RANK,
            "repeats": a.repeats,
        },
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "start": start, "end": end},
        "command": command,
        "date": time.strftime("%Y-%m-%d"),
    }
    out = Path(a.out)
    (out / "tinker.json").write_text(json.dumps(res, indent=1) + "\n")
    (out / "tinker.md").write_text(table(res, conditions_text(start, end)))


def table(r: dict, machine: str) -> str:
    t, rl, sl, s = r["throughput_vs_tempering_train"], r["rl_loop"], r["sl_loop"], r["setup"]
    w = rl["warm_start"]
    moved = (
        ""
        if rl["claim"]["verdict"] == "reproduced"
        else " rl_loop grades right answers at every seed (the groups have advantages and it trains), but over "
        f"{rl['steps']} steps its reward does not rise beyond the spread of its seeds (the rule below)."
    )
    reward_rows = "\n".join(
        f"| {seed} | {a:.3f} | {b:.3f} | {' '.join(f'{x:.2f}' for x in run['rewards'])} |"
        for seed, a, b, run in zip(rl["seeds"], rl["reward_first_per_seed"], rl["reward_last_per_seed"], rl["runs"])
    )
    e = r["environment_loop"]
    env_rows = "\n".join(
        f"| {seed} | {a:.3f} | {b:.3f} | {a / b:.2f} | {ra:.3f} | {rb:.3f} |"
        for seed, a, b, ra, rb in zip(
            e["seeds"], e["cookbook_steps_per_s"], e["tempering_train_steps_per_s"],
            e["reward_last_cookbook"], e["reward_last_tempering_train"],
        )
    )  # fmt: skip
    rows = "\n".join(
        f"| `{k}` | {'yes' if v['implemented'] else 'no (404 naming it)'} | {'yes' if v['tested'] else 'no'} |"
        for k, v in r["calls"].items()
    )
    pairs = "\n".join(
        f"| {i + 1} | {a:.3f} | {b:.3f} | {a / b:.2f} |"
        for i, (a, b) in enumerate(zip(t["rl_loop_steps_per_s"], t["tempering_train_steps_per_s"]))
    )
    return f"""# tinker-cookbook's loops on `tempering serve tinker`

`{r["command"]}` ({r["date"]}; tinker {r["sdk_version"]}, tinker-cookbook {r["cookbook_version"]}). Model: `{s["model"]}`
(seeded random weights, except where warm-started) served as `{s["served_as"]}`; local data in the recipes' formats
(`tempering.serve.tinker.cookbook`). Machine: {r["machine"]["cpus"]} CPUs, {machine}. The machine is shared:
other jobs ran during this run, so only the ratios within it compare.

## The loops, unchanged

| loop | first | last |
|---|---|---|
| `sl_loop.py`, train_mean_nll, {len(sl["train_mean_nll"])} steps | {sl["loss_first"]:.4f} | {sl["loss_last"]:.4f} |

## rl_loop.py on a warm-started tiny model

`{rl["command"]}`; machine: {conditions_text(rl["machine"]["start"], rl["machine"]["end"])}.

rl_loop.py as it ships (importance_sampling, {s["prompts"]} prompts x {s["group"]} samples, at most {s["max_tokens"]} new tokens,
LoRA rank {s["lora_rank"]}, learning rate {rl["learning_rate"]:g}) for {rl["steps"]} steps, once per service seed (the
samplers' seed), on `{s["model"]}` warm-started by `tempering pretrain` on the local dataset's sums as rl_loop
renders them (its role_colon prompt, few-shot example and question suffix), answered ` \\boxed{{N}}`
(`tempering.serve.tinker.cookbook.warm_start`: {w["steps"]} steps, {w["seconds"]:.0f} s, greedy accuracy on the sums
{w["heldout_pass@1"]:.3f}). Reward: rl_loop's own `reward/total` (its GSM8K grader on the `\\boxed{{}}` answer), the
mean over the first and the last {rl["window"]} steps.

| seed | first {rl["window"]} steps | last {rl["window"]} steps | every step |
|---|---|---|---|
{reward_rows}

Mean over seeds: {rl["reward_first"]:.3f} (first), {rl["reward_last"]:.3f} (last).{moved}

{chr(10).join(claims_table({"rl_loop's reward rises over its run": rl["claim"]}))}

Sampled log-probs against the trainer's forward on the same tokens (SDK, warm-started model, after one
optimizer step): largest absolute difference {rl["logprob_max_diff"]:.2e}.

## rl_loop.py beside `tempering train`

Same model (`{s["model"]}`, random), LoRA rank {s["lora_rank"]}, {s["prompts"]} prompts x {s["group"]} samples, at most {s["max_tokens"]} new tokens,
alternated {s["repeats"]} times; steps/s = 1 / median step time after the first step (rl_loop's own
`time/total`, `tempering train`'s `step_seconds`). The prompts differ: rl_loop's few-shot GSM8K prompt is
{t["prompt_tokens"]["rl_loop"]:.0f} tokens, `tempering train`'s arithmetic prompt {t["prompt_tokens"]["tempering_train"]:.0f}.

| pair | rl_loop.py steps/s | tempering train steps/s | ratio |
|---|---|---|---|
{pairs}

Median ratio: {t["ratio_median"]:.2f}.

## The cookbook's rl/train.py on a tempering environment, beside `tempering train`

The cookbook's main RL loop (`tinker_cookbook.rl.train.main`, importance_sampling, through the service) on
tempering's `arithmetic` family (`tempering.integrations.cookbook.TemperingDatasetBuilder`, role_colon
renderer), and `tempering train` (ppo_clip: on-policy, one update per batch, its ratio is 1 as importance_sampling's) on the
same family, model, LoRA rank {s["lora_rank"]}, {s["prompts"]} prompts x {s["group"]} samples, at most
{s["max_tokens"]} new tokens, learning rate {e["learning_rate"]:g}, {e["steps"]} steps, alternated per seed.
Steps/s as above (the cookbook's `time/total`); reward: the mean verifier score of the last step's episodes.

| seed | cookbook loop steps/s | tempering train steps/s | ratio | cookbook reward, last step | tempering train reward, last step |
|---|---|---|---|---|---|
{env_rows}

Median ratio: {e["ratio_median"]:.2f}. Largest mean reward of any step, any seed: {max(x for c in e["cookbook_train"] for x in c["rewards"]):.3f}
(cookbook loop), {max(x for c in e["tempering_train"] for x in c["rewards"]):.3f} (`tempering train`); the tiny model's weights are random.

## API calls

| call | implemented | tested |
|---|---|---|
{rows}
"""


if __name__ == "__main__":
    main()
