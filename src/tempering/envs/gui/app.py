"""An offline app: a world state, the screen it shows, and an exact count of the steps left.

Each app kind (form, settings, files, shop, mail, todo) says three things about a state: the `screen`
(elements with the effects of clicking, typing or choosing), how many actions at least are still
needed to finish the task (`remaining`; 0 when done, None when the task can no longer be done), and
the subtasks still to do (`plan`). Everything else is shared:

- executing an action = apply the effect of the element it targets to a copy of the state;
- the valid actions at a state (the multi-solution annotation) = every candidate action after which
  one step fewer remains, i.e. every first step of some shortest way to finish the task.

Tests check each kind's `remaining` against a breadth-first search over the same candidates.
"""

from __future__ import annotations

import abc
import random
from typing import Any, ClassVar

from tempering.envs.gui.action import Action
from tempering.envs.gui.screen import Screen, State


class ActionError(Exception):
    """The action cannot be executed on this screen (no such element, not a text field, ...)."""


def copy_state(x: Any) -> Any:
    """A deep copy of plain JSON data (dicts, lists, scalars): several times faster than `copy.deepcopy`,
    which matters because every candidate action is executed on a copy to find the valid ones."""
    if isinstance(x, dict):
        return {k: copy_state(v) for k, v in x.items()}
    if isinstance(x, list):
        return [copy_state(v) for v in x]
    return x


def norm(text: str) -> str:
    """Typed text is compared case- and spacing-insensitively."""
    return " ".join(str(text).split()).casefold()


class App(abc.ABC):
    """One generated app with one task. The `spec` is plain JSON: it round-trips through task files."""

    kind: ClassVar[str]

    def __init__(self, spec: dict[str, Any]):
        self.spec = spec

    @classmethod
    @abc.abstractmethod
    def generate(cls, rng: random.Random, difficulty: int) -> dict[str, Any]:
        """A spec: `kind`, `instruction`, `init` (the first state), `texts` (what the task types), and
        whatever the kind needs. Difficulty 0 is the smallest app; each level grows it."""

    @abc.abstractmethod
    def screen(self, state: State) -> Screen:
        """The screen at `state`, with the effect of each element."""

    @abc.abstractmethod
    def remaining(self, state: State) -> int | None:
        """Fewest actions that finish the task from `state`; 0 when done, None when it has failed."""

    @abc.abstractmethod
    def plan(self, state: State) -> list[str]:
        """Subtasks still to do, in a sensible order (the reference plan for the macro reward)."""

    @property
    def instruction(self) -> str:
        return self.spec["instruction"]

    def initial(self) -> State:
        return copy_state(self.spec["init"])

    def execute(self, state: State, action: Action) -> State:
        """The state after `action`; raises ActionError when it cannot be executed here."""
        screen = self.screen(state)
        new = copy_state(state)
        if action.type == "wait":  # nothing changes by itself in an offline app
            return new
        if action.type == "scroll":
            effect = screen.on_scroll.get(action.value or "")
            if effect is None:
                raise ActionError(f"cannot scroll {action.value} on this screen")
            effect(new)
            return new
        if action.point is not None:
            el = screen.at(*action.point)
            if el is None:
                raise ActionError(f"no element at ({action.point[0]:g}, {action.point[1]:g})")
        else:
            el = screen.find(action.target or "")
            if el is None:
                ids = ", ".join(f"#{e.id}" for e in screen.elements)
                raise ActionError(f"no element #{action.target} on screen (ids: {ids})")
        if action.type == "click":
            if el.on_click is not None:
                el.on_click(new)
        elif action.type == "type":
            if el.on_type is None:
                raise ActionError(f"#{el.id} is a {el.role}, not a text field")
            el.on_type(new, action.value or "")
        elif action.type == "select":
            if el.on_select is None:
                raise ActionError(f"#{el.id} is a {el.role}, not a list of options")
            option = next((o for o in el.options if norm(o) == norm(action.value or "")), None)
            if option is None:
                raise ActionError(f"#{el.id} has no option {action.value!r} (options: {', '.join(el.options)})")
            el.on_select(new, option)
        else:
            raise ActionError(f"unknown action type {action.type!r}")
        return new

    def candidates(self, state: State) -> list[Action]:
        """Every action worth considering: clicks on clickable elements, the task's texts typed into
        each text field, each option of each list, each scroll direction."""
        screen = self.screen(state)
        out: list[Action] = []
        for e in screen.elements:
            if e.on_click is not None:
                out.append(Action("click", target=e.id))
            if e.on_type is not None:
                out += [Action("type", target=e.id, value=t) for t in self.spec.get("texts", [])]
            if e.on_select is not None:
                out += [Action("select", target=e.id, value=o) for o in e.options]
        out += [Action("scroll", value=d) for d in sorted(screen.on_scroll)]
        return out

    def valid_actions(self, state: State) -> list[Action]:
        """All candidate actions on some shortest way to finish the task (empty when done or failed)."""
        left = self.remaining(state)
        if not left:
            return []
        return [a for a in self.candidates(state) if self.remaining(self.execute(state, a)) == left - 1]


def pick(rng: random.Random, pool: list[str], k: int) -> list[str]:
    """`k` distinct items of `pool`, in a random order."""
    return rng.sample(pool, k)
