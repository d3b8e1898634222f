"""The test judge (standalone: stdlib only). It runs in a sandbox job of its own; the candidate runs
in other jobs, which the host starts when the judge asks. The judge and the candidate never share a
process, a namespace, a PID namespace or a file: the candidate cannot name the judge, and the judge
receives only what the candidate declares, through a channel the host owns.

- function problems: a candidate job (candidate.py) loads solution.py and nothing else. The problem's
  own code runs here: its prefix, the imports of its setup and reference solution, the reference's
  helpers the tests use, and the setup code (MBPP's test_setup_code, run again for each candidate
  job; a public run's only the statements the public tests need), whose calls of the answer's classes
  build the answer's objects in its job. The tests run here, as the benchmark wrote them (HumanEval's
  `check(candidate)`, MBPP's asserts), except that every assert is recorded instead of stopping the
  test (`Checks`): the calls a test makes never depend on whether an earlier check passed, so being
  called again tells an answer nothing. A test whose own control flow would decide its calls from
  the results is not run (`calls_follow_results`).
  Only the answer's entry points (the entry point, the reference's classes the setup or tests use)
  are the candidate's, as stand-ins (`Remote`) whose calls go to the candidate job; every other name
  resolves here, from the problem's own code, the builtins and the real modules, so a test's
  expected side is computed from the judge's names only. Arguments go down pickled (`_Arguments`:
  data, handles, and objects of the problem's classes as their attributes); results come back as
  JSON data (numbers, strings, containers, Counter, Fraction, Decimal, ...) rebuilt here, so every
  comparison is Python's own `==` on the judge's values and no object, method or `__eq__` of the
  candidate's ever runs here or sees an expected value. Any other object stays in the candidate job
  as a handle (calls, attribute reads and sets and its truth go there).
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
"id", "stdin", "wall_s"} (a program job), {"op": "stop", "id"}, {"op": "test", "phase", "index",
"seconds"} and {"op": "tested"} (a test's own code starts and ends: the host's clock, see
channel.judge), {"op": "public", ...} and, last,
{"op": "report", "load_status", "load_error", "results", "public"}; result: {"passed", "status",
"got", "expected", "error", "error_type", "seconds"}.
"""

import ast
import base64
import builtins
import collections
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
FRACTION_BITS = 1 << 16
"""Bits a Fraction's numerator or denominator may have: rebuilding one takes a gcd, quadratic in its
size and in one C call no alarm interrupts (65536 bits: tens of milliseconds)."""
RANGE_LEN = 1 << 24
"""Items a range may have: a test's `sum(r)` or `set(r)` walks it in one C call no alarm interrupts
(16M items: well under a second)."""


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


class TooCostly(ValueError):
    """A value whose rebuilding or use here would cost more than its size allows (a huge Fraction or range)."""


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
        parts = [int(_of(v, str), 16) for v in (x[1], x[2])]
        if max(abs(v).bit_length() for v in parts) > FRACTION_BITS:
            raise TooCostly(f"a Fraction whose numerator or denominator has more than {FRACTION_BITS} bits")
        return fractions.Fraction(*parts)
    if tag == "Decimal":
        return decimal.Decimal(_of(x[1], str))
    if tag == "range":
        r = range(*(int(_of(v, str), 16) for v in x[1:4]))
        if (r.stop - r.start) // r.step > RANGE_LEN:
            raise TooCostly(f"a range of more than {RANGE_LEN} items")
        return r
    if tag == "ref":
        return Remote(solution, ("ref", _of(x[1], int)), HANDLE_KINDS.get(_of(x[2], str), "an object"))
    raise ValueError(f"unknown value kind {tag!r}")


HANDLE_KINDS = {
    "class": "a class",
    "function": "a function",
    "generator": "a generator",
    "module": "a module",
    "object": "an object",
}
"""How feedback names a handle, from the kind the candidate's job reports (`candidate.kind`); any other
text the job sends is "an object": the class's own name is the answer's text, and feedback is the
judge's."""

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

    def __setattr__(self, name, value):  # the setup's `root.left = Node(2)`: set on the answer's object
        if name.startswith("_"):
            object.__setattr__(self, name, value)
        else:
            self._solution.call(self, (value,), {}, ("set", name))

    def __bool__(self):
        return bool(self._solution.ask("truth", self._target))

    def __repr__(self):
        return f"<{self._label} of the solution>"


