"""The one runner of every method's verb (`tempering train`, `ppo`, `rft`, `distill`, `direct-opd`,
`tu-opd`, and any registered method): a config, a `MethodSpec`, the one loop.

    from tempering.recipes.runner import run, trainer
    run("ppo", {"model": {"name": "tiny-s"}, "run": {"steps": 20}})    # the verb's held-out table
    t = trainer("distill", cfg, teacher=my_teacher)                      # step it yourself

`method` is a registered verb or a `MethodSpec` of your own; keyword objects other than the run's
(`family`, `resume`, `world`, `strategy`, `overwrite`, `callbacks`) are the method's parts (e.g. a ready
`teacher=`), refused by name when the method takes none of that name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tempering.config import as_config
from tempering.envs.base import TaskFamily
from tempering.errors import UserError
from tempering.methods import spec as registered
from tempering.train.loop import Trainer
from tempering.train.method import MethodSpec
from tempering.train.stages import Stages
from tempering.train.world import World


def method_spec(method: str | MethodSpec) -> MethodSpec:
    return registered(method) if isinstance(method, str) else method


def config_of(spec: MethodSpec, cfg: Any) -> Any:
    """`cfg` validated as the method's config (a dict), or checked to be one."""
    cfg = as_config(spec.config, cfg)
    if not isinstance(cfg, spec.config):
        raise UserError(
            f"the {spec.name} method reads a {spec.config.__name__}, and was given a {type(cfg).__name__}; "
            "give it a dict of its keys or its own config"
        )
    return cfg


def trainer(
    method: str | MethodSpec,
    cfg: Any,
    family: TaskFamily | None = None,
    resume: bool = False,
    world: World | None = None,
    strategy: str = "ddp",
    overwrite: bool = False,
    **parts: Any,
) -> Trainer:
    """The trainer of one run of `method` (a dict or the method's config); `family` overrides `cfg.task`
    (e.g. a DatasetFamily with your reward)."""
    spec = method_spec(method)
    return Trainer(config_of(spec, cfg), spec, family, resume, world, strategy, overwrite, parts)


def run(method: str | MethodSpec, cfg: Any, callbacks: Sequence[Any] = (), **kwargs: Any) -> dict[str, Any]:
    """Run `method`'s verb (the arguments of `trainer`); returns the start and final held-out metrics
    (a staged method: the first stage's start and each stage's final, `after NAME`). `callbacks` see every
    step's and evaluation's metrics and may stop the run (`Trainer.run`; a stopped stage ends its verb)."""
    spec = method_spec(method)
    cfg = config_of(spec, cfg)

    def train(parts: Mapping[str, Any], c: Any, resume: bool, overwrite: bool) -> dict[str, Any]:
        return trainer(spec, c, **{**kwargs, **parts, "resume": resume, "overwrite": overwrite}).run(callbacks)

    plan = spec.stages(cfg, train) if spec.stages is not None else []
    if not plan:
        return trainer(spec, cfg, **kwargs).run(callbacks)
    resume, overwrite = kwargs.get("resume", False), kwargs.get("overwrite", False)
    done = Stages(Path(cfg.run.out_dir), cfg, resume, overwrite, kwargs.get("world")).run(plan)
    history = {"start": done[0].result["start"]} if "start" in done[0].result else {}
    for d in done:
        if d.stopped:  # --resume continues this stage
            return history | {"stopped_at": d.result["stopped_at"]}
        history[f"after {d.name.replace('_', ' ')}"] = d.result["final"]
    return history
