"""`Sandbox`: run untrusted jobs isolated, many at once, and read back a structured `Result`.

A sandbox is a pool: at most `concurrency` jobs run at a time and at most `queue_size` more wait for
a slot; a caller beyond that waits in `run` itself (back-pressure), so a fast producer of jobs can
never pile up unbounded work. Each job gets a fresh directory that is removed afterwards.
"""

from __future__ import annotations

import asyncio
import functools
import os
import secrets
import shutil
import signal
import stat
import tempfile
import threading
import weakref
from collections.abc import AsyncIterator, Callable

from tempering.errors import UserError
from tempering.sandbox import backends, process, seccomp
from tempering.sandbox.cgroup import MemoryCgroups
from tempering.sandbox.job import Job, Result, check_relpath
from tempering.sandbox.process import Exit, run_tree

BACKENDS = ("bwrap", "unshare", "subprocess")
SUBPROCESS_DOES_NOT_CONTAIN = (
    "network: the job uses the host's network",
    "file system: the job reads and writes the host's files with the caller's rights",
    "other jobs: their workdirs are readable and writable",
    "processes: a setsid daemon outlives the job, and the job can signal the caller's processes",
    "status channel: the job can write to GNU time's report stream, forging its usage or status",
    "storage: deleted-but-open files and memfds are not counted against disk_mb or memory_mb",
    "kernel keyring: shared with the host and with every other job",
    "read-only files: the job can rename the folder of a nested one and plant its own file",
    "limits: a job running as root can raise its own rlimits, and RLIMIT_NPROC does not apply to root",
)
"""What the plain `subprocess` backend leaves open (the isolated backends contain all of it)."""
_MEMORY_SIGNS = (
    "MemoryError",
    "std::bad_alloc",
    "Cannot allocate memory",
    "out of memory",
    "failed to map segment",
    "Could not allocate",
)
_UID_BASE = 100_000
_SLOTS_PER_PROCESS = 256


def default_root_parent() -> str:
    """Where job folders go by default: /dev/shm when it is a roomy RAM disk (making and removing a
    folder costs microseconds there, against milliseconds on a journaling disk), else the temp folder."""
    try:
        st = os.statvfs("/dev/shm")
        if st.f_bavail * st.f_frsize >= 1 << 30 and os.access("/dev/shm", os.W_OK | os.X_OK):
            return "/dev/shm"
    except OSError:
        pass
    return tempfile.gettempdir()