def _remote(target):
    """Stands for a Remote in pickled arguments: the candidate's function of the same name resolves it."""
    raise RuntimeError("only the candidate's process resolves handles")


def _record(name):
    """Stands for an object of a class of the problem's code in pickled arguments: the candidate's
    function of the same name makes a plain object of a class of that name, which gets its attributes."""
    raise RuntimeError("only the candidate's process makes records")


class _Arguments(pickle.Pickler):
    """Pickles what a test passes to the answer: data, the answer's own objects (handles) by their
    place in its job, and objects of the problem's own classes (the setup's `Node`) as their class's
    name and their attributes, never their code. The problem's functions and classes cannot cross."""

    def __init__(self, buf, solution):
        super().__init__(buf, protocol=pickle.HIGHEST_PROTOCOL)
        self.solution = solution

    def reducer_override(self, obj):
        if type(obj) is Remote:
            if obj._solution is not self.solution:
                raise SolutionFailed("runtime_error", "a value from an earlier run of the solution was used again")
            return _remote, (obj._target,)
        if isinstance(obj, (types.FunctionType, type)) and getattr(obj, "__module__", None) == "__task__":
            raise ProblemBroken(
                f"the test passes {obj.__name__}, code of the problem, to the solution: only data crosses"
            )
        kind = type(obj)
        if kind.__module__ == "__task__":
            state = dict(getattr(obj, "__dict__", {}))
            for slot in (s for k in kind.__mro__ for s in getattr(k, "__slots__", ())):
                if hasattr(obj, slot):
                    state[slot] = getattr(obj, slot)
            return _record, (kind.__name__,), state
        return NotImplemented


class Solution:
    """One candidate job that holds the candidate's code; one request, one reply, within a deadline."""

    def __init__(self, channel: Channel):
        self.channel = channel
        self.id = channel.new_id()
        self.deadline = 0.0
        self.timeout_message = ""
        self.failure: SolutionFailed | None = None
        """Set once the job timed out, died or broke the protocol: every later request fails alike."""
        self.closed = False
        self.names: dict[str, str] = {}

    def load(self, load_s: float, message: str) -> None:
        """Start the job and load solution.py; SolutionFailed if it does not load."""
        self.channel.op({"op": "start", "id": self.id})
        self.channel.op({"op": "send", "id": self.id, "line": json.dumps({"op": "load"})})
        self.deadline, self.timeout_message = time.monotonic() + QUEUE_S, "no candidate job could be started"
        if self._reply().get("hello") is not True:
            raise self._broken("the solution's process broke the judge's protocol")
        self.deadline, self.timeout_message = time.monotonic() + load_s, message
        reply = self._reply()
        if "load_error" in reply:
            err = reply["load_error"] if isinstance(reply["load_error"], dict) else {}
            raise SolutionFailed("runtime_error", str(err.get("error", "the solution did not load")))
        names = reply.get("names")
        if not isinstance(names, dict):
            raise self._broken("the solution's process broke the judge's protocol")
        self.names = {k: v for k, v in names.items() if isinstance(k, str) and k.isidentifier() and isinstance(v, str)}

    def call(self, remote: Remote, args: tuple, kwargs: dict, op: tuple = ("call",)):
        """`remote(*args, **kwargs)` in the candidate job (op ("set", name): `remote.name = args[0]`)."""
        buf = io.BytesIO()
        try:
            _Arguments(buf, self).dump((args, kwargs))
        except (pickle.PicklingError, TypeError, AttributeError, RecursionError) as e:
            raise ProblemBroken(f"the test passes a value that cannot be sent to the solution: {e}") from None
        request = {"op": op[0], "target": remote._target, "args": base64.b64encode(buf.getvalue()).decode()}
        if op[0] == "set":
            request["name"] = op[1]
        return self._value(self._exchange(request))

    def ask(self, op: str, target):
        return self._value(self._exchange({"op": op, "target": target}))

    def _value(self, reply: dict):
        if "value" in reply:
            try:
                return decode(reply["value"], self)
            except TooCostly as e:
                raise SolutionFailed("runtime_error", f"the value returned cannot be judged: {e}") from None
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
        if self.closed:
            raise SolutionFailed("runtime_error", "a value from an earlier run of the solution was used again")
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
        if not self.closed:
            self.closed = True
            self.channel.op({"op": "stop", "id": self.id})


