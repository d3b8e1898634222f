"""Multi-digit arithmetic: `a+b=` -> the exact result.

Feedback marks which digits of the answer are wrong (`5?9`), so a second turn can genuinely repair a
first attempt; the score is exact match, or digit accuracy with `partial_credit`.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Literal

from tempering.envs.synthetic import SyntheticFamily
from tempering.errors import UserError
from tempering.types import Task

OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}


def digit_accuracy(answer: str, target: str) -> float:
    """Share of the target's digits matched position-wise from the right; extra digits count as errors."""
    n = max(len(answer), len(target))
    if n == 0:
        return 1.0
    a, t = answer.rjust(n), target.rjust(n)
    return sum(x == y for x, y in zip(a, t)) / n


def digit_hint(answer: str, target: str) -> str:
    """The target with wrong digits masked as `?`, aligned from the right (length revealed)."""
    a = answer[-len(target) :].rjust(len(target))
    return "".join(t if x == t else "?" for x, t in zip(a, target))


@dataclass
class ArithmeticFamily(SyntheticFamily):
    """Integer arithmetic with a difficulty knob (operand range and operators)."""

    min_value: int = 10
    """Smallest operand."""
    max_value: int = 999
    """Largest operand."""
    ops: str = "+"
    """Operators to draw from (any of `+-*`)."""
    partial_credit: bool = False
    """Score by digit accuracy instead of exact match (success still needs the exact answer)."""
    heldout_share: float = 0.1
    """Share of all possible tasks reserved for the held-out split."""
    prompt_template: str = "{a}{op}{b}="
    """The prompt, with `{a}`, `{op}` and `{b}` filled in (a chat model: "What is {a} {op} {b}?")."""
    read: Literal["exact", "last_number"] = "exact"
    """How the answer is read from the first line: `exact` (the line is the number) or `last_number`
    (its last integer, for models that answer in a sentence: "7 + 5 = 12")."""
    name: str = "arithmetic"

    def __post_init__(self):
        if not 0 <= self.min_value <= self.max_value:
            raise UserError(f"arithmetic: need 0 <= min_value <= max_value, got {self.min_value}..{self.max_value}")
        bad = set(self.ops) - set(OPS)
        if not self.ops or bad:
            raise UserError(f"arithmetic: ops must be a non-empty string over '+-*', got {self.ops!r}")
        try:
            self.prompt_template.format(a=1, op="+", b=2)
        except (KeyError, IndexError, ValueError) as e:
            raise UserError(
                f"arithmetic: prompt_template {self.prompt_template!r} is not a template over {{a}}, {{op}}, {{b}}: {e}"
            ) from e
        if self.read not in ("exact", "last_number"):
            raise UserError(f"arithmetic: read must be exact or last_number, got {self.read!r}")

    @classmethod
    def at_difficulty(cls, level: int, **kw) -> ArithmeticFamily:
        """Level 1: 1-2 digit sums; each level adds a digit; level >= 3 adds subtraction."""
        hi = 10 ** (level + 1) - 1
        return cls(min_value=0 if level == 1 else 10 ** (level - 1), max_value=hi, ops="+" if level < 3 else "+-", **kw)

    def draw(self, rng: random.Random) -> Task:
        a = rng.randint(self.min_value, self.max_value)
        b = rng.randint(self.min_value, self.max_value)
        op = rng.choice(self.ops)
        key = f"{a}{op}{b}"
        digits = len(str(max(a, b)))
        prompt = self.prompt_template.format(a=a, op=op, b=b)
        return Task(id=f"arith:{key}", prompt=prompt, answer=str(OPS[op](a, b)), family=self.name, difficulty=digits)

    def check(self, task: Task, answer: str) -> tuple[float, bool, str, str]:
        target = task.answer
        if self.read == "last_number":
            numbers = re.findall(r"-?\d+", answer)
            answer = numbers[-1] if numbers else ""
        ok = answer == target
        if ok:
            return 1.0, True, "correct", "correct"
        if not answer or not answer.lstrip("-").isdigit():
            return 0.0, False, "not a number", "parse_error"
        score = digit_accuracy(answer, target) if self.partial_credit else 0.0
        return score, False, digit_hint(answer, target), "incorrect"
