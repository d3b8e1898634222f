"""Run a command in a Landlock domain that can neither read nor write the verifier's folders.

    python3 landlock.py DENY[:DENY...] ALLOW_UNDER[:...] -- CMD ARGS...

Used inside one sandbox job that runs a task's solution and then its tests (so that a service the
solution starts in the background still answers when the tests query it, as in Harbor, whose container
persists between the two). The solution and every process it leaves behind run in the domain: Landlock
(unprivileged, inherited by every child, never lifted) lets them read and write what the job itself may,
except below each DENY path (the tests, the verifier's reward folder, the job's own folder), and the
kernel refuses them ptrace and /proc access to the processes outside the domain (the tests, the job's
script), and, where the kernel has signal scoping (Landlock ABI 6), signals to them too. The rights on the
job's own folder (DENY) are given back below each ALLOW_UNDER path inside it (the working folder and HOME).

Standard library only: this file is copied into the job and run with the job's python3. Exits 96 (with a
message on stderr) when the kernel has no Landlock, so that the caller never runs a solution unconfined
next to the tests.
"""

from __future__ import annotations

import ctypes
import os
import sys

_CREATE, _ADD_RULE, _RESTRICT = 444, 445, 446  # the same numbers on every architecture
_PATH_BENEATH = 1
_VERSION = 1
_PR_SET_NO_NEW_PRIVS = 38
_FILE_RIGHTS = 0x1 | 0x2 | 0x4  # execute, write_file, read_file
_TRUNCATE, _IOCTL_DEV, _REFER = 1 << 14, 1 << 15, 1 << 13
_SCOPE_SIGNAL = 0x2


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64)]


class _RulesetAttrScoped(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def abi() -> int:
    """The kernel's Landlock ABI version (0: none, or switched off)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    v = libc.syscall(ctypes.c_long(_CREATE), None, ctypes.c_size_t(0), ctypes.c_uint32(_VERSION))
    return max(0, int(v))


def fs_rights(version: int) -> int:
    rights = (1 << 13) - 1  # execute .. make_sym (ABI 1)
    if version >= 2:
        rights |= _REFER
    if version >= 3:
        rights |= _TRUNCATE
    if version >= 5:
        rights |= _IOCTL_DEV
    return rights


def _allowed(deny: list[str], allow_under: list[str]) -> list[str]:
    """The paths that get every right: beside each denied path, from the root down, and the ALLOW_UNDER
    paths below a denied one."""
    deny = [os.path.normpath(p) for p in deny]
    out: set[str] = set()
    for d in deny:
        parts = d.strip("/").split("/")
        for i in range(len(parts)):
            parent = "/" + "/".join(parts[:i])
            try:
                names = os.listdir(parent)
            except OSError:
                continue
            for name in names:
                path = os.path.join(parent, name)
                if not any(x == path or x.startswith(path + "/") for x in deny):
                    out.add(path)
    # a path beside one denied path may hold another: keep only those that hold none
    out = {p for p in out if not any(x == p or x.startswith(p + "/") for x in deny)}
    return sorted(out | {os.path.normpath(p) for p in allow_under if os.path.exists(p)})


def restrict(deny: list[str], allow_under: list[str]) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    version = abi()
    if version < 1:
        raise OSError("the kernel has no Landlock")
    rights = fs_rights(version)
    attr: _RulesetAttr | _RulesetAttrScoped
    if version >= 6:
        attr = _RulesetAttrScoped(rights, 0, _SCOPE_SIGNAL)
    else:
        attr = _RulesetAttr(rights, 0)
    fd = libc.syscall(ctypes.c_long(_CREATE), ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)), 0)
    if fd < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset failed")
    try:
        for path in _allowed(deny, allow_under):
            try:
                pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                is_dir = os.path.isdir(f"/proc/self/fd/{pfd}")
                access = rights if is_dir else rights & (_FILE_RIGHTS | _TRUNCATE | _IOCTL_DEV)
                rule = _PathBeneath(access, pfd)
                if libc.syscall(ctypes.c_long(_ADD_RULE), ctypes.c_int(fd), _PATH_BENEATH, ctypes.byref(rule), 0):
                    raise OSError(ctypes.get_errno(), f"landlock_add_rule {path} failed")
            finally:
                os.close(pfd)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0):
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
        if libc.syscall(ctypes.c_long(_RESTRICT), ctypes.c_int(fd), 0):
            raise OSError(ctypes.get_errno(), "landlock_restrict_self failed")
    finally:
        os.close(fd)


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print("usage: landlock.py DENY[:DENY...] ALLOW_UNDER[:...] -- CMD ARGS...", file=sys.stderr)
        return 2
    deny = [p for p in argv[0].split(":") if p]
    allow = [p for p in argv[1].split(":") if p]
    try:
        restrict(deny, allow)
    except OSError as e:
        print(f"[landlock: {e}; the solution does not run unconfined beside the tests]", file=sys.stderr)
        return 96
    os.execvp(argv[3], argv[3:])
    return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
