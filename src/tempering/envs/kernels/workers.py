"""Warm verification workers: sandbox jobs that import torch once and verify candidates one at a time.

A worker runs `harness/worker.py` (which forks a fresh process per candidate and removes whatever it
left before the next). Workers are shared by every verifier on one sandbox with the same job shape
(memory limit, environment), on one event loop; there are at most as many as the sandbox pool has
slots, and they run on slots of their own, so that a worker waiting for work never holds up the
builds its candidates wait for. The verifier sends a candidate only after the answer to the previous
one, so when a worker dies or stops answering, the candidate it was running is the one to charge.
"""

from __future__ import annotations

import asyncio
import json
import sys
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tempering.sandbox import Result, Sandbox

IDLE_S = 2.0
"""A worker with no candidate for this long ends (and gives its memory back)."""
CANDIDATES = 500
"""Candidates one worker serves before a fresh one takes over."""
LIFE_S = 6 * 3600.0
"""Wall-clock limit of a worker job (each candidate has its own)."""
REPLY_SLACK_S = 60.0
"""How much longer than a candidate's own limit to wait for its worker's answer."""

_POOLS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


@dataclass
class _Request:
    payload: bytes
    wall_s: float
    future: asyncio.Future


@dataclass
class Answer:
    """How one candidate went in a worker."""

    reply: dict | None = None
    """The worker's line for it, or None if the worker died or hung while it ran."""
    worker: Result | None = None
    """The worker job's sandbox `Result` when it died (None when it hung and was killed)."""


def workers_for(sandbox, memory_mb: int, env: dict[str, str], files: dict[str, str]) -> Workers:
    """The workers of `sandbox` on this event loop for jobs of this shape (made on first use)."""
    key = (memory_mb, tuple(sorted(env.items())), tuple(sorted(files.items())))
    by_loop = _POOLS.setdefault(sandbox, weakref.WeakKeyDictionary())
    pools = by_loop.setdefault(asyncio.get_running_loop(), {})
    if key not in pools:
        pools[key] = Workers(sandbox, memory_mb, env, files)
    return pools[key]


@dataclass
class Workers:
    """A queue of candidates and the workers that serve it."""

    sandbox: Sandbox
    memory_mb: int
    env: dict
    files: dict
    requests: asyncio.Queue[_Request] = field(default_factory=asyncio.Queue)
    running: int = 0
    idle: int = 0
    tasks: set = field(default_factory=set)
    cpu_s: float = 0.0
    """CPU seconds of the worker jobs that have ended (torch imports and candidates), as measured."""

    async def submit(self, payload: str, wall_s: float) -> Answer:
        """Verify one candidate (`payload`: its line for harness/worker.py) within `wall_s`."""
        future = asyncio.get_running_loop().create_future()
        self.requests.put_nowait(_Request(payload.encode() + b"\n", wall_s, future))
        self._staff()
        return await future

    def _staff(self) -> None:
        """Start workers while requests outnumber the idle ones, up to the pool's size."""
        while self.requests.qsize() > self.idle and self.running < self.sandbox.concurrency:
            self.running += 1
            self.tasks.add(task := asyncio.ensure_future(self._work()))
            task.add_done_callback(self.tasks.discard)

    async def _work(self) -> None:
        from tempering.sandbox import Job, Limits

        to_send: asyncio.Queue = asyncio.Queue()
        lines: asyncio.Queue = asyncio.Queue()
        buf = bytearray()

        def on_stdout(chunk: bytes) -> None:
            buf.extend(chunk)
            while (end := buf.find(b"\n")) >= 0:
                lines.put_nowait(bytes(buf[:end]))
                del buf[: end + 1]

        async def feed():
            while (data := await to_send.get()) is not None:
                yield data

        job = Job(
            cmd=[sys.executable, "worker.py"],
            readonly_files=dict(self.files),
            env=dict(self.env),
            limits=Limits(wall_s=LIFE_S, cpu_s=LIFE_S, memory_mb=self.memory_mb, nproc=256, fsize_mb=256, nofile=512),
        )
        run = asyncio.ensure_future(_pool(self.sandbox).run(job, feed=feed(), on_stdout=on_stdout))
        to_send.put_nowait(json.dumps({"isolated": self.sandbox.isolated}).encode() + b"\n")
        served = 0
        req: _Request | None = None
        try:
            while served < CANDIDATES and not run.done():
                self.idle += 1
                try:
                    req = await asyncio.wait_for(self.requests.get(), IDLE_S)
                except asyncio.TimeoutError:
                    return
                finally:
                    self.idle -= 1
                if req.future.done():  # its caller gave up meanwhile
                    continue
                served += 1
                to_send.put_nowait(req.payload)
                reply = asyncio.ensure_future(lines.get())
                done, _ = await asyncio.wait(
                    {reply, run}, timeout=req.wall_s + REPLY_SLACK_S, return_when=asyncio.FIRST_COMPLETED
                )
                if reply in done:
                    answer = Answer(reply=json.loads(reply.result()))
                else:  # it died, or stopped answering: this candidate is charged, another worker goes on
                    reply.cancel()
                    answer = Answer(worker=await _end(run))
                if not req.future.done():
                    req.future.set_result(answer)
                if answer.reply is None or answer.reply.get("dirty"):  # dirty: the worker ends, fail closed
                    return
        except BaseException as e:  # the caller waiting on this candidate hears of it
            if req is not None and not req.future.done():
                req.future.set_exception(e)
            raise
        finally:
            to_send.put_nowait(None)  # the end of its stdin: the worker exits
            if not run.done():
                try:
                    await asyncio.wait_for(asyncio.shield(run), 30)
                except (asyncio.TimeoutError, asyncio.CancelledError):
                    run.cancel()
            if run.done() and not run.cancelled() and run.exception() is None:
                self.cpu_s += run.result().cpu_s
            self.running -= 1
            self._staff()


async def _end(run: asyncio.Future):
    """The worker job's `Result` if it ended by itself; else kill it and give None."""
    if run.done():
        return run.result()
    run.cancel()
    try:
        await run
    except asyncio.CancelledError:
        pass
    return None


_WORKER_SANDBOXES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _pool(sandbox):
    """The sandbox workers run in: `sandbox`'s backend and size, with slots of their own."""
    from tempering.sandbox import Sandbox

    if sandbox not in _WORKER_SANDBOXES:
        _WORKER_SANDBOXES[sandbox] = Sandbox(
            backend=sandbox.backend, concurrency=sandbox.concurrency, root=sandbox._root_parent, image=sandbox.image
        )
    return _WORKER_SANDBOXES[sandbox]
