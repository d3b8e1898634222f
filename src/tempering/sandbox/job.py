"""What a sandboxed job is (`Job`, `Limits`) and what running it gives back (`Result`).

These are plain data, picklable, so a job can be shipped to a Ray actor and its result shipped back.
Validation happens here, before anything touches the disk: a bad job is a `UserError` that names the
field and the fix, never a half-built working directory.
"""

from __future__ import annotations

import glob
import os
import posixpath
import stat
import sys
from dataclasses import dataclass, field, fields

from tempering.errors import UserError

STATUSES = ("ok", "nonzero_exit", "timeout", "memory_exceeded", "output_limit", "killed", "sandbox_error")


@dataclass(frozen=True)
class Limits:
    """Resource limits of one job. Every limit must be positive."""

    wall_s: float = 10.0
    """Wall-clock seconds before the whole process tree is killed (status `timeout`)."""
    cpu_s: float = 10.0
    """CPU seconds per process (RLIMIT_CPU); a job that dies of it, having used at least that much CPU
    (as the host measured), is reported as `timeout`."""
    memory_mb: int = 2048
    """Address space per process in MiB (RLIMIT_AS: an allocation past it fails inside the job); with
    disk_mb, the cap of the job's memory cgroup, whose kill is `memory_exceeded`."""
    nproc: int = 64
    """Processes/threads the job's user may have at once (RLIMIT_NPROC): stops fork bombs."""
    fsize_mb: int = 64
    """Largest file the job may write, in MiB (RLIMIT_FSIZE)."""
    nofile: int = 256
    """Open file descriptors per process (RLIMIT_NOFILE)."""
    output_bytes: int = 64 * 1024
    """Bytes of stdout and of stderr kept; more output ends the job with status `output_limit`."""
    disk_mb: int = 512
    """Total bytes the job may leave in its workdir and /tmp, in MiB (checked while it runs)."""
    inodes: int = 100_000
    """Files, folders and links the job may have in its workdir and /tmp together (counted while it
    runs, like disk_mb: an empty file takes no bytes but an inode); more is `output_limit`."""

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
                raise UserError(f"Limits.{f.name} must be a positive number, got {v!r}: pass a value > 0.")


def check_relpath(path: str, what: str) -> str:
    """`path` normalised, if it names a place inside the workdir; else a UserError."""
    if not isinstance(path, str) or not path or "\0" in path:
        raise UserError(f"{what} {path!r} is not a usable file name: use a non-empty relative path.")
    if path.startswith("/"):
        raise UserError(f"{what} {path!r} is absolute: workdir files take paths relative to the workdir.")
    norm = posixpath.normpath(path)
    if norm == "." or norm == ".." or norm.startswith("../") or "/../" in f"/{path}/":
        raise UserError(f"{what} {path!r} leaves the workdir: use a path without '..'.")
    return norm


@dataclass
class Job:
    """One command to run in a fresh working directory."""

    cmd: list[str]
    """argv; `cmd[0]` is looked up on the job's PATH (project venv, /usr/local/bin, /usr/bin, /bin)."""
    files: dict[str, str | bytes] = field(default_factory=dict)
    """Files written into the workdir before the run (relative paths); the job may change them."""
    readonly_files: dict[str, str | bytes] = field(default_factory=dict)
    """Files the job can read but not change or replace (test harness, reference solution). The top
    folder of a nested one (`tests/` of `tests/a/b.py`) is read-only as a whole: it holds no job files."""
    env: dict[str, str] = field(default_factory=dict)
    """The only environment variables the job sees, besides PATH, HOME, LANG and TMPDIR (TIME is the
    sandbox's own)."""
    limits: Limits = field(default_factory=Limits)
    """Resource limits."""
    outputs: list[str] = field(default_factory=list)
    """Workdir files read back into `Result.outputs` (missing ones are simply absent)."""
    stdin: str | bytes | None = None
    """Bytes fed to the job's standard input (empty input when None)."""
    ro_binds: list[str] = field(default_factory=list)
    """Host paths (files or folders) made visible read-only at the same path, e.g. a cached build."""
    devices: list[str] = field(default_factory=list)
    """Host device nodes made usable at the same path, e.g. `gpu_devices()` for CUDA jobs."""
    mounts: dict[str, str] = field(default_factory=dict)
    """{absolute path inside the sandbox: workdir folder}: the folder (made if missing) also appears,
    read-write, at that path, e.g. {"/app": "app"} for tools that expect fixed paths; a folder of
    read-only files (see `readonly_files`) appears read-only. Isolated backends only."""

    def validate(self) -> None:
        """Raise UserError for anything that cannot run; called before any file is written."""
        if not isinstance(self.cmd, (list, tuple)) or not self.cmd or not all(isinstance(a, str) for a in self.cmd):
            raise UserError(f"Job.cmd must be a non-empty list of strings, got {self.cmd!r}.")
        if not isinstance(self.limits, Limits):
            raise UserError(f"Job.limits must be a Limits, got {type(self.limits).__name__}.")
        seen: dict[str, str] = {}
        for what, table in (("Job.files", self.files), ("Job.readonly_files", self.readonly_files)):
            for path, data in table.items():
                norm = check_relpath(path, f"{what} path")
                if not isinstance(data, (str, bytes)):
                    raise UserError(f"{what}[{path!r}] must be str or bytes, got {type(data).__name__}.")
                if norm in seen:
                    raise UserError(f"{what} path {path!r} is given twice (also in {seen[norm]}): keep one.")
                seen[norm] = what
        for norm, what in seen.items():
            parent = posixpath.dirname(norm)
            while parent:
                if parent in seen:
                    raise UserError(f"{what} path {norm!r} lies inside {parent!r}, which is a file: rename one.")
                parent = posixpath.dirname(parent)
        ro_folders = {n.split("/", 1)[0] for n, what in seen.items() if what == "Job.readonly_files" and "/" in n}
        writable = [(n, "Job.files") for n, what in seen.items() if what == "Job.files"]
        writable += [(check_relpath(p, "Job.outputs path"), "Job.outputs") for p in self.outputs]
        for norm, what in writable:
            if norm.split("/", 1)[0] in ro_folders:
                raise UserError(
                    f"{what} path {norm!r} lies in {norm.split('/', 1)[0]!r}, a folder of read-only files that "
                    "the job cannot write to: move it out of that folder."
                )
        for key, val in self.env.items():
            if not isinstance(key, str) or not key or "=" in key or "\0" in key or not isinstance(val, str):
                raise UserError(f"Job.env entry {key!r}={val!r} is not a valid variable: use str -> str.")
            if key == "TIME":
                raise UserError("Job.env['TIME'] is reserved (the sandbox's GNU time reads it): use another name.")
        for path in self.ro_binds:
            if not isinstance(path, str) or not os.path.isabs(path) or not os.path.exists(path):
                raise UserError(f"Job.ro_binds entry {path!r} must be an existing absolute host path.")
            norm = posixpath.normpath(path)
            for own in ("/tmp", "/job", "/proc", "/dev"):
                if own == norm or own.startswith(norm.rstrip("/") + "/"):
                    raise UserError(
                        f"Job.ro_binds entry {path!r} would cover the sandbox's own {own}: bind a folder inside it."
                    )
        for path in self.devices:
            try:
                mode = os.stat(path).st_mode
            except (OSError, TypeError, ValueError):
                mode = 0
            if not (isinstance(path, str) and path.startswith("/dev/") and (stat.S_ISCHR(mode) or stat.S_ISBLK(mode))):
                raise UserError(f"Job.devices entry {path!r} must be an existing device node under /dev.")
        for inner, folder in self.mounts.items():
            check_mount(inner)
            check_relpath(folder, f"Job.mounts[{inner!r}] folder")
            for other in self.mounts:
                if other != inner and (other + "/").startswith(inner.rstrip("/") + "/"):
                    raise UserError(f"Job.mounts {other!r} lies inside {inner!r}: mount folders side by side.")
        if self.stdin is not None and not isinstance(self.stdin, (str, bytes)):
            raise UserError(f"Job.stdin must be str, bytes or None, got {type(self.stdin).__name__}.")


