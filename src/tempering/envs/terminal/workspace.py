"""A task's working folder carried from one sandbox job to the next, in Harbor's layout.

Locally a bundle's environment is emulated on the sandbox's base (the system's tools and the project's
Python): `local_image` reads the Dockerfile subset `FROM` a python image (Docker's official one, or
Terminal-Bench's `ghcr.io/laude-institute/t-bench/python-3-13`) or a plain system image (ubuntu,
debian, Terminal-Bench's ubuntu-24-04), `WORKDIR`, `COPY`, `ENV`, `RUN mkdir -p`, `RUN` package
installs (apt-get, pip) of what the sandbox's base already has, and the no-ops `LABEL`, `EXPOSE`, `CMD`,
`ENTRYPOINT`; anything else raises `NeedsDocker` naming the line that forces Docker (`.line`). Tests or
solutions that download tools when they run (`curl ... | sh`, `apt-get install`, `pip install`,
`uv pip install`) raise `NeedsNetwork` naming each download: the sandbox has no network.

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

import io
import json
import math
import os
import re
import secrets
import shlex
import shutil
import sys
import tarfile
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from tempering.envs.terminal import injob
from tempering.envs.terminal.bundle import Bundle, Step, rewards_score
from tempering.errors import UserError
from tempering.sandbox.job import check_mount

_TAG = r"(?::[\w.-]+)?(?:@sha256:[0-9a-f]{64})?$"
_DOCKER_HUB = r"^(?:(?:docker\.io|index\.docker\.io|registry-1\.docker\.io)/)?(?:library/)?"
_TBENCH = r"^ghcr\.io/laude-institute/t-bench/"
_PYTHON_BASE = re.compile(rf"(?:{_DOCKER_HUB}python|{_TBENCH}python-3-\d+){_TAG}")
"""Python images by name: Docker's official `python` (any tag, digest, registry spelling) and
Terminal-Bench's own `ghcr.io/laude-institute/t-bench/python-3-13` (a python image, Debian-based)."""
_SYSTEM_BASE = re.compile(rf"(?:{_DOCKER_HUB}(?:ubuntu|debian)|{_TBENCH}ubuntu-\d+-\d+){_TAG}")
"""Plain system images whose shell tools the sandbox's base provides (it has more: python3 among them)."""
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


class NeedsDocker(Exception):
    """The bundle's environment is outside what the local sandbox can provide (message says why)."""

    def __init__(self, message: str, line: str | None = None):
        super().__init__(message)
        self.line = line
        """The Dockerfile line (as written, continuations joined) that forces Docker; None for a
        task.toml key or a missing file."""


class NeedsNetwork(NeedsDocker):
    """The tests (or the solution) download tools when they run; the sandbox has no network."""

    def __init__(self, downloads: list[Download]):
        self.downloads = downloads
        super().__init__("downloads at run time, and the sandbox has no network: " + "; ".join(map(str, downloads)))

    @property
    def names(self) -> list[str]:
        return [d.name for d in self.downloads]


@dataclass(frozen=True)
class Download:
    """One tool or package a script fetches from the network when it runs."""

    name: str
    """What it fetches: `uv`, `pytest==8.4.1`, `curl`, ..."""
    how: str
    """`curl | sh`, `apt-get install`, `pip install`, `uv pip install`, ..."""
    where: str
    """`tests/test.sh line 3`."""

    def __str__(self) -> str:
        return f"{self.name} ({self.how}, {self.where})"


_PIPE_TO_SHELL = re.compile(r"\b(curl|wget)\b[^|]*?(https?://\S+)[^|]*\|\s*(?:sudo\s+)?(?:ba|z|da)?sh\b")
_APT_INSTALL = re.compile(r"\bapt(?:-get)?\s+(?:-\S+\s+)*install\b((?:\s+[^;&|]+)?)")
_PIP_INSTALL = re.compile(r"\b(uv\s+pip|pip3?|python3?\s+-m\s+pip|pipx)\s+install\b((?:\s+[^;&|]+)?)")
_UV_TOOL = re.compile(r"\b(uvx|uv\s+tool\s+install|uv\s+add|npm\s+install|npx)\s+((?:\s*[^;&|\s]+)+)")
_KNOWN_INSTALLERS = {"astral.sh/uv": "uv", "get.docker.com": "docker", "sh.rustup.rs": "rustup", "deno.land": "deno"}


def _words(text: str) -> list[str]:
    try:
        return shlex.split(text, comments=True)
    except ValueError:
        return text.split()


def _packages(args: str) -> list[str]:
    """The package names of an install command's arguments (options and `-r file` left out)."""
    out, skip = [], False
    for w in _words(args):
        if skip:
            skip = False
        elif w in ("-r", "--requirement", "-c", "--constraint", "-e", "--index-url", "-i", "--target", "-t"):
            skip = True
        elif not w.startswith("-") and not w.startswith("$") and w not in ("\\",):
            out.append(w)
    return out


