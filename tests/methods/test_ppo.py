"""PPO with a critic on the one loop: value pre-training freezes the policy, the critic trains with its
own optimizer, is checkpointed and resumes exactly, and is exported next to the policy."""

import asyncio
from dataclasses import replace

import pytest
import torch

from tempering.config import build
from tempering.methods.ppo import PPOConfig
from tempering.recipes.runner import trainer
from tempering.rollout.engine import RolloutStats
from tempering.train.checkpoint import load_trainer_state


def _cfg(model, out, **critic):
    return {
        "model": {"name": model},
        "task": {
            "family": "arithmetic",
            "args": {"min_value": 0, "max_value": 30},
            "train_size": 40,
            "heldout_size": 4,
        },
        "rollout": {"group_size": 4, "prompts_per_step": 2, "max_new_tokens": 4, "max_turns": 2},
        "loss": {"micro_batch_size": 3},
        "critic": critic,
        "run": {
            "steps": 2,
            "out_dir": str(out),
            "eval_every": 0,
            "eval_k": 1,
            "checkpoint_every": 1,
            "progress": False,
            "tensorboard": False,
        },
    }


def _state(m: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in m.state_dict().items()}


def _changed(a, b) -> bool:
    return any(not torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("kind", ["model", "head"])
def test_value_pretraining_freezes_the_policy_then_both_train(pretrained_dir, tmp_path, kind):
    t = trainer("ppo", _cfg(pretrained_dir, tmp_path, kind=kind, pretrain_steps=1))
    critic = t.method.trainables["critic"].module
    if kind == "head":  # only the head is the critic's own: the policy is neither trained nor saved with it
        assert set(critic.state_dict()) == {"head.weight", "head.bias"}
    policy0, critic0 = _state(t.model), _state(critic)
    m1 = asyncio.run(t.step()).metrics
    assert m1["policy_frozen"] == 1.0 and "policy_loss" not in m1 and m1["critic/value_loss"] > 0
    assert not _changed(policy0, _state(t.model)) and _changed(critic0, _state(critic))
    m2 = asyncio.run(t.step()).metrics
    assert m2["policy_frozen"] == 0.0 and "policy_loss" in m2
    assert _changed(policy0, _state(t.model))


def test_the_critic_resumes_exactly_and_is_exported(pretrained_dir, tmp_path):
    cfg = _cfg(pretrained_dir, tmp_path, lr=1e-3)
    a = trainer("ppo", cfg)
    asyncio.run(a.step())
    a.save()
    asyncio.run(a.step())
    want_policy, want_critic = _state(a.model), _state(a.method.trainables["critic"].module)
    saved = load_trainer_state(tmp_path / "checkpoints" / "step_1")
    assert set(saved["owned"]) == {"critic"} and saved["owned"]["critic"]["optimizer"]["state"]

    b = trainer("ppo", cfg, resume=True)
    assert b.step_no == 1
    asyncio.run(b.step())
    for k, v in _state(b.model).items():
        assert torch.equal(v, want_policy[k]), k
    for k, v in _state(b.method.trainables["critic"].module).items():
        assert torch.equal(v, want_critic[k]), k

    b.export(tmp_path / "final")
    from tempering.models import load_module

    c = trainer(
        "ppo",
        {
            **cfg,
            "critic": {"init": str(tmp_path / "final" / "critic.safetensors")},
            "run": {**cfg["run"], "out_dir": str(tmp_path / "c")},
        },
    )
    for k, v in _state(c.method.trainables["critic"].module).items():
        assert torch.equal(v, want_critic[k]), k
    with pytest.raises(Exception, match="does not fit"):
        load_module(torch.nn.Linear(3, 1), tmp_path / "final" / "critic.safetensors")


def test_resuming_with_another_critic_setup_is_refused(pretrained_dir, tmp_path):
    from tempering.errors import UserError

    a = trainer("ppo", _cfg(pretrained_dir, tmp_path))
    asyncio.run(a.step())
    a.save()
    rl = {k: v for k, v in _cfg(pretrained_dir, tmp_path).items() if k != "critic"}
    rl["loss"] = {"micro_batch_size": 3}
    with pytest.raises(UserError, match="holds the modules"):
        trainer("train", rl, resume=True)


def test_config_refuses_values_without_effect():
    with pytest.raises(Exception, match="critic.model"):
        build(PPOConfig, {"critic": {"kind": "head", "model": "tiny-s"}})
    with pytest.raises(Exception, match="pretrain_steps"):
        build(PPOConfig, {"critic": {"pretrain_steps": 5}, "run": {"steps": 2}})


def test_the_critic_trains_before_the_policy_on_the_features_its_values_came_from(pretrained_dir, tmp_path):
    t = trainer("ppo", _cfg(pretrained_dir, tmp_path, kind="head"))
    own = t.owned["critic"]
    policy0, seen = _state(t.model), []
    update = own.trainable.update

    def spy(*args):
        seen.append(not _changed(policy0, _state(t.model)))  # the policy still as it sampled
        return update(*args)

    t.owned["critic"] = replace(own, trainable=replace(own.trainable, update=spy))
    asyncio.run(t.step())
    assert seen == [True] and _changed(policy0, _state(t.model))


def test_value_pretraining_counts_run_steps_with_skipped_updates(pretrained_dir, tmp_path):
    t = trainer("ppo", _cfg(pretrained_dir, tmp_path, pretrain_steps=1))
    groups = asyncio.run(t.collector(t.sampler, t.state, RolloutStats())).groups
    m = t.record(t.train_on(groups, trainable=False)[0])  # step 1: nothing to train on, the update is skipped
    t.step_no += 1
    assert m["update_skipped"] == 1.0
    assert asyncio.run(t.step()).metrics["policy_frozen"] == 0.0  # step 2 is past the pre-training


def test_the_value_loss_has_its_own_aggregation(monkeypatch):
    from tempering.methods import ppo
    from tempering.train.update import UpdateSettings

    seen = []
    monkeypatch.setattr(ppo, "optimizer_steps", lambda module, opt, sched, batch, s, *a: seen.append(s.loss_agg) or {})
    critic = build(PPOConfig, {}).critic
    ppo.critic_update(critic)(None, None, None, UpdateSettings(loss_agg="seq-mean-token-sum"), None)
    assert critic.loss_agg == "token-mean" and seen == ["token-mean"]  # verl's critic default, not the policy's
