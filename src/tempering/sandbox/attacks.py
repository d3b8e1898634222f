"""The adversarial suite: hostile jobs that every backend must contain, and how to tell that it did.

Each attack is a small Python program run as a job, plus a check that looks at the `Result` *and*
at the host afterwards (files that must not exist, processes that must be gone, a server that must
not have been reached). Attacks run only in the isolating backends (bwrap, unshare): the plain
`subprocess` backend runs jobs as the caller on the host, where an attack would do its damage.

    python -m tempering.sandbox.attacks [backend ...]     # prints the table for this machine
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import socket
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tempering.errors import UserError
from tempering.sandbox.backends import ISOLATED
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
for pid in [p for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()]:
    try:
        env = open(f"/proc/{{pid}}/environ", "rb").read()
        if b"TIME=" in env:
            print("READ_NONCE of", pid)
    except OSError:
        pass
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
        _status("memory_exceeded"),
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
        "write forged usage lines and junk to every inherited descriptor and to other processes' status pipes",
        _STATUS_CHANNEL,
        _all(
            _status("ok"),
            _measured,
            _words("WROTE", "READ_NONCE"),
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
]


def why_not_run(sandbox: Sandbox, attack: Attack) -> str:
    """Why `attack` must not run in `sandbox` on this machine ('' if it may): outside an isolating
    backend it would reach the host, and a gap the backend reports here would let it out."""
    if not sandbox.isolated:
        return f"the {sandbox.backend} backend does not isolate; attacks run only in {' or '.join(ISOLATED)}"
    return next((g for g in sandbox.not_contained if attack.needs and g.startswith(attack.needs + ":")), "")


async def run_attack(sandbox: Sandbox, attack: Attack) -> str:
    """Run one attack; empty string if it was contained, else what went wrong. Refuses (UserError) a
    sandbox that cannot contain it, before anything runs."""
    why = why_not_run(sandbox, attack)
    if why:
        raise UserError(f"attack {attack.name} not run: {why}.")
    ctx = Context()
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
    victim = None
    try:
        if attack.needs_victim:
            victim, ctx.victim_dir = await _start_victim(sandbox, ctx)
        code = attack.code.format(
            **{k: getattr(ctx, k) for k in ("token", "port", "project_dir", "victim_dir", "sleep_s", "secret")}
        )
        job = Job(
            cmd=["python3", "attack.py"],
            files={"attack.py": code},
            readonly_files=dict(attack.readonly_files),
            limits=attack.limits,
            outputs=["result.json"],
        )
        for _ in range(attack.runs):
            res = await sandbox.run(job)
        verdict = attack.check(res, ctx)
        after = await sandbox.run(Job(cmd=["python3", "-c", "print('fine')"]))
        if after.stdout.strip() != "fine":
            verdict += f"; the next job failed: {after.status} {after.message}"
        return verdict
    finally:
        if victim is not None:
            await victim
        stop.set()
        listener.join()
        server.close()
        del os.environ["TEMPERING_ATTACK_SECRET"]


async def _start_victim(sandbox: Sandbox, ctx: Context) -> tuple[asyncio.Task, str]:
    """Start a job that holds a secret in its workdir for a few seconds; return it and its host workdir."""
    root = Path(sandbox._root_dir())
    before = set(root.iterdir())
    task = asyncio.ensure_future(
        sandbox.run(Job(cmd=["python3", "-c", "import time; time.sleep(3)"], files={"secret.txt": ctx.secret}))
    )
    for _ in range(200):
        new = [p for p in root.iterdir() if p not in before and (p / "work" / "secret.txt").exists()]
        if new:
            return task, str(new[0] / "work")
        await asyncio.sleep(0.01)
    raise RuntimeError("the victim job did not start")


def isolated_backends() -> list[str]:
    """The isolating backends that work on this machine: the only ones the suite attacks."""
    return [b for b in Sandbox.available_backends() if b in ISOLATED]


async def run_suite(backend: str) -> dict:
    """The suite on one isolating backend: {total, contained, failed: {attack: verdict}, not_run:
    {attack: why}}. `total` counts every attack; one the backend cannot contain on this machine (a gap
    in `Sandbox.not_contained`) is not run and not counted as contained."""
    if backend not in ISOLATED:
        raise UserError(f"the {backend} backend does not isolate; the adversarial suite attacks only {ISOLATED}.")
    sandbox = Sandbox(backend=backend, concurrency=2)
    failed, not_run = {}, {}
    for attack in ATTACKS:
        why = why_not_run(sandbox, attack)
        if why:
            not_run[attack.name] = why
        else:
            verdict = await run_attack(sandbox, attack)
            if verdict:
                failed[attack.name] = verdict
    contained = len(ATTACKS) - len(failed) - len(not_run)
    return {"total": len(ATTACKS), "contained": contained, "failed": failed, "not_run": not_run}


def main(argv: list[str] | None = None, as_json: bool = False) -> int:
    """Run the suite on `argv`'s backends (default: every isolating one that works here); exit status 1
    if an attack got out. `as_json`: print {backend: run_suite's summary} instead of a table."""
    names = (sys.argv[1:] if argv is None else argv) or isolated_backends()
    if not names:
        raise UserError(
            f"no isolating backend works here ({', '.join(ISOLATED)}), and the suite never attacks the host; "
            "`tempering sandbox backends` says why each is unavailable."
        )
    summary = {}
    for backend in names:
        summary[backend] = asyncio.run(run_suite(backend))
        if not as_json:
            s = summary[backend]
            for attack in ATTACKS:
                if attack.name in s["not_run"]:
                    verdict = "NOT CONTAINED here (not run): " + s["not_run"][attack.name]
                else:
                    verdict = "FAILED: " + s["failed"][attack.name] if attack.name in s["failed"] else "CONTAINED"
                print(f"{backend:<11} {attack.name:<20} {verdict}")
            print(f"{backend:<11} {s['contained']}/{s['total']} contained")
    if as_json:
        print(json.dumps(summary, indent=2))
    return 1 if any(s["failed"] for s in summary.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
