import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
import torch

collect_ignore_glob = ["envs/data/*"]  # task bundles' own tests (Harbor's tests/), run by the bundles' verifier only

torch.set_num_threads(1)
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("TEMPERING_TEST_CACHE", ROOT / ".tempering-cache" / "tests"))
"""Built test fixtures kept across test sessions (make clean removes them)."""

WARM_START = {
    "model": {"name": "tiny-xs"},
    "task": {"family": "arithmetic", "args": {"min_value": 0, "max_value": 30}, "train_size": 800, "heldout_size": 60},
    "rollout": {"prompts_per_step": 32, "max_new_tokens": 4},
    "optim": {"lr": 3e-3, "warmup_steps": 50},
    "run": {"steps": 250, "eval_every": 0, "progress": False, "tensorboard": False},
}
WARM_START_CODE = [
    "methods/pretrain.py",
    "models/tiny.py",
    "models/tokenizer.py",
    "models/io.py",
    "envs/arithmetic.py",
    "envs/synthetic.py",
    *[f"train/{p.name}" for p in sorted((ROOT / "src" / "tempering" / "train").glob("*.py"))],
]
"""The warm start depends on this config and this code: a change to either builds it again."""


@pytest.fixture(scope="session")
def tiny():
    """A fresh tiny-xs model and the character tokenizer."""
    from tempering.models import char_tokenizer, tiny_model

    return tiny_model("tiny-xs", seed=0), char_tokenizer()


def _key() -> str:
    h = hashlib.sha256(json.dumps(WARM_START, sort_keys=True).encode())
    for rel in WARM_START_CODE:
        h.update((ROOT / "src" / "tempering" / rel).read_bytes())
    h.update(torch.__version__.encode())
    return h.hexdigest()[:16]


@pytest.fixture(scope="session")
def pretrained_dir():
    """A tiny-xs model warm-started on small sums, so RL sees non-zero rewards; built once per config and
    code version and cached across test sessions (keyed by both)."""
    from tempering.config import build
    from tempering.methods.pretrain import PretrainConfig, pretrain

    done = CACHE / f"warm_start-{_key()}"
    if not (done / "model" / "config.json").is_file():
        CACHE.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=".warm_start.", dir=CACHE))
        cfg = build(PretrainConfig, {**WARM_START, "run": {**WARM_START["run"], "out_dir": str(work / "run")}})
        pretrain(cfg)
        shutil.move(work / "run" / "final", work / "model")
        try:
            os.replace(work, done)  # atomic: a parallel session that got there first keeps its copy
        except OSError:
            shutil.rmtree(work, ignore_errors=True)
    return str(done / "model")
