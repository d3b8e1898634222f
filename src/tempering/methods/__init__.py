"""The training methods, each one module: its config, scorers, credit, loss and state, and a `SPEC`
(`train.method.MethodSpec`) that says what it is and supports.

`METHODS` maps each method's verb to its module and one line of help: the CLI, `tempering config`,
torchrun launches and `tempering.run` read it, and import a module only when its verb runs (so
`tempering --help` never waits for torch). A new method is one module and one line here, or, from
outside the package, one `register(...)` call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tempering.train.method import MethodSpec

METHODS: dict[str, tuple[str, str]] = {
    "pretrain": (
        "tempering.methods.pretrain",
        "Supervised warm start: NLL of a task family's given answers (an early finish at a held-out target).",
    ),
    "train": (
        "tempering.methods.rl",
        "RL with verifiable rewards: GRPO, Dr. GRPO, RLOO, LEAP, TCPO and other multi-turn credits.",
    ),
    "ppo": (
        "tempering.methods.ppo",
        "PPO with a critic: GAE over action tokens, clipped value loss, value pre-training.",
    ),
    "rft": (
        "tempering.methods.rft",
        "Rejection fine-tuning: NLL on the policy's own trajectories that pass a reward and validity filter.",
    ),
    "distill": (
        "tempering.methods.opd",
        "On-policy distillation from a teacher (reverse KL, top-k or full-vocabulary JSD).",
    ),
    "direct-opd": (
        "tempering.methods.direct_opd",
        "Direct-OPD: transfer a small model's RL shift to a larger student.",
    ),
    "tu-opd": ("tempering.methods.tu_opd", "Teacher-Union OPD: distil several teachers gated by their pass rates."),
}


def register(verb: str, module: str, help: str) -> None:
    """Add a method defined outside the package: `module` exports `SPEC`; `verb` becomes a CLI verb (in
    this process), a `tempering config` entry and a name for `tempering.run`."""
    METHODS[verb] = (module, help)


def spec(verb: str) -> MethodSpec[Any]:
    """The `MethodSpec` of a registered method's verb (imports its module)."""
    import difflib
    import importlib

    from tempering.errors import UserError

    if verb not in METHODS:
        near = difflib.get_close_matches(verb, list(METHODS), n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        raise UserError(f"no method is registered as {verb!r}{hint}; the methods: {', '.join(METHODS)}")
    found: MethodSpec[Any] = importlib.import_module(METHODS[verb][0]).SPEC
    return found


__all__ = ["METHODS", "register", "spec"]
