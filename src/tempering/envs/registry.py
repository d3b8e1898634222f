"""Task families by name, imported lazily (some need extras)."""

from __future__ import annotations

import importlib
from typing import Any

from tempering.envs.base import TaskFamily
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
}


def make_family(name: str, **args: Any) -> TaskFamily:
    if name not in FAMILIES:
        raise UserError(f"unknown task family {name!r}; available: {', '.join(sorted(FAMILIES))}")
    mod, _, cls = FAMILIES[name].partition(":")
    factory = getattr(importlib.import_module(mod), cls)
    try:
        return factory(**args)
    except TypeError as e:
        raise UserError(f"task family {name!r}: bad arguments {sorted(args)}: {e}") from e
