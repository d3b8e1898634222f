"""`tempering cuda-agent` on the embedded default (a tiny model from scratch, agent-mode kernel sketches),
with a stub verifier so that the whole staged pipeline runs in seconds."""

import json

import pytest

from tempering.config import build
from tempering.envs.kernels.agent import SketchAgentFamily
from tempering.envs.kernels.verifier import KernelResult
from tempering.errors import UserError
from tempering.recipes.cuda_agent import CudaAgentConfig, cuda_agent, cuda_agent_columns
from tempering.types import Episode, Task


class StubVerifier:
    """Vectorised kernels (`omp simd` in the C) beat eager but not torch.compile (reward 2), others reward 1."""

    calls = 0

    async def verify(self, problem, text):
        StubVerifier.calls += 1
        t = 2.0 if "omp simd" in text else 6.0  # eager 3 ms, torch.compile 1.8 ms
        return KernelResult(
            problem=problem.name,
            backend="c",
            status="correct",
            compiled=True,
            correct=True,
            t_ms=t,
            t_eager_ms=3.0,
            t_compile_ms=1.8,
            speedup_eager=3.0 / t,
            speedup_compile=1.8 / t,
            cuda_agent_reward=2 if t < 3 else 1,
        )


def family():
    fam = SketchAgentFamily(problem_names=["01_relu", "13_scale_shift", "34_residual_relu"], answer_keys=("vec",))
    fam._verifier = StubVerifier()
    return fam


def _cfg(out, **over):
    cfg = {
        "model": {"name": "tiny-xs"},
        "task": {"family": "kernel_sketch_agent", "train_size": 20, "heldout_size": 1},
        "rollout": {"group_size": 2, "prompts_per_step": 2, "max_new_tokens": 24, "max_turns": 2},
        "loss": {"micro_batch_size": 4},
        "run": {"out_dir": str(out), "eval_k": 2, "eval_every": 0, "progress": False, "tensorboard": False},
        "pretrain": {"steps": 150, "lr": 3e-3, "batch_size": 16},
        "warmup": {"steps": 2},
        "rft": {"steps": 1, "min_reward": -2.0},
        "critic_pretrain": {"steps": 1},
        "rl": {"steps": 2},
    }
    for k, v in over.items():
        cfg[k] = {**cfg.get(k, {}), **v}
    return cfg


@pytest.mark.slow
def test_the_whole_pipeline_runs_on_the_embedded_default_and_reuses_finished_stages(tmp_path):
    out = cuda_agent(_cfg(tmp_path), family=family())
    for i, stage in enumerate(["pretrain", "warmup", "rft", "critic_pretrain", "rl"], start=1):
        assert (tmp_path / f"{i}_{stage}" / "stage.json").is_file(), stage
    assert (tmp_path / "4_critic_pretrain" / "final" / "critic.safetensors").is_file()
    rl_cfg = (tmp_path / "5_rl" / "config.yaml").read_text()
    assert "4_critic_pretrain/final/critic.safetensors" in rl_cfg and "0.28" in rl_cfg and "lam: 0.95" in rl_cfg
    report = json.loads((tmp_path / "report.json").read_text())
    assert list(report) == ["start", "pretrain", "warmup", "rft", "rl"]
    assert all(report[s]["episodes"] == 2 for s in report)
    rows = [json.loads(ln) for ln in (tmp_path / "2_warmup" / "metrics.jsonl").read_text().splitlines()]
    assert max(r.get("reward", -1) for r in rows) > -1  # the warm start submits valid sketches
    assert out["model"].endswith("5_rl/final")
    # the warm-up stage is single-turn, the agent stages use the tools over several turns
    assert "max_turns: 1" in (tmp_path / "2_warmup" / "config.yaml").read_text()

    with pytest.raises(UserError, match="already holds a run; continue it with --resume"):
        cuda_agent(_cfg(tmp_path), family=family())
    before = StubVerifier.calls
    again = cuda_agent(_cfg(tmp_path), family=family(), resume=True)  # every stage reused: no training, no verifying
    assert again["model"] == out["model"] and StubVerifier.calls == before

    with pytest.raises(UserError, match="another configuration"):
        cuda_agent(_cfg(tmp_path, rft={"steps": 2}), family=family(), resume=True)

    (tmp_path / "5_rl" / "stage.json").unlink()  # as if the last stage had been killed after a checkpoint
    cuda_agent(_cfg(tmp_path), family=family(), resume=True)
    assert (tmp_path / "5_rl" / "stage.json").is_file()
    # the command line resumes from the run folder's own config.yaml
    from tempering.recipes.common import parse, parser, resolve

    a = parse(parser("cuda-agent", ""), ["--resume", str(tmp_path)])
    assert resolve(CudaAgentConfig, a).rl.steps == 2


@pytest.mark.slow
def test_ablations_are_one_flag_each(tmp_path):
    grpo = cuda_agent(_cfg(tmp_path / "g", pretrain={"steps": 20}, rl={"algorithm": "grpo"}), family=family())
    assert not (tmp_path / "g" / "4_critic_pretrain").exists() and grpo["model"].endswith("5_rl/final")
    cuda_agent(_cfg(tmp_path / "n", pretrain={"steps": 20}, rft={"enabled": False}), family=family())
    assert not (tmp_path / "n" / "3_rft").exists() and (tmp_path / "n" / "4_critic_pretrain").exists()


def test_config_refuses_keys_the_pipeline_sets_itself():
    with pytest.raises(Exception, match="run.steps"):
        build(CudaAgentConfig, {"run": {"steps": 3}})
    with pytest.raises(Exception, match="critic_pretrain.steps"):
        build(CudaAgentConfig, {"critic": {"pretrain_steps": 3}})
    with pytest.raises(Exception, match="rl.algorithm=ppo"):
        build(CudaAgentConfig, {"rl": {"algorithm": "grpo"}, "loss": {"lam": 0.9}})
    with pytest.raises(UserError, match="reward=cuda_agent"):
        cuda_agent({"task": {"family": "kernel_sketch_agent", "args": {"reward": "score"}}})


def test_columns_by_hand():
    eps = [Episode(task=Task(id="t", prompt=""), prompt_ids=[], reward=r) for r in (-1, 1, 2, 3)]
    cols = cuda_agent_columns(eps)
    assert cols == {
        "correct_rate": 0.75,
        "faster_than_eager_rate": 0.5,
        "faster_than_compile_rate": 0.25,
        "reward_mean": 1.25,
        "episodes": 4,
    }
