"""Task families by name, imported lazily (some need extras)."""

from __future__ import annotations

import ast
import dataclasses
import difflib
import importlib
import inspect
import re
import textwrap
from typing import Any

from tempering import syntax
from tempering.envs.base import TaskFamily
from tempering.envs.rewards import DEFAULT_REWARD_TIMEOUT
from tempering.errors import UserError

FAMILIES: dict[str, str] = {
    "arithmetic": "tempering.envs.arithmetic:ArithmeticFamily",
    "strings": "tempering.envs.strings:StringsFamily",
    "chain": "tempering.envs.chain:ChainFamily",
    "dataset": "tempering.envs.dataset:DatasetFamily",
    "mixture": "tempering.envs.mixture:MixtureFamily",
    "terminal": "tempering.envs.terminal:TerminalFamily",
    "code": "tempering.envs.code.env:CodeTaskFamily",
    "kernels": "tempering.envs.kernels.env:KernelFamily",
    "kernel_sketch": "tempering.envs.kernels.env:SketchFamily",
    "kernel_agent": "tempering.envs.kernels.agent:KernelAgentFamily",
    "kernel_sketch_agent": "tempering.envs.kernels.agent:SketchAgentFamily",
    "gui": "tempering.envs.gui.env:GuiFamily",
    "gui_states": "tempering.envs.gui.states:GuiStateFamily",
    "miniwob": "tempering.envs.gui.miniwob:MiniWoBFamily",
    "reasoning_gym": "tempering.envs.reasoning_gym:ReasoningGymFamily",
    "tools": "tempering.envs.tools:ToolFamily",
    "verifiers": "tempering.envs.verifiers:VerifiersFamily",
    "openenv": "tempering.envs.openenv:OpenEnvFamily",
    "openreward": "tempering.envs.openreward:OpenRewardFamily",
}


def _did_you_mean(name: str, choices: list[str]) -> str:
    near = difflib.get_close_matches(name, choices, n=1, cutoff=0.6)
    return f"did you mean {near[0]!r}? " if near else ""


def family_args(factory: Any) -> list[str] | None:
    """The keyword arguments a family accepts; None when it takes any (`**kwargs`)."""
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self"]


def _factory(name: str) -> Any:
    if name not in FAMILIES:
        raise UserError(
            f"unknown task family {name!r}; {_did_you_mean(name, list(FAMILIES))}available: {', '.join(sorted(FAMILIES))}"
        )
    mod, _, cls = FAMILIES[name].partition(":")
    return getattr(importlib.import_module(mod), cls)


def _attribute_docs(cls: type) -> dict[str, str]:
    """The docstrings written under a class's annotated attributes (`x: int = 1` then `\"\"\"...\"\"\"`),
    its bases' included: the meaning of a dataclass family's arguments."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not klass.__module__.startswith("tempering."):
            continue
        try:
            tree = syntax.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError, SyntaxError):
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for stmt, after in zip(body, body[1:]):
            if (
                isinstance(stmt, ast.AnnAssign)
                and isinstance(stmt.target, ast.Name)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                docs[stmt.target.id] = " ".join(after.value.value.split())
    return docs


def family_reference(name: str) -> list[tuple[str, str, str, str]]:
    """(task.args.KEY, type, default, meaning) for each argument of a family (`tempering config VERB
    task.family=NAME` prints them)."""
    factory = _factory(name)
    docs = _attribute_docs(factory) if isinstance(factory, type) else {}
    names = [p for p in inspect.signature(factory).parameters if p != "self"]
    text = " ".join((factory.__doc__ or "").split())
    marks = sorted((m.start(), m.end(), m.group(1)) for m in re.finditer(rf"\b({'|'.join(names)}): ", text))
    for (_, end, arg), nxt in zip(marks, [*marks[1:], (len(text), 0, "")]):
        docs.setdefault(arg, text[end : nxt[0]].strip().rstrip(";,"))  # a class docstring's `arg: meaning`
    defaults: dict[str, Any] = {}
    if dataclasses.is_dataclass(factory):
        for f in dataclasses.fields(factory):
            if f.default_factory is not dataclasses.MISSING:
                defaults[f.name] = f.default_factory()
    rows = []
    for p in inspect.signature(factory).parameters.values():
        if p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) or p.name == "self":
            continue
        ann = p.annotation
        tname = "" if ann is p.empty else ann if isinstance(ann, str) else getattr(ann, "__name__", str(ann))
        value = defaults.get(p.name, p.default)
        default = "" if value is p.empty else repr(value)
        rows.append((f"task.args.{p.name}", str(tname), default, docs.get(p.name, "")))
    return rows


def _required(factory: Any) -> list[inspect.Parameter]:
    """The arguments a family cannot do without (no default)."""
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return []
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [p for p in params if p.kind in kinds and p.default is p.empty and p.name != "self"]


def make_family(name: str, /, **args: Any) -> TaskFamily:
    factory = _factory(name)
    allowed = family_args(factory)
    if allowed is not None:
        for k in args:
            if k not in allowed:
                raise UserError(
                    f"task family {name!r} has no argument {k!r} (task.args.{k}); {_did_you_mean(k, allowed)}"
                    f"its arguments: {', '.join(allowed)} (`tempering config train task.family={name}` says what each means)"
                )
    missing = [p.name for p in _required(factory) if p.name not in args]
    if missing:
        meaning = {row[0]: row[3] for row in family_reference(name)}
        need = "; ".join(f"task.args.{m} ({meaning.get(f'task.args.{m}') or 'required'})" for m in missing)
        raise UserError(f"task family {name!r} needs {need}")
    try:
        return factory(**args)
    except TypeError as e:
        if e.__traceback__ is not None and e.__traceback__.tb_next is None:  # the call itself, not the family's code
            raise UserError(f"task family {name!r}: bad arguments {sorted(args)}: {e}") from e
        raise


def set_reward_timeout(family: TaskFamily, seconds: float | None) -> None:
    """Give `task.reward_timeout` to a family that calls reward functions (a dataset, or a mixture
    holding one). Set to another value for a family that calls none, it would do nothing: an error."""
    members = [family, *getattr(family, "families", {}).values()]  # a mixture's members
    takers = [f for f in members if hasattr(f, "reward_timeout")]
    for f in takers:
        f.reward_timeout = seconds
    if not takers and seconds != DEFAULT_REWARD_TIMEOUT:
        raise UserError(
            f"task.reward_timeout={seconds} has no effect: task family {family.name or type(family).__name__!r} "
            "calls no reward functions (task.family=dataset does); remove it"
        )
