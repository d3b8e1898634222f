"""Task-family configurations as seeds: the six actions move the knobs, static checks and gold
verification accept good configurations and reject bad ones for the right reason, and the loop runs on them."""

import asyncio
import json

import pytest

from tempering.envs.arithmetic import ArithmeticFamily
from tempering.errors import UserError
from tempering.synth.generators import MutatorGenerator
from tempering.synth.loop import SynthConfig, synthesize
from tempering.synth.scoring import ACTIONS, Action
from tempering.synth.task_seeds import (
    ConfigChecks,
    TaskFamilySeed,
    TaskSeedChecker,
    builtin_task_seeds,
    corrupt,
    load_task_seeds,
)

A = Action.parse


def arith(lo, hi, ops, data_seed=0):
    return TaskFamilySeed.of("arithmetic", data_seed, min_value=lo, max_value=hi, ops=ops)


def test_arithmetic_actions_move_the_knobs():
    s = arith(10, 99, "+-")
    move = lambda name: s.mutate(A(name)).config
    assert move("increase/in_depth") == {"min_value": 100, "max_value": 999, "ops": "+-"}
    assert move("reduce/in_depth") == {"min_value": 1, "max_value": 9, "ops": "+-"}
    assert move("increase/in_breadth")["ops"] == "+-*"
    assert move("reduce/in_breadth")["ops"] == "+"
    assert move("diversify/in_breadth")["ops"] == "+*"
    same = s.mutate(A("diversify/in_depth"))
    assert same.config == s.config and same.data_seed != s.data_seed
    assert s.mutate(A("increase/in_depth"), salt=1).data_seed != s.mutate(A("increase/in_depth")).data_seed
    assert arith(0, 9, "+").contract(A("reduce/in_depth")) is None
    assert arith(0, 9, "+").contract(A("reduce/in_breadth")) is None
    assert arith(0, 9, "+-*").contract(A("increase/in_breadth")) is None
    assert arith(10**5, 10**6 - 1, "+").contract(A("increase/in_depth")) is None
    assert arith(10, 99, "-").mutate(A("increase/in_breadth")).config["ops"] == "+-"  # one spelling per set


def test_strings_actions_move_the_knobs():
    s = TaskFamilySeed.of("strings", min_len=3, max_len=5, ops=("rev", "up"), alphabet="abcdef")
    move = lambda name, salt=0: s.mutate(A(name), salt).config
    assert (move("increase/in_depth")["min_len"], move("increase/in_depth")["max_len"]) == (5, 7)
    assert (move("reduce/in_depth")["min_len"], move("reduce/in_depth")["max_len"]) == (1, 3)
    assert move("increase/in_breadth")["ops"] == ("rev", "up", "sort")
    assert move("reduce/in_breadth")["ops"] == ("rev",)
    assert move("diversify/in_breadth")["ops"] == ("rev", "sort")
    assert move("diversify/in_depth")["alphabet"] == "bcdefg" and move("diversify/in_depth", 3)["alphabet"] == "efghij"
    assert s.mutate(A("diversify/in_depth")).skills == s.skills == {"reverse", "uppercase"}


def test_contracts_match_the_mutations_and_lineage_is_kept():
    n = 0
    for seed in builtin_task_seeds():
        for action in ACTIONS:
            contract = seed.contract(action)
            if contract is None:
                continue
            for salt in (0, 1, 7):
                child = seed.mutate(action, salt)
                assert child.skills == contract.required, (seed.name, action.name)
                assert child.parent == seed.name and child.action == action.name
                n += 1
    assert n >= 3 * 45


def test_every_builtin_seed_and_action_passes_static_checks_and_gold_verification():
    checker = TaskSeedChecker()
    for seed in builtin_task_seeds():
        for action in ACTIONS:
            contract = seed.contract(action)
            if contract is None:
                continue
            child = seed.mutate(action)
            assert checker.static(child, seed, action, contract.required) == [], (seed.name, action.name)
            assert asyncio.run(checker.gold(child)) == (True, ""), (seed.name, action.name)


