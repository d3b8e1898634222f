"""Reward functions for user datasets, all with TRL's signature
`(prompts, completions, **columns) -> list[float]`, so TRL reward functions plug in unchanged:
several per dataset with weights, called once per batch of answers, synchronous or async, by keyword
as TRL calls them (`prompts=`, `completions=`, one keyword per column) with TRL's other arguments
(`completion_ids`, `trainer_state`, `log_metric`, `log_extra`) to each function that takes them (by
name or `**kwargs`). A verl reward, `compute_score(data_source, solution_str, ground_truth,
extra_info=None)` (sync or async, a float or a dict with `score`), is called once per answer with the
row's `data_source`, `reward_model.ground_truth` and `extra_info` (`VerlReward`).

For a conversational dataset (TRL's format: the prompt is a list of `{"role", "content"}` messages)
a user function gets TRL's conversational values: each prompt as its messages and each completion as
`[{"role": "assistant", "content": text}]`. The built-in rewards compare completions as text.

Built in: `exact`, `numeric` (last number), `regex`, `math` (numeric and symbolic equivalence of the
final answer with math-verify) and `boxed` (a format reward).

A user function runs in a thread of its own with a time limit (`task.reward_timeout`): a call that
does not return in time is an environment error naming the function and where it was stuck, and the
run goes on or stops by `task.max_error_rate`.
"""

from __future__ import annotations

import asyncio
import difflib
import functools
import hashlib
import importlib
import importlib.util
import inspect
import linecache
import math
import os
import re
import sys
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tempering import syntax
from tempering.envs.base import SAMPLED_IDS
from tempering.errors import UserError

RewardFn = Callable[..., list[float]]

_NUMBER = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?(?:[eE][-+]?\d+)?")


def _answers(columns: dict, n: int) -> list:
    if "answer" not in columns:
        raise UserError("this reward needs an `answer` column in the dataset")
    return columns["answer"]


