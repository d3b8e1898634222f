"""Checkpoints that resume exactly: model (HF folder), optimizer, scheduler, RNG states, data cursor.

Each checkpoint is written into a temporary folder and renamed into place, so a folder named
`step_N` is always complete; a killed run leaves at most a hidden temporary folder behind.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tempering.errors import UserError

_STEP = re.compile(r"^step_(\d+)$")


def rng_state(generators: dict[str, torch.Generator]) -> dict[str, Any]:
    return {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
        "generators": {k: g.get_state() for k, g in generators.items()},
    }


def set_rng_state(state: dict[str, Any], generators: dict[str, torch.Generator]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    for k, g in generators.items():
        g.set_state(state["generators"][k])


def save_checkpoint(run_dir: Path, step: int, model, tokenizer, trainer_state: dict[str, Any], keep: int = 2) -> Path:
    ckpt_root = Path(run_dir) / "checkpoints"
    ckpt_root.mkdir(parents=True, exist_ok=True)
    final = ckpt_root / f"step_{step}"
    tmp = Path(tempfile.mkdtemp(prefix=f".step_{step}.", dir=ckpt_root))
    try:
        model.save_pretrained(tmp / "model", safe_serialization=True)
        tokenizer.save_pretrained(tmp / "model")
        torch.save(trainer_state, tmp / "trainer_state.pt")
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    for old in list_checkpoints(run_dir)[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
    return final


def list_checkpoints(run_dir: Path) -> list[Path]:
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := _STEP.match(p.name)) and p.is_dir()]
    return [p for _, p in sorted(found)]


def latest_checkpoint(run_dir: Path) -> Path:
    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").is_file():
        raise UserError(f"{run_dir} is not a run folder (no config.yaml); give the folder a run wrote")
    ckpts = list_checkpoints(run_dir)
    if not ckpts:
        raise UserError(f"run folder {run_dir} has no complete checkpoint to resume from")
    return ckpts[-1]


def load_trainer_state(ckpt: Path) -> dict[str, Any]:
    return torch.load(Path(ckpt) / "trainer_state.pt", weights_only=False)
