"""A task's working folder carried from one sandbox job to the next, in Harbor's layout.

Locally a bundle's environment is emulated on the sandbox's base (`image.py: local_image`: what the
Dockerfile makes, or `NeedsDocker` / `NeedsNetwork` saying why only Docker can make it).

Each `Workspace.run` is one sandbox job: it unpacks the working folder's state (a tar, so folders,
modes and empty folders survive), runs one shell script under a time limit and packs the state again.
The host never unpacks a tar that a job wrote. On the isolated backends the job sees Harbor's paths:
the working folder at the image's WORKDIR (usually /app), the tests at /tests, the oracle at /solution,
the verifier's output at /logs/verifier. The plain `subprocess` backend cannot place folders there: it
keeps them inside the job's folder, and only scripts that find them through APP_DIR, TESTS_DIR /
TEST_DIR and REWARD_FILE (set in both layouts) run there.
"""

from __future__ import annotations

import functools
import io
import json
import math
import os
import re
import secrets
import shlex
import tarfile
import time
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from tempering.envs.terminal.bundle import Bundle, Step, rewards_score
from tempering.envs.terminal.image import LocalImage, local_image
from tempering.envs.terminal.image import NeedsDocker as NeedsDocker  # re-exported: where callers found it
from tempering.envs.terminal.image import NeedsNetwork as NeedsNetwork
from tempering.errors import UserError
from tempering.sandbox.job import check_mount

_ENV_REF = re.compile(r"\$\{(\w+)(?::-(.*?))?\}")
DEFAULT_MEMORY_MB = 2048
"""Memory of a local job when task.toml names none (Harbor leaves it to the provider)."""
DEFAULT_DISK_MB = 1024
"""Disk of a local job when task.toml names none."""
DEFAULT_TIMEOUT_S = 600.0
"""Seconds the oracle may run when [agent] timeout_sec is unset."""

_RESTORE = """import os, tarfile
os.makedirs("app", exist_ok=True)
with tarfile.open(".ws-state.tar") as t:
    t.extractall("app", filter="tar")
os.remove(".ws-state.tar")
"""
_SNAPSHOT = """import os, tarfile
with tarfile.open(".ws-state.tar", "w") as t:
    for name in sorted(os.listdir("app")):
        t.add(os.path.join("app", name), arcname=name)
"""


def resolve_env(env: dict[str, str], where: str) -> dict[str, str]:
    """Harbor's `${VAR}` / `${VAR:-default}` templates, filled from the host's environment."""

    def one(m: re.Match) -> str:
        if m.group(1) in os.environ:
            return os.environ[m.group(1)]
        if m.group(2) is not None:
            return m.group(2)
        raise UserError(f"{where}: variable {m.group(1)} is not set on this host; set it or give a ${{VAR:-default}}")

    return {k: _ENV_REF.sub(one, v) for k, v in env.items()}


