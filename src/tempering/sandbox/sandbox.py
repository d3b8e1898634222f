"""`Sandbox`: run untrusted jobs isolated, many at once, and read back a structured `Result`.

A sandbox is a pool: at most `concurrency` jobs run at a time and at most `queue_size` more wait for
a slot; a caller beyond that waits in `run` itself (back-pressure), so a fast producer of jobs can
never pile up unbounded work. Each job gets a fresh directory that is removed afterwards.
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import math
import os
import secrets
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import weakref
from collections.abc import AsyncIterator, Callable, Iterable

from tempering.errors import UserError
from tempering.sandbox import backends, process, seccomp
from tempering.sandbox import image as ram_image
from tempering.sandbox.cgroup import JobCgroups
from tempering.sandbox.job import Job, Result, check_relpath
from tempering.sandbox.process import Exit, largest_file, run_tree

BACKENDS = ("bwrap", "unshare", "gvisor", "subprocess")
SUBPROCESS_DOES_NOT_CONTAIN = (
    "network: the job uses the host's network",
    "file system: the job reads and writes the host's files with the caller's rights",
    "other jobs: their workdirs are readable and writable",
    "processes: a setsid daemon outlives the job, and the job can signal the caller's processes",
    "status channel: the job can write to GNU time's report stream, forging its usage or status",
    "storage: deleted-but-open files and memfds are not counted against disk_mb or memory_mb",
    "usage: cpu_s and peak_memory_mb count only the job's command and the processes it waited for",
    "kernel keyring: shared with the host and with every other job",
    "user namespaces: the job can make nested ones, with full capabilities inside",
    "shared files: file locks and change notifications on the host's files reach every other process",
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
"""Words in a failed job's stderr that name a failed allocation: a hint in `Result.message`, never a
status (the job writes its stderr)."""
_CPU_MARGIN_S = 0.25
"""How far below cpu_s the measured CPU time of a job that died of SIGXCPU may be and still count as the limit."""
_NETNS_FD = 5
_SHARING = ("bwrap", "unshare")
"""The backends whose jobs can share a network namespace (`backends.<name>_argv(..., own_network=False)`)."""
"""The descriptor on which nsenter finds a shared network namespace."""
_OWN_TMPFS_SLACK = 16 << 20
"""Room on a job's own RAM disk beyond its files and disk_mb (folders, the status channel, the last
writes before the host's watcher sees disk_mb passed)."""
_SMALL_TREE = 1000
"""Names in a job's folder that the event loop may walk and remove itself (a few milliseconds at most)."""
_IMAGE_PARENT = "/dev/shm"
"""Where RAM images are made (one per host and contents, kept for the next sandbox)."""
_UID_BASE = 100_000
_SLOTS_PER_PROCESS = 256


