"""The seccomp allow-list: every system call of the table gets its family's verdict (checked by running
the filter's BPF on each number), the table agrees with the kernel's headers and libseccomp installed
here, the workloads jobs run (Python, gcc and nvcc builds, pytest, the shell's tools) make no refused
call, and a refused call is named in the result."""

import ctypes
import ctypes.util
import errno
import os
import re
import shutil
import struct
from pathlib import Path

import pytest

from tempering.sandbox import Job, Limits, Sandbox
from tempering.sandbox import seccomp as sc
from tempering.sandbox.syscalls import AARCH64, X86_64

ALLOW, USER_NOTIF = sc.ALLOW, sc.USER_NOTIF
ENOSYS, EPERM, EINVAL, FAKE_OK = (sc.errno_action(e) for e in (errno.ENOSYS, errno.EPERM, errno.EINVAL, 0))
CLONE_NEWUSER, SIGCHLD = 0x10000000, 17


def bpf(prog: bytes, arch: int, nr: int, args: tuple[int, ...] = ()) -> int:
    """Run a classic-BPF seccomp program on one call (the kernel's semantics of the instructions used)."""
    insns = [struct.unpack("=HBBI", prog[i : i + 8]) for i in range(0, len(prog), 8)]
    data = {0: nr & 0xFFFFFFFF, 4: arch} | {16 + 8 * i: a & 0xFFFFFFFF for i, a in enumerate(args)}
    acc, pc = 0, 0
    for _ in range(len(insns)):  # forward jumps only: at most one pass
        code, jt, jf, k = insns[pc]
        if code == 0x20:  # ld [k]
            acc, pc = data.get(k, 0), pc + 1
        elif code == 0x15:  # jeq #k
            pc += 1 + (jt if acc == k else jf)
        elif code == 0x35:  # jge #k
            pc += 1 + (jt if acc >= k else jf)
        elif code == 0x45:  # jset #k
            pc += 1 + (jt if acc & k else jf)
        elif code == 0x05:  # ja k
            pc += 1 + k
        elif code == 0x06:  # ret #k
            return k
        else:
            raise AssertionError(f"unexpected instruction {code:#x}")
    raise AssertionError("the program ran off its end")


MACHINES = [("x86_64", 0xC000003E, X86_64), ("aarch64", 0xC00000B7, AARCH64)]


def expected(name: str, notify: bool, args: tuple[int, ...] = ()) -> int:
    verdict = next(v for v, names in sc.FAMILIES.values() if name in names)
    refused = USER_NOTIF if notify else sc.errno_action(sc.refused()[name]) if name in sc.refused() else None
    if verdict == sc.ALLOWED:
        return ALLOW
    if verdict == "clone":
        return refused if args and args[0] & CLONE_NEWUSER else ALLOW
    if verdict == "clone3":
        return ENOSYS
    if verdict == "cache":
        if name == "readahead":
            return FAKE_OK
        if name in sc.CACHE_ADVICE:
            arg, advice = sc.CACHE_ADVICE[name]
            return FAKE_OK if len(args) > arg and args[arg] in advice else ALLOW
        return refused if len(args) > 5 and args[5] & sc.RWF_NOWAIT else ALLOW
    if verdict == "locks":
        if name == "flock":
            return FAKE_OK
        cmd = args[1] if len(args) > 1 else 0
        return FAKE_OK if cmd in sc.LOCK_COMMANDS else refused if cmd == sc.F_NOTIFY else ALLOW
    return refused


@pytest.mark.parametrize("machine, arch, table", MACHINES, ids=[m[0] for m in MACHINES])
@pytest.mark.parametrize("notify", [False, True], ids=["errno", "notify"])
def test_every_call_of_the_table_gets_its_familys_verdict(machine, arch, table, notify):
    prog = sc.job_filter(machine, notify=notify)
    families = {n for _, names in sc.FAMILIES.values() for n in names}
    assert set(table) <= families, sorted(set(table) - families)  # every call is in a family
    for name, nr in table.items():
        page_cache = [(3, 0, 4096, 4), (3, 0, 4096, 2), (0, 4096, 21), (0, 4096, 4), (3, 0, 1, 0, 0, 8 | 2)]
        for args in [(), (17,), (CLONE_NEWUSER | SIGCHLD,), (3, 6), (3, 1026), (3, 1), *page_cache]:
            assert bpf(prog, arch, nr, args) == expected(name, notify, args), (name, nr, args)
    for nr in (max(table.values()) + 1, 1000, 0x3FFFFFFF, 0xFFFFFFFF):  # not in the table: ENOSYS
        assert bpf(prog, arch, nr) == ENOSYS
    for nr in (0, 1, 59):
        assert bpf(prog, arch, nr | 0x40000000) == ENOSYS  # x32
    assert bpf(prog, 0x40000003, 1) == ENOSYS and bpf(prog, 0x40000028, 3) == ENOSYS  # i386, arm compat
    assert bpf(prog, 0x12345678, 1) == ENOSYS
    assert sc.job_filter("sparc") is None


