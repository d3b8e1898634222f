"""`tempering <verb> ...`: each verb lives in its own module with a `main(argv) -> int`.

Verbs are imported lazily so that `tempering --help` is instant and one verb's optional extras never
break another verb.
"""

from __future__ import annotations

import importlib
import sys

from tempering.errors import UserError

# verb -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": (
        "tempering.recipes.demo",
        "The quickstart: pre-train a tiny model, GRPO on arithmetic, before/after table.",
    ),
    "pretrain": ("tempering.recipes.pretrain", "Supervised warm start of a model on a built-in task family."),
    "train": ("tempering.recipes.rl", "RL with verifiable rewards: GRPO, Dr. GRPO, RLOO, multi-turn methods."),
    "eval": ("tempering.recipes.eval", "Evaluate a checkpoint on a task family's held-out split (or a whole file)."),
    "config": ("tempering.recipes.reference", "Print the config reference of a recipe."),
    "kernels": ("tempering.envs.kernels.cli", "Kernel environment: list problems, eval submissions, synth problems."),
    "synth": (
        "tempering.synth.cli",
        "Synthesise verified terminal-task bundles at the policy's frontier (Envs-FORGE).",
    ),
    "gui": (
        "tempering.envs.gui.cli",
        "GUI apps with multi-solution annotations: generate trajectory datasets, show, stats.",
    ),
    "distill": (
        "tempering.recipes.distill",
        "On-policy distillation from a teacher (reverse KL, top-k or full-vocabulary JSD).",
    ),
    "direct-opd": (
        "tempering.recipes.direct_opd",
        "Direct-OPD: transfer a small model's RL shift to a larger student.",
    ),
    "rgrpo": (
        "tempering.recipes.rgrpo",
        "Residual GRPO: complementary teachers, each round on what earlier ones miss.",
    ),
    "tu-opd": ("tempering.recipes.tu_opd", "Teacher-Union OPD: distil several teachers gated by their pass rates."),
    "expand-compress": ("tempering.recipes.expand_compress", "RGRPO teachers, then TU-OPD into one student."),
    "code": (
        "tempering.envs.code.cli",
        "Code problems (HumanEval, MBPP, LiveCodeBench, native): check files, score completions with pass@k.",
    ),
    "sandbox": ("tempering.sandbox.cli", "Sandbox: the backends that work here, and the adversarial suite."),
}


def _usage() -> str:
    width = max((len(v) for v in COMMANDS), default=8)
    rows = "\n".join(f"  {v:<{width}}  {h}" for v, (_, h) in COMMANDS.items())
    return f"usage: tempering <command> [args]\n\ncommands:\n{rows}\n\n`tempering <command> --help` for one."


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0
    if argv[0] in ("-V", "--version"):
        from tempering import __version__

        print(__version__)
        return 0
    verb, rest = argv[0], argv[1:]
    if verb not in COMMANDS:
        print(f"tempering: unknown command {verb!r}.\n\n{_usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[verb][0])
    try:
        return int(module.main(rest) or 0)
    except UserError as e:
        print(f"tempering {verb}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"tempering {verb}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
