"""A file manager: open a folder, select files (scrolling long lists), then delete them or move them
to another folder. Files can be selected in any order; deleting or moving a file the task did not
name fails the task. Opening a folder (even the open one) clears the selection and scrolls to the top.
"""

from __future__ import annotations

import random

from tempering.envs.gui.app import App, pick
from tempering.envs.gui.screen import Element, Screen, State, layout

FOLDERS = ["Docs", "Photos", "Music", "Work", "Archive"]
FILES = [
    "notes.txt",
    "report.pdf",
    "cat.jpg",
    "song.mp3",
    "todo.md",
    "budget.xls",
    "cv.doc",
    "plan.txt",
    "logo.png",
    "draft.md",
    "data.csv",
    "memo.txt",
    "trip.jpg",
    "bill.pdf",
    "readme.md",
    "beat.mp3",
]
PAGE = 4
"""Rows visible at once; longer folders scroll."""


def _sweep(cur: int, windows: set[int]) -> int:
    """Scrolls needed to visit every window in `windows`, starting from window `cur`."""
    if not windows:
        return 0
    lo, hi = min(windows), max(windows)
    return hi - lo + min(abs(cur - lo), abs(cur - hi))


class FilesApp(App):
    kind = "files"

    @classmethod
    def generate(cls, rng: random.Random, difficulty: int) -> dict:
        folders = pick(rng, FOLDERS, min(3 + difficulty // 2, len(FOLDERS)))
        pool = pick(rng, FILES, len(FILES))
        n_main = min(3 + 2 * difficulty, 10)
        files = {folders[0]: pool[:n_main]}
        rest = pool[n_main:]
        for f in folders[1:]:
            k = rng.randint(0, min(2, len(rest)))
            files[f], rest = rest[:k], rest[k:]
        files = {f: files[f] for f in pick(rng, folders, len(folders))}  # the task's folder anywhere in the list
        targets = pick(rng, files[folders[0]], min(1 + difficulty, n_main - 1))
        op = rng.choice(["delete", "move"])
        dest = rng.choice(folders[1:]) if op == "move" else None
        what = ", ".join(targets)
        instruction = (
            f"Files: delete {what} from {folders[0]}."
            if op == "delete"
            else (f"Files: move {what} from {folders[0]} to {dest}.")
        )
        return {
            "kind": cls.kind,
            "folder": folders[0],
            "op": op,
            "dest": dest,
            "targets": targets,
            "texts": [],
            "init": {"cwd": rng.choice(folders), "files": files, "sel": [], "top": 0, "bad": False},
            "instruction": instruction,
        }

    def screen(self, state: State) -> Screen:
        cwd, names = state["cwd"], state["files"][state["cwd"]]
        els = []
        for f in state["files"]:

            def open_folder(s, f=f):
                s.update(cwd=f, sel=[], top=0)

            els.append(Element("", "link", f, state="selected" if f == cwd else "", on_click=open_folder))
        els.append(Element("", "button", "Delete", on_click=lambda s: self._apply(s, "delete", None)))
        others = tuple(f for f in state["files"] if f != cwd)
        els.append(Element("", "combobox", "Move to", options=others, on_select=lambda s, d: self._apply(s, "move", d)))
        top = state["top"]
        for name in names[top * PAGE : (top + 1) * PAGE]:

            def toggle(s, name=name):
                s["sel"] = [n for n in s["sel"] if n != name] if name in s["sel"] else s["sel"] + [name]

            els.append(Element("", "row", name, state="selected" if name in state["sel"] else "", on_click=toggle))
        scroll = {}
        if top > 0:
            scroll["up"] = lambda s: s.update(top=s["top"] - 1)
        if (top + 1) * PAGE < len(names):
            scroll["down"] = lambda s: s.update(top=s["top"] + 1)
        return Screen(f"Files > {cwd}", layout(els), on_scroll=scroll)

    def _apply(self, state: State, op: str, dest: str | None) -> None:
        sel = state["sel"]
        if not sel:
            return
        spec = self.spec
        ok = op == spec["op"] and dest == spec["dest"] and state["cwd"] == spec["folder"]
        if not ok or not set(sel) <= set(spec["targets"]):
            state["bad"] = True
        here = state["files"][state["cwd"]]
        state["files"][state["cwd"]] = [n for n in here if n not in sel]
        if dest is not None:
            state["files"][dest] = state["files"][dest] + sel
        state["sel"] = []
        state["top"] = min(state["top"], max(0, (len(state["files"][state["cwd"]]) - 1) // PAGE))

    def _costs(self, state: State) -> tuple[int, int | None, list[str], list[str]]:
        """(cost by reopening the folder, cost in place or None, files left to act on, rows to toggle)."""
        names = state["files"][self.spec["folder"]]
        left = [n for n in names if n in self.spec["targets"]]
        fresh = 1 + len(left) + _sweep(0, {names.index(n) // PAGE for n in left}) + 1
        if state["cwd"] != self.spec["folder"]:
            return fresh, None, left, []
        flip = [n for n in names if (n in state["sel"]) != (n in left)]
        in_place = len(flip) + _sweep(state["top"], {names.index(n) // PAGE for n in flip}) + 1
        return fresh, in_place, left, flip

    def remaining(self, state: State) -> int | None:
        if state["bad"]:
            return None
        fresh, in_place, left, _ = self._costs(state)
        if not left:
            return 0
        return fresh if in_place is None else min(fresh, in_place)

    def plan(self, state: State) -> list[str]:
        if self.remaining(state) in (0, None):
            return []
        fresh, in_place, left, flip = self._costs(state)
        final = "delete" if self.spec["op"] == "delete" else f"move to {self.spec['dest']}"
        if in_place is None or fresh < in_place:
            return [f"open {self.spec['folder']}"] + [f"select {n}" for n in left] + [final]
        return [f"{'unselect' if n in state['sel'] else 'select'} {n}" for n in flip] + [final]
