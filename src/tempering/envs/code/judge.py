"""The test judge that runs inside the sandbox, next to the candidate's code (standalone: stdlib only).

The candidate is untrusted even inside the sandbox: in its own process it could exit with 0 before
the tests, replace `assert`, read the expected value out of the calling test's frame, or print a
forged report. So the candidate runs in a child process, and the tests run here, in the judge:

- the judge reads the tests from stdin (they are never on disk where the candidate could read them)
  and makes itself non-dumpable (a process of the same user cannot read its memory or its fds);
- function problems: the child loads solution.py, then runs the problem's setup code in the same
  namespace (as MBPP's harness does: it may build objects of the solution's classes); the tests run
  in the judge as the benchmark wrote them (HumanEval's `check(candidate)`, MBPP's asserts) against
  stand-ins (`Remote`) for the names of that namespace, each call going to the child. Arguments go down pickled; results come back as
  data (numbers, strings, containers, Counter, defaultdict, Fraction, Decimal, ...) rebuilt here
  from JSON, so no object of the candidate's ever reaches the judge and `==` is Python's own. Any
  other object stays in the child and is a handle here (calls and attributes still go through);
- program problems: the judge runs solution.py once per test, input on stdin, and compares its
  output line by line (numbers as decimals), as LiveCodeBench does.

Each test has `test_timeout_s`, the problem `time_budget_s`; by default the first timeout ends the
run (the rest are `not_run`). The judge prints one JSON report on its stdout, which the child
cannot reach (its output goes to /dev/null).

stdin: {"kind": "function" | "program", "entry_point": str, "prefix": str, "setup": str,
        "tests": [test], "public": [test], "run_public": bool, "test_timeout_s": float,
        "time_budget_s": float, "stop_at_timeout": bool}
        test: {"source": str, "float_tol": float | null} (function) or {"stdin": str, "stdout": str}
stdout: {"load_status": str | null, "load_error": str | null, "results": [result], "public": [result]}
        result: {"passed": bool, "status": str, "got": str, "expected": str, "error": str, "error_type": str}
"""

import ast
import base64
import builtins
import collections
import copyreg
import decimal
import fractions
import importlib
import io
import json
import math
import os
import pickle
import select
import signal
import subprocess
import sys
import tempfile
import time
import types
from typing import Any

VALUE_LIMIT = 4 << 20
"""Bytes of one reply of the child, and of one program's output."""
LOAD_GRACE_S = 5.0
"""Seconds allowed for loading the solution (its imports), on top of one test's time."""
CLIP = 300