class Network:
    """A network namespace that several jobs share (loopback only): the first job run with it makes it, the
    others join it, so a server one job leaves running answers another job over 127.0.0.1 while the two
    share nothing else (processes, files, /tmp). Needs `Sandbox.shares_network`; `close()` when done."""

    def __init__(self) -> None:
        self.fd: int | None = None
        """An open handle on the namespace (it lives while this is open), once the first job has started."""

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class Bridge:
    """A network namespace of a job's own (loopback only) from which `ports` of another job's `Network` are
    reached one way: a forwarder the host starts as root (`forward.py`) listens on 127.0.0.1:PORT for each
    port there before the job starts, then drops to an unprivileged uid and relays each connection to the
    same port in `to`. Nothing in `to` can connect into this namespace, and no other port is forwarded, so
    the job binds every other port itself. `open()` gives the `Network` to run the job with (it runs on
    the slot of the job that made `to`); `close()` when done. `open` raises `BridgeError` when the
    forwarder could not be set up (the host's failure: nothing of `to`'s is involved before it relays)."""

    def __init__(self, to: Network, ports: Iterable[int]) -> None:
        self.to = to
        self.ports = sorted(set(ports))
        self._proc: asyncio.subprocess.Process | None = None
        self._network = Network()

    async def open(self) -> Network:
        if self.to.fd is None:
            raise BridgeError("the network to forward to has no namespace (its job never started)")
        fd = os.dup(self.to.fd)
        try:
            self._proc = await asyncio.create_subprocess_exec(
                sys.executable, "-I", "-S", _FORWARD, str(fd), *map(str, self.ports),
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                pass_fds=(fd,),
            )  # fmt: skip
        except OSError as e:
            raise BridgeError(f"the forwarder could not start: {e}") from e
        finally:
            os.close(fd)
        assert self._proc.stdout is not None and self._proc.stdin is not None  # piped above
        try:
            line = await asyncio.wait_for(self._proc.stdout.readline(), _BRIDGE_START_S)
        except asyncio.TimeoutError:
            line = b""
        if line != b"bound\n":
            await self.close()
            err = (await self._proc.stderr.read()).decode(errors="replace").strip() if self._proc.stderr else ""
            raise BridgeError(f"the forwarder for ports {self.ports} did not start: {err[-300:] or 'no output'}")
        self._network.fd = os.open(f"/proc/{self._proc.pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        self._proc.stdin.write(b"go\n")
        await self._proc.stdin.drain()
        return self._network

    async def close(self) -> None:
        self._network.close()
        if self._proc is not None and self._proc.returncode is None:
            self._proc.kill()
            await self._proc.wait()


class BridgeError(RuntimeError):
    """The host could not set up a `Bridge`."""


_FORWARD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "forward.py")
_BRIDGE_START_S = 30.0
"""Seconds the host waits for the forwarder's listeners (a loaded machine starts Python slowly)."""


