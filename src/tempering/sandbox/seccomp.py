"""A seccomp filter that takes the kernel keyring away from jobs.

The kernel keyring is shared state outside every namespace a job gets: keys in a uid's user keyring
outlive the job (the next job in the same slot has the same uid) and a session keyring inherited from
the host is reachable by anyone who possesses it. Jobs have no use for it, so `add_key`, `request_key`
and `keyctl` fail with EPERM, as in Docker's default profile. The filter is classic BPF, built here
for the ABIs a process on this machine can call the kernel with (64-bit, 32-bit compat, x32).
"""

from __future__ import annotations

import errno
import platform
import struct

_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_LD_ABS_W, _JEQ_K, _RET_K = 0x20, 0x15, 0x06
_X32 = 0x40000000
# (AUDIT_ARCH_*, syscall numbers of add_key, request_key, keyctl) per ABI of the machine
_ABIS = {
    "x86_64": [
        (0xC000003E, (248, 249, 250, _X32 | 248, _X32 | 249, _X32 | 250)),
        (0x40000003, (286, 287, 288)),  # i386
    ],
    "aarch64": [
        (0xC00000B7, (217, 218, 219)),
        (0x40000028, (309, 310, 311)),  # arm (EABI)
    ],
}


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def keyring_filter(machine: str | None = None) -> bytes | None:
    """The filter as `struct sock_filter[]` bytes (for bwrap --seccomp), or None on an unknown machine.

    Calls under an ABI not listed fail with ENOSYS, so an unlisted compat ABI is no way around it."""
    abis = _ABIS.get(machine or platform.machine())
    if abis is None:
        return None
    blocks = []
    for arch, numbers in abis:
        blocks.append((arch, numbers, 3 + len(numbers)))  # jeq arch, ld nr, jeq nr..., ret allow
    total = 1 + sum(n for *_, n in blocks) + 2
    deny = total - 1
    prog = [_insn(_LD_ABS_W, 4)]  # seccomp_data.arch
    for arch, numbers, size in blocks:
        prog.append(_insn(_JEQ_K, arch, 0, size - 1))
        prog.append(_insn(_LD_ABS_W, 0))  # seccomp_data.nr
        for n in numbers:
            prog.append(_insn(_JEQ_K, n, deny - len(prog) - 1, 0))
        prog.append(_insn(_RET_K, _RET_ALLOW))
    prog.append(_insn(_RET_K, _RET_ERRNO | errno.ENOSYS))  # an ABI this filter does not know
    prog.append(_insn(_RET_K, _RET_ERRNO | errno.EPERM))
    assert len(prog) == total
    return b"".join(prog)


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