def ended_how(info: dict) -> str:
    """How a candidate job ended, from the host's Result."""
    if info.get("signal"):
        return f"signal {info['signal']}"
    if info.get("exit_code") is not None and info.get("status") in ("ok", "nonzero_exit"):
        return f"exit code {info['exit_code']}"
    return f"{info.get('status')}: {info.get('message', '')}".strip(": ")


# -- comparisons --------------------------------------------------------------------------------


WHOLE_LIMIT = 2.0**53
"""Below it a float can hold a count exactly (and its neighbours); from it on every float is a whole number."""


def same(got, expected, rel_tol: float, abs_tol: float = 0.0) -> bool:
    """Python's `==`, except that a float the answer gives matches an expected float when
    `math.isclose(got, expected, rel_tol=rel_tol, abs_tol=abs_tol)` holds and, where the expected float
    is a whole number below 2**53, `got` rounds to it (a count stays a count), also inside lists and
    tuples; an int is compared exactly. See docs/code.md, "Floats"."""
    if isinstance(expected, float) and isinstance(got, float):
        if not math.isclose(got, expected, rel_tol=rel_tol, abs_tol=abs_tol):
            return False
        return not (expected.is_integer() and abs(expected) < WHOLE_LIMIT) or round(got) == expected
    if isinstance(expected, (list, tuple)) and type(got) is type(expected):
        return len(got) == len(expected) and all(same(g, e, rel_tol, abs_tol) for g, e in zip(got, expected))
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


# -- checks that do not stop the test -----------------------------------------------------------


class Checks:
    """The asserts of one test, recorded as they run (the test goes on after a failed one), so that
    the calls a test makes never depend on whether an earlier check passed: HumanEval's `check`
    would otherwise stop at its first failed assert, and being called again would tell the answer
    that its last result was right. The first failure is the test's; it is rendered after the phase
    (`render`), so a failure costs the judge no more time between two calls than a pass."""

    def __init__(self, rel_tol: float | None, abs_tol: float = 0.0):
        self.rel_tol, self.abs_tol = rel_tol, abs_tol
        self.made = 0
        self.failed = 0
        self.first: tuple | None = None

    def check(self, value, message=None) -> None:
        ok = bool(value)  # may ask the candidate (a handle's truth) or raise: the test's code records that
        self._count(ok, ("assert", None, None, message))

    def equal(self, got, expected, message=None) -> None:
        if self.rel_tol is None:
            ok = bool(got == expected)
        else:
            ok = same(got, expected, self.rel_tol, self.abs_tol)
        self._count(ok, ("equal", got, expected, message))

    def error(self, e: Exception) -> None:
        self._count(False, ("raised", e, None, None))

    def _count(self, ok: bool, failure: tuple) -> None:
        self.made += 1
        if not ok:
            self.failed += 1
            if self.first is None:
                self.first = failure

    def render(self) -> dict:
        """The first failure as a result (values and messages shown only now, the candidate's job ended)."""
        assert self.first is not None
        kind, a, b, message = self.first
        said = ""
        if message is not None:
            try:
                said = str(message())
            except BaseException:
                said = "(its message cannot be shown)"
        if kind == "equal":
            return result(
                "incorrect", got=show(a), expected=show(b), error=f"the assertion failed {said}" if said else ""
            )
        if kind == "assert":
            return result("incorrect", error=clip(f"the assertion failed {said}".strip()))
        return raised(a)


def raised(e: BaseException) -> dict:
    """The result of a test whose code raised `e`: the candidate's exception, or the test's own."""
    if hasattr(e, "solution_traceback"):
        return result("runtime_error", error=e.solution_traceback, error_type=type(e).__name__)
    if isinstance(e, AssertionError):
        return result("incorrect", error=clip(f"the assertion failed {_message(e)}".strip()))
    return result("incorrect", error=clip(f"the test raised {describe(e)}"))


