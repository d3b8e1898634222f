"""The one loop runs any method given as data, including one defined outside the package."""

import asyncio
import json

import pytest
import torch
import yaml

from tempering.algos.advantages import dr_grpo_advantage
from tempering.envs.arithmetic import ArithmeticFamily
from tempering.methods.rl import TrainConfig
from tempering.recipes.runner import trainer
from tempering.train.checkpoint import load_trainer_state
from tempering.train.method import Context, Credit, Method, MethodSpec, turn_credit
from tempering.train.scoring import Scores, per_turn

CFG = {
    "model": {"name": "tiny-xs"},
    "task": {"family": "arithmetic", "args": {"min_value": 0, "max_value": 9}, "train_size": 40, "heldout_size": 4},
    "rollout": {"group_size": 4, "prompts_per_step": 2, "max_new_tokens": 3},
    "run": {"steps": 2, "eval_every": 0, "eval_k": 1, "checkpoint_every": 1, "progress": False, "tensorboard": False},
}


def brevity(groups, batch, scores: Scores) -> Scores:
    """A scorer of our own: a penalty of 0.1 per even token id in the answer."""
    evens = per_turn((batch.input_ids_BT % 2 == 0).float() * batch.mask_BT, batch, scores.turns.scores_NGK.shape)
    return scores.with_term("brevity", -0.1 * evens)


def build_brevity(ctx: Context) -> Method:
    outcome = turn_credit(lambda t: dr_grpo_advantage(t.rewards_NG + t.shaping.sum(-1))[..., None] * t.valid_NGK)

    def credit(scores, batch, state) -> Credit:
        c = outcome(scores, batch, state)
        return Credit(c.adv_BT, metrics={"brevity/adv_abs": float(c.adv_BT.abs().sum() / batch.mask_BT.sum())})

    return Method(
        name="brevity",
        credit=credit,
        scorers=[brevity],
        state={"steps": 0.0},
        next_state=lambda state, m: {"steps": state["steps"] + 1},
    )


BREVITY = MethodSpec(name="brevity", config=TrainConfig, build=build_brevity)


def test_a_method_defined_outside_the_package_trains(tmp_path):
    t = trainer(BREVITY, {**CFG, "run": {**CFG["run"], "out_dir": str(tmp_path)}})
    before = {k: v.clone() for k, v in t.model.state_dict().items()}
    r = asyncio.run(t.step())
    assert r.metrics["shaping/brevity"] < 0 and r.metrics["brevity/adv_abs"] > 0
    assert r.metrics["state/steps"] == 1.0 and t.state == {"steps": 1.0}
    assert any(not torch.equal(before[k], v) for k, v in t.model.state_dict().items())  # it trained
    t.save()
    assert load_trainer_state(tmp_path / "checkpoints" / "step_1")["method_state"] == {"steps": 1.0}
    again = trainer(BREVITY, {**CFG, "run": {**CFG["run"], "out_dir": str(tmp_path)}}, resume=True)
    assert again.state == {"steps": 1.0} and again.step_no == 1


class ScreenFamily(ArithmeticFamily):
    feedback_template = "<{feedback}>"
    closed = 0

    def close(self):
        ScreenFamily.closed += 1


@pytest.mark.slow
@pytest.mark.parametrize("own", [None, "|{feedback}|"])
def test_a_family_template_applies_unless_the_config_names_one_and_the_family_is_closed(tmp_path, own):
    cfg = {
        **CFG,
        "rollout": {**CFG["rollout"], "max_turns": 2},
        "run": {**CFG["run"], "steps": 1, "out_dir": str(tmp_path)},
    }
    if own:
        cfg["rollout"]["feedback_template"] = own
    ScreenFamily.closed = 0
    t = trainer("train", cfg, family=ScreenFamily(min_value=0, max_value=9))
    want = own or "<{feedback}>"
    assert t.fmt.feedback_template == want
    assert yaml.safe_load((tmp_path / "config.yaml").read_text())["rollout"]["feedback_template"] == want
    t.run()
    assert ScreenFamily.closed == 1


@pytest.mark.parametrize("on_start", [True, False])
def test_eval_on_start_decides_the_step_0_evaluation(tmp_path, on_start):
    run = {**CFG["run"], "steps": 1, "out_dir": str(tmp_path), "eval_on_start": on_start}
    hist = trainer("train", {**CFG, "run": run}).run()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    evals = [r["step"] for r in rows if "eval/pass@1" in r]
    assert evals == ([0, 1] if on_start else [1])
    assert ("start" in hist) is on_start and "final" in hist


def test_the_run_summary_names_the_learning_rate_and_the_kl_reference(tmp_path):
    """What a user checks after converting a config: the lr and its schedule, the KL coefficient and reference."""
    run = {**CFG["run"], "out_dir": str(tmp_path / "a")}
    plain = trainer("train", {**CFG, "run": run}).summary()
    assert plain["optimizer"] == "AdamW, lr 1e-06, 0 warm-up steps, then constant"
    assert plain["KL"] == "none (loss.kl_coef=0: no reference model)"
    cfg = {
        **CFG,
        "optim": {"lr": 3e-4, "warmup_steps": 2, "schedule": "linear", "min_lr_ratio": 0.0},
        "loss": {"kl_coef": 0.04},
        "run": {**run, "out_dir": str(tmp_path / "b")},
    }
    s = trainer("train", cfg).summary()
    assert s["optimizer"] == "AdamW, lr 0.0003, 2 warm-up steps, then linear to 0 x lr"
    assert s["KL"] == "loss.kl_coef 0.04 in the loss, to the reference: the starting model (tiny-xs)"
