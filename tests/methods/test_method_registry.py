"""A method defined outside the package is one module and one registration: it is then a CLI verb, a
`tempering config` entry and a torchrun verb (2 ranks), like the package's own.

This file is that module (its `SPEC`); run as a script, it is the worker torchrun starts on each rank.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tempering.algos.advantages import dr_grpo_advantage
from tempering.methods import METHODS, register
from tempering.methods.rl import TrainConfig
from tempering.train.method import Context, Method, MethodSpec, turn_credit

VERB = "brevity"
HELP = "GRPO with a penalty per answer token (a method defined in a test)."


def brevity(groups, batch, scores):
    """Scorer: -0.01 per answer token, as a named shaping term."""
    return scores.with_term("brevity", -0.01 * scores.turns.tokens_NGK)


def build(ctx: Context) -> Method:
    outcome = turn_credit(lambda t: dr_grpo_advantage(t.rewards_NG + t.shaping.sum(-1))[..., None] * t.valid_NGK)
    return Method(
        name="brevity",
        credit=outcome,
        scorers=[brevity],
        state={"steps": 0.0},
        next_state=lambda state, metrics: {"steps": state["steps"] + 1},
    )


SPEC = MethodSpec(name="brevity", config=TrainConfig, build=build)
MODULE = Path(__file__).stem  # importable: this folder is on sys.path under pytest and as a script

ARGS = [
    "task.family=arithmetic",
    "task.args.min_value=0",
    "task.args.max_value=9",
    "task.train_size=40",
    "task.heldout_size=4",
    "rollout.group_size=4",
    "rollout.prompts_per_step=2",
    "rollout.max_new_tokens=3",
    "run.steps=2",
    "run.eval_every=0",
    "run.eval_k=1",
    "run.progress=false",
    "run.tensorboard=false",
]


@pytest.fixture
def registered():
    register(VERB, MODULE, HELP)
    yield
    del METHODS[VERB]


def _steps(out: Path) -> list[dict]:
    return [r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if "reward" in r]


def test_a_registered_method_is_a_verb_of_the_cli_and_of_tempering_config(registered, pretrained_dir, tmp_path, capsys):
    from tempering.cli import main as cli

    assert cli(["--help"]) == 0
    assert f"{VERB}  " in capsys.readouterr().out
    assert cli(["config", VERB]) == 0
    assert "loss.advantage" in capsys.readouterr().out  # its config is the spec's (TrainConfig)
    out = tmp_path / "run"
    assert cli([VERB, f"model.name={pretrained_dir}", *ARGS, f"run.out_dir={out}"]) == 0
    rows = _steps(out)
    assert [r["state/steps"] for r in rows] == [1.0, 2.0]  # its own state, advanced by its next_state
    assert all(r["shaping/brevity"] < 0 for r in rows)  # its own scorer


@pytest.mark.slow
def test_a_registered_method_trains_on_two_ranks(pretrained_dir, tmp_path):
    out = tmp_path / "two"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", __file__]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    res = subprocess.run(
        [*cmd, VERB, f"model.name={pretrained_dir}", *ARGS, f"run.out_dir={out}"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert res.returncode == 0, res.stderr[-4000:]
    rows = _steps(out)
    assert [r["state/steps"] for r in rows] == [1.0, 2.0]
    assert all(r["groups"] == 2 for r in rows)  # both ranks' groups, reduced: one prompt each


def test_a_method_refuses_what_it_cannot_do_before_any_model_loads(tmp_path):
    from tempering.errors import UserError
    from tempering.recipes.runner import trainer

    cfg = {"model": {"name": str(tmp_path / "no-such-model")}, "run": {"out_dir": str(tmp_path / "r")}}
    with pytest.raises(UserError, match="the brevity method takes no teacher"):
        trainer(SPEC, cfg, teacher=object())
    with pytest.raises(UserError, match="no method is registered as 'trian' \\(did you mean 'train'\\?\\)"):
        trainer("trian", cfg)
    from tempering.config import build
    from tempering.methods.ppo import PPOConfig

    with pytest.raises(UserError, match="the rl method reads a TrainConfig, and was given a PPOConfig"):
        trainer("train", build(PPOConfig, cfg))


if __name__ == "__main__":  # a torchrun rank: register this module's method, then run its verb
    from tempering.distributed.__main__ import main

    register(VERB, MODULE, HELP)
    sys.exit(main(sys.argv[1:]))
