"""The Envs-FORGE experiment script runs end to end with tiny settings and writes both result files
with the same numbers."""

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[2] / "examples" / "envs_forge" / "run.py"


@pytest.mark.slow
def test_experiment_script_with_tiny_settings(tmp_path):
    spec = importlib.util.spec_from_file_location("envs_forge_run", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.MEASURE.update(rollouts=2, tasks=2)
    mod.HELDOUT_PER_SEED = 4
    rc = mod.main(
        [
            "--seeds",
            "0",
            "1",
            "--target",
            "2",
            "--steps",
            "1",
            "--pretrain-steps",
            "2",
            "--work",
            str(tmp_path / "work"),
            "--results",
            str(tmp_path / "results"),
        ]
    )
    assert rc == 0
    data = json.loads((tmp_path / "results" / "envs_forge.json").read_text())
    md = (tmp_path / "results" / "envs_forge.md").read_text()
    for method in ("forge", "few_shot", "self_instruct", "evol"):
        row = data["methods"][method]
        assert row["accepted"] == 2 and row["attempts_per_accepted"] >= 1 and row["tokens_per_accepted"] == 0
        assert set(row["heldout_gain"]) == {"mean", "stdev", "runs"} and len(row["heldout_gain"]["runs"]) == 2
        assert 0 <= row["frontier_share"]["mean"] <= 1 and 0 <= row["measured_pass_rate_mean"]["mean"] <= 1
        gain = row["heldout_gain"]
        assert f"| {method} | 2 |" in md and f"{100 * gain['mean']:+.1f} ± {100 * gain['stdev']:.1f}" in md
    runs = data["runs"]
    assert [r["seed"] for r in runs] == [0, 1]
    assert runs[0]["methods"]["evol"]["configs"][0]["action"] == "increase/in_depth"
    for m, v in data["paired"].items():
        assert v["runs"] == pytest.approx(
            [r["methods"]["forge"]["heldout_gain"] - r["methods"][m]["heldout_gain"] for r in runs]
        )
    # re-rendering recomputes the same tables from the recorded runs
    assert mod.main(["--render", str(tmp_path / "results" / "envs_forge.json")]) == 0
    again = json.loads((tmp_path / "results" / "envs_forge.json").read_text())
    assert again["methods"] == data["methods"] and again["findings"] == data["findings"]
    assert "recomputed from the recorded runs" in (tmp_path / "results" / "envs_forge.md").read_text()
