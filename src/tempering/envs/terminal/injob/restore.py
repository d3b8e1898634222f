"""Unpack the working folder's state (a tar the previous job packed: the solution's, untrusted) into app/.

    python3 -I -S restore.py DEST [--tests APP_DIR]

Every member must land inside DEST once the links unpacked before it are followed (what tarfile's `tar`
filter checks, done here by hand: Python 3.11.0-3.11.3 and 3.10 before 3.10.12 have no `filter=`);
modes are kept as packed, folders' last (a folder the solution made unreadable is filled first).
`--tests`: the state is for the tests, so a symbolic link may lead only inside the working folder (DEST,
also seen at APP_DIR) or into the environment's installed image (`IMAGE`: the system's folders and the
Python installation the jobs run, a venv's `python -> /usr/bin/python3`), judged on its target resolved
through every spelling (relative, chains of links, `..`, `/proc/self/root`). Any other link (to the
tests' own files at /tests or /job/tests, the verifier's folder, /proc, /dev, /run, /tmp, HOME, or
nowhere) is removed and named on stderr: an allow-list, so a place nobody thought of is out too. So is a module
`encodings` (`first_module`), which a PYTHONPATH naming its folder would put before the interpreter's own,
where the tests' guard starts. Exit 1
with a message when the state cannot be unpacked.
"""

import os
import stat
import sys
import tarfile


def inside(path: str, roots: list) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


IMAGE = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
"""The system folders every isolating backend shows read-only (`sandbox.backends._SYSTEM_PATHS`); with the
installation of the interpreter running this script, the image a job sees."""


def first_module(name: str) -> bool:
    """`name` is a file that would be the module `encodings`, the one module every interpreter imports from
    a folder before its start-up guard runs: `encodings.py`, its `.pyc` or extension, or the `__init__` of
    a package `encodings`."""
    parts = name.split("/")
    if len(parts) > 1 and parts[-2] == "encodings" and parts[-1].startswith("__init__."):
        return True
    return parts[-1].startswith("encodings.") and parts[-1].endswith((".py", ".pyc", ".so"))


def image_roots() -> list:
    return [os.path.realpath(p) for p in (*IMAGE, sys.prefix, sys.base_prefix)]


def main(argv: list) -> int:
    dest = os.path.realpath(argv[0])
    tests = argv[1:2] == ["--tests"]
    roots = [dest] + ([os.path.realpath(argv[2]), argv[2]] if tests and len(argv) > 2 else []) + image_roots()
    os.makedirs(dest, exist_ok=True)
    extra: dict = {"filter": "fully_trusted"} if hasattr(tarfile, "fully_trusted_filter") else {}
    with tarfile.open(".ws-state.tar") as t:
        members = t.getmembers()
        for m in members:
            name = m.name.lstrip("/")
            if not inside(os.path.realpath(os.path.join(dest, name)), [dest]) or (
                m.islnk() and not inside(os.path.realpath(os.path.join(dest, m.linkname.lstrip("/"))), [dest])
            ):
                print(f"restore: {m.name!r} leaves the working folder", file=sys.stderr)
                return 1
            m.name = name
            if m.isdir():  # open while it is filled; its own mode comes last
                os.makedirs(os.path.join(dest, name), 0o700, exist_ok=True)
                os.chmod(os.path.join(dest, name), 0o700)
            elif m.isfile() or m.issym() or m.islnk() or m.isfifo():
                t.extract(m, dest, set_attrs=True, **extra)
        if tests:  # judged all first: a link out through another one goes too
            links = [m for m in members if m.issym() and os.path.islink(os.path.join(dest, m.name))]
            out = [m for m in links if not inside(os.path.realpath(os.path.join(dest, m.name)), roots)]
            for m in out:
                os.unlink(os.path.join(dest, m.name))
                print(
                    f"[the tests do not see {m.name} -> {m.linkname}: a link out of the working folder]",
                    file=sys.stderr,
                )
            for m in members:  # what PYTHONPATH could put before the interpreter's own `encodings`
                path = os.path.join(dest, m.name)
                if not m.isdir() and first_module(m.name) and os.path.lexists(path):
                    os.unlink(path)
                    print(
                        f"[the tests do not see {m.name}: Python imports `encodings` before the tests' guard]",
                        file=sys.stderr,
                    )
        for m in sorted((m for m in members if m.isdir()), key=lambda m: m.name.count("/"), reverse=True):
            path = os.path.join(dest, m.name)
            os.utime(path, (m.mtime, m.mtime))
            os.chmod(path, stat.S_IMODE(m.mode))
    os.remove(".ws-state.tar")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
