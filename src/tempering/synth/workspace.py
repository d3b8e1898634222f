"""The agent's working directory (/app), carried from one sandbox job to the next.

Locally a bundle's environment is emulated on the sandbox's documented base (the project's Python,
coreutils and the fixture files): `local_image` accepts the Dockerfile subset `FROM python...`,
`WORKDIR /app`, `COPY`, `ENV`, and says which line needs the Docker backend otherwise.

Each `Workspace.run` is one sandbox job: it unpacks the directory's state (a tar, so folders, modes and
empty folders survive), runs one shell script under a time limit, and packs the state again. Helper
files live in `.ws/` and the state in `.ws-state.tar`; both are left out of the state. The host never
unpacks a tar that a job wrote.
"""

from __future__ import annotations

import io
import re
import shlex
import tarfile
import time
from dataclasses import dataclass, field

from tempering.synth.bundle import Bundle

STATE = ".ws-state.tar"
_LOCAL_BASES = re.compile(r"^(python(:[\w.-]+)?|tempering/base(:[\w.-]+)?)$")
_LINE_CMD = re.compile(r"^\s*(\w+)\s+(.*)$")

_RESTORE = """import os, tarfile
with tarfile.open(".ws-state.tar") as t:
    t.extractall(".", filter="tar")
os.remove(".ws-state.tar")
"""
_SNAPSHOT = """import os, sys, tarfile
skip = {".ws", ".ws-state.tar"} | set(sys.argv[1:])
with tarfile.open(".ws-state.tar", "w") as t:
    for name in sorted(os.listdir(".")):
        if name not in skip:
            t.add(name)
"""


class NeedsDocker(Exception):
    """The bundle's environment is outside what the local sandbox can provide (message says why)."""


@dataclass
class LocalImage:
    """The emulated environment: initial files of /app and environment variables."""

    files: dict[str, bytes] = field(default_factory=dict)
    """Files by path relative to /app."""
    env: dict[str, str] = field(default_factory=dict)
    """Variables set by ENV lines."""


def local_image(bundle: Bundle) -> LocalImage:
    """Emulate environment/Dockerfile on the documented base, or raise NeedsDocker."""
    env_cfg = bundle.config.environment
    if env_cfg.allow_internet:
        raise NeedsDocker("task.toml allows internet access, which the sandbox never gives")
    if "environment/Dockerfile" not in bundle.files:
        raise NeedsDocker(f"no environment/Dockerfile (prebuilt image {env_cfg.docker_image!r})")
    text = bundle.text("environment/Dockerfile").replace("\\\n", " ")
    img = LocalImage()
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = _LINE_CMD.match(line)
        instr, rest = (m.group(1).upper(), m.group(2).strip()) if m else (line.strip(), "")
        if instr == "FROM":
            image = rest.split()[0] if rest else ""
            if not _LOCAL_BASES.match(image):
                raise NeedsDocker(f"Dockerfile line {n}: base image {image!r} is not the documented base (python:*)")
        elif instr == "WORKDIR":
            if rest.rstrip("/") != "/app":
                raise NeedsDocker(f"Dockerfile line {n}: WORKDIR {rest} (the local base works in /app only)")
        elif instr == "ENV":
            if "=" in rest:
                for item in shlex.split(rest):
                    k, _, v = item.partition("=")
                    img.env[k] = v
            else:
                k, _, v = rest.partition(" ")
                img.env[k] = v.strip()
        elif instr == "COPY":
            args = [a for a in shlex.split(rest) if not a.startswith("--")]
            if len(args) < 2:
                raise NeedsDocker(f"Dockerfile line {n}: COPY needs a source and a destination")
            *srcs, dest = args
            for src in srcs:
                _copy(bundle, img, src, dest, len(srcs) > 1, n)
        else:
            raise NeedsDocker(f"Dockerfile line {n}: {instr} is outside the local subset (FROM, WORKDIR, COPY, ENV)")
    return img


