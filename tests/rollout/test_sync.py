"""Weight-sync checks (`rollout/sync.py`): digests and probes tell weights apart, and an injected silent
sync failure of the asynchronous producer's sampler stops the run naming both versions. The vLLM server
and the Ray workers are checked in test_vllm.py and test_ray_workers.py."""

import asyncio
import copy

import pytest
import torch

from tempering.algos.advantages import dr_grpo_advantage
from tempering.models import char_tokenizer, tiny_model
from tempering.recipes.train import trainer
from tempering.rollout.sampler import HFSampler
from tempering.rollout.sync import SyncCheck, SyncError, probe_ids, probe_logprobs, weights_digest
from tempering.train.method import Context, Method, turn_credit
from tempering.train.scoring import Scores, per_turn

CFG = {
    "model": {"name": "tiny-xs"},
    "task": {"family": "arithmetic", "args": {"min_value": 0, "max_value": 9}, "train_size": 40, "heldout_size": 4},
    "rollout": {"group_size": 2, "prompts_per_step": 2, "max_new_tokens": 3, "async_steps": 1},
    "loss": {"rollout_correction": "tis"},
    "optim": {"lr": 1e-2},
    "run": {"steps": 4, "eval_every": 0, "eval_k": 1, "checkpoint_every": 0, "progress": False, "threads": 1},
}


def odd_tokens(groups, batch, scores: Scores) -> Scores:
    """A reward a fresh model earns at once (0.1 per odd token id): every update moves the weights."""
    odd = per_turn((batch.input_ids_BT % 2 == 1).float() * batch.mask_BT, batch, scores.turns.scores_NGK.shape)
    return scores.with_term("odd", 0.1 * odd)


def build_odd(ctx: Context) -> Method:
    credit = turn_credit(lambda t: dr_grpo_advantage(t.rewards_NG + t.shaping.sum(-1))[..., None] * t.valid_NGK)
    return Method(name="odd", credit=credit, scorers=[odd_tokens])


def test_digests_see_any_changed_tensor_and_the_receiving_dtype():
    a = tiny_model("tiny-xs", seed=0).state_dict()
    assert weights_digest(a) == weights_digest({k: v.clone() for k, v in a.items()})
    for name in list(a)[:: max(1, len(a) // 5)]:  # a small change in any one tensor changes the digest
        b = dict(a)
        b[name] = a[name] + 1e-3
        assert weights_digest(b) != weights_digest(a)
    half = {k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in a.items()}
    dtypes = {k: v.dtype for k, v in half.items()}
    assert weights_digest(a, dtypes) == weights_digest(half) != weights_digest(a)


def test_the_probe_tells_trained_weights_from_the_start_within_the_tolerance():
    tok = char_tokenizer()
    ids = probe_ids(tok)
    start, trained = tiny_model("tiny-xs", seed=0), tiny_model("tiny-xs", seed=1)
    check = SyncCheck("an engine", tolerance=0.05)
    check.check(0, probe_logprobs(start, ids), [probe_logprobs(copy.deepcopy(start), ids)])
    with pytest.raises(SyncError, match="it holds the weights of update 0 .* not the trainer's update 1"):
        check.check(1, probe_logprobs(trained, ids), [probe_logprobs(start, ids)])
    assert check.verified == 1


def test_a_copy_that_did_not_take_the_weights_is_caught():
    tok = char_tokenizer()
    s = HFSampler(tiny_model("tiny-xs", seed=0), tok)
    s.load_weights(tiny_model("tiny-xs", seed=1).state_dict(), version=1)
    assert s.sync_check.verified == 1
    s.model.load_state_dict = lambda weights: None  # a load that silently does nothing
    with pytest.raises(SyncError, match="holds the weights of update 1 .* not the trainer's update 2"):
        s.load_weights(tiny_model("tiny-xs", seed=2).state_dict(), version=2)


def test_async_rollouts_log_each_check_and_stop_on_a_silent_sync_failure(tmp_path):
    t = trainer({**CFG, "run": {**CFG["run"], "out_dir": str(tmp_path / "ok")}}, method=build_odd)
    metrics = [asyncio.run(t.step()).metrics for _ in range(3)]
    t.close()
    # the producer loaded (and checked) version 0 for batch 1, kept it for batch 2, loaded 1 for batch 3
    assert [m["sync/verified"] for m in metrics] == [1.0, 0.0, 1.0]

    t = trainer({**CFG, "run": {**CFG["run"], "out_dir": str(tmp_path / "bad")}}, method=build_odd)
    t.rollout_sampler.model.load_state_dict = lambda weights: None  # the producer's copy keeps version 0
    asyncio.run(t.step())  # sampled by version 0, which the copy holds from the start
    asyncio.run(t.step())
    with pytest.raises(SyncError) as e:  # batch 3 is sampled by version 1
        asyncio.run(t.step())
    t.close()
    msg = str(e.value)
    assert msg.startswith("weight sync to the asynchronous producer's sampler failed silently")
    assert "it holds the weights of update 0" in msg and "not the trainer's update 1" in msg
