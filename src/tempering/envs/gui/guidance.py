"""Guidance for guided on-policy distillation: text appended to the teacher's prompt only, built from
the valid actions A* (Single-GT, Multi-GT, or Most-Matched-GT: the a* closest to the student's own
action under phi). `states.py` applies them to recorded states as teacher prompt builders."""

from __future__ import annotations

import json
from collections.abc import Sequence

from tempering.envs.gui.action import Action
from tempering.envs.gui.reward import Box, phi
from tempering.errors import UserError


def _show(action: Action) -> str:
    return json.dumps(action.to_json(), separators=(",", ":"), ensure_ascii=False)


def guidance_single(valid: Sequence[Action]) -> str:
    """Single-GT: one valid action (the first annotated)."""
    return f"Hint: a correct action is {_show(valid[0])}"


def guidance_multi(valid: Sequence[Action]) -> str:
    """Multi-GT: all K valid actions."""
    return "Hint: correct actions are " + " or ".join(_show(a) for a in valid)


def most_matched(valid: Sequence[Action], student: Action | None, boxes: dict[str, Box] | None = None) -> Action:
    """The valid action closest to the student's own under phi (the first on ties or without one)."""
    if student is None:
        return valid[0]
    return max(valid, key=lambda ref: phi(student, ref, boxes))


def guidance_most_matched(valid: Sequence[Action], student: Action | None, boxes: dict[str, Box] | None = None) -> str:
    """Most-Matched-GT: the one valid action nearest the student's own output."""
    return f"Hint: a correct action is {_show(most_matched(valid, student, boxes))}"


def build_guidance(
    mode: str, valid: Sequence[Action], student: Action | None = None, boxes: dict[str, Box] | None = None
) -> str:
    """Guidance text for `mode` in single, multi, most_matched."""
    if not valid:
        raise UserError("guidance needs at least one valid action; this state has none (a finished or broken task)")
    if mode == "single":
        return guidance_single(valid)
    if mode == "multi":
        return guidance_multi(valid)
    if mode == "most_matched":
        return guidance_most_matched(valid, student, boxes)
    raise UserError(f"unknown guidance mode {mode!r}; use single, multi or most_matched")


def teacher_prompt(prompt: str, guidance: str) -> str:
    """The teacher's prompt: the student's prompt with the guidance after it (the student never sees it)."""
    return f"{prompt}\n{guidance}"
