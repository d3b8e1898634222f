"""How each backend turns a prepared job directory into the argv that runs it isolated.

Every backend starts the job through `prlimit`, so the rlimits (CPU, address space, processes, file
size, open files, no core dumps) are set as hard limits that the job cannot raise. On top of that:

- `bwrap` (bubblewrap, preferred): new PID, network, IPC and UTS namespaces, a fresh root that holds
  only the system directories and the Python installation (read-only: the RAM image's copies, see
  `image.py`, or the host's own), the workdir (read-write) and a private /tmp. When the host runs as root, the job drops to a per-slot unprivileged uid with no
  capabilities (`setpriv`); otherwise bwrap adds a user namespace.
- `unshare` (fallback): the same layout built by a short shell script in new mount, PID, network, IPC
  and UTS namespaces, then `chroot` and the same uid drop.
- `subprocess` (opt-in): rlimits and a scrubbed environment only. No isolation: the job sees the host
  file system and network with the caller's rights.

In both isolated backends the job's command runs below the namespace's first process (GNU time, which
reports how the command ended), so when it exits every process it left behind is killed by the kernel.
Between time and the job's command the seccomp supervisor (`seccomp.SUPERVISOR`) installs the job's
allow-list filter, reports `started` on the status fd, and runs the command with no descriptor above 2
and without the TIME variable (time's format, carrying the job's nonce); it stays to answer the calls
the filter refuses and report their names. bwrap adds --disable-userns where it makes a user namespace.
GNU time runs from an execute-only copy, so that a job with the same uid (a non-root host) cannot read
its memory, environment or descriptors (/proc refuses a process that is not dumpable).

What the host trusts never sits in a folder the job can rename. Read-only files sit on read-only bind
mounts, and so does the top folder inside the workdir of a nested one. The root the backend builds
(the folders that hold /usr, the Python installation, /.tempering/time, mount points) is made read-only
once built: on a non-root host its folders belong to the job's user-namespace uid, which could otherwise
rename `/work` above a venv in `/work/app/.venv` or replace the `/bin` link. A read-only bind below a
folder the job writes (a venv or a build-cache artifact under /tmp, which is the job's own) gets a
read-only skeleton: the folder just below the writable one is a read-only mount of host-made folders
that hold only the mount points, so no folder between the job's /tmp and the bound path can be renamed.
"""

from __future__ import annotations

import functools
import math
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field

from tempering.sandbox import seccomp
from tempering.sandbox.image import mount_point as image_mount_point
from tempering.sandbox.job import Limits
from tempering.sandbox.process import STATUS_FD, TIME, usage_argv

ISOLATED = ("bwrap", "unshare", "gvisor")
INNER_WORKDIR = "/job"
"""Where the workdir appears inside an isolated job (it is also the job's HOME)."""
INNER_TIME = "/.tempering/time"
"""Where the execute-only copy of GNU time appears inside an isolated job."""
_CLOSER = [
    "/bin/sh",
    "-c",
    f'echo "${{TIME%% *}} started" >&{STATUS_FD} && exec {" ".join(f"{fd}>&-" for fd in range(3, 10))} && '
    'unset TIME && exec "$@"',
    "sandbox",
]
"""The last set-up step on a machine without a seccomp filter (the host passes no descriptor above 9:
dash closes single-digit ones only)."""
_SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
_DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
_CHROOT = shutil.which("chroot", path="/usr/sbin:/sbin:/usr/bin:/bin") or "chroot"
IP = shutil.which("ip", path="/usr/sbin:/sbin:/usr/bin:/bin")
"""iproute2's `ip`: brings up the loopback of an `unshare` job's network namespace (unshare leaves it down)."""


def _python_dirs() -> list[str]:
    """Folders the project's interpreter needs: the venv and the installation it was made from."""
    exe_home = os.path.dirname(os.path.dirname(os.path.realpath(sys.executable)))
    return [os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, exe_home)] + [sys.prefix]


def job_path() -> str:
    """The PATH a job sees: the project's interpreter first, then the system's."""
    return ":".join(dict.fromkeys([os.path.dirname(sys.executable), "/usr/local/bin", "/usr/bin", "/bin"]))


