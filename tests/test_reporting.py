"""What a run shows while it goes: plain lines off a terminal, evaluation lines, warnings, curves."""

import io
import json

import pytest

from tempering.errors import UserError
from tempering.progress import Reporter, Watch
from tempering.runlog import RunLog, ema, panels, plot_curves, series

STEP = {"reward": 0.5, "success": 0.25, "entropy": 1.25, "grad_norm": 0.5, "distill/reverse_kl": 0.125}


def test_plain_lines_every_log_every_steps_with_the_method_objective():
    out = io.StringIO()
    with Reporter(5, "distill", log_every=2, bar=False, objective="distill/reverse_kl", lines=True, out=out) as r:
        for s in range(1, 6):
            r.step(s, STEP)
        r.evaluation(5, {"eval/pass@1": 0.75, "eval/n": 4}, 4, "final evaluation")
    lines = out.getvalue().splitlines()
    assert [ln.split()[1] for ln in lines[:3]] == ["2/5", "4/5", "5/5"]  # every 2 steps, and the last
    assert "reward 0.500  success 0.250  entropy 1.250  grad_norm 0.500  distill/reverse_kl 0.125" in lines[0]
    assert "s/step  ETA " in lines[0]
    assert lines[3] == "final evaluation at step 5 (4 prompts): pass@1 0.750"


def test_slow_steps_get_a_line_each_minute_and_given_answers_no_reward():
    """Steps of minutes are logged on time too (a file gets a line at least every log_seconds); a supervised
    method's step reward scores the given answers, not the model, so its line leaves it out."""
    now, out = [0.0], io.StringIO()
    r = Reporter(
        100, "pretrain", log_every=50, bar=False, objective="nll", lines=True, out=out, hide=("reward", "success")
    )
    r._clock = lambda: now[0]
    with r:
        for s in range(1, 5):
            now[0] = 40.0 * s
            r.step(s, {**STEP, "nll": 2.0})
    lines = out.getvalue().splitlines()
    assert [ln.split()[1] for ln in lines] == ["2/100", "4/100"]  # 80 s and 160 s: over a minute since the last
    assert "reward" not in lines[0] and "success" not in lines[0] and "nll 2.000" in lines[0]


def test_the_eta_counts_the_evaluations_still_due_from_the_first_step():
    """4 steps, an evaluation of 10 prompts every 2 steps and a final one of 20: the start-up evaluation
    (20 prompts in 10 s) prices them at 0.5 s a prompt before any periodic evaluation ran."""
    now = [0.0]
    r = Reporter(
        4, "grpo", bar=False, lines=True, out=io.StringIO(), eval_every=2, eval_prompts=10, final_eval_prompts=20
    )
    r._clock = lambda: now[0]
    now[0] = 10.0
    r.evaluation(0, {"eval/pass@1": 0.5}, 20, "start evaluation", seconds=10.0)
    with r:
        now[0] = 13.0
        r.step(1, STEP)
        assert r.seconds_left(1) == pytest.approx(3 * 3 + 0.5 * (10 + 20))
        now[0] = 16.0
        r.step(2, STEP)
        now[0] = 22.0  # a 6 s evaluation of 10 prompts: not counted as step time
        r.evaluation(2, {"eval/pass@1": 0.5}, 10, seconds=6.0)
        now[0] = 25.0
        r.step(3, STEP)
        assert r.seconds_per_step(3) == pytest.approx(3.0)
        assert r.seconds_left(3) == pytest.approx(3.0 + 16 / 30 * 20)


def test_no_plain_lines_on_a_terminal_or_when_log_every_is_zero():
    out = io.StringIO()
    for r in (
        Reporter(3, "x", log_every=1, bar=False, lines=False, out=out),
        Reporter(3, "x", log_every=0, bar=False, lines=True, out=out),
    ):
        r.step(1, STEP)
    assert out.getvalue() == ""


