"""Start one process tree and watch it on the event loop: output caps, wall clock, disk, exit.

`posix_spawn` starts the tree in its own session (so that one signal reaches the whole group) and a
pidfd tells the loop when it exits. The CPU time and peak memory come from GNU `time`, which the
backends place just above the job's command and which reports on the status fd: our own `wait4`
cannot measure them, because `posix_spawn` borrows this process's memory until the exec (the kernel
would count our resident set as the child's peak) and bubblewrap does not reap its namespace's first
process. Limits are enforced by killing what runs below `time`, so that it still reports.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import time
from dataclasses import dataclass

from tempering.sandbox.job import Limits

STATUS_FD = 3
"""The child's fd on which the isolation layer reports that set-up succeeded."""
_CHUNK = 1 << 16
_DISK_POLL_S = 0.2
_TIME = shutil.which("time", path="/usr/bin:/bin")


def usage_argv() -> list[str]:
    """Prefix that makes GNU time report "peak-KiB user-s system-s" on the status fd (if installed).

    It reports a child killed by signal N as exit code 128 + N, like a shell."""
    return [_TIME, "-q", "-f", "%M %U %S", "-o", f"/dev/fd/{STATUS_FD}", "--"] if _TIME else []


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
    cpu_s: float
    """CPU seconds of the tree (GNU time's report, else wait4's)."""
    peak_memory_mb: float
    """Largest resident set in the tree, MiB (GNU time's report, else wait4's)."""
    started: bool
    """The isolation layer got as far as the job's command (see `_parse_status`)."""
    kill_reason: str = ""
    """Why we killed it: `timeout`, `output`, `disk`, or empty."""


class _Stream:
    """Keeps the first `cap` bytes of a pipe, drops (and counts) the rest."""

    def __init__(self, fd: int, cap: int):
        self.fd, self.cap = fd, cap
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


def _disk_bytes(path: str) -> int:
    total = 0
    for root, dirs, files in os.walk(path, onerror=lambda e: None):
        for name in files + dirs:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                pass
    return total


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


def _parse_status(text: str) -> tuple[bool, tuple[float, float] | None]:
    """(set-up finished, (cpu seconds, peak MiB) if GNU time reported) from the status fd's text.

    Set-up finished if the isolation layer said `started` or GNU time, which runs after set-up and
    before the job's command (so the job cannot fake its absence), reported."""
    lines = text.split("\n")
    usage = None
    for line in reversed(lines):
        parts = line.split()
        if len(parts) == 3:
            try:
                usage = (float(parts[1]) + float(parts[2]), int(parts[0]) / 1024)
                break
            except ValueError:
                pass
    return lines[0] == "started" or usage is not None, usage


async def run_tree(
    argv: list[str], env: dict[str, str], limits: Limits, stdin_path: str | None, watch_dir: str
) -> Exit:
    """Run `argv` (an absolute program path first) to completion under `limits`' wall, output and disk caps."""
    loop = asyncio.get_running_loop()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    st_r, st_w = os.pipe()
    in_fd = os.open(stdin_path or os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    for fd in (out_r, err_r, st_r):
        os.set_blocking(fd, False)
    if st_w == STATUS_FD:  # dup2 onto itself would keep close-on-exec
        os.set_inheritable(st_w, True)
    actions = [
        (os.POSIX_SPAWN_DUP2, in_fd, 0),
        (os.POSIX_SPAWN_DUP2, out_w, 1),
        (os.POSIX_SPAWN_DUP2, err_w, 2),
        (os.POSIX_SPAWN_DUP2, st_w, STATUS_FD),
    ]
    t0 = time.monotonic()
    try:
        pid = os.posix_spawn(argv[0], argv, env, file_actions=actions, setsid=True)
    finally:
        for fd in (out_w, err_w, st_w, in_fd):
            os.close(fd)
    pidfd = os.pidfd_open(pid)
    exited = loop.create_future()
    out, err = _Stream(out_r, limits.output_bytes), _Stream(err_r, limits.output_bytes)
    reason = ""

    def kill(why: str) -> None:
        """Kill the job below `time` (so that `time` still reports), or the whole group."""
        nonlocal reason
        if not reason:
            reason = why
        below = _below_time(pid) if not exited.done() else []
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

    loop.add_reader(pidfd, lambda: exited.done() or exited.set_result(None))
    loop.add_reader(out_r, on_output, out)
    loop.add_reader(err_r, on_output, err)
    timer = loop.call_later(limits.wall_s, kill, "timeout")

    async def watch_disk() -> None:
        cap = limits.disk_mb * 1024 * 1024
        while True:
            await asyncio.sleep(_DISK_POLL_S)
            if await loop.run_in_executor(None, _disk_bytes, watch_dir) > cap:
                kill("disk")
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
        for fd in (pidfd, out_r, err_r):
            loop.remove_reader(fd)
        if reaped is None:  # cancelled: do not leave the tree running or a zombie behind
            kill("cancelled")
            os.waitpid(pid, 0)
        try:
            status_text = os.read(st_r, 4096).decode(errors="replace")
        except BlockingIOError:
            status_text = ""
        for fd in (pidfd, out_r, err_r, st_r):
            os.close(fd)
    _, status, usage = reaped
    started, measured = _parse_status(status_text)
    # without a report (no GNU time, or the tree was killed whole) wait4's numbers are all there is
    cpu_s, peak_mb = measured or (usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024)
    return Exit(
        exit_code=os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
        term_signal=os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
        stdout=out.data,
        stderr=err.data,
        stdout_truncated=out.truncated,
        stderr_truncated=err.truncated,
        wall_s=wall,
        cpu_s=cpu_s,
        peak_memory_mb=peak_mb,
        started=started,
        kill_reason=reason,
    )
