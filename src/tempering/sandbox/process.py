"""Start one process tree and watch it on the event loop: output caps, wall clock, disk, exit.

`posix_spawn` starts the tree in its own session (so that one signal reaches the whole group) and a
pidfd tells the loop when it exits. GNU `time`, which the backends place just above the job's command,
reports on the status fd how that command ended (its exit code, or the signal that ended it: an exit
code of 128 + N is not a signal) and its own usage. The host does not take the job's word for any
limit: a limit status needs the host's own evidence (its timer fired while the tree ran, it counted
the bytes or the files, the kernel's counters in the job's cgroup), see `Sandbox._classify`. Usage is
measured by the job's cgroups where there are some (`cgroup.py`), else by `wait4` on the tree (CPU)
and GNU time (peak memory of the job's command): our own `wait4` cannot give the peak, because
`posix_spawn` borrows this process's memory until the exec (the kernel would count our resident set as
the child's peak). Limits are enforced by killing what runs below `time`, so that it still reports.

The status fd is the host's to trust, so the job must not be able to write to it: no descriptor
above 2 reaches the job (this process's inheritable ones are closed at spawn, the sandbox's own just
before the job's command), the processes that hold it are out of the job's reach (another uid, or not
dumpable), and every line the host accepts starts with a nonce the job never sees.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import os
import shutil
import signal
import stat
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field

from tempering.sandbox.job import Limits

STATUS_FD = 3
"""The child's fd on which the isolation layer reports that set-up succeeded, and GNU time the usage."""
_CHUNK = 1 << 16
_STATUS_CAP = 1 << 16
_DISK_POLL_S = 0.2
TIME = shutil.which("time", path="/usr/bin:/bin")
"""GNU time, if installed."""


def usage_format(nonce: str) -> str:
    """GNU time's format (given in its TIME variable, which the job cannot read):
    "nonce peak-KiB user-s sys-s exit-code"."""
    return f"{nonce} %M %U %S %x"


def usage_argv(time_path: str | None = TIME, append: bool = False) -> list[str]:
    """Prefix that makes GNU time at `time_path` report its TIME format on the status fd (if installed);
    `append` where the status fd is a file that others write to as well.

    Before the format line it writes "Command terminated by signal N" for a command a signal ended
    (its own exit status, 128 + N like a shell's, cannot tell that from an exit code)."""
    return [time_path, *(["-a"] if append else []), "-o", f"/dev/fd/{STATUS_FD}", "--"] if time_path else []


@dataclass
class Report:
    """What the status fd said (see `parse_status`)."""

    started: bool = False
    """The isolation layer got as far as the job's command."""
    measured: bool = False
    """GNU time reported (the fields below are its)."""
    exit_code: int | None = None
    """Exit code of the job's command (None when a signal ended it)."""
    term_signal: int | None = None
    """Signal that ended the job's command."""
    cpu_s: float = 0.0
    """CPU seconds of the job's command and of the processes it waited for."""
    peak_mb: float = 0.0
    """Largest resident set of the job's command and of the processes it waited for, MiB."""
    denied: list[str] = field(default_factory=list)
    """System calls the seccomp filter refused the job, as its supervisor reported them (first use of each)."""


@dataclass
class Exit:
    """Raw outcome of one process tree, before it is read as a `Result`."""

    exit_code: int | None
    """Exit status of the top process (None when a signal ended it)."""
    term_signal: int | None
    """Signal that ended the top process."""
    stdout: bytes
    """The kept head of standard output."""
    stderr: bytes
    """The kept head of standard error."""
    stdout_truncated: bool
    """Standard output passed the cap."""
    stderr_truncated: bool
    """Standard error passed the cap."""
    wall_s: float
    """Seconds from spawn to exit."""
    tree_cpu_s: float
    """CPU seconds of the processes of the tree that were reaped inside it (`wait4`); the kernel adds
    nothing for those it killed when a PID namespace ended."""
    report: Report
    """What GNU time and the set-up steps reported on the status fd."""
    kill_reason: str = ""
    """Why we killed it: `timeout`, `output`, `disk`, `inodes`, `cpu`, or empty; a limit is named only if the
    tree was still running when the host saw it passed."""


