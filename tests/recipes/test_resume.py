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


@pytest.mark.slow
def test_a_run_copied_elsewhere_resumes_from_any_folder_and_refuses_when_its_files_are_gone(
    tmp_path, monkeypatch, capsys
):
    start = tmp_path / "project"
    start.mkdir()
    rows = [{"prompt": f"{i}+{i}=", "answer": str(2 * i)} for i in range(12)]
    (start / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (start / "my_reward.py").write_text(
        "def exact(completions, answer, **kw):\n    return [float(c.strip() == a) for c, a in zip(completions, answer)]\n"
    )
    monkeypatch.chdir(start)
    task = {"family": "dataset", "args": {"train": "data.jsonl", "reward": "./my_reward.py:exact"}, "heldout_size": 4}
    cfg = {**CFG, "task": task, "run": {**CFG["run"], "out_dir": "runs/a"}}
    (start / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    assert cli(["train", "cfg.yaml"]) == 0
    saved = yaml.safe_load((start / "runs/a/config.yaml").read_text())["task"]["args"]
    assert saved == {"train": str(start / "data.jsonl"), "reward": f"{start / 'my_reward.py'}:exact"}

    import shutil

    copy = tmp_path / "elsewhere" / "a"
    shutil.copytree(start / "runs/a", copy)
    monkeypatch.chdir(tmp_path)  # neither the folder it started from nor the copy's
    capsys.readouterr()
    assert cli(["train", "--resume", str(copy), "run.steps=3"]) == 0
    rows_out = [json.loads(x) for x in (copy / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows_out if "reward" in r] == [1, 2, 3]
    assert not (start / "runs/a/checkpoints/step_3").exists()  # the original is untouched

    (start / "data.jsonl").rename(start / "moved.jsonl")
    before = (copy / "config.yaml").read_bytes()
    capsys.readouterr()
    assert cli(["train", "--resume", str(copy), "run.steps=4"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"task.args.train={start / 'data.jsonl'}, which no longer exists" in err
    assert (copy / "config.yaml").read_bytes() == before


class StopAt:
    def __init__(self, step):
        self.step = step

    def on_step_end(self, step, metrics):
        return step == self.step


@pytest.mark.slow
def test_keep_checkpoints_0_keeps_only_the_final_model_and_still_resumes_a_stopped_run(tmp_path, capsys):
    from tempering.recipes.runner import trainer

    out = tmp_path / "run"
    cfg = {**CFG, "run": {**CFG["run"], "steps": 3, "checkpoint_every": 0, "keep_checkpoints": 0, "out_dir": str(out)}}
    hist = trainer("train", cfg).run([StopAt(1)])
    assert "stopped_at" in hist and [p.name for p in (out / "checkpoints").iterdir()] == ["step_1"]
    assert cli(["train", "--resume", str(out)]) == 0  # the stopped run continues from the checkpoint kept
    assert (out / "final" / "config.json").is_file() and not (out / "checkpoints").exists()
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "reward" in r] == [1, 2, 3]

    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    capsys.readouterr()
    assert cli(["train", "--resume", str(out), "run.steps=4"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "kept no checkpoint (run.keep_checkpoints=0)" in err
    assert f"model.name={out / 'final'} run.out_dir=NEW_DIR" in err
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before  # the finished run is untouched
