"""The text arithmetic of LiteGUI's rewards, as pure functions of strings and numbers.

- `token_f1`: F1 of the word multisets of two texts (typed text against a reference; subtasks against
  reference subtasks).
- `PLAN_LEVELS` / `snap_plan_score`: the plan judge's discrete scale {0, .3, .5, .8, 1}.

The rewards over actions and screens (phi, format / micro / macro, the dual-level total) and the teacher
guidance live with the GUI environments: `tempering.envs.gui.reward` and `tempering.envs.gui.guidance`.
"""

from __future__ import annotations

import re
from collections import Counter

PLAN_LEVELS = (0.0, 0.3, 0.5, 0.8, 1.0)
"""The judge's discrete scale for plan quality."""


def tokens(text: str) -> list[str]:
    return re.findall(r"\w+", text.casefold())


def token_f1(pred: str, ref: str) -> float:
    """F1 of the multisets of lower-cased word tokens; 1 when both are empty."""
    p, r = tokens(pred), tokens(ref)
    if not p and not r:
        return 1.0
    common = sum((Counter(p) & Counter(r)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(p), common / len(r)
    return 2 * precision * recall / (precision + recall)


def snap_plan_score(x: float) -> float:
    """The highest level of PLAN_LEVELS not above `x` (scores in between round down)."""
    return max(level for level in PLAN_LEVELS if level <= x + 1e-9) if x >= 0 else 0.0
