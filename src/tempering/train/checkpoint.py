"""Checkpoints that resume exactly: model (HF folder), optimizer, scheduler, RNG states, data cursor.

Each checkpoint is written into a temporary folder, closed by a manifest of every file's size and
SHA-256 (written last, after the files are synced to disk), and renamed into place: a folder named
`step_N` is complete, and a resume checks it against its manifest, falling back to the newest intact
checkpoint when one was damaged afterwards.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import random
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from tempering.errors import UserError

if TYPE_CHECKING:
    from transformers import PreTrainedModel

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


def _torch_save(obj: Any, path: Path) -> None:
    """torch.save, with a short write (a full disk) raised as the OSError it is: torch's zip writer
    reports it as a RuntimeError 'unexpected pos'."""
    try:
        torch.save(obj, path)
    except RuntimeError as e:
        if "unexpected pos" not in str(e):
            raise
        free = shutil.disk_usage(path.parent).free
        raise OSError(errno.ENOSPC, f"{path.name} was cut short, {free} bytes free on its disk") from e


def save_checkpoint(
    run_dir: Path, step: int, model: PreTrainedModel, tokenizer: Any, trainer_state: dict[str, Any], keep: int = 2
) -> Path:
    ckpt_root = Path(run_dir) / "checkpoints"
    ckpt_root.mkdir(parents=True, exist_ok=True)
    final = ckpt_root / f"step_{step}"
    tmp = Path(tempfile.mkdtemp(prefix=f".step_{step}.", dir=ckpt_root))
    try:
        model.save_pretrained(tmp / "model", safe_serialization=True)
        tokenizer.save_pretrained(tmp / "model")
        _torch_save(trainer_state, tmp / "trainer_state.pt")
        write_manifest(tmp)
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    except OSError as e:  # a full disk or a quota: the previous checkpoints are untouched
        shutil.rmtree(tmp, ignore_errors=True)
        kept = list_checkpoints(run_dir)
        last = f"the last complete one is {kept[-1]}" if kept else "no earlier checkpoint exists"
        raise UserError(
            f"writing checkpoint step_{step} failed ({e.strerror or e}); {last}. Free space in {ckpt_root} and "
            "continue with --resume"
        ) from e
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    for old in list_checkpoints(run_dir)[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
    return final


MANIFEST = "manifest.json"


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_manifest(folder: Path) -> None:
    """Sync every file to disk, then record its size and SHA-256 in manifest.json (synced too)."""
    files = {}
    for p in sorted(q for q in folder.rglob("*") if q.is_file()):
        with p.open("rb") as f:
            os.fsync(f.fileno())
        files[str(p.relative_to(folder))] = {"size": p.stat().st_size, "sha256": _digest(p)}
    tmp = folder / f".{MANIFEST}.tmp"
    with tmp.open("w") as f:
        json.dump({"files": files}, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, folder / MANIFEST)


def damage(ckpt: Path) -> str | None:
    """What is wrong with a checkpoint against its manifest (None: intact)."""
    m = ckpt / MANIFEST
    if not m.is_file():
        return f"{m} is missing (the checkpoint was not finished)"
    try:
        files = json.loads(m.read_text())["files"]
    except (ValueError, KeyError) as e:
        return f"{m} is unreadable ({e})"
    for rel, want in files.items():
        p = ckpt / rel
        if not p.is_file():
            return f"{p} is missing"
        if p.stat().st_size != want["size"]:
            return f"{p} has {p.stat().st_size} bytes, the manifest says {want['size']}"
        if _digest(p) != want["sha256"]:
            return f"{p} does not match its checksum"
    return None


def list_checkpoints(run_dir: Path) -> list[Path]:
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := _STEP.match(p.name)) and p.is_dir()]
    return [p for _, p in sorted(found)]


def latest_checkpoint(run_dir: Path, warn: Callable[[str], None] | None = None) -> Path:
    """The newest intact checkpoint; damaged newer ones are named (through `warn`) and skipped."""
    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").is_file():
        raise UserError(f"{run_dir} is not a run folder (no config.yaml); give the folder a run wrote")
    ckpts = list_checkpoints(run_dir)
    if not ckpts:
        raise UserError(f"run folder {run_dir} has no complete checkpoint to resume from")
    problems: list[str] = []
    for ckpt in reversed(ckpts):
        bad = damage(ckpt)
        if bad is None:
            for p in problems:
                (warn or print)(f"skipping a damaged checkpoint: {p}")
            return ckpt
        problems.append(bad)
    raise UserError(f"every checkpoint in {run_dir} is damaged: " + "; ".join(problems))


def load_trainer_state(ckpt: Path) -> dict[str, Any]:
    state: dict[str, Any] = torch.load(Path(ckpt) / "trainer_state.pt", weights_only=False)
    return state
