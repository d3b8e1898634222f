"""Held-out evaluation: greedy pass@1 and sampled pass@k, through the same rollout engine as training."""

from __future__ import annotations

from tempering.envs.base import TaskFamily
from tempering.metrics import group_metrics
from tempering.models.chat import ChatFormat
from tempering.rollout.engine import RolloutOptions, RolloutStats, rollout
from tempering.types import Task


async def evaluate(
    sampler,
    fmt: ChatFormat,
    family: TaskFamily,
    tasks: list[Task],
    opts: RolloutOptions,
    k: int = 8,
    sampled: bool = True,
    stats: RolloutStats | None = None,
) -> dict[str, float]:
    """`pass@1` is greedy; `pass@1_sampled` and `pass@k` use k samples at the rollout temperature.
    `stats` collects the rollouts' counts and environment errors."""
    greedy = opts.plain(temperature=0.0)
    groups = await rollout(sampler, fmt, tasks, family.make_env, 1, greedy, stats)
    out = group_metrics(groups, 1, opts.max_turns)
    if sampled and k > 1:
        sg = await rollout(
            sampler,
            fmt,
            tasks,
            family.make_env,
            k,
            opts.plain(),
            stats,
        )
        m = group_metrics(sg, k, opts.max_turns)
        out["pass@1_sampled"] = m["pass@1"]
        out[f"pass@{k}"] = m.get(f"pass@{k}", m["pass@1"])
        out.update(
            {
                f"{key}_sampled": v
                for key, v in m.items()
                if key.startswith(("acc@", "turns_per_pass", "tokens_per_pass", "improve_rate", "regress_rate"))
            }
        )
    return out


async def pass_rates(
    sampler, fmt: ChatFormat, make_env, tasks: list[Task], n: int, opts: RolloutOptions
) -> list[float]:
    """Share of n sampled episodes that succeed, per task (coverage, frontier and teacher reliability)."""
    groups = await rollout(sampler, fmt, tasks, make_env, n, opts.plain())
    return [sum(e.success for e in g.episodes) / n for g in groups]
