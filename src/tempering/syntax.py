"""Python source to a syntax tree, safe from any thread.

CPython 3.11.0-3.11.7 and 3.12.0-3.12.1 keep the AST constructor's recursion count in one
process-wide place (gh-106905): when a garbage collection inside one thread's `ast.parse` lets another
thread parse too, the first fails with a spurious `SystemError`. Reward functions run in threads and
often parse (`ast.literal_eval`, sympy), so tempering's own parses take one lock, and a call that fails
only by that race is redone.
"""

from __future__ import annotations

import ast
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

RACY = (3, 11, 0) <= sys.version_info[:3] < (3, 11, 8) or (3, 12, 0) <= sys.version_info[:3] < (3, 12, 2)
"""Whether this interpreter has the race."""

_RACE = "AST constructor recursion depth mismatch"
_TRIES = 3
_LOCK = threading.RLock()  # re-entrant: a finalizer run by the collector may parse on the same thread


def is_race(e: BaseException) -> bool:
    """Whether `e` is the interpreter's spurious error rather than the code's own."""
    return RACY and isinstance(e, SystemError) and str(e).startswith(_RACE)


def redone(call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`call(*args, **kwargs)`, redone (at most 3 tries in all) while it fails only by the race."""
    for _ in range(_TRIES - 1):
        try:
            return call(*args, **kwargs)
        except SystemError as e:
            if not is_race(e):
                raise
    return call(*args, **kwargs)


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """`ast.parse` of a module, safe from any thread."""
    with _LOCK:
        return redone(ast.parse, source, filename)


def literal(source: str) -> Any:
    """`ast.literal_eval` of a string, safe from any thread."""
    with _LOCK:
        tree = redone(ast.parse, source.strip(), "<literal>", "eval")
    return ast.literal_eval(tree)