def downloads(bundle: Bundle) -> list[Download]:
    """What the tests and the solutions fetch from the network when they run (a scan of their shell
    scripts: pipes of curl/wget into a shell, apt-get, pip, uv and npm installs; a plain `pip install`
    of a distribution the project's Python has is no download: pip finds it satisfied, offline)."""
    found: list[Download] = []
    scripts = {f"tests/{p}": b for s in bundle.steps for p, b in s.tests.items()}
    scripts |= {
        f"solution/{p}" if not s.name else f"steps/{s.name}/solution/{p}": b
        for s in bundle.steps
        for p, b in s.solution.items()
    }
    for path, data in sorted(scripts.items()):
        if not path.endswith(".sh"):
            continue
        text = data.decode("utf-8", errors="replace").replace("\\\n", " ")
        for n, line in enumerate(text.splitlines(), 1):
            code = line.split("#", 1)[0] if not line.lstrip().startswith("#!") else ""
            where = f"{path} line {n}"
            for m in _PIPE_TO_SHELL.finditer(code):
                url = m.group(2).strip("'\"")
                host = url.split("://", 1)[1]
                name = next((v for k, v in _KNOWN_INSTALLERS.items() if host.startswith(k)), host.split("/", 1)[0])
                found.append(Download(name, f"{m.group(1)} | sh", where))
            for m in _APT_INSTALL.finditer(code):
                found += [Download(p, "apt-get install", where) for p in _packages(m.group(1))]
            for m in _PIP_INSTALL.finditer(code):
                how = " ".join(m.group(1).split()) + " install"
                # pip itself answers "Requirement already satisfied" offline for what the project's Python has
                offline = how in ("pip install", "pip3 install", "python -m pip install", "python3 -m pip install")
                offline = offline and not re.search(r"(?:^|\s)(?:-U|--upgrade|--force-reinstall)\b", m.group(2))
                pkgs = [p for p in _packages(m.group(2)) if not (offline and _pip_present(p))]
                found += [Download(p, how, where) for p in pkgs]
                for req in re.findall(r"(?:^|\s)(?:-r|--requirement)[\s=]+(\S+)", m.group(2)):
                    found.append(Download(f"the packages of {req}", how + " -r", where))
            for m in _UV_TOOL.finditer(code):
                how = " ".join(m.group(1).split())
                pkgs = _packages(m.group(2))[:1] if how in ("uvx", "npx") else _packages(m.group(2))
                found += [Download(p, how, where) for p in pkgs]
    return found


_APT_NOOPS = (("apt-get", "update"), ("apt", "update"), ("apt-get", "clean"), ("apt-get", "autoremove"))
_APT_COMMANDS = {
    "procps": "ps",
    "python3-pip": "pip3",
    "python3-venv": "python3",
    "python-is-python3": "python",
    "build-essential": "gcc",
    "iproute2": "ip",
    "iputils-ping": "ping",
    "net-tools": "netstat",
    "sqlite3": "sqlite3",
    "coreutils": "ls",
    "ca-certificates": "update-ca-certificates",
    "xz-utils": "xz",
    "bsdmainutils": "column",
    "openssh-client": "ssh",
    "dnsutils": "dig",
}
"""apt packages whose command is not their name (otherwise the command is the package's name)."""


def _apt_present(pkg: str) -> bool:
    import shutil

    from tempering.sandbox.backends import job_path

    name = pkg.split("=", 1)[0].split(":", 1)[0]
    return shutil.which(_APT_COMMANDS.get(name, name), path=job_path()) is not None


def _pip_present(req: str) -> bool:
    from importlib import metadata

    name = re.split(r"[<>=!~\[; ]", req, maxsplit=1)[0]
    try:
        metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return False
    return True


