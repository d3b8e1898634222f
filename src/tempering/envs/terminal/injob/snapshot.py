"""Pack the working folder app/ into .ws-state.tar, as the solution left it.

    python3 -I -S snapshot.py

Links, FIFOs and devices are packed as what they are, never followed or read. A file or folder its owner
(the job's user) made unreadable is opened for the moment it is read, and its mode is packed as it was, so
that no mode the solution chose makes the state impossible to pack. Sockets are left out (a tar cannot
hold them). Walks without recursion: a tree of any depth packs.
"""

import os
import stat
import sys
import tarfile

MINE = os.getuid()


def opened(path: str, st: os.stat_result, need: int) -> bool:
    """Give the owner `need` on `path` if it lacks it; True when the mode was changed (to be put back)."""
    if stat.S_IMODE(st.st_mode) & need == need or st.st_uid != MINE:
        return False
    os.chmod(path, stat.S_IMODE(st.st_mode) | need)
    return True


def main() -> int:
    with tarfile.open(".ws-state.tar", "w") as t:
        stack = [(os.path.join("app", n), n) for n in sorted(os.listdir("app"), reverse=True)]
        restore: list = []
        while stack:
            path, arc = stack.pop()
            if not path:  # the end of a folder whose mode was changed to list it
                os.chmod(*restore.pop())
                continue
            st = os.lstat(path)
            info = t.gettarinfo(path, arc)
            if info is None:
                continue  # a socket
            if stat.S_ISREG(st.st_mode):
                changed = opened(path, st, stat.S_IRUSR)
                try:
                    with open(path, "rb") as f:
                        t.addfile(info, f)
                finally:
                    if changed:
                        os.chmod(path, stat.S_IMODE(st.st_mode))
            elif stat.S_ISDIR(st.st_mode):
                t.addfile(info)
                if opened(path, st, stat.S_IRUSR | stat.S_IXUSR):
                    restore.append((path, stat.S_IMODE(st.st_mode)))
                    stack.append(("", ""))
                stack += [(os.path.join(path, n), f"{arc}/{n}") for n in sorted(os.listdir(path), reverse=True)]
            else:
                t.addfile(info)
    return 0


if __name__ == "__main__":
    sys.exit(main())