@dataclass
class Layout:
    """Where one job's files live on the host and what its root file system is made of."""

    jobroot: str
    """Host folder owned by the sandbox for this job; removed after the run."""
    workdir: str
    """Host folder bound read-write as the job's working directory."""
    tmpdir: str
    """Host folder bound as the job's /tmp (so that the disk limit counts it)."""
    shmdir: str = ""
    """Host folder bound as the job's /dev/shm (POSIX shared memory and semaphores: multiprocessing's locks);
    empty: none."""
    ro_files: list[tuple[str, str]] = field(default_factory=list)
    """(host file or folder, path relative to the workdir) made read-only inside the workdir."""
    ro_binds: list[str] = field(default_factory=list)
    """Extra host paths visible read-only at the same path."""
    ro_copies: dict[str, str] = field(default_factory=dict)
    """Host path in `ro_binds` -> the copy on a RAM disk shown there instead (jobs with an `image`)."""
    devices: list[str] = field(default_factory=list)
    """Host device nodes usable at the same path."""
    mounts: list[tuple[str, str]] = field(default_factory=list)
    """(path inside the sandbox, workdir-relative folder) shown at that path (see `mount_sources`)."""
    uid: int | None = None
    """Unprivileged uid the job runs as (when the host is root), else None."""
    time_binary: str | None = None
    """Host path of the execute-only copy of GNU time (None: no usage report)."""
    status_dir: str = ""
    """Host folder (root's, 0700) holding the status log of a backend that passes no descriptor into the
    job (gvisor): GNU time and the supervisor write their lines there instead of to the status pipe."""
    supervisor: list[str] | None = None
    """The seccomp supervisor's argv (`seccomp.supervisor_argv()`), None where this machine has no filter."""
    image: str = ""
    """Host folder on a RAM disk holding the system files and Python installation jobs see (`image.build`);
    empty: the host's own."""

    def last_step(self) -> list[str]:
        """What runs between GNU time and the job's command (see the module's notes)."""
        return self.supervisor if self.supervisor else _CLOSER

    def mount_sources(self) -> list[tuple[str, str, bool]]:
        """(host folder, path inside, read-only) of each mount: the workdir folder, read-write; or,
        inside a folder of read-only files, its read-only copy (a job cannot write there either)."""
        ro_folders = {rel: src for src, rel in self.ro_files if os.path.isdir(src)}
        out = []
        for inner, folder in self.mounts:
            top, _, below = folder.partition("/")
            if top in ro_folders:
                out.append((os.path.join(ro_folders[top], below) if below else ro_folders[top], inner, True))
            else:
                out.append((os.path.join(self.workdir, folder), inner, False))
        return out


def _ro_paths(
    extra: list[str], image: str = "", copies: dict[str, str] | None = None
) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """((host source, path inside) of each read-only bind, (symlink target, link path)), nested duplicates
    removed. With an `image`, the system folders and the Python installation come from it (those it does
    not hold are not shown), and an `extra` path inside them is bound over the image on a mount point made
    in it (a CUDA toolkit under /usr/local), from its copy in `copies` where it has one."""
    binds, links = [], []
    for p in _SYSTEM_PATHS:
        if os.path.islink(p):
            links.append((os.readlink(p), p))
        elif os.path.isdir(p):
            binds.append(p)

    def outermost(paths: list[str]) -> list[str]:
        kept: list[str] = []
        for p in sorted(set(paths), key=len):
            if not any(p == k or p.startswith(k.rstrip("/") + "/") for k in kept):
                kept.append(p)
        # a bound path below a symlinked one (e.g. /lib64/x) is already visible through its target
        return [p for p in kept if not any(p.startswith(lp + "/") for _, lp in links)]

    if not image:
        return [(p, p) for p in outermost(binds + _python_dirs() + list(extra))], links
    base = [p for p in outermost(binds + _python_dirs()) if os.path.lexists(image + p)]
    extra = [p for p in outermost(list(extra)) if p not in base]
    for p in extra:
        if any(p.startswith(b.rstrip("/") + "/") for b in base):
            image_mount_point(image, p)
    return [(image + p, p) for p in base] + [((copies or {}).get(p, p), p) for p in extra], links


def _writable_roots(lay: Layout) -> list[str]:
    """Folders inside the sandbox that the job may write to (and so rename what they hold)."""
    return ["/tmp", "/dev/shm", INNER_WORKDIR] + [inner for _, inner, read_only in lay.mount_sources() if not read_only]


