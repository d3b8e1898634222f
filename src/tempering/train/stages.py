"""What a staged verb's stages share: the verb's own folder and how each stage starts or resumes.

A staged verb (Direct-OPD's teacher pairs, RGRPO's rounds, expand-compress, CUDA Agent, the demo) runs
several runs of the loop, each in a folder of its own under the verb's; `--resume` resumes the stage
that was running and lets the finished ones only report.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from tempering.config import Schema
from tempering.runlog import atomic_write_text, prepare_run_dir


def begin_pipeline(root: Path, cfg: Schema, resume: bool, overwrite: bool, world=None) -> None:
    """A pipeline verb's own folder: refused when it holds a run and this is neither a resume nor an
    overwrite; its config.yaml (what --resume reads) written by rank 0."""
    if world is None or world.is_main:
        prepare_run_dir(root, resume, overwrite)
        root.mkdir(parents=True, exist_ok=True)
        atomic_write_text(root / "config.yaml", yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))


def stage_start(out: Path, resume: bool) -> tuple[bool, bool]:
    """(resume, overwrite) of a pipeline's stage: a stage with a checkpoint resumes; one started but never
    checkpointed starts again (its folder is the pipeline's own); a new pipeline's stages start fresh."""
    if resume and any((out / "checkpoints").glob("step_*")):
        return True, False
    return False, resume
