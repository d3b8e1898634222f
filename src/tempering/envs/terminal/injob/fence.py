"""The tests' own files (their folder, the reward folder, the tests' job's own folders: `tests_own` in the
guard's settings) fenced off from what the solution made, in every Python the tests start (loaded by the
tests' guard, `guard.py`):

- **no link leads into them**: a file of theirs is opened only by a name inside their folders, never
  through a symbolic link elsewhere, whoever made it (the solution, or the tests' own `tarfile`, GNU
  `tar` or `unzip` unpacking an archive the solution wrote), so `filecmp` never compares a fixture with
  itself. A hard link cannot be made to them at all: they are mounts of their own, and the kernel
  refuses a link between mounts (EXDEV).
- **the solution's programs do not share the tests' authority**: a program the tests start from a
  folder they can write (a Python main script or `-m` module there; a program a Python of the tests'
  starts with `subprocess` whose executable or an argument lies there) runs under a Landlock ruleset
  it cannot drop, inherited by everything it starts, daemons and double forks included: no access to
  the reward folder (it cannot write, replace or remove the reward) and, of the tests' folder, only
  the files and folders named in its arguments (an input the tests hand it), never the rest (their
  expected output). Where the kernel has no Landlock such a program does not run: a clear line on the
  tests' stderr, status 126.

Standard library only, Python 3.8 and later.
"""

import ctypes
import errno
import os
import shlex
import shutil
import sys

OWN: tuple = ()
_REAL_OWN: tuple = ()
_REWARD: tuple = ()


def _under(path: str, roots) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def through_link(path) -> bool:
    """`path` names a file of the tests' own by a name outside their folders: a link leads there."""
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not isinstance(path, str) or not OWN:
        return False
    return _under(os.path.realpath(path), _REAL_OWN) and not _under(os.path.abspath(path), OWN)


# -- Landlock ---------------------------------------------------------------------------------------------
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446  # the same numbers on every architecture
_VERSION, _PATH_BENEATH, _PR_SET_NO_NEW_PRIVS = 1, 1, 38
_EXECUTE, _WRITE_FILE, _READ_FILE, _READ_DIR = 1, 2, 4, 8
_REFER, _TRUNCATE, _IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
_FILE_ONLY = _EXECUTE | _WRITE_FILE | _READ_FILE | _TRUNCATE | _IOCTL_DEV


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _call(nr: int, *args) -> int:
    r = _libc.syscall(ctypes.c_long(nr), *args)
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, f"Landlock: {os.strerror(e)}")
    return r


def _handled(abi: int) -> int:
    return (
        (1 << 13) - 1 | (_REFER if abi >= 2 else 0) | (_TRUNCATE if abi >= 3 else 0) | (_IOCTL_DEV if abi >= 5 else 0)
    )


def ruleset(args=()):
    """A Landlock ruleset (its descriptor, close-on-exec) granting everything but the tests' own folders,
    and of those only what `args` names inside the tests' folder (not the reward folder), for reading.
    None in a process already fenced (it cannot list `/`, which every other process of the tests' can):
    what it starts keeps its ruleset, which it cannot widen."""
    try:
        os.listdir("/")
    except PermissionError:
        return None
    abi = _call(_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_VERSION))
    handled = _handled(abi)
    attr = ctypes.c_uint64(handled)
    fd = _call(_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(8), ctypes.c_uint32(0))

    def grant(path: str, access: int) -> None:
        try:
            if os.path.islink(path):
                return
            target = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            return
        try:
            if not os.path.isdir(path):
                access &= _FILE_ONLY
            rule = _PathBeneath(access & handled, target)
            _call(_ADD_RULE, ctypes.c_int(fd), ctypes.c_int(_PATH_BENEATH), ctypes.byref(rule), ctypes.c_uint32(0))
        finally:
            os.close(target)

    def beside(folder: str) -> None:
        """Everything in `folder` but the fenced paths; folders above a fenced path are walked into."""
        try:
            names = os.listdir(folder)
        except OSError:
            return
        for name in names:
            path = os.path.join(folder, name)
            if _under(path, OWN):
                continue
            if any(o.startswith(path + "/") for o in OWN):
                beside(path)
            else:
                grant(path, handled)

    try:
        beside("/")
        for arg in args:
            path = os.path.realpath(arg) if isinstance(arg, str) and arg.startswith("/") else None
            if path and _under(path, _REAL_OWN) and not _under(path, _REWARD) and os.path.exists(path):
                grant(path, _READ_FILE | _READ_DIR | _EXECUTE)
    except BaseException:
        os.close(fd)
        raise
    return fd


