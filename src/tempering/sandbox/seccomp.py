"""The seccomp filter of every isolated job: what the kernel shares outside the job's namespaces.

- The kernel keyring is shared state outside every namespace a job gets: keys in a uid's user keyring
  outlive the job (the next job in the same slot has the same uid) and a session keyring inherited from
  the host is reachable by anyone who possesses it. `add_key`, `request_key` and `keyctl` fail with
  EPERM, as in Docker's default profile.
- Nested user namespaces give the job full capabilities over namespaces of its own: more kernel surface
  for no use a job has. `unshare` and `clone` with CLONE_NEWUSER fail with EPERM; `clone3`, whose flags a
  filter cannot read, fails with ENOSYS, so that the C library falls back to `clone` (as in Docker).
- File locks and file-change notifications live on inodes, and the job's read-only system files, Python
  installation and device nodes are the host's inodes, shared with every job running at the same time: a
  lock one job holds on /etc/passwd is seen at once by another (a channel between jobs). So lock calls
  (`flock`; `fcntl` F_SETLK, F_SETLKW, their 64-bit and OFD forms, F_SETLEASE) succeed without locking
  anything, and inotify and dnotify are unavailable (ENOSYS, EINVAL: programs fall back to polling).
  A job's own processes therefore cannot exclude each other with file locks (see docs/sandbox.md).

The filter is classic BPF, built here for the ABIs a process on this machine can call the kernel with
(64-bit, 32-bit compat, x32).
"""

from __future__ import annotations

import errno
import platform
import struct

_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_LD_ABS_W, _JEQ_K, _JSET_K, _AND_K, _RET_K = 0x20, 0x15, 0x45, 0x54, 0x06
_X32 = 0x40000000
CLONE_NEWUSER = 0x10000000
_ARG0, _ARG1 = 16, 24  # offsets of the low words of seccomp_data.args[0] and args[1] (little-endian)
# fcntl commands that take or give up a lock or a lease: F_SETLK, F_SETLKW, F_SETLK64, F_SETLKW64,
# F_OFD_SETLK, F_OFD_SETLKW, F_SETLEASE
LOCK_COMMANDS = (6, 7, 13, 14, 37, 38, 1024)
F_NOTIFY = 1026
# per ABI: (AUDIT_ARCH_*, mask applied to the syscall number, {name: numbers})
_ABIS = {
    "x86_64": [
        (
            0xC000003E,
            ~_X32 & 0xFFFFFFFF,  # x32 calls carry the x32 bit on the same numbers
            {
                "keyring": (248, 249, 250),
                "clone": (56,),
                "unshare": (272,),
                "clone3": (435,),
                "fcntl": (72,),
                "flock": (73,),
                "inotify": (253, 294),
            },
        ),
        (
            0x40000003,  # i386
            0xFFFFFFFF,
            {
                "keyring": (286, 287, 288),
                "clone": (120,),
                "unshare": (310,),
                "clone3": (435,),
                "fcntl": (55, 221),
                "flock": (143,),
                "inotify": (291, 332),
            },
        ),
    ],
    "aarch64": [
        (
            0xC00000B7,
            0xFFFFFFFF,
            {
                "keyring": (217, 218, 219),
                "clone": (220,),
                "unshare": (97,),
                "clone3": (435,),
                "fcntl": (25,),
                "flock": (32,),
                "inotify": (26,),
            },
        ),
        (
            0x40000028,  # arm (EABI)
            0xFFFFFFFF,
            {
                "keyring": (309, 310, 311),
                "clone": (120,),
                "unshare": (337,),
                "clone3": (435,),
                "fcntl": (55, 221),
                "flock": (143,),
                "inotify": (316, 360),
            },
        ),
    ],
}


