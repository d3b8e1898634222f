"""`torchrun --nproc-per-node N -m tempering.distributed CONFIG [key=value ...]`: the RL recipe on N ranks."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from tempering.config import load_config
from tempering.distributed.parallel import STRATEGIES
from tempering.distributed.world import close_world, init_world
from tempering.errors import UserError
from tempering.recipes.rl import TrainConfig


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="torchrun ... -m tempering.distributed",
        description="The RL recipe (tempering train) with data-parallel training over torchrun's processes.",
    )
    p.add_argument("config", nargs="?", help="YAML config (see examples/); omit for the defaults")
    p.add_argument("overrides", nargs="*", help="key.sub=value overrides, e.g. run.steps=50")
    p.add_argument(
        "--strategy", choices=STRATEGIES, default="ddp", help="ddp: a full replica per rank; fsdp2: sharded parameters"
    )
    p.add_argument(
        "--backend", default="auto", help="process-group backend: auto (nccl with GPUs, else gloo), nccl, gloo"
    )
    p.add_argument("--world-size", type=int, help="the number of processes this run expects (checked against torchrun)")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue a run exactly from its latest checkpoint (ddp)")
    a = p.parse_args(argv)
    config, overrides = a.config, list(a.overrides)
    if config and "=" in config and not config.endswith((".yaml", ".yml")):
        config, overrides = None, [config] + overrides
    if a.resume:
        run_dir = Path(a.resume)
        if not (run_dir / "config.yaml").is_file():
            raise UserError(f"{run_dir} is not a run folder (no config.yaml); give the folder a run wrote")
        cfg = load_config(TrainConfig, run_dir / "config.yaml", overrides + [f"run.out_dir={run_dir}"])
    else:
        cfg = load_config(TrainConfig, config, overrides)
    world = init_world(a.backend, expected_size=a.world_size)
    try:
        from tempering.distributed.trainer import DataParallelRLTrainer

        trainer = DataParallelRLTrainer(cfg, world, strategy=a.strategy, resume=bool(a.resume))
        hist = asyncio.run(trainer.run())
        if world.is_main:
            from tempering.progress import print_eval_table

            print_eval_table(hist, title=f"held-out results ({cfg.run.out_dir}, {world.size} ranks, {a.strategy})")
    finally:
        close_world()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except UserError as e:
        print(f"tempering.distributed: error: {e}", file=sys.stderr)
        sys.exit(2)
