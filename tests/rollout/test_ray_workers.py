"""Ray workers on a local instance (2 CPUs): a 2-worker rollout, weight sync, teacher scoring, and the
recipe driving them. One Ray start for the module (start-up is the slow part)."""

import asyncio
import copy

import pytest
import torch

from tempering.errors import UserError
from tempering.models import char_tokenizer, tiny_model
from tempering.recipes.runner import trainer
from tempering.rollout.sampler import HFSampler, SamplingParams

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow

# workers reserve half a CPU each, so that the pool, the teachers and the recipe's workers fit in 2 CPUs
GREEDY = SamplingParams(max_new_tokens=5, temperature=0.0)
PROMPTS = [
    char_tokenizer().encode(f"{a}+{b}=", add_special_tokens=False)
    for a, b in [(1, 2), (13, 4), (7, 7), (20, 9), (3, 30)]
]


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def warm(pretrained_dir):
    """A policy that answers sums (so greedy answers differ from prompt to prompt)."""
    from tempering.models import load_policy

    return load_policy(pretrained_dir)[0]


@pytest.fixture(scope="module")
def pool(cluster, warm):
    from tempering.rollout.ray_workers import RaySampler

    s = RaySampler(copy.deepcopy(warm), char_tokenizer(), num_workers=2, seed=0, num_cpus_per_worker=0.5)
    yield s
    s.shutdown()


def test_two_workers_sample_what_one_process_samples(pool, warm):
    want = HFSampler(copy.deepcopy(warm), char_tokenizer()).sample(PROMPTS, GREEDY)
    assert len({tuple(s.ids) for s in want}) > 1  # distinct answers: the order is checked
    before = list(pool.calls)
    got = pool.sample(PROMPTS, GREEDY)
    assert [s.ids for s in got] == [s.ids for s in want]  # same order as the prompts
    assert [s.truncated for s in got] == [s.truncated for s in want]
    assert [c - b for c, b in zip(pool.calls, before)] == [1, 1]  # both workers served the batch


def test_sampling_is_fixed_by_the_driver_generator(pool):
    params = SamplingParams(max_new_tokens=6, temperature=1.0)
    state = pool.generator.get_state()
    a = pool.sample(PROMPTS * 2, params)
    pool.generator.set_state(state)
    b = pool.sample(PROMPTS * 2, params)
    assert [s.ids for s in a] == [s.ids for s in b]
    assert [s.logprobs for s in a] == [s.logprobs for s in b]
    assert all(lp <= 0 for s in a for lp in s.logprobs)


def test_weight_sync_reaches_every_worker(pool, warm):
    new = tiny_model("tiny-xs", seed=7)
    pool.sync_weights(new)
    want = HFSampler(copy.deepcopy(new), char_tokenizer()).sample(PROMPTS, GREEDY)
    old = HFSampler(copy.deepcopy(warm), char_tokenizer()).sample(PROMPTS, GREEDY)
    got = pool.sample(PROMPTS, GREEDY)
    assert [s.ids for s in got] == [s.ids for s in want] != [s.ids for s in old]
    pool.sync_weights(warm)  # back, for the other tests


def test_a_worker_that_missed_a_sync_stops_the_run_naming_both_versions(pool, warm, monkeypatch):
    pool.sync_weights(warm, version=3)
    verified = pool.sync_check.verified
    real = type(pool)._push

    def skip_worker_2(self, ref):  # the second worker never gets the new weights, and nothing says so
        workers, self.workers = self.workers, self.workers[:1]
        try:
            real(self, ref)
        finally:
            self.workers = workers

    monkeypatch.setattr(type(pool), "_push", skip_worker_2)
    with pytest.raises(UserError) as e:
        pool.sync_weights(tiny_model("tiny-xs", seed=7), version=4)
    msg = str(e.value)
    assert "weight sync to the 2 Ray rollout worker(s) (replica 2 of 2) failed silently" in msg
    assert "it holds the weights of update 3" in msg and "not the trainer's update 4" in msg
    assert pool.sync_check.verified == verified
    monkeypatch.undo()
    pool.sync_weights(warm)  # back, for the other tests


def test_a_worker_killed_mid_batch_stops_the_run_naming_it(cluster, warm):
    import os
    import signal

    from tempering.rollout.ray_workers import RaySampler

    s = RaySampler(copy.deepcopy(warm), char_tokenizer(), num_workers=2, seed=0, num_cpus_per_worker=0.5)
    try:
        os.kill(ray.get(s.workers[1].pid.remote()), signal.SIGKILL)
        with pytest.raises(UserError, match=r"Ray rollout worker 2 of 2 died mid-batch .*resume with --resume"):
            s.sample(PROMPTS, GREEDY)
    finally:
        s.shutdown()


