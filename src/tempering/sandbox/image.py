"""The read-only image jobs see, copied once per host onto a RAM disk.

A file every job can read is one memory shared by all of them: on a disk, its pages are cached or not,
and the time a read takes (microseconds against milliseconds) tells a job whether an earlier job read it.
On a RAM disk (tmpfs) a file's pages and names are always in memory, so a read takes the same time
whoever read it before, and no job can change that. So the system files and the Python installation
that jobs see are copies on a RAM disk, not the host's files: the Debian packages a job's tools come
from (the essential and required ones, `SYSTEM_PACKAGES` and everything they depend on, without their
documentation), `/etc`, the interpreter's installation without its test suite, the libraries it links,
and the virtualenv with only the distributions named (`PYTHON_DISTRIBUTIONS` by default) and what they
require. The image is named by a hash of what it is made from (the package database, /etc, the interpreter, the
virtualenv's installed distributions), so it is built once per host and virtualenv and rebuilt when the
system or the virtualenv changes.

A path that gets more than the default image (terminal tasks: the tools and distributions the task
declares; kernel jobs: torch) names a `Spec`, an image of its own built the same way, and a host folder a
job binds (`Job.ro_binds`) is copied onto the RAM disk too (`copy`), named by a hash of its files. Every
process that uses an image or a copy holds a shared lock on its `.lock` file for as long as it runs; a
build removes the images and copies no live process holds (other installations, earlier versions).
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import importlib.metadata
import json
import os
import py_compile
import re
import shutil
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass

from tempering.errors import UserError

SYSTEM_PACKAGES = ("time", "util-linux", "gcc", "g++", "make", "libc6-dev")
"""Debian packages in every image beyond the essential and required ones (with their dependencies): GNU
time, setpriv and prlimit, which run every job, and a C/C++ toolchain."""
PYTHON_DISTRIBUTIONS = ("pytest", "numpy")
"""Distributions of the virtualenv in the default image (with what they require), those this Python has
(a system Python without numpy still gets an image)."""
_NOT_COPIED = ("/usr/share/doc/", "/usr/share/man/", "/usr/share/info/", "/usr/share/locale/", "/usr/share/lintian/")
_STDLIB_NOT_COPIED = ("test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "unittest/test")
_FORMAT = 5
"""Part of every image's name: a change to what an image holds bumps it."""
_PREFIXES = ("tempering-image-", "tempering-copy-")
"""Names of the folders this module makes under a RAM disk (images, copies of bound folders)."""
_HELD: dict[str, int] = {}
"""Lock file -> descriptor holding its shared lock, for as long as this process runs."""


@dataclass(frozen=True)
class Spec:
    """What an image holds beyond the essential and required Debian packages and the interpreter."""

    packages: tuple[str, ...] = SYSTEM_PACKAGES
    """Debian packages (with what they depend on), those the host has installed."""
    distributions: tuple[str, ...] = PYTHON_DISTRIBUTIONS
    """Distributions of the virtualenv (with what they require)."""
    python_startup: str = ""
    """Python source every interpreter the image holds runs when it starts, before any code of the job's
    and whatever its flags or environment (`install_startup`); empty: none."""


STARTUP_MODULE = "_tempering_startup"
"""The name the image's start-up source runs under, in each standard library folder of the image."""
_STARTUP_HOOK = """\
def _startup(path={path!r}):  # added by tempering's sandbox image: its start-up module runs first
    import sys
    from _frozen_importlib import module_from_spec
    from _frozen_importlib_external import spec_from_file_location

    spec = spec_from_file_location({name!r}, path)
    sys.modules[spec.name] = module = module_from_spec(spec)
    spec.loader.exec_module(module)


_startup()
del _startup
"""


