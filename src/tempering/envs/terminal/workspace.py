"""A task's working folder carried from one sandbox job to the next, in Harbor's layout.

Locally a bundle's environment is emulated on the sandbox's base (`image.py: local_image`: what the
Dockerfile makes, or `NeedsDocker` / `NeedsNetwork` saying why only Docker can make it).

Each `Workspace.run` is one sandbox job: it unpacks the working folder's state (a tar, so folders,
modes, links and empty folders survive), runs one shell script under a time limit and packs the state
again (`injob/`). The host never unpacks a tar that a job wrote. The tests always run in a job of their
own (`run_tests`, hermetic: docs/sandbox.md, "Terminal tasks"). On the isolated backends a job sees Harbor's paths:
the working folder at the image's WORKDIR (usually /app), the tests at /tests, the oracle at /solution,
the verifier's output at /logs/verifier. The plain `subprocess` backend cannot place folders there: it
keeps them inside the job's folder, and only scripts that find them through APP_DIR, TESTS_DIR /
TEST_DIR and REWARD_FILE (set in both layouts) run there.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import math
import os
import posixpath
import re
import secrets
import shlex
import shutil
import sys
import tarfile
import time
from collections.abc import Collection
from dataclasses import dataclass

from tempering.envs.terminal import injob
from tempering.envs.terminal.bundle import Bundle, Step, required_imports, rewards_score
from tempering.envs.terminal.image import LocalImage, image_spec, local_image
from tempering.envs.terminal.image import NeedsDocker as NeedsDocker  # re-exported: where callers found it
from tempering.envs.terminal.image import NeedsNetwork as NeedsNetwork
from tempering.errors import UserError
from tempering.sandbox.backends import INNER_WORKDIR
from tempering.sandbox.image import Spec
from tempering.sandbox.job import check_mount
from tempering.sandbox.sandbox import Bridge, BridgeError, Network

_ADDRESS = re.compile(r"\b(?:127\.0\.0\.1|localhost|0\.0\.0\.0):(\d{1,5})\b")
"""A local address in an instruction (`127.0.0.1:8080`): the instruction is the task's contract with the solution,
so a port it names is declared as EXPOSE declares one (public tasks often name the port only there)."""
_ENV_REF = re.compile(r"\$\{(\w+)(?::-(.*?))?\}")
DEFAULT_MEMORY_MB = 2048
"""Memory of a local job when task.toml names none (Harbor leaves it to the provider)."""
DEFAULT_DISK_MB = 1024
"""Disk of a local job when task.toml names none."""
DEFAULT_TIMEOUT_S = 600.0
"""Seconds the oracle may run when [agent] timeout_sec is unset."""
PYTEST_FILES = frozenset(
    (
        "conftest.py",
        "pytest.toml",
        ".pytest.toml",
        "pytest.ini",
        ".pytest.ini",
        "pyproject.toml",
        "tox.ini",
        "setup.cfg",
    )
)
"""The files pytest reads by name: the image's are trusted in the tests' job (`injob/guard.py`)."""


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
    host_fault: bool = False
    """No reward because the tests' job could not be set up (the host's fault, observed before anything of
    the solution's entered it): the one case a missing reward is an environment error, not `incorrect`."""

    @property
    def score(self) -> float | None:
        return None if self.values is None else rewards_score(self.values)


