"""The test judge (standalone: stdlib only). It runs in a sandbox job of its own; the candidate runs
in other jobs, which the host starts when the judge asks. The judge and the candidate never share a
process, a namespace, a PID namespace or a file: the candidate cannot name the judge, and the judge
receives only what the candidate declares, through a channel the host owns.

- function problems: a candidate job (candidate.py) loads solution.py, then the problem's setup code
  in the same namespace (as MBPP's harness does: it may build objects of the solution's classes).
  The tests run here, as the benchmark wrote them (HumanEval's `check(candidate)`, MBPP's asserts).
  A test's free names resolve here, from the problem's own code (its prefix, the imports of its
  setup and of its reference solution), the builtins and the real modules; only the names the
  reference solution and the setup code define (the entry point, helper classes, objects the setup
  builds) are the candidate's, as stand-ins (`Remote`) whose calls go to the candidate job. Arguments
  go down pickled; results come back as JSON data (numbers, strings, containers, Counter, Fraction,
  Decimal, ...) rebuilt here, so every comparison is Python's own `==` on the judge's values and no
  object, method or `__eq__` of the candidate's ever runs here or sees an expected value. Any other
  object stays in the candidate job as a handle (calls, attribute reads and its truth go there).
- program problems: each test is one candidate job (`python3 -I solution.py`, the input on stdin);
  the host reports its output and how it ended (its own evidence), and the judge compares the output
  line by line (numbers as decimals), as LiveCodeBench does.

Public tests (for multi-turn feedback) run first, in a candidate job of their own, and their results
go to the host before any hidden test runs; the hidden tests then run in fresh candidate jobs, so
nothing a hidden run sees can reach feedback. Each test has its own time limit (`timeout_s`), the
phase `time_budget_s`; by default the first timeout ends the phase (the rest are `not_run`).

The host channel: stdin carries the spec (one JSON line), then framed messages: `C <id> <n>\\n` and n
bytes (one line the candidate job `id` wrote), `E <id> <json>\\n` (that job ended: the host's Result).
The judge writes JSON lines to the host on the stdout it had at start (the test code's prints go
nowhere): {"op": "start", "id"} (a function candidate job), {"op": "send", "id", "line"}, {"op": "run",
"id", "stdin", "wall_s"} (a program job), {"op": "stop", "id"}, {"op": "public", ...} and, last,
{"op": "report", "load_status", "load_error", "results", "public"}; result: {"passed", "status",
"got", "expected", "error", "error_type", "seconds"}.
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
import reprlib
import select
import signal
import sys
import time
import types
from typing import Any

VALUE_LIMIT = 4 << 20
"""Bytes of one reply of the candidate, and of one program's output."""
LOAD_GRACE_S = 5.0
"""Seconds allowed for loading the solution (its imports), on top of one test's time."""
QUEUE_S = 120.0
"""Seconds the host may take to start a candidate job (it may wait for a free slot)."""
CLIP = 300


class SolutionFailed(BaseException):
    """The solution hung, died, broke the protocol, or raised what no test may catch (a BaseException,
    so that a test's `except Exception` cannot swallow it)."""

    def __init__(self, status: str, message: str):
        super().__init__(message)
        self.status = status


class Deadline(BaseException):
    """The test's own code ran past its time (raised by the alarm; no test can catch it)."""


class ProblemBroken(BaseException):
    """The problem itself cannot run (its test sends what cannot cross to the solution)."""


class Mismatch(Exception):
    def __init__(self, got, expected):
        super().__init__("the values differ")
        self.got, self.expected = got, expected


def clip(text: str, limit: int = CLIP) -> str:
    return text if len(text) <= limit else text[: limit - 15] + "...(truncated)"


