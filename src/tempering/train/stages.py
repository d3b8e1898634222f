"""A staged verb's stages: runs of the loop in folders of their own, one after another.

A staged verb (CUDA Agent, RGRPO's rounds, expand-compress, Direct-OPD's teacher pairs, the demo) is a
list of declared stages (`Stage`: its name, its config made from the stage before it, its training),
run by one runner (`Stages.run`) in the verb's folder, each stage in a folder inside it. A finished
stage writes `stage.json`: a digest of its config and of the stages before it, and what its training
returned. Run again, a finished stage
reports that result without loading anything, and a stage made by another configuration is refused
rather than silently reused; an interrupted one continues from its last checkpoint.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import yaml

from tempering.config import Schema
from tempering.errors import UserError
from tempering.runlog import atomic_write_text, prepare_run_dir

if TYPE_CHECKING:
    from tempering.train.config import LoopConfig  # imports torch: help and config reading come first
    from tempering.train.world import World


L = TypeVar("L", bound="LoopConfig")
"""The config class of a stage (each stage a training verb's)."""


@dataclass(frozen=True)
class Done:
    """A stage that ran (finished, or stopped by a callback) or was found finished."""

    name: str
    config: Any
    """Its config (its verb's config class)."""
    out: Path
    """The stage's folder (its `run.out_dir`)."""
    digest: str
    """Of its config and of the stages before it: what a stage that starts from this one runs after."""
    result: Any
    """What its training returned (from `stage.json` when it had finished before)."""

    @property
    def final(self) -> str:
        """The folder its training exports the policy to, where the next stage starts."""
        return str(self.out / "final")

    @property
    def stopped(self) -> bool:
        """A callback stopped its run (`stopped_at` in its history, `Trainer.run`): not finished."""
        return isinstance(self.result, dict) and "stopped_at" in self.result


@dataclass(frozen=True)
class Stage(Generic[L]):
    """One stage of a staged verb, declared: its name, how its config is made and how it trains."""

    name: str
    config: Callable[[Done | None], L | None]
    """Its verb's config (its folder `run.out_dir`) from the last stage that ran before it (None: none
    did); None skips the stage (the next one starts where the last one ended)."""
    train: Callable[[L, bool, bool], Any]
    """`(config, resume, overwrite) -> result`: one run of its verb, a JSON result (a run's history)."""
    then: Callable[[Done], None] | None = None
    """Called once the stage finished (or was found finished): a report, an evaluation."""


class Stages:
    """The staged verb's own folder `root`: refused when it holds a run and this is neither a resume nor an
    overwrite; rank 0 writes its config.yaml (what --resume reads; `cfg` None: a verb without a config of
    its own, the demo). Under torchrun (`world`) only rank 0 writes; every rank reads the same files, so
    all of them reuse a stage or train it together."""

    def __init__(self, root: Path, cfg: Schema | None, resume: bool, overwrite: bool, world: World | None = None):
        self.root, self.resume = Path(root), resume
        self.main = world is None or world.is_main
        if self.main:
            prepare_run_dir(self.root, resume, overwrite)
            self.root.mkdir(parents=True, exist_ok=True)
            if cfg is not None:
                dump = yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)
                atomic_write_text(self.root / "config.yaml", dump)

    def digest(self, name: str, cfg: Schema, after: str) -> str:
        """Of the stage's config without its folder, and of `after` (the digest of the stage before it,
        which names that stage's whole history: a model.name inside this verb's folder is left out then)."""
        dump = cfg.model_dump(mode="json")
        dump["run"].pop("out_dir", None)
        model = dump.get("model", {})
        if after and Path(model.get("name", "")).resolve().is_relative_to(self.root.resolve()):
            model.pop("name")
        text = json.dumps({"stage": name, "config": dump, "after": after}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def run(self, plan: Iterable[Stage[Any]]) -> list[Done]:
        """The stages of `plan` in order, each after the last one that ran; a stage a callback stopped ends
        the run (--resume continues it). Returns the stages that ran."""
        done: list[Done] = []
        for stage in plan:
            last = done[-1] if done else None
            cfg = stage.config(last)
            if cfg is None:
                continue
            done.append(self.one(stage.name, cfg, stage.train, last.digest if last else ""))
            if done[-1].stopped:
                break
            if stage.then is not None:
                stage.then(done[-1])
        return done

    def one(self, name: str, cfg: L, train: Callable[[L, bool, bool], Any], after: str) -> Done:
        """Stage `name` in `cfg.run.out_dir`: reused when it finished with this digest, refused when it
        finished with another, else `train(cfg, resume, overwrite)` (a stage with a checkpoint resumes; one
        started but never checkpointed starts again), whose JSON result `stage.json` records."""
        out = Path(cfg.run.out_dir)
        digest = self.digest(name, cfg, after)
        marker = out / "stage.json"
        # a new run's folder holds no stage yet (and rank 0 may still be clearing it: read nothing)
        if self.resume and marker.is_file():
            saved = json.loads(marker.read_text())
            if saved.get("digest") != digest:
                raise UserError(
                    f"{out} holds stage {name} of another configuration (or after other stages before it): "
                    f"choose a new run folder (run.out_dir), or delete {out} (and the stages after it) to run "
                    "it again"
                )
            return Done(name, cfg, out, digest, saved.get("result"))
        again = self.resume and any((out / "checkpoints").glob("step_*"))
        done = Done(name, cfg, out, digest, train(cfg, again, self.resume and not again))
        if self.main and not done.stopped:
            out.mkdir(parents=True, exist_ok=True)
            atomic_write_text(marker, json.dumps({"stage": name, "digest": digest, "result": done.result}) + "\n")
        return done
