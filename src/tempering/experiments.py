"""Helpers for experiment scripts: run one arm of a comparison, aggregate seeds, judge claims, write tables.

An arm is a TrainConfig (as a dict); its result is the final held-out evaluation plus totals summed
over the run's metrics (environment calls, seconds). Tables and their JSON twin are written together
from the same numbers.

The statistics rule (one for every results page; `judge` applies it, `claims_table` shows it):

- A claim compares arm `a` with arm `b` on one metric (a fraction: pass rate, success rate, or a count
  divided by the baseline's), in points: d_i = 100 (a_i - b_i) for each seed i both arms ran.
- Its interval is the 95% t-interval mean(d) +- t(0.975, n-1) sd(d) / sqrt(n). The spread is over
  training seeds only: the held-out set is fixed, so its sampling error is not in the interval.
- The claim says a is better than b (higher, or lower where lower is better) by more than
  `-margin` points (margin 0: a beats b; margin > 0: a is no worse than b by more than the margin),
  optionally by about `effect` points (the paper's size). With [L, U] the interval oriented so
  that better is positive:
  `reproduced` iff L > -margin and (no effect given or U >= effect);
  `not reproduced` iff U < -margin, or U < effect (the interval excludes the claimed size);
  `inconclusive` otherwise, and always with fewer than 3 seeds (no test is made).
- Beside it, the exact one-sided sign-flip (permutation) p-value of mean(d) + margin over the 2^n
  sign assignments (n <= 16): distribution-free, but never below 1/2^n, so 3 seeds cannot go
  under 0.125; the verdict reads the t-interval, which assumes roughly normal seed differences.
- Arms that differ in their training rollouts or their held-out set are not compared: `judge` raises,
  naming the arm that differs. A fixed model (a warm start, a teacher) has no rollout budget here.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import platform
import statistics as st
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from tempering.errors import UserError
from tempering.progress import conditions as conditions
from tempering.progress import conditions_text as conditions_text
from tempering.progress import matmul_gflops as matmul_gflops
from tempering.recipes.runner import run
from tempering.runlog import atomic_write_text

TOTALS = (
    "env_calls",
    "env_seconds",
    "gen_seconds",
    "update_seconds",
    "step_seconds",
    "cf_env_calls",
    "episodes_pruned",
)


def run_arm(cfg: dict[str, Any], family=None) -> dict[str, Any]:
    """Train one arm (unless its run folder already holds a finished run) and summarise it."""
    run_dir = Path(cfg["run"]["out_dir"])
    if not (run_dir / "final" / "config.json").is_file():
        run("train", cfg, family=family)
    return summarize_run(run_dir)


def cached_stage(out: str | Path, fn) -> dict[str, Any]:
    """Run one stage of an experiment once: `fn()`'s result, with its seconds, is kept as the stage's
    summary.json, which a rerun with the same folder reads instead of running it again."""
    done = Path(out) / "summary.json"
    if done.is_file():
        return json.loads(done.read_text())
    t0 = time.perf_counter()
    res = fn()
    res["seconds"] = time.perf_counter() - t0
    done.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(done, json.dumps(res, indent=1) + "\n")
    return res


def summarize_run(run_dir: str | Path) -> dict[str, Any]:
    """Final and starting held-out metrics (without the `eval/` prefix) and totals over the run's steps."""
    rows = [json.loads(ln) for ln in (Path(run_dir) / "metrics.jsonl").read_text().splitlines() if ln.strip()]
    evals = [r for r in rows if "eval/pass@1" in r]
    steps = [r for r in rows if "reward" in r]
    strip = lambda r: {k.removeprefix("eval/"): v for k, v in r.items() if k.startswith("eval/")}
    out: dict[str, Any] = strip(evals[-1])
    out["start"] = strip(evals[0]) if evals and evals[0]["step"] == 0 else {}
    for key in TOTALS:
        out[f"total_{key}"] = float(sum(r.get(key, 0.0) for r in steps))
    for key in ("groups_expanded_share", "cf_overhead_calls", "cf_overhead_seconds"):
        vals = [r[key] for r in steps if key in r]
        if vals:
            out[key] = sum(vals) / len(vals)
    out["wall_seconds"] = out["total_step_seconds"]  # training steps only; evaluations excluded
    return out


