"""The candidate's syscall filter: what its process may still ask the kernel once the kernel is loaded
(read-only; provided by the harness).

A compiled kernel is native code in the candidate's process; the symbols it links against are checked
(elf.py), but pointer arithmetic from an allowed function reaches the rest of libc, and a raw `syscall`
instruction needs no symbol at all. So once its native code is loaded, the candidate's process installs
a default-deny filter (classic BPF, on every thread): what Python, torch's allocator, OpenMP and the
harness's channel need stays allowed, and nothing else. In particular it may not

- make memory inaccessible or executable (`mprotect` to anything but read or read-write, `mmap` with
  PROT_EXEC or over existing pages with MAP_FIXED): no lazy outputs computed by a fault handler, no
  code loaded or generated at run time (`dlopen` needs an executable mapping);
- install signal handlers (`rt_sigaction` with a new action), set timers, or signal another process;
- start threads or processes, open files for writing, make sockets, trace or read other processes,
  watch files, or use io_uring, userfaultfd, BPF or perf events.

A denied call never runs. Where the kernel supports it, the filter hands it to a listener (the judge,
SECCOMP_RET_USER_NOTIF): the judge sees the call's number and arguments, ends the candidate and names
the call in its verdict. Without listener support the call ends the process (SIGSYS), and the judge
reports that. The judge reads the name from the system's own `unistd` header when it can.
"""

import ctypes
import errno
import os
import platform
import re
import struct

# seccomp_data: nr (int), arch (u32), instruction_pointer (u64), args[6] (u64)
_NR, _ARCH = 0, 4


def _arg(i, high=False):
    return 16 + 8 * i + (4 if high else 0)


_RET_ALLOW = 0x7FFF0000
_RET_USER_NOTIF = 0x7FC00000
_RET_KILL_PROCESS = 0x80000000
_RET_TRAP = 0x00030000
_LD, _JEQ, _JSET, _JA, _RET = 0x20, 0x15, 0x45, 0x05, 0x06
_X32_BIT = 0x40000000

PROT_READ, PROT_WRITE, PROT_EXEC = 1, 2, 4
MAP_FIXED, MAP_FIXED_NOREPLACE = 0x10, 0x100000
_WRITING = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND | 0x400000  # 0x400000: __O_TMPFILE
_TCGETS = 0x5401
_FCNTL_OK = (0, 1, 2, 3, 1030, 1033, 1034)  # F_DUPFD, F_GETFD, F_SETFD, F_GETFL, F_DUPFD_CLOEXEC, F_ADD/GET_SEALS