def _network_of(pid: int) -> int | None:
    """A handle on the network namespace of the first process below `pid` that is not in ours."""
    own = os.stat("/proc/self/ns/net").st_ino
    queue = [pid]
    while queue:
        p = queue.pop(0)
        try:
            fd = os.open(f"/proc/{p}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            fd = None
        if fd is not None:
            if os.fstat(fd).st_ino != own:
                return fd
            os.close(fd)
        queue += process._children(p)
    return None


def _spec(image: str | ram_image.Spec) -> str | ram_image.Spec:
    return ram_image.Spec() if image == "ram" else image


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
def _job_cgroups() -> JobCgroups | str:
    return JobCgroups.find()


class Sandbox:
    """Runs `Job`s under one isolation backend with a bounded pool."""

    def __init__(
        self,
        backend: str = "auto",
        concurrency: int | None = None,
        queue_size: int | None = None,
        root: str | None = None,
        image: str | ram_image.Spec = "ram",
    ):
        """
        backend: `auto` (bwrap, else unshare, else gvisor, else an error), `bwrap`, `unshare`, `gvisor`
            (gVisor's runsc: an application kernel between the job and the host's), or `subprocess` (opt-in,
            rlimits only, no isolation).
        concurrency: jobs running at once (default: number of CPU cores).
        queue_size: jobs admitted to wait for a slot (default: 4 x concurrency); more callers wait.
        root: host folder under which job directories are made (default: `default_root_parent()`).
        image: what an isolated job sees of the system and the Python installation: `ram` (copies on a RAM
            disk, `image.build`: reads take the same time whatever other jobs read), an `image.Spec` (such
            an image holding more packages or distributions: terminal tasks, kernel jobs) or `host` (the
            host's own files, whose cached state every job can read from the time a read takes and change
            by reading). With an image, a job's `ro_binds` are shown as copies on the RAM disk too.
        """
        if backend == "auto":
            reasons: dict[str, str] = {}
            for b in backends.ISOLATED:  # in order, stopping at the first that works (gvisor's probe takes a second)
                reasons[b] = backends.probe(b)
                if not reasons[b]:
                    break
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
        if not isinstance(image, ram_image.Spec) and image not in ("ram", "host"):
            raise UserError(f"unknown sandbox image {image!r}: use ram, host or an image.Spec.")
        self.image = _spec(image) if backend in backends.ISOLATED else "host"
        """What jobs see: an `image.Spec` (a RAM image) or 'host'."""
        self.image_dir = ram_image.build(_IMAGE_PARENT, self.image) if self.image != "host" else ""
        """Host folder of the RAM image jobs see ('' where they see the host's files)."""
        self.backend = backend
        self.concurrency = concurrency
        self.queue_size = queue_size
        self._root_parent = root
        self._root: str | None = None
        self._gates: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._as_root = os.geteuid() == 0 and backend in backends.ISOLATED
        cgroups = _job_cgroups() if backend in backends.ISOLATED else None
        self._cgroups = cgroups if isinstance(cgroups, JobCgroups) else None
        # gVisor's application kernel answers the job's calls itself: the host's allow-list has nothing to
        # guard there, and its supervisor would cost a Python start under ptrace (about 0.4 s)
        self._seccomp = seccomp.supervisor_argv() if backend in ("bwrap", "unshare") else None
        self.not_contained: list[str] = list(SUBPROCESS_DOES_NOT_CONTAIN) if backend == "subprocess" else []
        """What this sandbox does not contain on this machine (empty: everything the isolated backends promise)."""
        if isinstance(cgroups, str):
            self.not_contained.append(f"storage: deleted-but-open files and memfds are not capped ({cgroups})")
        if backend in backends.ISOLATED and (self._cgroups is None or self._cgroups.cpu is None):
            self.not_contained.append(
                "usage: no cgroup counts the job's CPU time here: cpu_s misses processes still running when "
                "the job's command ends" + ("" if self._cgroups else ", peak_memory_mb counts the command's own tree")
            )
        if backend in ("bwrap", "unshare") and self._seccomp is None:
            for topic in ("kernel keyring", "user namespaces", "shared files"):
                self.not_contained.append(f"{topic}: not isolated (no seccomp filter for this machine's ABI)")
        if backend == "gvisor" and (self._cgroups is None or self._cgroups.cpu is None):
            self.not_contained.append(
                "limits: cpu_s is not enforced (gVisor ignores RLIMIT_CPU, and no cgroup counts the job's CPU here)"
            )
        self._own_tmpfs = self._as_root and backend in backends.ISOLATED
        """Each job's folder is a RAM disk of its own (a root host mounts one per job)."""
        if backend in backends.ISOLATED and not self._own_tmpfs:
            self.not_contained.append(
                "kernel state: the jobs' /job and /tmp share one RAM disk, whose next inode number and free "
                "space every job can read and move (a root host gives each job its own)"
            )
        if backend in backends.ISOLATED and self.image == "host":
            self.not_contained.append(
                "read timing: jobs read the host's own system files and Python installation, whose cached state "
                "a job changes by reading and a later job reads from the time a read takes (image='ram' closes it)"
            )
        self._siblings: dict[str | ram_image.Spec, Sandbox] = {}
        self.running = 0
        """Jobs running now."""
        self.waiting = 0
        """Jobs admitted and waiting for a slot (at most `queue_size`); more callers wait in `run`."""

    @property
    def shares_network(self) -> bool:
        """Jobs of this sandbox can share a `Network` (bwrap, or unshare where iproute2 brings its loopback
        up, on a root host: the host joins the namespace)."""
        usable = self.backend == "bwrap" or (self.backend == "unshare" and backends.IP is not None)
        return usable and os.geteuid() == 0 and shutil.which("nsenter") is not None

    @staticmethod
    def available_backends() -> list[str]:
        """Backends that work on this machine, most isolating first."""
        return [b for b in BACKENDS if not backends.probe(b)]

    @property
    def isolated(self) -> bool:
        return self.backend in backends.ISOLATED

    def showing(self, image: str | ram_image.Spec) -> Sandbox:
        """This sandbox when its jobs see `image`, else a sibling that shows it: the same backend, size and
        root, with slots of its own (terminal tasks and kernel jobs need more tools, torch)."""
        image = _spec(image) if self.isolated else "host"
        if image == self.image:
            return self
        if image not in self._siblings:
            self._siblings[image] = Sandbox(
                self.backend, self.concurrency, self.queue_size, root=self._root_parent, image=image
            )
        return self._siblings[image]

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
        network: Network | None = None,
    ) -> Result:
        """Run one job; waits while the pool and its queue are full. Raises UserError for a bad job.

        For a job that serves requests as it runs (a warm worker): `feed` makes its stdin a pipe that
        gets these chunks as they come, and `on_stdout` gets its output as it comes (then
        `Result.stdout` stays empty and `output_bytes` caps only stderr). `network`: the job's network
        namespace is that one (made by the first job run with it, see `Network`); a job that joins it runs
        on the slot of the job that made it, without waiting for one of its own."""
        job.validate()
        if network is not None and not self.shares_network:
            raise UserError(
                f"a shared network needs the bwrap or unshare backend on a root host (this sandbox: {self.backend}, "
                f"uid {os.geteuid()}): run the jobs apart."
            )
        if feed is not None and job.stdin is not None:
            raise UserError("Job.stdin and a feed were both given: pass the stdin through one of them.")
        self._check_command(job)
        if job.devices and self.backend == "gvisor":
            raise UserError(
                "Job.devices: gVisor's application kernel does not pass host devices through: run jobs that "
                "need a GPU on bwrap."
            )
        if job.mounts and not self.isolated:
            raise UserError(
                f"Job.mounts needs an isolating backend (bwrap or unshare); the {self.backend} backend "
                "shares the host's file system, where it cannot place folders at fixed paths."
            )
        if network is not None and network.fd is not None:
            # it joins a running job's network: it runs on that job's slot (a session idle while its tests
            # run), so that sessions that fill the pool cannot wait for each other's tests forever
            return await self._run_now(job, feed, on_stdout, network)
        admit, running = self._gate()
        async with admit:
            self.waiting += 1
            try:
                await running.acquire()
            finally:
                self.waiting -= 1
            self.running += 1
            try:
                return await self._run_now(job, feed, on_stdout, network)
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

    async def _run_now(self, job: Job, feed=None, on_stdout=None, network: Network | None = None) -> Result:
        slot = _SLOTS.take() if self._as_root else None
        jobroot = tempfile.mkdtemp(prefix="job-", dir=self._root_dir())
        own = self._own_tmpfs and _mount_tmpfs(jobroot, job)
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
            on_started = None
            if self.backend in _SHARING and network is not None and network.fd is not None:
                # join the namespace before the backend runs (as root: the job itself never can, seccomp refuses setns)
                pass_fds[_NETNS_FD] = os.dup(network.fd)
                nsenter = [shutil.which("nsenter") or "nsenter", f"--net=/proc/self/fd/{_NETNS_FD}", "--"]
                argv = limits + nsenter + getattr(backends, f"{self.backend}_argv")(lay, job.cmd, own_network=False)
            elif self.backend in _SHARING:
                argv = limits + getattr(backends, f"{self.backend}_argv")(lay, job.cmd)
                if network is not None:
                    shared = network

                    def on_started(pid: int) -> None:
                        shared.fd = _network_of(pid)
            elif self.backend == "gvisor":
                argv = backends.gvisor_argv(lay, job.cmd, env, job.limits)
                env = {"PATH": "/usr/bin:/bin"}  # runsc's own: the job's is in the bundle's config, out of its reach
            else:
                env_cmd = [shutil.which("env") or "/usr/bin/env", "-u", "TIME", "-C", lay.workdir, "--"]
                argv = process.usage_argv() + limits + env_cmd + list(job.cmd)
            if self._cgroups is not None:
                cgroup = self._cgroups.make((job.limits.memory_mb + job.limits.disk_mb) * 1024 * 1024)
                # the tree's first process joins the cgroups before it runs anything else
                join = " && ".join(f"echo 0 > {shlex.quote(f)}" for f in self._cgroups.join_files(cgroup))
                argv = ["/bin/sh", "-c", f'{join} && exec "$@"', "sandbox", *argv]
            status_log = os.path.join(lay.status_dir, "log") if lay.status_dir else None
            cpu_used = None
            if self.backend == "gvisor" and self._cgroups is not None and cgroup is not None and cgroup.cpu is not None:
                cgroups, job_cgroup = self._cgroups, cgroup
                cpu_used = lambda: cgroups.usage(job_cgroup)[0]  # gVisor ignores RLIMIT_CPU
            ex = await run_tree(
                argv,
                env,
                job.limits,
                stdin_path,
                jobroot,
                nonce,
                pass_fds,
                feed,
                on_stdout,
                status_log,
                cpu_used,
                on_started,
            )
            oom = cpu_s = peak_mb = None
            if cgroup is not None:
                assert self._cgroups is not None  # a job's cgroup comes from it
                oom = self._cgroups.oom_killed(cgroup)
                cpu_s, peak_mb = self._cgroups.usage(cgroup)
            result = self._classify(job, ex, bool(oom), cpu_s, peak_mb)
            # a walk of what the job left runs here when it is small (a thread costs a wake-up on a
            # loaded machine), else in a thread: a job can leave a hundred thousand files
            small = process.few_names(jobroot, _SMALL_TREE)
            if own and result.status in ("nonzero_exit", "killed") and (full := _full(jobroot, job)):
                result.status, result.message = (
                    "output_limit",
                    f"workdir and /tmp passed {full}; the job's writes failed",
                )
            if result.status in ("nonzero_exit", "killed"):  # a file that reached fsize_mb is the host's evidence
                look = (lay.workdir, lay.tmpdir, lay.shmdir), job.limits.fsize_mb * 1024 * 1024
                if largest_file(*look) if small else await asyncio.to_thread(largest_file, *look):
                    result.status, result.message = "output_limit", f"a file reached fsize_mb={job.limits.fsize_mb}"
            result.outputs = _read_outputs(lay.workdir, job.outputs, job.limits.fsize_mb * 1024 * 1024)
            return result
        finally:
            for fd in pass_fds.values():
                os.close(fd)
            try:
                if cgroup is not None:
                    await self._remove_cgroup(cgroup)
                # a large tree off the event loop: removing a hundred thousand files takes seconds that the
                # other jobs' timers and pipes must not wait for (nor for freeing them with a RAM disk's unmount)
                remove = _unmount if own else _remove_tree
                if process.few_names(jobroot, _SMALL_TREE):
                    remove(jobroot)
                else:
                    await asyncio.shield(asyncio.to_thread(remove, jobroot))
            finally:
                if slot is not None:
                    _SLOTS.give(slot)

    async def _remove_cgroup(self, cgroup) -> None:
        assert self._cgroups is not None  # a job's cgroup comes from it
        for _ in range(100):  # the namespace's last processes may take a moment to be reaped
            if self._cgroups.remove(cgroup):
                return
            await asyncio.sleep(0.01)
        raise RuntimeError(f"the job's cgroup {cgroup.memory} stays busy after its processes were killed")

    def _prepare(self, job: Job, jobroot: str, uid: int | None) -> tuple[backends.Layout, str | None]:
        """Write the job's files; make the workdir the job user's own."""
        time_copy = os.path.join(self._root_dir(), "time")
        lay = backends.Layout(
            jobroot=jobroot,
            workdir=os.path.join(jobroot, "work"),
            tmpdir=os.path.join(jobroot, "tmp"),
            shmdir=os.path.join(jobroot, "shm") if self.isolated else "",
            ro_binds=list(job.ro_binds),
            devices=list(job.devices),
            mounts=sorted(job.mounts.items()),
            uid=uid,
            time_binary=time_copy if self.isolated and os.path.exists(time_copy) else None,
            supervisor=self._seccomp,
            image=self.image_dir,
        )
        if self.image_dir:  # a host path the job binds is shown as a copy on a RAM disk, as the image is
            for i, path in enumerate(job.ro_binds):
                if ram_image.ram_disk(path):
                    continue
                if os.path.isdir(path):  # once per contents, shared (a CUDA toolkit)
                    lay.ro_copies[path] = ram_image.copy(_IMAGE_PARENT, path)
                else:  # a file (a candidate's build): the job's own copy, removed with it
                    lay.ro_copies[path] = os.path.join(jobroot, f"bind-{i}")
                    shutil.copy2(path, lay.ro_copies[path])
        if self.backend == "gvisor":
            lay.status_dir = os.path.join(jobroot, "status")
            os.mkdir(lay.status_dir, 0o700)
        os.mkdir(lay.workdir, 0o755)
        for d in (lay.tmpdir, lay.shmdir) if lay.shmdir else (lay.tmpdir,):
            os.mkdir(d, 0o1777 if uid is not None else 0o700)
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
            for d in (lay.workdir, lay.tmpdir, lay.shmdir):
                for root, dirs, files in os.walk(d) if d else ():
                    for name in [root] + [os.path.join(root, n) for n in dirs + files]:
                        os.lchown(name, uid, uid)
            for d in (lay.tmpdir, lay.shmdir) if lay.shmdir else (lay.tmpdir,):
                os.chmod(d, 0o700)
        stdin_path = None
        if job.stdin is not None:
            stdin_path = _write(jobroot, "stdin", job.stdin, 0o600)
        return lay, stdin_path

    def _classify(
        self, job: Job, ex: Exit, oom: bool = False, cpu_s: float | None = None, peak_mb: float | None = None
    ) -> Result:
        """The job's `Result`. A limit status rests on the host's own evidence only: its timer fired
        while the tree ran, it counted the output bytes, the disk bytes or the files, the kernel's
        OOM kill in the job's cgroup, the CPU time it measured. An exit code (152 is not SIGXCPU) or
        words on stderr ("MemoryError") are the job's to choose, so they never make one."""
        lim = job.limits
        rep = ex.report
        if rep.measured:  # GNU time, just above the job's command, saw how it ended
            exit_code, sig = rep.exit_code, rep.term_signal
        else:  # the top process's own status: for the isolated backends an exit code of 128 + N stays one
            exit_code, sig = ex.exit_code, ex.term_signal
        if cpu_s is None:
            cpu_s = ex.tree_cpu_s if self.isolated else (rep.cpu_s if rep.measured else ex.tree_cpu_s)
        # the tree's memory cgroup counts what the job charged (not pages other processes loaded first),
        # GNU time the command's own resident set; 0 without either: wait4's would be the caller's
        peak_mb = max(peak_mb or 0.0, rep.peak_mb)
        res = Result(
            status="ok",
            exit_code=exit_code,
            signal=sig,
            stdout=ex.stdout.decode("utf-8", "replace"),
            stderr=ex.stderr.decode("utf-8", "replace"),
            stdout_truncated=ex.stdout_truncated,
            stderr_truncated=ex.stderr_truncated,
            wall_s=ex.wall_s,
            cpu_s=cpu_s,
            peak_memory_mb=peak_mb,
            denied=list(rep.denied),
        )
        cpu_cap = max(1, math.ceil(lim.cpu_s))  # what prlimit set
        # RLIMIT_CPU fired: the processes used about cpu_cap seconds, as the host's cgroup counted them or as
        # GNU time saw the command end (the two lag the kernel's own count by up to a tick or so under load;
        # a job that sends itself SIGXCPU with its CPU unused stays far below)
        cpu_fired = max(cpu_s, rep.cpu_s if rep.measured else 0.0) >= cpu_cap - _CPU_MARGIN_S
        if ex.kill_reason == "timeout":
            res.status, res.message = "timeout", f"wall-clock limit of {lim.wall_s:g} s reached; process tree killed"
        elif ex.kill_reason == "cpu":
            res.status = "timeout"
            res.message = f"CPU limit of {lim.cpu_s:g} s reached (the sandbox's CPU time, its own kernel's included)"
        elif ex.kill_reason == "disk":
            res.status, res.message = "output_limit", f"workdir and /tmp passed disk_mb={lim.disk_mb}; job killed"
        elif ex.kill_reason == "inodes":
            res.status, res.message = "output_limit", f"workdir and /tmp passed inodes={lim.inodes} files; job killed"
        elif ex.stdout_truncated or ex.stderr_truncated:
            res.status, res.message = "output_limit", f"output passed output_bytes={lim.output_bytes}; job killed"
        elif oom:
            res.status = "memory_exceeded"
            res.message = (
                f"the job's memory and files (deleted ones included) passed memory_mb + disk_mb = "
                f"{lim.memory_mb + lim.disk_mb} MiB; the kernel killed it"
            )
        elif self.isolated and not rep.started:
            res.status = "sandbox_error"
            res.message = f"{self.backend} could not set up the sandbox: {res.stderr.strip()[-500:]}"
        elif sig in (signal.SIGXCPU, signal.SIGKILL) and cpu_fired:
            res.status, res.message = "timeout", f"CPU limit of {lim.cpu_s:g} s reached"
        elif sig:
            res.status, res.message = "killed", f"ended by signal {signal.Signals(sig).name}"
            if sig == signal.SIGXCPU:
                res.message += f" (its processes used {cpu_s:.2f} CPU s, under cpu_s={lim.cpu_s:g})"
        elif exit_code:
            res.status, res.message = "nonzero_exit", f"exit code {exit_code}"
        if rep.denied:
            res.message += ("; " if res.message else "") + (
                f"the sandbox refused system calls it made: {', '.join(rep.denied)} (docs/sandbox.md, seccomp)"
            )
        if res.status in ("killed", "nonzero_exit") and any(w in res.stderr for w in _MEMORY_SIGNS):
            res.message += (
                f" (its stderr names a failed allocation: memory_mb={lim.memory_mb} caps each process's address space)"
            )
        return res


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


