"""GRPO on a reasoning-gym composite with the built-in tiny model: held-out per generator before and after.

Per seed:
  1. warm start: tiny-s pre-trained (supervised, `tempering pretrain`) on the composite's reference
     answers (`<answer>ORACLE</answer>`) for a fixed number of steps. A randomly initialised model
     never closes an answer tag, so every group would score 0 and GRPO would have no signal;
  2. GRPO from there on the same composite (`run("train", ...)`), the package's scores as rewards;
  3. before (the warm start) and after (the RL model): greedy pass@1 and mean score on each
     generator's own held-out split. A question is held out by its hash (the family's rule), so the
     composite's train split never holds a held-out question, and the held-out items are the same for
     every seed.
Finished stages are reused when the script runs again with the same --out.

    python examples/reasoning_gym/grpo_composite.py --seeds 0 1 2 --results docs/results
    python examples/reasoning_gym/grpo_composite.py --quick          # a smoke test, about 2 minutes
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

import torch

from tempering.config import build
from tempering.envs.reasoning_gym import ReasoningGymFamily
from tempering.evaluation import evaluate
from tempering.experiments import conditions, conditions_text, machine, mean_sd, write_results
from tempering.methods.pretrain import PretrainConfig, pretrain
from tempering.models import load_policy
from tempering.models.chat import ChatFormat
from tempering.recipes.runner import run
from tempering.rollout.engine import RolloutOptions
from tempering.rollout.sampler import HFSampler, SamplingParams
from tempering.runlog import atomic_write_text

GENERATORS = {
    "chain_sum": {"min_terms": 2, "max_terms": 3, "min_digits": 1, "max_digits": 1},  # exact integer answers
    "spell_backward": {"min_word_len": 3, "max_word_len": 3},  # partial credit per letter in place
    "letter_counting": {"min_words": 2, "max_words": 3},  # a count of one letter in two or three words
}
"""Short questions with bare answers of 1 to 3 characters, within reach of a character-level tiny model
(single-digit terms: with 2-digit terms a pilot left chain_sum near 0 before and after)."""
TEMPLATE = "{question}\nGive the answer in <answer></answer> tags."
"""Shorter than the family's default (the tiny model reads characters), asking for the same tags."""
TASK = {
    "family": "reasoning_gym",
    "args": {"name": {g: 1 for g in GENERATORS}, "config": GENERATORS, "prompt_template": TEMPLATE},
    "train_size": 2000,
    "heldout_size": 30,  # the runs' own checks; the table's numbers are per generator, below
}
MAX_NEW_TOKENS = 22  # `<answer>` + 3 characters + `</answer>` + end of sequence
MODEL = "tiny-s"


def cached(out: Path, fn) -> dict:
    """Run a stage once: its summary.json marks it finished."""
    done = out / "summary.json"
    if done.is_file():
        return json.loads(done.read_text())
    t0 = time.perf_counter()
    res = fn()
    res["seconds"] = time.perf_counter() - t0
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(done, json.dumps(res, indent=2) + "\n")
    return res


def pretrain_config(out: Path, seed: int, steps: int) -> dict:
    return {
        "model": {"name": MODEL},
        "task": TASK,
        "run": {
            "steps": steps,
            "eval_every": 0,
            "checkpoint_every": 0,
            "seed": seed,
            "out_dir": str(out),
            "progress": False,
            "threads": 1,
        },
        "rollout": {"prompts_per_step": 64, "max_new_tokens": MAX_NEW_TOKENS},
        "optim": {"lr": 1e-3},
    }


def grpo_config(model: str, out: Path, seed: int, a) -> dict:
    return {
        "model": {"name": model},
        "task": TASK,
        "rollout": {
            "group_size": a.group_size,
            "prompts_per_step": a.prompts,
            "max_new_tokens": MAX_NEW_TOKENS,
            "temperature": 1.0,
        },
        "loss": {"advantage": "grpo", "clip_low": 0.2, "clip_high": 0.28, "loss_agg": "token-mean"},
        "optim": {"lr": a.lr},
        "run": {
            "steps": a.steps,
            "seed": seed,
            "out_dir": str(out),
            "eval_every": 0,
            "eval_on_start": False,
            "eval_k": 1,
            "checkpoint_every": 0,
            "log_samples": 1,
            "tensorboard": False,
            "progress": False,
            "threads": 1,
        },
    }