def test_the_families_the_issue_names_are_refused_and_the_tools_calls_allowed():
    refused = sc.refused()
    for name in ("fanotify_init", "fanotify_mark", "io_uring_setup", "io_uring_enter", "userfaultfd",
                 "perf_event_open", "keyctl", "add_key", "request_key", "memfd_secret", "inotify_init1", "bpf",
                 "mount", "setns", "open_by_handle_at", "cachestat"):  # fmt: skip
        assert name in refused, name
    allowed = {n for v, names in sc.FAMILIES.values() if v == sc.ALLOWED for n in names}
    assert {"read", "openat", "clone", "execve", "mmap", "socket", "statx", "getdents64", "wait4"} - allowed == {
        "clone"
    }
    assert {
        "futex",
        "rseq",
        "prlimit64",
        "getrandom",
        "pipe2",
        "ioctl",
        "memfd_create",
        "landlock_create_ruleset",
    } <= allowed


def _header_table(path: str) -> dict[str, int]:
    return {m[0]: int(m[1]) for m in re.findall(r"#define __NR_(\w+)\s+(\d+)", Path(path).read_text())}


@pytest.mark.skipif(not os.path.exists("/usr/include/x86_64-linux-gnu/asm/unistd_64.h"), reason="no kernel headers")
def test_the_x86_64_table_is_the_kernels():
    theirs = _header_table("/usr/include/x86_64-linux-gnu/asm/unistd_64.h")
    assert {n: X86_64[n] for n in theirs} == theirs  # every call the headers name, at the same number
    assert set(X86_64) - set(theirs) <= {n for n, nr in X86_64.items() if nr > max(theirs.values())}


@pytest.mark.skipif(ctypes.util.find_library("seccomp") is None, reason="libseccomp is not installed")
def test_the_tables_agree_with_libseccomp():
    lib = ctypes.CDLL(ctypes.util.find_library("seccomp"))
    lib.seccomp_syscall_resolve_name_arch.restype = ctypes.c_int
    for _, arch, table in MACHINES:
        theirs = {n: lib.seccomp_syscall_resolve_name_arch(arch, n.encode()) for n in X86_64}
        theirs = {n: nr for n, nr in theirs.items() if nr >= 0}
        known = {n: nr for n, nr in table.items() if n in theirs}
        assert known == {n: theirs[n] for n in known}, arch
        assert set(theirs) <= set(table), (arch, sorted(set(theirs) - set(table)))


CALLS = """import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
nrs = {calls}
for name, args in [("io_uring_setup", (1, 0)), ("userfaultfd", (0,)), ("fanotify_init", (0, 0)),
                   ("perf_event_open", (0, 0, -1, -1, 0)), ("memfd_secret", (0,)), ("keyctl", (0, 0))]:
    r = libc.syscall(nrs[name], *args)
    print(name, errno.errorcode.get(ctypes.get_errno()) if r < 0 else "RAN")
"""


def test_a_refused_call_fails_with_its_errno_and_is_named(filtered):
    calls = {n: X86_64[n] if os.uname().machine == "x86_64" else AARCH64[n] for n in sc.refused()}
    res = Sandbox(backend=filtered).run_sync(Job(cmd=["python3", "-c", CALLS.format(calls=calls), "x"]))
    assert res.status == "ok", res.stderr
    assert res.stdout.split("\n")[:6] == [
        "io_uring_setup ENOSYS",
        "userfaultfd ENOSYS",
        "fanotify_init ENOSYS",
        "perf_event_open ENOSYS",
        "memfd_secret ENOSYS",
        "keyctl EPERM",
    ]
    names = ["io_uring_setup", "userfaultfd", "fanotify_init", "perf_event_open", "memfd_secret", "keyctl"]
    assert res.denied == names and ", ".join(names) in res.message


