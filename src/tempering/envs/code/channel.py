"""The host's side of a code verdict: it runs the judge (judge.py) in a sandbox job, starts the
candidate jobs the judge asks for in other jobs, and carries their messages (see judge.py).

The host owns every channel: the candidate's output reaches the judge only as lines the host framed
and capped, and how a candidate job ended is the host's own `Result`. Judge jobs run in a pool of
their own beside the caller's sandbox (same backend and size), which runs the candidate jobs: a judge
holds one candidate job at a time, so judges waiting for candidates can never fill the pool the
candidates need.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tempering.sandbox import Job, Limits, Result, Sandbox

HERE = Path(__file__).parent
JUDGE = (HERE / "judge.py").read_text()
CANDIDATE = (HERE / "candidate.py").read_text()
VALUE_LIMIT = 4 << 20
"""Bytes of one line of a candidate job (a reply), and of one program's output."""
BACKLOG = 3 * VALUE_LIMIT
"""Bytes of a candidate's lines the host holds for a judge that has not read them yet; a candidate
that writes more (a flood) is ended as one whose line is too long."""
JOB_ENV = {"OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}
MEMORY_MB = 1024

_JUDGES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _judges(sandbox: Sandbox) -> Sandbox:
    """The pool judge jobs run in: `sandbox`'s backend and size, with slots of their own."""
    if sandbox not in _JUDGES:
        _JUDGES[sandbox] = Sandbox(
            backend=sandbox.backend, concurrency=sandbox.concurrency, root=sandbox._root_parent, image=sandbox.image
        )
    return _JUDGES[sandbox]


@dataclass
class Verdict:
    """What the judge said, and how its job ended."""

    report: dict | None
    """The judge's report (None when its job ended without one)."""
    public: dict | None
    """The public phase's {results, load_status, load_error}, sent before any hidden test ran."""
    judge: Result
    """The judge job's sandbox `Result`."""


async def judge(sandbox: Sandbox, spec: dict, program: str, wall_s: float) -> Verdict:
    """Run the judge on `spec` (see judge.py) against `program`, within `wall_s` in all. The test the
    judge runs is timed here too (`STALL_GRACE_S`): a judge held past it in one C call (the test's own
    `set()` or `sum()` over the answer's values, which the judge's alarm cannot interrupt) is ended,
    and the judge runs again from the start with that test a timeout (its public results, once sent,
    are kept as they were), so the test's limit holds whatever its code does with the answer's values."""
    end = time.monotonic() + wall_s
    stalled: dict[str, list[int]] = {"public": [], "hidden": []}
    public = None
    while True:
        again = {**spec, "stalled": stalled, "public_results": public}
        verdict, stall = await _judge_once(sandbox, again, program, max(1.0, end - time.monotonic()))
        public = verdict.public
        if stall is None or time.monotonic() >= end:
            took = wall_s - (end - time.monotonic())
            return dataclasses.replace(verdict, judge=dataclasses.replace(verdict.judge, wall_s=took))
        stalled[stall[0]].append(stall[1])


async def _judge_once(sandbox: Sandbox, spec: dict, program: str, wall_s: float) -> tuple[Verdict, tuple | None]:
    """One run of the judge job: its verdict, and the (phase, index) of the test it was ended in for
    running past that test's limit (None when it was not)."""
    to_judge = _Backlog()
    lines: asyncio.Queue[bytes] = asyncio.Queue()
    on_stdout = _lines_to(lines.put_nowait)

    async def feed():
        yield json.dumps(spec).encode() + b"\n"
        while (data := await to_judge.get()) is not None:
            yield data

    job = Job(
        cmd=["python3", "-I", "judge.py"],
        readonly_files={"judge.py": JUDGE},
        env=dict(JOB_ENV),
        limits=Limits(wall_s=wall_s, cpu_s=wall_s, memory_mb=MEMORY_MB, nproc=32, output_bytes=1 << 21),
    )
    run = asyncio.ensure_future(_judges(sandbox).run(job, feed=feed(), on_stdout=on_stdout))
    candidates: dict[int, asyncio.Task] = {}
    inboxes: dict[int, _Inbox] = {}
    report, public = None, spec["public_results"]
    clock = _TestClock()
    stall = None
    try:
        while True:
            if lines.empty():
                get = asyncio.ensure_future(lines.get())
                waiting = {get, run, *clock.waits_for()}
                await asyncio.wait(waiting, timeout=clock.left(), return_when=asyncio.FIRST_COMPLETED)
                if not get.done():
                    get.cancel()
                    if clock.expired() and not run.done():  # the judge said nothing within the test's time
                        stall = clock.test
                        break
                    if run.done() and lines.empty():  # the judge's job ended: what it wrote before is still read
                        break
                    continue
                line = get.result()
            else:
                line = lines.get_nowait()
            msg = valid_text(json.loads(line))
            op, jid = msg.pop("op"), msg.get("id")
            if op == "report":
                report = msg
                break
            if op == "test":
                clock.start(msg["phase"], msg["index"], msg["seconds"])
            elif op == "tested":
                clock.stop()
            elif op == "public":
                public = msg
            elif op == "start":
                inboxes[jid] = _Inbox()
                job = _candidate_job(program, wall_s)
                candidates[jid] = asyncio.ensure_future(_serve(sandbox, job, jid, inboxes[jid], to_judge))
            elif op == "send" and jid in inboxes:
                inboxes[jid].put_nowait(msg["line"].encode() + b"\n")
            elif op == "run":
                job = _program_job(program, msg["stdin"], float(msg["wall_s"]))
                ran = asyncio.ensure_future(_serve(sandbox, job, jid, None, to_judge))
                candidates[jid] = ran
                clock.after(ran)
            elif op == "stop" and jid in candidates:
                await _end(candidates.pop(jid))
                inboxes.pop(jid, None)
    finally:
        if stall is not None:
            await _end(run)
        for task in candidates.values():
            await _end(task)
        to_judge.put_nowait(None)
        if stall is None:
            try:
                result = await asyncio.wait_for(asyncio.shield(run), 30)
            except asyncio.TimeoutError:
                await _end(run)
                raise
    if stall is not None:
        return Verdict(
            None, public, Result(status="timeout", message="ended by the host: a test ran past its time")
        ), stall
    return Verdict(report, public, result), None


STALL_GRACE_S = 2.0
"""Seconds past a test's limit (and at least the limit again) that the judge may stay silent in that
test before it is ended: its own alarm ends the test at the limit wherever Python code runs."""


class _TestClock:
    """The test the judge runs now and when its time is up, as the judge announced it: a function
    test's code from its start, a program test's comparison from the end of the program's job."""

    def __init__(self) -> None:
        self.test: tuple[str, int] | None = None
        self.seconds = 0.0
        self.deadline: float | None = None
        self.job: asyncio.Future | None = None

    def start(self, phase: str, index: int, seconds: float) -> None:
        self.test, self.seconds, self.job = (phase, index), float(seconds), None
        self.deadline = time.monotonic() + self.seconds + max(STALL_GRACE_S, self.seconds)

    def after(self, job: asyncio.Future) -> None:
        """The test's time counts from the end of `job` (a program's own time is its job's limit)."""
        self.job, self.deadline = job, None

    def stop(self) -> None:
        self.test = self.deadline = self.job = None

    def waits_for(self) -> set[asyncio.Future]:
        """The program job whose end starts the clock, while it runs."""
        return {self.job} if self.job is not None and not self.job.done() else set()

    def left(self) -> float | None:
        """Seconds until the test's time is up (None: not counting now)."""
        if self.test is None or (self.job is not None and not self.job.done()):
            return None
        if self.deadline is None:
            self.deadline = time.monotonic() + self.seconds + max(STALL_GRACE_S, self.seconds)
        return max(0.0, self.deadline - time.monotonic())

    def expired(self) -> bool:
        left = self.left()
        return left is not None and left <= 0


def valid_text(value):
    """`value` (decoded JSON) with every string valid Unicode text: a lone surrogate, which JSON can
    carry from a candidate's value, message or output and no UTF-8 encoder or tokenizer accepts, is
    written as its escape (`\\udcff`)."""
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, list):
        return [valid_text(v) for v in value]
    if isinstance(value, dict):
        return {valid_text(k): valid_text(v) for k, v in value.items()}
    return value


