"""Fail loudly and lose nothing: reward errors, non-finite values, prompts too long, run folders and
damaged checkpoints."""

import asyncio
import json
import shutil
import subprocess
import sys

import pytest
import torch

from tempering.envs.dataset import DatasetFamily
from tempering.errors import UserError
from tempering.recipes.runner import trainer
from tempering.train.checkpoint import list_checkpoints

ROWS = [{"prompt": f"{a}+{b}=", "answer": str(a + b)} for a in range(10) for b in range(10)]


def cfg(out, **over):
    c = {
        "model": {"name": "tiny-xs"},
        "rollout": {"group_size": 2, "prompts_per_step": 2, "max_new_tokens": 3},
        "task": {"train_size": 40, "heldout_size": 4},
        "run": {"steps": 2, "out_dir": str(out), "eval_every": 0, "eval_k": 1, "progress": False, "tensorboard": False},
    }
    for k, v in over.items():
        c[k] = {**c.get(k, {}), **v}
    return c


def family(reward):
    return DatasetFamily(ROWS, reward=reward, heldout_share=0.2)


def broken(prompts, completions, answer, **kw):
    return [1.0 / (len(c) - len(c)) for c in completions]  # ZeroDivisionError in user code


def test_a_reward_function_that_raises_stops_the_run_naming_the_users_frame(tmp_path):
    t = trainer("train", cfg(tmp_path / "r"), family=family(broken))
    with pytest.raises(UserError) as e:
        asyncio.run(t.step())
    msg = str(e.value)
    assert "task.max_error_rate" in msg and "ZeroDivisionError" in msg
    assert "tests/train/test_failures.py:" in msg  # the user's own frame, not tempering's


def test_errors_under_the_threshold_are_shown_and_counted(tmp_path, capsys):
    calls = []

    def flaky(prompts, completions, answer, **kw):
        calls.append(1)
        if len(calls) == 1:
            raise ValueError("flaky reward service")
        return [0.0 for _ in completions]

    t = trainer("train", cfg(tmp_path / "r", task={"max_error_rate": 1.0}), family=family(flaky))
    r = asyncio.run(t.step())
    assert r.metrics["env_errors"] == r.metrics["env_calls"] > 0  # the batched call failed every episode in it
    assert "flaky reward service" in capsys.readouterr().err


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_non_finite_reward_is_refused_with_the_task(tmp_path, bad):
    t = trainer(
        "train", cfg(tmp_path / "r"), family=family(lambda prompts, completions, **kw: [bad] * len(completions))
    )
    with pytest.raises(UserError, match=r"non-finite|must be\s+finite|scores must be finite"):
        asyncio.run(t.step())


def test_a_non_finite_gradient_skips_the_update_and_the_run_stops_after_a_few(tmp_path):
    t = trainer("train", cfg(tmp_path / "r", run={"steps": 5, "max_nonfinite_steps": 2}))
    before = {k: v.clone() for k, v in t.model.state_dict().items()}
    orig = t.method.credit

    def poisoned(scores, batch, state):
        c = orig(scores, batch, state)
        return type(c)(c.adv_BT + float("nan"), c.extra, c.mask_BT, c.metrics)

    object.__setattr__(t.method, "credit", poisoned)
    r = asyncio.run(t.step())
    assert r.metrics["nonfinite_updates"] == 1
    assert all(torch.equal(before[k], v) for k, v in t.model.state_dict().items())  # no NaN reached the weights
    with pytest.raises(UserError, match="not finite in 2 steps in a row"):
        asyncio.run(t.step())
    for line in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines():
        json.loads(line)  # valid JSON, NaN written as null


def test_a_prompt_longer_than_the_context_is_refused_or_truncated_on_request(tmp_path):
    long = DatasetFamily([{"prompt": "x" * 60 + str(i), "answer": "1"} for i in range(20)], heldout_share=0.2)
    over = {"rollout": {"max_context_tokens": 40}}
    with pytest.raises(UserError, match=r"leave no room.*dataset:"):
        trainer("train", cfg(tmp_path / "a", **over), family=long)
    t = trainer("train", cfg(tmp_path / "b", rollout={"max_context_tokens": 40, "truncate_prompts": True}), family=long)
    r = asyncio.run(t.step())
    assert all(len(e.prompt_ids) <= 40 - 3 for g in r.groups for e in g.episodes)
    with pytest.raises(UserError, match="beyond the model's context"):
        trainer("train", cfg(tmp_path / "c", rollout={"max_context_tokens": 4096}))


