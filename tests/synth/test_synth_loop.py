"""The loop's bookkeeping with a scripted generator and checker (no sandbox): masks, next-best order,
coverage, accounting."""

import asyncio
from dataclasses import dataclass

from tempering.synth.generators import Generation
from tempering.synth.loop import METHODS, SynthConfig, synthesize
from tempering.synth.seeds import SkillContract


@dataclass(frozen=True)
class Toy:
    name: str
    skills: frozenset = frozenset()

    def contract(self, action):
        if action.name == "reduce/in_depth":
            return None  # impossible from every toy seed
        return SkillContract(self.skills)

    def mutate(self, action, salt=0):
        return Toy(f"{self.name}>{action.name}#{salt}", self.skills)


class ScriptGen:
    name = "script"

    def __init__(self, fail=()):
        self.fail = set(fail)  # (seed, action) pairs that never produce a candidate
        self.calls = []

    def fits(self, seed):
        return True

    async def generate(self, req):
        self.calls.append((req.seed.name, req.action.name, req.failure is not None))
        if (req.seed.name, req.action.name) in self.fail:
            return Generation(None, "scripted failure", tokens=10)
        return Generation(req.seed.mutate(req.action, req.salt), tokens=100)


class OkChecker:
    def static(self, cand, seed, action, required):
        return []

    async def gold(self, cand):
        return True, ""


def run(seeds, rates, gen, **cfg):
    return asyncio.run(synthesize(seeds, rates, gen, OkChecker(), SynthConfig(**cfg)))


def test_forge_picks_the_frontier_action_per_seed():
    seeds = [Toy("hard"), Toy("easy"), Toy("mid")]
    rep = run(seeds, {"hard": 0.0, "easy": 1.0, "mid": 0.5}, ScriptGen(), target=3)
    chosen = {a.seed: a.action.name for a in rep.accepted}
    # reduce/in_depth is ineligible, so the hard seed gets reduce/in_breadth (0.1625 is the nearest to 0.5)
    assert chosen == {"hard": "reduce/in_breadth", "easy": "increase/in_depth", "mid": "diversify/in_depth"}
    assert rep.attempts == 3 and rep.tokens == 300 and rep.plans[0]["backend"] == "highs"


def test_baselines_are_masks_that_ignore_pass_rates():
    seeds = [Toy("a"), Toy("b")]
    for method, (action,) in [(m, acts) for m, acts in METHODS.items() if m != "forge"]:
        rep = run(seeds, {"a": 0.0, "b": 1.0}, ScriptGen(), method=method, target=4)
        assert {a.action for a in rep.accepted} == {action}
        assert sorted(a.seed for a in rep.accepted) == ["a", "a", "b", "b"]  # seeds taken in turn


def test_next_best_action_and_accounting_per_accepted_bundle():
    gen = ScriptGen(fail={("s", "increase/in_depth")})
    rep = run([Toy("s")], {"s": 0.75}, gen, target=1, repairs=1, fallback_actions=2)
    assert gen.calls == [
        ("s", "increase/in_depth", False),
        ("s", "increase/in_depth", True),
        ("s", "increase/in_breadth", False),
    ]
    (acc,) = rep.accepted
    assert acc.action.name == "increase/in_breadth" and acc.attempts == 3 and acc.tokens == 120
    assert rep.summary()["attempts_per_accepted"] == 3


def test_failed_pairs_are_not_planned_again_and_the_run_ends():
    gen = ScriptGen(fail={("s", a.name) for a in METHODS["forge"]})
    rep = run([Toy("s")], {"s": 0.5}, gen, target=2, repairs=0, fallback_actions=0)
    assert rep.accepted == [] and rep.attempts == 5  # each of the 5 eligible actions once, then nothing is left


def test_coverage_pulls_in_a_seed_with_the_required_skill():
    seeds = [Toy("a", frozenset({"csv"})), Toy("b", frozenset({"csv"})), Toy("c", frozenset({"regex"}))]
    rates = {"a": 0.5, "b": 0.5, "c": 0.0}
    plain = run(seeds, rates, ScriptGen(), target=2)
    assert sorted(a.seed for a in plain.accepted) == ["a", "b"]
    covered = run(seeds, rates, ScriptGen(), target=2, coverage={"regex": 1})
    assert sorted(a.seed for a in covered.accepted) == ["a", "c"]
    assert covered.plans[0]["objective"] < plain.plans[0]["objective"]


def test_max_per_pair_spreads_accepted_bundles():
    rep = run([Toy("s")], {"s": 0.75}, ScriptGen(), target=4, max_per_pair=2)
    names = [a.action.name for a in rep.accepted]
    assert names.count("increase/in_depth") == 2 and len(names) == 4


class CrashingChecker(OkChecker):
    """Gold verification raises for the first candidate (a bad bundle, a broken reward file)."""

    def __init__(self):
        self.seen = 0

    async def gold(self, cand):
        self.seen += 1
        if self.seen == 1:
            raise ValueError("could not convert string to float: 'pass'")
        return True, ""


def test_a_verification_that_raises_is_a_failed_attempt_not_the_end_of_the_run():
    rep = asyncio.run(
        synthesize([Toy("s")], {"s": 0.75}, ScriptGen(), CrashingChecker(), SynthConfig(target=1, repairs=1))
    )
    assert [e["stage"] for e in rep.events] == ["gold_error", "accepted"]
    assert "ValueError: could not convert string" in rep.events[0]["failure"]
    assert len(rep.accepted) == 1 and rep.summary()["verification_errors"] == 1


def test_a_set_up_error_still_stops_the_run():
    import pytest

    from tempering.errors import UserError

    class NoEngine(OkChecker):
        async def gold(self, cand):
            raise UserError("no Docker engine is reachable")

    with pytest.raises(UserError, match="no Docker engine"):
        asyncio.run(synthesize([Toy("s")], {"s": 0.75}, ScriptGen(), NoEngine(), SynthConfig(target=1)))