def _candidate_job(program: str, wall_s: float) -> Job:
    """A function problem's candidate job: the judge's requests reach it on its stdin."""
    return Job(
        cmd=["python3", "-I", "candidate.py", str(VALUE_LIMIT)],
        files={"solution.py": program},
        readonly_files={"candidate.py": CANDIDATE},
        env=dict(JOB_ENV),
        limits=Limits(wall_s=wall_s, cpu_s=wall_s, memory_mb=MEMORY_MB, nproc=32, output_bytes=1 << 16),
    )


def _program_job(program: str, stdin: str, wall_s: float) -> Job:
    return Job(
        cmd=["python3", "-I", "solution.py"],
        files={"solution.py": program},
        stdin=stdin,
        env=dict(JOB_ENV),
        limits=Limits(wall_s=wall_s, cpu_s=wall_s + 1, memory_mb=MEMORY_MB, nproc=32, output_bytes=VALUE_LIMIT),
    )


class _Inbox(asyncio.Queue):
    """A candidate job's requests, and how many it was sent."""

    def __init__(self) -> None:
        super().__init__()
        self.sent = 0

    def put_nowait(self, item: bytes) -> None:
        self.sent += 1
        super().put_nowait(item)


class _Backlog(asyncio.Queue):
    """The messages on their way to the judge, and how many bytes they hold."""

    def __init__(self) -> None:
        super().__init__()
        self.size = 0

    def put_nowait(self, item: bytes | None) -> None:
        self.size += len(item or b"")
        super().put_nowait(item)

    def get_nowait(self) -> bytes | None:
        item = super().get_nowait()
        self.size -= len(item or b"")
        return item


