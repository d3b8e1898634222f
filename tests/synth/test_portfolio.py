"""Scoring check values from the method note, and the portfolio MILP against exact enumeration."""

import math
import random

import pytest

from tempering.synth.portfolio import Candidate, InfeasiblePortfolio, PortfolioConfig, evaluate, solve_portfolio
from tempering.synth.scoring import ACTIONS, Action, frontier_score, predicted_pass_rate, score_actions

INC_D, INC_B = Action("increase", "in_depth"), Action("increase", "in_breadth")
RED_D, DIV_D, DIV_B = Action("reduce", "in_depth"), Action("diversify", "in_depth"), Action("diversify", "in_breadth")


def test_note_check_values():
    pt = predicted_pass_rate(0.747, INC_D)
    assert pt == pytest.approx(0.497)
    assert frontier_score(pt) == pytest.approx(0.99989, abs=1e-5)
    pt = predicted_pass_rate(0.0, RED_D)
    assert pt == pytest.approx(0.25)
    assert frontier_score(pt) == pytest.approx(math.exp(-0.78125)) and frontier_score(pt) == pytest.approx(
        0.458, abs=1e-3
    )


def test_breadth_scaling_and_clipping():
    assert predicted_pass_rate(0.5, INC_B) == pytest.approx(0.5 - 0.25 * 0.65)
    assert predicted_pass_rate(0.1, INC_D) == 0.0
    assert predicted_pass_rate(0.9, RED_D) == 1.0
    scores = score_actions(0.5)
    assert scores[DIV_D] == scores[DIV_B] == (0.5, 1.0)


def test_edit_masks_and_order():
    assert RED_D.edit_mask == frozenset("IDSTE")
    assert INC_B.edit_mask == DIV_D.edit_mask == frozenset("IDST")
    assert [a.name for a in ACTIONS][:2] == ["increase/in_depth", "increase/in_breadth"]
    assert Action.parse("reduce/in_breadth") == Action("reduce", "in_breadth")
    with pytest.raises(ValueError):
        Action.parse("grow/in_depth")


def _cands(pass_rates: dict[str, float]) -> list[Candidate]:
    out = []
    for s, p in pass_rates.items():
        for a, (pt, f) in score_actions(p).items():
            out.append(Candidate(s, a, f, pt))
    return out


def test_without_coverage_is_per_seed_argmax_with_logged_tie():
    plan = solve_portfolio(_cands({"a": 0.747, "b": 0.0, "c": 0.5}), n=3)
    chosen = {c.seed: c.action for c in plan.chosen}
    assert chosen["a"] == INC_D  # 0.497
    assert chosen["b"] == RED_D  # 0.25 is the closest reachable
    assert chosen["c"] == DIV_D  # ties with diversify/in_breadth; the earlier action wins
    assert plan.backend == "highs"
    assert any("seed c" in t and "diversify/in_breadth" in t for t in plan.ties)
    assert plan.objective == pytest.approx(frontier_score(0.497) + frontier_score(0.25) + 1.0)
    enum = solve_portfolio(_cands({"a": 0.747, "b": 0.0, "c": 0.5}), n=3, cfg=PortfolioConfig(backend="enumerate"))
    assert [(c.seed, c.action) for c in enum.chosen] == [(c.seed, c.action) for c in plan.chosen]


def test_coverage_hard_and_soft_by_hand():
    f_div_a = frontier_score(0.75)
    cands = [
        Candidate("A", INC_D, 1.0, required=frozenset({"csv"})),
        Candidate("A", DIV_D, f_div_a, required=frozenset({"regex"})),
        Candidate("B", DIV_D, 1.0, required=frozenset({"csv"})),
    ]
    # xi_max = 0.2: one regex task is needed, so A must take the weaker action.
    plan = solve_portfolio(cands, 2, {"regex": 1})
    assert [c.action for c in plan.chosen] == [DIV_D, DIV_D]
    assert plan.objective == pytest.approx(f_div_a + 1.0)
    # xi_max = 1: paying lambda = 0.25 for the slack beats losing 0.54 of frontier score.
    soft = solve_portfolio(cands, 2, {"regex": 1}, PortfolioConfig(xi_max=1.0))
    assert [c.action for c in soft.chosen] == [INC_D, DIV_D]
    assert soft.objective == pytest.approx(2.0 - 0.25) and soft.slack == {"regex": 1.0}