CHILD = r"""
import base64, collections, decimal, fractions, json, numbers, os, pickle, sys, traceback, types

requests = os.fdopen(int(sys.argv[1]), "rb")
replies = os.fdopen(int(sys.argv[2]), "w")
LIMIT = int(sys.argv[3])
SEQ = {list: "list", tuple: "tuple", set: "set", frozenset: "frozenset", collections.deque: "deque"}
MAP = {dict: "dict", collections.Counter: "Counter", collections.OrderedDict: "OrderedDict",
       collections.defaultdict: "defaultdict"}
PLAIN = (int, float, complex, str, bytes, tuple, list, dict, set, frozenset)
refs = []


def send(obj):
    text = json.dumps(obj)
    if len(text) > LIMIT:
        text = json.dumps({"too_large": len(text)})
    replies.write(text + "\n")
    replies.flush()


def failure():
    kind, err, tb = sys.exc_info()
    try:
        frames = [f for f in traceback.extract_tb(tb) if f.filename == "solution.py"]
        text = "".join(traceback.format_list(frames) + traceback.format_exception_only(kind, err)).strip()
        return {"error": "\n".join(text.splitlines()[-10:]), "type": kind.__name__, "message": str(err)[:1000]}
    except BaseException:
        return {"error": kind.__name__ + " (which cannot be shown)", "type": ""}


def enc(v, depth=0):
    if depth > 100:
        raise ValueError("the value is nested more than 100 levels deep")
    t = type(v)
    if v is None or t is bool or t is str or t is float or (t is int and -(2**63) < v < 2**63):
        return v
    if t is int:
        return ["int", hex(v)]
    if t is complex:
        return ["complex", repr(v.real), repr(v.imag)]
    if t is bytes:
        return ["bytes", base64.b64encode(v).decode()]
    if t in SEQ:
        return [SEQ[t], [enc(x, depth + 1) for x in v]]
    if t in MAP:
        return [MAP[t], [[enc(k, depth + 1), enc(x, depth + 1)] for k, x in v.items()]]
    if t is fractions.Fraction:
        return ["Fraction", hex(v.numerator), hex(v.denominator)]
    if t is decimal.Decimal:
        return ["Decimal", str(v)]
    if t is range:
        return ["range", hex(v.start), hex(v.stop), hex(v.step)]
    for base in PLAIN:  # namedtuple, IntEnum, str subclasses: by value, as the plain type
        if isinstance(v, base):
            return enc(base(v), depth + 1)
    if isinstance(v, numbers.Integral):  # numpy integers and the like
        return enc(int(v), depth + 1)
    if isinstance(v, numbers.Real):
        return enc(float(v), depth + 1)
    refs.append(v)
    return ["ref", len(refs) - 1, t.__name__]


module = types.ModuleType("__task__")
sys.modules["__task__"] = module
ns = module.__dict__


def resolve(target):
    if target[0] == "name":
        return ns[target[1]]
    if target[0] == "ref":
        return refs[target[1]]
    return getattr(resolve(target[1]), target[2])


def _remote(target):  # the judge pickles its handles on the solution's objects as calls to this
    return resolve(target)


setup = json.loads(requests.readline())["setup"]
stage = "solution"
try:
    exec(compile(open("solution.py").read(), "solution.py", "exec"), ns)
    stage = "setup"
    exec(compile(setup, "<setup>", "exec"), ns)
    names = {k: "module " + v.__name__ if isinstance(v, types.ModuleType) else "value"
             for k, v in list(ns.items()) if not k.startswith("__")}
except BaseException:
    send({"load_error": failure(), "stage": stage})
    raise SystemExit(0)
send({"names": names})
for line in requests:
    try:
        req = json.loads(line)
        payload = requests.read(req["size"])
        value = resolve(req["target"])
        if req["op"] == "call":
            args, kwargs = pickle.loads(payload)
            value = value(*args, **kwargs)
    except BaseException:
        send(failure())
        continue
    try:
        reply = {"value": enc(value)}
    except BaseException as e:
        reply = {"error": "the value returned cannot be read by the judge: " + str(e)[:200], "type": ""}
    send(reply)
"""


class SolutionFailed(BaseException):
    """The solution hung, died, broke the protocol, or raised what no test may catch (a BaseException,
    so that a test's `except Exception` cannot swallow it)."""

    def __init__(self, status: str, message: str):
        super().__init__(message)
        self.status = status


class ProblemBroken(BaseException):
    """The problem itself cannot run (its test sends what cannot cross to the solution)."""


class Mismatch(Exception):
    def __init__(self, got, expected):
        super().__init__("the values differ")
        self.got, self.expected = got, expected


def clip(text: str, limit: int = CLIP) -> str:
    return text if len(text) <= limit else text[: limit - 15] + "...(truncated)"


# -- values from the child ----------------------------------------------------------------------

_SEQ = {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset, "deque": collections.deque}
_MAP = {
    "dict": dict,
    "Counter": collections.Counter,
    "OrderedDict": collections.OrderedDict,
    "defaultdict": lambda d: collections.defaultdict(None, d),
}


def _of(value, kind):
    if type(value) is not kind:
        raise ValueError(f"expected {kind.__name__}")
    return value


def decode(x, solution, depth=0):
    """A value sent by the child, rebuilt from data only: plain Python types, or a handle."""
    if depth > 101:
        raise ValueError("nested too deep")
    if x is None or type(x) in (bool, int, float, str):  # JSON's own scalars stand for themselves
        return x
    tag = _of(x, list)[0]
    if tag == "int":
        return int(_of(x[1], str), 16)
    if tag == "complex":
        return complex(float(_of(x[1], str)), float(_of(x[2], str)))
    if tag == "bytes":
        return base64.b64decode(_of(x[1], str), validate=True)
    if tag in _SEQ:
        return _SEQ[tag](decode(item, solution, depth + 1) for item in _of(x[1], list))
    if tag in _MAP:
        pairs = [_of(p, list) for p in _of(x[1], list)]
        return _MAP[tag]({decode(k, solution, depth + 1): decode(v, solution, depth + 1) for k, v in pairs})
    if tag == "Fraction":
        return fractions.Fraction(int(_of(x[1], str), 16), int(_of(x[2], str), 16))
    if tag == "Decimal":
        return decimal.Decimal(_of(x[1], str))
    if tag == "range":
        return range(*(int(_of(v, str), 16) for v in x[1:4]))
    if tag == "ref":
        return Remote(solution, ("ref", _of(x[1], int)), f"{_of(x[2], str)} object")
    raise ValueError(f"unknown value kind {tag!r}")