def test_teacher_workers_score_like_the_local_teacher(cluster):
    from tempering.teachers.hf import HFTeacher
    from tempering.teachers.ray import RayTeacher

    model, tok = tiny_model("tiny-xs", seed=2), char_tokenizer()
    responses = [[5, 6, 7], [8], [9, 10], [11, 12, 13, 14], [6]]
    want = HFTeacher(copy.deepcopy(model), tok).score(PROMPTS, responses, top_k=3)
    teacher = RayTeacher(model, tok, num_workers=2, num_cpus_per_worker=0.5)
    try:
        got = teacher.score(PROMPTS, responses, top_k=3)
    finally:
        teacher.shutdown()
    torch.testing.assert_close(got.token_logp_BC, want.token_logp_BC)
    torch.testing.assert_close(got.mask_BC, want.mask_BC)
    on = want.mask_BC.bool()  # padding positions are not part of the answer
    torch.testing.assert_close(got.top_logp_BCK[on], want.top_logp_BCK[on])
    assert torch.equal(got.top_ids_BCK[on], want.top_ids_BCK[on])


def test_the_recipe_drives_ray_rollout_workers(cluster, pretrained_dir, tmp_path):
    from tempering.config import build
    from tempering.methods.rl import TrainConfig

    cfg = build(
        TrainConfig,
        {
            "model": {"name": str(pretrained_dir)},
            "task": {
                "family": "arithmetic",
                "args": {"min_value": 0, "max_value": 30},
                "train_size": 40,
                "heldout_size": 4,
            },
            "rollout": {
                "group_size": 4,
                "prompts_per_step": 4,
                "max_new_tokens": 4,
                "backend": "ray",
                "ray": {"num_workers": 2, "num_cpus_per_worker": 0.5},
            },
            "optim": {"lr": 1e-3},
            "run": {"steps": 1, "out_dir": str(tmp_path), "progress": False, "tensorboard": False},
        },
    )
    t = trainer("train", cfg)
    r = asyncio.run(t.step())
    assert r.metrics["env_calls"] == 16 and t.sampler.calls == [1, 1] and t.sampler.syncs == 1
    assert r.metrics["sync/verified"] == 1.0  # the sync after the update was checked
    # the workers now hold the updated policy: greedy answers match the trainer's own model
    want = HFSampler(t.model, t.tokenizer).sample(PROMPTS, GREEDY)
    assert [s.ids for s in t.sampler.sample(PROMPTS, GREEDY)] == [s.ids for s in want]
    t.sampler.shutdown()


def test_async_rollouts_on_ray_workers(cluster, pretrained_dir, tmp_path):
    """The pipeline's thread drives the workers and loads each batch's weights; the trainer evaluates on
    the current weights where the pipeline drains."""

    cfg = {
        "model": {"name": str(pretrained_dir)},
        "task": {
            "family": "arithmetic",
            "args": {"min_value": 0, "max_value": 30},
            "train_size": 40,
            "heldout_size": 4,
        },
        "rollout": {
            "group_size": 4,
            "prompts_per_step": 4,
            "max_new_tokens": 4,
            "backend": "ray",
            "ray": {"num_workers": 2, "num_cpus_per_worker": 0.5},
            "async_steps": 1,
        },
        "loss": {"rollout_correction": "tis"},
        "optim": {"lr": 1e-3},
        "run": {"steps": 3, "eval_every": 0, "eval_k": 1, "out_dir": str(tmp_path), "progress": False},
    }
    t = trainer("train", cfg)
    m = [asyncio.run(t.step()).metrics for _ in range(3)]
    assert [r["async/staleness"] for r in m] == [0, 1, 1] and all(r["env_calls"] == 16 for r in m)
    assert t.sampler.syncs == 2 and t.pipeline.held == 1  # update 0 (batches 1, 2), update 1 (batch 3)
    asyncio.run(t.evaluate(4))  # the last step drains: the workers get the current weights
    want = HFSampler(t.model, t.tokenizer).sample(PROMPTS, GREEDY)
    assert [s.ids for s in t.sampler.sample(PROMPTS, GREEDY)] == [s.ids for s in want]
    t.close()
    t.sampler.shutdown()


def test_bad_input(cluster, monkeypatch):
    from tempering.rollout import ray_workers

    with pytest.raises(UserError, match="num_workers must be a positive integer"):
        ray_workers.RaySampler(tiny_model("tiny-xs"), char_tokenizer(), num_workers=0)
    monkeypatch.setitem(__import__("sys").modules, "ray", None)  # as if the extra were not installed
    with pytest.raises(UserError, match=r"pip install 'tempering\[ray\]'"):
        ray_workers.RaySampler(tiny_model("tiny-xs"), char_tokenizer())
