"""tempering's task families as tinker-cookbook RL environments.

tinker-cookbook's RL loops (`tinker_cookbook.rl.train.main`, or any loop on its protocol) train on an
`RLDatasetBuilder`; `TemperingDatasetBuilder` is one, over any task family (`task.family` and
`task.args` of `tempering train`):

    from tempering.integrations.cookbook import TemperingDatasetBuilder
    builder = TemperingDatasetBuilder(family="arithmetic", family_args={"max_value": 9},
                                      model_name_for_tokenizer=MODEL, renderer_name="role_colon",
                                      batch_size=8, group_size=4)
    # tinker_cookbook.rl.train.Config(dataset_builder=builder, model_name=MODEL, ...)

The cookbook owns the text: its renderer turns the task's prompt (one user message, or a dataset row's
chat messages) into the `ModelInput` the policy samples from and parses the sampled tokens back into an
assistant message. tempering owns the verdict: the message's text goes to the family's environment
(`Env.step`), so the reward is its verifier's, model-written code runs only in its sandbox (the code
judge's), and a dataset's reward functions get the sampled ids as `completion_ids`. As in tempering's own
rollouts, an episode takes up to `max_turns` answers, a failed one gets the environment's feedback as a
user message (or its tool messages), and the episode's reward is its last answer's score: given on the
last step, each earlier step's reward is 0, so the cookbook's return (its sum) is that score.

Builders and environments are made in the process that runs the rollouts: an `EnvGroupBuilder` holds its
task, the family's name and arguments, and the cookbook's renderer (all picklable); the family itself is
made once per process and shared by its builders (one sandbox, one reward batcher).
"""

from __future__ import annotations

import atexit
import functools
import inspect
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import chz
import tinker
from tinker_cookbook import renderers
from tinker_cookbook.completers import StopCondition
from tinker_cookbook.rl import types as rl
from tinker_cookbook.tokenizer_utils import get_tokenizer

from tempering.envs.base import SAMPLED_IDS, Env, TaskFamily
from tempering.envs.group import GroupReward
from tempering.envs.registry import make_family
from tempering.errors import UserError
from tempering.models.chat import ChatFormat, Conversation
from tempering.rollout.engine import FEEDBACK_TEMPLATES, format_feedback
from tempering.types import Episode, StopReason, Task, Turn


@functools.cache
def _family(name: str, args_json: str) -> TaskFamily:
    family = make_family(name, **json.loads(args_json))
    if family.offers_tools:
        raise UserError(
            f"task family {name!r} offers tools, which the prompt shows through tempering's chat format; "
            "the cookbook's renderers show tools their own way (`create_conversation_prefix_with_tools`): "
            "not supported here, use a family without tools"
        )
    atexit.register(family.close)  # what it shares between episodes (browser pools), when the process ends
    return family


def family_of(name: str, args: dict[str, Any]) -> TaskFamily:
    """The family `name` with `args` (its `task.args`), made once per process."""
    return _family(name, json.dumps(args, sort_keys=True))


def group_reward_of(family: TaskFamily, name: str, reward: str) -> GroupReward:
    """Family `name`'s group reward `reward`, or one line naming both and the way out."""
    fn = family.group_reward(reward)
    if fn is None:
        raise UserError(
            f"group_reward={reward}: task family {name!r} defines no group reward of that name; give one it "
            "defines (TaskFamily.group_rewards) or one every family has (rank, rank_tokens)"
        )
    return fn


def message(m: dict[str, Any]) -> renderers.Message:
    """A chat message (`role`, `content`, ...) as the cookbook's renderers take it."""
    return cast(renderers.Message, dict(m))


def prompt_messages(task: Task) -> list[renderers.Message]:
    """The task's prompt as chat messages: a conversation's own (a dataset's chat rows), or one user message."""
    if isinstance(task.prompt, Conversation):
        return [message(m) for m in task.prompt.messages]
    return [message({"role": "user", "content": task.prompt})]


