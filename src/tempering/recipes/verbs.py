"""The one verb registry: the CLI, `tempering config VERB`, docs/config.md, torchrun launches and the
docs tests all read it. Modules are named, not imported, so `tempering --help` and every verb's
`--help` stay instant (nothing imports torch before the arguments are parsed) and one verb's optional
extras never break another verb."""

from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Verb:
    module: str
    """The verb's module; without `run`, it has `main(argv) -> int` and imports nothing heavy at import
    time (its `--help` must not wait for torch)."""
    help: str
    schema: str | None = None
    """`module:Class` of its config (None: flags only)."""
    run: str | None = None
    """`module:function` that runs a config: the CLI parses `CONFIG [key=value ...]` itself
    (`recipes/common.py: cli_main`) and imports it only then."""
    loop: bool = True
    """`run` is a training verb on the one loop, `(cfg, resume=..., world=..., strategy=...)`: it
    resumes with `--resume` and runs data-parallel under `torchrun -m tempering.distributed VERB ...`."""


VERBS: dict[str, Verb] = {
    "demo": Verb(
        "tempering.recipes.demo", "The quickstart: pre-train a tiny model, GRPO on arithmetic, before/after table."
    ),
    "pretrain": Verb(
        "tempering.recipes.pretrain",
        "Supervised warm start of a model on a built-in task family.",
        "tempering.recipes.pretrain:PretrainConfig",
        "tempering.recipes.pretrain:run",
        loop=False,
    ),
    "train": Verb(
        "tempering.recipes.train",
        "RL with verifiable rewards: GRPO, Dr. GRPO, RLOO, LEAP, TCPO and other multi-turn credits.",
        "tempering.recipes.train:TrainConfig",
        "tempering.recipes.train:train",
    ),
    "distill": Verb(
        "tempering.recipes.distill",
        "On-policy distillation from a teacher (reverse KL, top-k or full-vocabulary JSD).",
        "tempering.recipes.distill:DistillConfig",
        "tempering.recipes.distill:distill",
    ),
    "direct-opd": Verb(
        "tempering.recipes.direct_opd",
        "Direct-OPD: transfer a small model's RL shift to a larger student.",
        "tempering.recipes.direct_opd:DirectOPDConfig",
        "tempering.recipes.direct_opd:direct_opd",
    ),
    "rgrpo": Verb(
        "tempering.recipes.rgrpo",
        "Residual GRPO: complementary teachers, each round on what earlier ones miss.",
        "tempering.recipes.rgrpo:RGRPOConfig",
        "tempering.recipes.rgrpo:rgrpo",
    ),
    "tu-opd": Verb(
        "tempering.recipes.tu_opd",
        "Teacher-Union OPD: distil several teachers gated by their pass rates.",
        "tempering.recipes.tu_opd:TUOPDConfig",
        "tempering.recipes.tu_opd:tu_opd",
    ),
    "expand-compress": Verb(
        "tempering.recipes.expand_compress",
        "RGRPO teachers, then TU-OPD into one student.",
        "tempering.recipes.expand_compress:ExpandCompressConfig",
        "tempering.recipes.expand_compress:expand_compress",
    ),
    "launch": Verb(
        "tempering.distributed.launch",
        "Run a training verb on N processes (torchrun's options first), data-parallel; errors reported last.",
    ),
    "eval": Verb(
        "tempering.recipes.eval", "Evaluate a checkpoint on a task family's held-out split (or a whole file)."
    ),
    "view": Verb(
        "tempering.recipes.view",
        "Write one HTML page of a run: curves, evaluations, samples filterable by step, status and score.",
    ),
    "config": Verb("tempering.recipes.reference", "Print the config reference of a verb."),
    "kernels": Verb(
        "tempering.envs.kernels.cli", "Kernel environment: list problems, eval submissions, synth problems."
    ),
    "synth": Verb(
        "tempering.synth.cli", "Synthesise verified terminal-task bundles at the policy's frontier (Envs-FORGE)."
    ),
    "gui": Verb(
        "tempering.envs.gui.cli", "GUI apps with multi-solution annotations: generate trajectory datasets, show, stats."
    ),
    "code": Verb(
        "tempering.envs.code.cli",
        "Code problems (HumanEval, MBPP, LiveCodeBench, native): check files, score completions with pass@k.",
    ),
    "sandbox": Verb("tempering.sandbox.cli", "Sandbox: the backends that work here, and the adversarial suite."),
}


def load(spec: str):
    """The object a `module:name` spec names."""
    mod, _, name = spec.partition(":")
    return getattr(importlib.import_module(mod), name)


def schema(verb: str):
    s = VERBS[verb].schema
    if s is None:
        raise KeyError(f"verb {verb!r} has no config schema")
    return load(s)


def configured() -> list[str]:
    """Verbs with a config schema, sorted."""
    return sorted(v for v, spec in VERBS.items() if spec.schema)


def parallel() -> list[str]:
    """Verbs that run data-parallel under torchrun."""
    return sorted(v for v, spec in VERBS.items() if spec.run and spec.loop)
