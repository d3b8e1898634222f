"""The adversarial suite: hostile jobs and answers that every backend and every path that judges must
contain, controls that must come out as they are, and how to tell.

A job-API attack (`Attack`) is a small program run as a job, plus a check that looks at the `Result`
*and* at the host afterwards (files that must not exist, processes that must be gone, a server that must
not have been reached). The paths above the job API (terminal tasks, agents' episodes, the code judge,
the kernel worker) bring their own cases, by module: `Case`s (`PROVIDERS`, `register`) or `Attack`s
(`PATH_SUITES`, the code judge's): a hostile answer that must be scored 0, an honest wrong one that must
be scored 0, an honest right one that must pass. Everything runs only in the isolating backends: the plain `subprocess` backend runs jobs as
the caller on the host, where an attack would do its damage.

    python -m tempering.sandbox.attacks [backend ...]     # prints the table for this machine
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import platform
import random
import secrets
import shutil
import signal
import socket
import stat
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tempering.errors import UserError
from tempering.sandbox import seccomp
from tempering.sandbox.backends import ISOLATED
from tempering.sandbox.cache import BuildCache
from tempering.sandbox.job import Job, Limits, Result
from tempering.sandbox.sandbox import Sandbox


@dataclass
class Context:
    """What one attack may aim at, made fresh for each run."""

    token: str = field(default_factory=lambda: secrets.token_hex(8))
    """Random marker: file names, secrets and process names that the checks look for."""
    project_dir: str = str(Path(__file__).resolve().parents[3])
    """The project folder (for an editable install, the repository)."""
    port: int = 0
    """Port of a TCP server on the host's 127.0.0.1 that must never see a connection."""
    connections: list = field(default_factory=list)
    """Connections the server accepted (must stay empty)."""
    victim_dir: str = ""
    """Host path of another job's workdir (running at the same time)."""
    host_dir: str = ""
    """A fresh host folder under the host's /tmp for this attack's host-side files (removed after)."""
    venv_parent: str = os.path.dirname(sys.prefix)
    """The folder that holds the project's venv (a job must not be able to rename it)."""
    sandbox_root: str = ""
    """Host folder of the sandbox's job folders."""

    @property
    def perl_nrs(self) -> str:
        """The same as a perl hash's body."""
        _, table = seccomp.ABIS.get(platform.machine(), (0, {}))
        return ", ".join(f"{name} => {nr}" for name, nr in table.items())

    @property
    def nrs(self) -> str:
        """{system call: number} of this machine's native ABI (for programs that make raw calls)."""
        _, table = seccomp.ABIS.get(platform.machine(), (0, {}))
        return repr(table)

    @property
    def secret(self) -> str:
        return f"secret-{self.token}"

    @property
    def sleep_s(self) -> str:
        """A distinctive sleep length: a process with it on its command line is a leftover daemon."""
        return f"{3000 + int(self.token[:4], 16) % 1000}.{int(self.token[4:8], 16) % 1000:03d}"


@dataclass
class Attack:
    """One hostile job and how to tell that it was contained."""

    name: str
    """Short identifier."""
    what: str
    """The attack in a few words (for docs/sandbox.md)."""
    code: str
    """Python program run as the job; `{token}`, `{port}`, ... are filled from the Context."""
    check: Callable[[Result, Context], str]
    """Empty string when the attack was contained, else what went wrong."""
    limits: Limits = field(default_factory=lambda: Limits(wall_s=5.0, cpu_s=5.0))
    needs_victim: bool = False
    """Run next to another job whose workdir is the target."""
    readonly_files: dict[str, str] = field(default_factory=dict)
    """Read-only files of the job."""
    runs: int = 1
    """Times the job runs, one after the other (the same slot, so the same uid); the check sees the last."""
    needs: str = ""
    """What the machine must offer for the backend to contain it (a `Sandbox.not_contained` topic)."""
    cmd: list[str] = field(default_factory=lambda: ["python3", "attack.py"])
    """The job's command (filled from the Context like `code`), e.g. a later step after the attack."""
    files: dict[str, str] = field(default_factory=dict)
    """More files of the job (filled from the Context), e.g. a shell script."""
    env: dict[str, str] = field(default_factory=dict)
    """Environment of the job (filled from the Context)."""
    ro_binds: list[str] = field(default_factory=list)
    """Host paths bound read-only (filled from the Context; `setup` makes them)."""
    setup: Callable[[Context], None] | None = None
    """Host-side preparation in `Context.host_dir` before the job runs."""
    partner: str = ""
    """Python program of a job started first and running beside the attack, with the secret in its
    workdir's secret.txt (the other end of a channel between jobs); it writes `ready` when set."""
    drive: Callable[[Sandbox, Attack, Context], Awaitable[str]] | None = None
    """Runs the attack itself instead of one job (a flow of several calls); returns the verdict."""
    premise: Callable[[Sandbox], str] | None = None
    """Why the attack cannot be judged on this sandbox ('' when it can): what it tries does not exist there."""


def _leftovers(ctx: Context) -> list[int]:
    """Host processes whose command line carries this attack's marker."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if ctx.sleep_s.encode() in f.read():
                        found.append(int(entry))
            except OSError:
                pass
    return found


def _status(*allowed: str) -> Callable[[Result, Context], str]:
    def check(res: Result, ctx: Context) -> str:
        return "" if res.status in allowed else f"status {res.status} ({res.message}), wanted {'/'.join(allowed)}"

    return check


def _all(*checks: Callable[[Result, Context], str]) -> Callable[[Result, Context], str]:
    def check(res: Result, ctx: Context) -> str:
        return "; ".join(m for m in (c(res, ctx) for c in checks) if m)

    return check


def _no_file(path_of: Callable[[Context], str]) -> Callable[[Result, Context], str]:
    def check(res: Result, ctx: Context) -> str:
        p = path_of(ctx)
        if os.path.lexists(p):
            os.remove(p)
            return f"{p} was written"
        return ""

    return check


def _not_in_output(word_of: Callable[[Context], str]) -> Callable[[Result, Context], str]:
    def check(res: Result, ctx: Context) -> str:
        return f"{word_of(ctx)!r} reached the job" if word_of(ctx) in res.stdout + res.stderr else ""

    return check


def _no_leftovers(res: Result, ctx: Context) -> str:
    left = _leftovers(ctx)
    return f"processes {left} outlived the job" if left else ""


def _no_connection(res: Result, ctx: Context) -> str:
    return "the host server accepted a connection" if ctx.connections or "CONNECTED" in res.stdout else ""


def _words(*words: str) -> Callable[[Result, Context], str]:
    """The job printed none of `words` (each marks a step of the attack that worked)."""

    def check(res: Result, ctx: Context) -> str:
        found = [w for w in words if w in res.stdout]
        return f"the job reported {', '.join(found)}: {res.stdout[-300:]!r}" if found else ""

    return check


def _measured(res: Result, ctx: Context) -> str:
    # a Python interpreter holds several MiB: a smaller peak is a forged usage line
    return "" if res.peak_memory_mb > 2 else f"forged usage: peak {res.peak_memory_mb:g} MiB"


def _held_at_most(res: Result, ctx: Context) -> str:
    cap = STORAGE_LIMITS.memory_mb + STORAGE_LIMITS.disk_mb
    held = [int(line.split()[1]) for line in res.stdout.splitlines() if line.startswith("held ")]
    if res.status == "ok" or (held and held[-1] > cap):
        return f"the job held {held[-1] if held else '?'} MiB beyond its limits (status {res.status})"
    return ""


def _key_not_in_host_keyrings(res: Result, ctx: Context) -> str:
    try:
        with open("/proc/keys") as f:
            return "the job's key reached a keyring of the host" if ctx.token in f.read() else ""
    except OSError:
        return ""


FLOOD_LIMITS = Limits(wall_s=150.0, cpu_s=150.0)
"""Room for a flood to reach the inode limit where making files is slow (gVisor's file system: about 2000 a
second on a loaded machine), so that the limit, not the wall clock, is what stops it."""
STORAGE_LIMITS = Limits(wall_s=30.0, cpu_s=30.0, memory_mb=128, disk_mb=32, fsize_mb=16)

_STATUS_CHANNEL = """import os
junk = b"x" * 5000 + b"\\n" + b"1 0.00 0.00\\n" * 100 + b"started\\n"
open_fds = [fd for fd in range(3, 1024) if not os.path.isdir(f"/proc/self/fd/{{fd}}") and os.path.exists(f"/proc/self/fd/{{fd}}")]
print("FDS", open_fds)
for fd in open_fds:
    try:
        os.write(fd, junk)
        print("WROTE fd", fd)
    except OSError as e:
        print("denied fd", fd, e)
pids = [p for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()]
nonces = set()
for pid in pids:
    try:
        for var in open(f"/proc/{{pid}}/environ", "rb").read().split(b"\\0"):
            if var.startswith(b"TIME="):
                nonces.add(var[5:].split(b" ")[0])
                print("READ_NONCE of", pid)
    except OSError:
        pass
junk = b"".join(n + b" 1 0.00 0.00 0\\n" + n + b" started\\n" for n in nonces) + junk  # forged, with any nonce read
for path in ("/.tempering/status/log", "/dev/fd/3", "/proc/1/fd/3"):
    try:
        with open(path, "ab") as f:
            f.write(junk[:4096])
        print("WROTE", path)
    except OSError:
        pass
for pid in pids:
    try:
        fds = os.listdir(f"/proc/{{pid}}/fd")
    except OSError:
        continue
    for fd in fds:
        try:
            if not os.readlink(f"/proc/{{pid}}/fd/{{fd}}").startswith("pipe:"):
                continue
            w = os.open(f"/proc/{{pid}}/fd/{{fd}}", os.O_WRONLY | os.O_NONBLOCK)
            os.write(w, junk[:4096])
            print("WROTE_OTHER", pid, fd)
        except OSError:
            pass
