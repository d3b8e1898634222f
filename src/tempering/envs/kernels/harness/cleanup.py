"""What a warm worker removes after each candidate, and how (read-only; provided by the harness).

Everything the candidate made in /tmp and in the workdir goes: folders it made unreadable are made
readable first, through a descriptor opened without following links (a link it planted is removed,
never followed, so no file outside is touched), and System V IPC objects of the job's IPC namespace.
What the sandbox itself placed there stays: the workdir's files from before the first candidate, and
the mount points below /tmp (the read-only skeleton above a virtualenv or a cache that lives under the
host's /tmp), which no process of the job can change or remove.
`clean` returns what it could not remove: the worker does not serve another candidate then.
"""

import ctypes
import os
import re
import stat

_libc = ctypes.CDLL(None, use_errno=True)


def remove_ipc():
    """System V shared memory, semaphores and message queues left in the job's IPC namespace."""
    for kind in ("shm", "sem", "msg"):
        for ipc_id in _ipc_ids(kind):  # IPC_RMID = 0
            if kind == "sem":
                _libc.semctl(ipc_id, 0, 0, 0)
            else:
                getattr(_libc, f"{kind}ctl")(ipc_id, 0, None)


def remove_tree(parent_fd, name):
    """Remove `name` under the open folder `parent_fd`: folders the candidate made unreadable are made
    readable first (through a descriptor, never a path), links are removed, never followed."""
    try:
        st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=parent_fd)
        return
    # an O_PATH descriptor needs no permission on the folder and names it, not what a link points to;
    # chmod through its /proc entry makes it readable, then it is opened for listing through it
    handle = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent_fd)
    try:
        os.chmod(f"/proc/self/fd/{handle}", 0o700)
        fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY, dir_fd=handle)
    finally:
        os.close(handle)
    try:
        for entry in os.listdir(fd):
            remove_tree(fd, entry)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent_fd)


def mount_points(folder):
    """The names in `folder` that are mount points of this process's mount namespace."""
    folder = os.fsencode(os.path.realpath(folder)).rstrip(b"/") + b"/"
    names = set()
    try:
        with open("/proc/self/mountinfo", "rb") as f:
            for line in f:
                fields = line.split()
                if len(fields) < 5:
                    continue
                point = re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m.group(1), 8)]), fields[4])  # \040: a space
                if point.startswith(folder) and b"/" not in point[len(folder) :]:
                    names.add(os.fsdecode(point[len(folder) :]))
    except OSError:
        pass
    return names


def clean(workdir, known, tmp, isolated, tmp_known=frozenset()):
    """Remove what the candidate left; the names that could not be removed (empty: clean)."""
    left = []
    for folder, keep in ((workdir, known), (tmp, tmp_known)):
        try:  # a candidate may have made the folder itself unreadable (both are mount points, not links)
            os.chmod(folder, os.stat(folder).st_mode & 0o7777 | 0o700)
        except OSError:
            pass
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for name in os.listdir(fd):
                if name in keep:
                    continue
                try:
                    remove_tree(fd, name)
                except OSError:
                    pass
            left += [os.path.join(folder, n) for n in os.listdir(fd) if n not in keep]
        finally:
            os.close(fd)
    if isolated:
        remove_ipc()
        left += [f"System V {kind}" for kind in ("shm", "sem", "msg") if _ipc_ids(kind)]
    return left


def _ipc_ids(kind):
    try:
        with open(f"/proc/sysvipc/{kind}") as f:
            return [int(line.split()[1]) for line in f.readlines()[1:] if line.strip()]
    except OSError:
        return []