def completion_text(completion: Any) -> str:
    """A completion as text: a string as it is; TRL's conversational form (a list of messages, or one
    message) as the content of its messages."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return str(completion.get("content", ""))
    if isinstance(completion, list):
        return "".join(completion_text(m) for m in completion)
    return str(completion)


def _texts(completions: list) -> list[str]:
    return [completion_text(c) for c in completions]


def exact_match(prompts: list, completions: list[str], **columns) -> list[float]:
    """1 if the completion (stripped) equals the answer."""
    completions = _texts(completions)
    return [float(c.strip() == str(a).strip()) for c, a in zip(completions, _answers(columns, len(completions)))]


def last_number(text: str) -> float | None:
    found = _NUMBER.findall(text)
    return float(found[-1].replace(",", "")) if found else None


def numeric_match(prompts: list, completions: list[str], **columns) -> list[float]:
    """1 if the last number in the completion equals the answer (relative tolerance 1e-6)."""
    completions = _texts(completions)
    out = []
    for c, a in zip(completions, _answers(columns, len(completions))):
        got, want = last_number(c), last_number(str(a))
        out.append(float(got is not None and want is not None and abs(got - want) <= 1e-6 * max(1.0, abs(want))))
    return out


def regex_match(prompts: list, completions: list[str], **columns) -> list[float]:
    """1 if the completion fully matches the `pattern` column (or, without one, the answer as a regex)."""
    completions = _texts(completions)
    pats = columns.get("pattern") or _answers(columns, len(completions))
    return [float(re.fullmatch(str(p), c.strip(), flags=re.S) is not None) for c, p in zip(completions, pats)]


def final_answer(text: str) -> str:
    """The part of a solution that states its answer: the rest of the line after the last `####`
    (GSM8K's form), else the whole text (where the math verifier looks for the last `\\boxed{}`, then
    the last number)."""
    return text.rsplit("####", 1)[1].split("\n", 1)[0] if "####" in text else text


_DEADLINE = threading.local()
"""`active` is true in a thread that runs a reward function under `task.reward_timeout`."""


@functools.cache
def _math_verify(limit: int | None):
    """math-verify's parse and verify, run once first with a generous limit: the first call builds its
    grammars (about 30x a later one), which on a busy machine could spend the limit meant for a
    completion."""
    try:
        from math_verify import parse, verify
    except ImportError as e:
        raise UserError("the math reward needs `pip install 'tempering[math]'` (math-verify)") from e
    warm = None if limit is None else 60
    verify(parse("$1$", parsing_timeout=warm), parse("$1$", parsing_timeout=warm), timeout_seconds=warm)
    return parse, verify


def _math_limit() -> int | None:
    """math-verify's own time limit (5 s a parse or a comparison). It uses SIGALRM, which only the main
    thread may set; elsewhere none is possible and math-verify asks its caller to interrupt it instead.
    Under `task.reward_timeout` the caller does, so math-verify is told its notice is not needed."""
    if threading.current_thread() is threading.main_thread():
        return 5
    if getattr(_DEADLINE, "active", False):
        import math_verify.grader
        import math_verify.parser

        math_verify.parser.TIMEOUT_WARNING_SHOWN = math_verify.grader.TIMEOUT_WARNING_SHOWN = True
    return None


def math_answer(prompts: list, completions: list[str], **columns) -> list[float]:
    """1 if the completion's final answer equals the answer, numerically or symbolically (`math-verify`:
    `\\boxed{}` first, then the last number or expression; `####` answers as in GSM8K; 1/2 = 0.5 =
    \\frac{2}{4}). Needs the `math` extra."""
    completions = _texts(completions)
    limit = _math_limit()
    parse, verify = _math_verify(limit)
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
    completions = _texts(completions)
    return [float(_BOXED.search(c) is not None) for c in completions]


BUILTIN_REWARDS: dict[str, RewardFn] = {
    "exact": exact_match,
    "numeric": numeric_match,
    "regex": regex_match,
    "math": math_answer,
    "boxed": boxed_format,
}

_INLINE = {exact_match, numeric_match, regex_match, boxed_format}
"""Built-ins that run on the event loop's thread (fast, no user code); `math` does too on the main
thread, where math-verify can time itself."""

DEFAULT_REWARD_TIMEOUT = 300.0


@dataclass(frozen=True)
class Reward:
    """One reward function of a dataset, its weight in the total, and the name it is logged under
    (`reward/NAME`)."""

    fn: RewardFn
    weight: float = 1.0
    name: str = ""

    @property
    def builtin(self) -> bool:
        return self.fn in BUILTIN_REWARDS.values()


def _import_file(path: Path, spec: str):
    """The module a `./file.py:function` spec names, imported under its own name (so pickling its
    functions works); its folder goes on the import path first, for the modules beside it."""
    if not path.is_file():
        raise UserError(f"reward {spec!r}: there is no file {path} (relative paths start at {os.getcwd()})")
    digest = hashlib.blake2b(str(path.resolve()).encode(), digest_size=4).hexdigest()
    name = f"_tempering_rewards_{path.stem}_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    folder = str(path.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    mod_spec = importlib.util.spec_from_file_location(name, path)
    assert mod_spec is not None and mod_spec.loader is not None
    mod = importlib.util.module_from_spec(mod_spec)
    sys.modules[name] = mod
    try:
        mod_spec.loader.exec_module(mod)
    except BaseException:
        del sys.modules[name]
        raise
    return mod


def _import_module(mod: str, spec: str):
    """`package.module` of a spec, with the working directory on the import path (as `python -m` has
    it), so `myrewards:fn` finds `./myrewards.py`."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.append(cwd)
    try:
        return importlib.import_module(mod)
    except ModuleNotFoundError as e:
        if e.name and mod.split(".")[0] == e.name.split(".")[0]:
            raise UserError(
                f"cannot import reward function {spec!r}: no module named {e.name!r} in the working directory "
                f"({cwd}) or on the import path; give the file instead: reward=./path/to/{mod.replace('.', '/')}"
                f".py:{spec.rpartition(':')[2]}"
            ) from e
        raise UserError(f"cannot import reward function {spec!r}: {e}") from e