def _copy(bundle: Bundle, img: LocalImage, src: str, dest: str, many: bool, n: int) -> None:
    src = src.strip("/") if src not in (".", "./") else ""
    if dest.startswith("/"):
        if dest.rstrip("/") != "/app" and not dest.startswith("/app/"):
            raise NeedsDocker(f"Dockerfile line {n}: COPY to {dest} (only /app is emulated locally)")
        dest = dest[len("/app") :].lstrip("/")
    base = f"environment/{src}".rstrip("/")
    matched = {
        p: b
        for p, b in bundle.files.items()
        if p == base or (p.startswith(base + "/") and p != "environment/Dockerfile")
    }
    if not matched:
        raise NeedsDocker(f"Dockerfile line {n}: COPY source {src!r} is not in environment/")
    for p, data in matched.items():
        if p == base:  # a single file
            target = (
                f"{dest.rstrip('/')}/{src.rsplit('/', 1)[-1]}" if (dest.endswith("/") or many or not dest) else dest
            )
        else:
            target = f"{dest.rstrip('/')}/{p[len(base) + 1 :]}".lstrip("/")
        img.files[target.lstrip("/")] = data


def pack(files: dict[str, bytes]) -> bytes:
    """A tar of files (for the first state); folders are implied by paths."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
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


class Workspace:
    """The /app directory of one episode or one verification, as a tar carried between jobs."""

    def __init__(self, sandbox, image: LocalImage, memory_mb: int = 2048):
        self.sandbox = sandbox
        self.env = dict(image.env)
        self.state = pack(image.files)
        self.memory_mb = memory_mb

    def copy(self) -> Workspace:
        other = object.__new__(Workspace)
        other.__dict__.update(self.__dict__)
        other.env = dict(self.env)
        return other

    async def run(
        self,
        script: str,
        timeout_s: float,
        readonly: dict[str, bytes] | None = None,
        env: dict[str, str] | None = None,
        outputs: list[str] | None = None,
    ) -> Run:
        """Run `script` with bash in /app; keeps the resulting state unless the job itself failed."""
        from tempering.sandbox import Job, Limits

        readonly = dict(readonly or {})
        hidden = sorted({p.split("/", 1)[0] for p in [*readonly, *(outputs or [])]})
        wrapper = (
            'export APP_DIR="$PWD" HOME="$PWD"\n'
            "python3 .ws/restore.py || exit 97\n"
            f"timeout -k 2 {max(1, int(timeout_s))} bash .ws/cmd.sh\n"
            "status=$?\n"
            f"python3 .ws/snapshot.py {' '.join(shlex.quote(h) for h in hidden)} || exit 98\n"
            "exit $status\n"
        )
        readonly.update(
            {".ws/restore.py": _RESTORE, ".ws/snapshot.py": _SNAPSHOT, ".ws/cmd.sh": script, ".ws/run.sh": wrapper}
        )
        job = Job(
            cmd=["bash", ".ws/run.sh"],
            files={STATE: self.state},
            readonly_files=readonly,
            env={**self.env, **(env or {})},
            limits=Limits(wall_s=timeout_s + 30, cpu_s=timeout_s + 30, memory_mb=self.memory_mb, nproc=128),
            outputs=[STATE, *(outputs or [])],
        )
        t0 = time.monotonic()
        res = await self.sandbox.run(job)
        code = res.exit_code
        if code in (97, 98) or STATE not in res.outputs:
            code = None  # the state could not be restored or saved: keep the previous one
        else:
            self.state = res.outputs[STATE]
        out = res.stdout + (("\n" if res.stdout and res.stderr else "") + res.stderr if res.stderr else "")
        if res.stdout_truncated or res.stderr_truncated:
            out += "\n[output truncated]"
        return Run(code, out, res.status, {k: v for k, v in res.outputs.items() if k != STATE}, time.monotonic() - t0)

    async def run_tests(self, bundle: Bundle) -> tuple[float | None, Run]:
        """Run tests/test.sh against the current state; (reward, run). The state is not changed."""
        tests = {f".tests/{p[len('tests/') :]}": b for p, b in bundle.files.items() if p.startswith("tests/")}
        probe = self.copy()
        run = await probe.run(
            'export TESTS_DIR="$PWD/.tests" REWARD_FILE="$PWD/.reward/reward.txt"\nbash "$TESTS_DIR/test.sh"\n',
            bundle.config.verifier.timeout_sec,
            readonly=tests,
            outputs=[".reward/reward.txt"],
        )
        raw = run.outputs.get(".reward/reward.txt")
        try:
            reward = float(raw.decode().strip()) if raw is not None else None
        except ValueError:
            reward = None
        return reward, run
