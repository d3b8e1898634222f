"""The seccomp filter of every isolated job: an allow-list of the system calls jobs need, every other one
refused, and the host told which refused call a job made.

A job's namespaces hide the host's files, processes and network, but the kernel it calls is the host's,
and several of its interfaces reach past every namespace: the kernel keyring, notifications and locks on
the host's shared files (inotify, fanotify, byte-range locks: channels between jobs), io_uring,
userfaultfd, perf events, BPF, mounts, modules. So the filter allows, by name, the calls that Python,
gcc and nvcc builds, pytest and the shell's tools make (`FAMILIES`, each family with its verdict), and
refuses the rest: a call outside the list fails with ENOSYS (a program falls back, as on an older
kernel); the families the list names as refused fail with their errno. Some need their arguments read:
`clone` and `unshare` with CLONE_NEWUSER fail with EPERM (no nested user namespaces); `clone3`, whose
flags a filter cannot read, fails with ENOSYS, so that the C library falls back to `clone`; `flock` and
`fcntl`'s lock and lease commands succeed without locking anything, and `fcntl(F_NOTIFY)` (dnotify)
fails with EINVAL (a job's own processes cannot exclude each other with file locks: docs/sandbox.md);
`perf_event_open` runs only on a thread named by its id, on any CPU (the kernel judge's sampler; the
kernel's ptrace check keeps it to the job's own traceable processes), not on the caller by pid 0 nor
per CPU.
The host's page cache of the files every job reads is one memory shared by all: advice that fills or
empties it (`posix_fadvise`, `readahead`, `madvise`'s WILLNEED, COLD, PAGEOUT) succeeds without doing
anything, a read or write that would fail rather than wait for the disk (`RWF_NOWAIT`, which tells a
cached page from one that is not) fails with EOPNOTSUPP, as on a file that does not support it, and
`cachestat` is refused.

A refused call is the job's own act, so it never changes a status; but a job that needed one must not
look merely wrong. So the refusals are made by a supervisor that the last set-up step leaves between GNU
time and the job's command (`SUPERVISOR`): it installs the filter with a user-notification listener, and
every refused call of a named family waits for the supervisor, which answers with the family's errno and
reports the call's name on the host's status channel (with the job's nonce); the host lists them in
`Result.denied` and names them in `Result.message`. Where the kernel has no user notification, the
filter answers with the errno itself and nothing is reported.

`build_filter` is the small reusable part: rules by system-call name in, classic BPF out (a binary search
over the call numbers, so a call costs about ten comparisons whatever the size of the list).
"""

from __future__ import annotations

import errno
import os
import platform
import struct
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from tempering.sandbox.syscalls import AARCH64, X86_64

ALLOW = 0x7FFF0000
USER_NOTIF = 0x7FC00000
_RET_ERRNO = 0x00050000
_LD_ABS_W, _JEQ_K, _JGE_K, _JSET_K, _JA, _RET_K = 0x20, 0x15, 0x35, 0x45, 0x05, 0x06
_X32 = 0x40000000
CLONE_NEWUSER = 0x10000000
# fcntl commands that take or give up a lock or a lease: F_SETLK, F_SETLKW, F_SETLK64, F_SETLKW64,
# F_OFD_SETLK, F_OFD_SETLKW, F_SETLEASE
LOCK_COMMANDS = (6, 7, 13, 14, 37, 38, 1024)
F_NOTIFY = 1026
# advice that fills or empties the host's page cache (shared by every job and the host), by call and argument:
# posix_fadvise's WILLNEED, DONTNEED, NOREUSE (args[3]); madvise's WILLNEED, COLD, PAGEOUT (args[2]; for
# process_madvise args[3])
CACHE_ADVICE = {"fadvise64": (3, (3, 4, 5)), "madvise": (2, (3, 20, 21)), "process_madvise": (3, (3, 20, 21))}
RWF_NOWAIT = 8
"""preadv2/pwritev2's flag (args[5]) that fails a read instead of waiting for the disk: a probe of the cache."""
ABIS = {"x86_64": (0xC000003E, X86_64), "aarch64": (0xC00000B7, AARCH64)}
"""Machine -> (AUDIT_ARCH of its native ABI, its system-call table). Calls through another ABI (32-bit
compat, x32) are refused whole: ENOSYS."""