"""

_HIDDEN_STORAGE = """import os
held, fds, chunk = 0, [], b"x" * (4 << 20)
def hidden(i):
    kind = i % 4
    if kind == 0:
        return os.memfd_create(f"m{{i}}")
    path = {{1: f"d{{i}}", 2: f"/tmp/d{{i}}", 3: f"/dev/shm/d{{i}}"}}[kind]
    try:
        fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    except OSError:
        return os.memfd_create(f"m{{i}}")
    os.unlink(path)
    return fd
for i in range(1000):
    fd = hidden(i)
    fds.append(fd)
    for _ in range(3):
        os.write(fd, chunk)
        held += 4
    print("held", held, flush=True)
    if held >= 512:
        break
print("HELD", held)
"""

_KEYRING = """import ctypes, platform
add_key, request_key, keyctl = {{"x86_64": (248, 249, 250), "aarch64": (217, 218, 219)}}[platform.machine()]
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
desc, payload = b"tempering-attack-{token}", b"{secret}"
buf = ctypes.create_string_buffer(256)
for ring in (-3, -4, -5):  # session, user, user-session keyrings
    kid = libc.syscall(keyctl, 10, ring, b"user", desc, 0)  # KEYCTL_SEARCH
    if kid > 0 and libc.syscall(keyctl, 11, kid, buf, 256) > 0:  # KEYCTL_READ
        print("FOUND", ring, buf.value)
for ring in (-3, -4, -5):
    if libc.syscall(add_key, b"user", desc, payload, len(payload), ring) > 0:
        print("stored", ring)
    else:
        print("denied", ring, ctypes.get_errno())
"""

_READONLY_PARENT = """import os
for old, new in (("tests", "tests-old"), ("tests/unit", "tests/unit-old")):
    try:
        os.rename(old, new)
        print("RENAMED", old)
    except OSError as e:
        print("denied rename", old, e)
for path in ("tests/unit/check.txt", "tests/unit/extra.txt", "tests/extra.txt"):
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path + ".new", "w") as f:
            f.write("planted")
        os.replace(path + ".new", path)
        print("PLANTED", path)
    except OSError as e:
        print("denied plant", path, e)
print("READ", open("tests/unit/check.txt").read())
"""


# -- the second red team's classes, each at least twice, written differently


def _genuine_check(ctx: Context) -> None:
    """A host tool the job's later step runs, below the job's /tmp (as a venv or a cache artifact can be)."""
    for rel, text in (("tool/check", "GENUINE"), ("venv/bin/python3", "GENUINE")):
        path = os.path.join(ctx.host_dir, rel)
        os.makedirs(os.path.dirname(path), 0o755, exist_ok=True)
        with open(path, "w") as f:
            f.write(f"#!/bin/sh\necho {text}\n")
        os.chmod(path, 0o755)
    for root, dirs, _ in os.walk(ctx.host_dir):
        for d in [root] + [os.path.join(root, n) for n in dirs]:
            os.chmod(d, 0o755)


def _genuine_ran(res: Result, ctx: Context) -> str:
    if "FAKE" in res.stdout or "GENUINE" not in res.stdout:
        return f"the later step ran the job's planted program: {res.stdout[-300:]!r}"
    return ""


_PLANT_BIND_PARENT = """import os
top = "{host_dir}"
for old in (top, top + "/tool"):
    try:
        os.rename(old, old + "-old")
        print("RENAMED", old)
    except OSError as e:
        print("denied rename", old, e)
try:
    os.makedirs(top + "/tool", exist_ok=True)
    with open(top + "/tool/check.new", "w") as f:
        f.write("#!/bin/sh\\necho FAKE\\n")
    os.chmod(top + "/tool/check.new", 0o755)
    os.replace(top + "/tool/check.new", top + "/tool/check")
    print("PLANTED")
except OSError as e:
    print("denied plant", e)
"""

_PLANT_ON_PATH = """# move each folder above python3 on PATH (and the root's own links and folders) aside; link ours in
mkdir -p /tmp/mine/bin && printf '#!/bin/sh\\necho FAKE\\n' > /tmp/mine/bin/python3 && chmod +x /tmp/mine/bin/python3
for d in {host_dir} {host_dir}/venv {host_dir}/venv/bin {venv_parent} /bin /usr/local; do
    if mv "$d" "$d.old" 2>/dev/null || rm "$d" 2>/dev/null; then
        echo "MOVED $d"
        ln -s /tmp/mine "$d" 2>/dev/null && echo "LINKED $d"
    fi
done
ln -sf /tmp/mine/bin/python3 {host_dir}/venv/bin/python3 2>/dev/null && echo "LINKED python3"
echo tried
"""

_USAGE_GRANDCHILD = """import os, time
r, w = os.pipe()
if os.fork() == 0:
    if os.fork() == 0:  # the grandchild: its parent exits, it is reaped by the namespace's first process
        block = bytearray(100 << 20)
        for i in range(0, len(block), 4096):
            block[i] = 1
        t = time.process_time()
        while time.process_time() - t < 1.0:
            pass
        print("burned", time.process_time(), flush=True)
        os.write(w, b"x")
        os._exit(0)
    os._exit(0)
os.close(w)
os.read(r, 1)  # the grandchild is done
time.sleep(0.2)
print("main done")
"""

_USAGE_OUTLIVES = """# a background process that outlives the job's command (killed when the job ends) burns CPU and memory
python3 -c '
import time
block = bytearray(100 << 20)
for i in range(0, len(block), 4096):
    block[i] = 1
t = time.process_time()
while True:
    if time.process_time() - t > 0.05:
        t = time.process_time()
        print("burned", t, flush=True)
