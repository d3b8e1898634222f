"""Training on several processes with torch.distributed: DDP or FSDP2, launched by `torchrun`.

    torchrun --nproc-per-node 2 -m tempering.distributed examples/grpo.yaml --strategy ddp

`init_world` joins the group torchrun made; `wrap_model` shards or replicates the policy;
`DataParallel` keeps the loss normaliser global across ranks; `DataParallelRLTrainer` runs the RL recipe
with each rank rolling out its own share of the prompts. See docs/scaling.md.
"""

from tempering.distributed.parallel import STRATEGIES, DataParallel, full_state_dict, wrap_model
from tempering.distributed.world import World, close_world, init_world

__all__ = ["STRATEGIES", "DataParallel", "World", "close_world", "full_state_dict", "init_world", "wrap_model"]
