"""Every line of the README's command-line block runs as written, in order, from a fresh folder (with
arguments appended that shrink the work): one command's output feeds the next as it would for a user."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("ux", ROOT / "benchmarks" / "ux.py")
ux = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ux)

pytestmark = pytest.mark.slow


def test_the_readme_block_is_found_and_every_line_is_a_tempering_command():
    lines = ux.readme_commands()
    assert len(lines) >= 10
    assert all(ln.startswith("tempering ") and "#" not in ln for ln in lines)


def test_shrinking_appends_to_the_verb_it_runs():
    assert ux.shrunk(["train", "--resume", "runs/x"])[-2:] == ["run.steps=3", "run.progress=false"]
    launched = ux.shrunk(["launch", "--nproc-per-node", "2", "distill", "cfg.yaml"])
    assert launched[-len(ux.TRAIN_SHRINK) :] == ux.TRAIN_SHRINK


def test_every_readme_command_runs_in_order(tmp_path):
    """The lines in ux.SLOW are run by benchmarks/ux.py (docs/results/ux.md) and covered where SLOW says."""
    rows = ux.run_readme(tmp_path, skip_slow=True)
    assert len(rows) >= len(ux.readme_commands()) - len(ux.SLOW)
    failed = [(r["command"], r["stderr_tail"]) for r in rows if r["exit"]]
    assert not failed, failed
