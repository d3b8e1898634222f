"""One memory cgroup per job: a cap on everything the job holds in memory, files included.

Limits.memory_mb (RLIMIT_AS) caps each process's address space and disk_mb the named files in the
workdir and /tmp; neither sees a file that was deleted while still open, a memfd, or files in a
tmpfs of the job's own. Job folders live on a RAM disk, so all of these are memory charged to the
cgroup of the process that wrote them: a cgroup limited to memory_mb + disk_mb caps them together.
The kernel kills the job when it passes the limit (`oom_kill` in the cgroup's counters).

Creating cgroups needs write access to the cgroup tree (root, or a delegated subtree); where that is
missing, `MemoryCgroups.find()` says why and jobs run without the cap.
"""

from __future__ import annotations

import itertools
import os
import signal

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


class MemoryCgroups:
    """Makes, reads and removes the per-job cgroups below this process's own memory cgroup."""

    def __init__(self, parent: str, version: int):
        self.parent, self.version = parent, version
        self._names = itertools.count()

    @classmethod
    def find(cls) -> MemoryCgroups | str:
        """The cgroups to use, or why there are none (a one-line reason)."""
        try:
            own, mounts = _own_paths(), _mounts()
        except (OSError, ValueError, IndexError) as e:
            return f"cannot read this process's cgroups: {e}"
        candidates = []
        for fstype, root, mount, opts in mounts:
            if fstype == "cgroup" and "memory" in opts and "memory" in own:
                candidates.append((_under(mount, root, own["memory"]), 1))
            elif fstype == "cgroup2" and "" in own:
                candidates.append((_under(mount, root, own[""]), 2))
        reasons = []
        for parent, version in sorted((c for c in candidates if c[0]), key=lambda c: c[1]):
            found = cls(parent, version)
            why = found._try()
            if not why:
                return found
            reasons.append(why)
        return "; ".join(reasons) or "no memory cgroup is mounted"

    def _try(self) -> str:
        if self.version == 2:
            try:
                with open(os.path.join(self.parent, "cgroup.subtree_control")) as f:
                    enabled = f.read().split()
            except OSError as e:
                return f"cgroup v2 at {self.parent}: {e.strerror}"
            if "memory" not in enabled:
                return f"cgroup v2: the memory controller is not enabled for child cgroups of {self.parent}"
        try:
            path = self.make(64 * _MIB)
        except OSError as e:
            return f"cannot create a memory cgroup under {self.parent}: {e.strerror}"
        self.remove(path)
        return ""

    def make(self, limit_bytes: int) -> str:
        """A new empty cgroup capped at `limit_bytes` of memory (swap included); its path."""
        path = os.path.join(self.parent, f"tempering-{os.getpid()}-{next(self._names)}")
        os.mkdir(path)
        try:
            if self.version == 1:
                self._write(path, "memory.limit_in_bytes", limit_bytes)
                if os.path.exists(os.path.join(path, "memory.memsw.limit_in_bytes")):
                    self._write(path, "memory.memsw.limit_in_bytes", limit_bytes)
            else:
                self._write(path, "memory.max", limit_bytes)
                if os.path.exists(os.path.join(path, "memory.swap.max")):
                    self._write(path, "memory.swap.max", 0)
        except OSError:
            os.rmdir(path)
            raise
        return path

    def join_file(self, path: str) -> str:
        """The file a process writes "0" into to join the cgroup at `path` itself. cgroup v1's `tasks`:
        moving only the writing thread skips the global lock that moving a process takes (an RCU grace
        period, milliseconds per job); the job's first process has one thread."""
        return os.path.join(path, "tasks" if self.version == 1 else "cgroup.procs")

    @staticmethod
    def _write(path: str, name: str, value: int) -> None:
        with open(os.path.join(path, name), "w") as f:
            f.write(str(value))

    def oom_killed(self, path: str) -> bool:
        """The kernel killed a process of this cgroup for passing its limit."""
        name = "memory.oom_control" if self.version == 1 else "memory.events"
        try:
            with open(os.path.join(path, name)) as f:
                counts = dict(line.split() for line in f if len(line.split()) == 2)
        except OSError:
            return False
        return int(counts.get("oom_kill", 0)) > 0

    def remove(self, path: str) -> bool:
        """Kill whatever is left in the cgroup and remove it; False if it is still busy."""
        try:
            with open(os.path.join(path, "cgroup.procs")) as f:
                pids = [int(p) for p in f.read().split()]
        except OSError:
            pids = []
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            os.rmdir(path)
            return True
        except FileNotFoundError:
            return True
        except OSError:
            return False
