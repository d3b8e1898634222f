"""The action format: one JSON object per step, and its parser.

    {"reason": "the form needs a name", "subtasks": ["enter Name Ana", "submit"],
     "action": {"type": "type", "target": "1", "value": "Ana"}}

`type` is one of click, type, select, scroll, wait. `target` is an element id (`"3"`, `3` or `"#3"`), or
for a click an `[x, y]` point; `value` is the text to type (it replaces the field's content), the option
to select, or the scroll direction. `wait` takes neither: it lets a live page change (suggestions that
appear after a delay) before the next screen is read.
Malformed output is reported as a format failure (`Parsed.ok` False, with the reason), never raised.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

ACTION_TYPES = ("click", "type", "select", "scroll", "wait")
SCROLL_DIRECTIONS = ("up", "down")


@dataclass(frozen=True)
class Action:
    """One GUI action."""

    type: str
    """click, type, select, scroll or wait."""
    target: str | None = None
    """Element id (without `#`); None for scroll, wait and a click by point."""
    value: str | None = None
    """Text to type, option to select, or scroll direction."""
    point: tuple[float, float] | None = None
    """Click position in pixels, for a click by coordinates instead of element id."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type}
        if self.point is not None:
            out["target"] = list(self.point)
        elif self.target is not None:
            out["target"] = self.target
        if self.value is not None:
            out["value"] = self.value
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Action:
        """Inverse of `to_json`; raises ValueError naming the problem."""
        return _action(d)

    def __str__(self) -> str:
        return json.dumps(self.to_json(), separators=(",", ":"))


@dataclass
class Parsed:
    """A policy output, parsed."""

    ok: bool
    """The output is one well-formed JSON object in the action format."""
    action: Action | None = None
    """The action (None unless `ok`)."""
    reason: str = ""
    subtasks: list[str] = field(default_factory=list)
    """The policy's plan: subtasks still to do."""
    error: str = ""
    """Why the output is malformed (empty when `ok`)."""


def _target(raw: Any) -> tuple[str | None, tuple[float, float] | None]:
    if isinstance(raw, bool):
        raise ValueError("target must be an element id or an [x, y] point")
    if isinstance(raw, int):
        return str(raw), None
    if isinstance(raw, str) and raw.strip().lstrip("#"):
        return raw.strip().lstrip("#"), None
    if (
        isinstance(raw, list)
        and len(raw) == 2
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in raw)
    ):
        return None, (float(raw[0]), float(raw[1]))
    raise ValueError("target must be an element id or an [x, y] point")


def _action(d: Any) -> Action:
    if not isinstance(d, dict):
        raise ValueError("`action` must be an object")
    kind = d.get("type")
    if kind not in ACTION_TYPES:
        raise ValueError(f"action type must be one of {', '.join(ACTION_TYPES)}, got {kind!r}")
    value = d.get("value")
    if value is not None and not isinstance(value, str):
        raise ValueError("action value must be a string")
    if kind == "wait":
        return Action("wait")
    if kind == "scroll":
        if value not in SCROLL_DIRECTIONS:
            raise ValueError("scroll needs value 'up' or 'down'")
        return Action("scroll", value=value)
    if "target" not in d:
        raise ValueError(f"{kind} needs a target")
    target, point = _target(d["target"])
    if kind == "click":
        return Action("click", target=target, point=point)
    if point is not None:
        raise ValueError(f"{kind} needs an element id as target, not a point")
    if value is None:
        raise ValueError(f"{kind} needs a value")
    return Action(kind, target=target, value=value)


def parse_output(text: str) -> Parsed:
    """Parse one policy output; never raises."""
    try:
        obj = json.loads(text.strip())
    except (json.JSONDecodeError, TypeError, AttributeError) as e:
        return Parsed(False, error=f"not one JSON object ({e})")
    if not isinstance(obj, dict):
        return Parsed(False, error="not a JSON object")
    reason, subtasks = obj.get("reason"), obj.get("subtasks")
    if not isinstance(reason, str):
        return Parsed(False, error="`reason` must be a string")
    if not isinstance(subtasks, list) or not all(isinstance(s, str) for s in subtasks):
        return Parsed(False, error="`subtasks` must be a list of strings")
    if "action" not in obj:
        return Parsed(False, error="missing `action`")
    try:
        action = _action(obj["action"])
    except ValueError as e:
        return Parsed(False, error=str(e))
    return Parsed(True, action=action, reason=reason, subtasks=subtasks)


def format_output(action: Action, subtasks: list[str], reason: str = "") -> str:
    """The output a well-behaved policy writes (used by scripted agents and for examples)."""
    return json.dumps(
        {"reason": reason, "subtasks": subtasks, "action": action.to_json()}, separators=(",", ":"), ensure_ascii=False
    )
