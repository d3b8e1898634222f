"""Screens as accessibility trees, and their text rendering for the policy.

A screen is a flat list of elements (id, role, text, bounding box, state), like the accessibility
tree a real GUI exposes. The offline apps attach behaviour to elements (what a click, a typed text or
a chosen option does); the browser environment builds the same elements from the page's DOM. Both
render to the same short text, one element per line:

    Sign up
    #1 textbox Name [Ana]
    #2 combobox City [] {Oslo|Rome}
    #3 button Submit
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

State = dict[str, Any]
"""An app's world state: plain JSON-able data, copied before every transition."""

Effect = Callable[..., None]
"""Mutates a (copied) state in place: `effect(state)` for clicks, `effect(state, text)` for text."""


@dataclass
class Element:
    """One node of the accessibility tree."""

    id: str
    """Short id the policy targets (`"3"`, rendered `#3`); unique within a screen. Empty for a line of
    plain text on a live page (rendered as the text alone: not a target)."""
    role: str
    """`button`, `link`, `tab`, `textbox`, `checkbox`, `switch`, `combobox`, `row`, `text`, `heading`."""
    text: str = ""
    """Visible label or content."""
    bbox: tuple[int, int, int, int] = (0, 0, 0, 0)
    """Bounding box in pixels: x, y, width, height."""
    state: str = ""
    """Widget state as shown: `on`/`off`, `checked`, `selected`, or a text field's value."""
    options: tuple[str, ...] = ()
    """Choices of a combobox."""
    on_click: Effect | None = field(default=None, repr=False, compare=False)
    """What clicking does (offline apps only); None: clicking does nothing."""
    on_type: Effect | None = field(default=None, repr=False, compare=False)
    """What typing a text does; None: not editable."""
    on_select: Effect | None = field(default=None, repr=False, compare=False)
    """What choosing an option does; None: not a choice."""

    def contains(self, x: float, y: float) -> bool:
        bx, by, bw, bh = self.bbox
        return bx <= x < bx + bw and by <= y < by + bh

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "role": self.role, "text": self.text, "bbox": list(self.bbox)}
        if self.state:
            out["state"] = self.state
        if self.options:
            out["options"] = list(self.options)
        return out

    def render(self, boxes: bool = False) -> str:
        if not self.id:  # plain text on a live page: read, not a target
            return self.text
        line = f"#{self.id} {self.role}"
        if self.text:
            line += f" {self.text}"
        if self.state or self.role in ("textbox", "combobox"):
            line += f" [{self.state}]"
        if self.options:
            line += " {" + "|".join(self.options) + "}"
        if boxes:
            line += " @" + ",".join(str(v) for v in self.bbox)
        return line


@dataclass
class Screen:
    """What the policy sees at one state."""

    title: str
    """Window or page title (first line of the rendering)."""
    elements: list[Element]
    """The accessibility tree, flattened in reading order."""
    on_scroll: dict[str, Effect] = field(default_factory=dict, repr=False, compare=False)
    """Scroll directions available (`up`, `down`) and what each does."""

    def find(self, element_id: str) -> Element | None:
        return next((e for e in self.elements if e.id == element_id), None)

    def at(self, x: float, y: float) -> Element | None:
        """The smallest element whose box contains the point (the one a real click would hit)."""
        hits = [e for e in self.elements if e.contains(x, y)]
        return min(hits, key=lambda e: e.bbox[2] * e.bbox[3]) if hits else None

    @property
    def boxes(self) -> dict[str, tuple[float, float, float, float]]:
        """id -> (x, y, w, h), typed as the reward's boxes (the pixels are ints)."""
        return {e.id: e.bbox for e in self.elements}

    def render(self, boxes: bool = False) -> str:
        """Compact text, one line per element; `boxes` adds `@x,y,w,h` to each line."""
        lines = [self.title] + [e.render(boxes) for e in self.elements]
        if self.on_scroll:
            lines.append("scroll: " + ",".join(sorted(self.on_scroll)))
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {"title": self.title, "elements": [e.to_json() for e in self.elements], "scroll": sorted(self.on_scroll)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Screen:
        """A recorded screen, without behaviour (for reading and describing, not for executing)."""
        elements = [
            Element(
                e["id"], e["role"], e.get("text", ""), tuple(e["bbox"]), e.get("state", ""), tuple(e.get("options", ()))
            )
            for e in d["elements"]
        ]
        return cls(d["title"], elements)


def layout(elements: list[Element], x: int = 10, y: int = 40, row: int = 30) -> list[Element]:
    """Give elements a simple one-column layout (top to bottom), with ids 1..n in reading order."""
    for i, e in enumerate(elements):
        e.id = str(i + 1)
        e.bbox = (x, y + i * row, 12 + 8 * len(e.text or e.role), row - 6)
    return elements
