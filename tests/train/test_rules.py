"""The cross-key rules of a training config (`train/rules.py`): each refused when the config is read, naming
both keys, and the same setting without the other key accepted."""

from dataclasses import replace

import pytest

from tempering.algos.advantages import dr_grpo_advantage
from tempering.config import build
from tempering.errors import ConfigError, UserError
from tempering.methods.opd import DistillConfig
from tempering.methods.rft import RFTConfig
from tempering.methods.rl import TrainConfig
from tempering.train.config import LoopConfig
from tempering.train.method import Context, Method, MethodSpec, turn_credit

TEACHER = {"teacher": {"path": "unused"}}


def _refused(schema, data, message):
    with pytest.raises(ConfigError, match=message) as e:
        build(schema, data)
    assert "\n" not in str(e.value)


def test_rollout_keys_act_only_with_the_key_they_depend_on():
    _refused(
        LoopConfig,
        {"rollout": {"async_threads": 1}},
        "rollout.async_threads=1 has no effect unless rollout.async_steps > 0 with rollout.backend=hf",
    )
    _refused(LoopConfig, {"rollout": {"clamp_scores": True}}, "rollout.clamp_scores=True has no effect unless")
    build(LoopConfig, {"rollout": {"async_threads": 1, "async_steps": 1}, "loss": {"rollout_correction": "tis"}})


def test_correction_keys_act_only_with_a_correction_that_uses_them():
    _refused(
        LoopConfig, {"loss": {"rollout_correction_floor": 0.5}}, "rollout_correction_floor=0.5 has no effect unless"
    )
    _refused(
        LoopConfig,
        {"loss": {"rollout_correction": "seq_sum_k1", "rollout_correction_batch_norm": True}},
        "loss.rollout_correction_batch_norm=true normalises weights, and loss.rollout_correction=seq_sum_k1 has none",
    )
    build(LoopConfig, {"loss": {"rollout_correction": "tis", "rollout_correction_batch_norm": True}})


@pytest.mark.parametrize("rollout", [{"top_p": 0.9}, {"top_k": 5}])
def test_a_correction_refuses_filtered_sampling(rollout):
    (key, value), loss = next(iter(rollout.items())), {"rollout_correction": "icepop"}
    _refused(LoopConfig, {"loss": loss, "rollout": rollout}, f"icepop with rollout.{key}={value}: .* biases")
    build(LoopConfig, {"rollout": rollout})


@pytest.mark.parametrize(
    "schema,data,message",
    [
        (
            TrainConfig,
            {"loss": {"policy_loss": "dro", "rollout_correction": "tis"}},
            "loss.rollout_correction=tis reweights the advantages, and loss.policy_loss=dro is not linear in them; "
            "use a linear loss \\(ppo_clip",
        ),
        (
            TrainConfig,
            {"loss": {"policy_loss": "kl_cov", "rollout_correction": "tis"}, "rollout": {"async_steps": 1}},
            "rollout.async_steps=1 trains on older weights' samples, their advantages reweighted, and "
            "loss.policy_loss=kl_cov",
        ),
        (
            DistillConfig,
            {**TEACHER, "distill": {"loss": "jsd_topk"}, "loss": {"rollout_correction": "tis"}},
            "distill.loss=jsd_topk \\(a direct loss on whole distributions\\) is not linear in them; use "
            "distill.loss=reverse_kl, or set loss.rollout_correction=none",
        ),
        (RFTConfig, {"loss": {"rollout_correction": "tis"}}, "and the rft loss \\(an NLL\\) is not linear in them"),
    ],
)
def test_weighting_the_advantages_needs_a_loss_linear_in_them(schema, data, message):
    _refused(schema, data, message)
    build(TrainConfig, {"loss": {"rollout_correction": "tis"}, "rollout": {"async_steps": 1}})


def test_a_built_loss_that_is_not_linear_is_refused_before_training(tmp_path):
    """Where the config does not decide the loss, `assemble` runs the same rule on the built one."""
    from tempering.recipes.runner import trainer

    def nonlinear(ctx: Context) -> Method:
        m = Method(name="x", credit=turn_credit(lambda t: dr_grpo_advantage(t.rewards_NG)[..., None] * t.valid_NGK))
        return replace(m, loss=replace(m.loss, linear=False))

    cfg = {
        "model": {"name": "tiny-xs"},
        "task": {"train_size": 8, "heldout_size": 2},
        "loss": {"rollout_correction": "tis"},
        "run": {"out_dir": str(tmp_path / "run"), "progress": False, "tensorboard": False},
    }
    with pytest.raises(UserError, match="loss.rollout_correction=tis reweights the advantages, and the x loss is not"):
        trainer(MethodSpec(name="x", config=TrainConfig, build=nonlinear), cfg)


@pytest.mark.parametrize("mode", ["none", "seq_mean_k1"])
def test_asynchronous_rollouts_need_a_correction_that_weights(mode):
    message = f"loss.rollout_correction={mode} does not weight them .*: tis, sequence_truncate"
    _refused(LoopConfig, {"rollout": {"async_steps": 1}, "loss": {"rollout_correction": mode}}, message)


def test_turn_context_acts_only_with_later_turns():
    _refused(
        LoopConfig,
        {"rollout": {"turn_context": "template"}},
        "rollout.turn_context='template' has no effect unless rollout.max_turns > 1",
    )
    build(LoopConfig, {"rollout": {"turn_context": "template"}, "run": {"eval_max_turns": 2}})


def test_bf16_autocast_with_half_precision_weights_is_refused():
    _refused(
        LoopConfig,
        {"loss": {"autocast": "bf16"}, "model": {"dtype": "bfloat16"}},
        "loss.autocast=bf16 has no effect with model.dtype=bfloat16",
    )
    build(LoopConfig, {"loss": {"autocast": "bf16"}})
