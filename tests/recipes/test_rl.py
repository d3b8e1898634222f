import asyncio
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from tempering.config import build
from tempering.methods.rl import TrainConfig
from tempering.recipes.runner import run, trainer
from tempering.rollout.engine import RolloutStats
from tempering.train.batch import collate
from tempering.train.scoring import ReferenceLogprobs, score

TASK = {"family": "arithmetic", "args": {"min_value": 0, "max_value": 30}, "train_size": 400, "heldout_size": 40}
DETERMINISTIC = [
    "reward",
    "success",
    "policy_loss",
    "entropy",
    "grad_norm",
    "response_len",
    "approx_kl",
    "clip_frac_high",
]


def _cfg(model, out, **run):
    return {
        "model": {"name": model},
        "task": TASK,
        "rollout": {"group_size": 4, "prompts_per_step": 8, "max_new_tokens": 4},
        "optim": {"lr": 1e-3},
        "run": {
            "steps": 3,
            "out_dir": str(out),
            "eval_every": 0,
            "eval_k": 2,
            "checkpoint_every": 0,
            "progress": False,
            **run,
        },
    }


@pytest.mark.slow
def test_grpo_run_writes_a_complete_run_folder(pretrained_dir, tmp_path):
    hist = run("train", _cfg(pretrained_dir, tmp_path / "run"))
    folder = tmp_path / "run"
    names = {p.name for p in folder.iterdir()}
    assert {"config.yaml", "metrics.jsonl", "samples.jsonl", "curves.png", "checkpoints", "final", "tb"} <= names
    rows = [json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in rows if "reward" in r]
    assert steps == [1, 2, 3]
    assert 0.0 < hist["start"]["eval/pass@1"] <= 1.0  # the warm start solves some sums
    assert all(0.0 <= r["reward"] <= 1.0 for r in rows if "reward" in r)
    ckpt = folder / "checkpoints" / "step_3"
    assert (ckpt / "trainer_state.pt").is_file() and (ckpt / "model" / "model.safetensors").is_file()


def test_no_reference_model_without_kl(pretrained_dir, tmp_path):
    t = trainer("train", build(TrainConfig, _cfg(pretrained_dir, tmp_path / "a")))
    assert not any(isinstance(s, ReferenceLogprobs) for s in t.scorers)
    cfg = _cfg(pretrained_dir, tmp_path / "b")
    cfg["loss"] = {"kl_coef": 0.1, "dynamic_sampling": True, "advantage": "rloo"}
    t = trainer("train", build(TrainConfig, cfg))
    (ref,) = [s for s in t.scorers if isinstance(s, ReferenceLogprobs)]
    rows: list[int] = []
    forward = ref.model.forward
    ref.model.forward = lambda input_ids, **kw: rows.append(len(input_ids)) or forward(input_ids, **kw)
    import asyncio

    r = asyncio.run(t.step())
    assert "kl_ref" in r.metrics and r.metrics["kl_ref"] == pytest.approx(0.0, abs=1e-6)  # first step: policy == ref
    assert all(max(g.rewards) > min(g.rewards) for g in r.groups)  # dynamic sampling kept informative groups only
    # the reference (read by the loss only) ran once, on the kept groups, not on every batch the filter saw
    assert r.metrics["frac_zero_adv_groups"] > 0
    assert sum(rows) == sum(len(g.episodes) for g in r.groups)


def test_dynamic_sampling_scores_each_collected_batch_once_with_the_kl_in_the_reward(pretrained_dir, tmp_path):
    """The credit reads the KL, so the filter needs the reference: it runs once per collected episode, and
    the update takes the kept groups' scores from the filter (as fresh ones, up to float rounding)."""
    import asyncio

    cfg = _cfg(pretrained_dir, tmp_path / "a")
    cfg["loss"] = {"kl_coef": 0.1, "kl_in_reward": True, "dynamic_sampling": True, "advantage": "grpo"}
    t = trainer("train", build(TrainConfig, cfg))
    (ref,) = [s for s in t.scorers if isinstance(s, ReferenceLogprobs)]
    rows: list[int] = []
    forward = ref.model.forward
    ref.model.forward = lambda input_ids, **kw: rows.append(len(input_ids)) or forward(input_ids, **kw)
    r = asyncio.run(t.collector(t.sampler, t.state, RolloutStats()))
    per_batch = t.cfg.rollout.prompts_per_step * t.cfg.rollout.group_size
    assert sum(rows) == per_batch * (1 + r.info["resample_rounds"])  # every collected batch, once
    assert r.scores is not None and r.trainable
    batch = collate([e for g in r.groups for e in g.episodes], t.sampler.pad_id)
    rows.clear()
    fresh = score(r.groups, batch, t.scorers)
    assert sum(rows) == len(batch.mask_BT)
    m = batch.mask_BT > 0
    assert torch.allclose(r.scores.ref_logp_BT[m], fresh.ref_logp_BT[m], atol=1e-5)
    assert torch.allclose(r.scores.terms["kl"], fresh.terms["kl"], atol=1e-5)
    rows.clear()
    step = asyncio.run(t.step())
    assert sum(rows) == per_batch * (1 + step.metrics["resample_rounds"])  # not again on the kept groups


