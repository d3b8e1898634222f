"""Every RL credit x {overlong, kl_in_reward, dynamic_sampling} x {single-, multi-turn} either changes
what is trained on as documented or is refused when the config is read: no silent no-op."""

import importlib.util
from pathlib import Path

import pytest

from tempering.algos.credit import CREDIT
from tempering.config import build
from tempering.errors import ConfigError
from tempering.methods.rl import WHITENED, TrainConfig
from tempering.models import tiny_model

SPEC = importlib.util.spec_from_file_location(
    "composition_matrix", Path(__file__).parents[2] / "examples" / "composition" / "matrix.py"
)
matrix = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(matrix)
START = tiny_model("tiny-xs", seed=0).eval()
REFUSED = {("leap", "overlong"), ("leap", "kl_in_reward")} | {(c, "dynamic_sampling") for c in WHITENED}


@pytest.mark.parametrize("turns", [1, 3])
@pytest.mark.parametrize("option", list(matrix.OPTIONS))
@pytest.mark.parametrize("credit", sorted(CREDIT))
def test_each_combination_changes_the_advantages_as_documented_or_is_refused(credit, option, turns):
    row = matrix.check(credit, option, turns, START)
    want = "refused" if (credit, option) in REFUSED else "effective"
    assert row["status"] == want, row["detail"]


def test_dynamic_sampling_follows_the_credits_own_signal():
    # every episode succeeds, at different turns: outcome credit has nothing to learn there, LEAP does
    assert matrix.check("grpo", "dynamic_sampling", 3, START)["detail"] == "groups dropped: [1, 2]"
    assert matrix.check("leap", "dynamic_sampling", 3, START)["detail"] == "groups dropped: [1]"


@pytest.mark.parametrize(
    "over,keys",
    [
        ({"loss": {"kl_in_reward": True}}, "loss.kl_in_reward"),
        ({"loss": {"kl_estimator": "k1"}}, "loss.kl_estimator"),
        ({"loss": {"max_resample_rounds": 5}}, "loss.max_resample_rounds"),
        ({"rollout": {"counterfactual_turns": 4}}, "rollout.counterfactual_turns.*loss.advantage=tcpo"),
        ({"rollout": {"max_turns": 3, "dcp_min_fail": 0.3}}, "rollout.dcp_min_fail.*rollout.prune=dcp"),
        ({"rollout": {"prune": "dcp"}}, "rollout.prune.*rollout.max_turns > 1"),
        ({"rollout": {"counterfactual_samples": 2}}, "rollout.counterfactual_samples"),
        ({"loss": {"rollout_correction_cap": 3.0}}, "loss.rollout_correction_cap"),
        ({"optim": {"min_lr_ratio": 0.5}}, "optim.min_lr_ratio.*optim.schedule=cosine"),
        ({"run": {"eval_every": 0, "eval_size": 10}}, "run.eval_size.*run.eval_every"),
        ({"loss": {"credit_args": {"gama": 0.5}}}, "credit_args.*gama"),
        ({"loss": {"advantage": "ppo2"}}, "loss.advantage='ppo2' is unknown"),
    ],
)
def test_a_value_that_would_do_nothing_is_refused_naming_the_keys(over, keys):
    with pytest.raises(ConfigError, match=keys):
        build(TrainConfig, over)