def resolve_reward(spec: str | RewardFn) -> RewardFn:
    """A built-in name, `package.module:function` (the working directory is on the import path), a
    file path `./myrewards.py:function` (`./myrewards.py` alone: its `compute_score`, verl's default
    name), or a callable. A verl `compute_score` comes back wrapped (`VerlReward`)."""
    if callable(spec):
        return VerlReward(spec) if is_verl_reward(spec) else spec
    if not isinstance(spec, str):
        raise UserError(
            f"reward {spec!r} is a {type(spec).__name__}; give a name, 'module:function' or './file.py:function'"
        )
    if spec in BUILTIN_REWARDS:
        return BUILTIN_REWARDS[spec]
    if ":" not in spec and spec.endswith(".py"):
        spec += ":compute_score"
    if ":" not in spec:
        raise UserError(
            f"unknown reward {spec!r}; use one of {sorted(BUILTIN_REWARDS)}, 'package.module:function' or "
            "'./file.py:function'"
        )
    mod, _, name = spec.rpartition(":")
    try:
        if mod.endswith(".py") or "/" in mod or os.sep in mod:
            module = _import_file(Path(mod), spec)
        else:
            module = _import_module(mod, spec)
    except UserError:
        raise
    except Exception as e:
        where = "".join(traceback.format_exception_only(type(e), e)).strip()
        raise UserError(f"cannot import reward function {spec!r}: importing {mod} raised {where}") from e
    fn = getattr(module, name, None)
    if fn is None:
        have = sorted(k for k, v in vars(module).items() if callable(v) and not k.startswith("_"))
        near = [k for k in have if k.lower() == name.lower()] or difflib.get_close_matches(name, have, 1, 0.5)
        hint = f"did you mean {near[0]!r}? " if near else ""
        raise UserError(f"reward {spec!r}: {mod} has no {name!r}; {hint}its functions: {', '.join(have) or 'none'}")
    if not callable(fn):
        raise UserError(f"reward {spec!r} is not callable")
    return VerlReward(fn) if is_verl_reward(fn) else fn


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
    qualname: str | None = getattr(fn, "__qualname__", None)
    if qualname:
        return qualname
    fallback: str = getattr(type(fn), "__qualname__", repr(fn))
    return fallback


def _short(x: Any, limit: int = 200) -> str:
    r = repr(x)
    return r if len(r) <= limit else r[: limit - 5] + "...'" if r[:1] in "'\"" else r[: limit - 3] + "..."


def _sample(prompts: list, completions: list, i: int | None) -> str:
    """The input of one completion, for an error message; `i` None: not known which of the batch."""
    n = len(completions)
    if i is None and n == 1:
        i = 0
    if i is None:
        return f"on a batch of {n} completions; the first: prompt {_short(prompts[0])}, completion {_short(completions[0])}"
    where = f"completion {i} of the batch of {n}: " if n > 1 else ""
    return f"on {where}prompt {_short(prompts[i])}, completion {_short(completions[i])}"


def _culprit(frames: list, completions: list) -> int | None:
    """Which completion a batched call was working on: the innermost of `frames` whose locals hold one
    of the completions (a loop variable of the function)."""
    ids: dict[int, int] = {}
    for i, c in enumerate(completions):
        ids.setdefault(id(c), i)
        if isinstance(c, list):  # TRL's conversational form: the message, and its text
            for m in c:
                ids.setdefault(id(m), i)
                if isinstance(m, dict):
                    ids.setdefault(id(m.get("content")), i)
    for f in reversed(frames):
        for v in f.f_locals.values():
            if id(v) in ids:
                return ids[id(v)]
    return None


def _tb_frames(e: BaseException) -> list:
    return [f for f, _ in traceback.walk_tb(e.__traceback__)]


def _stack_frames(thread: threading.Thread) -> list:
    """A running thread's frames, outermost first."""
    frame, out = sys._current_frames().get(thread.ident or -1), []
    while frame is not None:
        out.append(frame)
        frame = frame.f_back
    return out[::-1]