def _cli(*args, **kw):
    return subprocess.run([sys.executable, "-m", "tempering.cli", *args], capture_output=True, text=True, **kw)


def _metrics(run):
    return {r["step"]: r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if "reward" in r}


ASYNC = ["rollout.async_steps=2", "rollout.async_threads=1", "loss.rollout_correction=tis", "run.checkpoint_every=3"]


@pytest.mark.slow
@pytest.mark.parametrize("extra", [[], ASYNC], ids=["sync", "async"])
def test_resume_after_sigkill_reproduces_the_uninterrupted_run(pretrained_dir, tmp_path, extra):
    """Asynchronous rollouts drain at checkpoints: the resumed run generates what the uninterrupted one did
    (killed once step 3's checkpoint is written, its steps after the last checkpoint are compared up to 7:
    asynchronous, the drains at steps 3 and 6 both show)."""
    steps = 7
    over = [
        f"model.name={pretrained_dir}",
        "task.family=arithmetic",
        "task.args.min_value=0",
        "task.args.max_value=30",
        "task.train_size=400",
        "task.heldout_size=20",
        "rollout.group_size=4",
        "rollout.prompts_per_step=8",
        "rollout.max_new_tokens=4",
        "optim.lr=1e-3",
        "loss.ppo_epochs=2",
        "loss.mini_batches=2",
        f"run.steps={steps}",
        "run.eval_every=0",
        "run.eval_k=2",
        "run.checkpoint_every=1",
        "run.keep_checkpoints=3",
        "run.progress=false",
        "run.threads=1",
        *extra,
    ]
    full = tmp_path / "full"
    r = _cli("train", *over, f"run.out_dir={full}")
    assert r.returncode == 0, r.stderr
    cut = tmp_path / "cut"
    p = subprocess.Popen(
        [sys.executable, "-m", "tempering.cli", "train", *over, f"run.out_dir={cut}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 120
    while not (cut / "checkpoints" / "step_3").exists() and p.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    done = sorted(int(x.name.split("_")[1]) for x in (cut / "checkpoints").iterdir() if x.name.startswith("step_"))
    assert done and done[-1] < steps, "the run finished before it could be killed"
    for d in done:  # every visible checkpoint is complete
        assert (cut / "checkpoints" / f"step_{d}" / "trainer_state.pt").is_file()
    r = _cli("train", "--resume", str(cut))
    assert r.returncode == 0, r.stderr
    a, b = _metrics(full), _metrics(cut)
    assert sorted(b) == list(range(1, steps + 1))
    keys = DETERMINISTIC + (["async/staleness", "rollout/mean_weight"] if extra else [])
    for step in range(done[-1] + 1, steps + 1):
        for k in keys:
            assert a[step][k] == pytest.approx(b[step][k], rel=1e-6, abs=1e-9), (step, k)
    if extra:  # batches really were generated ahead: up to 2 updates old between the checkpoints
        assert [a[n]["async/staleness"] for n in range(1, steps + 1)] == [0, 1, 2, 0, 1, 2, 0]


@pytest.mark.slow
def test_cli_bad_input_gives_a_clear_error_and_nonzero_exit(tmp_path):
    r = _cli("train", "rollout.group_sise=3")
    assert r.returncode == 2 and "unknown key 'rollout.group_sise'" in r.stderr and "Traceback" not in r.stderr
    r = _cli("train", "--resume", str(tmp_path))
    assert r.returncode == 2 and "not a run folder" in r.stderr
    r = _cli("train", f"model.name={tmp_path / 'missing'}", "run.progress=false", f"run.out_dir={tmp_path / 'o'}")
    assert r.returncode == 2 and "neither a built-in model" in r.stderr
    r = _cli("nonsense")
    assert r.returncode == 2


@pytest.mark.slow
def test_eval_prints_a_table(pretrained_dir):
    r = _cli(
        "eval",
        pretrained_dir,
        "--task",
        "arithmetic",
        "--arg",
        "min_value=0",
        "--arg",
        "max_value=30",
        "--n",
        "20",
        "--k",
        "2",
        "--max-new-tokens",
        "4",
    )
    assert r.returncode == 0, r.stderr
    assert "pass@1" in r.stdout and "pass@2" in r.stdout


@pytest.mark.slow
def test_lora_trains_adapters_only_and_exports_merged_and_adapter(pretrained_dir, tmp_path):
    pytest.importorskip("peft")
    cfg = _cfg(pretrained_dir, tmp_path / "lora", steps=2, checkpoint_every=1)
    cfg["model"]["lora_rank"] = 4
    t = trainer("train", build(TrainConfig, cfg))
    trainable = {n for n, p in t.model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)

    t.run()
    final = tmp_path / "lora" / "final"
    assert (final / "config.json").is_file() and (final / "adapter" / "adapter_config.json").is_file()
    from tempering.models import load_policy

    merged, _ = load_policy(str(final))
    assert not any("lora" in n for n, _ in merged.named_parameters())
    resumed = trainer("train", build(TrainConfig, {**cfg, "run": {**cfg["run"], "steps": 3}}), resume=True)
    assert resumed.step_no == 2


def test_leap_logs_each_groups_pruning_decision_and_tournament(pretrained_dir, tmp_path):
    """Every sample row carries its group's DCP decision and the rank tournament, recomputed here by hand
    from the logged episodes; the step's metrics count the same decisions."""
    cfg = _cfg(str(pretrained_dir), tmp_path, steps=1, log_samples=32, tensorboard=False)
    cfg["rollout"].update(max_turns=3, prune="dcp")
    cfg["loss"] = {"advantage": "leap"}
    m = asyncio.run(trainer("train", build(TrainConfig, cfg)).step()).metrics
    rows = [json.loads(x) for x in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == 32
    groups = {}
    for r in rows:
        groups.setdefault(r["group"]["index"], []).append(r)
    assert len(groups) == 8
    for members in groups.values():
        g = members[0]["group"]
        fails = sum(len(r["turns"]) > 1 or r["stop_reason"] != "success" for r in members)
        assert g["turn1_failures"] == fails
        assert g["expanded"] == (2 <= fails <= 3)  # ceil(0.5 x 4) <= failures <= G - 1
        assert all(
            (r["stop_reason"] == "pruned") == (fails > 0 and not g["expanded"])
            for r in members
            if len(r["turns"]) == 1 and r["stop_reason"] != "success"
        )
        key = [
            (r["stop_reason"] == "success", -len(r["turns"]) if r["stop_reason"] == "success" else 0) for r in members
        ]
        sign = lambda a, b: (a > b) - (a < b)
        want = [sum(sign(key[i], key[j]) for j in range(4) if j != i) / 3 for i in range(4)]
        assert [r["rank_score"] for r in members] == pytest.approx(want)
        assert g["rank_scores"] == pytest.approx(want)
    decided = [ms[0]["group"] for ms in groups.values() if ms[0]["group"]["turn1_failures"] > 0]
    assert m["groups_expanded"] == sum(g["expanded"] for g in decided)
    assert m["groups_pruned"] == len(decided) - m["groups_expanded"]
    assert m["leap/groups_ranked"] == pytest.approx(
        sum(any(ms[0]["group"]["rank_scores"]) for ms in groups.values()) / 8
    )


def test_remax_samples_a_greedy_baseline_per_prompt_and_trains_on_the_sampled_answers_only(pretrained_dir, tmp_path):
    """`loss.advantage=remax`: one greedy episode per prompt, logged beside its group; each sampled answer's
    advantage is its reward less the greedy one's; the update's loss tokens are the sampled answers' only."""
    cfg = _cfg(str(pretrained_dir), tmp_path, steps=1, log_samples=32, tensorboard=False)
    cfg["loss"] = {"advantage": "remax"}
    m = asyncio.run(trainer("train", build(TrainConfig, cfg)).step()).metrics
    rows = [json.loads(x) for x in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == 32  # 8 prompts x 4 samples: the greedy episodes are not rows of the batch
    greedy = {r["group"]["index"]: r["group"]["greedy"] for r in rows}
    assert len(greedy) == 8 and all(greedy[r["group"]["index"]]["task"] == r["task"] for r in rows)
    for r in rows:
        assert r["turns"][0]["advantage"] == pytest.approx(r["reward"] - greedy[r["group"]["index"]]["reward"])
    assert any(r["turns"][0]["advantage"] != 0 for r in rows)
    assert m["greedy_env_calls"] == 8 and m["env_calls"] == 32
    assert m["greedy_reward"] == pytest.approx(sum(g["reward"] for g in greedy.values()) / 8)
    assert m["greedy_tokens"] > 0 and m["greedy_overhead_tokens"] > 1
    assert m["loss_tokens"] == pytest.approx(m["response_len"] * 32)
