"""A staged verb's stages (`train/stages.py`) with stand-in trainings: what is reused, refused, resumed."""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from tempering.config import Schema
from tempering.errors import UserError
from tempering.train.stages import Stage, Stages


class Model(Schema):
    name: str = "tiny-xs"


class Run(Schema):
    out_dir: str = "runs/x"
    steps: int = 2


class Cfg(Schema):
    model: Model = Model()
    run: Run = Run()


class Recorder:
    """A stage's training: records how it was started, returns its result."""

    def __init__(self):
        self.calls = []

    def __call__(self, cfg, resume, overwrite):
        self.calls.append((cfg.run.out_dir, resume, overwrite))
        return {"final": {"steps": cfg.run.steps}}


def _stages(root, steps=(2, 2), resume=False, overwrite=False, train=None, world=None):
    """Two stages in root/a and root/b, b starting from a's model; returns (b, the trainer)."""
    train = train or Recorder()

    def a(last):
        return Cfg(run=Run(out_dir=str(root / "a"), steps=steps[0]))

    def b(last):
        return Cfg(model=Model(name=last.final), run=Run(out_dir=str(root / "b"), steps=steps[1]))

    stages = Stages(root, Cfg(run=Run(out_dir=str(root))), resume, overwrite, world)
    return stages.run([Stage("a", a, train), Stage("b", b, train)])[-1], train


def test_a_finished_stage_is_reused_and_a_changed_one_refused(tmp_path):
    b, train = _stages(tmp_path)
    assert train.calls == [(str(tmp_path / "a"), False, False), (str(tmp_path / "b"), False, False)]
    assert (tmp_path / "config.yaml").is_file()
    saved = json.loads((tmp_path / "b" / "stage.json").read_text())
    assert saved == {"stage": "b", "digest": b.digest, "result": {"final": {"steps": 2}}}

    with pytest.raises(UserError, match="already holds a run; continue it with --resume"):
        _stages(tmp_path)
    again, train = _stages(tmp_path, resume=True)
    assert train.calls == [] and again == b  # nothing trained: the recorded results
    with pytest.raises(UserError, match=f"{tmp_path / 'b'} holds stage b of another configuration"):
        _stages(tmp_path, steps=(2, 3), resume=True)
    # a stage before it made again with another config: the stage after it is refused too
    (tmp_path / "a" / "stage.json").unlink()
    with pytest.raises(UserError, match=f"{tmp_path / 'b'} holds stage b"):
        _stages(tmp_path, steps=(3, 2), resume=True)


def test_an_interrupted_stage_resumes_and_one_never_checkpointed_starts_again(tmp_path):
    _stages(tmp_path)
    for stage in "ab":
        (tmp_path / stage / "stage.json").unlink()
    (tmp_path / "a" / "checkpoints" / "step_1").mkdir(parents=True)  # as if killed after a checkpoint
    with pytest.raises(UserError, match=f"already holds a run; continue it with --resume {tmp_path}"):
        _stages(tmp_path)
    _, train = _stages(tmp_path, resume=True)
    # b had started (its folder is there) but never checkpointed: it starts again
    assert train.calls == [(str(tmp_path / "a"), True, False), (str(tmp_path / "b"), False, True)]


def test_a_verb_killed_mid_stage_skips_its_finished_stages_and_continues_the_killed_one(tmp_path):
    """What every staged verb gets from the one runner: killed in its second stage after a checkpoint, the
    verb run again with --resume reports the first stage from its stage.json (its `then` sees it again),
    resumes the second from its checkpoint and runs the third from the second's model; a stage whose
    config is None is passed over."""
    calls, seen = [], []

    def train(cfg, resume, overwrite):
        calls.append((Path(cfg.run.out_dir).name, resume))
        if cfg.run.out_dir.endswith("b") and not resume:
            (Path(cfg.run.out_dir) / "checkpoints" / "step_1").mkdir(parents=True)
            raise KeyboardInterrupt
        return {"final": {"from": cfg.model.name}}

    def at(name):
        return lambda last: Cfg(
            model=Model(name=last.final if last else "tiny-xs"), run=Run(out_dir=str(tmp_path / name))
        )

    plan = [Stage(n, at(n), train, lambda d: seen.append(d.name)) for n in "abc"]
    plan.insert(1, Stage("off", lambda last: None, train))
    with pytest.raises(KeyboardInterrupt):
        Stages(tmp_path, None, resume=False, overwrite=False).run(plan)
    assert calls == [("a", False), ("b", False)] and seen == ["a"]
    done = Stages(tmp_path, None, resume=True, overwrite=False).run(plan)
    assert calls[2:] == [("b", True), ("c", False)] and seen == ["a", "a", "b", "c"]
    assert [d.name for d in done] == ["a", "b", "c"]
    assert done[1].result == {"final": {"from": str(tmp_path / "a" / "final")}}
    assert done[2].result == {"final": {"from": str(tmp_path / "b" / "final")}}


def test_a_stopped_run_is_not_finished_and_other_ranks_write_nothing(tmp_path):
    calls = []

    def stopped(cfg, resume, overwrite):
        calls.append(cfg.run.out_dir)
        return {"start": {}, "stopped_at": 1}

    b, _ = _stages(tmp_path / "s", train=stopped)
    assert not (tmp_path / "s" / "a" / "stage.json").exists()
    assert b.name == "a" and calls == [str(tmp_path / "s" / "a")]  # the stopped stage ends the verb
    b, _ = _stages(tmp_path / "r1", world=SimpleNamespace(is_main=False))
    assert b.result == {"final": {"steps": 2}} and not (tmp_path / "r1").exists()


def test_a_model_from_outside_the_folder_counts_after_an_earlier_stage(tmp_path):
    """The model an earlier stage made is named by `after`; one from elsewhere is part of the config."""
    stages = Stages(tmp_path, None, resume=True, overwrite=False)
    cfg = Cfg(run=Run(out_dir=str(tmp_path / "b")))
    assert stages.digest("b", cfg, "d") != stages.digest("b", cfg.model_copy(update={"model": Model(name="x")}), "d")
    inside = [Cfg(model=Model(name=str(tmp_path / f / "final")), run=cfg.run) for f in ("a", "c")]
    assert stages.digest("b", inside[0], "d") == stages.digest("b", inside[1], "d")
    assert stages.digest("b", inside[0], "") != stages.digest("b", inside[1], "")
    assert not (tmp_path / "config.yaml").exists()  # no config of its own (the demo)
