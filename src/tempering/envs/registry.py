"""Task families by name, imported lazily (some need extras)."""

from __future__ import annotations

import difflib
import importlib
import inspect
from typing import Any

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


def make_family(name: str, /, **args: Any) -> TaskFamily:
    if name not in FAMILIES:
        raise UserError(
            f"unknown task family {name!r}; {_did_you_mean(name, list(FAMILIES))}available: {', '.join(sorted(FAMILIES))}"
        )
    mod, _, cls = FAMILIES[name].partition(":")
    factory = getattr(importlib.import_module(mod), cls)
    allowed = family_args(factory)
    if allowed is not None:
        for k in args:
            if k not in allowed:
                raise UserError(
                    f"task family {name!r} has no argument {k!r} (task.args.{k}); {_did_you_mean(k, allowed)}"
                    f"its arguments: {', '.join(allowed)}"
                )
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
