import json
import subprocess
import sys

import pytest

ARGS = [
    "pretrain.model.name=tiny-xs",
    "pretrain.run.steps=30",
    "pretrain.run.eval_every=30",
    "pretrain.task.heldout_size=40",
    "pretrain.task.train_size=500",
    "train.run.steps=2",
    "train.task.heldout_size=40",
    "train.task.train_size=500",
    "train.rollout.prompts_per_step=4",
    "train.run.eval_k=2",
]


def _demo(out, *args):
    cmd = [sys.executable, "-m", "tempering.cli", "demo", "--out", str(out), "--no-progress", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_demo_runs_end_to_end_and_writes_results(tmp_path):
    """The quickstart pipeline with tiny budgets: pre-train, GRPO, table, summary and results files; run
    again, its finished stages only report, and a changed one is refused."""
    r = _demo(tmp_path / "run", "--results", str(tmp_path / "results"), *ARGS)
    assert r.returncode == 0, r.stderr
    assert "before GRPO" in r.stdout and "after GRPO" in r.stdout
    # 30 steps of tiny-xs stop short of the warm start's target, which is said before GRPO starts
    assert "the warm start ended at held-out pass@1" in r.stderr and "below its target" in r.stderr
    run = tmp_path / "run"
    assert f"runs: {run / 'grpo'}, {run / 'pretrain'}" in r.stdout
    assert f"next: tempering view {run / 'grpo'}" in r.stdout
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    head = json.loads((tmp_path / "results" / "quickstart.json").read_text())
    for k in ("pass_at_1_before", "pass_at_1_after", "heldout_prompts", "seconds_total"):
        assert k in head
    assert head["pass_at_1_after"] == summary["pass_at_1_after"] and head["heldout_prompts"] == 40
    assert "| 0 |" in (tmp_path / "results" / "quickstart.md").read_text()

    again = _demo(tmp_path / "run", *ARGS)
    assert again.returncode == 0, again.stderr
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["pass_at_1_after"] == summary["pass_at_1_after"]
    refused = _demo(tmp_path / "run", *ARGS, "train.run.steps=3")
    assert refused.returncode == 2 and "holds stage grpo of another configuration" in refused.stderr


def test_demo_refuses_no_start_evaluation_before_pretraining(tmp_path):
    from tempering.errors import UserError
    from tempering.recipes.demo import run_demo

    with pytest.raises(UserError, match="eval_on_start"):
        run_demo(tmp_path, 0, ["train.run.eval_on_start=false"], progress=False)
    assert not (tmp_path / "pretrain").exists()  # refused before any work


def test_an_interrupted_demo_says_to_run_it_again(monkeypatch, capsys):
    from tempering.cli import main
    from tempering.recipes import demo

    def interrupted(*a):
        raise KeyboardInterrupt

    monkeypatch.setattr(demo, "_demos", interrupted)
    assert main(["demo", "--no-progress"]) == 130
    err = capsys.readouterr().err
    assert "continues where it stopped when run again with the same arguments (it has no --resume" in err
