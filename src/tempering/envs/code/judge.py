"""The test judge that runs inside the sandbox, next to the candidate's code (standalone: stdlib only).

The candidate is untrusted even inside the sandbox: if it ran in the judge's process it could exit
with 0 before the tests, replace `assert`, or print a forged report. So the judge is split in two:

- the judge (this process) reads the tests from stdin (they are never on disk where the candidate
  could read them), makes itself non-dumpable (so a process of the same user cannot read its memory
  or its file descriptors), and keeps every expected value to itself;
- a child process loads `solution.py` and, for each test, evaluates only the left-hand side of
  `assert <expression> == <expected>`; it sends back `repr(value)`, which the judge parses as a plain
  literal (no custom `__eq__` can cross) and compares with the expected value.

A test that hangs or crashes the child is failed, and a fresh child runs the rest. The judge prints
one JSON report on its stdout, which the child cannot reach (its output goes to /dev/null).

stdin: {"entry_point": str, "tests": [{"expr": str, "expected": str}], "test_timeout_s": float,
        "float_tol": float}
stdout: {"load_error": str | null, "results": [{"passed": bool, "got": str, "error": str}]}
"""

import ast
import json
import math
import os
import select
import subprocess
import sys
import time

CHILD = r"""
import json, os, sys, traceback
out = os.fdopen(int(sys.argv[1]), "w")
def send(obj):
    out.write(json.dumps(obj) + "\n"); out.flush()
def last_lines(limit=8):
    kind, err, tb = sys.exc_info()
    frames = [f for f in traceback.extract_tb(tb) if f.filename != "<string>"]  # the judge's own frames
    lines = "".join(traceback.format_list(frames) + traceback.format_exception_only(kind, err)).strip()
    return "\n".join(lines.splitlines()[-limit:])
ns = {"__name__": "solution"}
try:
    exec(compile(open("solution.py").read(), "solution.py", "exec"), ns)
    send({"loaded": True})
except BaseException:
    send({"load_error": last_lines()})
    raise SystemExit(0)
for line in sys.stdin:
    try:
        value = eval(json.loads(line), ns)
        send({"value": repr(value)})
    except BaseException:
        send({"error": last_lines()})
"""


def _same(got, expected, tol: float) -> bool:
    """Python's `==`, except that floats (also inside lists and tuples) match within `tol`."""
    if isinstance(expected, float) and isinstance(got, (int, float)):
        return math.isclose(got, expected, rel_tol=tol, abs_tol=tol)
    if isinstance(expected, (list, tuple)) and type(got) is type(expected):
        return len(got) == len(expected) and all(_same(g, e, tol) for g, e in zip(got, expected))
    return got == expected


class Child:
    """The candidate's process: loads solution.py, answers one expression per line."""

    def __init__(self):
        r, w = os.pipe()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(w)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=(w,),
        )
        os.close(w)
        self.replies = os.fdopen(r, "rb")
        self.buffer = b""

    def reply(self, timeout: float):
        """The child's next JSON message, or None if it did not answer in time or died."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.replies], [], [], left)[0]:
                return None
            chunk = os.read(self.replies.fileno(), 1 << 16)
            if not chunk:
                return None
            self.buffer += chunk
            if len(self.buffer) > 1 << 20:
                return None
        line, self.buffer = self.buffer.split(b"\n", 1)
        try:
            return json.loads(line)
        except ValueError:
            return None

    def ask(self, expr: str, timeout: float):
        try:
            self.proc.stdin.write((json.dumps(expr) + "\n").encode())
            self.proc.stdin.flush()
        except OSError:
            return None
        return self.reply(timeout)

    def close(self):
        self.proc.kill()
        self.proc.wait()
        self.replies.close()


def _no_dump() -> None:
    """Make this process non-dumpable: same-user processes can no longer read /proc/<judge>/mem or fd."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except (OSError, AttributeError):
        pass


def main() -> None:
    spec = json.loads(sys.stdin.read())
    _no_dump()
    tests, timeout, tol = spec["tests"], float(spec.get("test_timeout_s", 2.0)), float(spec.get("float_tol", 1e-6))
    results, load_error, child = [], None, None
    for test in tests:
        if child is None:
            child = Child()
            hello = child.reply(timeout + 5.0)
            if hello is None or "load_error" in hello:
                load_error = (hello or {}).get("load_error") or "solution.py did not load (timeout or crash)"
                child.close()
                break
        answer = child.ask(test["expr"], timeout)
        if answer is None:
            results.append({"passed": False, "got": "", "error": f"no answer within {timeout:g} s (timeout or crash)"})
            child.close()
            child = None
        elif "error" in answer:
            results.append({"passed": False, "got": "", "error": str(answer["error"])})
        else:
            got_text = str(answer.get("value", ""))
            try:
                got = ast.literal_eval(got_text)
                passed = _same(got, ast.literal_eval(test["expected"]), tol)
                results.append({"passed": passed, "got": got_text[:500], "error": ""})
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                results.append(
                    {
                        "passed": False,
                        "got": got_text[:500],
                        "error": "the value is not a plain literal (numbers, strings, lists, dicts, ...)",
                    }
                )
    if child is not None:
        child.close()
    if load_error is not None:
        results = [{"passed": False, "got": "", "error": load_error} for _ in tests]
    sys.stdout.write(json.dumps({"load_error": load_error, "results": results}))


if __name__ == "__main__":
    main()