def test_a_folder_that_holds_a_run_is_refused_without_resume_or_overwrite(tmp_path):
    out = tmp_path / "r"
    trainer("train", cfg(out)).run()
    with pytest.raises(UserError, match="already holds a run.*--resume.*--overwrite"):
        trainer("train", cfg(out))
    t = trainer("train", cfg(out), overwrite=True)
    assert not (out / "metrics.jsonl").exists() and t.step_no == 0
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match="is a file"):
        trainer("train", cfg(tmp_path / "file"))
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    for over in (False, True):  # a folder of other files is never written into
        with pytest.raises(UserError, match=r"not empty and holds no run \(notes.txt is there\)"):
            trainer("train", cfg(tmp_path / "mine"), overwrite=over)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


def test_overwrite_removes_only_what_a_run_wrote(tmp_path):
    out = tmp_path / "r"
    trainer("train", cfg(out, run={"checkpoint_every": 1})).run()
    (out / "important.txt").write_text("mine")
    (out / "sub").mkdir()
    (out / "sub" / "data.bin").write_bytes(b"\0")
    with pytest.raises(
        UserError, match=r"--overwrite removes only what a run wrote.*holds important.txt \(and 1 more\)"
    ):
        trainer("train", cfg(out), overwrite=True)
    assert (out / "important.txt").read_text() == "mine" and (out / "sub" / "data.bin").read_bytes() == b"\0"
    assert list_checkpoints(out)  # nothing of the run removed either
    shutil.move(out / "important.txt", tmp_path / "important.txt")
    shutil.move(out / "sub", tmp_path / "sub")
    trainer("train", cfg(out), overwrite=True)
    assert not list_checkpoints(out) and not (out / "final").exists()


def test_a_folder_holding_only_a_failed_start_is_reused(tmp_path):
    out = tmp_path / "r"
    first = trainer("train", cfg(out, run={"tensorboard": True}))  # config.yaml and tb/, nothing trained
    with pytest.raises(UserError, match="already holds a run; replace it with --overwrite"):
        trainer("train", cfg(out))  # that run is still alive in the folder
    first.log.close()  # it stopped there: a failed start
    (out / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match="a new run over a failed start removes only what a run wrote.*notes.txt"):
        trainer("train", cfg(out))
    assert (out / "notes.txt").read_text() == "mine" and (out / "tb").is_dir()
    (out / "notes.txt").unlink()
    history = trainer("train", cfg(out)).run()  # the README's call trains, in the reused folder
    assert history["final"]["eval/n"] == 4 and (out / "final").is_dir()


def test_a_run_stopped_before_its_first_checkpoint_restarts_on_resume(tmp_path, capsys):
    out = tmp_path / "r"
    t = trainer("train", cfg(out))
    asyncio.run(t.step())  # config.yaml and metrics, no checkpoint
    with pytest.raises(UserError, match="already holds a run; replace it with --overwrite"):
        trainer("train", cfg(out))
    t = trainer("train", cfg(out), resume=True)
    assert t.step_no == 0 and "starting it again from step 0" in capsys.readouterr().err


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "tempering.cli", *args], capture_output=True, text=True)


@pytest.mark.slow
def test_resuming_a_finished_run_says_so_and_adds_nothing(tmp_path):
    out = tmp_path / "r"
    trainer("train", cfg(out)).run()
    rows = (out / "metrics.jsonl").read_text()
    r = _cli("train", "--resume", str(out))
    assert r.returncode == 0, r.stderr
    assert "is finished" in r.stderr
    assert (out / "metrics.jsonl").read_text() == rows


