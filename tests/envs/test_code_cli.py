"""`tempering code check|score` through the real CLI dispatcher, and `tempering eval`'s task selection."""

import json
from pathlib import Path

import pytest

from tempering.cli import main
from tempering.envs.code import CodeTaskFamily
from tempering.envs.code.problems import SAMPLES
from tempering.envs.registry import make_family
from tempering.errors import UserError
from tempering.metrics import pass_at_k
from tempering.recipes.eval import eval_tasks

PROBLEM = {
    "id": "double",
    "prompt": 'def double(x):\n    """Return 2 * x.\n    >>> double(2)\n    4\n    """\n',
    "entry_point": "double",
    "tests": ["assert double(2) == 4", "assert double(0) == 0"],
}


def test_check_runs_reference_solutions(tmp_path, capsys):
    good = {**PROBLEM, "solution": "def double(x):\n    return 2 * x\n"}
    bad = {**PROBLEM, "id": "wrong", "solution": "def double(x):\n    return x + 2\n"}
    shown = {**PROBLEM, "id": "shown", "tests": ["assert double(2) == 4"], "public_tests": ["assert double(2) == 4"]}
    typo = {**good, "id": "typo", "prompt": PROBLEM["prompt"].replace("    4\n", "    5\n")}  # a wrong example
    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in (good, bad, shown, typo)))
    assert main(["code", "check", str(path)]) == 1
    out = capsys.readouterr().out
    assert "wrong: incorrect\n  test 2: incorrect: got 2, expected 0" in out
    assert "2 of 3 reference solutions pass; 1 problems have none." in out
    assert "every reward test of 1 problem(s) is public" in out and "['shown']" in out
    assert "public tests that fail on the reference (their feedback would mislead): typo (public test 1)" in out


def test_check_passes_the_shipped_samples(capsys):
    assert main(["code", "check", str(SAMPLES / "mbpp.jsonl")]) == 0
    out = capsys.readouterr().out
    assert "8 problems (8 mbpp)" in out and "the answer's own objects" not in out
    # 9003's setup builds `leaf` (a hidden test's input) as part of `root` (the public test's)
    assert "hidden inputs may be in the public run of 1 problem(s): 9003 (line 5 binds leaf" in out


def test_check_names_a_test_whose_expected_side_the_answer_computes(tmp_path, capsys):
    pair = "class Pair:\n    def __init__(self, a, b):\n        self.a, self.b = a, b\ndef first(p):\n    return p.a\n"
    tests = ["assert first(Pair(1, 2)) == 1", "assert first(Pair(1, 2)) == Pair(1, 5).a"]
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"task_id": 1, "text": "First field.", "code": pair, "test_list": tests}) + "\n")
    assert main(["code", "check", str(path)]) == 0
    assert "note: the answer's own objects compute the expected side of a test in 1 problem(s): 1 (" in (
        capsys.readouterr().out
    )


def test_malformed_problem_file_is_a_clear_error(tmp_path, capsys):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps(PROBLEM) + "\n{broken\n")
    assert main(["code", "check", str(path)]) == 2
    assert f"{path}:2: not valid JSON" in capsys.readouterr().err


