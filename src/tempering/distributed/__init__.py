"""Training on several processes with torch.distributed: DDP or FSDP2, launched by `torchrun`.

    torchrun --nproc-per-node 2 -m tempering.distributed train examples/grpo_arithmetic.yaml --strategy ddp

Every training verb runs on the one loop (`tempering.train.loop`), which is data-parallel when given the
`World` that `tempering.train.world.init_world` joins. Nothing is imported here, so that
`tempering launch --help` does not load torch. See docs/scaling.md.
"""