class _UidSlots:
    """Per-process pool of unprivileged uids, one per running job, so that RLIMIT_NPROC (counted per
    uid) is per job. The pid is part of the uid so two processes on one host never share one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._used: set[int] = set()

    def take(self) -> int:
        with self._lock:
            slot = next(i for i in range(len(self._used) + 1) if i not in self._used)
            self._used.add(slot)
        return slot

    def give(self, slot: int) -> None:
        with self._lock:
            self._used.discard(slot)

    @staticmethod
    def uid(slot: int) -> int:
        return _UID_BASE + os.getpid() * _SLOTS_PER_PROCESS + slot % _SLOTS_PER_PROCESS


_SLOTS = _UidSlots()


@functools.cache
def _memory_cgroups() -> MemoryCgroups | str:
    return MemoryCgroups.find()


class Sandbox:
    """Runs `Job`s under one isolation backend with a bounded pool."""

    def __init__(
        self,
        backend: str = "auto",
        concurrency: int | None = None,
        queue_size: int | None = None,
        root: str | None = None,
    ):
        """
        backend: `auto` (bwrap, else unshare, else an error), `bwrap`, `unshare`, or `subprocess`
            (opt-in, rlimits only, no isolation).
        concurrency: jobs running at once (default: number of CPU cores).
        queue_size: jobs admitted to wait for a slot (default: 4 x concurrency); more callers wait.
        root: host folder under which job directories are made (default: `default_root_parent()`).
        """
        if backend == "auto":
            reasons = {b: backends.probe(b) for b in backends.ISOLATED}
            usable = [b for b, why in reasons.items() if not why]
            if not usable:
                why = "; ".join(f"{b}: {r}" for b, r in reasons.items())
                raise UserError(
                    f"no isolating sandbox backend works here ({why}). Install bubblewrap "
                    "(apt-get install bubblewrap), or pass backend='subprocess' to run jobs "
                    "with limits but without isolation."
                )
            backend = usable[0]
        elif backend not in BACKENDS:
            raise UserError(f"unknown sandbox backend {backend!r}: use one of auto, {', '.join(BACKENDS)}.")
        elif why := backends.probe(backend):
            raise UserError(f"sandbox backend {backend!r} does not work here: {why}.")
        concurrency = (os.cpu_count() or 1) if concurrency is None else concurrency
        if not isinstance(concurrency, int) or concurrency < 1:
            raise UserError(f"Sandbox concurrency must be a positive integer, got {concurrency!r}.")
        queue_size = 4 * concurrency if queue_size is None else queue_size
        if not isinstance(queue_size, int) or queue_size < 0:
            raise UserError(f"Sandbox queue_size must be a non-negative integer, got {queue_size!r}.")
        self.backend = backend
        self.concurrency = concurrency
        self.queue_size = queue_size
        self._root_parent = root
        self._root: str | None = None
        self._gates: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._as_root = os.geteuid() == 0 and backend in backends.ISOLATED
        cgroups = _memory_cgroups() if backend in backends.ISOLATED else None
        self._cgroups = cgroups if isinstance(cgroups, MemoryCgroups) else None
        self._seccomp = seccomp.keyring_filter() if backend in backends.ISOLATED else None
        self.not_contained: list[str] = list(SUBPROCESS_DOES_NOT_CONTAIN) if backend == "subprocess" else []
        """What this sandbox does not contain on this machine (empty: everything the isolated backends promise)."""
        if isinstance(cgroups, str):
            self.not_contained.append(f"storage: deleted-but-open files and memfds are not capped ({cgroups})")
        if backend in backends.ISOLATED and self._seccomp is None:
            self.not_contained.append("kernel keyring: not isolated (no seccomp filter for this machine's ABI)")
        self.running = 0
        """Jobs running now."""
        self.waiting = 0
        """Jobs admitted and waiting for a slot (at most `queue_size`); more callers wait in `run`."""

    @staticmethod
    def available_backends() -> list[str]:
        """Backends that work on this machine, most isolating first."""
        return [b for b in BACKENDS if not backends.probe(b)]

    @property
    def isolated(self) -> bool:
        return self.backend in backends.ISOLATED

    def _gate(self) -> tuple[asyncio.Semaphore, asyncio.Semaphore]:
        """(admission, running) semaphores of the current event loop."""
        loop = asyncio.get_running_loop()
        if loop not in self._gates:
            self._gates[loop] = (
                asyncio.Semaphore(self.concurrency + self.queue_size),
                asyncio.Semaphore(self.concurrency),
            )
        return self._gates[loop]

    async def run(
        self,
        job: Job,
        feed: AsyncIterator[bytes] | None = None,
        on_stdout: Callable[[bytes], None] | None = None,
    ) -> Result:
        """Run one job; waits while the pool and its queue are full. Raises UserError for a bad job.

        For a job that serves requests as it runs (a warm worker): `feed` makes its stdin a pipe that
        gets these chunks as they come, and `on_stdout` gets its output as it comes (then
        `Result.stdout` stays empty and `output_bytes` caps only stderr)."""
        job.validate()
        if feed is not None and job.stdin is not None:
            raise UserError("Job.stdin and a feed were both given: pass the stdin through one of them.")
        self._check_command(job)
        if job.mounts and not self.isolated:
            raise UserError(
                f"Job.mounts needs an isolating backend (bwrap or unshare); the {self.backend} backend "
                "shares the host's file system, where it cannot place folders at fixed paths."
            )
        admit, running = self._gate()
        async with admit:
            self.waiting += 1
            try:
                await running.acquire()
            finally:
                self.waiting -= 1
            self.running += 1
            try:
                return await self._run_now(job, feed, on_stdout)
            finally:
                self.running -= 1
                running.release()

    def run_sync(self, job: Job) -> Result:
        """`run` for callers without an event loop."""
        return asyncio.run(self.run(job))

    # -- one job ------------------------------------------------------------------------------

    def _check_command(self, job: Job) -> None:
        exe = job.cmd[0]
        if "/" not in exe:
            path = job.env.get("PATH", backends.job_path())
            if shutil.which(exe, path=path) is None:
                raise UserError(
                    f"Job.cmd[0] {exe!r} is not on the job's PATH ({path}): install it, or give its absolute path."
                )
        elif os.path.isabs(exe) and not os.path.exists(exe):
            raise UserError(f"Job.cmd[0] {exe!r} does not exist: fix the path or install the program.")

    def _root_dir(self) -> str:
        if self._root is None:
            self._root = tempfile.mkdtemp(prefix="tempering-sandbox-", dir=self._root_parent or default_root_parent())
            os.chmod(self._root, 0o711)  # unprivileged job users may pass through, never list
            weakref.finalize(self, shutil.rmtree, self._root, ignore_errors=True)
            if self.isolated and process.TIME:
                # execute-only: a process running it is not dumpable, so a job cannot open its /proc files
                shutil.copyfile(process.TIME, os.path.join(self._root, "time"))
                os.chmod(os.path.join(self._root, "time"), 0o111)
        return self._root

    async def _run_now(self, job: Job, feed=None, on_stdout=None) -> Result:
        slot = _SLOTS.take() if self._as_root else None
        jobroot = tempfile.mkdtemp(prefix="job-", dir=self._root_dir())
        cgroup = None
        pass_fds = {}
        try:
            uid = _UidSlots.uid(slot) if slot is not None else None
            lay, stdin_path = self._prepare(job, jobroot, uid)
            nonce = secrets.token_hex(16)
            env = {
                "PATH": backends.job_path(),
                "LANG": "C.UTF-8",
                "HOME": backends.INNER_WORKDIR if self.isolated else lay.workdir,
                "TMPDIR": "/tmp" if self.isolated else lay.tmpdir,
                **job.env,
                "TIME": process.usage_format(nonce),  # read by GNU time and the last set-up step only
            }
            limits = backends.prlimit_argv(job.limits)
            if self.backend == "bwrap":
                argv = limits + backends.bwrap_argv(lay, job.cmd)
                if lay.seccomp_filter:
                    pass_fds[backends.SECCOMP_FD] = _pipe_with(lay.seccomp_filter)
            elif self.backend == "unshare":
                argv = limits + backends.unshare_argv(lay, job.cmd)
            else:
                env_cmd = [shutil.which("env") or "/usr/bin/env", "-u", "TIME", "-C", lay.workdir, "--"]
                argv = process.usage_argv() + limits + env_cmd + list(job.cmd)
            if self._cgroups is not None:
                cgroup = self._cgroups.make((job.limits.memory_mb + job.limits.disk_mb) * 1024 * 1024)
                # the tree's first process joins the cgroup before it runs anything else
                argv = ["/bin/sh", "-c", 'echo 0 > "$0" && exec "$@"', self._cgroups.join_file(cgroup), *argv]
            ex = await run_tree(argv, env, job.limits, stdin_path, jobroot, nonce, pass_fds, feed, on_stdout)
            oom = cgroup is not None and self._cgroups.oom_killed(cgroup)
            result = self._classify(job, ex, oom)
            result.outputs = _read_outputs(lay.workdir, job.outputs, job.limits.fsize_mb * 1024 * 1024)
            return result
        finally:
            for fd in pass_fds.values():
                os.close(fd)
            if cgroup is not None:
                await self._remove_cgroup(cgroup)
            _remove_tree(jobroot)
            if slot is not None:
                _SLOTS.give(slot)

    async def _remove_cgroup(self, path: str) -> None:
        for _ in range(100):  # the namespace's last processes may take a moment to be reaped
            if self._cgroups.remove(path):
                return
            await asyncio.sleep(0.01)
        raise RuntimeError(f"the job's cgroup {path} stays busy after its processes were killed")

    def _prepare(self, job: Job, jobroot: str, uid: int | None) -> tuple[backends.Layout, str | None]:
        """Write the job's files; make the workdir the job user's own."""
        time_copy = os.path.join(self._root_dir(), "time")
        lay = backends.Layout(
            jobroot=jobroot,
            workdir=os.path.join(jobroot, "work"),
            tmpdir=os.path.join(jobroot, "tmp"),
            ro_binds=list(job.ro_binds),
            devices=list(job.devices),
            mounts=sorted(job.mounts.items()),
            uid=uid,
            time_binary=time_copy if self.isolated and os.path.exists(time_copy) else None,
            seccomp_filter=self._seccomp,
        )
        os.mkdir(lay.workdir, 0o755)
        os.mkdir(lay.tmpdir, 0o1777 if uid is not None else 0o700)
        for path, data in job.files.items():
            _write(lay.workdir, check_relpath(path, "Job.files path"), data, 0o644)
        folders = set()
        for path, data in job.readonly_files.items():
            rel = check_relpath(path, "Job.readonly_files path")
            if not self.isolated:
                _write(lay.workdir, rel, data, 0o444)
                continue
            # the real file lives outside the workdir; a read-only bind shows it inside, or the whole
            # top folder holding it (so that no folder above it can be renamed and replaced either)
            src = _write(os.path.join(jobroot, "ro"), rel, data, 0o444)
            if "/" in rel:
                folders.add(rel.split("/", 1)[0])
            else:
                _write(lay.workdir, rel, b"", 0o444)  # mount point
                lay.ro_files.append((src, rel))
        for top in sorted(folders):
            os.makedirs(os.path.join(lay.workdir, top), 0o755, exist_ok=True)  # mount point
            lay.ro_files.append((os.path.join(jobroot, "ro", top), top))
        for folder in job.mounts.values():  # made if missing; inside a read-only folder, read-only too
            folder = check_relpath(folder, "Job.mounts folder")
            base = os.path.join(jobroot, "ro") if folder.split("/", 1)[0] in folders else lay.workdir
            os.makedirs(os.path.join(base, folder), 0o755, exist_ok=True)
        if uid is not None:
            for d in (lay.workdir, lay.tmpdir):
                for root, dirs, files in os.walk(d):
                    for name in [root] + [os.path.join(root, n) for n in dirs + files]:
                        os.lchown(name, uid, uid)
            os.chmod(lay.tmpdir, 0o700)
        stdin_path = None
        if job.stdin is not None:
            stdin_path = _write(jobroot, "stdin", job.stdin, 0o600)
        return lay, stdin_path

    def _classify(self, job: Job, ex: Exit, oom: bool = False) -> Result:
        lim = job.limits
        res = Result(
            status="ok",
            exit_code=ex.exit_code,
            signal=ex.term_signal,
            stdout=ex.stdout.decode("utf-8", "replace"),
            stderr=ex.stderr.decode("utf-8", "replace"),
            stdout_truncated=ex.stdout_truncated,
            stderr_truncated=ex.stderr_truncated,
            wall_s=ex.wall_s,
            cpu_s=ex.cpu_s,
            peak_memory_mb=ex.peak_memory_mb,
        )
        if res.exit_code is not None and res.exit_code > 128 and (self.isolated or process.TIME):
            # GNU time and the namespaces' first process report a signal death as 128 + signal, like a shell
            res.signal, res.exit_code = res.exit_code - 128, None
        if ex.kill_reason == "timeout":
            res.status, res.message = "timeout", f"wall-clock limit of {lim.wall_s:g} s reached; process tree killed"
        elif ex.kill_reason == "disk":
            res.status, res.message = "output_limit", f"workdir and /tmp passed disk_mb={lim.disk_mb}; job killed"
        elif ex.stdout_truncated or ex.stderr_truncated:
            res.status, res.message = "output_limit", f"output passed output_bytes={lim.output_bytes}; job killed"
        elif oom:
            res.status = "memory_exceeded"
            res.message = (
                f"the job's memory and files (deleted ones included) passed memory_mb + disk_mb = "
                f"{lim.memory_mb + lim.disk_mb} MiB; the kernel killed it"
            )
        elif self.isolated and not ex.started:
            res.status = "sandbox_error"
            res.message = f"{self.backend} could not set up the sandbox: {res.stderr.strip()[-500:]}"
        elif res.signal == signal.SIGXCPU or (res.signal == signal.SIGKILL and res.cpu_s >= lim.cpu_s):
            res.status, res.message = "timeout", f"CPU limit of {lim.cpu_s:g} s reached"
        elif res.signal == signal.SIGXFSZ or (res.exit_code and "File too large" in res.stderr):
            # C programs die of SIGXFSZ; Python ignores it and fails the write with EFBIG instead
            res.status, res.message = "output_limit", f"a file passed fsize_mb={lim.fsize_mb}"
        elif (res.signal or res.exit_code) and any(s in res.stderr for s in _MEMORY_SIGNS):
            res.status, res.message = "memory_exceeded", f"an allocation failed under memory_mb={lim.memory_mb}"
        elif res.signal:
            res.status, res.message = "killed", f"ended by signal {signal.Signals(res.signal).name}"
        elif res.exit_code:
            res.status, res.message = "nonzero_exit", f"exit code {res.exit_code}"
        return res


def _pipe_with(data: bytes) -> int:
    """The read end of a pipe that holds `data` (small: it must fit the pipe's buffer) and then ends."""
    r, w = os.pipe()
    try:
        os.write(w, data)
    finally:
        os.close(w)
    return r


def _write(base: str, rel: str, data: str | bytes, mode: int) -> str:
    """Create base/rel (and its folders) without following links; the path must be new."""
    path = os.path.join(base, rel)
    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)
    return path


def _read_outputs(workdir: str, names: list[str], cap: int) -> dict[str, bytes]:
    """Declared outputs that the job left as regular files; symlinks, fifos and devices are ignored.

    The path is walked one component at a time with O_NOFOLLOW, so a job cannot point the host at a
    file outside its workdir."""
    outputs = {}
    for name in names:
        parts = check_relpath(name, "Job.outputs path").split("/")
        fds = [os.open(workdir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)]
        try:
            for part in parts[:-1]:
                fds.append(os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fds[-1]))
            fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=fds[-1])
            fds.append(fd)
            if stat.S_ISREG(os.fstat(fd).st_mode):
                with os.fdopen(os.dup(fd), "rb") as f:
                    outputs[name] = f.read(cap)
        except OSError:
            pass
        finally:
            for fd in fds:
                os.close(fd)
    return outputs


def _remove_tree(path: str) -> None:
    """Remove a job directory even if the job made parts of it unreadable."""

    def fix(func, p, _exc):
        try:
            os.chmod(os.path.dirname(p), 0o700)
            os.chmod(p, 0o700)
        except OSError:
            pass
        try:
            func(p)
        except OSError:
            pass

    shutil.rmtree(path, onerror=fix)
