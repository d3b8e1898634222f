"""`tempering synth run|check|export-seeds` end to end: output folder, summary, and bad input (clear error, nothing written)."""

import json

import pytest

from tempering.cli import main
from tempering.synth.seeds import load_seeds


@pytest.fixture
def rates(tmp_path, seeds):
    path = tmp_path / "rates.json"
    path.write_text(json.dumps({s.name: r for s, r in zip(seeds, [0.9, 0.6, 0.2, 1.0, 0.5, 0.1, 0.75, 0.3, 0.0])}))
    return path


def test_synth_writes_verified_bundles_and_a_summary(tmp_path, rates, capsys):
    out = tmp_path / "out"
    rc = main(
        [
            "synth",
            "run",
            "--seeds",
            "builtin",
            "--pass-rates",
            str(rates),
            "--out",
            str(out),
            "target=2",
            "--no-progress",
            "sandbox=subprocess",
            "portfolio.lam=0.3",
        ]
    )
    assert rc == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["summary"]["accepted"] == 2 and summary["summary"]["attempts_per_accepted"] == 1.0
    names = sorted(p.name for p in (out / "bundles").iterdir())
    assert names == sorted(b["bundle"] for b in summary["bundles"])
    assert len(load_seeds(out / "bundles")) == 2  # the output folder is itself a seed folder
    assert "portfolio:\n  eps: 1.0e-06\n  lam: 0.3" in (out / "config.yaml").read_text()
    assert (out / "events.jsonl").read_text().count("\n") == 2
    assert "accepted" in capsys.readouterr().out


def test_export_seeds_then_check_one(tmp_path, capsys):
    assert main(["synth", "export-seeds", str(tmp_path / "seeds")]) == 0
    first = sorted((tmp_path / "seeds").iterdir())[0]
    assert main(["synth", "check", str(first), "sandbox=subprocess"]) == 0
    assert "accepted (ok, sandbox)" in capsys.readouterr().out


def test_check_a_folder_gives_a_table_and_goes_past_bad_bundles(tmp_path, capsys):
    import shutil

    from tempering.envs.terminal import SAMPLES

    shutil.copytree(SAMPLES / "csv-revenue", tmp_path / "good")
    shutil.copytree(SAMPLES / "csv-revenue", tmp_path / "apt")
    (tmp_path / "apt" / "environment" / "Dockerfile").write_text("FROM ubuntu:24.04\nRUN apt-get install -y jq\n")
    (tmp_path / "junk").mkdir()
    assert main(["synth", "check", str(tmp_path)]) == 1  # not every bundle passed
    out = " ".join(capsys.readouterr().out.split())
    assert "good │ accepted (ok, sandbox)" in out and "apt │ needs docker" in out
    assert "junk │ not loaded │ not a task folder" in out


@pytest.mark.parametrize(
    "extra,message",
    [
        (["generator=llm", "chat.base_url=http://127.0.0.1:9/v1"], "cannot reach the generator endpoint"),
        (["coverage.sql=1"], "skill 'sql'"),
        (["no_such_key=1"], "unknown key 'no_such_key'"),
        (["chat.model=m"], "chat.* settings have no effect unless generator=llm"),
        (["max_new_tokens=8"], "max_new_tokens has no effect without --policy"),
        (["--base-url", "http://h/v1"], "--base-url http://h/v1 is no longer accepted: use chat.base_url=http://h/v1"),
        (["--generator=llm"], "use generator=llm"),
    ],
)
def test_bad_input_is_a_clear_error_and_writes_nothing(tmp_path, rates, capsys, extra, message):
    out = tmp_path / "out"
    rc = main(
        [
            "synth",
            "run",
            "--seeds",
            "builtin",
            "--pass-rates",
            str(rates),
            "--out",
            str(out),
            "--no-progress",
            "sandbox=subprocess",
            *extra,
        ]
    )
    assert rc == 2 and message in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rates.json"]


def test_pass_rate_file_errors(tmp_path, capsys):
    bad = tmp_path / "r.json"
    bad.write_text('{"ledger-shop-sum-d1-1812ca": 1.5}')
    rc = main(["synth", "run", "--seeds", "builtin", "--pass-rates", str(bad), "--out", str(tmp_path / "o")])
    assert rc == 2 and "has no rate for seed(s)" in capsys.readouterr().err
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "x").write_text("")
    rc = main(["synth", "run", "--seeds", "builtin", "--pass-rates", str(bad), "--out", str(tmp_path / "o")])
    assert rc == 2 and "exists and is not empty" in capsys.readouterr().err


def test_synth_on_configurations_measures_with_a_policy(tmp_path, capsys):
    out = tmp_path / "out"
    rc = main(
        [
            "synth",
            "run",
            "--seeds",
            "builtin-tasks",
            "--policy",
            "tiny-xs",
            "--out",
            str(out),
            "target=3",
            "--no-progress",
            "max_new_tokens=4",
            "rollouts=2",
            "measure_tasks=2",
            "config_checks.tasks=32",
        ]
    )
    assert rc == 0
    summary = json.loads((out / "summary.json").read_text())
    rows = summary["bundles"]
    assert summary["summary"]["accepted"] == 3 and all(0 <= r["measured"] <= 1 for r in rows)
    assert summary["summary"]["measured_pass_rate_mean"] is not None
    from tempering.synth.task_seeds import builtin_task_seeds, load_task_seeds

    assert [c.name for c in load_task_seeds(out / "configs.json")] == [r["config"] for r in rows]
    rates = json.loads((out / "seed_pass_rates.json").read_text())
    assert list(rates) == [s.name for s in builtin_task_seeds()]
    assert not (out / "bundles").exists()
    assert "accepted" in capsys.readouterr().out


@pytest.mark.parametrize(
    "extra,message",
    [
        (["--policy", "tiny-xs", "generator=llm"], "configurations are synthesised by the built-in mutators"),
        (["--policy", "no/such/model"], "neither a built-in model"),
    ],
)
def test_bad_configuration_runs_write_nothing(tmp_path, capsys, extra, message):
    rc = main(["synth", "run", "--seeds", "builtin-tasks", "--out", str(tmp_path / "out"), "--no-progress", *extra])
    assert rc == 2 and message in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_pass_rates_or_policy_is_required(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["synth", "run", "--seeds", "builtin-tasks", "--out", str(tmp_path / "out")])
    assert "one of the arguments --pass-rates --policy is required" in capsys.readouterr().err


def test_check_takes_its_settings_as_keys(tmp_path, capsys):
    assert main(["synth", "check", str(tmp_path), "--backend", "docker"]) == 2
    assert "--backend docker is no longer accepted: use backend=docker" in capsys.readouterr().err
    assert main(["synth", "check", str(tmp_path), "backend=podman"]) == 2
    assert "backend" in capsys.readouterr().err
    assert main(["synth", "check", str(tmp_path), "backend=docker", "sandbox=bwrap"]) == 2
    assert "sandbox=bwrap has no effect with backend=docker" in capsys.readouterr().err