def greedy_answers(
    model: str, task: dict[str, Any], n: int, max_new_tokens: int, seed: int = 0
) -> list[dict[str, Any]]:
    """A model's greedy answer to each of `n` held-out tasks of a task section: its id, success, the
    verifier's status, the text and the token ids of prompt and answer, for per-example comparisons (which
    tasks any of several models solves, how likely another model finds these answers)."""
    import asyncio

    from tempering.envs.registry import make_family
    from tempering.models import load_policy
    from tempering.models.chat import ChatFormat
    from tempering.rollout.engine import RolloutOptions, rollout
    from tempering.rollout.sampler import HFSampler, SamplingParams

    policy, tok = load_policy(model, seed=seed)
    family = make_family(task["family"], **task.get("args", {}))
    tasks = family.tasks("heldout", n, seed=seed)
    opts = RolloutOptions(SamplingParams(max_new_tokens, 0.0))
    groups = asyncio.run(rollout(HFSampler(policy, tok, seed=seed), ChatFormat(tok), tasks, family.make_env, 1, opts))
    return [
        {
            "id": g.task.id,
            "success": g.episodes[0].turns[0].success,
            "status": g.episodes[0].turns[0].status,
            "answer": tok.decode(g.episodes[0].turns[0].action_ids, skip_special_tokens=True),
            "prompt_ids": g.episodes[0].prompt_ids,
            "answer_ids": g.episodes[0].turns[0].action_ids,
        }
        for g in groups
    ]


def mean_sd(xs: list[float]) -> tuple[float, float]:
    xs = [float(x) for x in xs]
    return (st.mean(xs), st.stdev(xs)) if len(xs) > 1 else (xs[0], 0.0)


def fmt(xs: list[float], digits: int = 3) -> str:
    m, s = mean_sd(xs)
    return f"{m:.{digits}f} ± {s:.{digits}f}"


def machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, torch {torch.__version__}, {torch.get_num_threads()} threads"


def write_results(out_dir: str | Path, name: str, markdown: str, data: dict[str, Any]) -> None:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / f"{name}.json", json.dumps(data, indent=2) + "\n")
    atomic_write_text(out / f"{name}.md", markdown)


# ---- the statistics rule (see the module docstring) ----

VERDICTS = ("reproduced", "not reproduced", "inconclusive")
MIN_SEEDS = 3
# t(0.975, df) for df 1-10; above, the Cornish-Fisher expansion around the normal quantile (error < 1e-5)
_T975 = (12.706205, 4.302653, 3.182446, 2.776445, 2.570582, 2.446912, 2.364624, 2.306004, 2.262157, 2.228139)
_Z975 = 1.959963984540054