_CONTROL_FLOW = (StopIteration, StopAsyncIteration)


def rebuild_error(reply: dict) -> BaseException:
    """The solution's exception, as the same built-in type when it is one (so that a test catching
    ValueError sees one), else a SolutionFailed; the traceback is kept for feedback. StopIteration
    is never re-raised: inside `all(map(candidate, xs))` it would end the check early, as passed."""
    text = str(reply.get("error", ""))
    name = reply.get("type")
    kind = getattr(builtins, name, None) if isinstance(name, str) and name.isidentifier() else None
    if isinstance(kind, type) and issubclass(kind, Exception) and not issubclass(kind, _CONTROL_FLOW):
        try:
            exc: Any = kind(str(reply.get("message", "")))  # Any: it carries the traceback as an extra attribute
            exc.solution_traceback = text
            return exc
        except Exception:
            pass
    return SolutionFailed("runtime_error", text)


class Remote:
    """A name or object of the solution, which lives in the child: calls and attribute reads go there."""

    def __init__(self, solution, target, label):
        self._solution, self._target, self._label = solution, target, label

    def __call__(self, *args, **kwargs):
        return self._solution.call(self, args, kwargs)

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return self._solution.get(("attr", self._target, name))

    def __repr__(self):
        return f"<{self._label} of the solution>"


def _remote(target):
    """Stands for a Remote in pickled arguments: the child's function of the same name resolves it."""
    raise RuntimeError("only the solution's process resolves handles")


class Solution:
    """The child process that holds the candidate's code; one request, one reply, within a deadline."""

    def __init__(self, setup: str):
        req_r, self._req = os.pipe()
        self._rep, rep_w = os.pipe()
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-c", CHILD, str(req_r), str(rep_w), str(VALUE_LIMIT)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=(req_r, rep_w),
            start_new_session=True,
        )
        os.close(req_r)
        os.close(rep_w)
        os.set_blocking(self._req, False)
        self.buffer = b""
        self.deadline = 0.0
        self.timeout_message = ""
        self.failure: SolutionFailed | None = None
        """Set once the child timed out, died or broke the protocol: every later request fails alike."""
        self.setup = setup
        self.names: dict[str, str] = {}

    def load(self, deadline: float, message: str) -> None:
        """Load solution.py (and the setup code) in the child; SolutionFailed if it does not load."""
        self.deadline, self.timeout_message = deadline, message
        reply = self._exchange({"setup": self.setup})
        if "load_error" in reply:
            err = reply["load_error"] if isinstance(reply["load_error"], dict) else {}
            text = str(err.get("error", "the solution did not load"))
            if reply.get("stage") == "setup":
                text = f"the problem's setup code, which runs after your code, failed:\n{text}"
            raise SolutionFailed("runtime_error", text)
        names = reply.get("names")
        if not isinstance(names, dict):
            raise self._broken("the solution's process broke the judge's protocol")
        self.names = {k: v for k, v in names.items() if isinstance(k, str) and k.isidentifier() and isinstance(v, str)}

    def call(self, remote: Remote, args: tuple, kwargs: dict):
        buf = io.BytesIO()
        pickler = pickle.Pickler(buf, protocol=pickle.HIGHEST_PROTOCOL)
        pickler.dispatch_table = {**copyreg.dispatch_table, Remote: self._reduce_remote}
        try:
            pickler.dump((args, kwargs))
        except (pickle.PicklingError, TypeError, AttributeError) as e:
            raise ProblemBroken(f"the test passes a value that cannot be sent to the solution: {e}") from None
        return self._value(self._exchange({"op": "call", "target": remote._target}, buf.getvalue()))

    def get(self, target):
        return self._value(self._exchange({"op": "get", "target": target}))

    def _reduce_remote(self, remote: Remote):
        if remote._solution is not self:
            raise SolutionFailed("runtime_error", "a value from an earlier run of the solution was used again")
        return _remote, (remote._target,)

    def _value(self, reply: dict):
        if "value" in reply:
            try:
                return decode(reply["value"], self)
            except Exception as e:
                raise SolutionFailed(
                    "runtime_error", f"the solution sent a value the judge cannot read ({e})"
                ) from None
        if "too_large" in reply:
            raise SolutionFailed("runtime_error", f"the value returned is larger than {VALUE_LIMIT >> 20} MiB")
        if "error" in reply:
            raise rebuild_error(reply)
        raise self._broken("the solution's process broke the judge's protocol")

    def _broken(self, message: str, status: str = "runtime_error") -> SolutionFailed:
        self.failure = SolutionFailed(status, message)
        return self.failure

    def _exchange(self, message: dict, payload: bytes = b"") -> dict:
        """Send a request (a JSON line, then `payload`) and read the one-line reply, by the deadline."""
        if self.failure is not None:
            raise self.failure
        data = (json.dumps({**message, "size": len(payload)}) + "\n").encode() + payload
        while data:
            left = self.deadline - time.monotonic()
            if left <= 0 or not select.select([], [self._req], [], left)[1]:
                raise self._broken(self.timeout_message, "timeout")
            try:
                data = data[os.write(self._req, data) :]
            except BlockingIOError:
                continue
            except OSError:
                raise self._broken(self._ended()) from None
        while b"\n" not in self.buffer:
            left = self.deadline - time.monotonic()
            if left <= 0 or not select.select([self._rep], [], [], left)[0]:
                raise self._broken(self.timeout_message, "timeout")
            chunk = os.read(self._rep, 1 << 16)
            if not chunk:
                raise self._broken(self._ended())
            self.buffer += chunk
            if len(self.buffer) > VALUE_LIMIT + 4096:
                raise self._broken("the solution's process broke the judge's protocol")
        line, self.buffer = self.buffer.split(b"\n", 1)
        try:
            reply = json.loads(line)
        except ValueError:
            reply = None
        if not isinstance(reply, dict):
            raise self._broken("the solution's process broke the judge's protocol")
        return reply

    def _ended(self) -> str:
        try:
            code = self.proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            return "the solution's process closed its channel to the judge"
        how = f"signal {-code}" if code < 0 else f"exit code {code}"
        return f"the solution's process ended ({how}) instead of answering"

    def close(self) -> None:
        kill(self.proc)
        os.close(self._req)
        os.close(self._rep)


