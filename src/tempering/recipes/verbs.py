"""The one verb registry: the CLI, `tempering config VERB`, docs/config.md, torchrun launches and the
docs tests all read it. Modules are named, not imported, so `tempering --help` and every verb's
`--help` stay instant (nothing imports torch before the arguments are parsed) and one verb's optional
extras never break another verb."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from tempering.config import load_object as load
from tempering.methods import METHODS


@dataclass(frozen=True)
class Verb:
    module: str
    """The verb's module; without `run`, it has `main(argv) -> int` and imports nothing heavy at import
    time (its `--help` must not wait for torch)."""
    help: str
    schema: str | None = None
    """`module:Class` of its config (None: flags only); `tempering config VERB` prints it."""
    run: str | None = None
    """`module:function` that runs a config: the CLI parses `CONFIG [key=value ...]` itself
    (`recipes/common.py: cli_main`) and imports it only then."""
    loop: bool = True
    """`run` is a training verb on the one loop, `(cfg, resume=..., world=..., strategy=...)`: it
    resumes with `--resume` and runs data-parallel under `torchrun -m tempering.distributed VERB ...`."""
    method: bool = False
    """`run` names a method's spec (`module:SPEC`), which the generic runner runs."""

    def runner(self) -> Callable[..., dict[str, Any]]:
        """The function that runs a config of this verb: `(cfg, resume=..., overwrite=..., ...)`."""
        assert self.run is not None, f"{self.module} is not a config verb"
        if self.method:
            from functools import partial

            from tempering.recipes.runner import run

            return partial(run, load(self.run))
        return load(self.run)


def method_verb(module: str, help: str) -> Verb:
    """The verb of a method module (one exporting `SPEC`, a `train.method.MethodSpec`): its config is the
    spec's, and the one generic runner (`recipes/runner.py`) runs it."""
    return Verb(module, help, f"{module}:SPEC.config", f"{module}:SPEC", method=True)


FIXED: dict[str, Verb] = {
    "demo": Verb(
        "tempering.recipes.demo", "The quickstart: pre-train a tiny model, GRPO on arithmetic, before/after table."
    ),
    "rgrpo": Verb(
        "tempering.recipes.rgrpo",
        "Residual GRPO: complementary teachers, each round on what earlier ones miss.",
        "tempering.recipes.rgrpo:RGRPOConfig",
        "tempering.recipes.rgrpo:rgrpo",
    ),
    "expand-compress": Verb(
        "tempering.recipes.expand_compress",
        "RGRPO teachers, then TU-OPD into one student.",
        "tempering.recipes.expand_compress:ExpandCompressConfig",
        "tempering.recipes.expand_compress:expand_compress",
    ),
    "cuda-agent": Verb(
        "tempering.recipes.cuda_agent",
        "CUDA Agent's staged recipe: single-turn warm-up, RFT, critic pre-training, multi-turn agentic PPO.",
        "tempering.recipes.cuda_agent:CudaAgentConfig",
        "tempering.recipes.cuda_agent:run",
        loop=False,
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
        "tempering.synth.cli",
        "Synthesise verified terminal-task bundles at the policy's frontier (Envs-FORGE).",
        "tempering.synth.loop:SynthConfig",
    ),
    "gui": Verb(
        "tempering.envs.gui.cli", "GUI apps with multi-solution annotations: generate trajectory datasets, show, stats."
    ),
    "code": Verb(
        "tempering.envs.code.cli",
        "Code problems (HumanEval, MBPP, LiveCodeBench, native): check files, score completions with pass@k.",
    ),
    "sandbox": Verb("tempering.sandbox.cli", "Sandbox: the backends that work here, and the adversarial suite."),
    "serve": Verb(
        "tempering.serve.cli",
        "Serve the Tinker API (tinker SDK, tinker-cookbook loops) on tempering's models, losses and sampler.",
        "tempering.serve.tinker.config:TinkerConfig",
    ),
}


class Verbs(Mapping[str, Verb]):
    """Every verb: the pipelines and tools above, and one per registered method (`tempering.methods`),
    the methods' verbs after `demo` (a method registered later shows up at once)."""

    def __getitem__(self, verb: str) -> Verb:
        if verb in METHODS and verb in FIXED:
            raise ValueError(
                f"the method registered as {verb!r} shadows a built-in verb; register it under another name"
            )
        if verb in METHODS:
            return method_verb(*METHODS[verb])
        return FIXED[verb]

    def __iter__(self) -> Iterator[str]:
        fixed = list(FIXED)
        at = fixed.index("demo") + 1
        return iter([*fixed[:at], *METHODS, *fixed[at:]])

    def __len__(self) -> int:
        return len(FIXED) + len(METHODS)


VERBS = Verbs()


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