class _Program:
    """Classic BPF with forward jumps to named labels, resolved at the end."""

    def __init__(self) -> None:
        self.insns: list[tuple[int, int, int | str, int | str]] = []  # jumps: an offset or a label
        self.labels: dict[str, int] = {}

    def op(self, code: int, k: int, jt: int | str = 0, jf: int | str = 0) -> None:
        self.insns.append((code, k, jt, jf))

    def label(self, name: str) -> None:
        self.labels[name] = len(self.insns)

    def ret(self, k: int) -> None:
        self.op(_RET_K, k)

    def assemble(self) -> bytes:
        out = []
        for pc, (code, k, jt, jf) in enumerate(self.insns):
            offs = []
            for target in (jt, jf):
                off = target if isinstance(target, int) else self.labels[target] - pc - 1
                assert 0 <= off < 256, (pc, target)
                offs.append(off)
            out.append(struct.pack("=HBBI", code, offs[0], offs[1], k))
        return b"".join(out)


def _errno(e: int) -> int:
    return _RET_ERRNO | e


def job_filter(machine: str | None = None) -> bytes | None:
    """The filter as `struct sock_filter[]` bytes (for bwrap --seccomp), or None on an unknown machine.

    Calls under an ABI not listed fail with ENOSYS, so an unlisted compat ABI is no way around it."""
    abis = _ABIS.get(machine or platform.machine())
    if abis is None:
        return None
    p = _Program()
    p.op(_LD_ABS_W, 4)  # seccomp_data.arch
    for i, (arch, _, _) in enumerate(abis):
        p.op(_JEQ_K, arch, f"abi{i}", 0)
    p.ret(_errno(errno.ENOSYS))  # an ABI this filter does not know
    for i, (_, mask, calls) in enumerate(abis):
        p.label(f"abi{i}")
        p.op(_LD_ABS_W, 0)  # seccomp_data.nr
        if mask != 0xFFFFFFFF:
            p.op(_AND_K, mask)
        verdicts = [
            ("keyring", "eperm"),
            ("clone3", "enosys"),
            ("clone", f"newuser{i}"),
            ("unshare", f"newuser{i}"),
            ("flock", "fake_ok"),
            ("fcntl", f"fcntl{i}"),
            ("inotify", "enosys"),
        ]
        for name, target in verdicts:
            for nr in calls[name]:
                p.op(_JEQ_K, nr, target, 0)
        p.ret(_RET_ALLOW)
        p.label(f"newuser{i}")
        p.op(_LD_ABS_W, _ARG0)  # flags
        p.op(_JSET_K, CLONE_NEWUSER, "eperm", 0)
        p.ret(_RET_ALLOW)
        p.label(f"fcntl{i}")
        p.op(_LD_ABS_W, _ARG1)  # cmd
        for cmd in LOCK_COMMANDS:
            p.op(_JEQ_K, cmd, "fake_ok", 0)
        p.op(_JEQ_K, F_NOTIFY, "einval", 0)
        p.ret(_RET_ALLOW)
    p.label("eperm")
    p.ret(_errno(errno.EPERM))
    p.label("enosys")
    p.ret(_errno(errno.ENOSYS))
    p.label("einval")
    p.ret(_errno(errno.EINVAL))
    p.label("fake_ok")
    p.ret(_errno(0))  # returns 0 without running the call
    return p.assemble()


LOADER = """\
import ctypes, os, sys
nonce, prog = os.environ["TIME"].split(" ", 1)[0], bytes.fromhex(sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)
class Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]
if libc.prctl(38, 1, 0, 0, 0) or libc.prctl(22, 2, ctypes.byref(Prog(len(prog) // 8, prog)), 0, 0):
    sys.exit("sandbox: seccomp: " + os.strerror(ctypes.get_errno()))
os.write(3, (nonce + " started\\n").encode())
os.closerange(3, os.sysconf("SC_OPEN_MAX"))
del os.environ["TIME"]
os.execvp(sys.argv[2], sys.argv[2:])
"""
"""Python run between GNU time and the job by backends without a seccomp option of their own: loads the
filter (argv[1], hex), reports `started` on the status fd, closes every descriptor above 2, drops the
TIME variable (GNU time's format, which carries the job's nonce) and runs the rest of argv."""
