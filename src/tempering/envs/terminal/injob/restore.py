"""Unpack the working folder's state (a tar the previous job packed: the solution's, untrusted) into app/.

    python3 -I -S restore.py DEST [--tests APP_DIR]

Every member must land inside DEST once the links unpacked before it are followed (what tarfile's `tar`
filter checks, done here by hand: Python 3.11.0-3.11.3 and 3.10 before 3.10.12 have no `filter=`);
modes are kept as packed, folders' last (a folder the solution made unreadable is filled first).
`--tests`: the state is for the tests, so no symbolic link may lead them out of the working folder
(DEST, also seen at APP_DIR) to a place they can write: such a link (to the verifier's folder, /proc,
/tmp, HOME, or nowhere) is removed and named on stderr. Links to places they cannot write (a venv's
python in /usr) stay. Exit 1 with a message when the state cannot be unpacked.
"""

import os
import stat
import sys
import tarfile


def inside(path: str, roots: list) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def writable(path: str) -> bool:
    """Something the tests could write: a missing path (they would create it), or one the kernel lets them
    write (`access`: a read-only mount, or a file not theirs, is not)."""
    return not os.path.exists(path) or os.access(path, os.W_OK)


def main(argv: list) -> int:
    dest = os.path.realpath(argv[0])
    tests = argv[1:2] == ["--tests"]
    roots = [dest] + ([os.path.realpath(argv[2]), argv[2]] if tests and len(argv) > 2 else [])
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
            out = [
                m
                for m in links
                if not inside(to := os.path.realpath(os.path.join(dest, m.name)), roots) and writable(to)
            ]
            for m in out:
                os.unlink(os.path.join(dest, m.name))
                print(
                    f"[the tests do not see {m.name} -> {m.linkname}: a link out of the working folder]",
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