def errno_action(e: int) -> int:
    """The filter's answer that makes a call fail with errno `e` without running it (0: succeed, doing nothing)."""
    return _RET_ERRNO | e


@dataclass(frozen=True)
class When:
    """A test on one argument: the low 32 bits of args[arg] equal `value` (or, with `any_bit`, share a bit
    with it); when it holds, the call gets `action`."""

    arg: int
    value: int
    action: int
    any_bit: bool = False


Rule = int | tuple[tuple[When, ...], int]
"""An action, or argument tests tried in order and the action when none holds."""


class _Program:
    """Classic BPF with jumps to named labels, resolved at the end: conditional jumps only skip the next
    instruction; farther jumps go through `JA`, whose 32-bit offset reaches anywhere."""

    def __init__(self) -> None:
        self.insns: list[tuple[int, int, int, int, str]] = []  # (code, k, jt, jf, label of a JA)
        self.labels: dict[str, int] = {}

    def op(self, code: int, k: int = 0, jt: int = 0, jf: int = 0) -> None:
        self.insns.append((code, k, jt, jf, ""))

    def goto(self, label: str) -> None:
        self.insns.append((_JA, 0, 0, 0, label))

    def label(self, name: str) -> None:
        self.labels[name] = len(self.insns)

    def assemble(self) -> bytes:
        out = []
        for pc, (code, k, jt, jf, target) in enumerate(self.insns):
            if target:
                k = self.labels[target] - pc - 1
            out.append(struct.pack("=HBBI", code, jt, jf, k))
        return b"".join(out)


def build_filter(rules: Mapping[str, Rule], default: int, machine: str | None = None) -> bytes | None:
    """`struct sock_filter[]` bytes for this machine's native ABI (None on a machine not in `ABIS`):
    each named call gets its rule, every other call `default`, every call through another ABI ENOSYS.
    A name the machine does not have is skipped (aarch64 has no `open`, `fork`, ...)."""
    abi = ABIS.get(machine or platform.machine())
    if abi is None:
        return None
    arch, table = abi
    leaves: dict[int, int | str] = {
        table[name]: rule if isinstance(rule, int) else f"args:{name}" for name, rule in rules.items() if name in table
    }
    # ranges of call numbers with one verdict: [(first number, verdict)], the last one open-ended
    ranges: list[tuple[int, int | str]] = []
    for nr in range(max(table.values()) + 2):
        verdict = leaves.get(nr, default)
        if not ranges or ranges[-1][1] != verdict:
            ranges.append((nr, verdict))
    p = _Program()
    p.op(_LD_ABS_W, 4)  # seccomp_data.arch
    p.op(_JEQ_K, arch, 1, 0)
    p.op(_RET_K, errno_action(errno.ENOSYS))
    p.op(_LD_ABS_W, 0)  # seccomp_data.nr
    p.op(_JGE_K, _X32, 0, 1)  # x32 calls carry this bit (and no call number reaches it)
    p.op(_RET_K, errno_action(errno.ENOSYS))
    labels = iter(range(1 << 30))

    def tree(part: list[tuple[int, int | str]]) -> None:
        if len(part) == 1:
            verdict = part[0][1]
            if isinstance(verdict, str):
                p.goto(verdict)
            else:
                p.op(_RET_K, verdict)
            return
        mid, right = len(part) // 2, f"node{next(labels)}"
        p.op(_JGE_K, part[mid][0], 0, 1)
        p.goto(right)
        tree(part[:mid])
        p.label(right)
        tree(part[mid:])

    tree(ranges)
    for name, rule in rules.items():
        if name in table and not isinstance(rule, int):
            tests, otherwise = rule
            p.label(f"args:{name}")
            for t in tests:
                p.op(_LD_ABS_W, 16 + 8 * t.arg)  # low word of seccomp_data.args[arg] (little-endian)
                p.op(_JSET_K if t.any_bit else _JEQ_K, t.value, 0, 1)
                p.op(_RET_K, t.action)
            p.op(_RET_K, otherwise)
    return p.assemble()