def test_optional_skill_costs_eps_only_when_counted():
    cands = [Candidate("A", DIV_D, 0.9, optional=frozenset({"json"})), Candidate("B", DIV_D, 0.8)]
    plan = solve_portfolio(cands, 2, {"json": 1})
    assert plan.objective == pytest.approx(1.7 - 1e-6, abs=1e-12)
    assert evaluate(plan.chosen, {}, PortfolioConfig())[0] == pytest.approx(1.7)


def test_infeasible_messages_name_the_constraint():
    cands = _cands({"a": 0.3, "b": 0.6})
    with pytest.raises(InfeasiblePortfolio, match="sum x = N.*N=3.*2 seed"):
        solve_portfolio(cands, 3)
    with pytest.raises(InfeasiblePortfolio, match="skill 'sql'"):
        solve_portfolio(cands, 2, {"sql": 1})
    # Each target alone is reachable, both together are not (one seed carries both skills).
    joint = [
        Candidate("a", INC_D, 1.0, required=frozenset({"x"})),
        Candidate("a", RED_D, 1.0, required=frozenset({"y"})),
        Candidate("b", INC_D, 1.0),
    ]
    for backend in ("highs", "enumerate"):
        with pytest.raises(InfeasiblePortfolio, match="'x', 'y'.*together"):
            solve_portfolio(joint, 2, {"x": 1, "y": 1}, PortfolioConfig(backend=backend))


def _random_instance(rng: random.Random):
    skills = ["csv", "json", "regex", "dates"]
    cands = []
    for s in range(rng.randint(2, 4)):
        p = rng.choice([0.0, 0.25, 0.5, 0.75, 1.0, rng.random()])
        for a in rng.sample(ACTIONS, rng.randint(1, 6)):
            pt = predicted_pass_rate(p, a)
            req = frozenset(rng.sample(skills, rng.randint(0, 2)))
            opt = frozenset(rng.sample(skills, rng.randint(0, 2))) - req
            cands.append(Candidate(f"s{s}", a, frontier_score(pt), pt, req, opt))
    cands.sort(key=lambda c: (c.seed, c.action.rank))
    n = rng.randint(1, len({c.seed for c in cands}))
    coverage = {v: rng.choice([0, 1, 1, 2, 1.1]) for v in rng.sample(skills, rng.randint(0, 3))}
    xi_max = rng.choice([0.2, 0.2, 1.0])
    return cands, n, coverage, PortfolioConfig(xi_max=xi_max)


@pytest.mark.slow
def test_highs_equals_enumeration_on_random_instances():
    rng = random.Random(7)
    solved = infeasible = 0
    for _ in range(150):
        cands, n, coverage, cfg = _random_instance(rng)
        results = {}
        for backend in ("highs", "enumerate"):
            cfg.backend = backend
            try:
                results[backend] = solve_portfolio(cands, n, coverage, cfg)
            except InfeasiblePortfolio:
                results[backend] = None
        if results["enumerate"] is None:
            assert results["highs"] is None
            infeasible += 1
            continue
        h, e = results["highs"], results["enumerate"]
        assert h.objective == pytest.approx(e.objective, abs=1e-9)
        assert [(c.seed, c.action) for c in h.chosen] == [(c.seed, c.action) for c in e.chosen]
        cfg.backend = "greedy"
        try:
            g = solve_portfolio(cands, n, coverage, cfg)
            assert g.objective <= e.objective + 1e-9 and len(g.chosen) == n
        except InfeasiblePortfolio:
            pass
        solved += 1
    assert solved > 60 and infeasible > 5  # the generator exercises both outcomes


def test_results_are_deterministic():
    rng = random.Random(3)
    cands, n, coverage, cfg = _random_instance(rng)
    while True:  # first feasible instance of the stream
        try:
            solve_portfolio(cands, n, coverage, cfg)
            break
        except InfeasiblePortfolio:
            cands, n, coverage, cfg = _random_instance(rng)
    first = solve_portfolio(cands, n, coverage, cfg)
    again = solve_portfolio(list(cands), n, dict(coverage), cfg)
    assert first.chosen == again.chosen and first.objective == again.objective