def read_rewards(txt: bytes | None, js: bytes | None) -> Rewards:
    """Harbor's reading: reward.json first (an object; numbers kept, others ignored), else reward.txt. A
    reward outside [0, 1] or not finite (an uncapped partial credit, a division by zero) is no reward:
    the tests are the candidate's judge, and a value no right answer can give is not a score. The reward
    is one number, written once: any process of the tests' job can write either file, so when both are
    there reward.json must hold `reward` and reward.txt the same number. A reward.json without `reward`
    (metrics only) scores alone; beside a reward.txt it is no reward, as a reward.txt that named the
    score would be another process's word against the tests' own file."""

    def number(raw: bytes) -> float | None:
        try:
            return float(raw.decode().strip())
        except (UnicodeDecodeError, ValueError):
            return None

    if js is not None:
        try:
            obj = json.loads(js)
        except (UnicodeDecodeError, ValueError):
            return Rewards(None, f"reward.json is not JSON: {js[:80]!r}")
        if not isinstance(obj, dict):
            return Rewards(None, "reward.json must hold one object {name: number}")
        values = {k: float(v) for k, v in obj.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        if txt is not None:
            if "reward" not in values:
                return Rewards(
                    None,
                    f"reward.txt holds {txt[:40]!r} beside a reward.json without `reward` ({js[:80]!r}): which "
                    "file scores would depend on which process wrote the other, so neither is taken (put the "
                    "reward in reward.json, or write reward.txt alone)",
                )
            if number(txt) != values["reward"]:
                return Rewards(
                    None,
                    f"reward.txt holds {txt[:40]!r} and reward.json {js[:80]!r}: two writers disagree on the "
                    "reward, so neither is taken (write one file, or the same reward in both)",
                )
        if not values:
            return Rewards(None, f"reward.json holds no numbers: {js[:80]!r}")
        return _in_range(values, "reward.json")
    if txt is not None:
        x = number(txt)
        return (
            _in_range({"reward": x}, "reward.txt")
            if x is not None
            else Rewards(None, f"reward.txt is not a number: {txt[:80]!r}")
        )
    return Rewards(None, "the tests wrote no reward (/logs/verifier/reward.txt or reward.json)")


def _in_range(values: dict[str, float], where: str) -> Rewards:
    """The values that make the score (`reward`, else all of them) must lie in [0, 1]."""
    scored = {"reward": values["reward"]} if "reward" in values else values
    bad = {k: v for k, v in scored.items() if not 0.0 <= v <= 1.0}  # NaN fails both comparisons
    if bad:
        shown = ", ".join(f"{k}={v!r}" for k, v in bad.items())
        return Rewards(None, f"{where} holds {shown}, outside [0, 1]: a reward the tests do not cap is no reward")
    return Rewards(values)


class Workspace:
    """The working folder of one episode or one verification, as a tar carried between sandbox jobs.

    The solution's commands run in jobs of their own (`run`, `solve`), or in one job that stays up
    (`session.Session`, when services must outlive the commands); the tests always run in a job of their
    own (`run_tests`): fresh processes, HOME, /tmp and reward folder, the working folder unpacked from the
    state the solution left (no link out of it), their Python finding installed modules first. They share
    with the solution's job only the working folder's files and, for services, the network."""

    def __init__(
        self,
        sandbox,
        image: LocalImage,
        memory_mb: int = DEFAULT_MEMORY_MB,
        disk_mb: int = DEFAULT_DISK_MB,
        solution_env: dict[str, str] | None = None,
        name: str = "",
        spec: Spec | None = None,
    ):
        showing = getattr(sandbox, "showing", None)
        # the task's own RAM image: the default one and the tools and distributions the task uses, every
        # interpreter in it starting with the tests' guard in the tests' job (docs/sandbox.md, "The image")
        spec = dataclasses.replace(spec or Spec(), python_startup=injob.text("startup.py"))
        self.sandbox = showing(spec) if showing else sandbox
        self.workdir = image.workdir
        self.env = dict(image.env)
        self.solution_env = dict(solution_env or {})
        self.name = name
        self.state = pack(image.files, image.dirs, image.modes)
        self.standins = image.standins
        self.ports = frozenset(image.ports)
        """The ports the tests reach the solution's services on (the image's EXPOSE), with `keeps_services`."""
        self.own_pytest_files = {
            hashlib.sha256(b).hexdigest() for p, b in image.files.items() if posixpath.basename(p) in PYTEST_FILES
        }
        """SHA-256s of the image's conftest.py and pytest configuration files: pytest reads these in the tests'
        job wherever they are."""
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
        image.ports |= {
            int(p) for step in bundle.steps for p in _ADDRESS.findall(step.instruction) if 0 < int(p) < 65536
        }
        image.env.update(resolve_env(cfg.environment.env, f"{bundle.name}: [environment] env"))
        solution_env = resolve_env(cfg.solution.env, f"{bundle.name}: [solution] env")
        memory, disk = cfg.environment.memory_mb or DEFAULT_MEMORY_MB, cfg.environment.storage_mb or DEFAULT_DISK_MB
        return cls(sandbox, image, memory, disk, solution_env, bundle.name, image_spec(bundle, image))

    def copy(self) -> Workspace:
        other = object.__new__(Workspace)
        other.__dict__.update(self.__dict__)
        other.env = dict(self.env)
        return other

    @property
    def keeps_services(self) -> bool:
        """What the solution leaves running (a web server on a local port) still answers the tests on the
        ports the image declares (`ports`): its job stays up while the tests run in a network namespace of
        their own, where a forwarder of the host's relays each of those ports, one way, to the solution's
        (`Sandbox.shares_network`: bwrap or unshare on a root host). Else the solution's processes end with its job,
        before the tests start."""
        return self.harbor_paths and bool(getattr(self.sandbox, "shares_network", False))

    def _paths(self, verifier: str) -> dict[str, str]:
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
            "LOGS": f"$ROOT/{verifier}",
        }

    def _prologue(self, verifier: str = "logs/verifier", tests: bool = False) -> str:
        """Harbor's variables, HOME, the working folder unpacked (for the tests: no link out of it)."""
        p = self._paths(verifier)
        q = lambda v: v if v.startswith("$ROOT") else shlex.quote(v)
        restore = f"{_PY} -I -S .ws/restore.py app" + (' --tests "$APP_DIR"' if tests else "")
        return (
            'ROOT="$PWD"\n'
            f"export APP_DIR={q(p['APP_DIR'])} TESTS_DIR={q(p['TESTS_DIR'])} TEST_DIR={q(p['TESTS_DIR'])}\n"
            f"export SOLUTION_DIR={q(p['SOLUTION_DIR'])}\n"
            f"export REWARD_FILE={q(p['LOGS'])}/reward.txt\n"
            + (f"export HOME={shlex.quote(self.home)}\n" if self.home else "")
            + self.standins
            + (f'mkdir -p "$ROOT/{verifier}" && ' if tests else "")
            + f"{restore} || exit 97\n"
            'cd "$APP_DIR" || exit 97\n'
        )

    def _mounts(self, ro: dict[str, bytes | str], verifier: str | None) -> dict[str, str]:
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
            mounts["/logs/verifier"] = verifier
        for top, inner in (("tests", "/tests"), ("solution", "/solution")):
            if any(k.startswith(top + "/") for k in ro):
                mounts[inner] = top
        return mounts

    def _job(
        self, wrapper: str, timeout_s: float, ro: dict, env: dict, outputs: list[str], verifier: str | None = None
    ):
        from tempering.sandbox import Job, Limits

        scripts = {f".ws/{n}": injob.text(n) for n in ("restore.py", "snapshot.py")}
        ro = {**ro, **scripts, ".ws/run.sh": wrapper}
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
            outputs=outputs,
            mounts=self._mounts(ro, verifier),
        )

    async def run(
        self,
        script: str,
        timeout_s: float,
        readonly: dict[str, bytes] | None = None,
        env: dict[str, str] | None = None,
    ) -> Run:
        """Run `script` with bash in the working folder, in a job of its own; keeps the state it leaves unless
        the job failed. `readonly` files go under solution/ (shown at /solution)."""
        wrapper = (
            self._prologue() + f'{_TIMEOUT} -k 2 {max(1, math.ceil(timeout_s))} bash "$ROOT/.ws/cmd.sh"\n'
            "status=$?\n"
            f'cd "$ROOT" && {_PY} -I -S .ws/snapshot.py || exit 98\n'
            "exit $status\n"
        )
        ro = {**(readonly or {}), ".ws/cmd.sh": script}
        job = self._job(wrapper, timeout_s, ro, env or {}, [".ws-state.tar"])
        t0 = time.monotonic()
        res = await self.sandbox.run(job)
        code = res.exit_code
        if code in (97, 98) or ".ws-state.tar" not in res.outputs:
            code = None  # the state could not be restored or packed: keep the previous one
        else:
            self.state = res.outputs[".ws-state.tar"]
        return Run(code, _output(res), res.status, {}, time.monotonic() - t0)

    async def run_tests(self, step: Step, services: Network | None = None) -> tuple[Rewards, Run]:
        """The step's tests against the current state (which they do not change), hermetically: Harbor runs
        `bash /tests/test.sh` from the working folder, and so do we, in a job of the tests' own: the working
        folder unpacked from the state, no link out of it; fresh HOME and /tmp; the reward folder made for
        this run (read back without following links); every Python they start guarded (`injob/guard.py`:
        installed modules and plugins before anything in a folder they can write, the solution's modules
        only where the tests require them, pickles of data only). `services`: the `Network` where the
        solution's services still run; the tests then reach `ports` there, one way, from a network of their
        own (`Bridge`: nothing of the solution's can connect to what the tests run, nor take a port the tests
        bind)."""
        if "test.sh" not in step.tests:
            return Rewards(None, "no tests/test.sh"), Run(None, "", "not_run", {}, 0.0)
        out = f".v-{secrets.token_hex(8)}"
        verifier = f"{out}/verifier"
        test_env = resolve_env(step.verifier_env, f"{self.name}: [verifier] env")
        exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in test_env.items())
        own = sorted(self.own_pytest_files | {hashlib.sha256(b).hexdigest() for b in step.tests.values()})
        settings = {
            "pycache": f"{INNER_WORKDIR}/{out}/pycache",
            "solution_modules": " ".join(sorted(required_imports(step.tests))),
            "own_pytest_files": " ".join(own),
        }
        paths = {k: v.replace("$ROOT", INNER_WORKDIR) for k, v in self._paths(verifier).items()}
        settings["reward_dirs"] = f"{paths['LOGS']} {INNER_WORKDIR}/{out}"  # the tests' own files: `injob/fence.py`
        settings["tests_own"] = f"{paths['TESTS_DIR']} {INNER_WORKDIR}/tests {settings['reward_dirs']}"
        wrapper = self._prologue(verifier, tests=True) + (
            f"( {exports}export PYTHONNOUSERSITE=1\n"
            f'  exec {_TIMEOUT} -k 2 {max(1, math.ceil(step.verifier_timeout_s))} bash "$TESTS_DIR/test.sh" ) </dev/null\n'
            f'echo "$?" > "$ROOT/{out}/tests.status"\n'
        )
        ro: dict[str, str | bytes] = {f"tests/{p}": b for p, b in step.tests.items()}
        ro[".ws/guard.py"] = injob.text("guard.py")
        cached, pyc = injob.bytecode("guard.py")  # not compiled again by every Python the tests start
        ro[f".ws/{cached}"] = pyc
        ro[".ws/fence.py"] = injob.text("fence.py")
        ro[".ws/guard.cfg"] = "".join(f"{k} {v}\n" for k, v in settings.items())
        names = {f"{verifier}/{n}": f"logs/verifier/{n}" for n in ("reward.txt", "reward.json")}
        job = self._job(wrapper, step.verifier_timeout_s, ro, {}, [*names, f"{out}/tests.status"], verifier)
        t0 = time.monotonic()
        if services is None:
            res = await self.sandbox.run(job)
        else:
            bridge = Bridge(services, self.ports)
            try:
                res = await self.sandbox.run(job, network=await bridge.open())
            except BridgeError as e:
                why = f"the tests' network could not be set up: {e}"
                return Rewards(None, why, host_fault=True), Run(None, why, "sandbox_error", {}, time.monotonic() - t0)
            finally:
                await bridge.close()
        code = _status_file(res.outputs.get(f"{out}/tests.status"))
        status = res.status if code is None else ("ok" if code == 0 else "timeout" if code == 124 else "nonzero_exit")
        files = {names[k]: v for k, v in res.outputs.items() if k in names}
        run = Run(code, _output(res), status, files, time.monotonic() - t0)
        return _rewards_of(run, step, res.status == "sandbox_error"), run

    async def solve(self, step: Step) -> Run:
        """Run the step's oracle, `bash /solution/solve.sh`, keeping what it changes."""
        solution = {f"solution/{p}": b for p, b in step.solution.items()}
        exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in self.solution_env.items())
        return await self.run(
            exports + 'bash "$SOLUTION_DIR/solve.sh"\n', step.agent_timeout_s or DEFAULT_TIMEOUT_S, readonly=solution
        )

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
_PY = shlex.quote(sys.executable)
"""The project's interpreter, at the same path inside the jobs (run with -I -S: nothing of the job's on its path)."""
_TIMEOUT = shutil.which("timeout", path="/usr/bin:/bin") or "timeout"