def heldout(model: str, n: int) -> dict:
    """Greedy pass@1 and mean score on each generator's own held-out split (data seed 0)."""
    m, tok = load_policy(model, seed=0)
    sampler = HFSampler(m, tok, seed=0)
    fmt = ChatFormat(tok, None)
    opts = RolloutOptions(sampling=SamplingParams(max_new_tokens=MAX_NEW_TOKENS, temperature=0.0))
    out = {}
    for g, conf in GENERATORS.items():
        fam = ReasoningGymFamily(g, config=conf, prompt_template=TEMPLATE)
        ev = asyncio.run(evaluate(sampler, fmt, fam, fam.tasks("heldout", n, seed=0), opts, k=1, sampled=False))
        out[g] = {"pass@1": ev["pass@1"], "score": ev["score"]}
    return out


def constant_answer(n: int) -> dict:
    """Each generator's most common held-out answer and its pass@1 and score when given to every
    question: the floor a model reaches without reading the question."""
    out = {}
    for g, conf in GENERATORS.items():
        fam = ReasoningGymFamily(g, config=conf, prompt_template=TEMPLATE)
        tasks = fam.tasks("heldout", n, seed=0)
        answers = [str(t.meta["entry"]["answer"]) for t in tasks]
        top = max(sorted(set(answers)), key=answers.count)  # ties: the first in sorted order
        scores = [float(fam.scorer.score_answer(top, t.meta["entry"])) for t in tasks]
        out[g] = {"answer": top, "pass@1": sum(x >= 1.0 for x in scores) / n, "score": sum(scores) / n}
    return out


def train_reward(run_dir: Path, k: int = 10) -> dict:
    """Mean training reward and success of the first and last k GRPO steps (on the policy's samples)."""
    rows = [json.loads(ln) for ln in (run_dir / "metrics.jsonl").read_text().splitlines() if ln.strip()]
    steps = [r for r in rows if "reward" in r]
    avg = lambda rs, key: sum(r[key] for r in rs) / len(rs)
    return {
        f"{key}_{w}{k}": avg(rs, key)
        for key in ("reward", "success")
        for w, rs in (("first", steps[:k]), ("last", steps[-k:]))
    }


def one_seed(root: Path, seed: int, a) -> dict:
    pt = cached(
        root / "pretrain",
        lambda: {
            k: v
            for k, v in pretrain(
                build(PretrainConfig, pretrain_config(root / "pretrain", seed, a.pretrain_steps))
            ).items()
            if k in ("model", "steps", "heldout_pass@1")
        },
    )
    rl = cached(
        root / "grpo",
        lambda: {
            "model": str(root / "grpo" / "final"),
            "final": run("train", grpo_config(pt["model"], root / "grpo", seed, a))["final"],
        },
    )
    before = cached(root / "eval_before", lambda: {"per_generator": heldout(pt["model"], a.heldout)})
    after = cached(root / "eval_after", lambda: {"per_generator": heldout(rl["model"], a.heldout)})
    return {
        "seed": seed,
        "pretrain_seconds": pt["seconds"],
        "pretrain_steps": pt["steps"],
        "grpo_seconds": rl["seconds"],
        "grpo_train": train_reward(root / "grpo") if (root / "grpo" / "metrics.jsonl").is_file() else {},
        "eval_seconds": before["seconds"] + after["seconds"],
        "before": before["per_generator"],
        "after": after["per_generator"],
    }


