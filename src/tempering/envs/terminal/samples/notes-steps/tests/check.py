"""Shared by both steps: compares a file's lines with the expected ones and writes the reward."""

import sys


def check(path: str, expected: list[str]) -> None:
    try:
        got = open(path).read().splitlines()
    except OSError:
        got = None
    ok = got == expected
    with open("/logs/verifier/reward.txt", "w") as f:
        f.write("1" if ok else "0")
    print("ok" if ok else f"{path}: {got!r} != {expected!r}", file=sys.stderr)