def install_startup(root: str, stdlib: str, source: str) -> None:
    """Make every interpreter whose standard library is `stdlib` (as the job sees it; `root` + `stdlib` on
    the host) run `source` first. The hook is the first thing `encodings` runs: CPython 3.11 to 3.13 import
    that package from its folder (never frozen) while they start, before `site`, whatever the flags: `-I`,
    `-E` and `env -i` leave it (they skip the environment and the user's site-packages), `-S` too (it skips
    `site`, where a `sitecustomize` or `.pth` would run), `-X frozen_modules=off` only reads more modules
    from the same read-only folder. A stale bytecode cache of `encodings` is removed."""
    folder = root + stdlib
    with open(os.path.join(folder, STARTUP_MODULE + ".py"), "w") as f:
        f.write(source)
    init = os.path.join(folder, "encodings", "__init__.py")
    with open(init) as f:
        original = f.read()
    hook = _STARTUP_HOOK.format(path=os.path.join(stdlib, STARTUP_MODULE + ".py"), name=STARTUP_MODULE)
    os.unlink(init)  # a copy, maybe read-only
    with open(init, "w") as f:
        f.write(hook + "\n" + original)
    cache = os.path.join(folder, "encodings", "__pycache__")
    for name in os.listdir(cache) if os.path.isdir(cache) else []:
        if name.startswith("__init__."):
            os.unlink(os.path.join(cache, name))
    written = [init, os.path.join(folder, STARTUP_MODULE + ".py")]
    if os.path.basename(stdlib) == f"python{sys.version_info[0]}.{sys.version_info[1]}":  # our bytecode's version
        for path in written[:2]:
            stem = os.path.splitext(os.path.basename(path))[0]
            written.append(
                os.path.join(os.path.dirname(path), "__pycache__", f"{stem}.{sys.implementation.cache_tag}.pyc")
            )
            py_compile.compile(path, written[-1], doraise=True)
    for path in written:  # whatever this process's umask: every job's user reads them
        os.chmod(path, 0o644)
        os.chmod(os.path.dirname(path), 0o755)


def stdlib_folders(files: list[str]) -> list[str]:
    """The standard library folders among an image's files: those holding `encodings/__init__.py` and `os.py`."""
    found = {f[: -len("/encodings/__init__.py")] for f in files if f.endswith("/encodings/__init__.py")}
    return sorted(found & {f[: -len("/os.py")] for f in files if f.endswith("/os.py")})


def ram_disk(path: str) -> str:
    """The mount point of the RAM disk (tmpfs) holding `path`, or '' when `path` lies on anything else."""
    best, fstype = "", ""
    with open("/proc/self/mounts") as f:
        for line in f:
            parts = line.split()
            point = parts[1].replace("\\040", " ")
            if (path == point or path.startswith(point.rstrip("/") + "/")) and len(point) >= len(best):
                best, fstype = point, parts[2]
    return best if fstype == "tmpfs" else ""


def _packages(names: tuple[str, ...]) -> list[str]:
    """Installed Debian packages: the essential and required ones, `names`, and all they depend on."""
    if not shutil.which("dpkg-query"):
        raise UserError(
            "the sandbox's RAM image is made of Debian packages and needs dpkg-query; "
            "pass image='host' to Sandbox to show jobs the host's own files."
        )
    fmt = "${Package}\t${Essential}\t${Priority}\t${db:Status-Status}\t${Pre-Depends}, ${Depends}\n"
    out = subprocess.run(["dpkg-query", "-W", "-f", fmt], capture_output=True, text=True, check=True).stdout
    deps: dict[str, list[str]] = {}
    roots = list(names)
    for line in out.splitlines():
        name, essential, priority, status, needs = line.split("\t")
        if status != "installed":
            continue
        deps[name] = [re.split(r"[\s(:]", alt.strip())[0] for d in needs.split(",") for alt in d.split("|")]
        if essential == "yes" or priority == "required":
            roots.append(name)
    missing = [n for n in names if n not in deps]
    if missing:
        raise UserError(f"the sandbox's RAM image needs Debian packages not installed here: {' '.join(missing)}.")
    seen: set[str] = set()
    while roots:
        name = roots.pop()
        if name in deps and name not in seen:
            seen.add(name)
            roots += deps[name]
    return sorted(seen)