class _Stream:
    """Keeps the first `cap` bytes of a pipe, drops (and counts) the rest; or hands every chunk to `sink`."""

    def __init__(self, fd: int, cap: int, sink: Callable[[bytes], None] | None = None):
        self.fd, self.cap, self.sink = fd, cap, sink
        self.chunks: list[bytes] = []
        self.kept = 0
        self.truncated = False
        self.eof = asyncio.get_running_loop().create_future()

    def read(self) -> bool:
        """Read what is there; True once the cap is passed."""
        try:
            data = os.read(self.fd, _CHUNK)
        except BlockingIOError:
            return False
        if not data:
            if not self.eof.done():
                self.eof.set_result(None)
            return False
        return self._keep(data)

    def drain(self) -> None:
        """Read until the pipe is empty, at its end, or past the cap."""
        while not self.truncated:
            try:
                data = os.read(self.fd, _CHUNK)
            except BlockingIOError:
                return
            if not data:
                return
            self._keep(data)

    def _keep(self, data: bytes) -> bool:
        if self.sink is not None:
            self.sink(data)
            return False
        room = self.cap - self.kept
        if room > 0:
            self.chunks.append(data[:room])
            self.kept += min(room, len(data))
        if len(data) > room:
            self.truncated = True
        return self.truncated

    @property
    def data(self) -> bytes:
        return b"".join(self.chunks)


async def _pump(feed: AsyncIterator[bytes], fd: int) -> None:
    """Write what `feed` yields into the pipe `fd` as the reader takes it; close it at the end."""
    loop = asyncio.get_running_loop()
    transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, os.fdopen(fd, "wb", 0))
    writer = asyncio.StreamWriter(transport, protocol, None, loop)
    try:
        async for chunk in feed:
            writer.write(chunk)
            await writer.drain()
    except (BrokenPipeError, ConnectionResetError):  # the child is gone: nothing more to say to it
        pass
    finally:
        writer.close()


def disk_usage(path: str, max_entries: int) -> tuple[int, int]:
    """(bytes allocated, names) below `path`, never following a link. Past `max_entries` names (an empty
    file takes no blocks, but it takes an inode and a name) it stops, without the bytes: names are
    counted first, from the folder listings alone, so a flood of them is seen at the cost of listing
    them. A folder nested too deep to name counts as past the limit: no job needs one, and its files
    could not be counted."""
    entries, sized, stack = 0, [], [path]
    while stack:
        try:
            it = os.scandir(stack.pop())
        except OSError as e:
            if e.errno == errno.ENAMETOOLONG:
                return 0, max_entries + 1
            continue
        with it:
            for entry in it:
                entries += 1
                if entries > max_entries:
                    return 0, entries
                try:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                        sized.append(entry)
                    elif entry.is_file(follow_symlinks=False):
                        sized.append(entry)
                except OSError:
                    pass
    total = 0
    for entry in sized:
        try:
            total += entry.stat(follow_symlinks=False).st_blocks * 512
        except OSError:
            pass
    return total, entries


def few_names(path: str, cap: int) -> bool:
    """At most `cap` names below `path` (counted from folder listings alone, links not followed)."""
    seen, stack = 0, [path]
    while stack:
        try:
            it = os.scandir(stack.pop())
        except OSError:
            return False
        with it:
            for entry in it:
                seen += 1
                if seen > cap:
                    return False
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
    return True