def _checked(fn: RewardFn, out, prompts: list, completions: list) -> list[float | None]:
    n = len(completions)
    if isinstance(out, (int, float, str, dict)):
        raise UserError(
            f"reward function {_name(fn)}{_defined_at(fn)} returned a single {type(out).__name__} {_short(out, 60)} "
            f"for a batch of {n} completions; return a list with one value per completion (TRL's convention)"
        )
    out = list(out) if out is not None else []
    if len(out) != n:
        raise UserError(f"reward function {_name(fn)} returned {len(out)} values for {n} completions")
    values: list[float | None] = []
    for i, x in enumerate(out):
        try:
            v = None if x is None else float(x)
        except (TypeError, ValueError) as e:
            raise UserError(
                f"reward function {_name(fn)} returned a non-number {_short(x)} {_sample(prompts, completions, i)}"
            ) from e
        if v is not None and not math.isfinite(v):
            raise UserError(
                f"reward function {_name(fn)} returned {v} {_sample(prompts, completions, i)}; rewards must be "
                "finite numbers (None marks a completion the function does not judge)"
            )
        values.append(v)
    return values


def _defined_at(fn: Any) -> str:
    """` (file:line)` where a function is defined, for messages; empty when unknown."""
    target = getattr(fn, "fn", fn) if isinstance(fn, VerlReward) else fn
    try:
        return f" ({inspect.getsourcefile(target)}:{inspect.getsourcelines(target)[1]})"
    except (TypeError, OSError):
        return ""


def _raised(fn: RewardFn, e: BaseException, prompts: list, completions: list) -> UserError:
    err = UserError(
        f"reward function {_name(fn)} raised {type(e).__name__}: {e} "
        f"({_sample(prompts, completions, _culprit(_tb_frames(e), completions))})"
    )
    where = getattr(e, "where", None)
    if where:  # the user's line that the message names (not the call inside tempering)
        err.where = where  # type: ignore[attr-defined]
    return err


class TrainerState:
    """What TRL's `trainer_state` argument offers a reward function: the step being collected
    (`global_step`, the number of updates so far) and the run's length (`max_steps`); the loop keeps the
    one instance (`TRAINER_STATE`) current."""

    def __init__(self) -> None:
        self.global_step = 0
        self.max_steps = 0
        self.epoch: float | None = None

    def __repr__(self) -> str:
        return f"TrainerState(global_step={self.global_step}, max_steps={self.max_steps})"


TRAINER_STATE = TrainerState()


@dataclass
class BatchLog:
    """What reward functions logged on one batch through TRL's `log_metric(name, value)` (averaged into
    the step's metrics) and `log_extra(column, values)` (one value per completion, shown with the samples)."""

    n: int
    metrics: dict[str, list[float]] = field(default_factory=dict)
    extra: dict[str, list[Any]] = field(default_factory=dict)

    def log_metric(self, name: str, value: float) -> None:
        self.metrics.setdefault(str(name), []).append(float(value))

    def log_extra(self, column: str, values: list) -> None:
        values = list(values)
        if len(values) != self.n:
            raise ValueError(f"log_extra({column!r}, ...) got {len(values)} values for {self.n} completions")
        self.extra[str(column)] = values

    def of(self, i: int) -> dict[str, Any]:
        """Completion i's share: the batch's metric means and its own extra values."""
        out: dict[str, Any] = {}
        if self.metrics:
            out["metrics"] = {k: sum(v) / len(v) for k, v in self.metrics.items()}
        if self.extra:
            out["extra"] = {k: v[i] for k, v in self.extra.items()}
        return out


TRL_ARGS = ("completion_ids", "trainer_state", "log_metric", "log_extra")
"""What TRL passes a reward function beside `prompts`, `completions` and the columns."""


def _takes(fn: RewardFn) -> set[str] | None:
    """The keyword arguments a function takes; None for any (`**kwargs`) or an unreadable signature."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


class RewardTimeout(UserError):
    """A reward function did not return within `task.reward_timeout`."""


def _by_keyword(fn: RewardFn) -> bool:
    """TRL calls reward functions by keyword (`prompts=`, `completions=`); a function whose parameters
    have other names (`lambda p, c, **kw`) gets them by position."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return "completions" in params and params["completions"].kind is not inspect.Parameter.POSITIONAL_ONLY


