import pytest

from tempering.config import load_config
from tempering.errors import ConfigError
from tempering.recipes.train import TrainConfig


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