class _Recorded(ast.NodeTransformer):
    """`assert T, M` -> `try: __judge__.check(T, lambda: M) / except Exception as e: __judge__.error(e)`,
    and `assert L == R` -> `__judge__.equal(L, R, ...)` (so the values are kept for the report). T, L
    and R are evaluated where the assert was, in its scope; the judge's own exceptions (timeouts, a
    dead candidate) are BaseExceptions and still end the test."""

    def visit_Assert(self, node: ast.Assert) -> ast.stmt:
        test = node.test
        message = [ast.Lambda(_NO_ARGS, node.msg)] if node.msg is not None else []
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq):
            call = _judge_call("equal", [test.left, test.comparators[0], *message])
        else:
            call = _judge_call("check", [test, *message])
        handler = ast.ExceptHandler(
            ast.Name("Exception", ast.Load()),
            "__judge_error__",
            [ast.Expr(_judge_call("error", [ast.Name("__judge_error__", ast.Load())]))],
        )
        return ast.copy_location(ast.Try([ast.Expr(call)], [handler], [], []), node)


_NO_ARGS = ast.arguments(posonlyargs=[], args=[], vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[])


def _judge_call(method: str, args: list) -> ast.Call:
    return ast.Call(ast.Attribute(ast.Name("__judge__", ast.Load()), method, ast.Load()), args, [])


def recorded(tree: ast.Module) -> ast.Module:
    """`tree` with its asserts turned into recorded checks (see Checks)."""
    return ast.fix_missing_locations(_Recorded().visit(tree))


# -- tests whose calls would follow the answer's results ----------------------------------------

_LOOPS = (ast.For, ast.AsyncFor, ast.While, ast.comprehension, ast.GeneratorExp, ast.ListComp, ast.SetComp,
          ast.DictComp, ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef)  # fmt: skip
"""Constructs whose code may run again (a later call then follows whatever they decided)."""
_BROAD = {"AssertionError", "Exception", "BaseException"}


def calls_follow_results(tree: ast.Module, candidate: set[str], known: set[str] | frozenset[str] = frozenset()) -> str:
    """Where a test's calls to the candidate could depend on the answer's results: '' when they cannot.
    With its asserts recorded (see Checks), a test decides its calls from results only through its own
    control flow: a branch, a loop, a short-circuit (`and`, `or`, `all(...)` over a generator), or an
    exception outside an assert, whose outcome mixes a value of the candidate with the test's own data
    (a constant, a variable), followed by another call; or by catching its own failed asserts. Such a
    test would tell an answer which of its results were right, so the judge does not run it.
    `candidate`: the names the candidate supplies; `known`: names of the problem's own code (its
    functions and imports), which carry no data of the test."""
    tainted = _tainted(tree, set(candidate))
    known = set(known) | _defined(tree)
    sites = [(n.lineno, n.col_offset) for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id in tainted]
    loops: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, _LOOPS):
            loops.update(id(inner) for inner in ast.walk(node) if inner is not node)
        if isinstance(node, ast.While):
            loops.add(id(node.test))
    for node, decision in _decisions(tree):
        if _mixes(decision, tainted, known):
            end = (decision.end_lineno or 0, decision.end_col_offset or 0)
            if id(decision) in loops or id(node) in loops or any(s > end for s in sites):
                return f"line {decision.lineno}: `{clip(ast.unparse(decision), 80)}` can decide which calls follow"
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(isinstance(n, ast.Assert) for s in node.body for n in ast.walk(s)):
            for handler in node.handlers:
                caught = {_name(n) for n in ast.walk(handler.type)} if handler.type is not None else _BROAD
                if caught & _BROAD:
                    return f"line {node.lineno}: it catches its own failed asserts"
    return ""


