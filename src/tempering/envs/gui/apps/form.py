"""A form: fill text fields, choose from lists, tick boxes (in any order), then submit.

Submitting with a wrong value fails the task; fields can be filled in any order, so every unfinished
field is a valid next action.
"""

from __future__ import annotations

import random
from typing import Any

from tempering.envs.gui.app import App, norm, pick
from tempering.envs.gui.screen import Element, Screen, State, layout

TITLES = ["Sign up", "Order", "Profile", "Booking", "Survey"]
TEXT = {
    "Name": ["Ana", "Bo", "Kai", "Mia", "Leo", "Zoe"],
    "City": ["Oslo", "Rome", "Lima", "Kyiv", "Pune"],
    "Pet": ["cat", "dog", "fish"],
    "Code": ["A7", "K2", "Q9", "X4"],
}
SELECT = {"Size": ["S", "M", "L"], "Plan": ["Free", "Pro", "Team"], "Day": ["Mon", "Tue", "Wed", "Fri"]}
CHECK = ["Terms", "News", "Public"]


class FormApp(App):
    kind = "form"

    @classmethod
    def generate(cls, rng: random.Random, difficulty: int) -> dict:
        labels = pick(rng, list(TEXT) + list(SELECT) + CHECK, min(2 + difficulty, 10))
        fields: list[dict[str, Any]] = []
        goal: dict[str, Any] = {}
        values: dict[str, Any] = {}
        for label in labels:
            if label in TEXT:
                fields.append({"label": label, "kind": "text"})
                values[label], goal[label] = "", rng.choice(TEXT[label])
            elif label in SELECT:
                fields.append({"label": label, "kind": "select", "options": SELECT[label]})
                values[label], goal[label] = "", rng.choice(SELECT[label])
            else:
                fields.append({"label": label, "kind": "check"})
                values[label] = rng.random() < 0.3
                goal[label] = not values[label]
        for label in pick(rng, labels, difficulty // 2):  # distractors: fields the task leaves alone
            del goal[label]
        title = rng.choice(TITLES)
        parts = [f"{k} {'on' if v is True else 'off' if v is False else v}" for k, v in goal.items()]
        return {
            "kind": cls.kind,
            "title": title,
            "fields": fields,
            "goal": goal,
            "texts": sorted({goal[f["label"]] for f in fields if f["kind"] == "text" and f["label"] in goal}),
            "init": {"values": values, "submitted": None},
            "instruction": f"{title}: {', '.join(parts)}, then submit.",
        }

    def screen(self, state: State) -> Screen:
        els = []
        for f in self.spec["fields"]:
            label, value = f["label"], state["values"][f["label"]]

            def setter(s, v, label=label):
                s["values"][label] = v

            if f["kind"] == "text":
                els.append(Element("", "textbox", label, state=value, on_type=setter))
            elif f["kind"] == "select":
                els.append(Element("", "combobox", label, state=value, options=tuple(f["options"]), on_select=setter))
            else:

                def flip(s, label=label):
                    s["values"][label] = not s["values"][label]

                els.append(Element("", "checkbox", label, state="on" if value else "off", on_click=flip))
        els.append(Element("", "button", "Submit", on_click=self._submit))
        return Screen(self.spec["title"], layout(els))

    def _wrong(self, state: State) -> list[str]:
        return [k for k, v in self.spec["goal"].items() if not _same(state["values"][k], v)]

    def _submit(self, state: State) -> None:
        if state["submitted"] is None:
            state["submitted"] = "bad" if self._wrong(state) else "ok"

    def remaining(self, state: State) -> int | None:
        if state["submitted"] is not None:
            return 0 if state["submitted"] == "ok" else None
        return len(self._wrong(state)) + 1

    def plan(self, state: State) -> list[str]:
        if state["submitted"] is not None:
            return []
        kinds = {f["label"]: f["kind"] for f in self.spec["fields"]}
        steps = []
        for k in self._wrong(state):
            v = self.spec["goal"][k]
            if kinds[k] == "check":
                steps.append(f"turn {'on' if v else 'off'} {k}")
            else:
                steps.append(f"{'enter' if kinds[k] == 'text' else 'choose'} {k} {v}")
        return steps + ["submit"]


def _same(have, want) -> bool:
    return have == want if isinstance(want, bool) else norm(have) == norm(want)