def pack(files: dict[str, bytes], dirs: Collection[str] = frozenset(), modes: dict[str, int] | None = None) -> bytes:
    """A tar of files and empty folders (the first state); modes 0755 for `.sh`, else 0644, unless given."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for d in sorted(dirs):
            if d:
                info = tarfile.TarInfo(d)
                info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
                t.addfile(info)
        for path in sorted(files):
            info = tarfile.TarInfo(path)
            mode = (modes or {}).get(path, 0o755 if path.endswith(".sh") else 0o644)
            info.size, info.mode, info.mtime = len(files[path]), mode, 0
            t.addfile(info, io.BytesIO(files[path]))
    return buf.getvalue()


@dataclass
class Run:
    """One script run in the workspace."""

    exit_code: int | None
    """Exit status of the script (124: it hit its time limit); None if the job itself failed."""
    output: str
    """stdout then stderr, as the job kept them."""
    status: str
    """The sandbox status of the job."""
    outputs: dict[str, bytes]
    """Declared output files."""
    wall_s: float
    """Seconds the job took."""


@dataclass
class Rewards:
    """What the tests wrote to /logs/verifier."""

    values: dict[str, float] | None
    """reward.json's numbers (with reward.txt's as `reward` when the JSON has none), or reward.txt's as
    {"reward": x}; None when neither holds a usable number."""
    error: str = ""
    """Why there is no reward (empty when there is one)."""

    @property
    def score(self) -> float | None:
        return None if self.values is None else rewards_score(self.values)


def read_rewards(txt: bytes | None, js: bytes | None) -> Rewards:
    """Harbor's reading: reward.json first (an object; numbers kept, others ignored), else reward.txt."""

    def number(raw: bytes) -> float | None:
        try:
            v = float(raw.decode().strip())
        except (UnicodeDecodeError, ValueError):
            return None
        return v if math.isfinite(v) else None

    if js is not None:
        try:
            obj = json.loads(js)
        except (UnicodeDecodeError, ValueError):
            return Rewards(None, f"reward.json is not JSON: {js[:80]!r}")
        if not isinstance(obj, dict):
            return Rewards(None, "reward.json must hold one object {name: number}")
        values = {
            k: float(v)
            for k, v in obj.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        }
        if "reward" not in values and txt is not None and (x := number(txt)) is not None:
            values["reward"] = x
        return Rewards(values) if values else Rewards(None, f"reward.json holds no numbers: {js[:80]!r}")
    if txt is not None:
        x = number(txt)
        return Rewards({"reward": x}) if x is not None else Rewards(None, f"reward.txt is not a number: {txt[:80]!r}")
    return Rewards(None, "the tests wrote no reward (/logs/verifier/reward.txt or reward.json)")