# name -> (x86_64, aarch64) numbers; None where that ABI has no such call
_CALLS = {
    "read": (0, 63),
    "ioctl": (16, 29),
    "write": (1, 64),
    "open": (2, None),
    "close": (3, 57),
    "stat": (4, None),
    "fstat": (5, 80),
    "lstat": (6, None),
    "lseek": (8, 62),
    "mmap": (9, 222),
    "mprotect": (10, 226),
    "munmap": (11, 215),
    "brk": (12, 214),
    "rt_sigaction": (13, 134),
    "rt_sigprocmask": (14, 135),
    "rt_sigreturn": (15, 139),
    "pread64": (17, 67),
    "readv": (19, 65),
    "writev": (20, 66),
    "access": (21, None),
    "sched_yield": (24, 124),
    "mremap": (25, 216),
    "madvise": (28, 233),
    "dup": (32, 23),
    "dup2": (33, None),
    "nanosleep": (35, 101),
    "getpid": (39, 172),
    "sendto": (44, 206),
    "recvfrom": (45, 207),
    "sendmsg": (46, 211),
    "recvmsg": (47, 212),
    "exit": (60, 93),
    "wait4": (61, 260),
    "kill": (62, 129),
    "uname": (63, 160),
    "fcntl": (72, 25),
    "ftruncate": (77, 46),
    "getcwd": (79, 17),
    "readlink": (89, None),
    "gettimeofday": (96, 169),
    "getrusage": (98, 165),
    "sysinfo": (99, 179),
    "getuid": (102, 174),
    "getgid": (104, 176),
    "geteuid": (107, 175),
    "getegid": (108, 177),
    "getppid": (110, 173),
    "gettid": (186, 178),
    "time": (201, None),
    "futex": (202, 98),
    "sched_getaffinity": (204, 123),
    "getdents64": (217, 61),
    "clock_gettime": (228, 113),
    "clock_getres": (229, 114),
    "clock_nanosleep": (230, 115),
    "exit_group": (231, 94),
    "tgkill": (234, 131),
    "openat": (257, 56),
    "newfstatat": (262, 79),
    "readlinkat": (267, 78),
    "faccessat": (269, 48),
    "prlimit64": (302, 261),
    "getcpu": (309, 168),
    "getrandom": (318, 278),
    "memfd_create": (319, 279),
    "statx": (332, 291),
    "faccessat2": (439, 439),
    "futex_waitv": (449, 449),
    "seccomp": (317, 277),
}
ALLOWED = [
    "read",
    "write",
    "close",
    "stat",
    "fstat",
    "lstat",
    "lseek",
    "munmap",
    "brk",
    "rt_sigprocmask",
    "rt_sigreturn",
    "pread64",
    "readv",
    "writev",
    "access",
    "sched_yield",
    "mremap",
    "madvise",
    "dup",
    "dup2",
    "nanosleep",
    "getpid",
    "sendto",
    "recvfrom",
    "sendmsg",
    "recvmsg",
    "exit",
    "wait4",  # the kernel host's end (the only child this process has)
    "uname",
    "ftruncate",
    "getcwd",
    "readlink",
    "gettimeofday",
    "getrusage",
    "sysinfo",
    "getuid",
    "getgid",
    "geteuid",
    "getegid",
    "getppid",
    "gettid",
    "time",
    "futex",
    "sched_getaffinity",
    "getdents64",
    "clock_gettime",
    "clock_getres",
    "clock_nanosleep",
    "exit_group",
    "newfstatat",
    "readlinkat",
    "faccessat",
    "getcpu",
    "getrandom",
    "memfd_create",
    "statx",
    "faccessat2",
    "futex_waitv",
]
"""Allowed whatever their arguments: reading files and the clock, memory, the channel, waiting, exiting."""
CHECKED = ("mmap", "mprotect", "open", "openat", "rt_sigaction", "fcntl", "ioctl", "kill", "tgkill", "prlimit64")
"""Allowed only with some arguments (see `_program`)."""
HOST_ALLOWED = [
    "read",
    "write",
    "close",
    "munmap",
    "brk",
    "rt_sigprocmask",
    "rt_sigreturn",
    "sched_yield",
    "madvise",
    "nanosleep",
    "getpid",
    "gettid",
    "sendto",
    "recvfrom",
    "sendmsg",
    "recvmsg",
    "exit",
    "exit_group",
    "futex",
    "futex_waitv",
    "sched_getaffinity",
    "clock_gettime",
    "clock_getres",
    "clock_nanosleep",
    "gettimeofday",
    "time",
    "getcpu",
    "getrandom",
]
"""What the kernel host (kernel_host.c) may ask whatever the arguments: its channel, memory, waiting,
the clock, exiting. No file, no descriptor made, no process or thread."""
HOST_CHECKED = ("mmap", "mprotect", "mremap", "rt_sigaction", "kill", "tgkill")
MREMAP_FIXED, MREMAP_DONTUNMAP = 2, 4
_ARCHES = {"x86_64": (0xC000003E, 0), "aarch64": (0xC00000B7, 1)}

ADVICE = {
    "mprotect": "a kernel computes into the output it was given; it does not change memory protection",
    "mmap": "a kernel does not map executable memory or map over memory it was given",
    "rt_sigaction": "a kernel installs no signal handlers",
    "open": "a kernel writes no files",
    "openat": "a kernel writes no files",
    "clone": "a kernel starts no threads or processes (use the OpenMP team it was given)",
    "clone3": "a kernel starts no threads or processes (use the OpenMP team it was given)",
}
"""What to do instead, for the calls a kernel is most likely to try."""


class Unsupported(Exception):
    """The filter could not be installed here (the message says why)."""