def restrict(fd: int) -> None:
    """This process and all it starts from now on: only what the ruleset grants. Irrevocable."""
    if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    _call(_RESTRICT_SELF, ctypes.c_int(fd), ctypes.c_uint32(0))


def confine(args, say) -> None:
    """Confine this process (a solution's program the tests started), or end it: status 126."""
    try:
        fd = ruleset(args)
        if fd is not None:
            restrict(fd)
            os.close(fd)
    except OSError as e:
        say(f"not run: {sys.argv[0]}, a solution's program the tests started, cannot be confined here ({e})")
        os._exit(126)


# -- what the tests start ---------------------------------------------------------------------------------
def solution_main(writable) -> str:
    """The file of this Python's main program when it lies in a folder `writable` says the tests can write
    (a script, or the top package or module `-m` names found there); else ''."""
    argv = getattr(sys, "orig_argv", None) or []
    if sys.argv and sys.argv[0] not in ("", "-c", "-m", "-"):
        main = os.path.abspath(sys.argv[0])
    elif "-m" in argv[1:]:
        from importlib.machinery import PathFinder

        i = argv.index("-m", 1)
        top = argv[i + 1].partition(".")[0] if i + 1 < len(argv) else ""
        spec = PathFinder.find_spec(top, [p for p in sys.path if not writable(p)] + [os.getcwd()]) if top else None
        main = spec.origin if spec is not None and spec.origin else ""
    else:
        return ""
    for candidate in (main, os.path.realpath(main)):
        if candidate and os.path.exists(candidate) and writable(os.path.dirname(candidate)):
            return candidate
    return ""


def _solution_paths(words, writable, cwd) -> bool:
    for word in words:
        if not isinstance(word, (str, bytes, os.PathLike)):
            continue
        word = os.fsdecode(os.fspath(word))
        path = os.path.join(cwd or os.getcwd(), word)
        if word and not word.startswith("-") and os.path.exists(path):
            folder = path if os.path.isdir(path) else os.path.dirname(path)
            if writable(folder) or writable(os.path.dirname(os.path.realpath(path))):
                return True
    return False


def _shell_words(line: str) -> list:
    try:
        return shlex.split(line)
    except ValueError:  # an unbalanced quote: the shell fails on it anyway
        return line.split()


def guard_subprocess(writable) -> None:
    """A program the tests' Python starts with `subprocess` from the solution's files (its executable, or
    an argument naming a file or folder the tests can write: `bash /app/run.sh`, `node /app/x.js`,
    `/app/a.out`, `git -C /app`) is confined in the child, before it runs."""
    import subprocess

    init = subprocess.Popen.__init__

    def __init__(self, args, *rest, **kwargs):
        words = _shell_words(args) if isinstance(args, str) and kwargs.get("shell") else args
        words = [words] if isinstance(words, (str, bytes, os.PathLike)) else list(words)
        exe = kwargs.get("executable") or (words[0] if words else None)
        if isinstance(exe, (str, bytes)) and "/" not in os.fsdecode(exe):
            exe = shutil.which(os.fsdecode(exe), path=(kwargs.get("env") or os.environ).get("PATH"))
        fd = None
        if _solution_paths([exe, *words], writable, kwargs.get("cwd")):
            fd = ruleset([os.fsdecode(w) for w in words if isinstance(w, (str, bytes))])
        if fd is not None:
            before = kwargs.get("preexec_fn")

            def preexec():
                restrict(fd)
                if before is not None:
                    before()

            kwargs["preexec_fn"] = preexec
            try:
                init(self, args, *rest, **kwargs)
            finally:
                os.close(fd)
            return
        init(self, args, *rest, **kwargs)

    subprocess.Popen.__init__ = __init__  # type: ignore[method-assign]


def install(own, reward, writable, say) -> None:
    """Everything above, in this Python: `own` the tests' own folders, `reward` those of them that hold the
    reward, `writable(folder)` whether the tests can write a folder, `say` a line where the tests' output
    shows it."""
    global OWN, _REAL_OWN, _REWARD
    OWN = tuple(os.path.abspath(p) for p in own)
    _REAL_OWN = tuple({os.path.realpath(p) for p in OWN} | set(OWN))
    _REWARD = tuple(os.path.abspath(p) for p in reward)

    def refuse_links(event, args) -> None:
        if event == "open" and args and through_link(args[0]):
            say(f"refused: {args[0]!r} leads through a link to a file of the tests' own")
            raise PermissionError(errno.EACCES, "a link to a file of the tests' own", args[0])

    sys.addaudithook(refuse_links)
    if solution_main(writable):
        confine(sys.argv[1:], say)
    guard_subprocess(writable)
