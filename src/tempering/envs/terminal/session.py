"""One sandbox job for a whole step of an episode, so that what the agent's commands leave running (a web
server on a local port) still runs for the next commands and for the tests, as in Harbor's container.

The job runs a small supervisor (`injob/supervisor.py`) that reads one request a line on its stdin (the
sandbox's `feed`) and answers on its stdout, which only it holds; each command runs with bash in the
working folder, its output in a file of its own. `finish` has the supervisor pack the working folder,
then runs the tests in a job of their own (`Workspace.run_tests`) with a network namespace of its own,
where the host forwards each port the image declares (EXPOSE) one way to the session's: a service the
commands started answers the tests over 127.0.0.1 on those ports, but the tests' processes, files, HOME,
/tmp, reward folder and the ports they bind themselves are out of its reach (the tests' job cannot even
be seen from the session's). Then the session's job ends, and with it whatever the commands left running. Needs
`Workspace.keeps_services` (bwrap or unshare on a root host).

The session holds one of the sandbox's slots for the whole step; its tests run on that slot (the session
is idle meanwhile): give the sandbox at least as many slots (`concurrency`) as episodes run at once.

The host keeps each command's limit itself, counted from the supervisor's `ready` (so not the wait for a
slot): a command whose answer has not come `ANSWER_GRACE_S` after its limit, or a pack that takes more
than `PACK_TIMEOUT_S`, ends the session (a process the commands left can stop the supervisor, which runs
with their uid); what follows is charged to the candidate like any other session that ended.
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
import secrets
import shlex
import time

from tempering.envs.terminal import injob
from tempering.envs.terminal.bundle import Step
from tempering.envs.terminal.workspace import _PY, DEFAULT_TIMEOUT_S, Rewards, Run, Workspace

ANSWER_GRACE_S = 15.0
"""Seconds past a command's limit the host waits for its answer (the supervisor kills it 2 s past it)."""
PACK_TIMEOUT_S = 120.0
"""Seconds the host waits for the packed working folder."""