def _program(arch: str, pid: int, denied: int, allowed=ALLOWED, checked=CHECKED, child: int | None = None) -> bytes:
    audit, column = _ARCHES[arch]
    nr = {name: numbers[column] for name, numbers in _CALLS.items() if numbers[column] is not None}
    insns: list[tuple[int, int, int, int]] = []
    fixups: list[tuple[int, str]] = []  # (index of a JA, label)
    labels: dict[str, int] = {}

    def op(code, k, jt=0, jf=0):
        insns.append((code, jt, jf, k))

    def far(label):  # an unconditional jump to a label placed later (32-bit offset)
        fixups.append((len(insns), label))
        op(_JA, 0)

    def allow_if_eq(k):  # the accumulator equals k: allow; else fall through
        op(_JEQ, k, 0, 1)
        op(_RET, _RET_ALLOW)

    op(_LD, _ARCH)
    op(_JEQ, audit, 1, 0)
    op(_RET, denied)
    op(_LD, _NR)
    if arch == "x86_64":  # x32 calls share the numbers with this bit set
        op(_JSET, _X32_BIT, 0, 1)
        op(_RET, denied)
    for name in allowed:
        if name in nr:
            allow_if_eq(nr[name])
    for name in checked:
        if name in nr:
            op(_JEQ, nr[name], 0, 1)
            far(name)
    op(_RET, denied)

    def block(name):
        labels[name] = len(insns)

    block("mmap")  # never executable, never over existing pages
    op(_LD, _arg(2))
    op(_JSET, PROT_EXEC, 0, 1)
    op(_RET, denied)
    op(_LD, _arg(3))
    op(_JSET, MAP_FIXED | MAP_FIXED_NOREPLACE, 0, 1)
    op(_RET, denied)
    op(_RET, _RET_ALLOW)
    block("mremap")  # growing or moving an allocation, never over other pages
    op(_LD, _arg(3))
    op(_JSET, MREMAP_FIXED | MREMAP_DONTUNMAP, 0, 1)
    op(_RET, denied)
    op(_RET, _RET_ALLOW)
    block("mprotect")  # read or read-write only (an allocator growing its heap)
    op(_LD, _arg(2))
    allow_if_eq(PROT_READ | PROT_WRITE)
    allow_if_eq(PROT_READ)
    op(_RET, denied)
    for name, index in (("open", 1), ("openat", 2)):  # for reading only
        block(name)
        op(_LD, _arg(index))
        op(_JSET, _WRITING, 0, 1)
        op(_RET, denied)
        op(_RET, _RET_ALLOW)
    block("rt_sigaction")  # reading a handler, never setting one
    op(_LD, _arg(1))
    op(_JEQ, 0, 0, 3)
    op(_LD, _arg(1, high=True))
    allow_if_eq(0)
    op(_RET, denied)
    block("fcntl")
    op(_LD, _arg(1))
    for cmd in _FCNTL_OK:
        allow_if_eq(cmd)
    op(_RET, denied)
    block("ioctl")  # TCGETS only: Python's open() asks whether a file is a terminal
    op(_LD, _arg(1))
    allow_if_eq(_TCGETS)
    op(_RET, denied)
    for name in ("kill", "tgkill"):  # to itself (abort) and to its kernel host only
        block(name)
        op(_LD, _arg(0))
        allow_if_eq(pid)
        if child is not None:
            allow_if_eq(child)
        op(_RET, denied)
    block("prlimit64")  # reading limits, never setting them
    op(_LD, _arg(2))
    op(_JEQ, 0, 0, 3)
    op(_LD, _arg(2, high=True))
    allow_if_eq(0)
    op(_RET, denied)
    for at, label in fixups:
        code, jt, jf, _ = insns[at]
        insns[at] = (code, jt, jf, labels[label] - at - 1)
    return b"".join(struct.pack("=HBBI", *insn) for insn in insns)


def host_program(pid: int) -> bytes:
    """The kernel host's filter (classic BPF): denied calls trap (SIGSYS), and its handler reports them."""
    arch = platform.machine()
    if arch not in _ARCHES:
        raise Unsupported(f"no syscall filter for the {arch} architecture")
    return _program(arch, pid, _RET_TRAP, HOST_ALLOWED, HOST_CHECKED)


class _Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]


