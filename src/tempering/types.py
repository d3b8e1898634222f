"""The data model: token-in, token-out rollouts.

An `Episode` is one rollout: prompt tokens, then one `Turn` per policy answer. Each turn holds the
policy's tokens with their sampling log-probs, then the environment's feedback tokens (which the next
turn conditions on, and which are masked out of the loss). A `Group` is the G episodes of one task.

Sampled tokens are never re-tokenised: the ids here are exactly what the policy produced.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any


@dataclass
class Task:
    """One prompt of a task family, with whatever its verifier needs."""

    id: str
    """Stable identifier (family name + index), used for grouping, logs and coverage tables."""
    prompt: str
    """The text the policy sees first (before any chat template)."""
    answer: Any = None
    """Reference answer or test spec; only the verifier reads it."""
    family: str = ""
    """Task family name (`arithmetic`, `strings`, `code`, ...)."""
    difficulty: float = 0.0
    """Family-specific difficulty level; for curricula and per-difficulty tables."""
    meta: dict[str, Any] = field(default_factory=dict)
    """Extra columns (dataset fields, privileged teacher context, annotations)."""


@dataclass
class Turn:
    """One policy answer and what the environment said back."""

    action_ids: list[int]
    """Tokens the policy sampled this turn (trained on)."""
    logprobs: list[float]
    """Log-probs of `action_ids` under the sampling distribution."""
    feedback_ids: list[int] = field(default_factory=list)
    """Environment tokens appended after the action (masked out of the loss)."""
    score: float = 0.0
    """Verifier score after this turn, in [0, 1] for refinement tasks."""
    success: bool = False
    """Whether the verifier accepted this turn's answer."""
    status: str = ""
    """Short verifier status (`correct`, `incorrect`, `parse_error`, `compile_error`, ...)."""
    feedback: str = ""
    """Feedback text (decoded form of `feedback_ids` before templating)."""
    truncated: bool = False
    """The answer hit the token limit before a stop token."""
    info: dict[str, Any] = field(default_factory=dict)
    """Verifier extras (timings, speedups, mismatch reports)."""
    context_ids: list[int] | None = None
    """The context this turn was sampled from, when it is not the episode so far (older turns were
    dropped to fit the context window, or the chat template re-rendered the conversation otherwise);
    such a turn starts a new training row, unless `realign`."""
    realign: bool = False
    """`context_ids` continues the current row: the row keeps the tokens it shares with it and takes the
    rest of it as context (answer tokens the template re-rendered otherwise are no longer trained)."""
    reply: list[dict[str, Any]] | None = None
    """The messages the environment answered with (tool results, or the feedback as a user message),
    which `feedback_ids` renders."""


class StopReason(str, Enum):
    """Why an episode ended (tinker's `StopReason`, for episodes); equal to its value, the string the sample
    rows and `e.stop_reason == "success"` read. `RUNNING` (empty, false) until it ends."""

    RUNNING = ""
    SUCCESS = "success"
    """The verifier accepted an answer."""
    DONE = "done"
    """The environment ended the episode (its `StepResult.done`) without a success."""
    MAX_TURNS = "max_turns"
    """`rollout.max_turns` turns without a success."""
    CONTEXT = "context"
    """The context window is full (`rollout.drop_old_turns=false`, or nothing left to drop)."""
    PRUNED = "pruned"
    """LEAP's pruning left its group without later turns."""
    ENV_ERROR = "env_error"
    """The environment raised (an environment error, counted against `task.max_error_rate`)."""

    __str__ = str.__str__  # the value, as in a sample row


@dataclass
class Episode:
    """A single rollout of one task: prompt, then turns."""

    task: Task
    prompt_ids: list[int]
    turns: list[Turn] = field(default_factory=list)
    stop_reason: StopReason = StopReason.RUNNING
    """Why the episode ended."""
    reward: float = 0.0
    """Scalar outcome reward used by outcome credit (after shaping)."""
    info: dict[str, Any] = field(default_factory=dict)
    prompt: str = ""
    """The first observation, as the environment's `reset()` gave it (usually `task.prompt`)."""

    @property
    def success(self) -> bool:
        return any(t.success for t in self.turns)

    @property
    def first_success_turn(self) -> int | None:
        """1-based index of the first accepted turn, or None."""
        for k, t in enumerate(self.turns, start=1):
            if t.success:
                return k
        return None

    @property
    def num_action_tokens(self) -> int:
        return sum(len(t.action_ids) for t in self.turns)

    def segments(self) -> list[tuple[list[int], list[int], list[float], list[int]]]:
        """Training rows as (token ids, loss mask, sampling log-probs, turn index; -1 off actions).

        One row holds the whole episode, unless a later turn was sampled from another context than the
        episode so far (older turns dropped, or the conversation re-rendered): then that turn starts a
        new row from the context it was really sampled in, or, with `realign`, the row takes that context
        from where the two part.
        """
        rows = []
        ids, mask, logp, turn = (
            list(self.prompt_ids),
            [0] * len(self.prompt_ids),
            [0.0] * len(self.prompt_ids),
            [-1] * len(self.prompt_ids),
        )
        for k, t in enumerate(self.turns):
            if t.context_ids is not None and t.realign:
                m = common_prefix(ids, t.context_ids)
                rest = len(t.context_ids) - m
                ids, mask, logp, turn = ids[:m] + t.context_ids[m:], mask[:m] + [0] * rest, logp[:m], turn[:m]
                logp, turn = logp + [0.0] * rest, turn + [-1] * rest
            elif t.context_ids is not None:
                rows.append((ids, mask, logp, turn))
                n = len(t.context_ids)
                ids, mask, logp, turn = list(t.context_ids), [0] * n, [0.0] * n, [-1] * n
            ids += t.action_ids
            mask += [1] * len(t.action_ids)
            logp += t.logprobs
            turn += [k] * len(t.action_ids)
            ids += t.feedback_ids
            mask += [0] * len(t.feedback_ids)
            logp += [0.0] * len(t.feedback_ids)
            turn += [-1] * len(t.feedback_ids)
        rows.append((ids, mask, logp, turn))
        return rows


def common_prefix(a: list[int], b: list[int]) -> int:
    """How many leading tokens `a` and `b` share."""
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


@dataclass
class Group:
    """The G episodes sampled for one task."""

    task: Task
    episodes: list[Episode]
    info: dict[str, Any] = field(default_factory=dict)
    """What the rollout decided for the whole group: after turn 1 of a multi-turn rollout,
    `turn1_failures` and `expanded` (whether its failed episodes got more turns; LEAP's pruning)."""
    greedy: Episode | None = None
    """A temperature-0 episode of the same task, made when the credit reads one (ReMax's baseline,
    `RolloutOptions.greedy_baseline`): scored, never trained on."""

    @property
    def rewards(self) -> list[float]:
        return [e.reward for e in self.episodes]
