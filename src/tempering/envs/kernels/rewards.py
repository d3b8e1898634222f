"""Rewards for a verified kernel, from its correctness and its speedups (pure functions).

- `cuda_agent`: CUDA Agent's {-1, 1, 2, 3}: -1 if compile or correctness fails; 3 if faster than both
  eager and torch.compile by more than `margin` (5%); 2 if faster than eager only; 1 otherwise.
- `log_speedup`: log2 of the speedup over eager if correct (0 = as fast), `fail` (-1) otherwise.
- `correct`: 1 if correct, 0 otherwise.

`score` maps every outcome to [0, 1] for refinement (the env's `StepResult.score`):
0 if wrong; if correct, 0.2 + 0.8 * clip((log2(speedup) + 2) / 4, 0, 1), so a correct kernel 4x
slower than eager scores 0.2, one as fast as eager 0.6 and one 4x faster 1.0.
"""

from __future__ import annotations

import math

REWARDS = ("cuda_agent", "log_speedup", "correct")


def faster(t: float | None, t0: float | None, margin: float = 0.05) -> bool:
    """CUDA Agent's b(t, t0): the candidate time t beats the baseline t0 by more than `margin`."""
    if t is None or t0 is None or t <= 0 or t0 <= 0:
        return False
    return (t0 - t) / t0 > margin


def cuda_agent_reward(
    correct: bool, t: float | None, t_eager: float | None, t_compile: float | None, margin: float = 0.05
) -> int:
    if not correct:
        return -1
    beats_eager = faster(t, t_eager, margin)
    if beats_eager and faster(t, t_compile, margin):
        return 3
    return 2 if beats_eager else 1


def log_speedup_reward(correct: bool, speedup: float | None, fail: float = -1.0) -> float:
    if not correct or not speedup or speedup <= 0:
        return fail
    return math.log2(speedup)


def score(correct: bool, speedup: float | None) -> float:
    """The [0, 1] refinement score (see the module docstring)."""
    if not correct:
        return 0.0
    if not speedup or speedup <= 0:
        return 0.2
    return 0.2 + 0.8 * min(1.0, max(0.0, (math.log2(speedup) + 2.0) / 4.0))


def reward(
    kind: str, correct: bool, t: float | None, t_eager: float | None, t_compile: float | None, margin: float = 0.05
) -> float:
    """The reward named `kind` (one of REWARDS)."""
    if kind == "cuda_agent":
        return float(cuda_agent_reward(correct, t, t_eager, t_compile, margin))
    if kind == "log_speedup":
        return log_speedup_reward(correct, (t_eager / t) if (t and t_eager) else None)
    if kind == "correct":
        return 1.0 if correct else 0.0
    raise ValueError(f"unknown reward {kind!r}: use one of {', '.join(REWARDS)}")