def _skeletons(lay: Layout, binds: list[str]) -> list[tuple[str, str]]:
    """(host folder, path inside) of the read-only skeletons that hold the mount points of `binds`
    lying deeper than one level below a folder the job writes to, made here under the job's folder.

    Without one, the folders between (e.g. /tmp/x of a venv bound at /tmp/x/venv) would be made in the
    job's own /tmp, where it could rename /tmp/x and plant its own /tmp/x/venv/bin/python3."""
    tops: dict[str, list[str]] = {}
    for p in binds:
        for w in _writable_roots(lay):
            first, _, below = p[len(w) + 1 :].partition("/") if p.startswith(w + "/") else ("", "", "")
            if below:
                tops.setdefault(f"{w}/{first}", []).append(below)
    out = []
    for i, (top, belows) in enumerate(sorted(tops.items())):
        host = os.path.join(lay.jobroot, "skel", str(i))
        os.makedirs(host, 0o755, exist_ok=True)
        for below in belows:
            point = os.path.join(host, below)
            os.makedirs(os.path.dirname(point), 0o755, exist_ok=True)
            if os.path.isdir(f"{top}/{below}"):  # binds are shown at their own host path
                os.makedirs(point, 0o755, exist_ok=True)
            else:
                os.close(os.open(point, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644))
        for root, dirs, _ in os.walk(host):  # makedirs' mode is masked by the umask
            for d in [root] + [os.path.join(root, n) for n in dirs]:
                os.chmod(d, 0o755)
        out.append((host, top))
    return out


def _under_skeleton(p: str, skeletons: list[tuple[str, str]]) -> bool:
    return any(p.startswith(top + "/") for _, top in skeletons)


