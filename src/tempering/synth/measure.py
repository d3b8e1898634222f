"""Pass rates of the current policy on seeds and synthesised candidates, through the rollout engine.

A configuration is measured on a few of its training tasks, a bundle on its one task (a multi-turn
terminal episode); each task gets n rollouts (n = 8 [proposal]) at the sampling temperature, and the
pass rate is the mean success over all of them.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace
from typing import Any

from tempering.envs.base import Env
from tempering.errors import UserError
from tempering.evaluation import pass_rates
from tempering.models.chat import ChatFormat
from tempering.rollout.engine import RolloutOptions
from tempering.rollout.sampler import HFSampler, SamplingParams
from tempering.synth.seeds import BundleSeed
from tempering.synth.task_seeds import TaskFamilySeed
from tempering.types import Task


@dataclass
class PolicyMeasure:
    """Measures pass rates with one policy; an async callable `candidate -> pass rate` for `synthesize`."""

    sampler: Any
    """Token sampler of the policy (an `HFSampler`)."""
    fmt: ChatFormat
    """How prompts become tokens."""
    rollouts: int = 8
    """Rollouts per task (n)."""
    tasks: int = 4
    """Tasks measured per configuration (a bundle is one task)."""
    temperature: float = 1.0
    """Sampling temperature of the rollouts."""
    max_new_tokens: int = 16
    """Answer token limit for configuration tasks."""
    max_commands: int = 10
    """Commands per terminal episode (bundles)."""
    command_tokens: int = 128
    """Token limit of one terminal command."""
    max_context_tokens: int = 1024
    """Context window of the policy."""
    sandbox_backend: str = "auto"
    """Sandbox backend of terminal episodes."""
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock, init=False, repr=False)
    _sandbox: Any = field(default=None, init=False, repr=False)

    @classmethod
    def from_model_dir(cls, path: str, seed: int = 0, **kw: Any) -> PolicyMeasure:
        """A measure over a saved policy (a local Hugging Face folder or a built-in tiny size)."""
        from tempering.models import load_policy

        model, tok = load_policy(path, seed=seed)
        return cls(HFSampler(model, tok, seed=seed), ChatFormat(tok), **kw)

    def _plan(self, cand: Any) -> tuple[list[Task], Any, RolloutOptions, ChatFormat]:
        if isinstance(cand, TaskFamilySeed):
            family = cand.make_family()
            tasks = family.tasks("train", self.tasks, seed=cand.data_seed)
            opts = RolloutOptions(
                SamplingParams(self.max_new_tokens, self.temperature),
                max_turns=1,
                max_context_tokens=self.max_context_tokens,
            )
            return tasks, family.make_env, opts, self.fmt
        if isinstance(cand, BundleSeed):
            from tempering.envs.terminal import TerminalEnv, bundle_task

            if self._sandbox is None:
                from tempering.sandbox import Sandbox

                self._sandbox = Sandbox(backend=self.sandbox_backend)
            make_env = lambda task: TerminalEnv(task, self._sandbox, self.max_commands)
            opts = RolloutOptions(
                SamplingParams(self.command_tokens, self.temperature),
                max_turns=self.max_commands + 1,
                max_context_tokens=self.max_context_tokens,
            )
            # a command's output follows it; the instruction is not repeated every turn
            return [bundle_task(cand.bundle)], make_env, opts, replace(self.fmt, feedback_template="\n{feedback}\n")
        raise UserError(f"cannot measure a pass rate on {type(cand).__name__}; measure bundles or configurations")

    async def many(self, cands: list[Any]) -> list[float]:
        """Pass rate of each candidate; candidates of one kind are rolled out together in one batch."""
        rates: dict[int, float] = {}
        kinds: dict[type, list[int]] = {}
        for i, c in enumerate(cands):
            kinds.setdefault(type(c), []).append(i)
        async with self._lock:  # one policy, one batch at a time
            for idx in kinds.values():
                plans = [self._plan(cands[i]) for i in idx]
                tasks = [t for p in plans for t in p[0]]
                owner = {id(t): k for k, p in enumerate(plans) for t in p[0]}

                def make_env(task: Task) -> Env:
                    return plans[owner[id(task)]][1](task)

                per_task = await pass_rates(self.sampler, plans[0][3], make_env, tasks, self.rollouts, plans[0][2])
                for k, i in enumerate(idx):
                    mine = [r for t, r in zip(tasks, per_task) if owner[id(t)] == k]
                    rates[i] = sum(mine) / len(mine)
        return [rates[i] for i in range(len(cands))]

    async def __call__(self, cand: Any) -> float:
        return (await self.many([cand]))[0]

    async def pass_rates(self, seeds: list[Any]) -> dict[str, float]:
        """{seed name: pass rate}, what `synthesize` takes."""
        return {s.name: r for s, r in zip(seeds, await self.many(seeds))}