def test_static_checks_name_the_problem():
    checker = TaskSeedChecker()
    s = arith(10, 99, "+")
    harder = s.mutate(A("increase/in_depth"))
    (p,) = checker.static(harder, s, A("reduce/in_depth"), frozenset({"addition"}))
    assert p.startswith("[edit] reduce/in_depth must give a lower level") and "level 2 -> 3" in p
    probs = checker.static(s, s, A("diversify/in_depth"), frozenset({"addition"}))
    assert any("equal the seed's" in x for x in probs) and any(x.startswith("[overlap] 100%") for x in probs)
    assert checker.static(harder, s, A("increase/in_depth"), frozenset({"subtraction"})) == [
        "[skills] missing required skill(s) ['subtraction']"
    ]
    bad = TaskFamilySeed("arithmetic", (("max_value", 5), ("min_value", 9), ("ops", "+")))
    (p,) = checker.static(bad, s, A("reduce/in_depth"), frozenset())
    assert p.startswith("[config] arithmetic: need 0 <= min_value <= max_value")


class LenientArithmetic(ArithmeticFamily):
    def check(self, task, answer):
        return 1.0, True, "", "correct"  # accepts anything: a broken verifier


class LenientSeed(TaskFamilySeed):
    def make_family(self):
        return LenientArithmetic(**self.config)


def test_gold_verification_rejects_small_configurations_and_broken_verifiers():
    checker = TaskSeedChecker(ConfigChecks(tasks=64))
    ok, why = asyncio.run(checker.gold(arith(0, 3, "+")))  # 16 sums, ~14 of them in the training split
    assert not ok and "cannot provide 64 training tasks" in why and "only" in why
    s = arith(10, 99, "+")
    ok, why = asyncio.run(checker.gold(LenientSeed(s.family, s.args)))
    assert not ok and "accepts the corrupted answer" in why


def test_corrupt_is_a_near_miss():
    assert [corrupt(x) for x in ("123", "-9", "abz", "AB", "", "x-")] == ["124", "-0", "aba", "AC", "0", "x0"]


def test_configuration_files_round_trip_and_bad_files_are_clear(tmp_path):
    seeds = builtin_task_seeds()
    path = tmp_path / "c.json"
    path.write_text(json.dumps([s.to_json() for s in seeds]))
    assert load_task_seeds(path) == seeds
    child = seeds[1].mutate(A("increase/in_depth"))
    path.write_text(json.dumps([child.to_json()]))
    (back,) = load_task_seeds(path)
    assert back == child and back.name == child.name
    for text, message in [
        ("{", "is not JSON"),
        ("[]", "non-empty JSON list"),
        ('[{"family": "arithmetic", "args": {"digits": 3}}]', "unknown key(s) ['digits']"),
        ('[{"family": "poetry"}]', "unknown task family 'poetry'"),
        ('[{"family": "strings", "args": {"ops": ["rev", "shout"]}}]', "unknown ops ['shout']"),
    ]:
        path.write_text(text)
        with pytest.raises(UserError, match=message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
            load_task_seeds(path)
    with pytest.raises(UserError, match="does not exist"):
        load_task_seeds(tmp_path / "none.json")


def test_forge_loop_on_configurations_aims_at_the_frontier_and_refuses_duplicates():
    seeds = [arith(0, 9, "+"), arith(10, 99, "+"), arith(100, 999, "+")]
    rates = {seeds[0].name: 1.0, seeds[1].name: 0.5, seeds[2].name: 0.0}
    rep = asyncio.run(synthesize(seeds, rates, MutatorGenerator(), TaskSeedChecker(), SynthConfig(target=3)))
    chosen = {a.seed: a.action.name for a in rep.accepted}
    assert chosen == {
        seeds[0].name: "increase/in_depth",
        seeds[1].name: "diversify/in_depth",
        seeds[2].name: "reduce/in_depth",
    }
    assert rep.summary()["attempts_per_accepted"] == 1.0

    class Repeat(MutatorGenerator):  # ignores the salt: every attempt yields the same configuration
        async def generate(self, req):
            req.salt = 0
            return await super().generate(req)

    rep = asyncio.run(
        synthesize(
            seeds[1:2],
            {seeds[1].name: 0.5},
            Repeat(),
            TaskSeedChecker(),
            SynthConfig(method="few_shot", target=2, repairs=1),
        )
    )
    assert len(rep.accepted) == 1
    assert [e["stage"] for e in rep.events] == ["accepted", "static", "static"]
    assert "duplicates one already accepted" in rep.events[-1]["failure"]
