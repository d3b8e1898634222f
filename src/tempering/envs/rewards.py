"""Reward functions for user datasets, all with TRL's signature
`(prompts, completions, **columns) -> list[float]`, so TRL reward functions plug in unchanged:
several per dataset with weights, called once per batch of answers, synchronous or async.

Built in: `exact`, `numeric` (last number), `regex`, `math` (numeric and symbolic equivalence of the
final answer with math-verify) and `boxed` (a format reward).
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import inspect
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

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


def final_answer(text: str) -> str:
    """The part of a solution that states its answer: the rest of the line after the last `####`
    (GSM8K's form), else the whole text (where the math verifier looks for the last `\\boxed{}`, then
    the last number)."""
    return text.rsplit("####", 1)[1].split("\n", 1)[0] if "####" in text else text


@functools.cache
def _math_verify():
    """math-verify's parse and verify, run once without a time limit: the first call builds its grammars
    (about 30x a later one), which on a busy machine could spend the limit meant for a completion."""
    try:
        from math_verify import parse, verify
    except ImportError as e:
        raise UserError("the math reward needs `pip install 'tempering[math]'` (math-verify)") from e
    verify(parse("$1$", parsing_timeout=None), parse("$1$", parsing_timeout=None), timeout_seconds=None)
    return parse, verify


def math_answer(prompts: list, completions: list[str], **columns) -> list[float]:
    """1 if the completion's final answer equals the answer, numerically or symbolically (`math-verify`:
    `\\boxed{}` first, then the last number or expression; `####` answers as in GSM8K; 1/2 = 0.5 =
    \\frac{2}{4}). Needs the `math` extra."""
    parse, verify = _math_verify()
    # math-verify's time limits use SIGALRM, which only the main thread may set
    limit = 5 if threading.current_thread() is threading.main_thread() else None
    out = []
    for c, a in zip(completions, _answers(columns, len(completions))):
        gold = parse(final_answer(str(a)), parsing_timeout=limit) or parse(
            f"${final_answer(str(a))}$", parsing_timeout=limit
        )
        if not gold:
            raise UserError(f"the math reward cannot read the answer {a!r} of the dataset as a number or expression")
        got = parse(final_answer(c), parsing_timeout=limit)
        out.append(float(bool(got) and verify(gold, got, timeout_seconds=limit)))
    return out


_BOXED = re.compile(r"\\boxed\{")


def boxed_format(prompts: list, completions: list[str], **columns) -> list[float]:
    """1 if the completion puts an answer in `\\boxed{...}` (a format reward to pair with `math`)."""
    return [float(_BOXED.search(c) is not None) for c in completions]


BUILTIN_REWARDS: dict[str, RewardFn] = {
    "exact": exact_match,
    "numeric": numeric_match,
    "regex": regex_match,
    "math": math_answer,
    "boxed": boxed_format,
}


@dataclass(frozen=True)
class Reward:
    """One reward function of a dataset, its weight in the total, and the name it is logged under
    (`reward/NAME`)."""

    fn: RewardFn
    weight: float = 1.0
    name: str = ""


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


def resolve_rewards(spec: str | RewardFn | list, weights: list[float] | None = None) -> list[Reward]:
    """One or several reward functions (TRL's `reward_funcs`), with `weights` (TRL's `reward_weights`;
    default 1 each). Each is named after its built-in name or its function."""
    specs = list(spec) if isinstance(spec, (list, tuple)) else [spec]
    if not specs:
        raise UserError("reward is an empty list; give at least one reward function")
    if weights is None:
        weights = [1.0] * len(specs)
    if len(weights) != len(specs):
        raise UserError(f"reward_weights has {len(weights)} values for {len(specs)} reward functions; give one each")
    out: list[Reward] = []
    for sp, w in zip(specs, weights):
        fn = resolve_reward(sp)
        base = sp if isinstance(sp, str) and sp in BUILTIN_REWARDS else getattr(fn, "__name__", type(fn).__name__)
        name, k = base, 2
        while any(r.name == name for r in out):
            name, k = f"{base}_{k}", k + 1
        out.append(Reward(fn, float(w), name))
    return out


def _name(fn: RewardFn) -> str:
    return getattr(fn, "__qualname__", repr(fn))


def _checked(fn: RewardFn, out, n: int) -> list[float | None]:
    out = list(out) if out is not None else []
    if len(out) != n:
        raise UserError(f"reward function {_name(fn)} returned {len(out)} values for {n} completions")
    try:
        return [None if x is None else float(x) for x in out]
    except (TypeError, ValueError) as e:
        raise UserError(f"reward function {_name(fn)} returned a non-number: {e}") from e


def _raised(fn: RewardFn, e: Exception, prompts: list, completions: list[str]) -> UserError:
    return UserError(
        f"reward function {_name(fn)} raised {type(e).__name__}: {e} (on prompt {prompts[0]!r}, "
        f"completion {completions[0]!r})"
    )


def call_reward(fn: RewardFn, prompts: list, completions: list[str], columns: dict[str, list]) -> list[float | None]:
    """Call a (synchronous) reward and check what it returns; errors name the function and the first
    sample. None marks a completion the function does not judge (as in TRL)."""
    try:
        out = fn(prompts, completions, **columns)
    except Exception as e:
        raise _raised(fn, e, prompts, completions) from e
    if inspect.isawaitable(out):
        if inspect.iscoroutine(out):
            out.close()
        raise UserError(f"reward function {_name(fn)} is async; call it with call_reward_async")
    return _checked(fn, out, len(completions))


async def call_reward_async(
    fn: RewardFn, prompts: list, completions: list[str], columns: dict[str, list]
) -> list[float | None]:
    """`call_reward` for a synchronous or an async reward function."""
    try:
        out = fn(prompts, completions, **columns)
        if inspect.isawaitable(out):
            out = await out
    except Exception as e:
        raise _raised(fn, e, prompts, completions) from e
    return _checked(fn, out, len(completions))


async def score_batch(
    rewards: list[Reward], prompts: list, completions: list[str], columns: dict[str, list]
) -> list[dict[str, float]]:
    """Each reward function called once on the whole batch (async ones concurrently): per completion,
    each function's value by name (None values left out)."""
    values = await asyncio.gather(*(call_reward_async(r.fn, prompts, completions, columns) for r in rewards))
    return [{r.name: v[i] for r, v in zip(rewards, values) if v[i] is not None} for i in range(len(completions))]


