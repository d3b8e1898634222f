"""Weight-sync checks (`rollout/sync.py`): digests and weight sums tell weights apart (the sums whatever
layout an engine gives its tensors), and an injected silent
sync failure of the asynchronous producer's sampler stops the run naming both versions. The vLLM server
and the Ray workers are checked in test_vllm.py and test_ray_workers.py."""

import asyncio

import pytest
import torch

from tempering.algos.advantages import dr_grpo_advantage
from tempering.errors import UserError
from tempering.methods.rl import TrainConfig
from tempering.models import char_tokenizer, tiny_model
from tempering.recipes.runner import trainer
from tempering.rollout.sampler import HFSampler
from tempering.rollout.sync import (
    SyncCheck,
    SyncError,
    combine_reports,
    engine_report,
    tensor_sums,
    weight_sums,
    weights_digest,
)
from tempering.train.method import Context, Method, MethodSpec, turn_credit
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


ODD = MethodSpec(name="odd", config=TrainConfig, build=build_odd)


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


def test_tensor_sums_by_hand():
    assert tensor_sums(torch.tensor([1.0, -2.0, 0.0, 3.0])) == [3, 2.0, 6.0, 14.0]
    # cast first: 1 + 2^-8 is no bfloat16 (rounds to 1), -3 is
    assert tensor_sums(torch.tensor([1.00390625, 0.0, -3.0]), torch.bfloat16) == [2, -2.0, 4.0, 10.0]


def engine_layout(weights: dict, dtype: torch.dtype, workers: int = 2) -> list[dict]:
    """Reports of `workers` tensor-parallel workers holding `weights` as a vLLM engine does: q/k/v and
    gate/up fused, the vocabulary padded with zero rows (the tied head listed under its own name too),
    linear layers split over the workers, norms replicated on each, all in `dtype`."""
    fused: dict[str, torch.Tensor] = {}
    for name, t in weights.items():
        for parts, into in ((("q_proj", "k_proj", "v_proj"), "qkv_proj"), (("gate_proj", "up_proj"), "gate_up_proj")):
            if name.split(".")[-2] in parts:
                key = name.replace(name.split(".")[-2], into)
                fused[key] = torch.cat([fused[key], t]) if key in fused else t
                break
        else:
            fused[name] = torch.cat([t, torch.zeros(64 - t.shape[0] % 64, *t.shape[1:])]) if "embed" in name else t
    fused["lm_head.weight"] = fused["model.embed_tokens.weight"]
    shards = []
    for w in range(workers):
        mine = {}
        for name, t in fused.items():
            t = t.to(dtype)
            mine[name] = t if "norm" in name else t.chunk(workers)[w]
        shards.append(engine_report(mine.items()))
    return shards


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_weight_sums_do_not_depend_on_the_engines_layout_and_see_one_small_update(dtype):
    model = tiny_model("tiny-xs", seed=0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    held = combine_reports(engine_layout(before, getattr(torch, dtype)), "an engine")
    assert held.matches(weight_sums(before, dtype))
    # one AdamW step at lr 1e-3, the update a log-prob probe within 0.05 nats did not see
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.tensor([[3, 4, 5, 6, 7, 8]])
    model(input_ids=x, labels=x).loss.backward()
    opt.step()
    after = model.state_dict()
    check = SyncCheck("an engine")
    check.check(0, weight_sums(before, dtype), [held])
    with pytest.raises(SyncError, match="it holds the weights of update 0 .* not the trainer's update 1"):
        check.check(1, weight_sums(after, dtype), [held])
    assert check.verified == 1
    check.check(1, weight_sums(after, dtype), [combine_reports(engine_layout(after, getattr(torch, dtype)), "x")])


def test_a_worker_without_the_extension_or_with_mixed_dtypes_is_named():
    with pytest.raises(UserError, match="--worker-extension-cls tempering.rollout.vllm_sampler.WeightSync"):
        combine_reports([], "the vLLM server at http://h:1")
    mixed = engine_report([("a", torch.ones(2)), ("b", torch.ones(2, dtype=torch.bfloat16))])
    with pytest.raises(UserError, match=r"several dtypes \(bfloat16, float32\).*--dtype"):
        combine_reports([mixed], "the vLLM server at http://h:1")


def test_a_copy_that_did_not_take_the_weights_is_caught():
    tok = char_tokenizer()
    s = HFSampler(tiny_model("tiny-xs", seed=0), tok)
    s.load_weights(tiny_model("tiny-xs", seed=1).state_dict(), version=1)
    assert s.sync_check.verified == 1
    s.model.load_state_dict = lambda weights: None  # a load that silently does nothing
    with pytest.raises(SyncError, match="holds the weights of update 1 .* not the trainer's update 2"):
        s.load_weights(tiny_model("tiny-xs", seed=2).state_dict(), version=2)


def test_async_rollouts_log_each_check_and_stop_on_a_silent_sync_failure(tmp_path):
    t = trainer(ODD, {**CFG, "run": {**CFG["run"], "out_dir": str(tmp_path / "ok")}})
    metrics = [asyncio.run(t.step()).metrics for _ in range(3)]
    t.close()
    # the producer loaded (and checked) version 0 for batch 1, kept it for batch 2, loaded 1 for batch 3
    assert [m["sync/verified"] for m in metrics] == [1.0, 0.0, 1.0]

    t = trainer(ODD, {**CFG, "run": {**CFG["run"], "out_dir": str(tmp_path / "bad")}})
    t.rollout_sampler.model.load_state_dict = lambda weights: None  # the producer's copy keeps version 0
    asyncio.run(t.step())  # sampled by version 0, which the copy holds from the start
    asyncio.run(t.step())
    with pytest.raises(SyncError) as e:  # batch 3 is sampled by version 1
        asyncio.run(t.step())
    t.close()
    msg = str(e.value)
    assert msg.startswith("weight sync to the asynchronous producer's sampler failed silently")
    assert "it holds the weights of update 0" in msg and "not the trainer's update 1" in msg