@pytest.mark.slow
def test_a_run_on_a_family_from_python_refuses_a_resume_that_cannot_rebuild_it(tmp_path):
    out = tmp_path / "r"
    t = trainer("train", cfg(out), family=family("exact"))
    asyncio.run(t.step())
    t.save()
    r = _cli("train", "--resume", str(out))
    assert r.returncode == 2 and "given from Python" in r.stderr and "Traceback" not in r.stderr
    again = trainer("train", cfg(out), family=family("exact"), resume=True)  # from Python, with the family: fine
    assert again.step_no == 1


@pytest.mark.slow
@pytest.mark.parametrize("victim", ["model/model.safetensors", "trainer_state.pt", "manifest.json"])
def test_a_damaged_checkpoint_falls_back_to_the_newest_intact_one(tmp_path, capsys, victim):
    out = tmp_path / "r"
    trainer("train", cfg(out, run={"steps": 2, "checkpoint_every": 1, "keep_checkpoints": 2})).run()
    assert [p.name for p in list_checkpoints(out)] == ["step_1", "step_2"]
    bad = out / "checkpoints" / "step_2" / victim
    bad.write_bytes(bad.read_bytes()[:-7])  # truncated
    t = trainer("train", cfg(out, run={"steps": 3}), resume=True)
    assert t.step_no == 1
    err = capsys.readouterr().err
    assert "damaged checkpoint" in err and "step_2" in err
    shutil.rmtree(out / "checkpoints" / "step_1")
    with pytest.raises(UserError, match="every checkpoint .* is damaged"):
        trainer("train", cfg(out, run={"steps": 3}), resume=True)


def test_a_metrics_line_cut_short_by_a_kill_is_dropped_on_resume(tmp_path):
    from tempering.runlog import RunLog

    log = RunLog(tmp_path, {"a": 1}, tensorboard=False)
    log.log(1, {"reward": 0.5})
    log.log(2, {"reward": 0.7})
    with (tmp_path / "metrics.jsonl").open("a") as f:
        f.write('{"step": 3, "rew')  # the kill came mid-line
    RunLog(tmp_path, {"a": 1}, resume_step=2, tensorboard=False)
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]


@pytest.mark.parametrize(
    "failure",
    [
        OSError(28, "No space left on device"),
        RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 9 vs 7"),
    ],
    ids=["os_error", "torch_short_write"],
)
def test_a_checkpoint_that_cannot_be_written_is_a_clear_error_and_the_last_one_stays(tmp_path, monkeypatch, failure):
    from tempering.models import char_tokenizer, tiny_model
    from tempering.train import checkpoint

    model, tok = tiny_model("tiny-xs"), char_tokenizer()
    checkpoint.save_checkpoint(tmp_path, 1, model, tok, {"x": torch.zeros(3)})

    def full_disk(obj, path):
        raise failure

    monkeypatch.setattr(checkpoint.torch, "save", full_disk)
    with pytest.raises(
        UserError, match="writing checkpoint step_2 failed .*the last complete one is .*step_1.*--resume"
    ):
        checkpoint.save_checkpoint(tmp_path, 2, model, tok, {"x": torch.zeros(3)})
    assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == ["step_1"]  # no half-written folder


@pytest.mark.slow
def test_ctrl_c_writes_a_checkpoint_at_the_step_end_and_the_run_resumes(tmp_path):
    import signal
    import time

    out = tmp_path / "r"
    args = ["train", "model.name=tiny-xs", "rollout.group_size=2", "rollout.prompts_per_step=2"]
    args += ["rollout.max_new_tokens=3", "task.heldout_size=4", "run.eval_every=0", "run.progress=false"]
    args += ["run.steps=400", "run.checkpoint_every=1000", "run.tensorboard=false", f"run.out_dir={out}"]
    proc = subprocess.Popen([sys.executable, "-m", "tempering.cli", *args], stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and not (
        (out / "metrics.jsonl").is_file() and len((out / "metrics.jsonl").read_text().splitlines()) >= 3
    ):
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "checkpoint written: continue with --resume" in err
    (ckpt,) = list_checkpoints(out)
    step = int(ckpt.name.removeprefix("step_"))
    assert 0 < step < 400
    import yaml

    t = trainer("train", yaml.safe_load((out / "config.yaml").read_text()), resume=True)
    assert t.step_no == step  # continues from the checkpoint the interrupt wrote