class Workspace:
    """The working folder of one episode or one verification, as a tar carried between sandbox jobs."""

    def __init__(
        self,
        sandbox,
        image: LocalImage,
        memory_mb: int = DEFAULT_MEMORY_MB,
        disk_mb: int = DEFAULT_DISK_MB,
        solution_env: dict[str, str] | None = None,
        name: str = "",
    ):
        self.sandbox = sandbox
        self.workdir = image.workdir
        self.env = dict(image.env)
        self.solution_env = dict(solution_env or {})
        self.name = name
        self.state = pack(image.files, image.dirs, image.modes)
        self.standins = image.standins
        """Shell code each job runs first (tools the scripts would download, `image.standins`)."""
        self.memory_mb = memory_mb
        self.disk_mb = disk_mb
        self.harbor_paths = bool(getattr(sandbox, "isolated", False))
        """Jobs see /app, /tests, /solution, /logs/verifier (isolated backends); else folders in the job's."""
        self.home = harbor_home(self.workdir) if self.harbor_paths else None
        """HOME inside the jobs: Harbor's /root (fresh for each job), or None where /root cannot be
        shown (`harbor_home`): then the job's own folder, the sandbox's default."""

    @classmethod
    def for_bundle(cls, sandbox, bundle: Bundle) -> Workspace:
        """The bundle's emulated environment (NeedsDocker when it has none locally)."""
        cfg = bundle.config
        image = local_image(bundle)
        image.env.update(resolve_env(cfg.environment.env, f"{bundle.name}: [environment] env"))
        solution_env = resolve_env(cfg.solution.env, f"{bundle.name}: [solution] env")
        memory, disk = cfg.environment.memory_mb or DEFAULT_MEMORY_MB, cfg.environment.storage_mb or DEFAULT_DISK_MB
        return cls(sandbox, image, memory, disk, solution_env, bundle.name)

    def copy(self) -> Workspace:
        other = object.__new__(Workspace)
        other.__dict__.update(self.__dict__)
        other.env = dict(self.env)
        return other

    @property
    def keeps_services(self) -> bool:
        """`solve_then_test` runs the solution and the tests in one job, so that the solution's
        background services still answer the tests: needs Harbor's paths and Landlock, which keeps the
        solution's processes away from the tests and the reward (else two jobs, as `solve` then
        `run_tests`)."""
        return self.harbor_paths and landlock_abi() >= 1

    def _paths(self) -> dict[str, str]:
        if self.harbor_paths:
            return {
                "APP_DIR": self.workdir,
                "TESTS_DIR": "/tests",
                "SOLUTION_DIR": "/solution",
                "LOGS": "/logs/verifier",
            }
        return {
            "APP_DIR": "$ROOT/app",
            "TESTS_DIR": "$ROOT/tests",
            "SOLUTION_DIR": "$ROOT/solution",
            "LOGS": "$ROOT/logs/verifier",
        }

    def _prologue(self) -> str:
        p = self._paths()
        q = lambda v: v if v.startswith("$ROOT") else shlex.quote(v)
        return (
            'ROOT="$PWD"\n'
            f"export APP_DIR={q(p['APP_DIR'])} TESTS_DIR={q(p['TESTS_DIR'])} TEST_DIR={q(p['TESTS_DIR'])}\n"
            f"export SOLUTION_DIR={q(p['SOLUTION_DIR'])}\n"
            f"export REWARD_FILE={q(p['LOGS'])}/reward.txt\n"
            + (f"export HOME={shlex.quote(self.home)}\n" if self.home else "")
            + self.standins
            + "mkdir -p logs/verifier .ws-out && python3 .ws/restore.py || exit 97\n"
            'cd "$APP_DIR" || exit 97\n'
        )

    def _mounts(self, ro: dict[str, bytes | str], verifier: bool) -> dict[str, str]:
        if not self.harbor_paths:
            return {}
        mounts = {self.workdir: "app"}
        if self.home and self.home != self.workdir:
            mounts[self.home] = "home"
        taken = list(mounts)
        for inner, folder in SERVICE_DIRS.items():  # beside the working folder and HOME, never over them
            if not any(inner == t or inner.startswith(t + "/") or t.startswith(inner + "/") for t in taken):
                mounts[inner] = folder
        if verifier:  # the verifier's folder exists only for the tests, fresh each time
            mounts["/logs/verifier"] = "logs/verifier"
        for top, inner in (("tests", "/tests"), ("solution", "/solution")):
            if any(k.startswith(top + "/") for k in ro):
                mounts[inner] = top
        return mounts

    def _job(self, wrapper: str, timeout_s: float, ro: dict, env: dict, outputs: list[str], verifier: bool):
        from tempering.sandbox import Job, Limits

        ro = {**ro, ".ws/restore.py": _RESTORE, ".ws/snapshot.py": _SNAPSHOT, ".ws/run.sh": wrapper}
        return Job(
            cmd=["bash", ".ws/run.sh"],
            files={".ws-state.tar": self.state},
            readonly_files=ro,
            env={**self.env, **env},
            limits=Limits(
                wall_s=timeout_s + 30,
                cpu_s=timeout_s + 30,
                memory_mb=self.memory_mb,
                nproc=128,
                disk_mb=self.disk_mb,
            ),
            outputs=[".ws-state.tar", *outputs],
            mounts=self._mounts(ro, verifier),
        )

    async def _submit(self, job, mark: str | None = None) -> tuple[int | None, list[str], str, dict[str, bytes], float]:
        """Run the job; keep its state unless it could not be restored or saved. (code, output (split at
        the line `mark` when given: what came before it, then after), status, other outputs, seconds)."""
        t0 = time.monotonic()
        res = await self.sandbox.run(job)
        code = res.exit_code
        if code in (97, 98) or ".ws-state.tar" not in res.outputs:
            code = None  # the state could not be restored or saved: keep the previous one
        else:
            self.state = res.outputs[".ws-state.tar"]
        both = lambda o, e: o + (("\n" if o and e else "") + e if e else "")
        if mark:
            (o1, _, o2), (e1, _, e2) = res.stdout.partition(mark + "\n"), res.stderr.partition(mark + "\n")
            parts = [both(o1, e1), both(o2, e2)]
        else:
            parts = [both(res.stdout, res.stderr)]
        if res.stdout_truncated or res.stderr_truncated:
            parts[-1] += "\n[output truncated]"
        if res.status in ("memory_exceeded", "output_limit", "sandbox_error", "killed") and res.message:
            parts[-1] += f"\n[{res.status}: {res.message}]"
        kept = {k: v for k, v in res.outputs.items() if k != ".ws-state.tar"}
        return code, parts, res.status, kept, time.monotonic() - t0

    async def run(
        self,
        script: str,
        timeout_s: float,
        readonly: dict[str, bytes] | None = None,
        env: dict[str, str] | None = None,
        outputs: list[str] | None = None,
    ) -> Run:
        """Run `script` with bash in the working folder; keeps the resulting state unless the job failed.
        `readonly` files go under tests/ or solution/ (shown at /tests, /solution); `outputs` under logs/."""
        wrapper = (
            self._prologue() + f'timeout -k 2 {max(1, math.ceil(timeout_s))} bash "$ROOT/.ws/cmd.sh"\n'
            "status=$?\n"
            'cd "$ROOT" && python3 .ws/snapshot.py || exit 98\n'
            "exit $status\n"
        )
        ro = {**(readonly or {}), ".ws/cmd.sh": script}
        job = self._job(wrapper, timeout_s, ro, env or {}, outputs or [], bool(outputs))
        code, (out,), status, kept, wall = await self._submit(job)
        return Run(code, out, status, kept, wall)

    async def run_tests(self, step: Step) -> tuple[Rewards, Run]:
        """Run the step's test.sh against the current state (which it does not change); Harbor runs
        `bash /tests/test.sh` from the working folder."""
        if "test.sh" not in step.tests:
            return Rewards(None, "no tests/test.sh"), Run(None, "", "not_run", {}, 0.0)
        probe = self.copy()
        tests = {f"tests/{p}": b for p, b in step.tests.items()}
        run = await probe.run(
            'bash "$TESTS_DIR/test.sh"\n',
            step.verifier_timeout_s,
            readonly=tests,
            env=resolve_env(step.verifier_env, f"{self.name}: [verifier] env"),
            outputs=list(REWARD_OUTPUTS),
        )
        return _rewards_of(run, step), run

    async def solve(self, step: Step) -> Run:
        """Run the step's oracle, `bash /solution/solve.sh`, keeping what it changes."""
        solution = {f"solution/{p}": b for p, b in step.solution.items()}
        return await self.run(
            'bash "$SOLUTION_DIR/solve.sh"\n',
            step.agent_timeout_s or DEFAULT_TIMEOUT_S,
            readonly=solution,
            env=self.solution_env,
        )

    async def solve_then_test(self, step: Step) -> tuple[Run, Rewards | None, Run | None]:
        """The step's oracle, then (if it exited 0) its tests, in one job: what the solution leaves
        running (a web server on a local port) still runs when the tests query it, as in Harbor's
        container. The solution and everything it starts run in a Landlock domain (`landlock.py`) that
        can neither read /tests nor write /logs/verifier or the job's own folder, nor trace or signal
        the tests; the tests get a TMPDIR of their own, outside the domain's reach. Keeps the state the
        solution left (packed before the tests run). Where `keeps_services` is False: `solve`, then
        `run_tests`, in two jobs (services die in between). (solution's run, rewards or None when the
        tests did not run, tests' run or None)."""
        if not self.keeps_services or "test.sh" not in step.tests:
            run = await self.solve(step)
            if run.exit_code != 0:
                return run, None, None
            rewards, tests = await self.run_tests(step)
            return run, rewards, tests
        solve_s = step.agent_timeout_s or DEFAULT_TIMEOUT_S
        test_s = step.verifier_timeout_s
        mark = secrets.token_hex(8)
        solve_env = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in self.solution_env.items())
        test_vars = resolve_env(step.verifier_env, f"{self.name}: [verifier] env")
        test_env = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in test_vars.items())
        home = [self.home] if self.home else []
        deny = ":".join(["/tests", "/logs", backends_inner_workdir()])
        allow = ":".join([self.workdir, *home])
        wrapper = (
            self._prologue()
            + f'( {solve_env}exec timeout -k 2 {max(1, math.ceil(solve_s))} python3 "$ROOT/.ws/landlock.py" '
            f'{shlex.quote(deny)} {shlex.quote(allow)} -- bash "$SOLUTION_DIR/solve.sh" ) </dev/null\n'
            "status=$?\n"
            'echo "$status" > "$ROOT/.ws-out/solve.status"\n'
            'cd "$ROOT" && python3 .ws/snapshot.py || exit 98\n'
            '[ "$status" = 0 ] || exit 0\n'
            f"echo {mark}; echo {mark} >&2\n"
            'mkdir -p "$ROOT/.ws-out/tmp" && cd "$APP_DIR" || exit 99\n'
            f'( {test_env}export TMPDIR="$ROOT/.ws-out/tmp"; exec timeout -k 2 {max(1, math.ceil(test_s))} '
            'bash "$TESTS_DIR/test.sh" ) </dev/null\n'
            'echo "$?" > "$ROOT/.ws-out/tests.status"\n'
        )
        ro: dict[str, str | bytes] = {f"solution/{p}": b for p, b in step.solution.items()}
        ro |= {f"tests/{p}": b for p, b in step.tests.items()}
        ro[".ws/landlock.py"] = _LANDLOCK.read_text()
        outputs = [*REWARD_OUTPUTS, ".ws-out/solve.status", ".ws-out/tests.status"]
        job = self._job(wrapper, solve_s + test_s, ro, {}, outputs, True)
        code, parts, status, kept, wall = await self._submit(job, mark)
        solve_out, test_out = (parts + [""])[:2]
        solve_code = _status_file(kept.get(".ws-out/solve.status"))
        if code is None or solve_code is None:  # the job failed before the solution's status was known
            return Run(None, "\n".join(parts), status, {}, wall), None, None
        solve_run = Run(solve_code, solve_out, "ok" if solve_code == 0 else status, {}, wall)
        if solve_code != 0:
            if solve_code == 124:
                solve_run.status = "timeout"
            return solve_run, None, None
        test_code = _status_file(kept.get(".ws-out/tests.status"))
        test_files = {k: v for k, v in kept.items() if k in REWARD_OUTPUTS}
        test_run = Run(
            test_code,
            test_out,
            status if test_code is None else ("ok" if test_code == 0 else "nonzero_exit"),
            test_files,
            0.0,
        )
        return solve_run, _rewards_of(test_run, step), test_run

    async def close(self) -> None:
        """Nothing to release: the state lives in memory."""