def summarize(rows: list[dict], a, command: str, start: dict, end: dict | None) -> dict:
    def block(get) -> dict:
        b, f = [get(r["before"]) for r in rows], [get(r["after"]) for r in rows]
        (bm, bs), (am, as_), (dm, ds) = mean_sd(b), mean_sd(f), mean_sd([y - x for x, y in zip(b, f)])
        return {
            "before_mean": bm,
            "before_std": bs,
            "after_mean": am,
            "after_std": as_,
            "change_mean": dm,  # paired: same seed, same warm start
            "change_std": ds,
            "seeds_up": sum(y > x for x, y in zip(b, f)),
            "seeds_down": sum(y < x for x, y in zip(b, f)),
            "per_seed": [{"seed": r["seed"], "before": x, "after": y} for r, x, y in zip(rows, b, f)],
        }

    per = {
        g: {"pass@1": block(lambda e, g=g: e[g]["pass@1"]), "score": block(lambda e, g=g: e[g]["score"])}
        for g in GENERATORS
    }
    # the flat keys are pass@1; score sits beside them
    per_generator = {g: {**v["pass@1"], "score": v["score"]} for g, v in per.items()}
    mean_over = lambda key: lambda e: sum(e[g][key] for g in GENERATORS) / len(GENERATORS)
    overall = {"pass@1": block(mean_over("pass@1")), "score": block(mean_over("score"))}
    return {
        "generators": GENERATORS,
        "seeds": [r["seed"] for r in rows],
        "per_generator": per_generator,
        "overall": overall,
        "constant_answer": constant_answer(a.heldout),
        "budget": {
            "model": MODEL,
            "pretrain_steps": a.pretrain_steps,
            "pretrain_batch_size": 64,
            "grpo_steps": a.steps,
            "prompts_per_step": a.prompts,
            "group_size": a.group_size,
            "lr": a.lr,
            "max_new_tokens": MAX_NEW_TOKENS,
            "heldout_per_generator": a.heldout,
            "train_size": TASK["train_size"],
            "prompt_template": TEMPLATE,
        },
        "seconds": {
            "pretrain": mean_sd([r["pretrain_seconds"] for r in rows]),
            "grpo": mean_sd([r["grpo_seconds"] for r in rows]),
            "wall_total": sum(r["pretrain_seconds"] + r["grpo_seconds"] + r["eval_seconds"] for r in rows),
        },
        "runs": rows,
        "command": command,
        "machine": machine(),
        "conditions": {"start": start, "end": end},
    }


