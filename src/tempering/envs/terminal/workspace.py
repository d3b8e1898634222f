"""A task's working folder carried from one sandbox job to the next, in Harbor's layout.

Locally a bundle's environment is emulated on the sandbox's base (the system's tools and the project's
Python): `local_image` reads the Dockerfile subset `FROM python...`, `WORKDIR`, `COPY`, `ENV`,
`RUN mkdir -p`, and the no-ops `LABEL`, `EXPOSE`, `CMD`, `ENTRYPOINT`; anything else raises
`NeedsDocker` naming the line.

Each `Workspace.run` is one sandbox job: it unpacks the working folder's state (a tar, so folders,
modes and empty folders survive), runs one shell script under a time limit and packs the state again.
The host never unpacks a tar that a job wrote. On the isolated backends the job sees Harbor's paths:
the working folder at the image's WORKDIR (usually /app), the tests at /tests, the oracle at /solution,
the verifier's output at /logs/verifier. The plain `subprocess` backend cannot place folders there: it
keeps them inside the job's folder, and only scripts that find them through APP_DIR, TESTS_DIR /
TEST_DIR and REWARD_FILE (set in both layouts) run there.
"""

from __future__ import annotations

import io
import json
import math
import os
import re
import shlex
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from tempering.envs.terminal.bundle import Bundle, Step, rewards_score
from tempering.errors import UserError
from tempering.sandbox.job import check_mount

_PYTHON_BASE = re.compile(
    r"^(?:(?:docker\.io|index\.docker\.io)/)?(?:library/)?python(?::[\w.-]+)?(?:@sha256:[0-9a-f]{64})?$"
)
_OWN_BASE = re.compile(r"^tempering/base(?::[\w.-]+)?$")
_LINE_CMD = re.compile(r"^\s*(\w+)\s*(.*)$")
_NO_OPS = {"LABEL", "EXPOSE", "CMD", "ENTRYPOINT", "MAINTAINER", "STOPSIGNAL", "HEALTHCHECK"}
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


class NeedsDocker(Exception):
    """The bundle's environment is outside what the local sandbox can provide (message says why)."""


@dataclass
class LocalImage:
    """The emulated environment: the working folder, its initial files and environment variables."""

    workdir: str = "/app"
    """Absolute path of the working folder (WORKDIR, or [environment] workdir)."""
    files: dict[str, bytes] = field(default_factory=dict)
    """Files by path relative to the working folder."""
    dirs: set[str] = field(default_factory=set)
    """Empty folders made by `RUN mkdir -p`, relative to the working folder."""
    env: dict[str, str] = field(default_factory=dict)
    """Variables set by ENV lines."""