def largest_file(paths: Sequence[str], at_least: int) -> bool:
    """Some regular file below `paths` (links not followed) holds at least `at_least` bytes."""
    stack = list(paths)
    while stack:
        try:
            it = os.scandir(stack.pop())
        except OSError:
            continue
        with it:
            for entry in it:
                try:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                    elif entry.is_file(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_size >= at_least:
                        return True
                except OSError:
                    pass
    return False


def _read_capped(path: str, cap: int) -> bytes:
    """The first `cap` bytes of the regular file at `path` (not followed if a link), or nothing."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return b""
    with os.fdopen(fd, "rb") as f:
        return f.read(cap) if stat.S_ISREG(os.fstat(fd).st_mode) else b""


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(c) for c in f.read().split()]
    except (OSError, ValueError):
        return []


def _below_time(pid: int) -> list[int]:
    """The processes just below the first `time` in the tree of `pid` (breadth-first, so that a job
    process that names itself `time` is never found before the real one, its ancestor)."""
    queue = [pid]
    while queue:
        p = queue.pop(0)
        try:
            with open(f"/proc/{p}/comm") as f:
                if f.read().strip() == "time":
                    return _children(p)
        except OSError:
            pass
        queue += _children(p)
    return []


def parse_status(text: str, nonce: str) -> Report:
    """What the status fd's text says.

    Only lines that start with the job's nonce count: `nonce started`, written by the last set-up
    step just before the job's command, `nonce denied NAME` for a system call the filter refused, and GNU time's `nonce peak user sys exit`, with the line GNU
    time writes just before it for a command a signal ended."""
    rep = Report()
    lines = text.split("\n")
    for i, line in enumerate(lines):
        parts = line.split()
        if len(parts) < 2 or parts[0] != nonce:
            continue
        if parts[1:] == ["started"]:
            rep.started = True
        elif len(parts) == 3 and parts[1] == "denied" and parts[2] not in rep.denied:
            rep.denied.append(parts[2])
        elif len(parts) == 5 and not rep.measured:
            try:
                peak, user, sys_s, code = int(parts[1]), float(parts[2]), float(parts[3]), int(parts[4])
            except ValueError:
                continue
            rep.measured, rep.cpu_s, rep.peak_mb, rep.exit_code = True, user + sys_s, peak / 1024, code
            before = lines[i - 1].split() if i else []
            if before[:-1] == ["Command", "terminated", "by", "signal"] and before[-1].isdigit():
                rep.term_signal, rep.exit_code = int(before[-1]), None
    return rep


def _inheritable_fds() -> list[int]:
    """This process's descriptors above 2 that a child would inherit (a library's, or our caller's)."""
    out = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            if fd > 2 and os.get_inheritable(fd):
                out.append(fd)
        except OSError:  # the listing's own descriptor, or closed meanwhile
            pass
    return out


async def run_tree(
    argv: list[str],
    env: dict[str, str],
    limits: Limits,
    stdin_path: str | None,
    watch_dir: str,
    nonce: str,
    pass_fds: dict[int, int] | None = None,
    feed: AsyncIterator[bytes] | None = None,
    on_stdout: Callable[[bytes], None] | None = None,
    status_log: str | None = None,
    cpu_used: Callable[[], float | None] | None = None,
    on_started: Callable[[int], None] | None = None,
) -> Exit:
    """Run `argv` (an absolute program path first) to completion under `limits`' wall, output and disk caps.

    `pass_fds`: {fd in the child: our fd} besides stdin/stdout/stderr and the status fd; no other
    descriptor of ours reaches the child. `feed`: the child's stdin is a pipe that gets these chunks
    as they come (closed when it ends). `on_stdout`: gets the child's stdout as it comes (then it is
    neither kept nor capped). `status_log`: a file that holds the status lines instead of the status fd
    (a backend that passes no descriptor into the job), read when the tree has ended. `cpu_used`: the
    tree's CPU seconds as the host measures them, polled with the disk; past `limits.cpu_s` the tree is
    killed (reason `cpu`), for a backend whose jobs' kernel does not enforce RLIMIT_CPU (gvisor).
    `on_started`: called with the tree's top pid once the status fd says `started` (the namespaces are up)."""
    loop = asyncio.get_running_loop()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    st_r, st_w = os.pipe()
    feed_w = None
    if feed is not None:
        in_fd, feed_w = os.pipe()
    else:
        in_fd = os.open(stdin_path or os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    for fd in (out_r, err_r, st_r):
        os.set_blocking(fd, False)
    targets = {0: in_fd, 1: out_w, 2: err_w, STATUS_FD: st_w, **(pass_fds or {})}
    staged = {}
    for target, fd in targets.items():  # out of the way of every target, so no dup2 clobbers a source
        staged[target] = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, max(targets) + 1)
    actions: list[tuple[int, ...]] = [(os.POSIX_SPAWN_CLOSE, fd) for fd in _inheritable_fds()]
    actions += [(os.POSIX_SPAWN_DUP2, fd, target) for target, fd in staged.items()]
    t0 = time.monotonic()
    try:
        pid = os.posix_spawn(argv[0], argv, env, file_actions=actions, setsid=True)
    finally:
        for fd in (out_w, err_w, st_w, in_fd, *staged.values()):
            os.close(fd)
    pidfd = os.pidfd_open(pid)
    exited = loop.create_future()
    out, err = _Stream(out_r, limits.output_bytes, on_stdout), _Stream(err_r, limits.output_bytes)
    # feed_w is set exactly when feed is given
    pump = asyncio.ensure_future(_pump(feed, feed_w)) if feed is not None and feed_w is not None else None
    status = _Stream(st_r, _STATUS_CAP)
    reason = ""

    def running() -> bool:
        """The tree has not exited (asked of the kernel: the loop may not have seen the exit yet, if
        something held it up)."""
        return not exited.done() and os.waitid(os.P_PIDFD, pidfd, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None

    def kill(why: str) -> None:
        """Kill the job below `time` (so that `time` still reports), or the whole group. A limit is
        recorded as the reason only while the tree still runs: one that has exited passed none."""
        nonlocal reason
        alive = running()
        if not alive and why != "cancelled":
            return
        if not reason:
            reason = why
        below = _below_time(pid) if alive else []
        for child in below:
            try:
                os.kill(child, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if below:  # in case the tree does not wind down by itself
            loop.call_later(1.0, killpg)
        else:
            killpg()

    def killpg() -> None:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def on_output(stream: _Stream) -> None:
        if stream.read() and not exited.done():
            kill("output")

    def on_exit() -> None:
        if not exited.done():
            exited.set_result(None)

    loop.add_reader(pidfd, on_exit)
    loop.add_reader(out_r, on_output, out)
    loop.add_reader(err_r, on_output, err)
    started = f"{nonce} started\n".encode()

    def on_status() -> None:
        nonlocal on_started
        status.read()
        if on_started is not None and started in status.data:
            call, on_started = on_started, None
            call(pid)

    loop.add_reader(st_r, on_status)  # read as it comes: a full pipe would block the writer
    timer = loop.call_later(limits.wall_s, kill, "timeout")

    async def watch_disk() -> None:
        cap = limits.disk_mb * 1024 * 1024
        while True:
            await asyncio.sleep(_DISK_POLL_S)
            used, names = await loop.run_in_executor(None, disk_usage, watch_dir, limits.inodes)
            if used > cap or names > limits.inodes:
                kill("disk" if used > cap else "inodes")
                return
            if cpu_used is not None and (cpu_used() or 0.0) > limits.cpu_s:
                kill("cpu")
                return

    watcher = asyncio.ensure_future(watch_disk()) if watch_dir else None
    reaped = None
    try:
        await exited
        reaped = os.wait4(pid, 0)
        wall = time.monotonic() - t0
        killpg()  # whatever is left of the group (plain-subprocess daemons) goes too
        # the tree is gone; give the pipes a moment to reach EOF (a daemon that escaped the group
        # in the plain-subprocess backend may keep them open: then stop listening)
        await asyncio.wait([out.eof, err.eof], timeout=1.0)
    finally:
        timer.cancel()
        if watcher:
            watcher.cancel()
        if pump is not None:
            pump.cancel()
        for fd in (pidfd, out_r, err_r, st_r):
            loop.remove_reader(fd)
        if reaped is None:  # cancelled: do not leave the tree running or a zombie behind
            kill("cancelled")
            os.waitpid(pid, 0)
        status.drain()
        for fd in (pidfd, out_r, err_r, st_r):
            os.close(fd)
    if status_log is not None:
        status.chunks.append(_read_capped(status_log, _STATUS_CAP))
    _, wait_status, usage = reaped
    return Exit(
        exit_code=os.WEXITSTATUS(wait_status) if os.WIFEXITED(wait_status) else None,
        term_signal=os.WTERMSIG(wait_status) if os.WIFSIGNALED(wait_status) else None,
        stdout=out.data,
        stderr=err.data,
        stdout_truncated=out.truncated,
        stderr_truncated=err.truncated,
        wall_s=wall,
        tree_cpu_s=usage.ru_utime + usage.ru_stime,
        report=parse_status(status.data.decode(errors="replace"), nonce),
        kill_reason=reason,
    )
