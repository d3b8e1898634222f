"""`tempering launch [torchrun options] VERB CONFIG [key=value ...]`: torchrun, with tempering's error last.

The options before VERB are torchrun's (`--nproc-per-node`, `--nnodes`, `--rdzv-endpoint`, ...); the rest
is what `python -m tempering.distributed` takes. A rank that fails with a tempering error writes it down;
after torchrun's own report, that one-line error is printed last and its exit code returned. A rank that
dies without one (killed, out of memory) is named in one line last, exit code 1.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

from tempering.errors import UserError
from tempering.recipes.verbs import parallel

ERROR_DIR = "TEMPERING_ERROR_DIR"
"""Where ranks write their tempering error (`rank<N>.txt`: exit code, then the message)."""


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: tempering launch [torchrun options] VERB CONFIG [key=value ...]\n")
        print(__doc__.strip().split("\n\n", 1)[1] + "\n\nverbs: " + ", ".join(parallel()))
        return 0
    at = next((i for i, a in enumerate(argv) if a in parallel()), None)
    if at is None:
        raise UserError(f"tempering launch needs a verb after torchrun's options; one of {', '.join(parallel())}")
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun

    errors = Path(tempfile.mkdtemp(prefix="tempering-errors-"))
    os.environ[ERROR_DIR] = str(errors)
    try:
        torchrun([*argv[:at], "-m", "tempering.distributed", *argv[at:]])
        return 0
    except ChildFailedError as e:
        found = sorted(errors.glob("rank*.txt"))
        sys.stderr.flush()
        if not found:  # a rank died (killed, out of memory, a crash): name the first to go
            rank, failure = e.get_first_failure()
            how = f"killed by {failure.signal_name()}" if failure.exitcode < 0 else f"exit code {failure.exitcode}"
            print(
                f"tempering {argv[at]}: error: rank {rank} (pid {failure.pid}) died ({how}) and torchrun stopped "
                "the other ranks; the last checkpoint is intact: relaunch the same way with --resume",
                file=sys.stderr,
            )
            return 1
        code, _, message = found[0].read_text().partition("\n")
        print(f"tempering {argv[at]}: error: {message.strip()}", file=sys.stderr)
        return int(code)
    finally:
        shutil.rmtree(errors, ignore_errors=True)


def record_error(message: str, code: int = 2) -> None:
    """Called by a failing rank: leave its error for the launcher (a no-op under plain torchrun)."""
    folder = os.environ.get(ERROR_DIR)
    if folder:
        Path(folder, f"rank{os.environ.get('RANK', '0')}.txt").write_text(f"{code}\n{message}\n")