class _Shown(reprlib.Repr):
    """repr for values whose plain repr fails (an int past the str conversion limit)."""

    def __init__(self):
        super().__init__()
        self.maxlevel, self.maxdict, self.maxlist, self.maxtuple, self.maxset = 20, 30, 60, 60, 60
        self.maxfrozenset = self.maxdeque = self.maxlong = self.maxstring = self.maxother = 200

    def repr_int(self, x, level):
        try:
            return repr(x)
        except ValueError:
            digits = int(abs(x).bit_length() * math.log10(2)) + 1
            return f"<an integer of about {digits} digits>"


def show(value) -> str:
    """A value in words, never raising (for got / expected)."""
    try:
        return clip(repr(value))
    except Exception:
        try:
            return clip(_Shown().repr(value))
        except Exception as e:
            return f"<a {type(value).__name__} that cannot be shown: {type(e).__name__}>"


def describe(e: BaseException) -> str:
    try:
        text = str(e)
    except Exception:
        text = "(its message cannot be shown)"
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


# -- the channel to the host --------------------------------------------------------------------


class Channel:
    """Messages to and from the host. Its reads and writes are never interrupted by a test's alarm."""

    def __init__(self):
        self.out = os.fdopen(os.dup(1), "w")
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)  # the tests' own prints (and any module's) go nowhere
        os.close(devnull)
        self.buffer = b""
        self.busy = False
        self.expired = False
        """The test's alarm rang while a message was on its way: Deadline once it is through."""
        self.next_id = 0

    def read_spec(self) -> dict:
        while b"\n" not in self.buffer:
            chunk = os.read(0, 1 << 16)
            if not chunk:
                raise SystemExit("the host closed the channel before the spec")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def op(self, message: dict) -> None:
        self.busy = True
        try:
            self.out.write(json.dumps(message) + "\n")
            self.out.flush()
        finally:
            self._done()

    def _done(self) -> None:
        self.busy = False
        if self.expired:
            self.expired = False
            raise Deadline()

    def new_id(self) -> int:
        self.next_id += 1
        return self.next_id

    def wait(self, job: int, deadline: float):
        """The next message of candidate job `job` by `deadline`: ("line", bytes), ("ended", dict),
        or None when the deadline passed. Messages of earlier jobs are dropped."""
        self.busy = True
        try:
            while True:
                msg = self._parse()
                if msg is not None:
                    kind, jid, payload = msg
                    if jid == job:
                        return kind, payload
                    continue
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([0], [], [], left)[0]:
                    return None
                chunk = os.read(0, 1 << 20)
                if not chunk:
                    raise SystemExit("the host closed the channel")
                self.buffer += chunk
        finally:
            self._done()

    def _parse(self):
        end = self.buffer.find(b"\n")
        if end < 0:
            return None
        head = self.buffer[:end].split(b" ", 2)
        if head[0] == b"C":
            size = int(head[2])
            if len(self.buffer) < end + 1 + size:
                return None
            body = self.buffer[end + 1 : end + 1 + size]
            self.buffer = self.buffer[end + 1 + size :]
            return "line", int(head[1]), body
        self.buffer = self.buffer[end + 1 :]
        return "ended", int(head[1]), json.loads(head[2])


CHANNEL: Channel | None = None


def _on_alarm(signum, frame):
    if CHANNEL is None:
        return
    if CHANNEL.busy:
        CHANNEL.expired = True
    else:
        raise Deadline()


# -- values from the candidate ------------------------------------------------------------------

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
    """A value sent by the candidate, rebuilt from data only: plain Python types, or a handle."""
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
    """A name or object of the solution, which lives in the candidate job: calls, attribute reads and
    its truth are asked there; it has no `==` of its own (a handle equals only itself)."""

    def __init__(self, solution, target, label):
        self._solution, self._target, self._label = solution, target, label

    def __call__(self, *args, **kwargs):
        return self._solution.call(self, args, kwargs)

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return self._solution.ask("get", ("attr", self._target, name))

    def __bool__(self):
        return bool(self._solution.ask("truth", self._target))

    def __repr__(self):
        return f"<{self._label} of the solution>"


