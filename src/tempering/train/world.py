"""The process group of a `torchrun` launch: which rank this process is, on which device.

torchrun sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT for every process it starts;
`init_world` reads them, checks them against what the run expects, and joins the group.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from tempering.errors import UserError

LAUNCH = "torchrun --nproc-per-node N -m tempering.distributed VERB CONFIG [key=value ...]"


@dataclass(frozen=True)
class World:
    """This process's place in the job."""

    rank: int
    """Global rank, 0..size-1; rank 0 writes the run folder."""
    size: int
    """Number of processes (data-parallel ranks)."""
    local_rank: int
    """Rank on this node; picks the GPU."""
    device: torch.device
    """Where this rank trains: `cuda:<local_rank>` with NCCL, else the CPU."""

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_world(backend: str = "auto", expected_size: int | None = None) -> World:
    """Join the process group that torchrun set up (idempotent within a process).

    backend: `auto` (NCCL with a GPU, else gloo), `nccl` (GPUs only) or `gloo` (CPU).
    expected_size: the world size the run was planned for; a different launch is an error.
    """
    missing = [k for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
    if missing:
        raise UserError(f"not started by torchrun ({', '.join(missing)} unset); launch with: {LAUNCH}")
    rank, size, local = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"])
    if expected_size is not None and expected_size != size:
        raise UserError(
            f"this run expects {expected_size} processes but torchrun started {size}; "
            f"launch with --nproc-per-node (x nodes) = {expected_size}, or change the expected size"
        )
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend not in ("nccl", "gloo"):
        raise UserError(f"unknown process-group backend {backend!r}; use auto, nccl or gloo")
    if backend == "nccl":
        if not torch.cuda.is_available():
            raise UserError("backend nccl needs CUDA GPUs and this machine has none; use --backend gloo (CPU)")
        if local >= torch.cuda.device_count():
            raise UserError(
                f"local rank {local} has no GPU: this node has {torch.cuda.device_count()} GPU(s); "
                "start at most that many processes per node (--nproc-per-node)"
            )
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    if not dist.is_initialized():
        dist.init_process_group(backend, rank=rank, world_size=size)
    return World(rank=rank, size=size, local_rank=local, device=device)


def close_world() -> None:
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