def test_a_run_without_learning_signal_is_flagged_once():
    w = Watch(patience=3)
    flat = {"reward": 0.0, "success": 0.0, "frac_zero_adv_groups": 1.0, "grad_norm": 0.0}
    assert w.check(flat) == [] and w.check(flat) == []
    (msg,) = w.check(flat)
    assert "no learning signal for 3 steps" in msg and "too hard" in msg
    assert w.check(flat) == []  # once
    w2 = Watch(patience=2)
    w2.check({"frac_zero_adv_groups": 1.0})
    assert w2.check({"frac_zero_adv_groups": 0.5}) == []  # the streak is broken
    assert w2.check({"frac_zero_adv_groups": 1.0}) == []
    moving = {"frac_zero_adv_groups": 0.0, "grad_norm": 0.0}
    w3 = Watch(patience=2)
    assert w3.check(moving) == [] and "gradient norm has been 0" in w3.check(moving)[0]


ROWS = [
    {"step": 0, "eval/pass@1": 0.1, "eval/n": 8},
    {"step": 1, "reward": 0.2, "approx_kl": 0.0, "reward/math": 0.5, "reward/format": 1.0},
    {"step": 2, "reward": 0.4, "approx_kl": 0.0, "reward/math": 0.7, "reward/format": 1.0},
    {"step": 2, "eval/pass@1": 0.3, "eval/n": 2},
    {"step": 4, "eval/pass@1": 0.2, "eval/n": 8},
]


def test_panels_expand_patterns_and_drop_flat_ones_except_reward_and_evaluations():
    assert panels(ROWS, ["reward", "reward/*", "eval/pass@*", "approx_kl", "missing"]) == [
        "reward",
        "reward/math",
        "eval/pass@1",
    ]
    flat = [{"step": 1, "reward": 0.0, "eval/pass@1": 0.0}, {"step": 2, "reward": 0.0, "eval/pass@1": 0.0}]
    assert panels(flat, ["reward", "eval/pass@1"]) == ["reward", "eval/pass@1"]


def test_evaluations_on_different_set_sizes_are_separate_series(tmp_path):
    assert series(ROWS, "eval/pass@1") == {2: [(2, 0.3)], 8: [(0, 0.1), (4, 0.2)]}
    assert series(ROWS, "reward") == {None: [(1, 0.2), (2, 0.4)]}
    import matplotlib.axes

    drawn, plot = [], matplotlib.axes.Axes.plot

    def spy(ax, *a, **kw):
        drawn.append((ax.get_title() or "?", kw.get("label"), kw.get("linestyle")))
        return plot(ax, *a, **kw)

    with pytest.MonkeyPatch.context() as m:
        m.setattr(matplotlib.axes.Axes, "plot", spy)
        out = plot_curves(ROWS, ["reward", "eval/pass@1"], tmp_path / "c.png", "run · grpo · tiny-xs")
    assert out is not None and out.read_bytes()[:4] == b"\x89PNG"
    styles = {label: style for _, label, style in drawn}
    assert styles == {None: "-", "2 prompts": ":", "8 prompts": "none"}  # the full evaluations: markers only
    assert plot_curves(ROWS, ["missing"], tmp_path / "none.png") is None


def test_smoothing_is_tensorboards_debiased_moving_average_and_leaves_evaluations_as_markers(tmp_path):
    # w = 0.5 over 0, 1, 1: (0.5 * 0) / 0.5, (0.25 * 0 + 0.5) / 0.75, (0.125 * 0 + 0.25 + 0.5) / 0.875
    assert ema([0.0, 1.0, 1.0], 0.5) == pytest.approx([0.0, 2 / 3, 6 / 7])
    assert ema([3.0] * 5, 0.9) == pytest.approx([3.0] * 5)  # no pull towards 0 at the start
    assert ema([1.0, 5.0], 0.0) == [1.0, 5.0]
    import matplotlib.axes

    drawn, plot = [], matplotlib.axes.Axes.plot

    def spy(ax, *a, **kw):
        drawn.append((kw.get("label"), kw.get("linestyle"), [float(y) for y in a[1]]))
        return plot(ax, *a, **kw)

    with pytest.MonkeyPatch.context() as m:
        m.setattr(matplotlib.axes.Axes, "plot", spy)
        plot_curves(ROWS, ["reward", "eval/pass@1"], tmp_path / "c.png", smooth=0.5)
    assert drawn == [
        (None, "-", [0.2, 0.4]),  # the raw per-step curve (faint), then its average over it
        ("EMA 0.5", None, pytest.approx(ema([0.2, 0.4], 0.5))),
        ("2 prompts", ":", [0.3]),
        ("8 prompts", "none", [0.1, 0.2]),  # the full evaluations: markers only, never smoothed
    ]


