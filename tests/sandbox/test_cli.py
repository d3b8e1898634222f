"""`tempering sandbox ...` through the real CLI dispatcher."""

import json

from tempering.cli import main

PROBLEM = {
    "id": "double",
    "prompt": 'def double(x):\n    """Return 2 * x."""\n',
    "entry_point": "double",
    "tests": ["assert double(2) == 4", "assert double(0) == 0"],
}


def test_backends_lists_every_backend(capsys):
    assert main(["sandbox", "backends"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in ("bwrap", "unshare", "subprocess"))


def test_problems_checks_reference_solutions(tmp_path, capsys):
    good = {**PROBLEM, "solution": "def double(x):\n    return 2 * x\n"}
    bad = {**PROBLEM, "id": "wrong", "solution": "def double(x):\n    return x + 2\n"}
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    assert main(["sandbox", "problems", str(path)]) == 1
    out = capsys.readouterr().out
    assert "wrong: incorrect" in out and "1 reference solutions pass, 1 fail" in out


def test_malformed_problem_file_is_a_clear_error(tmp_path, capsys):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps(PROBLEM) + "\n{broken\n")
    assert main(["sandbox", "problems", str(path)]) == 2
    assert f"{path}:2: not valid JSON" in capsys.readouterr().err


def test_unknown_backend_is_a_clear_error(capsys):
    assert main(["sandbox", "attacks", "docker"]) == 2
    assert "do not work here" in capsys.readouterr().err