async def _serve(sandbox: Sandbox, job: Job, jid: int, inbox: _Inbox | None, to_judge: _Backlog) -> None:
    """Run one candidate job: its stdin from `inbox` (a function job), each line it writes framed to
    the judge, then how it ended (the host's Result); a line over VALUE_LIMIT ends the job."""
    too_long, flood = asyncio.Event(), asyncio.Event()
    lines = 0

    def relay(line: bytes) -> None:
        nonlocal lines
        lines += 1
        # a candidate job writes a greeting, then one line per message (its names answer the first): more is a flood
        if to_judge.size > BACKLOG or (inbox is not None and lines > inbox.sent + 1):
            flood.set()
            too_long.set()
        elif not too_long.is_set():
            to_judge.put_nowait(b"C %d %d\n" % (jid, len(line)) + line)

    on_stdout = _lines_to(relay, too_long)

    async def feed():
        assert inbox is not None  # only function jobs are fed
        while True:
            yield await inbox.get()

    run = asyncio.ensure_future(
        sandbox.run(job, feed=feed(), on_stdout=on_stdout) if inbox is not None else sandbox.run(job)
    )
    overflow = asyncio.ensure_future(too_long.wait())
    try:
        await asyncio.wait({run, overflow}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        overflow.cancel()
        if not run.done():
            await _end(run)
    if too_long.is_set():
        info: dict = {"status": "output_limit", "too_long": "flood" if flood.is_set() else "line"}
    else:
        res = run.result()
        info = {"status": res.status, "exit_code": res.exit_code, "signal": res.signal, "message": res.message}
        info["wall_s"] = res.wall_s
        if inbox is None:
            info["stdout"], info["stderr"] = res.stdout, res.stderr[-4000:]
    to_judge.put_nowait(b"E %d %s\n" % (jid, json.dumps(info).encode()))


def _lines_to(sink: Callable[[bytes], None], too_long: asyncio.Event | None = None) -> Callable[[bytes], None]:
    """An `on_stdout` that hands each whole line to `sink`; past VALUE_LIMIT without a line end it
    sets `too_long` and keeps nothing more."""
    buf = bytearray()

    def on_stdout(chunk: bytes) -> None:
        if too_long is not None and too_long.is_set():
            return
        buf.extend(chunk)
        start = 0
        while (end := buf.find(b"\n", start)) >= 0:
            sink(bytes(buf[start:end]))
            start = end + 1
            if too_long is not None and too_long.is_set():
                return
        del buf[:start]
        if too_long is not None and len(buf) > VALUE_LIMIT + 4096:
            too_long.set()

    return on_stdout


async def _end(task: asyncio.Future) -> None:
    """Cancel `task` (a sandbox run kills its job) and wait until it is gone."""
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
