"""Scripts that run inside a terminal task's sandbox job, copied there read-only and run with the job's
python3 (standard library only, Python 3.8 and later): restoring and packing the working folder, the
supervisor of a session's commands, the start-up module of every Python in a task's image, and the tests'
guard it runs in the tests' job.

The job's data is untrusted (the solution made it); these scripts are not: the job cannot change them."""

import functools
import py_compile
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).parent


def text(name: str) -> str:
    """The source of one script (`restore.py`, `snapshot.py`, `supervisor.py`, `startup.py`, `guard.py`)."""
    return (HERE / name).read_text()


@functools.cache
def bytecode(name: str) -> tuple[str, bytes]:
    """One script's bytecode for this Python, to ship beside it: its path relative to the script's folder
    and its bytes, marked to be used whatever the files' times in the job (so a read-only folder's script
    is not compiled again by every interpreter that starts)."""
    with tempfile.TemporaryDirectory() as folder:
        source, cfile = Path(folder, name), Path(folder, "out.pyc")
        source.write_text(text(name))
        py_compile.compile(
            str(source), str(cfile), doraise=True, invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH
        )
        return f"__pycache__/{Path(name).stem}.{sys.implementation.cache_tag}.pyc", cfile.read_bytes()
