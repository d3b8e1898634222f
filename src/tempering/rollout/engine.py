"""The rollout engine: single- and multi-turn episodes, generated in batches.

Every turn, all live episodes of all groups are sampled together; their answers are verified
concurrently (`asyncio.gather` over `env.step`); failed episodes get the environment's feedback
appended and continue until success, the turn limit or the context limit. Single-turn is K = 1.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tempering.envs.base import Env, StepResult
from tempering.models.chat import ChatFormat
from tempering.rollout.sampler import SamplingParams
from tempering.types import Episode, Group, Task, Turn


@dataclass
class RolloutOptions:
    sampling: SamplingParams = field(default_factory=SamplingParams)
    max_turns: int = 1
    """Turn limit K (1 = single-turn)."""
    max_context_tokens: int = 1024
    """An episode whose next context would exceed this ends with stop_reason `context`."""
    continue_after_turn1: Callable[[Group], list[bool]] | None = None
    """Which episodes of a group may take more turns after turn 1 (LEAP's pruning); None: all failed ones."""


@dataclass
class RolloutStats:
    env_calls: int = 0
    env_seconds: float = 0.0
    gen_seconds: float = 0.0
    env_errors: int = 0
    tokens: int = 0


async def _step(env: Env, text: str) -> tuple[StepResult, float]:
    t0 = time.perf_counter()
    try:
        res = await env.step(text)
    except Exception as e:  # an environment bug must not kill the run: the episode ends as env_error
        res = StepResult(score=0.0, success=False, done=True, status="env_error", feedback="", info={"error": f"{type(e).__name__}: {e}"})
    return res, time.perf_counter() - t0


async def rollout(
    sampler,
    fmt: ChatFormat,
    tasks: list[Task],
    make_env: Callable[[Task], Env],
    group_size: int,
    opts: RolloutOptions,
    stats: RolloutStats | None = None,
) -> list[Group]:
    """G episodes for each task; returns one Group per task."""
    stats = stats if stats is not None else RolloutStats()
    groups: list[Group] = []
    ctx: dict[int, list[int]] = {}
    envs: dict[int, Env] = {}
    eps: list[Episode] = []
    for task in tasks:
        prompt = fmt.prompt_ids(task.prompt)
        group = Group(task=task, episodes=[])
        for _ in range(group_size):
            env = make_env(task)
            env.reset()
            e = Episode(task=task, prompt_ids=list(prompt))
            envs[id(e)], ctx[id(e)] = env, list(prompt)
            group.episodes.append(e)
            eps.append(e)
        groups.append(group)

    live = list(eps)
    for k in range(1, opts.max_turns + 1):
        if not live:
            break
        t0 = time.perf_counter()
        samples = sampler.sample([ctx[id(e)] for e in live], opts.sampling)
        stats.gen_seconds += time.perf_counter() - t0
        texts = [sampler.tokenizer.decode(s.ids, skip_special_tokens=True) for s in samples]
        results = await asyncio.gather(*(_step(envs[id(e)], t) for e, t in zip(live, texts)))
        stats.env_calls += len(live)
        for e, s, text, (res, secs) in zip(live, samples, texts, results):
            stats.env_seconds += secs
            stats.tokens += len(s.ids)
            info = dict(res.info, text=text, env_seconds=secs)
            e.turns.append(
                Turn(action_ids=s.ids, logprobs=s.logprobs, score=res.score, success=res.success, status=res.status,
                     feedback=res.feedback, truncated=s.truncated, info=info)
            )
            if res.status == "env_error":
                stats.env_errors += 1
                e.stop_reason = "env_error"
            elif res.success:
                e.stop_reason = "success"
            elif res.done:
                e.stop_reason = "done"
            elif k == opts.max_turns:
                e.stop_reason = "max_turns"
        if k == 1 and opts.max_turns > 1 and opts.continue_after_turn1 is not None:
            for g in groups:
                for e, keep in zip(g.episodes, opts.continue_after_turn1(g)):
                    if not e.stop_reason and not keep:
                        e.stop_reason = "pruned"
        nxt = []
        for e in live:
            if e.stop_reason:
                continue
            fb = fmt.feedback_ids(e.turns[-1].feedback, e.task.prompt)
            if len(ctx[id(e)]) + len(e.turns[-1].action_ids) + len(fb) + opts.sampling.max_new_tokens > opts.max_context_tokens:
                e.stop_reason = "context"
                continue
            e.turns[-1].feedback_ids = fb
            ctx[id(e)] += e.turns[-1].action_ids + fb
            nxt.append(e)
        live = nxt

    await asyncio.gather(*(env.close() for env in envs.values()))
    for e in eps:
        e.reward = e.turns[-1].score if e.turns else 0.0
    return groups