ALLOWED = "allow"


def _names(text: str) -> tuple[str, ...]:
    return tuple(text.split())


FAKE_LOCKS = "locks succeed, locking nothing"
FAMILIES: dict[str, tuple[str, tuple[str, ...]]] = {
    # -- allowed: what Python, gcc/nvcc builds, pytest and the shell's tools call
    "files": (
        ALLOWED,
        _names(
            "read write open close stat fstat lstat lseek pread64 pwrite64 readv writev access pipe dup dup2 sendfile "
            "fsync fdatasync truncate ftruncate getdents getdents64 getcwd chdir fchdir rename mkdir rmdir creat link "
            "unlink symlink readlink chmod fchmod chown fchown lchown umask mknod statfs fstatfs sync syncfs "
            "setxattr lsetxattr fsetxattr getxattr lgetxattr fgetxattr listxattr llistxattr flistxattr removexattr "
            "lremovexattr fremovexattr utime utimes openat mkdirat mknodat fchownat futimesat newfstatat "
            "unlinkat renameat linkat symlinkat readlinkat fchmodat faccessat splice tee sync_file_range vmsplice "
            "utimensat fallocate dup3 pipe2 preadv pwritev renameat2 copy_file_range statx "
            "close_range openat2 faccessat2 fchmodat2 setxattrat getxattrat listxattrat removexattrat "
            "name_to_handle_at memfd_create statmount listmount"
        ),
    ),
    "waiting on descriptors": (
        ALLOWED,
        _names(
            "poll select pselect6 ppoll epoll_create epoll_wait epoll_ctl epoll_pwait epoll_create1 epoll_pwait2 "
            "eventfd eventfd2 signalfd signalfd4 timerfd_create timerfd_settime timerfd_gettime"
        ),
    ),
    "asynchronous I/O (libaio)": (
        ALLOWED,
        _names("io_setup io_destroy io_getevents io_submit io_cancel io_pgetevents"),
    ),
    "memory": (
        ALLOWED,
        _names(
            "mmap mprotect munmap brk mremap msync mincore mlock munlock mlockall munlockall mlock2 "
            "remap_file_pages pkey_mprotect pkey_alloc pkey_free membarrier mbind set_mempolicy get_mempolicy "
            "set_mempolicy_home_node migrate_pages move_pages map_shadow_stack mseal"
        ),
    ),
    "processes": (
        ALLOWED,
        _names(
            "fork vfork execve execveat exit exit_group wait4 waitid kill tkill tgkill getpid getppid gettid "
            "set_tid_address set_robust_list get_robust_list futex futex_waitv futex_wake futex_wait futex_requeue rseq "
            "arch_prctl prctl seccomp restart_syscall personality pidfd_open pidfd_send_signal pidfd_getfd "
            "process_mrelease ptrace process_vm_readv process_vm_writev kcmp set_thread_area get_thread_area"
        ),
    ),
    "signals": (
        ALLOWED,
        _names(
            "rt_sigaction rt_sigprocmask rt_sigreturn rt_sigpending rt_sigtimedwait rt_sigqueueinfo rt_sigsuspend "
            "rt_tgsigqueueinfo sigaltstack pause"
        ),
    ),
    "time": (
        ALLOWED,
        _names(
            "nanosleep clock_nanosleep alarm getitimer setitimer timer_create timer_settime timer_gettime "
            "timer_getoverrun timer_delete clock_gettime clock_getres gettimeofday time"
        ),
    ),
    "scheduling": (
        ALLOWED,
        _names(
            "sched_yield sched_setparam sched_getparam sched_setscheduler sched_getscheduler sched_get_priority_max "
            "sched_get_priority_min sched_rr_get_interval sched_setaffinity sched_getaffinity sched_setattr "
            "sched_getattr getpriority setpriority ioprio_set ioprio_get getcpu"
        ),
    ),
    "limits and usage": (ALLOWED, _names("getrlimit setrlimit prlimit64 getrusage times sysinfo uname")),
    "identity": (
        ALLOWED,
        _names(
            "getuid getgid setuid setgid geteuid getegid setpgid getpgrp setsid setreuid setregid getgroups setgroups "
            "setresuid getresuid setresgid getresgid getpgid setfsuid setfsgid getsid capget capset"
        ),
    ),
    "network": (
        ALLOWED,
        _names(
            "socket connect accept accept4 sendto recvfrom sendmsg recvmsg sendmmsg recvmmsg shutdown bind listen "
            "getsockname getpeername socketpair setsockopt getsockopt"
        ),
    ),
    "System V and POSIX IPC": (
        ALLOWED,
        _names(
            "shmget shmat shmctl shmdt semget semop semctl semtimedop msgget msgsnd msgrcv msgctl mq_open mq_unlink "
            "mq_timedsend mq_timedreceive mq_notify mq_getsetattr"
        ),
    ),
    "device control": (ALLOWED, ("ioctl",)),
    "randomness": (ALLOWED, ("getrandom",)),
    "Landlock (restricting oneself)": (
        ALLOWED,
        _names("landlock_create_ruleset landlock_add_rule landlock_restrict_self"),
    ),
    # -- read by their arguments
    "new processes (clone: no new user namespace)": ("clone", ("clone", "unshare")),
    "clone3 (ENOSYS: the C library falls back to clone)": ("clone3", ("clone3",)),
    "file locks (succeed, locking nothing) and fcntl (no dnotify)": ("locks", ("flock", "fcntl")),
    "page-cache advice (succeeds, changing nothing) and reads that would not wait (EOPNOTSUPP)": (
        "cache",
        ("fadvise64", "readahead", "madvise", "process_madvise", "preadv2", "pwritev2"),
    ),
    # -- refused, and reported by name
    "fanotify": ("ENOSYS", ("fanotify_init", "fanotify_mark")),
    "inotify": ("ENOSYS", ("inotify_init", "inotify_add_watch", "inotify_rm_watch", "inotify_init1")),
    "io_uring": ("ENOSYS", ("io_uring_setup", "io_uring_enter", "io_uring_register")),
    "page-cache statistics": ("ENOSYS", ("cachestat",)),
    "userfaultfd": ("ENOSYS", ("userfaultfd",)),
    "perf events (per-thread events on a named thread of the job: the kernel judge's sampler)": (
        "perf",
        ("perf_event_open",),
    ),
    "kernel keyring": ("EPERM", ("add_key", "request_key", "keyctl")),
    "secret memory": ("ENOSYS", ("memfd_secret",)),
    "BPF": ("EPERM", ("bpf",)),
    "joining namespaces": ("EPERM", ("setns",)),
    "mounts and root changes": (
        "EPERM",
        _names(
            "mount umount2 pivot_root chroot move_mount open_tree open_tree_attr fsopen fsconfig fsmount fspick "
            "mount_setattr"
        ),
    ),
    "kernel modules": (
        "EPERM",
        _names("init_module finit_module delete_module create_module get_kernel_syms query_module"),
    ),
    "system administration": (
        "EPERM",
        _names(
            "reboot kexec_load kexec_file_load swapon swapoff acct quotactl quotactl_fd syslog settimeofday "
            "clock_settime clock_adjtime adjtimex sethostname setdomainname iopl ioperm modify_ldt vhangup "
            "lookup_dcookie open_by_handle_at uselib ustat sysfs _sysctl nfsservctl"
        ),
    ),
    "security modules": ("ENOSYS", ("lsm_get_self_attr", "lsm_set_self_attr", "lsm_list_modules")),
    "unimplemented": (
        "ENOSYS",
        _names("getpmsg putpmsg afs_syscall tuxcall security vserver epoll_ctl_old epoll_wait_old"),
    ),
}
"""Family -> (verdict, system calls): `allow`; `clone`, `clone3`, `locks` (read by their arguments, see
the module's notes); or an errno name (refused with it, and reported)."""


