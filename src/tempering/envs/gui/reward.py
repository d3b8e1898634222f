"""LiteGUI's dual-level reward of one policy output at one GUI state.

- `phi(a, a*)`: how well a predicted action matches one reference action, in [0, 1]: 0 unless the
  types agree; a click matches the same element id, or a point inside the reference element's box;
  typing scores the token F1 of the text (same field required); choosing needs the same option;
  scrolling the same direction; waiting matches waiting.
- Dual-level reward: R = w_f * format + w_a * max_{a* in A*} phi(a, a*) + w_s * plan, where the plan
  score comes from a judge on the discrete scale {0, .3, .5, .8, 1} (`plan_match` is the rule-based one;
  `judge.py` has the LLM judge, whose reply `parse_judge_score` reads).
- `token_f1`: F1 of the word multisets of two texts (typed text against a reference; subtasks against
  reference subtasks).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tempering.envs.gui.action import Action, Parsed

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


Box = tuple[float, float, float, float]

PlanJudge = Callable[[list[str], list[str], str], float]
"""(predicted subtasks, reference subtasks, instruction) -> score on PLAN_LEVELS."""


def phi(pred: Action, ref: Action, boxes: dict[str, Box] | None = None) -> float:
    """Match of `pred` against one valid action `ref`; `boxes` (id -> x, y, w, h) scores point clicks."""
    if pred.type != ref.type:
        return 0.0
    if pred.type == "wait":
        return 1.0
    if pred.type == "scroll":
        return float(pred.value == ref.value)
    if pred.type == "click":
        if pred.point is None:
            return float(pred.target == ref.target)
        if boxes is None or ref.target not in boxes:
            return 0.0
        x, y = pred.point
        bx, by, bw, bh = boxes[ref.target]
        return float(bx <= x < bx + bw and by <= y < by + bh)
    if pred.target != ref.target:
        return 0.0
    if pred.type == "type":
        return token_f1(pred.value or "", ref.value or "")
    return float((pred.value or "").strip().casefold() == (ref.value or "").strip().casefold())


def action_reward(pred: Action | None, valid: Sequence[Action], boxes: dict[str, Box] | None = None) -> float:
    """Micro reward: the best match over ALL valid actions (0 without an action)."""
    if pred is None:
        return 0.0
    return max((phi(pred, ref, boxes) for ref in valid), default=0.0)


def format_reward(parsed: Parsed) -> float:
    """1 for one well-formed JSON object in the action format, else 0."""
    return float(parsed.ok)


def plan_match(pred: list[str], ref: list[str], instruction: str = "") -> float:
    """Rule-based plan judge: soft F1 between subtask lists (each subtask matched to its best
    counterpart by token F1), snapped down to PLAN_LEVELS. An empty reference wants an empty plan."""
    if not ref:
        return 1.0 if not pred else 0.0
    if not pred:
        return 0.0
    recall = sum(max(token_f1(p, r) for p in pred) for r in ref) / len(ref)
    precision = sum(max(token_f1(p, r) for r in ref) for p in pred) / len(pred)
    if precision + recall == 0:
        return 0.0
    return snap_plan_score(2 * precision * recall / (precision + recall))


def parse_judge_score(text: str) -> float | None:
    """A judge's reply -> the nearest level of PLAN_LEVELS, or None when it holds no score in [0, 1]."""
    for m in re.finditer(r"(?<![\w.])(\d+(?:\.\d+)?|\.\d+)(?![\w.])", text):
        x = float(m.group(1))
        if 0.0 <= x <= 1.0:
            return min(PLAN_LEVELS, key=lambda level: abs(level - x))
    return None


@dataclass
class RewardWeights:
    """Weights of the dual-level reward R = format * R_format + action * R_act + plan * R_plan."""

    format: float = 1 / 3
    """Weight of the format reward (well-formed JSON action)."""
    action: float = 1 / 3
    """Weight of the micro reward (best match over all valid actions)."""
    plan: float = 1 / 3
    """Weight of the macro reward (judged plan quality)."""


@dataclass
class RewardBreakdown:
    """The three parts of one step's reward and their weighted sum."""

    format: float
    action: float
    plan: float
    total: float

    def to_json(self) -> dict[str, float]:
        return {"format": self.format, "action": self.action, "plan": self.plan, "total": self.total}


def dual_reward(
    parsed: Parsed,
    valid: Sequence[Action],
    plan_ref: list[str],
    weights: RewardWeights | None = None,
    judge: PlanJudge = plan_match,
    boxes: dict[str, Box] | None = None,
    instruction: str = "",
) -> RewardBreakdown:
    """Multi-solution dual-level reward of one output. A malformed output scores 0 on every part."""
    w = weights or RewardWeights()
    if not parsed.ok:
        return RewardBreakdown(0.0, 0.0, 0.0, 0.0)
    r_fmt = format_reward(parsed)
    r_act = action_reward(parsed.action, valid, boxes)
    r_plan = judge(parsed.subtasks, plan_ref, instruction)
    return RewardBreakdown(r_fmt, r_act, r_plan, w.format * r_fmt + w.action * r_act + w.plan * r_plan)