def _remote(target):
    """Stands for a Remote in pickled arguments: the candidate's function of the same name resolves it."""
    raise RuntimeError("only the candidate's process resolves handles")


class Solution:
    """One candidate job that holds the candidate's code; one request, one reply, within a deadline."""

    def __init__(self, channel: Channel):
        self.channel = channel
        self.id = channel.new_id()
        self.deadline = 0.0
        self.timeout_message = ""
        self.failure: SolutionFailed | None = None
        """Set once the job timed out, died or broke the protocol: every later request fails alike."""
        self.names: dict[str, str] = {}

    def load(self, load_s: float, message: str) -> None:
        """Start the job and load solution.py (and the setup code); SolutionFailed if it does not load."""
        self.channel.op({"op": "start", "id": self.id})
        self.deadline, self.timeout_message = time.monotonic() + QUEUE_S, "no candidate job could be started"
        if self._reply().get("hello") is not True:
            raise self._broken("the solution's process broke the judge's protocol")
        self.deadline, self.timeout_message = time.monotonic() + load_s, message
        reply = self._reply()
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
        request = {"op": "call", "target": remote._target, "args": base64.b64encode(buf.getvalue()).decode()}
        return self._value(self._exchange(request))

    def ask(self, op: str, target):
        return self._value(self._exchange({"op": op, "target": target}))

    def _reduce_remote(self, remote: Remote):
        if remote._solution is not self:
            raise SolutionFailed("runtime_error", "a value from an earlier run of the solution was used again")
        return _remote, (remote._target,)

    def _value(self, reply: dict):
        if "value" in reply:
            try:
                return decode(reply["value"], self)
            except Exception as e:  # data that does not make a value: the candidate's to answer for
                raise SolutionFailed(
                    "runtime_error", f"the solution sent a value the judge cannot read ({describe(e)})"
                ) from None
        if "unreadable" in reply:
            raise SolutionFailed("runtime_error", f"the value returned cannot be judged: {reply['unreadable']}")
        if "too_large" in reply:
            raise SolutionFailed("runtime_error", f"the value returned is larger than {VALUE_LIMIT >> 20} MiB")
        if "error" in reply:
            raise rebuild_error(reply)
        raise self._broken("the solution's process broke the judge's protocol")

    def _broken(self, message: str, status: str = "runtime_error") -> SolutionFailed:
        self.failure = SolutionFailed(status, message)
        self.close()
        return self.failure

    def _exchange(self, request: dict) -> dict:
        if self.failure is not None:
            raise self.failure
        self.channel.op({"op": "send", "id": self.id, "line": json.dumps(request)})
        return self._reply()

    def _reply(self) -> dict:
        if self.failure is not None:
            raise self.failure
        msg = self.channel.wait(self.id, self.deadline)
        if msg is None:
            raise self._broken(self.timeout_message, "timeout")
        kind, payload = msg
        if kind == "ended":
            if payload.get("status") == "sandbox_error":  # the host's fault, not the candidate's
                raise self._broken(
                    f"the candidate's job could not start: {payload.get('message', '')}", "sandbox_error"
                )
            if payload.get("too_long") == "line":
                raise self._broken(f"the solution's process sent more than {VALUE_LIMIT >> 20} MiB in one reply")
            if payload.get("too_long") == "flood":
                raise self._broken("the solution's process wrote more than the judge asked for, faster than it reads")
            raise self._broken(f"the solution's process ended ({ended_how(payload)}) instead of answering")
        try:
            reply = json.loads(payload)
        except (ValueError, RecursionError):
            reply = None
        if not isinstance(reply, dict):
            raise self._broken("the solution's process sent a reply the judge cannot read")
        return reply

    def close(self) -> None:
        self.channel.op({"op": "stop", "id": self.id})


