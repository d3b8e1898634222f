"""`torchrun --nproc-per-node N -m tempering.distributed VERB CONFIG [key=value ...]`: any training verb on N ranks.

VERB is one of the verbs that run on the one training loop (train, distill, direct-opd, tu-opd, rgrpo,
expand-compress); without it, `train`. A failure in a rank prints tempering's one-line error last and
exits with its code.
"""

from __future__ import annotations

import faulthandler
import sys

from tempering.errors import UserError
from tempering.recipes.common import parse, parser, resolve
from tempering.recipes.verbs import VERBS, load, parallel
from tempering.train.parallel import STRATEGIES
from tempering.train.world import close_world, init_world


def command(argv: list[str]):
    """(verb, parsed arguments) of `-m tempering.distributed [VERB] CONFIG [key=value ...] [flags]`."""
    verb = argv[0] if argv and argv[0] in VERBS else "train"
    rest = argv[1:] if argv and argv[0] in VERBS else argv
    if verb not in parallel():
        raise UserError(f"{verb!r} does not run data-parallel; verbs that do: {', '.join(parallel())}")
    spec = VERBS[verb]
    p = parser(
        f"{verb} (torchrun ... -m tempering.distributed)", f"{spec.help} Data-parallel over torchrun's processes."
    )
    p.prog = f"torchrun ... -m tempering.distributed {verb}"
    p.add_argument(
        "--strategy", choices=STRATEGIES, default="ddp", help="ddp: a full replica per rank; fsdp2: sharded parameters"
    )
    p.add_argument(
        "--backend", default="auto", help="process-group backend: auto (nccl with GPUs, else gloo), nccl, gloo"
    )
    p.add_argument("--world-size", type=int, help="the number of processes this run expects (checked against torchrun)")
    return verb, parse(p, rest)


def main(argv: list[str]) -> int:
    verb, a = command(argv)
    spec = VERBS[verb]
    assert spec.schema is not None and spec.run is not None
    if a.resume and a.overwrite:
        raise UserError("--resume continues a run and --overwrite replaces it; give one of them")
    cfg = resolve(load(spec.schema), a)
    world = init_world(a.backend, expected_size=a.world_size)
    try:
        run = spec.runner()
        hist = run(cfg, resume=bool(a.resume), overwrite=a.overwrite, world=world, strategy=a.strategy)
        if world.is_main:
            from tempering.progress import print_eval_table

            tables = {
                k: v
                for k, v in hist.items()
                if isinstance(v, dict) and v and all(isinstance(x, (int, float)) for x in v.values())
            }
            print_eval_table(tables, title=f"held-out results ({verb}, {world.size} ranks, {a.strategy})")
    finally:
        close_world()
    return 0


if __name__ == "__main__":
    faulthandler.enable()  # a C++ abort in a rank (gloo, NCCL) prints every thread's Python stack before it dies
    try:
        sys.exit(main(sys.argv[1:]))
    except UserError as e:
        from tempering.distributed.launch import record_error

        record_error(str(e))
        print(f"tempering.distributed: error: {e}", file=sys.stderr)
        sys.exit(2)