def _package_files(packages: list[str]) -> set[str]:
    out = subprocess.run(["dpkg-query", "-L", *packages], capture_output=True, text=True, check=True).stdout
    return {p for p in out.splitlines() if p.startswith("/") and not p.startswith(_NOT_COPIED)}


def _walk(top: str, skip: tuple[str, ...] = ()) -> set[str]:
    """Every file and link below `top`, without the folders `skip` (relative to `top`)."""
    out: set[str] = set()
    for root, dirs, files in os.walk(top):
        rel = os.path.relpath(root, top)
        dirs[:] = [d for d in dirs if os.path.normpath(os.path.join(rel, d)) not in skip]
        out.update(os.path.join(root, n) for n in files + [d for d in dirs if os.path.islink(os.path.join(root, d))])
    return out


def _required(dist: importlib.metadata.Distribution) -> list[str]:
    """Names of the distributions `dist` requires without an extra."""
    return [re.split(r"[\s;<>=!~\[(]", r, maxsplit=1)[0] for r in dist.requires or [] if "extra" not in r]


def _python_files(distributions: tuple[str, ...]) -> set[str]:
    """The interpreter's installation (no test suite) and the virtualenv with `distributions` and what
    they require."""
    paths = sysconfig.get_paths()
    stdlib = os.path.realpath(paths["stdlib"])
    files = _walk(
        stdlib,
        _STDLIB_NOT_COPIED
        + ("site-packages", "dist-packages")
        + tuple(d for d in os.listdir(stdlib) if d.startswith("config-")),
    )
    files |= _walk(paths["include"]) if os.path.isdir(paths["include"]) else set()  # Python.h: C extensions' builds
    exe = os.path.realpath(sys.executable)
    files.add(exe)
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    for name in os.listdir(libdir) if os.path.isdir(libdir) else []:
        if name.startswith("libpython") and ".so" in name:
            files.add(os.path.join(libdir, name))
    if sys.prefix != sys.base_prefix:
        files.add(os.path.join(sys.prefix, "pyvenv.cfg"))
        files.update(_walk(os.path.join(sys.prefix, "bin")))
    todo, seen = list(distributions), set()
    while todo:
        name = re.sub(r"[-_.]+", "-", todo.pop()).lower()
        if name in seen:
            continue
        seen.add(name)
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            if name in distributions and distributions != PYTHON_DISTRIBUTIONS:  # the default: those it has
                raise UserError(f"the sandbox's RAM image names {name!r}, which this Python does not have.") from None
            continue
        files.update(str(dist.locate_file(f)) for f in dist.files or [])
        todo += _required(dist)
    return {os.path.normpath(f) for f in files if os.path.lexists(f)}


def _linked(files: set[str]) -> set[str]:
    """The shared libraries that the ELF files among `files` load (as `ldd` finds them), with their links."""
    elf = [f for f in files if not os.path.islink(f) and _is_elf(f)]
    out: set[str] = set()
    for i in range(0, len(elf), 200):
        res = subprocess.run(["ldd", *elf[i : i + 200]], capture_output=True, text=True)
        for m in re.finditer(r"=> (/\S+)", res.stdout):
            out.update({m.group(1), os.path.realpath(m.group(1))})
    return out