def t975(df: int) -> float:
    """The 0.975 quantile of Student's t with `df` degrees of freedom."""
    if df < 1:
        raise ValueError(f"t975 needs at least 1 degree of freedom, got {df}")
    if df <= len(_T975):
        return _T975[df - 1]
    z = _Z975
    g = (
        (z**3 + z) / 4,
        (5 * z**5 + 16 * z**3 + 3 * z) / 96,
        (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384,
        (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160,
    )
    return z + sum(gk / df ** (k + 1) for k, gk in enumerate(g))


@dataclass(frozen=True)
class Interval:
    """Paired differences and their 95% t-interval (on n-1 degrees of freedom)."""

    n: int
    mean: float
    sd: float
    ci95: tuple[float, float]  # (nan, nan) below 2 differences


def interval(diffs: Sequence[float]) -> Interval:
    """The 95% t-interval of the mean of paired differences (one per seed)."""
    d = [float(x) for x in diffs]
    if not d or any(not math.isfinite(x) for x in d):
        raise ValueError(f"paired differences must be finite numbers, got {d}")
    m = st.mean(d)
    if len(d) < 2:
        return Interval(1, m, float("nan"), (float("nan"), float("nan")))
    sd = st.stdev(d)
    half = t975(len(d) - 1) * sd / math.sqrt(len(d))
    return Interval(len(d), m, sd, (m - half, m + half))


def sign_flip_p(diffs: Sequence[float], threshold: float = 0.0) -> float | None:
    """Exact one-sided p-value that mean(diffs) > threshold: the share of the 2^n sign assignments of
    (diffs - threshold) whose mean is at least the observed one. None above 16 differences."""
    d = [float(x) - threshold for x in diffs]
    if not d or len(d) > 16:
        return None
    seen = sum(d) - 1e-9 * max(1.0, sum(abs(x) for x in d))  # ties count as at least as extreme
    hits = sum(sum(s * x for s, x in zip(signs, d)) >= seen for signs in itertools.product((1, -1), repeat=len(d)))
    return hits / 2 ** len(d)


def verdict(
    iv: Interval, *, higher_is_better: bool = True, margin: float = 0.0, effect: float | None = None
) -> tuple[str, str]:
    """The verdict word for a claim on an interval of a - b (points), and why, in words."""
    if margin < 0 or (effect is not None and effect <= -margin):
        raise ValueError(f"margin must be >= 0 and effect above -margin, got margin {margin}, effect {effect}")
    if iv.n < MIN_SEEDS:
        return "inconclusive", f"{iv.n} seed{'s' * (iv.n != 1)}; a verdict needs at least {MIN_SEEDS}"
    s = 1.0 if higher_is_better else -1.0
    lo, hi = sorted((s * iv.ci95[0], s * iv.ci95[1]))
    side = "better" if margin == 0 else f"no worse by more than {margin:g} points"
    oriented = f"the interval, better positive, is [{lo:+.2f}, {hi:+.2f}]"
    if hi < -margin:
        return "not reproduced", f"{oriented}: a is not {side}"
    if effect is not None and hi < effect:
        return "not reproduced", f"{oriented}: below the claimed {effect:+g} points"
    if lo > -margin and (effect is None or hi >= effect):
        return "reproduced", f"{oriented}: a is {side}"
    return "inconclusive", f"{oriented}: it spans {-margin:+g}"


@dataclass(frozen=True)
class Arm:
    """One arm of a comparison on one metric: its value per seed and what it was given."""

    name: str
    per_seed: Mapping[int, float]  # seed -> the metric as a fraction (a count as a share of a baseline)
    heldout: str  # names the held-out set it was scored on (family, arguments, size, ...)
    rollouts: float | None  # training rollouts per seed; None for a fixed model (a warm start, a teacher)


def check_arms(arms: Sequence[Arm]) -> None:
    """Refuse arms that were scored on another held-out set or trained on another rollout budget than
    the first (fixed models have no budget), naming the arm that differs."""
    first = arms[0]
    trained = [a for a in arms if a.rollouts is not None]
    for arm in arms[1:]:
        if arm.heldout != first.heldout:
            raise UserError(
                f"arm `{arm.name}` was scored on another held-out set ({arm.heldout}) than `{first.name}` "
                f"({first.heldout}): no verdict; evaluate every arm on the same held-out set"
            )
    for arm in trained[1:]:
        if arm.rollouts != trained[0].rollouts:
            raise UserError(
                f"arm `{arm.name}` trained on {arm.rollouts:g} rollouts, `{trained[0].name}` on "
                f"{trained[0].rollouts:g}: no verdict; give every trained arm the same rollout budget"
            )


def judge(
    a: Arm, b: Arm, *, higher_is_better: bool = True, margin: float = 0.0, effect: float | None = None
) -> dict[str, Any]:
    """A claim that `a` is better than `b`, judged by the rule: the JSON record a results page shows."""
    check_arms([a, b])
    seeds = sorted(a.per_seed)
    missing = sorted(set(seeds) ^ set(b.per_seed))
    if missing:
        arm = b if set(missing) - set(b.per_seed) else a
        raise UserError(f"arm `{arm.name}` lacks seed(s) {missing} that the other arm ran: no verdict")
    diffs = [100.0 * (a.per_seed[s] - b.per_seed[s]) for s in seeds]
    iv = interval(diffs)
    word, why = verdict(iv, higher_is_better=higher_is_better, margin=margin, effect=effect)
    return {
        "a": a.name,
        "b": b.name,
        "better": "higher" if higher_is_better else "lower",
        "margin_points": margin,
        "effect_points": effect,
        "difference_points": {
            "mean": iv.mean,
            "ci95": list(iv.ci95) if iv.n > 1 else None,
            "sd": iv.sd if iv.n > 1 else None,
            "per_seed": diffs,
            "seeds": seeds,
        },
        "p_sign_flip": sign_flip_p([d if higher_is_better else -d for d in diffs], -margin),
        "verdict": word,
        "why": why,
    }


RULE = (
    "Verdicts (`tempering.experiments.judge`): per-seed paired differences a - b in points, their 95% "
    "t-interval on n-1 degrees of freedom; `reproduced` iff the whole interval is on the claimed side "
    "(beyond -margin), `not reproduced` iff it is wholly on the other side or below the claimed effect, "
    "`inconclusive` otherwise or with fewer than 3 seeds. The sign-flip p is the exact one-sided "
    "permutation test (at least 0.125 with 3 seeds); the spread is over training seeds only."
)


def claims_table(claims: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The markdown rows of a page's claims, every number and word read from the records `judge` made."""

    def ci(c: Mapping[str, Any]) -> str:
        lo_hi = c["difference_points"]["ci95"]
        return "-" if lo_hi is None else f"[{lo_hi[0]:+.1f}, {lo_hi[1]:+.1f}]"

    def p(c: Mapping[str, Any]) -> str:
        return "-" if c["p_sign_flip"] is None else f"{c['p_sign_flip']:.3f}"

    def claimed(c: Mapping[str, Any]) -> str:
        out = f"{c['better']}" + (f", margin {c['margin_points']:g}" if c["margin_points"] else "")
        return out + (f", claimed {c['effect_points']:+g}" if c["effect_points"] is not None else "")

    lines = [
        "| claim | a | b | better | a - b (points) | 95% interval | seeds | sign-flip p | verdict |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for text, c in claims.items():
        d = c["difference_points"]
        lines.append(
            f"| {text} | `{c['a']}` | `{c['b']}` | {claimed(c)} | {d['mean']:+.1f} | {ci(c)} | {len(d['per_seed'])} | "
            f"{p(c)} | {c['verdict']} |"
        )
    few = [text for text, c in claims.items() if len(c["difference_points"]["per_seed"]) < MIN_SEEDS]
    if few:
        lines += ["", f"No test on fewer than {MIN_SEEDS} seeds: {len(few)} of these claims get no verdict either way."]
    return [*lines, "", RULE]
