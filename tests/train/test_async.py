"""Asynchronous rollouts: the staleness schedule, a run that trains on stale batches with the rollout
correction, reproducibility, the refusals, and errors raised in the producer thread."""

import asyncio

import pytest
import torch

from tempering.algos.advantages import dr_grpo_advantage
from tempering.errors import UserError
from tempering.methods.rl import TrainConfig
from tempering.recipes.runner import trainer
from tempering.train.collect import Rollouts
from tempering.train.method import Context, Method, MethodSpec, turn_credit
from tempering.train.pipeline import RolloutPipeline
from tempering.train.scoring import Scores, per_turn

CFG = {
    "model": {"name": "tiny-xs"},
    "task": {"family": "arithmetic", "args": {"min_value": 0, "max_value": 9}, "train_size": 40, "heldout_size": 4},
    "rollout": {"group_size": 4, "prompts_per_step": 2, "max_new_tokens": 3, "async_steps": 1},
    "loss": {"rollout_correction": "tis"},
    "optim": {"lr": 1e-2},
    "run": {
        "steps": 4,
        "eval_every": 0,
        "eval_k": 1,
        "checkpoint_every": 0,
        "progress": False,
        "tensorboard": False,
        "threads": 1,
    },
}


def _cfg(tmp_path, name="run", **rollout):
    return {**CFG, "rollout": {**CFG["rollout"], **rollout}, "run": {**CFG["run"], "out_dir": str(tmp_path / name)}}


def odd_tokens(groups, batch, scores: Scores) -> Scores:
    """A reward a fresh model earns at once: 0.1 per odd token id, so every group has a signal."""
    odd = per_turn((batch.input_ids_BT % 2 == 1).float() * batch.mask_BT, batch, scores.turns.scores_NGK.shape)
    return scores.with_term("odd", 0.1 * odd)


def build_odd(ctx: Context) -> Method:
    credit = turn_credit(lambda t: dr_grpo_advantage(t.rewards_NG + t.shaping.sum(-1))[..., None] * t.valid_NGK)
    return Method(name="odd", credit=credit, scorers=[odd_tokens])


ODD = MethodSpec(name="odd", config=TrainConfig, build=build_odd)


def _steps(t, n):
    out = [asyncio.run(t.step()).metrics for _ in range(n)]
    t.close()
    return out


def test_the_schedule_runs_k_updates_behind_and_restarts_at_drain_points():
    drains = lambda n: n in (3, 7)
    one = RolloutPipeline(None, None, 1, drains)
    assert [one.version_for(n) for n in range(1, 10)] == [0, 0, 1, 3, 3, 4, 5, 7, 7]
    two = RolloutPipeline(None, None, 2, drains)
    assert [two.version_for(n) for n in range(1, 10)] == [0, 0, 0, 3, 3, 3, 4, 7, 7]
    resumed = RolloutPipeline(None, None, 2, drains, start=7)
    assert [resumed.version_for(n) for n in range(8, 12)] == [7, 7, 7, 8]


def test_an_async_run_trains_on_stale_batches_with_importance_weights(tmp_path):
    t = trainer(ODD, _cfg(tmp_path))
    assert t.rollout_sampler is not t.sampler and t.rollout_sampler.model is not t.model  # weights of its own
    start = {k: v.clone() for k, v in t.model.state_dict().items()}
    m = _steps(t, 4)
    held = t.rollout_sampler.model.state_dict()
    now = t.model.state_dict()
    assert t.pipeline.held == 2 and any(not torch.equal(held[k], start[k]) for k in start)  # it got update 2 ...
    assert any(not torch.equal(held[k], now[k]) for k in now)  # ... and not update 4
    assert [r["async/staleness"] for r in m] == [0, 1, 1, 1]  # batch n sampled after update n - 2
    assert m[0]["rollout/mismatch_kl"] < 1e-8 and m[0]["rollout/mean_weight"] == pytest.approx(1.0, abs=1e-4)
    for r in m[1:]:  # the sampler's weights are one update old: a measured gap, corrected per token
        assert r["rollout/mismatch_kl"] > 1e-7 and r["rollout/mean_weight"] != pytest.approx(1.0, abs=1e-6)
        assert 0 < r["rollout/mean_weight"] <= 2.0 and r["grad_norm"] > 0


def test_async_runs_are_reproducible_and_start_where_the_synchronous_run_does(tmp_path):
    a = _steps(trainer(ODD, _cfg(tmp_path, "a")), 3)
    b = _steps(trainer(ODD, _cfg(tmp_path, "b")), 3)
    sync = _steps(trainer(ODD, _cfg(tmp_path, "s", async_steps=0)), 3)
    for k in ("reward", "policy_loss", "grad_norm", "rollout/mean_weight"):
        assert [r[k] for r in a] == [r[k] for r in b], k
    # the first batch is the same (same weights, the sampler's stream continued); later ones are stale
    assert a[0]["shaping/odd"] == sync[0]["shaping/odd"] and a[0]["policy_loss"] == pytest.approx(
        sync[0]["policy_loss"]
    )
    assert [r["shaping/odd"] for r in a[1:]] != [r["shaping/odd"] for r in sync[1:]]


def test_checkpoints_are_taken_where_nothing_is_in_flight(tmp_path):
    cfg = _cfg(tmp_path)
    cfg["run"] = {**cfg["run"], "checkpoint_every": 2}
    t = trainer(ODD, cfg)
    asyncio.run(t.step())
    with pytest.raises(UserError, match="run.checkpoint_every or run.eval_every"):
        t.save()  # batch 2 is already being generated with the starting weights
    asyncio.run(t.step())
    assert t.pipeline.drained_at(2) and t.save() is not None
    state = torch.load(tmp_path / "run" / "checkpoints" / "step_2" / "trainer_state.pt", weights_only=False)
    assert "rollout_sampler" in state["rng"]["generators"]
    t.close()


def test_an_error_in_the_producer_thread_stops_the_run_with_its_message(tmp_path):
    from tempering.envs.arithmetic import ArithmeticFamily

    calls = []

    class Flaky(ArithmeticFamily):
        def make_env(self, task):
            calls.append(task)
            if len(calls) > 8:  # the first batch is 2 prompts x 4 episodes
                raise UserError("the environment server went away")
            return super().make_env(task)

    t = trainer(ODD, _cfg(tmp_path), family=Flaky(min_value=0, max_value=9))
    asyncio.run(t.step())
    with pytest.raises(UserError, match="the environment server went away"):
        asyncio.run(t.step())
    t.close()


def test_a_finished_batch_is_handed_over_when_the_producer_fails_on_the_next():
    calls = []

    async def collect(sampler, state, stats):
        calls.append(len(calls) + 1)
        if len(calls) == 2:
            raise UserError("batch 2 failed")
        return Rollouts([], True, {})

    sampler = type("Sampler", (), {"load_weights": lambda self, w, **kw: None})()
    p = RolloutPipeline(collect, sampler, 1, lambda n: False)
    p.publish(0, lambda: {}, {})  # batches 1 and 2 are both sampled by version 0
    with p._cond:
        while p._error is None:  # the producer failed on batch 2 before the trainer asked for batch 1
            p._cond.wait()
    assert p.get(1).version == 0
    with pytest.raises(UserError, match="batch 2 failed"):
        p.get(2)
    p.close()
