"""One sandbox job for a whole step of an episode, so that what the agent's commands leave running (a
web server on a local port) still runs for the next commands and for the tests, as in Harbor's container.

The job runs a small supervisor (`_SUPERVISOR`, standard library only) that reads one request a line on
its stdin (the sandbox's `feed`) and answers on its stdout, which only it holds. Each command runs in the
working folder in a Landlock domain (`landlock.py`) that can neither read /tests nor write /logs, nor
reach the job's own folder (the supervisor's files), nor trace or signal what runs outside it; its output
goes to a file of its own, read back by the supervisor when the command ends (a process left behind can
keep writing there, never into the answers). `finish` packs the working folder, runs test.sh outside the
domain (its own TMPDIR), and ends the job: the host reads the reward from the folder only the tests could
write, and the state from the tar the supervisor packed. Needs an isolating backend and Landlock
(`Workspace.keeps_services`).

Unlike one job per command (`Workspace.run`), the tests' folder exists during the commands (`ls /tests`
answers "Permission denied", not "No such file"), and the session holds one of the sandbox's slots for
the whole step: give the sandbox at least as many slots (`concurrency`) as episodes run at once.
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
import secrets
import shlex

from tempering.envs.terminal.bundle import Step
from tempering.envs.terminal.workspace import (
    _LANDLOCK,
    REWARD_OUTPUTS,
    Rewards,
    Run,
    Workspace,
    _rewards_of,
    _status_file,
    backends_inner_workdir,
    resolve_env,
)

_SUPERVISOR = r"""import base64, json, os, subprocess, sys
nonce, deny, allow, root = sys.argv[1:5]
app = os.getcwd()
out = os.fdopen(1, "wb", buffering=0)
n = 0


def answer(rid, code, data):
    out.write(f"{nonce} {rid} {code}\n".encode() + base64.b64encode(data) + b"\n")


for line in sys.stdin.buffer:
    req = json.loads(line)
    if req["op"] == "run":
        n += 1
        path = os.path.join(root, ".ws-out", f"cmd-{n}.out")
        with open(path, "wb") as f:
            argv = ["timeout", "-k", "2", str(req["timeout"]), "python3", os.path.join(root, ".ws", "landlock.py")]
            argv += [deny, allow, "--", "bash", "-c", req["script"]]
            code = subprocess.call(argv, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT, cwd=app)
        with open(path, "rb") as f:
            data = f.read(req["limit"])
        answer(req["id"], code, data)
    elif req["op"] == "finish":
        os.chdir(root)
        packed = subprocess.call(["python3", ".ws/snapshot.py"])
        if packed != 0:
            sys.exit(98)
        tmp = os.path.join(root, ".ws-out", "tmp")
        os.makedirs(tmp, exist_ok=True)
        env = {**os.environ, **req["env"], "TMPDIR": tmp}
        with open(os.path.join(root, ".ws-out", "tests.out"), "wb") as f:
            argv = ["timeout", "-k", "2", str(req["timeout"]), "bash", os.environ["TESTS_DIR"] + "/test.sh"]
            code = subprocess.call(argv, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT, cwd=app, env=env)
        with open(os.path.join(root, ".ws-out", "tests.status"), "w") as f:
            f.write(str(code))
        sys.exit(0)
