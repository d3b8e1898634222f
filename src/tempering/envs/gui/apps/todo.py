"""A to-do list: tick named items and add new ones (type the text, then press Add), in any order.
The task is done as soon as every named item is ticked and every new item is on the list."""

from __future__ import annotations

import random

from tempering.envs.gui.app import App, norm, pick
from tempering.envs.gui.screen import Element, Screen, State, layout

ITEMS = ["milk", "eggs", "call mom", "pay rent", "gym", "read", "walk dog", "fix bike", "email Bo", "bread"]


class TodoApp(App):
    kind = "todo"

    @classmethod
    def generate(cls, rng: random.Random, difficulty: int) -> dict:
        pool = pick(rng, ITEMS, len(ITEMS))
        n_items = min(2 + difficulty, 6)
        n_check, n_add = min(1 + difficulty // 2, n_items), min(1 + difficulty // 2, 3)
        items = [{"text": t, "done": False} for t in pool[:n_items]]
        for it in items[n_check:]:
            it["done"] = rng.random() < 0.3
        check = [it["text"] for it in items[:n_check]]
        add = pool[n_items : n_items + n_add]
        rng.shuffle(items)
        parts = [f"tick {t}" for t in check] + [f"add {t}" for t in add]
        return {
            "kind": cls.kind,
            "check": check,
            "add": add,
            "texts": add,
            "init": {"items": items, "box": ""},
            "instruction": f"To-do: {', '.join(parts)}.",
        }

    def screen(self, state: State) -> Screen:
        def put(s, v):
            s["box"] = v

        els = [
            Element("", "textbox", "New item", state=state["box"], on_type=put),
            Element("", "button", "Add", on_click=self._add),
        ]
        for i, it in enumerate(state["items"]):

            def tick(s, i=i):
                s["items"][i]["done"] = not s["items"][i]["done"]

            els.append(Element("", "checkbox", it["text"], state="on" if it["done"] else "off", on_click=tick))
        return Screen("To-do", layout(els))

    @staticmethod
    def _add(state: State) -> None:
        if norm(state["box"]):
            state["items"].append({"text": state["box"], "done": False})
            state["box"] = ""

    def _gaps(self, state: State) -> tuple[list[str], list[str]]:
        """(named items not ticked, new items not on the list)."""
        have = {norm(it["text"]) for it in state["items"]}
        ticked = {norm(it["text"]) for it in state["items"] if it["done"]}
        untick = [t for t in self.spec["check"] if norm(t) not in ticked]
        return untick, [t for t in self.spec["add"] if norm(t) not in have]

    def remaining(self, state: State) -> int | None:
        untick, missing = self._gaps(state)
        typed = any(norm(state["box"]) == norm(t) for t in missing)
        return len(untick) + 2 * len(missing) - (1 if typed else 0)

    def plan(self, state: State) -> list[str]:
        untick, missing = self._gaps(state)
        return [f"tick {t}" for t in untick] + [f"add {t}" for t in missing]