def kill(proc: subprocess.Popen) -> int:
    """End a process and its group (what it started, unless it left the group); its exit status."""
    for end in (lambda: os.killpg(proc.pid, signal.SIGKILL), proc.kill):
        try:
            end()
        except OSError:
            pass
    return proc.wait()


# -- comparisons --------------------------------------------------------------------------------


def same(got, expected, tol: float) -> bool:
    """Python's `==`, except that floats (also inside lists and tuples) match within `tol`."""
    if isinstance(expected, float) and isinstance(got, (int, float)):
        return math.isclose(got, expected, rel_tol=tol, abs_tol=tol)
    if isinstance(expected, (list, tuple)) and type(got) is type(expected):
        return len(got) == len(expected) and all(same(g, e, tol) for g, e in zip(got, expected))
    return bool(got == expected)


def same_output(got: str, expected: str) -> bool:
    """LiveCodeBench's rule: the same number of lines (outer blank lines and line ends stripped),
    each equal as text or, split on whitespace, as decimal numbers."""
    a = [line.strip() for line in got.strip().split("\n")]
    b = [line.strip() for line in expected.strip().split("\n")]
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x == y:
            continue
        try:
            if [decimal.Decimal(v) for v in x.split()] != [decimal.Decimal(v) for v in y.split()]:
                return False
        except decimal.InvalidOperation:
            return False
    return True


def _compare_assert(tree: ast.Module):
    """(left, right) of a test that is exactly `assert <left> == <right>`, else None."""
    if len(tree.body) == 1 and isinstance(tree.body[0], ast.Assert):
        test = tree.body[0].test
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq):
            return ast.Expression(test.left), ast.Expression(test.comparators[0])
    return None


def result(status: str, got: str = "", expected: str = "", error: str = "", error_type: str = "") -> dict:
    return {
        "passed": status == "passed",
        "status": status,
        "got": got,
        "expected": expected,
        "error": clip(error, 2000),
        "error_type": error_type,
    }


# -- the judge ----------------------------------------------------------------------------------


