"""Detecting a policy that collapsed: a pure function over the numbers a run already logs.

Two signs, each warned about once per run (`run.collapse_*` keys):
- entropy: the mean token entropy of the sampled answers (the step's `entropy`) below
  `run.collapse_entropy` nats for `run.collapse_patience` steps in a row: the policy samples nearly one
  answer per prompt and has stopped exploring;
- held-out score: an evaluation's pass@1 below `run.collapse_heldout` times the start evaluation's, when
  the start solved at least `MIN_SOLVED` prompts (fewer and a drop is as likely noise as collapse).
Too high a learning rate for a pretrained model shows as either.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

MIN_SOLVED = 5
"""Held-out prompts the start evaluation must solve before a drop from it is called a collapse."""


@dataclass(frozen=True)
class CollapseRule:
    entropy: float
    """Nats per token; 0 turns the entropy sign off."""
    patience: int
    """Steps in a row below `entropy`."""
    heldout: float
    """Share of the start's held-out pass@1; 0 turns the held-out sign off."""


@dataclass(frozen=True)
class CollapseState:
    low_entropy_steps: int = 0
    warned: frozenset[str] = frozenset()
    """Signs already warned about (`entropy`, `heldout`)."""


@dataclass(frozen=True)
class Collapse:
    sign: str
    """`entropy` or `heldout`: the metric flag is `collapse/<sign>`."""
    message: str


def check_collapse(
    state: CollapseState,
    rule: CollapseRule,
    step: int,
    entropy: float | None = None,
    start: dict[str, float] | None = None,
    heldout: dict[str, float] | None = None,
) -> tuple[CollapseState, list[Collapse]]:
    """The state after one step's `entropy` and/or one evaluation (`heldout`, against the `start`
    evaluation: `eval/pass@1`, `eval/n`), and the signs seen for the first time."""
    found: list[Collapse] = []
    if entropy is not None and rule.entropy > 0:
        low = state.low_entropy_steps + 1 if entropy < rule.entropy else 0
        state = replace(state, low_entropy_steps=low)
        if low >= rule.patience and "entropy" not in state.warned:
            found.append(
                Collapse(
                    "entropy",
                    f"the policy's entropy collapsed: below {rule.entropy:g} nats per token for {low} steps in a "
                    f"row (now {entropy:.4f}) at step {step}; it samples nearly one answer per prompt. Lower "
                    "optim.lr, or add an entropy or KL term",
                )
            )
    if heldout is not None and start is not None and rule.heldout > 0 and "heldout" not in state.warned:
        was, now = start.get("eval/pass@1"), heldout.get("eval/pass@1")
        solved = (was or 0.0) * start.get("eval/n", 0)
        if was is not None and now is not None and solved >= MIN_SOLVED and now < rule.heldout * was:
            found.append(
                Collapse(
                    "heldout",
                    f"held-out pass@1 collapsed: {now:.3f} at step {step}, below {rule.heldout:g} x the start's "
                    f"{was:.3f}. Lower optim.lr (for a pretrained model about 1e-6), or resume from an "
                    "earlier checkpoint",
                )
            )
    if found:
        state = replace(state, warned=state.warned | {c.sign for c in found})
    return state, found