def refused() -> dict[str, int]:
    """{system call: errno} of every call a named family refuses (what the supervisor answers, by name);
    clone and unshare with CLONE_NEWUSER, fcntl(F_NOTIFY) and preadv2/pwritev2 with RWF_NOWAIT included."""
    out = {name: getattr(errno, verdict) for verdict, names in FAMILIES.values() if verdict.isupper() for name in names}
    out["perf_event_open"] = errno.ENOSYS  # but on a named thread of the job (see job_rules)
    nowait = {"preadv2": errno.EOPNOTSUPP, "pwritev2": errno.EOPNOTSUPP}
    return out | {"clone": errno.EPERM, "unshare": errno.EPERM, "fcntl": errno.EINVAL} | nowait


def job_rules(notify: bool) -> dict[str, Rule]:
    """The job filter's rules; `notify`: a refused call of a named family waits for the supervisor (which
    answers with its errno and reports it) instead of failing at once."""
    refuse = refused()

    def no(name: str) -> int:
        return USER_NOTIF if notify else errno_action(refuse[name])

    rules: dict[str, Rule] = {}
    for verdict, names in FAMILIES.values():
        for name in names:
            if verdict == ALLOWED:
                rules[name] = ALLOW
            elif verdict == "clone":
                rules[name] = ((When(0, CLONE_NEWUSER, no(name), any_bit=True),), ALLOW)
            elif verdict == "clone3":
                rules[name] = errno_action(errno.ENOSYS)
            elif verdict == "locks" and name == "flock":
                rules[name] = errno_action(0)
            elif verdict == "locks":
                fake = tuple(When(1, cmd, errno_action(0)) for cmd in LOCK_COMMANDS)
                rules[name] = ((*fake, When(1, F_NOTIFY, no(name))), ALLOW)
            elif verdict == "cache" and name in CACHE_ADVICE:
                arg, advice = CACHE_ADVICE[name]
                rules[name] = (tuple(When(arg, a, errno_action(0)) for a in advice), ALLOW)
            elif verdict == "cache" and name == "readahead":
                rules[name] = errno_action(0)
            elif verdict == "cache":
                rules[name] = ((When(5, RWF_NOWAIT, no(name), any_bit=True),), ALLOW)
            elif verdict == "perf":  # pid 0 (the caller) refused, cpu -1 (one thread on any CPU) allowed
                rules[name] = ((When(1, 0, no(name)), When(2, 0xFFFFFFFF, ALLOW)), no(name))
            else:
                rules[name] = no(name)
    return rules