def ended_how(info: dict) -> str:
    """How a candidate job ended, from the host's Result."""
    if info.get("signal"):
        return f"signal {info['signal']}"
    if info.get("exit_code") is not None and info.get("status") in ("ok", "nonzero_exit"):
        return f"exit code {info['exit_code']}"
    return f"{info.get('status')}: {info.get('message', '')}".strip(": ")


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
        "seconds": 0.0,
    }


def _imports(code: str) -> list[ast.stmt]:
    """The module-level import statements of `code` (none when it does not parse)."""
    try:
        todo: list[ast.stmt] = list(ast.parse(code).body)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    found: list[ast.stmt] = []
    while todo:
        node = todo.pop(0)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        elif isinstance(node, (ast.If, ast.Try)):
            todo.extend(node.body + node.orelse + getattr(node, "finalbody", []))
    return found


# -- the judge ----------------------------------------------------------------------------------


class Judge:
    def __init__(self, spec: dict, channel: Channel):
        self.spec = spec
        self.channel = channel
        self.kind = spec["kind"]
        self.budget = float(spec["time_budget_s"])
        self.solution: Solution | None = None
        self.ns: dict[str, Any] = {}
        self.own: set[str] = set()

    def run(self) -> dict:
        report: dict[str, Any] = {"load_status": None, "load_error": None, "results": [], "public": None}
        tests, public = self.spec["tests"], self.spec["public"]
        try:
            compile(self.spec["solution"], "solution.py", "exec", dont_inherit=True)
        except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError) as e:
            return self._load_failed(report, "parse_error", _syntax_text(e))
        try:
            self.trees = {t["source"]: ast.parse(t["source"]) for t in tests + public if "source" in t}
            if self.kind == "function":
                module = types.ModuleType("__task__")
                sys.modules["__task__"] = module
                self.ns = module.__dict__
                exec(compile(self.spec["prefix"], "<problem>", "exec"), self.ns)
                # the setup runs in the solution's namespace; its imports, and the reference
                # solution's, run here too, so that the modules the tests use are the judge's own
                exec(compile(ast.Module(_imports(self.spec["setup"]), []), "<setup>", "exec"), self.ns)
                for node in _imports(self.spec["reference"]):
                    try:
                        exec(compile(ast.Module([node], []), "<reference>", "exec"), self.ns)
                    except Exception:
                        pass
        except Exception as e:
            return self._load_failed(report, "problem_error", f"the problem's own code failed: {describe(e)}")
        self.own = set(self.ns)
        """The problem's own names: they come before the candidate's."""
        if self.spec["run_public"]:
            shown = self.run_phase(public)
            report["public"] = shown["results"]
            self.channel.op({"op": "public", **shown})
            done = {json.dumps(t, sort_keys=True): r for t, r in zip(public, shown["results"])}
        else:
            done = {}
        todo = [t for t in tests if json.dumps(t, sort_keys=True) not in done]
        stop = self.spec["stop_at_timeout"] and any(r["status"] == "timeout" for r in done.values())
        hidden = self.run_phase(todo, "not run: an earlier test timed out" if stop else None)
        ran = dict(zip(map(id, todo), hidden["results"]))
        report["results"] = [done.get(json.dumps(t, sort_keys=True)) or ran[id(t)] for t in tests]
        report["load_status"], report["load_error"] = hidden["load_status"], hidden["load_error"]
        return report

    def _load_failed(self, report: dict, status: str, error: str) -> dict:
        report["load_status"], report["load_error"] = status, error
        report["results"] = [result(status, error=error) for _ in self.spec["tests"]]
        if self.spec["run_public"]:
            report["public"] = [result(status, error=error) for _ in self.spec["public"]]
            self.channel.op({"op": "public", "results": report["public"], "load_status": status, "load_error": error})
        return report

    def run_phase(self, tests: list, stopped: str | None = None) -> dict:
        """Run `tests` in fresh candidate jobs: {results, load_status, load_error}."""
        out: dict[str, Any] = {"results": [], "load_status": None, "load_error": None}
        try:
            out["results"] = self.run_tests(tests, stopped)
        except SolutionFailed as e:  # the solution did not load: every test of the phase fails alike
            out["load_status"], out["load_error"] = e.status, str(e)
            out["results"] = [result(e.status, error=str(e)) for _ in tests]
        finally:
            if self.solution is not None:
                self.solution.close()
                self.solution = None
        return out

    def run_tests(self, tests: list, stopped: str | None) -> list:
        end = time.monotonic() + self.budget
        out = []
        for test in tests:
            now = time.monotonic()
            if stopped is None and now >= end:
                stopped = f"not run: the problem's time budget of {self.budget:g} s ran out"
            if stopped is not None:
                out.append(result("not_run", error=stopped))
                continue
            limit = float(test["timeout_s"])
            if self.kind == "function" and self.solution is None:
                self.start(limit + LOAD_GRACE_S)
                now = time.monotonic()
            deadline = min(now + limit, end)
            message = (
                f"no answer within {limit:.3g} s"
                if now + limit <= end
                else f"the problem's time budget of {self.budget:g} s ran out"
            )
            if self.kind == "program":
                res = self.run_program(test, deadline, message)
            else:
                res = self.run_function(test, deadline, message)
                assert self.solution is not None  # started above
                if self.solution.failure is not None:  # it hung or died: a fresh job runs the rest
                    self.solution = None
            res["seconds"] = res["seconds"] or round(time.monotonic() - now, 4)
            out.append(res)
            if res["status"] == "timeout" and self.spec["stop_at_timeout"]:
                stopped = "not run: an earlier test timed out"
        return out

    def start(self, load_s: float) -> None:
        """A candidate job with the solution loaded, and the tests' free names bound; SolutionFailed
        if it does not load (every test of the phase then fails with that status)."""
        self.solution = Solution(self.channel)
        try:
            self.solution.load(load_s, "the solution did not finish loading in time")
        except SolutionFailed:
            self.solution.close()
            self.solution = None
            raise
        names = self.solution.names
        entry = self.spec["entry_point"]
        if entry and names.get(entry) != "value":
            self.solution.close()
            self.solution = None
            raise SolutionFailed("runtime_error", f"the code does not define `{entry}`")
        supplied = set(self.spec["supplied"]) | {entry}
        free = {node.id for tree in self.trees.values() for node in ast.walk(tree) if isinstance(node, ast.Name)}
        for name in [n for n, v in self.ns.items() if isinstance(v, Remote)]:  # an earlier job's
            del self.ns[name]
        for name in sorted(free):
            kind = names.get(name)
            if name == entry or (name in supplied and name not in self.own and kind is not None):
                self.ns[name] = Remote(self.solution, ("name", name), f"`{name}`")
            elif name in self.ns or hasattr(builtins, name):
                continue
            elif kind is not None and kind.startswith("module "):  # `np` of the answer's `import numpy as np`
                _bind_module(self.ns, name, kind.removeprefix("module "))
            elif name in sys.stdlib_module_names:  # MBPP's `math.isclose` without an import of its own
                _bind_module(self.ns, name, name)

    def run_function(self, test: dict, deadline: float, message: str) -> dict:
        assert self.solution is not None  # run_tests starts it first
        self.solution.deadline, self.solution.timeout_message = deadline, message
        tree = self.trees[test["source"]]
        pair = _compare_assert(tree)
        self.channel.expired = False
        try:
            signal.setitimer(signal.ITIMER_REAL, max(0.01, deadline - time.monotonic()))
            try:
                if pair is None:
                    exec(compile(tree, "<test>", "exec"), self.ns)
                else:
                    left = eval(compile(pair[0], "<test>", "eval"), self.ns)
                    right = eval(compile(pair[1], "<test>", "eval"), self.ns)
                    tol = test.get("float_tol")
                    if not (same(left, right, tol) if tol is not None else bool(left == right)):
                        raise Mismatch(left, right)
            finally:  # the alarm is off before any outcome is handled
                signal.setitimer(signal.ITIMER_REAL, 0)
                self.channel.expired = False
            res = result("passed")
        except SolutionFailed as e:
            res = result(e.status, error=str(e))
        except Deadline:
            if self.solution.failure is None:  # the test's own code ran out of time: its job is ended
                self.solution._broken(message, "timeout")
            res = result("timeout", error=message)
        except ProblemBroken as e:
            res = result("problem_error", error=str(e))
        except Mismatch as e:
            res = result("incorrect", got=show(e.got), expected=show(e.expected))
        except Exception as e:
            if hasattr(e, "solution_traceback"):
                res = result("runtime_error", error=e.solution_traceback, error_type=type(e).__name__)
            elif isinstance(e, AssertionError):
                res = result("incorrect", error=clip(f"the assertion failed {_message(e)}".strip()))
            else:
                res = result("incorrect", error=clip(f"the test raised {describe(e)}"))
        if self.solution.failure is not None:  # even where the test caught it: a hung or dead solution fails
            res = result(self.solution.failure.status, error=str(self.solution.failure))
        return res

    def run_program(self, test: dict, deadline: float, message: str) -> dict:
        job = self.channel.new_id()
        wall = max(0.01, deadline - time.monotonic())
        self.channel.op({"op": "run", "id": job, "stdin": test["stdin"], "wall_s": wall})
        msg = self.channel.wait(job, deadline + QUEUE_S)
        if msg is None or msg[0] != "ended":
            self.channel.op({"op": "stop", "id": job})
            return result("timeout", error=message)
        info = msg[1]
        status = info.get("status")
        if status == "timeout":
            res = result("timeout", error=message)
        elif status == "sandbox_error":
            res = result("sandbox_error", error=f"the program's job could not start: {info.get('message', '')}")
        elif status == "output_limit":
            res = result("runtime_error", error=f"the program printed more than {VALUE_LIMIT >> 20} MiB")
        elif status != "ok":
            tail = "\n".join(str(info.get("stderr", "")).strip().splitlines()[-10:])
            how = f"was killed by signal {info['signal']}" if info.get("signal") else f"ended ({ended_how(info)})"
            if status == "nonzero_exit":
                how = f"exited with code {info.get('exit_code')}"
            res = result("runtime_error", error=f"the program {how}" + (f":\n{tail}" if tail else ""))
        elif same_output(str(info.get("stdout", "")), test["stdout"]):
            res = result("passed")
        else:
            res = result("incorrect", got=clip(str(info.get("stdout", ""))), expected=clip(test["stdout"]))
        res["seconds"] = float(info.get("wall_s") or 0.0)
        return res


def _bind_module(ns: dict, name: str, module: str) -> None:
    """`name` in the tests' namespace as the real module `module`, when it is part of the standard library."""
    if module.split(".")[0] in sys.stdlib_module_names and module.split(".")[0] not in ("this", "antigravity"):
        try:
            ns[name] = importlib.import_module(module)
        except ImportError:
            pass


def _message(e: BaseException) -> str:
    try:
        return str(e)
    except Exception:
        return "(its message cannot be shown)"


def _syntax_text(e: BaseException) -> str:
    if isinstance(e, SyntaxError):
        where = f'  File "solution.py", line {e.lineno}\n    {(e.text or "").strip()}\n' if e.lineno else ""
        return f"{where}{type(e).__name__}: {e.msg}"
    return f"{type(e).__name__}: {e}"


def main() -> None:
    global CHANNEL
    CHANNEL = Channel()
    signal.signal(signal.SIGALRM, _on_alarm)
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 5000))
    spec = CHANNEL.read_spec()
    CHANNEL.op({"op": "report", **Judge(spec, CHANNEL).run()})


if __name__ == "__main__":
    main()
