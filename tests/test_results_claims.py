"""Every results page that states a paper's claim shows the verdicts its JSON holds, and each of those was
computed by the shared rule from the stored per-seed differences; no script types a verdict word."""

import ast
import json
import re
from pathlib import Path

import pytest

from tempering.experiments import RULE, VERDICTS, interval, verdict

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
PAGES = [
    "tcpo",
    "litegui",
    "offpolicy",
    "envs_forge",
    "leap",
    "expand_compress",
    "direct_opd",
    "cuda_agent",
    "grpo_vs_trl",
    "grpo_vs_trl_real",
    "direct_opd_real",
    "tu_opd_real",
]
SCRIPTS = [
    "examples/tcpo/run_tcpo.py",
    "examples/litegui/experiment.py",
    "benchmarks/offpolicy.py",
    "benchmarks/offpolicy_experiment.py",
    "examples/envs_forge/run.py",
    "examples/leap/run_leap.py",
    "examples/expand_compress/experiment.py",
    "examples/expand_compress/union_real.py",
    "examples/direct_opd/weak_to_strong.py",
    "examples/direct_opd/weak_to_strong_real.py",
    "examples/direct_opd/pruned_pair_real.py",
    "examples/expand_compress/specialists_real.py",
    "examples/cuda_agent/run_cuda_agent.py",
    "benchmarks/grpo_vs_trl.py",
    "benchmarks/grpo_vs_trl_real.py",
    "benchmarks/speed_curves.py",
]
WORDS = re.compile(r"\b(reproduced|reproduces|inconclusive|holds|unresolved)\b", re.IGNORECASE)
HEADER = "| claim | a | b | better | a - b (points) | 95% interval | seeds | sign-flip p | verdict |"


def claim_rows(markdown: str) -> tuple[dict[str, list[str]], list[str]]:
    """The rows of the page's claims tables by claim, and every other line."""
    rows: dict[str, list[str]] = {}
    rest, inside = [], False
    for line in markdown.splitlines():
        if line == HEADER:
            inside = True
            continue
        if inside and line.startswith("|"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            if set(cells[0]) != {"-"}:
                assert cells[0] not in rows, f"claim {cells[0]!r} shown twice"
                rows[cells[0]] = cells
            continue
        inside = False
        if line != RULE:
            rest.append(line)
    return rows, rest


@pytest.mark.parametrize("name", PAGES)
def test_each_verdict_comes_from_the_rule_on_the_stored_differences(name):
    data = json.loads((RESULTS / f"{name}.json").read_text())
    gates = data.get("gate", {}).values()
    stopped = bool(gates) and not all(g["passed"] for g in gates)  # a gate that failed stops the experiment
    assert data["claims"] or stopped, f"{name}.json states no claim"
    for key in ("seeds", "command", "machine"):
        assert data.get(key), f"{name}.json has no {key}"
    for text, c in data["claims"].items():
        d = c["difference_points"]
        iv = interval(d["per_seed"])
        assert d["mean"] == pytest.approx(iv.mean), text
        if iv.n > 1:
            assert d["ci95"] == pytest.approx(list(iv.ci95)), text
        word, why = verdict(
            iv, higher_is_better=c["better"] == "higher", margin=c["margin_points"], effect=c["effect_points"]
        )
        assert (c["verdict"], c["why"]) == (word, why), text
        assert c["verdict"] in VERDICTS


@pytest.mark.parametrize("name", PAGES)
def test_the_page_shows_the_json_verdicts_and_types_none(name):
    data = json.loads((RESULTS / f"{name}.json").read_text())
    rows, rest = claim_rows((RESULTS / f"{name}.md").read_text())
    assert set(rows) == set(data["claims"])
    for text, cells in rows.items():
        c = data["claims"][text]
        d = c["difference_points"]
        assert cells[-1] == c["verdict"], text
        assert cells[4] == f"{d['mean']:+.1f}" and cells[6] == str(len(d["per_seed"])), text
        if d["ci95"] is not None:
            assert cells[5] == f"[{d['ci95'][0]:+.1f}, {d['ci95'][1]:+.1f}]", text
    typed = [line for line in rest if WORDS.search(line)]
    assert not typed, f"{name}.md types a verdict word outside its claims table: {typed}"


@pytest.mark.parametrize("rel", SCRIPTS)
def test_no_script_types_a_verdict_word(rel):
    tree = ast.parse((ROOT / rel).read_text())
    typed = [
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and WORDS.search(n.value)
    ]
    assert not typed, f"{rel} types verdict words: {typed}"
