"""The six synthesis actions and the frontier score that ranks them.

An action is a projection (harder, easier, or different at the same difficulty) times a direction
(deeper in the seed's own skills, or broader into other skills). Its predicted pass rate is a ranking
prior, not a measurement: p~ = clip(p + delta[projection] * gamma[direction], 0, 1). The frontier score
F = exp(-(p~ - tau)^2 / (2 sigma^2)) is highest for tasks the policy solves about half of the time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pydantic import Field

from tempering.config import Schema

PROJECTIONS = ("increase", "reduce", "diversify")
DIRECTIONS = ("in_depth", "in_breadth")

# Bundle parts: I instruction, D fixtures/data, S oracle solution, T tests, E environment (Dockerfile).
PARTS = ("I", "D", "S", "T", "E")


@dataclass(frozen=True, order=True)
class Action:
    """One projection x direction pair; ordered as in ACTIONS (the deterministic tie-break order)."""

    projection: str
    """`increase` (harder), `reduce` (easier) or `diversify` (different, same difficulty)."""
    direction: str
    """`in_depth` (the seed's own skills) or `in_breadth` (other skills)."""

    def __post_init__(self):
        if self.projection not in PROJECTIONS or self.direction not in DIRECTIONS:
            raise ValueError(f"unknown action {self.projection}/{self.direction}")

    @property
    def name(self) -> str:
        return f"{self.projection}/{self.direction}"

    @classmethod
    def parse(cls, name: str) -> Action:
        projection, _, direction = name.partition("/")
        return cls(projection, direction)

    @property
    def rank(self) -> int:
        """Position in ACTIONS; lower wins ties."""
        return ACTIONS.index(self)

    @property
    def edit_mask(self) -> frozenset[str]:
        """Bundle parts the synthesised bundle must change relative to its seed."""
        return frozenset(PARTS) if self.projection == "reduce" else frozenset("IDST")


ACTIONS: tuple[Action, ...] = tuple(Action(p, d) for p in PROJECTIONS for d in DIRECTIONS)


class ScoringConfig(Schema):
    """Constants of the predicted pass rate and the frontier score (defaults from the method note)."""

    delta: dict[str, float] = Field(
        default_factory=lambda: {"increase": -0.25, "reduce": 0.25, "diversify": 0.0},
        description="Pass-rate shift per projection.",
    )
    gamma: dict[str, float] = Field(
        default_factory=lambda: {"in_depth": 1.0, "in_breadth": 0.65},
        description="Scale of the shift per direction (breadth moves difficulty less).",
    )
    tau: float = Field(0.5, ge=0, le=1, description="Target pass rate: the learning frontier.")
    sigma: float = Field(0.2, gt=0, description="Width of the frontier window.")


def predicted_pass_rate(p: float, action: Action, cfg: ScoringConfig | None = None) -> float:
    """p~ = clip(p + delta_a * gamma_d, 0, 1)."""
    cfg = cfg or ScoringConfig()
    return min(1.0, max(0.0, p + cfg.delta[action.projection] * cfg.gamma[action.direction]))


def frontier_score(p_tilde: float, cfg: ScoringConfig | None = None) -> float:
    """F = exp(-(p~ - tau)^2 / (2 sigma^2)); 1 at the frontier."""
    cfg = cfg or ScoringConfig()
    return math.exp(-((p_tilde - cfg.tau) ** 2) / (2 * cfg.sigma**2))


def score_actions(
    p: float, actions: tuple[Action, ...] = ACTIONS, cfg: ScoringConfig | None = None
) -> dict[Action, tuple[float, float]]:
    """{action: (predicted pass rate, frontier score)} for one seed of pass rate `p`."""
    out = {}
    for a in actions:
        pt = predicted_pass_rate(p, a, cfg)
        out[a] = (pt, frontier_score(pt, cfg))
    return out