def job_filter(machine: str | None = None, notify: bool = False) -> bytes | None:
    """The job filter for this machine (None where `ABIS` has no table for it): calls outside the list fail
    with ENOSYS; `notify` as in `job_rules`."""
    return build_filter(job_rules(notify), errno_action(errno.ENOSYS), machine)


def refused_table(machine: str | None = None) -> str:
    """`nr:name:errno,...` of the refused calls, for the supervisor (native ABI)."""
    _, table = ABIS.get(machine or platform.machine(), (0, {}))
    return ",".join(f"{table[n]}:{n}:{e}" for n, e in sorted(refused().items()) if n in table)


SUPERVISOR = """\
import ctypes, errno, fcntl, os, signal, struct, sys, threading
nonce = os.environ.pop("TIME").split(" ", 1)[0]
notify, plain = bytes.fromhex(sys.argv[1]), bytes.fromhex(sys.argv[2])
table = {int(nr): (name, int(e)) for nr, name, e in (x.split(":") for x in sys.argv[3].split(",") if x)}
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
class Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]
def fail(what):
    os.write(2, ("sandbox: seccomp: " + what + ": " + os.strerror(ctypes.get_errno()) + "\\n").encode())
    os._exit(125)
if libc.prctl(38, 1, 0, 0, 0):
    fail("no_new_privs")
seccomp = {"x86_64": 317, "aarch64": 277}.get(os.uname().machine)
listener = -1
if seccomp and notify:  # SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER
    listener = libc.syscall(seccomp, 1, 8, ctypes.byref(Prog(len(notify) // 8, notify)))
if listener < 0 and libc.prctl(22, 2, ctypes.byref(Prog(len(plain) // 8, plain)), 0, 0):
    fail("filter")
os.write(3, (nonce + " started\\n").encode())
child = os.fork()
if child == 0:
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))
    try:
        os.execvp(sys.argv[4], sys.argv[4:])
    except OSError as e:
        os.write(2, f"sandbox: cannot run {sys.argv[4]}: {e.strerror}\\n".encode())
        os._exit(127)
libc.prctl(4, 0, 0, 0, 0)  # not dumpable: a job of the same uid cannot open our descriptors or trace us
null = os.open("/dev/null", os.O_RDWR)
for fd in (0, 1, 2):
    os.dup2(null, fd)
def serve():
    seen = set()
    while True:
        req = bytearray(80)
        try:
            fcntl.ioctl(listener, 0xC0502100, req)  # SECCOMP_IOCTL_NOTIF_RECV
        except OSError as e:
            if e.errno == errno.EBADF:
                return
            continue  # the caller died meanwhile
        nid, nr = struct.unpack_from("=Q", req, 0)[0], struct.unpack_from("=i", req, 16)[0]
        name, err = table.get(nr, (f"#{nr}", 38))
        if name not in seen and len(seen) < 32:  # reported before the call returns: the job cannot outrun it
            seen.add(name)
            os.write(3, f"{nonce} denied {name}\\n".encode())
        try:
            fcntl.ioctl(listener, 0xC0182101, bytearray(struct.pack("=QqiI", nid, 0, -err, 0)))  # NOTIF_SEND
        except OSError:
            pass
if listener >= 0:
    threading.Thread(target=serve, daemon=True).start()
_, status = os.waitpid(child, 0)
if os.WIFSIGNALED(status):
    sig = os.WTERMSIG(status)
    if sig not in (signal.SIGKILL, signal.SIGSTOP):
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
    os.kill(os.getpid(), sig)
os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))
"""
"""The last set-up step, run by the backends between GNU time and the job's command (python3 -I -S -c
SUPERVISOR NOTIFY PLAIN TABLE CMD...): installs the filter (with a listener, else the plain one), reports
`started` on the status fd, and runs the job's command in a child with no descriptor above 2 and without
the TIME variable (GNU time's format, carrying the job's nonce). It stays, out of the job's reach (root,
or not dumpable), answers the refused calls of named families and reports each name once, and ends as
its child did (the same exit code, or killed by the same signal), so that GNU time reports the job's
end."""


def supervisor_argv(machine: str | None = None) -> list[str] | None:
    """The argv of the last set-up step before a job's command (the job's own argv follows), or None on a
    machine without a filter."""
    notify, plain = job_filter(machine, notify=True), job_filter(machine)
    if notify is None or plain is None:
        return None
    # the interpreter itself, not a venv's link to it: the supervisor runs as root without DAC capabilities,
    # and cannot pass through a venv that lies below the job's own /tmp (a checkout under /tmp); it needs
    # only the standard library
    python = os.path.realpath(sys.executable)
    return [python, "-I", "-S", "-c", SUPERVISOR, notify.hex(), plain.hex(), refused_table(machine)]