def _output(res) -> str:
    """A job's stdout then stderr, with what the sandbox said of a limit or a refused call."""
    out = res.stdout + ("\n" if res.stdout and res.stderr else "") + res.stderr
    if res.stdout_truncated or res.stderr_truncated:
        out += "\n[output truncated]"
    if res.message and (res.status in ("memory_exceeded", "output_limit", "sandbox_error", "killed") or res.denied):
        out += f"\n[{res.status}: {res.message}]"
    return out


def _status_file(raw: bytes | None) -> int | None:
    try:
        return int(raw.decode().strip()) if raw is not None else None
    except (UnicodeDecodeError, ValueError):
        return None


def _rewards_of(run: Run, step: Step, host_fault: bool = False) -> Rewards:
    """The reward the tests wrote. No reward is the solution's failure (`incorrect`), unless the tests' job
    could not be set up at all (`host_fault`: the host's, before anything of the solution's was in it)."""
    rewards = read_rewards(run.outputs.get("logs/verifier/reward.txt"), run.outputs.get("logs/verifier/reward.json"))
    if rewards.values is None:
        rewards.host_fault = host_fault
        if run.status == "timeout" or run.exit_code == 124:
            rewards.error += f" (test.sh hit its {step.verifier_timeout_s:g} s limit)"
        if host_fault:
            rewards.error += f" (the tests' job could not be set up: {run.output.strip()[-300:]})"
    return rewards


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