@functools.cache
def bwrap_disables_userns() -> bool:
    """This bubblewrap has --disable-userns (0.8.0 and later)."""
    exe = shutil.which("bwrap")
    if exe is None:
        return False
    try:
        out = subprocess.run([exe, "--help"], capture_output=True, timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return b"--disable-userns" in out.stdout + out.stderr


def _ancestors(path: str) -> list[str]:
    parts = path.strip("/").split("/")[:-1]
    return ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


def prlimit_argv(limits: Limits) -> list[str]:
    mib = 1024 * 1024
    return [
        shutil.which("prlimit") or "prlimit",
        # SIGXCPU at the soft limit, SIGKILL one second later for a job that ignores it
        f"--cpu={max(1, math.ceil(limits.cpu_s))}:{max(1, math.ceil(limits.cpu_s)) + 1}",
        f"--as={int(limits.memory_mb) * mib}",
        f"--nproc={int(limits.nproc)}",
        f"--fsize={int(limits.fsize_mb) * mib}",
        f"--nofile={int(limits.nofile)}",
        "--core=0",
        "--",
    ]


def _setpriv_argv(uid: int | None) -> list[str]:
    """Drop every capability (and, given a uid, become it); also for a root mapped in a user namespace."""
    ids = [f"--reuid={uid}", f"--regid={uid}", "--clear-groups"] if uid is not None else []
    return ["setpriv", *ids, "--no-new-privs", "--bounding-set=-all", "--inh-caps=-all", "--"]


def bwrap_argv(lay: Layout, cmd: list[str], own_network: bool = True) -> list[str]:
    """`own_network=False`: the job stays in the network namespace bwrap starts in (one the host entered)."""
    sources, links = _ro_paths(lay.ro_binds, lay.image, lay.ro_copies)
    binds = [p for _, p in sources]
    argv = [
        shutil.which("bwrap") or "bwrap",
        "--unshare-ipc",
        "--unshare-pid",
        *(["--unshare-net"] if own_network else []),
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--die-with-parent",
        "--new-session",
    ]
    if lay.time_binary:
        # GNU time is the namespace's first process: it reaps orphans and, when it exits, the kernel
        # kills whatever the job left; bwrap's own init would be one more process per job
        argv += ["--as-pid-1"]
    if lay.uid is None:
        argv += ["--unshare-user"]
        if bwrap_disables_userns():  # the seccomp filter refuses them too; this covers a machine without one
            argv += ["--disable-userns"]
    made: set[str] = set()

    def dirs_for(dest: str) -> list[str]:
        out = []
        for a in _ancestors(dest):
            if a not in made:
                made.add(a)
                out += ["--perms", "0755", "--dir", a]
        return out

    for target, link in links:
        argv += ["--symlink", target, link]
        made.add(link)
    argv += ["--proc", "/proc", "--dev", "/dev"]
    made.update({"/proc", "/dev"})
    for dev in lay.devices:
        argv += dirs_for(dev) + ["--dev-bind", dev, dev]
    if lay.shmdir:
        argv += ["--bind", lay.shmdir, "/dev/shm"]
    argv += ["--bind", lay.tmpdir, "/tmp", "--bind", lay.workdir, INNER_WORKDIR]
    made.update({"/tmp", INNER_WORKDIR})
    skeletons = _skeletons(lay, binds)
    for host, top in skeletons:
        argv += ["--ro-bind", host, top]
        made.add(top)
    for src, p in sources:
        argv += ([] if _under_skeleton(p, skeletons) else dirs_for(p)) + ["--ro-bind", src, p]
        made.add(p)
    if lay.time_binary:
        argv += dirs_for(INNER_TIME) + ["--ro-bind", lay.time_binary, INNER_TIME]
    for src, inner, read_only in lay.mount_sources():
        argv += dirs_for(inner) + ["--ro-bind" if read_only else "--bind", src, inner]
        made.add(inner)
    for src, rel in lay.ro_files:
        argv += ["--ro-bind", src, f"{INNER_WORKDIR}/{rel}"]
    argv += ["--remount-ro", "/", "--chdir", INNER_WORKDIR]  # the last mount step: nothing is made after it
    if lay.uid is not None:
        argv += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP"]
    argv += ["--"]
    uid_drop = _setpriv_argv(lay.uid) if lay.uid is not None else []  # bwrap itself drops caps otherwise
    return argv + usage_argv(INNER_TIME if lay.time_binary else None) + lay.last_step() + uid_drop + list(cmd)


def unshare_argv(lay: Layout, cmd: list[str], own_network: bool = True) -> list[str]:
    """`own_network=False`: the job stays in the network namespace unshare starts in (one the host entered)."""
    sources, links = _ro_paths(lay.ro_binds, lay.image, lay.ro_copies)
    binds = [p for _, p in sources]
    q = shlex.quote
    root = os.path.join(lay.jobroot, "root")
    os.makedirs(root, exist_ok=True)
    lines = ["set -e", f"R={q(root)}", 'mount -t tmpfs -o mode=755 tempering "$R"']
    if own_network and IP:
        lines.append(f"{q(IP)} link set lo up")
    for target, link in links:
        lines.append(f'ln -s {q(target)} "$R"{q(link)}')
    lines += [
        'mkdir "$R/proc" "$R/dev" "$R/tmp" "$R/job"',
        'mount -t proc proc "$R/proc"',
        'mount -t tmpfs -o mode=755 tempering-dev "$R/dev"',
    ]
    for dev in [f"/dev/{d}" for d in _DEVICES if os.path.exists(f"/dev/{d}")] + lay.devices:
        lines.append(f'mkdir -p "$R"{q(os.path.dirname(dev))}; : > "$R"{q(dev)}; mount --bind {q(dev)} "$R"{q(dev)}')
    lines += [
        'ln -s /proc/self/fd "$R/dev/fd"; ln -s /proc/self/fd/0 "$R/dev/stdin"',
        'ln -s /proc/self/fd/1 "$R/dev/stdout"; ln -s /proc/self/fd/2 "$R/dev/stderr"',
    ]
    if lay.shmdir:
        lines += ['mkdir "$R/dev/shm"', f'mount --bind {q(lay.shmdir)} "$R/dev/shm"']
    lines += [f'mount --bind {q(lay.tmpdir)} "$R/tmp"', f'mount --bind {q(lay.workdir)} "$R/job"']
    ro = [(src, f'"$R/job/"{q(rel)}') for src, rel in lay.ro_files]
    if lay.time_binary:
        lines.append(f'mkdir -p "$R"{q(os.path.dirname(INNER_TIME))}; : > "$R"{q(INNER_TIME)}')
        ro.append((lay.time_binary, f'"$R"{q(INNER_TIME)}'))
    for src, dest in ro:
        lines += [f"mount --bind {q(src)} {dest}", f"mount -o remount,bind,ro {dest}"]
    skeletons = _skeletons(lay, binds)
    for host, top in skeletons:
        lines += [
            f'mkdir -p "$R"{q(top)}',
            f'mount --bind {q(host)} "$R"{q(top)}',
            f'mount -o remount,bind,ro "$R"{q(top)}',
        ]
    for src, p in sources:  # after /tmp, so that a path below /tmp is not hidden by the job's own /tmp
        if _under_skeleton(p, skeletons):
            make = []  # the mount point is in the read-only skeleton
        elif os.path.isdir(src):
            make = [f'mkdir -p "$R"{q(p)}']
        else:
            make = [f'mkdir -p "$R"{q(os.path.dirname(p))}; : > "$R"{q(p)}']
        lines += make + [f'mount --rbind {q(src)} "$R"{q(p)}', f'mount -o remount,bind,ro "$R"{q(p)}']
    for src, inner, read_only in lay.mount_sources():
        lines += [f'mkdir -p "$R"{q(inner)}', f'mount --bind {q(src)} "$R"{q(inner)}']
        if read_only:
            lines.append(f'mount -o remount,bind,ro "$R"{q(inner)}')
    lines.append('mount -o remount,bind,ro "$R"')  # the last mount step: nothing is made after it
    run = usage_argv(INNER_TIME if lay.time_binary else None) + lay.last_step() + _setpriv_argv(lay.uid) + list(cmd)
    # exec: GNU time becomes the namespace's first process, and no shell of ours keeps the status fd
    lines.append(f'exec {q(_CHROOT)} "$R" /bin/sh -c \'cd /job && exec "$@"\' job {" ".join(map(q, run))}')
    argv = [
        shutil.which("unshare") or "unshare",
        "--mount",
        "--pid",
        "--fork",
        *(["--net"] if own_network else []),
        "--ipc",
        "--uts",
        "--cgroup",  # the job sees its own cgroup as the root: neither the host's cgroup path nor its pid
        "--kill-child",
        "--propagation",
        "private",
    ]
    if lay.uid is None:
        argv += ["--user", "--map-root-user"]
    return argv + ["/bin/sh", "-c", "\n".join(lines)]


GVISOR_STATUS = "/.tempering/status"
"""Where the status log's folder appears inside a gvisor job (see `Layout.status_dir`)."""
RUNSC_INSTALL = "install gVisor's runsc (Debian: apt-get install runsc; or `sudo make system-deps`)"


def gvisor_argv(lay: Layout, cmd: list[str], env: dict[str, str], limits: Limits) -> list[str]:
    """`runsc run` of an OCI bundle written under the job's folder: the same file system view as bwrap's
    (system folders and the Python installation read-only, /job, /tmp, /dev/shm, the mounts) in gVisor's
    application kernel, which answers the job's system calls itself, with no network but loopback.

    runsc passes no descriptor but stdin, stdout and stderr, so the job's first process (root inside)
    opens the status log in a folder only root may write as fd 3, then sets the rlimits (prlimit around
    runsc would limit gVisor itself), and the rest is as in the other backends."""
    import json

    sources, links = _ro_paths(lay.ro_binds, lay.image, lay.ro_copies)
    binds = [p for _, p in sources]
    rootfs = os.path.join(lay.jobroot, "rootfs")
    os.makedirs(os.path.join(rootfs, ".tempering", "status"), 0o755)
    for target, link in links:
        os.symlink(target, rootfs + link)
    mounts: list[dict] = [
        {"destination": "/proc", "type": "proc", "source": "proc"},
        {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "mode=755"]},
    ]

    def bind(src: str, dest: str, read_only: bool) -> None:
        mounts.append(
            {"destination": dest, "type": "bind", "source": src, "options": ["rbind", "ro" if read_only else "rw"]}
        )

    if lay.shmdir:
        bind(lay.shmdir, "/dev/shm", False)
    bind(lay.tmpdir, "/tmp", False)
    bind(lay.workdir, INNER_WORKDIR, False)
    skeletons = _skeletons(lay, binds)
    for host, top in skeletons:
        bind(host, top, True)
    for src, p in sources:
        bind(src, p, True)
    bind(lay.status_dir, GVISOR_STATUS, False)
    for src, inner, read_only in lay.mount_sources():
        bind(src, inner, read_only)
    for src, rel in lay.ro_files:
        bind(src, f"{INNER_WORKDIR}/{rel}", True)
    first = ["/bin/sh", "-c", f'exec {STATUS_FD}>>{GVISOR_STATUS}/log && exec "$@"', "sandbox"]
    prlimit = ["/usr/bin/prlimit"] + prlimit_argv(limits)[1:]
    # GNU time from /usr: gVisor reads a binary to run it, so an execute-only copy would not run; the job
    # (another uid) cannot open the /proc files of root's processes anyway
    args = first + prlimit + usage_argv(TIME, append=True) + lay.last_step()
    args += _setpriv_argv(lay.uid) + list(cmd)
    caps = ["CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP"]
    config = {
        "ociVersion": "1.0.0",
        "process": {
            "user": {"uid": 0, "gid": 0},
            "args": args,
            "env": [f"{k}={v}" for k, v in env.items()],
            "cwd": INNER_WORKDIR,
            "capabilities": {k: caps for k in ("bounding", "effective", "permitted")},
            "rlimits": [{"type": "RLIMIT_CORE", "hard": 0, "soft": 0}],
        },
        "root": {"path": rootfs, "readonly": True},
        "hostname": "sandbox",
        "mounts": mounts,
        "linux": {"namespaces": [{"type": t} for t in ("pid", "network", "ipc", "uts", "mount")]},
    }
    bundle = os.path.join(lay.jobroot, "bundle")
    os.mkdir(bundle, 0o700)
    with open(os.path.join(bundle, "config.json"), "w") as f:
        json.dump(config, f)
    state = os.path.join(lay.jobroot, "runsc")
    os.mkdir(state, 0o700)
    runsc = shutil.which("runsc") or "runsc"
    flags = ["--rootless", "--network=none", "--platform=ptrace", "--ignore-cgroups", f"--root={state}"]
    return [runsc, *flags, "run", "--bundle", bundle, os.path.basename(lay.jobroot)]


