"""Sums of several numbers, worked step by step: `17+5+82=` -> `17+5=22;22+82=104`.

The long-completion task: a worked answer is about 11 tokens per term (up to ~110 at the defaults), so
generation dominates a training step, as it does when real models reason at length. The verifier reads
only the result, after the last `=` (with `partial_credit`, a wrong result scores the share of steps
worked right); the worked steps are how a small model gets there.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from tempering.envs.synthetic import SyntheticFamily
from tempering.errors import UserError
from tempering.types import Task


def worked_sum(terms: list[int]) -> str:
    """`a+b=s1;s1+c=s2;...`: one step per term after the first."""
    steps, total = [], terms[0]
    for t in terms[1:]:
        steps.append(f"{total}+{t}={total + t}")
        total += t
    return ";".join(steps)


@dataclass
class ChainFamily(SyntheticFamily):
    """Multi-step addition with a worked answer; difficulty is the number of terms."""

    min_terms: int = 3
    max_terms: int = 10
    min_value: int = 1
    """Smallest term."""
    max_value: int = 99
    """Largest term."""
    partial_credit: bool = False
    """Score a wrong result by the share of worked steps that match the reference, position by position
    (success still needs the right result)."""
    heldout_share: float = 0.1
    name: str = "chain"

    def __post_init__(self):
        if not 2 <= self.min_terms <= self.max_terms:
            raise UserError(f"chain: need 2 <= min_terms <= max_terms, got {self.min_terms}..{self.max_terms}")
        if not 0 <= self.min_value <= self.max_value:
            raise UserError(f"chain: need 0 <= min_value <= max_value, got {self.min_value}..{self.max_value}")

    def draw(self, rng: random.Random) -> Task:
        terms = [
            rng.randint(self.min_value, self.max_value) for _ in range(rng.randint(self.min_terms, self.max_terms))
        ]
        key = "+".join(map(str, terms))
        return Task(
            id=f"chain:{key}", prompt=f"{key}=", answer=worked_sum(terms), family=self.name, difficulty=len(terms)
        )

    def check(self, task: Task, answer: str) -> tuple[float, bool, str, str]:
        result = answer.rsplit("=", 1)[-1].strip()
        target = task.answer.rsplit("=", 1)[-1]
        if result == target:
            return 1.0, True, "correct", "correct"
        if not result.isdigit():
            return 0.0, False, "no result after the last '='", "parse_error"
        score = 0.0
        if self.partial_credit:
            want, got = task.answer.split(";"), answer.split(";")
            score = sum(a == b for a, b in zip(want, got)) / max(len(want), len(got))
        return score, False, "wrong result", "incorrect"