def test_a_job_that_fails_for_want_of_a_refused_call_says_which(filtered):
    code = "import os\nfd = os.inotify_init1(0) if hasattr(os, 'inotify_init1') else __import__('ctypes').CDLL(None).inotify_init1(0)\n"
    code += "raise SystemExit(0 if fd >= 0 else 'no inotify here')\n"
    res = Sandbox(backend=filtered).run_sync(Job(cmd=["python3", "-c", code]))
    assert (res.status, res.exit_code, res.denied) == ("nonzero_exit", 1, ["inotify_init1"])
    assert (
        res.message == "exit code 1; the sandbox refused system calls it made: inotify_init1 (docs/sandbox.md, seccomp)"
    )


WORKLOAD = r"""set -e
python3 -c 'import json, sqlite3, ssl, subprocess, threading, multiprocessing as mp, asyncio, tempfile
with mp.Pool(2) as p: assert p.map(abs, [-1, -2]) == [1, 2]
asyncio.run(asyncio.sleep(0)); subprocess.run(["true"], check=True); sqlite3.connect(":memory:").execute("select 1")'
printf 'int main(void){return 0;}\n' > a.c && if command -v gcc > /dev/null; then gcc -O2 a.c -o a && ./a; fi
printf 'def test_one():\n    assert 1\n' > test_x.py && python3 -m pytest -q -p no:cacheprovider test_x.py > /dev/null
ls -la / > /dev/null; find . -name '*.c' | xargs grep -l main > /dev/null; tar czf s.tgz a.c && tar xzf s.tgz -C /tmp
sort /etc/passwd | uniq | wc -l > /dev/null; sed -n 1p /etc/passwd | awk -F: '{print $1}' > /dev/null; du -s . > /dev/null
cp a.c b.c && mv b.c c.c && rm c.c && mkdir -p d/e && ln -s ../a.c d/l && stat d/l > /dev/null; date > /dev/null
"""


def test_the_workloads_jobs_run_make_no_refused_call(filtered):
    limits = Limits(wall_s=120, cpu_s=120, memory_mb=4096)
    res = Sandbox(backend=filtered).run_sync(Job(cmd=["bash", "w.sh"], files={"w.sh": WORKLOAD}, limits=limits))
    assert (res.status, res.denied) == ("ok", []), (res.message, res.stderr[-2000:])


@pytest.mark.skipif(not shutil.which("nvcc"), reason="no CUDA toolkit here")
def test_an_nvcc_build_makes_no_refused_call(filtered):
    nvcc = os.path.realpath(shutil.which("nvcc"))
    root = str(Path(nvcc).parents[1])
    kernel = "__global__ void add(float *x) { x[threadIdx.x] += 1.0f; }\n"
    job = Job(
        cmd=["sh", "-c", f"{root}/bin/nvcc -c k.cu -o k.o && test -s k.o"],
        files={"k.cu": kernel},
        ro_binds=[root] + [p for p in ("/usr/local/cuda",) if os.path.realpath(p) != root and os.path.exists(p)],
        limits=Limits(wall_s=300, cpu_s=300, memory_mb=8192, disk_mb=1024),
    )
    res = Sandbox(backend=filtered).run_sync(job)
    assert (res.status, res.denied) == ("ok", []), (res.message, res.stderr[-2000:])


PAGE_CACHE = """import os
fd = os.open(os.__file__, os.O_RDONLY)
print("fadvise", os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED))
try:
    os.preadv(fd, [bytearray(16)], 0, os.RWF_NOWAIT)
    print("nowait RAN")
except OSError as e:
    print("nowait", e.errno)
print("plain", os.preadv(fd, [bytearray(16)], 0, 0))
"""


def test_page_cache_advice_changes_nothing_and_a_read_that_would_not_wait_is_refused(filtered):
    res = Sandbox(backend=filtered).run_sync(Job(cmd=["python3", "-c", PAGE_CACHE]))
    assert res.stdout.split() == ["fadvise", "None", "nowait", str(errno.EOPNOTSUPP), "plain", "16"], res.stderr
    assert res.denied == ["preadv2"]
