"""The virtual environment the verl adapter is tested in.

verl 0.9.1 pins transformers < 5.11 while tempering's own environment uses 5.24, so the adapter is
checked in an environment of its own: torch 2.13.0 (as in the project), verl and a transformers that
verl accepts, resolved by pip as a user's `pip install 'tempering[verl]'` would be. It is built once per
machine under ~/.cache/tempering (override: TEMPERING_VERL_VENV) and reused; building it downloads
about 1.5 GB of packages and takes several minutes. The current checkout is installed into it in
editable mode on every use (no dependencies, seconds), so that verl finds tempering's plugin entry point.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

VERL = "verl==0.9.1"
TRANSFORMERS = "transformers>=5.5.3,<5.11"
TORCH = "torch==2.13.0"
REPO = Path(__file__).resolve().parents[2]


def venv_dir() -> Path:
    default = Path.home() / ".cache" / "tempering" / f"venv-{VERL.replace('==', '-')}"
    return Path(os.environ.get("TEMPERING_VERL_VENV", default))


def _run(cmd: list[str]) -> None:
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{res.stdout[-2000:]}\n{res.stderr[-4000:]}")


def ensure_verl_python() -> Path:
    """The interpreter of the verl environment, built if missing, with this checkout installed."""
    root = venv_dir()
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.parent / f".{root.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one builder at a time
        if not (root / ".complete").is_file():
            tmp = root.with_name(f".{root.name}.building")
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.rmtree(root, ignore_errors=True)
            _run([sys.executable, "-m", "venv", str(tmp)])
            py = str(tmp / "bin" / "python")
            _run([py, "-m", "pip", "install", "-q", TORCH])  # first, so nothing pulls a CUDA build
            _run([py, "-m", "pip", "install", "-q", VERL, TRANSFORMERS, TORCH])
            (tmp / ".complete").write_text(f"{VERL}\n{TRANSFORMERS}\n{TORCH}\n")
            os.replace(tmp, root)
        py = root / "bin" / "python"
        _run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "-e", str(REPO)])
    return py


if __name__ == "__main__":
    print(ensure_verl_python())