RESERVED_PATHS = (
    "/bin",
    "/dev",
    "/etc",
    "/job",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/proc",
    "/sbin",
    "/tmp",
    "/usr",
)
"""Paths of the sandbox's own root that a mount may not cover or hide."""


def check_mount(inner: str) -> None:
    """UserError unless `inner` is a place a workdir folder may appear at inside the sandbox."""
    if not isinstance(inner, str) or not inner.startswith("/") or posixpath.normpath(inner) != inner or inner == "/":
        raise UserError(f"Job.mounts path {inner!r} must be a normalised absolute path other than '/', e.g. '/app'.")
    python = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix)}
    for used in (*RESERVED_PATHS, *python):
        if inner == used or inner.startswith(used + "/") or used.startswith(inner + "/"):
            raise UserError(f"Job.mounts path {inner!r} would cover {used}, which the sandbox needs: choose another.")


def gpu_devices() -> list[str]:
    """The NVIDIA device nodes of this host (pass them as `Job.devices` to a CUDA job)."""
    return sorted(p for p in glob.glob("/dev/nvidia*") if not os.path.isdir(p))


@dataclass
class Result:
    """What happened when a job ran."""

    status: str
    """One of `ok`, `nonzero_exit`, `timeout`, `memory_exceeded`, `output_limit`, `killed`, `sandbox_error`."""
    exit_code: int | None = None
    """Exit status of the job's command (None if it died by a signal or never started)."""
    signal: int | None = None
    """Signal that ended the job, if any (ours on a limit, or its own crash)."""
    stdout: str = ""
    """First `Limits.output_bytes` of standard output (decoded as UTF-8, invalid bytes replaced)."""
    stderr: str = ""
    """First `Limits.output_bytes` of standard error."""
    stdout_truncated: bool = False
    """More stdout was written than was kept."""
    stderr_truncated: bool = False
    """More stderr was written than was kept."""
    wall_s: float = 0.0
    """Wall-clock seconds from start to the end of the process tree, sandbox set-up included."""
    cpu_s: float = 0.0
    """User + system CPU seconds of the whole process tree, every process it ever had included (the
    job's cgroup; without one, the processes reaped before the job ended)."""
    peak_memory_mb: float = 0.0
    """Peak memory of the whole process tree together, in MiB: the peak of the job's memory cgroup (its
    processes, the files it held in RAM, as its workdir and /tmp are on a RAM disk, and the file pages it
    read in first), or the largest resident set of the job's command and of the processes it waited for
    if that is more (pages other processes loaded first are not charged to the job). Without a cgroup,
    the latter alone."""
    outputs: dict[str, bytes] = field(default_factory=dict)
    """The declared output files that the job left as regular files in its workdir."""
    message: str = ""
    """Why the status is what it is, in words (which limit, which set-up step failed, which system calls
    the sandbox refused)."""
    denied: list[str] = field(default_factory=list)
    """System calls the sandbox's seccomp filter refused the job (host evidence: the kernel asked the
    job's supervisor). A refused call is the job's own act and changes no status; where a job failed for
    want of one, this says which (docs/sandbox.md)."""

    @property
    def ok(self) -> bool:
        return self.status == "ok"