def _decisions(tree: ast.Module):
    """(node, expression) of every place where code decides what runs next, outside an assert's own
    verdict: branches, loops' iterables, short-circuits, and statements that may raise midway."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.If, ast.While, ast.IfExp)):
            yield node, node.test
        elif isinstance(node, ast.BoolOp):
            yield from ((node, v) for v in node.values[:-1])
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            yield node, node.iter
            yield from ((node, c) for c in getattr(node, "ifs", []))
        elif isinstance(node, ast.GeneratorExp):  # consumed lazily: all() / any() stop early
            yield node, node.elt
        elif isinstance(node, ast.Match):
            yield node, node.subject
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr, ast.Return)):
            if node.value is not None:
                yield node, node.value
        elif isinstance(node, ast.Raise) and node.exc is not None:
            yield node, node.exc


def _name(node: ast.AST) -> str:
    return node.id if isinstance(node, ast.Name) else ""


def _root(node: ast.AST) -> str:
    """The name an attribute, item or call chain starts from ('' when none)."""
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else ""


def _mixes(expr: ast.AST, tainted: set[str], known: set[str]) -> bool:
    """Whether `expr` combines a value of the candidate with the test's own data. A call of the
    candidate stands for its result (its arguments are looked at on their own)."""
    own = data = False
    todo = [expr]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Call) and _root(node.func) in tainted:
            own = True
            if any(_mixes(a, tainted, known) for a in [*node.args, *(k.value for k in node.keywords)]):
                return True
            continue
        if isinstance(node, ast.Name):
            if node.id in tainted:
                own = True
            elif node.id not in known and not hasattr(builtins, node.id):
                data = True
            continue
        if isinstance(node, ast.Constant):
            data = data or (node.value is not None and node.value is not Ellipsis)
            continue
        if isinstance(node, (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):  # a function's name is no data
            todo.extend([*node.args, *(k.value for k in node.keywords)])
            continue
        todo.extend(ast.iter_child_nodes(node))
    return own and data


def _defined(tree: ast.Module) -> set[str]:
    """Names the test binds to functions, classes and modules (no data of its own)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _tainted(tree: ast.Module, names: set[str]) -> set[str]:
    """`names` and every name bound, anywhere in the test, from a value that may come from them: by
    assignment, a loop, `with`, a call's parameters, a function returning one."""
    functions = {n.name: n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    uses = lambda node: any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(node))
    while True:
        before = len(names)
        for node in ast.walk(tree):
            bound: list[tuple[ast.AST, ast.AST]] = []
            if isinstance(node, ast.Assign):
                bound = [(t, node.value) for t in node.targets]
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
                bound = [(node.target, node.value)]
            elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
                bound = [(node.target, node.iter)]
            elif isinstance(node, ast.withitem) and node.optional_vars is not None:
                bound = [(node.optional_vars, node.context_expr)]
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                returns = [n.value for n in ast.walk(node) if isinstance(n, (ast.Return, ast.Yield)) and n.value]
                if any(uses(r) for r in returns):
                    names.add(node.name)
            elif isinstance(node, ast.Call):
                callee = node.func if isinstance(node.func, ast.Lambda) else functions.get(_root(node.func))
                if callee is not None and isinstance(node.func, (ast.Name, ast.Lambda)):
                    params = callee.args
                    every = [*params.posonlyargs, *params.args, *params.kwonlyargs]
                    every += [a for a in (params.vararg, params.kwarg) if a is not None]
                    passed = [*node.args, *(k.value for k in node.keywords)]
                    if any(uses(a) for a in passed):  # which parameter: all of them may hold it
                        names.update(a.arg for a in every)
            for target, value in bound:
                if uses(value):
                    names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        if len(names) == before:
            return names


# -- the judge ----------------------------------------------------------------------------------