def local_image(bundle: Bundle) -> LocalImage:
    """Emulate the bundle's environment on the sandbox's base, or raise NeedsDocker saying why not."""
    env_cfg = bundle.config.environment
    if env_cfg.network_mode == "allowlist":
        raise NeedsDocker(
            f"network_mode = 'allowlist' ({', '.join(env_cfg.allowed_hosts or [])}): the sandbox has no network"
        )
    if env_cfg.os != "linux":
        raise NeedsDocker(f"os = {env_cfg.os!r}")
    for p in bundle.files:
        if p.startswith("environment/docker-compose."):
            raise NeedsDocker(f"{p}: several containers (Docker Compose)")
        if p.startswith("steps/") and "/workdir/" in p:
            raise NeedsDocker(f"{p}: step set-up folders are not emulated locally")
    if "environment/Dockerfile" not in bundle.files:
        raise NeedsDocker(f"no environment/Dockerfile (prebuilt image {env_cfg.docker_image!r})")
    text = bundle.text("environment/Dockerfile").replace("\\\n", " ")
    img = LocalImage(workdir="")
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = _LINE_CMD.match(line)
        instr, rest = (m.group(1).upper(), m.group(2).strip()) if m else (line.strip(), "")
        if instr == "FROM":
            args = [a for a in rest.split() if not a.startswith("--")]
            image = args[0] if args else ""
            if not (_PYTHON_BASE.match(image) or _OWN_BASE.match(image)):
                raise NeedsDocker(f"Dockerfile line {n}: base image {image!r} is not a python image")
        elif instr == "WORKDIR":
            path = rest if rest.startswith("/") else str(PurePosixPath(img.workdir or "/") / rest)
            if img.workdir and path != img.workdir and (img.files or img.dirs):
                raise NeedsDocker(f"Dockerfile line {n}: a second WORKDIR {rest} (one working folder locally)")
            img.workdir = os.path.normpath(path)
        elif instr == "ENV":
            if "=" in rest.split(" ", 1)[0]:
                for item in shlex.split(rest):
                    k, _, v = item.partition("=")
                    img.env[k] = v
            else:
                k, _, v = rest.partition(" ")
                img.env[k] = v.strip()
        elif instr in ("COPY", "ADD"):
            args = [a for a in shlex.split(rest) if not a.startswith("--")]
            if instr == "ADD" and any("://" in a or a.endswith((".tar", ".gz", ".tgz", ".xz")) for a in args):
                raise NeedsDocker(f"Dockerfile line {n}: ADD of an archive or URL")
            if len(args) < 2:
                raise NeedsDocker(f"Dockerfile line {n}: {instr} needs a source and a destination")
            *srcs, dest = args
            for src in srcs:
                _copy(bundle, img, src, dest, len(srcs) > 1, n)
        elif instr == "RUN" and re.fullmatch(r"mkdir\s+-p\s+[^;&|$`]+", rest):
            for d in rest.split()[2:]:
                img.dirs.add(_inside(img, d, n))
        elif instr not in _NO_OPS:
            raise NeedsDocker(
                f"Dockerfile line {n}: {instr} is outside the local subset (FROM python, WORKDIR, COPY, ENV)"
            )
    img.workdir = env_cfg.workdir or img.workdir
    if not img.workdir:
        raise NeedsDocker(
            "the Dockerfile sets no WORKDIR: the local runner needs the working folder (e.g. WORKDIR /app)"
        )
    try:
        check_mount(img.workdir)
    except UserError:
        raise NeedsDocker(f"working folder {img.workdir} is a system folder of the sandbox") from None
    return img


def _inside(img: LocalImage, dest: str, n: int) -> str:
    """`dest` relative to the working folder; NeedsDocker when it lies elsewhere."""
    if not dest.startswith("/") and not img.workdir:
        raise NeedsDocker(f"Dockerfile line {n}: relative destination {dest} before any WORKDIR")
    rel = os.path.relpath(os.path.normpath(os.path.join(img.workdir or "/app", dest)), img.workdir or "/app")
    if rel == ".":
        return ""
    if rel.startswith(".."):
        raise NeedsDocker(f"Dockerfile line {n}: {dest} is outside the working folder {img.workdir or '/app'}")
    return rel


def _copy(bundle: Bundle, img: LocalImage, src: str, dest: str, many: bool, n: int) -> None:
    src = src.strip("/") if src not in (".", "./") else ""
    src = src[2:] if src.startswith("./") else src
    into_dir = dest.endswith("/") or many or dest in (".", "./")
    dest = _inside(img, dest, n)
    base = f"environment/{src}".rstrip("/")
    matched = {
        p: b
        for p, b in bundle.files.items()
        if (p == base or p.startswith(base + "/")) and p not in ("environment/Dockerfile",)
    }
    if not matched:
        raise NeedsDocker(f"Dockerfile line {n}: COPY source {src!r} is not in environment/")
    for p, data in matched.items():
        if p == base:  # a single file
            target = f"{dest}/{src.rsplit('/', 1)[-1]}" if (into_dir or not dest) else dest
        else:
            target = f"{dest}/{p[len(base) + 1 :]}"
        img.files[target.strip("/")] = data


def resolve_env(env: dict[str, str], where: str) -> dict[str, str]:
    """Harbor's `${VAR}` / `${VAR:-default}` templates, filled from the host's environment."""

    def one(m: re.Match) -> str:
        if m.group(1) in os.environ:
            return os.environ[m.group(1)]
        if m.group(2) is not None:
            return m.group(2)
        raise UserError(f"{where}: variable {m.group(1)} is not set on this host; set it or give a ${{VAR:-default}}")

    return {k: _ENV_REF.sub(one, v) for k, v in env.items()}