def install(child: int | None = None) -> int | None:
    """Install the filter on every thread of this process (which may signal itself and `child`, its
    kernel host). Returns the listener's descriptor (denied calls wait for the judge's answer), or None
    where denied calls end the process instead. Raises Unsupported where no filter can be installed."""
    arch = platform.machine()
    if arch not in _ARCHES:
        raise Unsupported(f"no syscall filter for the {arch} architecture")
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    if libc.prctl(38, 1, 0, 0, 0):  # PR_SET_NO_NEW_PRIVS
        raise Unsupported(f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(ctypes.get_errno())}")
    seccomp_nr = _CALLS["seccomp"][_ARCHES[arch][1]]
    assert seccomp_nr is not None  # every listed architecture has seccomp()
    why = ""
    # NEW_LISTENER (8) with TSYNC (1) needs TSYNC_ESRCH (16); without a listener, TSYNC alone
    for flags, denied in ((8 | 1 | 16, _RET_USER_NOTIF), (1, _RET_KILL_PROCESS)):
        code = _program(arch, os.getpid(), denied, child=child)
        prog = _Prog(len(code) // 8, code)
        fd = libc.syscall(ctypes.c_long(seccomp_nr), ctypes.c_long(1), ctypes.c_long(flags), ctypes.byref(prog))
        if fd >= 0:
            return fd if denied == _RET_USER_NOTIF else None
        err = ctypes.get_errno()
        why += f"{'listener' if denied == _RET_USER_NOTIF else 'filter'}: {errno.errorcode.get(err, err)}; "
    raise Unsupported(f"seccomp refused the filter ({why.rstrip('; ')})")


# -- the judge's side: the listener ----------------------------------------------------------------
_NOTIF = struct.Struct("=QIIiIQ6Q")  # id, pid, flags, nr, arch, instruction_pointer, args[6]
_RESP = struct.Struct("=QqiI")  # id, val, error, flags


def _ioc(nr: int, size: int) -> int:  # _IOWR('!', nr, size)
    return (3 << 30) | (size << 16) | (ord("!") << 8) | nr


NOTIF_RECV, NOTIF_SEND = _ioc(0, _NOTIF.size), _ioc(1, _RESP.size)


def receive(listener: int) -> tuple[int, list[int]] | None:
    """The denied call waiting on `listener` as (number, arguments), answered with EPERM; None if the
    caller went away meanwhile."""
    import fcntl

    buf = bytearray(_NOTIF.size)
    try:
        fcntl.ioctl(listener, NOTIF_RECV, buf)
    except OSError:
        return None
    ident, _pid, _flags, nr, _arch, _ip, *args = _NOTIF.unpack(buf)
    try:
        fcntl.ioctl(listener, NOTIF_SEND, bytearray(_RESP.pack(ident, 0, -errno.EPERM, 0)))
    except OSError:
        pass
    return nr, args


_HEADERS = {
    "x86_64": ("/usr/include/x86_64-linux-gnu/asm/unistd_64.h", "/usr/include/asm/unistd_64.h"),
    "aarch64": ("/usr/include/asm-generic/unistd.h",),
}


def name(nr: int) -> str:
    """The call's name on this machine (from the known ones, else the system's unistd header)."""
    arch = platform.machine()
    column = _ARCHES.get(arch, (0, 0))[1]
    for call, numbers in _CALLS.items():
        if numbers[column] == nr:
            return call
    for path in _HEADERS.get(arch, ()):
        try:
            with open(path) as f:
                for m in re.finditer(r"#define __NR(?:3264)?_(\w+)\s+(\d+)\b", f.read()):
                    if int(m.group(2)) == nr:
                        return m.group(1)
        except OSError:
            continue
    return f"system call {nr}"


def describe(nr: int, args) -> str:
    """One line for the verdict: the call, its telling arguments, and what a kernel does instead."""
    call = name(nr)
    detail = ""
    if call in ("mmap", "mprotect"):
        prot = args[2] & 0xFFFFFFFF
        bits = [n for bit, n in ((PROT_READ, "READ"), (PROT_WRITE, "WRITE"), (PROT_EXEC, "EXEC")) if prot & bit]
        detail = f" with PROT_{'|PROT_'.join(bits)}" if bits else " with PROT_NONE"
        if call == "mmap" and args[3] & (MAP_FIXED | MAP_FIXED_NOREPLACE):
            detail += " over a fixed address"
    elif call == "rt_sigaction":
        detail = f" for signal {args[0]}"
    advice = ADVICE.get(call, "a kernel only computes with the memory it was given")
    return f"{call}{detail}, which the kernel's process may not make ({advice})"