class TemperingEnv(rl.Env):
    """One episode of a tempering environment, in the cookbook's token-level protocol."""

    def __init__(self, env: Env, renderer: renderers.Renderer, max_turns: int = 1, feedback_template: str = ""):
        self.env, self.renderer, self.max_turns = env, renderer, max_turns
        self.feedback = ChatFormat(tokenizer=None, use_chat_template=False)
        if feedback_template:
            self.feedback.feedback_template = feedback_template
        self.messages: list[renderers.Message] = []
        self.episode = Episode(env.task, [])
        """The episode so far, as tempering's rollouts record it (what a group reward reads)."""
        self.closed = False

    @property
    def turns(self) -> int:
        return len(self.episode.turns)

    @property
    def stop_condition(self) -> StopCondition:
        return self.renderer.get_stop_sequences()

    async def initial_observation(self) -> tuple[rl.Observation, StopCondition]:
        first = self.env.reset()
        if inspect.isawaitable(first):
            first = await first
        if first != self.env.task.prompt:  # an environment that starts from an observation of its own
            self.messages = [message({"role": "user", "content": str(first)})]
        else:
            self.messages = prompt_messages(self.env.task)
        ob = self.renderer.build_generation_prompt(self.messages)
        self.episode = Episode(self.env.task, ob.to_ints(), prompt=str(first))
        return ob, self.stop_condition

    async def step(self, action: rl.Action, *, extra: rl.ActionExtra | None = None) -> rl.StepResult:
        """Verify the answer with the environment; an exception in it propagates (the cookbook's rollout
        strategy decides: its default fails the run)."""
        answer, termination = self.renderer.parse_response(action)
        text = renderers.get_text_content(answer)
        SAMPLED_IDS.set(list(action))
        try:
            res = await self.env.step(text)
        except BaseException:
            await self.close()
            raise
        self.episode.turns.append(
            Turn(
                list(action),
                [],  # the sampler's log-probs stay with the cookbook's trajectory
                score=float(res.score),
                success=res.success,
                status=res.status,
                feedback=res.feedback,
                truncated=bool(extra and extra.get("stop_reason") == "length"),
            )
        )
        done = res.success or res.done or self.turns >= self.max_turns
        metrics: rl.Metrics = {
            "score": float(res.score),
            "success": float(res.success),
            "parsed": float(termination.is_clean),
        }
        logs: rl.Logs = {
            "task": self.env.task.id,
            "answer": text[:500],
            "status": res.status,
            "feedback": res.feedback[:500],
        }
        if done:
            await self.close()
            stop = rl.StopReason.COMPLETED if res.success or res.done else rl.StopReason.MAX_TURNS
            ended = StopReason.SUCCESS if res.success else StopReason.DONE if res.done else StopReason.MAX_TURNS
            self.episode.stop_reason, self.episode.reward = ended, float(res.score)
            metrics.update({"turns": self.turns, f"{rl.STOP_METRIC_PREFIX}{stop}": 1.0})
            return rl.StepResult(
                reward=float(res.score),
                episode_done=True,
                next_observation=tinker.ModelInput.empty(),
                next_stop_condition=self.stop_condition,
                metrics=metrics,
                logs=logs,
            )
        reply = res.messages or [
            self.feedback.feedback_message(format_feedback(FEEDBACK_TEMPLATES, res), self.env.task.prompt)
        ]
        self.messages += [answer, *(message(m) for m in reply)]
        return rl.StepResult(
            reward=0.0,
            episode_done=False,
            next_observation=self.renderer.build_generation_prompt(self.messages),
            next_stop_condition=self.stop_condition,
            metrics=metrics,
            logs=logs,
        )

    async def close(self) -> None:
        if not self.closed:
            self.closed = True
            await self.env.close()