_CHMOD = shutil.which("chmod", path="/usr/bin:/bin") or "chmod"
_RM = shutil.which("rm", path="/usr/bin:/bin") or "rm"


_LIBC = ctypes.CDLL(None, use_errno=True)


def _mount_tmpfs(path: str, job: Job) -> bool:
    """Mount a RAM disk of the job's own at `path` (its own superblock: inode numbers, free blocks and
    inodes no other job sees or moves), sized to its files, disk_mb and inodes. False where the host
    cannot (then the folder stays on the shared one, and `not_contained` says so)."""
    files = [*job.files.values(), *job.readonly_files.values(), job.stdin or b""]
    size = sum(len(d) for d in files) * 2 + job.limits.disk_mb * (1 << 20) + _OWN_TMPFS_SLACK
    inodes = job.limits.inodes + 2 * len(files) + 32
    opts = f"size={size},nr_inodes={inodes},mode=0700".encode()
    ms_nosuid, ms_nodev = 2, 4
    return _LIBC.mount(b"tempering-job", path.encode(), b"tmpfs", ms_nosuid | ms_nodev, opts) == 0


def _full(path: str, job: Job) -> str:
    """Which limit a failed job had reached on its own RAM disk ('' if none): its writes failed past it
    (the kernel's ENOSPC, or gVisor's a few files earlier) before the host's count saw it."""
    st = os.statvfs(path)
    if st.f_files - st.f_ffree >= job.limits.inodes:
        return f"inodes={job.limits.inodes} files"
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    return f"disk_mb={job.limits.disk_mb}" if used >= job.limits.disk_mb * (1 << 20) else ""