def _is_elf(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def _contents(packages: tuple[str, ...], distributions: tuple[str, ...]) -> list[str]:
    python = _python_files(distributions)
    files = _package_files(_packages(packages)) | _walk("/etc") | python
    files |= _linked(python)
    # each at its real folder (a path through a link, /lib/x of a merged-usr system, is copied as
    # usr/lib/x), with every link on the way to a linked file (python3 -> python3.11)
    real = set()
    for f in files:
        for _ in range(40):
            f = os.path.join(os.path.realpath(os.path.dirname(f)), os.path.basename(f))
            real.add(f)
            if not os.path.islink(f):
                break
            f = os.path.join(os.path.dirname(f), os.readlink(f))
    kept = {f for f in real if (os.path.islink(f) or os.path.isfile(f)) and not f.startswith(_NOT_COPIED)}
    # links no package lists (the alternatives system's /usr/bin/awk -> /etc/alternatives/awk -> mawk)
    walked = _walk("/usr")
    kept |= {f for f in walked if os.path.islink(f) and not f.startswith(_NOT_COPIED) and os.path.realpath(f) in kept}
    return sorted(kept)


def _key(packages: tuple[str, ...], distributions: tuple[str, ...], startup: str = "") -> str:
    """A hash of what the image is made from: the package database, /etc, the interpreter, the
    virtualenv's installed distributions (their metadata folders change with every install) and the
    start-up source."""
    h = hashlib.sha256(json.dumps([_FORMAT, packages, distributions, sys.prefix, startup]).encode())
    site = sysconfig.get_paths()["purelib"]
    sources = ["/var/lib/dpkg/status", os.path.realpath(sys.executable), site, *sorted(_walk("/etc"))]
    sources += sorted(os.path.join(site, n) for n in os.listdir(site) if n.endswith((".dist-info", ".egg-info")))
    for f in sources:
        st = os.lstat(f) if os.path.lexists(f) else None
        h.update(f"{f}\0{st and (st.st_size, st.st_mtime_ns, st.st_mode)}\n".encode())
    return h.hexdigest()[:24]


def _copy(files: list[str], dest: str) -> None:
    for f in files:
        target = dest + f
        os.makedirs(os.path.dirname(target), 0o755, exist_ok=True)
        if os.path.islink(f):
            os.symlink(os.readlink(f), target)
        else:
            try:
                shutil.copy2(f, target, follow_symlinks=False)
            except PermissionError:  # a file the host's user may not read is not the jobs' either
                continue
    for root, dirs, _ in os.walk(dest):  # makedirs' mode is masked by the umask
        for d in dirs:
            if not os.path.islink(os.path.join(root, d)):  # a link's mode is its target's (/var/run -> /run)
                os.chmod(os.path.join(root, d), 0o755)
    os.chmod(dest, 0o755)


def mount_point(image: str, path: str) -> None:
    """Make the folder or empty file in `image` on which a host path is bound over it (`Job.ro_binds`)."""
    target = image + path
    if os.path.lexists(target):
        return
    os.makedirs(os.path.dirname(target), 0o755, exist_ok=True)
    if os.path.isdir(path):
        os.makedirs(target, 0o755, exist_ok=True)
    else:
        os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644))


def _hold(lock: str) -> None:
    """Take a shared lock on `lock` (made if missing) for the rest of this process's life: no build
    elsewhere removes what it guards while the lock is held."""
    if lock in _HELD:
        return
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        fcntl.flock(fd, fcntl.LOCK_SH)
        try:
            same = os.stat(lock).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:  # else removed by a build between our open and our lock: lock the new one
            _HELD[lock] = fd
            return
        os.close(fd)