def test_score_writes_verdicts_and_unbiased_pass_at_k(tmp_path, capsys):
    # HumanEval's sample format: body completions appended to the prompt; 3 samples per problem
    rows = [
        {
            "task_id": "Sample/1",
            "completion": "    m = sum(numbers) / len(numbers)\n"
            "    return sum(abs(x - m) for x in numbers) / len(numbers)\n",
        },
        {"task_id": "Sample/1", "completion": "    return 0.0\n"},
        {"task_id": "Sample/1", "completion": "    return undefined_name\n"},
        {"task_id": "Sample/2", "completion": "    return all(a < b for a, b in zip(xs, xs[1:]))\n"},
        {"task_id": "Sample/2", "completion": "    return sorted(set(xs)) == xs\n"},
        {"task_id": "Sample/2", "completion": "    while True:\n        pass\n"},
    ]
    completions = tmp_path / "samples.jsonl"
    completions.write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary = tmp_path / "summary.json"
    args = ["code", "score", str(SAMPLES / "humaneval.jsonl"), "--completions", str(completions)]
    assert main([*args, "--k", "1,2,5", "--json", str(summary), "--time-budget", "5"]) == 0
    out = capsys.readouterr().out
    verdicts = [json.loads(line) for line in (tmp_path / "samples.jsonl_results.jsonl").read_text().splitlines()]
    assert [v["status"] for v in verdicts] == ["correct", "incorrect", "runtime_error", "correct", "correct", "timeout"]
    assert [v["passed"] for v in verdicts] == [True, False, False, True, True, False]
    assert verdicts[2]["completion"] == rows[2]["completion"] and "NameError" in verdicts[2]["detail"]
    s = json.loads(summary.read_text())
    assert (s["problems"], s["completions"]) == (2, 6) and "pass@5" not in s  # fewer than 5 samples each
    assert s["pass@1"] == pytest.approx((1 / 3 + 2 / 3) / 2)
    assert s["pass@2"] == pytest.approx((pass_at_k(3, 1, 2) + pass_at_k(3, 2, 2)) / 2) == pytest.approx((2 / 3 + 1) / 2)
    assert s["statuses"] == {"correct": 3, "incorrect": 1, "runtime_error": 1, "timeout": 1}
    assert "3 of the file's 5 problems have no completion" in out
    assert "note: pass@5 not reported: some problem has only 3 completion(s)" in out


def test_score_names_a_bad_completions_line(tmp_path, capsys):
    completions = tmp_path / "c.jsonl"
    completions.write_text(
        '{"task_id": "Sample/0", "completion": "    return 0\\n"}\n{"task_id": "Nope/1", "completion": ""}\n'
    )
    args = ["code", "score", str(SAMPLES / "humaneval.jsonl"), "--completions", str(completions)]
    assert main(args) == 2
    assert f"{completions}:2: task_id 'Nope/1' is not a problem" in capsys.readouterr().err
    assert main([*args, "--k", "0"]) == 2


def test_records_that_cannot_be_judged_are_skipped_and_counted(tmp_path, capsys):
    shapes = Path(__file__).with_name("data") / "mbpp_shapes.jsonl"  # see test_code_problems.MBPP_SHAPES
    assert main(["code", "check", str(shapes)]) == 0
    captured = capsys.readouterr()
    assert "2 problems (2 mbpp); 1 records skipped, they cannot be judged (see the warning)" in captured.out
    assert "2 of 2 reference solutions pass" in captured.out
    assert "skipped 1 of 3 records that cannot be judged (8999: the first test" in captured.err
    completions = tmp_path / "c.jsonl"
    completions.write_text(
        '{"task_id": 8126, "completion": "```python\\ndef sum(a, b):\\n    return 10\\n```"}\n'
        '{"task_id": 8999, "completion": "def helper(xs):\\n    return 1\\n"}\n'
    )
    assert main(["code", "score", str(shapes), "--completions", str(completions), "--k", "1,10,100"]) == 0
    out = capsys.readouterr().out
    assert "note: 1 completions are for problems skipped as unjudgeable, and are not scored." in out
    assert "note: pass@10, pass@100 not reported: some problem has only 1 completion(s)" in out


def test_eval_takes_a_whole_split_and_never_repeats_a_task():
    family = CodeTaskFamily(problems_path=str(SAMPLES / "mbpp.jsonl"))
    assert sorted(t.id for t in eval_tasks(family, "all", None, 0)) == [f"code/900{i}" for i in range(1, 9)]
    assert len(eval_tasks(family, "all", 3, 0)) == 3
    with pytest.raises(UserError, match=r"the all split of code has 8 tasks, so --n 9 would repeat some"):
        eval_tasks(family, "all", 9, 0)
    generated = make_family("arithmetic")
    assert generated.split_size("heldout") is None and len(eval_tasks(generated, "heldout", None, 0)) == 500


def test_eval_cli_refuses_to_repeat_before_loading_a_model(capsys):
    args = ["eval", "tiny-xs", "--task", "code", "--split", "all", "--n", "1000"]
    assert main(args) == 2
    assert "--n 1000 would repeat some" in capsys.readouterr().err
