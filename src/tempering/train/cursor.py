"""The data cursor: epochs over a prompt pool in a seeded order; its state resumes exactly."""

from __future__ import annotations

import random
from typing import Any


class PromptCursor:
    def __init__(self, size: int, seed: int):
        self.size, self.seed = size, seed
        self.epoch, self.pos = 0, 0
        self._order = self._perm()

    def _perm(self) -> list[int]:
        order = list(range(self.size))
        random.Random(f"{self.seed}/{self.epoch}").shuffle(order)
        return order

    def next(self, n: int) -> list[int]:
        out: list[int] = []
        while len(out) < n:
            if self.pos >= self.size:
                self.epoch, self.pos = self.epoch + 1, 0
                self._order = self._perm()
            take = min(n - len(out), self.size - self.pos)
            out += self._order[self.pos : self.pos + take]
            self.pos += take
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "pos": self.pos}

    def load_state_dict(self, s: dict[str, Any]) -> None:
        self.epoch, self.pos = s["epoch"], s["pos"]
        self._order = self._perm()
