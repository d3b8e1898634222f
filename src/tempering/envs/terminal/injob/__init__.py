"""Scripts that run inside a terminal task's sandbox job, copied there read-only and run with the job's
python3 (standard library only, Python 3.8 and later): restoring and packing the working folder, the
supervisor of a session's commands, and the start-up module of the tests' Python.

The job's data is untrusted (the solution made it); these scripts are not: the job cannot change them."""

from pathlib import Path

HERE = Path(__file__).parent


def text(name: str) -> str:
    """The source of one script (`restore.py`, `snapshot.py`, `supervisor.py`, `sitecustomize.py`)."""
    return (HERE / name).read_text()
