"""Cgroups per job: a cap on everything the job holds in memory, files included, and the job's usage as
the host measures it.

Limits.memory_mb (RLIMIT_AS) caps each process's address space and disk_mb the named files in the
workdir and /tmp; neither sees a file that was deleted while still open, a memfd, or files in a
tmpfs of the job's own. Job folders live on a RAM disk, so all of these are memory charged to the
cgroup of the process that wrote them: a cgroup limited to memory_mb + disk_mb caps them together.
The kernel kills the job when it passes the limit (`oom_kill` in the cgroup's counters).

The same cgroups measure the job: CPU time (cgroup v1 `cpuacct.usage`, v2 `cpu.stat`) and peak memory
(v1 `memory.max_usage_in_bytes`, v2 `memory.peak`) of every process the job ever had, a grandchild
that double-forked away or a process killed when the job ended included. Waiting for processes cannot
see all of them: the kernel reaps the processes it kills when a PID namespace ends without adding
their usage to anyone's.

Creating cgroups needs write access to the cgroup tree (root, or a delegated subtree); where that is
missing, `JobCgroups.find()` says why and jobs run without the cap and without these measurements.
"""

from __future__ import annotations

import itertools
import os
import signal
from dataclasses import dataclass

_MIB = 1024 * 1024


def _own_paths() -> dict[str, str]:
    """{controller: path} of this process (cgroup v2's unified hierarchy under the key '')."""
    out = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for c in controllers.split(","):
                out[c] = path
    return out


def _mounts() -> list[tuple[str, str, str, set[str]]]:
    """(fs type, root, mount point, super options) of the cgroup file systems."""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            parts = line.split()
            sep = parts.index("-")
            fstype = parts[sep + 1]
            if fstype in ("cgroup", "cgroup2"):
                out.append((fstype, parts[3], parts[4], set(parts[sep + 3].split(","))))
    return out


def _under(mount: str, root: str, path: str) -> str | None:
    rel = os.path.relpath(path, root)
    return None if rel.startswith("..") else os.path.normpath(os.path.join(mount, rel))


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def _write(path: str, value: int | str) -> None:
    with open(path, "w") as f:
        f.write(str(value))


@dataclass
class JobCgroup:
    """The cgroups of one job: its memory cgroup, and the one that counts its CPU time (the same
    folder on cgroup v2; None where none could be made)."""

    memory: str
    cpu: str | None