def _invoke(fn: RewardFn, prompts: list, completions: list, columns: dict[str, list], extras: dict | None = None):
    """Call `fn` as TRL does, with those of TRL's `extras` it takes; a call whose arguments do not fit
    the function's signature is an error naming the function's own line; a call that fails only by
    the interpreter's parser race (reward functions parse, in threads: see `tempering.syntax`) is redone."""
    takes = _takes(fn)
    extras = {k: v for k, v in (extras or {}).items() if takes is None or k in takes}
    if _by_keyword(fn):
        args: tuple = ()
        kwargs = {**columns, **extras, "prompts": prompts, "completions": completions}
    else:
        args, kwargs = (prompts, completions), {**columns, **extras}
    try:
        inspect.signature(fn).bind(*args, **kwargs)
    except TypeError as e:
        raise _misfit(fn, e, columns) from None
    except ValueError:  # no signature to check (a builtin): the call says
        pass
    return syntax.redone(fn, *args, **kwargs)


def _misfit(fn: RewardFn, e: TypeError, columns: dict) -> TypeError:
    """A call that does not fit `fn`'s parameters, pointing at the function's `def` line."""
    cols = ", ".join(sorted(columns)) or "none"
    err = TypeError(
        f"{e}; TRL calls a reward function with prompts=, completions=, completion_ids=, trainer_state=, "
        f"log_metric=, log_extra= and one keyword per dataset column ({cols}): name the ones it reads and end "
        "with **kwargs"
    )
    at = _defined_at(fn).strip(" ()")
    if at:
        err.where = f"{at} in {getattr(fn, '__name__', _name(fn))}"  # type: ignore[attr-defined]
    return err


def call_reward(
    fn: RewardFn, prompts: list, completions: list, columns: dict[str, list], extras: dict | None = None
) -> list[float | None]:
    """Call a (synchronous) reward and check what it returns; errors name the function and the input
    it failed on. None marks a completion the function does not judge (as in TRL)."""
    try:
        out = _invoke(fn, prompts, completions, columns, extras)
    except Exception as e:
        raise _raised(fn, e, prompts, completions) from e
    if inspect.isawaitable(out):
        if inspect.iscoroutine(out):
            out.close()
        raise UserError(f"reward function {_name(fn)} is async; call it with call_reward_async")
    return _checked(fn, out, prompts, completions)


def _stuck_at(frames: list) -> str:
    """Where a running call is: its innermost frame outside the standard library (the user's code)."""
    lib = os.path.dirname(threading.__file__)
    for f in reversed(frames):
        if not os.path.abspath(f.f_code.co_filename).startswith(lib):
            line = (linecache.getline(f.f_code.co_filename, f.f_lineno) or "").strip()
            return f"; it is at {f.f_code.co_filename}:{f.f_lineno} in {f.f_code.co_name}: {line}"
    return ""