def remove_unused(parent: str, keep: str) -> list[str]:
    """Remove the images and copies under `parent` other than `keep` that no live process holds (their
    `.lock` is free), the free locks of builds that failed, and folders left half-built by processes that
    died. Returns what it removed.
    An image without a lock file (made before locks) is left alone: nothing tells whether one uses it."""
    removed = []
    for name in sorted(os.listdir(parent)):
        path = os.path.join(parent, name)
        if not name.startswith(_PREFIXES) or path == keep:
            continue
        if name.endswith(".lock"):
            path = path.removesuffix(".lock")
            if path == keep or os.path.lexists(path):
                continue  # else a failed build's lock, its folder never made
        if ".building-" in name:
            pid = name.rsplit("-", 1)[1]
            if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
            continue
        lock = path + ".lock"
        try:
            fd = os.open(lock, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        try:
            shutil.rmtree(path, ignore_errors=True)
            os.unlink(lock)  # a process waiting on this lock file finds it gone and locks the next one
            removed.append(path)
        finally:
            os.close(fd)
    return removed


def _made(path: str, parent: str, make, what: str) -> str:
    """`path`, held by this process; made by `make(folder)` into a folder renamed to `path` unless it is
    there. The first build in a process removes what no live process holds under `parent`."""
    _hold(path + ".lock")
    if os.path.isdir(path):
        return path
    remove_unused(parent, path)
    building = f"{path}.building-{os.getpid()}"
    shutil.rmtree(building, ignore_errors=True)
    os.makedirs(building, 0o755)
    try:
        make(building)
        os.rename(building, path)
    except OSError as e:
        shutil.rmtree(building, ignore_errors=True)
        if not os.path.isdir(path):  # else made by another process meanwhile
            raise RuntimeError(f"could not make the sandbox's {what} {path}: {e}") from e
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    return path


def _on_ram_disk(parent: str) -> None:
    if not ram_disk(parent):
        raise UserError(
            f"the sandbox's RAM image must lie on a RAM disk (tmpfs), and {parent} does not; "
            "pass root= a folder on one (e.g. /dev/shm), or image='host'."
        )


@functools.cache
def build(parent: str, spec: Spec = Spec()) -> str:
    """The image's folder under `parent` (a RAM disk), made unless an image of the same contents is there."""
    _on_ram_disk(parent)
    packages, distributions = tuple(spec.packages), tuple(spec.distributions)

    def make(building: str) -> None:
        start = time.monotonic()
        files = _contents(packages, distributions)
        _copy(files, building)
        stdlibs = stdlib_folders(files) if spec.python_startup else []
        if spec.python_startup and os.path.realpath(sysconfig.get_paths()["stdlib"]) not in stdlibs:
            raise UserError(
                f"the sandbox's image needs a start-up module in this Python's standard library, and "
                f"{sysconfig.get_paths()['stdlib']} has no encodings/__init__.py and os.py to hold it."
            )
        for stdlib in stdlibs:
            install_startup(building, stdlib, spec.python_startup)
        size = sum(os.lstat(building + f).st_size for f in files if os.path.lexists(building + f))
        about = {"files": len(files), "bytes": size, "build_s": round(time.monotonic() - start, 3)}
        with open(os.path.join(building, ".tempering-image.json"), "w") as f:
            json.dump({**about, "packages": list(packages), "distributions": list(distributions)}, f)

    path = os.path.join(parent, f"tempering-image-{_key(packages, distributions, spec.python_startup)}")
    return _made(path, parent, make, "image")


def copy(parent: str, source: str) -> str:
    """A copy of the host file or folder `source` under `parent` (a RAM disk), named by a hash of its
    files' names, sizes, times and modes (made once per contents, looked up for every job: a toolkit's
    tens of thousands of files take tens of milliseconds): what a job binds at `source` instead of the
    host's own, whose cached pages every job could time. Links are copied as links."""
    _on_ram_disk(parent)
    files = sorted(_walk(source)) if os.path.isdir(source) and not os.path.islink(source) else [source]
    h = hashlib.sha256(json.dumps([_FORMAT, source]).encode())
    for f in files:
        st = os.lstat(f)
        h.update(f"{f}\0{st.st_size, st.st_mtime_ns, st.st_mode}\n".encode())

    def make(building: str) -> None:
        _copy(files, building)
        if os.path.isdir(source):
            os.makedirs(building + source, 0o755, exist_ok=True)  # an empty folder is shown empty

    path = os.path.join(parent, f"tempering-copy-{h.hexdigest()[:24]}")
    return _made(path, parent, make, "copy of a bound folder") + source
