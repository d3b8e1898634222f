"""Single-step GUI tasks over recorded states: the task family of guided OPD and dual-level GRPO.

Each task is one state of a recorded trajectory (oracle episodes in the offline apps, or a trajectory
file): the prompt is the observation, and `meta["state"]` holds the annotation the student never sees
(every valid action, the demonstrated one, the plan, the element boxes). The env scores one output
and ends the episode; nothing is executed (teacher-forced over recorded states, as in LiteGUI).

The teacher prompt builders of guided OPD append guidance built from the valid actions:
`single_gt_prompt`, `multi_gt_prompt`, and `most_matched_prompt`, which reads the student's own
sample and is therefore built per episode (marked `sees_sample`).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Literal

from tempering.envs.base import Env, StepResult, TaskFamily
from tempering.envs.gui.action import parse_output
from tempering.envs.gui.agents import OracleAgent
from tempering.envs.gui.apps import APPS
from tempering.envs.gui.dataset import StateSample, read_dataset, rollout, states
from tempering.envs.gui.env import GuiFamily
from tempering.envs.gui.guidance import guidance_most_matched, guidance_multi, guidance_single, teacher_prompt
from tempering.envs.gui.judge import JudgeConfig, make_judge
from tempering.envs.gui.reward import PlanJudge, RewardWeights, action_reward, dual_reward, plan_match
from tempering.errors import UserError
from tempering.types import Episode, Task

Guidance = Literal["none", "single", "multi", "mixed"]


def state_task(sample: StateSample, index: int, guidance: Guidance = "none", difficulty: int = 0) -> Task:
    """One recorded state as a single-turn task; the answer is the supervised target.

    `guidance` puts a hint into the prompt itself: the privileged view a guided teacher is
    warm-started on (`single`: the demonstrated action, `multi`: all valid ones, `mixed`: either,
    by a coin per state). Students always get `none`.
    """
    tid = f"{sample.task_id}#{index}"
    prompt = sample.prompt
    if guidance == "mixed":
        guidance = "single" if zlib.crc32(tid.encode()) % 2 else "multi"
    if guidance == "single":
        prompt = teacher_prompt(prompt, guidance_single([sample.demonstrated]))
    elif guidance == "multi":
        prompt = teacher_prompt(prompt, guidance_multi(sample.valid))
    return Task(
        id=tid,
        prompt=prompt,
        answer=sample.target,
        family="gui_states",
        difficulty=float(difficulty),
        meta={"state": sample},
    )


def sample_of(task: Task) -> StateSample:
    state = task.meta.get("state")
    if not isinstance(state, StateSample):
        raise UserError(f"task {task.id} is not a recorded GUI state; use the gui_states task family")
    return state


def single_gt_prompt(task: Task) -> str:
    """Single-GT guidance: the one demonstrated action."""
    s = sample_of(task)
    return teacher_prompt(task.prompt, guidance_single([s.demonstrated]))


def multi_gt_prompt(task: Task) -> str:
    """Multi-GT guidance: all valid actions."""
    s = sample_of(task)
    return teacher_prompt(task.prompt, guidance_multi(s.valid))


def most_matched_prompt(task: Task, episode: Episode) -> str:
    """Most-Matched-GT guidance: the valid action nearest (by phi) to the student's own sampled action;
    the demonstrated one when the sample has no usable action or matches none."""
    s = sample_of(task)
    parsed = parse_output(episode.turns[0].info.get("text", "")) if episode.turns else None
    ranked = [s.demonstrated] + [a for a in s.valid if a != s.demonstrated]
    return teacher_prompt(task.prompt, guidance_most_matched(ranked, parsed.action if parsed else None, s.boxes))


# It reads the student's sample, so teachers build it per episode: the mark `tempering.teachers.prompts.sees_sample`
# sets, set here so that this layer does not import the teachers above it.
most_matched_prompt.sees_sample = True  # type: ignore[attr-defined]


class GuiStateEnv(Env):
    """Scores one output at a recorded state with the dual-level reward; one turn, nothing executed."""

    def __init__(self, task: Task, weights: RewardWeights, judge: PlanJudge = plan_match, reference: str = "all"):
        super().__init__(task)
        self.state = sample_of(task)
        self.weights = weights
        self.judge = judge
        self.reference = reference

    async def step(self, action: str) -> StepResult:
        s = self.state
        parsed = parse_output(action)
        refs = s.valid if self.reference == "all" else [s.demonstrated]
        reward = dual_reward(parsed, refs, s.plan, self.weights, self.judge, s.boxes, s.instruction)
        valid = parsed.ok and action_reward(parsed.action, s.valid, s.boxes) == 1.0
        status = "parse_error" if not parsed.ok else "valid" if valid else "invalid"
        return StepResult(
            score=reward.total,
            success=valid,
            done=True,
            status=status,
            feedback=parsed.error or ("" if valid else "not a valid action at this state"),
            info={
                "valid": valid,
                "format_ok": parsed.ok,
                "reward": reward.to_json(),
                "action": parsed.action.to_json() if parsed.action else None,
            },
        )


@dataclass
class GuiStateFamily(TaskFamily):
    """Recorded states of oracle episodes in the offline apps (or of a trajectory file), one task each.

    Success is a valid action (max phi over all valid actions is 1) whatever the reward; the reward
    is the dual-level one, or with `reference="demonstrated"` and weights {format: 0, action: 1,
    plan: 0} the single-GT action reward of the usual baseline.
    """

    kinds: tuple[str, ...] = tuple(APPS)
    """App kinds to draw from, in turn."""
    difficulty: int = 0
    """App size (0 = smallest; the tiny models' context fits difficulty 0)."""
    heldout_share: float = 0.2
    """Share of app tasks (by content hash) reserved for the held-out split."""
    boxes: bool = False
    """Render bounding boxes in observations."""
    dataset: str | None = None
    """A trajectory file (`tempering gui generate`) whose states are the training split; held-out
    states are still those of oracle episodes on held-out apps."""
    weights: RewardWeights = field(default_factory=RewardWeights)
    """Reward weights w_f, w_a, w_s (a dict of them is accepted, as from a config file)."""
    judge: PlanJudge = plan_match
    """Plan judge of the macro reward: a callable, or a `JudgeConfig` / its dict."""
    reference: Literal["all", "demonstrated"] = "all"
    """What the micro reward matches against: all valid actions (multi-solution), or only the
    demonstrated one (single-GT baseline)."""
    multi_only: bool = False
    """Keep only states with several valid actions (where the reward and guidance variants differ)."""
    guidance: Guidance = "none"
    """Hint in every prompt (a guided teacher's warm start): none, single, multi or mixed."""
    name: str = "gui_states"
    _made: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self):
        if isinstance(self.weights, dict):
            self.weights = RewardWeights(**self.weights)
        if isinstance(self.judge, dict):
            self.judge = JudgeConfig(**self.judge)
        if isinstance(self.judge, JudgeConfig):
            self.judge = make_judge(self.judge)
        if self.reference not in ("all", "demonstrated"):
            raise UserError(f"gui_states: reference must be 'all' or 'demonstrated', got {self.reference!r}")
        if self.guidance not in ("none", "single", "multi", "mixed"):
            raise UserError(f"gui_states: guidance must be none, single, multi or mixed, got {self.guidance!r}")
        self.apps = GuiFamily(
            kinds=tuple(self.kinds), difficulty=self.difficulty, heldout_share=self.heldout_share, boxes=self.boxes
        )

    def tasks(self, split: str, n: int, seed: int = 0) -> list[Task]:
        """The first `n` states (fewer when a training file holds fewer); remembered, since recipes
        sharing one family (a warm start, then several arms) ask for the same states again."""
        key = (split, n, seed)
        if key not in self._made:
            self._made[key] = self._tasks(split, n, seed)
        return list(self._made[key])

    def _tasks(self, split: str, n: int, seed: int) -> list[Task]:
        if split == "train" and self.dataset:
            samples = states(read_dataset(self.dataset), self.multi_only)[:n]
            if not samples:
                raise UserError(
                    f"gui_states: {self.dataset} holds no {'multi-solution ' if self.multi_only else ''}states"
                )
        else:
            samples = self._oracle_states(split, n, seed)
        return [state_task(s, i, self.guidance, self.difficulty) for i, s in enumerate(samples)]

    def _oracle_states(self, split: str, n: int, seed: int) -> list[StateSample]:
        """The first `n` states of oracle episodes on the app tasks in order. App tasks are
        prefix-stable in their count, so play a few first and more only when they hold too few."""
        n_apps = 4 * n if self.multi_only else (n + 1) // 2
        for _ in range(3):
            agent, samples = OracleAgent(seed=seed), []
            for task in self.apps.tasks(split, n_apps, seed):
                samples += states([rollout(self.apps.make_env(task), agent)], self.multi_only)
                if len(samples) >= n:
                    return samples[:n]
            n_apps *= 4
        raise UserError(f"gui_states: {n_apps // 4} {split} app tasks hold only {len(samples)} states; ask for fewer")

    def make_env(self, task: Task) -> GuiStateEnv:
        return GuiStateEnv(task, self.weights, self.judge, self.reference)
