"""Parsing Python source is safe from any thread, on the interpreters with the AST constructor's race."""

from __future__ import annotations

import ast
import gc

import pytest

from tempering import syntax

SOURCE = "def f(x):\n    return [x + i for i in range(3) if i]\n" * 40


class ParsesWhenCollected:
    """Garbage whose finalizer parses: the collector runs it in the middle of another parse, as it
    runs a reward thread's parse when it lets that thread in."""

    def __init__(self) -> None:
        self.me = self

    def __del__(self) -> None:
        ast.parse("x = 1")


@pytest.fixture
def busy_collector():
    old = gc.get_threshold()
    gc.set_threshold(10)
    yield
    gc.set_threshold(*old)
    gc.collect()


def interrupted(parse) -> None:
    for _ in range(5):
        ParsesWhenCollected()
    parse(SOURCE)


@pytest.mark.skipif(not syntax.RACY, reason="this interpreter has no race to show")
def test_the_race_is_real_here(busy_collector):
    with pytest.raises(SystemError, match="AST constructor recursion depth mismatch"):
        for _ in range(20):
            interrupted(ast.parse)


def test_a_parse_interrupted_by_another_gives_the_tree(busy_collector):
    for _ in range(20):
        interrupted(syntax.parse)
    assert ast.dump(syntax.parse(SOURCE)) == ast.dump(ast.parse(SOURCE))
    assert syntax.literal(" (1, 'a', [2.5]) ") == (1, "a", [2.5])


def test_only_the_race_is_redone():
    calls = []

    def fails(message: str) -> None:
        calls.append(message)
        raise SystemError(message)

    with pytest.raises(SystemError, match="another"):
        syntax.redone(fails, "another error")
    assert len(calls) == 1
    calls.clear()
    with pytest.raises(SystemError):
        syntax.redone(fails, "AST constructor recursion depth mismatch (before=1, after=2)")
    assert len(calls) == (3 if syntax.RACY else 1)  # a race that keeps happening is raised, not hidden


def test_a_reward_that_fails_only_by_the_race_is_redone(busy_collector):
    from tempering.envs.rewards import call_reward

    calls = []

    def parses(prompts, completions, **kw):  # a code reward: parses each completion
        calls.append(1)
        if len(calls) == 1:  # the other parse comes once, in the middle of the first call
            interrupted(lambda s: None)
        return [float(len(ast.parse(c).body)) for c in completions]

    assert call_reward(parses, ["p", "q"], [SOURCE, "x = 1"], {}) == [40.0, 1.0]
    assert len(calls) == (2 if syntax.RACY else 1)
