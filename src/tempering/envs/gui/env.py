"""The offline GUI environment: one episode of one generated app task, one JSON action per step.

Each step parses the policy's output, scores it with the dual-level reward against the valid actions
of the current state (format + best match over all valid actions + judged plan), executes the action
(the screen changes) and reports whether the step was valid (one step fewer is left afterwards). The
episode ends when the task is done, when it can no longer be done, or after `max_steps`.

A step's score is, by default, whether the task is finished after it (so an episode's reward, its last
step's score, is task completion); `reward="step"` makes it the step's dual-level reward instead. The
feedback after a step is the new observation (after an error message, if any): with
`FEEDBACK_TEMPLATE` as the rollout's feedback template the policy always reads the current screen last.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, field
from typing import Any, ClassVar

from tempering.envs.base import Env, StepResult, TaskFamily
from tempering.envs.gui.action import Action, parse_output
from tempering.envs.gui.app import ActionError, App
from tempering.envs.gui.apps import APPS
from tempering.envs.gui.judge import JudgeConfig, make_judge
from tempering.envs.gui.reward import PlanJudge, RewardWeights, dual_reward, plan_match
from tempering.envs.gui.screen import Screen
from tempering.errors import UserError
from tempering.types import Task

SYSTEM_PROMPT = (
    "You operate an app through its screen. Each screen line is `#id role text [state] {options}`. "
    'Answer with one JSON object: {"reason": "...", "subtasks": ["what is left to do", ...], '
    '"action": {"type": "click|type|select|scroll", "target": "id", "value": "text, option or up/down"}}.'
)
"""Format instructions for chat models (the tiny default model learns the format from data instead)."""


FEEDBACK_TEMPLATE = "\n{feedback}\n"
"""The rollout feedback template for GUI tasks (`rollout.feedback_template`): each step's feedback
already ends with the new screen, so the generic default (`"\n{feedback}\n{prompt}"`), which repeats
the first observation after it, would leave a stale screen last."""


def observation(instruction: str, screen: Screen, boxes: bool = False) -> str:
    """What the policy reads at one state: the task, then the screen."""
    return f"Task: {instruction}\n{screen.render(boxes)}"


def load_app(spec: dict[str, Any]) -> App:
    """Build the app of a task spec, checking that following valid actions from the first state
    finishes the task (a spec with no valid action at some unfinished state is rejected)."""
    kind = spec.get("kind") if isinstance(spec, dict) else None
    if kind not in APPS:
        raise UserError(f"GUI task spec has unknown app kind {kind!r}; known kinds: {', '.join(APPS)}")
    app = APPS[kind](spec)
    fix = "regenerate it with `tempering gui generate`"
    try:
        state = app.initial()
        left = app.remaining(state)
        if not left:
            raise UserError(f"GUI task {app.instruction!r} is already finished or impossible at its first state; {fix}")
        for step in range(1, left + 1):
            valid = app.valid_actions(state)
            if not valid:
                raise UserError(
                    f"GUI task {app.instruction!r} has no valid action at step {step} although it is "
                    f"not finished (its goal cannot be reached); {fix}"
                )
            state = app.execute(state, valid[0])
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, StopIteration) as e:
        raise UserError(f"GUI task spec of kind {kind!r} is malformed ({type(e).__name__}: {e}); {fix}") from e
    return app


def spec_key(spec: dict[str, Any]) -> str:
    """Content hash of a task spec: its identity across seeds and splits."""
    return hashlib.sha1(json.dumps(spec, sort_keys=True).encode()).hexdigest()


def task_from_spec(spec: dict[str, Any], difficulty: int = 0, split: str = "", boxes: bool = False) -> Task:
    app = load_app(spec)
    return Task(
        id=f"gui/{spec['kind']}/{spec_key(spec)[:10]}",
        prompt=observation(app.instruction, app.screen(app.initial()), boxes),
        family="gui",
        difficulty=float(difficulty),
        meta={"spec": spec, "kind": spec["kind"], "split": split},
    )


@dataclass
class StepView:
    """One state as scripted agents see it (model agents read only `prompt`)."""

    prompt: str
    """The observation text given to the policy."""
    instruction: str
    screen: Screen
    valid: list[Action]
    """Privileged: every valid action at this state."""
    candidates: list[Action]
    """Privileged: every action the app considers (valid or not)."""
    plan: list[str]
    """Privileged: the subtasks still to do."""


class GuiEnv(Env):
    """One episode of one app task."""

    def __init__(
        self,
        task: Task,
        weights: RewardWeights | None = None,
        judge: PlanJudge = plan_match,
        boxes: bool = False,
        max_steps: int | None = None,
        reward: str = "task",
    ):
        super().__init__(task)
        if reward not in ("task", "step"):
            raise UserError(f"gui: reward must be 'task' or 'step', got {reward!r}")
        self.reward = reward
        self.app = load_app(task.meta["spec"])
        self.weights = weights or RewardWeights()
        self.judge = judge
        self.boxes = boxes
        self.state = self.app.initial()
        self.optimal_steps = self.app.remaining(self.state)
        if max_steps:
            self.max_steps = max_steps
        else:
            assert self.optimal_steps is not None  # a fresh task has not failed
            self.max_steps = 2 * self.optimal_steps + 2
        self.steps = 0

    def reset(self) -> str:
        self.state = self.app.initial()
        self.steps = 0
        return self.observation()

    def observation(self) -> str:
        return observation(self.app.instruction, self.app.screen(self.state), self.boxes)

    def view(self) -> StepView:
        return StepView(
            prompt=self.observation(),
            instruction=self.app.instruction,
            screen=self.app.screen(self.state),
            valid=self.app.valid_actions(self.state),
            candidates=self.app.candidates(self.state),
            plan=self.app.plan(self.state),
        )

    @property
    def finished(self) -> bool:
        return self.app.remaining(self.state) in (0, None) or self.steps >= self.max_steps

    def step_sync(self, text: str) -> StepResult:
        """Score and execute one output (the blocking core of `step`)."""
        if self.finished:
            return StepResult(0.0, self.app.remaining(self.state) == 0, True, "the episode is over", "over")
        app, before = self.app, self.state
        left = app.remaining(before)
        screen, valid, plan = app.screen(before), app.valid_actions(before), app.plan(before)
        if not valid:
            raise UserError(
                f"GUI task {self.task.id} has no valid action at step {self.steps + 1} although it "
                "is not finished: its spec is inconsistent; regenerate it with `tempering gui generate`"
            )
        parsed = parse_output(text)
        reward = dual_reward(parsed, valid, plan, self.weights, self.judge, screen.boxes, app.instruction)
        self.steps += 1
        error, step_ok = "", False
        if not parsed.ok:
            status, error = "parse_error", parsed.error
        else:
            assert parsed.action is not None  # a parsed output has its action
            try:
                self.state = app.execute(before, parsed.action)
            except ActionError as e:
                status, error = "bad_action", str(e)
            else:
                assert left is not None  # not finished, so not failed
                step_ok = app.remaining(self.state) == left - 1
                status = "valid" if step_ok else "invalid"
        now = app.remaining(self.state)
        if now == 0 or now is None:
            outcome = "success" if now == 0 else "failed"
        else:
            outcome = "max_steps" if self.steps >= self.max_steps else ""
        done = bool(outcome)
        feedback = (f"Error: {error}\n" if error else "") + ("" if done else self.observation())
        return StepResult(
            score=reward.total if self.reward == "step" else float(outcome == "success"),
            success=outcome == "success",
            done=done,
            feedback=feedback,
            status=status,
            info={
                "valid": step_ok,
                "format_ok": parsed.ok,
                "error": error,
                "action": parsed.action.to_json() if parsed.action else None,
                "reward": reward.to_json(),
                "outcome": outcome,
                "remaining": now,
            },
        )

    async def step(self, action: str) -> StepResult:
        return self.step_sync(action)


@dataclass
class GuiFamily(TaskFamily):
    """Generated app tasks (form, settings, files, shop, mail, todo) with a difficulty knob."""

    kinds: tuple[str, ...] = tuple(APPS)
    """App kinds to draw from, in turn."""
    difficulty: int = 0
    """0: smallest apps and shortest tasks; each level adds fields, pages, files, items and steps."""
    heldout_share: float = 0.2
    """Share of all tasks (by content hash) reserved for the held-out split."""
    boxes: bool = False
    """Render bounding boxes in observations (longer prompts; needed for clicks by point)."""
    weights: RewardWeights = field(default_factory=RewardWeights)
    """Dual-level reward weights (a dict of them is accepted, as from a config file)."""
    judge: PlanJudge = plan_match
    """Plan judge for the macro reward: a callable, or a `JudgeConfig` / its dict (rule-based by default)."""
    max_steps: int | None = None
    """Step limit per episode; default twice the shortest solution plus two."""
    reward: str = "task"
    """A step's score: `task` (1 when the task is finished after it, else 0: an episode's reward is task
    completion) or `step` (the step's dual-level reward; its parts are in `info["reward"]` either way)."""
    name: str = "gui"
    feedback_template: ClassVar[str] = FEEDBACK_TEMPLATE
    """The `rollout.feedback_template` for these tasks: the new screen, last."""

    def __post_init__(self):
        self.kinds = tuple(self.kinds)
        if isinstance(self.weights, dict):
            self.weights = RewardWeights(**self.weights)
        if isinstance(self.judge, dict):
            self.judge = JudgeConfig(**self.judge)
        if isinstance(self.judge, JudgeConfig):
            self.judge = make_judge(self.judge)
        bad = [k for k in self.kinds if k not in APPS]
        if bad or not self.kinds:
            raise UserError(f"gui: unknown app kinds {bad}; choose from {', '.join(APPS)}")
        if self.difficulty < 0:
            raise UserError(f"gui: difficulty must be >= 0, got {self.difficulty}")
        if self.reward not in ("task", "step"):
            raise UserError(f"gui: reward must be 'task' or 'step', got {self.reward!r}")
        if not 0 < self.heldout_share < 1:
            raise UserError(f"gui: heldout_share must be in (0, 1), got {self.heldout_share}")

    def split_of(self, spec: dict[str, Any]) -> str:
        return "heldout" if int(spec_key(spec)[:8], 16) % 1000 < self.heldout_share * 1000 else "train"

    def tasks(self, split: str, n: int, seed: int = 0) -> list[Task]:
        if split not in ("train", "heldout"):
            raise UserError(f"gui: split must be 'train' or 'heldout', got {split!r}")
        out: list[Task] = []
        seen: set[str] = set()
        for i in range(n):
            kind = self.kinds[i % len(self.kinds)]
            for attempt in range(1000):
                spec = APPS[kind].generate(random.Random(f"{seed}:{kind}:{i}:{attempt}"), self.difficulty)
                key = spec_key(spec)
                if key not in seen and self.split_of(spec) == split:
                    break
            else:
                raise UserError(
                    f"gui: found only {len(out)} distinct {split} tasks of kind {kind!r} at difficulty "
                    f"{self.difficulty}; ask for fewer or raise the difficulty"
                )
            seen.add(key)
            out.append(task_from_spec(spec, self.difficulty, split, self.boxes))
        return out

    def make_env(self, task: Task) -> GuiEnv:
        return GuiEnv(task, self.weights, self.judge, self.boxes, self.max_steps, self.reward)
