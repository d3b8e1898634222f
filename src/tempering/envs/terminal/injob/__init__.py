"""Scripts that run inside a terminal task's sandbox job, copied there read-only and run with the job's
python3 (standard library only, Python 3.8 and later): restoring and packing the working folder, the
supervisor of a session's commands, the start-up module of every Python in a task's image, and the tests'
guard it runs in the tests' job.

The job's data is untrusted (the solution made it); these scripts are not: the job cannot change them."""

from pathlib import Path

HERE = Path(__file__).parent


def text(name: str) -> str:
    """The source of one script (`restore.py`, `snapshot.py`, `supervisor.py`, `startup.py`, `guard.py`)."""
    return (HERE / name).read_text()