def total(rewards: list[Reward], parts: dict[str, float]) -> float:
    """The weighted sum of a completion's reward values (a function that gave None adds nothing)."""
    return sum(r.weight * parts[r.name] for r in rewards if r.name in parts)


class RewardBatcher:
    """Gathers the answers verified together (one turn of a rollout batch: the rollout engine starts
    every environment's `step` at once) into one call of each reward function, TRL's way: lists of
    prompts and completions, and each dataset column as a list."""

    def __init__(self, rewards: list[Reward]):
        self.rewards = rewards
        self.pending: list[tuple[str, str, dict[str, Any], asyncio.Future]] = []
        self.loop: asyncio.AbstractEventLoop | None = None
        self.flushes: set[asyncio.Task] = set()

    async def score(self, prompt: str, completion: str, columns: dict[str, Any]) -> dict[str, float]:
        loop = asyncio.get_running_loop()
        if loop is not self.loop:  # a new event loop (each asyncio.run): nothing pending belongs to it
            self.loop, self.pending = loop, []
        fut = loop.create_future()
        self.pending.append((prompt, completion, columns, fut))
        if len(self.pending) == 1:
            task = loop.create_task(self._flush())
            self.flushes.add(task)
            task.add_done_callback(self.flushes.discard)
        return await fut

    async def _flush(self) -> None:
        n = -1
        while n != len(self.pending):  # until an event-loop turn passes with no new answer
            n = len(self.pending)
            await asyncio.sleep(0)
        batch, self.pending = self.pending, []
        keys = list(dict.fromkeys(k for _, _, cols, _ in batch for k in cols))
        columns = {k: [cols.get(k) for _, _, cols, _ in batch] for k in keys}
        try:
            parts = await score_batch(self.rewards, [b[0] for b in batch], [b[1] for b in batch], columns)
        except BaseException as e:  # every waiting step raises it
            for *_, fut in batch:
                if not fut.done():
                    fut.set_exception(e)
            return
        for (*_, fut), p in zip(batch, parts):
            if not fut.done():
                fut.set_result(p)