REWARD_OUTPUTS = ("logs/verifier/reward.txt", "logs/verifier/reward.json")
SERVICE_DIRS = {
    "/var/log": "svc/log",
    "/var/lib": "svc/lib",
    "/var/cache": "svc/cache",
    "/var/spool": "svc/spool",
    "/var/tmp": "svc/tmp",
    "/run": "svc/run",
    "/var/run": "svc/run",
}
"""Writable folders services commonly use, fresh in each job (isolated backends): a server the solution
starts may log to /var/log or keep its pid in /run as in the image."""
_LANDLOCK = Path(__file__).with_name("landlock.py")


def _status_file(raw: bytes | None) -> int | None:
    try:
        return int(raw.decode().strip()) if raw is not None else None
    except (UnicodeDecodeError, ValueError):
        return None


def _rewards_of(run: Run, step: Step) -> Rewards:
    rewards = read_rewards(run.outputs.get("logs/verifier/reward.txt"), run.outputs.get("logs/verifier/reward.json"))
    if rewards.values is None and (run.status == "timeout" or run.exit_code == 124):
        rewards.error += f" (test.sh hit its {step.verifier_timeout_s:g} s limit)"
    return rewards


def backends_inner_workdir() -> str:
    from tempering.sandbox.backends import INNER_WORKDIR

    return INNER_WORKDIR


@functools.cache
def landlock_abi() -> int:
    """The kernel's Landlock ABI (0: none). Jobs run on the host's kernel, so the host's answer holds."""
    from tempering.envs.terminal.landlock import abi

    try:
        return abi()
    except (OSError, AttributeError):
        return 0


def harbor_home(workdir: str) -> str | None:
    """Harbor's HOME, /root, when the sandbox can show a folder there: not on a host whose Python lives
    below /root (pyenv as root, for one: the sandbox shows that installation at its own path, and a
    folder at /root would hide it), nor when the working folder lies below /root. A working folder at
    /root is HOME itself."""
    if workdir == "/root":
        return "/root"
    if workdir.startswith("/root/"):
        return None
    try:
        check_mount("/root")
    except UserError:
        return None
    return "/root"