def test_runlog_plots_its_own_keys_with_its_title(tmp_path, monkeypatch):
    seen = {}
    monkeypatch.setattr(
        "tempering.runlog.plot_curves", lambda rows, keys, out, title: seen.update(keys=keys, title=title)
    )
    log = RunLog(tmp_path, {}, tensorboard=False, title="r · m · x", plots=["reward"])
    log.log(1, {"reward": 1.0})
    log.plot()
    assert seen == {"keys": ["reward"], "title": "r · m · x"}
    assert json.loads((tmp_path / "metrics.jsonl").read_text()) == {"step": 1, "reward": 1.0}


@pytest.mark.slow
def test_wandb_offline_logs_each_row_and_a_resumed_run_continues_the_same_run(tmp_path, monkeypatch):
    wandb = pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    log = RunLog(tmp_path, {"run": {"steps": 2}}, tensorboard=False, wandb="tempering-tests")
    log.log(1, {"reward": 0.5, "note": "text is not logged"})
    run_id = (tmp_path / "wandb_id").read_text().strip()
    assert log.wandb.id == run_id and log.wandb.project == "tempering-tests"
    log.close()
    runs = list((tmp_path / "wandb").glob(f"offline-run-*-{run_id}"))
    assert len(runs) == 1 and list(runs[0].glob("*.wandb"))
    again = RunLog(tmp_path, {}, resume_step=1, tensorboard=False, wandb="tempering-tests")
    assert again.wandb.id == run_id
    again.close()
    assert wandb.run is None


def test_wandb_without_the_package_says_how_to_install_it(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "wandb", None)
    with pytest.raises(UserError, match=r"tempering\[wandb\]"):
        RunLog(tmp_path, {}, tensorboard=False, wandb="p")


@pytest.mark.slow
def test_trackio_gets_every_metric_row_and_the_samples_table_and_a_resume_continues_its_run(tmp_path):
    pytest.importorskip("trackio")
    import os
    import subprocess
    import sys

    env = {**os.environ, "TRACKIO_DIR": str(tmp_path / "trackio")}
    run = tmp_path / "run"
    args = ["model.name=tiny-xs", "task.train_size=16", "task.heldout_size=2", "rollout.prompts_per_step=2"]
    args += ["rollout.group_size=2", "rollout.max_new_tokens=3", "run.eval_every=0", "run.progress=false"]
    args += ["run.trackio=tempering-tests", f"run.out_dir={run}", "run.checkpoint_every=1", "run.tensorboard=false"]
    for extra in (["run.steps=2"], ["--resume", str(run), "run.steps=3"]):
        argv = extra if extra[0] == "--resume" else [*args, *extra]
        r = subprocess.run(
            [sys.executable, "-m", "tempering.cli", "train", *argv], env=env, capture_output=True, text=True
        )
        assert r.returncode == 0, r.stderr[-2000:]
        assert f"the trained model: {run / 'final'}" in r.stdout and f"tempering view {run}" in r.stdout
    name = (run / "trackio_run").read_text().strip()
    code = (
        "import json; from trackio.sqlite_storage import SQLiteStorage as S; "
        f"print(json.dumps(S.get_logs('tempering-tests', {name!r}), default=str))"
    )
    logs = json.loads(
        subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    )
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    for row in rows:  # every row of metrics.jsonl, each number as written
        logged = {k: v for x in logs if x["step"] == row["step"] for k, v in x.items()}
        assert all(logged[k] == v for k, v in row.items() if isinstance(v, (int, float)) and v is not None)
    tables = [x["samples"] for x in logs if "samples" in x]
    assert [x["step"] for x in logs if "samples" in x] == [1, 2, 3]
    assert tables[0]["_type"] == "trackio.table" and set(tables[0]["_value"][0]) >= {"prompt", "answer", "score"}


def test_trackio_without_the_package_says_how_to_install_it(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "trackio", None)
    with pytest.raises(UserError, match=r"tempering\[trackio\]"):
        RunLog(tmp_path, {}, tensorboard=False, trackio="p")
