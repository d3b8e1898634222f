"""A training run reports as it goes: summary, plain lines, evaluation lines, curves redrawn on schedule;
`tempering eval RUN` evaluates with the run's own settings."""

import json

import pytest

from tempering.cli import main as cli
from tempering.recipes import eval as eval_verb
from tempering.recipes.runner import run
from tempering.runlog import RunLog

CFG = {
    "model": {"name": "tiny-xs"},
    "task": {"family": "arithmetic", "args": {"min_value": 0, "max_value": 9}, "train_size": 40, "heldout_size": 4},
    "rollout": {"group_size": 2, "prompts_per_step": 2, "max_new_tokens": 3},
    "run": {
        "steps": 2,
        "eval_every": 1,
        "eval_size": 2,
        "eval_k": 2,
        "checkpoint_every": 1,
        "log_every": 1,
        "progress": False,
        "tensorboard": False,
    },
}


@pytest.mark.slow
def test_a_run_prints_a_summary_steps_and_evaluations_and_redraws_its_curves(tmp_path, capsys, monkeypatch):
    drawn = []
    real_plot = RunLog.plot
    monkeypatch.setattr(RunLog, "plot", lambda self, *a, **k: drawn.append(len(self.read_metrics())) or real_plot(self))
    cfg = {**CFG, "run": {**CFG["run"], "out_dir": str(tmp_path)}}
    run("train", cfg)
    out = capsys.readouterr().out
    assert "model       tiny-xs (" in out and f"run folder  {tmp_path}\n" in out
    assert "start evaluation at step 0 (4 prompts): pass@1 " in out
    assert "step 1/2  reward " in out and "step 2/2  reward " in out and "s/step  ETA" in out
    assert "eval at step 1 (2 prompts)" in out and "final evaluation at step 2 (4 prompts)" in out
    # redrawn after the evaluation and the checkpoint of step 1, before the run ended
    assert drawn[0] < drawn[-1] and len(drawn) >= 4
    assert (tmp_path / "curves.png").is_file()
    rows = [json.loads(ln) for ln in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["eval/n"] for r in rows if "eval/pass@1" in r] == [4, 2, 4]

    run("train", {**cfg, "run": {**cfg["run"], "steps": 3}}, resume=True)
    assert f"run folder  {tmp_path} (resuming from step 2)" in capsys.readouterr().out


def _args(*argv):
    return eval_verb._parser().parse_args(list(argv))


def test_eval_takes_the_run_settings_and_flags_override_them(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoints" / "step_3" / "model").mkdir(parents=True)
    cfg = {
        "model": {"name": "tiny-xs", "use_chat_template": False, "system_prompt": "be brief"},
        "task": {"family": "strings", "args": {"ops": ["reverse"]}, "heldout_size": 12, "data_seed": 5},
        "rollout": {"max_new_tokens": 24, "temperature": 0.7, "max_turns": 1, "feedback_template": "<{feedback}>"},
        "run": {"eval_k": 4, "eval_max_turns": 3},
    }
    (run / "config.yaml").write_text(json.dumps(cfg))
    s, source = eval_verb.settings(_args(str(run / "checkpoints" / "step_3" / "model")))
    assert source == f"settings of {(run / 'config.yaml').resolve()}"
    assert {k: s[k] for k in ("task", "args", "n", "data_seed", "max_new_tokens", "temperature", "max_turns", "k")} == {
        "task": "strings",
        "args": {"ops": ["reverse"]},
        "n": 12,
        "data_seed": 5,
        "max_new_tokens": 24,
        "temperature": 0.7,
        "max_turns": 3,  # the run's evaluation turn limit
        "k": 4,
    }
    assert (s["chat_template"], s["system_prompt"], s["feedback_template"]) == (False, "be brief", "<{feedback}>")
    s, _ = eval_verb.settings(_args(str(run), "--max-new-tokens", "5", "--arg", "max_len=4", "--k", "2"))
    assert (s["max_new_tokens"], s["k"], s["args"]) == (5, 2, {"ops": ["reverse"], "max_len": 4})
    s, _ = eval_verb.settings(_args(str(run), "--task", "arithmetic"))  # another task: none of the run's arguments
    assert (s["task"], s["args"], "n" in s, s["max_new_tokens"]) == ("arithmetic", {}, False, 24)
    s, source = eval_verb.settings(_args("tiny-xs"))
    assert (source, s["task"], s["max_new_tokens"], s["k"]) == ("defaults for a bare model", "arithmetic", 16, 8)


@pytest.mark.slow
def test_eval_of_a_run_reproduces_its_final_evaluation(pretrained_dir, tmp_path, capsys):
    out = tmp_path / "run"
    cfg = {
        **CFG,
        "model": {"name": str(pretrained_dir)},
        "task": {
            "family": "arithmetic",
            "args": {"min_value": 0, "max_value": 30},
            "train_size": 200,
            "heldout_size": 30,
        },
        "rollout": {"group_size": 2, "prompts_per_step": 2, "max_new_tokens": 4},
        "run": {
            **{k: v for k, v in CFG["run"].items() if k != "eval_size"},
            "steps": 1,
            "eval_every": 0,
            "out_dir": str(out),
        },
    }
    cfg["run"]["seed"] = 3  # the evaluation's sampling follows the run's seed
    final = run("train", cfg)["final"]
    assert final["eval/pass@1"] > 0
    assert cli(["eval", str(out), "--json", str(tmp_path / "m.json")]) == 0
    got = json.loads((tmp_path / "m.json").read_text())
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    last = [r for r in rows if "eval/pass@1" in r][-1]
    assert last["step"] == 1 and last["eval/n"] == 30
    # greedy and sampled: same tasks, same settings, same sampling stream, same numbers
    assert {k: last[f"eval/{k}"] for k in got} == got
    assert {"pass@1", "pass@1_sampled", "pass@2"} <= set(got)
    assert "settings of" in capsys.readouterr().out
    assert cli(["eval", str(out), "--max-new-tokens", "1", "--json", str(tmp_path / "short.json")]) == 0
    assert json.loads((tmp_path / "short.json").read_text())["pass@1"] < got["pass@1"]


@pytest.mark.slow
def test_a_dataset_too_small_to_hold_out_is_refused_and_a_small_one_says_what_it_holds_out(tmp_path, capsys):
    from tempering.errors import UserError

    def cfg(rows: int, out: str) -> dict:
        data = tmp_path / f"{rows}.jsonl"
        data.write_text("".join(json.dumps({"prompt": f"{i}+0=", "answer": str(i)}) + "\n" for i in range(rows)))
        task = {"family": "dataset", "args": {"train": str(data), "reward": "exact"}, "heldout_size": 500}
        return {**CFG, "task": task, "run": {**CFG["run"], "steps": 1, "out_dir": str(tmp_path / out)}}

    with pytest.raises(UserError, match=r"gave 1 training and no held-out tasks; evaluation needs at least one"):
        run("train", cfg(1, "one"))
    assert not (tmp_path / "one").exists()
    run("train", cfg(12, "twelve"))  # 10% of 12 distinct prompts, rounded: 1
    out = capsys.readouterr().out
    assert "11 train / 1 held-out prompts (all it holds out; task.heldout_size=500)" in out