class Session:
    """The commands of one step, then its tests beside them (see the module's notes)."""

    def __init__(
        self,
        ws: Workspace,
        step: Step,
        wall_s: float = 3600.0,
        output_bytes: int = 64 * 1024,
        readonly: dict[str, bytes] | None = None,
    ):
        """`readonly`: files shown read-only to the commands (`solution/...` at /solution)."""
        if not ws.keeps_services:
            raise RuntimeError("a session needs a sandbox whose jobs can share a network (Workspace.keeps_services)")
        from tempering.sandbox.sandbox import Network

        self.ws, self.step, self.wall_s, self.output_bytes = ws, step, wall_s, output_bytes
        self.readonly = dict(readonly or {})
        self.network = Network()
        self._nonce = secrets.token_hex(16)
        self._requests: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._waiting: dict[str, asyncio.Future] = {}
        self._buf = b""
        self._cap = 2 * (ws.disk_mb << 20) + (1 << 20)  # a packed state in base64, and room
        self._ids = 0
        self._job: asyncio.Task | None = None
        self._stopped: str | None = None
        """Why the host ended the session, if it did."""

    def _start(self) -> None:
        wrapper = self.ws._prologue() + f'exec {_PY} -I -S "$ROOT/.ws/supervisor.py" "$ROOT"\n'
        ro: dict[str, str | bytes] = {**self.readonly, ".ws/supervisor.py": injob.text("supervisor.py")}
        job = self.ws._job(wrapper, self.wall_s, ro, {"SESSION_NONCE": self._nonce}, [])

        async def feed():
            while (req := await self._requests.get()) is not None:
                yield req

        self._waiting["ready"] = asyncio.get_running_loop().create_future()
        run = self.ws.sandbox.run(job, feed=feed(), on_stdout=self._on_stdout, network=self.network)
        self._job = asyncio.ensure_future(run)
        self._job.add_done_callback(lambda _: self._fail_waiting())

    def _on_stdout(self, chunk: bytes) -> None:
        self._buf += chunk
        while True:
            head, sep, rest = self._buf.partition(b"\n")
            body, sep2, rest2 = rest.partition(b"\n")
            if not sep or not sep2:
                break
            self._buf = rest2
            parts = head.decode(errors="replace").split()
            if len(parts) == 3 and parts[0] == self._nonce:
                fut = self._waiting.pop(parts[1], None)
                if fut is not None and not fut.done():
                    fut.set_result((int(parts[2]), base64.b64decode(body)))
        if len(self._buf) > self._cap:  # no answer is this long: end the session rather than hold it
            self._buf = b""
            self._requests.put_nowait(None)

    def _fail_waiting(self) -> None:
        for fut in self._waiting.values():
            if not fut.done():
                fut.set_result((None, b""))
        self._waiting.clear()

    async def _ask(self, req: dict, rid: str, timeout_s: float) -> tuple[int | None, bytes]:
        """Send one request; its answer, or (None, b"") when the session ended or the answer did not come
        within `timeout_s` of the supervisor's start (then the host ends the session)."""
        if self._job is None:
            self._start()
        assert self._job is not None  # _start made it
        if "ready" in self._waiting:  # the job waits for a slot: not the command's time
            await asyncio.shield(self._waiting["ready"])
        if self._job.done():
            return None, b""
        fut = asyncio.get_running_loop().create_future()
        self._waiting[rid] = fut
        await self._requests.put(json.dumps(req).encode() + b"\n")
        try:
            return await asyncio.wait_for(fut, timeout_s)
        except asyncio.TimeoutError:
            await self._stop(f"no answer within {timeout_s:g} s")
            return None, b""

    async def _stop(self, why: str) -> None:
        """End the session's job from the host (its supervisor may be stopped or gone)."""
        assert self._job is not None
        self._stopped = self._stopped or why
        self._job.cancel()
        await asyncio.wait([self._job])

    async def run(self, script: str, timeout_s: float) -> Run:
        """Run one command in the working folder; what it starts in the background keeps running."""
        self._ids += 1
        limit = max(1, math.ceil(timeout_s))
        req = {"op": "run", "id": self._ids, "script": script, "timeout": limit, "limit": self.output_bytes}
        t0 = time.monotonic()
        code, data = await self._ask(req, str(self._ids), limit + ANSWER_GRACE_S)
        if code is None:
            return Run(None, "", await self._ended(), {}, time.monotonic() - t0)
        out = data.decode("utf-8", errors="replace")
        if len(data) >= self.output_bytes:
            out += "\n[output truncated]"
        status = "ok" if code == 0 else ("timeout" if code == 124 else "nonzero_exit")
        return Run(code, out, status, {}, time.monotonic() - t0)

    async def _ended(self) -> str:
        """Why the session's job is gone: its sandbox status (`sandbox_error`: it never started)."""
        assert self._job is not None
        if self._stopped:
            return f"session ended: {self._stopped}"
        res = await self._job
        return res.status if res.status == "sandbox_error" else "session ended"

    async def finish(self) -> tuple[Rewards, Run]:
        """Pack the working folder, run the step's tests beside what the commands left running, end the
        session; the workspace keeps the packed state."""
        if "test.sh" not in self.step.tests:
            await self.close()
            return Rewards(None, "no tests/test.sh"), Run(None, "", "not_run", {}, 0.0)
        code, state = await self._ask({"op": "pack"}, "state", PACK_TIMEOUT_S)
        if code != 0:
            why = await self._ended() if code is None else "packing failed"
            await self.close()
            error = "the working folder could not be packed for the tests"
            return Rewards(None, f"{error} ({why})", host_fault=why == "sandbox_error"), Run(None, "", why, {}, 0.0)
        self.ws.state = state
        try:
            return await self.ws.run_tests(self.step, services=self.network)
        finally:
            await self.close()

    async def close(self) -> None:
        """End the job (and what the commands left running)."""
        if self._job is not None and not self._job.done():
            await self._requests.put(None)
            try:
                await asyncio.wait_for(asyncio.shield(self._job), ANSWER_GRACE_S)
            except asyncio.TimeoutError:
                await self._stop("it did not end when asked")
        self.network.close()


async def solve_then_test(ws: Workspace, step: Step) -> tuple[Run, Rewards | None, Run | None]:
    """The step's oracle, then (if it exited 0) its tests. Where `ws.keeps_services`, the oracle runs in a
    `Session` whose job stays up while the tests run beside it, so that a service it leaves running answers
    them over the network, as in Harbor's container; else `ws.solve`, then `ws.run_tests`. (solution's run,
    rewards or None when the tests did not run, tests' run or None)."""
    if not ws.keeps_services or "test.sh" not in step.tests:
        run = await ws.solve(step)
        if run.exit_code != 0:
            return run, None, None
        rewards, tests = await ws.run_tests(step)
        return run, rewards, tests
    solution = {f"solution/{p}": b for p, b in step.solution.items()}
    session = Session(ws, step, readonly=solution)
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in ws.solution_env.items())
    run = await session.run(exports + 'bash "$SOLUTION_DIR/solve.sh"\n', step.agent_timeout_s or DEFAULT_TIMEOUT_S)
    if run.exit_code != 0:
        await session.close()
        return run, None, None
    rewards, tests = await session.finish()
    return run, rewards, tests