class Judge:
    def __init__(self, spec: dict, channel: Channel):
        self.spec = spec
        self.channel = channel
        self.kind = spec["kind"]
        self.budget = float(spec["time_budget_s"])
        self.solution: Solution | None = None
        self.ns: dict[str, Any] = {}
        self.base: dict[str, Any] = {}
        """The problem's own names (its prefix, imports and reference helpers), before any setup ran."""
        self.own: set[str] = set()
        self.setup = ast.Module([], [])
        """The setup code of the phase running now: it runs here for each candidate job."""
        self.refused: dict[str, str] = {}
        """Tests whose calls would follow the answer's results (source -> where): not run."""
        self.test: tuple[str, int] = ("public", 0)
        """The phase and place in it of the test running now."""

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
                # the modules the tests use are the judge's own: the setup's imports and the reference
                # solution's (one that fails here, numpy where it is not installed, is left out)
                exec(compile(ast.Module(_imports(self.spec["setup"]), []), "<setup>", "exec"), self.ns)
                for node in _imports(self.spec["reference"]):
                    try:
                        exec(compile(ast.Module([node], []), "<reference>", "exec"), self.ns)
                    except Exception:
                        pass
                exec(compile(self.spec["helpers"], "<reference>", "exec"), self.ns)
            setups = {"public": ast.parse(self.spec["public_setup"]), "hidden": ast.parse(self.spec["setup"])}
        except Exception as e:
            return self._load_failed(report, "problem_error", f"the problem's own code failed: {describe(e)}")
        self.base = dict(self.ns)
        self.own = set(self.ns)
        """The problem's own names: they come before the candidate's."""
        candidate = set(self.spec["supplied"]) | {self.spec["entry_point"]}
        for source, tree in self.trees.items():
            why = calls_follow_results(tree, candidate, self.own - candidate)
            if why:
                self.refused[source] = why
            self.trees[source] = recorded(tree)
        if self.spec["run_public"]:  # a rerun after a stalled hidden test keeps the public results it sent
            shown = self.spec["public_results"] or self.run_phase(public, None, setups["public"], "public")
            report["public"] = shown["results"]
            self.channel.op({"op": "public", **shown})
            done = {json.dumps(t, sort_keys=True): r for t, r in zip(public, shown["results"])}
        else:
            done = {}
        todo = [t for t in tests if json.dumps(t, sort_keys=True) not in done]
        stop = self.spec["stop_at_timeout"] and any(r["status"] == "timeout" for r in done.values())
        hidden = self.run_phase(
            todo, "not run: an earlier test timed out" if stop else None, setups["hidden"], "hidden"
        )
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

    def run_phase(self, tests: list, stopped: str | None, setup: ast.Module, phase: str) -> dict:
        """Run `tests` in fresh candidate jobs, `setup` run here for each: {results, load_status,
        load_error}. Failures are put in words only once the phase's last job has ended."""
        out: dict[str, Any] = {"results": [], "load_status": None, "load_error": None}
        self.setup = setup
        try:
            out["results"] = self.run_tests(tests, stopped, phase)
        except SolutionFailed as e:  # the solution did not load: every test of the phase fails alike
            out["load_status"], out["load_error"] = e.status, str(e)
            out["results"] = [result(e.status, error=str(e)) for _ in tests]
        finally:
            if self.solution is not None:
                self.solution.close()
                self.solution = None
        for res in out["results"]:
            checks = res.pop("_checks", None)
            if checks is not None and checks.first is not None:
                res.update(checks.render(), seconds=res["seconds"])
        return out

    def run_tests(self, tests: list, stopped: str | None, phase: str) -> list:
        """The tests' results. Before each test's own code runs, the host is told which test it is and
        its time (`test`), after it, that it is over (`tested`): a judge held past that time in one C
        call is ended by the host and run again with the test in `spec["stalled"]`, a timeout here."""
        end = time.monotonic() + self.budget
        out = []
        for index, test in enumerate(tests):
            self.test = (phase, index)
            now = time.monotonic()
            if stopped is None and now >= end:
                stopped = f"not run: the problem's time budget of {self.budget:g} s ran out"
            if stopped is not None:
                out.append(result("not_run", error=stopped))
                continue
            if test.get("source") in self.refused:
                why = self.refused[test["source"]]
                out.append(
                    result("problem_error", error=f"the test is not run: its calls would follow the results ({why})")
                )
                continue
            limit = float(test["timeout_s"])
            stalled = index in self.spec["stalled"][phase]  # it held an earlier run of the judge past its time
            if self.kind == "function" and self.solution is None and not stalled:
                self.start(limit + LOAD_GRACE_S)
                now = time.monotonic()
            deadline = min(now + limit, end)
            message = (
                f"no answer within {limit:.3g} s"
                if now + limit <= end
                else f"the problem's time budget of {self.budget:g} s ran out"
            )
            timed_out = False
            if stalled:
                res, timed_out = result("timeout", error=message), True
                res["seconds"] = round(deadline - now, 4)
                if self.solution is not None:  # the rest run in a fresh job, as after any timeout
                    self.solution.close()
                    self.solution = None
            elif self.kind == "program":
                res = self.run_program(test, deadline, message)
                self.clock(None)
            else:
                res = self.run_function(test, deadline, message)
                assert self.solution is not None  # started above
                if self.solution.failure is not None:  # it hung or died: a fresh job runs the rest
                    timed_out = self.solution.failure.status == "timeout"
                    self.solution = None
            res["seconds"] = res["seconds"] or round(time.monotonic() - now, 4)
            out.append(res)
            if (timed_out or res["status"] == "timeout") and self.spec["stop_at_timeout"]:
                stopped = "not run: an earlier test timed out"
        return out

    def start(self, load_s: float) -> None:
        """A candidate job with the solution loaded, the tests' names bound (the answer's entry points
        as handles on that job) and the phase's setup run here; SolutionFailed if it does not load
        (every test of the phase then fails with that status)."""
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
        trees = [*self.trees.values(), self.setup]
        free = {node.id for tree in trees for node in ast.walk(tree) if isinstance(node, ast.Name)}
        self.ns.clear()  # an earlier job's handles and setup go; the problem's own names stay as they were
        self.ns.update(self.base)
        for name in sorted(free):
            kind = names.get(name)
            if name == entry or (name in supplied and kind is not None):
                self.ns[name] = Remote(self.solution, ("name", name), f"`{name}`")
            elif name in self.ns or hasattr(builtins, name):
                continue
            elif kind is not None and kind.startswith("module "):  # `np` of the answer's `import numpy as np`
                _bind_module(self.ns, name, kind.removeprefix("module "))
            elif name in sys.stdlib_module_names:  # MBPP's `math.isclose` without an import of its own
                _bind_module(self.ns, name, name)
        if self.setup.body:
            self.run_setup(load_s)

    def clock(self, seconds: float | None) -> None:
        """Tell the host that the current test's own code runs now, for at most `seconds` (None: it ended)."""
        if seconds is None:
            self.channel.op({"op": "tested"})
        else:
            self.channel.op({"op": "test", "phase": self.test[0], "index": self.test[1], "seconds": seconds})

    def run_setup(self, limit: float) -> None:
        """The phase's setup code, here, with the test's alarm: it may call the answer's entry points
        (MBPP 927 builds trees of the answer's `Node`); a failure fails every test of the phase."""
        assert self.solution is not None
        message = "the problem's setup code, which calls your code, did not finish in time"
        self.solution.deadline, self.solution.timeout_message = time.monotonic() + limit, message
        self.channel.expired = False
        try:
            self.clock(limit)
            signal.setitimer(signal.ITIMER_REAL, limit)
            try:
                exec(compile(self.setup, "<setup>", "exec"), self.ns)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
                self.channel.expired = False
                self.clock(None)
        except Deadline:
            failure = SolutionFailed("timeout", message)
        except ProblemBroken as e:
            failure = SolutionFailed("problem_error", str(e))
        except Exception as e:
            text = getattr(e, "solution_traceback", None) or describe(e)
            failure = SolutionFailed(
                "runtime_error", f"the problem's setup code, which uses your code, failed:\n{text}"
            )
        else:
            return
        self.solution.close()
        self.solution = None
        raise failure

    def run_function(self, test: dict, deadline: float, message: str) -> dict:
        """Run one test with its asserts recorded (see Checks). Its result is its first failure, which
        is put in words after the phase (`_checks`), or how it ended before any check failed."""
        assert self.solution is not None  # run_tests starts it first
        self.solution.deadline, self.solution.timeout_message = deadline, message
        checks = self.ns["__judge__"] = Checks(test.get("rel_tol"), test.get("abs_tol", 0.0))
        self.channel.expired = False
        res = result("passed")
        try:
            self.clock(max(0.01, deadline - time.monotonic()))
            signal.setitimer(signal.ITIMER_REAL, max(0.01, deadline - time.monotonic()))
            try:
                exec(compile(self.trees[test["source"]], "<test>", "exec"), self.ns)
            finally:  # the alarm is off before any outcome is handled
                signal.setitimer(signal.ITIMER_REAL, 0)
                self.channel.expired = False
                self.clock(None)
        except SolutionFailed as e:
            res = result(e.status, error=str(e))
        except Deadline:
            if self.solution.failure is None:  # the test's own code ran out of time: its job is ended
                self.solution._broken(message, "timeout")
            res = result("timeout", error=message)
        except ProblemBroken as e:
            return result("problem_error", error=str(e))
        except Exception as e:
            res = raised(e)
        if self.solution.failure is not None:  # even where the test caught it: a hung or dead solution fails
            res = result(self.solution.failure.status, error=str(self.solution.failure))
        res["checks"] = {"made": checks.made, "failed": checks.failed}
        if checks.first is not None:  # a failed check came before whatever ended the test
            res["_checks"] = checks
        return res

    def run_program(self, test: dict, deadline: float, message: str) -> dict:
        job = self.channel.new_id()
        wall = max(0.01, deadline - time.monotonic())
        self.clock(wall)  # counted by the host from the end of the program's job: the comparison's time
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
