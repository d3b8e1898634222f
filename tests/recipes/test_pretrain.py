"""The warm start's stopping rule: held-out checks at or above the target, several in a row."""

import pytest

from tempering.config import build
from tempering.errors import UserError
from tempering.recipes import pretrain as pretrain_mod
from tempering.recipes.pretrain import PretrainConfig


def scripted_checks(monkeypatch, values):
    """Replace the held-out check with a scripted pass@1 sequence (the last value repeats)."""
    calls = []

    async def fake_evaluate(*args, **kwargs):
        calls.append(1)
        return {"pass@1": values[min(len(calls) - 1, len(values) - 1)]}

    monkeypatch.setattr(pretrain_mod, "evaluate", fake_evaluate)


def config(tmp_path, steps=40, **train):
    return build(
        PretrainConfig,
        {
            "model": {"name": "tiny-xs"},
            "run": {"out_dir": str(tmp_path), "progress": False, "steps": steps, "eval_every": 2},
            "task": {
                "family": "arithmetic",
                "args": {"min_value": 0, "max_value": 9},
                "train_size": 50,
                "heldout_size": 10,
            },
            "train": {"batch_size": 4, "stop_at_pass": 0.2, **train},
        },
    )


@pytest.mark.slow
@pytest.mark.parametrize("stop_checks,want_steps", [(1, 4), (2, 10)])
def test_stops_after_enough_consecutive_checks(tmp_path, monkeypatch, stop_checks, want_steps):
    # checks at steps 2, 4, 6, 8, 10: a spike at step 4, then two in a row from step 8
    scripted_checks(monkeypatch, [0.0, 0.25, 0.1, 0.2, 0.3])
    res = pretrain_mod.pretrain(config(tmp_path, stop_checks=stop_checks))
    assert res["steps"] == want_steps


@pytest.mark.slow
def test_runs_all_steps_without_a_target(tmp_path, monkeypatch):
    scripted_checks(monkeypatch, [1.0])
    res = pretrain_mod.pretrain(config(tmp_path, stop_at_pass=None, steps=6))
    assert res["steps"] == 6 and (tmp_path / "model" / "config.json").is_file()


@pytest.mark.slow
def test_a_finished_warm_start_only_reports_and_refuses_more_steps(tmp_path, monkeypatch):
    scripted_checks(monkeypatch, [0.0, 0.25])
    assert pretrain_mod.pretrain(config(tmp_path, stop_checks=1))["steps"] == 4  # stopped early, of 40
    assert pretrain_mod.pretrain(config(tmp_path, stop_checks=1), resume=True)["steps"] == 4
    with pytest.raises(UserError, match=r"finished warm start \(run.steps=40\), and one is not extended"):
        pretrain_mod.pretrain(config(tmp_path, steps=80, stop_checks=1), resume=True)