os.chdir(root)
sys.exit(0 if subprocess.call(["python3", ".ws/snapshot.py"]) == 0 else 98)
"""


class Session:
    """The commands of one step, then its tests, in one sandbox job (see the module's notes)."""

    def __init__(self, ws: Workspace, step: Step, wall_s: float = 3600.0, output_bytes: int = 64 * 1024):
        if not ws.keeps_services:
            raise RuntimeError("a session needs an isolating sandbox backend and Landlock (Workspace.keeps_services)")
        self.ws, self.step, self.wall_s, self.output_bytes = ws, step, wall_s, output_bytes
        self._nonce = secrets.token_hex(8)
        self._requests: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._waiting: dict[int, asyncio.Future] = {}
        self._buf = b""
        self._ids = 0
        self._job: asyncio.Task | None = None

    def _start(self) -> None:
        ws = self.ws
        home = [ws.home] if ws.home else []
        deny = ":".join(["/tests", "/logs", backends_inner_workdir()])
        allow = ":".join([ws.workdir, *home])
        wrapper = ws._prologue() + (
            f'exec python3 "$ROOT/.ws/session.py" {self._nonce} {shlex.quote(deny)} {shlex.quote(allow)} "$ROOT"\n'
        )
        ro: dict[str, str | bytes] = {f"tests/{p}": b for p, b in self.step.tests.items()}
        ro |= {".ws/landlock.py": _LANDLOCK.read_text(), ".ws/session.py": _SUPERVISOR}
        outputs = [*REWARD_OUTPUTS, ".ws-out/tests.out", ".ws-out/tests.status"]
        job = ws._job(wrapper, self.wall_s, ro, {}, outputs, True)

        async def feed():
            while (req := await self._requests.get()) is not None:
                yield req

        self._job = asyncio.ensure_future(ws.sandbox.run(job, feed=feed(), on_stdout=self._on_stdout))
        self._job.add_done_callback(lambda _: self._fail_waiting())

    def _on_stdout(self, chunk: bytes) -> None:
        self._buf += chunk
        while True:
            head, sep, rest = self._buf.partition(b"\n")
            body, sep2, rest2 = rest.partition(b"\n")
            if not sep or not sep2:
                return
            self._buf = rest2
            parts = head.decode(errors="replace").split()
            if len(parts) == 3 and parts[0] == self._nonce:
                fut = self._waiting.pop(int(parts[1]), None)
                if fut is not None and not fut.done():
                    fut.set_result((int(parts[2]), base64.b64decode(body)))

    def _fail_waiting(self) -> None:
        for fut in self._waiting.values():
            if not fut.done():
                fut.set_result((None, b""))
        self._waiting.clear()

    async def run(self, script: str, timeout_s: float) -> Run:
        """Run one command in the working folder; what it starts in the background keeps running."""
        if self._job is None:
            self._start()
        assert self._job is not None  # _start made it
        if self._job.done():
            return Run(None, "", "session ended", {}, 0.0)
        self._ids += 1
        fut = asyncio.get_running_loop().create_future()
        self._waiting[self._ids] = fut
        limit = max(1, math.ceil(timeout_s))
        req = {"op": "run", "id": self._ids, "script": script, "timeout": limit, "limit": self.output_bytes}
        await self._requests.put(json.dumps(req).encode() + b"\n")
        t0 = asyncio.get_running_loop().time()
        code, data = await fut
        out = data.decode("utf-8", errors="replace")
        if len(data) >= self.output_bytes:
            out += "\n[output truncated]"
        status = "ok" if code == 0 else ("timeout" if code == 124 else "nonzero_exit")
        return Run(
            code, out, status if code is not None else "session ended", {}, asyncio.get_running_loop().time() - t0
        )

    async def finish(self) -> tuple[Rewards, Run]:
        """Pack the working folder, run the step's tests beside what the commands left running, end
        the job; the workspace keeps the packed state."""
        if "test.sh" not in self.step.tests:
            await self.close()
            return Rewards(None, "no tests/test.sh"), Run(None, "", "not_run", {}, 0.0)
        if self._job is None:
            self._start()
        env = resolve_env(self.step.verifier_env, f"{self.ws.name}: [verifier] env")
        req = {"op": "finish", "env": env, "timeout": max(1, math.ceil(self.step.verifier_timeout_s))}
        await self._requests.put(json.dumps(req).encode() + b"\n")
        await self._requests.put(None)
        assert self._job is not None  # _start made it
        res = await self._job
        kept = self._keep(res)
        out = kept.get(".ws-out/tests.out", b"").decode("utf-8", errors="replace")
        if res.status in ("timeout", "memory_exceeded", "output_limit", "sandbox_error", "killed") and res.message:
            out += f"\n[{res.status}: {res.message}]"
        code = _status_file(kept.get(".ws-out/tests.status"))
        status = "ok" if code == 0 else ("timeout" if code == 124 else ("nonzero_exit" if code else res.status))
        run = Run(code, out, status, {k: v for k, v in kept.items() if k in REWARD_OUTPUTS}, res.wall_s)
        return _rewards_of(run, self.step), run

    def _keep(self, res) -> dict[str, bytes]:
        if res.exit_code not in (97, 98) and ".ws-state.tar" in res.outputs:
            self.ws.state = res.outputs[".ws-state.tar"]
        return {k: v for k, v in res.outputs.items() if k != ".ws-state.tar"}

    async def close(self) -> None:
        """End the job without the tests (the workspace keeps the packed state)."""
        if self._job is None:
            return
        if not self._job.done():
            await self._requests.put(None)
        self._keep(await self._job)