' &
sleep 1.5
echo main done
"""


def _usage_covered(res: Result, ctx: Context) -> str:
    burned = [float(line.split()[1]) for line in res.stdout.splitlines() if line.startswith("burned ")]
    if not burned:
        return f"the attack did not run: {res.status} {res.stdout[-200:]!r} {res.stderr[-200:]!r}"
    problems = []
    if res.cpu_s < 0.9 * burned[-1]:
        problems.append(f"cpu_s {res.cpu_s:.2f} hides the {burned[-1]:.2f} s a process of the job used")
    if res.peak_memory_mb < 90:
        problems.append(f"peak_memory_mb {res.peak_memory_mb:.0f} hides the 100 MiB a process of the job held")
    return "; ".join(problems)


def _exactly(status: str, **fields) -> Callable[[Result, Context], str]:
    def check(res: Result, ctx: Context) -> str:
        got = {"status": res.status, **{k: getattr(res, k) for k in fields}}
        want = {"status": status, **fields}
        return "" if got == want else f"forged: {got} ({res.message}), wanted {want}"

    return check


_FORGED_EXIT_CODE = """import sys
sys.stderr.write("MemoryError\\nstd::bad_alloc\\nFile too large\\nKilled\\n")
sys.exit(152)  # 128 + SIGXCPU
"""

_FORGED_SIGNAL_XCPU = """echo "MemoryError" >&2
echo "Cannot allocate memory" >&2
kill -XCPU $$
"""

_FORGED_SIGNAL_XFSZ = """import os, signal
print("File too large", flush=True)
signal.signal(signal.SIGXFSZ, signal.SIG_DFL)  # Python ignores it by default
os.kill(os.getpid(), signal.SIGXFSZ)
"""

_LOCK_SENDER = """import fcntl, os, struct, time
secret = open("secret.txt", "rb").read()
f = open("/etc/passwd", "rb")
for i in range(len(secret) * 8):
    if secret[i // 8] >> (i % 8) & 1:  # one read lock on byte i for each bit that is 1
        fcntl.fcntl(f, fcntl.F_SETLK, struct.pack("hhqqi", fcntl.F_RDLCK, 0, i, 1, 0))
open("ready", "w").write("x")
time.sleep(6)
"""

_LOCK_RECEIVER = """import fcntl, struct
f = open("/etc/passwd", "rb")
bits = []
for i in range(len("{secret}") * 8):
    got = fcntl.fcntl(f, fcntl.F_GETLK, struct.pack("hhqqi", fcntl.F_WRLCK, 0, i, 1, 0))
    bits.append(struct.unpack("hhqqi", got)[0] != fcntl.F_UNLCK)
data = bytes(sum(bits[8 * j + k] << k for k in range(8)) for j in range(len(bits) // 8))
print("locked bits", sum(bits))
print("GOT", data.decode("latin-1"))
"""

_DISTINCT_FILES = """inodes = {{{{}}}}
for name in sorted(os.listdir("/usr/bin")):  # one name per file (a hard link would lock its twin)
    st = os.stat("/usr/bin/" + name)
    if os.path.isfile("/usr/bin/" + name) and st.st_ino not in inodes:
        inodes[st.st_ino] = name
names = list(inodes.values())[:{n}]
"""

_FLOCK_SENDER = (
    """import ctypes, fcntl, os, time
secret = open("secret.txt", "rb").read()
"""
    + _DISTINCT_FILES.format(n="len(secret) * 8")
    + """
held = []
for i, name in enumerate(names):
    if secret[i // 8] >> (i % 8) & 1:  # a whole-file lock on one shared file per bit that is 1
        fd = os.open("/usr/bin/" + name, os.O_RDONLY)
        fcntl.flock(fd, fcntl.LOCK_EX)
        held.append(fd)
        try:  # and an open-file-description lock on byte i of /dev/null
            fcntl.fcntl(fd, 37, __import__("struct").pack("hhqqi", fcntl.F_RDLCK, 0, 0, 1, 0))
        except OSError:
            pass
open("ready", "w").write("x")
end = time.time() + 6
while time.time() < end:  # and a notification channel: open the files of the 1 bits again and again
    for i, name in enumerate(names):
        if secret[i // 8] >> (i % 8) & 1:
            os.close(os.open("/usr/bin/" + name, os.O_RDONLY))
    time.sleep(0.01)
"""
)

_FLOCK_RECEIVER = (
    """import ctypes, fcntl, os, struct, time
n = len("{secret}") * 8
"""
    + _DISTINCT_FILES.format(n="n")
    + """
bits = []
for name in names:
    fd = os.open("/usr/bin/" + name, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        bits.append(0)
    except BlockingIOError:
        bits.append(1)
    finally:
        os.close(fd)
print("flock", bytes(sum(bits[8 * j + k] << k for k in range(8)) for j in range(n // 8)).decode("latin-1"))
libc = ctypes.CDLL(None, use_errno=True)
ino = libc.inotify_init1(0)
if ino < 0:
    print("no inotify", os.strerror(ctypes.get_errno()))
else:
    wds = {{libc.inotify_add_watch(ino, ("/usr/bin/" + name).encode(), 0x20): i for i, name in enumerate(names)}}
    os.set_blocking(ino, False)
    seen = set()
    end = time.time() + 1.0
    while time.time() < end:
        try:
            buf = os.read(ino, 65536)
        except BlockingIOError:
            time.sleep(0.01)
            continue
        off = 0
        while off < len(buf):
            wd, mask, cookie, length = struct.unpack_from("iIII", buf, off)
            seen.add(wds.get(wd))
            off += 16 + length
    bits = [int(i in seen) for i in range(n)]
    print("inotify", bytes(sum(bits[8 * j + k] << k for k in range(8)) for j in range(n // 8)).decode("latin-1"))
"""
)

_INODE_FLOOD = """import os
i = 0
while True:
    os.close(os.open(f"e{{i}}", os.O_CREAT | os.O_WRONLY, 0o644))  # empty: no blocks, one inode each
    i += 1
    if i % 10000 == 0:
        print("made", i, flush=True)
"""

_INODE_FLOOD_LINKS = """import os
os.makedirs("/tmp/f", exist_ok=True)
open("/tmp/f/one", "w").close()
i = 0
while True:  # names without blocks: hard links to one inode, symlinks, empty folders, spread over folders
    d = f"/tmp/f/d{{i // 1000}}"
    if i % 1000 == 0:
        os.mkdir(d)
    kind = i % 3
    if kind == 0:
        os.link("/tmp/f/one", f"{{d}}/h{{i}}")
    elif kind == 1:
        os.symlink("/etc/passwd", f"{{d}}/s{{i}}")
    else:
        os.mkdir(f"{{d}}/m{{i}}")
    i += 1
    if i % 10000 == 0:
        print("made", i, flush=True)
"""

_DEEP_TREE = """import os, time
for i in range(5000):  # deeper than any path can name (PATH_MAX) and than a recursive walk goes
    os.mkdir("d")
    os.chdir("d")
open("bottom", "w").write("x" * 4096)
print("deep", flush=True)
time.sleep(30)
"""


def _inode_limit_held(res: Result, ctx: Context) -> str:
    return (
        ""
        if res.status == "output_limit" and "inodes=" in res.message
        else f"not the inode limit: {res.status} ({res.message})"
    )


def _no_leftover_folders_in(root: str) -> str:
    left = [p.name for p in Path(root).iterdir() if p.name.startswith("job-")]
    return f"job folders {left} were not removed" if left else ""


async def _flood_beside_a_neighbour(sandbox: Sandbox, attack: Attack, ctx: Context) -> str:
    """The flood runs next to a short job; the event loop's longest pause is measured meanwhile."""
    gaps: list[float] = []
    done = asyncio.Event()

    async def tick() -> None:
        last = time.monotonic()
        while not done.is_set():
            await asyncio.sleep(0.01)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    ticker = asyncio.ensure_future(tick())
    flood = asyncio.ensure_future(sandbox.run(_job_of(attack, ctx)))
    neighbour = await sandbox.run(Job(cmd=["sleep", "1.5"], limits=Limits(wall_s=4.0)))
    res = await flood
    done.set()
    await ticker
    problems = [attack.check(res, ctx)]
    if not neighbour.ok:
        problems.append(f"the neighbour job ended {neighbour.status} ({neighbour.message})")
    if max(gaps) > 1.0:
        problems.append(f"the host's event loop stalled {max(gaps):.1f} s")
    problems.append(_no_leftover_folders_in(ctx.sandbox_root))
    return "; ".join(p for p in problems if p)


def _victim_file(ctx: Context) -> None:
    """Host files a job's link may point at, with modes that must not change."""
    with open(os.path.join(ctx.host_dir, "victim.txt"), "w") as f:
        f.write("host data")
    os.chmod(os.path.join(ctx.host_dir, "victim.txt"), 0o600)
    os.mkdir(os.path.join(ctx.host_dir, "victim-dir"), 0o711)
    os.chmod(os.path.join(ctx.host_dir, "victim-dir"), 0o711)


def _victim_modes_kept(res: Result, ctx: Context) -> str:
    got = {
        name: stat.S_IMODE(os.lstat(os.path.join(ctx.host_dir, name)).st_mode) for name in ("victim.txt", "victim-dir")
    }
    return "" if got == {"victim.txt": 0o600, "victim-dir": 0o711} else f"the host's files changed mode: {got}"


_CLEANUP_SYMLINK = """import os
os.makedirs("locked/inner")
os.symlink("{host_dir}/victim.txt", "locked/inner/link")
os.symlink("{host_dir}/victim.txt", "locked/link")
os.symlink("{host_dir}/victim.txt", "/tmp/link")
os.mkdir("readonly")
os.symlink("{host_dir}/victim.txt", "readonly/link")
os.chmod("locked/inner", 0)
os.chmod("locked", 0)  # the host cannot list or empty it without changing its mode
os.chmod("readonly", 0o500)  # nor remove the link in it
print("locked")
"""

_CLEANUP_SYMLINK_DIRS = """mkdir -p a/b /tmp/c
ln -s {host_dir}/victim-dir a/b/x
ln -s {host_dir}/victim-dir /tmp/c/x
ln -s {host_dir}/victim.txt a/y
chmod 000 a/b /tmp/c
chmod 500 a
chmod 000 /tmp
echo locked
"""

_NESTED_USERNS = """import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
CLONE_NEWUSER, SIGCHLD = 0x10000000, 17
clone, clone3 = {{"x86_64": (56, 435), "aarch64": (220, 435)}}[os.uname().machine]
if libc.unshare(CLONE_NEWUSER) == 0:
    print("NESTED unshare", open("/proc/self/uid_map").read().strip())
else:
    print("denied unshare", os.strerror(ctypes.get_errno()))
pid = libc.syscall(clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0)
if pid == 0:
    os._exit(0)
if pid > 0:
    os.waitpid(pid, 0)
    print("NESTED clone")
else:
    print("denied clone", os.strerror(ctypes.get_errno()))
class CloneArgs(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in ("flags", "pidfd", "child_tid", "parent_tid", "exit_signal",
                                                "stack", "stack_size", "tls")]
args = CloneArgs(flags=CLONE_NEWUSER, exit_signal=SIGCHLD)
pid = libc.syscall(clone3, ctypes.byref(args), ctypes.sizeof(args))
if pid == 0:
    os._exit(0)
if pid > 0:
    os.waitpid(pid, 0)
    print("NESTED clone3")
else:
    print("denied clone3", os.strerror(ctypes.get_errno()))
"""

_NESTED_USERNS_TOOLS = """unshare --user --map-root-user id -u 2>&1 && echo "NESTED by unshare"
if command -v bwrap >/dev/null; then
    bwrap --unshare-user --uid 0 --ro-bind / / id -u 2>&1 && echo "NESTED by bwrap"
fi
python3 -c 'import os; os.unshare(os.CLONE_NEWUSER); print("NESTED by os.unshare")' 2>&1 | tail -1
echo tried
"""


async def _cache_keeps_no_limit_failure(sandbox: Sandbox, attack: Attack, ctx: Context) -> str:
    """A build that times out under tight limits is never served from the cache, and generous limits
    make another entry."""
    cache = BuildCache(os.path.join(ctx.host_dir, "cache"))
    cmd = ["sh", "-c", f"sleep 2; echo built-{ctx.token} > out"]
    tight, roomy = Limits(wall_s=1.0, cpu_s=5.0), Limits(wall_s=20.0, cpu_s=20.0)
    first = await cache.build(sandbox, {"in.txt": ctx.token}, cmd, "out", limits=tight)
    again = await cache.build(sandbox, {"in.txt": ctx.token}, cmd, "out", limits=tight)
    roomy_build = await cache.build(sandbox, {"in.txt": ctx.token}, cmd, "out", limits=roomy)
    problems = []
    if first.result.status != "timeout":
        problems.append(f"the tight build ended {first.result.status}, not timeout")
    if again.cached:
        problems.append(f"the cache served a {again.result.status} it kept from a failed build")
    if not roomy_build.result.ok or roomy_build.cached or roomy_build.path is None:
        problems.append(f"the roomy build was {roomy_build.result.status} (cached: {roomy_build.cached})")
    elif roomy_build.path.read_text().strip() != f"built-{ctx.token}":
        problems.append("the artifact is not the build's")
    if cache.key({"in.txt": ctx.token}, cmd, limits=tight) == cache.key({"in.txt": ctx.token}, cmd, limits=roomy):
        problems.append("the cache key ignores the limits")
    return "; ".join(problems)


async def _cache_keeps_no_flaky_failure(sandbox: Sandbox, attack: Attack, ctx: Context) -> str:
    """A build that fails once (an input it reads is not there yet) is built again by the next caller."""
    cache = BuildCache(os.path.join(ctx.host_dir, "cache"))
    inputs = os.path.join(ctx.host_dir, "inputs")
    os.mkdir(inputs, 0o755)
    os.chmod(inputs, 0o755)
    cmd = ["sh", "-c", f"cat {inputs}/part > out || exit 3"]
    args: tuple[dict[str, str | bytes], list[str], str] = ({"in.txt": ctx.token}, cmd, "out")
    first = await cache.build(sandbox, *args, ro_binds=[inputs])
    with open(os.path.join(inputs, "part"), "w") as f:
        f.write(f"part-{ctx.token}\n")
    os.chmod(os.path.join(inputs, "part"), 0o644)
    second = await cache.build(sandbox, *args, ro_binds=[inputs])
    third = await cache.build(sandbox, *args, ro_binds=[inputs])
    problems = []
    if first.result.status != "nonzero_exit":
        problems.append(f"the first build ended {first.result.status} ({first.result.stderr[-200:]!r})")
    if second.cached or not second.result.ok:
        problems.append(f"the second build was {second.result.status} (cached: {second.cached}): the failure was kept")
    if not third.cached or third.path is None or third.path.read_text().strip() != f"part-{ctx.token}":
        problems.append("the successful build was not served from the cache")
    return "; ".join(problems)


# -- the fourth round's classes between jobs and past the namespaces, each twice, written differently

_FANOTIFY_SENDER = """import os, time
open("ready", "w").write("x")
end = time.time() + 6
while time.time() < end:  # the other end of a notification channel: opening a shared file again and again
    for path in ("/etc/passwd", "/etc/hostname"):
        os.close(os.open(path, os.O_RDONLY))
    time.sleep(0.005)
"""

_FANOTIFY_RECEIVER = """import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
FAN_REPORT_FID, FAN_CLASS_NOTIF, FAN_MARK_ADD, FAN_OPEN, FAN_ACCESS = 0x200, 0, 1, 0x20, 0x1
for flags in (FAN_CLASS_NOTIF, FAN_REPORT_FID):  # as root would, then as an unprivileged user may (5.13+)
    fd = libc.fanotify_init(flags | 0x2, os.O_RDONLY)  # FAN_NONBLOCK
    if fd < 0:
        print("denied fanotify_init", flags, os.strerror(ctypes.get_errno()))
        continue
    if libc.fanotify_mark(fd, FAN_MARK_ADD, ctypes.c_uint64(FAN_OPEN | FAN_ACCESS), -100, b"/etc/passwd"):
        print("denied fanotify_mark", os.strerror(ctypes.get_errno()))
        continue
    time.sleep(1.0)
    try:
        print("RECEIVED", len(os.read(fd, 65536)), "bytes of events from another job")
    except BlockingIOError:
        print("no events")
"""

_FANOTIFY_PERL = r"""#!/usr/bin/perl
# fanotify through perl's syscall(): init, mark /etc/hostname, read what another job's opens produce
my %nr = ({perl_nrs});
for my $flags (0x2, 0x202) {{  # FAN_NONBLOCK, then with FAN_REPORT_FID
    my $fd = syscall($nr{{fanotify_init}}, $flags, 0);
    if ($fd < 0) {{ print "denied fanotify_init $!\n"; next; }}
    my $path = "/etc/hostname";
    my $m = syscall($nr{{fanotify_mark}}, $fd, 1, 0x21, -100, $path);
    if ($m < 0) {{ print "denied fanotify_mark $!\n"; next; }}
    sleep 1;
    open(my $fh, "<&=", $fd);
    my $n = sysread($fh, my $buf, 65536);
    print defined($n) && $n > 0 ? "RECEIVED $n bytes\n" : "no events\n";
}}
"""

_KERNEL_INTERFACES = """import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
nr = {nrs}
buf = ctypes.create_string_buffer(256)
attr = ctypes.create_string_buffer(b"\\x01\\0\\0\\0\\x80" + b"\\0" * 123)  # PERF_TYPE_SOFTWARE, size 128
calls = [
    ("io_uring_setup", (4, buf)),
    ("userfaultfd", (0,)),
    ("perf_event_open", (attr, 0, -1, -1, 0)),
    ("memfd_secret", (0,)),
    ("bpf", (5, buf, 128)),  # BPF_PROG_LOAD of nothing
    ("keyctl", (0, -3, 0)),  # KEYCTL_GET_KEYRING_ID of the session keyring
]
for name, args in calls:
    if name not in nr:
        continue
    r = libc.syscall(nr[name], *args)
    print(("OPENED " if r >= 0 else "denied ") + name, r, os.strerror(ctypes.get_errno()) if r < 0 else "")
"""

_KERNEL_INTERFACES_PERL = r"""#!/usr/bin/perl
# the same interfaces through perl's syscall(), with arguments packed by hand
my %nr = ({perl_nrs});
my $params = "\0" x 120;
my $attr = pack("LLQ", 1, 128, 0) . ("\0" x 112);
my ($type, $desc, $payload) = ("user", "k", "v");
my @calls = (["io_uring_setup", 8, $params], ["userfaultfd", 0x800], ["perf_event_open", $attr, 0, -1, -1, 0],
             ["memfd_secret", 0], ["keyctl", 0, -4, 0], ["add_key", $type, $desc, $payload, 1, -3]);
for my $c (@calls) {{
    my ($name, @args) = @$c;
    next unless exists $nr{{$name}};
    my $r = syscall($nr{{$name}}, @args);
    print $r >= 0 ? "OPENED $name $r\n" : "denied $name $!\n";
}}
"""


def _host_kernel_only(sandbox: Sandbox) -> str:
    """The premise of attacks on the host kernel's interfaces: gVisor's application kernel answers the job's
    calls itself, so what they reach there is its own, not the host's."""
    if sandbox.backend == "gvisor":
        return "inside gVisor these calls reach the application kernel, not the host's (the filter is not loaded there)"
    return ""


def _host_clock(sandbox: Sandbox) -> str:
    if sandbox.backend == "gvisor":
        return (
            "the job's CPU clock inside gVisor is the application kernel's count, which runs ahead of the host's "
            "under load: it cannot be the yardstick of cpu_s (the sandbox's cgroup) there"
        )
    return ""


# -- channels through the host kernel's shared state: one job writes, a later one reads ---------------------
_PAGE_BITS = 32

_PAGE_SENDER = """import os
bits = {bits!r}
for i, bit in enumerate(bits):  # reading caches a file's page (1); DONTNEED drops it again (0)
    fd = os.open(f"{pages}/p{{i}}", os.O_RDONLY)
    os.read(fd, 4096)
    if bit == "0":
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
"""

_PAGE_RECEIVER = """import os
out = ""
for i in range({n}):  # a read that must not wait for the disk fails where the page is not cached
    fd = os.open(f"{pages}/p{{i}}", os.O_RDONLY)
    try:
        os.preadv(fd, [bytearray(4096)], 0, os.RWF_NOWAIT)
        out += "1"
    except BlockingIOError:
        out += "0"
    except OSError as e:
        out += "?"
        err = e
    os.close(fd)
print("BITS", out)
"""

_PAGE_SENDER_RAW = """import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
nr = {nrs}
for i, bit in enumerate({bits!r}):  # raw calls: readahead sets, fadvise64(DONTNEED) clears
    fd = os.open(f"{pages}/p{{i}}", os.O_RDONLY)
    if bit == "1":
        libc.syscall(nr["readahead"], fd, ctypes.c_long(0), ctypes.c_size_t(4096))
    else:
        libc.syscall(nr["fadvise64"], fd, ctypes.c_long(0), ctypes.c_long(0), 4)
    os.close(fd)
import time
time.sleep(0.2)  # readahead's reads finish
"""

_PAGE_RECEIVER_RAW = """import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
nr = {nrs}
class Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
buf = ctypes.create_string_buffer(4096)
iov = Iovec(ctypes.cast(buf, ctypes.c_void_p), 4096)
out = ""
for i in range({n}):  # preadv2(..., RWF_NOWAIT) by number: EAGAIN where the page is not cached
    fd = os.open(f"{pages}/p{{i}}", os.O_RDONLY)
    r = libc.syscall(nr["preadv2"], fd, ctypes.byref(iov), 1, ctypes.c_long(0), ctypes.c_long(0), 8)
    out += "1" if r >= 0 else "0" if ctypes.get_errno() == 11 else "?"
    os.close(fd)
print("BITS", out)
"""


def _page_cache_observable() -> str:
    """Why the host cannot see a page-cache channel in its temporary folder ('' when it can): the folder
    must keep pages that DONTNEED drops and RWF_NOWAIT tells apart (a disk, not a RAM disk)."""
    with tempfile.NamedTemporaryFile(dir="/tmp") as f:
        f.write(os.urandom(4096))
        f.flush()
        os.fsync(f.fileno())
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        try:
            os.preadv(f.fileno(), [bytearray(4096)], 0, os.RWF_NOWAIT)
            return "the host's /tmp keeps every page cached (a RAM disk): the channel cannot be observed here"
        except BlockingIOError:
            return ""
        except OSError as e:
            return f"RWF_NOWAIT does not work on the host's /tmp ({e.strerror}): the channel cannot be observed here"


def _page_cache_channel(sender: str, receiver: str) -> Callable[[Sandbox, Attack, Context], Awaitable[str]]:
    """A job sets and clears the cached state of files every job can read, a later job reads it back."""

    async def drive(sandbox: Sandbox, attack: Attack, ctx: Context) -> str:
        pages = os.path.join(ctx.host_dir, "pages")
        os.mkdir(pages, 0o755)
        for i in range(_PAGE_BITS):
            with open(os.path.join(pages, f"p{i}"), "wb") as f:
                f.write(os.urandom(4096))
                f.flush()
                os.fsync(f.fileno())
                os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
            os.chmod(os.path.join(pages, f"p{i}"), 0o644)
        bits = format(int(ctx.token[:8], 16), f"0{_PAGE_BITS}b")
        fill = {"bits": bits, "pages": pages, "n": _PAGE_BITS, "nrs": ctx.nrs}
        sent = await sandbox.run(Job(cmd=["python3", "-c", sender.format(**fill)], ro_binds=[pages]))
        got = await sandbox.run(Job(cmd=["python3", "-c", receiver.format(**fill)], ro_binds=[pages]))
        read = got.stdout.split("BITS", 1)[-1].strip()
        if read == bits:
            return f"the receiver read the sender's {_PAGE_BITS} bits through the page cache ({sent.status})"
        return "" if got.status == "ok" else f"the receiver ended {got.status}: {got.message} {got.stderr[-300:]}"

    return drive


_INODE_SENDER = """import os
target = {mark}
for _ in range(10000):  # make files until the RAM disk's next inode number is the secret (mod 4096)
    fd = os.open("/tmp/x", os.O_CREAT | os.O_WRONLY, 0o600)
    ino = os.fstat(fd).st_ino
    os.close(fd)
    os.unlink("/tmp/x")
    if ino % 4096 == target:
        break
"""

_INODE_RECEIVER = (
    "import os\nos.close(os.open('/tmp/probe', os.O_CREAT, 0o600))\nprint('INO', os.stat('/tmp/probe').st_ino)\n"
)

_INODE_SENDER_SH = """target={mark}
for i in $(seq 10000); do  # mkdir and stat: the same counter, moved by folders
  mkdir /tmp/d$i && ino=$(ls -di /tmp/d$i) && ino=${{ino%% *}} && rmdir /tmp/d$i
  [ $((ino % 4096)) -eq $target ] && break
done
"""


def _inode_counter_channel(sender: list[str]) -> Callable[[Sandbox, Attack, Context], Awaitable[str]]:
    """A job moves its RAM disk's next inode number to a secret, a later job reads it from a new file."""

    async def drive(sandbox: Sandbox, attack: Attack, ctx: Context) -> str:
        # never a fresh disk's first numbers, nor so near 4096 that they come right after it (mod 4096)
        mark = 256 + int(ctx.token[:4], 16) % 3584
        sent = await sandbox.run(Job(cmd=[a.format(mark=mark) for a in sender], limits=Limits(wall_s=60, cpu_s=60)))
        got = await sandbox.run(Job(cmd=["python3", "-c", _INODE_RECEIVER]))
        try:
            ino = int(got.stdout.split("INO", 1)[1].split()[0])
        except (IndexError, ValueError):
            return f"the receiver could not read an inode number ({got.status}: {got.stderr[-300:]})"
        if 0 < (ino - mark) % 4096 <= 64:  # a few files of other jobs may come between
            return f"the receiver's new file got inode {ino}: {mark} (mod 4096) came from the sender ({sent.status})"
        return ""

    return drive


_TIMING_BITS = 32
_TIMING_AGREE = 28
"""Bits of 32 a receiver must get right for a read-timing channel to count as open: by chance (both files
of every pair equally fast) 28 or more agree once in about 27,000 runs."""
TIMING_ROUNDS = 3
TIMING_CLASS = "the time a read of a file every job sees takes (page cache)"

_TIMING_SENDER = """pool = {pool}
for i, b in enumerate("{bits}"):  # of each pair, the file the bit names is read: its pages are cached
    with open(pool[2 * i + int(b)], "rb") as f:
        f.read()
"""

_TIMING_RECEIVER = """import time
pool = {pool}
def took(p):
    start = time.perf_counter_ns()
    with open(p, "rb") as f:
        f.read()
    return time.perf_counter_ns() - start
# of each pair, the file read faster is the cached one: a comparison within the pair, whatever the load
print("BITS", "".join("1" if took(pool[2 * i + 1]) < took(pool[2 * i]) else "0" for i in range({n})))
"""

_TIMING_SENDER_MMAP = """import mmap, os
pool = {pool}
for i, b in enumerate("{bits}"):  # a page fault on a mapping caches the page as a read does
    fd = os.open(pool[2 * i + int(b)], os.O_RDONLY)
    with mmap.mmap(fd, 0, prot=mmap.PROT_READ) as m:
        sum(m[k] for k in range(0, len(m), 4096))
    os.close(fd)
"""

_TIMING_RECEIVER_MMAP = """import mmap, os, time
pool = {pool}
def fault(p):  # the first touch of a mapped page: a minor fault if cached, a read from disk if not
    fd = os.open(p, os.O_RDONLY)
    with mmap.mmap(fd, 0, prot=mmap.PROT_READ) as m:
        start = time.monotonic_ns()
        m[0]
        took = time.monotonic_ns() - start
    os.close(fd)
    return took
bits = ""
for i in range({n}):
    bits += "1" if fault(pool[2 * i + 1]) < fault(pool[2 * i]) else "0"
print("BITS", bits)
"""


def _timing_pool(sandbox: Sandbox, seed: str) -> list[str]:
    """Pairs of files every job sees and nothing else here reads: the kernel's headers in the folders
    below /usr/include/linux (netfilter, usb, ...), which the C library's headers never include (unlike
    the top folder's, or byteorder/, which any compile on the machine would cache)."""
    top = sandbox.image_dir + "/usr/include/linux"
    files = [
        os.path.join(root, n)[len(sandbox.image_dir) :]
        for root, _, names in os.walk(top)
        if root != top and "byteorder" not in root
        for n in names
        if os.path.getsize(os.path.join(root, n)) >= 1024
    ]
    return random.Random(seed).sample(sorted(files), 2 * _TIMING_BITS)


def _evict(sandbox: Sandbox, pool: list[str]) -> None:
    """Drop the pool's pages from the host's page cache where it can (a RAM image's copies cannot be)."""
    for p in pool:
        for host in {p, sandbox.image_dir + p}:
            if os.path.isfile(host):
                fd = os.open(host, os.O_RDONLY)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                os.close(fd)


RunScript = Callable[[str], Awaitable[tuple[str, str]]]
"""Runs a Python script in a path's job: (status, output)."""


async def read_timing(sandbox: Sandbox, token: str, run: RunScript, mmap: bool = False) -> str:
    """A job reads one file of each pair, a later job times a read of both (the hidden run of turn t and
    the public run of turn t+1 of a code task; two terminal tasks' commands; two kernel candidates). Three
    rounds, each bit decided by their majority: a read slowed by the machine's load in one round is
    outvoted, and where the channel is closed a majority of coin flips is a coin flip. `sandbox` is the
    pool the path's jobs run on (its image gives the files), `run` runs a script as the path runs one."""
    sender, receiver = (_TIMING_SENDER_MMAP, _TIMING_RECEIVER_MMAP) if mmap else (_TIMING_SENDER, _TIMING_RECEIVER)
    pool = _timing_pool(sandbox, token)
    bits = format(int(token[:8], 16), f"0{_TIMING_BITS}b")
    fill = {"bits": bits, "pool": repr(pool), "n": _TIMING_BITS}
    rounds = []
    sent = ""
    for _ in range(TIMING_ROUNDS):
        _evict(sandbox, pool)
        sent, _ = await run(sender.format(**fill))
        status, out = await run(receiver.format(**fill))
        read = out.split("BITS", 1)[-1].strip().split()[0] if "BITS" in out else ""
        if status != "ok" or len(read) != _TIMING_BITS:
            return f"the receiver ended {status}: {out[-300:]}"
        rounds.append(read)
    voted = "".join(max("01", key=[r[i] for r in rounds].count) for i in range(_TIMING_BITS))
    agree = sum(a == b for a, b in zip(voted, bits))
    if agree >= _TIMING_AGREE:
        each = ", ".join(str(sum(a == b for a, b in zip(r, bits))) for r in rounds)
        return (
            f"the receiver read {agree} of the sender's {_TIMING_BITS} bits from read times ({each} by round; {sent})"
        )
    return ""


def _read_timing_channel(mmap: bool) -> Callable[[Sandbox, Attack, Context], Awaitable[str]]:
    """`read_timing` between two jobs of the job API."""

    async def drive(sandbox: Sandbox, attack: Attack, ctx: Context) -> str:
        async def run(script: str) -> tuple[str, str]:
            slow = Limits(wall_s=120, cpu_s=60)  # a loaded machine, under gVisor's ptrace, is slow to start Python
            res = await sandbox.run(Job(cmd=["python3", "-c", script], limits=slow))
            return res.status, res.stdout + (f"\n{res.message} {res.stderr}" if res.status != "ok" else "")

        return await read_timing(sandbox, ctx.token, run, mmap)

    return drive


_CLASSES = {
    "resource limits": "infinite_loop cpu_limit fork_bomb memory_bomb big_file disk_fill output_flood ignore_sigterm raise_rlimits",
    "the host's network, environment and files": "network env_secret proc_environ write_project write_host_tmp output_symlink",
    "another job's folder": "other_workdir write_other_workdir",
    "outliving or killing the sandbox": "kill_parent daemon",
    "a forged status": "status_channel forged_exit_code forged_signal_xcpu forged_signal_xfsz",
    "storage the limits do not see": "hidden_storage",
    "the kernel keyring": "keyring",
    "a binary planted on a path the host trusts": "readonly_parent plant_bind_parent plant_on_path",
    "usage hidden from the host": "usage_grandchild usage_outlives",
    "channels between concurrent jobs": "lock_channel flock_channel fanotify_channel fanotify_channel_perl",
    "channels through the host kernel's shared state (page cache, RAM disk counters)": (
        "page_cache_channel page_cache_channel_raw inode_counter_channel inode_counter_channel_sh"
    ),
    TIMING_CLASS: "read_timing_channel read_timing_channel_mmap",
    "cache poisoning": "cache_limit_poison cache_flaky_poison",
    "an inode flood and a host stalled by its removal": "inode_flood inode_flood_links deep_tree",
    "cleanup that follows a job's link": "cleanup_symlink cleanup_symlink_dirs",
    "nested user namespaces": "nested_userns nested_userns_tools",
    "kernel interfaces past the namespaces (io_uring, userfaultfd, perf events, secret memory, BPF, keyring)": (
        "kernel_interfaces kernel_interfaces_perl"
    ),
}
"""Class of attack -> the job-API attacks of that class (the results' `attacks` rows)."""


ATTACKS = [
    Attack(
        "infinite_loop",
        "busy loop forever",
        "while True:\n    pass\n",
        _status("timeout"),
        Limits(wall_s=1.0, cpu_s=30.0),
    ),
    Attack(
        "cpu_limit",
        "burn CPU past cpu_s (wall clock is generous)",
        "while True:\n    pass\n",
        _status("timeout"),
        Limits(wall_s=30.0, cpu_s=1.0),
    ),
    Attack(
        "fork_bomb",
        "fork in a loop, children too",
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
        _all(_status("timeout"), _no_leftovers),
        Limits(wall_s=2.0, cpu_s=5.0, nproc=32),
    ),
    Attack(
        "memory_bomb",
        "allocate 100 MiB blocks until something gives",
        "blocks = []\nwhile True:\n    blocks.append(bytearray(100 << 20))\n",
        _status(
            "memory_exceeded", "nonzero_exit"
        ),  # the job sees its allocation fail (RLIMIT_AS), or the cgroup kills it
        Limits(wall_s=10.0, memory_mb=512),
    ),
    Attack(
        "big_file",
        "write one file past fsize_mb",
        "with open('big', 'wb') as f:\n    while True:\n        f.write(b'x' * (1 << 20))\n",
        _status("output_limit"),
        Limits(wall_s=10.0, fsize_mb=8),
    ),
    Attack(
        "disk_fill",
        "fill the disk with many files under fsize_mb",
        "i = 0\nwhile True:\n    with open(f'f{{i}}', 'wb') as f:\n        f.write(b'x' * (4 << 20))\n    i += 1\n",
        _status("output_limit"),
        Limits(wall_s=20.0, fsize_mb=8, disk_mb=32),
    ),
    Attack(
        "output_flood",
        "print without end",
        "import sys\nwhile True:\n    sys.stdout.write('y' * 4096)\n",
        _all(
            _status("output_limit"),
            lambda r, c: "" if r.stdout_truncated and len(r.stdout) == 4096 else "stdout not capped at 4096",
        ),
        Limits(wall_s=10.0, output_bytes=4096),
    ),
    Attack(
        "network",
        "connect to a TCP server on the host's 127.0.0.1",
        "import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=2)\n    print('CONNECTED')\n"
        "except OSError as e:\n    print('BLOCKED', e)\n",
        _all(_status("ok"), _no_connection),
    ),
    Attack(
        "env_secret",
        "read a secret from the host's environment",
        "import os\nprint(dict(os.environ))\n",
        _all(_status("ok"), _not_in_output(lambda c: c.secret)),
    ),
    Attack(
        "proc_environ",
        "read the secret from other processes' /proc/*/environ",
        "import os\nfor p in os.listdir('/proc'):\n    try:\n        print(open(f'/proc/{{p}}/environ').read())\n"
        "    except Exception:\n        pass\n",
        _all(_status("ok"), _not_in_output(lambda c: c.secret)),
    ),
    Attack(
        "write_project",
        "write into the project folder and the venv",
        "import sys\nfor p in ['{project_dir}/attack-{token}', sys.prefix + '/attack-{token}']:\n    try:\n"
        "        open(p, 'w').write('x')\n        print('WROTE', p)\n    except OSError as e:\n        print('DENIED', e)\n",
        _all(
            _no_file(lambda c: f"{c.project_dir}/attack-{c.token}"),
            _no_file(lambda c: f"{sys.prefix}/attack-{c.token}"),
        ),
    ),
    Attack(
        "write_host_tmp",
        "write into the host's /tmp",
        "open('/tmp/attack-{token}', 'w').write('x')\n",
        _no_file(lambda c: f"/tmp/attack-{c.token}"),
    ),
    Attack(
        "other_workdir",
        "read and write another running job's workdir",
        "import os\nfor name in os.listdir('{victim_dir}'):\n    print(open(os.path.join('{victim_dir}', name)).read())\n",
        _all(_not_in_output(lambda c: c.secret)),
        needs_victim=True,
    ),
    Attack(
        "write_other_workdir",
        "write into another running job's workdir",
        "open('{victim_dir}/pwned-{token}', 'w').write('x')\n",
        _no_file(lambda c: f"{c.victim_dir}/pwned-{c.token}"),
        needs_victim=True,
    ),
    Attack(
        "kill_parent",
        "kill the parent process, then everything it can signal",
        "import os, signal, time\nos.kill(os.getppid(), signal.SIGKILL)\ntry:\n    os.kill(-1, signal.SIGKILL)\n"
        "except OSError:\n    pass\ntime.sleep(5)\n",
        lambda r, c: "" if r.status != "ok" else "the job survived",
    ),
    Attack(
        "daemon",
        "leave a double-forked, setsid child running",
        "import os, sys\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
        "        os.execvp('sleep', ['sleep', '{sleep_s}'])\n    os._exit(0)\nprint('parent done')\n",
        _all(_status("ok"), _no_leftovers),
    ),
    Attack(
        "ignore_sigterm",
        "ignore SIGTERM and sleep past the wall clock",
        "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nwhile True:\n    time.sleep(1)\n",
        _status("timeout"),
        Limits(wall_s=1.0),
    ),
    Attack(
        "raise_rlimits",
        "raise its own hard limits",
        "import resource\nfor r in (resource.RLIMIT_NPROC, resource.RLIMIT_AS, resource.RLIMIT_CPU):\n    try:\n"
        "        resource.setrlimit(r, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))\n        print('RAISED', r)\n"
        "    except (ValueError, OSError) as e:\n        print('DENIED', e)\n",
        _all(_status("ok"), lambda r, c: "a hard limit was raised" if "RAISED" in r.stdout else ""),
    ),
    Attack(
        "status_channel",
        "write forged usage lines (with any nonce it can read) and junk to every descriptor, status file and pipe it reaches",
        _STATUS_CHANNEL,
        _all(
            _status("ok"),
            _measured,
            _words("WROTE"),  # a nonce it read is nothing without a place the host reads
            lambda r, c: "" if "FDS []" in r.stdout else "a descriptor above 2 was inherited",
        ),
    ),
    Attack(
        "hidden_storage",
        "hold 512 MiB in memfds and deleted-but-open files under a 128 MiB memory and 32 MiB disk limit",
        _HIDDEN_STORAGE,
        _all(_held_at_most, _words("HELD")),
        STORAGE_LIMITS,
        needs="storage",
    ),
    Attack(
        "keyring",
        "store a key in the session, user and user-session keyrings; the next job in the slot looks for it",
        _KEYRING,
        _all(_status("ok"), _words("FOUND"), _key_not_in_host_keyrings),
        runs=2,
        needs="kernel keyring",
    ),
    Attack(
        "readonly_parent",
        "rename the folders above a nested read-only file and plant its own file in their place",
        _READONLY_PARENT,
        _all(_words("RENAMED", "PLANTED"), lambda r, c: "" if "READ original" in r.stdout else "the file was replaced"),
        readonly_files={"tests/unit/check.txt": "original"},
    ),
    Attack(
        "output_symlink",
        "declare an output that is a symlink to a host secret",
        "import os\nos.symlink('/etc/shadow', 'result.json')\n",
        lambda r, c: "the host followed the link" if r.outputs else "",
    ),
    Attack(
        "plant_bind_parent",
        "rename the folder in its /tmp above a read-only bind (a tool the next step runs) and plant its own",
        _PLANT_BIND_PARENT,
        _all(_words("RENAMED", "PLANTED"), _genuine_ran),
        cmd=["sh", "-c", "python3 attack.py; {host_dir}/tool/check"],
        ro_binds=["{host_dir}/tool"],
        setup=_genuine_check,
    ),
    Attack(
        "plant_on_path",
        "move aside or replace with links the folders above the python3 on its PATH, the venv's and the root's",
        "",
        _all(_words("MOVED", "LINKED"), _genuine_ran),
        cmd=["sh", "-c", "sh attack.sh; python3 -c pass"],
        files={"attack.sh": _PLANT_ON_PATH},
        env={"PATH": "{host_dir}/venv/bin:/usr/bin:/bin"},
        ro_binds=["{host_dir}/venv"],
        setup=_genuine_check,
    ),
    Attack(
        "usage_grandchild",
        "a double-forked grandchild burns 1 s of CPU and holds 100 MiB while the job's command waits",
        _USAGE_GRANDCHILD,
        _all(_status("ok"), _usage_covered),
        Limits(wall_s=30.0, cpu_s=30.0),
        needs="usage",
        premise=_host_clock,
    ),
    Attack(
        "usage_outlives",
        "a background process burns CPU and holds 100 MiB until the job's command ends and it is killed",
        "",
        _all(_status("ok"), _usage_covered),
        Limits(wall_s=30.0, cpu_s=30.0),
        cmd=["sh", "attack.sh"],
        files={"attack.sh": _USAGE_OUTLIVES},
        needs="usage",
        premise=_host_clock,
    ),
    Attack(
        "forged_exit_code",
        "exit with 152 (128 + SIGXCPU) after writing MemoryError and 'File too large' to stderr",
        _FORGED_EXIT_CODE,
        _exactly("nonzero_exit", exit_code=152, signal=None),
    ),
    Attack(
        "forged_signal_xcpu",
        "a shell that writes allocation failures to stderr and kills itself with SIGXCPU, CPU unused",
        "",
        _exactly("killed", signal=int(signal.SIGXCPU)),
        cmd=["sh", "attack.sh"],
        files={"attack.sh": _FORGED_SIGNAL_XCPU},
    ),
    Attack(
        "forged_signal_xfsz",
        "kill itself with SIGXFSZ without writing any big file",
        _FORGED_SIGNAL_XFSZ,
        _exactly("killed", signal=int(signal.SIGXFSZ)),
    ),
    Attack(
        "lock_channel",
        "a concurrent job holds byte-range locks on /etc/passwd that spell a secret; this job reads them",
        _LOCK_RECEIVER,
        _all(
            _status("ok"),
            _not_in_output(lambda c: c.secret),
            lambda r, c: "" if "locked bits 0" in r.stdout else r.stdout,
        ),
        partner=_LOCK_SENDER,
        needs="shared files",
    ),
    Attack(
        "flock_channel",
        "a concurrent job spells a secret in whole-file and OFD locks on /usr/bin's files and in opening them (inotify)",
        _FLOCK_RECEIVER,
        _all(_status("ok"), _not_in_output(lambda c: c.secret), _not_in_output(lambda c: c.secret[:12])),
        limits=Limits(wall_s=20.0, cpu_s=20.0),  # a Python start under gVisor on a loaded machine takes seconds
        partner=_FLOCK_SENDER,
        needs="shared files",
    ),
    Attack(
        "cache_limit_poison",
        "a build that times out under tight limits, asked again: the cache must not serve the timeout",
        "",
        lambda r, c: "",
        drive=_cache_keeps_no_limit_failure,
    ),
    Attack(
        "cache_flaky_poison",
        "a build that fails once (an input is not there yet), asked again once it is: built, then cached",
        "",
        lambda r, c: "",
        drive=_cache_keeps_no_flaky_failure,
    ),
    Attack(
        "inode_flood",
        "make empty files (no bytes, one inode each) without end, beside a short job",
        _INODE_FLOOD,
        _inode_limit_held,
        FLOOD_LIMITS,
        drive=_flood_beside_a_neighbour,
    ),
    Attack(
        "inode_flood_links",
        "make hard links, symlinks and empty folders in /tmp without end, beside a short job",
        _INODE_FLOOD_LINKS,
        _inode_limit_held,
        FLOOD_LIMITS,
        drive=_flood_beside_a_neighbour,
    ),
    Attack(
        "deep_tree",
        "nest 5000 folders, deeper than a path can name, and wait",
        _DEEP_TREE,
        _all(_status("output_limit"), lambda r, c: _no_leftover_folders_in(c.sandbox_root)),
        Limits(wall_s=20.0, cpu_s=20.0),
    ),
    Attack(
        "cleanup_symlink",
        "leave links to a host file in folders it made unreadable (mode 000) for the host to clean up",
        _CLEANUP_SYMLINK,
        _all(_status("ok"), _victim_modes_kept, lambda r, c: _no_leftover_folders_in(c.sandbox_root)),
        setup=_victim_file,
    ),
    Attack(
        "cleanup_symlink_dirs",
        "a shell leaves links to a host folder and file below folders it made unwritable, its /tmp too",
        "",
        _all(_status("ok"), _victim_modes_kept, lambda r, c: _no_leftover_folders_in(c.sandbox_root)),
        cmd=["sh", "attack.sh"],
        files={"attack.sh": _CLEANUP_SYMLINK_DIRS},
        setup=_victim_file,
    ),
    Attack(
        "nested_userns",
        "make a nested user namespace with unshare, clone and clone3",
        _NESTED_USERNS,
        _all(_status("ok"), _words("NESTED")),
        needs="user namespaces",
        premise=_host_kernel_only,
    ),
    Attack(
        "nested_userns_tools",
        "make a nested user namespace with the unshare and bwrap commands and os.unshare",
        "",
        _all(_status("ok"), _words("NESTED by")),
        cmd=["sh", "attack.sh"],
        files={"attack.sh": _NESTED_USERNS_TOOLS},
        needs="user namespaces",
        premise=_host_kernel_only,
    ),
    Attack(
        "fanotify_channel",
        "a concurrent job opens shared files again and again; this job watches them with fanotify (privileged and FID modes)",
        _FANOTIFY_RECEIVER,
        _all(_status("ok"), _words("RECEIVED")),
        partner=_FANOTIFY_SENDER,
    ),
    Attack(
        "fanotify_channel_perl",
        "the same through perl's syscall(): fanotify_init, a mark on /etc/hostname, a read of the events",
        "",
        _all(_status("ok"), _words("RECEIVED")),
        cmd=["perl", "attack.pl"],
        files={"attack.pl": _FANOTIFY_PERL},
        partner=_FANOTIFY_SENDER,
    ),
    Attack(
        "kernel_interfaces",
        "open io_uring, userfaultfd, a perf event, secret memory, a BPF program and the session keyring (ctypes)",
        _KERNEL_INTERFACES,
        _all(_status("ok"), _words("OPENED")),
        premise=_host_kernel_only,
    ),
    Attack(
        "kernel_interfaces_perl",
        "the same interfaces through perl's syscall(), arguments packed by hand, a key added to the session keyring",
        "",
        _all(_status("ok"), _words("OPENED")),
        cmd=["perl", "attack.pl"],
        files={"attack.pl": _KERNEL_INTERFACES_PERL},
        premise=_host_kernel_only,
    ),
    Attack(
        "page_cache_channel",
        "one job reads or evicts (posix_fadvise DONTNEED) files every job can read, a later job tells which "
        "are cached (preadv2 RWF_NOWAIT)",
        "",
        _status("ok"),
        drive=_page_cache_channel(_PAGE_SENDER, _PAGE_RECEIVER),
        premise=lambda sb: _page_cache_observable(),
    ),
    Attack(
        "page_cache_channel_raw",
        "the same by system-call number: readahead and fadvise64 to write, preadv2 with RWF_NOWAIT to read",
        "",
        _status("ok"),
        drive=_page_cache_channel(_PAGE_SENDER_RAW, _PAGE_RECEIVER_RAW),
        premise=lambda sb: _page_cache_observable(),
    ),
    Attack(
        "inode_counter_channel",
        "one job moves its RAM disk's next inode number to a secret, a later job reads it from a new file",
        "",
        _status("ok"),
        drive=_inode_counter_channel(["python3", "-c", _INODE_SENDER]),
    ),
    Attack(
        "inode_counter_channel_sh",
        "the same with folders, from the shell",
        "",
        _status("ok"),
        drive=_inode_counter_channel(["bash", "-c", _INODE_SENDER_SH]),
    ),
    Attack(
        "read_timing_channel",
        "one job reads one file of each pair of system files, a later job times a read of both and takes "
        "the faster as cached",
        "",
        _status("ok"),
        drive=_read_timing_channel(mmap=False),
    ),
    Attack(
        "read_timing_channel_mmap",
        "the same through mappings: the sender touches mapped pages, the receiver times its first page fault",
        "",
        _status("ok"),
        drive=_read_timing_channel(mmap=True),
    ),
]


PATH_SUITES = ("tempering.envs.code.attacks",)
"""Modules above the sandbox whose `ATTACKS` attack the paths that judge through it (the code judge's
cases, driven through its environment). Loaded by name when the suite runs: the sandbox imports
nothing above its layer."""


def suite() -> list[Attack]:
    """Every attack run as an `Attack`: this module's, then those of `PATH_SUITES`."""
    return [*ATTACKS, *(a for name in PATH_SUITES for a in importlib.import_module(name).ATTACKS)]


def why_not_run(sandbox: Sandbox, attack: Attack) -> str:
    """Why `attack` must not run in `sandbox` on this machine ('' if it may): outside an isolating
    backend it would reach the host, and a gap the backend reports here would let it out."""
    if not sandbox.isolated:
        return f"the {sandbox.backend} backend does not isolate; attacks run only in {' or '.join(ISOLATED)}"
    if attack.premise is not None and (why := attack.premise(sandbox)):
        return why
    return next((g for g in sandbox.not_contained if attack.needs and g.startswith(attack.needs + ":")), "")


_FIELDS = (
    "token",
    "port",
    "project_dir",
    "victim_dir",
    "sleep_s",
    "secret",
    "host_dir",
    "venv_parent",
    "nrs",
    "perl_nrs",
)


def _fill(text: str, ctx: Context) -> str:
    return text.format(**{k: getattr(ctx, k) for k in _FIELDS})


def _job_of(attack: Attack, ctx: Context) -> Job:
    files: dict[str, str | bytes] = {"attack.py": _fill(attack.code, ctx)} if attack.code else {}
    return Job(
        cmd=[_fill(a, ctx) for a in attack.cmd],
        files=files | {name: _fill(text, ctx) for name, text in attack.files.items()},
        readonly_files=dict(attack.readonly_files),
        env={k: _fill(v, ctx) for k, v in attack.env.items()},
        limits=attack.limits,
        outputs=["result.json"],
        ro_binds=[_fill(p, ctx) for p in attack.ro_binds],
    )


async def run_attack(sandbox: Sandbox, attack: Attack) -> str:
    """Run one attack; empty string if it was contained, else what went wrong. Refuses (UserError) a
    sandbox that cannot contain it, before anything runs."""
    why = why_not_run(sandbox, attack)
    if why:
        raise UserError(f"attack {attack.name} not run: {why}.")
    ctx = Context(sandbox_root=sandbox._root_dir())
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.2)
    ctx.port = server.getsockname()[1]
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                ctx.connections.append(server.accept())
            except OSError:
                pass

    listener = threading.Thread(target=accept, daemon=True)
    listener.start()
    os.environ["TEMPERING_ATTACK_SECRET"] = ctx.secret
    ctx.host_dir = tempfile.mkdtemp(prefix="tempering-attack-", dir="/tmp")  # the job's /tmp is its own
    os.chmod(ctx.host_dir, 0o755)
    beside = None
    try:
        if attack.setup is not None:
            attack.setup(ctx)
        if attack.needs_victim:
            files: dict[str, str | bytes] = {"secret.txt": ctx.secret}
            beside, ctx.victim_dir = await _start_beside(sandbox, Job(cmd=["sleep", "3"], files=files), "secret.txt")
        if attack.partner:
            files = {"partner.py": _fill(attack.partner, ctx), "secret.txt": ctx.secret}
            partner = Job(cmd=["python3", "partner.py"], files=files, limits=Limits(wall_s=20.0))
            beside, _ = await _start_beside(sandbox, partner, "ready")
        if attack.drive is not None:
            verdict = await attack.drive(sandbox, attack, ctx)
        else:
            job = _job_of(attack, ctx)
            for _ in range(attack.runs):
                res = await sandbox.run(job)
            verdict = attack.check(res, ctx)
        after = await sandbox.run(Job(cmd=["python3", "-c", "print('fine')"]))
        if after.stdout.strip() != "fine":
            verdict += f"; the next job failed: {after.status} {after.message}"
        return verdict
    finally:
        if beside is not None:
            await beside
        stop.set()
        listener.join()
        server.close()
        del os.environ["TEMPERING_ATTACK_SECRET"]
        shutil.rmtree(ctx.host_dir)


async def _start_beside(sandbox: Sandbox, job: Job, marker: str) -> tuple[asyncio.Task, str]:
    """Start `job`; once `marker` appears in its workdir, return it and its host workdir."""
    root = Path(sandbox._root_dir())
    before = set(root.iterdir())
    task = asyncio.ensure_future(sandbox.run(job))
    for _ in range(1000):
        new = [p for p in root.iterdir() if p not in before and (p / "work" / marker).exists()]
        if new:
            return task, str(new[0] / "work")
        if task.done():
            raise RuntimeError(f"the job beside the attack ended before it was ready: {task.result()}")
        await asyncio.sleep(0.01)
    raise RuntimeError("the job beside the attack did not start")


def isolated_backends() -> list[str]:
    """The isolating backends that work on this machine: the only ones the suite attacks."""
    return [b for b in Sandbox.available_backends() if b in ISOLATED]


# -- every path that judges: the job API here, the others from the modules that own them ----------------

PATHS = (
    "job API",
    "terminal: services kept",
    "terminal: separate jobs",
    "agent: session",
    "agent: per command",
    "code judge",
    "kernel worker",
)
"""Where a verdict is computed from what a job did: the sandbox's own API, a terminal task verified with
its services kept (the solution's job up beside the tests') or in separate jobs, an agent's episode in one
session job or a job per command, the code judge, the kernel environment's warm worker."""

KINDS = ("attack", "honest_right", "honest_wrong")


@dataclass
class Case:
    """One attack, or a control, through one path that judges."""

    cls: str
    """The class of attack (for a control: what it controls)."""
    name: str
    """The variant."""
    path: str
    """One of `PATHS`."""
    run: Callable[[Sandbox], Awaitable[str]]
    """Runs it on a sandbox: '' when contained (a control: the verdict came out as it must), else what got out."""
    kind: str = "attack"
    """`attack`, `honest_right` (a right answer that must pass) or `honest_wrong` (a wrong one that must score 0)."""
    premise: Callable[[Sandbox], str] | None = None
    """Why it cannot be judged on this sandbox ('' when it can): the path does not exist there."""
    what: str = ""
    """The attack in a few words."""

    @property
    def id(self) -> str:
        return f"{self.path} / {self.cls} / {self.name}"


PROVIDERS: dict[str, str] = {
    "terminal tasks and agents": "tempering.envs.terminal.attacks",
    "kernel jobs": "tempering.envs.kernels.attacks",
}
"""The modules that add the cases of the paths above the job API (each defines `CASES: list[Case]`), by
name (their modules import this one; this one names them only here, as the verbs' registry does); others
add theirs with `register`; the code judge's come through `PATH_SUITES`."""


def register(name: str, module: str) -> None:
    """Add the cases of `module` (its `CASES`) to the suite, e.g. register("kernel worker", "tempering.envs.kernels.attacks")."""
    PROVIDERS[name] = module


def job_cases() -> list[Case]:
    """The job-API attacks (`ATTACKS`) as cases."""
    cls_of = {name: cls for cls, names in _CLASSES.items() for name in names.split()}

    def case(attack: Attack) -> Case:
        async def run(sandbox: Sandbox) -> str:
            return await run_attack(sandbox, attack)

        return Case(
            cls_of.get(attack.name, attack.name),
            attack.name,
            "job API",
            run,
            premise=lambda sb: why_not_run(sb, attack),
            what=attack.what,
        )

    return [case(a) for a in ATTACKS]


def path_suite_cases() -> list[Case]:
    """The `ATTACKS` of `PATH_SUITES` (the code judge's) as cases on the code judge's path: the class and
    the kind from the module's `CASES` (`klass`, `must`) where it names them."""
    out = []
    for name in PATH_SUITES:
        module = importlib.import_module(name)
        meta = {c.name: c for c in getattr(module, "CASES", ())}

        def case(attack: Attack) -> Case:
            async def run(sandbox: Sandbox) -> str:
                return await run_attack(sandbox, attack)

            c = meta.get(attack.name)
            cls = getattr(c, "klass", attack.name)
            kind = "attack" if cls != "control" else "honest_right" if c and c.must == "pass" else "honest_wrong"
            return Case(cls, attack.name, "code judge", run, kind, lambda sb: why_not_run(sb, attack), attack.what)

        out += [case(a) for a in module.ATTACKS]
    return out


def cases(paths: Sequence[str] = PATHS) -> list[Case]:
    """Every case of the suite through `paths`: the job API's and each provider's."""
    out = job_cases() + path_suite_cases()
    for module in PROVIDERS.values():
        out += importlib.import_module(module).CASES
    unknown = {c.path for c in out} - set(PATHS)
    if unknown:
        raise ValueError(f"cases on unknown paths {sorted(unknown)}: add them to attacks.PATHS")
    return [c for c in out if c.path in paths]


async def run_case(sandbox: Sandbox, case: Case) -> tuple[str, str]:
    """(verdict, why not run): one of them empty."""
    why = why_not_isolated(sandbox) or (case.premise(sandbox) if case.premise is not None else "")
    if why:
        return "", why
    return await case.run(sandbox), ""


def why_not_isolated(sandbox: Sandbox) -> str:
    if not sandbox.isolated:
        return f"the {sandbox.backend} backend does not isolate; attacks run only in {' or '.join(ISOLATED)}"
    return ""


async def run_suite(backend: str, paths: Sequence[str] = PATHS, only: Sequence[str] = ()) -> dict:
    """The suite on one isolating backend: {total, contained, failed: {case: verdict}, not_run: {case: why},
    cases: [{path, class, name, kind, verdict}]} (case ids: `path / class / variant`). `total` counts every
    case, controls included; one that cannot run on this backend here (a gap in `Sandbox.not_contained`,
    a path the backend does not have) is not run and not counted as contained. `only`: class names."""
    if backend not in ISOLATED:
        raise UserError(f"the {backend} backend does not isolate; the adversarial suite attacks only {ISOLATED}.")
    sandbox = Sandbox(backend=backend, concurrency=2)
    todo = [c for c in cases(paths) if not only or c.cls in only]
    failed, not_run, rows = {}, {}, []
    for case in todo:
        verdict, why = await run_case(sandbox, case)
        if why:
            not_run[case.id] = why
        elif verdict:
            failed[case.id] = verdict
        rows.append({"path": case.path, "class": case.cls, "name": case.name, "kind": case.kind,
                     "verdict": "not run: " + why if why else verdict or "contained"})  # fmt: skip
    contained = len(todo) - len(failed) - len(not_run)
    return {"total": len(todo), "contained": contained, "failed": failed, "not_run": not_run, "cases": rows}


def matrix(summaries: dict[str, dict]) -> dict:
    """The results' view of `run_suite` summaries by backend: {attacks: {class: {backend: {path: cell}}},
    escaped, controls: {honest_right_passed, honest_wrong_rejected} ("k/n")}. A cell is `contained` when
    every variant that ran there was (and one did), `not run: why` when none could run, else what got out."""
    cells: dict[tuple[str, str, str], list[tuple[str, str]]] = {}
    controls = {"honest_right": [0, 0], "honest_wrong": [0, 0]}
    for backend, s in summaries.items():
        for row in s["cases"]:
            if row["kind"] == "attack":
                cells.setdefault((row["class"], backend, row["path"]), []).append((row["name"], row["verdict"]))
            elif not row["verdict"].startswith("not run"):
                controls[row["kind"]][0] += row["verdict"] == "contained"
                controls[row["kind"]][1] += 1
    attacks: dict[str, dict[str, dict[str, str]]] = {}
    escaped = 0
    for (cls, backend, path), variants in cells.items():
        out = [f"{name}: {v}" for name, v in variants if v != "contained" and not v.startswith("not run")]
        escaped += len(out)
        ran = [v for _, v in variants if not v.startswith("not run")]
        cell = "; ".join(out) if out else "contained" if ran else variants[0][1]
        attacks.setdefault(cls, {}).setdefault(backend, {})[path] = cell
    return {
        "attacks": attacks,
        "escaped": escaped,
        "controls": {
            "honest_right_passed": "{}/{}".format(*controls["honest_right"]),
            "honest_wrong_rejected": "{}/{}".format(*controls["honest_wrong"]),
        },
    }


def main(
    argv: list[str] | None = None, as_json: bool = False, paths: Sequence[str] = PATHS, only: Sequence[str] = ()
) -> int:
    """Run the suite on `argv`'s backends (default: every isolating one that works here) through `paths`;
    exit status 1 if an attack got out or a control came out wrong. `as_json`: print {backend:
    run_suite's summary} instead of a table."""
    names = (sys.argv[1:] if argv is None else argv) or isolated_backends()
    if not names:
        raise UserError(
            f"no isolating backend works here ({', '.join(ISOLATED)}), and the suite never attacks the host; "
            "`tempering sandbox backends` says why each is unavailable."
        )
    summary = {}
    for backend in names:
        summary[backend] = s = asyncio.run(run_suite(backend, paths, only))
        if not as_json:
            for row in s["cases"]:
                verdict = row["verdict"] if row["verdict"] in ("contained",) else "FAILED: " + row["verdict"]
                if row["verdict"].startswith("not run"):
                    verdict = "NOT CONTAINED here (" + row["verdict"] + ")"
                print(f"{backend:<8} {row['path']:<24} {row['name']:<28} {verdict}")
            print(f"{backend:<8} {s['contained']}/{s['total']} contained")
    if as_json:
        print(json.dumps(summary, indent=2))
    return 1 if any(s["failed"] for s in summary.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