class JobCgroups:
    """Makes, reads and removes the per-job cgroups below this process's own cgroups."""

    def __init__(self, memory: tuple[str, int], cpu: tuple[str, int] | None):
        """memory, cpu: (parent folder, cgroup version); cpu None where no CPU accounting can be made."""
        (self.parent, self.version), self.cpu = memory, cpu
        self._names = itertools.count()

    @classmethod
    def find(cls) -> JobCgroups | str:
        """The cgroups to use, or why there are none (a one-line reason)."""
        try:
            own, mounts = _own_paths(), _mounts()
        except (OSError, ValueError, IndexError) as e:
            return f"cannot read this process's cgroups: {e}"
        memory, cpu, v2 = [], [], []
        for fstype, root, mount, opts in mounts:
            if fstype == "cgroup" and "memory" in opts and "memory" in own:
                memory.append((_under(mount, root, own["memory"]), 1))
            elif fstype == "cgroup" and "cpuacct" in opts and "cpuacct" in own:
                cpu.append((_under(mount, root, own["cpuacct"]), 1))
            elif fstype == "cgroup2" and "" in own:
                v2.append((_under(mount, root, own[""]), 2))
        reasons = []
        for parent in [(p, v) for p, v in memory + v2 if p]:
            why = _try_memory(*parent)
            if why:
                reasons.append(why)
                continue
            if parent[1] == 2:
                return cls(parent, parent)  # cpu.stat is in every v2 cgroup
            # v1: cpuacct if it can be made, else a v2 cgroup beside it (hybrid machines)
            cpu_parent = next(((p, v) for p, v in cpu + v2 if p and not _try_plain(p, v)), None)
            return cls(parent, cpu_parent)
        return "; ".join(reasons) or "no memory cgroup is mounted"

    def _new(self, parent: str) -> str:
        path = os.path.join(parent, f"tempering-{os.getpid()}-{next(self._names)}")
        os.mkdir(path)
        return path

    def make(self, limit_bytes: int) -> JobCgroup:
        """New empty cgroups, memory capped at `limit_bytes` (swap included)."""
        memory = self._new(self.parent)
        try:
            _cap(memory, self.version, limit_bytes)
            cpu = None
            if self.cpu is not None:
                cpu = memory if self.cpu == (self.parent, self.version) else self._new(self.cpu[0])
        except OSError:
            os.rmdir(memory)
            raise
        return JobCgroup(memory, cpu)

    def join_files(self, job: JobCgroup) -> list[str]:
        """The files a process writes "0" into to join the job's cgroups itself. cgroup v1's `tasks`:
        moving only the writing thread skips the global lock that moving a process takes (an RCU grace
        period, milliseconds per job); the job's first process has one thread."""
        out = [os.path.join(job.memory, "tasks" if self.version == 1 else "cgroup.procs")]
        if job.cpu is not None and job.cpu != job.memory:
            out.append(os.path.join(job.cpu, "tasks" if self.cpu and self.cpu[1] == 1 else "cgroup.procs"))
        return out

    def oom_killed(self, job: JobCgroup) -> bool:
        """The kernel killed a process of this cgroup for passing its limit."""
        name = "memory.oom_control" if self.version == 1 else "memory.events"
        try:
            counts = dict(line.split() for line in _read(os.path.join(job.memory, name)).splitlines())
        except (OSError, ValueError):
            return False
        return int(counts.get("oom_kill", 0)) > 0

    def usage(self, job: JobCgroup) -> tuple[float | None, float | None]:
        """(CPU seconds, peak MiB) of everything the job's cgroups ever held; None where not measured."""
        cpu_s = peak_mb = None
        if job.cpu is not None:
            try:
                if job.cpu != job.memory and self.cpu and self.cpu[1] == 1:
                    cpu_s = int(_read(os.path.join(job.cpu, "cpuacct.usage"))) / 1e9
                else:
                    stat = dict(line.split() for line in _read(os.path.join(job.cpu, "cpu.stat")).splitlines())
                    cpu_s = int(stat["usage_usec"]) / 1e6
            except (OSError, ValueError, KeyError):
                pass
        name = "memory.max_usage_in_bytes" if self.version == 1 else "memory.peak"
        try:
            peak_mb = int(_read(os.path.join(job.memory, name))) / _MIB
        except (OSError, ValueError):
            pass
        return cpu_s, peak_mb

    def remove(self, job: JobCgroup) -> bool:
        """Kill whatever is left in the job's cgroups and remove them; False if one is still busy."""
        done = True
        for path in dict.fromkeys(p for p in (job.cpu, job.memory) if p):
            try:
                pids = [int(p) for p in _read(os.path.join(path, "cgroup.procs")).split()]
            except OSError:
                pids = []
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            try:
                os.rmdir(path)
            except FileNotFoundError:
                pass
            except OSError:
                done = False
        return done


def _cap(path: str, version: int, limit_bytes: int) -> None:
    if version == 1:
        _write(os.path.join(path, "memory.limit_in_bytes"), limit_bytes)
        if os.path.exists(os.path.join(path, "memory.memsw.limit_in_bytes")):
            _write(os.path.join(path, "memory.memsw.limit_in_bytes"), limit_bytes)
    else:
        _write(os.path.join(path, "memory.max"), limit_bytes)
        if os.path.exists(os.path.join(path, "memory.swap.max")):
            _write(os.path.join(path, "memory.swap.max"), 0)


def _try_memory(parent: str, version: int) -> str:
    """Why no capped memory cgroup can be made under `parent` ('' if one can)."""
    if version == 2:
        try:
            enabled = _read(os.path.join(parent, "cgroup.subtree_control")).split()
        except OSError as e:
            return f"cgroup v2 at {parent}: {e.strerror}"
        if "memory" not in enabled:
            return f"cgroup v2: the memory controller is not enabled for child cgroups of {parent}"
    path = os.path.join(parent, f"tempering-probe-{os.getpid()}")
    try:
        os.mkdir(path)
    except OSError as e:
        return f"cannot create a memory cgroup under {parent}: {e.strerror}"
    try:
        _cap(path, version, 64 * _MIB)
    except OSError as e:
        return f"cannot cap a memory cgroup under {parent}: {e.strerror}"
    finally:
        os.rmdir(path)
    return ""


def _try_plain(parent: str, version: int) -> str:
    """Why no cgroup that counts CPU time can be made under `parent` ('' if one can)."""
    path = os.path.join(parent, f"tempering-probe-{os.getpid()}")
    try:
        os.mkdir(path)
    except OSError as e:
        return f"cannot create a cgroup under {parent}: {e.strerror}"
    try:
        found = os.path.exists(os.path.join(path, "cpuacct.usage" if version == 1 else "cpu.stat"))
    finally:
        os.rmdir(path)
    return "" if found else f"no CPU accounting in cgroups under {parent}"
