"""String transformations: `op:text=` -> the transformed text (reverse, sort, upper, rotate, ...)."""

from __future__ import annotations

import random
import string
from dataclasses import dataclass

from tempering.envs.synthetic import SyntheticFamily
from tempering.errors import UserError
from tempering.types import Task

TRANSFORMS = {
    "rev": lambda s: s[::-1],
    "up": str.upper,
    "sort": lambda s: "".join(sorted(s)),
    "dup": lambda s: "".join(c + c for c in s),
    "rot": lambda s: s[1:] + s[:1],
    "uniq": lambda s: "".join(dict.fromkeys(s)),
}


def char_accuracy(answer: str, target: str) -> float:
    n = max(len(answer), len(target))
    return 1.0 if n == 0 else sum(a == t for a, t in zip(answer, target)) / n


@dataclass
class StringsFamily(SyntheticFamily):
    """Deterministic string transformations with a difficulty knob (length and operator set)."""

    min_len: int = 3
    max_len: int = 6
    ops: tuple[str, ...] = ("rev", "up", "sort", "rot")
    alphabet: str = "abcdefgh"
    partial_credit: bool = False
    """Score by position-wise character accuracy instead of exact match."""
    heldout_share: float = 0.1
    name: str = "strings"

    def __post_init__(self):
        self.ops = tuple(self.ops)
        unknown = set(self.ops) - set(TRANSFORMS)
        if not self.ops or unknown:
            raise UserError(f"strings: unknown ops {sorted(unknown)}; choose from {sorted(TRANSFORMS)}")
        if not 1 <= self.min_len <= self.max_len:
            raise UserError(f"strings: need 1 <= min_len <= max_len, got {self.min_len}..{self.max_len}")
        if not self.alphabet or not set(self.alphabet) <= set(string.ascii_lowercase):
            raise UserError("strings: alphabet must be non-empty lowercase letters")

    def draw(self, rng: random.Random) -> Task:
        n = rng.randint(self.min_len, self.max_len)
        text = "".join(rng.choice(self.alphabet) for _ in range(n))
        op = rng.choice(self.ops)
        key = f"{op}:{text}"
        return Task(id=f"str:{key}", prompt=f"{key}=", answer=TRANSFORMS[op](text), family=self.name, difficulty=n)

    def check(self, task: Task, answer: str) -> tuple[float, bool, str, str]:
        target = task.answer
        if answer == target:
            return 1.0, True, "correct", "correct"
        score = char_accuracy(answer, target) if self.partial_credit else 0.0
        hint = "".join(t if i < len(answer) and answer[i] == t else "?" for i, t in enumerate(target))
        return score, False, hint, "incorrect"