class Judge:
    def __init__(self, spec: dict):
        self.spec = spec
        self.kind = spec["kind"]
        self.test_timeout = float(spec["test_timeout_s"])
        self.budget = float(spec["time_budget_s"])
        self.solution: Solution | None = None
        self.ns: dict[str, Any] | None = None

    def run(self) -> dict:
        report: dict[str, Any] = {"load_status": None, "load_error": None, "results": [], "public": []}
        tests, public = self.spec["tests"], self.spec["public"]
        with open("solution.py", encoding="utf-8", errors="replace") as f:
            source = f.read()
        try:
            compile(source, "solution.py", "exec", dont_inherit=True)
        except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError) as e:
            return self._load_failed(report, "parse_error", _syntax_text(e))
        try:
            self.trees = {t["source"]: ast.parse(t["source"]) for t in tests + public if "source" in t}
            if self.kind == "function":
                module = types.ModuleType("__task__")
                sys.modules["__task__"] = module
                self.ns = module.__dict__
                # the setup runs in the solution's namespace; only its imports run here too, so that
                # the modules the tests use are the judge's own
                imports: list[ast.stmt] = [
                    n for n in ast.parse(self.spec["setup"]).body if isinstance(n, (ast.Import, ast.ImportFrom))
                ]
                exec(compile(self.spec["prefix"], "<problem>", "exec"), self.ns)
                exec(compile(ast.Module(imports, []), "<setup>", "exec"), self.ns)
        except Exception as e:
            return self._load_failed(report, "problem_error", f"the problem's own code failed: {type(e).__name__}: {e}")
        try:
            report["results"] = self.run_tests(tests)
            if self.spec["run_public"]:
                done = {json.dumps(t, sort_keys=True): r for t, r in zip(tests, report["results"])}
                todo = [t for t in public if json.dumps(t, sort_keys=True) not in done]
                ran = dict(zip(map(id, todo), self.run_tests(todo)))
                report["public"] = [done.get(json.dumps(t, sort_keys=True)) or ran[id(t)] for t in public]
        except SolutionFailed as e:  # the solution did not load
            return self._load_failed(report, e.status, str(e))
        finally:
            if self.solution is not None:
                self.solution.close()
        return report

    def _load_failed(self, report: dict, status: str, error: str) -> dict:
        report["load_status"], report["load_error"] = status, error
        report["results"] = [result(status, error=error) for _ in self.spec["tests"]]
        return report

    def run_tests(self, tests: list) -> list:
        end = time.monotonic() + self.budget
        out, stopped = [], None
        for test in tests:
            now = time.monotonic()
            if stopped is None and now >= end:
                stopped = f"not run: the problem's time budget of {self.budget:g} s ran out"
            if stopped is not None:
                out.append(result("not_run", error=stopped))
                continue
            if self.kind == "function" and self.solution is None:
                self.start(min(now + self.test_timeout + LOAD_GRACE_S, end))
                now = time.monotonic()
            deadline = min(now + self.test_timeout, end)
            message = (
                f"no answer within {self.test_timeout:g} s"
                if now + self.test_timeout <= end
                else f"the problem's time budget of {self.budget:g} s ran out"
            )
            if self.kind == "program":
                res = self.run_program(test, deadline, message)
            else:
                res = self.run_function(test, deadline, message)
                assert self.solution is not None  # started above
                if self.solution.failure is not None:  # it hung or died: a fresh child runs the rest
                    self.solution.close()
                    self.solution = None
            out.append(res)
            if res["status"] == "timeout" and self.spec["stop_at_timeout"]:
                stopped = "not run: an earlier test timed out"
        return out

    def start(self, deadline: float) -> None:
        """A child with the solution loaded, and the tests' free names bound to it; SolutionFailed if
        it does not load (the whole answer then fails with that status)."""
        self.solution = Solution(self.spec["setup"])
        try:
            self.solution.load(deadline, "the solution did not finish loading in time")
        except SolutionFailed:
            self.solution.close()
            self.solution = None
            raise
        assert self.ns is not None  # run() made the function problem's namespace
        entry = self.spec["entry_point"]
        if entry and self.solution.names.get(entry) != "value":
            self.solution.close()
            self.solution = None
            raise SolutionFailed("runtime_error", f"the code does not define `{entry}`")
        free = {node.id for tree in self.trees.values() for node in ast.walk(tree) if isinstance(node, ast.Name)}
        for name in sorted(free | {entry} - {""}):
            kind = self.solution.names.get(name)
            if kind is None or (name != entry and (name in self.ns or hasattr(builtins, name))):
                continue  # the problem's own names and the builtins come first; only the entry point is the solution's
            if kind.startswith("module "):  # e.g. `math.isclose` in MBPP tests relies on the solution's import
                mod = kind.removeprefix("module ")
                if mod.split(".")[0] in sys.stdlib_module_names:
                    try:
                        self.ns[name] = importlib.import_module(mod)
                    except ImportError:
                        pass
            else:
                self.ns[name] = Remote(self.solution, ("name", name), f"`{name}`")

    def run_function(self, test: dict, deadline: float, message: str) -> dict:
        assert self.solution is not None  # run_tests starts it first
        self.solution.deadline, self.solution.timeout_message = deadline, message
        tree = self.trees[test["source"]]
        pair = _compare_assert(tree)
        try:
            if pair is None:
                exec(compile(tree, "<test>", "exec"), self.ns)
            else:
                left = eval(compile(pair[0], "<test>", "eval"), self.ns)
                right = eval(compile(pair[1], "<test>", "eval"), self.ns)
                tol = test.get("float_tol")
                if not (same(left, right, tol) if tol is not None else bool(left == right)):
                    raise Mismatch(left, right)
            res = result("passed")
        except SolutionFailed as e:
            res = result(e.status, error=str(e))
        except ProblemBroken as e:
            res = result("problem_error", error=str(e))
        except Mismatch as e:
            res = result("incorrect", got=clip(repr(e.got)), expected=clip(repr(e.expected)))
        except Exception as e:
            if hasattr(e, "solution_traceback"):
                res = result("runtime_error", error=e.solution_traceback, error_type=type(e).__name__)
            elif isinstance(e, AssertionError):
                res = result("incorrect", error=clip(f"the assertion failed {e}".strip()))
            else:
                res = result("incorrect", error=clip(f"the test raised {type(e).__name__}: {e}"))
        if self.solution.failure is not None:  # even where the test caught it: a hung or dead solution fails
            res = result(self.solution.failure.status, error=str(self.solution.failure))
        return res

    def run_program(self, test: dict, deadline: float, message: str) -> dict:
        with tempfile.TemporaryFile() as fin, tempfile.TemporaryFile() as ferr:
            fin.write(test["stdin"].encode())
            fin.seek(0)
            proc = subprocess.Popen(
                [sys.executable, "-I", "solution.py"],
                stdin=fin,
                stdout=subprocess.PIPE,
                stderr=ferr,
                start_new_session=True,
            )
            out, status = self._read_output(proc, deadline)
            code = kill(proc)
            assert proc.stdout is not None  # stdout=PIPE
            proc.stdout.close()
            ferr.seek(max(0, ferr.seek(0, 2) - 4000))
            err = ferr.read().decode("utf-8", "replace")
        if status == "timeout":
            return result("timeout", error=message)
        if status == "too_large":
            return result("runtime_error", error=f"the program printed more than {VALUE_LIMIT >> 20} MiB")
        if code != 0:
            how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
            tail = "\n".join(err.strip().splitlines()[-10:])
            return result("runtime_error", error=f"the program {how}" + (f":\n{tail}" if tail else ""))
        text = out.decode("utf-8", "replace")
        if same_output(text, test["stdout"]):
            return result("passed")
        return result("incorrect", got=clip(text), expected=clip(test["stdout"]))

    @staticmethod
    def _read_output(proc, deadline: float):
        fd, chunks, size = proc.stdout.fileno(), [], 0
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return b"", "timeout"
            if not select.select([fd], [], [], left)[0]:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            size += len(chunk)
            if size > VALUE_LIMIT:
                return b"", "too_large"
            chunks.append(chunk)
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            return b"", "timeout"
        return b"".join(chunks), "done"


def _syntax_text(e: BaseException) -> str:
    if isinstance(e, SyntaxError):
        where = f'  File "solution.py", line {e.lineno}\n    {(e.text or "").strip()}\n' if e.lineno else ""
        return f"{where}{type(e).__name__}: {e.msg}"
    return f"{type(e).__name__}: {e}"


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
    sys.stdout.write(json.dumps(Judge(spec).run()))


if __name__ == "__main__":
    main()
