"""A mail client: write and send a message (fields in any order), or delete every mail from one
sender (in any order). Sending a wrong message, or deleting a mail the task did not name, fails."""

from __future__ import annotations

import random
from functools import partial

from tempering.envs.gui.app import App, norm, pick
from tempering.envs.gui.screen import Element, Screen, State, layout

PEOPLE = ["Bob", "Eva", "Ian", "Amy", "Raj", "Uma"]
SUBJECTS = ["Lunch", "Report", "Trip", "Party", "Bill", "Game", "Visit", "News"]
BODIES = ["ok thanks", "see you", "call me", "on my way", "sounds good"]


class MailApp(App):
    kind = "mail"

    @classmethod
    def generate(cls, rng: random.Random, difficulty: int) -> dict:
        n = min(2 + difficulty, 6)
        subjects = pick(rng, SUBJECTS, n)
        task = rng.choice(["send", "delete"])
        sender = rng.choice(PEOPLE)
        others = [p for p in PEOPLE if p != sender]
        n_from = min(1 + difficulty // 2, n - 1)
        inbox = [[sender if i < n_from else rng.choice(others), s] for i, s in enumerate(subjects)]
        rng.shuffle(inbox)
        fields = ["To", "Subject"] + (["Body"] if difficulty >= 1 else [])
        draft_goal = {"To": sender.lower(), "Subject": rng.choice(SUBJECTS), "Body": rng.choice(BODIES)}
        draft_goal = {k: draft_goal[k] for k in fields}
        if task == "send":
            parts = ", ".join(f"{k} {v}" for k, v in draft_goal.items())
            instruction = f"Mail: send a mail with {parts}."
        else:
            instruction = f"Mail: delete every mail from {sender}."
        return {
            "kind": cls.kind,
            "task": task,
            "sender": sender,
            "fields": fields,
            "draft": draft_goal if task == "send" else {},
            "texts": sorted(draft_goal.values()) if task == "send" else [],
            "init": {"view": "inbox", "inbox": inbox, "draft": {k: "" for k in fields}, "status": None},
            "instruction": instruction,
        }

    def screen(self, state: State) -> Screen:
        if state["view"] == "inbox":
            els = [Element("", "button", "Compose", on_click=self._compose)]
            for i, (who, subject) in enumerate(state["inbox"]):
                els.append(Element("", "button", f"Delete {who}: {subject}", on_click=partial(self._delete, i=i)))
            return Screen("Inbox", layout(els))
        els = []
        for k in self.spec["fields"]:

            def put(s, v, k=k):
                s["draft"][k] = v

            els.append(Element("", "textbox", k, state=state["draft"][k], on_type=put))
        els.append(Element("", "button", "Send", on_click=self._send))
        els.append(Element("", "button", "Discard", on_click=lambda s: s.update(view="inbox")))
        return Screen("New mail", layout(els))

    def _compose(self, state: State) -> None:
        state["view"] = "compose"
        state["draft"] = {k: "" for k in self.spec["fields"]}

    def _delete(self, state: State, i: int) -> None:
        who, _ = state["inbox"].pop(i)
        if self.spec["task"] != "delete" or who != self.spec["sender"]:
            state["status"] = "bad"

    def _wrong_fields(self, state: State) -> list[str]:
        return [k for k, v in self.spec["draft"].items() if norm(state["draft"][k]) != norm(v)]

    def _send(self, state: State) -> None:
        ok = self.spec["task"] == "send" and not self._wrong_fields(state)
        state["status"] = state["status"] or ("ok" if ok else "bad")
        state["view"] = "inbox"

    def _targets(self, state: State) -> list[str]:
        return [f"{w}: {s}" for w, s in state["inbox"] if w == self.spec["sender"]]

    def remaining(self, state: State) -> int | None:
        if state["status"] == "bad":
            return None
        if self.spec["task"] == "delete":
            left = len(self._targets(state))
            return left + (1 if left and state["view"] == "compose" else 0)
        if state["status"] == "ok":
            return 0
        if state["view"] == "inbox":
            return 1 + len(self.spec["fields"]) + 1
        return len(self._wrong_fields(state)) + 1

    def plan(self, state: State) -> list[str]:
        if not self.remaining(state):
            return []
        if self.spec["task"] == "delete":
            back = ["discard"] if state["view"] == "compose" else []
            return back + [f"delete {t}" for t in self._targets(state)]
        wrong = list(self.spec["fields"]) if state["view"] == "inbox" else self._wrong_fields(state)
        start = ["compose"] if state["view"] == "inbox" else []
        return start + [f"enter {k} {self.spec['draft'][k]}" for k in wrong] + ["send"]
