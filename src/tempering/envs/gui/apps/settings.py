"""A settings app: pages of on/off switches behind tabs. Switches can be set in any order, and pages
visited in any order; the task is done as soon as every named switch is right."""

from __future__ import annotations

import random

from tempering.envs.gui.app import App, pick
from tempering.envs.gui.screen import Element, Screen, State, layout

PAGES = {
    "Display": ["Dark mode", "Night light", "Big text", "Auto dim"],
    "Sound": ["Mute", "Vibrate", "Key clicks", "Alarms"],
    "Network": ["Wi-Fi", "Bluetooth", "Flight mode", "Hotspot"],
    "Privacy": ["Location", "Camera", "Microphone", "Ads"],
    "Battery": ["Saver", "Percent", "Eco charge", "Sleep"],
}


class SettingsApp(App):
    kind = "settings"

    @classmethod
    def generate(cls, rng: random.Random, difficulty: int) -> dict:
        n_pages = min(2 + difficulty // 2, len(PAGES))
        per_page = min(2 + (difficulty + 1) // 2, 4)
        pages = {p: pick(rng, PAGES[p], per_page) for p in pick(rng, list(PAGES), n_pages)}
        switches = [s for names in pages.values() for s in names]
        on = {s: rng.random() < 0.5 for s in switches}
        goal = {s: not on[s] for s in pick(rng, switches, min(1 + difficulty, len(switches)))}
        parts = [f"turn {'on' if v else 'off'} {s}" for s, v in goal.items()]
        return {
            "kind": cls.kind,
            "pages": pages,
            "goal": goal,
            "texts": [],
            "init": {"page": rng.choice(list(pages)), "on": on},
            "instruction": f"Settings: {', '.join(parts)}.",
        }

    def screen(self, state: State) -> Screen:
        page = state["page"]
        els = []
        for p in self.spec["pages"]:

            def go(s, p=p):
                s["page"] = p

            els.append(Element("", "tab", p, state="selected" if p == page else "", on_click=go))
        for sw in self.spec["pages"][page]:

            def flip(s, sw=sw):
                s["on"][sw] = not s["on"][sw]

            els.append(Element("", "switch", sw, state="on" if state["on"][sw] else "off", on_click=flip))
        return Screen(f"Settings > {page}", layout(els))

    def _wrong(self, state: State) -> list[str]:
        return [s for s, v in self.spec["goal"].items() if state["on"][s] != v]

    def _page_of(self, switch: str) -> str:
        return next(p for p, names in self.spec["pages"].items() if switch in names)

    def remaining(self, state: State) -> int | None:
        wrong = self._wrong(state)
        return len(wrong) + len({self._page_of(s) for s in wrong} - {state["page"]})

    def plan(self, state: State) -> list[str]:
        wrong = self._wrong(state)
        steps = []
        for p in sorted(self.spec["pages"], key=lambda p: p != state["page"]):
            here = [s for s in wrong if self._page_of(s) == p]
            if here and p != state["page"]:
                steps.append(f"open {p}")
            steps += [f"turn {'on' if self.spec['goal'][s] else 'off'} {s}" for s in here]
        return steps
