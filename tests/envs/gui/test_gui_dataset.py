"""The data pipeline: scripted agents write JSONL trajectories with multi-solution annotations; the
reader rejects bad files with the line and the fix; metrics are plain shares over the records."""

import json

import pytest

from tempering.cli import main as cli
from tempering.envs.gui.action import Action, format_output
from tempering.envs.gui.agents import ModelAgent, NoisyAgent, OracleAgent, make_agent
from tempering.envs.gui.dataset import generate, read_dataset, score_output, states, write_jsonl
from tempering.envs.gui.env import GuiFamily
from tempering.envs.gui.metrics import format_rate, step_success, summarize, task_success
from tempering.errors import UserError


def test_oracle_trajectories_are_optimal_and_annotated(tmp_path):
    fam = GuiFamily(difficulty=1)
    recs = generate(fam, OracleAgent(seed=1), 12, "train", seed=1)
    assert all(r["success"] and len(r["steps"]) == r["optimal_steps"] for r in recs)
    for r in recs:
        for s in r["steps"]:
            assert s["valid"] and s["format_ok"] and s["status"] == "valid"
            assert Action.from_json(s["action"]) in [Action.from_json(a) for a in s["valid_actions"]]
            assert s["plan"] and s["screen"]["elements"] and s["prompt"].startswith("Task: ")
    path = tmp_path / "d.jsonl"
    write_jsonl(path, recs)
    assert read_dataset(path) == json.loads(json.dumps(recs))
    assert summarize(recs)["step_success"] == 1.0 and summarize(recs)["multi_solution_steps"] > 0


def test_noisy_agent_makes_mistakes_and_malformed_outputs():
    recs = generate(GuiFamily(), NoisyAgent(p_wrong=0.4, p_malformed=0.3, seed=0), 30, seed=0)
    m = summarize(recs)
    assert 0 < m["format_rate"] < 1 and 0 < m["step_success"] < 1
    statuses = {s["status"] for r in recs for s in r["steps"]}
    assert {"parse_error", "invalid", "valid"} <= statuses


def test_model_agent_sees_only_the_prompt():
    seen = []

    def generate_text(prompt: str) -> str:
        seen.append(prompt)
        return "not json"

    recs = generate(GuiFamily(kinds=("form",)), ModelAgent(generate_text), 1)
    assert seen and all(p.startswith("Task: ") and "Hint" not in p for p in seen)
    assert recs[0]["steps"][0]["status"] == "parse_error" and not recs[0]["success"]


def test_metrics_on_hand_made_records():
    recs = [
        {
            "success": True,
            "steps": [
                {"valid": True, "format_ok": True, "valid_actions": [1, 2]},
                {"valid": True, "format_ok": True, "valid_actions": [1]},
            ],
        },
        {
            "success": False,
            "steps": [
                {"valid": False, "format_ok": False, "valid_actions": [1]},
                {"valid": True, "format_ok": True, "valid_actions": [1, 2, 3]},
                {"valid": False, "format_ok": True, "valid_actions": [1]},
            ],
        },
    ]
    assert step_success(recs) == pytest.approx(3 / 5)
    assert task_success(recs) == 0.5
    assert format_rate(recs) == pytest.approx(4 / 5)
    assert summarize(recs)["multi_solution_steps"] == 2
    assert summarize(recs)["multi_solution_step_success"] == 1.0  # both multi-solution steps were valid
    wrong = {"success": False, "steps": [{"valid": False, "format_ok": True, "valid_actions": [1, 2]}]}
    assert summarize(recs + [wrong])["multi_solution_step_success"] == pytest.approx(2 / 3)
    assert step_success([]) == 0.0 and task_success([]) == 0.0


def test_state_samples_and_scoring():
    recs = generate(GuiFamily(kinds=("todo",)), OracleAgent(), 3)
    samples = states(recs)
    assert len(samples) == sum(len(r["steps"]) for r in recs)
    multi = states(recs, multi_only=True)
    assert multi and all(len(s.valid) > 1 for s in multi)
    s = multi[0]
    good = format_output(s.valid[-1], s.plan)  # any valid action, not just the first, scores fully
    assert score_output(good, s).total == pytest.approx(1.0)
    assert score_output("nope", s).total == 0.0


def test_read_dataset_rejects_bad_files(tmp_path):
    recs = generate(GuiFamily(kinds=("settings",)), OracleAgent(), 2)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(recs[0]) + "\n{oops\n")
    with pytest.raises(UserError, match=r"bad.jsonl:2: not valid JSON"):
        read_dataset(bad)
    no_valid = json.loads(json.dumps(recs[1]))
    no_valid["steps"][0]["valid_actions"] = []
    bad.write_text(json.dumps(no_valid) + "\n")
    with pytest.raises(UserError, match=r"bad.jsonl:1: step 1 has no valid actions"):
        read_dataset(bad)
    missing = json.loads(json.dumps(recs[1]))
    del missing["steps"][0]["plan"]
    bad.write_text(json.dumps(missing) + "\n")
    with pytest.raises(UserError, match="step 1 lacks plan"):
        read_dataset(bad)
    with pytest.raises(UserError, match="tempering gui generate"):
        read_dataset(tmp_path / "absent.jsonl")
    with pytest.raises(UserError, match="unknown agent"):
        make_agent("human")


def test_cli_generate_show_stats(tmp_path, capsys):
    out = tmp_path / "sub" / "gui.jsonl"
    assert cli(["gui", "generate", "--out", str(out), "--n", "6", "--seed", "3", "--agent", "noisy"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["episodes"] == 6 and out.is_file()
    assert not [p for p in out.parent.iterdir() if p.name.endswith(".tmp")]
    assert cli(["gui", "stats", str(out)]) == 0
    assert json.loads(capsys.readouterr().out) == {k: v for k, v in summary.items() if k != "out"}
    assert cli(["gui", "show", "--kind", "files"]) == 0
    assert "valid actions:" in capsys.readouterr().out
    assert cli(["gui", "generate", "--out", str(out), "--kinds", "form,paint"]) == 2
    assert "unknown app kinds ['paint']" in capsys.readouterr().err
