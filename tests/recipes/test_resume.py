"""`--resume RUN key=value`: only a run's length and reporting may change; config.yaml follows the
continued run; a finished run says how to extend it and is extended by a larger run.steps."""

import json

import pytest
import yaml

from tempering.cli import main as cli

CFG = {
    "model": {"name": "tiny-xs"},
    "task": {"family": "arithmetic", "args": {"min_value": 0, "max_value": 9}, "train_size": 40, "heldout_size": 4},
    "rollout": {"group_size": 2, "prompts_per_step": 2, "max_new_tokens": 3},
    "run": {"steps": 2, "eval_every": 0, "eval_k": 2, "checkpoint_every": 1, "progress": False, "tensorboard": False},
}


@pytest.fixture
def run(tmp_path):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump({**CFG, "run": {**CFG["run"], "out_dir": str(tmp_path / "run")}}))
    assert cli(["train", str(cfg)]) == 0
    return tmp_path / "run"


@pytest.mark.slow
def test_resume_refuses_a_key_that_would_make_another_run_and_writes_nothing(run, capsys):
    before = (run / "config.yaml").read_bytes(), (run / "metrics.jsonl").read_bytes()
    capsys.readouterr()
    assert cli(["train", "--resume", str(run), "run.steps=3", "task.heldout_size=3"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "task.heldout_size cannot change when resuming" in err
    assert "run.out_dir=NEW_DIR" in err and "start a new run instead" in err
    assert cli(["train", "--resume", str(run), "task.args.max_value=20"]) == 2
    assert "task.args.max_value cannot change" in capsys.readouterr().err
    assert cli(["train", "--resume", str(run), "task.heldout_size=4"]) == 0  # the value it has: nothing changes
    assert "finished (step 2 of 2)" in capsys.readouterr().err
    assert ((run / "config.yaml").read_bytes(), (run / "metrics.jsonl").read_bytes()) == before


@pytest.mark.slow
def test_a_finished_run_says_how_to_extend_it_and_a_larger_run_steps_extends_it(run, capsys):
    capsys.readouterr()
    assert cli(["train", "--resume", str(run)]) == 0
    out = capsys.readouterr()
    assert f"finished (step 2 of 2); to train further: --resume {run} run.steps=N (N > 2)" in " ".join(out.err.split())
    header = next(ln for ln in out.out.splitlines() if "metric" in ln)
    assert header.index("start") < header.index("final")  # the start column first, as when the run ended

    assert cli(["train", "--resume", str(run), "run.steps=3", "run.log_every=1"]) == 0
    out = capsys.readouterr().out
    assert yaml.safe_load((run / "config.yaml").read_text())["run"]["steps"] == 3
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "reward" in r] == [1, 2, 3]
    evals = [(r["step"], r["eval/n"]) for r in rows if "eval/pass@1" in r]
    assert evals == [(0, 4), (2, 4), (3, 4)]  # start, the first run's final, the continued run's final
    header = next(ln for ln in out.splitlines() if "metric" in ln)
    assert header.index("start") < header.index("final")

    capsys.readouterr()
    assert cli(["train", "--resume", str(run)]) == 0  # config.yaml now says 3 steps: finished, not "3 of 2"
    assert "finished (step 3 of 3)" in capsys.readouterr().err
    assert cli(["train", "--resume", str(run), "run.steps=2"]) == 2
    assert "run.steps=2 is below the step" in capsys.readouterr().err
    assert yaml.safe_load((run / "config.yaml").read_text())["run"]["steps"] == 3
