"""The environment interface: one instance serves one episode.

`reset()` gives the first observation; `await step(text)` verifies the policy's answer and returns a
`StepResult` (score, success, done, feedback). `step` is async so that slow verifiers (sandboxes,
compilers, browsers) overlap with each other while the rollout engine waits for a whole turn.

A `TaskFamily` makes tasks (train / held-out splits by seed) and the env that serves each one, and may
offer group-level rewards (`group_rewards`: a pure function of one group's finished episodes).
"""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, ClassVar

from tempering.envs.group import GROUP_REWARDS, GroupReward
from tempering.types import Task

SAMPLED_IDS: ContextVar[list[int] | None] = ContextVar("SAMPLED_IDS", default=None)
"""The token ids of the answer an environment's `step` is verifying (set by the rollout engine for the
task that runs `step`): TRL's `completion_ids` for reward functions."""


@dataclass
class StepResult:
    """What the environment says about one answer."""

    score: float
    """Verifier score; in [0, 1] for refinement tasks (partial credit allowed)."""
    success: bool
    """The answer is accepted (the episode may stop here)."""
    done: bool
    """No further turn is possible (success, or the environment has nothing more to say)."""
    feedback: str = ""
    """Text shown to the policy before its next turn."""
    status: str = ""
    """Short machine-readable status: correct, incorrect, parse_error, compile_error, runtime_error, ..."""
    info: dict[str, Any] = field(default_factory=dict)
    messages: list[dict[str, Any]] | None = None
    """Chat messages that answer the policy (tool results as `tool` messages): the chat template renders
    them after the answer, in place of `feedback` through the feedback template."""


class Env(abc.ABC):
    """Serves one episode of one task."""

    def __init__(self, task: Task):
        self.task = task

    def reset(self) -> str | Awaitable[str]:
        """The first observation (by default the task's prompt); the policy's first turn reads it.
        Slow environments may make it a coroutine."""
        return self.task.prompt

    @abc.abstractmethod
    async def step(self, action: str) -> StepResult:
        """Verify the policy's answer; never raise for bad answers (report them in the result)."""

    async def close(self) -> None:
        """Release resources (browsers, sandboxes)."""


class TaskFamily(abc.ABC):
    """A source of tasks with a verifier. Deterministic from a seed."""

    name: str = ""
    feedback_template: ClassVar[str | None] = None
    """The `rollout.feedback_template` these tasks need, when the generic one does not fit (GUI
    screens: the new screen last); used unless the config sets its own."""
    reads_feedback_template: ClassVar[bool] = True
    """False for families whose environments answer in messages of their own (tool results): a
    `rollout.feedback_template` would do nothing there and is refused."""
    offers_tools: ClassVar[bool] = False
    """Its prompts offer tools (`Conversation.tools`) and its environments answer calls: it needs
    `rollout.max_turns` of 2 or more, and reads `model.tool_prompt`."""

    feedback_keys: ClassVar[frozenset[str] | None] = None
    """The keys of a step's `info` that `rollout.feedback_templates` may name (besides `{feedback}`):
    what the policy may be told. None: every key (the family's info holds nothing the policy must not
    see). A family whose info also carries what the policy must not learn (the code family's hidden
    tests) declares the safe keys; a template naming another is refused when the run is set up."""

    def template_keys(self) -> frozenset[str] | None:
        """`feedback_keys` (wrappers answer for what they wrap)."""
        return self.feedback_keys

    group_rewards: ClassVar[Mapping[str, GroupReward]] = {}
    """This family's own group-level rewards by name (`loss.group_reward` picks one): each a pure function
    of one group's finished episodes (one task, in order: rewards, turns, verdicts) giving one value per
    episode, added to its reward by the scoring step once per group, before dynamic sampling and credit."""

    def group_reward(self, name: str) -> GroupReward | None:
        """The group reward `name`: the family's own, else one every family has (`envs/group.py`: LEAP's
        `rank`, `rank_tokens`); None: the family defines none by that name. Wrappers forward it."""
        return self.group_rewards.get(name) or GROUP_REWARDS.get(name)

    @abc.abstractmethod
    def tasks(self, split: str, n: int, seed: int = 0) -> list[Task]:
        """`n` tasks of `split` (`train` or `heldout`); the two splits never share a task."""

    def split_size(self, split: str) -> int | None:
        """How many distinct tasks `split` holds; None when tasks are generated (every draw is new).
        Evaluation uses it never to repeat a task of a fixed set."""
        return None

    @abc.abstractmethod
    def make_env(self, task: Task) -> Env:
        """A fresh environment for one episode of `task`."""

    def close(self) -> None:
        """Release what the family shares between episodes (browser pools); called when a run ends."""