async def _in_thread(fn: RewardFn, prompts, completions, columns, timeout: float, extras: dict | None = None):
    """Run a synchronous call in a daemon thread of its own and wait at most `timeout` seconds: a call
    that hangs is left behind (a daemon thread never holds up the exit) and reported."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future = loop.create_future()

    def settle(ok: bool, value) -> None:
        if not fut.done():
            (fut.set_result if ok else fut.set_exception)(value)

    def run() -> None:
        _DEADLINE.active = True
        try:
            result = (True, _invoke(fn, prompts, completions, columns, extras))
        except BaseException as e:  # handed to the awaiting side, which reports it
            result = (False, e)
        try:
            loop.call_soon_threadsafe(settle, *result)
        except RuntimeError:  # the loop is gone: the call had timed out already
            pass

    thread = threading.Thread(target=run, name=f"reward {_name(fn)}", daemon=True)
    thread.start()
    try:
        return await asyncio.wait_for(asyncio.shield(fut), timeout)
    except asyncio.TimeoutError:
        fut.cancel()  # what the thread may still return goes nowhere
        frames = _stack_frames(thread)
        raise RewardTimeout(
            f"reward function {_name(fn)} did not return within task.reward_timeout={timeout:g} s "
            f"({_sample(prompts, completions, _culprit(frames, completions))}){_stuck_at(frames)}; fix "
            "the function or raise task.reward_timeout"
        ) from None


async def call_reward_async(
    fn: RewardFn,
    prompts: list,
    completions: list,
    columns: dict[str, list],
    timeout: float | None = None,
    extras: dict | None = None,
) -> list[float | None]:
    """`call_reward` for a synchronous or an async reward function. With a `timeout` (seconds) a
    synchronous function runs in a thread of its own (so the event loop goes on meanwhile) and an async
    one is cancelled; either way a late call raises `RewardTimeout`."""
    inline = fn in _INLINE or (fn is math_answer and threading.current_thread() is threading.main_thread())
    try:
        if timeout is None or inline or _is_async(fn):
            out = _invoke(fn, prompts, completions, columns, extras)
        else:
            out = await _in_thread(fn, prompts, completions, columns, timeout, extras)
        if inspect.isawaitable(out):
            if timeout is None:
                out = await out
            else:
                try:
                    out = await asyncio.wait_for(out, timeout)
                except asyncio.TimeoutError:
                    raise RewardTimeout(
                        f"reward function {_name(fn)} did not return within task.reward_timeout={timeout:g} s "
                        f"({_sample(prompts, completions, None)}); fix the "
                        "function or raise task.reward_timeout"
                    ) from None
    except RewardTimeout:
        raise
    except Exception as e:
        raise _raised(fn, e, prompts, completions) from e
    return _checked(fn, out, prompts, completions)


async def score_batch(
    rewards: list[Reward],
    prompts: list,
    completions: list,
    columns: dict[str, list],
    timeout: float | None = None,
    texts: list[str] | None = None,
    answers: list | None = None,
    extras: dict | None = None,
) -> list[dict[str, float]]:
    """Each reward function called once on the whole batch (async ones concurrently): per completion,
    each function's value by name (None values left out). The built-ins get `texts` (the completions as
    text) and, when the dataset has no `answer` column, `answers` as one; user functions also get those
    of TRL's `extras` they take."""
    builtin_cols = columns
    if answers is not None and "answer" not in columns:
        builtin_cols = {**columns, "answer": answers}
    texts = texts if texts is not None else _texts(completions)

    def call(r: Reward):
        if r.builtin:
            return call_reward_async(r.fn, prompts, texts, builtin_cols, timeout)
        return call_reward_async(r.fn, prompts, completions, columns, timeout, extras)

    values = await asyncio.gather(*(call(r) for r in rewards))
    return [{r.name: v[i] for r, v in zip(rewards, values) if v[i] is not None} for i in range(len(completions))]


def total(rewards: list[Reward], parts: dict[str, float]) -> float:
    """The weighted sum of a completion's reward values (a function that gave None adds nothing)."""
    return sum(r.weight * parts[r.name] for r in rewards if r.name in parts)


@dataclass
class _Pending:
    prompt: Any
    """The prompt as the reward functions see it: text, or a conversation's messages."""
    completion: str
    columns: dict[str, Any]
    answer: Any
    future: asyncio.Future
    ids: list[int] | None = None
    """The answer's sampled token ids (TRL's `completion_ids`), when the rollout engine gave them."""


class RewardBatcher:
    """Gathers the answers verified together (one turn of a rollout batch: the rollout engine starts
    every environment's `step` at once) into one call of each reward function, TRL's way: lists of
    prompts and completions, and each dataset column as a list."""

    def __init__(self, rewards: list[Reward], timeout: float | None = DEFAULT_REWARD_TIMEOUT):
        self.rewards = rewards
        self.timeout = timeout
        """Seconds a user reward function may take on one batch (None: no limit)."""
        self.pending: list[_Pending] = []
        self.loop: asyncio.AbstractEventLoop | None = None
        self.flushes: set[asyncio.Task] = set()

    async def score(
        self, prompt: Any, completion: str, columns: dict[str, Any], answer: Any = None
    ) -> dict[str, float]:
        """`prompt`: text, or a conversation (its `messages` are what the functions get)."""
        return (await self.score_logged(prompt, completion, columns, answer))[0]

    async def score_logged(
        self, prompt: Any, completion: str, columns: dict[str, Any], answer: Any = None
    ) -> tuple[dict[str, float], dict[str, Any]]:
        """`score`, and what the functions logged for this answer (`BatchLog.of`)."""
        loop = asyncio.get_running_loop()
        if loop is not self.loop:  # a new event loop (each asyncio.run): nothing pending belongs to it
            self.loop, self.pending = loop, []
        fut = loop.create_future()
        ids = SAMPLED_IDS.get()
        self.pending.append(_Pending(getattr(prompt, "messages", prompt), completion, columns, answer, fut, ids))
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
        keys = list(dict.fromkeys(k for b in batch for k in b.columns))
        columns = {k: [b.columns.get(k) for b in batch] for k in keys}
        prompts = [b.prompt for b in batch]
        texts = [b.completion for b in batch]
        # TRL's conversational form of a completion: one assistant message
        completions = [
            [{"role": "assistant", "content": b.completion}] if isinstance(b.prompt, list) else b.completion
            for b in batch
        ]
        answers = [b.answer for b in batch]
        log = BatchLog(len(batch))
        extras = {
            "completion_ids": [b.ids for b in batch],
            "trainer_state": TRAINER_STATE,
            "log_metric": log.log_metric,
            "log_extra": log.log_extra,
        }
        try:
            parts = await score_batch(self.rewards, prompts, completions, columns, self.timeout, texts, answers, extras)
        except BaseException as e:  # every waiting step raises it
            for b in batch:
                if not b.future.done():
                    b.future.set_exception(e)
            return
        for i, (b, p) in enumerate(zip(batch, parts)):
            if not b.future.done():
                b.future.set_result((p, log.of(i)))