def _run_reproducible(img: LocalImage, rest: str, n: int, line: str) -> None:
    """A RUN line the sandbox's base already satisfies (mkdir -p under the working folder, apt-get / pip
    installs of what is there, apt's cache cleaning), or NeedsDocker naming what it lacks."""
    for part in re.split(r"\s*(?:&&|;)\s*", rest.strip()):
        words = _words(part)
        while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):  # DEBIAN_FRONTEND=noninteractive ...
            words = words[1:]
        if not words:
            continue
        if words[:2] == ["mkdir", "-p"] and not re.search(r"[$`|]", part):
            for d in words[2:]:
                img.dirs.add(_inside(img, d, n, line))
            continue
        if tuple(words[:2]) in _APT_NOOPS or (
            words[:2] == ["rm", "-rf"]
            and all(w.startswith(("/var/lib/apt/lists", "/var/cache/apt", "/tmp/", "/root/.cache")) for w in words[2:])
        ):
            continue
        if words[0] in ("apt-get", "apt") and "install" in words:
            missing = [p for p in _packages(" ".join(words[words.index("install") + 1 :])) if not _apt_present(p)]
            if missing:
                raise NeedsDocker(
                    f"Dockerfile line {n}: `{line.strip()}` installs {', '.join(missing)}, which the sandbox's base lacks",
                    line.strip(),
                )
            continue
        pip = next(
            (
                i
                for i in range(len(words))
                if words[i] in ("pip", "pip3")
                or words[i : i + 3] in (["python", "-m", "pip"], ["python3", "-m", "pip"])
            ),
            None,
        )
        if pip is not None and "install" in words[pip:]:
            missing = [p for p in _packages(" ".join(words[words.index("install", pip) + 1 :])) if not _pip_present(p)]
            if missing:
                raise NeedsDocker(
                    f"Dockerfile line {n}: `{line.strip()}` installs {', '.join(missing)}, which the project's "
                    "Python lacks",
                    line.strip(),
                )
            continue
        raise NeedsDocker(
            f"Dockerfile line {n}: `{line.strip()}` is outside the local subset (RUN mkdir -p, and apt-get / pip "
            "installs of what the sandbox's base has)",
            line.strip(),
        )


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
    base: str = "python"
    """`python` (a python image) or `system` (ubuntu, debian: the sandbox's base has more tools)."""


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
    img = LocalImage(workdir="")
    for n, line in _dockerfile_lines(bundle.text("environment/Dockerfile")):
        m = _LINE_CMD.match(line)
        instr, rest = (m.group(1).upper(), m.group(2).strip()) if m else (line.strip(), "")
        if instr == "FROM":
            args = [a for a in rest.split() if not a.startswith("--")]
            image = args[0] if args else ""
            if _PYTHON_BASE.match(image) or _OWN_BASE.match(image):
                img.base = "python"
            elif _SYSTEM_BASE.match(image):
                img.base = "system"
            else:
                raise NeedsDocker(
                    f"Dockerfile line {n}: base image {image!r} is neither a python image nor a plain system image "
                    "(ubuntu, debian) the sandbox's base stands in for",
                    line.strip(),
                )
        elif instr == "WORKDIR":
            path = rest if rest.startswith("/") else str(PurePosixPath(img.workdir or "/") / rest)
            if img.workdir and path != img.workdir and (img.files or img.dirs):
                raise NeedsDocker(
                    f"Dockerfile line {n}: a second WORKDIR {rest} (one working folder locally)", line.strip()
                )
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
                raise NeedsDocker(f"Dockerfile line {n}: ADD of an archive or URL", line.strip())
            if len(args) < 2:
                raise NeedsDocker(f"Dockerfile line {n}: {instr} needs a source and a destination", line.strip())
            *srcs, dest = args
            for src in srcs:
                _copy(bundle, img, src, dest, len(srcs) > 1, n, line)
        elif instr == "RUN":
            _run_reproducible(img, rest, n, line)
        elif instr not in _NO_OPS:
            raise NeedsDocker(
                f"Dockerfile line {n}: {instr} is outside the local subset (FROM, WORKDIR, COPY, ENV, RUN installs "
                "of what the sandbox's base has)",
                line.strip(),
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
    if found := downloads(bundle):
        raise NeedsNetwork(found)
    return img


def _dockerfile_lines(text: str) -> list[tuple[int, str]]:
    """(number of the first line, instruction with its continuation lines joined), comments left out."""
    out, cur, start = [], "", 0
    for n, raw in enumerate(text.splitlines(), 1):
        if not cur and (not raw.strip() or raw.lstrip().startswith("#")):
            continue
        if cur and raw.lstrip().startswith("#"):
            continue  # a comment inside a continued instruction
        start = start or n
        if raw.rstrip().endswith("\\"):
            cur += raw.rstrip()[:-1] + " "
            continue
        out.append((start, " ".join((cur + raw).split())))
        cur, start = "", 0
    if cur.strip():
        out.append((start, " ".join(cur.split())))
    return out


def _inside(img: LocalImage, dest: str, n: int, line: str = "") -> str:
    """`dest` relative to the working folder; NeedsDocker when it lies elsewhere."""
    if not dest.startswith("/") and not img.workdir:
        raise NeedsDocker(f"Dockerfile line {n}: relative destination {dest} before any WORKDIR", line or None)
    rel = os.path.relpath(os.path.normpath(os.path.join(img.workdir or "/app", dest)), img.workdir or "/app")
    if rel == ".":
        return ""
    if rel.startswith(".."):
        raise NeedsDocker(
            f"Dockerfile line {n}: {dest} is outside the working folder {img.workdir or '/app'}", line or None
        )
    return rel


def _copy(bundle: Bundle, img: LocalImage, src: str, dest: str, many: bool, n: int, line: str = "") -> None:
    src = src.strip("/") if src not in (".", "./") else ""
    src = src[2:] if src.startswith("./") else src
    into_dir = dest.endswith("/") or many or dest in (".", "./")
    dest = _inside(img, dest, n, line)
    base = f"environment/{src}".rstrip("/")
    matched = {
        p: b
        for p, b in bundle.files.items()
        if (p == base or p.startswith(base + "/")) and p not in ("environment/Dockerfile",)
    }
    if not matched:
        raise NeedsDocker(f"Dockerfile line {n}: COPY source {src!r} is not in environment/", line or None)
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


def pack(files: dict[str, bytes], dirs: Collection[str] = frozenset()) -> bytes:
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
    host_fault: bool = False
    """No reward because the tests' job could not be set up (the host's fault, observed before anything of
    the solution's entered it): the one case a missing reward is an environment error, not `incorrect`."""

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
        """What the solution leaves running (a web server on a local port) still answers the tests: its job
        stays up while the tests' job runs in its network namespace (`Sandbox.shares_network`: bwrap on a
        root host). Else the solution's processes end with its job, before the tests start."""
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

    async def run_tests(self, step: Step, network=None) -> tuple[Rewards, Run]:
        """The step's tests against the current state (which they do not change), hermetically: Harbor runs
        `bash /tests/test.sh` from the working folder, and so do we, in a job of the tests' own: the working
        folder unpacked from the state, no link out of it; fresh HOME and /tmp; the reward folder made for
        this run (read back without following links); their Python finding installed modules and plugins
        before anything in a folder they can write (`injob/sitecustomize.py`). `network`: a `Network`
        where the solution's services still run."""
        if "test.sh" not in step.tests:
            return Rewards(None, "no tests/test.sh"), Run(None, "", "not_run", {}, 0.0)
        out = f".v-{secrets.token_hex(8)}"
        verifier = f"{out}/verifier"
        test_env = resolve_env(step.verifier_env, f"{self.name}: [verifier] env")
        exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in test_env.items())
        wrapper = self._prologue(verifier, tests=True) + (
            f'( {exports}export PYTHONNOUSERSITE=1 PYTHONPATH="$ROOT/.ws/tools${{PYTHONPATH:+:$PYTHONPATH}}"\n'
            f'  exec {_TIMEOUT} -k 2 {max(1, math.ceil(step.verifier_timeout_s))} bash "$TESTS_DIR/test.sh" ) </dev/null\n'
            f'echo "$?" > "$ROOT/{out}/tests.status"\n'
        )
        ro: dict[str, str | bytes] = {f"tests/{p}": b for p, b in step.tests.items()}
        ro[".ws/tools/sitecustomize.py"] = injob.text("sitecustomize.py")
        names = {f"{verifier}/{n}": f"logs/verifier/{n}" for n in ("reward.txt", "reward.json")}
        job = self._job(wrapper, step.verifier_timeout_s, ro, {}, [*names, f"{out}/tests.status"], verifier)
        t0 = time.monotonic()
        res = await self.sandbox.run(job, network=network) if network is not None else await self.sandbox.run(job)
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

    async def solve_then_test(self, step: Step) -> tuple[Run, Rewards | None, Run | None]:
        """The step's oracle, then (if it exited 0) its tests. Where `keeps_services`, the oracle runs in a
        session (`session.Session`) whose job stays up while the tests run beside it, so that a service it
        leaves running answers them over the network, as in Harbor's container; else `solve`, then
        `run_tests`. (solution's run, rewards or None when the tests did not run, tests' run or None)."""
        if not self.keeps_services or "test.sh" not in step.tests:
            run = await self.solve(step)
            if run.exit_code != 0:
                return run, None, None
            rewards, tests = await self.run_tests(step)
            return run, rewards, tests
        from tempering.envs.terminal.session import Session

        solution = {f"solution/{p}": b for p, b in step.solution.items()}
        session = Session(self, step, readonly=solution)
        exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in self.solution_env.items())
        run = await session.run(exports + 'bash "$SOLUTION_DIR/solve.sh"\n', step.agent_timeout_s or DEFAULT_TIMEOUT_S)
        if run.exit_code != 0:
            await session.close()
            return run, None, None
        rewards, tests = await session.finish()
        return run, rewards, tests

    async def close(self) -> None:
        """Nothing to release: the state lives in memory."""


REWARD_OUTPUTS = ("logs/verifier/reward.txt", "logs/verifier/reward.json")
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