@functools.cache
def probe(backend: str) -> str:
    """Empty string if `backend` works on this machine, else why not (cached per process)."""
    if backend == "subprocess":
        return "" if shutil.which("prlimit") else "the prlimit command (util-linux) is missing"
    exe = {"bwrap": "bwrap", "unshare": "unshare", "gvisor": "runsc"}.get(backend)
    if exe is None:
        return f"unknown backend {backend!r}"
    if backend == "gvisor":
        if not shutil.which("runsc"):
            return f"runsc not found on PATH: {RUNSC_INSTALL}"
        if os.geteuid() != 0:
            return "gvisor needs a root host here (its jobs' files are checked by uid); use bwrap"
    needs_setpriv = os.geteuid() == 0 or backend == "unshare"
    missing = [b for b in (exe, "prlimit") + (("setpriv",) if needs_setpriv else ()) if not shutil.which(b)]
    if missing:
        return f"{', '.join(missing)} not found on PATH"
    import tempfile

    with tempfile.TemporaryDirectory(prefix="tempering-probe-") as d:
        lay = Layout(
            jobroot=d,
            workdir=os.path.join(d, "work"),
            tmpdir=os.path.join(d, "tmp"),
            uid=65534 if os.geteuid() == 0 else None,
            supervisor=seccomp.supervisor_argv(),
        )
        os.makedirs(lay.workdir)
        os.makedirs(lay.tmpdir)
        if lay.uid is not None:
            os.chmod(d, 0o755)
        env = {"PATH": job_path(), "TIME": "probe %M %U %S"}
        if backend == "gvisor":
            lay.status_dir = os.path.join(d, "status")
            os.mkdir(lay.status_dir, 0o700)
            argv, env = gvisor_argv(lay, ["/bin/true"], env, Limits()), {"PATH": "/usr/bin:/bin"}
        else:
            build = bwrap_argv if backend == "bwrap" else unshare_argv
            argv = ["/bin/sh", "-c", f'exec {STATUS_FD}>/dev/null; exec "$@"', "probe"] + build(lay, ["/bin/true"])
        try:
            proc = subprocess.run(argv, capture_output=True, timeout=60, env=env, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as e:
            return f"{exe} failed to start: {e}"
        if proc.returncode != 0:
            why = proc.stderr.decode(errors="replace").strip()[-300:]
            if backend == "gvisor":
                return f"runsc cannot start a sandbox here ({why}); gvisor needs ptrace and a Linux host"
            return f"{exe} cannot create namespaces here: {why}"
    return ""
