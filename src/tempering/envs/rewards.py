"""Reward functions for user datasets, all with TRL's signature
`(prompts, completions, **columns) -> list[float]`, so TRL reward functions plug in unchanged."""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable

from tempering.errors import UserError

RewardFn = Callable[..., list[float]]

_NUMBER = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?(?:[eE][-+]?\d+)?")


def _answers(columns: dict, n: int) -> list:
    if "answer" not in columns:
        raise UserError("this reward needs an `answer` column in the dataset")
    return columns["answer"]


def exact_match(prompts: list, completions: list[str], **columns) -> list[float]:
    """1 if the completion (stripped) equals the answer."""
    return [float(c.strip() == str(a).strip()) for c, a in zip(completions, _answers(columns, len(completions)))]


def last_number(text: str) -> float | None:
    found = _NUMBER.findall(text)
    return float(found[-1].replace(",", "")) if found else None


def numeric_match(prompts: list, completions: list[str], **columns) -> list[float]:
    """1 if the last number in the completion equals the answer (relative tolerance 1e-6)."""
    out = []
    for c, a in zip(completions, _answers(columns, len(completions))):
        got, want = last_number(c), last_number(str(a))
        out.append(float(got is not None and want is not None and abs(got - want) <= 1e-6 * max(1.0, abs(want))))
    return out


def regex_match(prompts: list, completions: list[str], **columns) -> list[float]:
    """1 if the completion fully matches the `pattern` column (or, without one, the answer as a regex)."""
    pats = columns.get("pattern") or _answers(columns, len(completions))
    return [float(re.fullmatch(str(p), c.strip(), flags=re.S) is not None) for c, p in zip(completions, pats)]


BUILTIN_REWARDS: dict[str, RewardFn] = {"exact": exact_match, "numeric": numeric_match, "regex": regex_match}


def resolve_reward(spec: str | RewardFn) -> RewardFn:
    """A built-in name, `package.module:function`, or a callable."""
    if callable(spec):
        return spec
    if spec in BUILTIN_REWARDS:
        return BUILTIN_REWARDS[spec]
    if ":" not in spec:
        raise UserError(f"unknown reward {spec!r}; use one of {sorted(BUILTIN_REWARDS)} or 'package.module:function'")
    mod, _, name = spec.partition(":")
    try:
        fn = getattr(importlib.import_module(mod), name)
    except (ImportError, AttributeError) as e:
        raise UserError(f"cannot import reward function {spec!r}: {e}") from e
    if not callable(fn):
        raise UserError(f"reward {spec!r} is not callable")
    return fn


def call_reward(fn: RewardFn, prompts: list, completions: list[str], columns: dict[str, list]) -> list[float]:
    """Call a user reward and check what it returns; errors name the function and the first sample."""
    name = getattr(fn, "__qualname__", repr(fn))
    try:
        out = fn(prompts, completions, **columns)
    except Exception as e:
        raise UserError(
            f"reward function {name} raised {type(e).__name__}: {e} (on prompt {prompts[0]!r}, "
            f"completion {completions[0]!r})"
        ) from e
    out = list(out) if out is not None else []
    if len(out) != len(completions):
        raise UserError(f"reward function {name} returned {len(out)} values for {len(completions)} completions")
    try:
        return [float(x) for x in out]
    except (TypeError, ValueError) as e:
        raise UserError(f"reward function {name} returned a non-number: {e}") from e