def markdown(d: dict, notes: str | None) -> str:
    b, n = d["budget"], len(d["seeds"])
    cell = lambda m, s: f"{m:.3f} ± {s:.3f}"
    lines = [
        "# GRPO on a reasoning-gym composite (tiny model)",
        "",
        f"Command: `{d['command']}`  ",
        f"Seeds: {', '.join(map(str, d['seeds']))}  ",
        f"Machine: {d['machine']}; {conditions_text(d['conditions']['start'], d['conditions']['end'])}",
        "",
        f"Composite (`task.family=reasoning_gym`, equal weights) of {len(d['generators'])} generators:",
        "",
        *[f"- `{g}` {json.dumps(c)}" for g, c in d["generators"].items()],
        "",
        f"Per seed: {b['model']} warm-started by `tempering pretrain` on the composite's reference answers "
        f"({b['pretrain_steps']} steps x {b['pretrain_batch_size']} examples; a random tiny model never writes a "
        "closed `<answer>` tag, so GRPO would see only zero-reward groups), then GRPO for "
        f"{b['grpo_steps']} steps of {b['prompts_per_step']} prompts x {b['group_size']} samples (lr {b['lr']}, "
        f"temperature 1, {b['max_new_tokens']} new tokens), the package's `score_answer` as the reward and full "
        f"marks as success. Prompt: `{b['prompt_template']!r}`. Held-out: {b['heldout_per_generator']} questions "
        "of each generator's own held-out split (by question hash, never in the composite's train split; the "
        "same for every seed), greedy. pass@1 is the share scored 1.0; score is the mean of the package's "
        "score (partial credit: spell_backward per letter in place, the others for an answer holding the "
        "oracle).",
        "",
        "| generator | pass@1 before | pass@1 after | score before | score after |",
        "| --- | --- | --- | --- | --- |",
    ]
    rows = [(g, v, v["score"]) for g, v in d["per_generator"].items()]
    rows.append(("mean of the generators", d["overall"]["pass@1"], d["overall"]["score"]))
    for g, p, s in rows:
        lines.append(
            f"| {g} | {cell(p['before_mean'], p['before_std'])} | {cell(p['after_mean'], p['after_std'])} | "
            f"{cell(s['before_mean'], s['before_std'])} | {cell(s['after_mean'], s['after_std'])} |"
        )
    lines += [
        "",
        f"Mean ± sd over {n} seeds. Paired change (after - before, same seed), and in how many seeds it went up / down:",
        "",
        "| generator | pass@1 change | up / down | score change | up / down |",
        "| --- | --- | --- | --- | --- |",
    ]
    for g, p, s in rows:
        lines.append(
            f"| {g} | {p['change_mean']:+.3f} ± {p['change_std']:.3f} | {p['seeds_up']} / {p['seeds_down']} | "
            f"{s['change_mean']:+.3f} ± {s['change_std']:.3f} | {s['seeds_up']} / {s['seeds_down']} |"
        )
    lines += [
        "",
        "Per seed, pass@1 before -> after:",
        "",
        "| generator | " + " | ".join(f"seed {s}" for s in d["seeds"]) + " |",
        "| --- |" + " --- |" * n,
    ]
    for g, v in d["per_generator"].items():
        lines.append(f"| {g} | " + " | ".join(f"{x['before']:.2f} -> {x['after']:.2f}" for x in v["per_seed"]) + " |")
    lines += [
        "",
        "Floor: each generator's most common held-out answer given to every question (no model): "
        + "; ".join(
            f"{g} `{c['answer']}` pass@1 {c['pass@1']:.2f}, score {c['score']:.2f}"
            for g, c in d["constant_answer"].items()
        )
        + ".",
    ]
    tr = [r["grpo_train"] for r in d["runs"] if r["grpo_train"]]
    if tr:
        lines += [
            "",
            "GRPO's training reward (its own samples, temperature 1), mean of the first and last 10 steps: "
            + "; ".join(
                f"seed {r['seed']} {t['reward_first10']:.3f} -> {t['reward_last10']:.3f} (success "
                f"{t['success_first10']:.3f} -> {t['success_last10']:.3f})"
                for r, t in zip(d["runs"], tr)
            )
            + ".",
        ]
    sec = d["seconds"]
    lines += [
        "",
        f"Wall time per seed: warm start {sec['pretrain'][0]:.0f} ± {sec['pretrain'][1]:.0f} s, GRPO "
        f"{sec['grpo'][0]:.0f} ± {sec['grpo'][1]:.0f} s; all stages of all seeds {sec['wall_total'] / 60:.1f} min "
        "(evaluations included), one torch thread, at nice 19 on a shared machine.",
    ]
    if notes:
        lines += ["", notes.strip()]
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=150, help="GRPO steps")
    p.add_argument("--pretrain-steps", type=int, default=300)
    p.add_argument("--prompts", type=int, default=16, help="prompts per GRPO step")
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--heldout", type=int, default=100, help="held-out questions per generator")
    p.add_argument("--out", default="runs/reasoning_gym_grpo")
    p.add_argument("--results", help="write reasoning_gym_grpo.md / .json into this folder")
    p.add_argument("--notes", help="a markdown file appended to the results page (the reading of the numbers)")
    p.add_argument("--quick", action="store_true", help="a smoke test: one seed, a few steps, small evaluations")
    a = p.parse_args()
    if a.quick:
        a.seeds, a.steps, a.pretrain_steps, a.heldout, a.prompts = a.seeds[:1], 10, 60, 20, 8
        a.out = a.out + "_quick"
    torch.set_num_threads(1)
    # the machine's state when the stages ran, kept beside them so a later summary reports the same
    cond = Path(a.out) / "conditions.json"
    seen = json.loads(cond.read_text()) if cond.is_file() else {"start": conditions()}
    fresh = not all((Path(a.out) / f"seed{s}" / "eval_after" / "summary.json").is_file() for s in a.seeds)
    rows = [one_seed(Path(a.out) / f"seed{s}", s, a) for s in a.seeds]
    if fresh or "end" not in seen:
        seen["end"] = conditions()
        atomic_write_text(cond, json.dumps(seen, indent=2) + "\n")
    for r in rows:
        print(r["seed"], {g: (r["before"][g]["pass@1"], r["after"][g]["pass@1"]) for g in GENERATORS}, flush=True)
    if a.results:
        d = summarize(rows, a, "python " + " ".join(sys.argv), seen["start"], seen["end"])
        write_results(a.results, "reasoning_gym_grpo", markdown(d, Path(a.notes).read_text() if a.notes else None), d)


if __name__ == "__main__":
    main()
