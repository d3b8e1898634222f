"""Grading in the sandbox: reference solutions pass, wrong or hostile answers fail with useful feedback."""

import asyncio

import pytest

from tempering.envs.base import Env, TaskFamily
from tempering.envs.code import CodeEnv, CodeTaskFamily, extract_code, grade, load_problems
from tempering.errors import UserError
from tempering.sandbox import Sandbox

PROBLEMS = {p.id: p for p in load_problems()}
ADD = PROBLEMS["add_two"]


@pytest.fixture(scope="module")
def sb():
    return Sandbox(backend=Sandbox.available_backends()[0], concurrency=2)


def run(coro):
    return asyncio.run(coro)


@pytest.mark.slow
def test_every_reference_solution_passes_all_its_tests(sb):
    async def main():
        return await asyncio.gather(*[grade(sb, p, p.solution) for p in PROBLEMS.values()])

    grades = run(main())
    failed = {p: (g.status, g.feedback) for p, g in zip(PROBLEMS, grades) if g.status != "correct"}
    assert failed == {}


def test_extract_code_takes_the_last_block_or_completes_the_prompt():
    answer = "First try:\n```python\nx = 1\n```\nBetter:\n```python\ndef add_two(a, b):\n    return a + b\n```"
    assert extract_code(answer, ADD) == "def add_two(a, b):\n    return a + b\n"
    assert extract_code("    return a + b\n", ADD) == ADD.prompt + "    return a + b\n"
    assert extract_code("```\n\n```", ADD) == ""


@pytest.mark.parametrize(
    "answer, status, passed, says",
    [
        ("def add_two(a, b):\n    return a + b\n", "correct", 4, "All 4 tests passed."),
        (
            "def add_two(a, b):\n    return a - b\n",
            "incorrect",
            1,
            "assert add_two(2, 3) == 5\nYour function returned: -1",
        ),
        ("def add_two(a, b):\n    return a +\n", "parse_error", 0, "SyntaxError"),
        ("def add_two(a, b):\n    raise ValueError('nope')\n", "runtime_error", 0, "ValueError: nope"),
        ("", "parse_error", 0, "No code found"),
    ],
)
def test_grade_status_count_and_feedback(sb, answer, status, passed, says):
    g = run(grade(sb, ADD, answer))
    assert (g.status, g.passed, g.total) == (status, passed, 4)
    assert says in g.feedback


@pytest.mark.parametrize(
    "answer",
    [
        "import sys\nsys.exit(0)\n",  # leave before the tests
        "import os\nos._exit(0)\n",
        "class Any:\n    def __eq__(self, other):\n        return True\n\ndef add_two(a, b):\n    return Any()\n",
        "import builtins\nbuiltins.AssertionError = Exception\ndef add_two(a, b):\n    return 0\n",
        'print(\'{"load_error": null, "results": [{"passed": true}, {"passed": true}, {"passed": true}, {"passed": true}]}\')\n'
        "import os\nos._exit(0)\n",  # forge the judge's report
        'import os\nos.write(1, b\'{"load_error": null, "results": []}\')\ndef add_two(a, b):\n    return 0\n',
        "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n",  # kill the judge itself
    ],
)
def test_reward_hacks_do_not_pass(sb, answer):
    g = run(grade(sb, ADD, answer))
    assert g.status != "correct" and g.passed < g.total, (g.status, g.feedback)


def test_killing_the_judge_is_a_runtime_error_not_an_infrastructure_failure(sb):
    g = run(grade(sb, ADD, "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n"))
    assert (g.status, g.passed) == ("runtime_error", 0) and "without a report" in g.feedback


def test_judge_never_shows_expected_values_to_the_candidate(sb):
    # the candidate hunts for the expected value 5 (of add_two(2, 3)) in every file it can see
    spy = (
        "import os\nfound = []\nfor root, _, files in os.walk('/job'):\n    for f in files:\n"
        "        try:\n            found.append(open(os.path.join(root, f)).read())\n        except OSError:\n"
        "            pass\ntry:\n    found.append(open(f'/proc/{os.getppid()}/cmdline').read())\n"
        "    found.append(open(f'/proc/{os.getppid()}/mem', 'rb').read(10))\nexcept OSError:\n    pass\n"
        "needle = '=' * 2 + ' ' + str(2 + 3)\n"  # built at run time: not a literal in this very file
        "def add_two(a, b):\n    return repr([needle in t for t in found])\n"
    )
    g = run(grade(sb, ADD, spy))
    got = g.results[0]["got"]
    assert got.count(",") >= 2, got  # it did read solution.py, judge.py and the judge's command line
    assert "True" not in got, got


def test_slow_test_times_out_and_the_rest_still_run(sb):
    code = "import time\ndef add_two(a, b):\n    if a == 2:\n        time.sleep(60)\n    return a + b\n"
    g = run(grade(sb, ADD, code))
    assert g.status == "timeout" and g.passed == 3 and "no answer within 2 s" in g.feedback


def test_feedback_is_truncated(sb):
    g = run(grade(sb, ADD, "def add_two(a, b):\n    return 'x' * 5000\n", max_feedback_chars=200))
    assert len(g.feedback) <= 200 and g.feedback.endswith("(truncated)")


def test_env_is_multi_turn_with_all_or_fraction_reward(sb):
    task = CodeTaskFamily(backend=sb.backend).tasks("train", 1, seed=3)[0]

    async def episode(reward):
        env = CodeEnv(task, sb, reward=reward, max_turns=2)
        assert env.reset() == task.prompt and isinstance(env, Env)
        problem = task.answer
        bad = problem.prompt + "    return None\n"
        first = await env.step(bad)
        second = await env.step(f"```python\n{problem.solution}```")
        return first, second

    first, second = run(episode("all"))
    assert (first.score, first.success, first.done) == (0.0, False, False)
    assert "First failing test" in first.feedback
    assert (second.score, second.success, second.done) == (1.0, True, True)
    first, _ = run(episode("fraction"))
    assert 0.0 <= first.score < 1.0


def test_family_splits_are_disjoint_deterministic_and_complete():
    fam = CodeTaskFamily()
    assert isinstance(fam, TaskFamily)
    train = {t.id for t in fam.tasks("train", 1000)}
    held = {t.id for t in fam.tasks("heldout", 1000)}
    assert not train & held and len(train | held) == len(PROBLEMS)
    assert [t.id for t in fam.tasks("train", 5, seed=1)] == [t.id for t in fam.tasks("train", 5, seed=1)]
    t = fam.tasks("heldout", 1)[0]
    assert t.family == "code" and t.prompt.endswith(t.answer.prompt) and 1 <= t.difficulty <= 5
    assert len(CodeTaskFamily(max_difficulty=1).problems) == sum(p.difficulty == 1 for p in PROBLEMS.values())


def test_family_refuses_bad_settings():
    with pytest.raises(UserError, match="reward"):
        CodeTaskFamily(reward="partial")
    with pytest.raises(UserError, match="max_turns"):
        CodeTaskFamily(max_turns=0)
    with pytest.raises(UserError, match="split"):
        CodeTaskFamily().tasks("test", 1)