@dataclass
class TemperingGroupBuilder(rl.EnvGroupBuilder):
    """`group_size` episodes of one task: the group the cookbook centres rewards over."""

    family: str
    family_args: dict[str, Any]
    task: Task
    group_size: int
    renderer: renderers.Renderer
    max_turns: int = 1
    group_reward: str | None = None
    """The family's group-level reward by name (`TaskFamily.group_reward`, `loss.group_reward` of
    `tempering train`), added to each episode's reward by `compute_group_rewards`; None: none."""
    envs: list[TemperingEnv] = field(default_factory=list, repr=False)

    async def make_envs(self) -> Sequence[rl.Env]:
        family = family_of(self.family, self.family_args)
        template = family.feedback_template or ""
        made = [
            TemperingEnv(family.make_env(self.task), self.renderer, self.max_turns, template)
            for _ in range(self.group_size)
        ]
        self.envs += made
        return made

    async def compute_group_rewards(
        self, trajectory_group: list[rl.Trajectory], env_group: Sequence[rl.Env]
    ) -> list[tuple[float, rl.Metrics]]:
        """The family's group reward of the finished episodes (one value each, which the cookbook adds to
        the episode's summed step rewards, as tempering's scoring step adds it to the episode's reward)."""
        if self.group_reward is None:
            return await super().compute_group_rewards(trajectory_group, env_group)
        reward = group_reward_of(family_of(self.family, self.family_args), self.family, self.group_reward)
        episodes = [cast(TemperingEnv, env).episode for env in env_group]
        values = reward(episodes)
        if len(values) != len(episodes):
            raise ValueError(f"a group reward gave {len(values)} values for a group of {len(episodes)} episodes")
        return [(float(v), {"group_reward": float(v)}) for v in values]

    async def cleanup(self) -> None:
        for env in self.envs:
            await env.close()
        self.envs = []

    def logging_tags(self) -> list[str]:
        return [self.family]


@dataclass
class TemperingDataset(rl.RLDataset):
    """Batches of `batch_size` groups, in the order the family drew the tasks."""

    builders: list[TemperingGroupBuilder]
    batch_size: int

    def get_batch(self, index: int) -> Sequence[rl.EnvGroupBuilder]:
        return self.builders[index * self.batch_size : (index + 1) * self.batch_size]

    def __len__(self) -> int:
        return len(self.builders) // self.batch_size


@chz.chz
class TemperingDatasetBuilder(rl.RLDatasetBuilder):
    """A tempering task family as the cookbook's RL dataset: `batches` batches of `batch_size` groups of
    `group_size` episodes, on the family's `train` split drawn with `seed`; with `heldout` > 0, that many
    held-out tasks (one episode each) as the test set the cookbook's loop evaluates every `eval_every`.
    `group_reward` names a group-level reward of the family (LEAP's `rank`, say), which each group adds to
    its episodes' rewards through the cookbook's `compute_group_rewards`."""

    family: str
    model_name_for_tokenizer: str
    renderer_name: str
    batch_size: int
    group_size: int
    family_args: dict[str, Any] = chz.field(default_factory=dict)
    batches: int = 100
    max_turns: int = 1
    seed: int = 0
    heldout: int = 0
    group_reward: str | None = None

    async def __call__(self) -> tuple[TemperingDataset, TemperingDataset | None]:
        if self.batch_size < 1 or self.group_size < 1 or self.batches < 1 or self.max_turns < 1:
            raise UserError(
                f"batch_size={self.batch_size}, group_size={self.group_size}, batches={self.batches} and "
                f"max_turns={self.max_turns} must all be at least 1"
            )
        renderer = renderers.get_renderer(self.renderer_name, tokenizer=get_tokenizer(self.model_name_for_tokenizer))
        family = family_of(self.family, self.family_args)
        if self.group_reward is not None:
            group_reward_of(family, self.family, self.group_reward)  # refused before any rollout
        tasks = family.tasks("train", self.batch_size * self.batches, seed=self.seed)
        if len(tasks) < self.batch_size:
            raise UserError(
                f"task family {self.family!r} gave {len(tasks)} train tasks, fewer than batch_size={self.batch_size}: "
                "lower batch_size or give the family more tasks"
            )
        train = TemperingDataset(
            [self._builder(t, self.group_size, renderer) for t in tasks],
            self.batch_size,
        )
        if not self.heldout:
            return train, None
        held = family.tasks("heldout", self.heldout, seed=self.seed)
        return train, TemperingDataset([self._builder(t, 1, renderer) for t in held], 1)

    def _builder(self, task: Task, group_size: int, renderer: renderers.Renderer) -> TemperingGroupBuilder:
        return TemperingGroupBuilder(
            self.family, dict(self.family_args), task, group_size, renderer, self.max_turns, self.group_reward
        )
