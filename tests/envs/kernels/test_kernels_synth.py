"""CUDA Agent-style synthesis: compositions, filters, de-duplication and the manifest."""

import json

import pytest

from tempering.envs.kernels.problems import builtin_problems, load_problems
from tempering.envs.kernels.synth import SynthConfig, check_problem, synthesize

TEMPLATE = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        {body}
        return x


batch_size = 512
dim0 = 2048


def get_inputs():
    return [torch.randn(batch_size, dim0)]


def get_init_inputs():
    return []
"""


def test_filters_reject_stochastic_constant_and_input_independent_problems():
    cfg = SynthConfig(check_compile=False, min_ms=0.0, max_ms=1e9)
    assert check_problem(TEMPLATE.format(body="x = torch.relu(x) * 2.0"), cfg)[0] == "ok"
    assert (
        check_problem(TEMPLATE.format(body="x = torch.nn.functional.dropout(x, 0.2, training=True)"), cfg)[0]
        == "nondeterministic"
    )
    assert check_problem(TEMPLATE.format(body="x = x * 0.0"), cfg)[0] == "constant_output"
    assert check_problem(TEMPLATE.format(body="x = torch.ones_like(x).cumsum(-1)"), cfg)[0] == "input_independent"
    assert check_problem(TEMPLATE.format(body="x = torch.log(x - 100.0)"), cfg)[0] == "non_finite"
    assert check_problem(TEMPLATE.format(body="x = undefined(x)"), cfg)[0] == "eager_error"
    assert (
        check_problem(TEMPLATE.format(body="x = x + 1"), SynthConfig(check_compile=False, min_ms=1e6))[0]
        == "outside_time_window"
    )


@pytest.mark.slow
def test_synthesize_writes_loadable_problems_and_a_manifest(tmp_path):
    cfg = SynthConfig(n=12, seed=1, check_compile=False, min_ms=0.0, max_ms=1e9)
    manifest = synthesize(cfg, tmp_path, builtin_problems())
    stats = manifest["stats"]
    assert stats["tried"] == 12 and stats["kept"] + sum(stats["rejected"].values()) == 12
    assert stats["kept"] >= 1
    on_disk = json.loads((tmp_path / "manifest.json").read_text())
    assert on_disk == json.loads(json.dumps(manifest))
    problems, skipped = load_problems(tmp_path)
    assert skipped == {} and sorted(p.name for p in problems) == sorted(p["name"] for p in manifest["problems"])
    assert all(p["max_eval_similarity"] <= 0.9 for p in manifest["problems"])


@pytest.mark.slow
def test_near_duplicates_of_evaluation_problems_are_dropped(tmp_path):
    # With the kept problems themselves as the evaluation set, a second run with the same seed keeps nothing.
    cfg = SynthConfig(n=6, seed=2, check_compile=False, min_ms=0.0, max_ms=1e9)
    first = synthesize(cfg, tmp_path / "a", [])
    evals = load_problems(tmp_path / "a")[0]
    second = synthesize(cfg, tmp_path / "b", evals)
    assert second["stats"]["kept"] == 0
    assert second["stats"]["rejected"].get("similar_to_eval", 0) >= first["stats"]["kept"] >= 1