def pack(files: dict[str, bytes], dirs: set[str] = frozenset()) -> bytes:
    """A tar of files and empty folders (the first state)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for d in sorted(dirs):
            if d:
                info = tarfile.TarInfo(d)
                info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
                t.addfile(info)
        for path in sorted(files):
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime = len(files[path]), 0o755 if path.endswith(".sh") else 0o644, 0
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
        self.state = pack(image.files, image.dirs)
        self.memory_mb = memory_mb
        self.disk_mb = disk_mb
        self.harbor_paths = bool(getattr(sandbox, "isolated", False))
        """Jobs see /app, /tests, /solution, /logs/verifier (isolated backends); else folders in the job's."""

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
        from tempering.sandbox import Job, Limits

        p = self._paths()
        q = lambda v: v if v.startswith("$ROOT") else shlex.quote(v)
        wrapper = (
            'ROOT="$PWD"\n'
            f"export APP_DIR={q(p['APP_DIR'])} TESTS_DIR={q(p['TESTS_DIR'])} TEST_DIR={q(p['TESTS_DIR'])}\n"
            f"export SOLUTION_DIR={q(p['SOLUTION_DIR'])}\n"
            f"export REWARD_FILE={q(p['LOGS'])}/reward.txt\n"
            "mkdir -p logs/verifier && python3 .ws/restore.py || exit 97\n"
            'cd "$APP_DIR" || exit 97\n'
            f'timeout -k 2 {max(1, math.ceil(timeout_s))} bash "$ROOT/.ws/cmd.sh"\n'
            "status=$?\n"
            'cd "$ROOT" && python3 .ws/snapshot.py || exit 98\n'
            "exit $status\n"
        )
        ro = dict(readonly or {})
        ro.update(
            {".ws/restore.py": _RESTORE, ".ws/snapshot.py": _SNAPSHOT, ".ws/cmd.sh": script, ".ws/run.sh": wrapper}
        )
        mounts = {}
        if self.harbor_paths:
            mounts = {self.workdir: "app"}
            if outputs:  # the verifier's folder exists only for the tests, fresh each time
                mounts["/logs/verifier"] = "logs/verifier"
            for top, inner in (("tests", "/tests"), ("solution", "/solution")):
                if any(k.startswith(top + "/") for k in ro):
                    mounts[inner] = top
        job = Job(
            cmd=["bash", ".ws/run.sh"],
            files={".ws-state.tar": self.state},
            readonly_files=ro,
            env={**self.env, **(env or {})},
            limits=Limits(
                wall_s=timeout_s + 30,
                cpu_s=timeout_s + 30,
                memory_mb=self.memory_mb,
                nproc=128,
                disk_mb=self.disk_mb,
            ),
            outputs=[".ws-state.tar", *(outputs or [])],
            mounts=mounts,
        )
        t0 = time.monotonic()
        res = await self.sandbox.run(job)
        code = res.exit_code
        if code in (97, 98) or ".ws-state.tar" not in res.outputs:
            code = None  # the state could not be restored or saved: keep the previous one
        else:
            self.state = res.outputs[".ws-state.tar"]
        out = res.stdout + (("\n" if res.stdout and res.stderr else "") + res.stderr if res.stderr else "")
        if res.stdout_truncated or res.stderr_truncated:
            out += "\n[output truncated]"
        if res.status in ("memory_exceeded", "output_limit", "sandbox_error", "killed") and res.message:
            out += f"\n[{res.status}: {res.message}]"
        kept = {k: v for k, v in res.outputs.items() if k != ".ws-state.tar"}
        return Run(code, out, res.status, kept, time.monotonic() - t0)

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
            outputs=["logs/verifier/reward.txt", "logs/verifier/reward.json"],
        )
        rewards = read_rewards(
            run.outputs.get("logs/verifier/reward.txt"), run.outputs.get("logs/verifier/reward.json")
        )
        if rewards.values is None and (run.status == "timeout" or run.exit_code == 124):
            rewards.error += f" (test.sh hit its {step.verifier_timeout_s:g} s limit)"
        return rewards, run

    async def solve(self, step: Step) -> Run:
        """Run the step's oracle, `bash /solution/solve.sh`, keeping what it changes."""
        solution = {f"solution/{p}": b for p, b in step.solution.items()}
        return await self.run(
            'bash "$SOLUTION_DIR/solve.sh"\n',
            step.agent_timeout_s or DEFAULT_TIMEOUT_S,
            readonly=solution,
            env=self.solution_env,
        )

    async def close(self) -> None:
        """Nothing to release: the state lives in memory."""
