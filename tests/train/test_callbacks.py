"""Callbacks of `Trainer.run`: they see every step's and evaluation's metrics, and a true return stops
the run with a checkpoint that resumes to the weights of an uninterrupted run."""

import json

import pytest
import torch

from tempering.errors import UserError
from tempering.recipes.runner import run, trainer

CFG = {
    "task": {"family": "arithmetic", "args": {"min_value": 0, "max_value": 30}, "train_size": 40, "heldout_size": 4},
    "rollout": {"group_size": 4, "prompts_per_step": 2, "max_new_tokens": 3},
    "run": {"steps": 4, "eval_every": 0, "eval_k": 1, "checkpoint_every": 0, "progress": False, "tensorboard": False},
}


@pytest.fixture
def cfg(pretrained_dir):
    """A config of a short run from the warm start (non-zero rewards, so the weights move)."""
    return lambda out, **run: {
        **CFG,
        "model": {"name": pretrained_dir},
        "run": {**CFG["run"], "out_dir": str(out), **run},
    }


class Record:
    def __init__(self, stop_at: int | None = None):
        self.steps: list[tuple[int, dict]] = []
        self.evaluations: list[tuple[int, dict]] = []
        self.stop_at = stop_at

    def on_step_end(self, step, metrics):
        self.steps.append((step, metrics))
        return step == self.stop_at

    def on_evaluation(self, step, metrics):
        self.evaluations.append((step, metrics))


def rows(out):
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_a_callback_sees_every_step_and_evaluation(tmp_path, cfg):
    seen, evals_only = Record(), type("E", (), {"on_evaluation": lambda self, s, m: calls.append(s)})()
    calls: list[int] = []
    history = run("train", cfg(tmp_path, eval_every=2), callbacks=[seen, evals_only])
    logged = rows(tmp_path)
    steps = [(r["step"], {k: v for k, v in r.items() if k != "step"}) for r in logged if "eval/pass@1" not in r]
    assert [s for s, _ in seen.steps] == [1, 2, 3, 4] and any(m["reward"] > 0 for _, m in seen.steps)
    assert seen.steps == steps  # the same numbers metrics.jsonl holds
    assert [s for s, _ in seen.evaluations] == [0, 2, 4] == calls  # start, every 2 steps (not at the last), final
    assert seen.evaluations[0][1] == history["start"] and seen.evaluations[-1][1] == history["final"]
    assert "stopped_at" not in history


def test_stopping_early_resumes_to_the_uninterrupted_weights(tmp_path, cfg):
    whole = trainer("train", cfg(tmp_path / "whole"))
    start = {k: v.clone() for k, v in whole.model.state_dict().items()}
    whole.run()
    assert any(not torch.equal(start[k], v) for k, v in whole.model.state_dict().items())  # it trained

    stopper = Record(stop_at=2)
    cut = trainer("train", cfg(tmp_path / "cut"))
    history = cut.run([stopper])
    assert history["stopped_at"] == 2 and "final" not in history and "start" in history
    assert [s for s, _ in stopper.steps] == [1, 2]
    assert [p.name for p in (tmp_path / "cut" / "checkpoints").iterdir()] == ["step_2"]
    assert not (tmp_path / "cut" / "final").exists()
    assert max(r["step"] for r in rows(tmp_path / "cut")) == 2

    rest = Record()
    resumed = trainer("train", cfg(tmp_path / "cut"), resume=True)
    assert resumed.step_no == 2
    history = resumed.run([rest])
    assert [s for s, _ in rest.steps] == [3, 4] and "final" in history and "start" in history
    for (k, a), (_, b) in zip(whole.model.state_dict().items(), resumed.model.state_dict().items(), strict=True):
        assert torch.equal(a, b), k


def test_an_evaluation_can_stop_the_run(tmp_path, cfg):
    class StopOnEval:
        def on_evaluation(self, step, metrics):
            return step == 2

    history = run("train", cfg(tmp_path, eval_every=2, eval_on_start=False), callbacks=[StopOnEval()])
    assert history == {"stopped_at": 2}
    assert (tmp_path / "checkpoints" / "step_2").is_dir()


def test_a_callback_without_hooks_is_refused(tmp_path, cfg):
    with pytest.raises(UserError, match="has neither on_step_end"):
        run("train", cfg(tmp_path), callbacks=[lambda step, metrics: None])