def _unmount(path: str) -> None:
    """Drop a job's RAM disk and the folder it was mounted on."""
    mnt_detach = 2
    if _LIBC.umount2(path.encode(), mnt_detach) != 0:
        raise RuntimeError(f"could not unmount the job folder {path}: {os.strerror(ctypes.get_errno())}")
    os.rmdir(path)


def _remove_tree(path: str) -> None:
    """Remove a job directory, never following a link the job made in it.

    `shutil.rmtree` walks by descriptors and follows no link. Where it cannot finish (a non-root host,
    whose job left folders without permissions; a tree nested too deep for its recursion), coreutils
    takes over: `chmod -R` opens the folders up and `rm -rf` removes them, at any depth, both ignoring
    the links they meet (a link the job planted is never followed to a host file)."""
    try:
        shutil.rmtree(path)
        return
    except FileNotFoundError:
        return
    except (OSError, RecursionError):
        pass
    subprocess.run([_CHMOD, "-R", "u+rwx", "--", path], capture_output=True, stdin=subprocess.DEVNULL)
    rm = subprocess.run([_RM, "-rf", "--one-file-system", "--", path], capture_output=True, stdin=subprocess.DEVNULL)
    if os.path.lexists(path):
        raise RuntimeError(f"could not remove the job folder {path}: {rm.stderr.decode(errors='replace')[-300:]}")
