"""NCCL on one GPU: a torchrun world of 1 trains the data-parallel recipe with DDP and FSDP2 (run with
benchmarks/gpu/run_checks.sh; skipped without a CUDA GPU)."""

import json
import subprocess
import sys

import pytest
import torch
import yaml

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


@pytest.mark.parametrize("strategy", ["ddp", "fsdp2"])
def test_nccl_world_of_one_trains(pretrained_dir, tmp_path, strategy):
    cfg = {
        "model": {"name": str(pretrained_dir)},
        "task": {
            "family": "arithmetic",
            "args": {"min_value": 0, "max_value": 30},
            "train_size": 64,
            "heldout_size": 8,
        },
        "rollout": {"group_size": 4, "prompts_per_step": 4, "max_new_tokens": 4},
        "run": {"steps": 2, "out_dir": str(tmp_path / "run"), "eval_every": 0, "eval_k": 1, "progress": False},
    }
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node=1",
            "-m",
            "tempering.distributed",
            str(tmp_path / "c.yaml"),
            "--strategy",
            strategy,
            "--backend",
            "nccl",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "reward" in r] == [1, 2]
