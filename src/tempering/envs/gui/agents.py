"""Agents that play the offline apps, for building datasets: scripted ones that read the privileged
annotation (an oracle following one valid path, a noisy one that errs), and a hook for model agents."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from tempering.envs.gui.action import Action, format_output
from tempering.envs.gui.env import StepView
from tempering.envs.gui.screen import Screen
from tempering.errors import UserError


class Agent(Protocol):
    name: str

    def act(self, view: StepView) -> str:
        """The raw text output for this state."""


def describe(action: Action, screen: Screen) -> str:
    """A short reason for `action`: what it does to which element."""
    if action.type == "scroll":
        return f"scroll {action.value} to see more"
    if action.type == "wait":
        return "wait for the page to change"
    el = screen.find(action.target or "")
    name = f"{el.role} {el.text}" if el else f"#{action.target}"
    if action.type == "click":
        return f"click {name}"
    return f"{'type' if action.type == 'type' else 'choose'} {action.value} in {name}"


@dataclass
class OracleAgent:
    """Follows one shortest path: a random valid action each step, with the true remaining plan."""

    seed: int = 0
    """Seed of the choice among the valid actions."""
    name: str = "oracle"
    rng: random.Random = field(init=False, repr=False)

    def __post_init__(self):
        self.rng = random.Random(self.seed)

    def act(self, view: StepView) -> str:
        action = self.rng.choice(view.valid)
        return format_output(action, view.plan, describe(action, view.screen))


@dataclass
class NoisyAgent:
    """The oracle, except that it sometimes takes a wrong action or writes malformed output."""

    p_wrong: float = 0.2
    """Chance of a random action that is not valid (when one exists)."""
    p_malformed: float = 0.1
    """Chance of a truncated, unparseable output."""
    seed: int = 0
    name: str = "noisy"
    rng: random.Random = field(init=False, repr=False)

    def __post_init__(self):
        self.rng = random.Random(self.seed)

    def act(self, view: StepView) -> str:
        u = self.rng.random()
        wrong = [a for a in view.candidates if a not in view.valid]
        if u < self.p_wrong and wrong:
            action = self.rng.choice(wrong)
        else:
            action = self.rng.choice(view.valid)
        text = format_output(action, view.plan, describe(action, view.screen))
        if self.rng.random() < self.p_malformed:
            return text[: self.rng.randint(1, len(text) - 1)]
        return text


@dataclass
class ModelAgent:
    """Any text generator (a model behind `generate`), seeing only the prompt."""

    generate: Callable[[str], str]
    """Prompt -> output text."""
    name: str = "model"

    def act(self, view: StepView) -> str:
        return self.generate(view.prompt)


def make_agent(kind: str, seed: int = 0, noise: float = 0.2) -> Agent:
    """A scripted agent by name: `oracle` or `noisy` (wrong-action chance `noise`)."""
    if kind == "oracle":
        return OracleAgent(seed=seed)
    if kind == "noisy":
        if not 0 <= noise <= 1:
            raise UserError(f"noise must be in [0, 1], got {noise}")
        return NoisyAgent(p_wrong=noise, p_malformed=noise / 2, seed=seed)
    raise UserError(f"unknown agent {kind!r}; use oracle or noisy (model agents are built in code: ModelAgent)")
