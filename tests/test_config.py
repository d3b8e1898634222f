import pytest

from tempering.config import load_config
from tempering.errors import ConfigError
from tempering.methods.rl import TrainConfig


def test_overrides_and_yaml(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("rollout:\n  group_size: 4\nloss:\n  advantage: rloo\n")
    cfg = load_config(TrainConfig, p, ["run.steps=7", "optim.lr=1e-4", 'rollout.stop=["\\n"]'])
    assert cfg.rollout.group_size == 4 and cfg.loss.advantage == "rloo" and cfg.run.steps == 7 and cfg.optim.lr == 1e-4
    assert cfg.rollout.stop == ["\n"]


def test_unknown_key_names_it_and_lists_allowed():
    with pytest.raises(ConfigError) as e:
        load_config(TrainConfig, None, ["rollout.group_sise=4"])
    assert "rollout.group_sise" in str(e.value) and "group_size" in str(e.value)


def test_bad_value_is_named():
    with pytest.raises(ConfigError, match="rollout.group_size"):
        load_config(TrainConfig, None, ["rollout.group_size=0"])
    with pytest.raises(ConfigError, match="loss.loss_agg"):
        load_config(TrainConfig, None, ["loss.loss_agg=sum"])
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(TrainConfig, "/nonexistent.yaml")


def test_verl_and_trl_kl_options():
    cfg = load_config(
        TrainConfig, None, ["loss.kl_coef=0.1", "loss.kl_estimator=low_var_kl", "loss.kl_bias_correction=true"]
    )
    s = cfg.loss.update_settings(1.0, 16)
    assert (s.kl_estimator, s.kl_bias_correction, s.kl_coef) == ("low_var_kl", True, 0.1)
    # without a KL loss term both would do nothing: refused, naming the key and the way out
    for key in ("loss.kl_estimator=abs", "loss.kl_bias_correction=true"):
        with pytest.raises(ConfigError, match=key.split("=")[0] + ".*loss.kl_coef > 0"):
            load_config(TrainConfig, None, [key])
    with pytest.raises(ConfigError, match="loss.kl_bias_correction"):
        load_config(TrainConfig, None, ["loss.kl_coef=0.1", "loss.kl_in_reward=true", "loss.kl_bias_correction=true"])


def test_group_size_one_warns_that_group_relative_advantages_vanish():
    with pytest.warns(UserWarning, match="group_size=1.*loss.advantage=grpo gives no update a signal"):
        load_config(TrainConfig, None, ["rollout.group_size=1"])
    with pytest.warns(UserWarning, match="only the within-episode part of loss.advantage=kevin"):
        load_config(TrainConfig, None, ["rollout.group_size=1", "loss.advantage=kevin"])