def is_verl_reward(fn: Any) -> bool:
    """Whether `fn` has verl's reward signature: `solution_str` and `ground_truth` among its parameters."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return "solution_str" in params and "ground_truth" in params


def _is_async(fn: Any) -> bool:
    """A coroutine function, or a verl reward wrapping one: awaited on the event loop, not in a thread."""
    return inspect.iscoroutinefunction(fn) or (isinstance(fn, VerlReward) and inspect.iscoroutinefunction(fn.fn))


class VerlReward:
    """A verl reward function, `compute_score(data_source, solution_str, ground_truth, extra_info=None)`,
    as a TRL-style batch function: called once per answer, as verl's reward managers call it, with the
    row's `data_source`, `reward_model.ground_truth` (or an `answer` / `ground_truth` column) and a copy
    of its `extra_info`; a dict result gives its `score` (its other numbers are logged as
    `NAME/KEY`, as verl's `reward_extra_info`)."""

    def __init__(self, fn: Callable[..., Any]):
        self.fn = fn
        self.__name__ = getattr(fn, "__name__", type(fn).__name__)
        self.__qualname__ = getattr(fn, "__qualname__", self.__name__)
        self.accepts = _takes(fn)

    def _args(self, i: int, completions: list, columns: dict[str, list]) -> dict[str, Any]:
        def col(name: str) -> Any:
            return columns[name][i] if name in columns else None

        model = col("reward_model")
        truth = model.get("ground_truth") if isinstance(model, dict) else None
        truth = truth if truth is not None else col("ground_truth") if "ground_truth" in columns else col("answer")
        extra = col("extra_info")
        args = {
            "data_source": col("data_source"),
            "solution_str": completion_text(completions[i]),
            "ground_truth": truth,
            "extra_info": dict(extra) if isinstance(extra, dict) else extra,
        }
        return {k: v for k, v in args.items() if self.accepts is None or k in self.accepts}

    def _value(self, out: Any, log_metric: Callable[[str, float], None] | None) -> Any:
        if isinstance(out, dict):
            if "score" not in out:
                raise TypeError(f"returned a dict without 'score' ({_short(out, 80)}); verl reads its 'score'")
            for k, v in out.items():
                if k != "score" and isinstance(v, (int, float)) and not isinstance(v, bool) and log_metric:
                    log_metric(f"{self.__name__}/{k}", float(v))
            out = out["score"]
        if isinstance(out, bool) or not isinstance(out, (int, float)):
            raise TypeError(f"returned {_short(out, 80)} ({type(out).__name__}); compute_score returns a number")
        return float(out)

    def __call__(self, prompts: list, completions: list, log_metric=None, **columns):
        if inspect.iscoroutinefunction(self.fn):
            return self._gather(completions, columns, log_metric)
        return [
            self._value(self.fn(**self._args(i, completions, columns)), log_metric) for i in range(len(completions))
        ]

    async def _gather(self, completions: list, columns: dict, log_metric) -> list[float]:
        outs = await asyncio.gather(*(self.fn(**self._args(i, completions, columns)) for i in range(len(completions))))
        return [self._value(o, log_metric) for o in outs]
