"""Training on several processes with torch.distributed: DDP or FSDP2, launched by `torchrun`.

    torchrun --nproc-per-node 2 -m tempering.distributed train examples/grpo_arithmetic.yaml --strategy ddp

Every training verb runs on the one loop (`tempering.train.loop`), which is data-parallel when given the
`World` that `init_world` joins. See docs/scaling.md.
"""

from tempering.train.parallel import STRATEGIES, DataParallel, wrap_model
from tempering.train.world import World, close_world, init_world

__all__ = ["STRATEGIES", "DataParallel", "World", "close_world", "init_world", "wrap_model"]
