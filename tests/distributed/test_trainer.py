"""The RL recipe over 2 CPU ranks (torchrun + gloo), and the bad launches it refuses."""

import json
import subprocess
import sys

import pytest
import torch
import yaml
from safetensors.torch import load_file

from tempering.config import build
from tempering.errors import UserError
from tempering.methods.rl import TrainConfig
from tempering.train.build import check_parallel
from tempering.train.world import init_world


def _cfg(model, out, steps):
    return {
        "model": {"name": str(model)},
        "task": {
            "family": "arithmetic",
            "args": {"min_value": 0, "max_value": 30},
            "train_size": 200,
            "heldout_size": 8,
        },
        "rollout": {"group_size": 4, "prompts_per_step": 4, "max_new_tokens": 4},
        "optim": {"lr": 1e-3},
        "loss": {"micro_batch_size": 4},
        "run": {
            "steps": steps,
            "out_dir": str(out),
            "eval_every": 0,
            "eval_k": 1,
            "checkpoint_every": 1,
            "progress": False,
            "log_samples": 2,
        },
    }


def _launch(tmp_path, name, cfg, *args):
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=2",
        "-m",
        "tempering.distributed",
        "train",
        str(path),
        *args,
    ]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_two_rank_runs_with_ddp_and_fsdp2(pretrained_dir, tmp_path):
    runs = {s: tmp_path / s for s in ("ddp", "fsdp2")}
    procs = {
        s: _launch(tmp_path, s, _cfg(pretrained_dir, runs[s], 2), "--strategy", s, "--world-size", "2") for s in runs
    }
    for s, p in procs.items():
        out, err = p.communicate(timeout=400)
        assert p.returncode == 0, f"{s}: {err[-3000:]}"
        assert out.count("held-out results") == 1 and "ranks" in out  # rank 0 alone prints the table
    start = load_file(f"{pretrained_dir}/model.safetensors")
    for run in runs.values():
        rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
        steps = [r for r in rows if "reward" in r]
        assert [r["step"] for r in steps] == [1, 2]
        assert all(r["env_calls"] == 16 for r in steps)  # 4 prompts x 4 episodes, summed over both ranks
        assert any(r["grad_norm"] > 0 for r in steps)
        assert len(list((run / "tb").iterdir())) == 1  # one writer: rank 0's
        final = load_file(run / "final" / "model.safetensors")
        assert max(float((final[k] - start[k]).abs().max()) for k in start) > 0  # trained (and, fsdp2: synced back)
        state = torch.load(run / "checkpoints" / "step_2" / "trainer_state.pt", weights_only=False)
        assert len(state["rank_sampler_rng"]) == 2


@pytest.mark.slow
def test_two_rank_runs_with_async_rollouts(pretrained_dir, tmp_path):
    """Each rank's pipeline generates its share ahead of the update; checkpoints where they all drain."""
    runs = {s: tmp_path / f"async-{s}" for s in ("ddp", "fsdp2")}
    procs = {}
    for s, run in runs.items():
        cfg = _cfg(pretrained_dir, run, 3)
        cfg["rollout"].update(async_steps=1, async_threads=1)
        cfg["loss"]["rollout_correction"] = "tis"
        cfg["run"].update(checkpoint_every=2, threads=1)
        procs[s] = _launch(tmp_path, f"async-{s}", cfg, "--strategy", s, "--world-size", "2")
    for s, p in procs.items():
        out, err = p.communicate(timeout=400)
        assert p.returncode == 0, f"{s}: {err[-3000:]}"
    for run in runs.values():
        steps = [r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "reward" in r]
        assert [r["async/staleness"] for r in steps] == [0, 1, 0]  # step 2 checkpoints: batch 3 waits for it
        assert all(r["env_calls"] == 16 and "rollout/mean_weight" in r for r in steps)
        state = torch.load(run / "checkpoints" / "step_2" / "trainer_state.pt", weights_only=False)
        assert len(state["rank_rollout_rng"]) == 2


@pytest.mark.slow
def test_a_launch_outside_torchrun_says_how_to_launch(monkeypatch):
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(k, raising=False)
    with pytest.raises(UserError, match="torchrun --nproc-per-node"):
        init_world()
    res = subprocess.run(
        [sys.executable, "-m", "tempering.distributed", "run.steps=1"],
        capture_output=True,
        text=True,
        env={k: v for k, v in __import__("os").environ.items() if k not in ("RANK", "WORLD_SIZE")},
    )
    assert res.returncode == 2 and "not started by torchrun" in res.stderr and "Traceback" not in res.stderr


def test_a_world_size_other_than_planned_is_refused(monkeypatch):
    env = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29999"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(UserError, match="expects 4 processes but torchrun started 2"):
        init_world("gloo", expected_size=4)
    with pytest.raises(UserError, match="unknown process-group backend"):
        init_world("mpi")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without a GPU")
def test_nccl_on_a_machine_without_gpu_is_refused(monkeypatch):
    for k, v in {
        "RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_RANK": "0",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29999",
    }.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(UserError, match="nccl needs CUDA GPUs and this machine has none"):
        init_world("nccl")


def test_a_batch_that_does_not_split_over_the_ranks_is_refused(tmp_path):
    cfg = build(TrainConfig, {"rollout": {"prompts_per_step": 6}})
    with pytest.raises(UserError, match=r"prompts_per_step=6 does not split over 4 ranks.*\(1, 2, 3, 6\)"):
        check_parallel(cfg, 4, "ddp", resume=False)
    with pytest.raises(UserError, match="--resume is supported with --strategy ddp"):
        check_parallel(build(TrainConfig, {"rollout": {"prompts_per_step": 8}}), 4, "fsdp2", resume=True)


@pytest.mark.slow
def test_the_launcher_prints_a_ranks_tempering_error_last_with_its_exit_code(tmp_path):
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "tempering.cli",
            "launch",
            "--standalone",
            "--nproc-per-node=2",
            "train",
            "rollout.prompts_per_step=3",
            f"run.out_dir={tmp_path / 'r'}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    last = res.stderr.strip().splitlines()[-1]
    assert res.returncode == 2, res.stderr[-2000:]
    assert last.startswith("tempering train: error: rollout.prompts_per_step=3 does not split over 2 ranks")
