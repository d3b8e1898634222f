"""The policy-loss registry: a loss is one function and one registration; a loss's settings and whether it is
linear in its advantages are checked when the config is read."""

from __future__ import annotations

import json
import math

import pytest
import torch

from tempering.algos.losses import POLICY_LOSSES, register_policy_loss
from tempering.config import build
from tempering.errors import ConfigError
from tempering.methods.rl import TrainConfig, adaptive_entropy
from tempering.recipes.runner import run

TASK = {"family": "arithmetic", "args": {"min_value": 0, "max_value": 30}, "train_size": 100, "heldout_size": 8}


@pytest.fixture
def reinforce():
    """A loss defined here: plain REINFORCE, -A log pi, no ratio at all."""

    @register_policy_loss("test_reinforce", linear=True)
    def loss(logp_BT, old_logp_BT, adv_BT, mask_BT, s, rollout_logp_BT=None):
        return -adv_BT * logp_BT, {"mean_logp": (logp_BT.detach() * mask_BT).sum() / mask_BT.sum().clamp(min=1)}

    yield loss
    del POLICY_LOSSES["test_reinforce"]


def test_a_loss_defined_in_a_test_trains(reinforce, pretrained_dir, tmp_path):
    cfg = {
        "model": {"name": pretrained_dir},
        "task": TASK,
        "rollout": {"group_size": 4, "prompts_per_step": 4, "max_new_tokens": 4},
        "loss": {"policy_loss": "test_reinforce"},
        "optim": {"lr": 1e-3},
        "run": {
            "steps": 2,
            "out_dir": str(tmp_path / "run"),
            "eval_every": 0,
            "eval_on_start": False,
            "progress": False,
        },
    }
    run("train", cfg)
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "policy_loss" in r]
    assert len(steps) == 2 and all("mean_logp" in r and math.isfinite(r["policy_loss"]) for r in steps)
    assert any(r["grad_norm"] > 0 for r in steps)  # its gradient reached the weights
    # it reads no clip key, so giving one is refused naming both
    with pytest.raises(ConfigError, match="loss.clip_low=0.1 has no effect unless loss.policy_loss=ppo_clip"):
        build(TrainConfig, {"loss": {"policy_loss": "test_reinforce", "clip_low": 0.1}})


@pytest.mark.parametrize(
    "loss,message",
    [
        ({"sapo_tau_pos": 2.0}, "loss.sapo_tau_pos=2.0 has no effect unless loss.policy_loss=sapo"),
        ({"entropy_target": 0.5}, "loss.entropy_target=0.5 has no effect unless loss.entropy_adaptive=true"),
        (
            {"policy_loss": "cispo", "dual_clip": 5.0},
            "loss.dual_clip=5.0 has no effect unless loss.policy_loss=ppo_clip",
        ),
        ({"policy_loss": "sapo", "clip_high": 0.3}, "loss.clip_high=0.3 has no effect unless loss.policy_loss="),
        ({"policy_loss": "gspo_seq"}, "loss.policy_loss='gspo_seq' is unknown; choose one of ppo_clip, gspo"),
        (
            {"advantage": "reinforce_pp", "dynamic_sampling": True},
            "loss.dynamic_sampling drops groups whose advantages are all zero, and loss.advantage=reinforce_pp",
        ),
        ({"rollout_correction": "token_k3"}, "rollout correction token_k3 rejects above a divergence bound"),
        ({"rollout_correction": "decoupled_geo_rs", "rollout_correction_cap": 2.0}, "is verl's preset with its own"),
    ],
)
def test_settings_a_loss_does_not_read_are_refused_naming_both_keys(loss, message):
    with pytest.raises(ConfigError) as e:
        build(TrainConfig, {"loss": loss})
    assert message in str(e.value) and "\n" not in str(e.value)


def test_every_loss_parameter_has_a_key():
    keys = set(TrainConfig.model_fields["loss"].annotation.model_fields)
    for name, spec in POLICY_LOSSES.items():
        assert set(spec.params) <= keys, name


def test_adaptive_entropy_by_hand():
    """TRL's controller: up by delta at or below the target, down above it, within [min, max]."""
    step = adaptive_entropy(target=0.5, delta=0.1, low=0.0, high=0.15)
    s = step({"entropy_coef": 0.1, "entropy_last": math.inf}, {"entropy": 0.4})
    assert s == {"entropy_coef": 0.15, "entropy_last": 0.4}  # capped at max
    s = step(s, {"entropy": 0.9})
    assert s["entropy_coef"] == pytest.approx(0.05) and s["entropy_last"] == 0.9
    assert step(s, {"entropy": 0.9})["entropy_coef"] == 0.0  # floored at min


def test_the_entropy_bonus_pushes_entropy_up():
    """The bonus's gradient raises the entropy: with zero advantages the only signal is the bonus."""
    from tempering.algos.losses import LossSettings, PolicyObjective, policy_objective

    logits = torch.zeros(1, 3, 5, requires_grad=True)
    with torch.no_grad():
        logits[0, :, 0] = 3.0
    logp_all = logits.log_softmax(-1)
    ent = -(logp_all.exp() * logp_all).sum(-1)
    logp = logp_all[..., 0]
    zero = torch.zeros(1, 3)
    o = PolicyObjective("ppo_clip", LossSettings(), "token-mean", entropy_coef=0.1, entropy_bonus=True)
    loss, stats = policy_objective(logp, logp.detach(), zero, torch.ones(1, 3), ent, o)
    loss.backward()
    assert float(stats["entropy_bonus"]) == pytest.approx(0.1 * float(ent.mean()), rel=1e-5)
    assert float(logits.grad[0, 0, 0]) > 0  # descending the loss lowers the dominant logit: entropy rises
