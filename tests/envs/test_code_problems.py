"""The code-problem JSONL format: the built-in set is well-formed; bad files name the line and field."""

import json

import pytest

from tempering.envs.code import load_problems
from tempering.envs.code.problems import parse_test
from tempering.errors import UserError

GOOD = {"id": "p", "prompt": 'def f(x):\n    """Double x."""\n', "entry_point": "f", "tests": ["assert f(2) == 4"]}


def write(tmp_path, *records):
    path = tmp_path / "p.jsonl"
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n")
    return path


def test_builtin_set_has_40_plus_problems_of_graded_difficulty():
    problems = load_problems()
    assert len(problems) >= 40
    by_level = {d: sum(p.difficulty == d for p in problems) for d in range(1, 6)}
    assert all(n >= 5 for n in by_level.values()), by_level
    assert all(p.solution and len(p.tests) >= 3 for p in problems)
    assert len({p.id for p in problems}) == len(problems)


def test_parse_test_splits_expression_and_expected():
    t = parse_test("assert sorted(f([3, 1])) == [1, 3]")
    assert (t.expr, t.expected) == ("sorted(f([3, 1]))", "[1, 3]")


@pytest.mark.parametrize(
    "text, why",
    [
        ("f(1) == 2", "single `assert"),
        ("assert f(1) < 2", "single `==`"),
        ("assert f(1) == g(2)", "plain literal"),
        ("assert f(1) ==", "not valid Python"),
    ],
)
def test_unsupported_tests_are_refused(text, why):
    with pytest.raises(ValueError, match=why):
        parse_test(text)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"tests": None}, "field 'tests' has the wrong type"),
        ({"tests": []}, "field 'tests' is empty"),
        ({"tests": ["assert f(2) == 4", "assert f(2) > 3"]}, r"field 'tests'\[1\]"),
        ({"entry_point": "g"}, "does not define `def g"),
        ({"entry_point": "not a name"}, "not a Python name"),
        ({"difficulty": 9}, "field 'difficulty' must be 1..5"),
        ({"test_timeout_s": 0}, "field 'test_timeout_s' must be positive"),
    ],
)
def test_bad_field_names_line_and_field(tmp_path, change, message):
    path = write(tmp_path, GOOD, {**GOOD, "id": "q", **change})
    with pytest.raises(UserError, match=f"{path}:2: .*{message}"):
        load_problems(path)


def test_missing_field_bad_json_duplicates_and_empty_file(tmp_path):
    no_tests = {k: v for k, v in GOOD.items() if k != "tests"}
    with pytest.raises(UserError, match=r":1: missing field 'tests'"):
        load_problems(write(tmp_path, no_tests))
    with pytest.raises(UserError, match=r":2: not valid JSON"):
        load_problems(write(tmp_path, GOOD, '{"id": '))
    with pytest.raises(UserError, match=r":2: field 'id' 'p' is also used on line 1"):
        load_problems(write(tmp_path, GOOD, GOOD))
    with pytest.raises(UserError, match="holds no problems"):
        load_problems(write(tmp_path, ""))
    with pytest.raises(UserError, match="cannot read"):
        load_problems(tmp_path / "missing.jsonl")
